"""The rendered example report, checked as a reader would: numbers in the HTML and PDF, offline, Chromium, LaTeX."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import numpy as np
import pandas as pd

from lengthlens.report import render_html, write_report
from lengthlens.report.columns import fmt
from lengthlens.report.latex import tex_escape

from .helpers import chromium_screenshot, keep_artifact, need
from lengthlens.report import wording

FLOAT_COLS_T3 = ["gain_mean", "gain_median", "lambda_mean", "lambda_median", "rounds_ratio_mean", "rounds_ratio_median",
                 "time_ratio_mean", "time_ratio_median"]


def test_write_report_outputs(example_report):
    names = {p.name for p in example_report.iterdir()}
    assert {"report.html", "report.pdf", "cells.csv", "table3.csv", "table3.tex"} <= names
    assert {"table4.tex", "attribution.tex"} <= names  # the example has force-commit arms and completion texts


def test_html_is_self_contained(example_report):
    html = (example_report / "report.html").read_text()
    # no external resources: nothing fetched by src/href/url() over a network or from disk
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert not re.search(r"url\((?!#)", html)
    assert "<link" not in html and "<img" not in html and "@import" not in html
    assert html.count("<svg") >= 5  # figures inline


def test_html_shows_table3_numbers_and_headline(example_report, example_analysis):
    html = (example_report / "report.html").read_text()
    t3 = pd.read_csv(example_report / "table3.csv")
    for _, row in t3.iterrows():
        assert f">{row['method']}<" in html
        for c in FLOAT_COLS_T3:
            assert f">{fmt(row[c], 'f3')}<" in html, (row["method"], c)
    assert wording.headline(example_analysis) in html.replace("&gt;", ">")
    a = t3[t3["method"] == "all"].iloc[0]
    assert f"{a['gain_mean']:.2f}×" in html and f"{a['lambda_mean']:.2f}×" in html
    # R/R* is the primary cost measure, T/T* beside it with the per-round time ratio
    assert (f"{a['rounds_ratio_mean']:.2f}×</div><div class=\"k\">what happened: measured verifier rounds R/R* against "
            f"strict, the primary cost measure") in html
    assert f"wall time T/T* beside it: {a['time_ratio_mean']:.2f}× ({a['time_per_round_ratio_mean']:.2f}× per round)" in html
    assert (f"{int(a['n_drop_2pp'])} of {int(a['n_graded'])}</div><div class=\"k\">graded cells of Table 3 that lost more "
            f"than 2 accuracy points by a one-sided test at 2.5 %; {int(a['n_drop_2pp_point'])} by the study&#39;s point rule") in html  # the card's text is escaped


def test_cells_grouped_by_pair_and_dataset(example_report, example_analysis):
    html = (example_report / "report.html").read_text()
    cells = example_analysis.tables["cells"]
    section = html[html.index('<section id="cells"'):]
    section = section[:section.index("</section>")]
    pairs = cells[["target", "draft"]].drop_duplicates()
    assert section.count('<details class="group"') == len(pairs)
    for (t, d), g in cells.groupby(["target", "draft"]):
        assert f"{t} ← {d} <span class=muted>({len(g)} rows)</span>" in section
    # every cell's lambda with its interval, as printed
    for r in cells.to_dict("records"):
        assert f"{r['lambda']:.2f} <span class=ci>[{r['lambda_lo']:.2f}, {r['lambda_hi']:.2f}]</span>" in section


def test_optional_sections_render_only_when_present(example_analysis):
    html = render_html(example_analysis, with_figures=False)
    present = [s for s in ("table4", "attribution", "censoring", "extra_tokens") if s in example_analysis.tables]
    assert {"table4", "attribution", "censoring"} <= set(present)  # the example has force-commit arms and texts
    for sid in present:
        assert f'<section id="{sid}"' in html
    bare = dataclasses.replace(example_analysis, tables={k: v for k, v in example_analysis.tables.items()
                                                          if k in ("cells", "arms", "table3", "skipped")})
    html = render_html(bare, with_figures=False)
    for sid in ("attribution", "censoring", "extra_tokens"):
        assert f'<section id="{sid}"' not in html
    # Table 4 is never dropped silently: its section says that the logs have no force-commit arm.
    assert '<section id="table4"' in html and "no force-commit arm" in html
    assert '<section id="table3"' in html


def test_methods_and_limitations_from_data(example_report, example_analysis):
    html = (example_report / "report.html").read_text()
    cells = example_analysis.tables["cells"]
    n = cells["n_items"]
    assert f"Items per cell: median {int(n.median())}, range {int(n.min())}–{int(n.max())}" in html
    assert "single seed" in html  # the example runs one seed per item
    assert f"{100 * cells['censored_frac'].mean():.1f}% of relaxed runs" in html
    for formula in ("gain = (ℓ̄ + 1) / (ℓ̄* + 1)", "λ = (Σᵢ Lᵢ) / (Σᵢ L*ᵢ)", "λ / gain"):
        assert formula in html
    assert f"{example_analysis.settings['n_resamples']:,} resamples" in html


def test_pdf_text_contains_table3_numbers(example_report):
    need("pdftotext")
    text = subprocess.run(["pdftotext", "-layout", str(example_report / "report.pdf"), "-"], capture_output=True,
                          text=True, check=True).stdout
    tokens = set(re.findall(r"[-\d.,]+", text))
    t3 = pd.read_csv(example_report / "table3.csv")
    for _, row in t3.iterrows():
        for c in FLOAT_COLS_T3:
            assert fmt(row[c], "f3") in tokens, (row["method"], c, fmt(row[c], "f3"))
    pages = int(re.search(r"page 1 of (\d+)", text).group(1))
    assert pages > 5
    assert "Contents" in text and "Methods" in text and "Limitations" in text
    # the contents list carries page numbers (leader dots, then a number)
    assert re.search(r"Table 3: acceptance length against what happened\s*\.[\s.\u2060]+\d+", text)


def test_pdf_rasterises(example_report, tmp_path):
    need("pdftoppm")
    subprocess.run(["pdftoppm", "-r", "40", "-png", "-f", "1", "-l", "3", str(example_report / "report.pdf"),
                    str(tmp_path / "page")], check=True)
    pages = sorted(tmp_path.glob("page-*.png"))
    assert len(pages) == 3
    for p in pages:
        keep_artifact(p)
    from PIL import Image

    for p in pages:
        im = np.asarray(Image.open(p).convert("L"))
        assert (im < 128).mean() > 0.001  # ink on the page: a blank one has none, half a page of 7 pt table 0.0016
    # Portrait A4 for the opening page (title, contents, provenance); Table 3 (wide) turns landscape.
    shapes = [np.asarray(Image.open(p)).shape for p in pages]
    assert shapes[0][0] > shapes[0][1] and shapes[1][0] < shapes[1][1]


def test_chromium_loads_without_console_errors(example_report, tmp_path):
    shot = tmp_path / "report.png"
    console = chromium_screenshot(example_report / "report.html", shot)
    assert not console, console
    assert shot.exists() and shot.stat().st_size > 20_000
    keep_artifact(shot)
    from PIL import Image

    im = np.asarray(Image.open(shot).convert("L"))
    assert im.shape[1] == 1400
    assert (im < 128).mean() > 0.01  # the page rendered text, not a blank or an error page


def test_console_check_sees_errors(tmp_path):
    """Negative control: the console check above would catch a script error."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><p>x</p><script>undefinedFn();</script></body></html>")
    console = chromium_screenshot(bad, tmp_path / "bad.png", 400, 300)
    assert any("undefinedFn is not defined" in ln for ln in console), console


