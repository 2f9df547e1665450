"""Write an Analysis to disk: CSV tables, one self-contained HTML report, the same report as PDF, LaTeX tables.

``write_report(analysis, out)`` is what ``lengthlens report`` calls. The HTML inlines its CSS and
its figures (SVG), loads nothing from the network and has no JavaScript dependency; the PDF is
the same content typeset by Typst as a paper's appendix (:mod:`lengthlens.report.typeset`):
publication tables, figures at full width, the per-cell tables on landscape pages.
"""

from __future__ import annotations

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
    import pandas as pd
    from jinja2 import Environment

    from lengthlens.analyses.analyse import Analysis

__all__ = ["CSV_OUTPUTS", "REPORT_FILES", "Written", "figure_svgs", "figures", "render_html", "render_pdf", "write_csvs",
           "write_latex", "write_report"]

#: Output files and the tables they hold, in the order the README documents them.
CSV_OUTPUTS = ("cells", "arms", "table3", "skipped")

#: Optional analysis tables: name -> (section title, intro). Rendered when the analysis has them.
OPTIONAL_SECTIONS: dict[str, tuple[str, str]] = {
    "lossless": ("Lossless methods: a check",
                 ("Speculative methods that are lossless by design (SpS, EAGLE, Medusa, Hydra, ...) should reproduce "
                  "their baseline's outputs: λ ≈ 1 and Δacc ≈ 0 are a check of losslessness, not a finding. Per cell, "
                  "how many outputs differ from the baseline's and whether λ's interval excludes 1.")),
    "methods": ("Method against method",
                ("Every two speculative methods of one target and dataset, paired on their shared items (item "
                 "bootstrap as for cells): ratios are x over y, so λ < 1 and R/R*, T/T* < 1 favour x.")),
    "table4": ("Table 4: force-commit interventions",
               ("Runs where the intervention fired and what happened to their correctness: McNemar's exact test on the "
               "discordant pairs (wrong→right against right→wrong; the item-level sign-flip test when items have several "
               "seeds, see accuracy_test in table4.csv); 'still capped' runs hit the budget anyway.")),
    "attribution": ("Thinking attribution",
                    ("Where the extra characters of relaxed runs go: into the thinking part or into the answer, per cell, "
                    "from the completion texts split into channels. The share is left undefined when the interval "
                    "of the extra length includes 0; the summary counts cells by the share's lower limit (the point-"
                    "estimate counts beside them), on all cells and on Table 3's cells.")),
    "censoring": ("Censoring",
                  ("Runs that stop at the token budget are right-censored: their true length is longer. Beside plain λ, "
                  "λ on the pairs where neither run is censored and accelerated-failure-time (AFT) length ratios that "
                  "treat censored runs as censored; Kaplan–Meier medians per side.")),
    "serving": ("Serving conditions",
                ("Each cell is a rule against its baseline under one serving condition (concurrency c, request rate, "
                 "batch size bs, GPU, as logged): the same rule's cells at each load, lightest first, with R/R*, T/T* and "
                 "output tokens per second (relaxed over strict) and their intervals; 'advantage lost at' is the lightest "
                 "load, past one where the T/T* interval lies below 1, where it no longer does.")),
    "extra_tokens": ("Tokens accepted only because of the relaxation",
                     ("From the proposal logs: draft tokens that the relaxed rule accepted but the strict test would have "
                     "rejected, with the target's probability and rank of those tokens against strict-accepted ones. Ranks are "
                     "0-based: 0 is the target's most likely token.")),
}


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


def write_csvs(analysis: Analysis, out: Path) -> list[Path]:
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


#: Cell columns a figure plots; a figure none of whose cells has them all (e.g. gain from logs without
#: draft counters) is left out rather than drawn empty.
_FIGURE_NEEDS = {"gain_vs_lambda": ("gain", "lambda"), "lambda_forest": ("lambda",),
                 "rounds_vs_time": ("rounds_ratio", "time_ratio"), "accuracy_vs_gain": ("gain", "accuracy_delta_pp"),
                 "tradeoff": ("rounds_ratio", "time_ratio", "accuracy_delta_pp"), "alpha_sweep": ("lambda", "alpha")}


def _plottable(cells: pd.DataFrame, columns: tuple[str, ...]) -> bool:
    import numpy as np

    if cells.empty or not columns:
        return True
    if any(c not in cells.columns for c in columns):
        return False
    return bool(np.isfinite(cells[list(columns)].to_numpy(dtype=float)).all(axis=1).any())


