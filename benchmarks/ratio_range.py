"""Coverage of the ratio intervals when a studentized limit leaves the item ratios: each way of replacing it, measured.

    python benchmarks/ratio_range.py [--sizes 12 30] [--seeds 1 4] [--reps 400] [--resamples 1000]

Each replication draws n items with heavy-tailed lengths (item means log-normal, log-sd ``--spread``:
at 1.5 one item of 12 often carries half a sum), an item-level effect on length (λᵢ log-normal around
1.3), ``seeds`` runs per item, rounds from an acceptance length, and wall time whose per-round cost grows
with the context (a + b·L per round). The planted λ, R/R*, T/T* and time per round are the population
ratios of expected sums (computed once from 2·10⁶ items). Every option of
:func:`lengthlens.stats.intervals.estimates` (``outside_range``) is computed on the same draws; the
table gives coverage, the share of intervals replaced, and the median width. ``percentile`` is the
plain percentile interval for comparison.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lengthlens.stats import metrics  # noqa: E402
from lengthlens.stats.intervals import Resampled, estimates, moment_columns  # noqa: E402
from lengthlens.stats.resample import item_counts  # noqa: E402

NAMES = ("lambda", "rounds_ratio", "time_ratio", "time_per_round_ratio")
OPTIONS = ("keep", "percentile", "bca", "clip")


def draw(rng: np.random.Generator, n_items: int, seeds: int, spread: float) -> dict[str, np.ndarray]:
    """Per-run sums of one cell (n_items * seeds runs) and each run's item."""
    mu = np.exp(rng.normal(6.0, spread, n_items))
    lam = np.exp(rng.normal(math.log(1.3), 0.4, n_items))
    item = np.repeat(np.arange(n_items), seeds)
    Ls = mu[item] * np.exp(rng.normal(-0.045, 0.3, item.size))
    L = (mu * lam)[item] * np.exp(rng.normal(-0.045, 0.3, item.size))
    Rs = Ls / (2.2 + 1) * np.exp(rng.normal(0, 0.1, item.size))
    R = L / (3.0 + 1) * np.exp(rng.normal(0, 0.1, item.size))
    # per round a + b * context; the context grows over the run, so on average half the length
    Ts, T = Rs * (0.02 + 2e-6 * Ls / 2), R * (0.02 + 2e-6 * L / 2)
    cols = {"L": L, "L_star": Ls, "R": R, "R_star": Rs, "T": T, "T_star": Ts}
    return {k: np.bincount(item, weights=v, minlength=n_items) for k, v in cols.items()}


def truth(spread: float) -> dict[str, float]:
    s = draw(np.random.default_rng(0), 2_000_000, 1, spread)
    tot = {k: v.sum() for k, v in s.items()}
    return {"lambda": tot["L"] / tot["L_star"], "rounds_ratio": tot["R"] / tot["R_star"],
            "time_ratio": tot["T"] / tot["T_star"], "time_per_round_ratio": tot["T"] * tot["R_star"] / (tot["T_star"] * tot["R"])}


def run(n_items: int, seeds: int, reps: int, n_resamples: int, spread: float) -> dict:
    reg = metrics.registry()
    stats = {n: reg.metric(n) for n in NAMES}
    true = truth(spread)
    rng = np.random.default_rng(1000 * n_items + seeds)
    hit = {(o, n): 0 for o in (*OPTIONS, "pct") for n in NAMES}
    replaced = {(o, n): 0 for o in OPTIONS for n in NAMES}
    width = {(o, n): [] for o in (*OPTIONS, "pct") for n in NAMES}
    for _ in range(reps):
        items = draw(rng, n_items, seeds, spread)
        items.update(moment_columns(stats, items, "studentized"))
        counts = item_counts(n_items, n_resamples, rng).astype(float)
        r = Resampled(items, {k: counts @ v for k, v in items.items()}, counts)
        for o in OPTIONS:
            est, _ = estimates(stats, r, outside_range=o)
            for n in NAMES:
                e = est[n]
                hit[(o, n)] += int(e.low <= true[n] <= e.high)
                replaced[(o, n)] += int("outside" in e.note)
                width[(o, n)].append(e.high / e.low)
        est, _ = estimates(stats, r, ci="percentile")
        for n in NAMES:
            hit[("pct", n)] += int(est[n].low <= true[n] <= est[n].high)
            width[("pct", n)].append(est[n].high / est[n].low)
    return {"cover": {k: v / reps for k, v in hit.items()}, "replaced": {k: v / reps for k, v in replaced.items()},
            "width": {k: float(np.nanmedian(v)) for k, v in width.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[12, 30])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--spread", type=float, nargs="+", default=[1.0, 1.5])
    args = ap.parse_args()
    print("| spread | n | seeds | metric | " + " | ".join(f"{o}" for o in (*OPTIONS, "pct")) + " | replaced |")
    print("|---|---|---|---|" + "---|" * (len(OPTIONS) + 2))
    for spread in args.spread:
        for n in args.sizes:
            for s in args.seeds:
                out = run(n, s, args.reps, args.resamples, spread)
                for m in NAMES:
                    cells = [f"{out['cover'][(o, m)]:.1%} (×{out['width'][(o, m)]:.2f})" for o in (*OPTIONS, "pct")]
                    print(f"| {spread} | {n} | {s} | {m} | " + " | ".join(cells) +
                          f" | {out['replaced'][('percentile', m)]:.1%} |", flush=True)
    print(f"\n{args.reps} data sets per row, {args.resamples} resamples; ± one binomial SE at 95 %: "
          f"{math.sqrt(0.95 * 0.05 / args.reps):.1%}; (×w) the median ratio high/low")


if __name__ == "__main__":
    main()
