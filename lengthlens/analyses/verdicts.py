"""The decision view: per cell and per rule, is it faster, slower or can't we tell, and is it less accurate?

Verdicts read intervals only, never point estimates. Speed (R/R* and, separately, T/T*): *faster*
when the whole interval lies below 1, *slower* when it lies wholly above 1, *can't tell* when it
holds 1 (an interval touching 1 holds it). Accuracy: *worse* when the cell's loss flag
(``drop_2pp``) fires, else *no detectable change*, reported with the cell's minimum detectable drop
(``accuracy_mdd_pp``): a smaller drop would have gone unseen. A rule's verdict counts its cells'.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from lengthlens.analyses.outputs import Column, Context, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.serving import serving_conditions
from lengthlens.results import frame, frame_html

__all__ = ["FASTER", "SLOWER", "CANT_TELL", "NOT_COMPUTED", "WORSE", "NO_CHANGE", "UNGRADED", "PARTLY_GRADED",
           "CellVerdict", "RuleVerdict", "Verdicts", "speed_verdict", "accuracy_verdict", "with_verdicts", "verdicts"]

FASTER, SLOWER, CANT_TELL, NOT_COMPUTED = "faster", "slower", "can't tell", "not computed"
WORSE, NO_CHANGE, UNGRADED, PARTLY_GRADED = "worse", "no detectable change", "ungraded", "partly graded"

#: cells.csv's verdict columns and the interval (stem) each reads; accuracy reads the loss flag.
VERDICT_COLUMNS = {"verdict_rounds": "rounds_ratio", "verdict_time": "time_ratio", "verdict_accuracy": "drop_2pp"}


def _missing(v: Any) -> bool:
    """None, NaN or pandas' NA (a nullable column's missing value)."""
    return v is None or bool(pd.isna(v))


def speed_verdict(low: float | None, high: float | None) -> str:
    """``faster`` when the ratio's interval lies wholly below 1, ``slower`` wholly above, else ``can't tell``.

    An interval that touches 1 holds 1 (can't tell); a missing limit means the metric was not computed.

    Examples
    --------
    >>> speed_verdict(0.80, 0.95), speed_verdict(1.02, 1.3), speed_verdict(0.9, 1.0), speed_verdict(float("nan"), 1.0)
    ('faster', 'slower', "can't tell", 'not computed')
    """
    if _missing(low) or _missing(high):
        return NOT_COMPUTED
    if high < 1.0:
        return FASTER
    if low > 1.0:
        return SLOWER
    return CANT_TELL


def accuracy_verdict(loss: bool | None, n_graded: int | float | None, partial: bool | None = False) -> str:
    """``worse`` when the loss flag fires, ``no detectable change`` when it does not; ``ungraded`` /
    ``partly graded`` when the cell has no flag (nothing graded, or graded on fewer than half its items).

    Examples
    --------
    >>> accuracy_verdict(True, 30), accuracy_verdict(False, 30), accuracy_verdict(None, 0), accuracy_verdict(None, 4, True)
    ('worse', 'no detectable change', 'ungraded', 'partly graded')
    """
    if not _missing(loss):
        return WORSE if bool(loss) else NO_CHANGE
    if not _missing(partial) and bool(partial):
        return PARTLY_GRADED
    return UNGRADED if _missing(n_graded) or not n_graded else PARTLY_GRADED


def with_verdicts(cells_df: pd.DataFrame) -> pd.DataFrame:
    """``cells_df`` with ``verdict_rounds``, ``verdict_time`` and ``verdict_accuracy`` (cells.csv's columns).

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"rounds_ratio_lo": [0.8], "rounds_ratio_hi": [0.9], "time_ratio_lo": [0.9],
    ...                    "time_ratio_hi": [1.2], "drop_2pp": [False], "n_graded": [30]})
    >>> with_verdicts(df)[["verdict_rounds", "verdict_time", "verdict_accuracy"]].iloc[0].tolist()
    ['faster', "can't tell", 'no detectable change']
    """
    def col(name: str) -> list:
        return cells_df[name].tolist() if name in cells_df.columns else [None] * len(cells_df)

    out = cells_df.copy()
    for name, stem in (("verdict_rounds", "rounds_ratio"), ("verdict_time", "time_ratio")):
        out[name] = [speed_verdict(lo, hi) for lo, hi in zip(col(f"{stem}_lo"), col(f"{stem}_hi"))]
    out["verdict_accuracy"] = [accuracy_verdict(f, n, p) for f, n, p in
                               zip(col("drop_2pp"), col("n_graded"), col("graded_partial"))]
    return out


@dataclass(frozen=True)
class CellVerdict:
    """One cell's verdicts: rounds and wall time (from their intervals), accuracy (from the loss flag)."""

    target: str
    draft: str
    dataset: str
    method: str
    params: str
    rounds: str
    time: str
    accuracy: str
    #: The smallest accuracy drop (points) the cell would have detected; NaN where not computed.
    accuracy_mdd_pp: float


