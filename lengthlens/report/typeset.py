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
    return [{"label": c.text(), "left": c.left, "ci": bool(c.ci)} for c in cols]


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
                  sub: str = "dataset") -> list[dict[str, Any]]:
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
        blocks.append({**table_block(g, shown, sub=sub), "full": True})
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
    """The provenance list (the HTML's, as term and text) and the skipped reasons and warnings under it."""
    from lengthlens.report.columns import fmt

    conf = round(100 * (settings.get("confidence_level") or 0.95))
    aft = (f"from refits on the first {fmt(settings.get('n_resamples_aft'), 'int')} resamples"
           if settings.get("aft_ci") == "bootstrap" else "cluster-robust (by item) sandwich, t(G−1)")
    datasets = ", ".join(b["name"] + (f" (as {', '.join(b['folders'])})" if len(b["folders"]) > 1 or b["folders"][0] != b["name"]
                                      else "") for b in prov["benchmarks"])
    small = ", cells with fewer than 10 items included" if settings.get("include_small") else \
        "; cells with fewer than 10 items (small_n) left out"
    t3 = ("the loosest (most aggressive) α per rule and dataset among complete arms (≥ 95 % of the baseline's items)"
          if settings.get("alphas") == "loosest" else "every α") + small
    terms = [
        ("roots read", ", ".join(prov["sources"])),
        ("runs", f"{fmt(prov['runs_found'], 'int')} found, {fmt(prov['runs_loaded'], 'int')} loaded, "
                 f"{fmt(prov['runs_paired'], 'int')} paired into cells, {fmt(prov['runs_skipped'], 'int')} skipped or unpaired"),
        ("target ← draft", "; ".join(prov["pairs"])),
        ("datasets", datasets),
        ("rules and params", "; ".join(f"{m['method']}: {m['params']}" for m in prov["methods"])),
        ("token budgets", "; ".join(f"{b['dataset']} {b['budgets']}" for b in prov["budgets"])),
        ("sampling", f"temperature {', '.join(prov['temperatures']) or 'not logged'}; top-p "
                     f"{', '.join(prov['top_p']) or 'not logged'}; seeds {', '.join(str(s) for s in prov['seeds'])}"),
        ("engine", f"{', '.join(prov['backends']) or 'backend not logged'} "
                   f"{', '.join(prov['engine_versions']) or '(version not logged)'}"),
        ("hardware", ", ".join(prov["hardware"]) or "not in the logs"),
        ("bootstrap", f"paired item bootstrap, {settings.get('ci')} {conf}% intervals, "
                      f"{fmt(settings.get('n_resamples'), 'int')} resamples, seed {settings.get('seed')}; AFT intervals {aft}"),
        ("grading", prov["grading"]),
        ("Table 3 cells", t3),
        ("software", f"lengthlens {prov['version']}, Python {prov['python']}; generated {prov['generated']}"),
        ("tables", "every table as CSV next to this file (cells.csv, table3.csv, …), every row in report.html"),
    ]
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
                       "columns": _columns(TABLE4_COLS), "rows": rows})
    else:
        blocks += _paragraphs(["The intervention never fired in any arm."])
    if len(never):
        names = "; ".join(f"{r['target']} {r['dataset']} {r['rule']} {r['params']}" for _, r in never.iterrows())
        blocks += _paragraphs([f"{len(never)} of {n_arms} intervention arms never fired (their base runs never reached "
                               f"the threshold with the thinking open), so they have nothing to show: {names}."])
    return blocks


def _optional_blocks(analysis: Analysis, name: str, figs: dict[str, dict[str, str]],
                     attribution: Sequence[tuple[str, pd.DataFrame]]) -> list[dict[str, Any]]:
    """One optional analysis table's section body, as :func:`lengthlens.report._group_tables` shows it."""
    from lengthlens.report.columns import described_columns

    if name == "table4":
        return _table4_blocks(analysis.tables.get("table4"))
    df = analysis.tables[name]
    blocks: list[dict[str, Any]] = []
    if name == "attribution":
        for title, d in attribution:
            blocks.append(table_block(d, described_columns("attribution_summary", d), caption=title,
                                      bold=lambda r: r.get("method") == "all"))
        if "attribution" in figs:
            blocks.append(_figure(figs["attribution"]))
    if name == "censoring" and "survival" in figs:
        blocks.append(_figure(figs["survival"]))
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


