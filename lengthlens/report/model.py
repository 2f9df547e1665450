"""The report as one model, assembled once: sections in order, each a list of blocks; two renderers draw it.

:func:`build` turns an :class:`~lengthlens.analyses.analyse.AnalysisResult` and its figures into plain
data: the document's head (title, headline, warning boxes, cards) and its sections, ordered by the
declarations of the analyses that ran (:mod:`lengthlens.analyses.outputs`) and the report's own
(provenance, more figures, methods, limitations). Tables arrive formatted and coloured (the same
:class:`~lengthlens.report.columns.Col` specs for both documents), figures as SVG. ``report.html.j2``
renders the model as HTML, ``report.typ`` (via :mod:`lengthlens.report.typeset`) as PDF; each draws
every block type one way and decides nothing about content.

Blocks (dicts with a ``type``): ``paragraph`` (text with `code` spans; ``muted``, and ``aside``: a
sentence for the screen only), ``subheading`` (``level`` 3 or 4, optional ``id``), ``table``
(``columns``: label, left, ci, title; ``rows``: ``row``/``total`` with cells (value, interval, tone),
or ``group`` with text and count; ``caption``, ``notes``; layout hints ``css``, ``size``, ``full``,
``fit``), ``collapsible`` (``summary``, ``count``, ``open``, ``blocks``: on paper a subheading and
its blocks), ``figure`` (``id``, ``number``, ``caption``, ``svg``, ``wide``), ``list`` (``items``,
``css``, ``item_css``), ``terms``, ``definitions``, ``controls`` (open/close buttons). A block with
``media`` (``html`` or ``pdf``) belongs to that document only. A section: ``id``, ``title``,
``blocks``, ``landscape``, ``new_page``, ``title_in_caption`` (its first table's caption says its
title: the PDF prints no heading, the HTML no caption).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from lengthlens.analyses.analyse import AnalysisResult
    from lengthlens.analyses.outputs import Figure, ReportAnalysis, Section
    from lengthlens.execution import Pool
    from lengthlens.report.columns import Col

__all__ = ["BUILDERS", "REPORT_SECTIONS", "Block", "FigureData", "build", "caption", "collapsible", "draw", "figure_blocks",
           "figure_data", "figure_jobs", "figure_specs", "for_medium", "grouped", "paragraph", "section_specs",
           "start_figures", "subheading", "table"]

Block = dict[str, Any]


def _report_sections() -> tuple[Section, ...]:
    from lengthlens.analyses.outputs import Section

    return (Section("provenance", "Provenance", order=0, landscape=False, new_page=False, always=True),
            Section("figures", "More figures", order=80, landscape=False),
            Section("methodology", "Methods", order=90, landscape=False, always=True),
            Section("limitations", "Limitations", order=95, landscape=False, new_page=False, always=True))


#: The report's own sections, beside those the analyses declare (their ``order`` places them among those).
REPORT_SECTIONS = _report_sections()


# ------------------------------------------------------------------------------------------------
# Blocks
# ------------------------------------------------------------------------------------------------

def paragraph(text: str, *, muted: bool = False, aside: str = "", media: str | None = None) -> Block:
    """A paragraph (`code` spans between backticks); ``aside``: a sentence for the screen only."""
    b: Block = {"type": "paragraph", "text": str(text), "muted": muted, "aside": aside}
    return {**b, "media": media} if media else b


def subheading(text: str, level: int = 3, *, id: str = "") -> Block:  # noqa: A002 - the HTML attribute
    return {"type": "subheading", "text": str(text), "level": level, "id": id}


def collapsible(summary: str, blocks: list[Block], *, count: str = "", open: bool = False,  # noqa: A002
                media: str | None = None) -> Block:
    """Blocks under a summary line: a collapsible block on screen, a subheading on paper."""
    b: Block = {"type": "collapsible", "summary": summary, "count": count, "open": open, "blocks": blocks}
    return {**b, "media": media} if media else b


#: Columns that say which row is which: those of them that lead a table stay in sight on screen as it scrolls sideways.
ROW_KEYS = frozenset({"target", "draft", "dataset", "method", "params", "serving"})


def _columns(cols: Sequence[Col]) -> list[dict[str, Any]]:
    """Each column's header and alignment (text to the left, the verdicts' words too; numbers to the right) and
    whether it is one of the key columns that lead the table."""
    lead = next((i for i, c in enumerate(cols) if c.name not in ROW_KEYS), len(cols))
    return [{"label": c.text(), "left": c.left or c.kind == "text", "ci": bool(c.ci), "title": c.title or "",
             "key": i < lead} for i, c in enumerate(cols)]


def _rows(df: pd.DataFrame, cols: Sequence[Col], bold: Callable[[dict[str, Any]], bool] | None = None) -> list[Block]:
    from lengthlens.report.columns import records

    return [{"kind": "total" if bold and bold(r) else "row", "cells": [list(c.parts(r)) for c in cols]}
            for r in records(df)]


def table(df: pd.DataFrame, cols: Sequence[Col], *, bold: Callable[[dict[str, Any]], bool] | None = None,
          caption: str = "", notes: str = "", sub: str | None = None, css: str = "", **hints: Any) -> Block:
    """A table: its columns, its rows formatted and coloured, a header row per ``sub`` value (then left out of the
    columns); ``hints``: ``size``, ``full``, ``fit`` (the PDF's layout)."""
    shown = [c for c in cols if c.name != sub] if sub else list(cols)
    rows: list[Block] = []
    if sub and sub in df.columns:
        for key, g in df.groupby(sub, sort=True):
            rows.append({"kind": "group", "text": str(key), "count": f"({len(g)})"})
            rows += _rows(g, shown, bold)
    else:
        rows = _rows(df, shown, bold)
    return {"type": "table", "caption": caption, "notes": notes, "columns": _columns(shown), "rows": rows, "css": css,
            **hints}


def grouped(df: pd.DataFrame, cols: Sequence[Col], *, group: Sequence[str] = ("target", "draft"),
            sub: str | None = "dataset", open_first: bool = True, bold: Callable[[dict[str, Any]], bool] | None = None,
            css: str = "cells", keep_order: bool = False, **hints: Any) -> list[Block]:
    """A per-cell table split by target–draft pair (one collapsible block each), a header row per dataset inside; rows
    under several serving conditions in load order (:func:`~lengthlens.report.columns.by_load`) unless ``keep_order``."""
    from lengthlens.report.columns import by_load

    df = df if keep_order else by_load(df)
    group = [g for g in group if g in df.columns]
    shown = [c for c in cols if c.name not in group]
    if df.empty:
        return [paragraph("No rows.", muted=True)]
    out = []
    for i, (key, g) in enumerate(df.groupby(group, sort=True) if group else [((), df)]):
        key = key if isinstance(key, tuple) else (key,)
        label = " ← ".join(str(k) for k in key) if len(key) == 2 else " / ".join(str(k) for k in key)
        out.append(collapsible(label or "all", [table(g, shown, sub=sub, bold=bold, css=css, full=True, **hints)],
                               count=f"({len(g)} rows)", open=open_first and i == 0))
    return out


def _bold_total(r: dict[str, Any]) -> bool:
    return any(str(v).lower() in ("total", "all") for v in r.values() if isinstance(v, str))


def _bold_all(r: dict[str, Any]) -> bool:
    return r.get("method") == "all"


# ------------------------------------------------------------------------------------------------
# Figures: which are drawn, where they go, in what order they are numbered
# ------------------------------------------------------------------------------------------------

def figure_specs(analysis: AnalysisResult) -> list[tuple[Figure, ReportAnalysis]]:
    """Every figure the analyses that ran declare, in declaration order, with its analysis."""
    return [(f, a) for a in _analyses(analysis) for f in a.outputs.figures]


def _analyses(analysis: AnalysisResult) -> tuple[ReportAnalysis, ...]:
    from lengthlens.analyses import registry

    return tuple(getattr(analysis, "analyses", ()) or registry.analyses())


def _plottable(cells: pd.DataFrame, columns: tuple[str, ...]) -> bool:
    """Whether some cell has every column a figure plots (a figure none of whose cells has them is left out)."""
    import numpy as np

    if cells.empty or not columns:
        return True
    if any(c not in cells.columns for c in columns):
        return False
    return bool(np.isfinite(cells[list(columns)].to_numpy(dtype=float)).all(axis=1).any())


@dataclass(frozen=True)
class FigureData:
    """What the figures read of an analysis: its tables, settings and survival curves. Small and picklable, so that
    figures can be drawn in worker processes without the runs; made without matplotlib, so that the workers get it
    before this process has imported that."""

    tables: Mapping[str, Any]
    settings: Mapping[str, Any]
    survival: Mapping[str, Any]

    @cached_property
    def key(self) -> Any:
        """The report's legend key (:func:`lengthlens.report.plot_style.visual_key`): one for every figure of the
        report, so that a mark means the same in each; computed where the figures are drawn."""
        from lengthlens.report.plot_style import visual_key

        return visual_key(self)


def figure_data(analysis: AnalysisResult) -> FigureData:
    """The :class:`FigureData` of an analysis."""
    return FigureData(dict(analysis.tables), dict(getattr(analysis, "settings", {}) or {}),
                      dict(getattr(analysis, "survival", {}) or {}))


def _figure_tasks(analysis: AnalysisResult) -> list[tuple[str, Figure, str | None]]:
    """What the report draws, as ``(key, declaration, dataset)`` (dataset: for a figure drawn per dataset, else None)."""
    cells = analysis.tables["cells"]
    tasks: list[tuple[str, Figure, str | None]] = []
    for spec, owner in figure_specs(analysis):
        written = [t.name for t in owner.outputs.tables if t.name in analysis.tables]
        if owner.outputs.tables and not written:
            continue
        if spec.when is not None and not spec.when(analysis.tables):
            continue
        if spec.per == "dataset" and not cells.empty:
            tasks += [(f"{spec.key}:{ds}", spec, ds) for ds in sorted(cells["dataset"].unique())]
            continue
        if not _plottable(cells, spec.needs):
            continue
        tasks.append((spec.key, spec, None))
    return tasks


def _make(data: FigureData, figure: str, dataset: str | None) -> Any:
    """Draw one figure (a matplotlib Figure) from ``data``: ``figure`` is its key in FIGURES."""
    from lengthlens.report import plots as F

    if figure not in F.FIGURES:
        raise KeyError(f"an analysis declares figure {figure!r}, which lengthlens.report.plots.FIGURES does not draw")
    fn = F.FIGURES[figure][0]
    if dataset is not None:
        return fn(data.tables["cells"], dataset=dataset, key=data.key)
    return fn(data, key=data.key)


def figure_jobs(analysis: AnalysisResult) -> list[tuple[str, Figure, Callable[[], Any]]]:
    """What the report draws, as ``(key, declaration, make)``; ``make()`` draws the figure (a matplotlib Figure).

    A figure is drawn when its analysis wrote a table (or declares none), its ``when`` holds and some cell has
    its ``needs``; ``per="dataset"`` gives one figure per dataset, keyed ``<key>:<dataset>``.
    """
    data = figure_data(analysis)
    return [(key, spec, lambda spec=spec, ds=ds: _make(data, spec.key, ds)) for key, spec, ds in _figure_tasks(analysis)]


@dataclass(frozen=True)
class _Drawn:
    key: str
    spec: Figure
    svg: str
    caption: str


def caption(key: str, fig: Any) -> str:
    """A drawn figure's caption, written from what it drew (its :class:`~lengthlens.report.plot_style.Drawn` record:
    counts, what was left out or clipped, how loads are kept apart) by :func:`lengthlens.report.plots.figure_caption`.
    The one place a caption is made, for the HTML and the PDF alike."""
    from lengthlens.report import plots as F

    return F.figure_caption(key, fig)


def _draw_one(data: FigureData, task: tuple[str, str, str | None]) -> tuple[str, str]:
    """One figure drawn as (SVG, caption), here or in a worker process: ``task`` is (key, figure, dataset)."""
    from lengthlens.report.plot_style import to_svg

    key, figure, dataset = task
    fig = _make(data, figure, dataset)
    return to_svg(fig), caption(key, fig)


def warm_up() -> None:
    """Import the figures' modules and the analyses' (whose results :class:`FigureData` holds) and write one small
    figure, so that a worker's start (imports, fonts) is paid before the figures are; run by each worker of the
    :class:`~lengthlens.execution.Pool` that draws them."""
    from lengthlens.analyses import registry  # noqa: F401 - imported for its cost
    from lengthlens.report import plots  # noqa: F401
    from lengthlens.report.plot_style import subplots, to_svg

    fig, ax = subplots(figsize=(1, 1))
    ax.set_title("x")
    to_svg(fig)


def draw(analysis: AnalysisResult, pool: Pool | None = None) -> list[_Drawn]:
    """Every figure of the report drawn once, as SVG, with its caption; shared by the processes of ``pool`` (a
    :class:`~lengthlens.execution.Pool`; none: here), the heaviest first. The same bytes whichever process draws."""
    from lengthlens.execution import Pool

    tasks = _figure_tasks(analysis)
    drawn = _start(analysis, tasks, pool if pool is not None else Pool(1)).results()
    return [_Drawn(key, spec, svg, cap) for (key, spec, _ds), (svg, cap) in zip(tasks, drawn)]


def _start(analysis: AnalysisResult, tasks: list[tuple[str, Figure, str | None]], pool: Pool) -> Any:
    costs = {key: spec.cost for key, spec, _ds in tasks}
    return pool.start(_draw_one, [(key, spec.key, ds) for key, spec, ds in tasks], shared=figure_data(analysis),
                      cost=lambda task: costs[task[0]])


def _placed(analysis: AnalysisResult, drawn: Sequence[tuple[str, Figure]]) -> dict[str, Block]:
    """The figure blocks of ``drawn`` (key, declaration), numbered and placed, their SVG and caption still empty."""
    from lengthlens.report.context import slug

    order = {s.id: s.order for s in section_specs(analysis)}
    placed = []
    for i, (key, spec) in enumerate(drawn):
        where = spec.section if spec.section in order else "figures"
        placed.append((order.get(where, 80.0), i, where, key, spec))
    blocks = {}
    for n, (_, _, where, key, spec) in enumerate(sorted(placed, key=lambda t: (t[0], t[1])), start=1):
        blocks[key] = {"type": "figure", "id": f"fig-{slug(key)}", "number": str(n), "caption": "", "svg": "",
                       "wide": spec.wide, "section": where, "placed": where != "figures"}
    return blocks


def figure_blocks(analysis: AnalysisResult, drawn: list[_Drawn] | None = None, *, pool: Pool | None = None) -> dict[str, Block]:
    """The figures as blocks, keyed as drawn, numbered in the order a reader meets them; ``section``: where each goes
    (its declared section when that is shown, else "figures", the More figures section); ``pool``: the processes that
    draw them (:func:`draw`)."""
    if drawn is None:
        blocks, finish = start_figures(analysis, pool)
        finish()
        return blocks
    from markupsafe import Markup

    blocks = _placed(analysis, [(d.key, d.spec) for d in drawn])
    for d in drawn:
        blocks[d.key].update(svg=Markup(d.svg), caption=d.caption)
    return blocks


def start_figures(analysis: AnalysisResult, pool: Pool | None = None) -> tuple[dict[str, Block], Callable[[], None]]:
    """The figure blocks as :func:`figure_blocks` gives them, but their SVG and caption filled in only when the
    returned function is called: the workers of ``pool`` start drawing now, and this process joins them at that
    call, so that it can first build the rest of the report (:func:`build` does not read a figure's SVG or caption).
    """
    from markupsafe import Markup

    from lengthlens.execution import Pool

    tasks = _figure_tasks(analysis)
    started = _start(analysis, tasks, pool if pool is not None else Pool(1))
    blocks = _placed(analysis, [(key, spec) for key, spec, _ds in tasks])

    def finish() -> None:
        for (key, _spec, _ds), (svg, cap) in zip(tasks, started.results()):
            blocks[key].update(svg=Markup(svg), caption=cap)

    return blocks, finish


# ------------------------------------------------------------------------------------------------
# Sections
# ------------------------------------------------------------------------------------------------

def section_specs(analysis: AnalysisResult) -> list[Section]:
    """Every section, the report's and the analyses', in reading order."""
    specs = [*REPORT_SECTIONS, *(s for a in _analyses(analysis) for s in a.outputs.sections)]
    return sorted(specs, key=lambda s: s.order)


def _section_tables(analysis: AnalysisResult, spec: Section) -> tuple[str, ...]:
    """The tables a section shows: its declared ones, else those of the analysis declaring it."""
    if spec.tables is not None:
        return spec.tables
    return next((tuple(t.name for t in a.outputs.tables) for a in _analyses(analysis)
                 if any(s is spec for s in a.outputs.sections)), ())


def _has_content(analysis: AnalysisResult, spec: Section, figures: Sequence[Block]) -> bool:
    return spec.always or bool(figures) or any(n in analysis.tables for n in _section_tables(analysis, spec))


@dataclass
class _Parts:
    """What every section builder may use: the analysis, the sections' notes, the figures placed in each section."""

    analysis: AnalysisResult
    notes: dict[str, Any]
    figures: dict[str, list[Block]]

    def tables(self, spec: Section) -> list[tuple[str, pd.DataFrame]]:
        return [(n, self.analysis.tables[n]) for n in _section_tables(self.analysis, spec) if n in self.analysis.tables]


def _default(p: _Parts, spec: Section, lead: list[Block] | None = None) -> list[Block]:
    """A section as most analyses have it: the declared intro, ``lead``, its figures, then each of its tables (split by
    target–draft pair when it has one, with the declared columns)."""
    from lengthlens.report.columns import described_columns

    blocks = [paragraph(spec.intro, muted=True)] if spec.intro else []
    blocks += lead or []
    blocks += p.figures.get(spec.id, [])
    for name, df in p.tables(spec):
        cols = described_columns(name, df, p.analysis)
        if "target" not in df.columns:
            blocks.append(table(df, cols, bold=_bold_total))
        else:
            # The serving table lists each arm's loads in a row already (its curve): its order is kept.
            blocks += grouped(df, cols, keep_order=name == "serving")
    return blocks


def _provenance(p: _Parts, spec: Section) -> list[Block]:
    """The provenance list, the reasons runs were skipped and the warnings from loading and analysis."""
    import pandas as pd

    from lengthlens.report import context as ctx
    from lengthlens.report.columns import Col

    prov = p.notes["provenance"]
    blocks: list[Block] = [{"type": "terms", "items": [list(t) for t in ctx.provenance_terms(prov, p.analysis.settings)]}]
    if prov["skipped_reasons"]:
        reasons = pd.DataFrame(prov["skipped_reasons"][:25]).assign(reason=lambda d: d["reason"].str.slice(0, 160))
        blocks += [subheading("Skipped or unpaired runs"),
                   table(reasons, [Col("reason", "reason", "text", left=True), Col("n", "runs", "int")])]
        if len(prov["skipped_reasons"]) > 25:
            blocks.append(paragraph(f"… {len(prov['skipped_reasons']) - 25} more reasons in skipped.csv.", muted=True))
    if prov["warnings"]:
        blocks += [subheading("Warnings from loading and analysis"),
                   {"type": "list", "items": [str(w) for w in prov["warnings"][:30]], "css": ""}]
    return blocks


def _rules(p: _Parts, spec: Section) -> list[Block] | None:
    """The rule verdicts (rules.csv): one quotable line per rule, every pair pooled, then the pooled table, and each
    target–draft pair's rows under it."""
    from lengthlens.report import wording
    from lengthlens.report.columns import Col, declared_columns

    df = p.analysis.tables.get("rules")
    if df is None or df.empty:
        return None
    head, *lines = wording.rule_verdict_lines(df)
    blocks = [paragraph(spec.intro, muted=True), paragraph(head),
              {"type": "list", "items": [line.strip() for line in lines], "css": "verdicts"}]
    several = "serving" in df.columns and df["serving"].fillna("").nunique() > 1
    cols = declared_columns("rules", df, p.analysis)
    if several:
        cols = [Col("serving", "serving", "text", left=True), *cols]
    pooled = df[df["target"] == "all"]
    blocks.append(table(pooled, cols, caption=_caption("rules", p.analysis), size=8, full=True, fit=True))
    per_pair = df[df["target"] != "all"]
    if not per_pair.empty:
        pair_lines = wording.rule_verdict_lines(per_pair, pairs=True)[1:]
        blocks.append(collapsible(f"The same per target–draft pair ({len(per_pair)} rows)",
                                  [{"type": "list", "items": [line.strip() for line in pair_lines], "css": "verdicts",
                                    "item_css": "pair"},
                                   # the tables on screen only: on paper the lines above say the same
                                   *({**b, "media": "html"} for b in grouped(per_pair, cols, sub=None, open_first=False,
                                                                             fit=True))]))
    return blocks


def _decision(p: _Parts, spec: Section) -> list[Block] | None:
    """The verdicts: a sentence per rule (pooled, then per pair) and the rules' verdict counts on Table 3's cells."""
    from lengthlens.report import wording
    from lengthlens.report.columns import Col, declared_columns, serving_first

    sentences = wording.verdict_sentences(p.analysis)
    if not sentences:
        return None
    pooled = [s for tg, _, _, s in sentences if tg == "all"]
    per_pair = [s for tg, _, _, s in sentences if tg != "all"]
    blocks = [paragraph(p.notes["decision"], muted=True), {"type": "list", "items": pooled, "css": "verdicts"}]
    if per_pair:
        blocks.append(collapsible(f"The same per target–draft pair ({len(per_pair)} sentences)",
                                  [{"type": "list", "items": per_pair, "css": "verdicts", "item_css": "pair"}]))
    v = p.analysis.tables.get("verdicts")
    if v is not None and not v.empty:
        d = v[v["scope"] == "table3"]
        several = d.loc[d["target"] != "all", ["target", "draft"]].drop_duplicates().shape[0] > 1
        d = d if several else d[d["target"] == "all"]
        cols = serving_first(declared_columns("verdicts", d, p.analysis), d)
        if several:
            cols = [Col("target", "target", "text", left=True), Col("draft", "draft", "text", left=True), *cols]
        blocks.append(table(d, cols, bold=lambda r: r.get("target") == "all" and several, css="t3",
                            caption=_caption("verdicts", p.analysis), size=8, full=True, fit=True))
    return blocks


def _caption(name: str, analysis: AnalysisResult) -> str:
    from lengthlens.analyses import registry

    t = registry.table(name, _analyses(analysis))
    return t.caption if t is not None else ""


def _table3(p: _Parts, spec: Section) -> list[Block] | Block:
    """Table 3 as a publication table (landscape in the PDF), and per target–draft pair under it."""
    from lengthlens.report.columns import table3_columns

    t3 = p.analysis.tables["table3"]
    if t3.empty:
        return [paragraph("No cells.")]
    blocks = [table(t3, table3_columns(t3, p.analysis), bold=_bold_all, notes=p.notes["table3"], css="t3",
                    caption=_caption("table3", p.analysis), title=True, size=8, full=True, fit=True)]
    pairs = p.analysis.tables.get("table3_pairs")
    if pairs is not None and not pairs.empty:
        blocks += [subheading("Table 3 per target–draft pair", id="table3-pairs"), paragraph(p.notes["table3_pairs"], muted=True)]
        blocks += grouped(pairs, table3_columns(pairs, p.analysis), sub=None, open_first=False, bold=_bold_all, css="t3",
                          fit=True, keep_order=True)  # Table 3's order: loads in order, the total row last
    return {"blocks": blocks, "title_in_caption": True}


def _illusion(p: _Parts, spec: Section) -> list[Block] | None:
    return p.figures.get(spec.id) or None


def _cells(p: _Parts, spec: Section) -> list[Block]:
    """The cell table: one block per target–draft pair, a header row per dataset, every metric with its interval."""
    from lengthlens.report import context as ctx
    from lengthlens.report.columns import cell_columns, serving_first, with_verdict_text

    cells = p.analysis.tables["cells"]
    note = paragraph(f"{ctx.group_note(cells)}. {p.notes['cells']}", muted=True, aside=" Click a target–draft pair to open it.")
    controls = {"type": "controls", "text": "(every collapsible section of the report)", "media": "html"}
    return [note, controls, *grouped(with_verdict_text(cells), serving_first(cell_columns(), cells, after="params"))]


def _attribution(p: _Parts, spec: Section) -> list[Block]:
    """The attribution counts on Table 3's cells beside those on all cells, pooled and per pair, then the figure and
    the per-cell table."""
    from dataclasses import replace

    from lengthlens.report import context as ctx
    from lengthlens.report.columns import described_columns, serving_first

    from lengthlens.report import wording

    # The paper's claim with its counts first (Table 3's cells, then all), then the tables it is counted from.
    lead = [paragraph(line) for scope in ("table3", "all") for line in wording.attribution_claim(p.analysis, scope).splitlines()]
    for level, title, g in _attribution_frames(p.analysis):
        lead += [subheading(title, level),
                 table(g, serving_first(described_columns("attribution_summary", g, p.analysis), g), bold=_bold_all)]
    intro = f"{spec.intro} {ctx.thinking_sentence(p.analysis)}"
    return _default(p, replace(spec, intro=intro, tables=("attribution",)), lead)


def _attribution_frames(analysis: AnalysisResult) -> list[tuple[int, str, pd.DataFrame]]:
    """The attribution counts on Table 3's cells (what the paper's "25 of 30" counts) beside those on all cells,
    pooled over target–draft pairs and then per pair, each pair with what its model's thinking part is: (heading
    level, title, table)."""
    from lengthlens.report import context as ctx

    summ = analysis.tables.get("attribution_summary")
    if summ is None or summ.empty:
        return []
    if "scope" not in summ.columns:
        summ = summ.assign(scope="all")
    if "target" not in summ.columns:
        summ = summ.assign(target="all", draft="all")
    names = ctx.thinking_names(analysis)
    out = []
    for scope, title in (("table3", "On Table 3's cells"), ("all", "On all cells")):
        d = summ[summ["scope"] == scope].drop(columns="scope")
        if d.empty:
            continue
        for (tg, dr), g in d.groupby(["target", "draft"], sort=False):
            g = g.drop(columns=["target", "draft"])
            n = int(g.loc[g["method"] == "all", "n_cells"].sum()) if (g["method"] == "all").any() else len(g)  # every load
            if tg == "all":
                out.append((3, f"{title} ({n}{', every target–draft pair pooled' if d['target'].nunique() > 1 else ''})", g))
            else:
                out.append((4, f"{tg} ← {dr} ({n} cells; thinking: {names.get(str(tg)) or 'as split from the texts'})", g))
    return out


def _serving(p: _Parts, spec: Section) -> list[Block]:
    from lengthlens.report import wording

    sentence = wording.serving_sentence(p.analysis)
    return _default(p, spec, [paragraph(sentence)] if sentence else [])


def _extra_tokens(p: _Parts, spec: Section) -> list[Block]:
    """The extra tokens of the cells that have proposal logs (the others have nothing to show: said once)."""
    from dataclasses import replace

    df = p.analysis.tables["extra_tokens"]
    if "n_runs_with_proposals" in df.columns and not (df["n_runs_with_proposals"] > 0).any():
        return [paragraph(spec.intro, muted=True),
                paragraph(f"No proposal logs (proposals.jsonl) were found for any of the {len(df)} cells.")]
    shown = df[df["n_runs_with_proposals"] > 0] if "n_runs_with_proposals" in df.columns else df
    analysis = replace(p.analysis, tables={**p.analysis.tables, "extra_tokens": shown})
    return _default(_Parts(analysis, p.notes, p.figures), spec)


def _table4(p: _Parts, spec: Section) -> list[Block] | Block:
    """Table 4: the arms that fired, a header row per target–draft pair and a total row; the arms that never fired in a
    sentence; or why there is no Table 4."""
    from lengthlens.report.columns import NO_TABLE4_TEXT, table4_columns, table4_parts

    parts = table4_parts(p.analysis.tables.get("table4"))
    if parts is None:
        return {"blocks": [paragraph(spec.intro, muted=True), paragraph(NO_TABLE4_TEXT)], "new_page": False}
    from lengthlens.report import wording

    fired, total, never, n_arms = parts
    blocks = [paragraph(spec.intro, muted=True)]
    if (claim := wording.table4_claim(p.analysis)):  # the paper's statement with its counts, above the table
        blocks.append(paragraph(claim))
    if len(fired):
        cols = table4_columns(p.analysis)
        rows: list[Block] = []
        for (tgt, drf), g in fired.groupby(["target", "draft"], sort=True):
            rows.append({"kind": "group", "text": f"{tgt} ← {drf}", "count": ""})
            rows += _rows(g, cols)
        rows += [{**r, "kind": "total"} for r in _rows(total, cols)]
        blocks.append({"type": "table", "caption": _caption("table4", p.analysis), "notes": "", "columns": _columns(cols),
                       "rows": rows, "css": "t4", "fit": True, "title": True})
    else:
        blocks.append(paragraph("The intervention never fired in any arm."))
    if len(never):
        names = "; ".join(f"{r['target']} {r['dataset']} {r['rule']} {r['params']}" for _, r in never.iterrows())
        blocks.append(paragraph(f"{len(never)} of {n_arms} intervention arms never fired (their base runs never reached "
                                f"the threshold with the thinking open), so they have nothing to show: {names}.", muted=True))
    blocks += p.figures.get(spec.id, [])
    return blocks


def _more_figures(p: _Parts, spec: Section) -> list[Block] | None:
    return p.figures.get(spec.id) or None


def _drilldown(p: _Parts, spec: Section) -> list[Block] | None:
    """On screen, one collapsible block per cell (the items that move its λ most, those whose accuracy changed);
    on paper, where to find them."""
    from lengthlens.report.columns import declared_columns, fmt, graded_text

    d = p.analysis.tables.get("drilldown")
    if d is None or d.empty:
        return None
    cols = declared_columns("drilldown", d, p.analysis)
    # A cell's key holds its serving condition where one is logged (then the same rule has a cell per condition).
    cells_df = p.analysis.tables["cells"]
    arm = [k for k in ("target", "draft", "dataset", "method", "params", "serving") if k in d and k in cells_df]
    cells = cells_df.set_index(arm)
    blocks = []
    for key, g in d.groupby(arm, sort=False):  # drilldown.csv's order: most influenced cells first
        c = cells.loc[key] if key in cells.index else None
        # Δacc only where the cell is graded on at least half its items: "0.0 pp" from no graded pair is no change.
        partly = None if c is None else graded_text(c.to_dict(), ("n_graded_items", "n_items", "items"))
        acc = f"{fmt(c['accuracy_delta_pp'], 'f1')} pp" if c is not None and partly is None else (partly or ("", ""))[0]
        lam = "" if c is None else f" · λ {fmt(c['lambda'], 'f2')} · Δacc {acc}"
        extra = ""
        if c is not None and "influence_top_share" in cells.columns:
            extra = f" · largest item share {fmt(c['influence_top_share'], 'pct')}"
            if "lambda_loo_lo" in cells.columns:
                extra += f" · λ without one item {fmt(c['lambda_loo_lo'], 'f2')}–{fmt(c['lambda_loo_hi'], 'f2')}"
            if c.get("influential") in (True, 1):
                extra += " · influential"
        label = f"{key[0]} ← {key[1]} / {key[2]} / {key[3]} {key[4]}{' / ' + key[5] if key[5:6] and key[5] else ''}{lam}{extra}"
        blocks.append(collapsible(label, [table(g, cols)], media="html"))
    intro = paragraph("Per cell: the items that move its λ most (the cell's λ with the item left out) and those whose "
                      "count of correct runs changed most; drilldown.csv has them all. An item that alone moves λ far is "
                      "a reason to read its runs before quoting the cell.", muted=True, aside=" Click a cell to open it.",
                      media="html")
    on_paper = paragraph("Per cell, the items that move its λ most and those whose count of correct runs changed most are "
                         "in report.html (one collapsible block per cell) and in drilldown.csv.", media="pdf")
    return [intro, *blocks, on_paper]


def _methodology(p: _Parts, spec: Section) -> list[Block]:
    from lengthlens.report import context as ctx

    blocks: list[Block] = []
    for heading, paragraphs in p.notes["methods"]:
        blocks.append(subheading(heading))
        for k, text in enumerate(paragraphs):
            blocks.append({"type": "definitions", "rows": ctx.definitions()} if text == "{definitions}" else
                          paragraph(text, muted=heading == "Definitions" and k == 0))
    return blocks


def _limitations(p: _Parts, spec: Section) -> list[Block]:
    from lengthlens.report import context as ctx

    return [{"type": "list", "items": ctx.limitations(p.analysis), "css": "lim"}]


def _arms(p: _Parts, spec: Section) -> list[Block]:
    """The arms appendix: the runs the cells use (collapsed on screen), then the runs left out of every cell."""
    import pandas as pd

    from lengthlens.report.columns import by_load, declared_columns

    arms = by_load(p.analysis.tables.get("arms", pd.DataFrame()))
    blocks = [paragraph(p.notes["arms"], muted=True)]
    if not arms.empty:
        blocks.append(collapsible(f"{len(arms)} arms: means over the runs the cells use",
                                  [table(arms, declared_columns("arms", arms, p.analysis), size=8, full=True)]))
    excluded = p.analysis.tables.get("arms_excluded")
    if excluded is not None and not excluded.empty:
        blocks += [subheading(f"Runs left out of every cell ({int(excluded['n_runs'].sum()):,})", id="arms-excluded"),
                   paragraph(p.notes["excluded"], muted=True),
                   table(excluded, declared_columns("arms_excluded", excluded, p.analysis), full=True)]
    return blocks


def _specbench_speedup(p: _Parts, spec: Section) -> list[Block]:
    """Spec-Bench's table as speed.py prints it: per pair, each method's tasks in name order, its overall row last."""
    from lengthlens.report.columns import described_columns

    blocks = [paragraph(spec.intro, muted=True)] if spec.intro else []
    for name, df in p.tables(spec):
        df = df.assign(_last=df["dataset"] == "overall").sort_values(
            ["target", "draft", "method", "params", "_last", "dataset"], kind="mergesort").drop(columns="_last")
        blocks += grouped(df, described_columns(name, df, p.analysis), sub=None, keep_order=True,
                          bold=lambda r: r.get("dataset") == "overall")
    return blocks


#: Sections whose body is not the default (intro, figures, tables): by id. A builder returns the blocks, a dict of
#: blocks with hints that override the declaration's (``new_page``, ``title_in_caption``), or None (not shown).
BUILDERS: dict[str, Callable[[_Parts, Section], Any]] = {
    "provenance": _provenance, "rules": _rules, "decision": _decision, "table3": _table3, "illusion": _illusion, "cells": _cells,
    "attribution": _attribution, "serving": _serving, "extra_tokens": _extra_tokens, "table4": _table4,
    "figures": _more_figures, "drilldown": _drilldown, "methodology": _methodology, "limitations": _limitations,
    "arms": _arms, "specbench_speedup": _specbench_speedup,
}


def notes(analysis: AnalysisResult, generated: str | None = None) -> dict[str, Any]:
    """The sections' notes (:mod:`~lengthlens.report.wording`) and the provenance, computed once for both documents."""
    from lengthlens.report import context as ctx
    from lengthlens.report import wording
    from lengthlens.report.columns import colour_rules

    grading = wording.grading_name(analysis)
    return {"decision": wording.decision_note(grading), "table3": wording.table3_note(analysis.settings, grading),
            "table3_pairs": wording.TABLE3_PAIRS_NOTE, "cells": wording.cells_note(analysis.settings, colour_rules()),
            "arms": wording.arms_note(grading, analysis.grading), "excluded": wording.EXCLUDED_NOTE,
            "methods": wording.methods(analysis.settings, ctx.grading_provenance(analysis.runs)),
            "provenance": ctx.provenance(analysis, generated)}


def build(analysis: AnalysisResult, figures: Mapping[str, Block] | None = None, *, generated: str | None = None) -> dict[str, Any]:
    """The whole report as plain data (see the module docstring): what report.html and report.pdf show.

    Parameters
    ----------
    analysis : what :func:`lengthlens.analyse` computed.
    figures : the figure blocks (:func:`figure_blocks`; drawn once for both documents); None: no figures.
    generated : the time stamp printed (default now, or SOURCE_DATE_EPOCH).

    Returns
    -------
    dict
        ``title``, ``subtitle``, ``headline``, ``boxes`` (warnings), ``cards``, ``sections``, ``footer``.

    Examples
    --------
    >>> import lengthlens as ll                                      # doctest: +SKIP
    >>> [s["id"] for s in build(ll.analyse(ll.load("runs/")))["sections"]][:3]   # doctest: +SKIP
    ['rules', 'provenance', 'decision']
    """
    from lengthlens.report import context as ctx
    from lengthlens.report import wording

    parts = notes(analysis, generated)
    placed: dict[str, list[Block]] = {}
    for f in (figures or {}).values():
        placed.setdefault(f["section"], []).append(f)
    p = _Parts(analysis, parts, placed)
    sections = []
    for spec in section_specs(analysis):
        if not _has_content(analysis, spec, placed.get(spec.id, ())):
            continue
        got = BUILDERS.get(spec.id, _default)(p, spec)
        if got is None:
            continue
        hints = got if isinstance(got, dict) else {"blocks": got}
        sections.append({"id": spec.id, "title": spec.title, "landscape": spec.landscape, "new_page": spec.new_page,
                         "title_in_caption": False, **hints})
    prov = parts["provenance"]
    boxes = [{"id": "ungraded-warning", "label": "Ungraded", "text": w} for w in [wording.ungraded_warning(analysis)] if w]
    boxes += [{"id": "grading-warning", "label": "Grading", "text": w} for w in [wording.grading_warning(analysis)] if w]
    boxes += [{"id": "incomplete-warning", "label": "Incomplete arms", "text": w}
              for w in [wording.incomplete_warning(analysis)] if w]
    # What the cells cover, as the cell table counts it (a baseline without a draft is no pair; Provenance lists all).
    cells = analysis.tables.get("cells")
    n_pairs, n_datasets = ((cells[["target", "draft"]].drop_duplicates().shape[0], cells["dataset"].nunique())
                           if cells is not None and not cells.empty else (len(prov["pairs"]), len(prov["benchmarks"])))
    return {
        "title": "Acceptance length against what happened",
        "version": prov["version"], "generated": prov["generated"],
        "subtitle": (f"lengthlens {prov['version']} report on {prov['runs_loaded']:,} runs · {n_pairs} "
                     f"target–draft pair(s) · {n_datasets} dataset(s) · {prov['generated']}"),
        "headline": wording.headline(analysis), "boxes": boxes,
        # The cards pool Table 3's cells; under several serving conditions the headline's line per load replaces them.
        "cards": [] if (analysis.results or {}).get("table3_by_load") else wording.cards(ctx.headline_numbers(analysis)),
        "sections": sections,
        "footer": (f"lengthlens {prov['version']} · {prov['generated']} · tables as CSV next to this file "
                   "(cells.csv, table3.csv, …)"),
    }


def for_medium(blocks: Sequence[Block], medium: str) -> list[Block]:
    """The blocks one document shows (``media`` absent: both), collapsible blocks' insides included."""
    out = []
    for b in blocks:
        if b.get("media", medium) != medium:
            continue
        out.append({**b, "blocks": for_medium(b["blocks"], medium)} if b["type"] == "collapsible" else b)
    return out
