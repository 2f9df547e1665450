"""AFT fits of several independent data sets at once (:func:`fit_aft_many`): a report's cells, one Newton per group.

Each data set is one row of weights over all the runs (1 on its own, 0 on the others'), so the
vectorised Newton of :mod:`lengthlens.stats.aft` fits them together, each to its own likelihood.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from lengthlens.stats.aft import (_DISTS, AFTFit, Dist, _AFTProblem, _model_beta_se, _newton, _no_mle, _prepare,
                                  _separation, _start_values)

__all__ = ["fit_aft_many"]


def fit_aft_many(data: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], dist: Dist = "lognormal",
                 with_hessians: bool = False) -> list:
    """:func:`~lengthlens.stats.aft.fit_aft` (unweighted) of several independent data sets at once: one Newton over one weight row each.

    ``data`` holds (lengths, censored, relaxed_indicator) per data set. Each row weighs its own runs
    1 and every other run 0, so each row maximises its own likelihood and the fits are
    fit_aft's; a row's sums include the zeros, in another order, so they can differ in the
    last bits. A report fits two laws in each of hundreds of cells, where the cost of a fit of a
    few hundred runs was its Python overhead, paid once per group of cells this way.
    ``with_hessians``: (fit, Hessian of the log-likelihood in psi at the fit, None without an MLE)
    pairs, for the sandwich interval.
    """
    fits = _fit_many(data, dist)
    return fits if with_hessians else [fit for fit, _ in fits]


def _fit_many(data: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], dist: Dist
              ) -> list[tuple[AFTFit, np.ndarray | None]]:
    """:func:`fit_aft_many`'s fits, each with the Hessian of its log-likelihood in psi at the fit (None without an MLE)."""
    if dist not in _DISTS:
        raise ValueError(f"dist must be one of {_DISTS}")
    prepared = [_prepare(*d) for d in data]
    out: list[tuple[AFTFit, np.ndarray | None] | None] = [None] * len(prepared)
    regular = []
    for j, (y, event, x) in enumerate(prepared):
        lim, irregular = _separation(np.ones((1, len(y))), event, x)
        if irregular[0]:
            out[j] = (_no_mle(dist, float(lim[0]), float(len(y)), float(event.sum())), None)
        else:
            regular.append(j)
    if regular:
        sizes = [len(prepared[j][0]) for j in regular]
        ends = np.cumsum(sizes)
        W = np.zeros((len(regular), int(ends[-1])))
        for r, (start, end) in enumerate(zip(ends - sizes, ends)):
            W[r, start:end] = 1.0
        y, event, x = (np.concatenate([prepared[j][k] for j in regular]) for k in range(3))
        problem = _AFTProblem(y, event, x, W, dist)
        psi0 = np.stack([_start_values(prepared[j][0], prepared[j][2], np.ones(n), dist) for j, n in zip(regular, sizes)])
        psi, conv, iters = _newton(problem, psi0, np.ones(len(regular), dtype=bool))
        ll, _, hess = problem.evaluate(psi)
        for r, j in enumerate(regular):
            yj, ej, _ = prepared[j]
            g, a0, a1 = psi[r]
            sigma, a, beta = 1.0 / g, a0 / g, a1 / g
            fit = AFTFit(dist=dist, intercept=float(a), beta=float(beta), sigma=float(sigma),
                         lambda_aft=float(math.exp(beta)), beta_se=_model_beta_se(hess[r], g, a1),
                         loglik=float(ll[r] - yj[ej].sum()),  # Jacobian of T -> log T for the events
                         n_obs=float(len(yj)), n_events=float(ej.sum()), converged=bool(conv[r]), n_iter=int(iters[r]),
                         reason="" if conv[r] else "Newton did not converge")
            out[j] = (fit, hess[r])
    return out  # type: ignore[return-value]
