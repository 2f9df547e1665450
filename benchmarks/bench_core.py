"""Paper-scale timing of the analysis core: loading (raw tree, cached raw tree, flat Parquet) and all cells.

    python benchmarks/bench_core.py [--data DIR] [--n-resamples 10000] [--scipy-cells N]

Builds (once, into DIR) the synthetic paper-scale study: 12 target-draft pairs x 6 datasets
(1319, 30, 164, 400, 80, 503 items) x strict + 5 rules, ~180k runs, as a raw-layout tree and as
one Parquet file. Then times, in this process: the Parquet load; the raw tree's first read (empty
cache) and a repeat read through the cache; all cells with intervals; and, on the same data, a
loop calling scipy.stats.bootstrap once per cell and metric, printing both and their ratio.
Each stage runs in its own forked process; its peak memory is that process's maximum resident set
size (the raw reader's worker processes are measured separately by the OS and are smaller).
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lengthlens as ll  # noqa: E402
from lengthlens import synth  # noqa: E402
from lengthlens.data.pairing import CELL_KEY, cell_units  # noqa: E402
from lengthlens.stats.estimate import unit_quantities  # noqa: E402
from lengthlens.stats.metrics import INTERVAL_METRICS, SUM_FIELDS, evaluate  # noqa: E402


def in_child(fn, *args):
    """Run fn(*args) in a forked child; return (its result, its own peak RSS in GB).

    Each stage gets its own process so that its peak memory is its own (os.wait4's rusage).
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            out = pickle.dumps(fn(*args))
        except BaseException as exc:  # report, don't hang the parent
            out = pickle.dumps(exc)
        with os.fdopen(w, "wb") as fh:
            fh.write(out)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, _, usage = os.wait4(pid, 0)
    result = pickle.loads(data)
    if isinstance(result, BaseException):
        raise result
    return result, usage.ru_maxrss / 1e6


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


#: The per-run sums each interval metric reads (metrics.py), so scipy resamples only those columns.
def metric_sum_fields(name: str) -> tuple[str, ...]:
    """The per-run columns a metric reads (found by perturbing its sums), so new interval metrics are covered."""
    from lengthlens.stats.delta import metric_fields

    return tuple(SUM_FIELDS[k] for k in metric_fields(name))


def scipy_loop(flat: Path, n_resamples: int, max_cells: int | None) -> tuple[float, int, int]:
    """scipy.stats.bootstrap once per (cell, interval metric), on the cell's paired runs; (seconds, calls, cells).

    The statistic is the same metric function lengthlens uses, applied to scipy's resampled runs
    (one seed per item, so runs and items coincide): the same work, done the common way.
    """
    from scipy import stats

    runs = ll.load(flat, run_graders=False)
    q = unit_quantities(cell_units(runs.paired))
    cells = q.partition_by(list(CELL_KEY), maintain_order=True)
    if max_cells is not None:
        step = max(1, len(cells) // max_cells)
        cells = cells[::step][:max_cells]  # spread over datasets, so that sizes are representative
    calls = 0
    t = time.perf_counter()
    for c in cells:
        for name in INTERVAL_METRICS:
            fields = metric_sum_fields(name)  # only the per-run columns this metric reads: a fair loop
            data = tuple(c[f].to_numpy() for f in fields)

            def statistic(*cols, axis=-1, fields=fields, name=name):
                first = cols[0].sum(axis=axis)
                sums = np.zeros(first.shape + (len(SUM_FIELDS),))
                for f, x in zip(fields, cols):
                    sums[..., SUM_FIELDS.index(f)] = x.sum(axis=axis)
                return evaluate(sums, (name,))[name]

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ungraded cells give NaN accuracy statistics
                stats.bootstrap(data, statistic, paired=True, vectorized=True, n_resamples=n_resamples,
                                method="percentile", random_state=np.random.default_rng(calls))
            calls += 1
    return time.perf_counter() - t, calls, len(cells)


def stage_load(path: Path, cache_dir: str | None):
    if cache_dir:
        os.environ["LENGTHLENS_CACHE_DIR"] = cache_dir
    t = time.perf_counter()
    runs = ll.load(path, run_graders=False, cache=cache_dir is not None)
    return time.perf_counter() - t, runs.table.height, runs.skipped.height


def stage_cells(flat: Path, n_resamples: int):
    runs = ll.load(flat, run_graders=False)
    t = time.perf_counter()
    table = ll.cells(runs, n_resamples=n_resamples)
    return time.perf_counter() - t, len(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "lengthlens-paper-scale")
    ap.add_argument("--n-resamples", type=int, default=10_000)
    ap.add_argument("--scipy-cells", type=int, default=None, help="time scipy on the first N cells only and scale up")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    raw, flat = build(args.data)

    (t_flat, n, _), mem = in_child(stage_load, flat, None)
    print(f"load flat Parquet:       {t_flat:6.1f} s  ({n:,} runs)  peak {mem:.2f} GB   target <= 5 s")

    cache = tempfile.mkdtemp(prefix="lengthlens-cache-")
    (t_raw, n, skipped), mem = in_child(stage_load, raw, cache)
    print(f"load raw tree, first:    {t_raw:6.1f} s  ({n:,} runs, {skipped} skipped)  peak {mem:.2f} GB   target <= 60 s")
    (t_again, n2, _), mem = in_child(stage_load, raw, cache)
    assert n2 == n
    print(f"load raw tree, cached:   {t_again:6.1f} s  peak {mem:.2f} GB   target <= 5 s")
    shutil.rmtree(cache, ignore_errors=True)

    (t_cells, n_cells), mem = in_child(stage_cells, flat, args.n_resamples)
    print(f"all cells, {args.n_resamples} resamples: {t_cells:6.1f} s  ({n_cells} cells, {len(INTERVAL_METRICS)} interval metrics each)"
          f"  peak {mem:.2f} GB   target <= 15 s")

    (t_scipy, calls, cells_done), mem = in_child(scipy_loop, flat, args.n_resamples, args.scipy_cells)
    full = t_scipy * n_cells / cells_done
    scaled = "" if cells_done == n_cells else f" (measured on {cells_done} cells spread over the datasets, scaled to {n_cells})"
    print(f"scipy.stats.bootstrap per cell and metric: {full:6.1f} s{scaled}")
    print(f"ratio: lengthlens is {full / t_cells:.1f}x faster   target >= 30x")


if __name__ == "__main__":
    main()
