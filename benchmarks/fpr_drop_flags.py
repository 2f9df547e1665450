"""False-positive rate of each accuracy-drop flag when nothing changed, by simulation with planted truth.

Planted truth: relaxed and baseline verdicts of an item are exchangeable (no accuracy change); each
item is discordant with probability 0.15 (the real data's rate), half wrong->right, half right->wrong;
one run per item. For cells of n items, the share of cells each flag fires on:

- drop_2pp_point: the study's rule, point estimate of the accuracy change <= -2 points;
- drop_2pp: the interval rule, upper limit of the 95 % item-bootstrap percentile interval <= -2
  (lengthlens' own draws and interval function, 2,000 resamples);
- McNemar p < 0.05 with a lower accuracy (unadjusted);
- Holm / BH: adjusted p < 0.05 with a lower accuracy, in reports of 100 such cells (per-cell rate,
  and the share of reports with at least one flag).

    python benchmarks/fpr_drop_flags.py [--sims 4000]
"""

from __future__ import annotations

import argparse

import numpy as np

from lengthlens.stats.mcnemar import mcnemar_exact
from lengthlens.stats.metrics import drop_2pp, drop_2pp_point
from lengthlens.stats.multiplicity import benjamini_hochberg, holm
from lengthlens.stats.resample import item_counts
from lengthlens.stats.intervals import percentile_interval

DISCORDANCE = 0.15


def null_cell(rng: np.random.Generator, n: int) -> np.ndarray:
    """Per-item correctness differences (relaxed - baseline) in {-1, 0, 1} under the null."""
    u = rng.random(n)
    return np.where(u < DISCORDANCE / 2, 1.0, np.where(u < DISCORDANCE, -1.0, 0.0))


def flags(rng: np.random.Generator, n: int, n_resamples: int = 2000) -> tuple[bool, bool, float, float]:
    """(point rule, interval rule, McNemar p, delta) for one null cell."""
    d = null_cell(rng, n)
    delta = 100 * d.mean()
    counts = item_counts(n, n_resamples, rng, dtype=np.float64)
    _, hi, _ = percentile_interval((100 * (counts @ d) / n)[:, None])
    return drop_2pp_point(delta), drop_2pp(float(hi[0])), mcnemar_exact(int((d > 0).sum()), int((d < 0).sum())), delta


def rates(n: int, sims: int, seed: int = 0, family: int = 100) -> dict[str, float]:
    rng = np.random.default_rng([seed, n])
    rows = np.array([flags(rng, n) for _ in range(sims)])
    point, interval, p, delta = rows.T
    worse = delta < 0
    out = {"drop_2pp_point": point.mean(), "drop_2pp": interval.mean(), "mcnemar_p<0.05": (worse & (p < 0.05)).mean()}
    k = sims // family
    fam_p = p[: k * family].reshape(k, family)
    fam_w = worse[: k * family].reshape(k, family)
    h = np.array([holm(r) for r in fam_p]) < 0.05
    q = np.array([benjamini_hochberg(r) for r in fam_p]) < 0.05
    out.update({"holm<0.05": (h & fam_w).mean(), "bh<0.05": (q & fam_w).mean(),
                "holm_any_in_100": (h & fam_w).any(axis=1).mean(), "bh_any_in_100": (q & fam_w).any(axis=1).mean()})
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=4000)
    args = ap.parse_args()
    for n in (12, 30):
        r = rates(n, args.sims)
        print(f"n = {n}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()))