def figures(analysis: Analysis) -> dict[str, Any]:
    """The report's figures as matplotlib Figures, keyed as in :data:`lengthlens.report.plots.FIGURES` (absent data: left out).

    The forest plot comes as one figure per dataset, keyed ``lambda_forest:<dataset>``.
    """
    return {key: make() for key, make in _figure_jobs(analysis)}


def _figure_jobs(analysis: Analysis) -> list[tuple[str, Callable[[], Any]]]:
    """What :func:`figures` draws, as ``(key, make)``: ``make()`` draws the figure."""
    from lengthlens.report import plots as F

    jobs: list[tuple[str, Callable[[], Any]]] = []
    cells = analysis.tables["cells"]
    vk = F.visual_key(analysis)  # one legend key for every figure of the report
    for key, (fn, _caption) in F.FIGURES.items():
        if not F.shown(key, analysis):
            continue
        if key == "attribution" and "attribution" not in analysis.tables:
            continue
        if key == "serving" and analysis.tables.get("serving") is None:
            continue
        if key in ("accuracy_vs_gain", "tradeoff") and (cells.empty or not (cells["n_graded"] > 0).any()):
            continue
        if key == "time_model" and "time_model" not in analysis.tables:
            continue
        if key == "table4_costs" and ("table4" not in analysis.tables or not (analysis.tables["table4"]["fired"] > 0).any()):
            continue
        if key == "lambda_forest" and not cells.empty:
            for ds in sorted(cells["dataset"].unique()):
                jobs.append((f"{key}:{ds}", lambda fn=fn, ds=ds: fn(cells, dataset=ds, key=vk)))
            continue
        if not _plottable(cells, _FIGURE_NEEDS.get(key, ())):
            continue
        jobs.append((key, lambda fn=fn: fn(analysis, key=vk)))
    return jobs


def figure_svgs(analysis: Analysis) -> dict[str, str]:
    """The report's figures as SVG strings (:func:`~lengthlens.report.plot_style.to_svg`), keyed as by :func:`figures`."""
    from lengthlens.report.plot_style import to_svg

    return {key: to_svg(make()) for key, make in _figure_jobs(analysis)}


def _figure_order(keys: list[str], sections: set[str]) -> list[str]:
    """Figure keys in the order a reader meets them: the illusion figure, those inside the attribution and
    censoring sections (when shown there), then the 'More figures' section in FIGURES order."""
    first = ["gain_vs_lambda"]
    if "attribution" in sections:
        first.append("attribution")
    if "censoring" in sections:
        first.append("survival")
    if "serving" in sections:
        first.append("serving")
    head = [k for k in first if k in keys]
    return head + [k for k in keys if k not in head]


def _figure_blocks(analysis: Analysis, sections: set[str] = frozenset()) -> dict[str, dict[str, str]]:
    from lengthlens.report import context as ctx
    from lengthlens.report import plots as F

    from lengthlens.report.plot_style import to_svg

    svgs, notes = {}, {}
    for key, make in _figure_jobs(analysis):
        fig = make()
        notes[key] = F.figure_caption(key, fig)
        svgs[key] = to_svg(fig)
    blocks = {}
    for i, key in enumerate(_figure_order(list(svgs), sections), start=1):
        base, _, ds = key.partition(":")
        caption = notes[key]
        blocks[key] = {"svg": Markup(svgs[key]), "caption": caption, "id": f"fig-{ctx.slug(key)}",
                       "number": str(i), "placed": base in ("gain_vs_lambda",) or (base == "attribution" and "attribution" in sections)
                       or (base == "survival" and "censoring" in sections) or (base == "serving" and "serving" in sections),
                       "wide": base in ("survival", "serving", "tradeoff", "alpha_sweep")}
    return blocks


def _group_tables(analysis: Analysis) -> dict[str, Markup]:
    from lengthlens.report.columns import described_columns, grouped_html, table4_html, table_html

    out = {"table4": table4_html(analysis.tables.get("table4"))}
    for name in OPTIONAL_SECTIONS:
        df = analysis.tables.get(name)
        if df is None or name == "table4":
            continue
        if name == "extra_tokens" and "n_runs_with_proposals" in df.columns:
            # Cells without proposal logs have nothing to show (all counts zero); say so once instead.
            n_all = len(df)
            df = df[df["n_runs_with_proposals"] > 0]
            if df.empty:
                out[name] = Markup(f"<p>No proposal logs (proposals.jsonl) were found for any of the {n_all} cells.</p>")
                continue
        cols = described_columns(name, df)
        if "target" not in df.columns:
            bold = (lambda r: any(str(v).lower() in ("total", "all") for v in r.values() if isinstance(v, str)))
            out[name] = table_html(df, cols, bold=bold)
        else:
            out[name] = grouped_html(df, cols, css="cells", open_first=True)
    return out


