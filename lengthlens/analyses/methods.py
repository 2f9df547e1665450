"""Speculative methods as Spec-Bench users see them: a losslessness check, and method against method.

- :func:`lossless_check`: a lossless speculative method (SpS, EAGLE, Medusa, Hydra, ...) should
  reproduce its baseline's outputs, so its cell's λ ≈ 1 and Δaccuracy ≈ 0 are a check, not a
  finding. Per cell of such a method: how many outputs differ from the baseline's (text, or length
  when no text was logged), and λ with its interval, said in plain words.
- :func:`method_pairs`: every two speculative arms of one target and dataset with different
  drafts (EAGLE against SpS), compared on shared items with :func:`~lengthlens.analyses.intervention.compare`.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import polars as pl

from lengthlens.analyses.intervention import compare
from lengthlens.data.loading import RunSet
from lengthlens.data.pairing import cell_units
from lengthlens.data.schema import ARM_KEY, STRICT
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED

#: Speculative methods that are lossless by design (the output distribution is the target's).
#: Recognised by name, as Spec-Bench and the methods' own code write them.
LOSSLESS_METHODS = frozenset({"sps", "eagle", "eagle2", "eagle3", "hydra", "medusa", "pld", "lade", "lookahead",
                              "rest", "space", "recycling", "samd"})

_METRICS = ("lambda", "rounds_ratio", "time_ratio", "gain", "accuracy_delta_pp")


def _verdict(n_differ: int, n: int, lo: float, hi: float) -> str:
    if n_differ == 0:
        return "identical to the baseline on every paired run"
    words = f"outputs differ from the baseline on {n_differ} of {n} paired runs"
    if np.isfinite(lo) and (lo > 1 or hi < 1):
        return words + f"; λ's interval [{lo:.4f}, {hi:.4f}] excludes 1: not lossless in practice"
    return words + "; λ's interval includes 1"


def lossless_check(runs: RunSet, cells_df: pd.DataFrame) -> pd.DataFrame:
    """Per cell of a lossless method: n_runs, n_outputs_differ, n_lengths_differ, λ (+_lo/_hi), Δacc and a verdict."""
    if cells_df.empty or not cells_df["method"].isin(list(LOSSLESS_METHODS)).any():
        return pd.DataFrame()
    units = cell_units(runs.paired).filter(pl.col("method").is_in(list(LOSSLESS_METHODS)))
    texts = pl.col("text").is_not_null() & pl.col("text_star").is_not_null()
    differ = pl.when(texts).then(pl.col("text") != pl.col("text_star")).otherwise(
        pl.col("output_tokens") != pl.col("output_tokens_star"))
    counts = units.group_by(ARM_KEY).agg(
        pl.len().alias("n_runs"), differ.sum().alias("n_outputs_differ"),
        (pl.col("output_tokens") != pl.col("output_tokens_star")).sum().alias("n_lengths_differ"))
    df = cells_df[cells_df["method"].isin(list(LOSSLESS_METHODS))]
    df = df[[*ARM_KEY, "lambda", "lambda_lo", "lambda_hi", "accuracy_delta_pp"]].merge(
        counts.to_pandas(), on=list(ARM_KEY), how="left")
    df["verdict"] = [_verdict(int(r.n_outputs_differ), int(r.n_runs), r.lambda_lo, r.lambda_hi) for r in df.itertuples()]
    return df[[*ARM_KEY, "n_runs", "n_outputs_differ", "n_lengths_differ", "lambda", "lambda_lo", "lambda_hi",
               "accuracy_delta_pp", "verdict"]].reset_index(drop=True)


def method_pairs(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
                 confidence_level: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
    """Every pair of speculative arms of one (target, dataset) whose drafts differ: x against y on shared items.

    Only where each method has one draft (Spec-Bench's layout). Columns: target, dataset, x / y (method, params, draft), n_items, n_runs, and for λ, R/R*,
    T/T*, gain and Δacc the point with ``_lo``/``_hi``; mcnemar_p; unavailable. Empty when every
    target and dataset has one draft (the study's layout: rules are compared with strict in cells).
    """
    t = runs.table.filter((pl.col("status") == "ok") & (pl.col("method") != STRICT))
    arms = t.select(*ARM_KEY).unique().sort(ARM_KEY)
    rows = []
    for g in arms.partition_by(["target", "dataset"], maintain_order=True):
        # Methods whose draft is part of the method (Spec-Bench: one draft per method). Rules run with
        # several drafts (the study's layout) are compared with their baseline in the cells instead.
        per_method = g.group_by("method").agg(pl.col("draft").n_unique().alias("k"))
        if g.get_column("draft").n_unique() < 2 or per_method.get_column("k").max() > 1:
            continue
        for a, b in combinations(g.iter_rows(named=True), 2):
            if a["draft"] == b["draft"]:
                continue
            try:
                c = compare(runs, a, b, n_resamples=n_resamples, seed=seed, confidence_level=confidence_level,
                            within_draft=False)
            except ValueError:
                continue  # no shared items
            row = {"target": a["target"], "dataset": a["dataset"], "x_method": a["method"], "x_params": a["params"],
                   "x_draft": a["draft"], "y_method": b["method"], "y_params": b["params"], "y_draft": b["draft"],
                   "n_items": c.n_items, "n_runs": c.n_runs}
            for m in _METRICS:
                ci = c[m].confidence_interval
                row.update({m: c[m].point, f"{m}_lo": ci.low, f"{m}_hi": ci.high})
            row.update(mcnemar_p=c.mcnemar_p if (c.wrong_to_right + c.right_to_wrong) else None, unavailable=c.unavailable)
            rows.append(row)
    return pd.DataFrame(rows)
