"""What the PDF prints (report/printing.py): big per-cell tables left to their CSV, fixed table layout, lean markup."""

from __future__ import annotations

import base64
import io
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lengthlens.report import render_pdf
from lengthlens.report.columns import Col, grouped_html, table_html
from lengthlens.report.printing import (PRINT_MAX_ROWS, column_widths, fixed_layout, lean_tables, print_html,
                                        text_width)

from .helpers import need

COLS = [Col("dataset", left=True, kind="text"), Col("method", "rule", "text", left=True),
        Col("n_items", "items", "int"), Col("lambda", "λ", "f2", ci="lambda")]


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    lam = rng.uniform(0.8, 2.0, n)
    return pd.DataFrame({"target": "T", "draft": "D", "dataset": [f"ds{i % 3}" for i in range(n)],
                         "method": "cactus", "n_items": 30, "lambda": lam, "lambda_lo": lam - 0.1, "lambda_hi": lam + 0.1})


def _marked(name: str, n: int) -> str:
    return f"<p>before</p><!--table:{name}--><div>{grouped_html(_frame(n), COLS)}</div><!--/table:{name}--><p>after</p>"


def test_a_big_table_becomes_a_sentence_naming_its_csv():
    out = lean_tables(_marked("censoring", 150), max_rows=100)
    assert "<table" not in out and "before" in out and "after" in out
    # 150 data rows: the three dataset header rows and the column header are not counted
    assert "The 150 rows of this table are too many to print: the PDF leaves them out." in out
    assert "<b>censoring.csv</b>" in out and "report.html" in out
    assert "Its columns: rule, items, λ [95%]." in out


def test_a_small_table_prints_in_full():
    html = _marked("censoring", 100)
    assert lean_tables(html, max_rows=100) == html
    assert "<table" in lean_tables(_marked("attribution", 101), max_rows=101)
    # the default limit
    assert lean_tables(_marked("arms", PRINT_MAX_ROWS)) == _marked("arms", PRINT_MAX_ROWS)
    assert "too many to print" in lean_tables(_marked("arms", PRINT_MAX_ROWS + 1))
    assert PRINT_MAX_ROWS == 150  # the study's real logs (120 cells, 126 arms) print in full, 360 cells do not


def test_unmarked_tables_are_never_left_out():
    html = f"<div>{grouped_html(_frame(500), COLS)}</div>"  # the Cells table is not marked
    assert lean_tables(html, max_rows=10) == html


def test_column_widths_follow_the_longest_text():
    rows = [[text_width("cactus"), text_width("1.93 [1.38, 2.71]")], [text_width("spec_casc_opt"), text_width("1.0")]]
    w = column_widths(["rule", "λ [95%]"], rows, pad=0.0)
    assert w[0] == pytest.approx(text_width("spec_casc_opt")) and w[1] == pytest.approx(text_width("1.93 [1.38, 2.71]"))
    # a header wraps at spaces: its longest word (in bold) is the least width
    w = column_widths(["extraordinarily long header"], [[1.0]], pad=0.0)
    assert w[0] == pytest.approx(text_width("extraordinarily", bold=True))
    # long text is capped (it wraps in print); padding is added to every column
    assert column_widths(["x"], [[100.0]], cap=24.0, pad=0.9) == [pytest.approx(24.9)]


def test_text_width_matches_the_font():
    """The estimate against the font's own advance widths (the report prints in DejaVu Sans)."""
    font_path = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
    if not font_path.exists():
        pytest.skip("DejaVu Sans not installed")
    from PIL import ImageFont

    font = ImageFont.truetype(str(font_path), 1000)
    for s in ("1.93 [1.38, 2.71]", "spec_casc_opt", "alphaneg0.1", "-33.3 [-53.3, -10.0]", "1,319", "<0.001"):
        assert text_width(s) == pytest.approx(font.getlength(s) / 1000, rel=0.01), s
    assert text_width("ℓ̄") < text_width("ℓℓ")  # a combining mark takes no room


