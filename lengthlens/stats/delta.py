"""Delta-method standard errors of cell metrics from sums, for the studentized (bootstrap-t) interval.

Every metric is a smooth function f of the cell's sums S = sum_i x_i over items (x_i: item i's
row of the item-sum matrix, seeds added up). Linearising, f(S) - f(S_true) ~ sum_i g . (x_i - x_bar)
with g the gradient of f (of log f for ratio metrics) at S, so

    se^2 = g' (M - S S' / n) g,    M = sum_i x_i x_i',  n = number of items,

a quadratic form in sums of products of item totals. In a resample the same formula holds with
count-weighted sums, so M comes from the same count-matrix product as S: only the products of
the fields a metric depends on are added as extra columns (:func:`moment_pairs`). The gradient is
exact: the metric's one definition in :mod:`lengthlens.stats.metrics` is evaluated on duals
(:mod:`lengthlens.stats.dual`), so no metric is defined twice.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Mapping, Sequence

import numpy as np

from lengthlens.stats.dual import Dual
from lengthlens.stats.metrics import METRIC_BY_NAME, SUM_FIELDS, SUM_INDEX, evaluate

@lru_cache(maxsize=None)
def metric_fields(name: str) -> tuple[int, ...]:
    """Indices (into SUM_FIELDS) of the sums the metric depends on, found by perturbing each one."""
    rng = np.random.default_rng(0)
    base = rng.uniform(50.0, 100.0, size=len(SUM_FIELDS))
    f0 = evaluate(base, (name,))[name]
    out = []
    for k in range(len(SUM_FIELDS)):
        s = base.copy()
        s[k] *= 1.1
        if not np.isclose(evaluate(s, (name,))[name], f0, rtol=1e-12, atol=0.0):
            out.append(k)
    return tuple(out)


def moment_pairs(names: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """(k, l) field pairs, k <= l, whose item products the SEs of ``names`` need."""
    pairs = {(k, l) for n in names for k in metric_fields(n) for l in metric_fields(n) if k <= l}
    return tuple(sorted(pairs))


def item_products(X: np.ndarray, pairs: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Per-item products x_k x_l for ``pairs``: (..., len(pairs)) from X (..., n_fields)."""
    if not pairs:
        return X[..., :0]
    a = np.array([k for k, _ in pairs])
    b = np.array([l for _, l in pairs])
    return X[..., a] * X[..., b]


def _transform(values: np.ndarray, log: bool) -> np.ndarray:
    """log of a metric's values (NaN where not positive); the values themselves on the identity scale.

    The caller silences the floating-point warnings of log (one ``np.errstate`` around many calls).
    """
    if not log:
        return values
    out = np.asarray(np.log(values))
    if out.ndim == 0:
        return out if values > 0 else np.asarray(np.nan)
    if not values.min(initial=np.inf) > 0:  # one pass in the usual case where every value is positive
        out[~(values > 0)] = np.nan  # 0 and negatives (and NaN) have no log here
    return out


def metric_and_se(name: str, sums: np.ndarray, moments: np.ndarray, pairs: tuple[tuple[int, int], ...],
                  n_items: np.ndarray | float, log: bool) -> tuple[np.ndarray, np.ndarray]:
    """The metric (log of it when ``log``) and its delta-method SE, per row of ``sums`` (..., n_fields).

    ``moments`` (..., len(pairs)) holds sum_i x_k x_l for ``pairs``; ``n_items`` the number of
    items in each sum (a resample of n items has n). Values where the metric is undefined (or not
    positive on the log scale) are NaN.
    """
    s = {f: sums[..., i] for f, i in SUM_INDEX.items()}
    m = {p: moments[..., j] for j, p in enumerate(pairs)}
    return metrics_and_ses((name,), s, m, n_items, log)[name]


#: Numbers per slice when the SEs of many resamples are computed: a group's arrays (n_cells x 10^4 resamples) up to
#: twice this are done whole, larger ones in slices that bound the temporaries (2^16 numbers, 512 kB each). Each
#: slice repeats every step's Python and numpy call overhead: in the paper-scale pass (one process, the workers'
#: heap settings) the SEs took 2.45-2.56 s of CPU in slices of 2^14 (four per 5-cell group) and 1.64-1.71 s whole
#: (four alternated pairs; with slices of 2^15, 2^17 or none, which also leave these groups whole, the same within noise).
_SLICE = 1 << 16


