"""Every analysis declares what it writes, and the report, its list of files and the docs come from the declarations.

docs/development.md's recipe (an analysis added as one file and one registration line) is run here as written.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

import lengthlens as ll
from lengthlens.analyses import registry
from lengthlens.analyses.analyse import UndeclaredOutput
from lengthlens.analyses.outputs import Column, Outputs, ReportAnalysis, Section, Table, expand, undeclared_columns
from lengthlens.report import model as M
from lengthlens.report import plots, render_html, report_files, write_report
from lengthlens.report.typeset import typst_model

from .helpers import need

REPO = Path(__file__).resolve().parents[2]


def _runs(tmp_path: Path) -> ll.RunSet:
    """12 items, a strict and a relaxed arm; the relaxed run is longer on the items whose number is odd."""
    rows = []
    for i in range(12):
        for m in ("strict", "cactus"):
            L = 200 + 37 * i + (60 if m == "cactus" and i % 2 else 0)
            rows.append(dict(target="T", draft="D", dataset="d", method=m, params="strict" if m == "strict" else "alpha0.3",
                             item_id=f"q{i}", seed=0, status="ok", output_tokens=L, max_new_tokens=4096,
                             finish_reason="stop", draft_rounds=L // 3, accepted_tokens=L - L // 3, wall_time_s=L / 40,
                             correct=bool(i % 3)))
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ll.load(path, cache=False)


def test_every_declaration_is_complete():
    analyses = registry.analyses()
    names = [a.name for a in analyses]
    assert all(names) and len(set(names)) == len(names)
    tables = [t for a in analyses for t in a.outputs.tables]
    assert len({t.name for t in tables}) == len(tables)
    sections = [s for a in analyses for s in a.outputs.sections] + list(M.REPORT_SECTIONS)
    assert len({s.id for s in sections}) == len(sections) and all(s.title for s in sections)
    for t in tables:
        assert t.per, t.name
        for c in t.all_columns():
            assert c.description.strip(), f"{t.file}: column {c.name} has no description"
            assert c.fmt and (c.label is None or c.label.strip()), f"{t.file}: {c.name}"
    ids = {s.id for s in sections}
    for a in analyses:
        for f in a.outputs.figures:
            assert f.key in plots.FIGURES, f"{a.name}: figure {f.key} is not drawn by plots.FIGURES"
            assert f.section is None or f.section in ids, f"{a.name}: figure {f.key} placed in unknown {f.section}"
        for s in a.outputs.sections:
            assert set(s.tables or ()) <= {t.name for t in a.outputs.tables}, s.id
    # Every figure the report can draw belongs to an analysis.
    assert set(plots.FIGURES) == {f.key for a in analyses for f in a.outputs.figures}


def test_every_table_the_example_writes_is_declared_column_by_column(example_analysis):
    for name, df in example_analysis.tables.items():
        t = registry.table(name)
        assert t is not None, f"{name}.csv is not declared"
        assert not undeclared_columns(t, list(df.columns)), name
    # and the report knows each as its own, so that a later report replaces it
    assert {f"{n}.csv" for n in example_analysis.tables} <= report_files()
    assert {"verdicts.csv", "table3_pairs.csv", "drilldown.csv", "time_model.csv", "arms_excluded.csv"} <= report_files()


def test_column_families_expand_to_every_name():
    assert expand("km_{q25,median}{,_star}") == ("km_q25", "km_q25_star", "km_median", "km_median_star")
    assert Column("lambda", "λ", interval=True).names() == ("lambda", "lambda_lo", "lambda_hi")
    assert Column("accuracy_delta_pp", "Δ", interval=True, stem="accuracy_delta").names()[1:] == (
        "accuracy_delta_lo", "accuracy_delta_hi")


class _Sloppy(ReportAnalysis):
    """Writes a table it does not declare, or a column its table does not declare."""

    name = "sloppy"
    outputs = Outputs(tables=(Table("sloppy", "cell", (Column("method", "the rule"),)),))

    def __init__(self, table: str, columns: tuple[str, ...]):
        self.table, self.columns = table, columns

    def run(self, ctx):
        return {self.table: pd.DataFrame({c: [1] for c in self.columns})}


@pytest.mark.parametrize("table, columns, what", [("elsewhere", ("method",), "table 'elsewhere'"),
                                                  ("sloppy", ("method", "secret"), "columns ['secret']")])
def test_an_undeclared_table_or_column_stops_the_analysis(tmp_path, table, columns, what):
    runs = _runs(tmp_path)
    with pytest.raises(UndeclaredOutput, match=re.escape(what)):
        ll.analyse(runs, n_resamples=50, analyses=(*registry.analyses(), _Sloppy(table, columns)))


def _recipe() -> str:
    """The first Python block of development.md's "Adding an analysis": the new analysis' module, as written."""
    text = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    part = text[text.index("## Adding an analysis"):]
    return re.search(r"```python\n(.*?)```", part, re.S).group(1)


def _make_docs():
    spec = importlib.util.spec_from_file_location("make_docs", REPO / "docs" / "make_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_development_recipe_adds_an_analysis_as_written(tmp_path):
    namespace: dict = {"__name__": "lengthlens.analyses.longer"}
    exec(compile(_recipe(), "docs/development.md", "exec"), namespace)  # noqa: S102 - the docs' own code, run as written
    runs = _runs(tmp_path)
    with registry.extended(namespace["LongerRuns"]()):
        analysis = ll.analyse(runs, n_resamples=200)
        out = tmp_path / "out"
        written = {p.name for p in write_report(analysis, out, figures=False)}
        model = M.build(analysis)
        files, docs = report_files(), _make_docs().outputs_md()
    # its table, computed as the recipe says: the share of pairs whose relaxed run is longer (6 of 12)
    longer = pd.read_csv(out / "longer.csv")
    assert "longer.csv" in written and longer[["method", "n_runs", "share_longer"]].values.tolist() == [["cactus", 12, 0.5]]
    # its section in the HTML and in the PDF's model, with the labelled columns, among the files and in the docs
    html = (out / "report.html").read_text(encoding="utf-8")
    section = re.search(r'<section id="longer".*?</section>', html, re.S).group(0)
    assert "<h2>Longer runs</h2>" in section and ">longer</span></th>" in section and "0.50" in section
    assert '<a href="#longer">Longer runs</a>' in html
    assert "longer" in [s["id"] for s in typst_model(model)["sections"]]
    assert "longer.csv" in files and "longer.csv" not in report_files()  # gone with the with block
    assert "| `longer.csv` | cell |" in docs and "| `share_longer` | share of pairs" in docs
    if "report.pdf" in written:
        text = subprocess.run([need("pdftotext"), str(out / "report.pdf"), "-"], capture_output=True, text=True).stdout
        assert "Longer runs" in text


def test_one_class_is_named_analysis():
    """The engine's protocol is Analysis; what analyse() returns is AnalysisResult."""
    hits = [path.relative_to(REPO).as_posix() for path in sorted((REPO / "lengthlens").rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef) and node.name == "Analysis"]
    assert hits == ["lengthlens/analyses/engine.py"]
    with pytest.warns(DeprecationWarning, match="AnalysisResult"):
        assert ll.Analysis is ll.AnalysisResult


def test_sections_come_in_their_declared_order(example_analysis):
    model = M.build(example_analysis)
    ids = [s["id"] for s in model["sections"]]
    order = {s.id: s.order for s in M.section_specs(example_analysis)}
    assert ids == sorted(ids, key=order.__getitem__)
    assert ids[:3] == ["provenance", "decision", "table3"] and ids[-1] == "arms"
    # the HTML lists them in the same order (no figures here: the illusion section is a figure's)
    html = render_html(example_analysis, with_figures=False)
    assert re.findall(r'<section id="([^"]+)"', html) == [i for i in ids if i not in ("illusion", "figures")]


def test_a_section_declared_with_no_table_written_is_left_out(tmp_path):
    class Quiet(ReportAnalysis):
        name = "quiet"
        outputs = Outputs(tables=(Table("quiet", "cell", (Column("x", "x"),)),),
                          sections=(Section("quiet", "Quiet", "Nothing to say.", order=66),))

        def run(self, ctx):
            return {}

    analysis = ll.analyse(_runs(tmp_path), n_resamples=50, analyses=(*registry.analyses(), Quiet()))
    assert "quiet" not in [s["id"] for s in M.build(analysis)["sections"]]
