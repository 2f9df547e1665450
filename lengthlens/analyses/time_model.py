"""The time model: T/T* = R/R* × time-per-round ratio, with each arm's fitted cost per verifier round.

Per cell, a least-squares line T = a + b·R through the relaxed runs (wall time against verifier
rounds) and one through their baseline runs: b is the marginal cost of a round (seconds), a the
fixed cost of a run (prefill, set-up). ``time_ratio_predicted`` is what T/T* would be if the relaxed
runs' rounds cost what the baseline's do, (n·a* + b*·Σ R) / (n·a* + b*·Σ R*); the gap to the measured
T/T* is the change in the cost of a round (a rule's own overhead, or a different session's load).
"""

from __future__ import annotations

import pandas as pd
import polars as pl

from lengthlens.analyses.outputs import Column, Context, Figure, Outputs, ReportAnalysis, Table, keys
from lengthlens.data.schema import ARM_KEY
from lengthlens.data.serving import with_serving

__all__ = ["TimeModelReport", "time_model"]


def _fit(t: str, r: str) -> list[pl.Expr]:
    """Slope and intercept of the least-squares line t = a + b·r (NaN with fewer than two distinct r)."""
    T, R = pl.col(t).cast(pl.Float64), pl.col(r).cast(pl.Float64)
    b = ((T - T.mean()) * (R - R.mean())).sum() / ((R - R.mean()) ** 2).sum()
    return [b.alias(f"_b_{t}"), (T.mean() - b * R.mean()).alias(f"_a_{t}")]


def time_model(units: pl.DataFrame) -> pd.DataFrame:
    """time_model.csv: per cell the fitted cost per round and per run of both arms, and T/T* predicted from rounds.

    Parameters
    ----------
    units : paired runs (:func:`lengthlens.data.pairing.cell_units`) with ``wall_time_s`` and ``draft_rounds``.

    Returns
    -------
    pandas.DataFrame
        ARM_KEY, n_runs, seconds_per_round, seconds_fixed (relaxed arm), seconds_per_round_star, seconds_fixed_star
        (its baseline's runs), rounds_ratio, time_ratio (measured), time_ratio_predicted (rounds at the baseline's cost).

    Examples
    --------
    >>> import polars as pl
    >>> u = pl.DataFrame({"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p", "serving": "",
    ...                   "draft_rounds": [10, 20, 30], "wall_time_s": [2.0, 3.0, 4.0],
    ...                   "draft_rounds_star": [10, 20, 30], "wall_time_s_star": [1.5, 2.5, 3.5]})
    >>> time_model(u)[["seconds_per_round", "seconds_fixed_star", "time_ratio_predicted"]].round(3).values.tolist()
    [[0.1, 0.5, 1.0]]
    """
    cols = [*ARM_KEY, "n_runs", "seconds_per_round", "seconds_fixed", "seconds_per_round_star", "seconds_fixed_star",
            "rounds_ratio", "time_ratio", "time_ratio_predicted"]
    need = ("wall_time_s", "draft_rounds", "wall_time_s_star", "draft_rounds_star")
    if units.is_empty() or any(c not in units.columns for c in need):
        return pd.DataFrame(columns=cols)
    units = with_serving(units)  # paired runs built by hand have no serving condition: ""
    known = units.filter(pl.all_horizontal(pl.col(c).is_not_null() & pl.col(c).cast(pl.Float64).is_not_nan() for c in need))
    if known.is_empty():
        return pd.DataFrame(columns=cols)
    f = (known.group_by(ARM_KEY)
         .agg(pl.len().alias("n_runs"), *_fit("wall_time_s", "draft_rounds"), *_fit("wall_time_s_star", "draft_rounds_star"),
              pl.col("draft_rounds").cast(pl.Float64).sum().alias("_R"), pl.col("draft_rounds_star").cast(pl.Float64).sum().alias("_Rs"),
              pl.col("wall_time_s").sum().alias("_T"), pl.col("wall_time_s_star").sum().alias("_Ts"))
         .with_columns(
             pl.col("_b_wall_time_s").alias("seconds_per_round"), pl.col("_a_wall_time_s").alias("seconds_fixed"),
             pl.col("_b_wall_time_s_star").alias("seconds_per_round_star"), pl.col("_a_wall_time_s_star").alias("seconds_fixed_star"),
             (pl.col("_R") / pl.col("_Rs")).alias("rounds_ratio"), (pl.col("_T") / pl.col("_Ts")).alias("time_ratio"),
             ((pl.col("n_runs") * pl.col("_a_wall_time_s_star") + pl.col("_b_wall_time_s_star") * pl.col("_R"))
              / (pl.col("n_runs") * pl.col("_a_wall_time_s_star") + pl.col("_b_wall_time_s_star") * pl.col("_Rs")))
             .alias("time_ratio_predicted"))
         .sort(list(ARM_KEY)))
    return f.select(cols).to_pandas()


class TimeModelReport(ReportAnalysis):
    """time_model.csv and its figure: each cell's fitted cost per verifier round, and T/T* predicted from rounds."""

    name = "time model"
    stage = "lossless check, method pairs"
    reads = ("wall_time_s", "draft_rounds")
    outputs = Outputs(
        tables=(Table("time_model", "cell with wall times and rounds on both sides", (
            *keys(also=("target", "draft", "dataset", "method", "params", "serving")),
            Column("n_runs", "paired runs with both logged"),
            Column("seconds_per_round{,_star}", "least-squares slope of wall time on verifier rounds over the relaxed "
                   "runs (the baseline's: _star): the cost of a round"),
            Column("seconds_fixed{,_star}", "its intercept: the fixed cost of a run"),
            Column("rounds_ratio", "Σ R / Σ R*"), Column("time_ratio", "Σ T / Σ T* (measured)"),
            Column("time_ratio_predicted", "T/T* if the relaxed arm's rounds cost what the baseline's do")),
            written="when wall time and rounds are logged"),),
        figures=(Figure("time_model"),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        tm = time_model(ctx.units.filter(~pl.col("method").str.ends_with("_force_commit")))
        return {} if tm.empty else {"time_model": tm}
