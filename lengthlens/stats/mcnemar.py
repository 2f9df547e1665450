"""Small exact tests used by several analyses (one definition each)."""

from __future__ import annotations

from scipy import stats


def mcnemar_exact(wrong_to_right: int, right_to_wrong: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against 1/2."""
    n = wrong_to_right + right_to_wrong
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * stats.binom.cdf(min(wrong_to_right, right_to_wrong), n, 0.5)))
