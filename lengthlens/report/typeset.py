"""The report as a PDF: the report's content as one JSON model, typeset by Typst (``templates/report.typ``).

The model is plain data: section titles, sentences, tables as their displayed text (formatted and
coloured by the same :class:`~lengthlens.report.columns.Col` specs as the HTML) and the figures' SVG.
Typst reads it with ``json()`` from ``sys.inputs``, so a string from the logs is only ever text in
the document, never Typst markup. A section is one entry of ``sections``; each block type (table,
grouped table, figure, paragraph, ...) is one Typst function, so a new section needs no new Typst.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from lengthlens.analyses.analyse import Analysis
    from lengthlens.report.columns import Col

__all__ = ["grouped_block", "pdf_model", "render_pdf", "table_block"]

#: The Typst document that typesets the model.
TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "report.typ"
_SIZE = re.compile(r'data-w="([\d.]+)" data-h="([\d.]+)"')


def _columns(cols: Sequence[Col]) -> list[dict[str, Any]]:
    """Each column's header and alignment: text to the left (the verdicts' words too), numbers to the right."""
    return [{"label": c.text(), "left": c.left or c.kind == "text", "ci": bool(c.ci)} for c in cols]


def _rows(df: pd.DataFrame, cols: Sequence[Col], bold: Callable[[dict[str, Any]], bool] | None = None) -> list[dict]:
    from lengthlens.report.columns import records

    return [{"kind": "total" if bold and bold(r) else "row", "cells": [list(c.parts(r)) for c in cols]}
            for r in records(df)]


def table_block(df: pd.DataFrame, cols: Sequence[Col], *, bold: Callable[[dict[str, Any]], bool] | None = None,
                caption: str = "", notes: str = "", sub: str | None = None) -> dict[str, Any]:
    """A table as the PDF prints it (booktabs rules, caption above, notes below); a header row per ``sub`` value."""
    shown = [c for c in cols if c.name != sub] if sub else list(cols)
    rows: list[dict[str, Any]] = []
    if sub and sub in df.columns:
        for key, g in df.groupby(sub, sort=True):
            rows.append({"kind": "group", "text": f"{key} ({len(g)})"})
            rows += _rows(g, shown, bold)
    else:
        rows = _rows(df, shown, bold)
    return {"type": "table", "caption": caption, "notes": notes, "columns": _columns(shown), "rows": rows}


def grouped_block(df: pd.DataFrame, cols: Sequence[Col], *, group: Sequence[str] = ("target", "draft"),
                  sub: str | None = "dataset", bold: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
    """A per-cell table as the HTML groups it: a sub-heading per target–draft pair, a header row per dataset."""
    group = [g for g in group if g in df.columns]
    shown = [c for c in cols if c.name not in group]
    if df.empty:
        return [{"type": "paragraph", "text": "No rows."}]
    blocks: list[dict[str, Any]] = []
    for key, g in (df.groupby(group, sort=True) if group else [((), df)]):
        key = key if isinstance(key, tuple) else (key,)
        label = " ← ".join(str(k) for k in key) if len(key) == 2 else " / ".join(str(k) for k in key)
        blocks.append({"type": "subheading", "text": f"{label or 'all'} ({len(g)} rows)"})
        blocks.append({**table_block(g, shown, sub=sub, bold=bold), "full": True})
    return blocks


def _figure(f: dict[str, str]) -> dict[str, Any]:
    """A figure block: its SVG with an explicit size (Typst needs one), its aspect ratio, number and caption."""
    svg = str(f["svg"])
    m = _SIZE.search(svg)
    w, h = (float(m.group(1)), float(m.group(2))) if m else (1.0, 0.62)
    if m:
        svg = svg[:m.start()] + f'width="{w}pt" height="{h}pt"' + svg[m.end():]
    return {"type": "figure", "svg": svg, "aspect": h / w, "number": f["number"], "caption": f["caption"]}


def _paragraphs(texts: Sequence[str]) -> list[dict[str, Any]]:
    return [{"type": "paragraph", "text": t} for t in texts if t]


def _provenance(prov: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The provenance list (:func:`~lengthlens.report.context.provenance_terms`) and the skipped reasons and
    warnings under it."""
    from lengthlens.report.context import provenance_terms

    terms = provenance_terms(prov, settings)
    blocks: list[dict[str, Any]] = [{"type": "terms", "items": [list(t) for t in terms]}]
    if prov["skipped_reasons"]:
        import pandas as pd

        from lengthlens.report.columns import Col

        reasons = pd.DataFrame(prov["skipped_reasons"][:25]).assign(reason=lambda d: d["reason"].str.slice(0, 160))
        blocks.append({"type": "subheading", "text": "Skipped or unpaired runs"})
        blocks.append(table_block(reasons, [Col("reason", kind="text", left=True), Col("n", "runs", "int")]))
        if len(prov["skipped_reasons"]) > 25:
            blocks += _paragraphs([f"… {len(prov['skipped_reasons']) - 25} more reasons in skipped.csv."])
    if prov["warnings"]:
        blocks.append({"type": "subheading", "text": "Warnings from loading and analysis"})
        blocks.append({"type": "list", "items": [str(w) for w in prov["warnings"][:30]]})
    return blocks


