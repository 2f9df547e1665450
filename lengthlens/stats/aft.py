"""A paired accelerated-failure-time (AFT) model of completion length with right-censoring.

``log T = a + beta * relaxed + sigma * eps``, log-normal and Weibull, fitted by maximum likelihood
(vectorised Newton over many weight rows at once, so bootstrap refits cost one pass). It gives a
censoring-aware length ratio ``lambda_aft = exp(beta)`` — a sensitivity analysis beside plain λ.

What ``lambda_aft`` estimates. The AFT model is ``log T = a + beta * relaxed + sigma * eps``: the
relaxed arm's length distribution is the baseline's stretched by the *time ratio* ``exp(beta)``.
If the model holds (same shape ``sigma`` in both arms) the time ratio equals the ratio of medians,
of any quantile, of geometric means and of arithmetic means alike. When the arms' spreads differ
the quantities part: without censoring the log-normal ML estimate is exactly
``exp(mean(log L) - mean(log L*))``, a ratio of *geometric* means, whereas the ratio of arithmetic
means of log-normal lengths is ``exp(beta + (sigma_1**2 - sigma_0**2) / 2)``. Read ``lambda_aft`` as
"typical completion stretched by", not as a mean-token-cost ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

import numpy as np
from scipy import special

from lengthlens.results import ConfidenceInterval, frame, frame_html

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["AFTBootstrap", "AFTFit", "AFTSandwich", "DEFAULT_AFT_RESAMPLES", "DISTS", "aft_sandwich", "aft_scores", "fit_aft",
           "fit_aft_bootstrap", "fit_aft_many"]

Dist = Literal["lognormal", "weibull"]
#: The two laws every censoring analysis fits.
DISTS: tuple[Dist, ...] = ("lognormal", "weibull")
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

#: Default number of bootstrap resamples for the AFT fits. 1000 rows give percentile limits of a
#: 95 % interval whose Monte-Carlo error is small beside their sampling error, and vectorised
#: Newton keeps a cell well under a second per distribution (see benchmarks/bench_censoring.py).
DEFAULT_AFT_RESAMPLES = 1000


# ---------------------------------------------------------------------------------------------
# Accelerated failure time model
# ---------------------------------------------------------------------------------------------
#
# Parametrisation. With y = log T, z = (y - a - beta*x) / sigma, we optimise over
# psi = (gamma, alpha0, alpha1) = (1/sigma, a/sigma, beta/sigma), so that z = gamma*y - alpha0 -
# alpha1*x = v . psi with v = (y, -1, -x) is *linear* in psi. The log-likelihood is
#   sum_events [log f0(z) + log gamma] + sum_censored log S0(z)     (minus sum_events y, a constant)
# and log f0, log S0 are concave for the normal and the minimum-extreme-value laws, so the
# log-likelihood is globally concave in psi (Burridge 1981; Olsen 1978). Newton with step halving
# therefore converges from any start with gamma > 0, and each step costs a few passes over (B, N).

_PAIRS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))


def _sym(flat: np.ndarray) -> np.ndarray:
    """(B, 6) upper-triangle entries → (B, 3, 3) symmetric matrices."""
    out = np.empty(flat.shape[:-1] + (3, 3))
    for k, (i, j) in enumerate(_PAIRS):
        out[..., i, j] = flat[..., k]
        out[..., j, i] = flat[..., k]
    return out


def _collapse(y: np.ndarray, event: np.ndarray, x: np.ndarray, W: np.ndarray):
    """Merge runs with identical (log-length, event, arm) by adding their weights.

    The likelihood only sees weighted sums over runs, so this is exact. It pays off because every
    censored run of an arm sits at the same budget: with one budget per arm the censored part of
    the log-normal likelihood shrinks to two columns, whatever the number of items.
    """
    # Lexicographic sort by (y, event, x), stable: the groups and their order are np.unique(axis=0)'s.
    order = np.lexsort((x, event, y))
    ys, es, xs = y[order], event[order], x[order]
    new = np.r_[True, (np.diff(ys) != 0) | (np.diff(es.astype(np.int8)) != 0) | (np.diff(xs) != 0)]
    if new.all():
        return y, event, x, W
    starts = np.flatnonzero(new)
    Wg = np.add.reduceat(W[:, order], starts, axis=1)
    return ys[starts], es[starts], xs[starts], Wg


class _AFTProblem:
    """Data of one AFT fit prepared once, evaluated for many weight rows (bootstrap resamples)."""

    def __init__(self, y: np.ndarray, event: np.ndarray, x: np.ndarray, W: np.ndarray, dist: Dist):
        self.dist = dist
        y, event, x, W = _collapse(y, event, x, W)
        self.W = W
        V = np.stack([y, -np.ones_like(y), -x], axis=1)
        VV = np.stack([V[:, i] * V[:, j] for i, j in _PAIRS], axis=1)
        self.n_events = W @ event.astype(float)
        if dist == "lognormal":
            # Events enter through weighted second moments only: their z is Gaussian, so
            # sum w z^2 = psi' A psi and the gradient A psi need no per-observation work.
            We = W[:, event]
            self.A = _sym(We @ VV[event])
            C = ~event
            self.Wc = np.ascontiguousarray(W[:, C])
            self.Vc = V[C]
            self.VVc = VV[C]
        else:
            # Minimum extreme value: log f0(z) = z - e^z, log S0(z) = -e^z.
            self.s_e = W[:, event] @ V[event]
            self.V = V
            # One matmul gives sum w e^z * (v, v v'); the -1 column of V yields -sum w e^z.
            self.VVV = np.concatenate([V, VV], axis=1)

    def evaluate(self, psi: np.ndarray, rows: np.ndarray | slice = slice(None)):
        """Log-likelihood (without the constant Jacobian), gradient and Hessian at psi for rows."""
        gamma = psi[:, 0]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            log_gamma = np.where(gamma > 0, np.log(np.where(gamma > 0, gamma, 1.0)), -np.inf)
            ne = self.n_events[rows]
            if self.dist == "lognormal":
                A = self.A[rows]
                Apsi = np.einsum("bij,bj->bi", A, psi)
                ll = -0.5 * np.einsum("bi,bi->b", psi, Apsi) + ne * (log_gamma - _LOG_SQRT_2PI)
                grad = -Apsi
                hess = -A.copy()
                if self.Vc.shape[0]:
                    Wc = self.Wc[rows]
                    z = psi @ self.Vc.T
                    h = special.log_ndtr(-z)
                    mills = np.exp(-0.5 * z * z - _LOG_SQRT_2PI - h)
                    ll = ll + np.einsum("bn,bn->b", Wc, h)
                    grad = grad - (Wc * mills) @ self.Vc
                    hess = hess - _sym((Wc * (mills * (mills - z))) @ self.VVc)
            else:
                W = self.W[rows]
                wez = np.exp(psi @ self.V.T)
                wez *= W
                m = wez @ self.VVV
                ll = np.einsum("bi,bi->b", psi, self.s_e[rows]) + ne * log_gamma + m[:, 1]
                grad = self.s_e[rows] - m[:, :3]
                hess = -_sym(m[:, 3:])
            grad[:, 0] += ne / gamma
            hess[:, 0, 0] -= ne / gamma**2
            ll = np.where(np.isfinite(ll) & (gamma > 0), ll, -np.inf)
        return ll, grad, hess


def _newton(problem: _AFTProblem, psi0: np.ndarray, active: np.ndarray, max_iter: int = 100, tol: float = 1e-9):
    """Damped Newton ascent on every active row; returns psi, converged flags, iterations used."""
    psi = psi0.copy()
    B = psi.shape[0]
    done = ~active
    converged = np.zeros(B, dtype=bool)
    iters = np.zeros(B, dtype=int)
    idx = np.flatnonzero(~done)
    if len(idx) == 0:
        return psi, converged, iters
    ll, grad, hess = problem.evaluate(psi[idx], slice(None) if len(idx) == B else idx)
    full_ll = np.full(B, -np.inf)
    full_ll[idx] = ll
    G = np.zeros((B, 3))
    H = np.zeros((B, 3, 3))
    G[idx], H[idx] = grad, hess
    for it in range(max_iter):
        idx = np.flatnonzero(~done)
        if len(idx) == 0:
            break
        iters[idx] += 1
        # A slice instead of an index array when every row is active avoids copying W.
        every = len(idx) == B
        try:
            step = np.linalg.solve(-H[idx], G[idx][..., None])[..., 0]
        except np.linalg.LinAlgError:
            step = np.stack([_safe_solve(-H[i], G[i]) for i in idx])
        bad = ~np.all(np.isfinite(step), axis=1)
        step[bad] = G[idx][bad] * 1e-3  # singular Hessian: fall back to a small gradient step
        small = np.all(np.abs(step) <= tol * (1.0 + np.abs(psi[idx])), axis=1)
        t = np.ones(len(idx))
        pending = np.arange(len(idx))
        for _ in range(60):
            rows = idx[pending]
            cand = psi[rows] + t[pending, None] * step[pending]
            c_ll, c_g, c_h = problem.evaluate(cand, slice(None) if every and len(pending) == B else rows)
            ok = c_ll >= full_ll[rows] - 1e-10 * (1.0 + np.abs(full_ll[rows]))
            acc = rows[ok]
            psi[acc], full_ll[acc], G[acc], H[acc] = cand[ok], c_ll[ok], c_g[ok], c_h[ok]
            pending = pending[~ok]
            if len(pending) == 0:
                break
            t[pending] *= 0.5
        # No ascent even after 60 halvings: at the optimum to rounding if the Newton decrement
        # is negligible, else a genuine failure (reported, never silently accepted).
        stalled = idx[pending]
        decrement = np.einsum("bi,bi->b", G[stalled], step[pending])
        converged[idx[small]] = True
        converged[stalled] = np.abs(decrement) < 1e-6
        done[idx[small]] = True
        done[stalled] = True
        # A resample whose runs all share one length per arm has no spread: the likelihood grows
        # without bound as sigma -> 0 (gamma = 1/sigma -> inf). Stop it as not converged instead
        # of walking towards infinity for max_iter iterations.
        degenerate = idx[~(psi[idx, 0] < 1e8)]
        done[degenerate] = True
        converged[degenerate] = False
    return psi, converged, iters


def _safe_solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.solve(A, b)
    except np.linalg.LinAlgError:
        return np.full_like(b, np.nan)


def _start_values(y: np.ndarray, x: np.ndarray, w: np.ndarray, dist: Dist) -> np.ndarray:
    """Least-squares start (censored runs taken at face value) mapped to psi."""
    m1 = np.average(y[x == 1], weights=w[x == 1]) if w[x == 1].sum() > 0 else y.mean()
    m0 = np.average(y[x == 0], weights=w[x == 0]) if w[x == 0].sum() > 0 else y.mean()
    resid = y - np.where(x == 1, m1, m0)
    sigma = math.sqrt(np.average(resid**2, weights=w)) if w.sum() > 0 else 1.0
    sigma = sigma if sigma > 1e-6 else 1.0
    a = m0
    if dist == "weibull":
        # Minimum extreme value: mean -Euler gamma, sd pi/sqrt(6).
        sigma = sigma * math.sqrt(6.0) / math.pi
        a = m0 + 0.5772156649 * sigma
    return np.array([1.0 / sigma, a / sigma, (m1 - m0) / sigma])


def _prepare(lengths, censored, relaxed):
    """Validate and convert inputs; lengths must be positive (log T is modelled)."""
    L = np.asarray(lengths, dtype=float)
    cens = np.asarray(censored, dtype=bool)
    x = np.asarray(relaxed, dtype=float)
    if not (L.ndim == 1 and L.shape == cens.shape == x.shape):
        raise ValueError("lengths, censored and relaxed_indicator must be 1-D arrays of equal length")
    if not np.all(np.isin(x, (0.0, 1.0))):
        raise ValueError("relaxed_indicator must be 0/1")
    if np.any(~np.isfinite(L)) or np.any(L <= 0):
        raise ValueError("AFT needs positive finite lengths (log-length is modelled)")
    return np.log(L), ~cens, x


def _no_spread(W: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Rows in which both arms have at most one distinct length among their weighted runs."""
    out = np.ones(W.shape[0], dtype=bool)
    for arm in (0, 1):
        cols = np.flatnonzero(x == arm)
        if len(cols) == 0:
            continue
        drawn = W[:, cols] > 0
        lo = np.where(drawn, y[cols], np.inf).min(axis=1)
        hi = np.where(drawn, y[cols], -np.inf).max(axis=1)
        out &= ~(hi > lo)
    return out