def _placed_sections(analysis: Analysis) -> set[str]:
    """The optional sections that hold a figure of their own when shown (see :func:`_figure_order`)."""
    return {n for n in ("attribution", "censoring", "serving") if analysis.tables.get(n) is not None}


def render_html(analysis: Analysis, *, with_figures: bool = True, generated: str | None = None,
                timings: dict[str, float] | None = None, progress: Callable[[str], None] | None = None,
                figure_blocks: dict[str, dict[str, str]] | None = None) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no network); ``progress`` hears "figures", "report.html".

    ``figure_blocks`` are figures already drawn (:func:`_figure_blocks`), e.g. for the PDF too.
    """
    import pandas as pd

    from lengthlens.report import context as ctx
    from lengthlens.report import wording
    from lengthlens.report.columns import cell_columns, grouped_html, table_html

    say = progress or (lambda _stage: None)
    t0 = time.perf_counter()
    cells = analysis.tables["cells"]
    t3 = analysis.tables["table3"]
    optional = _group_tables(analysis)
    if with_figures and figure_blocks is None:
        say("figures")
        figure_blocks = _figure_blocks(analysis, _placed_sections(analysis))
    figs = figure_blocks if with_figures else {}
    if timings is not None:
        timings["figures"] = time.perf_counter() - t0
    say("report.html")
    sections = [("provenance", "Provenance")]
    decision = wording.verdict_sentences(analysis)
    if decision:
        sections.append(("decision", "Faster, and as accurate? The verdicts"))
    sections.append(("table3", "Table 3: acceptance length against what happened"))
    if "gain_vs_lambda" in figs:
        sections.append(("illusion", "The length illusion at a glance"))
    sections.append(("cells", "Cells"))
    sections += [(n, OPTIONAL_SECTIONS[n][0]) for n in OPTIONAL_SECTIONS if n in optional]
    if figs:
        sections.append(("figures", "More figures"))
    if "drilldown" in analysis.tables:
        sections.append(("drilldown", "Per-item drill-down"))
    sections += [("methodology", "Methods"), ("limitations", "Limitations"), ("arms", "Appendix: arms")]
    arms = analysis.tables.get("arms", pd.DataFrame())
    t3p = analysis.tables.get("table3_pairs")
    verdicts_df = analysis.tables.get("verdicts")
    excluded = analysis.tables.get("arms_excluded")
    html = _env().get_template("report.html.j2").render(
        a=analysis, headline=wording.headline(analysis), numbers=ctx.headline_numbers(analysis),
        prov=(prov := ctx.provenance(analysis, generated)), prov_terms=ctx.provenance_terms(prov, analysis.settings),
        settings=analysis.settings,
        table3=table_html(t3, _table3_cols(t3), bold=lambda r: r.get("method") == "all", css="t3") if not t3.empty else None,
        cells_html=grouped_html(_with_verdict_text(cells), _serving_first(cell_columns(), cells, after="params"), css="cells"),
        cells_note=ctx.group_note(cells),
        optional=optional, optional_sections=OPTIONAL_SECTIONS, figs=figs, sections=sections,
        definitions=ctx.definitions(), limitations=ctx.limitations(analysis),
        arms_html=table_html(arms, _arm_cols(arms)) if not arms.empty else None, n_arms=len(arms),
        excluded_html=table_html(excluded, _excluded_cols(excluded)) if excluded is not None and not excluded.empty else None,
        n_excluded=0 if excluded is None else int(excluded["n_runs"].sum()),
        table3_pairs=grouped_html(t3p, _table3_cols(t3p), sub=None, css="t3", open_first=False) if t3p is not None else None,
        decision=decision, decision_html=_decision_table(verdicts_df), grading_name=wording.grading_name(analysis),
        grading_warning=wording.grading_warning(analysis),
        incomplete_warning=wording.incomplete_warning(analysis), policy=analysis.grading,
        drilldown=_drilldown_blocks(analysis),
        attribution_summary=_attribution_summaries(analysis), thinking_sentence=ctx.thinking_sentence(analysis),
        cards=wording.cards(ctx.headline_numbers(analysis)), notes=_notes(analysis),
        serving_sentence=wording.serving_sentence(analysis),
    )
    if timings is not None:
        timings["html"] = time.perf_counter() - t0
    return html


def _notes(analysis: Analysis) -> dict[str, Any]:
    """The sections' notes (:mod:`~lengthlens.report.wording`), for the HTML and the PDF alike."""
    from lengthlens.report import context as ctx
    from lengthlens.report import wording

    grading = wording.grading_name(analysis)
    return {"decision": wording.decision_note(grading), "table3": wording.table3_note(analysis.settings, grading),
            "table3_pairs": wording.TABLE3_PAIRS_NOTE, "cells": wording.cells_note(analysis.settings),
            "arms": wording.arms_note(grading, analysis.grading), "excluded": wording.EXCLUDED_NOTE,
            "methods": wording.methods(analysis.settings, ctx.grading_provenance(analysis.runs))}
