"""Paired accuracy statistics at 12–30 items: Tango's score interval, the loss test, its power, mid-p tests.

A cell's graded pairs form a paired 2×2 table: ``b`` pairs wrong on the baseline and right on the
relaxed arm, ``c`` right on the baseline and wrong on the relaxed arm, ``n`` graded pairs in all. The
accuracy change is Δ = p10 − p01, estimated by (b − c)/n. Only (b, c) carry information about Δ: the
concordant pairs enter through n alone.

- :func:`tango_interval`: Tango's (1998) score interval for Δ (one graded pair per item).
- :func:`item_interval`: a t interval on the per-item mean differences (several seeds per item).
- :func:`noninferiority_test` / :func:`item_noninferiority_test`: the one-sided test of a loss of more
  than the margin (H0: Δ ≥ −margin against H1: Δ < −margin), the accuracy-loss flag.
- :func:`minimum_detectable_drop_pp`: the smallest true drop the flag detects with the given power.
- :func:`mcnemar_midp` (from :mod:`lengthlens.stats.mcnemar`): the two-sided mid-p McNemar test;
  :func:`smallest_attainable_p`: the smallest p a paired test can reach on n units.
- :func:`accuracy_change_interval`, :func:`accuracy_loss_test`, :func:`accuracy_mdd_pp`: the above from a
  cell's per-item sums, choosing the run-level or the item-level form.
- :func:`tables`, :func:`truth`, :func:`table_probabilities`: every paired 2×2 table of n pairs and its
  probability, what the loss test's exact p-value and power sum over (the tests' exact coverage and
  rejection rates, in tests/core/exact.py, sum over them too).

The truth of a paired table is written (discordance ψ, drop D): pairs flip either way at the rate ψ/2
without a net change, and a drop D adds D to the right→wrong flips, so p10 = ψ/2, p01 = ψ/2 + D.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import optimize, special

from lengthlens.results import AccuracyChangeInterval, ConfidenceInterval, TestResult
from lengthlens.stats.mcnemar import mcnemar_midp
from lengthlens.stats.margin import ACCURACY_DROP_PP

__all__ = ["ALPHA_ONE_SIDED", "accuracy_change_interval", "accuracy_loss_test", "accuracy_mdd_pp", "ASSUMED_DISCORDANCE",
           "background_discordance", "EM_MAX_PAIRS", "MARGIN", "flag_power",
           "item_interval", "item_noninferiority_test", "mcnemar_midp",
           "minimum_detectable_drop_pp", "noninferiority_test", "score_statistic",
           "smallest_attainable_p", "table_probabilities", "tables", "tango_interval", "truth"]

#: The loss the flag tests for, as a proportion (the study's 2 points).
MARGIN = ACCURACY_DROP_PP / 100.0
#: The flag's one-sided level.
ALPHA_ONE_SIDED = 0.025
#: Discordance assumed for the minimum detectable drop of a cell without any discordant pair.
ASSUMED_DISCORDANCE = 0.10


# ------------------------------------------------------------------------------------------------
# Tango's score statistic and interval
# ------------------------------------------------------------------------------------------------

def _restricted_p01(b, c, n, delta):
    """The maximum-likelihood p01 under Δ = delta (Tango 1998, eq. 4): the root in [0, 1] of A p² + B p + C.

    A = 2n, B = −b − c + (2n − b + c) δ, C = −c δ (1 − δ). C ≤ 0 on [−1, 1], so the root is real; for
    B > 0 the form −2C / (B + √disc) avoids the cancellation of (−B + √disc) / 2A.
    """
    b, c, n, delta = (np.asarray(x, dtype=float) for x in (b, c, n, delta))
    a_ = 2.0 * n
    b_ = -b - c + (2.0 * n - b + c) * delta
    c_ = -c * delta * (1.0 - delta)
    root = np.sqrt(np.maximum(b_ * b_ - 4.0 * a_ * c_, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(b_ > 0, -2.0 * c_ / (b_ + root), (root - b_) / (2.0 * a_))
    return np.where(np.isfinite(p), np.clip(p, 0.0, 1.0), 0.0)


def _score_parts(b, c, n, delta):
    """Numerator b − c − nδ and variance n (2 p̃01 + δ − δ²) of Tango's score statistic."""
    b, c, n, delta = (np.asarray(x, dtype=float) for x in (b, c, n, delta))
    p01 = _restricted_p01(b, c, n, delta)
    return b - c - n * delta, np.maximum(n * (2.0 * p01 + delta - delta * delta), 0.0)