def test_fixed_layout_colgroups():
    html = "<div>" + str(table_html(_frame(20), COLS)) + "</div>"
    out = fixed_layout(html)
    m = re.search(r'<table style="table-layout:fixed;width:([\d.]+em|100%)"><colgroup>(.*?)</colgroup>', out)
    assert m, out[:300]
    pct = [float(x) for x in re.findall(r'width:([\d.]+)%', m.group(2))]
    assert len(pct) == len(COLS) and sum(pct) == pytest.approx(100, abs=0.05)
    # the interval column is the widest, the items column narrower than the rule column
    assert pct[3] == max(pct) and pct[2] < pct[1]
    # a narrow table keeps its natural width (in em) instead of spanning the page
    assert m.group(1).endswith("em")
    # a table with a row of another length is left to the automatic layout
    odd = "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td></tr></table>"
    assert fixed_layout(odd) == odd


def test_print_html_of_the_example_keeps_every_table(example_report):
    """The example is small: the PDF prints every table (with fixed layout) and drops only screen-only markup."""
    html = (example_report / "report.html").read_text(encoding="utf-8")
    marked = re.findall(r"<!--table:([a-z0-9_]+)-->", html)
    assert {"attribution", "censoring", "arms"} <= set(marked) and "cells" not in marked
    out = print_html(html)
    assert "too many to print" not in out
    assert out.count("<table") == html.count("<table") == out.count("<colgroup>")
    assert "<span class=ci>" not in out and ' title="' not in out and "<svg" not in out
    # every table row the HTML has is still there
    assert out.count("<tr") == html.count("<tr")


def test_print_html_leaves_big_per_cell_tables_out(example_report):
    html = (example_report / "report.html").read_text(encoding="utf-8")
    out = print_html(html, max_rows=20)
    sections = {m.group(1): m.group(0) for m in re.finditer(r'<section id="([a-z0-9_]+)".*?</section>', out, re.S)}
    for name, section in sections.items():
        if name in ("attribution", "censoring", "arms"):
            assert "too many to print" in section and f"<b>{name}.csv</b>" in section, name
        if name in ("cells", "table3", "table4", "methods"):
            assert "too many to print" not in section and "<table" in section, name
    # the attribution summaries stay (only the per-cell table goes)
    assert "On all cells" in sections["attribution"] and "<table" in sections["attribution"]


