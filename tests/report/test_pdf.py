"""The PDF (report/typeset.py + templates/report.typ): the report's model typeset by Typst, with the headline,
Table 3 and every figure's caption; data strings come out literally; a failed compile leaves the rest standing."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from lengthlens.report import _figure_blocks, write_report
from lengthlens.report import model as M
from lengthlens.report import typeset as T
from lengthlens.report.columns import Col, fmt

from .helpers import need


def _text(pdf, *flags: str) -> str:
    return subprocess.run([need("pdftotext"), *flags, str(pdf), "-"], capture_output=True, text=True, check=True).stdout


def _words(s: str) -> str:
    """Whitespace folded."""
    return " ".join(s.split())


def _bare(s: str) -> str:
    """Without whitespace: pdftotext breaks lines where the page does, and a line ending in a dash or a slash
    does not say whether a space followed it."""
    return re.sub(r"\s+", "", s)


def test_pdf_has_the_headline_table3_and_every_caption(example_analysis, example_report):
    from lengthlens.report import wording

    text = _bare(_text(example_report / "report.pdf"))
    assert _bare(wording.headline(example_analysis)) in text
    # Table 3: each row's rule and numbers on one line of the laid-out text, in the table's column order
    lines = _text(example_report / "report.pdf", "-layout").splitlines()
    t3 = pd.read_csv(example_report / "table3.csv")
    for _, row in t3.iterrows():
        want = [fmt(row[c], "f3") for c in ("gain_mean", "lambda_mean", "rounds_ratio_mean", "time_ratio_mean")]
        hit = [ln for ln in lines if ln.split()[:1] == [row["method"]] and
               re.search(r"\s+".join(re.escape(w) + r"(\s+\S+)*?" for w in want), ln)]
        assert hit, (row["method"], want)
    figs = _figure_blocks(example_analysis)
    assert len(figs) >= 5
    for f in figs.values():
        assert _bare(f"Figure {f['number']}. {f['caption']}") in text, f["caption"]


def test_pdf_pages_are_a4_with_landscape_tables(example_report):
    info = subprocess.run([need("pdfinfo"), "-l", "99", str(example_report / "report.pdf")], capture_output=True,
                          text=True, check=True).stdout
    sizes = re.findall(r"Page\s+\d+ size:\s+([\d.]+) x ([\d.]+) pts", info)
    assert sizes and {(round(float(w)), round(float(h))) for w, h in sizes} == {(595, 842), (842, 595)}
    # The opening (title, the rule verdicts, provenance) portrait; the wide tables after it landscape.
    assert float(sizes[0][0]) < float(sizes[0][1]) and any(float(w) > float(h) for w, h in sizes[1:])


#: Typst markup characters (and what would run code or break out of a string): data must print as itself.
HOSTILE = r'rule#x $a$ *b* _c_ @d <e> [f] \g `h` #panic("no") ]{ "q'


#: Fewer lines of text than this on a page that is not the last is a near-empty page: a page that only a table's
#: header, two stranded rows and the footer fill has at most 9 (two header lines, two lines of each row with its
#: interval, a subheader, the footer), while the emptiest page the layout means to leave (a section's last page
#: with a few table rows, a figure with its caption) has more than 15.
NEAR_EMPTY_LINES = 10


def test_no_page_but_the_last_is_near_empty(example_report):
    pdf = example_report / "report.pdf"
    info = subprocess.run([need("pdfinfo"), str(pdf)], capture_output=True, text=True, check=True).stdout
    pages = int(re.search(r"Pages:\s+(\d+)", info).group(1))
    lines = {p: sum(1 for ln in _text(pdf, "-layout", "-f", str(p), "-l", str(p)).splitlines() if ln.strip())
             for p in range(1, pages)}
    assert pages > 10 and all(n >= NEAR_EMPTY_LINES for n in lines.values()), lines


def _typeset(model, pdf):
    """Typeset ``model`` as render_pdf does; returns the pages, Typst's warnings and each section run's end mark
    (what was decided about setting it tight)."""
    import typst

    options = T._options(model)
    _, warnings = typst.compile_with_warnings(str(T.TEMPLATE), output=str(pdf), **options)
    del options["timestamp"]
    marks = json.loads(typst.query(str(T.TEMPLATE), "<ll-run-end>", field="value", **options))
    info = subprocess.run([need("pdfinfo"), str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"Pages:\s+(\d+)", info).group(1)), [str(w) for w in warnings], marks


def _rows_section(rows: int) -> dict:
    """The opening page and one landscape section: a table of ``rows`` rules, each value with its interval."""
    df = pd.DataFrame({"method": [f"rule{i}" for i in range(rows)], "lambda": 1.5, "lambda_lo": 1.2, "lambda_hi": 1.9})
    cols = [Col("method", "rule", "text", left=True), Col("lambda", "λ", "f2", ci="lambda")]
    return {"title": "t", "subtitle": "", "headline": "", "cards": [],
            "sections": [{"id": "x", "title": "s", "landscape": True, "blocks": [M.table(df, cols)]}]}


@pytest.mark.parametrize(("rows", "pages", "state"), [
    (33, 2, "tight"),   # loose, a few rows spill onto a second page: set tight, the section fits one page
    (37, 3, "tried"),   # the spill is as small, but tight rows still need the second page: loose it stays
    (45, 3, "loose"),   # its last page holds more than the tail: not tried
])
def test_a_section_is_set_tight_only_where_that_saves_its_nearly_empty_last_page(tmp_path, rows, pages, state):
    """The decision is read off Typst's own layout in its next iteration and stands once taken: it converges
    (Typst warns when five iterations do not)."""
    got_pages, warnings, marks = _typeset(_rows_section(rows), tmp_path / "t.pdf")
    assert (got_pages, warnings, [m["state"] for m in marks]) == (pages, [], [state])


def test_the_example_report_typesets_without_a_warning(example_analysis, tmp_path):
    """The example's layout converges, and its runs are each decided (none left half-tried)."""
    pages, warnings, marks = _typeset(M.build(example_analysis, _figure_blocks(example_analysis)), tmp_path / "e.pdf")
    assert warnings == [] and pages > 10
    assert {m["state"] for m in marks} <= {"loose", "tight", "tried"} and "tight" in {m["state"] for m in marks}


