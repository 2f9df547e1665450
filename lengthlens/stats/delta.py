"""Delta-method standard errors of cell metrics from sums, for the studentized (bootstrap-t) interval.

Every metric is a smooth function f of the cell's sums S = sum_i x_i over items (x_i: item i's
row of the item-sum matrix, seeds added up). Linearising, f(S) - f(S_true) ~ sum_i g . (x_i - x_bar)
with g the gradient of f (of log f for ratio metrics) at S, so

    se^2 = g' (M - S S' / n) g,    M = sum_i x_i x_i',  n = number of items,

a quadratic form in sums of products of item totals. In a resample the same formula holds with
count-weighted sums, so M comes from the same count-matrix product as S: only the products of
the fields a metric depends on are added as extra columns (:func:`moment_pairs`). The gradient is
taken by central differences of the metric's one definition in :mod:`lengthlens.stats.metrics`,
so no metric is defined twice.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from lengthlens.stats.metrics import METRIC_BY_NAME, SUM_FIELDS, SUM_INDEX, evaluate

#: Relative step of the central differences (error ~1e-10 relative on smooth metrics).
_STEP = 1e-5


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
    if not log:
        return values
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(values)
    out = np.asarray(out)
    if out.ndim == 0:
        return out if values > 0 else np.asarray(np.nan)
    out[~(values > 0)] = np.nan  # 0 and negatives (and NaN) have no log here
    return out


def metric_and_se(name: str, sums: np.ndarray, moments: np.ndarray, pairs: tuple[tuple[int, int], ...],
                  n_items: np.ndarray | float, log: bool) -> tuple[np.ndarray, np.ndarray]:
    """The metric (log of it when ``log``) and its delta-method SE, per row of ``sums`` (..., n_fields).

    ``moments`` (..., len(pairs)) holds sum_i x_k x_l for ``pairs``; ``n_items`` the number of
    items in each sum (a resample of n items has n). Values where the metric is undefined (or not
    positive on the log scale) are NaN.
    """
    fields = metric_fields(name)
    fn = METRIC_BY_NAME[name].fn
    s = {f: sums[..., i] for f, i in SUM_INDEX.items()}  # views: a perturbation replaces one entry
    value = _transform(fn(s), log)
    grads = []
    for k in fields:
        field = SUM_FIELDS[k]
        h = _STEP * np.maximum(np.abs(s[field]), 1.0)
        f_up = _transform(fn({**s, field: s[field] + h}), log)
        f_down = _transform(fn({**s, field: s[field] - h}), log)
        grads.append((f_up - f_down) / (2 * h))
    pos = {p: j for j, p in enumerate(pairs)}
    var = np.zeros(np.shape(value))
    for a, k in enumerate(fields):
        for b in range(a, len(fields)):
            l = fields[b]
            term = grads[a] * grads[b] * (moments[..., pos[(k, l)]] - sums[..., k] * sums[..., l] / n_items)
            var += term if a == b else 2.0 * term
    with np.errstate(invalid="ignore"):
        se = np.sqrt(np.maximum(var, 0.0))
    return value, np.where(np.isfinite(value), se, np.nan)


def is_log_scale(name: str) -> bool:
    """Ratio metrics get their interval on the log scale; differences (accuracy change) on the identity scale."""
    return METRIC_BY_NAME[name].scale == "log"
