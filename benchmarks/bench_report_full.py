"""The whole ``lengthlens report`` at paper scale, as a user runs it, against the loops people write by hand.

    python benchmarks/bench_report_full.py [--data DIR] [--n-resamples 10000] [--repeat 1]
                                           [--study-cells N] [--scipy-cells N] [--skip-loops] [--floor] [--report-args=ARGS]

Builds (once, into DIR) the paper-scale synthetic study as one flat Parquet file: 12 target-draft
pairs x 6 datasets (1319, 30, 164, 400, 80, 503 items) x strict + 5 rules = 179,712 runs, 360 cells.
Then prints, in one run:

* start-up: ``import lengthlens`` and ``lengthlens --help`` as fresh processes;
* ``lengthlens report PAPER.parquet --out OUT --no-pdf`` and the same with the PDF, each as a fresh
  process: wall time, CPU time (user + system: what the process itself needed, less sensitive to
  other load than wall time), peak resident memory (the command's process tree, its worker processes included, sampled), and
  each stage's seconds from the command's ``--progress`` lines;
* the study-style loop on the same data: per cell, numpy draws of item indices (B x n) and the
  per-item sums gathered with fancy indexing, the same metric formulas, percentiles; and
  ``scipy.stats.bootstrap`` once per cell and interval metric (both on a spread sample of cells,
  scaled to all cells when ``--study-cells``/``--scipy-cells`` is below 360);
* the ratios against the targets: <= 6 s without the PDF, <= 12 s with it, peak <= 4 GB, and the
  whole report >= 4x faster than the study-style loop;
* the floor (``--floor``): the report's pass over the groups in this process on one core, and within it
  the CPU seconds of the two parts whose shapes fix the numbers (drawing the count matrices, and the
  count-matrix products), set against the command's other stages: the least the command could take on
  this machine with the same numbers even if everything else in the pass cost nothing; and the whole
  command once more on one core (``--workers 1``), whose figures and report.pdf stages, with the draws and
  products, are the work that stays as long as the numbers and the report's content stay: set against the
  CPU seconds the targets leave on this machine's cores (6 s x cores, 12 s x cores).

Exit status 0 when every target is met, 1 otherwise (the figures are printed either way).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_NO_PDF_S, TARGET_PDF_S, TARGET_PEAK_GB, TARGET_VS_STUDY = 6.0, 12.0, 4.0, 4.0
_STAGE = re.compile(r"^lengthlens: (.+?) (\d+\.\d) s$")


def build(data: Path) -> Path:
    from lengthlens import synth

    flat = data / "runs.parquet"
    if not flat.exists():
        t = time.perf_counter()
        synth.write_flat(synth.paper_scale(), flat, seed=0)
        print(f"built {flat} in {time.perf_counter() - t:.1f} s")
    return flat


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (Linux /proc; pages shared after a fork count twice)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue  # exited meanwhile
    return total


def run_child(cmd: list[str]) -> dict:
    """Run cmd as a child process; its wall and CPU seconds (with its worker processes), the peak of its
    process tree's summed RSS (GB, sampled every 20 ms) and its stderr. Raises on failure."""
    import threading

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)
        peak = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.02):
                peak[0] = max(peak[0], _tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # rusage of the child with its waited-for descendants (the worker processes): CPU summed
        _, status, usage = os.wait4(proc.pid, 0)
        stop.set()
        sampler.join()
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{text[-3000:]}")
    peak_gb = max(peak[0], usage.ru_maxrss * 1024) / 1e9
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_gb": peak_gb, "stderr": text}


def stages(stderr: str) -> dict[str, float]:
    """Each stage's seconds from the --progress lines."""
    return {m.group(1): float(m.group(2)) for line in stderr.splitlines() if (m := _STAGE.match(line))}


def time_report(flat: Path, out: Path, n_resamples: int, pdf: bool, repeat: int, extra: list[str]) -> dict:
    """The best of ``repeat`` whole-process runs of ``lengthlens report`` (the least disturbed by other load)."""
    cmd = [sys.executable, "-m", "lengthlens", "report", str(flat), "--out", str(out), "--progress",
           "--n-resamples", str(n_resamples), *extra] + ([] if pdf else ["--no-pdf"])
    runs = [run_child(cmd) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["wall"])
    best["stages"] = stages(best["stderr"])
    best["peak_gb"] = max(r["peak_gb"] for r in runs)
    return best


def cell_sample(flat: Path, max_cells: int | None):
    """Per cell, the per-run quantities metrics sum; a sample stratified by dataset, with each cell's weight.

    Datasets differ 44-fold in items, so the sample takes cells of every dataset in proportion
    (at least one each) and each sampled cell stands for (cells of its dataset) / (sampled of it):
    the sum of time x weight estimates the loop over all cells.
    """
    import lengthlens as ll
    from lengthlens.data.pairing import CELL_KEY, cell_units
    from lengthlens.stats.estimate import unit_quantities

    q = unit_quantities(cell_units(ll.load(flat, run_graders=False).paired))
    cells = q.partition_by(list(CELL_KEY), maintain_order=True)
    n_all = len(cells)
    if max_cells is None or max_cells >= n_all:
        return cells, [1.0] * n_all, n_all
    by_ds: dict[str, list] = {}
    for c in cells:
        by_ds.setdefault(c["dataset"][0], []).append(c)
    sample, weights = [], []
    for group in by_ds.values():
        k = max(1, round(max_cells * len(group) / n_all))
        picked = group[:: max(1, len(group) // k)][:k]
        sample += picked
        weights += [len(group) / len(picked)] * len(picked)
    return sample, weights, n_all


def study_loop(cells, n_resamples: int) -> list[float]:
    """The study-style bootstrap: per cell, B x n item draws and fancy-indexed sums of each needed per-item column.

    Same resampling unit (the item; seeds of an item summed), same formulas (lengthlens.stats.metrics)
    and percentile intervals; the work a plain numpy script does cell by cell.
    """
    import polars as pl

    from lengthlens.stats.metrics import INTERVAL_METRICS, SUM_FIELDS, evaluate

    needed = sorted({SUM_FIELDS.index(f) for m in INTERVAL_METRICS for f in metric_fields(m)})
    times = []
    for i, c in enumerate(cells):
        t = time.perf_counter()
        items = c.group_by("item_id", maintain_order=True).agg([pl.col(f).sum() for f in SUM_FIELDS])
        X = items.select(SUM_FIELDS).to_numpy().astype(np.float64)  # (n_items, fields)
        rng = np.random.default_rng(i)
        idx = rng.integers(0, X.shape[0], size=(n_resamples, X.shape[0]))
        sums = np.zeros((n_resamples, len(SUM_FIELDS)))
        for j in needed:  # only the columns the interval metrics read
            sums[:, j] = X[idx, j].sum(axis=1)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reps = evaluate(sums, INTERVAL_METRICS)
            for m in INTERVAL_METRICS:
                np.nanpercentile(reps[m], [2.5, 97.5])
        times.append(time.perf_counter() - t)
    return times


def metric_fields(name: str) -> tuple[str, ...]:
    """The per-run sums (metrics.SUM_FIELDS) that metric ``name`` reads (lengthlens.stats.delta finds them)."""
    from lengthlens.stats import delta
    from lengthlens.stats.metrics import SUM_FIELDS

    return tuple(SUM_FIELDS[k] for k in delta.metric_fields(name))


def scipy_loop(cells, n_resamples: int) -> list[float]:
    """scipy.stats.bootstrap once per (cell, interval metric), as in benchmarks/bench_core.py."""
    from scipy import stats

    from lengthlens.stats.metrics import INTERVAL_METRICS, SUM_FIELDS, evaluate

    reads = {name: metric_fields(name) for name in INTERVAL_METRICS}  # only the columns each metric reads: a fair loop
    times = []
    calls = 0
    for c in cells:
        t = time.perf_counter()
        for name in INTERVAL_METRICS:
            fields = reads[name]
            data = tuple(c[f].to_numpy() for f in fields)

            def statistic(*cols, axis=-1, fields=fields, name=name):
                sums = np.zeros(cols[0].sum(axis=axis).shape + (len(SUM_FIELDS),))
                for f, x in zip(fields, cols):
                    sums[..., SUM_FIELDS.index(f)] = x.sum(axis=axis)
                return evaluate(sums, (name,))[name]

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                stats.bootstrap(data, statistic, paired=True, vectorized=True, n_resamples=n_resamples,
                                method="percentile", random_state=np.random.default_rng(calls))
            calls += 1
        times.append(time.perf_counter() - t)
    return times


def print_report(name: str, r: dict, target: float) -> None:
    ok = "ok" if r["wall"] <= target else "MISSED"
    print(f"{name:<34} {r['wall']:6.1f} s wall, {r['cpu']:6.1f} s CPU, peak {r['peak_gb']:.2f} GB"
          f"   target <= {target:.0f} s: {ok}")
    for stage, secs in r["stages"].items():
        print(f"    {stage:<38} {secs:6.1f} s")


def startup() -> None:
    imp = min(run_child([sys.executable, "-c", "import lengthlens"])["wall"] for _ in range(3))
    hlp = min(run_child([sys.executable, "-m", "lengthlens", "--help"])["wall"] for _ in range(3))
    bare = min(run_child([sys.executable, "-c", "pass"])["wall"] for _ in range(3))
    print(f"python -c 'import lengthlens': {imp:.2f} s, lengthlens --help: {hlp:.2f} s "
          f"(a bare interpreter: {bare:.2f} s)   target import <= 0.5 s")


def calibration() -> str:
    """How fast this machine's core is, to compare this benchmark's seconds with another machine's: a plain Python
    loop and a one-thread float64 matrix product (the report's two kinds of work), best of three."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    def loop() -> float:
        t = time.perf_counter()
        s = 0
        for i in range(5_000_000):
            s += i
        return time.perf_counter() - t

    a = np.random.default_rng(0).random((1500, 1500))
    with threadpool_limits(1):
        gemm = []
        for _ in range(3):
            t = time.perf_counter()
            a @ a
            gemm.append(time.perf_counter() - t)
    py = min(loop() for _ in range(3))
    return f"core speed: Python loop of 5M additions {py:.2f} s, one-thread matrix product {2 * 1500 ** 3 / min(gemm) / 1e9:.0f} GFLOP/s"


def pass_floor(flat: Path, n_resamples: int) -> dict:
    """The report's pass over the groups (cells, censoring, attribution) in this process on one core, with the CPU
    seconds of drawing the count matrices and of the count-matrix products, and the products' size.

    Those two are fixed by the numbers: the draws by the seed's stream, the products by the resamples, the items
    and the distinct columns the metrics read (in float64, as the sums of non-integer values must stay the same to
    the bit). The two methods are timed in place for this call only.
    """
    from unittest import mock

    from threadpoolctl import threadpool_limits

    import lengthlens as ll
    from lengthlens.analyses.attribution import channel_units
    from lengthlens.analyses.group_pass import group_pass
    from lengthlens.analyses.analyse import analyse
    from lengthlens.stats.distinct_product import ColumnProduct
    from lengthlens.stats.resample import DrawCache

    spent = {"draws": 0.0, "products": 0.0, "flop": 0.0, "n_products": 0, "columns": []}
    float_counts, product = DrawCache._float_counts, ColumnProduct.product

    def timed_float_counts(self: DrawCache, *args):
        t = time.process_time()
        try:
            return float_counts(self, *args)
        finally:
            spent["draws"] += time.process_time() - t

    def timed_product(self: ColumnProduct):
        first = self._product is None  # later calls read the product taken on the first
        t = time.process_time()
        try:
            return product(self)
        finally:
            spent["products"] += time.process_time() - t
            if first:
                spent["n_products"] += 1
                spent["columns"].append(self.n_distinct)
                spent["flop"] += 2.0 * self.n_distinct * self.counts.shape[0] * self.counts.shape[1]

    defaults = {k: p.default for k, p in inspect.signature(analyse).parameters.items()}
    runs = ll.load(flat)
    channels = channel_units(runs)
    with (mock.patch.object(DrawCache, "_float_counts", timed_float_counts),
          mock.patch.object(ColumnProduct, "product", timed_product),
          threadpool_limits(1)):  # BLAS on one thread, as in the command's workers
        t = time.process_time()
        group_pass(runs, channels, n_resamples=n_resamples, seed=defaults["seed"], ci=defaults["ci"],
                   confidence_level=defaults["confidence_level"], n_resamples_aft=defaults["n_resamples_aft"],
                   aft_ci=defaults["aft_ci"], workers=1)
        spent["pass"] = time.process_time() - t
    return spent


def print_floor(floor: dict, no_pdf: dict, with_pdf: dict, cores: int | None = None, one_core: dict | None = None) -> None:
    """The pass's fixed part against the rest, and the least the command could take here with the same numbers
    (``cores``: the machine's, by default; ``one_core``: the command with the PDF run with ``--workers 1``)."""
    fixed = floor["draws"] + floor["products"]
    cols = floor["columns"]
    print(f"the pass on one core (cells, censoring, attribution), in this process: {floor['pass']:6.1f} s CPU")
    print(f"    drawing the count matrices                 {floor['draws']:6.1f} s")
    print(f"    count-matrix products                      {floor['products']:6.1f} s   ({floor['n_products']} products of "
          f"{min(cols, default=0)}-{max(cols, default=0)} distinct columns, {floor['flop'] / 1e9:.0f} GFLOP, "
          f"{floor['flop'] / 1e9 / max(floor['products'], 1e-9):.0f} GFLOP/s)")
    print(f"    everything else                            {floor['pass'] - fixed:6.1f} s")
    cores = cores or os.cpu_count() or 1
    st = no_pdf["stages"]
    rest = sum(v for k, v in st.items() if k != "cells, censoring, attribution")
    least = fixed / cores + rest
    print(f"floor of --no-pdf on {cores} cores, were the pass only its draws and products: {fixed:.1f} s / {cores} cores "
          f"+ the command's other stages {rest:.1f} s = {least:.1f} s + process start   target <= {TARGET_NO_PDF_S:.0f} s")
    pdf = with_pdf["stages"].get("report.pdf")
    if pdf is not None:
        print(f"report.pdf alone (WeasyPrint, after the rest; its parts over {cores} processes, the Cells table's part "
              f"in one): {pdf:.1f} s   target for the whole command <= {TARGET_PDF_S:.0f} s")
    if one_core is not None:
        print_budget(fixed, one_core, cores)


def print_budget(fixed: float, one_core: dict, cores: int) -> None:
    """The work that stays while the numbers and the report's content stay, against the CPU seconds the targets leave.

    On ``cores`` cores a command of W CPU seconds takes at least W / cores of wall time, so a target of S seconds
    leaves S x cores of CPU. What stays: the pass's draws and products (``fixed``, timed in place), and the
    figures' and report.pdf's drawing, timed as stages of a one-core run (matplotlib and WeasyPrint on the
    report's figures and pages; the parallel print needs more CPU than this, not less).
    """
    st = one_core["stages"]
    figures, pdf = st.get("figures", 0.0), st.get("report.pdf", 0.0)
    print(f"the whole command with the PDF on one core (--workers 1): {one_core['wall']:.1f} s wall, "
          f"{one_core['cpu']:.1f} s CPU; figures {figures:.1f} s, report.pdf {pdf:.1f} s")
    drawing = f"draws and products {fixed:.1f} s + figures {figures:.1f} s"
    for label, parts, need, target in (("--no-pdf", drawing, fixed + figures, TARGET_NO_PDF_S),
                                       ("with the PDF", f"{drawing} + report.pdf {pdf:.1f} s", fixed + figures + pdf, TARGET_PDF_S)):
        budget = target * cores
        verdict = ("over: the target cannot be met here with these numbers and this report" if need > budget
                   else "within: this work does not rule the target out")
        print(f"CPU that stays, {label}: {parts} = {need:.1f} s; the target leaves {target:.0f} s x {cores} cores = "
              f"{budget:.1f} s: {verdict}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "lengthlens-paper-scale")
    ap.add_argument("--n-resamples", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each report command; the fastest is shown")
    ap.add_argument("--study-cells", type=int, default=None, help="time the study-style loop on N cells and scale")
    ap.add_argument("--scipy-cells", type=int, default=24, help="time scipy.stats.bootstrap on N cells and scale (default 24)")
    ap.add_argument("--skip-loops", action="store_true", help="only the report commands")
    ap.add_argument("--floor", action="store_true", help="also time the pass on one core and its fixed part (draws, products), and the command on one core")
    ap.add_argument("--report-args", default="", help="more options for lengthlens report, as one string after '=': --report-args='--ci percentile'")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    flat = build(args.data)
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {calibration()}")
    startup()
    out = Path(tempfile.mkdtemp(prefix="lengthlens-bench-full-"))
    extra = shlex.split(args.report_args)
    if extra:
        print(f"lengthlens report options: {' '.join(extra)}")
    no_pdf = time_report(flat, out / "no-pdf", args.n_resamples, pdf=False, repeat=args.repeat, extra=extra)
    print_report("lengthlens report --no-pdf", no_pdf, TARGET_NO_PDF_S)
    with_pdf = time_report(flat, out / "pdf", args.n_resamples, pdf=True, repeat=args.repeat, extra=extra)
    print_report("lengthlens report (with PDF)", with_pdf, TARGET_PDF_S)
    peak = max(no_pdf["peak_gb"], with_pdf["peak_gb"])
    print(f"peak memory {peak:.2f} GB   target <= {TARGET_PEAK_GB:.0f} GB: {'ok' if peak <= TARGET_PEAK_GB else 'MISSED'}")
    met = no_pdf["wall"] <= TARGET_NO_PDF_S and with_pdf["wall"] <= TARGET_PDF_S and peak <= TARGET_PEAK_GB
    if not args.skip_loops:
        met &= loops(flat, args, no_pdf)
    if args.floor:
        one_core = time_report(flat, out / "one-core", args.n_resamples, pdf=True, repeat=1, extra=[*extra, "--workers", "1"])
        print_floor(pass_floor(flat, args.n_resamples), no_pdf, with_pdf, one_core=one_core)
    print(f"outputs in {out}")
    return 0 if met else 1


def loops(flat: Path, args: argparse.Namespace, no_pdf: dict) -> bool:
    """Time the hand-written loops on the same data; print them and the ratios; True when >= 4x is met."""
    cells, weights, n_all = cell_sample(flat, args.study_cells)
    study = float(np.dot(study_loop(cells, args.n_resamples), weights))
    scaled = "" if len(cells) == n_all else f" (timed on {len(cells)} cells, every dataset in proportion, scaled to {n_all})"
    print(f"study-style numpy loop, per cell:          {study:6.1f} s{scaled}")
    few, few_weights, _ = cell_sample(flat, args.scipy_cells)
    sp = float(np.dot(scipy_loop(few, args.n_resamples), few_weights))
    print(f"scipy.stats.bootstrap per cell and metric: {sp:6.1f} s (timed on {len(few)} cells, scaled to {n_all})")
    ratio = study / no_pdf["wall"]
    print(f"ratio: the whole report (--no-pdf, the whole command, load to report.html) is {ratio:.2f}x faster than the "
          f"study-style loop (intervals only), {sp / no_pdf['wall']:.2f}x faster than the scipy loop   "
          f"target >= {TARGET_VS_STUDY:.0f}x: {'ok' if ratio >= TARGET_VS_STUDY else 'MISSED'}")
    return ratio >= TARGET_VS_STUDY


if __name__ == "__main__":
    sys.exit(main())
