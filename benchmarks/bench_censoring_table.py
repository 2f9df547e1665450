"""Time the censoring table (OUT/censoring.csv) at paper scale, as ``analyse()`` runs it.

    python benchmarks/bench_censoring_table.py [--data runs.parquet] [--n-resamples 10000] [--aft-ci sandwich|bootstrap]

Writes the paper-scale flat study (``synth.paper_scale()``, ~180k runs, 360 cells) to ``--data``
once, loads it, computes the cell table with a shared DrawCache (untimed, as ``analyse()`` does
first), then times ``censoring_table`` with the same draws and prints the seconds and the number
of cells. Runs against older checkouts too (options they lack are not passed).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lengthlens as ll  # noqa: E402
from lengthlens import synth  # noqa: E402
from lengthlens.analyses.analyse import censoring_table  # noqa: E402
from lengthlens.stats.resample import DEFAULT_SEED, DrawCache  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/tmp/lengthlens_paper_scale/runs.parquet"))
    ap.add_argument("--n-resamples", type=int, default=10_000)
    ap.add_argument("--aft-ci", choices=("sandwich", "bootstrap"), default="sandwich")
    args = ap.parse_args()
    if not args.data.exists():
        args.data.parent.mkdir(parents=True, exist_ok=True)
        synth.write_flat(synth.paper_scale(), args.data, seed=0)
    runs = ll.load(args.data, cache=False)
    draws = DrawCache(DEFAULT_SEED, args.n_resamples)
    t0 = time.perf_counter()
    cells_df = ll.cells(runs, n_resamples=args.n_resamples, draws=draws).to_frame()
    t_cells = time.perf_counter() - t0
    params = inspect.signature(censoring_table).parameters
    extra = {k: v for k, v in (("aft_ci", args.aft_ci), ("cells_df", cells_df)) if k in params}
    t0 = time.perf_counter()
    cz = censoring_table(runs, n_resamples=args.n_resamples, draws=draws, **extra)
    t_cz = time.perf_counter() - t0
    print(f"cells: {len(cells_df)} in {t_cells:.2f} s; censoring table: {len(cz)} cells in {t_cz:.2f} s "
          f"(aft_ci={extra.get('aft_ci', 'bootstrap (only option)')}, {args.n_resamples} resamples)")


if __name__ == "__main__":
    main()
