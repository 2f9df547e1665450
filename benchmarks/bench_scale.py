"""Scale past one file: ten million flat runs without text, loaded and turned into cells, against plain polars.

    python benchmarks/bench_scale.py [--data DIR] [--scale 14] [--seeds 4] [--n-resamples 10000] [--workers N]

Builds (once, into DIR/parts) the paper-scale study with every dataset's items multiplied by ``--scale``
and ``--seeds`` seeds per item (14 x 4: 10.06 M runs, up to 18,466 items per cell) as one Parquet file per
target-draft pair, no texts. Then, each step in a fresh process (its wall time, CPU time and peak memory):

* plain polars over the same files: a lazy scan, each relaxed run joined with its strict run, the sums
  per (cell, item) of the counters the metrics read: the least any tool does to get there;
* ``lengthlens.load(DIR/parts)``: read, validate, pair;
* ``lengthlens.cells(runs)``: every cell with its intervals (``--workers`` processes).

Exits 1 when a step's peak memory passes 8 GB (the target for the default ten million runs).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_report import run_child  # noqa: E402  (the same child-process timer as the report benchmark)

PLAIN_POLARS = """
import polars as pl, sys
keys = ["target", "draft", "dataset"]
lf = pl.scan_parquet(sys.argv[1] + "/*.parquet").filter(pl.col("status") == "ok")
cols = ["output_tokens", "draft_rounds", "accepted_tokens", "wall_time_s"]
base = lf.filter(pl.col("method") == "strict").select(*keys, "item_id", "seed", *[pl.col(c).alias(c + "_star") for c in cols])
pairs = lf.filter(pl.col("method") != "strict").join(base, on=[*keys, "item_id", "seed"])
sums = pairs.group_by(*keys, "method", "params", "item_id").agg(
    [pl.col(c).sum() for c in cols] + [pl.col(c + "_star").sum() for c in cols] + [pl.len().alias("n")]).collect()
print(sums.height)
"""

LOAD = """
import sys, lengthlens as ll
runs = ll.load(sys.argv[1], run_graders=False)
print(runs.paired.height)
"""

CELLS = """
import sys, lengthlens as ll
runs = ll.load(sys.argv[1], run_graders=False)
t = ll.cells(runs, n_resamples=int(sys.argv[2]), workers=int(sys.argv[3]))
print(len(t))
"""


#: Issue 30's memory target for ten million runs, loaded and analysed (the process tree's peak).
PEAK_TARGET_GB = 8.0


def build(data: Path, scale: int, seeds: int) -> Path:
    from lengthlens import synth
    from lengthlens.synth.flat import POLARS_SCHEMA, simulate

    parts = data / "parts"
    if parts.is_dir() and any(parts.glob("*.parquet")):
        return parts
    base = synth.paper_scale()
    spec = synth.paper_scale(seeds=tuple(range(seeds)), n_items={d.name: d.n_items * scale for d in base.datasets})
    t = time.perf_counter()
    df = simulate(spec, seed=0, text=False).select(POLARS_SCHEMA.names())
    parts.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(df.partition_by(["target", "draft"], maintain_order=True)):
        part.write_parquet(parts / f"pair-{i:02d}.parquet")
    print(f"built {df.height:,} runs in {len(list(parts.glob('*.parquet')))} files under {parts} in "
          f"{time.perf_counter() - t:.0f} s; {sum(f.stat().st_size for f in parts.glob('*.parquet')) / 1e6:.0f} MB")
    return parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "lengthlens-scale")
    ap.add_argument("--scale", type=int, default=14)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--n-resamples", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_only:
        build(args.data, args.scale, args.seeds)
        return 0
    parts = args.data / "parts"
    if not (parts.is_dir() and any(parts.glob("*.parquet"))):
        # Built in a child: a child's peak-memory counter starts at its parent's size, so this process stays small.
        run_child([sys.executable, __file__, "--build-only", "--data", str(args.data), "--scale", str(args.scale),
                   "--seeds", str(args.seeds)])
    steps = [("plain polars: scan, pair, sums per (cell, item)", [sys.executable, "-c", PLAIN_POLARS, str(parts)]),
             ("lengthlens.load(DIR)", [sys.executable, "-c", LOAD, str(parts)]),
             (f"lengthlens.load + cells ({args.n_resamples} resamples, {args.workers} workers)",
              [sys.executable, "-c", CELLS, str(parts), str(args.n_resamples), str(args.workers)])]
    got = {}
    for name, cmd in steps:
        r = got[name] = run_child(cmd)
        print(f"{name:<60} {r['wall']:7.1f} s wall, {r['cpu']:7.1f} s CPU, peak {r['peak_gb']:.2f} GB")
    plain, load, cells = (got[n] for n, _ in steps)
    print(f"ratios: load {load['wall'] / plain['wall']:.1f}x the plain polars pass, load and cells "
          f"{cells['wall'] / plain['wall']:.1f}x (peak memory {cells['peak_gb'] / plain['peak_gb']:.1f}x)")
    met = True
    for name, r in (("load", load), ("load and cells", cells)):
        ok = r["peak_gb"] <= PEAK_TARGET_GB
        met &= ok
        print(f"{name}: peak {r['peak_gb']:.2f} GB   target <= {PEAK_TARGET_GB:g} GB: {'ok' if ok else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