def test_latex_tables(example_report, example_analysis):
    tex = (example_report / "table3.tex").read_text()
    assert tex.count(r"\toprule") == 1 and r"\midrule" in tex and r"\bottomrule" in tex
    t3 = example_analysis.tables["table3"]
    for _, row in t3.iterrows():
        line = next(ln for ln in tex.splitlines() if ln.startswith(tex_escape(row["method"]) + " &"))
        cells = [c.strip() for c in line.rstrip("\\ ").split("&")]
        assert cells[1] == str(row["n_cells"])
        assert cells[2] == f"{row['gain_mean']:.2f}" and cells[3] == f"{row['lambda_mean']:.2f}"
        assert cells[4] == f"{row['rounds_ratio_mean']:.2f}"
    t4 = (example_report / "table4.tex").read_text()
    total = example_analysis.tables["table4"].iloc[-1]
    assert re.search(rf"\\midrule\nall .*& {int(total['fired'])} &", t4)
    attr = (example_report / "attribution.tex").read_text()
    assert r"\addlinespace" in attr and "spec\\_casc\\_tok" in attr


def test_tex_escape():
    assert tex_escape("spec_casc_tok 50% & $x#{}") == r"spec\_casc\_tok 50\% \& \$x\#\{\}"


def test_fmt():
    assert fmt(float("nan")) == "–" and fmt(None) == "–"
    assert fmt(1.23456, "f3") == "1.235" and fmt(1234, "int") == "1,234"
    assert fmt(0.0004, "p") == "<0.001" and fmt(0.25, "pct") == "25.0%"
    assert fmt(True) == "yes"


def test_report_without_pdf_and_figures(example_analysis, tmp_path):
    written = write_report(example_analysis, tmp_path, pdf=False, figures=False)
    assert not (tmp_path / "report.pdf").exists()
    assert (tmp_path / "report.html") in written
    assert "<svg" not in (tmp_path / "report.html").read_text()


def test_reports_without_cells_or_texts(tmp_path):
    """A strict-only run set (no cells) and runs without completion texts still give a full report, not an error."""
    import lengthlens as ll

    from .test_snapshot import _records, _write

    strict = ll.load(_write(tmp_path / "s.jsonl", [r for r in _records() if r["method"] == "strict"]), cache=False)
    a = ll.analyse(strict, n_resamples=200)
    written = {p.name for p in write_report(a, tmp_path / "none", latex=True)}
    assert {"report.html", "report.pdf"} <= written and "table3.tex" not in written
    html = (tmp_path / "none" / "report.html").read_text()
    assert "No cells: no relaxed arm could be paired with a strict baseline." in html

    runs = ll.load(_write(tmp_path / "m.jsonl", _records()), cache=False)
    a = ll.analyse(runs, n_resamples=200)
    write_report(a, tmp_path / "two", pdf=False, latex=True)
    html = (tmp_path / "two" / "report.html").read_text()
    assert html.count('<details class="group"') >= 1 and "T ← D" in html
