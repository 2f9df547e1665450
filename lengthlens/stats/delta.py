"""Delta-method standard errors of functions of sums, for the studentized (bootstrap-t) interval.

A statistic f is a smooth function of sums S = Σᵢ xᵢ over items (xᵢ: item i's totals, its seeds
added up). Linearising, f(S) − f(S_true) ≈ Σᵢ g·(xᵢ − x̄) with g the gradient of f (of log f on the
log scale) at S, so

    se² = g′ (M − S S′ / n) g,    M = Σᵢ xᵢ xᵢ′,  n = number of items,

a quadratic form in sums of products of item totals. With items resampled within strata (several
groups pooled, each keeping its own item count) the centred moment is the sum of the strata's:
Σₛ (Mₛ − Sₛ Sₛ′ / nₛ). In a resample the same formula holds with count-weighted sums, so M comes
from the same count-matrix product as S: only the products of the sums a statistic depends on are
added as columns (:func:`moment_pairs`). The gradient is exact: the statistic's one definition is
evaluated on dual numbers (:mod:`lengthlens.stats.dual`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lengthlens.stats.dual import Dual
from lengthlens.stats.metrics import Sums, dependencies, finite_or_nan

__all__ = ["Stratum", "item_products", "moment_pairs", "values_and_ses"]

Pair = tuple[str, str]


def moment_pairs(fns: Iterable[Callable[[Sums], object]], keys: Sequence[str]) -> tuple[Pair, ...]:
    """The pairs of sums whose item products the delta-method standard errors of ``fns`` need.

    Parameters
    ----------
    fns : statistics over named sums (functions of a :class:`~lengthlens.stats.metrics.Sums`).
    keys : the sums' names, in the order pairs are written (a before b).

    Returns
    -------
    tuple of (str, str)
        (a, b) pairs, a before b in ``keys``, of the sums each statistic depends on.

    Examples
    --------
    >>> moment_pairs([lambda s: s["x"] / s["y"]], ["x", "y", "z"])
    (('x', 'x'), ('x', 'y'), ('y', 'y'))
    """
    order = {k: i for i, k in enumerate(keys)}
    pairs = set()
    for fn in fns:
        deps = sorted(dependencies(fn, tuple(keys)), key=order.__getitem__)
        pairs |= {(a, b) for i, a in enumerate(deps) for b in deps[i:]}
    return tuple(sorted(pairs, key=lambda p: (order[p[0]], order[p[1]])))


def item_products(items: Mapping[str, np.ndarray], pairs: Iterable[Pair]) -> dict[Pair, np.ndarray]:
    """Per-item products xₐ x_b of item totals, the columns the delta-method variances are sums of.

    Parameters
    ----------
    items : per-item totals by sum name.
    pairs : the (a, b) pairs to multiply (:func:`moment_pairs`).

    Returns
    -------
    dict
        {(a, b): items[a] * items[b]}.

    Examples
    --------
    >>> p = item_products({"x": np.array([1.0, 2.0]), "y": np.array([2.0, 5.0])}, [("x", "y")])
    >>> p[("x", "y")].tolist()
    [2.0, 10.0]
    """
    return {(a, b): items[a] * items[b] for a, b in pairs}


@dataclass(frozen=True)
class Stratum:
    """One stratum's sums (by name), sums of item products (by pair) and its number of items.

    Arrays of any shapes that broadcast: a point estimate's sums are scalars, a resample's (B,).
    """

    sums: Mapping[str, np.ndarray]
    moments: Mapping[Pair, np.ndarray]
    n_items: float


def values_and_ses(fns: Mapping[str, Callable[[Sums], object]], sums: Mapping[str, np.ndarray],
                   strata: Sequence[Stratum], log: Mapping[str, bool]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each statistic's value (its log where ``log[name]``) and delta-method standard error, sharing the work.

    What the statistics have in common is computed once: each pair's centred moment. Undefined values
    (a zero denominator, a log of a non-positive value) are NaN, with a NaN SE.

    Parameters
    ----------
    fns : the statistics by name, functions of named sums.
    sums : the totals the statistics are evaluated on (the strata's sums added up); scalars for a point
        estimate, (B,) arrays for B resamples.
    strata : what the centred moments come from (one :class:`Stratum` for a cell of one group).
    log : by name, whether the value and SE are on the log scale (the ratios').

    Returns
    -------
    dict
        {name: (value, se)}.

    Examples
    --------
    >>> x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 2.0, 3.0, 5.0])
    >>> ratio = lambda s: s["x"] / s["y"]
    >>> m = item_products({"x": x, "y": y}, moment_pairs([ratio], ["x", "y"]))
    >>> st = Stratum({"x": x.sum(), "y": y.sum()}, {k: v.sum() for k, v in m.items()}, 4.0)
    >>> value, se = values_and_ses({"r": ratio}, st.sums, [st], {"r": False})["r"]
    >>> round(float(value), 4), round(float(se), 4)
    (0.8333, 0.0761)
    """
    centred: dict[Pair, np.ndarray] = {}
    scale: dict[Pair, np.ndarray] = {}

    def key_of(a: str, b: str) -> Pair:
        return (a, b) if (a, b) in strata[0].moments else (b, a)

    def centred_moment(a: str, b: str) -> np.ndarray:
        key = key_of(a, b)
        if key not in centred:
            centred[key] = sum(s.moments[key] - s.sums[a] * s.sums[b] / s.n_items for s in strata)
        return centred[key]

    def moment_scale(a: str, b: str, where: np.ndarray | None = None) -> np.ndarray:
        """The pair's scale, or (``where``: a mask of the statistic's shape) its entries there, element by element
        the same numbers."""
        key = key_of(a, b)
        if where is not None:
            return sum(np.abs(_at(s.moments[key], where)) + np.abs(_at(s.sums[a], where) * _at(s.sums[b], where))
                       / s.n_items for s in strata)
        if key not in scale:
            scale[key] = sum(np.abs(s.moments[key]) + np.abs(s.sums[a] * s.sums[b]) / s.n_items for s in strata)
        return scale[key]

    def scale_root(a: str) -> np.ndarray:
        if a not in root:
            root[a] = np.sqrt(moment_scale(a, a))
        return root[a]

    root: dict[str, np.ndarray] = {}
    out = {}
    with np.errstate(all="ignore"):  # undefined values are NaN, and counted as such by the intervals
        for name, fn in fns.items():
            out[name] = _value_and_se(fn, sums, centred_moment, moment_scale, scale_root, bool(log.get(name, True)))
    return out


