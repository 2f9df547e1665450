"""Paired accuracy test at the item level: a sign-flip permutation test on per-item mean correctness differences.

With several seeds per item the runs of an item are not independent (the item's difficulty and
the rule's effect on it are shared), so McNemar's test on runs over-rejects. The item is the unit:
d_i = mean over the item's graded pairs of (c - c*). Under the null that the relaxed and baseline
runs of an item are exchangeable, each d_i is symmetric about 0, so the signs can be flipped.
Statistic: |sum_i d_i|; p = share of the 2^m sign patterns (m = items with d_i != 0) whose
|sum| is at least the observed one. Exact (all patterns) when m <= EXACT_MAX_ITEMS, else Monte
Carlo with a fixed seed, p = (1 + #{|sum_b| >= |obs|}) / (1 + B). With one run per item d_i is
-1, 0 or 1 and the exact test equals the exact McNemar test.

The default p-value of the accuracy tests is the mid-p one: patterns whose |sum| ties the observed
one count half, P(|S| > |s|) + P(|S| = |s|) / 2 (Monte Carlo: (1/2 + #{>} + #{=}/2) / (1 + B)); with
d_i = ±1 and b ≠ c it equals the mid-p McNemar test. The exact tests' level is far below nominal at
12-30 items (a p-value that can only be conservative); the mid-p one is close to it.
"""

from __future__ import annotations

import numpy as np

from lengthlens.results import TestResult
from lengthlens.stats.mcnemar import mcnemar_exact, mcnemar_midp

#: Items with a non-zero difference up to which all 2^m sign patterns are enumerated.
EXACT_MAX_ITEMS = 16
#: Sign patterns drawn beyond that, and their fixed seed (same data, same p-value).
MC_RESAMPLES = 20_000
#: The Monte Carlo test's fixed seed.
MC_SEED = 20260817
_TOL = 1e-9  # the per-item means are fractions; sums that tie the observed one must count


def sign_flip_test(d, *, exact_max_items: int = EXACT_MAX_ITEMS, n_resamples: int = MC_RESAMPLES,
                   seed: int = MC_SEED, mid_p: bool = False) -> TestResult:
    """Two-sided sign-flip permutation test of sum(d) = 0: are the per-item differences symmetric about 0?

    Parameters
    ----------
    d : per-item differences (e.g. mean correct − correct* over an item's graded pairs); zeros and
        non-finite values carry no sign and are left out.
    exact_max_items : up to this many non-zero differences every sign pattern is enumerated; beyond it,
        ``n_resamples`` random patterns with the fixed ``seed`` (same data, same p-value).
    n_resamples, seed : the Monte Carlo patterns.
    mid_p : ties with the observed |sum| count half (the mid-p value).

    Returns
    -------
    TestResult
        ``statistic`` Σ d, ``pvalue``, and ``method``: ``sign_flip_exact`` or ``sign_flip_monte_carlo``
        (``sign_flip_midp_…`` with ``mid_p``).

    Examples
    --------
    >>> r = sign_flip_test([1.0, 1.0, 1.0, -0.5])   # 4 of the 16 sign patterns reach |sum| 2.5
    >>> r.statistic, r.pvalue, r.method
    (2.5, 0.25, 'sign_flip_exact')
    >>> sign_flip_test([1.0, 1.0, 1.0, -0.5], mid_p=True).pvalue   # the 2 that tie it count half
    0.1875
    """
    p, kind = _sign_flip_p(d, exact_max_items, n_resamples, seed, mid_p)
    d = np.asarray(d, dtype=float)
    statistic = float(d[np.isfinite(d)].sum())
    return TestResult(statistic, p, f"sign_flip_midp_{kind}" if mid_p else f"sign_flip_{kind}")