@dataclass(frozen=True)
class RuleVerdict:
    """A rule's verdicts counted over its cells (``target``/``draft`` ``all``: every target–draft pair pooled).

    ``scope``: ``table3`` (each rule's cells in Table 3: the most aggressive complete α per dataset)
    or ``all`` (every α). Cells with fewer than 10 items are left out and counted in ``n_small_excluded``.
    ``serving``: the serving condition counted, where the cells come under several ("" under one: loads are never
    pooled).
    """

    scope: str
    serving: str
    target: str
    draft: str
    method: str
    n_cells: int
    n_rounds_faster: int
    n_rounds_slower: int
    n_rounds_cant_tell: int
    n_time_faster: int
    n_time_slower: int
    n_time_cant_tell: int
    n_graded: int
    n_accuracy_worse: int
    n_accuracy_no_change: int
    #: Median minimum detectable drop (points) over the graded cells with no detectable change.
    accuracy_mdd_pp_median: float
    n_small_excluded: int


@dataclass(frozen=True)
class Verdicts:
    """Every cell's verdicts and each rule's counts; ``to_frame()`` gives the rules' table (verdicts.csv)."""

    cells: tuple[CellVerdict, ...]
    rules: tuple[RuleVerdict, ...]

    def to_frame(self) -> pd.DataFrame:
        """One row per (scope, serving condition, pair, rule), the columns of :class:`RuleVerdict` (``serving`` only
        where there are several)."""
        df = frame([asdict(r) for r in self.rules], columns=list(RuleVerdict.__dataclass_fields__))
        return df if (df["serving"] != "").any() else df.drop(columns="serving")

    def cells_frame(self) -> pd.DataFrame:
        """One row per cell, the columns of :class:`CellVerdict`."""
        return frame([asdict(c) for c in self.cells], columns=list(CellVerdict.__dataclass_fields__))

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame(), f"Verdicts: {len(self.cells)} cells, {len(self.rules)} rule rows")


def _rule_row(d: pd.DataFrame, scope: str, serving: str, target: str, draft: str, method: str, n_small: int
              ) -> RuleVerdict:
    r, t, a = d["verdict_rounds"], d["verdict_time"], d["verdict_accuracy"]
    graded = a.isin([WORSE, NO_CHANGE])
    mdd = d.loc[a == NO_CHANGE, "accuracy_mdd_pp"] if "accuracy_mdd_pp" in d else d.loc[[], "n_items"]
    mdd = mdd.astype(float).dropna()
    return RuleVerdict(scope, serving, target, draft, method, len(d), int((r == FASTER).sum()), int((r == SLOWER).sum()),
                       int((r == CANT_TELL).sum()), int((t == FASTER).sum()), int((t == SLOWER).sum()),
                       int((t == CANT_TELL).sum()), int(graded.sum()), int((a == WORSE).sum()), int((a == NO_CHANGE).sum()),
                       float(mdd.median()) if len(mdd) else math.nan, n_small)