def _serving_first(cols: list, df: pd.DataFrame, *, after: str | None = None) -> list:
    """``cols`` with the serving condition shown (after column ``after``, else first) where ``df`` has several."""
    from lengthlens.data.serving import serving_conditions
    from lengthlens.report.columns import Col

    if "serving" not in df or df.empty or len(serving_conditions(df["serving"])) < 2:
        return cols
    at = next((k + 1 for k, c in enumerate(cols) if c.name == after), 0)
    return [*cols[:at], Col("serving", "serving", "text", left=True), *cols[at:]]


def _with_verdict_text(cells: pd.DataFrame) -> pd.DataFrame:
    """The cell table with its accuracy verdict in words, the minimum detectable drop beside "no detectable change"."""
    from lengthlens.report.wording import accuracy_verdict_text

    if cells.empty or "verdict_accuracy" not in cells.columns:
        return cells
    mdd = cells["accuracy_mdd_pp"] if "accuracy_mdd_pp" in cells.columns else [None] * len(cells)
    return cells.assign(verdict_accuracy_text=[accuracy_verdict_text(v, m) for v, m in zip(cells["verdict_accuracy"], mdd)])


def _table3_cols(t3: pd.DataFrame) -> list:
    """Table 3's columns (the serving condition first where it has several), the count of partly graded cells
    beside 'graded' when there are any."""
    from lengthlens.report.columns import TABLE3_COLS, Col

    if "n_graded_partial" not in t3 or not (t3["n_graded_partial"] > 0).any():
        return _serving_first(TABLE3_COLS, t3)
    i = next(k for k, c in enumerate(TABLE3_COLS) if c.name == "n_graded") + 1
    extra = Col("n_graded_partial", "partly graded", "int", title="graded on fewer than half their items; left out of the counts")
    return _serving_first([*TABLE3_COLS[:i], extra, *TABLE3_COLS[i:]], t3)


def _attribution_frames(analysis: Analysis) -> list[tuple[int, str, pd.DataFrame]]:
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
            n = int(g.loc[g["method"] == "all", "n_cells"].iloc[0]) if (g["method"] == "all").any() else len(g)
            if tg == "all":
                out.append((3, f"{title} ({n}{', every target–draft pair pooled' if d['target'].nunique() > 1 else ''})", g))
            else:
                out.append((4, f"{tg} ← {dr} ({n} cells; thinking: {names.get(str(tg)) or 'as split from the texts'})", g))
    return out


def _attribution_summaries(analysis: Analysis) -> Markup | None:
    """:func:`_attribution_frames` as HTML tables under their headings."""
    import html as _html

    from lengthlens.report.columns import described_columns, table_html

    parts = [f"<h{level}>{_html.escape(title)}</h{level}>" + str(table_html(g, described_columns("attribution_summary", g),
                                                                           bold=lambda r: r.get("method") == "all"))
             for level, title, g in _attribution_frames(analysis)]
    return Markup("".join(parts)) if parts else None


def _arm_cols(arms: pd.DataFrame):
    from lengthlens.report.columns import Col
    other = [c for c in arms.columns if c.startswith("accuracy_") and c.removeprefix("accuracy_") in ("default", "study")]
    spec = [Col("target", left=True, kind="text"), Col("dataset", left=True, kind="text"), Col("method", "rule", "text", left=True),
            Col("params", left=True, kind="text"), Col("n_runs", "runs", "int"), Col("n_ok", "used", "int",
                                                                                   title="ok runs the cells use"),
            Col("mean_l_bar", "mean ℓ̄", "f2"), Col("mean_completion_length", "mean length", "f1"),
            Col("mean_draft_rounds", "mean rounds", "f1"), Col("mean_wall_time_s", "mean time s", "f2"),
            Col("accuracy", "accuracy", "f3"),
            *[Col(c, f"accuracy, {c.removeprefix('accuracy_')} policy", "f3",
                  title="the same runs with lengthlens' graders under the other grading policy") for c in other],
            Col("n_policy_disagree", "verdicts the policy changes", "int",
                css=lambda r: "loss" if (r.get("n_policy_disagree") or 0) > 0 else ""),
            Col("censored_frac", "censored", "f2")]
    return [c for c in spec if c.name in arms.columns]


