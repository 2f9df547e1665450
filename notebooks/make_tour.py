"""Write notebooks/tour.ipynb from the cells below, without outputs (run it after editing them: python notebooks/make_tour.py).

The notebook is generated rather than edited by hand so that it stays output-free and reviewable;
CI executes it with nbclient (tests/report/test_notebook.py).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS = [
    ("md", """# lengthlens tour

Acceptance length promises a per-round gain; longer completions can take it back. This notebook loads
per-item run logs, pairs each relaxed verification rule with the lossless `strict` baseline on the same
items, and looks at **gain** against **length ratio λ**, measured **rounds** and **time**.

It runs on the embedded synthetic example (no data needed) and, when the study's logs are next to the
checkout (`../shared/data/lossy-token-eff`), on those too."""),
    ("code", """import os, tempfile
from pathlib import Path

import lengthlens as ll
from lengthlens import synth
from lengthlens.report import plots

# The embedded example: 2 target-draft pairs x 3 datasets, strict + 5 rules + 2 force-commit arms.
root = Path(tempfile.mkdtemp()) / "example-runs"
synth.write_raw(synth.example(), root, seed=0)
runs = ll.load(root)
runs  # what was found, loaded, skipped and why"""),
    ("md", """## Cells

A *cell* is one relaxed arm against its strict baseline on the items where both runs finished, with
paired item-bootstrap intervals."""),
    ("code", """cells = ll.cells(runs, n_resamples=2000)
cells"""),
    ("code", """c = cells.get(target="Qwen3-8B", dataset="gsm8k", method="cactus")
print(f"gain {c['gain']:.3f}   lambda {c['lambda']:.3f}   R/R* {c['rounds_ratio']:.3f}   T/T* {c['time_ratio']:.3f}")
c"""),
    ("md", """## Table 3 and the full analysis

`analyse` computes every table of the report (cells, arms, Table 3, Table 4, censoring, thinking
attribution, ...); `lengthlens.report.write_report(analysis, "out/")` writes them with the HTML/PDF report."""),
    ("code", """from lengthlens.report import wording

analysis = ll.analyse(runs, n_resamples=2000)
print(wording.headline(analysis))
analysis.tables["table3"]"""),
    ("md", """## One figure

Figures are matplotlib `Figure`s: shown inline here, saved however you like (`fig.savefig("x.pdf")`).
Above the diagonal a rule needs *more* verifier rounds than strict decoding, although its acceptance
length rose: the length illusion."""),
    ("code", """fig = plots.fig_gain_vs_lambda(analysis)
fig"""),
    ("md", """## A custom comparison

Any two arms on their shared items, e.g. the force-commit intervention against its base rule (pooled
over datasets, items resampled within each dataset):"""),
    ("code", """cmp = ll.compare(runs, {"method": "cactus_force_commit"}, {"method": "cactus"}, n_resamples=2000)
cmp"""),
    ("md", """## The study's logs, when present"""),
    ("code", """shared = Path(os.environ.get("LENGTHLENS_SHARED_DATA", "../../shared/data/lossy-token-eff")) / "runs"
if shared.is_dir():
    real = ll.load(shared)
    real_cells = ll.cells(real, n_resamples=1000)
    display(real)
    display(ll.table3(real_cells))
else:
    print(f"{shared} not found: skipped")"""),
]


def build() -> nbformat.NotebookNode:
    """The tour notebook, no outputs."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in CELLS]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"tour-{i:02d}"  # stable ids: regenerating gives the same file
    return nb


if __name__ == "__main__":
    path = Path(__file__).with_name("tour.ipynb")
    nbformat.write(build(), path)
    print(f"wrote {path}")
