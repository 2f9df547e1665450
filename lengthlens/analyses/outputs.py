"""What an analysis declares: the tables it writes (with every column described), its report section and its figures.

An analysis of the report (:class:`ReportAnalysis`) is one class with an :class:`Outputs` declaration
and a ``run`` method; :func:`lengthlens.analyses.analyse.analyse` runs every registered one
(:mod:`lengthlens.analyses.registry`) in order. From the declarations come the report's list of
files, its sections and their order, its column labels and the file table of docs/outputs.md; a
table or column an analysis writes without declaring it is an error.

Declarations hold no report code (the report is a later stage): a figure is named by its key in
:data:`lengthlens.report.plots.FIGURES`, a section by its id and position.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl

    from lengthlens.analyses.engine import Settings
    from lengthlens.data.pairing import Derived
    from lengthlens.data.runset import RunSet

__all__ = ["Column", "Context", "Figure", "KEY_COLUMNS", "Outputs", "ReportAnalysis", "Section", "Table", "expand", "keys",
           "undeclared_columns"]

_BRACES = re.compile(r"\{([^{}]*)\}")


def expand(pattern: str) -> tuple[str, ...]:
    """Every name a pattern stands for: each ``{a,b}`` is one of its comma-separated parts (``{,x}``: nothing or x).

    Examples
    --------
    >>> expand("km_{median,q75}{,_lo}")
    ('km_median', 'km_median_lo', 'km_q75', 'km_q75_lo')
    """
    m = _BRACES.search(pattern)
    if m is None:
        return (pattern,)
    head, tail = pattern[:m.start()], pattern[m.end():]
    return tuple(name for part in m.group(1).split(",") for name in expand(head + part + tail))


@dataclass(frozen=True)
class Column:
    """One column of an output table: its name (or a family of names, see :func:`expand`) and what it holds.

    ``label`` set: the column is shown in the report's table (in declaration order), under that header, written
    as ``fmt`` (:func:`lengthlens.report.columns.fmt`). ``interval``: ``<stem>_lo`` and ``<stem>_hi`` come with it
    (``stem`` defaults to the name) and the report shows ``[lo, hi]`` under the value. ``better`` (``lower`` or
    ``higher``): the report colours the value when its interval lies wholly on one side of ``reference``;
    ``tone``: another colouring (``loss_if_positive``, ``win_if_positive``, ``verdict``, ``partial``).
    ``graded`` (count column, of column): the value is an accuracy over that many graded rows of so many; the report
    writes "not graded" where none is and "k of n graded" (marked partial) where fewer than half are, never the number.
    ``open_at`` (a budget column): a quantile or upper limit missing while the lower limit is known lies beyond what
    the budget lets one see; the report writes "> budget" (an open interval), not a missing value.
    """

    name: str
    description: str
    label: str | None = None
    fmt: str = "auto"
    interval: bool = False
    stem: str | None = None
    better: str | None = None
    reference: float = 1.0
    tone: str | None = None
    graded: tuple[str, str] | None = None
    open_at: str | None = None

    def names(self) -> tuple[str, ...]:
        """Every column name this declaration covers (the interval's limits included)."""
        base = expand(self.name)
        if not self.interval:
            return base
        stems = expand(self.stem) if self.stem else base
        return (*base, *(f"{s}_{end}" for s in stems for end in ("lo", "hi")))

    @property
    def shown(self) -> bool:
        return self.label is not None


#: The columns that name an arm or a cell, as every table that has them describes them: (description, report label).
KEY_COLUMNS: dict[str, tuple[str, str]] = {
    "target": ("the target model", "target"),
    "draft": ("the draft model (empty for plain autoregressive decoding)", "draft"),
    "dataset": ("the dataset (benchmark folder)", "dataset"),
    "method": ("the relaxed rule or speculative method", "rule"),
    "params": ("its parameters as logged (e.g. alpha0.35)", "params"),
    "serving": ("the serving condition the arm and its baseline ran under (c=8: concurrency, rate=4/s, bs=16: batch "
                "size, gpu=…), empty when none is logged", "serving"),
    "alpha": ("the rule's alpha, parsed from params", "α"),
}


def keys(*shown: str, also: Sequence[str] = ("target", "draft", "dataset", "method", "params", "serving", "alpha")
         ) -> tuple[Column, ...]:
    """Key columns: those ``shown`` in the report's table first (in that order, as text), then the rest of ``also``."""
    return (*(Column(k, KEY_COLUMNS[k][0], label=KEY_COLUMNS[k][1], fmt="text") for k in shown),
            *(Column(k, KEY_COLUMNS[k][0]) for k in also if k not in shown))


@dataclass(frozen=True)
class Table:
    """One output table, OUT/<name>.csv: what a row is, its columns, when it is written and its caption in the report.

    ``columns`` may be a function returning them (cells.csv's come from the metric registry in use).
    """

    name: str
    per: str
    columns: tuple[Column, ...] | Callable[[], tuple[Column, ...]]
    written: str = ""
    caption: str = ""

    def all_columns(self) -> tuple[Column, ...]:
        return tuple(self.columns()) if callable(self.columns) else tuple(self.columns)

    def names(self) -> frozenset[str]:
        """Every column name the table may hold."""
        return frozenset(n for c in self.all_columns() for n in c.names())

    @property
    def file(self) -> str:
        return f"{self.name}.csv"


@dataclass(frozen=True)
class Section:
    """One section of the report (HTML and PDF alike): id, title, the sentence under the title, its place.

    ``order`` places it among the others (the rule verdicts −10, provenance 0, verdicts 10, Table 3 20, cells 40, the analyses' own
    sections 50–69, more figures 80, methods 90, the arms appendix 100). ``tables``: the tables it shows, in
    order (None: every table of the analysis; ``()``: none, a section of figures). ``landscape``: on landscape pages in the PDF (wide tables);
    ``new_page``: starts on a new page when printed; ``always``: shown even when its tables were not written
    (the section then says why).
    """

    id: str
    title: str
    intro: str = ""
    order: float = 70.0
    tables: tuple[str, ...] | None = None
    landscape: bool = True
    new_page: bool = True
    always: bool = False


@dataclass(frozen=True)
class Figure:
    """One figure the report draws from an analysis' results: its key in ``lengthlens.report.plots.FIGURES``.

    ``section``: the section it is placed in when that section is shown (else under "More figures").
    ``needs``: cells.csv columns that must all be finite in at least one cell (else it is left out rather
    than drawn empty); ``when``: any further condition on the tables; ``per``: ``dataset`` draws one figure
    per dataset; ``wide``: drawn at the page's full width; ``cost``: how heavy it is to draw, against 1.
    """

    key: str
    section: str | None = None
    needs: tuple[str, ...] = ()
    when: Callable[[Mapping[str, pd.DataFrame]], bool] | None = None
    per: str | None = None
    wide: bool = False
    #: A rough weight of drawing it (its panels and marks): the heaviest start first when processes share the figures.
    cost: float = 1.0


@dataclass(frozen=True)
class Outputs:
    """Everything one analysis puts in the report: its tables, its sections (usually one, or none) and its figures."""

    tables: tuple[Table, ...] = ()
    sections: tuple[Section, ...] = ()
    figures: tuple[Figure, ...] = ()

    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)