def verdicts(cells_df: pd.DataFrame, table3_cells: pd.DataFrame | None = None) -> Verdicts:
    """The decision view from a cell table's frame: each cell's verdicts and each rule's counts.

    Parameters
    ----------
    cells_df : ``CellTable.to_frame()`` (cells.csv); verdict columns are added when absent.
    table3_cells : the cells Table 3 uses (:func:`lengthlens.analyses.tables.table3_cells` with
        ``include_small=True``): adds the ``table3`` scope beside ``all``.

    Returns
    -------
    Verdicts
        Per cell and per (scope, serving condition where there are several, target–draft pair or ``all``, rule);
        interventions (``*_force_commit``) are left out.

    Examples
    --------
    >>> import lengthlens as ll                                       # doctest: +SKIP
    >>> ll.verdicts(ll.cells(ll.load("runs/")).to_frame()).to_frame()  # doctest: +SKIP
    """
    df = cells_df if "verdict_rounds" in cells_df.columns else with_verdicts(cells_df)
    df = df[~df["method"].astype(str).str.endswith("_force_commit")] if len(df) else df
    mdd = df["accuracy_mdd_pp"].astype(float).tolist() if "accuracy_mdd_pp" in df.columns else [math.nan] * len(df)
    cells_ = tuple(CellVerdict(str(r.target), str(r.draft), str(r.dataset), str(r.method), str(r.params), r.verdict_rounds,
                               r.verdict_time, r.verdict_accuracy, float(m))
                   for r, m in zip(df.itertuples(index=False), mdd))
    scopes: list[tuple[str, pd.DataFrame]] = []
    if table3_cells is not None:
        keys = table3_cells[[k for k in ("target", "draft", "dataset", "method", "params", "serving")
                             if k in table3_cells and k in df]].drop_duplicates()
        scopes.append(("table3", df.merge(keys, on=list(keys.columns), how="inner")))
    scopes.append(("all", df))
    # Cells under different serving conditions are counted apart: a load is a condition, not a replicate.
    conditions = serving_conditions(df["serving"].fillna("")) if "serving" in df and len(df) else [""]
    rows: list[RuleVerdict] = []
    for scope, d_scope in scopes:
        for load in conditions if len(conditions) > 1 else [""]:
            d = d_scope[d_scope["serving"].fillna("") == load] if load else d_scope
            small = d["small_n"].fillna(False).astype(bool) if "small_n" in d else pd.Series(False, index=d.index)
            kept = d[~small]
            for method in sorted(set(d["method"].astype(str))):
                n_small = int((small & (d["method"].astype(str) == method)).sum())
                rows.append(_rule_row(kept[kept["method"].astype(str) == method], scope, load, "all", "all", method,
                                      n_small))
                for (tg, dr), g in d[d["method"].astype(str) == method].groupby(["target", "draft"], sort=True):
                    s = small.loc[g.index]
                    rows.append(_rule_row(g[~s], scope, load, str(tg), str(dr), method, int(s.sum())))
    return Verdicts(cells_, tuple(rows))


def _count(name: str, words: str, label: str, tone: str | None = None) -> Column:
    return Column(name, f"cells {words}", label=label, fmt="int", tone=tone)


class VerdictsReport(ReportAnalysis):
    """verdicts.csv and the report's decision view: each rule's cell verdicts counted, on Table 3's cells and on all."""

    name = "verdicts"
    stage = "arms and Table 3"
    outputs = Outputs(
        tables=(Table("verdicts", "scope (table3, all) × serving condition (where several) × pair (or `all`) × rule", (
            Column("scope", "table3 (the cells Table 3 uses, small ones counted apart) or all (every α)"),
            *keys("method", also=("serving", "target", "draft")),
            Column("n_cells", "cells counted (small ones left out)", label="cells", fmt="int"),
            _count("n_rounds_faster", "whose R/R* interval lies below 1", "R/R* faster", "win_if_positive"),
            _count("n_rounds_slower", "whose R/R* interval lies above 1", "R/R* slower", "loss_if_positive"),
            _count("n_rounds_cant_tell", "whose R/R* interval holds 1", "R/R* can't tell"),
            _count("n_time_faster", "whose T/T* interval lies below 1", "T/T* faster", "win_if_positive"),
            _count("n_time_slower", "whose T/T* interval lies above 1", "T/T* slower", "loss_if_positive"),
            _count("n_time_cant_tell", "whose T/T* interval holds 1", "T/T* can't tell"),
            _count("n_graded", "graded (on at least half their items)", "graded"),
            _count("n_accuracy_worse", "whose loss flag fires (drop_2pp)", "accuracy worse", "loss_if_positive"),
            _count("n_accuracy_no_change", "graded whose loss flag does not fire", "no detectable change"),
            Column("accuracy_mdd_pp_median", "median over the cells with no detectable change of the smallest drop they "
                   "would have detected", label="min. detectable drop pp (median)", fmt="f1"),
            _count("n_small_excluded", "with fewer than 10 items, left out", "small cells left out")),
            written="when there are cells", caption="Verdicts on Table 3's cells"),),
        sections=(Section("decision", "Faster, and as accurate? The verdicts", order=10),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        chosen = ctx.results.get("table3_cells")
        if chosen is None:
            return {}
        ctx.results["verdicts"] = decision = verdicts(ctx.tables["cells"], chosen)
        return {"verdicts": decision.to_frame()}
