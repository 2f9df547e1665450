"""CPU seconds of the cell table at paper scale and of its interval kernel's parts (BLAS on one thread).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_cell_kernel.py [--data runs.parquet] [--tree CHECKOUT] [--repeat 3]

Loads the paper-scale flat study (``synth.paper_scale()``, written to ``--data`` once), runs
``cells()`` ``--repeat`` times and prints the fastest run's CPU time (process time: other load on
the machine inflates it less than wall time; groups one at a time) with the time spent in each part, measured by wrapping
the functions that exist in the checkout: ``--tree`` times an older checkout (e.g. one made with
``git archive``) with this same script, for a before/after on the same machine.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from pathlib import Path

PARTS = (  # (module[:class], function, label); a missing one is skipped (older checkouts)
    ("lengthlens.stats.resample", "item_counts", "drawing the counts (resample.item_counts)"),
    ("lengthlens.stats.resample:DrawCache", "item_counts", "draws as float64 (DrawCache.item_counts, with the drawing)"),
    ("lengthlens.stats.estimate", "cell_intervals", "interval kernel (cell_intervals)"),
    ("lengthlens.stats.distinct_product", "unique_columns", "  distinct columns (unique_columns)"),
    ("lengthlens.stats.distinct_product:ColumnProduct", "add", "  distinct columns (ColumnProduct.add)"),
    ("lengthlens.stats.distinct_product:ColumnProduct", "product", "  the count-matrix product (ColumnProduct.product)"),
    ("lengthlens.stats.estimate", "metrics_and_ses", "  delta-method SEs (metrics_and_ses)"),
    ("lengthlens.stats.estimate", "metric_and_se", "  delta-method SEs (metric_and_se)"),
    ("lengthlens.stats.estimate", "studentized_interval", "  studentized_interval"),
    ("lengthlens.stats.estimate", "percentile_interval", "  percentile_interval"),
)


def _wrap(times: dict, owner, name: str, label: str) -> None:
    f = getattr(owner, name)

    def timed(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            times[label] = times.get(label, 0.0) + time.process_time() - t

    setattr(owner, name, timed)


def _wrap_unique(times: dict, np) -> None:  # the previous kernel's np.unique(X, axis=1)
    f = np.unique

    def timed(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            if k.get("axis") == 1:
                label = "  distinct columns (np.unique axis=1)"
                times[label] = times.get(label, 0.0) + time.process_time() - t

    np.unique = timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/tmp/lengthlens_paper_scale/runs.parquet"))
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree))
    import importlib

    import numpy as np

    import lengthlens as ll
    from lengthlens import synth
    from lengthlens.data.pairing import cell_units

    if not args.data.exists():
        args.data.parent.mkdir(parents=True, exist_ok=True)
        synth.write_flat(synth.paper_scale(), args.data, seed=0)
    times: dict[str, float] = {}
    for spec, name, label in PARTS:
        module, _, cls = spec.partition(":")
        try:
            owner = importlib.import_module(module)
        except ImportError:
            continue
        owner = getattr(owner, cls) if cls else owner
        if hasattr(owner, name):
            _wrap(times, owner, name, label)
    if not (hasattr(importlib.import_module("lengthlens.stats.estimate"), "resampled_sums")
            or hasattr(importlib.import_module("lengthlens.stats.distinct_product"), "ColumnProduct")):
        _wrap_unique(times, np)
    runs = ll.load(args.data, cache=False)
    units = cell_units(runs.paired)
    # one group at a time: the parts' times are process CPU time, which concurrent groups would count twice
    serial = {"workers": 1} if "workers" in inspect.signature(ll.cells).parameters else {}
    ll.cells(runs, units=units, n_resamples=50, **serial)  # imports and first calls
    best: tuple[float, dict] | None = None
    for _ in range(args.repeat):
        times.clear()
        t = time.process_time()
        ll.cells(runs, units=units, **serial)
        total = time.process_time() - t
        if best is None or total < best[0]:
            best = (total, dict(times))
    print(f"{ll.__file__}\n{'cells(), 360 cells, 10,000 resamples':62s} {best[0]:6.2f} s CPU")
    for label, seconds in best[1].items():
        print(f"{label:62s} {seconds:6.2f}")


if __name__ == "__main__":
    main()
