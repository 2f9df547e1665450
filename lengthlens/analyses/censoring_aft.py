"""The AFT part of a cell's censoring analysis: both laws fitted to the pooled arms, with their intervals.

Split from :mod:`lengthlens.analyses.censoring` (which calls it for each cell) so that a group's cells
can be fitted at once (:func:`aft_estimates_many`). A cell's data is censoring's ``_CellData``: lengths
``L``/``Ls``, censored flags ``c``/``cs``, item positions ``idx``/``idx_s`` and the draws ``counts``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from lengthlens.stats.aft import _DISTS, AFTFit, fit_aft
from lengthlens.stats.aft_bootstrap import AFTBootstrap, fit_aft_bootstrap
from lengthlens.stats.aft_many import fit_aft_many
from lengthlens.stats.aft_sandwich import aft_sandwich
from lengthlens.stats.resample import quantiles_with_inf


def _percentile_pair(values: np.ndarray, level: float) -> tuple[float, float]:
    """The equal-tailed percentile interval of ``values``, both ends from one sort: linear interpolation (numpy's
    default), NaN dropped, an infinite replicate kept as the limit (:func:`~lengthlens.stats.resample.quantiles_with_inf`)."""
    lo, hi = quantiles_with_inf(np.asarray(values, dtype=float), ((1 - level) / 2, 1 - (1 - level) / 2))
    return float(lo), float(hi)


def _aft_inputs(d: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both arms pooled for the AFT fits: lengths, censored flags, relaxed indicator and item (cluster) per run."""
    return (np.concatenate([d.L, d.Ls]), np.concatenate([d.c, d.cs]),
            np.concatenate([np.ones(len(d.L)), np.zeros(len(d.Ls))]), np.concatenate([d.idx, d.idx_s]))


def _not_fitted(dist: str, lengths: np.ndarray, cens: np.ndarray) -> AFTFit:
    reason = "AFT not fitted: a completion of length 0 (log-length undefined)"
    return AFTFit(dist, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan,
                  float(len(lengths)), float((~cens).sum()), False, 0, reason)


def _aft_estimates(d: Any, n_boot: int, level: float):
    """AFT fits (both arms pooled) per law with a sandwich interval, or a bootstrap one when ``n_boot`` > 0."""
    lengths, cens, x, items = _aft_inputs(d)
    fits: dict[str, AFTFit] = {}
    cis: dict[str, tuple[float, float]] = {}
    boots: dict[str, AFTBootstrap | None] = {}
    for dist in _DISTS:
        if not bool(np.all(lengths > 0)):
            fits[dist], cis[dist], boots[dist] = _not_fitted(dist, lengths, cens), (math.nan, math.nan), None
            continue
        fits[dist] = fit = fit_aft(lengths, cens, x, None, dist)
        if n_boot:
            boot = boots[dist] = fit_aft_bootstrap(lengths, cens, x, d.counts[:n_boot][:, items], dist, start=fit)
            lam_b = np.exp(boot.beta)
            cis[dist] = _percentile_pair(lam_b, level)
        else:
            boots[dist] = None
            cis[dist] = aft_sandwich(fit, lengths, cens, x, items, level).ci
    return fits, cis, boots


def aft_estimates_many(ds: Sequence[Any], level: float) -> list[tuple[dict, dict, dict]]:
    """:func:`_aft_estimates` with sandwich intervals for several cells, each law fitted to all of them at once
    (:func:`lengthlens.stats.aft.fit_aft_many`: the same fits, their sums in another order)."""
    inputs = [_aft_inputs(d) for d in ds]
    out: list[tuple[dict, dict, dict]] = [({}, {}, {}) for _ in ds]
    for dist in _DISTS:
        fitted = [j for j, (lengths, *_) in enumerate(inputs) if bool(np.all(lengths > 0))]
        for j in sorted(set(range(len(ds))) - set(fitted)):
            fits, cis, boots = out[j]
            fits[dist], cis[dist], boots[dist] = _not_fitted(dist, inputs[j][0], inputs[j][1]), (math.nan, math.nan), None
        for j, (fit, hessian) in zip(fitted, fit_aft_many([inputs[j][:3] for j in fitted], dist, with_hessians=True)):
            fits, cis, boots = out[j]
            fits[dist], boots[dist] = fit, None
            cis[dist] = aft_sandwich(fit, *inputs[j], level, hessian=hessian).ci
    return out
