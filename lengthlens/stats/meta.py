"""Random-effects meta-analysis of K cell estimates: what a rule does across datasets, with an honest interval.

A rule's cells (one per dataset, or per dataset and target–draft pair) each give an estimate yᵢ with a
within-cell variance vᵢ. The random-effects model says yᵢ = μ + uᵢ + eᵢ, uᵢ ~ (0, τ²) the cell's own
departure from the rule's mean and eᵢ ~ (0, vᵢ) its sampling error. :func:`random_effects` estimates:

- τ² by Paule–Mandel (1982): the τ² ≥ 0 at which the generalized Q, Σ wᵢ (yᵢ − μ̂)² with
  wᵢ = 1/(vᵢ + τ²), equals its expectation K − 1 (0 when Q is already below K − 1 at τ² = 0);
- μ, the across-dataset mean, by the weighted mean with those weights, and its interval by
  Hartung–Knapp–Sidik–Jonkman: the variance q / Σ wᵢ with q = Σ wᵢ (yᵢ − μ̂)² / (K − 1) and a
  t(K − 1) multiplier. ``floor=True`` takes max(q, 1) (Röver, Knapp & Friede 2015), which with
  Paule–Mandel changes only the case τ̂² = 0, where q < 1 and the plain interval would be narrower
  than the fixed-effect one;
- a prediction interval for the effect in a new dataset, μ̂ ± t(K − 2) √(τ̂² + SE²) (Higgins,
  Thompson & Spiegelhalter 2009);
- the fixed-effect (inverse-variance) average of these K cells with its normal interval: a statement
  about these datasets only, not about the next one.

Everything is on the scale given (log ratios for ratios; the caller exponentiates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from scipy import optimize, special

from lengthlens.results import ConfidenceInterval, frame, frame_html

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MetaAnalysis", "accuracy_change_variance", "detectable_effect", "equal_weight_interval", "hksj_standard_error",
           "log_ratio_variance", "paule_mandel_tau2", "random_effects"]

_NAN = float("nan")


def _clean(y, v) -> tuple[np.ndarray, np.ndarray]:
    y, v = np.asarray(y, dtype=float).ravel(), np.asarray(v, dtype=float).ravel()
    if y.shape != v.shape:
        raise ValueError(f"need one variance per estimate, not {y.size} estimates and {v.size} variances")
    if np.any(~np.isfinite(y)) or np.any(~np.isfinite(v)) or np.any(v <= 0):
        raise ValueError("estimates must be finite and variances finite and positive")
    return y, v


def _generalized_q(y: np.ndarray, v: np.ndarray, tau2: float) -> float:
    w = 1.0 / (v + tau2)
    mu = float(np.sum(w * y) / np.sum(w))
    return float(np.sum(w * (y - mu) ** 2))


def paule_mandel_tau2(y, v) -> float:
    """The Paule–Mandel between-cell variance τ²: the root of Q(τ²) = K − 1, truncated at 0.

    Q(τ²) = Σ wᵢ (yᵢ − μ̂(τ²))², wᵢ = 1/(vᵢ + τ²), falls monotonically in τ² (DerSimonian & Kacker
    2007), so the root is unique: bracketed by doubling, then found to 1e-12 relative by Brent's method.

    Parameters
    ----------
    y : the K cell estimates.
    v : their within-cell variances (positive).

    Returns
    -------
    float
        τ̂² (0 when Q(0) ≤ K − 1; NaN for K < 2).

    Examples
    --------
    >>> round(paule_mandel_tau2([0.0, 1.0], [0.1, 0.1]), 6)   # Q(τ²) = 0.5/(0.1 + τ²) = 1
    0.4
    """
    y, v = _clean(y, v)
    k = y.size
    if k < 2:
        return _NAN
    target = k - 1.0
    if _generalized_q(y, v, 0.0) <= target:
        return 0.0
    hi = max(float(np.var(y, ddof=1)), float(np.max(v)), 1e-300)
    while _generalized_q(y, v, hi) > target:
        hi *= 2.0
    return float(optimize.brentq(lambda t: _generalized_q(y, v, t) - target, 0.0, hi, xtol=1e-300, rtol=1e-12,
                                 maxiter=500))


def hksj_standard_error(y, v, tau2: float, *, floor: bool = True) -> tuple[float, float, bool]:
    """The Hartung–Knapp–Sidik–Jonkman standard error of the weighted mean at a given τ².

    SE² = q / Σ wᵢ with q = Σ wᵢ (yᵢ − μ̂)² / (K − 1), wᵢ = 1/(vᵢ + τ²); ``floor`` replaces q by
    max(q, 1), so the SE is never below the one the weights alone give.

    Parameters
    ----------
    y : the K cell estimates.
    v : their within-cell variances.
    tau2 : the between-cell variance τ² the weights use.
    floor : take max(q, 1).

    Returns
    -------
    (mean, standard_error, floored): the weighted mean, its SE, and whether the floor raised it.

    Examples
    --------
    >>> mu, se, floored = hksj_standard_error([0.0, 1.0], [0.1, 0.1], 0.4)
    >>> round(mu, 3), round(se, 4), floored                # q = 1 at the Paule–Mandel τ²: SE = √(0.5/2)
    (0.5, 0.5, False)
    """
    y, v = _clean(y, v)
    k = y.size
    w = 1.0 / (v + tau2)
    mu = float(np.sum(w * y) / np.sum(w))
    if k < 2:
        return mu, _NAN, False
    q = float(np.sum(w * (y - mu) ** 2) / (k - 1))
    # At the Paule–Mandel root q is 1 up to rounding: only a clear shortfall counts as the floor acting.
    floored = bool(floor and q < 1.0 - 1e-9)
    return mu, math.sqrt((max(q, 1.0) if floor else q) / float(np.sum(w))), floored


def _t(df: float, level: float) -> float:
    return float(special.stdtrit(df, 0.5 + level / 2.0)) if df >= 1 else _NAN


def equal_weight_interval(y, within_se: float = 0.0, *, confidence_level: float = 0.95) -> tuple[float, float, float]:
    """The plain mean of K cell estimates with an interval for the across-dataset mean: Hartung–Knapp with equal weights.

    Each yᵢ varies by its sampling error and by its dataset's own effect, so the sample variance s² of the yᵢ
    estimates both at once and s/√K is the equal-weight mean's standard error across datasets (what a bootstrap of
    the cells' items alone misses: it holds the datasets fixed). The interval is ȳ ± t(K − 1) · max(s/√K,
    ``within_se``); ``within_se`` (the within-cell standard error of the mean, e.g. the SD of its item-bootstrap
    replicates) floors it, as the ratios' HKSJ interval is floored at the fixed-effect width.

    Parameters
    ----------
    y : the cell estimates (NaN ignored).
    within_se : the mean's standard error from the cells' sampling error alone (0: no floor).
    confidence_level : two-sided level.

    Returns
    -------
    (mean, low, high): the limits are NaN with fewer than two estimates (no spread to see across datasets).

    Examples
    --------
    >>> m, lo, hi = equal_weight_interval([-4.0, 0.0, 2.0, 6.0])    # s = 4.16, t(3) = 3.182
    >>> round(m, 2), round(lo, 2), round(hi, 2)
    (1.0, -5.62, 7.62)
    """
    y = np.asarray(y, dtype=float)
    y = y[np.isfinite(y)]
    k = y.size
    if k == 0:
        return _NAN, _NAN, _NAN
    mean = float(y.mean())
    if k < 2:
        return mean, _NAN, _NAN
    se = max(float(y.std(ddof=1)) / math.sqrt(k), float(within_se) if np.isfinite(within_se) else 0.0)
    half = _t(k - 1, confidence_level) * se
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class MetaAnalysis:
    """A random-effects meta-analysis of K cell estimates (Paule–Mandel τ², HKSJ interval), on the scale given.

    ``estimate`` and ``confidence_interval``: the across-dataset mean μ and its HKSJ t(K − 1) interval
    (``floored``: the floor max(q, 1) set its width). ``prediction_interval``: where the effect of a
    new dataset lies (t(K − 2); NaN for K < 3). ``fixed_effect`` with ``fixed_effect_interval``: the
    inverse-variance average of these K cells (normal interval), a statement about them alone.
    ``q_statistic``: Cochran's Q at τ² = 0. ``method`` names the interval (``pm_hksj``).

    Examples
    --------
    >>> m = random_effects([-0.2, -0.1, -0.3, 0.05], [0.01, 0.02, 0.015, 0.01])
    >>> m.k, round(m.estimate, 3), round(m.tau, 3)
    (4, -0.132, 0.102)
    >>> m.fixed_effect_interval.high < 0 < m.confidence_interval.high   # these four cells lose; the next may not
    True
    """

    estimate: float
    confidence_interval: ConfidenceInterval
    standard_error: float
    tau2: float
    prediction_interval: ConfidenceInterval
    k: int
    fixed_effect: float
    fixed_effect_interval: ConfidenceInterval
    fixed_effect_se: float
    q_statistic: float
    floored: bool
    confidence_level: float
    method: str = "pm_hksj"

    @property
    def tau(self) -> float:
        """τ̂, the between-cell standard deviation."""
        return math.sqrt(self.tau2) if self.tau2 >= 0 else _NAN

    @property
    def df(self) -> int:
        """Degrees of freedom of the interval's t multiplier, K − 1."""
        return self.k - 1

    @property
    def low(self) -> float:
        return self.confidence_interval.low

    @property
    def high(self) -> float:
        return self.confidence_interval.high

    def pvalue(self, null: float = 0.0, alternative: Literal["two-sided", "less", "greater"] = "two-sided") -> float:
        """The t(K − 1) test of μ against ``null`` that the interval inverts (``less``: H1 μ < null).

        Examples
        --------
        >>> m = random_effects([1.0, 1.2, 0.9], [0.01, 0.01, 0.01])
        >>> m.pvalue(0.0) < 0.01, round(m.pvalue(m.estimate), 3)
        (True, 1.0)
        """
        if not (self.k >= 2 and self.standard_error > 0):
            return _NAN
        t = (self.estimate - null) / self.standard_error
        if alternative == "less":
            return float(special.stdtr(self.df, t))
        if alternative == "greater":
            return float(special.stdtr(self.df, -t))
        if alternative != "two-sided":
            raise ValueError(f"alternative must be 'two-sided', 'less' or 'greater', not {alternative!r}")
        return float(min(1.0, 2.0 * special.stdtr(self.df, -abs(t))))

    def to_frame(self) -> pd.DataFrame:
        """One row: estimate, its interval and SE, τ̂, the prediction interval, K, the fixed-effect average and Q."""
        return frame([{"estimate": self.estimate, "low": self.low, "high": self.high,
                       "standard_error": self.standard_error, "tau": self.tau,
                       "prediction_low": self.prediction_interval.low, "prediction_high": self.prediction_interval.high,
                       "k": self.k, "fixed_effect": self.fixed_effect, "fixed_effect_low": self.fixed_effect_interval.low,
                       "fixed_effect_high": self.fixed_effect_interval.high, "q_statistic": self.q_statistic,
                       "floored": self.floored, "method": self.method, "confidence_level": self.confidence_level}])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame(), f"Random-effects meta-analysis of {self.k} cells ({self.method})")