@dataclass
class Context:
    """What every analysis of :func:`~lengthlens.analyses.analyse.analyse` reads, and what the earlier ones produced.

    ``runs``: the loaded runs; ``derived``: their derived table (:attr:`lengthlens.data.runset.RunSet.derived`:
    every run with ``l_bar`` and ``censored``, the ok runs split into channels); ``units``: every cell's
    paired runs (one row per relaxed run and its baseline run, the baseline's columns with ``_star``) with
    the fields every analysis reads; ``settings``: the bootstrap; ``options``: the other arguments of
    ``analyse()``. ``tables``, ``results`` and ``notes`` fill up as the analyses run (``results`` holds
    what is not a table: ``cells`` the CellTable, ``verdicts``, ``survival``, ``grading``, ``table3_cells``);
    ``resampled`` each analysis' results from the engine's one pass, by analysis name.
    """

    runs: RunSet
    derived: Derived
    units: pl.DataFrame
    settings: Settings
    options: Mapping[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    resampled: dict[str, list[Any]] = field(default_factory=dict)


class ReportAnalysis:
    """One analysis of the report: declares its outputs and computes its tables from the :class:`Context`.

    ``name``: how progress and errors name it; ``stage``: the progress line it is timed under (default its name;
    analyses in a row with one stage share the line). ``outputs``: its :class:`Outputs`. ``reads``: the run fields
    it reads from ``ctx.units`` (both sides are paired; the report pairs every analysis' fields once).
    ``resampled(ctx)``: analyses on the engine (:mod:`lengthlens.analyses.engine`) to run in the one
    resampling pass shared by all, their results in ``ctx.resampled[name]``; ``run(ctx)``: its tables by
    name (a table left out was not written). Register an instance in :mod:`lengthlens.analyses.registry`.
    """

    name: ClassVar[str] = ""
    stage: ClassVar[str] = ""
    outputs: ClassVar[Outputs] = Outputs()
    reads: ClassVar[tuple[str, ...]] = ()

    def resampled(self, ctx: Context) -> Sequence[Any]:
        return ()

    def run(self, ctx: Context) -> Mapping[str, pd.DataFrame]:
        raise NotImplementedError


def undeclared_columns(table: Table, columns: Sequence[str]) -> list[str]:
    """The columns of a written table that its declaration does not cover."""
    known = table.names()
    return [c for c in columns if c not in known]
