"""Interval estimates of resampled statistics: percentile, expanded percentile, BCa, the studentized bootstrap-t, and
the intervals a statistic declares for itself.

Every analysis gets its intervals here, through :func:`estimates`, from one cell's draws. A
statistic is either a function of named sums over items (a metric of the registry, or an
analysis' own :class:`Ratio`; what it needs besides its sums, the item products for its standard
error, is added by :func:`moment_columns` before the count-matrix product), or a statistic of the
items themselves (:class:`Weighted`: a quantile, a Kaplan–Meier quantile, a restricted mean, a
model fit) evaluated with each item weighted by how often a resample draws it. Each declares its
default interval; ``ci=`` asks for another. The interval functions below work column by column on
replicates (B, ...) and return (low, high, undefined): the limits, and how many replicates had no
value and were left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from lengthlens.results import ConfidenceInterval, Estimate, PercentileInterval
from lengthlens.stats.delta import Stratum, moment_pairs, values_and_ses
from lengthlens.stats.metrics import ItemInterval, Sums, dependencies, finite_or_nan
from lengthlens.stats.resample import DEFAULT_CONFIDENCE

__all__ = ["CI_METHODS", "ItemInterval", "OUTSIDE_RANGE", "Ratio", "Resampled", "Statistic", "WEIGHTED_DEFAULTS", "Weighted",
           "bca_interval", "estimates", "expanded_percentile_levels", "moment_columns", "percentile_interval",
           "quantiles_with_inf", "studentized_interval"]

#: The interval methods a user can ask for.
CI_METHODS = ("studentized", "percentile", "bca")


class Statistic(Protocol):
    """What :func:`estimates` needs of a statistic of sums: its definition over named sums and its kind of interval.

    ``interval``: ``"ratio"`` (positive; studentized on the log scale by default), ``"difference"``
    (its own scale; percentile by default), or None (a point estimate only). A statistic may declare
    another default interval as ``default_ci`` (an :class:`~lengthlens.stats.metrics.ItemInterval`
    made from the item columns: the accuracy change's Tango score interval). Metrics of the registry
    are statistics; :class:`Ratio` makes one from a function; :class:`Weighted` is the other kind, a
    statistic of the items themselves.
    """

    @property
    def of(self) -> Callable[[Sums], Any]: ...

    @property
    def interval(self) -> str | None: ...


@dataclass(frozen=True)
class Ratio:
    """An analysis' own statistic: ``of`` over named sums, with its kind of interval (see :class:`Statistic`)."""

    of: Callable[[Sums], Any]
    interval: str | None = "ratio"
    default_ci: ItemInterval | None = None


#: The default intervals a :class:`Weighted` statistic may declare.
WEIGHTED_DEFAULTS = ("expanded_percentile", "percentile")


@dataclass(frozen=True, eq=False)
class Weighted:
    """A statistic of a cell's items themselves, not of their sums: a quantile, a Kaplan–Meier quantile, a restricted
    mean, a model fit, evaluated with each item weighted by how often a resample draws it.

    ``of`` maps item weights (B, n_items) to the statistic in each of the B resamples: (B,), or (B, k)
    for the k ``outputs`` (several values from one evaluation, each estimated under its own name). An
    infinite value is a value (a quantile beyond the last event time of its resample): it stays an
    extreme of the interval; NaN is undefined (a fit that failed), left out and counted.

    ``interval`` is what the default (``ci="studentized"``) gives, declared with the statistic:
    ``expanded_percentile`` (the percentile interval widened for few items, Hesterberg 2015, since such
    a statistic has no delta-method SE) or ``percentile``. ``ci="percentile"`` gives the plain
    percentile interval, ``ci="bca"`` BCa with the leave-one-item-out jackknife (``of`` on n_items
    rows of weights). ``max_resamples``: a costly statistic is evaluated on the first that many of the
    cell's draws only. ``point``: its value (or k values) on the data, when the analysis has it; by
    default ``of`` at weight 1 on every item. ``key``: what the values depend on besides the draws
    (hashable, e.g. the data's bytes): statistics with equal keys on the same draws are evaluated once
    when :func:`estimates` is given a ``memo`` (the baseline's Kaplan–Meier quartiles, the same for
    every arm on the same baseline runs).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([3.0, 1.0, 4.0, 1.5, 9.0])
    >>> def median(w):
    ...     order = np.argsort(x)
    ...     c = np.cumsum(w[:, order], axis=1)
    ...     return x[order][np.argmax(c >= c[:, -1:] / 2, axis=1)]
    >>> r = Resampled({}, {}, np.array([[1, 1, 1, 1, 1], [2, 0, 1, 1, 1], [0, 1, 2, 2, 0]]))
    >>> est, _ = estimates({"median": Weighted(median, "percentile")}, r)
    >>> est["median"].point, est["median"].method
    (3.0, 'percentile')
    """

    of: Callable[[np.ndarray], np.ndarray]
    interval: str = "expanded_percentile"
    max_resamples: int | None = None
    outputs: tuple[str, ...] = ()
    point: Any = None
    key: Any = None

    def __post_init__(self) -> None:
        if self.interval not in WEIGHTED_DEFAULTS:
            raise ValueError(f"a weighted statistic's default interval is one of {WEIGHTED_DEFAULTS}, not {self.interval!r}")

    def names(self, name: str) -> tuple[str, ...]:
        """The names its estimates come under: its outputs, or ``name``."""
        return self.outputs or (name,)

def percentile_interval(replicates, confidence_level: float = DEFAULT_CONFIDENCE) -> PercentileInterval:
    """Percentile interval of bootstrap replicates along axis 0, leaving out (and counting) undefined ones.

    Parameters
    ----------
    replicates : array of shape (n_resamples, ...): the statistic in every resample; NaN or ±inf where it
        had no value.
    confidence_level : two-sided level.

    Returns
    -------
    PercentileInterval
        ``low`` and ``high`` (one entry per column, NaN where every replicate is undefined) and
        ``undefined``, the count of replicates left out per column.

    Examples
    --------
    >>> r = percentile_interval([[1.0, 5.0], [2.0, float("nan")], [3.0, 7.0], [4.0, 8.0], [5.0, 9.0]], 0.5)
    >>> r.low.tolist(), r.high.tolist(), r.undefined.tolist()
    ([2.0, 6.5], [4.0, 8.25], [0, 1])
    """
    return PercentileInterval(*_percentile_interval(np.asarray(replicates, dtype=float), confidence_level))


def _percentile_interval(replicates: np.ndarray, confidence_level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`percentile_interval` as (low, high, undefined) arrays, for the engine's inner loop."""
    reps = np.where(np.isfinite(replicates), replicates, np.nan)
    undefined = np.isnan(reps).sum(axis=0)
    a = (1 - confidence_level) / 2
    # All-undefined columns are reported via `undefined` and left NaN. nanpercentile's warning about them is
    # avoided, not silenced: warnings.catch_warnings() changes process-wide state, and the pass runs this in
    # several threads at once (one thread's exit re-enabled another's warning). Such a column gets one 0 so
    # that it is no all-NaN slice; the others keep nanpercentile's same path (the array still holds NaN).
    none = np.asarray(undefined == reps.shape[0])
    if reps.shape[0]:
        reps[0, ...][none] = 0.0  # a view of the first resample (0-d for one column)
        lo, hi = np.nanpercentile(reps, [100 * a, 100 * (1 - a)], axis=0)
    else:
        lo, hi = np.full(reps.shape[1:], np.nan), np.full(reps.shape[1:], np.nan)
    return np.where(none, np.nan, lo), np.where(none, np.nan, hi), undefined


@lru_cache(maxsize=1024)
def expanded_percentile_levels(n_items: int, confidence_level: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """The quantile levels of the expanded percentile interval (Hesterberg 2015): the percentile interval is too
    narrow with few items, by the factor sqrt(n/(n-1)) t_(n-1) / z; the levels ``Φ(∓ sqrt(n/(n-1)) t_(n-1))``
    widen it so. Below two items, the plain levels.

    Parameters
    ----------
    n_items : the items resampled.
    confidence_level : two-sided level.

    Returns
    -------
    tuple of float
        The lower and upper quantile levels of the bootstrap distribution.

    Examples
    --------
    >>> [round(x, 4) for x in expanded_percentile_levels(12)]
    [0.0108, 0.9892]
    """
    from scipy import special, stats

    a = (1 - confidence_level) / 2
    if n_items < 2:
        return a, 1 - a
    a = float(special.ndtr(-math.sqrt(n_items / (n_items - 1)) * stats.t.ppf(1 - a, n_items - 1)))
    return a, 1 - a


def bca_interval(replicates: np.ndarray, point: np.ndarray, jackknife: np.ndarray,
                 confidence_level: float = DEFAULT_CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bias-corrected and accelerated bootstrap interval (Efron 1987), per column.

    The acceleration comes from the skewness of the leave-one-item-out estimates, as in
    scipy.stats.bootstrap(method='BCa'); undefined (NaN/inf) replicates are left out and counted.

    Parameters
    ----------
    replicates : (n_resamples, ...) the statistic in every resample.
    point : the point estimate per column.
    jackknife : (n_items, ...) the leave-one-item-out estimates.
    confidence_level : two-sided level.

    Returns
    -------
    tuple of numpy.ndarray
        (low, high, undefined) per column.

    Examples
    --------
    >>> reps = np.array([[0.9], [1.0], [1.1], [1.2], [0.8]])
    >>> lo, hi, und = bca_interval(reps, np.array([1.0]), np.array([[0.95], [1.0], [1.05], [1.0]]), 0.8)
    >>> round(float(lo[0]), 4), round(float(hi[0]), 4), int(und[0])
    (0.8147, 1.1123, 0)
    """
    from scipy import special  # here, not at the top: the studentized and percentile paths need no scipy

    reps = np.where(np.isfinite(replicates), replicates, np.nan)
    undefined = np.isnan(reps).sum(axis=0)
    n_def = reps.shape[0] - undefined
    with np.errstate(all="ignore"):
        below = np.nansum(reps < point, axis=0) / n_def
        z0 = special.ndtri(below)
        jk_mean = np.nanmean(jackknife, axis=0)
        d = jk_mean - jackknife
        acc = np.nansum(d**3, axis=0) / (6.0 * np.nansum(d**2, axis=0) ** 1.5)
        a = (1 - confidence_level) / 2
        out = []
        for z_alpha in (special.ndtri(a), special.ndtri(1 - a)):
            adj = special.ndtr(z0 + (z0 + z_alpha) / (1 - acc * (z0 + z_alpha)))
            out.append(adj)
        lo_q, hi_q = out
        lo = np.full(np.shape(point), np.nan)
        hi = np.full(np.shape(point), np.nan)
        flat_reps = reps.reshape(reps.shape[0], -1)
        for j, (ql, qh) in enumerate(zip(np.ravel(lo_q), np.ravel(hi_q))):
            col = flat_reps[:, j]
            col = col[~np.isnan(col)]
            if col.size and np.isfinite(ql) and np.isfinite(qh):
                np.ravel(lo)[j] = np.percentile(col, 100 * ql)
                np.ravel(hi)[j] = np.percentile(col, 100 * qh)
    return lo, hi, undefined


def jackknife_sums(item_sums: np.ndarray) -> np.ndarray:
    """Leave-one-item-out sums: total minus each item's row (n_items, Q)."""
    return item_sums.sum(axis=0, keepdims=True) - item_sums


def quantiles_with_inf(values: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """Linear-interpolation quantiles (numpy's default) per column, NaN dropped, ±inf kept as extremes.

    Interpolating towards an infinite value gives that infinity; an all-NaN column gives NaN (where
    numpy's nanquantile would give NaN for any column holding an infinity).

    Parameters
    ----------
    values : (n, ...) values, quantiles taken along axis 0.
    qs : quantile levels in [0, 1].

    Returns
    -------
    numpy.ndarray
        (len(qs), *values.shape[1:]).

    Examples
    --------
    >>> quantiles_with_inf(np.array([[1.0], [2.0], [np.inf], [np.nan]]), [0.0, 0.5, 1.0]).ravel().tolist()
    [1.0, 2.0, inf]
    """
    v = np.sort(values, axis=0)  # NaN last, -inf first
    n_valid = np.sum(~np.isnan(values), axis=0)
    out = []
    for q in qs:
        h = np.maximum(n_valid - 1, 0) * q
        lo = np.floor(h).astype(np.int64)
        hi = np.ceil(h).astype(np.int64)
        a = np.take_along_axis(v, lo[None], axis=0)[0]
        b = np.take_along_axis(v, hi[None], axis=0)[0]
        with np.errstate(invalid="ignore"):
            r = np.where((a == b) | np.isinf(a), a, np.where(np.isinf(b), b, a + (h - lo) * (b - a)))
        out.append(np.where(n_valid > 0, r, np.nan))
    return np.stack(out)


def studentized_interval(point: np.ndarray, se: np.ndarray, replicates: np.ndarray, se_replicates: np.ndarray,
                         confidence_level: float = DEFAULT_CONFIDENCE, symmetric: bool = True
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bootstrap-t interval per column, with t_b = (rep_b − point) / se_b: the default interval of the ratios.

    ``symmetric`` (default): point ± q se with q the ``confidence_level`` quantile of |t_b| (Hall 1988;
    it covers better than the equal-tailed form at 12–150 items in simulation, see README). Otherwise
    equal-tailed: [point − t_hi se, point − t_lo se]. A resample whose SE is 0 but whose value differs
    from the point (one distinct item) has t = ±inf: kept as an extreme value, so the limit can be
    unbounded. Resamples with an undefined value or SE are dropped and counted. With ``se`` 0 (every item
    agrees) the interval is the point. "0" means below 1e-12 (1 + |point|). Where so many resamples have
    SE 0 with a changed value that a limit comes out unbounded (nearly every item unchanged, as in a check
    of a lossless method), the bootstrap-t says nothing: that column gets the percentile interval of the
    same replicates instead.

    Parameters
    ----------
    point, se : the point estimate and its standard error per column, on the scale the interval is built
        on (the caller takes logs for ratios).
    replicates, se_replicates : (n_resamples, ...) the statistic and its SE in every resample.
    confidence_level : two-sided level.
    symmetric : the symmetric bootstrap-t (default) or the equal-tailed one.

    Returns
    -------
    tuple of numpy.ndarray
        (low, high, undefined, fell_back): ``fell_back`` marks the columns that got the percentile interval.

    Examples
    --------
    >>> reps = np.array([[0.9], [1.0], [1.1], [1.2], [0.8]])
    >>> lo, hi, und, fell_back = studentized_interval(np.array([1.0]), np.array([0.1]), reps, np.full((5, 1), 0.1), 0.8)
    >>> lo.tolist(), hi.tolist(), und.tolist(), fell_back.tolist()
    ([0.8], [1.2], [0], [False])
    """
    # SEs and differences below rounding (a metric constant across items, e.g. time per round when
    # time is logged as rounds x a constant) count as 0: t = 0 for an unchanged resample, else +/-inf.
    tol = 1e-12 * (1.0 + np.abs(point))
    t = _t_statistics(point, replicates, se_replicates, tol)
    se = np.where(se > tol, se, 0.0)
    undefined = np.isnan(t).sum(axis=0)
    a = (1 - confidence_level) / 2
    if symmetric:
        q = quantiles_with_inf(np.abs(t), (confidence_level,))[0]
        t_lo, t_hi = -q, q
    else:
        t_lo, t_hi = quantiles_with_inf(t, (a, 1 - a))
    with np.errstate(invalid="ignore", over="ignore"):
        lo = np.where(se == 0, point, point - t_hi * se)
        hi = np.where(se == 0, point, point - t_lo * se)
    bad = ~np.isfinite(point) | np.isnan(se)
    degenerate = ~bad & (np.isinf(lo) | np.isinf(hi))
    if degenerate.any():
        p_lo, p_hi, _ = _percentile_interval(replicates, confidence_level)
        lo, hi = np.where(degenerate, p_lo, lo), np.where(degenerate, p_hi, hi)
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi), undefined, degenerate


def _t_statistics(point: np.ndarray, replicates: np.ndarray, se_replicates: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """t_b = (rep_b - point) / se_b where se_b > tol; where not, 0 if |rep_b - point| <= tol else +/-inf;
    NaN where rep_b or se_b is not finite. Divides everywhere, then fixes the (few) other entries in place."""
    diff = replicates - point
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.divide(diff, se_replicates)
        small = np.broadcast_to(~(se_replicates > tol), t.shape)
        if small.any():
            d, tl = np.broadcast_to(diff, t.shape)[small], np.broadcast_to(tol, t.shape)[small]
            t[small] = np.where(np.abs(d) <= tl, 0.0, np.sign(d) * np.inf)
    finite = np.broadcast_to(np.isfinite(replicates) & np.isfinite(se_replicates), t.shape)
    if not finite.all():
        t[~finite] = np.nan
    return t


# ------------------------------------------------------------------------------------------------
# Estimates of statistics of resampled sums: the one interval code of every analysis.
# ------------------------------------------------------------------------------------------------

def _method(statistic: Statistic | Weighted, ci: str) -> str | None:
    """The interval a statistic gets when ``ci`` is asked for: the default (``studentized``) is what it declares."""
    if ci not in CI_METHODS:
        raise ValueError(f"ci must be one of {CI_METHODS}, not {ci!r}")
    if isinstance(statistic, Weighted):
        return statistic.interval if ci == "studentized" else ci
    if statistic.interval is None:
        return None
    if ci == "studentized":
        if getattr(statistic, "default_ci", None) is not None:
            return "declared"
        return "studentized" if statistic.interval == "ratio" else "percentile"
    return ci


def _product(a: str, b: str) -> str:
    return f"{a}*{b}"


def _in_stratum(name: str, s: int) -> str:
    return f"{name}@{s}"


def moment_columns(statistics: Mapping[str, Statistic], items: Mapping[str, np.ndarray], ci: str,
                   strata: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The item columns the standard errors of the studentized statistics need, to resample beside ``items``.

    With one stratum: the products xₐ x_b of the sums each statistic depends on; with ``strata`` (each
    item's stratum), the sums and products within each stratum. Statistics whose interval under ``ci``
    is not studentized need none.

    Parameters
    ----------
    statistics : the statistics by name.
    items : per-item totals (n_items,) by sum name.
    ci : the interval method asked for (``studentized``, ``percentile``, ``bca``).
    strata : each item's stratum, or None for one stratum.

    Returns
    -------
    dict
        {column name: per-item values}, e.g. ``"x*y"``.

    Examples
    --------
    >>> items = {"x": np.array([1.0, 2.0, 3.0]), "y": np.array([2.0, 2.0, 3.0])}
    >>> cols = moment_columns({"r": Ratio(lambda s: s["x"] / s["y"])}, items, "studentized")
    >>> sorted(cols), cols["x*y"].tolist()
    (['x*x', 'x*y', 'y*y'], [2.0, 4.0, 9.0])
    >>> moment_columns({"r": Ratio(lambda s: s["x"] / s["y"])}, items, "percentile")
    {}
    """
    fns = [st.of for st in statistics.values() if _method(st, ci) == "studentized"]
    pairs = moment_pairs(fns, tuple(items))
    out = {_product(a, b): items[a] * items[b] for a, b in pairs}
    if strata is not None and np.unique(strata).size > 1:
        deps = tuple(dict.fromkeys(k for p in pairs for k in p))
        masked = {}
        for s in np.unique(strata):
            inside = (strata == s).astype(float)
            masked.update({_in_stratum(k, int(s)): items[k] * inside for k in deps})
            masked.update({_in_stratum(name, int(s)): col * inside for name, col in out.items()})
        out.update(masked)
    return out


@dataclass(frozen=True, eq=False)
class Resampled:
    """Named item columns of one cell, summed over its items and in every resample.

    ``items`` (n_items,) per column, ``boot`` (B,) per column: what :func:`moment_columns` added
    included; ``strata`` each item's stratum (None: one). ``counts`` are the draws (B, n_items), for
    analyses whose statistics are not functions of sums.
    """

    items: Mapping[str, np.ndarray]
    boot: Mapping[str, np.ndarray]
    counts: np.ndarray
    strata: np.ndarray | None = None

    @property
    def n_items(self) -> int:
        return int(self.counts.shape[1])

    @property
    def n_resamples(self) -> int:
        return int(self.counts.shape[0])

    def point(self, names: Sequence[str] | None = None) -> Sums:
        """Each column's sum over the cell's items."""
        return Sums({k: v.sum() for k, v in self.items.items() if names is None or k in names})

    def _strata_ids(self) -> list[int]:
        return [] if self.strata is None or np.unique(self.strata).size < 2 else [int(s) for s in np.unique(self.strata)]

    def point_strata(self, sums: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Stratum]:
        ids = self._strata_ids()
        if not ids:
            point = self.point()
            return [Stratum(point, {p: point[_product(*p)] for p in pairs}, float(self.n_items))]
        out = []
        for s in ids:
            inside = self.strata == s
            out.append(Stratum({k: self.items[k][inside].sum() for k in sums},
                               {p: self.items[_product(*p)][inside].sum() for p in pairs}, float(inside.sum())))
        return out

    def boot_strata(self, sums: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[Stratum]:
        ids = self._strata_ids()
        if not ids:
            return [Stratum(self.boot, {p: self.boot[_product(*p)] for p in pairs}, float(self.n_items))]
        return [Stratum({k: self.boot[_in_stratum(k, s)] for k in sums},
                        {p: self.boot[_in_stratum(_product(*p), s)] for p in pairs}, float(np.sum(self.strata == s)))
                for s in ids]


def estimates(statistics: Mapping[str, Statistic | Weighted], r: Resampled, *, ci: str = "studentized",
              confidence_level: float = DEFAULT_CONFIDENCE, outside_range: str = "clip", keep_replicates: bool = False,
              memo: dict | None = None) -> tuple[dict[str, Estimate], dict[str, np.ndarray]]:
    """Each statistic's :class:`~lengthlens.results.Estimate`, and its replicates (B,), from one cell's resamples.

    Parameters
    ----------
    statistics : name -> a statistic of sums (a registry metric, or a :class:`Ratio`) or of the items
        themselves (:class:`Weighted`; one with ``outputs`` gives an estimate under each output's name).
    r : the cell's resamples (:class:`Resampled`): its sums, including the columns :func:`moment_columns`
        added, and its draws.
    ci : ``studentized``: each statistic's declared default (ratios: symmetric bootstrap-t on the log scale
        with the delta-method SE, falling back to the percentile interval where it is unbounded;
        differences: percentile; a statistic's own ``default_ci``, e.g. Tango's score interval for the
        accuracy change; a :class:`Weighted` statistic's ``interval``), ``percentile`` or ``bca``
        (bias-corrected and accelerated, jackknife over items), for every statistic alike.
    confidence_level : the intervals' level.
    outside_range : where a studentized ratio interval reaches beyond the range of the item ratios (the
        statistic of each item alone; no resample of a ratio of sums can leave it, and the bootstrap-t does
        where one item dominates a sum): ``clip`` (default: cut to that range, which keeps the bootstrap-t's
        coverage, while the percentile and BCa intervals cover less at 12 items; benchmarks/ratio_range.py),
        ``percentile``, ``bca`` or ``keep``; the replacement is named in the estimate's note.
    keep_replicates : give each estimate its replicates (:attr:`Estimate.replicates`).
    memo : values of :class:`Weighted` statistics with a ``key``, by key and draws, shared by calls on the same
        draws (``r.counts`` must stay alive while it is in use: it is known by its identity).

    Returns
    -------
    (estimates, replicates): name -> Estimate, and name -> the statistic in every resample it was evaluated on
    (NaN where undefined).

    Examples
    --------
    >>> import numpy as np
    >>> r = Resampled({"x": np.array([1.0, 2.0, 4.0])}, {"x": np.array([6.0, 9.0, 3.0, 12.0])}, np.ones((4, 3)))
    >>> est, _ = estimates({"mean": Ratio(lambda s: s.x / 3.0)}, r, ci="percentile")
    >>> round(est["mean"].point, 4)
    2.3333
    """
    point_sums = r.point()
    keys = tuple(r.items)
    point, reps = {}, {}
    methods = {name: _method(st, ci) for name, st in statistics.items()}
    summed = {name: st for name, st in statistics.items() if not isinstance(st, Weighted)}
    with np.errstate(all="ignore"):
        for name, st in summed.items():
            point[name] = float(finite_or_nan(st.of(point_sums)))
            reps[name] = np.broadcast_to(finite_or_nan(st.of(Sums(r.boot))), (r.n_resamples,))
    out: dict[str, Estimate] = {}
    stud = [n for n in summed if methods[n] == "studentized"]
    if stud:
        if outside_range not in OUTSIDE_RANGE:
            raise ValueError(f"outside_range must be one of {OUTSIDE_RANGE}, not {outside_range!r}")
        out.update(_studentized({n: statistics[n] for n in stud}, r, keys, point, reps, confidence_level, outside_range))
    for name, st in summed.items():
        method = methods[name]
        if method == "declared" and not np.isfinite(point[name]):
            method = "percentile"  # nothing for the declared interval to speak of: the resamples say it is undefined
        if method == "percentile":
            lo, hi, und = _percentile_interval(reps[name][:, None], confidence_level)
            out[name] = _estimate(point[name], lo[0], hi[0], und[0], "percentile", confidence_level,
                                  _bootstrap_se(reps[name]))
        elif method == "bca":
            lo, hi, und = _bca(st, r, point[name], reps[name], confidence_level)
            out[name] = _estimate(point[name], lo[0], hi[0], und[0], "bca", confidence_level, _bootstrap_se(reps[name]))
        elif method == "declared":
            lo, hi, se, how = st.default_ci.of(Sums(r.items), confidence_level)
            out[name] = _estimate(point[name], lo, hi, 0, how, confidence_level, se)
        elif method is None:
            out[name] = Estimate(point[name])
    for name, st in statistics.items():
        if isinstance(st, Weighted):
            w_est, w_reps = _weighted(st, name, r, methods[name], confidence_level, memo)
            out.update(w_est)
            reps.update(w_reps)
    names = [n for name, st in statistics.items() for n in (st.names(name) if isinstance(st, Weighted) else (name,))]
    if keep_replicates:
        return {n: replace(out[n], replicates=np.array(reps[n])) for n in names}, reps
    return {n: out[n] for n in names}, reps


def _weighted(statistic: Weighted, name: str, r: Resampled, method: str, level: float, memo: dict | None = None
              ) -> tuple[dict[str, Estimate], dict[str, np.ndarray]]:
    """The estimates of a statistic of the items themselves, from its values at the cell's draws as weights."""
    n = r.n_items
    m = r.n_resamples if statistic.max_resamples is None else min(int(statistic.max_resamples), r.n_resamples)
    names = statistic.names(name)
    key = None if memo is None or statistic.key is None else (statistic.key, id(r.counts), m, len(names))
    with np.errstate(all="ignore"):
        if key is not None and key in memo:
            values = memo[key]
        else:
            values = np.asarray(statistic.of(r.counts[:m]), dtype=np.float64).reshape(m, len(names))
            if key is not None:
                values.setflags(write=False)
                memo[key] = values
        if statistic.point is not None:
            point = np.asarray(statistic.point, dtype=np.float64).reshape(len(names))
        else:
            point = np.asarray(statistic.of(np.ones((1, n))), dtype=np.float64).reshape(len(names))
        if method == "bca":
            jack = np.asarray(statistic.of(1.0 - np.eye(n)), dtype=np.float64).reshape(n, len(names))
            lo, hi, undefined = bca_interval(values, point, jack, level)
        else:
            a = (1 - level) / 2
            levels = expanded_percentile_levels(n, level) if method == "expanded_percentile" else (a, 1 - a)
            lo, hi = quantiles_with_inf(values, levels)
            undefined = np.isnan(values).sum(axis=0)
    est = {k: _estimate(point[j], lo[j], hi[j], undefined[j], method, level, _bootstrap_se(values[:, j]))
           for j, k in enumerate(names)}
    return est, {k: values[:, j] for j, k in enumerate(names)}


#: What the studentized interval of a ratio gives way to where its limits leave the range of the resamples
#: (see :func:`estimates`).
OUTSIDE_RANGE = ("percentile", "bca", "clip", "keep")

#: Why a default interval was replaced, as :attr:`Estimate.note` says it (cells.csv's interval_fallback).
UNBOUNDED_NOTE = "the bootstrap-t was unbounded (resamples without spread): percentile interval"
OUTSIDE_NOTE = {"percentile": "outside item-ratio range: percentile interval",
                "bca": "outside item-ratio range: BCa interval",
                "clip": "outside item-ratio range: cut to that range"}


def _studentized(statistics: Mapping[str, Statistic], r: Resampled, keys: tuple[str, ...], point: Mapping[str, float],
                 reps: Mapping[str, np.ndarray], level: float, outside_range: str = "clip") -> dict[str, Estimate]:
    """Symmetric bootstrap-t on the log scale for the ratio statistics of one cell (their SEs share the moments).

    Its limits are checked on the ratio's own scale: where one is 0 or infinite (or the log-scale interval
    was), the percentile interval stands in; where one lies outside the range of the statistic of each item
    alone (for a ratio of sums, the item ratios: no resample can leave it), ``outside_range`` says what stands in.
    """
    fns = {n: st.of for n, st in statistics.items()}
    pairs = moment_pairs(fns.values(), keys)
    sums = tuple(dict.fromkeys(k for p in pairs for k in p))
    log = dict.fromkeys(fns, True)
    point_sums = r.point(keys)
    at_point = values_and_ses(fns, point_sums, r.point_strata(sums, pairs), log)
    in_boot = values_and_ses(fns, Sums({k: r.boot[k] for k in keys}), r.boot_strata(sums, pairs), log)
    out = {}
    names = tuple(fns)
    # every statistic's bootstrap-t at once, column by column (the same numbers as one at a time)
    est_b = np.column_stack([np.broadcast_to(in_boot[n][0], (r.n_resamples,)) for n in names])
    se_b = np.column_stack([np.broadcast_to(in_boot[n][1], (r.n_resamples,)) for n in names])
    los, his, unds, fells = studentized_interval(np.array([float(at_point[n][0]) for n in names]),
                                                 np.array([float(at_point[n][1]) for n in names]), est_b, se_b, level)
    for k, name in enumerate(names):
        se = at_point[name][1]
        lo, hi, und, fell_back = los[k:k + 1], his[k:k + 1], unds[k:k + 1], fells[k:k + 1]
        with np.errstate(over="ignore"):  # built on the log scale
            lo, hi = float(np.exp(lo[0])), float(np.exp(hi[0]))
        # The SE of the statistic itself (delta method): d f = f d log f.
        se_point = float(point[name] * se) if np.isfinite(se) else np.nan
        alone = _item_ratios(statistics[name].of, r)
        method, note = "studentized", ""
        if np.isfinite(point[name]) and not (fell_back[0] or (lo > 0 and np.isfinite(hi))):
            lo, hi, _ = (float(x[0]) for x in _percentile_interval(reps[name][:, None], level))
            method, note = "percentile", UNBOUNDED_NOTE
        elif fell_back[0]:
            method, note = "percentile", UNBOUNDED_NOTE
        elif outside_range != "keep" and alone.size and np.isfinite(lo) and (lo < alone.min() or hi > alone.max()):
            note = OUTSIDE_NOTE[outside_range]
            if outside_range == "clip":
                lo, hi = max(lo, float(alone.min())), min(hi, float(alone.max()))
            elif outside_range == "percentile":
                method = "percentile"
                lo, hi, _ = (float(x[0]) for x in _percentile_interval(reps[name][:, None], level))
            else:
                method = "bca"
                lo, hi, _ = (float(x[0]) for x in _bca(statistics[name], r, point[name], reps[name], level))
        out[name] = _estimate(point[name], lo, hi, und[0], method, level, se_point, note)
    return out


def _item_ratios(fn: Callable[[Sums], Any], r: Resampled) -> np.ndarray:
    """The defined item ratios xᵢ / yᵢ of a ratio of two sums Σx / Σy (the statistic of each item alone), else empty.

    A resample of a ratio of sums is a mean of its item ratios, weighted by yᵢ: it cannot leave their
    range. Other statistics (a ratio of two such ratios) can, so they get no range.
    """
    keys = tuple(r.items)
    deps = dependencies(fn, keys)
    if len(deps) != 2:
        return np.empty(0)
    probe = Sums({k: np.float64(50.0 + 3.0 * i) for i, k in enumerate(keys)})
    with np.errstate(all="ignore"):
        value = float(finite_or_nan(fn(probe)))
        a, b = (float(probe[k]) for k in deps)
        if not (math.isclose(value, a / b, rel_tol=1e-12) or math.isclose(value, b / a, rel_tol=1e-12)):
            return np.empty(0)
        alone = np.broadcast_to(finite_or_nan(fn(Sums(r.items))), (r.n_items,))
    return alone[np.isfinite(alone)]


def _bca(statistic: Statistic, r: Resampled, point: float, replicates: np.ndarray, level: float):
    """The BCa interval of one statistic of the cell's sums, its jackknife leaving out one item at a time."""
    point_sums = r.point()
    jack_sums = Sums({k: point_sums[k] - v for k, v in r.items.items()})
    with np.errstate(all="ignore"):
        jack = finite_or_nan(statistic.of(jack_sums))
    return bca_interval(replicates[:, None], np.asarray([point]), np.broadcast_to(jack, (r.n_items,))[:, None], level)


def _bootstrap_se(replicates: np.ndarray) -> float:
    """The standard deviation of the defined replicates (NaN with fewer than two)."""
    v = replicates[np.isfinite(replicates)]
    return float(v.std(ddof=1)) if v.size > 1 else np.nan


def _estimate(point: float, lo: float, hi: float, undefined: int, method: str, level: float,
              standard_error: float = np.nan, note: str = "") -> Estimate:
    return Estimate(float(point), ConfidenceInterval(float(lo), float(hi)), standard_error=float(standard_error), method=method,
                    confidence_level=level, undefined_resamples=int(undefined), note=note)
