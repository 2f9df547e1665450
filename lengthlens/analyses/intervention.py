"""Arm-against-arm comparisons on the same items, and Table 4: forcing the thinking closed near the budget.

An intervention arm ``<method>_force_commit`` with params ``alpha<a>_t<threshold>`` reruns its base
arm (``<method>``, ``alpha<a>``) with the thinking trace forced closed once it reaches
``threshold`` tokens. Each intervention run is paired with the base run of the same item and seed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd
import polars as pl

from lengthlens.analyses.attribution import run_channels
from lengthlens.data.loading import RunSet
from lengthlens.data.pairing import pair, with_derived
from lengthlens.data.schema import ARM_KEY, GROUP_KEY, UNIT_KEY
from lengthlens.stats.estimate import item_sums, missing_inputs, unit_quantities
from lengthlens.stats.metrics import METRICS, SUM_FIELDS, evaluate, unavailable, unavailable_note
from lengthlens.stats.paired_test import paired_accuracy_test
from lengthlens.stats.resample import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
    counts_for_group,
    percentile_interval,
)
from lengthlens.stats.results import ConfidenceInterval, Estimate, frame_html

FORCE_COMMIT_SUFFIX = "_force_commit"
_THRESHOLD = re.compile(r"_t(\d+)(?=_|$)")


def _select(table: pl.DataFrame, sel: Mapping[str, Any]) -> pl.DataFrame:
    conds = []
    for k, v in sel.items():
        conds.append(pl.col(k).is_in(list(v)) if isinstance(v, (list, tuple, set)) else pl.col(k).eq_missing(v))
    return table.filter(*conds) if conds else table


@dataclass(frozen=True)
class Comparison:
    """Arm X against arm Y on the (item, seed) units both have: the cell metrics with X in the relaxed role."""

    x: Mapping[str, Any]
    y: Mapping[str, Any]
    n_items: int
    n_runs: int
    estimates: Mapping[str, Estimate]
    wrong_to_right: int
    right_to_wrong: int
    mcnemar_p: float
    #: which paired accuracy test gave mcnemar_p: exact McNemar on runs, or the item-level sign-flip test with several seeds
    accuracy_test: str = "mcnemar_exact"
    unavailable: str = ""  # metrics left empty and why (inputs not logged)

    def __getitem__(self, metric: str) -> Estimate:
        return self.estimates[metric]

    def to_frame(self) -> pd.DataFrame:
        rows = [{"metric": k, "estimate": e.point,
                 "low": e.confidence_interval.low if e.confidence_interval else np.nan,
                 "high": e.confidence_interval.high if e.confidence_interval else np.nan} for k, e in self.estimates.items()]
        return pd.DataFrame(rows)

    def _repr_html_(self) -> str:
        title = (f"{dict(self.x)} against {dict(self.y)}: {self.n_runs} paired runs on {self.n_items} items; "
                 f"{self.accuracy_test} p = {self.mcnemar_p:.3g} ({self.wrong_to_right} wrong→right, {self.right_to_wrong} right→wrong)")
        return frame_html(self.to_frame(), title)


def compare(runs: RunSet, x: Mapping[str, Any], y: Mapping[str, Any], *, n_resamples: int = DEFAULT_N_RESAMPLES,
            seed: int = DEFAULT_SEED, confidence_level: float = DEFAULT_CONFIDENCE,
            within_draft: bool | None = None) -> Comparison:
    """Compare arm X with arm Y on shared items (e.g. an intervention against its base arm, or two rules).

    ``x`` and ``y`` select runs by column values, e.g. ``{"method": "cactus", "params": "alpha0.35"}``
    (a list value selects any of several). Runs pair within the same target, draft and dataset on
    (item, seed, turn); the bootstrap resamples items within each of those groups (stratified), so
    metrics pool over several datasets without mixing their items. Arms with different drafts
    (EAGLE against SpS against plain autoregressive decoding) pair within target and dataset
    instead: ``within_draft=None`` does that when the two selections share no draft.
    """
    t = runs.table.filter(pl.col("status") == "ok")
    if "shared_baseline" in t.columns:  # a shared autoregressive baseline as logged, once
        t = t.filter(~pl.col("shared_baseline"))
    t = with_derived(t)
    xs, ys = _select(t, x), _select(t, y)
    if xs.height == 0 or ys.height == 0:
        raise ValueError(f"no ok runs match {'x' if xs.height == 0 else 'y'} = {dict(x if xs.height == 0 else y)}")
    if within_draft is None:
        within_draft = bool(set(xs.get_column("draft")) & set(ys.get_column("draft")))
    group_key = GROUP_KEY if within_draft else ("target", "dataset")
    units = pair(xs, ys, on=(*group_key, *UNIT_KEY))
    if units.height == 0:
        raise ValueError(f"the two arms share no ({', '.join(group_key)}, item, seed, turn)")
    q = unit_quantities(units)
    why = unavailable(missing_inputs(q), q.height)
    X_parts, C_parts = [], []
    for g in q.partition_by(list(group_key), maintain_order=True):
        group = tuple(g.row(0, named=True)[k] for k in group_key)
        items = g.get_column("item_id").unique().sort().to_list()
        index = {it: i for i, it in enumerate(items)}
        X_parts.append(item_sums(g, SUM_FIELDS, index))
        C_parts.append(counts_for_group(seed, ("compare", *group), len(items), n_resamples))
    X = np.vstack(X_parts)
    C = np.hstack(C_parts).astype(np.float64)
    point, reps = evaluate(X.sum(axis=0)), evaluate(C @ X)
    ests = {}
    for m in METRICS:
        if m.name in why:  # inputs not logged on both sides: empty, with the reason in `unavailable`
            ests[m.name] = Estimate(np.nan, ConfidenceInterval(np.nan, np.nan) if m.interval else None)
        elif m.interval:
            lo, hi, und = percentile_interval(reps[m.name][:, None], confidence_level)
            ests[m.name] = Estimate(float(point[m.name]), ConfidenceInterval(float(lo[0]), float(hi[0])), int(und[0]))
        else:
            ests[m.name] = Estimate(float(point[m.name]))
    graded = units.filter(pl.col("correct").is_not_null() & pl.col("correct_star").is_not_null())
    w2r = graded.filter(pl.col("correct") & ~pl.col("correct_star")).height
    r2w = graded.filter(~pl.col("correct") & pl.col("correct_star")).height
    col = {name: X[:, i] for i, name in enumerate(SUM_FIELDS)}
    p, test = paired_accuracy_test(col["n_graded"], col["c"], col["c_star"])
    return Comparison(x=dict(x), y=dict(y), n_items=X.shape[0], n_runs=units.height, estimates=ests,
                      wrong_to_right=w2r, right_to_wrong=r2w, mcnemar_p=p, accuracy_test=test,
                      unavailable=unavailable_note(why))


def base_arm_of(method: str, params: str) -> tuple[str, str, int] | None:
    """(base method, base params, threshold) of an intervention arm, or None for an ordinary arm."""
    if not method.endswith(FORCE_COMMIT_SUFFIX):
        return None
    m = _THRESHOLD.search(params)
    if not m:
        return None
    return method[: -len(FORCE_COMMIT_SUFFIX)], params[: m.start()] + params[m.end():], int(m.group(1))


def force_commit_pairs(runs: RunSet) -> pl.DataFrame:
    """Every intervention run with its base run (``_base`` columns) and whether the intervention fired.

    Fired: the intervention run's own ``force_commit_fired`` when logged; otherwise inferred from the
    base run, which must have reached the threshold with its thinking open: its thinking never
    closed and it reached the threshold, or its thinking-token estimate (output tokens times the
    thinking share of content characters) reached the threshold. The inference is approximate where
    the base run closed its thinking late; the generator's flag is exact.
    """
    t = with_derived(runs.table.filter(pl.col("status") == "ok"))
    arms = t.select(ARM_KEY).unique()
    specs = []
    for r in arms.iter_rows(named=True):
        b = base_arm_of(r["method"], r["params"])
        if b:
            specs.append({**r, "base_method": b[0], "base_params": b[1], "threshold": b[2]})
    if not specs:
        return pl.DataFrame()
    spec = pl.DataFrame(specs)
    inter = t.join(spec, on=list(ARM_KEY))
    base = t.rename({"method": "base_method", "params": "base_params"})
    base, _ = run_channels(base)
    cols = [c for c in base.columns if c not in (*GROUP_KEY, *UNIT_KEY, "base_method", "base_params")]
    base = base.select(*GROUP_KEY, *UNIT_KEY, "base_method", "base_params", *[pl.col(c).alias(c + "_base") for c in cols])
    paired = inter.join(base, on=[*GROUP_KEY, *UNIT_KEY, "base_method", "base_params"], how="inner", nulls_equal=True)
    think_tokens = pl.when(pl.col("thinking_closed_base").fill_null(False).not_()).then(pl.col("output_tokens_base")).otherwise(
        pl.col("output_tokens_base") * pl.col("thinking_chars_base")
        / (pl.col("thinking_chars_base") + pl.col("answer_chars_base")).clip(lower_bound=1))
    inferred = (pl.col("output_tokens_base") >= pl.col("threshold")) & (think_tokens >= pl.col("threshold"))
    return paired.with_columns(
        pl.coalesce(pl.col("force_commit_fired"), inferred).alias("fired"),
        pl.col("force_commit_fired").is_not_null().alias("fired_logged"),
    )


def table4(runs: RunSet) -> pd.DataFrame:
    """The study's Table 4: over fired runs, correct before -> after, flips, still capped, McNemar's exact p.

    One row per intervention arm and a total row. ``correct_before``/``correct_after`` count graded
    fired pairs (``n_graded``); ``still_capped`` counts fired runs that hit the budget even so.
    """
    pairs = force_commit_pairs(runs)
    cols = [*ARM_KEY, "threshold", "fired", "n_graded", "correct_before", "correct_after", "wrong_to_right",
            "right_to_wrong", "still_capped", "mcnemar_p", "accuracy_test"]
    if pairs.is_empty():
        return pd.DataFrame(columns=cols)
    fired = pairs.filter(pl.col("fired"))

    def row(d: pl.DataFrame, key: dict) -> dict:
        g = d.filter(pl.col("correct").is_not_null() & pl.col("correct_base").is_not_null())
        w2r = g.filter(pl.col("correct") & ~pl.col("correct_base")).height
        r2w = g.filter(~pl.col("correct") & pl.col("correct_base")).height
        # The unit is the (arm, item): with several seeds per item, the item-level test (runs are not independent).
        per_item = g.group_by([*ARM_KEY, "item_id"]).agg(pl.len().alias("n"), pl.col("correct").cast(pl.Int64).sum().alias("c"),
                                                          pl.col("correct_base").cast(pl.Int64).sum().alias("c_base"))
        p, test = paired_accuracy_test(per_item["n"].to_numpy(), per_item["c"].to_numpy(), per_item["c_base"].to_numpy())
        return {**key, "fired": d.height, "n_graded": g.height,
                "correct_before": int(g["correct_base"].sum()), "correct_after": int(g["correct"].sum()),
                "wrong_to_right": w2r, "right_to_wrong": r2w, "still_capped": int(d["censored"].sum()),
                "mcnemar_p": p, "accuracy_test": test}

    rows = []
    for arm in pairs.select(*ARM_KEY, "threshold").unique().sort(list(ARM_KEY)).iter_rows(named=True):
        d = fired.filter(*[pl.col(k) == v for k, v in arm.items()])
        rows.append(row(d, arm))
    rows.append(row(fired, {**{k: "all" for k in ARM_KEY}, "threshold": None}))
    return pd.DataFrame(rows, columns=cols)
