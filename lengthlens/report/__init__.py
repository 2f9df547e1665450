"""Write an AnalysisResult to disk: CSV tables, one self-contained HTML report, the same report as PDF, LaTeX tables.

``write_report(analysis, out)`` is what ``lengthlens report`` calls. The report is one model
(:mod:`lengthlens.report.model`: sections in order, each a list of blocks, the figures drawn once)
rendered twice: as HTML by ``templates/report.html.j2`` (inline CSS and SVG, nothing loaded from the
network, no JavaScript dependency) and as PDF by Typst (:mod:`lengthlens.report.typeset`), a paper's
appendix: publication tables, figures at full width, the per-cell tables on landscape pages.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

# pandas, jinja2, the column formatters and the analyses are imported where they are used, so that the
# command line's ``snapshot``/``check`` parsers (in this package) load without them and ``lengthlens --help``
# is instant.
if TYPE_CHECKING:
    from jinja2 import Environment

    from lengthlens.analyses.analyse import AnalysisResult
    from lengthlens.execution import Pool

__all__ = ["REPORT_FILES", "Written", "figure_svgs", "figures", "render_html", "render_pdf", "report_files", "write_csvs",
           "write_latex", "write_report"]

#: Files a report writes besides its tables' CSVs (``--latex`` adds the .tex files).
DOCUMENTS = ("report.html", "report.pdf", "table3.tex", "table4.tex", "attribution.tex")


def report_files() -> frozenset[str]:
    """Every file a report may write: the CSV of every table the registered analyses declare, and the documents. What
    counts as an earlier report's in an output folder."""
    from lengthlens.analyses import registry

    return frozenset({*(t.file for a in registry.analyses() for t in a.outputs.tables), *DOCUMENTS})