def _sign_flip_p(d, exact_max_items: int, n_resamples: int, seed: int, mid_p: bool) -> tuple[float, str]:
    """:func:`sign_flip_test`'s p-value and ``exact`` or ``monte_carlo``."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d) & (d != 0)]
    m = d.size
    if m == 0:
        return 1.0, "exact"
    tol = _TOL * max(1.0, np.abs(d).sum())
    obs = abs(d.sum())
    if m <= exact_max_items:
        signs = 1.0 - 2.0 * ((np.arange(2**m)[:, None] >> np.arange(m)) & 1)
        s = np.abs(signs @ d)
        at_least = np.mean(s >= obs - tol)
        return float(at_least - 0.5 * np.mean(np.abs(s - obs) <= tol) if mid_p else at_least), "exact"
    rng = np.random.default_rng(seed)
    total, hits, ties = d.sum(), 0, 0
    for start in range(0, n_resamples, 4096):
        b = min(4096, n_resamples - start)
        # One random bit per item (a bit set flips its sign): sum = total - 2 * (bits @ d).
        bits = np.unpackbits(rng.integers(0, 256, size=(b, (m + 7) // 8), dtype=np.uint8), axis=1, count=m)
        s = np.abs(total - 2.0 * (bits.astype(np.float64) @ d))
        hits += int(np.sum(s >= obs - tol))
        ties += int(np.sum(np.abs(s - obs) <= tol))
    if mid_p:
        return (0.5 + hits - 0.5 * ties) / (1 + n_resamples), "monte_carlo"
    return (1 + hits) / (1 + n_resamples), "monte_carlo"


def item_differences(n_graded: np.ndarray, c: np.ndarray, c_star: np.ndarray) -> np.ndarray:
    """Per-item mean correctness difference over the item's graded pairs (items with none graded left out)."""
    n_graded = np.asarray(n_graded, dtype=float)
    keep = n_graded > 0
    return (np.asarray(c, float)[keep] - np.asarray(c_star, float)[keep]) / n_graded[keep]


def paired_accuracy_test(n_graded, c, c_star, *, mid_p: bool = True) -> TestResult:
    """The paired accuracy test of a cell from per-item sums of graded pairs, correct and correct*.

    McNemar on runs when every item has at most one graded pair (the sign-flip test would give the
    same p-value); with several seeds per item, the item-level sign-flip test (:func:`sign_flip_test`),
    since runs of an item are not independent.

    Parameters
    ----------
    n_graded : graded pairs per item.
    c, c_star : per item, the relaxed arm's and the baseline's correct runs among them.
    mid_p : the mid-p value (default; ``mcnemar_midp``, ``sign_flip_midp_exact`` /
        ``sign_flip_midp_monte_carlo``), else the exact one (``mcnemar_exact``, ``sign_flip_exact`` /
        ``sign_flip_monte_carlo``).

    Returns
    -------
    TestResult
        ``statistic`` Σᵢ dᵢ, the sum of the per-item mean differences (with one run per item:
        wrong→right minus right→wrong), ``pvalue`` two-sided, ``method`` as above.

    Examples
    --------
    >>> paired_accuracy_test([1, 1, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1])
    TestResult(statistic=-3.0, pvalue=0.125, method='mcnemar_midp')
    >>> paired_accuracy_test([2, 2, 2], [0, 1, 0], [2, 2, 1], mid_p=False).method
    'sign_flip_exact'
    """
    n_graded, c, c_star = (np.asarray(a, dtype=float) for a in (n_graded, c, c_star))
    d = item_differences(n_graded, c, c_star)
    statistic = float(d.sum()) if d.size else 0.0
    if n_graded.size == 0 or n_graded.max() <= 1:
        b, cc = int(np.sum(c * (1 - c_star))), int(np.sum(c_star * (1 - c)))
        if mid_p:
            return TestResult(statistic, mcnemar_midp(b, cc), "mcnemar_midp")
        return TestResult(statistic, mcnemar_exact(b, cc), "mcnemar_exact")
    return sign_flip_test(d, mid_p=mid_p)


def accuracy_test_label(name: str) -> str:
    """A test name :func:`paired_accuracy_test` returns, in words for a reader: "McNemar" or "sign-flip", with "mid-p".

    Parameters
    ----------
    name : the test's ``method`` (e.g. ``sign_flip_midp_exact``).

    Returns
    -------
    str

    Examples
    --------
    >>> accuracy_test_label("sign_flip_midp_monte_carlo"), accuracy_test_label("mcnemar_exact")
    ('sign-flip mid-p', 'McNemar')
    """
    base = "sign-flip" if str(name).startswith("sign_flip") else "McNemar"
    return f"{base} mid-p" if "midp" in str(name) else base
