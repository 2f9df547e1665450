"""The analyses of the report, in the order :func:`~lengthlens.analyses.analyse.analyse` runs them: one line each.

Each is a :class:`~lengthlens.analyses.outputs.ReportAnalysis` declared in its own module (its tables,
columns, section and figures); an analysis reads what the ones before it produced (the cells come
first). Adding one is its module and one line in :data:`ANALYSES`; :func:`extended` adds one for a
``with`` block (a notebook, a test).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lengthlens.analyses.accuracy_length import AccuracyLengthReport
from lengthlens.analyses.attribution import AttributionReport
from lengthlens.analyses.cells import CellsReport
from lengthlens.analyses.censoring import CensoringReport
from lengthlens.analyses.compare import MethodPairsReport
from lengthlens.analyses.cost_per_correct import CostPerCorrectReport
from lengthlens.analyses.drilldown import DrilldownReport
from lengthlens.analyses.extra_tokens import ExtraTokensReport
from lengthlens.analyses.intervention import Table4Report
from lengthlens.analyses.methods import LosslessReport
from lengthlens.analyses.outputs import ReportAnalysis, Section, Table
from lengthlens.analyses.rules import RulesReport
from lengthlens.analyses.serving import ServingReport
from lengthlens.analyses.specbench_speedup import SpecBenchSpeedupReport
from lengthlens.analyses.tables import ArmsReport, SkippedReport, Table3Report
from lengthlens.analyses.time_model import TimeModelReport
from lengthlens.analyses.verdicts import VerdictsReport

__all__ = ["ANALYSES", "analyses", "extended", "section", "table"]

#: The analyses of the report, in the order they run: adding one is its line here.
ANALYSES: tuple[ReportAnalysis, ...] = (
    CellsReport(),
    SkippedReport(),
    ArmsReport(),
    Table3Report(),
    VerdictsReport(),
    RulesReport(),
    CensoringReport(),
    AttributionReport(),
    ServingReport(),
    LosslessReport(),
    SpecBenchSpeedupReport(),
    MethodPairsReport(),
    DrilldownReport(),
    TimeModelReport(),
    CostPerCorrectReport(),
    AccuracyLengthReport(),
    Table4Report(),
    ExtraTokensReport(),
)

_CURRENT = [ANALYSES]


def analyses() -> tuple[ReportAnalysis, ...]:
    """The analyses in use: :data:`ANALYSES`, or those :func:`extended` put in place."""
    return _CURRENT[0]


@contextmanager
def extended(*more: ReportAnalysis) -> Iterator[tuple[ReportAnalysis, ...]]:
    """Run the report with more analyses (after the built-in ones) while the ``with`` block runs.

    Their tables are written, listed among the report's files and documented, and their sections shown,
    as the built-in ones'. For an analysis of your own for good, add its line to :data:`ANALYSES`.

    Examples
    --------
    >>> from lengthlens.analyses.outputs import ReportAnalysis
    >>> class Nothing(ReportAnalysis):
    ...     name = "nothing"
    ...     def run(self, ctx):
    ...         return {}
    >>> with extended(Nothing()) as now:
    ...     now[-1].name
    'nothing'
    """
    names = {a.name for a in _CURRENT[0]}
    clash = [a.name for a in more if a.name in names]
    if clash:
        raise ValueError(f"analyses named {clash} are registered already")
    previous = _CURRENT[0]
    _CURRENT[0] = (*previous, *more)
    try:
        yield _CURRENT[0]
    finally:
        _CURRENT[0] = previous


def table(name: str, among: tuple[ReportAnalysis, ...] | None = None) -> Table | None:
    """The declaration of the table ``name`` (None: no analysis declares it)."""
    return next((t for a in (among or analyses()) for t in a.outputs.tables if t.name == name), None)


def section(sid: str, among: tuple[ReportAnalysis, ...] | None = None) -> Section | None:
    """The declaration of the section ``sid`` (None: no analysis declares it)."""
    return next((s for a in (among or analyses()) for s in a.outputs.sections if s.id == sid), None)