def random_effects(y, v, *, confidence_level: float = 0.95, floor: bool = True) -> MetaAnalysis:
    """Pool K cell estimates by random-effects meta-analysis: Paule–Mandel τ², HKSJ t(K − 1) interval.

    Parameters
    ----------
    y : the K cell estimates (e.g. log R/R*, or an accuracy change in points).
    v : their within-cell variances (finite, positive).
    confidence_level : level of the confidence and prediction intervals.
    floor : take max(q, 1) in the HKSJ variance, so the interval is never narrower than the one the
        weights alone give (see :func:`hksj_standard_error`).

    Returns
    -------
    MetaAnalysis
        With K = 1: the cell itself as the fixed-effect average, and NaN for τ², the random-effects
        interval and the prediction interval (one cell says nothing about the spread across datasets).

    Examples
    --------
    >>> m = random_effects([0.1, 0.3, 0.2, 0.25, 0.15, 0.4], [0.004] * 6)
    >>> round(m.estimate, 3), round(m.tau, 3), [round(x, 3) for x in m.confidence_interval]
    (0.233, 0.088, [0.12, 0.347])
    """
    y, v = _clean(y, v)
    k = int(y.size)
    if k == 0:
        raise ValueError("need at least one estimate")
    w0 = 1.0 / v
    fixed = float(np.sum(w0 * y) / np.sum(w0))
    fixed_se = math.sqrt(1.0 / float(np.sum(w0)))
    z = float(special.ndtri(0.5 + confidence_level / 2.0))
    fixed_ci = ConfidenceInterval(fixed - z * fixed_se, fixed + z * fixed_se)
    q0 = float(np.sum(w0 * (y - fixed) ** 2))
    nan_ci = ConfidenceInterval(_NAN, _NAN)
    if k < 2:
        return MetaAnalysis(fixed, nan_ci, _NAN, _NAN, nan_ci, k, fixed, fixed_ci, fixed_se, q0, False, confidence_level)
    tau2 = paule_mandel_tau2(y, v)
    mu, se, floored = hksj_standard_error(y, v, tau2, floor=floor)
    t = _t(k - 1, confidence_level)
    ci = ConfidenceInterval(mu - t * se, mu + t * se)
    if k >= 3:
        half = _t(k - 2, confidence_level) * math.sqrt(tau2 + se * se)
        pi = ConfidenceInterval(mu - half, mu + half)
    else:
        pi = nan_ci
    return MetaAnalysis(mu, ci, se, tau2, pi, k, fixed, fixed_ci, fixed_se, q0, floored, confidence_level)


