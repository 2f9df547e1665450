"""cost_per_correct.csv: verifier rounds and wall time per correct answer, relaxed against strict, per cell.

A rule that saves rounds per run but loses answers can still spend more per correct answer. Per cell,
over the paired runs graded on both sides: rounds per correct answer ``Σ R / Σ correct`` of the relaxed
runs over the same of their baseline runs (the rounds ratio over the accuracy ratio), and the same for
wall time, each with its paired item-bootstrap interval from the engine (the cell table's draws where
every item is graded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lengthlens.analyses.engine import CellResult, CellRuns, Plan, Settings
from lengthlens.analyses.outputs import Column, Context, Figure, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.pairing import CELL_KEY
from lengthlens.results import frame
from lengthlens.stats.intervals import Ratio

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COST_COLUMNS", "CostPerCorrectAnalysis", "CostPerCorrectReport", "cost_per_correct"]


def _rounds_per_correct(s):
    return (s.R / s.C) / (s.R_star / s.C_star)


def _seconds_per_correct(s):
    return (s.T / s.C) / (s.T_star / s.C_star)


#: The costs: statistic name, the run field summed, the statistic.
_COSTS = (("rounds_per_correct_ratio", "draft_rounds", "R", _rounds_per_correct),
          ("seconds_per_correct_ratio", "wall_time_s", "T", _seconds_per_correct))
COST_COLUMNS = [*CELL_KEY, "n_items", "n_runs_graded", "correct", "correct_star", "rounds_per_correct",
                "rounds_per_correct_star", "rounds_per_correct_ratio", "rounds_per_correct_ratio_lo",
                "rounds_per_correct_ratio_hi", "seconds_per_correct", "seconds_per_correct_star",
                "seconds_per_correct_ratio", "seconds_per_correct_ratio_lo", "seconds_per_correct_ratio_hi"]


@dataclass(frozen=True)
class CostPerCorrectAnalysis:
    """cost_per_correct.csv on the engine: per cell, rounds and seconds per correct answer, relaxed over strict.

    Uses the cell's runs graded on both sides whose rounds (or wall time) are logged on both sides; a cell
    without graded runs has no row.
    """

    fields = ("draft_rounds", "draft_rounds_star", "wall_time_s", "wall_time_s_star", "correct", "correct_star")
    #: In a report's shared pass it uses the cell table's draws but not its product: its columns among the cell
    #: table's could move the cell table's last bits.
    own_product = True

    def plan(self, cell: CellRuns, settings: Settings) -> Plan | None:
        f = cell.fields
        if "correct" not in f or "correct_star" not in f:
            return None
        logged = {name: f.get(field) is not None and f.get(f"{field}_star") is not None
                  and bool(np.isfinite(f[field]).all() and np.isfinite(f[f"{field}_star"]).all())
                  for name, field, _c, _s in _COSTS}
        graded = np.isfinite(f["correct"]) & np.isfinite(f["correct_star"])
        if not graded.any() or not any(logged.values()):
            return None
        sub = cell.subset(graded)
        g = sub.fields
        columns = {"C": sub.by_item(g["correct"]), "C_star": sub.by_item(g["correct_star"])}
        statistics = {}
        for name, field, col, stat in _COSTS:
            if logged[name]:
                columns[col] = sub.by_item(g[field])
                columns[f"{col}_star"] = sub.by_item(g[f"{field}_star"])
                statistics[name] = Ratio(stat)
        return Plan(sub, columns, statistics)

    def finish(self, results: list[CellResult], settings: Settings) -> list[dict]:
        rows = []
        for r in results:
            cols = r.plan.columns
            c, cs = float(cols["C"].sum()), float(cols["C_star"].sum())
            row = {**r.cell.key, "n_items": r.cell.n_items, "n_runs_graded": r.cell.n_runs, "correct": int(c),
                   "correct_star": int(cs)}
            for name, _field, col, _stat in _COSTS:
                stem = name.removesuffix("_ratio")
                est = r.estimates.get(name)
                if est is None:
                    row.update({stem: np.nan, f"{stem}_star": np.nan, name: np.nan, f"{name}_lo": np.nan,
                                f"{name}_hi": np.nan})
                    continue
                total, total_star = float(cols[col].sum()), float(cols[f"{col}_star"].sum())
                row.update({stem: total / c if c else np.inf, f"{stem}_star": total_star / cs if cs else np.inf,
                            name: est.point, f"{name}_lo": est.low, f"{name}_hi": est.high})
            rows.append(row)
        return rows

    def collect(self, rows: list[dict], settings: Settings) -> pd.DataFrame:
        return frame(rows, columns=COST_COLUMNS)


def cost_per_correct(runs, settings: Settings | None = None):
    """Rounds and seconds per correct answer, relaxed over strict, per cell (cost_per_correct.csv).

    Parameters
    ----------
    runs : loaded runs (:func:`lengthlens.load`) with graded runs on both sides.
    settings : the bootstrap (default: the report's).

    Returns
    -------
    pandas.DataFrame
        Per cell: n_items, n_runs_graded, correct and correct_star (graded pairs' correct answers), rounds and
        seconds per correct answer on each side and their ratio (relaxed over strict) with its interval.

    Examples
    --------
    >>> import lengthlens as ll                                                      # doctest: +SKIP
    >>> from lengthlens.analyses.cost_per_correct import cost_per_correct             # doctest: +SKIP
    >>> cost_per_correct(ll.load("runs/"))[["method", "rounds_per_correct_ratio"]]   # doctest: +SKIP
    """
    from lengthlens.analyses.engine import run_on

    (table,) = run_on(runs, [CostPerCorrectAnalysis()], settings or Settings())
    return table


class CostPerCorrectReport(ReportAnalysis):
    """cost_per_correct.csv and its figure: rounds and seconds per correct answer, relaxed over strict, per cell."""

    name = "cost per correct answer"
    stage = "lossless check, method pairs"
    reads = ("draft_rounds", "wall_time_s", "correct")
    outputs = Outputs(
        tables=(Table("cost_per_correct", "cell with runs graded on both sides", (
            *keys("dataset", "method", "params"),
            Column("n_items", "items with runs graded on both sides", label="items", fmt="int"),
            Column("n_runs_graded", "paired runs graded on both sides", label="graded runs", fmt="int"),
            Column("correct", "correct relaxed runs among them", label="correct", fmt="int"),
            Column("correct_star", "correct baseline runs among them", label="correct*", fmt="int"),
            Column("rounds_per_correct", "Σ R / Σ correct of the relaxed runs", label="rounds/correct", fmt="f1"),
            Column("rounds_per_correct_star", "the same of the baseline runs", label="rounds/correct*", fmt="f1"),
            Column("rounds_per_correct_ratio", "rounds per correct answer, relaxed over strict (paired item bootstrap)",
                   label="ratio", fmt="f3", interval=True, better="lower"),
            Column("seconds_per_correct", "Σ T / Σ correct of the relaxed runs (wall time)", label="s/correct", fmt="f2"),
            Column("seconds_per_correct_star", "the same of the baseline runs", label="s/correct*", fmt="f2"),
            Column("seconds_per_correct_ratio", "seconds per correct answer, relaxed over strict (paired item bootstrap)",
                   label="ratio", fmt="f3", interval=True, better="lower")),
            written="when cells have runs graded on both sides"),),
        sections=(Section("cost_per_correct", "Cost per correct answer", (
            "A rule that saves rounds per run but loses answers can still spend more per correct answer: per cell, "
            "verifier rounds and wall time per correct answer over the runs graded on both sides, relaxed over strict, "
            "with paired item-bootstrap intervals (coloured where the interval lies wholly above or below 1)."),
            order=55),),
        figures=(Figure("cost_per_correct", section="cost_per_correct"),))

    def resampled(self, ctx: Context) -> tuple[CostPerCorrectAnalysis]:
        return (CostPerCorrectAnalysis(),)

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        if ctx.tables["cells"].empty:
            return {}
        (cost,) = ctx.resampled[self.name]
        return {} if cost.empty else {"cost_per_correct": cost}
