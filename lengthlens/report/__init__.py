"""Write an Analysis to disk: the CSV tables and a readable HTML page (PDF, figures and LaTeX build on it)."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment, PackageLoader, select_autoescape

from lengthlens import __version__
from lengthlens.analysis import Analysis

#: Output files and the tables they hold, in the order the README documents them.
CSV_OUTPUTS = ("cells", "arms", "table3", "skipped")


def _env() -> Environment:
    env = Environment(loader=PackageLoader("lengthlens", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["num"] = _num
    return env


def _num(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int,)) or (isinstance(v, float) and v.is_integer() and abs(v) >= 100):
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def write_csvs(analysis: Analysis, out: Path) -> list[Path]:
    """Write every table of the analysis as OUT/<name>.csv; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, df in analysis.tables.items():
        path = out / f"{name}.csv"
        df.to_csv(path, index=False, float_format="%.10g")
        written.append(path)
    return written


def render_html(analysis: Analysis) -> str:
    """The report as one self-contained HTML page (inline CSS, no network)."""
    runs = analysis.runs
    t = runs.table
    provenance = {
        "sources": list(runs.sources),
        "runs_found": runs.n_found,
        "runs_loaded": t.height,
        "runs_paired": runs.paired.height,
        "runs_skipped": runs.skipped.height,
        "targets": sorted(t["target"].unique().to_list()),
        "drafts": sorted(t["draft"].unique().to_list()),
        "datasets": sorted(t["dataset"].unique().to_list()),
        "methods": sorted(t["method"].unique().to_list()),
        "budgets": sorted(int(b) for b in t["max_new_tokens"].drop_nulls().unique().to_list()),
        "temperatures": sorted(t["temperature"].drop_nulls().unique().to_list()),
        "engine_versions": sorted(t["engine_version"].drop_nulls().unique().to_list()),
        "version": __version__,
        "generated": _dt.date.today().isoformat(),
    }
    cells = analysis.tables["cells"]
    groups = []
    if not cells.empty:
        for key, g in cells.groupby(["target", "draft", "dataset"], sort=True):
            groups.append({"key": " / ".join(key), "rows": g.to_dict("records")})
    skipped_reasons = (analysis.tables["skipped"].groupby("reason").size().sort_values(ascending=False).head(20)
                       .reset_index(name="n").to_dict("records") if not analysis.tables["skipped"].empty else [])
    return _env().get_template("report.html.j2").render(
        a=analysis, headline=analysis.headline(), provenance=provenance, settings=analysis.settings,
        table3=analysis.tables["table3"].to_dict("records"), groups=groups,
        arms=analysis.tables["arms"].to_dict("records"), skipped_reasons=skipped_reasons,
        warnings=list(runs.warnings),
    )


def write_report(analysis: Analysis, out: str | Path) -> list[Path]:
    """Write the CSVs and report.html into ``out``; return every path written."""
    out = Path(out)
    written = write_csvs(analysis, out)
    html_path = out / "report.html"
    html_path.write_text(render_html(analysis), encoding="utf-8")
    written.append(html_path)
    return written
