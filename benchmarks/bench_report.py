"""Time the report at paper scale (12 pairs x 6 datasets, ~180k runs, 360 cells): figures, HTML, PDF, LaTeX.

    python benchmarks/bench_report.py [--runs RUNS.parquet] [--out OUT] [--n-resamples N] [--pickle A.pkl]

Without ``--runs`` the paper-scale synthetic study is written once as flat Parquet (with completion
texts, so the attribution table is there) to OUT/runs.parquet. Loading and the analysis are timed
separately; the target is on ``write_report`` (everything after the analysis): <= 60 s with the PDF.
``--pickle`` reuses a saved Analysis so that only the rendering is timed.

Measured 2026-11-29 on the 2-core dev machine (432 cells incl. force-commit arms, 58 PDF pages):
load 3.3 s, analyse 191.5 s; write_report 22.8-28.1 s (figures 2.5-3.8, HTML 3.1-4.3, PDF 19.6-23.5),
41-50 s while other jobs kept the load average near 6.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=None, help="flat runs file or raw root (default: write the paper-scale synth)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/lengthlens-bench-report"))
    ap.add_argument("--n-resamples", type=int, default=10_000)
    ap.add_argument("--pickle", type=Path, default=None, help="load/save the Analysis here to time rendering alone")
    args = ap.parse_args()

    from lengthlens import synth
    from lengthlens.analyses.analyse import analyse
    from lengthlens.data.loading import load
    from lengthlens.report import render_html, render_pdf, write_csvs
    from lengthlens.report.latex import write_latex

    args.out.mkdir(parents=True, exist_ok=True)
    if args.pickle and args.pickle.exists():
        analysis = pickle.loads(args.pickle.read_bytes())
        print(f"analysis loaded from {args.pickle}")
    else:
        runs_path = args.runs
        if runs_path is None:
            runs_path = args.out / "runs.parquet"
            if not runs_path.exists():
                t = time.perf_counter()
                synth.write_flat(synth.paper_scale(force_commit=True), runs_path, text=True)
                print(f"synth (paper scale, flat, with text): {time.perf_counter() - t:6.1f} s")
        t = time.perf_counter()
        runs = load(runs_path)
        print(f"load:      {time.perf_counter() - t:6.1f} s  ({runs.table.height:,} runs)")
        t = time.perf_counter()
        analysis = analyse(runs, n_resamples=args.n_resamples)
        print(f"analyse:   {time.perf_counter() - t:6.1f} s  ({len(analysis.tables['cells'])} cells; tables: "
              f"{', '.join(analysis.tables)})")
        if args.pickle:
            args.pickle.write_bytes(pickle.dumps(analysis))

    t0 = time.perf_counter()
    write_csvs(analysis, args.out)
    t_csv = time.perf_counter() - t0
    timings: dict[str, float] = {}
    t = time.perf_counter()
    html = render_html(analysis, timings=timings)
    (args.out / "report.html").write_text(html, encoding="utf-8")
    t_html = time.perf_counter() - t
    t = time.perf_counter()
    render_pdf(html, args.out / "report.pdf")
    t_pdf = time.perf_counter() - t
    t = time.perf_counter()
    write_latex(analysis, args.out)
    t_tex = time.perf_counter() - t
    total = time.perf_counter() - t0
    print(f"csv:       {t_csv:6.1f} s")
    print(f"figures:   {timings.get('figures', float('nan')):6.1f} s")
    print(f"html:      {t_html:6.1f} s  ({len(html) / 1e6:.1f} MB, figures included)")
    print(f"pdf:       {t_pdf:6.1f} s  ({(args.out / 'report.pdf').stat().st_size / 1e6:.1f} MB)")
    print(f"latex:     {t_tex:6.1f} s")
    print(f"write_report total: {total:6.1f} s  (target <= 60 s)  -> {args.out}")
    return 0 if total <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
