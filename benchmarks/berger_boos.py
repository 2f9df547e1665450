"""The accuracy-loss flag with the Berger–Boos (1994) restriction of its nuisance, against the default: level and power.

    python benchmarks/berger_boos.py [--sizes 12 30] [--gamma 0.001]

The default flag (:func:`lengthlens.stats.paired.noninferiority_test`) takes its exact p-value as the
largest tail P(Z ≤ z_obs) over the whole boundary Δ = −2 points; Berger & Boos (1994) take it over a
1 − γ confidence interval for the nuisance only and add γ, which keeps the level: here the discordance
p10 + p01, whose Clopper–Pearson interval comes from b + c ~ Bin(n, p10 + p01), on the boundary p10 in
[(L − margin)/2, (U − margin)/2] (the test's nuisance grid inside it and its two ends). Every table's
p-value is computed once per n; level (true drop 2 points), power at 5/10/20 points and the minimum
detectable drop at 80 % are exact sums over every paired 2×2 table, for both tests.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lengthlens.stats import paired  # noqa: E402

M, ALPHA = paired.MARGIN, paired.ALPHA_ONE_SIDED


def berger_boos_p(b: int, c: int, n: int, gamma: float) -> float:
    """Berger–Boos p-value: γ + the largest tail over the boundary's nuisance values inside the 1 − γ interval."""
    k = b + c
    lo = 0.0 if k == 0 else float(stats.beta.ppf(gamma / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - gamma / 2, k + 1, n - k))
    first, last = max((lo - M) / 2, 0.0), min((hi - M) / 2, (1 - M) / 2)
    if last < first:  # no boundary value inside the interval
        return gamma
    grid = paired._nuisance_grid(M)
    g = np.unique(np.r_[grid[(grid >= first) & (grid <= last)], first, last])
    z_obs = float(paired.score_statistic(b, c, n, -M))
    tail = paired._tail(paired._rejected_from(n, M, z_obs), *paired._mass(n, g, g + M))
    return min(1.0, float(tail.max()) + gamma)


def rejects(n: int, pvalue) -> np.ndarray:
    b, c = paired.tables(n)
    return np.array([pvalue(int(x), int(y), n) < ALPHA for x, y in zip(b, c)])


def rate(n: int, psi: float, drop: float, region: np.ndarray) -> float:
    return float(paired.table_probabilities(n, *paired.truth(psi, drop))[region].sum())


def mdd_pp(n: int, psi: float, region: np.ndarray, power: float = 0.8) -> float:
    lo, hi = M, 1.0 - psi
    if rate(n, psi, hi, region) < power:
        return math.inf
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if rate(n, psi, mid, region) >= power else (mid, hi)
    return 100.0 * hi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[12, 30])
    ap.add_argument("--gamma", type=float, default=0.001)
    args = ap.parse_args()
    print("| n | discordance | level default | level B–B | power 5/10/20 pp default | power 5/10/20 pp B–B "
          "| MDD default | MDD B–B |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        old = rejects(n, lambda b, c, m: paired.noninferiority_test(b, c, m).pvalue)
        new = rejects(n, lambda b, c, m: berger_boos_p(b, c, m, args.gamma))
        for psi in (0.10, 0.15, 0.25):
            pw = [" / ".join(f"{100 * rate(n, psi, d, r):.1f}" for d in (0.05, 0.10, 0.20)) for r in (old, new)]
            print(f"| {n} | {psi:.2f} | {100 * rate(n, psi, M, old):.2f} % | {100 * rate(n, psi, M, new):.2f} % "
                  f"| {pw[0]} | {pw[1]} | {mdd_pp(n, psi, old):.1f} | {mdd_pp(n, psi, new):.1f} |")
        sweep = np.linspace(0.0, 0.96, 49)
        level = [rate(n, psi, M, new) for psi in sweep]
        print(f"| {n} | largest B–B level over discordance 0–0.96: {100 * max(level):.2f} % "
              f"at {sweep[int(np.argmax(level))]:.2f} | | | | | | |")


if __name__ == "__main__":
    main()