def _separation(W: np.ndarray, event: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, str]:
    """Rows where the MLE does not exist because an arm has no (weighted) event.

    Returns beta's limit per row (+inf: every relaxed run censored, so the likelihood keeps rising
    with beta; -inf: every baseline run censored; nan: neither arm has events or an arm is empty)
    and NaN where the fit is regular.
    """
    e1 = W @ (event & (x == 1)).astype(float)
    e0 = W @ (event & (x == 0)).astype(float)
    n1 = W @ (x == 1).astype(float)
    n0 = W @ (x == 0).astype(float)
    lim = np.full(W.shape[0], np.nan)
    lim[(e1 == 0) & (e0 > 0)] = np.inf
    lim[(e0 == 0) & (e1 > 0)] = -np.inf
    irregular = (e1 == 0) | (e0 == 0) | (n1 == 0) | (n0 == 0)
    return lim, irregular


@dataclass(frozen=True)
class AFTFit:
    """ML fit of ``log T = a + beta * relaxed + sigma * eps`` with right-censoring.

    ``eps`` is standard normal (``dist="lognormal"``) or standard minimum-extreme-value
    (``"weibull"``: T is Weibull with shape ``1/sigma``). ``lambda_aft = exp(beta)`` is the time
    ratio relaxed/baseline. ``loglik`` is the log-likelihood of T (Jacobian included, comparable
    with lifelines). ``beta_se`` is the model-based (observed-information) SE treating runs as
    independent: it ignores the pairing and is reported for reference only; intervals come from
    the paired bootstrap. When an arm has no finished run the MLE does not exist: ``beta`` is
    +/-inf and ``reason`` says so.
    """

    dist: str
    intercept: float
    beta: float
    sigma: float
    lambda_aft: float
    beta_se: float
    loglik: float
    n_obs: float
    n_events: float
    converged: bool
    n_iter: int
    reason: str = ""

    def to_frame(self) -> pd.DataFrame:
        """One row with the estimates."""
        return frame([self.__dict__])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame(), f"AFT ({self.dist}) time ratio") + (f"<p><small>{self.reason}</small></p>"
                                                                              if self.reason else "")


