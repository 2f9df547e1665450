"""Type-I error of the paired accuracy tests with several seeds per item, by simulation with planted truth.

Planted truth: no change in expected accuracy, but item-varying effects: item i has base accuracy
p_i ~ U(0.35, 0.65) and an effect e_i ~ U(-0.3, 0.3) that moves the relaxed arm to p_i + e_i and
the baseline to p_i - e_i (so the two arms are exchangeable within an item: the null holds), with
4 or 5 seeds per item. Compares exact McNemar on runs (what cells() did before) with the
item-level sign-flip test (lengthlens.stats.paired_test).

    python benchmarks/sim_item_level_test.py [--sims 2000]
"""

from __future__ import annotations

import argparse

import numpy as np

from lengthlens.stats.mcnemar import mcnemar_exact
from lengthlens.stats.paired_test import item_differences, sign_flip_test


def draw_cell(rng: np.random.Generator, n_items: int, seeds=(4, 5), effect: float = 0.3):
    """Per-item counts (n_graded, c, c_star, w2r, r2w) of one cell under the null."""
    p = rng.uniform(0.35, 0.65, n_items)
    e = rng.uniform(-effect, effect, n_items)
    k = rng.integers(seeds[0], seeds[1] + 1, n_items)
    rel = [rng.random(ki) < pi + ei for ki, pi, ei in zip(k, p, e)]
    base = [rng.random(ki) < pi - ei for ki, pi, ei in zip(k, p, e)]
    c = np.array([r.sum() for r in rel], float)
    cs = np.array([b.sum() for b in base], float)
    w2r = sum(int((r & ~b).sum()) for r, b in zip(rel, base))
    r2w = sum(int((~r & b).sum()) for r, b in zip(rel, base))
    return k.astype(float), c, cs, w2r, r2w


def rejection_rates(n_items: int, sims: int, seed: int = 1, mc_resamples: int = 2000) -> tuple[float, float]:
    """(McNemar on runs, sign-flip on items) share of p < 0.05 over ``sims`` null cells."""
    rng = np.random.default_rng(seed)
    rej_mc = rej_sf = 0
    for _ in range(sims):
        k, c, cs, w2r, r2w = draw_cell(rng, n_items)
        rej_mc += mcnemar_exact(w2r, r2w) < 0.05
        rej_sf += sign_flip_test(item_differences(k, c, cs), n_resamples=mc_resamples)[0] < 0.05
    return rej_mc / sims, rej_sf / sims


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=2000)
    args = ap.parse_args()
    print("n_items  McNemar(runs)  sign-flip(items)")
    for n in (12, 30):
        mc, sf = rejection_rates(n, args.sims)
        print(f"{n:7d}  {mc:13.3f}  {sf:16.3f}")