def _at(x: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``x``'s entries at the mask ``where`` (x broadcast to its shape), flat."""
    return np.broadcast_to(x, where.shape)[where]


#: A variance at most this share of the magnitude of the terms it is the difference of is rounding, i.e. 0:
#: M − S S′/n loses about n·eps of that magnitude in the sums (eps = 2.2e-16, n up to ~10⁵ items here),
#: while a real spread of one part in 10⁴ between items leaves about 10⁻⁸ of it.
ZERO_VARIANCE_SHARE = 1e-10


#: How far a computed :func:`_magnitude_bound` may fall short of the computed magnitude it bounds: rounding, about
#: n·eps of the terms (n items up to ~10⁵), far below this.
BOUND_SLACK = 1e-6


def _value_and_se(fn: Callable[[Sums], object], sums: Mapping[str, np.ndarray],
                  centred_moment: Callable[[str, str], np.ndarray], moment_scale: Callable[..., np.ndarray],
                  scale_root: Callable[[str], np.ndarray], log: bool) -> tuple[np.ndarray, np.ndarray]:
    keys = tuple(sums)
    deps = dependencies(fn, keys)
    value = fn(Sums({**sums, **{k: Dual.variable(sums[k], k) for k in deps}}))
    metric, grad = (value.value, value.grad) if isinstance(value, Dual) else (value, {})
    metric = finite_or_nan(metric)
    g = [np.asarray(grad.get(k, 0.0)) for k in deps]
    var = _quadratic_form(g, deps, centred_moment, np.shape(metric))
    # Relative, not absolute: the rounding left in a variance of totals in the thousands is far above any fixed 1e-12.
    var = _without_rounding(var, [np.abs(x) for x in g], deps, moment_scale, scale_root)
    if log:  # d log f = df / f
        var = var / (metric * metric)
        metric = np.where(metric > 0, metric, np.nan)
        metric = np.log(metric)
    se = np.sqrt(np.maximum(var, 0.0))
    return metric, np.where(np.isfinite(metric), se, np.nan)


def _without_rounding(var: np.ndarray, abs_grads: list[np.ndarray], keys: tuple[str, ...],
                      moment_scale: Callable[..., np.ndarray], scale_root: Callable[[str], np.ndarray]) -> np.ndarray:
    """``var`` where it exceeds :data:`ZERO_VARIANCE_SHARE` of its magnitude (|g|′ scale |g|), else 0.

    The magnitude is a second quadratic form as costly as the variance; it is bounded cheaply by
    (Σₐ |gₐ| √scaleₐₐ)² (Cauchy–Schwarz: scaleₐ_b ≤ √(scaleₐₐ scale_bb) with non-negative counts), and
    formed, entry by entry as before, only where that bound leaves the comparison open.
    """
    if np.ndim(var) == 0:
        magnitude = _quadratic_form(abs_grads, keys, moment_scale, np.shape(var))
        return np.where(var > ZERO_VARIANCE_SHARE * magnitude, var, 0.0)
    bound = sum(x * scale_root(k) for x, k in zip(abs_grads, keys))
    bound = bound * bound * (1.0 + BOUND_SLACK)
    open_ = ~(var > ZERO_VARIANCE_SHARE * bound)  # NaN, infinite or small: decided by the magnitude itself
    if not open_.any():
        return var
    out = np.array(var, dtype=np.float64)
    sub = out[open_]
    magnitude = _quadratic_form([_at(x, open_) for x in abs_grads], keys,
                                lambda a, b: moment_scale(a, b, open_), sub.shape)
    out[open_] = np.where(sub > ZERO_VARIANCE_SHARE * magnitude, sub, 0.0)
    return out


def _quadratic_form(grads: list[np.ndarray], keys: tuple[str, ...], centred_moment: Callable[[str, str], np.ndarray],
                    shape: tuple[int, ...]) -> np.ndarray:
    """g′ C g, term by term in the order (a, b ≥ a), off-diagonal terms doubled, added to zeros."""
    pairs = [(a, b) for a in range(len(keys)) for b in range(a, len(keys))]
    shape = np.broadcast_shapes(shape, *(g.shape for g in grads),
                                *(np.shape(centred_moment(keys[a], keys[b])) for a, b in pairs))
    var = np.zeros(shape)
    term = np.empty(shape)
    for a, b in pairs:
        np.multiply(grads[a], grads[b], out=term)
        np.multiply(term, centred_moment(keys[a], keys[b]), out=term)
        if a != b:
            np.multiply(term, 2.0, out=term)
        np.add(var, term, out=var)
    return var
