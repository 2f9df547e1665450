"""Speculative methods as Spec-Bench users see them: a losslessness check.

- :func:`lossless_check`: a lossless speculative method (SpS, EAGLE, Medusa, Hydra, ...) should
  reproduce its baseline's outputs, so its cell's λ ≈ 1 and Δaccuracy ≈ 0 are a check, not a
  finding. Per cell of such a method: how many outputs differ from the baseline's (text, or length
  when no text was logged), and λ with its interval, said in plain words.
- method against method is :func:`lengthlens.analyses.compare.method_pairs`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl

from lengthlens.analyses.outputs import Column, Context, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.schema import ARM_KEY

#: Speculative methods that are lossless by design (the output distribution is the target's).
#: Recognised by name, as Spec-Bench and the methods' own code write them.
LOSSLESS_METHODS = frozenset({"sps", "eagle", "eagle2", "eagle3", "hydra", "medusa", "pld", "lade", "lookahead",
                              "rest", "space", "recycling", "samd"})

def _verdict(n_differ: int, n: int, lo: float, hi: float) -> str:
    if n_differ == 0:
        return "identical to the baseline on every paired run"
    words = f"outputs differ from the baseline on {n_differ} of {n} paired runs"
    if np.isfinite(lo) and (lo > 1 or hi < 1):
        return words + f"; λ's interval [{lo:.4f}, {hi:.4f}] excludes 1: not lossless in practice"
    return words + "; λ's interval includes 1"


def lossless_check(units: pl.DataFrame, cells_df: pd.DataFrame) -> pd.DataFrame:
    """Per cell of a lossless method: n_runs, n_outputs_differ, n_lengths_differ, λ (+_lo/_hi), Δacc and a verdict.

    ``units``: the paired runs (one row per pair, the baseline's fields with ``_star``).
    """
    if cells_df.empty or not cells_df["method"].isin(list(LOSSLESS_METHODS)).any():
        return pd.DataFrame()
    units = units.filter(pl.col("method").is_in(list(LOSSLESS_METHODS)))
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


class LosslessReport(ReportAnalysis):
    """lossless.csv: the losslessness check of every lossless speculative method's cells."""

    name = "lossless check"
    stage = "lossless check, method pairs"
    reads = ("text", "output_tokens")
    outputs = Outputs(
        tables=(Table("lossless", "cell of a lossless speculative method", (
            *keys(also=("target", "draft", "dataset", "method", "params", "serving")),
            Column("n_runs", "paired runs"),
            Column("n_outputs_differ", "paired runs whose output differs from the baseline's (text, or length without text)"),
            Column("n_lengths_differ", "paired runs whose length differs"),
            Column("lambda", "the cell's λ", interval=True), Column("accuracy_delta_pp", "the cell's accuracy change (points)"),
            Column("verdict", "the check in words")), written="for lossless methods (SpS, EAGLE, Medusa, ...)"),),
        sections=(Section("lossless", "Lossless methods: a check", (
            "Speculative methods that are lossless by design (SpS, EAGLE, Medusa, Hydra, ...) should reproduce "
            "their baseline's outputs: λ ≈ 1 and Δacc ≈ 0 are a check of losslessness, not a finding. Per cell, "
            "how many outputs differ from the baseline's and whether λ's interval excludes 1."), order=50),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        df = lossless_check(ctx.units, ctx.tables["cells"])
        return {} if df.empty else {"lossless": df}