# ------------------------------------------------------------------------------------------------
# Within-cell variances of the estimates pooled
# ------------------------------------------------------------------------------------------------

def log_ratio_variance(point: float, standard_error: float, n_items: int) -> float:
    """The within-cell variance of a ratio's log: (SE / ratio)² · n / (n − 1), from the cell's delta-method SE.

    The cell's SE is the delta method's on the log scale times the ratio (what the studentized interval
    uses); its moments divide by n (the plug-in form), so n/(n − 1) makes the variance unbiased for a
    mean of n independent items. NaN where it is not defined (no SE, a ratio ≤ 0, fewer than 2 items,
    or an SE of 0: every item the same, which would give the cell infinite weight).

    Parameters
    ----------
    point : the cell's ratio.
    standard_error : its delta-method standard error (on the ratio's scale).
    n_items : the cell's items.

    Returns
    -------
    float
        The variance of the log ratio, or NaN.

    Examples
    --------
    >>> round(log_ratio_variance(1.25, 0.25, 12), 6)   # (0.25/1.25)² · 12/11
    0.043636
    """
    if not (n_items >= 2 and point > 0 and standard_error > 0 and math.isfinite(point) and math.isfinite(standard_error)):
        return _NAN
    return (standard_error / point) ** 2 * n_items / (n_items - 1.0)


