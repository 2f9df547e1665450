"""Arm against arm on the same items: :func:`compare`, and every pair of speculative methods (:func:`method_pairs`).

A comparison is a cell whose two sides are any two selections of runs: the same metrics, the same
paired item bootstrap and the same intervals as the cell table (:class:`~lengthlens.analyses.cells.CellsAnalysis`
on the engine). Runs pair within the same target, draft and dataset on (item, seed, turn); items are
resampled within each of those groups (strata), each drawn as the cell table draws that group
(:func:`~lengthlens.analyses.engine.pooled_group`), so a comparison can pool several datasets without
mixing their items, and a relaxed arm compared with its baseline gets its cell's intervals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl

from lengthlens.analyses.cells import Cell, CellsAnalysis
from lengthlens.analyses.engine import Settings, group_items, pooled_group, run
from lengthlens.analyses.outputs import Column, Context, Outputs, ReportAnalysis, Section, Table
from lengthlens.data.pairing import pair
from lengthlens.data.runset import RunSet
from lengthlens.data.schema import ARM_KEY, GROUP_KEY, STRICT, UNIT_KEY
from lengthlens.results import AccuracyChange, Estimate, TestResult, frame, frame_html
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Comparison", "compare", "method_pairs"]


def select(table: pl.DataFrame, sel: Mapping[str, Any]) -> pl.DataFrame:
    """The runs whose columns have the given values (a list, tuple or set value matches any of them)."""
    conds = [pl.col(k).is_in(list(v)) if isinstance(v, (list, tuple, set)) else pl.col(k).eq_missing(v)
             for k, v in sel.items()]
    return table.filter(*conds) if conds else table


@dataclass(frozen=True)
class Comparison:
    """Arm X against arm Y on the (item, seed, turn) units both have: the cell metrics with X in the relaxed role."""

    x: Mapping[str, Any]
    y: Mapping[str, Any]
    cell: Cell

    @property
    def n_items(self) -> int:
        return self.cell.n_items

    @property
    def n_runs(self) -> int:
        return self.cell.n_runs

    @property
    def estimates(self) -> Mapping[str, Estimate]:
        return self.cell.estimates

    @property
    def accuracy(self) -> AccuracyChange:
        """The paired accuracy test, the loss flag and their counts (:class:`~lengthlens.results.AccuracyChange`)."""
        return self.cell.accuracy

    @property
    def accuracy_test(self) -> TestResult | None:
        return self.cell.accuracy.test

    @property
    def wrong_to_right(self) -> int:
        return self.cell.accuracy.wrong_to_right or 0

    @property
    def right_to_wrong(self) -> int:
        return self.cell.accuracy.right_to_wrong or 0

    @property
    def unavailable(self) -> Mapping[str, str]:
        return self.cell.unavailable

    def __getitem__(self, metric: str) -> Estimate:
        return self.cell.estimates[metric]

    def to_frame(self) -> pd.DataFrame:
        """One row per metric: estimate, low, high, standard error, interval method."""
        return self.cell.to_frame()

    def _repr_html_(self) -> str:
        test = self.accuracy_test
        p = f"; {test.method} p = {test.pvalue:.3g}" if test is not None else ""
        title = (f"{dict(self.x)} against {dict(self.y)}: {self.n_runs} paired runs on {self.n_items} items{p} "
                 f"({self.wrong_to_right} wrong→right, {self.right_to_wrong} right→wrong)")
        return frame_html(self.to_frame(), title)


def _ok_runs(runs: RunSet) -> pl.DataFrame:
    t = runs.derived.runs.filter(pl.col("status") == "ok")  # derived once per load
    if "shared_baseline" in t.columns:  # a shared autoregressive baseline as logged, once
        t = t.filter(~pl.col("shared_baseline"))
    return t


def compare(runs: RunSet, x: Mapping[str, Any], y: Mapping[str, Any], *, n_resamples: int = DEFAULT_N_RESAMPLES,
            seed: int = DEFAULT_SEED, ci: Literal["studentized", "percentile", "bca"] = "studentized",
            confidence_level: float = DEFAULT_CONFIDENCE, within_draft: bool | None = None,
            keep_replicates: bool = False) -> Comparison:
    """Compare arm X with arm Y on shared items (an intervention against its base arm, two rules, two methods).

    Parameters
    ----------
    runs : loaded runs.
    x, y : selections by column value, e.g. ``{"method": "cactus", "params": "alpha0.35"}`` (a list value
        selects any of several).
    n_resamples, seed, ci, confidence_level : as for :func:`lengthlens.cells` (the same metrics and intervals).
    within_draft : pair within target, draft and dataset (True) or within target and dataset (False,
        arms with different drafts: EAGLE against SpS); None decides by whether the selections share a draft.
        Within a draft each (target, draft, dataset) is resampled with the cell table's draws of that group.
    keep_replicates : keep each interval's bootstrap distribution (:attr:`Estimate.replicates`).

    Returns
    -------
    Comparison
        X in the relaxed role: ratios are X over Y.

    Examples
    --------
    >>> import lengthlens as ll                                           # doctest: +SKIP
    >>> c = ll.compare(runs, {"method": "cactus_force_commit"}, {"method": "cactus"})   # doctest: +SKIP
    >>> c["lambda"].confidence_interval                                    # doctest: +SKIP
    """
    t = _ok_runs(runs)
    xs, ys = select(t, x), select(t, y)
    if xs.height == 0 or ys.height == 0:
        raise ValueError(f"no ok runs match {'x' if xs.height == 0 else 'y'} = {dict(x if xs.height == 0 else y)}")
    if within_draft is None:
        within_draft = bool(set(xs.get_column("draft")) & set(ys.get_column("draft")))
    group_key = GROUP_KEY if within_draft else ("target", "dataset", "serving")
    units = pair(xs, ys, on=(*group_key, *UNIT_KEY))
    if units.height == 0:
        raise ValueError(f"the two arms share no ({', '.join(group_key)}, item, seed, turn)")

    def label(col: str) -> Any:
        values = units.get_column(col).unique().to_list()
        return values[0] if len(values) == 1 else ", ".join(sorted(map(str, values)))

    analysis = CellsAnalysis()
    key = {k: label(k) for k in ("target", "draft", "dataset", "method", "params", "serving")} | {"alpha": None}
    group = pooled_group(units, analysis.fields, key, group_key, group_items(runs) if within_draft else None)
    settings = Settings(n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level,
                        keep_replicates=keep_replicates)
    (table,) = run([group], [analysis], settings)
    return Comparison(x=dict(x), y=dict(y), cell=table.cells[0])


_METHOD_PAIR_METRICS = ("lambda", "rounds_ratio", "time_ratio", "gain", "accuracy_delta_pp")


def method_pairs(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
                 ci: Literal["studentized", "percentile", "bca"] = "studentized",
                 confidence_level: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
    """methods.csv: every pair of speculative arms of one (target, dataset) whose drafts differ, x against y.

    Only where each method has one draft (Spec-Bench's layout; rules run with several drafts, as in the
    study, are compared with their baseline in the cells). Columns: target, dataset, x_/y_ method,
    params and draft, n_items, n_runs, λ, R/R*, T/T*, gain and Δacc with ``_lo``/``_hi`` (ratios are x over
    y), accuracy_p (mid-p; mcnemar_p: the exact p, under its old name), unavailable.

    Parameters
    ----------
    runs : loaded runs.
    n_resamples, seed, ci, confidence_level : as for :func:`compare`.

    Returns
    -------
    pandas.DataFrame
        One row per pair (empty when every target and dataset has one draft).

    Examples
    --------
    >>> import lengthlens as ll                                              # doctest: +SKIP
    >>> ll.method_pairs(ll.load("spec-bench/data", format="specbench"))      # doctest: +SKIP
    """
    t = runs.table.filter((pl.col("status") == "ok") & (pl.col("method") != STRICT))
    arms = t.select(*ARM_KEY).unique().sort(ARM_KEY)
    rows = []
    for g in arms.partition_by(["target", "dataset", "serving"], maintain_order=True):
        per_method = g.group_by("method").agg(pl.col("draft").n_unique().alias("k"))
        if g.get_column("draft").n_unique() < 2 or per_method.get_column("k").max() > 1:
            continue
        for a, b in combinations(g.iter_rows(named=True), 2):
            if a["draft"] == b["draft"]:
                continue
            try:
                c = compare(runs, a, b, n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level,
                            within_draft=False)
            except ValueError:
                continue  # no shared items
            row = {"target": a["target"], "dataset": a["dataset"], "x_method": a["method"], "x_params": a["params"],
                   "x_draft": a["draft"], "y_method": b["method"], "y_params": b["params"], "y_draft": b["draft"],
                   "n_items": c.n_items, "n_runs": c.n_runs}
            for m in _METHOD_PAIR_METRICS:
                row.update({m: c[m].point, f"{m}_lo": c[m].low, f"{m}_hi": c[m].high})
            discordant = bool(c.wrong_to_right + c.right_to_wrong)
            row.update(accuracy_p=c.accuracy.p if discordant else None,
                       mcnemar_p=c.accuracy.p_exact if discordant else None, unavailable=c.cell.to_row()["unavailable"])
            rows.append(row)
    return frame(rows)


# ------------------------------------------------------------------------------------------------
# The report's method-against-method section (declared outputs, :mod:`lengthlens.analyses.outputs`)
# ------------------------------------------------------------------------------------------------

class MethodPairsReport(ReportAnalysis):
    """methods.csv: every two speculative methods of one target and dataset, x against y (Spec-Bench's layout)."""

    name = "method pairs"
    stage = "lossless check, method pairs"
    outputs = Outputs(
        tables=(Table("methods", "pair of speculative methods of one target and dataset", (
            Column("target", "the target model"), Column("dataset", "the dataset"),
            Column("{x,y}_{method,params,draft}", "the two arms: x against y"),
            Column("n_items", "items both have"), Column("n_runs", "paired runs"),
            *(Column(m, f"{m} of x against y (ratios are x over y)", interval=True) for m in _METHOD_PAIR_METRICS),
            Column("accuracy_p", "the paired accuracy test's mid-p"), Column("mcnemar_p", "its exact p"),
            Column("unavailable", "metrics left empty and why")),
            written="when one target and dataset has methods with different drafts"),),
        sections=(Section("methods", "Method against method", (
            "Every two speculative methods of one target and dataset, paired on their shared items (item "
            "bootstrap as for cells): ratios are x over y, so λ < 1 and R/R*, T/T* < 1 favour x."), order=52),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        s = ctx.settings
        df = method_pairs(ctx.runs, n_resamples=s.n_resamples, seed=s.seed, ci=s.ci, confidence_level=s.confidence_level)
        return {} if df.empty else {"methods": df}