def _as_weights(weights, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=float)
    if w.shape != (n,) or np.any(w < 0) or np.any(~np.isfinite(w)):
        raise ValueError("weights must be a non-negative vector, one per run")
    return w


def _no_mle(dist: Dist, beta: float, n_obs: float, n_ev: float) -> AFTFit:
    """The fit when the MLE does not exist (separation): beta at its bound, and why."""
    reason = (
        "MLE does not exist: every relaxed run is censored (time ratio only bounded below)"
        if beta == math.inf
        else "MLE does not exist: every baseline run is censored"
        if beta == -math.inf
        else "MLE does not exist: an arm has no runs or neither arm has a finished run"
    )
    return AFTFit(dist, math.nan, beta, math.nan, math.exp(beta) if not math.isnan(beta) else math.nan,
                  math.nan, math.nan, n_obs, n_ev, False, 0, reason)


def _model_beta_se(hess: np.ndarray, g: float, a1: float) -> float:
    """Model-based SE of beta = alpha1 / gamma: delta method on the inverse observed information in psi."""
    try:
        cov = np.linalg.inv(-hess)
    except np.linalg.LinAlgError:
        return math.nan
    jac = np.array([-a1 / g**2, 0.0, 1.0 / g])
    return float(math.sqrt(max(jac @ cov @ jac, 0.0)))