def accuracy_change_variance(n_graded, c, c_star) -> tuple[float, float]:
    """A cell's accuracy change (a proportion) and a variance for it that holds at 12 pairs: Agresti–Min's.

    With one graded pair per item this is Agresti & Min's (2005) adjusted variance of the paired
    difference: half a pair added to each cell of the 2×2 table, ((b + c + 1)/(n + 2) − Δ̃²)/(n + 2)
    with Δ̃ = (b − c)/(n + 2). Unlike the Wald variance it is never 0 (a cell without a discordant
    pair would otherwise get infinite weight) and it is not small where b or c is small by chance.
    With several graded pairs per item the item is the unit: the same pseudo-observations as items
    (half an item changed +1, half an item changed −1, one unchanged) added to the delta method's
    variance of Σ Dᵢ / Σ Nᵢ over the m graded items, [Σ (Dᵢ − Nᵢ Δ̃)²/N̄² + 1 + 2Δ̃²]/(m + 2)² with
    Δ̃ = Σ Dᵢ / (N̄ (m + 2)), which is the formula above when every Nᵢ is 1.

    Parameters
    ----------
    n_graded : per item, the pairs graded on both sides (Nᵢ).
    c, c_star : per item, the correct relaxed runs and the correct baseline runs among them.

    Returns
    -------
    (change, variance): Σ Dᵢ / Σ Nᵢ (the cell's estimate, not the adjusted Δ̃) and the variance, as
    proportions; NaN, NaN when nothing is graded.

    Examples
    --------
    >>> d, var = accuracy_change_variance([1] * 12, [1] * 6 + [0] * 6, [1] * 12)   # the table (b, c, n) = (0, 6, 12)
    >>> round(d, 3), round(var, 6)                                                 # ((7/14) − (6/14)²)/14
    (-0.5, 0.022595)
    """
    n_graded = np.asarray(n_graded, dtype=float)
    d = np.asarray(c, dtype=float) - np.asarray(c_star, dtype=float)
    keep = n_graded > 0
    n_graded, d = n_graded[keep], d[keep]
    m = int(n_graded.size)
    if m == 0:
        return _NAN, _NAN
    change = float(d.sum() / n_graded.sum())
    n_bar = float(n_graded.mean())
    shrunk = float(d.sum()) / (n_bar * (m + 2))
    spread = float(np.sum((d - n_graded * shrunk) ** 2)) / (n_bar * n_bar)
    return change, (spread + 1.0 + 2.0 * shrunk * shrunk) / float((m + 2) ** 2)


def detectable_effect(standard_error: float, df: float, alpha: float, power: float = 0.8) -> float:
    """The smallest true effect a one-sided t test at ``alpha`` with ``df`` degrees of freedom detects with ``power``.

    δ · SE, δ the noncentrality at which P(T′ > t₁₋α(df)) = ``power`` for the noncentral t T′ (the SE
    taken as known at its estimate). For a pooled estimate, df = K − 1 and SE its HKSJ standard error.

    Parameters
    ----------
    standard_error : the estimate's standard error.
    df : the t test's degrees of freedom.
    alpha : its one-sided level.
    power : the detection probability asked for.

    Returns
    -------
    float
        The effect, on the estimate's scale.

    Examples
    --------
    >>> round(detectable_effect(1.0, 1e6, 0.025), 3)   # the normal limit: z₀.₉₇₅ + z₀.₈
    2.802
    """
    if not (df >= 1 and standard_error > 0 and math.isfinite(standard_error)):
        return _NAN
    crit = float(special.stdtrit(df, 1.0 - alpha))
    shift = optimize.brentq(lambda d: special.nctdtr(df, d, crit) - (1.0 - power), 0.0, crit + 40.0, xtol=1e-12)
    return float(shift) * standard_error
