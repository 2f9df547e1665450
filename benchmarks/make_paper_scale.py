"""Write the paper-scale synthetic study (raw tree + flat Parquet) to a folder and report how long each took.

    python benchmarks/make_paper_scale.py OUT_DIR [--workers N] [--force-commit] [--proposals] [--seed S]

Writes ``OUT_DIR/raw/<pair_slug>/runs/...`` (about 180k runs, 540k files) and ``OUT_DIR/runs.parquet``,
then prints seconds, file counts and sizes. OUT_DIR/raw must not exist yet.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lengthlens import synth  # noqa: E402


def _du(path: Path) -> tuple[int, int]:
    """(files, bytes) under path."""
    n = size = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            n += 1
            size += os.stat(os.path.join(dirpath, f)).st_size
    return n, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--force-commit", action="store_true", help="add the Table 4 force-commit arms")
    ap.add_argument("--proposals", action="store_true", help="also write proposals.jsonl (slow, large)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    spec = synth.paper_scale(force_commit=args.force_commit)
    print(f"spec: {len(spec.pairs)} pairs x {len(spec.datasets)} datasets, {spec.n_runs} runs; workers={args.workers}")
    args.out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    root = synth.write_raw(spec, args.out / "raw", seed=args.seed, proposals=args.proposals, workers=args.workers)
    t_raw = time.perf_counter() - t0
    n, size = _du(root)
    print(f"raw:     {t_raw:7.1f} s  {n} files  {size / 1e9:.2f} GB  ({spec.n_runs / t_raw:,.0f} runs/s)  -> {root}")

    t0 = time.perf_counter()
    p = synth.write_flat(spec, args.out / "runs.parquet", seed=args.seed)
    t_flat = time.perf_counter() - t0
    print(f"parquet: {t_flat:7.1f} s  1 file  {p.stat().st_size / 1e6:.1f} MB  -> {p}")


if __name__ == "__main__":
    main()