def fit_aft(
    lengths: np.ndarray,
    censored: np.ndarray,
    relaxed_indicator: np.ndarray,
    weights: np.ndarray | None = None,
    dist: Dist = "lognormal",
) -> AFTFit:
    """Fit the two-arm AFT model by maximum likelihood with right-censoring (Newton, exact derivatives).

    Model choice: **no item effects in the likelihood; the pairing enters through the item-level
    bootstrap.** With ~12 items and one run per item per arm, item fixed effects are incidental
    parameters (Neyman–Scott: sigma is then inconsistent, and with censoring beta too). A random
    item intercept u_i would need numerical integration per fit and a distributional assumption,
    and buys nothing for the estimand: in an AFT model ``log T = a + beta*x + u_i + sigma*eps``
    marginalises to ``log T = a + beta*x + e`` with the *same* beta (a location shift survives
    integrating over u_i, and a fixed budget is non-informative censoring), exactly log-normal
    again in the log-normal case (var sigma^2 + tau^2). So the pooled log-normal fit targets the
    same time ratio, and resampling items (both arms together) gives intervals that respect the
    within-item correlation. The price is efficiency, not validity. Caveat for Weibull: a normal
    item effect plus an extreme-value error is no longer extreme-value, so under censoring the
    pooled Weibull fit is misspecified and its time ratio shifts (simulated: log-ratio -0.03 to
    -0.06 at 40 % censoring, item SD 0.5) although it is unbiased without item heterogeneity.
    The two laws disagree when the data cannot tell them apart; that is the point of showing both.

    ``lengths`` are completion lengths (> 0; their log is modelled), ``censored`` marks runs that
    hit the budget, ``relaxed_indicator`` is 1 for the relaxed arm and 0 for the baseline.
    Integer ``weights`` act exactly like repeating runs (a bootstrap resample is
    ``weights = counts[b, item_of_run]``).

    Parameters
    ----------
    lengths : completion lengths in tokens, one per run (> 0).
    censored : True where the run hit its budget (its true length is longer).
    relaxed_indicator : 1 for a relaxed-arm run, 0 for a baseline run.
    weights : non-negative frequency weights, one per run; None weighs every run 1.
    dist : ``"lognormal"`` or ``"weibull"``, the law of ``eps``.

    Returns
    -------
    AFTFit
        The estimates; ``lambda_aft`` the time ratio relaxed/baseline. Without an MLE (an arm with
        every run censored) ``beta`` is ±inf, ``converged`` False and ``reason`` says why.

    Examples
    --------
    >>> import numpy as np
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored, relaxed = L >= 512, np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    >>> fit = fit_aft(L, censored, relaxed)
    >>> round(fit.lambda_aft, 4), round(fit.sigma, 4), fit.n_events, fit.converged
    (1.3558, 0.6553, 8.0, True)
    >>> round(fit_aft(L, censored, relaxed, dist="weibull").lambda_aft, 4)
    1.1837
    >>> fit_aft(L, L > 0, relaxed).reason
    'MLE does not exist: an arm has no runs or neither arm has a finished run'
    """
    if dist not in DISTS:
        raise ValueError(f"dist must be one of {DISTS}")
    y, event, x = _prepare(lengths, censored, relaxed_indicator)
    w = _as_weights(weights, len(y))
    W = w[None, :]
    lim, irregular = _separation(W, event, x)
    n_obs, n_ev = float(w.sum()), float(w @ event)
    if irregular[0]:
        return _no_mle(dist, float(lim[0]), n_obs, n_ev)
    problem = _AFTProblem(y, event, x, W, dist)
    psi0 = _start_values(y, x, w, dist)[None, :]
    psi, conv, iters = _newton(problem, psi0, np.ones(1, dtype=bool))
    ll, _, hess = problem.evaluate(psi)
    g, a0, a1 = psi[0]
    sigma, a, beta = 1.0 / g, a0 / g, a1 / g
    beta_se = _model_beta_se(hess[0], g, a1)
    loglik = float(ll[0] - w[event] @ y[event])  # Jacobian of T -> log T for the events
    return AFTFit(
        dist=dist,
        intercept=float(a),
        beta=float(beta),
        sigma=float(sigma),
        lambda_aft=float(math.exp(beta)),
        beta_se=beta_se,
        loglik=loglik,
        n_obs=n_obs,
        n_events=n_ev,
        converged=bool(conv[0]),
        n_iter=int(iters[0]),
        reason="" if conv[0] else "Newton did not converge",
    )


