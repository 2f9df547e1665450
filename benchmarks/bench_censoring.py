"""Time ``censoring_cell`` per cell at n = 12, 164, 1319 items (both AFT laws; sandwich or B_aft = 1000 refits).

Synthetic paired log-normal lengths with ~35 % of relaxed and ~15 % of baseline runs censored at a
budget of 4096 tokens, roughly the study's heavy-censoring cells. Run:
``python benchmarks/bench_censoring.py [--repeats 3] [--resamples 1000] [--aft-ci sandwich|bootstrap]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

# Runnable from a plain checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lengthlens.analyses.censoring import censoring_cell  # noqa: E402
from lengthlens.stats.aft import DISTS, fit_aft  # noqa: E402
from lengthlens.stats.aft import fit_aft_bootstrap


def make_cell(n: int, rng: np.random.Generator, budget: int = 4096, B: int = 2000):
    """One synthetic cell: relaxed and baseline lengths, censoring flags and a counts matrix."""
    u = rng.normal(0.0, 0.5, n)
    log_base = np.log(1700.0) + u + 0.6 * rng.normal(size=n)
    log_rel = np.log(1700.0) + 0.35 + u + 0.6 * rng.normal(size=n)
    L, Ls = np.ceil(np.exp(log_rel)), np.ceil(np.exp(log_base))
    c, cs = L >= budget, Ls >= budget
    L, Ls = np.minimum(L, budget), np.minimum(Ls, budget)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=B)
    return L, c, Ls, cs, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--aft-ci", choices=("sandwich", "bootstrap"), default="sandwich")
    args = ap.parse_args()
    rng = np.random.default_rng(20261129)
    print(f"censoring_cell timing, aft_ci={args.aft_ci}, B_aft={args.resamples} (bootstrap columns), best of {args.repeats}")
    print(f"{'n_items':>8} {'cens':>6} {'cens*':>6} {'cell_s':>8} " + " ".join(f"{d + '_s':>12}" for d in DISTS))
    for n in (12, 164, 1319):
        L, c, Ls, cs, counts = make_cell(n, rng)
        best = np.inf
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            censoring_cell(L, c, 4096, Ls, cs, 4096, counts, n_resamples_aft=args.resamples, aft_ci=args.aft_ci)
            best = min(best, time.perf_counter() - t0)
        # Per distribution: point fit plus vectorised bootstrap alone.
        lengths = np.concatenate([L, Ls])
        cens = np.concatenate([c, cs])
        x = np.concatenate([np.ones(n), np.zeros(n)])
        W = counts[: args.resamples][:, np.concatenate([np.arange(n), np.arange(n)])].astype(float)
        per = []
        for dist in DISTS:
            b = np.inf
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                fit = fit_aft(lengths, cens, x, dist=dist)
                fit_aft_bootstrap(lengths, cens, x, W, dist, start=fit)
                b = min(b, time.perf_counter() - t0)
            per.append(b)
        print(f"{n:>8} {c.mean():>6.2f} {cs.mean():>6.2f} {best:>8.3f} " + " ".join(f"{t:>12.3f}" for t in per))


if __name__ == "__main__":
    main()