def score_statistic(b, c, n, delta):
    """Tango's score statistic for H0: Δ = delta, the basis of the accuracy change's interval and loss test.

    (b − c − nδ) / √(n (2 p̃01 + δ − δ²)), vectorized; p̃01 is the restricted maximum-likelihood estimate
    of p01 under Δ = δ. Where the variance is 0 (no discordant pair at δ = 0, or δ = ±1) the statistic is
    0 if the numerator is 0, else ±inf.

    Parameters
    ----------
    b, c : discordant pairs, wrong→right and right→wrong (arrays broadcast).
    n : graded pairs.
    delta : the hypothesised difference of proportions p10 − p01.

    Returns
    -------
    numpy.ndarray
        The statistic (0-d for scalar arguments).

    Examples
    --------
    >>> round(float(score_statistic(6, 16, 161, 0.0)), 4)   # = (6 − 16) / √22, McNemar's z
    -2.132
    """
    num, var = _score_parts(b, c, n, delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = num / np.sqrt(var)
    return np.where(var > 0, z, np.where(num == 0, 0.0, np.where(num > 0, np.inf, -np.inf)))


def tango_interval(b: int, c: int, n: int, confidence_level: float = 0.95) -> ConfidenceInterval:
    """Tango's (1998) score interval for the paired difference of proportions p10 − p01.

    The δ where |score_statistic(b, c, n, δ)| ≤ z, found by bracketing root finding on
    (b − c − nδ) ∓ z √var(δ) (no division, so no 0/0 at the data's own δ); closed form for b = c = 0:
    ±z² / (n + z²). The limits stay within [−1, 1]; a limit at ±1 when b or c is n.

    Parameters
    ----------
    b : pairs wrong on the baseline and right on the relaxed arm (wrong→right).
    c : pairs right on the baseline and wrong on the relaxed arm (right→wrong).
    n : graded pairs (b + c ≤ n).
    confidence_level : two-sided level.

    Returns
    -------
    ConfidenceInterval
        ``low, high`` as a difference of proportions (multiply by 100 for points); NaN for n = 0.

    Examples
    --------
    >>> lo, hi = tango_interval(6, 16, 161)   # Fagerland, Lydersen & Laake (2017), ch. 8: −0.1240 to −0.0054
    >>> round(lo, 4), round(hi, 4)
    (-0.124, -0.0054)
    """
    b, c, n = int(b), int(c), int(n)
    if n <= 0:
        return ConfidenceInterval(math.nan, math.nan)
    if b < 0 or c < 0 or b + c > n:
        raise ValueError(f"need 0 <= b, c and b + c <= n, not b={b}, c={c}, n={n}")
    z = float(special.ndtri(0.5 + confidence_level / 2.0))
    if b == c == 0:
        h = z * z / (n + z * z)
        return ConfidenceInterval(-h, h)
    point = (b - c) / n

    def g(delta: float, sign: float) -> float:
        num, var = _score_parts(b, c, n, delta)
        return float(num + sign * z * math.sqrt(var))

    # g(δ, ∓1) = (b − c − nδ) ∓ z √var(δ). At δ = ±1 the variance is 0, so g is the numerator there: > 0 at −1
    # and < 0 at +1 unless the data sit at that end (then that limit is the end). At the point, g = ∓z √var,
    # nonzero except when every pair flipped one way (var 0 at ±1): then the bracket starts just inside, where
    # the variance term (of order √ε) outweighs the numerator (of order ε).
    eps = 1e-9
    lo = -1.0 if c == n else optimize.brentq(g, -1.0, point - (eps if b == n else 0.0), args=(-1.0,),
                                             xtol=1e-14, rtol=1e-14)
    hi = 1.0 if b == n else optimize.brentq(g, point + (eps if c == n else 0.0), 1.0, args=(1.0,),
                                            xtol=1e-14, rtol=1e-14)
    return ConfidenceInterval(float(lo), float(hi))


# ------------------------------------------------------------------------------------------------
# Several seeds per item: the item is the unit
# ------------------------------------------------------------------------------------------------

def _item_parts(n_graded, d_sum) -> tuple[float, float, int]:
    """Point Σ D_i / Σ N_i, its linearized standard error over items, and the number of items (graded ones only)."""
    n_graded, d_sum = np.asarray(n_graded, float), np.asarray(d_sum, float)
    keep = n_graded > 0
    n_graded, d_sum = n_graded[keep], d_sum[keep]
    m = int(n_graded.size)
    if m == 0:
        return math.nan, math.nan, 0
    point = float(d_sum.sum() / n_graded.sum())
    if m < 2:
        return point, math.nan, m
    # A ratio of sums over items: the residuals of D_i − Δ N_i, scaled by the mean N (the delta method).
    resid = (d_sum - point * n_graded) / n_graded.mean()
    se = float(np.sqrt(np.sum(resid * resid) / (m * (m - 1))))
    return point, se, m


def _signs_table(n_graded, d_sum) -> tuple[int, int, int]:
    """Items with a net gain, with a net loss, and all graded items: the item-level 2×2 table of the fallback."""
    n_graded, d_sum = np.asarray(n_graded, float), np.asarray(d_sum, float)
    keep = n_graded > 0
    d = d_sum[keep]
    return int(np.sum(d > 0)), int(np.sum(d < 0)), int(keep.sum())


def item_interval(n_graded, d_sum, confidence_level: float = 0.95) -> AccuracyChangeInterval:
    """Interval for the accuracy change with several graded pairs per item: a t interval over items.

    The point is Σᵢ Dᵢ / Σᵢ Nᵢ (Dᵢ: the item's correct minus correct*, Nᵢ its graded pairs), its
    standard error the delta method's over items, and the multiplier Student's t with m − 1 degrees of
    freedom (m graded items). Where the items show no spread (every item's mean difference the same, e.g.
    no item changed), the t interval would be a point: then Tango's interval for the items as single
    pairs (items with a net gain, with a net loss, m), the interval one run per item would give.

    Parameters
    ----------
    n_graded : graded pairs per item (items with none are left out).
    d_sum : per item, correct minus correct* summed over its graded pairs.
    confidence_level : two-sided level.

    Returns
    -------
    AccuracyChangeInterval
        Limits as proportions, the item-level standard error, and the method: ``item_t``, or
        ``tango_items`` (the fallback); NaN limits when no item is graded.

    Examples
    --------
    >>> r = item_interval([4, 4, 4], [0, 0, 0])
    >>> r.method, round(r.high, 4)
    ('tango_items', 0.5615)
    >>> r = item_interval([2] * 6, [1, 0, -1, 0, -1, -2])   # 6 items, 2 graded pairs each
    >>> r.method, round(r.low, 4), round(r.high, 4)
    ('item_t', -0.8003, 0.3003)
    """
    point, se, m = _item_parts(n_graded, d_sum)
    if m == 0:
        return AccuracyChangeInterval(math.nan, math.nan, math.nan, "item_t", confidence_level)
    if not (se > 1e-12 * max(1.0, abs(point))):
        gains, losses, items = _signs_table(n_graded, d_sum)
        ci = tango_interval(gains, losses, items, confidence_level)
        return AccuracyChangeInterval(ci.low, ci.high, se, "tango_items", confidence_level)
    q = float(special.stdtrit(m - 1, 0.5 + confidence_level / 2.0))
    return AccuracyChangeInterval(max(-1.0, point - q * se), min(1.0, point + q * se), se, "item_t", confidence_level)


# ------------------------------------------------------------------------------------------------
# The accuracy-loss test (H0: Δ ≥ −margin, H1: Δ < −margin)
# ------------------------------------------------------------------------------------------------

@lru_cache(maxsize=8)
def _tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    b = np.repeat(np.arange(n + 1), n + 1 - np.arange(n + 1))
    c = np.concatenate([np.arange(n + 1 - k) for k in range(n + 1)])
    b.setflags(write=False)
    c.setflags(write=False)
    return b, c


def tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every paired 2×2 table of n pairs as its discordant counts (b, c), b + c ≤ n, for exact enumeration.

    Parameters
    ----------
    n : pairs.

    Returns
    -------
    tuple of numpy.ndarray
        (b, c), (n + 1)(n + 2)/2 tables (cached per n: do not modify them).

    Examples
    --------
    >>> b, c = tables(2)
    >>> list(zip(b.tolist(), c.tolist()))
    [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]
    """
    return _tables(int(n))


def truth(discordance: float, drop: float) -> tuple[float, float]:
    """The cell probabilities of a paired table with background discordance ψ and a true drop D.

    Pairs flip either way at the rate ψ/2 without a net change, and the drop adds D to the right→wrong flips.

    Parameters
    ----------
    discordance : ψ, the share of pairs that flip either way without a net change.
    drop : D, the true accuracy loss (a proportion).

    Returns
    -------
    tuple of float
        (p10, p01) = (ψ/2, ψ/2 + D).

    Raises
    ------
    ValueError
        When no paired table has these (a probability below 0 or above 1).

    Examples
    --------
    >>> truth(0.1, 0.05)
    (0.05, 0.1)
    """
    p10, p01 = discordance / 2.0, discordance / 2.0 + drop
    if p10 < 0 or p01 < 0 or p10 + p01 > 1 + 1e-12:
        raise ValueError(f"no paired table has discordance {discordance} and drop {drop}")
    return p10, p01


def table_probabilities(n: int, p10: float, p01: float) -> np.ndarray:
    """Multinomial probability of each table of :func:`tables` (n), for exact coverage and power.

    Parameters
    ----------
    n : pairs.
    p10, p01 : the probabilities of wrong→right and right→wrong (the rest concordant).

    Returns
    -------
    numpy.ndarray
        One probability per table, in the order of :func:`tables`; they sum to 1.

    Examples
    --------
    >>> p = table_probabilities(2, 0.1, 0.2)
    >>> round(float(p[0]), 4), round(float(p.sum()), 12)   # (0, 0): both pairs concordant, 0.7²
    (0.49, 1.0)
    """
    b, c = tables(n)
    rest = n - b - c
    log_p = (special.gammaln(n + 1) - special.gammaln(b + 1) - special.gammaln(c + 1) - special.gammaln(rest + 1)
             + special.xlogy(b, p10) + special.xlogy(c, p01) + special.xlogy(rest, max(0.0, 1.0 - p10 - p01)))
    return np.exp(log_p)


def _z_loss(b, c, n, margin):
    return score_statistic(b, c, n, -margin)


def _nuisance_grid(margin: float) -> np.ndarray:
    """Values of p10 at the boundary Δ = −margin (p01 = p10 + margin) over which the exact p-value takes its largest
    tail: even over the range, and geometric towards 0, where large samples with few discordant pairs put it."""
    top = (1.0 - margin) / 2.0
    return np.unique(np.concatenate([[0.0], np.linspace(0.0, top, 161), np.geomspace(1e-6 * top, top, 160)]))


def _tolerant(z: float) -> float:
    """The threshold a table's Z is compared with for P(Z ≤ z): z plus a relative 1e-9, so that rounding in the
    statistic cannot leave the observed table out of its own tail."""
    return z + 1e-9 * max(1.0, abs(z)) if np.isfinite(z) else z


def _first_at_most(n: int, margin: float, t: float, above: np.ndarray | None = None,
                   below: np.ndarray | None = None) -> np.ndarray:
    """c*(k) for k = 0..n: the smallest c with Z(k − c, c) ≤ t, k + 1 where no c has it.

    Within one k the statistic falls as c rises (more right→wrong flips, more evidence of a loss; a test
    verifies it), so {c : Z ≤ t} is {c ≥ c*(k)}: bisection over c for every k at once, log2 n evaluations
    of the statistic on at most n + 1 tables, never the (n + 1)(n + 2)/2 of them. ``above`` and ``below``:
    c*(k) of a threshold above t and of one below it, if known, which bound this one's.
    """
    k = np.arange(n + 1)
    # Z(k − lo, lo) > t (lo = −1: none known) and Z(k − hi, hi) ≤ t (hi = k + 1: none known)
    lo = np.full(n + 1, -1) if above is None else above - 1
    hi = k + 1 if below is None else below.copy()
    rows = np.nonzero(hi - lo > 1)[0]
    while rows.size:
        mid = (lo[rows] + hi[rows]) // 2
        inside = _z_loss(rows - mid, mid, n, margin) <= t
        hi[rows[inside]] = mid[inside]
        lo[rows[~inside]] = mid[~inside]
        rows = rows[hi[rows] - lo[rows] > 1]
    return hi


def _rejected_from(n: int, margin: float, z_obs: float) -> np.ndarray:
    """c*(k) of the tail {Z ≤ z_obs} (with :func:`_tolerant`'s allowance): the tail is c ≥ c*(k) in each k."""
    return _first_at_most(n, margin, _tolerant(z_obs))


def _largest_in(n: int, margin: float, first: np.ndarray) -> float:
    """The largest Z of the tables c ≥ c*(k): the largest value tables take at or below c*'s threshold (−inf if none)."""
    k = np.arange(n + 1)
    rows = first <= k
    return float(np.max(_z_loss(k[rows] - first[rows], first[rows], n, margin))) if rows.any() else -math.inf


def _smallest_out(n: int, margin: float, first: np.ndarray) -> float:
    """The smallest Z of the tables c < c*(k): the smallest value tables take above c*'s threshold (inf if none)."""
    k = np.arange(n + 1)
    rows = first >= 1
    c = first[rows] - 1
    return float(np.min(_z_loss(k[rows] - c, c, n, margin))) if rows.any() else math.inf


def _binom_pmf(k, n, p):
    """Binomial probabilities P(X = k), X ~ Bin(n, p), on the log scale (xlogy: p = 0 or 1 without warnings)."""
    k = np.asarray(k, float)
    return np.exp(special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
                  + special.xlogy(k, p) + special.xlog1py(n - k, -p))


def _mass(n: int, p10, p01) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each truth (p10, p01): the k = b + c that carry its probability, P(b + c = k), and P(c | k)'s share p01/(p10 + p01).

    k runs over a window of 12 standard deviations and 15 counts either side of the mean, where
    P(b + c = k) > 1e-18 (outside it the terms change a tail by less than n 1e-18): O(√n) values per truth.
    """
    p10, p01 = np.atleast_1d(np.asarray(p10, float)), np.atleast_1d(np.asarray(p01, float))
    disc = np.clip(p10 + p01, 0.0, 1.0)
    mean, sd = n * disc, np.sqrt(n * disc * (1.0 - disc))
    start = np.clip(np.floor(mean - 12.0 * sd - 15.0), 0, n).astype(np.int64)
    stop = np.clip(np.ceil(mean + 12.0 * sd + 15.0), 0, n).astype(np.int64)
    ks = start[:, None] + np.arange(int(np.max(stop - start)) + 1)[None, :]
    pk = np.where(ks <= stop[:, None], _binom_pmf(np.minimum(ks, n), n, disc[:, None]), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(disc > 0, p01 / disc, 0.5)
    return np.minimum(ks, n), pk, share


@lru_cache(maxsize=8)
def _grid_mass(n: int, margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_mass` at every nuisance value of the boundary, for the exact p-value (O(grid × √n) memory)."""
    grid = _nuisance_grid(margin)
    out = _mass(n, grid, grid + margin)
    for a in out:
        a.setflags(write=False)
    return out


def _tail(first: np.ndarray, ks: np.ndarray, pk: np.ndarray, share: np.ndarray) -> np.ndarray:
    """P(c ≥ c*(k)) for each truth of :func:`_mass`: Σ_k P(b + c = k) P(c ≥ c*(k) | k), the binomial factorization."""
    f = first[ks]
    # P(c >= c*(k) | k): 1 where the whole row is in the tail, 0 where none of it is; the binomial tail only
    # where it matters (terms below 1e-18 change a p-value by less than n 1e-18).
    upper = (f == 0).astype(float)
    rows, cols = np.nonzero((f > 0) & (f <= ks) & (pk > 1e-18))
    upper[rows, cols] = special.bdtrc(f[rows, cols] - 1, ks[rows, cols], share[rows])
    return np.minimum(np.sum(pk * upper, axis=1), 1.0)


def _exact_p(n: int, margin: float, z_obs: float) -> float:
    """Exact unconditional p-value: the largest P(Z ≤ z_obs) over the nuisance at the boundary Δ = −margin."""
    return float(np.max(_tail(_rejected_from(n, margin, z_obs), *_grid_mass(n, margin))))


#: Up to this many pairs the flag's p-value is Lloyd's E+M (exactly more powerful at its level at 20–40 pairs, by
#: 0.3–11 points, benchmarks/lloyd_em.py); above it the M p-value: at 50–60 pairs the two differ by at most 2 points
#: of power, and E+M's enumeration of every table against every other grows as n⁴.
EM_MAX_PAIRS = 60


def _em_method(n: int, method: str | None) -> str:
    if method is None:
        return "em" if n <= EM_MAX_PAIRS else "m"
    if method not in ("em", "m"):
        raise ValueError(f"method must be 'em', 'm' or None, not {method!r}")
    return method


def _log_mass(n: int, b: np.ndarray, c: np.ndarray, p10: np.ndarray, p01: np.ndarray) -> np.ndarray:
    """log P(table) for each truth (rows: p10, p01) and table (columns: b, c)."""
    rest = n - b - c
    log_c = special.gammaln(n + 1) - special.gammaln(b + 1) - special.gammaln(c + 1) - special.gammaln(rest + 1)
    p10, p01 = np.asarray(p10, float)[:, None], np.asarray(p01, float)[:, None]
    return (log_c[None, :] + special.xlogy(b[None, :], p10) + special.xlogy(c[None, :], p01)
            + special.xlogy(rest[None, :], np.maximum(0.0, 1.0 - p10 - p01)))


@lru_cache(maxsize=16)
def _em_pvalues(n: int, margin: float) -> np.ndarray:
    """Lloyd's (2008) E+M p-value of every table of :func:`tables` (n).

    E: a table's tail P(Z ≤ z_obs) at its own restricted maximum-likelihood nuisance under Δ = −margin
    (Tango's p̃01, p̃10 = p̃01 − margin). M: the tables ordered by that p-value, the largest probability
    over the boundary's nuisance grid (the M test's, :func:`_nuisance_grid`) of a p-value at most the
    observed one. Exact as the M test is: the tail is maximised over the same nuisance values.
    """
    b, c = (x.astype(float) for x in tables(n))
    z = np.asarray(_z_loss(b, c, n, margin), float)
    p01 = _restricted_p01(b, c, n, -margin)
    p10 = np.clip(p01 - margin, 0.0, 1.0)
    tol = np.array([_tolerant(float(x)) for x in z])
    p_e = np.empty(b.size)
    for start in range(0, b.size, 512):  # rows of truths in blocks: O(512 · tables) memory
        rows = slice(start, start + 512)
        probs = np.exp(_log_mass(n, b, c, p10[rows], p01[rows]))
        p_e[rows] = np.sum(probs * (z[None, :] <= tol[rows, None]), axis=1)
    grid = _nuisance_grid(margin)
    order = np.argsort(p_e, kind="stable")
    sorted_pe = p_e[order]
    # ties (to rounding) count together: each table's tail holds every table with an E p-value as small
    last = np.searchsorted(sorted_pe, sorted_pe * (1.0 + 1e-9) + 1e-15, side="right") - 1
    p_em = np.zeros(b.size)
    for start in range(0, grid.size, 64):
        g = grid[start:start + 64]
        cum = np.cumsum(np.exp(_log_mass(n, b, c, g, g + margin))[:, order], axis=1)
        p_em[order] = np.maximum(p_em[order], cum[:, last].max(axis=0))
    out = np.minimum(p_em, 1.0)
    out.setflags(write=False)
    return out


def _table_index(n: int, b: int, c: int) -> int:
    """The position of (b, c) in :func:`tables` (n): b-major, c = 0..n − b within each b."""
    return b * (n + 1) - b * (b - 1) // 2 + c


@lru_cache(maxsize=4096)  # a search over every table of n pairs: once per distinct table (b, c, n)
def noninferiority_test(b: int, c: int, n: int, margin: float = MARGIN, method: str | None = None) -> TestResult:
    """One-sided test of an accuracy loss of more than ``margin``: H0 Δ ≥ −margin against H1 Δ < −margin.

    Tango's score statistic at Δ = −margin orders the tables (small Z: evidence of a loss). The p-value
    is exact unconditional, so the level holds at 12 pairs as at 1,000, where the normal tail Φ(Z) does
    not (it over-rejects with few discordant pairs): up to :data:`EM_MAX_PAIRS` pairs Lloyd's (2008)
    E+M p-value (each table's tail at its own restricted nuisance estimate, then maximised over the
    nuisance), beyond it the M p-value, the largest P(Z ≤ z_obs) over the nuisance parameter at the
    boundary (Suissa & Shuster 1985). A small p says the drop exceeds the margin; the flag is
    p < :data:`ALPHA_ONE_SIDED`.

    Parameters
    ----------
    b, c, n : wrong→right pairs, right→wrong pairs, graded pairs.
    margin : the loss tested for, as a proportion.
    method : ``em``, ``m``, or None (E+M up to :data:`EM_MAX_PAIRS` pairs, M beyond).

    Parameters
    ----------
    b : pairs wrong on the baseline and right on the relaxed arm (wrong→right).
    c : pairs right on the baseline and wrong on the relaxed arm (right→wrong).
    n : graded pairs (b + c ≤ n).
    margin : the loss tested for, as a proportion.

    Returns
    -------
    TestResult
        Statistic Z, the p-value and method ``tango_noninferiority_em`` (E+M) or ``tango_noninferiority_exact`` (M);
        NaN for n = 0.

    Examples
    --------
    >>> noninferiority_test(0, 8, 12).pvalue < 0.025
    True
    >>> noninferiority_test(1, 2, 12).pvalue > 0.25
    True
    """
    b, c, n = int(b), int(c), int(n)
    how = _em_method(n, method)
    name = "tango_noninferiority_em" if how == "em" else "tango_noninferiority_exact"
    if n <= 0:
        return TestResult(math.nan, math.nan, name)
    z = float(_z_loss(b, c, n, margin))
    if how == "em":
        return TestResult(z, float(_em_pvalues(n, float(margin))[_table_index(n, b, c)]), name)
    return TestResult(z, _exact_p(n, float(margin), z), name)


def item_noninferiority_test(n_graded, d_sum, margin: float = MARGIN) -> TestResult:
    """The loss test with several graded pairs per item: t = (Δ̂ + margin) / SE over items, lower tail of t(m − 1).

    Where the items show no spread, the exact test on the items as single pairs (items with a net
    gain, with a net loss, m), as :func:`item_interval` does.

    Parameters
    ----------
    n_graded : graded pairs per item.
    d_sum : per item, correct minus correct* summed over its graded pairs.
    margin : the loss tested for, as a proportion.

    Returns
    -------
    TestResult
        The t statistic, the one-sided p-value and ``item_t_noninferiority`` (or
        ``tango_noninferiority_items``, the fallback); NaN when no item is graded.

    Examples
    --------
    >>> r = item_noninferiority_test([2] * 6, [1, 0, -1, 0, -1, -2])
    >>> r.method, round(r.statistic, 3), round(r.pvalue, 3)
    ('item_t_noninferiority', -1.074, 0.166)
    >>> item_noninferiority_test([4, 4, 4], [0, 0, 0]).method
    'tango_noninferiority_items'
    """
    point, se, m = _item_parts(n_graded, d_sum)
    if m == 0:
        return TestResult(math.nan, math.nan, "item_t_noninferiority")
    if not (se > 1e-12 * max(1.0, abs(point))):
        gains, losses, items = _signs_table(n_graded, d_sum)
        r = noninferiority_test(gains, losses, items, margin)
        return TestResult(r.statistic, r.pvalue, "tango_noninferiority_items")
    t = (point + margin) / se
    return TestResult(float(t), float(special.stdtr(m - 1, t)), "item_t_noninferiority")


# ------------------------------------------------------------------------------------------------
# Power of the flag
# ------------------------------------------------------------------------------------------------

@lru_cache(maxsize=64)
def _rejection_region(n: int, margin: float, alpha: float) -> tuple[float, np.ndarray | None]:
    """The flag's rejection region on n pairs: (z_crit, c*(k)), the tables with Z ≤ z_crit; (−inf, None) if none.

    The exact p-value rises with Z (its tail grows), so the region is {Z ≤ z_crit}, z_crit the largest
    value tables take whose p-value is below alpha. Bisection over z, each step taken to the largest
    value tables take below it, until no value lies between the last that rejects and the first that
    does not. Each step's p-value is the largest tail over a few nuisance values (those with the largest
    tails where the search starts): a lower bound, so a step it puts above z_crit is above it; the value
    found is then checked over the whole grid, and the search repeated with any nuisance value that fails
    it. O(n log n) per step, O(n) memory.
    """
    ks, pk, share = _grid_mass(n, margin)
    k = np.arange(n + 1)
    none = k + 1  # c*(k) of a threshold below every table

    def tails(first, rows):
        return _tail(first, ks[rows], pk[rows], share[rows])

    # the tables' range: every value lies in [z_min, z_max]
    z_min, z_max = _smallest_out(n, margin, none), _largest_in(n, margin, np.zeros(n + 1, dtype=np.int64))
    guess = _first_at_most(n, margin, float(special.ndtri(alpha)))
    if _largest_in(n, margin, guess) == -math.inf:
        guess = _first_at_most(n, margin, z_min)
    v0 = _largest_in(n, margin, guess)
    t0 = tails(_rejected_from(n, margin, v0), slice(None))
    watch = list(np.argsort(t0)[-24:])
    # a, v_a, first_a: a threshold, the largest value at or below it (its p-value < alpha), c*(k) of a;
    # b, v_b, tol_b: the same for one whose value's p-value is >= alpha, and c*(k) of b with the allowance.
    a, v_a, first_a, f_a = z_min - 1.0, -math.inf, none, -alpha
    b, v_b, f_b = z_max, z_max, 1.0 - alpha
    if t0.max() < alpha:
        a, v_a, first_a, f_a = v0, v0, guess, t0.max() - alpha
    else:
        b, v_b, f_b = v0, v0, t0.max() - alpha
    tol_b = _first_at_most(n, margin, _tolerant(b), below=first_a)
    next_a, kept, width = _smallest_out(n, margin, first_a), 0, b - a
    while True:
        if next_a >= v_b:  # no value between v_a and v_b
            first = None if v_a == -math.inf else _first_at_most(n, margin, _tolerant(v_a), tol_b, first_a)
            full = np.zeros(1) if first is None else tails(first, slice(None))
            if full.max() < alpha:
                return v_a, first
            # nuisance values outside the watched ones put v_a's p-value above alpha: watch the largest, search below v_a
            watch.extend(int(i) for i in np.argsort(full)[-8:] if full[i] >= alpha and i not in watch)
            b, v_b, tol_b, f_b = v_a, v_a, first, full.max() - alpha
            a, v_a, first_a, f_a = z_min - 1.0, -math.inf, none, -alpha
            next_a, kept, width = z_min, 0, b - a
            continue
        # The p-value is nearly continuous in z where tables are many: the Illinois variant of regula falsi
        # (halving the weight of an end kept twice), bisection where a step did not halve the bracket.
        t = (a * f_b - b * f_a) / (f_b - f_a)
        if not a < t < b or b - a > 0.5 * width:
            t = 0.5 * (a + b)
        width = b - a
        first_t = _first_at_most(n, margin, t, tol_b, first_a)
        v = _largest_in(n, margin, first_t)
        if v == v_a:  # no value in (a, t]: the same p-value as at a
            a, first_a = t, first_t
            kept = min(kept, 0) - 1
            f_b *= 0.5 if kept <= -2 else 1.0
            continue
        region = _first_at_most(n, margin, _tolerant(v), tol_b, first_a)
        p = tails(region, watch).max()
        if p < alpha:
            a, v_a, first_a, f_a = t, v, first_t, p - alpha
            next_a = _smallest_out(n, margin, first_a)
            kept = min(kept, 0) - 1
            f_b *= 0.5 if kept <= -2 else 1.0
        else:
            b, v_b, f_b = t, v, p - alpha
            tol_b = _first_at_most(n, margin, _tolerant(t), tol_b, first_t)
            kept = max(kept, 0) + 1
            f_a *= 0.5 if kept >= 2 else 1.0


def flag_power(n: int, discordance: float, drop: float, margin: float = MARGIN, alpha: float = ALPHA_ONE_SIDED,
               method: str | None = None) -> float:
    """Exact probability that the loss flag fires on n pairs with background discordance ψ and true drop D.

    Parameters
    ----------
    n : graded pairs (one per item).
    discordance : ψ, the share of pairs that flip either way without a net change.
    drop : D, the true accuracy loss (a proportion).
    margin : the flag's margin, as a proportion.
    alpha : the flag's one-sided level.
    method : as for :func:`noninferiority_test` (E+M up to :data:`EM_MAX_PAIRS` pairs, M beyond).

    Returns
    -------
    float
        The sum of the probabilities of the tables in the flag's rejection region.

    Examples
    --------
    >>> flag_power(30, 0.15, 0.02) <= 0.025   # at the margin itself: the level
    True
    >>> round(flag_power(12, 0.2, 0.3), 3)
    0.254
    """
    p10, p01 = truth(discordance, drop)
    if _em_method(int(n), method) == "em":
        region = _em_pvalues(int(n), float(margin)) < alpha
        return float(np.sum(table_probabilities(int(n), p10, p01)[region]))
    _, first = _rejection_region(int(n), float(margin), float(alpha))
    if first is None:
        return 0.0
    return float(_tail(first, *_mass(int(n), p10, p01))[0])


@lru_cache(maxsize=4096)  # a bisection of exact powers: once per distinct (n, discordance)
def minimum_detectable_drop_pp(n: int, discordance: float, power: float = 0.8, margin_pp: float = 2.0,
                               alpha: float = ALPHA_ONE_SIDED) -> float:
    """The smallest true drop (points) the loss flag detects with ``power`` at n pairs and this discordance.

    Exact: the flag's rejection region over every table of n pairs, its probability under p10 = ψ/2,
    p01 = ψ/2 + D, and bisection in D (the power rises with D). ``discordance`` is the background
    flip rate ψ; for a cell, :func:`background_discordance` (2 min(b, c)/n: not the observed (b + c)/n,
    which holds the change itself). inf where even the largest
    drop the discordance allows (D = 1 − ψ) is detected less often than ``power``.

    Parameters
    ----------
    n : graded pairs (one per item).
    discordance : ψ, the background flip rate.
    power : the power wanted.
    margin_pp : the flag's margin, in points.
    alpha : the flag's one-sided level.

    Returns
    -------
    float
        The drop in points (an upper bound to 0.001 points); inf where none is detected so often, NaN for n = 0.

    Examples
    --------
    >>> 20 < minimum_detectable_drop_pp(30, 0.15) < 40
    True
    >>> minimum_detectable_drop_pp(5, 0.5)   # five pairs: no drop is detected with 80 % power
    inf
    """
    n = int(n)
    if n <= 0 or not np.isfinite(discordance):
        return math.nan
    psi = float(min(max(discordance, 0.0), 1.0))
    margin = margin_pp / 100.0
    top = 1.0 - psi
    if top <= margin or flag_power(n, psi, top, margin, alpha) < power:
        return math.inf
    lo, hi = margin, top
    if flag_power(n, psi, lo, margin, alpha) >= power:
        return 100.0 * lo
    # To 1e-5 of a proportion (0.001 points, reported as the upper end: never below the true figure); each step is
    # a power computation over every k, so the 1e-12 that doubles would buy carries no meaning for a sample size.
    while hi - lo > 1e-5:
        mid = 0.5 * (lo + hi)
        if flag_power(n, psi, mid, margin, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return 100.0 * hi


# ------------------------------------------------------------------------------------------------
# The smallest p the two-sided paired tests can reach
# ------------------------------------------------------------------------------------------------

def smallest_attainable_p(n_units: int, test: str) -> float:
    """The smallest p-value a paired test can give on ``n_units`` (graded pairs, or items with seeds).

    Every unit changed the same way: the mid-p tests give 0.5^n, the exact ones 2 · 0.5^n; a Monte
    Carlo sign-flip test cannot go below 1 / (1 + B). With few units and many cells this can keep every
    multiplicity-adjusted p above 0.05 whatever the data.

    Parameters
    ----------
    n_units : graded pairs (McNemar) or graded items (sign-flip).
    test : the test's name, as :func:`~lengthlens.stats.signflip.paired_accuracy_test` gives it.

    Returns
    -------
    float

    Examples
    --------
    >>> smallest_attainable_p(12, "mcnemar_midp"), smallest_attainable_p(12, "sign_flip_exact")
    (0.000244140625, 0.00048828125)
    """
    n = int(n_units)
    if n <= 0:
        return 1.0
    if "monte_carlo" in test:
        return 0.5 / (1 + 20_000) if "midp" in test else 1.0 / (1 + 20_000)
    return float(0.5**n if "midp" in test else min(1.0, 2.0 * 0.5**n))


# ------------------------------------------------------------------------------------------------
# A cell's accuracy statistics from its per-item sums
# ------------------------------------------------------------------------------------------------

def _per_item(n_graded, c, c_star) -> tuple[np.ndarray, np.ndarray, bool]:
    """Graded pairs and correct − correct* per item, and whether every item has at most one graded pair."""
    n_graded = np.asarray(n_graded, float)
    d = np.asarray(c, float) - np.asarray(c_star, float)
    return n_graded, d, bool(n_graded.size == 0 or n_graded.max() <= 1)


def accuracy_change_interval(n_graded, c, c_star, confidence_level: float = 0.95) -> AccuracyChangeInterval:
    """The default interval of a cell's accuracy change (proportions), from per-item sums of graded pairs.

    One graded pair per item: :func:`tango_interval` on the discordant counts (method ``tango_score``);
    several: :func:`item_interval` (``item_t``, or ``tango_items`` where the items show no spread).

    Parameters
    ----------
    n_graded : graded pairs per item.
    c, c_star : per item, the relaxed arm's and the baseline's correct runs among them.
    confidence_level : two-sided level.

    Returns
    -------
    AccuracyChangeInterval
        Limits as proportions, the standard error (the Wald one, √(((b + c)/n − Δ̂²)/n), for
        ``tango_score``, the item-level one otherwise) and the method; NaN limits when nothing is graded.

    Examples
    --------
    >>> r = accuracy_change_interval([1] * 12, [1] * 10 + [0, 0], [1] * 12)
    >>> r.method, round(r.low, 3), round(r.high, 3)
    ('tango_score', -0.448, 0.116)
    """
    n_graded, d, single = _per_item(n_graded, c, c_star)
    n = int(n_graded.sum())
    if n == 0:
        return AccuracyChangeInterval(math.nan, math.nan, math.nan, "tango_score", confidence_level)
    if single:
        b, cc = int(np.sum(d > 0)), int(np.sum(d < 0))
        ci = tango_interval(b, cc, n, confidence_level)
        point = (b - cc) / n
        return AccuracyChangeInterval(ci.low, ci.high, math.sqrt(max((b + cc) / n - point * point, 0.0) / n),
                                      "tango_score", confidence_level)
    return item_interval(n_graded, d, confidence_level)


def accuracy_loss_test(n_graded, c, c_star, margin: float = MARGIN) -> TestResult:
    """The accuracy-loss test of a cell from per-item sums, the test behind the ``drop_2pp`` flag.

    :func:`noninferiority_test` with one graded pair per item, :func:`item_noninferiority_test` with several.

    Parameters
    ----------
    n_graded : graded pairs per item.
    c, c_star : per item, the relaxed arm's and the baseline's correct runs among them.
    margin : the loss tested for, as a proportion.

    Returns
    -------
    TestResult
        The statistic, the one-sided p-value (small: a loss of more than the margin) and the test's name.

    Examples
    --------
    >>> r = accuracy_loss_test([1] * 12, [0] * 3 + [1] * 9, [1] * 12)   # 3 of 12 pairs right → wrong
    >>> r.method, round(r.pvalue, 4)
    ('tango_noninferiority_em', 0.0667)
    """
    n_graded, d, single = _per_item(n_graded, c, c_star)
    if single:
        return noninferiority_test(int(np.sum(d > 0)), int(np.sum(d < 0)), int(n_graded.sum()), margin)
    return item_noninferiority_test(n_graded, d, margin)


def accuracy_mdd_pp(n_graded, c, c_star, power: float = 0.8, margin_pp: float = 2.0,
                    alpha: float = ALPHA_ONE_SIDED) -> float:
    """A cell's minimum detectable drop (points): the smallest true loss its loss flag detects with ``power``.

    With one graded pair per item: :func:`minimum_detectable_drop_pp` for its pairs and background
    discordance (:func:`background_discordance`: the flips that do not contain the change). With several graded pairs per item
    the flag is the t test over items (:func:`item_noninferiority_test`), so the figure is that test's:
    the drop D at which the noncentral t with m − 1 degrees of freedom and noncentrality (D − margin)/se
    falls below the test's critical value with probability ``power``, se the cell's observed item-level
    standard error. Where the items show no spread, the items as single pairs, as the test itself does.

    Parameters
    ----------
    n_graded : graded pairs per item.
    c, c_star : per item, the relaxed arm's and the baseline's correct runs among them.
    power : the detection probability asked for.
    margin_pp : the flag's margin, in points.
    alpha : the flag's one-sided level.

    Returns
    -------
    float
        Points; NaN when nothing is graded, inf when no drop is detectable.

    Examples
    --------
    >>> round(accuracy_mdd_pp([1] * 12, [0] * 3 + [1] * 9, [1] * 12), 1)
    60.7
    """
    n_graded, d, single = _per_item(n_graded, c, c_star)
    if not single:
        _point, se, m = _item_parts(n_graded, d)
        if m >= 2 and se > 1e-12:
            return 100.0 * (margin_pp / 100.0 + _t_power_shift(m - 1, alpha, power) * se)
    keep = n_graded > 0
    units = int(n_graded.sum()) if single else int(keep.sum())
    if units == 0:
        return math.nan
    background = background_discordance(int(np.sum(d[keep] > 0)), int(np.sum(d[keep] < 0)), units)
    return minimum_detectable_drop_pp(units, background, power, margin_pp, alpha)


def background_discordance(b: int, c: int, n: int) -> float:
    """The background flip rate ψ of a cell's table, without the change itself: 2 min(b, c)/n.

    Under the truth (ψ, D) pairs flip each way at ψ/2 and a drop adds D to one side, so the side with
    fewer flips estimates ψ/2; the observed (b + c)/n holds the drop too (for the table (0, 6, 12) it
    is 0.5, at which no drop is detectable, while the flag fires). Where one side has no flip the
    table says nothing about ψ: :data:`ASSUMED_DISCORDANCE`.

    Parameters
    ----------
    b, c : the cell's wrong→right and right→wrong pairs.
    n : its graded pairs.

    Returns
    -------
    float
        ψ, a proportion.

    Examples
    --------
    >>> background_discordance(0, 6, 12), round(background_discordance(2, 5, 30), 4)
    (0.1, 0.1333)
    """
    if n <= 0:
        return math.nan
    psi = 2.0 * min(int(b), int(c)) / int(n)
    return psi if psi > 0 else ASSUMED_DISCORDANCE


@lru_cache(maxsize=256)
def _t_power_shift(df: int, alpha: float, power: float) -> float:
    """The noncentrality δ at which a one-sided t test at ``alpha`` with ``df`` degrees of freedom has ``power``."""
    crit = float(special.stdtrit(df, 1.0 - alpha))
    # P(T' > crit) for the noncentral t T' rises with δ: from below power at δ = 0 to above it at crit + 10.
    return float(optimize.brentq(lambda delta: special.nctdtr(df, delta, crit) - (1.0 - power), 0.0, crit + 10.0,
                                 xtol=1e-12))