# ---------------------------------------------------------------------------------------------
# Several data sets at once
# ---------------------------------------------------------------------------------------------


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

    Parameters
    ----------
    data : one (lengths, censored, relaxed_indicator) triple per data set, as :func:`fit_aft` takes them.
    dist : ``"lognormal"`` or ``"weibull"``.
    with_hessians : also return each fit's (3, 3) Hessian in psi = (1/sigma, a/sigma, beta/sigma).

    Returns
    -------
    list
        One :class:`AFTFit` per data set, in order; with ``with_hessians``, (AFTFit, ndarray or None) pairs.

    Examples
    --------
    >>> import numpy as np
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored, relaxed = L >= 512, np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    >>> fits = fit_aft_many([(L, censored, relaxed), (L[:8], censored[:8], relaxed[:8])])
    >>> [round(f.lambda_aft, 4) for f in fits], round(fit_aft(L, censored, relaxed).lambda_aft, 4)
    ([1.3558, 0.9158], 1.3558)
    >>> fit, hessian = fit_aft_many([(L, censored, relaxed)], with_hessians=True)[0]
    >>> hessian.shape
    (3, 3)
    """
    fits = _fit_many(data, dist)
    return fits if with_hessians else [fit for fit, _ in fits]


def _fit_many(data: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], dist: Dist
              ) -> list[tuple[AFTFit, np.ndarray | None]]:
    """:func:`fit_aft_many`'s fits, each with the Hessian of its log-likelihood in psi at the fit (None without an MLE)."""
    if dist not in DISTS:
        raise ValueError(f"dist must be one of {DISTS}")
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


