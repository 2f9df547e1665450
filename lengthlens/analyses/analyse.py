"""Everything a report shows, computed once from a RunSet: cells, arms, Table 3 and the further analyses.

:func:`analyse` pairs the runs once, runs the three resampled analyses (cells, censoring,
attribution) on the engine in one pass over the groups, and builds the tables from their results.
It computes; it writes no sentence (the report's wording is :mod:`lengthlens.report.wording`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import polars as pl

from lengthlens.analyses.attribution import Attribution, AttributionAnalysis, attribution_result
from lengthlens.analyses.cells import CellsAnalysis, CellTable
from lengthlens.analyses.censoring import DEFAULT_AFT_DISTS, CensoringAnalysis, DatasetSurvival, survival_curves
from lengthlens.analyses.engine import Settings, run_on
from lengthlens.analyses.grading_policies import PolicyComparison, policy_comparison
from lengthlens.analyses.verdicts import Verdicts, verdicts
from lengthlens.data.channel_counts import run_channels_audited
from lengthlens.data.pairing import cell_units, with_derived
from lengthlens.data.runset import RunSet
from lengthlens.data.schema import ARM_KEY, UNIT_KEY
from lengthlens.results import frame, frame_html
from lengthlens.stats.aft import DEFAULT_AFT_RESAMPLES
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Analysis", "analyse", "attribution", "censoring_table"]


@dataclass(frozen=True)
class Analysis:
    """The results behind one report; ``tables`` maps an output name (``cells``, ``arms``, ...) to its DataFrame.

    ``survival`` holds, per dataset, the Kaplan–Meier curves the survival figure draws; ``notes`` what the
    analyses noticed (metrics not computed, logged channel counts that disagree with the texts);
    ``timings`` the seconds of each stage. ``verdicts`` is the decision view (each cell's and rule's
    verdicts); ``grading`` the accuracy of the runs the cells use under the other grading policy
    (None when lengthlens' graders judged none of them).
    """

    runs: RunSet
    cells: CellTable
    tables: dict[str, pd.DataFrame]
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    survival: dict[str, DatasetSurvival] = field(default_factory=dict, repr=False)
    timings: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    verdicts: Verdicts | None = field(default=None, repr=False)
    grading: PolicyComparison | None = field(default=None, repr=False, compare=False)

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def _repr_html_(self) -> str:
        t3 = self.tables.get("table3")
        head = f"<p>{len(self.cells)} cells from {self.runs.table.height} runs.</p>"
        return head + (frame_html(t3, "Table 3") if t3 is not None and not t3.empty else "")


def analyse(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
            ci: Literal["studentized", "percentile", "bca"] = "studentized", confidence_level: float = DEFAULT_CONFIDENCE,
            alphas: Literal["loosest", "all"] = "loosest", n_resamples_aft: int = DEFAULT_AFT_RESAMPLES,
            proposals: bool = True, aft_ci: Literal["sandwich", "bootstrap"] = "sandwich",
            include_small: bool = False, progress: Callable[[str], None] | None = None, workers: int = 1) -> Analysis:
    """Compute every table of the report from loaded runs (nothing is written or printed).

    Parameters
    ----------
    runs : loaded runs (:func:`lengthlens.load`).
    n_resamples, seed, ci, confidence_level : the bootstrap (see :func:`lengthlens.cells`).
    alphas : cells entering Table 3: the loosest alpha per rule and dataset (default), or all.
    n_resamples_aft : resamples for the AFT bootstrap intervals (each one a likelihood fit; only with ``aft_ci="bootstrap"``).
    proposals : aggregate proposals.jsonl (tokens accepted only because of the relaxation) where present.
    aft_ci : AFT intervals: ``sandwich`` (cluster-robust by item, default) or ``bootstrap`` (refits).
    include_small : keep cells with fewer than :data:`~lengthlens.analyses.cells.SMALL_N_ITEMS` items in Table 3.
    progress : called with each stage's name as it starts; ``Analysis.timings`` keeps their seconds.
    workers : worker processes for large inputs (the numbers do not depend on it).

    Returns
    -------
    Analysis
        The cell table, every output table by name, the survival curves and the settings.

    Examples
    --------
    >>> import lengthlens as ll                                  # doctest: +SKIP
    >>> a = ll.analyse(ll.load("runs/"))                         # doctest: +SKIP
    >>> a["table3"]                                              # doctest: +SKIP
    """
    from lengthlens.analyses.extra_tokens import extra_tokens_table
    from lengthlens.analyses.intervention import table4
    from lengthlens.analyses.methods import lossless_check
    from lengthlens.analyses.compare import method_pairs
    from lengthlens.analyses.serving import serving_table
    from lengthlens.analyses.tables import alpha_selected, arms, arms_excluded, table3, table3_by_pair, table3_cells

    stage = _Stages(progress)
    stage("cells, censoring, attribution")
    settings = Settings(n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level)
    paired, disagreements, causes = run_channels_audited(runs.paired)
    analyses = [CellsAnalysis(), CensoringAnalysis(aft_ci, n_resamples_aft), AttributionAnalysis()]
    # Every analysis below uses these pairs: the columns the engine's analyses read, and the texts and
    # sources the lossless check and the extra-token table read.
    needed = [f.removesuffix("_star") for a in analyses for f in a.fields] + ["text", "source", "correct"]
    units = cell_units(paired, needed)
    cell_table, censoring, attribution_cells = run_on(runs, analyses, settings, workers=workers, units=units)
    stage("arms and Table 3")
    cells_df = cell_table.to_frame()
    graded_both = policy_comparison(runs)
    tables: dict[str, pd.DataFrame] = {
        "cells": cells_df, "arms": _with_policy(arms(runs), graded_both),
        "table3": table3(cell_table, alphas=alphas, include_small=include_small) if len(cell_table) else frame([]),
        "alpha_selected": alpha_selected(cells_df), "skipped": runs.skipped.to_pandas(),
    }
    excluded = arms_excluded(runs)
    if not excluded.empty:
        tables["arms_excluded"] = excluded
    # Table 3's choice of cells, small ones kept: what the verdicts and the survival curves speak of.
    chosen = table3_cells(cells_df, alphas, include_small=True) if not cells_df.empty else None
    decision = verdicts(cells_df, chosen) if chosen is not None else None
    if decision is not None:
        tables["verdicts"] = decision.to_frame()
        if cells_df[["target", "draft"]].drop_duplicates().shape[0] > 1:
            tables["table3_pairs"] = table3_by_pair(cell_table, alphas=alphas, include_small=include_small)
    notes = unavailable_notes(cells_df)
    survival: dict[str, DatasetSurvival] = {}
    if not cells_df.empty:
        tables["censoring"] = censoring
        attr = attribution_result(attribution_cells, disagreements, causes,
                                  table3_cells(cells_df, alphas, include_small=include_small))
        tables["attribution"], tables["attribution_summary"] = attr.cells, attr.summary
        notes.extend(attr.disagreement_notes)
        survival = survival_curves(with_derived(runs.paired), pl.from_pandas(chosen[[*ARM_KEY, "complete"]]))
        by_load = serving_table(cells_df)
        if not by_load.empty:  # only where the cells come under several serving conditions
            tables["serving"] = by_load
    stage("lossless check, method pairs")
    for name, df in (("lossless", lossless_check(units, cells_df)),
                     ("methods", method_pairs(runs, n_resamples=n_resamples, seed=seed, ci=ci,
                                              confidence_level=confidence_level))):
        if not df.empty:
            tables[name] = df
    from lengthlens.analyses.drilldown import item_drivers

    drivers = item_drivers(units.filter(pl.col("method").is_in(list(cells_df["method"].unique()))) if not cells_df.empty
                           else units.head(0))
    if not drivers.empty:
        tables["drilldown"] = drivers
    from lengthlens.analyses.time_model import time_model

    tm = time_model(units.filter(~pl.col("method").str.ends_with("_force_commit")))
    if not tm.empty:
        tables["time_model"] = tm
    if not cells_df.empty:
        from lengthlens.analyses.accuracy_length import accuracy_by_length
        from lengthlens.analyses.cost_per_correct import CostPerCorrectAnalysis

        # Its own pass: adding its columns to the cell table's products could move the cell table's last bits.
        (cost,) = run_on(runs, [CostPerCorrectAnalysis()], settings, workers=workers, units=units)
        by_length = accuracy_by_length(units, chosen, confidence_level=confidence_level)
        for name, df in (("cost_per_correct", cost), ("accuracy_length", by_length)):
            if not df.empty:
                tables[name] = df
    stage("Table 4")
    t4 = table4(runs)
    if not t4.empty:
        tables["table4"] = t4
    if proposals:
        stage("extra tokens")
        extra = extra_tokens_table(runs, units.select(*ARM_KEY, *UNIT_KEY, "source", "source_star"))
        if extra is not None:
            tables["extra_tokens"] = extra
    stage.stop()
    settings_out = {"n_resamples": n_resamples, "seed": seed, "ci": ci, "confidence_level": confidence_level,
                    "alphas": alphas, "aft_ci": aft_ci,
                    "n_resamples_aft": min(n_resamples_aft, n_resamples) if aft_ci == "bootstrap" else 0,
                    "include_small": include_small}
    return Analysis(runs=runs, cells=cell_table, tables=tables, settings=settings_out, notes=tuple(notes),
                    survival=survival, timings=stage.times, verdicts=decision, grading=graded_both)


def _with_policy(arms_df: pd.DataFrame, comparison: PolicyComparison | None) -> pd.DataFrame:
    """arms.csv with each arm's accuracy under the other grading policy and the runs whose verdict it changes."""
    if comparison is None or arms_df.empty:
        return arms_df
    extra = comparison.arms.drop("n_regraded").to_pandas()
    return arms_df.merge(extra, on=list(ARM_KEY), how="left")


def attribution(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
                confidence_level: float = DEFAULT_CONFIDENCE, table3_cells: pd.DataFrame | None = None,
                workers: int = 1) -> Attribution:
    """Share of each cell's extra characters that is thinking, with intervals from the cell table's draws.

    Parameters
    ----------
    runs : loaded runs with texts (or logged channel counts).
    n_resamples, seed, confidence_level : the bootstrap (the cell table's draws).
    table3_cells : keys of the cells Table 3 uses: adds summary rows on those cells beside all cells.
    workers : worker processes for large inputs.

    Returns
    -------
    Attribution
        ``cells`` (attribution.csv), ``summary`` and the audits of logged channel counts.

    Examples
    --------
    >>> import lengthlens as ll                                 # doctest: +SKIP
    >>> ll.attribution(ll.load("runs/")).summary                # doctest: +SKIP
    """
    paired, disagreements, causes = run_channels_audited(runs.paired)
    settings = Settings(n_resamples=n_resamples, seed=seed, confidence_level=confidence_level)
    (rows,) = run_on(runs, [AttributionAnalysis()], settings, workers=workers, units=cell_units(paired))
    return attribution_result(rows, disagreements, causes, table3_cells)


def censoring_table(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
                    ci: Literal["studentized", "percentile", "bca"] = "studentized",
                    n_resamples_aft: int = DEFAULT_AFT_RESAMPLES, confidence_level: float = DEFAULT_CONFIDENCE,
                    aft_ci: Literal["sandwich", "bootstrap"] = "sandwich", workers: int = 1,
                    aft_dists: Sequence[str] = DEFAULT_AFT_DISTS) -> pd.DataFrame:
    """censoring.csv: per cell, censored shares, Kaplan–Meier quantiles, and censoring-aware length ratios.

    Parameters
    ----------
    runs : loaded runs.
    n_resamples, seed, ci, confidence_level : the bootstrap (the cell table's draws and interval code).
    n_resamples_aft, aft_ci : the AFT intervals: cluster-robust sandwich from one fit (default), or bootstrap refits.
    workers : worker processes for large inputs.
    aft_dists : the AFT laws fitted: log-normal (default); ``("lognormal", "weibull")`` adds the Weibull fit, whose
        sandwich interval under-covers.

    Returns
    -------
    pandas.DataFrame
        One row per cell whose lengths and censoring are known on every run.

    Examples
    --------
    >>> import lengthlens as ll                                 # doctest: +SKIP
    >>> ll.censoring_table(ll.load("runs/"))                    # doctest: +SKIP
    """
    settings = Settings(n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level)
    (table,) = run_on(runs, [CensoringAnalysis(aft_ci, n_resamples_aft, tuple(aft_dists))], settings, workers=workers)
    return table


class _Stages:
    """Names each stage of :func:`analyse` to ``progress`` as it starts and keeps its seconds."""

    def __init__(self, progress: Callable[[str], None] | None):
        self.say = progress or (lambda _stage: None)
        self.times: dict[str, float] = {}
        self._name: str | None = None
        self._t0 = 0.0

    def __call__(self, name: str) -> None:
        self.stop()
        self.say(name)
        self._name, self._t0 = name, time.perf_counter()

    def stop(self) -> None:
        if self._name is not None:
            self.times[self._name] = time.perf_counter() - self._t0
            self._name = None


def unavailable_notes(cells_df: pd.DataFrame) -> list[str]:
    """One note per distinct reason why metrics were left empty, with how many cells it concerns."""
    if cells_df.empty or "unavailable" not in cells_df.columns:
        return []
    reasons = cells_df["unavailable"].fillna("")
    reasons = reasons[reasons != ""].str.replace(r" on \d+ of \d+ paired runs", "", regex=True)
    return [f"not computed in {n} of {len(cells_df)} cells (inputs missing from the logs): {why}"
            for why, n in reasons.value_counts(sort=False).items()]