def pdf_model(analysis: Analysis, figs: dict[str, dict[str, str]], *, sections: dict[str, tuple[str, str]],
              table3_cols: Sequence[Col], arm_cols: Sequence[Col], attribution: Sequence[tuple[str, pd.DataFrame]],
              generated: str | None = None) -> dict[str, Any]:
    """The whole report as plain data for ``report.typ``: what :func:`lengthlens.report.render_html` shows.

    ``figs`` are the figure blocks of :func:`lengthlens.report._figure_blocks` (SVG, number, caption), drawn once
    for both documents; ``sections`` the optional sections (name -> title, intro), ``table3_cols`` and ``arm_cols``
    the columns of Table 3 and of the arms appendix, ``attribution`` the titled attribution summaries, as the HTML
    report has them.
    """
    import pandas as pd

    from lengthlens.report import context as ctx
    from lengthlens.report import wording
    from lengthlens.report.columns import cell_columns

    prov = ctx.provenance(analysis, generated)
    settings = analysis.settings
    cells, t3 = analysis.tables["cells"], analysis.tables["table3"]
    n = ctx.headline_numbers(analysis)
    cards = [] if n is None else [
        {"value": f"{n['gain']:.2f}×", "tone": "", "text": "what acceptance length promised: mean per-round gain "
         f"(ℓ̄+1)/(ℓ̄*+1) over Table 3's {n['n_cells']} cells"},
        {"value": f"{n['lambda']:.2f}×", "tone": "loss" if n["lambda"] > 1 else "win",
         "text": "what it cost: mean length ratio λ (above 1 is longer than strict)"},
        {"value": f"{n['rounds']:.2f}×", "tone": "loss" if n["rounds"] > 1 else "win",
         "text": f"what happened: verifier rounds R/R* (mean); wall time T/T* {n['time']:.2f}× "
                 f"({n['time_per_round']:.2f}× per round)"},
        {"value": f"{n['n_drop']} of {n['n_graded']}", "tone": "loss" if n["n_drop"] else "",
         "text": f"graded cells that lost more than 2 accuracy points by a one-sided test at 2.5 %; {n['n_drop_point']} "
                 f"by the study's point rule, {n['n_drop_holm']} after Holm"},
    ]
    optional = sections
    sections: list[dict[str, Any]] = [{"id": "provenance", "title": "Provenance", "continue": True, "blocks": _provenance(prov, settings)}]
    t3_blocks = ([table_block(t3, table3_cols, bold=lambda r: r.get("method") == "all",
                              caption="Table 3: acceptance length against what happened",
                              notes=wording.table3_note(settings))] if not t3.empty else _paragraphs(["No cells."]))
    for b in t3_blocks:
        b.update(size=8, full=True)  # a landscape page for one table: a readable size
    sections.append({"id": "table3", "title": "Table 3: acceptance length against what happened", "landscape": True,
                     "title_in_caption": not t3.empty, "blocks": t3_blocks})
    if "gain_vs_lambda" in figs:
        sections.append({"id": "illusion", "title": "The length illusion at a glance",
                         "blocks": [_figure(figs["gain_vs_lambda"])]})
    sections.append({"id": "cells", "title": "Cells", "landscape": True,
                     "blocks": _paragraphs([f"{ctx.group_note(cells)}. {wording.cells_note(settings)}"])
                     + grouped_block(cells, cell_columns())})
    for name, (title, intro) in optional.items():
        if name not in analysis.tables or (name == "table4" and analysis.tables[name] is None):
            continue
        text = intro + (f" {ctx.thinking_sentence(analysis)}" if name == "attribution" else "")
        sections.append({"id": name, "title": title, "landscape": name != "table4",
                         "blocks": _paragraphs([text]) + _optional_blocks(analysis, name, figs, attribution)})
    more = [_figure(f) for f in figs.values() if not f["placed"]]
    if more:
        sections.append({"id": "figures", "title": "More figures", "blocks": more})
    methods: list[dict[str, Any]] = []
    for heading, paragraphs in wording.methods(settings, prov["grading"]):
        methods.append({"type": "subheading", "text": heading})
        for p in paragraphs:
            methods.append({"type": "definitions", "rows": ctx.definitions()} if p == "{definitions}"
                           else {"type": "paragraph", "text": p})
    sections.append({"id": "methods", "title": "Methods", "blocks": methods})
    sections.append({"id": "limitations", "title": "Limitations", "continue": True,
                     "blocks": [{"type": "list", "items": ctx.limitations(analysis)}]})
    arms = analysis.tables.get("arms", pd.DataFrame())
    sections.append({"id": "arms", "title": "Appendix: arms", "landscape": True, "blocks": _paragraphs(
        [f"{len(arms)} arms: means over each arm's ok runs, without pairing."]) + (
        [{**table_block(arms, arm_cols), "size": 8, "full": True}] if not arms.empty else [])})
    return {
        "title": "Acceptance length against what happened",
        "subtitle": (f"lengthlens {prov['version']} report on {prov['runs_loaded']:,} runs · {len(prov['pairs'])} "
                     f"target–draft pair(s) · {len(prov['benchmarks'])} dataset(s) · {prov['generated']}"),
        "headline": wording.headline(analysis), "cards": cards, "sections": sections,
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
