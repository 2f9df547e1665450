"""serving.csv: each arm's cells across its serving conditions, so a reader sees where a rule's advantage disappears.

Cells are formed within a serving condition (:mod:`lengthlens.data.serving`); this table lines up
one arm's cells (same target, draft, dataset, rule and params) along the load axis, concurrency
where it is logged, else the request rate, else the batch size. Its numbers are the cells' own
(R/R*, T/T*, tokens-per-second ratio, each with its interval); nothing is resampled again.
"""

from __future__ import annotations

import math

import pandas as pd

from lengthlens.analyses.outputs import Column, Context, Figure, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.serving import serving_conditions, serving_value

__all__ = ["SERVING_METRICS", "ServingReport", "load_axis", "serving_table"]

#: The cell metrics the table carries, with their intervals.
SERVING_METRICS = ("rounds_ratio", "time_ratio", "throughput_ratio")
_AXES = ("concurrency", "request_rate", "batch_size")
_ARM = ["target", "draft", "dataset", "method", "params"]


def load_axis(labels: pd.Series | list[str]) -> str:
    """The field the serving conditions vary along: concurrency, request_rate or batch_size (``condition``: none)."""
    for f in _AXES:
        if any(serving_value(s, f) is not None for s in labels):
            return f
    return "condition"


def _series(label: str, axis: str) -> str:
    """The label without its load part (what stays fixed along one curve: the GPU, the batch bound)."""
    head = {"concurrency": "c=", "request_rate": "rate=", "batch_size": "bs="}.get(axis)
    return ", ".join(p for p in label.split(", ") if not (head and p.startswith(head)))


def serving_table(cells_df: pd.DataFrame) -> pd.DataFrame:
    """Every arm's cells by serving condition, lightest load first; empty unless several conditions are logged.

    Parameters
    ----------
    cells_df : the cell table as a frame (``CellTable.to_frame()``, cells.csv).

    Returns
    -------
    pandas.DataFrame
        target, draft, dataset, method, params, series (the condition without its load part), serving,
        load_axis, load (its value; the condition's rank where none is numeric), n_items, small_n, the
        point and ``_lo``/``_hi`` of R/R*, T/T* and the tokens-per-second ratio, and ``advantage_lost_at``:
        per arm and series, the lightest load, past one where the T/T* interval lies below 1, where it no
        longer does (empty where it never did, or does at every load from there on).

    Examples
    --------
    >>> import lengthlens as ll                                         # doctest: +SKIP
    >>> ll.serving_table(ll.cells(ll.load("runs.jsonl")).to_frame())    # doctest: +SKIP
    """
    cols = [*_ARM, "series", "serving", "load_axis", "load", "n_items", "small_n",
            *[c for m in SERVING_METRICS for c in (m, f"{m}_lo", f"{m}_hi")], "advantage_lost_at"]
    if cells_df.empty or "serving" not in cells_df or len(serving_conditions(cells_df["serving"])) < 2:
        return pd.DataFrame(columns=cols)
    df = cells_df[~cells_df["method"].astype(str).str.endswith("_force_commit")].copy()
    df["serving"] = df["serving"].fillna("").astype(str)
    order = serving_conditions(df["serving"])
    axis = load_axis(order)
    rank = {s: float(i) for i, s in enumerate(order)}
    df["load_axis"] = axis
    df["load"] = [rank[s] if axis == "condition" else (serving_value(s, axis) if serving_value(s, axis) is not None
                                                       else math.nan) for s in df["serving"]]
    df["series"] = [_series(s, axis) for s in df["serving"]]
    df["_rank"] = df["serving"].map(rank)
    df = df.sort_values([*_ARM, "series", "_rank"], kind="mergesort")
    for m in SERVING_METRICS:
        for c in (m, f"{m}_lo", f"{m}_hi"):
            if c not in df:
                df[c] = math.nan
    lost = {}
    for key, g in df.groupby([*_ARM, "series"], sort=False):
        wins = (g["time_ratio_hi"].astype(float) < 1).to_numpy()
        after = wins.cumsum() > 0  # from the first load where it wins on
        gone = after & ~wins & g["time_ratio_hi"].notna().to_numpy()
        lost[key] = g["serving"].to_numpy()[gone.argmax()] if gone.any() else ""
    df["advantage_lost_at"] = [lost[tuple(r)] for r in df[[*_ARM, "series"]].itertuples(index=False, name=None)]
    if "small_n" not in df:
        df["small_n"] = False
    return df[cols].reset_index(drop=True)


class ServingReport(ReportAnalysis):
    """serving.csv: each rule's cells along the load, where several serving conditions are logged."""

    name = "serving conditions"
    stage = "arms and Table 3"
    outputs = Outputs(
        tables=(Table("serving", "arm × serving condition", (
            *keys(also=("target", "draft", "dataset", "method", "params")),
            Column("series", "the condition without its load part (what stays fixed along one curve)"),
            Column("serving", "the serving condition"),
            Column("load_axis", "what the load is: concurrency, request_rate, batch_size (or condition: their rank)"),
            Column("load", "the load's value (the condition's rank where none is numeric)"),
            Column("n_items", "items of the cell"), Column("small_n", "fewer than 10 items"),
            Column("rounds_ratio", "R/R* of the cell", interval=True), Column("time_ratio", "T/T* of the cell", interval=True),
            Column("throughput_ratio", "output tokens per second, relaxed over strict", interval=True),
            Column("advantage_lost_at", "per arm and series, the lightest load, past one where the T/T* interval lies "
                   "below 1, where it no longer does")),
            written="only with several serving conditions"),),
        sections=(Section("serving", "Serving conditions", (
            "Each cell is a rule against its baseline under one serving condition (concurrency c, request rate, "
            "batch size bs, GPU, as logged): the same rule's cells at each load, lightest first, with R/R*, T/T* and "
            "output tokens per second (relaxed over strict) and their intervals; 'advantage lost at' is the lightest "
            "load, past one where the T/T* interval lies below 1, where it no longer does."), order=60),),
        figures=(Figure("serving", section="serving", wide=True),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        by_load = serving_table(ctx.tables["cells"])
        return {} if by_load.empty else {"serving": by_load}  # only where the cells come under several conditions