def test_data_strings_come_out_literally(tmp_path):
    """A rule name from the logs is text in the PDF, never Typst markup: it comes out character for character."""
    long = "evil_" + HOSTILE.replace(" ", "_") + "_tail"  # long and without spaces: printed in breakable pieces
    df = pd.DataFrame({"method": [HOSTILE, long], "lambda": [1.5, 2.5e300], "lambda_lo": [1.2, 1.0], "lambda_hi": [1.9, 3e300]})
    cols = [Col("method", "rule", "text", left=True), Col("lambda", "λ", "f2", ci="lambda")]
    model = {"title": HOSTILE, "subtitle": HOSTILE, "headline": HOSTILE, "cards": [{"value": HOSTILE, "tone": "", "text": HOSTILE}],
             "sections": [{"id": "x", "title": HOSTILE, "blocks": [
                 M.table(df, cols, caption=HOSTILE, notes=HOSTILE),
                 {"type": "paragraph", "text": HOSTILE}, {"type": "subheading", "text": HOSTILE},
                 {"type": "list", "items": [HOSTILE]}, {"type": "terms", "items": [[HOSTILE, HOSTILE]]},
                 M.collapsible(HOSTILE, [M.paragraph(HOSTILE)], count=HOSTILE)]}],
             "boxes": [{"id": "x", "label": HOSTILE, "text": HOSTILE}]}
    pdf = T.render_pdf(model, tmp_path / "x.pdf")
    text = _text(pdf)
    folded = text.replace("\n", "")
    assert folded.count(HOSTILE) >= 14, text
    assert long in folded  # its pieces join back into the name
    assert "1.50 [1.20, 1.90]" in _words(text) and "2.5×10³⁰⁰ [1.00, 3.0×10³⁰⁰]" in _words(text)


def test_long_names_wrap_inside_their_column(tmp_path):
    """A long rule name breaks after its separators instead of running over the numbers beside it."""
    name = "spec_casc_tok_force_commit_alpha0.55_t13900_" * 2
    df = pd.DataFrame({"method": [name] * 3, "x": [1.25, 2.5, 3.75]})
    cols = [Col("method", "rule", "text", left=True)] + [Col("x", f"col {i}", "f2") for i in range(14)]
    model = {"title": "t", "subtitle": "", "headline": "", "cards": [],
             "sections": [{"id": "x", "title": "wide", "blocks": [M.table(df, cols)]}]}
    bbox = _text(T.render_pdf(model, tmp_path / "w.pdf"), "-bbox")
    words = re.findall(r'xMin="([\d.]+)" yMin="[\d.]+" xMax="([\d.]+)" yMax="[\d.]+">([^<]+)<', bbox)
    first_number = min(float(x0) for x0, _, w in words if w == "1.25")
    name_right = max(float(x1) for _, x1, w in words if "_" in w)
    assert name_right < first_number  # the name stays left of the first number column
    page_width = float(re.search(r'<page width="([\d.]+)"', bbox).group(1))
    assert max(float(x1) for _, x1, _ in words) <= page_width


