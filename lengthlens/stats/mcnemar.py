"""Small exact tests used by several analyses (one definition each)."""

from __future__ import annotations

import math
from fractions import Fraction


def mcnemar_exact(wrong_to_right: int, right_to_wrong: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against 1/2.

    2 · P(Bin(n, 1/2) ≤ min(b, c)), capped at 1, in exact integer arithmetic (sum of binomial
    coefficients over 2**n) and rounded once to float; no scipy.stats import on the report's path.

    Parameters
    ----------
    wrong_to_right : pairs wrong on the baseline and right on the relaxed arm (b).
    right_to_wrong : pairs right on the baseline and wrong on the relaxed arm (c).

    Returns
    -------
    float
        The p-value; 1 when no pair is discordant.

    Examples
    --------
    >>> round(mcnemar_exact(6, 16), 4)   # Fagerland, Lydersen & Laake (2017), ch. 8: 0.0525
    0.0525
    >>> mcnemar_exact(0, 0)
    1.0
    """
    n = wrong_to_right + right_to_wrong
    if n == 0:
        return 1.0
    k = min(wrong_to_right, right_to_wrong)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def mcnemar_midp(wrong_to_right: int, right_to_wrong: int) -> float:
    """Two-sided mid-p McNemar test: the exact p-value less the observed point probability, 2 [P(X ≤ k) − P(X = k)/2].

    X ~ Bin(b + c, 1/2), k = min(b, c), at most 1 (1 when b = c); exact integer arithmetic as
    :func:`mcnemar_exact`. Its level is near the nominal one at 12–30 items, where the exact test's is
    far below it.

    Parameters
    ----------
    wrong_to_right : pairs wrong on the baseline and right on the relaxed arm (b).
    right_to_wrong : pairs right on the baseline and wrong on the relaxed arm (c).

    Returns
    -------
    float
        The mid-p value; 1 when b = c.

    Examples
    --------
    >>> round(mcnemar_midp(6, 16), 6)   # Fagerland, Lydersen & Laake (2017), ch. 8 (Cavo et al. 2012): P = 0.034690
    0.03469
    """
    n = wrong_to_right + right_to_wrong
    if n == 0:
        return 1.0
    k = min(wrong_to_right, right_to_wrong)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return float(min(Fraction(1), Fraction(2 * tail - math.comb(n, k), 2**n)))