def _table4_blocks(t4: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Table 4 as in the HTML (:func:`~lengthlens.report.columns.table4_parts`): a header row per pair, a total."""
    from lengthlens.report.columns import NO_TABLE4_TEXT, TABLE4_COLS, table4_parts

    parts = table4_parts(t4)
    if parts is None:
        return _paragraphs([NO_TABLE4_TEXT])
    fired, total, never, n_arms = parts
    blocks: list[dict[str, Any]] = []
    if len(fired):
        rows: list[dict[str, Any]] = []
        for (tgt, drf), g in fired.groupby(["target", "draft"], sort=True):
            rows.append({"kind": "group", "text": f"{tgt} ← {drf}"})
            rows += _rows(g, TABLE4_COLS)
        rows += [{**r, "kind": "total"} for r in _rows(total, TABLE4_COLS)]
        blocks.append({"type": "table", "caption": "Table 4: force-commit interventions", "notes": "",
                       "columns": _columns(TABLE4_COLS), "rows": rows, "fit": True})
    else:
        blocks += _paragraphs(["The intervention never fired in any arm."])
    if len(never):
        names = "; ".join(f"{r['target']} {r['dataset']} {r['rule']} {r['params']}" for _, r in never.iterrows())
        blocks += _paragraphs([f"{len(never)} of {n_arms} intervention arms never fired (their base runs never reached "
                               f"the threshold with the thinking open), so they have nothing to show: {names}."])
    return blocks


def _optional_blocks(analysis: Analysis, name: str, figs: dict[str, dict[str, str]],
                     attribution: Sequence[tuple[int, str, pd.DataFrame]]) -> list[dict[str, Any]]:
    """One optional analysis table's section body, as :func:`lengthlens.report._group_tables` shows it."""
    from lengthlens.report.columns import described_columns

    if name == "table4":
        return _table4_blocks(analysis.tables.get("table4"))
    df = analysis.tables[name]
    blocks: list[dict[str, Any]] = []
    if name == "attribution":
        for level, title, d in attribution:
            if level > 3:
                blocks.append({"type": "subheading", "text": title})
            blocks.append(table_block(d, described_columns("attribution_summary", d), caption=title if level <= 3 else "",
                                      bold=lambda r: r.get("method") == "all"))
        if "attribution" in figs:
            blocks.append(_figure(figs["attribution"]))
    if name == "censoring" and "survival" in figs:
        blocks.append(_figure(figs["survival"]))
    if name == "serving":
        from lengthlens.report import wording

        blocks += _paragraphs([wording.serving_sentence(analysis)])
        if "serving" in figs:
            blocks.append(_figure(figs["serving"]))
    if name == "extra_tokens" and "n_runs_with_proposals" in df.columns:
        n_all = len(df)
        df = df[df["n_runs_with_proposals"] > 0]
        if df.empty:
            return blocks + _paragraphs([f"No proposal logs (proposals.jsonl) were found for any of the {n_all} cells."])
    cols = described_columns(name, df)
    if "target" not in df.columns:
        bold = (lambda r: any(str(v).lower() in ("total", "all") for v in r.values() if isinstance(v, str)))
        return [*blocks, table_block(df, cols, bold=bold)]
    return blocks + grouped_block(df, cols)


def _decision_section(analysis: Analysis, notes: dict[str, Any], verdicts: Any) -> dict[str, Any] | None:
    """The verdicts: a sentence per rule (pooled, then per pair) and the verdict counts, as the HTML's decision view."""
    from lengthlens.report import wording

    sentences = wording.verdict_sentences(analysis)
    if not sentences:
        return None
    pooled = [s for tg, _, _, s in sentences if tg == "all"]
    per_pair = [s for tg, _, _, s in sentences if tg != "all"]
    blocks = _paragraphs([notes["decision"]]) + [{"type": "list", "items": pooled}]
    if per_pair:
        blocks += [{"type": "subheading", "text": "The same per target–draft pair"}, {"type": "list", "items": per_pair}]
    if verdicts is not None:
        d, cols, bold = verdicts
        blocks.append({**table_block(d, cols, bold=bold, caption="Verdicts on Table 3's cells"), "size": 8, "full": True, "fit": True})
    return {"id": "decision", "title": "Faster, and as accurate? The verdicts", "landscape": True, "blocks": blocks}


def _table3_section(analysis: Analysis, notes: dict[str, Any], cols: Sequence[Col]) -> dict[str, Any]:
    """Table 3 as a publication table on a landscape page, and per target–draft pair under it."""
    t3 = analysis.tables["table3"]
    if t3.empty:
        return {"id": "table3", "title": "Table 3: acceptance length against what happened", "blocks": _paragraphs(["No cells."])}
    blocks = [{**table_block(t3, cols, bold=lambda r: r.get("method") == "all", notes=notes["table3"],
                             caption="Table 3: acceptance length against what happened"), "size": 8, "full": True, "fit": True}]
    pairs = analysis.tables.get("table3_pairs")
    if pairs is not None and not pairs.empty:
        blocks += [{"type": "subheading", "text": "Table 3 per target–draft pair"}, *_paragraphs([notes["table3_pairs"]])]
        blocks += [{**b, "fit": True} if b["type"] == "table" else b
                   for b in grouped_block(pairs, cols, sub=None, bold=lambda r: r.get("method") == "all")]
    return {"id": "table3", "title": "Table 3: acceptance length against what happened", "landscape": True,
            "title_in_caption": True, "blocks": blocks}


def _cells_section(analysis: Analysis, notes: dict[str, Any], cells: pd.DataFrame, cols: Sequence[Col]) -> dict[str, Any]:
    from lengthlens.report import context as ctx

    return {"id": "cells", "title": "Cells", "landscape": True,
            "blocks": _paragraphs([f"{ctx.group_note(cells)}. {notes['cells']}"]) + grouped_block(cells, cols)}


def _methods_section(analysis: Analysis, notes: dict[str, Any]) -> dict[str, Any]:
    from lengthlens.report import context as ctx

    blocks: list[dict[str, Any]] = []
    for heading, paragraphs in notes["methods"]:
        blocks.append({"type": "subheading", "text": heading})
        blocks += [{"type": "definitions", "rows": ctx.definitions()} if p == "{definitions}" else
                   {"type": "paragraph", "text": p} for p in paragraphs]
    return {"id": "methodology", "title": "Methods", "blocks": blocks}


def _arms_section(analysis: Analysis, notes: dict[str, Any], arm_cols: Sequence[Col],
                  excluded_cols: Sequence[Col]) -> dict[str, Any]:
    """The arms appendix: the runs the cells use, then the runs left out of every cell."""
    import pandas as pd

    arms = analysis.tables.get("arms", pd.DataFrame())
    blocks = _paragraphs([notes["arms"]])
    if not arms.empty:
        blocks.append({**table_block(arms, arm_cols, caption=f"{len(arms)} arms: means over the runs the cells use"),
                       "size": 8, "full": True})
    excluded = analysis.tables.get("arms_excluded")
    if excluded is not None and not excluded.empty:
        blocks += [{"type": "subheading", "text": f"Runs left out of every cell ({int(excluded['n_runs'].sum()):,})"},
                   *_paragraphs([notes["excluded"]]), {**table_block(excluded, excluded_cols), "full": True}]
    return {"id": "arms", "title": "Appendix: arms", "landscape": True, "blocks": blocks}


def pdf_model(analysis: Analysis, figs: dict[str, dict[str, str]], *, sections: dict[str, tuple[str, str]],
              table3_cols: Sequence[Col], arm_cols: Sequence[Col], attribution: Sequence[tuple[int, str, pd.DataFrame]],
              notes: dict[str, Any], cells: pd.DataFrame, cell_cols: Sequence[Col], verdicts: Any = None,
              excluded_cols: Sequence[Col] = (),
              generated: str | None = None) -> dict[str, Any]:
    """The whole report as plain data for ``report.typ``: what :func:`lengthlens.report.render_html` shows.

    The pieces come from :mod:`lengthlens.report` as the HTML has them: ``figs`` the figure blocks (SVG, number,
    caption; drawn once for both documents), ``sections`` the optional sections (name -> title, intro),
    ``table3_cols`` and ``arm_cols`` the columns of Table 3 and of the arms appendix (``excluded_cols`` of the runs
    left out), ``attribution`` the attribution summaries (heading level, title, table), ``notes`` the sections'
    notes, ``cells`` the cell table with its verdicts in words and ``cell_cols`` its columns, ``verdicts`` the verdict table (rows, columns, bold
    rows). Each section is one function; the drill-down stays in the HTML (collapsible per cell).
    """
    from lengthlens.report import context as ctx
    from lengthlens.report import wording

    prov = ctx.provenance(analysis, generated)
    out: list[dict[str, Any] | None] = [
        {"id": "provenance", "title": "Provenance", "continue": True, "blocks": _provenance(prov, analysis.settings)},
        _decision_section(analysis, notes, verdicts),
        _table3_section(analysis, notes, table3_cols),
        {"id": "illusion", "title": "The length illusion at a glance", "blocks": [_figure(figs["gain_vs_lambda"])]}
        if "gain_vs_lambda" in figs else None,
        _cells_section(analysis, notes, cells, cell_cols),
    ]
    for name, (title, intro) in sections.items():
        if analysis.tables.get(name) is None and name != "table4":
            continue
        text = intro + (f" {ctx.thinking_sentence(analysis)}" if name == "attribution" else "")
        out.append({"id": name, "title": title, "landscape": name != "table4",
                    "blocks": _paragraphs([text]) + _optional_blocks(analysis, name, figs, attribution)})
    more = [_figure(f) for f in figs.values() if not f["placed"]]
    out.append({"id": "figures", "title": "More figures", "blocks": more} if more else None)
    if analysis.tables.get("drilldown") is not None:
        out.append({"id": "drilldown", "title": "Per-item drill-down", "continue": True, "blocks": _paragraphs([
            "Per cell, the items that move its λ most and those whose count of correct runs changed most are in "
            "report.html (one collapsible block per cell) and in drilldown.csv."])})
    out += [_methods_section(analysis, notes),
            {"id": "limitations", "title": "Limitations", "continue": True,
             "blocks": [{"type": "list", "items": ctx.limitations(analysis)}]},
            _arms_section(analysis, notes, arm_cols, excluded_cols)]
    warning = " ".join(w for w in (f"Grading: {wording.grading_warning(analysis)}" if wording.grading_warning(analysis) else "",
                                   f"Incomplete arms: {wording.incomplete_warning(analysis)}"
                                   if wording.incomplete_warning(analysis) else "") if w)
    return {
        "title": "Acceptance length against what happened",
        "subtitle": (f"lengthlens {prov['version']} report on {prov['runs_loaded']:,} runs · {len(prov['pairs'])} "
                     f"target–draft pair(s) · {len(prov['benchmarks'])} dataset(s) · {prov['generated']}"),
        "headline": wording.headline(analysis), "warning": warning,
        "cards": wording.cards(ctx.headline_numbers(analysis)), "sections": [s for s in out if s is not None],
    }


def _fonts() -> list[str]:
    """Where the PDF's fonts are: Typst embeds its own text fonts; matplotlib's DejaVu Sans is what the figures use."""
    import matplotlib

    return [str(Path(matplotlib.get_data_path()) / "fonts" / "ttf")]


def render_pdf(model: dict[str, Any], path: Path) -> Path:
    """Typeset ``model`` (:func:`pdf_model`) with Typst into ``path`` (A4; wide tables on landscape pages).

    Only the fonts bundled with Typst and matplotlib are used (no system fonts), so the PDF is the same on every
    machine; ``SOURCE_DATE_EPOCH`` fixes its timestamp. Raises ``typst.TypstError`` when Typst cannot compile it.
    """
    import typst

    template = TEMPLATE
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    typst.compile(str(template), output=str(path), root=str(template.parent), font_paths=_fonts(),
                  ignore_system_fonts=True, sys_inputs={"model": json.dumps(model, ensure_ascii=False, allow_nan=False)},
                  timestamp=int(epoch) if epoch and epoch.isdigit() else None)
    return path
