"""Exact enumeration over every paired 2×2 table of n pairs, for validating the paired accuracy statistics.

An interval's exact coverage, a test's exact rejection rate, and the limit the item bootstrap's
percentile interval converges to, each a sum over the tables of :func:`lengthlens.stats.paired.tables`
weighted by :func:`~lengthlens.stats.paired.table_probabilities`: no Monte Carlo error. Only the tests
use them (tests/core/test_paired.py), so they live here rather than in the package.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from lengthlens.results import ConfidenceInterval
from lengthlens.stats.paired import table_probabilities, tables, tango_interval, truth

__all__ = ["bootstrap_percentile_interval", "exact_coverage", "exact_rejection_rate"]


@lru_cache(maxsize=16)
def _limits(fn: Callable, n: int) -> tuple[np.ndarray, np.ndarray]:
    b, c = tables(n)
    lims = np.array([tuple(fn(int(x), int(y), n))[:2] for x, y in zip(b, c)], dtype=float).reshape(-1, 2)
    return lims[:, 0], lims[:, 1]


def exact_coverage(n: int, discordance: float, drop: float,
                   interval: Callable[[int, int, int], ConfidenceInterval | tuple[float, float]] = tango_interval) -> float:
    """Exact coverage of an interval for Δ = p10 − p01 on n pairs: Σ over every table of P(table) · [Δ in interval].

    ``interval(b, c, n)`` returns (low, high) as proportions; the truth is p10 = ψ/2, p01 = ψ/2 + D
    (Δ = −D). Each table's interval is computed once per n and interval function.

    Parameters
    ----------
    n : graded pairs (one per item).
    discordance : ψ, the share of pairs that flip either way without a net change.
    drop : D, the true accuracy loss (a proportion).
    interval : (b, c, n) -> (low, high), the interval under study.

    Returns
    -------
    float
        The probability that the interval contains the true Δ.

    Examples
    --------
    >>> round(exact_coverage(12, 0.15, 0.05), 4)   # Tango's interval, 95 %
    0.9908
    >>> round(exact_coverage(30, 0.2, 0.0, bootstrap_percentile_interval), 4)
    0.9521
    """
    p10, p01 = truth(discordance, drop)
    lo, hi = _limits(interval, int(n))
    delta = p10 - p01
    tol = 1e-12
    return float(np.sum(table_probabilities(n, p10, p01)[(lo <= delta + tol) & (delta - tol <= hi)]))


def exact_rejection_rate(n: int, discordance: float, drop: float, pvalue: Callable[[int, int, int], float],
                         alpha: float) -> float:
    """Exact probability that ``pvalue(b, c, n) < alpha`` on n pairs with discordance ψ and drop D (proportions).

    The size (at D = 0 or at the margin) or the power of a paired test, summed over every table, for validation.

    Parameters
    ----------
    n : graded pairs (one per item).
    discordance : ψ, the share of pairs that flip either way without a net change.
    drop : D, the true accuracy loss (a proportion).
    pvalue : (b, c, n) -> the test's p-value.
    alpha : the level it rejects at.

    Returns
    -------
    float
        The probability of the tables whose p-value is below ``alpha``.

    Examples
    --------
    >>> from lengthlens.stats.mcnemar import mcnemar_exact
    >>> round(exact_rejection_rate(30, 0.2, 0.0, lambda b, c, n: mcnemar_exact(b, c), 0.05), 4)   # size under no change
    0.0128
    >>> from lengthlens.stats.paired import ALPHA_ONE_SIDED, flag_power, noninferiority_test
    >>> loss = lambda b, c, n: noninferiority_test(b, c, n).pvalue
    >>> round(exact_rejection_rate(12, 0.2, 0.3, loss, ALPHA_ONE_SIDED), 3), round(flag_power(12, 0.2, 0.3), 3)
    (0.254, 0.254)
    """
    p10, p01 = truth(discordance, drop)
    b, c = tables(n)
    p = np.array([pvalue(int(x), int(y), int(n)) for x, y in zip(b, c)])
    return float(np.sum(table_probabilities(n, p10, p01)[p < alpha]))


def bootstrap_percentile_interval(b: int, c: int, n: int, confidence_level: float = 0.95) -> tuple[float, float]:
    """The item bootstrap's percentile interval for (b − c)/n with infinitely many resamples, exactly.

    A resample of n pairs from the table is multinomial (n; b/n, c/n, rest/n), so the bootstrap
    distribution of (b* − c*)/n is enumerable: the limits are its (1 ∓ level)/2 quantiles (the smallest
    value whose distribution function reaches them). For validation: what the percentile interval
    converges to, without Monte Carlo error.

    Parameters
    ----------
    b : pairs wrong on the baseline and right on the relaxed arm (wrong→right).
    c : pairs right on the baseline and wrong on the relaxed arm (right→wrong).
    n : graded pairs (b + c ≤ n).
    confidence_level : two-sided level.

    Returns
    -------
    tuple of float
        (low, high) as a difference of proportions.

    Examples
    --------
    >>> bootstrap_percentile_interval(0, 0, 12)   # no discordant pair: every resample is unchanged
    (0.0, 0.0)
    >>> lo, hi = bootstrap_percentile_interval(6, 16, 161)   # Tango's interval: -0.1240 to -0.0054
    >>> round(lo, 4), round(hi, 4)
    (-0.118, -0.0062)
    """
    b, c, n = int(b), int(c), int(n)
    bb, cc = tables(n)
    prob = table_probabilities(n, b / n, c / n)
    diff = bb - cc
    values = np.arange(-n, n + 1)
    dist = np.bincount(diff + n, weights=prob, minlength=2 * n + 1)
    cdf = np.cumsum(dist)
    a = (1.0 - confidence_level) / 2.0
    lo = values[np.searchsorted(cdf, a - 1e-12)]
    hi = values[np.searchsorted(cdf, 1.0 - a - 1e-12)]
    return float(lo / n), float(hi / n)
