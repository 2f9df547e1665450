"""Where report.pdf's time goes: the paper-scale report's model typeset whole, then section by section.

    python benchmarks/bench_pdf.py [--data DIR] [--n-resamples 200]

Builds (once, into DIR) the paper-scale study of ``bench_report.py``, analyses it (the tables' sizes do not
depend on the resamples, so few are used), draws the figures and builds the report's model once, then
typesets it with Typst in a fresh process per document (Typst keeps what it laid out for the rest of a
process, which would hide the cost of a second document): the whole PDF, an empty one (fonts and start-up),
and each section alone. Prints each one's wall and CPU seconds and how many table cells it holds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_CHILD = """import sys, time
from pathlib import Path
from lengthlens.report.typeset import TEMPLATE, _fonts
import typst
model = Path(sys.argv[1]).read_text(encoding="utf-8")
t = time.perf_counter()
typst.compile(str(TEMPLATE), output=sys.argv[2], root=str(TEMPLATE.parent), font_paths=_fonts(), ignore_system_fonts=True,
              sys_inputs={"model": model})
print(time.perf_counter() - t)
"""


def typeset(model: dict, work: Path, name: str) -> tuple[float, float]:
    """Wall and CPU seconds of Typst compiling ``model`` in a fresh process (CPU: the child's, start-up included)."""
    src = work / f"{name}.json"
    src.write_text(json.dumps(model, ensure_ascii=False), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    before = os.times()
    done = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(work / f"{name}.pdf")], capture_output=True,
                          text=True, env=env, check=True)
    after = os.times()
    return float(done.stdout.strip()), (after.children_user - before.children_user) + (after.children_system - before.children_system)


def cells_of(blocks: list[dict]) -> int:
    n = 0
    for b in blocks:
        if b["type"] == "table":
            n += sum(len(r["cells"]) for r in b["rows"] if r["kind"] != "group")
        elif b["type"] == "collapsible":
            n += cells_of(b["blocks"])
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "lengthlens-paper-scale")
    ap.add_argument("--n-resamples", type=int, default=200)
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    from bench_report import build

    import lengthlens as ll
    from lengthlens.report import model as M
    from lengthlens.report.typeset import typst_model

    flat = build(args.data)
    t = time.perf_counter()
    analysis = ll.analyse(ll.load(flat, run_graders=False), n_resamples=args.n_resamples)
    t_analyse = time.perf_counter() - t
    t = time.perf_counter()
    figures = M.figure_blocks(analysis)
    t_figures = time.perf_counter() - t
    t = time.perf_counter()
    model = typst_model(M.build(analysis, figures))
    print(f"analysis {t_analyse:.1f} s; figures drawn once for both documents {t_figures:.1f} s; the model "
          f"{time.perf_counter() - t:.2f} s ({len(json.dumps(model, ensure_ascii=False)) / 1e6:.1f} MB of JSON)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wall, cpu = typeset(model, work, "whole")
        print(f"{'report.pdf, whole':<34} {wall:6.2f} s wall {cpu:6.2f} s CPU  {cells_of([b for s in model['sections'] for b in s['blocks']]):>7,} table cells")
        empty = {**model, "sections": []}
        wall, cpu = typeset(empty, work, "empty")
        print(f"{'an empty document (start-up, fonts)':<34} {wall:6.2f} s wall {cpu:6.2f} s CPU")
        for s in model["sections"]:
            wall, cpu = typeset({**model, "sections": [s]}, work, s["id"])
            print(f"  {s['id']:<32} {wall:6.2f} s wall {cpu:6.2f} s CPU  {cells_of(s['blocks']):>7,} table cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
