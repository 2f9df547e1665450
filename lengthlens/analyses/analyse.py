"""Everything a report shows, computed once from a RunSet: every registered analysis, in order.

:func:`analyse` derives the runs once (``RunSet.derived``), pairs the fields every analysis reads once,
runs the resampled parts of all analyses in one pass of the engine, then each analysis of the registry
(:mod:`lengthlens.analyses.registry`) in order; an analysis writes only the tables it declares
(:mod:`lengthlens.analyses.outputs`). It computes; it writes no sentence (the report's wording is
:mod:`lengthlens.report.wording`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from lengthlens.analyses import registry
from lengthlens.analyses.attribution import Attribution, AttributionAnalysis, attribution_result
from lengthlens.analyses.cells import CellTable, unavailable_notes  # noqa: F401 (unavailable_notes: public here too)
from lengthlens.analyses.censoring import DEFAULT_AFT_DISTS, CensoringAnalysis, DatasetSurvival
from lengthlens.analyses.engine import Settings, run_on
from lengthlens.analyses.grading_policies import PolicyComparison
from lengthlens.analyses.outputs import Context, ReportAnalysis, undeclared_columns
from lengthlens.analyses.rules import DEFAULT_MARGIN_PP, RuleTable
from lengthlens.analyses.verdicts import Verdicts
from lengthlens.data.runset import RunSet
from lengthlens.results import frame_html
from lengthlens.stats.aft import DEFAULT_AFT_RESAMPLES
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED

if TYPE_CHECKING:
    import pandas as pd

    from lengthlens.execution import Pool

__all__ = ["AnalysisResult", "UndeclaredOutput", "analyse", "attribution", "censoring_table"]


@dataclass(frozen=True)
class AnalysisResult:
    """The results behind one report; ``tables`` maps an output name (``cells``, ``arms``, ...) to its DataFrame.

    ``survival`` holds, per dataset, the Kaplan–Meier curves the survival figure draws; ``notes`` what the
    analyses noticed (metrics not computed, logged channel counts that disagree with the texts);
    ``timings`` the seconds of each stage. ``verdicts`` is the decision view (each cell's and rule's
    verdicts); ``grading`` the accuracy of the runs the cells use under the other grading policy
    (None when lengthlens' graders judged none of them); ``analyses`` the analyses that ran (their
    declarations are what the report shows); ``results`` what else they computed, by name.
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
    analyses: tuple[ReportAnalysis, ...] = field(default=(), repr=False, compare=False)
    results: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: Each rule's cells pooled across datasets, with its verdicts (rules.csv); None without cells.
    rules: RuleTable | None = field(default=None, repr=False)

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def _repr_html_(self) -> str:
        t3 = self.tables.get("table3")
        head = f"<p>{len(self.cells)} cells from {self.runs.table.height} runs.</p>"
        return head + (frame_html(t3, "Table 3") if t3 is not None and not t3.empty else "")