# ---------------------------------------------------------------------------------------------
# Cluster-robust (sandwich) interval
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AFTSandwich:
    """Cluster-robust SE of beta = log(lambda_aft) and the t(G-1) interval for lambda_aft."""

    dist: str
    beta_se: float
    n_clusters: int
    ci: ConfidenceInterval
    reason: str = ""


def _psi(fit: AFTFit) -> np.ndarray:
    return np.array([1.0 / fit.sigma, fit.intercept / fit.sigma, fit.beta / fit.sigma])


def aft_scores(fit: AFTFit, lengths: np.ndarray, censored: np.ndarray, relaxed_indicator: np.ndarray) -> np.ndarray:
    """Per-run scores d loglik / d psi at the fit, psi = (1/sigma, a/sigma, beta/sigma): the sandwich's meat.

    Parameters
    ----------
    fit : a converged :class:`AFTFit` of these runs.
    lengths, censored, relaxed_indicator : the runs, as :func:`fit_aft` took them.

    Returns
    -------
    ndarray
        (n_runs, 3), one row per run; at the MLE the columns sum to zero.

    Examples
    --------
    >>> import numpy as np
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored, relaxed = L >= 512, np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    >>> scores = aft_scores(fit_aft(L, censored, relaxed), L, censored, relaxed)
    >>> scores.shape, bool(np.allclose(scores.sum(axis=0), 0.0, atol=1e-8))
    ((10, 3), True)
    """
    y, event, x = _prepare(lengths, censored, relaxed_indicator)
    psi = _psi(fit)
    V = np.stack([y, -np.ones_like(y), -x], axis=1)
    z = V @ psi
    if fit.dist == "lognormal":
        mills = np.exp(-0.5 * z * z - _LOG_SQRT_2PI - special.log_ndtr(-z))
        coef = np.where(event, -z, -mills)
    else:  # minimum extreme value: events z - e^z, censored -e^z
        coef = np.where(event, 1.0 - np.exp(z), -np.exp(z))
    scores = coef[:, None] * V
    scores[:, 0] += event / psi[0]
    return scores