def __getattr__(name: str) -> Any:
    if name == "REPORT_FILES":  # computed from the registry in use (an analysis added at run time included)
        return report_files()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _env() -> Environment:
    from jinja2 import Environment, PackageLoader, select_autoescape

    from lengthlens.report.columns import fmt

    env = Environment(loader=PackageLoader("lengthlens", "templates"), autoescape=select_autoescape(["html", "j2"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = fmt
    env.filters["inline"] = inline_html
    return env


def inline_html(text: str) -> Markup:
    """A sentence of :mod:`~lengthlens.report.wording` as HTML: escaped, `backticks` as <code>."""
    from markupsafe import escape

    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an odd backtick is a character, not markup
        return escape(text)
    return Markup("").join(Markup("<code>{}</code>").format(p) if k % 2 else escape(p) for k, p in enumerate(parts))


def write_csvs(analysis: AnalysisResult, out: Path) -> list[Path]:
    """Write every table of the analysis as OUT/<name>.csv; return the paths.

    A text cell a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``) gets a
    leading apostrophe: names come from the logs.
    """
    from lengthlens.report.output import neutralize_csv_text

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, df in analysis.tables.items():
        path = out / f"{name}.csv"
        text = [c for c in df.columns if df[c].dtype == object]
        safe = df.assign(**{c: df[c].map(neutralize_csv_text) for c in text}) if text else df
        safe.to_csv(path, index=False, float_format="%.10g")
        written.append(path)
    return written


def figures(analysis: AnalysisResult) -> dict[str, Any]:
    """The report's figures as matplotlib Figures, keyed as in :data:`lengthlens.report.plots.FIGURES` (absent data: left out).

    The forest plot comes as one figure per dataset, keyed ``lambda_forest:<dataset>``.
    """
    from lengthlens.report.model import figure_jobs

    return {key: make() for key, _spec, make in figure_jobs(analysis)}


def figure_svgs(analysis: AnalysisResult) -> dict[str, str]:
    """The report's figures as SVG strings (:func:`~lengthlens.report.plot_style.to_svg`), keyed as by :func:`figures`."""
    from lengthlens.report.plot_style import to_svg
    from lengthlens.report.model import figure_jobs

    return {key: to_svg(make()) for key, _spec, make in figure_jobs(analysis)}


def _figure_blocks(analysis: AnalysisResult, sections: Any = None) -> dict[str, dict[str, Any]]:
    """The figures drawn once, as the model's blocks (SVG, caption, number, section): :func:`lengthlens.report.model.figure_blocks`."""
    from lengthlens.report.model import figure_blocks

    return figure_blocks(analysis)


def render_html(analysis: AnalysisResult, *, with_figures: bool = True, generated: str | None = None,
                timings: dict[str, float] | None = None, progress: Callable[[str], None] | None = None,
                figure_blocks: Mapping[str, dict[str, Any]] | None = None, model: dict[str, Any] | None = None) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no network); ``progress`` hears "figures", "report.html".

    ``figure_blocks`` are figures already drawn (:func:`lengthlens.report.model.figure_blocks`), ``model`` the report's
    model already built (:func:`lengthlens.report.model.build`), e.g. for the PDF too.
    """
    from lengthlens.report import model as M

    say = progress or (lambda _stage: None)
    t0 = time.perf_counter()
    if model is None:
        if with_figures and figure_blocks is None:
            say("figures")
            figure_blocks = M.figure_blocks(analysis)
        model = M.build(analysis, figure_blocks if with_figures else None, generated=generated)
    if timings is not None:
        timings["figures"] = time.perf_counter() - t0
    say("report.html")
    html = html_of(model)
    if timings is not None:
        timings["html"] = time.perf_counter() - t0
    return html


def html_of(model: dict[str, Any]) -> str:
    """The HTML renderer: the model through ``templates/report.html.j2`` (each block type one macro)."""
    from lengthlens.report.model import for_medium

    sections = [{**s, "blocks": for_medium(s["blocks"], "html")} for s in model["sections"]]
    return _env().get_template("report.html.j2").render(m={**model, "sections": sections})


def render_pdf(analysis: AnalysisResult, path: Path, *, figure_blocks: Mapping[str, dict[str, Any]] | None = None,
               generated: str | None = None, model: dict[str, Any] | None = None) -> Path:
    """Typeset the report as a PDF with Typst (:mod:`lengthlens.report.typeset`); ``figure_blocks``, ``model`` as for the HTML.

    Examples
    --------
    >>> render_pdf(ll.analyse(ll.load("runs/")), Path("report.pdf"))   # doctest: +SKIP
    """
    from lengthlens.report import model as M
    from lengthlens.report.typeset import render_pdf as typeset

    if model is None:
        model = M.build(analysis, M.figure_blocks(analysis) if figure_blocks is None else figure_blocks, generated=generated)
    return typeset(model, path)


def write_latex(analysis: AnalysisResult, out: Path) -> list[Path]:
    """booktabs LaTeX tables (table3.tex, table4.tex, attribution.tex): :func:`lengthlens.report.latex.write_latex`."""
    from lengthlens.report.latex import write_latex as _write_latex

    return _write_latex(analysis, out)


def _write(job: tuple[str, AnalysisResult, dict[str, Any], Path]) -> tuple[list[str], dict[str, str]]:
    """Write one part of the report into the folder: the tables, report.html or report.pdf. Returns the files written
    and, for a PDF that could not be typeset, one line why (the rest of the report stands; any other failure is the
    report's)."""
    name, analysis, model, folder = job
    if name == "tables":
        return [p.name for p in write_csvs(analysis, folder)], {}
    if name == "report.html":
        (folder / name).write_text(render_html(analysis, model=model), encoding="utf-8")
        return [name], {}
    from lengthlens.report.output import disk_error

    try:
        render_pdf(analysis, folder / name, model=model)
    except Exception as exc:  # noqa: BLE001 - the PDF is one view of the report: whatever stops it, the rest stands
        if disk_error(exc):  # a full or failing disk: no part of the report stands
            raise OSError(getattr(exc, "errno", None) or errno.ENOSPC, f"{name} could not be written ({exc})",
                          str(folder)) from None
        (folder / name).unlink(missing_ok=True)
        return [], {name: f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
    return [name], {}


@dataclass(frozen=True)
class Written:
    """What :func:`write_report` wrote: the files, the earlier report's files it replaced without writing them again,
    and the outputs asked for that could not be made (name -> one line why), the rest of the report standing."""

    files: tuple[Path, ...]
    dropped: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)

    def __iter__(self):
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


def write_report(analysis: AnalysisResult, out: str | Path, *, pdf: bool = True, latex: bool = False, figures: bool = True,
                 progress: Callable[[str], None] | None = None, workers: int | Pool = 1) -> Written:
    """Write the CSVs, report.html and (by default) report.pdf into ``out``, and LaTeX tables with ``latex``.

    The report is written whole or not at all: into a temporary folder beside ``out``, which then takes
    its place (:mod:`lengthlens.report.output`); an earlier report's files that this one does not write
    are gone, files of the user's in ``out`` stay. A PDF that cannot be printed is listed in ``failed``
    and the rest of the report stands.

    Parameters
    ----------
    analysis : what :func:`lengthlens.analyse` computed.
    out : the output folder (created if missing).
    pdf, latex, figures : write report.pdf; the booktabs tables; the figures.
    progress : called with the name of each stage as it starts (tables, figures, the documents, LaTeX).
    workers : the processes that draw the figures, this one included (1: nothing is spawned), or a
        :class:`~lengthlens.execution.Pool` started earlier (e.g. while the analysis ran). The same bytes either way.

    Returns
    -------
    Written
        The files written (iterating gives their paths), what was dropped and what failed.

    Examples
    --------
    >>> import lengthlens as ll                                          # doctest: +SKIP
    >>> write_report(ll.analyse(ll.load("runs/")), "out/", pdf=False)   # doctest: +SKIP
    """
    from contextlib import ExitStack

    from lengthlens.execution import Pool, map_ordered
    from lengthlens.report import model as M
    from lengthlens.report.context import generated_now
    from lengthlens.report.output import report_folder

    out = Path(out)
    say = progress or (lambda _stage: None)
    failed: dict[str, str] = {}
    with report_folder(out, report_files(), inputs=analysis.runs.sources) as folder:
        tmp = folder.path
        figs: dict[str, dict[str, Any]] = {}
        with ExitStack() as stack:
            if figures:
                say("figures")
                pool = workers if isinstance(workers, Pool) else stack.enter_context(Pool(workers, warm=M.warm_up))
                # The workers draw while this process builds the model (which does not read the figures' SVG), then
                # this process joins them.
                figs, finish = M.start_figures(analysis, pool)
            model = M.build(analysis, figs, generated=generated_now())
            if figures:
                finish()
        # The tables and the two renderers of the one model are written at once: Typst typesets on a thread of its
        # own (it does not hold the interpreter) while the CSVs and the HTML are written.
        jobs = [(name, analysis, model, tmp) for name in ("tables", "report.html", *(["report.pdf"] if pdf else []))]
        say(", ".join(["tables (CSV)", *(name for name, *_ in jobs[1:])]))
        names: list[str] = []
        for written, why in map_ordered(_write, jobs, workers=len(jobs), threads=True):
            names += written
            failed.update(why)
        if latex:
            say("LaTeX")
            names += [p.name for p in write_latex(analysis, tmp)]
    return Written(files=tuple(out / n for n in names), dropped=tuple(folder.dropped), failed=failed)