def test_a_failed_compile_leaves_the_rest_of_the_report(example_analysis, tmp_path, monkeypatch):
    broken = tmp_path / "broken.typ"
    broken.write_text('#let m = json(bytes(sys.inputs.model))\n#m.no_such_field\n', encoding="utf-8")
    monkeypatch.setattr(T, "TEMPLATE", broken)
    out = tmp_path / "out"
    written = write_report(example_analysis, out, figures=False)
    assert not (out / "report.pdf").exists()
    assert {"report.html", "cells.csv", "table3.csv"} <= {p.name for p in written}
    (why,) = written.failed.values()
    assert list(written.failed) == ["report.pdf"] and "\n" not in why and why.startswith("TypstError")


def test_cli_says_one_line_when_the_pdf_fails(example_root, tmp_path):
    """The command line: one line on stderr naming the PDF, the usual exit code, every other file written."""
    code = ("import sys, lengthlens.report.typeset as T, pathlib\n"
            f"T.TEMPLATE = pathlib.Path({str(tmp_path / 'broken.typ')!r})\n"
            "from lengthlens.cli import main\n"
            f"sys.exit(main(['report', {str(example_root)!r}, '--out', {str(tmp_path / 'out')!r}, '--quiet', "
            "'--no-figures', '--n-resamples', '200', '--aft-resamples', '10', '--workers', '1']))")
    (tmp_path / "broken.typ").write_text("#panic(\"typeset failed\")\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lengthlens report: report.pdf not written: TypstError"), proc.stderr
    assert (tmp_path / "out" / "report.html").is_file() and not (tmp_path / "out" / "report.pdf").exists()


def test_the_pdf_needs_no_system_library_or_font(tmp_path):
    """Typst's extension links only the C library, and the PDF uses only the fonts bundled with Typst and matplotlib."""
    import typst._typst as ext

    ldd = subprocess.run(["ldd", ext.__file__], capture_output=True, text=True)
    if ldd.returncode != 0:
        pytest.skip("ldd not available")
    libs = set(re.findall(r"^\s*(\S+\.so[.\d]*)", ldd.stdout, re.M))
    libc = {"linux-vdso.so.1", "libgcc_s.so.1", "librt.so.1", "libpthread.so.0", "libm.so.6", "libdl.so.2", "libc.so.6"}
    assert libs <= libc | {"/lib64/ld-linux-x86-64.so.2"}, libs - libc
    model = {"title": "ℓ̄ λ Δacc ≥ − ← ×10³", "subtitle": "", "headline": "", "cards": [], "sections": []}
    fonts = subprocess.run([need("pdffonts"), str(T.render_pdf(model, tmp_path / "f.pdf"))], capture_output=True,
                           text=True, check=True).stdout
    assert "Libertinus" in fonts and "emb" in fonts.splitlines()[0]
    assert all(line.split()[-5] == "yes" for line in fonts.splitlines()[2:])  # every font embedded


def test_the_rule_verdicts_open_both_documents(example_report):
    """Issue 31: the first section of report.html and the first page of report.pdf give one line per rule, with the
    pooled intervals of rules.csv."""
    from lengthlens.report import wording

    rules = pd.read_csv(example_report / "rules.csv", keep_default_na=False, na_values=[""])
    lines = [ln.strip() for ln in wording.rule_verdict_lines(rules)[1:]]
    assert len(lines) == (rules["target"] == "all").sum() >= 1
    html = (example_report / "report.html").read_text(encoding="utf-8")
    sections = re.findall(r'<section id="([^"]+)"', html)
    assert sections[0] == "rules"
    body = html[html.index('<section id="rules"'):html.index(f'<section id="{sections[1]}"')]
    import html as H

    for line in lines:
        assert H.escape(line, quote=False) in body or line in H.unescape(body), line
    page1 = _bare(_text(example_report / "report.pdf", "-f", "1", "-l", "1"))
    assert _bare("Faster, and as accurate? Each rule across datasets") in page1
    for line in lines[:2]:  # the first page holds at least the first rules' lines
        assert _bare(line) in page1, line