def test_pdf_says_what_it_leaves_out(example_analysis, example_report, tmp_path):
    """A PDF printed with a low row limit names the CSVs of the tables it leaves out; the Cells table stays."""
    pdftotext = need("pdftotext")
    html = (example_report / "report.html").read_text(encoding="utf-8")
    pdf = render_pdf(html, tmp_path / "report.pdf", max_rows=20)
    text = subprocess.run([pdftotext, str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    flat = " ".join(text.split())
    for name in ("censoring", "attribution", "arms"):
        assert f"Every row is in {name}.csv and in this section of report.html" in flat, name
    cells = example_analysis.tables["cells"]
    for r in cells.to_dict("records"):
        assert f"{r['lambda']:.2f} [{r['lambda_lo']:.2f}, {r['lambda_hi']:.2f}]" in flat


def test_printer_keeps_list_markers_and_drops_universal_pseudo_elements(tmp_path):
    """printer(): the user-agent stylesheet's pseudo-element rules apply to li and summary only; pages are unchanged."""
    pdftotext = need("pdftotext")
    import weasyprint

    from lengthlens.report.printing import printer

    cls = printer()
    assert cls is not weasyprint.HTML and issubclass(cls, weasyprint.HTML)  # the installed WeasyPrint has the hook
    doc = ("<ol><li>first</li><li>second</li></ol><ul><li>bullet</li></ul>"
           "<details><summary>group</summary><p>inside</p></details><table><tr><td>1.23</td></tr></table>")
    texts = []
    for i, c in enumerate((weasyprint.HTML, cls)):
        c(string=doc).write_pdf(tmp_path / f"{i}.pdf")
        texts.append(subprocess.run([pdftotext, "-layout", str(tmp_path / f"{i}.pdf"), "-"], capture_output=True,
                                    text=True, check=True).stdout)
    assert texts[0] == texts[1]
    assert "1. first" in texts[1] and "2. second" in texts[1] and "• bullet" in texts[1]
    assert cls(string=doc)._ua_stylesheets()[0] is not weasyprint.HTML(string=doc)._ua_stylesheets()[0]


def test_blocks_of_one_grouped_table_share_their_column_widths():
    """The Cells table's pair blocks line up: each column takes the widest width over the blocks with its header."""
    wide = _frame(6).assign(target="A", n_items=1_000_000)  # a wider items column in one block
    narrow = _frame(6).assign(target="B")
    out = fixed_layout(str(grouped_html(pd.concat([wide, narrow]), COLS)))
    groups = re.findall(r"<colgroup>(.*?)</colgroup>", out)
    assert len(groups) == 2 and groups[0] == groups[1]
    alone = re.search(r"<colgroup>(.*?)</colgroup>", fixed_layout(str(grouped_html(narrow, COLS)))).group(1)
    assert alone != groups[0]


def _figure_svg() -> str:
    """A report-style matplotlib figure with what the report's figures draw: lines, dashes, markers, error bars,
    a hatched band, text and a legend (through the report's own SVG writer)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from lengthlens.report.plot_style import to_svg

    fig = Figure(figsize=(5, 3.5))
    ax = fig.add_subplot()
    x = np.linspace(0.8, 2.0, 40)
    ax.plot(x, np.sqrt(x), "--", color="#b42318", label="dashed")
    ax.step(x, 1 / x, where="post", label="steps")
    ax.errorbar(x[::4], x[::4] ** 0.3, yerr=0.05, fmt="o", ms=3, capsize=2, label="bars")
    ax.fill_between(x, 0.5, 0.7, hatch="//", alpha=0.35, label="band")
    ax.axvline(1.0, color="#667085", lw=0.8)
    ax.set_xlabel("λ (relaxed / strict)")
    ax.set_title("a figure")
    ax.legend()
    return to_svg(fig)


def test_lean_svg_prints_the_same_pixels_faster_to_parse(tmp_path):
    """lean_svg moves styles into attributes and drops empty groups; WeasyPrint must draw exactly the same page."""
    from lengthlens.report.printing import lean_svg, printer

    need("pdftoppm")
    svg = _figure_svg()
    lean = lean_svg(svg)
    assert ' style="' not in lean and "<metadata" not in lean and "<g>" not in lean
    assert lean.count("<") < svg.count("<")  # fewer nodes for WeasyPrint to cascade
    pages = []
    for k, text in enumerate((svg, lean)):
        pdf = tmp_path / f"{k}.pdf"
        printer()(string=f"<img style='width:15cm' src='data:image/svg+xml;base64,"
                         f"{base64.b64encode(text.encode()).decode()}'>").write_pdf(pdf)
        subprocess.run(["pdftoppm", "-r", "110", "-png", "-singlefile", str(pdf), str(tmp_path / str(k))], check=True)
        pages.append((tmp_path / f"{k}.png").read_bytes())
    from PIL import Image

    a, b = (np.asarray(Image.open(io.BytesIO(p)).convert("RGB")).astype(int) for p in pages)
    assert a.shape == b.shape and (a != 255).any()  # something was drawn
    assert np.array_equal(a, b)


def test_lean_svg_leaves_what_it_cannot_prove_equal_alone():
    from lengthlens.report.printing import lean_svg

    other_rule = '<svg xmlns="http://www.w3.org/2000/svg"><style>path{fill:red}</style><g><path d="M0 0L1 1"/></g></svg>'
    important = '<svg xmlns="http://www.w3.org/2000/svg"><g><path style="fill: red !important" d="M0 0L1 1"/></g></svg>'
    semicolon = '<svg xmlns="http://www.w3.org/2000/svg"><path style="fill: url(a;b)" d="M0 0"/></svg>'
    broken = "<svg><g></svg>"
    for svg in (other_rule, important, semicolon, broken):
        assert lean_svg(svg) == svg
    # the universal rule goes onto every element and an element's own style wins over it
    out = lean_svg('<svg xmlns="http://www.w3.org/2000/svg"><defs><style>*{stroke-linecap: butt}</style></defs>'
                   '<g><path style="stroke-linecap: square; fill: none" d="M0 0"/><path d="M1 1"/></g></svg>')
    assert 'stroke-linecap="square"' in out and 'fill="none"' in out and out.count('stroke-linecap="butt"') >= 2
    assert "<g>" not in out and "<style" not in out