def _excluded_cols(df: pd.DataFrame):
    from lengthlens.report.columns import Col
    spec = [Col("target", left=True, kind="text"), Col("dataset", left=True, kind="text"), Col("method", "rule", "text", left=True),
            Col("params", left=True, kind="text"), Col("reason", "why left out", "text", left=True), Col("n_runs", "runs", "int"),
            Col("n_items", "items", "int"), Col("budget", "budget", "int"), Col("mean_completion_length", "mean length", "f1"),
            Col("accuracy", "accuracy", "f3")]
    return [c for c in spec if c.name in df.columns]


def _decision_frame(v: pd.DataFrame | None) -> tuple[pd.DataFrame, list, Callable[[dict[str, Any]], bool]] | None:
    """The rules' verdicts on Table 3's cells (pooled over pairs, then per pair when there are several): the rows,
    their columns and which rows are bold."""
    from lengthlens.report.columns import VERDICT_TABLE_COLS, Col

    if v is None or v.empty:
        return None
    d = v[v["scope"] == "table3"]
    several = d.loc[d["target"] != "all", ["target", "draft"]].drop_duplicates().shape[0] > 1
    d = d if several else d[d["target"] == "all"]
    cols = ([Col("target", "target", "text", left=True), Col("draft", "draft", "text", left=True)] if several else []) + VERDICT_TABLE_COLS
    return d, cols, (lambda r: r.get("target") == "all" and several)


def _decision_table(v: pd.DataFrame | None) -> Markup | None:
    """:func:`_decision_frame` as an HTML table."""
    from lengthlens.report.columns import table_html

    got = _decision_frame(v)
    if got is None:
        return None
    d, cols, bold = got
    return table_html(d, cols, css="t3", bold=bold)


def _drilldown_blocks(analysis: Analysis) -> Markup | None:
    """One collapsible block per cell: the items that move its λ most and those whose accuracy changed."""
    import html as _html

    from lengthlens.report.columns import Col, fmt, table_html

    d = analysis.tables.get("drilldown")
    if d is None or d.empty:
        return None
    cols = [Col("item_id", "item", "text", left=True), Col("n_runs", "runs", "int"), Col("L", "L", "int"),
            Col("L_star", "L*", "int"), Col("lambda_item", "item λ", "f2"),
            Col("lambda_without", "λ without it", "f3", title="the cell's λ with this item left out"),
            Col("lambda_shift", "λ − λ without", "f3"), Col("correct_change", "Δ correct", "int",
                                                              css=lambda r: "loss" if (r.get("correct_change") or 0) < 0 else ""),
            Col("n_censored", "cut", "int", css=lambda r: "loss" if (r.get("n_censored") or 0) else "",
                title="relaxed runs of the item cut at the token budget (their length is a lower bound)"),
            Col("n_censored_star", "cut*", "int", title="the baseline's runs of the item cut at the budget"),
            Col("driver", "why listed", "text", left=True)]
    # A cell's key holds its serving condition where one is logged (then the same rule has a cell per condition).
    arm = [k for k in ("target", "draft", "dataset", "method", "params", "serving") if k in d and k in analysis.tables["cells"]]
    cells = analysis.tables["cells"].set_index(arm)
    blocks = []
    for key, g in d.groupby(arm, sort=False):  # drilldown.csv's order: most influenced cells first
        c = cells.loc[key] if key in cells.index else None
        lam = "" if c is None else f" · λ {fmt(c['lambda'], 'f2')} · Δacc {fmt(c['accuracy_delta_pp'], 'f1')} pp"
        extra = ""
        if c is not None and "influence_top_share" in cells.columns:
            extra = f" · largest item share {fmt(c['influence_top_share'], 'pct')}"
            if "lambda_loo_lo" in cells.columns:
                extra += f" · λ without one item {fmt(c['lambda_loo_lo'], 'f2')}–{fmt(c['lambda_loo_hi'], 'f2')}"
            if c.get("influential") in (True, 1):
                extra += " · influential"
        label = f"{key[0]} ← {key[1]} / {key[2]} / {key[3]} {key[4]}{' / ' + key[5] if key[5:6] and key[5] else ''}{lam}{extra}"
        blocks.append(f'<details class="group"><summary>{_html.escape(label)}</summary>'
                      f'{table_html(g, cols)}</details>')
    return Markup("".join(blocks))