def aft_sandwich(fit: AFTFit, lengths: np.ndarray, censored: np.ndarray, relaxed_indicator: np.ndarray,
                 clusters: np.ndarray, confidence_level: float = 0.95, hessian: np.ndarray | None = None) -> AFTSandwich:
    """Cluster-robust sandwich SE of beta and the t(G-1) Wald interval of lambda_aft (clusters = items).

    ``hessian``: the log-likelihood's (3, 3) Hessian in psi at the fit when the caller has it
    (:func:`fit_aft_many` computes it at its last step); otherwise it is evaluated here. The score sums
    per cluster make it robust to the correlation of one item's runs; the factor G/(G-1) and the t
    quantile with G-1 degrees of freedom are the small-sample corrections for G items.

    Parameters
    ----------
    fit : the :class:`AFTFit` of these runs.
    lengths, censored, relaxed_indicator : the runs, as :func:`fit_aft` took them.
    clusters : each run's cluster (its item), any hashable labels.
    confidence_level : two-sided level of the interval.
    hessian : the Hessian in psi at the fit, if already known.

    Returns
    -------
    AFTSandwich
        The SE of beta, the number of clusters and the interval of ``lambda_aft``; NaN with ``reason``
        when the fit has no finite MLE, there is one cluster or the information is singular.

    Examples
    --------
    >>> import numpy as np
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored, relaxed = L >= 512, np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    >>> item = np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    >>> s = aft_sandwich(fit_aft(L, censored, relaxed), L, censored, relaxed, item)
    >>> s.n_clusters, round(s.beta_se, 4), round(s.ci.low, 4), round(s.ci.high, 4)
    (5, 0.3432, 0.5229, 3.5156)
    """
    clusters = np.asarray(clusters)
    G = int(np.unique(clusters).size)
    nan = ConfidenceInterval(math.nan, math.nan)
    if not fit.converged or not math.isfinite(fit.beta):
        return AFTSandwich(fit.dist, math.nan, G, nan, fit.reason or "no finite ML fit")
    if G < 2:
        return AFTSandwich(fit.dist, math.nan, G, nan, "one item: no cluster-robust variance")
    if hessian is None:
        y, event, x = _prepare(lengths, censored, relaxed_indicator)
        hessian = _AFTProblem(y, event, x, np.ones((1, len(y))), fit.dist).evaluate(_psi(fit)[None, :])[2][0]
    _, inverse = np.unique(clusters, return_inverse=True)
    U = np.zeros((G, 3))
    np.add.at(U, inverse.ravel(), aft_scores(fit, lengths, censored, relaxed_indicator))
    try:
        bread = np.linalg.inv(-hessian)
    except np.linalg.LinAlgError:
        return AFTSandwich(fit.dist, math.nan, G, nan, "singular information matrix")
    cov = bread @ (U.T @ U) @ bread * (G / (G - 1))
    g, _, a1 = _psi(fit)
    jac = np.array([-a1 / g**2, 0.0, 1.0 / g])  # beta = alpha1 / gamma
    se = float(math.sqrt(max(jac @ cov @ jac, 0.0)))
    t = float(special.stdtrit(G - 1, 1 - (1 - confidence_level) / 2))
    return AFTSandwich(fit.dist, se, G, ConfidenceInterval(math.exp(fit.beta - t * se), math.exp(fit.beta + t * se)))