def __getattr__(name: str) -> Any:
    if name == "Analysis":  # the old name of AnalysisResult, kept for one release
        import warnings

        warnings.warn("lengthlens.analyses.analyse.Analysis is now AnalysisResult; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return AnalysisResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class UndeclaredOutput(RuntimeError):
    """An analysis wrote a table, or a column, that it does not declare."""


def analyse(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
            ci: Literal["studentized", "percentile", "bca"] = "studentized", confidence_level: float = DEFAULT_CONFIDENCE,
            alphas: Literal["loosest", "all"] = "loosest", n_resamples_aft: int = DEFAULT_AFT_RESAMPLES,
            proposals: bool = True, aft_ci: Literal["sandwich", "bootstrap"] = "sandwich",
            include_small: bool = False, progress: Callable[[str], None] | None = None, workers: int = 1,
            margin_pp: float = DEFAULT_MARGIN_PP, analyses: Sequence[ReportAnalysis] | None = None,
            pool: Pool | None = None) -> AnalysisResult:
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
    progress : called with each stage's name as it starts; ``AnalysisResult.timings`` keeps their seconds.
    workers : worker processes for large inputs (the numbers do not depend on it).
    margin_pp : the rule verdicts' non-inferiority margin in points (:func:`lengthlens.rules`).
    analyses : the analyses to run, in order (default: :func:`lengthlens.analyses.registry.analyses`; the
        cells come first, every other analysis reads them).
    pool : worker processes already started (:class:`lengthlens.execution.Pool`, e.g. the report's figure
        workers): the resampling runs on them and this process instead of spawning ``workers`` processes of its own.

    Returns
    -------
    AnalysisResult
        The cell table, every output table by name, the survival curves and the settings.

    Raises
    ------
    UndeclaredOutput
        When an analysis writes a table or a column it does not declare.

    Examples
    --------
    >>> import lengthlens as ll                                  # doctest: +SKIP
    >>> a = ll.analyse(ll.load("runs/"))                         # doctest: +SKIP
    >>> a["table3"]                                              # doctest: +SKIP
    """
    steps = tuple(registry.analyses() if analyses is None else analyses)
    stage = _Stages(progress)
    settings = Settings(n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level)
    options = {"alphas": alphas, "include_small": include_small, "proposals": proposals, "aft_ci": aft_ci,
               "n_resamples_aft": n_resamples_aft, "workers": workers,
               "margin_pp": margin_pp}
    ctx = Context(runs=runs, derived=runs.derived, units=None, settings=settings, options=options)  # type: ignore[arg-type]
    resampled = [(step, tuple(step.resampled(ctx))) for step in steps]
    stage(", ".join(step.name for step, parts in resampled if parts) or "pairs")
    # Every analysis' fields, paired once: the engine's analyses read theirs on both sides (``_star``).
    fields = [f.removesuffix("_star") for _, parts in resampled for a in parts for f in a.fields]
    ctx.units = runs.derived.units([*fields, *(f for step in steps for f in step.reads)])
    engine = [a for _, parts in resampled for a in parts]
    if engine:
        out = iter(run_on(runs, engine, settings, workers=workers, units=ctx.units, pool=pool))
        ctx.resampled = {step.name: [next(out) for _ in parts] for step, parts in resampled}
    for step in steps:
        if (step.stage or step.name) != stage.current:
            stage(step.stage or step.name)
        produced = dict(step.run(ctx))
        _check_declared(step, produced)
        ctx.tables.update(produced)
    stage.stop()
    settings_out = {"n_resamples": n_resamples, "seed": seed, "ci": ci, "confidence_level": confidence_level,
                    "alphas": alphas, "aft_ci": aft_ci,
                    "n_resamples_aft": min(n_resamples_aft, n_resamples) if aft_ci == "bootstrap" else 0,
                    "include_small": include_small, "margin_pp": margin_pp}
    return AnalysisResult(runs=runs, cells=ctx.results["cells"], tables=ctx.tables, settings=settings_out,
                          notes=tuple(ctx.notes), survival=ctx.results.get("survival", {}), timings=stage.times,
                          verdicts=ctx.results.get("verdicts"), grading=ctx.results.get("grading"), analyses=steps,
                          results=dict(ctx.results), rules=ctx.results.get("rules"))


def _check_declared(step: ReportAnalysis, produced: Mapping[str, pd.DataFrame]) -> None:
    """Refuse a table, or a column, that the analysis does not declare: every output is listed, documented and shown."""
    declared = {t.name: t for t in step.outputs.tables}
    for name, df in produced.items():
        if name not in declared:
            raise UndeclaredOutput(f"analysis {step.name!r} wrote table {name!r}, which its outputs do not declare "
                                   f"(declared: {', '.join(declared) or 'none'})")
        extra = undeclared_columns(declared[name], list(df.columns))
        if extra:
            raise UndeclaredOutput(f"analysis {step.name!r} wrote columns {extra} in {name}.csv, which its outputs "
                                   "do not declare")


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
    _, disagreements, causes = runs.derived.split
    settings = Settings(n_resamples=n_resamples, seed=seed, confidence_level=confidence_level)
    fields = [f.removesuffix("_star") for f in AttributionAnalysis.fields]
    (rows,) = run_on(runs, [AttributionAnalysis()], settings, workers=workers, units=runs.derived.units(fields))
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
        self.current: str | None = None
        self._t0 = 0.0

    def __call__(self, name: str) -> None:
        self.stop()
        self.say(name)
        self._name = self.current = name
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self._name is not None:
            self.times[self._name] = time.perf_counter() - self._t0
            self._name = None