def render_pdf(analysis: Analysis, path: Path, *, figure_blocks: dict[str, dict[str, str]] | None = None,
               generated: str | None = None) -> Path:
    """Typeset the report as a PDF with Typst (:mod:`lengthlens.report.typeset`); ``figure_blocks`` as for the HTML.

    Examples
    --------
    >>> render_pdf(ll.analyse(ll.load("runs/")), Path("report.pdf"))   # doctest: +SKIP
    """
    import pandas as pd

    from lengthlens.report.columns import cell_columns
    from lengthlens.report.typeset import pdf_model
    from lengthlens.report.typeset import render_pdf as typeset

    figs = _figure_blocks(analysis, _placed_sections(analysis)) if figure_blocks is None else figure_blocks
    arms = analysis.tables.get("arms", pd.DataFrame())
    excluded = analysis.tables.get("arms_excluded")
    model = pdf_model(analysis, figs, sections=OPTIONAL_SECTIONS, table3_cols=_table3_cols(analysis.tables["table3"]),
                      arm_cols=_arm_cols(arms), attribution=_attribution_frames(analysis), notes=_notes(analysis),
                      cells=_with_verdict_text(analysis.tables["cells"]),
                      cell_cols=_serving_first(cell_columns(), analysis.tables["cells"], after="params"), verdicts=_decision_frame(analysis.tables.get("verdicts")),
                      excluded_cols=_excluded_cols(excluded) if excluded is not None else [], generated=generated)
    return typeset(model, path)


def write_latex(analysis: Analysis, out: Path) -> list[Path]:
    """booktabs LaTeX tables (table3.tex, table4.tex, attribution.tex): :func:`lengthlens.report.latex.write_latex`."""
    from lengthlens.report.latex import write_latex as _write_latex

    return _write_latex(analysis, out)


#: Every file a report may write: what counts as an earlier report's in an output folder.
REPORT_FILES = frozenset({*(f"{n}.csv" for n in (*CSV_OUTPUTS, *OPTIONAL_SECTIONS, "alpha_selected",
                                                "attribution_summary")),
                          "report.html", "report.pdf", "table3.tex", "table4.tex", "attribution.tex"})


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


def write_report(analysis: Analysis, out: str | Path, *, pdf: bool = True, latex: bool = False, figures: bool = True,
                 progress: Callable[[str], None] | None = None) -> Written:
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
    progress : called with the name of each stage as it starts (tables, figures, report.html, report.pdf, LaTeX).

    Returns
    -------
    Written
        The files written (iterating gives their paths), what was dropped and what failed.

    Examples
    --------
    >>> import lengthlens as ll                                          # doctest: +SKIP
    >>> write_report(ll.analyse(ll.load("runs/")), "out/", pdf=False)   # doctest: +SKIP
    """
    from lengthlens.report.output import report_folder

    out = Path(out)
    say = progress or (lambda _stage: None)
    failed: dict[str, str] = {}
    with report_folder(out, REPORT_FILES) as folder:
        tmp = folder.path
        say("tables (CSV)")
        names = [p.name for p in write_csvs(analysis, tmp)]
        figs: dict[str, dict[str, str]] = {}
        if figures:
            say("figures")
            figs = _figure_blocks(analysis, _placed_sections(analysis))
        from lengthlens.report.context import generated_now

        generated = generated_now()
        html = render_html(analysis, with_figures=figures, progress=say, figure_blocks=figs, generated=generated)
        (tmp / "report.html").write_text(html, encoding="utf-8")
        names.append("report.html")
        if pdf:
            say("report.pdf")
            try:
                names.append(render_pdf(analysis, tmp / "report.pdf", figure_blocks=figs, generated=generated).name)
            except Exception as exc:  # noqa: BLE001 - the PDF is one view of the report: whatever stops it, the rest stands
                (tmp / "report.pdf").unlink(missing_ok=True)
                failed["report.pdf"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if latex:
            say("LaTeX")
            names += [p.name for p in write_latex(analysis, tmp)]
    return Written(files=tuple(out / n for n in names), dropped=tuple(folder.dropped), failed=failed)
