"""The planted population values of a spec's cells (what estimators should recover)."""

from __future__ import annotations

import math

import polars as pl
from scipy.special import ndtr

from lengthlens.data.schema import STRICT
from lengthlens.synth.draw import phi
from lengthlens.synth.spec import Dataset, Pair, SynthSpec


def _partial_mean(mu: float, s: float, c: float) -> float:
    """E[X; X < c] for log X ~ N(mu, s)."""
    return math.exp(mu + s * s / 2) * float(ndtr((math.log(c) - mu - s * s) / s))


def _expected_min(mu: float, s: float, c: float) -> float:
    """E[min(X, c)] for log X ~ N(mu, s)."""
    return _partial_mean(mu, s, c) + c * (1 - float(ndtr((math.log(c) - mu) / s)))


def _group_truth(spec: SynthSpec, pair: Pair, ds: Dataset) -> list[dict]:
    """:func:`truth`'s rows for one (pair, dataset): every arm's planted values."""
    s = ds.log_sd
    m = math.log(ds.mean_len) - s * s / 2
    B = ds.budget
    se = spec.effect(pair, ds, STRICT, STRICT)
    p_cens_s = 1 - float(ndtr((math.log(B - 0.5) - m) / s))
    emin_s = _expected_min(m, s, B)
    mean_s = math.exp(m + s * s / 2)
    rows = []
    for arm in spec.arms_of(ds):
        base = arm if arm.fc is None else spec.arms_of(ds)[arm.base]
        e = spec.effect(pair, ds, base.method, base.params)
        mu = m + math.log(e.lambda_)
        p_cens = 1 - float(ndtr((math.log(B - 0.5) - mu) / s))
        row = dict(target=pair.target, draft=pair.draft, pair=pair.slug, dataset=ds.name, method=arm.method,
                   params=arm.params, alpha=arm.alpha, budget=B, k=pair.k, n_items=ds.n_items,
                   n_seeds=len(spec.seeds), lambda_=e.lambda_, l_bar=e.l_bar, l_bar_strict=se.l_bar,
                   gain=(e.l_bar + 1) / (se.l_bar + 1), think_share=e.think_share,
                   accuracy=e.accuracy, accuracy_strict=se.accuracy,
                   accuracy_expected=e.accuracy * (1 - p_cens), accuracy_strict_expected=se.accuracy * (1 - p_cens_s),
                   censored_rate=p_cens, censored_rate_strict=p_cens_s,
                   lambda_censored=_expected_min(mu, s, B) / emin_s,
                   fire_rate=None, accuracy_after=None, threshold=None,
                   tpr_ratio=e.time_per_round / se.time_per_round)
        if arm.fc is not None:
            t = arm.fc.threshold_for(B)
            c = min(t / (1 - phi(ds, e)), B - 0.5)
            fire = 1 - float(ndtr((math.log(c) - mu) / s))
            ff = min(max(1, int(round(ds.final_frac * ds.mean_len))), B - t - 1)
            mean_fc = _partial_mean(mu, s, c) + fire * (t + ff)
            acc_e = fire * arm.fc.accuracy_after + (1 - fire) * e.accuracy
            row.update(lambda_=mean_fc / mean_s, lambda_censored=mean_fc / emin_s, censored_rate=0.0,
                       fire_rate=fire, accuracy_after=arm.fc.accuracy_after, threshold=t,
                       accuracy=None, accuracy_expected=acc_e)
        if arm.method == STRICT:
            row.update(accuracy=se.accuracy)
        if not ds.graded:
            row.update(accuracy=None, accuracy_strict=None, accuracy_expected=None,
                       accuracy_strict_expected=None, accuracy_after=None)
        rows.append(row)
    return rows


def truth(spec: SynthSpec) -> pl.DataFrame:
    """Planted values per cell (pair, dataset, arm): lambda, gain, accuracy, and what censoring does to them.

    Columns: target, draft, pair, dataset, method, params, alpha, budget, k, n_items, n_seeds,
    lambda_ (true ratio of mean lengths before censoring), l_bar, l_bar_strict, gain,
    rounds_ratio (= lambda_ / gain), time_ratio (rounds_ratio x time-per-round ratio), speedup
    (1 / time_ratio), think_share, accuracy (P(correct | answered)), accuracy_strict,
    accuracy_expected and accuracy_strict_expected (counting censored runs as wrong),
    censored_rate, censored_rate_strict, lambda_censored (the limit of the plain ratio of mean
    *observed* lengths, biased low by censoring), fire_rate, accuracy_after, threshold
    (force-commit arms; null elsewhere). Ungraded datasets have null accuracies. Length
    expectations ignore rounding to whole tokens.
    """
    rows = []
    for pair in spec.pairs:
        for ds in spec.datasets:
            rows.extend(_group_truth(spec, pair, ds))
    df = pl.DataFrame(rows, schema={
        "target": pl.String, "draft": pl.String, "pair": pl.String, "dataset": pl.String, "method": pl.String,
        "params": pl.String, "alpha": pl.Float64, "budget": pl.Int64, "k": pl.Int64, "n_items": pl.Int64,
        "n_seeds": pl.Int64, "lambda_": pl.Float64, "l_bar": pl.Float64, "l_bar_strict": pl.Float64,
        "gain": pl.Float64, "think_share": pl.Float64, "accuracy": pl.Float64, "accuracy_strict": pl.Float64,
        "accuracy_expected": pl.Float64, "accuracy_strict_expected": pl.Float64, "censored_rate": pl.Float64,
        "censored_rate_strict": pl.Float64, "lambda_censored": pl.Float64, "fire_rate": pl.Float64,
        "accuracy_after": pl.Float64, "threshold": pl.Int64, "tpr_ratio": pl.Float64,
    })
    return df.with_columns(
        (pl.col("lambda_") / pl.col("gain")).alias("rounds_ratio"),
        (pl.col("lambda_") / pl.col("gain") * pl.col("tpr_ratio")).alias("time_ratio"),
    ).with_columns((1 / pl.col("time_ratio")).alias("speedup")).drop("tpr_ratio")

