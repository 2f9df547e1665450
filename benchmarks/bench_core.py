"""Paper-scale timing of the analysis core: loading (raw tree, cached raw tree, flat Parquet) and all cells.

    python benchmarks/bench_core.py [--data DIR] [--n-resamples 10000] [--scipy-cells N]

Builds (once, into DIR) the synthetic paper-scale study: 12 target-draft pairs x 6 datasets
(1319, 30, 164, 400, 80, 503 items) x strict + 5 rules, ~180k runs, as a raw-layout tree and as
one Parquet file. Then times, in this process: the Parquet load; the raw tree's first read (empty
cache) and a repeat read through the cache; all cells with intervals; and, on the same data, a
loop calling scipy.stats.bootstrap once per cell and metric, printing both and their ratio.
Peak memory is the process's (and its reader workers') maximum resident set size.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lengthlens as ll  # noqa: E402
from lengthlens import synth  # noqa: E402
from lengthlens.estimate import unit_quantities  # noqa: E402
from lengthlens.pairing import CELL_KEY, cell_units  # noqa: E402

# The metrics Table 3 rests on, each a ratio of two per-run sums (as scipy sees them).
SCIPY_METRICS = {"lambda": ("L", "L_star"), "rounds_ratio": ("R", "R_star"), "time_ratio": ("T", "T_star")}


def peak_rss_gb() -> float:
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(self_kb, child_kb) / 1e6


def build(data: Path) -> tuple[Path, Path]:
    raw, flat = data / "raw", data / "runs.parquet"
    spec = synth.paper_scale()
    if not raw.exists():
        t = time.perf_counter()
        synth.write_raw(spec, raw, seed=0, workers=os.cpu_count() or 1)
        print(f"built raw tree ({spec.n_runs:,} runs) in {time.perf_counter() - t:.1f} s")
    if not flat.exists():
        t = time.perf_counter()
        synth.write_flat(spec, flat, seed=0)
        print(f"built flat Parquet in {time.perf_counter() - t:.1f} s")
    return raw, flat


def scipy_loop(runs: ll.RunSet, n_resamples: int, max_cells: int | None) -> tuple[float, int]:
    """Seconds for scipy.stats.bootstrap over every (cell, metric), and how many calls were made."""
    from scipy import stats

    q = unit_quantities(cell_units(runs.paired))
    cells = q.partition_by(list(CELL_KEY), maintain_order=True)
    if max_cells is not None:
        cells = cells[:max_cells]
    calls = 0
    t = time.perf_counter()
    for c in cells:
        for num, den in SCIPY_METRICS.values():
            x, y = c[num].to_numpy(), c[den].to_numpy()
            stats.bootstrap((x, y), lambda a, b, axis=-1: a.mean(axis=axis) / b.mean(axis=axis), paired=True,
                            vectorized=True, n_resamples=n_resamples, method="percentile",
                            random_state=np.random.default_rng(calls))
            calls += 1
    return time.perf_counter() - t, calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "lengthlens-paper-scale")
    ap.add_argument("--n-resamples", type=int, default=10_000)
    ap.add_argument("--scipy-cells", type=int, default=None, help="time scipy on the first N cells only and scale up")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    raw, flat = build(args.data)

    t = time.perf_counter()
    runs_flat = ll.load(flat, run_graders=False)
    t_flat = time.perf_counter() - t
    print(f"load flat Parquet:      {t_flat:6.1f} s  ({runs_flat.table.height:,} runs)   target <= 5 s")

    cache = Path(tempfile.mkdtemp(prefix="lengthlens-cache-"))
    os.environ["LENGTHLENS_CACHE_DIR"] = str(cache)
    t = time.perf_counter()
    runs_raw = ll.load(raw, run_graders=False)
    t_raw = time.perf_counter() - t
    print(f"load raw tree, first:   {t_raw:6.1f} s  ({runs_raw.n_found:,} runs, {runs_raw.skipped.height} skipped)   target <= 60 s")
    t = time.perf_counter()
    again = ll.load(raw, run_graders=False)
    t_again = time.perf_counter() - t
    assert again.table.equals(runs_raw.table)
    print(f"load raw tree, cached:  {t_again:6.1f} s   target <= 5 s")
    shutil.rmtree(cache, ignore_errors=True)

    t = time.perf_counter()
    table = ll.cells(runs_flat, n_resamples=args.n_resamples)
    t_cells = time.perf_counter() - t
    print(f"all cells, {args.n_resamples} resamples: {t_cells:6.1f} s  ({len(table)} cells)   target <= 15 s")

    t_scipy, calls = scipy_loop(runs_flat, args.n_resamples, args.scipy_cells)
    n_cells = len(table)
    per_call = t_scipy / calls
    full = per_call * n_cells * len(SCIPY_METRICS)
    scaled = "" if args.scipy_cells is None else f" (measured on {calls} calls, scaled to {n_cells} cells)"
    print(f"scipy.stats.bootstrap loop, {len(SCIPY_METRICS)} metrics per cell: {full:6.1f} s{scaled}")
    print(f"speed-up over the scipy loop: {full / t_cells:.0f}x for all metrics of every cell vs 3 metrics in scipy   target >= 30x")
    print(f"peak memory: {peak_rss_gb():.2f} GB   target <= 4 GB")


if __name__ == "__main__":
    main()