# ---------------------------------------------------------------------------------------------
# Bootstrap refits
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # holds arrays: compare fields, not objects
class AFTBootstrap:
    """Bootstrap replicates of beta for one AFT distribution (one per weight row).

    ``beta`` holds +/-inf for resamples where an arm has no finished run (the MLE runs off to
    infinity; these count as extreme values in the percentile interval) and NaN for resamples that
    failed to converge or are undefined, which are dropped and counted in ``n_failed``.
    """

    dist: str
    beta: np.ndarray
    converged: np.ndarray
    n_infinite: int
    n_failed: int

    def to_frame(self) -> pd.DataFrame:
        """The replicates, one row per resample."""
        return frame({"beta": self.beta, "lambda_aft": np.exp(self.beta), "converged": self.converged})

    def _repr_html_(self) -> str:
        summary = frame([{"dist": self.dist, "n": len(self.beta), "n_infinite": self.n_infinite,
                                 "n_failed": self.n_failed}])
        return frame_html(summary, "AFT bootstrap replicates")


def fit_aft_bootstrap(
    lengths: np.ndarray,
    censored: np.ndarray,
    relaxed_indicator: np.ndarray,
    weight_rows: np.ndarray,
    dist: Dist = "lognormal",
    start: AFTFit | None = None,
) -> AFTBootstrap:
    """Refit the AFT model for every row of ``weight_rows`` (B, n_runs), vectorised across rows.

    All rows are solved together by damped Newton from the point fit ``start`` (a warm start:
    resamples sit near it, so 3–6 iterations usually suffice).

    Parameters
    ----------
    lengths, censored, relaxed_indicator : the runs, as :func:`fit_aft` takes them.
    weight_rows : (B, n_runs) non-negative weights, one row per resample (a run's item's draw count).
    dist : ``"lognormal"`` or ``"weibull"``.
    start : the point fit to start from; fitted here when None or not converged.

    Returns
    -------
    AFTBootstrap
        beta in every resample: ±inf where an arm has no finished run, NaN where the fit failed or
        beta is not identified (counted in ``n_failed``).

    Examples
    --------
    >>> import numpy as np
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored, relaxed = L >= 512, np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    >>> W = np.array([[1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [2, 0, 1, 1, 1, 2, 0, 1, 1, 1], [0, 1, 2, 1, 1, 0, 1, 2, 1, 1]])
    >>> boot = fit_aft_bootstrap(L, censored, relaxed, W)
    >>> np.round(np.exp(boot.beta), 4).tolist(), boot.n_failed
    ([1.3558, 1.3421, 1.4], 0)
    """
    y, event, x = _prepare(lengths, censored, relaxed_indicator)
    W = np.asarray(weight_rows, dtype=float)
    if W.ndim != 2 or W.shape[1] != len(y):
        raise ValueError("weight_rows must have shape (B, n_runs)")
    if start is None or not start.converged:
        start = fit_aft(np.exp(y), ~event, x, None, dist)
    B = W.shape[0]
    beta = np.full(B, np.nan)
    lim, irregular = _separation(W, event, x)
    beta[irregular] = lim[irregular]
    # Resamples where each arm shows a single length (e.g. one item drawn every time in a small
    # cell) have no spread: sigma's MLE is 0 and beta is not identified. They stay NaN (failed).
    irregular = irregular | _no_spread(W, y, x)
    converged = np.zeros(B, dtype=bool)
    if start.converged and np.any(~irregular):
        psi0 = np.tile([1.0 / start.sigma, start.intercept / start.sigma, start.beta / start.sigma], (B, 1))
        problem = _AFTProblem(y, event, x, W, dist)
        psi, conv, _ = _newton(problem, psi0, ~irregular)
        ok = conv & ~irregular
        beta[ok] = psi[ok, 2] / psi[ok, 0]
        converged = ok
    n_inf = int(np.sum(np.isinf(beta)))
    return AFTBootstrap(dist=dist, beta=beta, converged=converged, n_infinite=n_inf,
                        n_failed=int(np.sum(np.isnan(beta))))
