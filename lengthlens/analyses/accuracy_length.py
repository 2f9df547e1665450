"""accuracy_length.csv: accuracy against completion length, strict and each rule, from the graded paired runs.

Longer completions are less often right, and relaxed rules make completions longer: per target,
dataset and serving condition, the graded runs of both arms (each rule's chosen arm and its strict
baseline's runs, each strict run once) are put into length bins shared by both arms (quantiles of
the pooled lengths), and each arm's accuracy in each bin is given with its Wilson interval. Runs cut
at the token budget keep the budget as their length (they fall in the last bin) and are counted.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from lengthlens.analyses.outputs import Column, Context, Figure, Outputs, ReportAnalysis, Section, Table
from lengthlens.data.schema import UNIT_KEY
from lengthlens.results import frame

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ACCURACY_LENGTH_COLUMNS", "AccuracyLengthReport", "accuracy_by_length", "wilson_interval"]

#: At most this many length bins a panel; fewer where an arm has fewer than RUNS_PER_BIN runs a bin.
MAX_BINS = 5
RUNS_PER_BIN = 8
ACCURACY_LENGTH_COLUMNS = ["target", "dataset", "serving", "method", "bin", "n_bins", "length_lo", "length_hi",
                           "length_median", "n_runs", "n_correct", "n_censored", "accuracy", "accuracy_lo", "accuracy_hi"]


def wilson_interval(k: int, n: int, confidence_level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for k successes in n trials (NaN for n = 0).

    Examples
    --------
    >>> [round(x, 4) for x in wilson_interval(3, 10)]
    [0.1078, 0.6032]
    """
    from scipy.special import ndtri

    if n <= 0:
        return math.nan, math.nan
    z = float(ndtri(1 - (1 - confidence_level) / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy_by_length(units: pl.DataFrame, arms: pd.DataFrame | None = None, *, max_bins: int = MAX_BINS,
                       confidence_level: float = 0.95) -> pd.DataFrame:
    """Accuracy by completion-length bin, strict and each rule, per target, dataset and serving condition.

    Parameters
    ----------
    units : paired runs (:func:`lengthlens.data.pairing.cell_units`) with ``output_tokens``, ``correct`` and
        ``censored`` on both sides (the baseline's suffixed ``_star``).
    arms : the arms to use (ARM_KEY columns, e.g. Table 3's choice of cells); default every relaxed arm.
    max_bins : length bins per panel at most (fewer where an arm has fewer than 8 runs a bin; at least 2).
    confidence_level : of the Wilson intervals.

    Returns
    -------
    pandas.DataFrame
        One row per (target, dataset, serving, method, bin): the bin's length range (shared by the panel's
        arms), the arm's median length in it, runs, correct, censored, accuracy and its Wilson interval.
        ``method`` is ``strict`` for the baseline (each baseline run once, whatever the number of rules).

    Examples
    --------
    >>> import polars as pl
    >>> u = pl.DataFrame({"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p", "serving": "",
    ...                   "item_id": [str(i) for i in range(8)], "seed": 0, "turn": 0,
    ...                   "output_tokens": [10, 20, 30, 40, 50, 60, 70, 80], "correct": [1, 1, 1, 1, 0, 0, 0, 1],
    ...                   "censored": False, "output_tokens_star": [5, 10, 15, 20, 25, 30, 35, 40],
    ...                   "correct_star": [1, 1, 1, 1, 1, 1, 0, 1], "censored_star": False})
    >>> accuracy_by_length(u, max_bins=2)[["method", "bin", "n_runs", "accuracy"]].values.tolist()
    [['m', 0, 2, 1.0], ['m', 1, 6, 0.5], ['strict', 0, 5, 1.0], ['strict', 1, 3, 0.6666666666666666]]
    """
    need = {"output_tokens", "output_tokens_star", "correct", "correct_star"}
    if units.is_empty() or not need <= set(units.columns):
        return frame([], columns=ACCURACY_LENGTH_COLUMNS)
    u = units if "serving" in units.columns else units.with_columns(pl.lit("").alias("serving"))
    if arms is not None:
        keys = [k for k in ("target", "draft", "dataset", "method", "params", "serving") if k in arms.columns]
        u = u.join(pl.from_pandas(arms[keys].drop_duplicates()).with_columns(
            [pl.col(k).cast(u.schema[k]) for k in keys]), on=keys, how="semi")
    u = u.filter(pl.col("correct").is_not_null() & pl.col("correct_star").is_not_null()
                 & pl.col("output_tokens").is_not_null() & pl.col("output_tokens_star").is_not_null())
    if u.is_empty():
        return frame([], columns=ACCURACY_LENGTH_COLUMNS)
    censored = "censored" in u.columns and "censored_star" in u.columns
    panel = ["target", "dataset", "serving"]
    relaxed = u.select(*panel, "method", pl.col("output_tokens").cast(pl.Float64).alias("L"),
                       pl.col("correct").cast(pl.Float64).alias("c"),
                       (pl.col("censored").fill_null(False) if censored else pl.lit(False)).alias("cut"))
    # A baseline run is paired once per rule: keep it once (by its source where known, else by its unit).
    once = ["source_star"] if "source_star" in u.columns and u.get_column("source_star").null_count() == 0 else \
        ["target", "draft", "dataset", "serving", *UNIT_KEY]
    strict = (u.unique(subset=once, keep="first", maintain_order=True)
              .select(*panel, pl.lit("strict").alias("method"), pl.col("output_tokens_star").cast(pl.Float64).alias("L"),
                      pl.col("correct_star").cast(pl.Float64).alias("c"),
                      (pl.col("censored_star").fill_null(False) if censored else pl.lit(False)).alias("cut")))
    runs = pl.concat([relaxed, strict])
    rows = []
    for names, part in runs.partition_by(panel, maintain_order=True, as_dict=True).items():
        L = part.get_column("L").to_numpy()
        smallest = min(int(v) for v in part.group_by("method").len().get_column("len").to_list())
        n_bins = int(np.clip(smallest // RUNS_PER_BIN, 2, max_bins))
        edges = np.unique(np.quantile(L, np.linspace(0, 1, n_bins + 1)))
        if edges.size < 2:
            edges = np.array([L.min(), L.max()])
        n_bins = edges.size - 1
        where = np.clip(np.searchsorted(edges, L, side="right") - 1, 0, n_bins - 1)
        part = part.with_columns(pl.Series("bin", where))
        for (method,), g in sorted(part.partition_by("method", as_dict=True).items()):
            for b in range(n_bins):
                gb = g.filter(pl.col("bin") == b)
                n, k = gb.height, int(gb.get_column("c").sum()) if gb.height else 0
                lo, hi = wilson_interval(k, n, confidence_level)
                rows.append({**dict(zip(panel, names)), "method": method, "bin": b, "n_bins": n_bins,
                             "length_lo": float(edges[b]), "length_hi": float(edges[b + 1]),
                             "length_median": float(np.median(gb.get_column("L").to_numpy())) if n else math.nan,
                             "n_runs": n, "n_correct": k, "n_censored": int(gb.get_column("cut").sum()) if n else 0,
                             "accuracy": k / n if n else math.nan, "accuracy_lo": lo, "accuracy_hi": hi})
    return frame(rows, columns=ACCURACY_LENGTH_COLUMNS)


class AccuracyLengthReport(ReportAnalysis):
    """accuracy_length.csv and its figure: accuracy by completion length, strict and each rule at Table 3's α."""

    name = "accuracy by length"
    stage = "lossless check, method pairs"
    reads = ("output_tokens", "correct", "censored", "source")
    outputs = Outputs(
        tables=(Table("accuracy_length", "(target, dataset, serving) × arm (`strict` or a rule at Table 3's α) × length bin", (
            Column("target", "the target model"), Column("dataset", "the dataset (benchmark folder)"),
            Column("serving", "the serving condition (empty when none is logged)"),
            Column("method", "the rule at Table 3's α, or `strict` for the baseline runs (each once)"),
            Column("bin", "the length bin (0: shortest)"), Column("n_bins", "length bins of the panel"),
            Column("length_{lo,hi}", "the bin's completion-length range, shared by the panel's arms"),
            Column("length_median", "the arm's median completion length in the bin"),
            Column("n_runs", "graded runs of the arm in the bin"), Column("n_correct", "of those, correct"),
            Column("n_censored", "of those, cut at the token budget (counted at the budget)"),
            Column("accuracy", "n_correct / n_runs with its Wilson interval", interval=True)),
            written="when cells have graded runs on both sides"),),
        sections=(Section("accuracy_length", "Accuracy and completion length", (
            "Longer completions are less often right, and relaxed rules make completions longer: the graded runs of "
            "each rule's Table 3 arm and of its strict baseline, in length bins shared by both arms, with Wilson "
            "intervals; accuracy_length.csv has every bin."), order=57, tables=(), landscape=False),),
        figures=(Figure("accuracy_vs_length", section="accuracy_length", cost=6),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        chosen = ctx.results.get("table3_cells")
        if chosen is None:  # no cells
            return {}
        by_length = accuracy_by_length(ctx.units, chosen, confidence_level=ctx.settings.confidence_level)
        return {} if by_length.empty else {"accuracy_length": by_length}