def metrics_and_ses(names: Sequence[str], s: Mapping[str, np.ndarray], moments: Mapping[tuple[int, int], np.ndarray],
                    n_items: np.ndarray | float, log: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`metric_and_se` of several metrics on the same sums: {name: (value, se)}.

    ``s`` maps a field name (SUM_FIELDS) to its sums, ``moments`` a pair (k, l) to sum_i x_k x_l;
    arrays of any shapes that broadcast (a field equal in every cell may be one row). What the
    metrics have in common is computed once: a pair's centred moment M_kl - S_k S_l / n, the very
    expression :func:`metric_and_se` evaluates, so the values are the same to the bit. Every step is
    element-wise, so large arrays are done in slices along the last axis (resamples), with the same numbers.
    """
    shape = np.broadcast_shapes(*(np.shape(a) for a in s.values()), *(np.shape(a) for a in moments.values()))
    size = int(np.prod(shape))
    if not shape or size <= 2 * _SLICE or np.ndim(n_items) > 0:
        return _metrics_and_ses(names, s, moments, n_items, log)
    n_slices = -(-size // _SLICE)
    step = -(-shape[-1] // n_slices)  # equal slices
    out = {n: (np.empty(shape), np.empty(shape)) for n in names}
    for start in range(0, shape[-1], step):
        part = (..., slice(start, start + step))
        got = _metrics_and_ses(names, {f: x[part] for f, x in s.items()}, {p: x[part] for p, x in moments.items()},
                               n_items, log)
        for n, (value, se) in got.items():
            out[n][0][part], out[n][1][part] = value, se
    return out


def _metrics_and_ses(names: Sequence[str], s: Mapping[str, np.ndarray], moments: Mapping[tuple[int, int], np.ndarray],
                     n_items: float, log: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    centred: dict[tuple[int, int], np.ndarray] = {}

    def centred_moment(k: int, l: int) -> np.ndarray:
        if (k, l) not in centred:
            centred[(k, l)] = moments[(k, l)] - s[SUM_FIELDS[k]] * s[SUM_FIELDS[l]] / n_items
        return centred[(k, l)]

    with np.errstate(all="ignore"):  # undefined values are NaN, and counted as such by the intervals
        return {n: _value_and_se(n, s, centred_moment, log) for n in names}


def _value_and_se(name: str, s: Mapping[str, np.ndarray], centred_moment: Callable[[int, int], np.ndarray],
                  log: bool) -> tuple[np.ndarray, np.ndarray]:
    fields = metric_fields(name)
    # The metric's own definition on duals: its value (the plain definition's array) and exact gradient
    out = METRIC_BY_NAME[name].fn({**s, **{SUM_FIELDS[k]: Dual.variable(s[SUM_FIELDS[k]], k) for k in fields}})
    metric, grad = (out.value, out.grad) if isinstance(out, Dual) else (out, {})
    var = _quadratic_form([grad.get(k, 0.0) for k in fields], fields, centred_moment, np.shape(metric))
    if log:  # d log f = df / f
        var = np.divide(var, np.multiply(metric, metric))
    value = _transform(metric, log)
    se = np.sqrt(np.maximum(var, 0.0))
    return value, np.where(np.isfinite(value), se, np.nan)


def _quadratic_form(grads: list[np.ndarray], fields: tuple[int, ...], centred_moment: Callable[[int, int], np.ndarray],
                    shape: tuple[int, ...]) -> np.ndarray:
    """g' (M - S S' / n) g, term by term in the order (a, b >= a), off-diagonal terms doubled, added to zeros."""
    pairs = [(a, b) for a in range(len(fields)) for b in range(a, len(fields))]
    shape = np.broadcast_shapes(shape, *(g.shape for g in grads),
                                *(np.shape(centred_moment(fields[a], fields[b])) for a, b in pairs))
    var = np.zeros(shape)
    term = np.empty(shape)
    for a, b in pairs:
        np.multiply(grads[a], grads[b], out=term)
        np.multiply(term, centred_moment(fields[a], fields[b]), out=term)
        if a != b:
            np.multiply(term, 2.0, out=term)
        np.add(var, term, out=var)
    return var


def is_log_scale(name: str) -> bool:
    """Ratio metrics get their interval on the log scale; differences (accuracy change) on the identity scale."""
    return METRIC_BY_NAME[name].scale == "log"
