"""Censoring-aware completion lengths: Kaplan–Meier, a paired AFT time ratio, and one row per cell.

A run that stops at its token budget (finish_reason ``length``) is right-censored: its true length
is at least the budget. Relaxed verification rules hit the budget more often than the lossless
baseline, so the plain ratio ``lambda = mean(L) / mean(L*)`` (censored runs counted at the budget)
*understates* length inflation. This module gives, per cell (a relaxed arm paired with its
baseline on the same items):

* the censored fraction of both sides;
* Kaplan–Meier (KM) survival of completion length with median and quartiles and their
  Brookmeyer–Crowley intervals (log-log transform, as statsmodels' ``SurvfuncRight.quantile_ci``),
  or ``None`` with the reason when too much is censored to identify them;
* the restricted mean length up to a common horizon ``tau``. **Honest caveat:** with one budget per
  arm, KM below the budget *is* the empirical distribution and the restricted mean up to the
  budget *is* ``mean(min(L, budget))`` — i.e. exactly what the plain mean already is. KM and the
  restricted mean add information only when budgets differ between runs or arms;
* a censoring-aware length ratio ``lambda_aft = exp(beta)`` from a paired accelerated-failure-time
  (AFT) model, log-normal and Weibull, fitted by maximum likelihood with right-censoring, with a
  paired item-level bootstrap interval that reuses the lead's ``counts`` matrix. It is a
  *sensitivity analysis* shown beside plain lambda, together with plain lambda on the pairs where
  neither side is censored.

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
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import special, stats

__all__ = [
    "AFTFit",
    "AFTBootstrap",
    "CensoringCell",
    "KaplanMeier",
    "QuantileEstimate",
    "censoring_cell",
    "fit_aft",
    "fit_aft_bootstrap",
    "kaplan_meier",
]

Dist = Literal["lognormal", "weibull"]
_DISTS: tuple[Dist, ...] = ("lognormal", "weibull")
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

#: Default number of bootstrap resamples for the AFT fits. 1000 rows give percentile limits of a
#: 95 % interval whose Monte-Carlo error is small beside their sampling error, and vectorised
#: Newton keeps a cell well under a second per distribution (see benchmarks/bench_censoring.py).
DEFAULT_AFT_RESAMPLES = 1000


def _html(title: str, frame: pd.DataFrame, note: str = "") -> str:
    """Notebook rendering shared by the result dataclasses: a caption, a table and a footnote."""
    foot = f"<p><small>{note}</small></p>" if note else ""
    return f"<h4>{title}</h4>{frame.to_html(index=False, na_rep='—')}{foot}"


# ---------------------------------------------------------------------------------------------
# Kaplan–Meier
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuantileEstimate:
    """A KM quantile of completion length with its interval; ``None`` parts are not identified.

    ``p`` is the probability (0.25 for the first quartile, 0.5 for the median); ``reason`` says why
    the value or a limit is missing and is empty when everything is identified.
    """

    p: float
    value: float | None
    ci_low: float | None
    ci_high: float | None
    reason: str = ""


@dataclass(frozen=True, eq=False)  # holds arrays: compare fields, not objects
class KaplanMeier:
    """Kaplan–Meier survival S(t) = P(L > t) of completion length, evaluated at the event times.

    Arrays are indexed by the distinct lengths at which at least one run finished (an event);
    ``survival_se`` is Greenwood's, ``ci_low``/``ci_high`` the pointwise log-log interval.
    Quantiles follow statsmodels: the p-quantile is the first event time with ``S(t) < 1 - p``,
    except where S equals 1 - p exactly on a step, where it is the midpoint of that step (as R's
    ``survival`` and SAS do; statsmodels' log-sum rounding picks either end there). Without
    censoring the KM median is therefore ``np.median(lengths)``. Intervals are statsmodels'
    ``quantile_ci`` (Brookmeyer–Crowley, log-log): always event times, the upper limit missing when
    it lies beyond the last event time.
    """

    times: np.ndarray
    survival: np.ndarray
    survival_se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n_at_risk: np.ndarray
    n_events: np.ndarray
    n_obs: float
    n_censored: float
    #: Largest observed length (event or censoring time).
    max_time: float
    #: Lengths up to which S is identified: ``inf`` if the largest observation is an event (S
    #: drops to 0), else the largest censoring time.
    horizon: float
    median: QuantileEstimate
    q25: QuantileEstimate
    q75: QuantileEstimate
    confidence_level: float

    def survival_at(self, t: float | np.ndarray) -> np.ndarray:
        """S(t) as the right-continuous step function; NaN beyond the identified horizon."""
        t = np.asarray(t, dtype=float)
        k = np.searchsorted(self.times, t, side="right")
        s = np.concatenate(([1.0], self.survival))[k]
        return np.where(t > self.horizon, np.nan, s)

    def restricted_mean(self, tau: float) -> float:
        """Restricted mean length ``integral_0^tau S(t) dt`` = E[min(L, tau)].

        With one budget ``tau`` for every run this is exactly ``mean(min(L, tau))``. Raises
        ``ValueError`` when ``tau`` lies beyond the identified horizon (S unknown there).
        """
        if tau > self.horizon:
            raise ValueError(f"restricted mean not identified: tau={tau} beyond the last censoring time {self.horizon}")
        if tau <= 0:
            return 0.0
        t = self.times[self.times < tau]
        edges = np.concatenate(([0.0], t, [tau]))
        s = np.concatenate(([1.0], self.survival[: len(t)]))
        return float(np.sum(s * np.diff(edges)))

    @property
    def quantiles(self) -> tuple[QuantileEstimate, QuantileEstimate, QuantileEstimate]:
        """First quartile, median and third quartile."""
        return (self.q25, self.median, self.q75)

    def to_frame(self) -> pd.DataFrame:
        """The survival table, one row per event time."""
        return pd.DataFrame(
            {
                "length": self.times,
                "n_at_risk": self.n_at_risk,
                "n_events": self.n_events,
                "survival": self.survival,
                "survival_se": self.survival_se,
                "ci_low": self.ci_low,
                "ci_high": self.ci_high,
            }
        )

    def quantile_frame(self) -> pd.DataFrame:
        """Quartiles and median with their intervals and, where missing, the reason."""
        return pd.DataFrame([q.__dict__ for q in self.quantiles])

    def _repr_html_(self) -> str:
        note = (
            f"n={self.n_obs:g}, censored={self.n_censored:g}; "
            f"{self.confidence_level:.0%} Brookmeyer–Crowley (log-log) intervals."
        )
        return _html("Kaplan–Meier quantiles of completion length", self.quantile_frame(), note)


def _km_table(time: np.ndarray, event: np.ndarray, weights: np.ndarray | None):
    """Risk sets and events at the distinct event times (frequency weights act as repetition)."""
    utime, rank = np.unique(time, return_inverse=True)
    w = np.ones_like(time, dtype=float) if weights is None else np.asarray(weights, dtype=float)
    d = np.bincount(rank, weights=w * event, minlength=len(utime))
    n = np.cumsum(np.bincount(rank, weights=w, minlength=len(utime))[::-1])[::-1]
    keep = d > 0
    return utime[keep], n[keep], d[keep]


def _km_quantile(
    p: float, times: np.ndarray, surv: np.ndarray, se: np.ndarray, z: float
) -> QuantileEstimate:
    """Quantile and Brookmeyer–Crowley interval by inverting log-log z-tests (statsmodels' rule)."""
    target = 1.0 - p
    # A small tolerance makes "S(t) < 1-p" exact for S computed as a product of ratios.
    below = np.flatnonzero(surv < target - 1e-12)
    at = np.flatnonzero(np.abs(surv - target) <= 1e-12)
    reasons = []
    if len(at):
        # S sits exactly at 1-p on [t_k, t_k+1): take the midpoint (R's survival, SAS), so that
        # without censoring the KM median is the ordinary sample median.
        k = at[0]
        value = float((times[k] + times[k + 1]) / 2) if k + 1 < len(times) else float(times[k])
    elif len(below) == 0:
        value = None
        reasons.append(
            f"not identified: S(t) stays above {target:g} up to the last event time "
            f"(too many runs censored before the {p:g}-quantile)"
        )
    else:
        value = float(times[below[0]])
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.log(-np.log(surv))
        gprime = -1.0 / (surv * np.log(surv))
        r = (g - math.log(-math.log(target))) / (gprime * se)
    inside = np.flatnonzero(np.abs(r) <= z)
    if len(inside) == 0:
        lo = hi = None
        reasons.append("interval not identified: no event time is compatible with the quantile")
    else:
        lo = float(times[inside[0]])
        if inside[-1] == len(times) - 1:
            hi = None
            reasons.append("upper confidence limit not identified: it lies beyond the last event time")
        else:
            hi = float(times[inside[-1] + 1])
    return QuantileEstimate(p=p, value=value, ci_low=lo, ci_high=hi, reason="; ".join(reasons))


def kaplan_meier(
    lengths: np.ndarray,
    censored: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    confidence_level: float = 0.95,
) -> KaplanMeier:
    """Kaplan–Meier estimate of completion-length survival with Greenwood SEs and quartiles.

    ``censored[i]`` is True when run i hit its budget (true length > ``lengths[i]``). Integer
    ``weights`` are frequency weights and act exactly like repeating runs (Greenwood's formula is
    applied to the weighted counts; statsmodels switches to Tsiatis' variance with weights).
    """
    time = np.asarray(lengths, dtype=float)
    cens = np.asarray(censored, dtype=bool)
    if time.shape != cens.shape or time.ndim != 1:
        raise ValueError("lengths and censored must be 1-D arrays of the same length")
    if len(time) == 0:
        raise ValueError("no runs")
    event = (~cens).astype(float)
    w = None if weights is None else np.asarray(weights, dtype=float)
    times, n, d = _km_table(time, event, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        surv = np.cumprod(1.0 - d / n)
        terms = d / np.clip(n * (n - d), 1e-12, None)
        terms[n == d] = np.nan  # S hits 0: Greenwood undefined (as statsmodels)
        se = surv * np.sqrt(np.cumsum(terms))
        z = stats.norm.ppf(0.5 + confidence_level / 2)
        # Pointwise log-log interval: S^(exp(±z * se / (S log S))).
        half = z * se / (surv * np.abs(np.log(surv)))
        ci_low = surv ** np.exp(half)
        ci_high = surv ** np.exp(-half)
    n_obs = float(len(time) if w is None else w.sum())
    n_cens = float(cens.sum() if w is None else w[cens].sum())
    obs = time if w is None else time[w > 0]
    obs_cens = cens if w is None else cens[w > 0]
    max_time = float(obs.max())
    last_is_event = bool(np.any(~obs_cens[obs == max_time]))
    horizon = math.inf if last_is_event else max_time
    return KaplanMeier(
        times=times,
        survival=surv,
        survival_se=se,
        ci_low=ci_low,
        ci_high=ci_high,
        n_at_risk=n,
        n_events=d,
        n_obs=n_obs,
        n_censored=n_cens,
        max_time=max_time,
        horizon=horizon,
        median=_km_quantile(0.5, times, surv, se, z),
        q25=_km_quantile(0.25, times, surv, se, z),
        q75=_km_quantile(0.75, times, surv, se, z),
        confidence_level=confidence_level,
    )


def _restricted_means_many(time: np.ndarray, event: np.ndarray, W: np.ndarray, tau: float) -> np.ndarray:
    """Weighted-KM restricted means up to ``tau`` for every row of the weight matrix ``W`` (B, N).

    A resample whose last drawn run is censored before ``tau`` has S carried flat from there (the
    usual convention; ``tau`` is identified on the full data, so this affects only such rows).
    """
    order = np.argsort(time, kind="stable")
    ts = time[order]
    starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])
    utime = ts[starts]
    B = W.shape[0]
    # Per distinct time: weighted events and weighted counts, then reverse cumulative risk sets.
    Ws = W[:, order]
    d = np.add.reduceat(Ws * event[order], starts, axis=1)
    n = np.cumsum(np.add.reduceat(Ws, starts, axis=1)[:, ::-1], axis=1)[:, ::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(n > 0, 1.0 - d / n, 1.0)
    surv = np.cumprod(factor, axis=1)
    t = utime[utime < tau]
    edges = np.diff(np.concatenate(([0.0], t, [tau])))
    s = np.concatenate((np.ones((B, 1)), surv[:, : len(t)]), axis=1)
    return s @ edges


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
        return pd.DataFrame([self.__dict__])

    def _repr_html_(self) -> str:
        return _html(f"AFT ({self.dist}) time ratio", self.to_frame(), self.reason)


def _as_weights(weights, n: int) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=float)
    if w.shape != (n,) or np.any(w < 0) or np.any(~np.isfinite(w)):
        raise ValueError("weights must be a non-negative vector, one per run")
    return w


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
    """
    if dist not in _DISTS:
        raise ValueError(f"dist must be one of {_DISTS}")
    y, event, x = _prepare(lengths, censored, relaxed_indicator)
    w = _as_weights(weights, len(y))
    W = w[None, :]
    lim, irregular = _separation(W, event, x)
    n_obs, n_ev = float(w.sum()), float(w @ event)
    if irregular[0]:
        beta = float(lim[0])
        reason = (
            "MLE does not exist: every relaxed run is censored (time ratio only bounded below)"
            if beta == math.inf
            else "MLE does not exist: every baseline run is censored"
            if beta == -math.inf
            else "MLE does not exist: an arm has no runs or neither arm has a finished run"
        )
        return AFTFit(dist, math.nan, beta, math.nan, math.exp(beta) if not math.isnan(beta) else math.nan,
                      math.nan, math.nan, n_obs, n_ev, False, 0, reason)
    problem = _AFTProblem(y, event, x, W, dist)
    psi0 = _start_values(y, x, w, dist)[None, :]
    psi, conv, iters = _newton(problem, psi0, np.ones(1, dtype=bool))
    ll, _, hess = problem.evaluate(psi)
    g, a0, a1 = psi[0]
    sigma, a, beta = 1.0 / g, a0 / g, a1 / g
    # Delta method for beta = alpha1 / gamma from the inverse observed information in psi.
    try:
        cov = np.linalg.inv(-hess[0])
        jac = np.array([-a1 / g**2, 0.0, 1.0 / g])
        beta_se = float(math.sqrt(max(jac @ cov @ jac, 0.0)))
    except np.linalg.LinAlgError:
        beta_se = math.nan
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
        return pd.DataFrame({"beta": self.beta, "lambda_aft": np.exp(self.beta), "converged": self.converged})

    def _repr_html_(self) -> str:
        summary = pd.DataFrame([{"dist": self.dist, "n": len(self.beta), "n_infinite": self.n_infinite,
                                 "n_failed": self.n_failed}])
        return _html("AFT bootstrap replicates", summary)


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


def _percentile(values: np.ndarray, q: float) -> float:
    """Linear-interpolation percentile (numpy's default) that tolerates +/-inf; NaNs are dropped.

    Interpolating towards an infinite replicate gives that infinity (the limit is unbounded).
    """
    v = np.sort(values[~np.isnan(values)])
    if len(v) == 0:
        return math.nan
    h = (len(v) - 1) * q
    lo, hi = int(math.floor(h)), int(math.ceil(h))
    a, b = float(v[lo]), float(v[hi])
    if lo == hi or a == b:
        return a
    if math.isinf(a) or math.isinf(b):
        return a if math.isinf(a) else b
    return a + (h - lo) * (b - a)


# ---------------------------------------------------------------------------------------------
# One cell
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # holds arrays: compare fields, not objects
class CensoringCell:
    """Censoring diagnostics and censoring-aware length ratios of one relaxed arm vs its baseline.

    Ratios are relaxed / baseline. ``lambda_plain`` counts censored runs at their budget (a lower
    bound on the truth); ``lambda_uncensored_pairs`` keeps only pairs where neither side is
    censored (biased too — it drops the longest relaxed completions — shown for contrast);
    ``rmst_ratio`` compares restricted means up to ``rmst_tau`` (equal to plain lambda when both
    arms share one budget); ``lambda_aft[dist]`` is the AFT time ratio (see the module docstring
    for what it estimates). Intervals: paired percentile bootstrap over items from the lead's
    ``counts`` (all rows for the cheap ratios, the first ``n_resamples_aft`` rows for AFT).
    """

    n_items: int
    n_runs: int
    n_runs_star: int
    budget: float | None
    budget_star: float | None
    #: True when runs had different budgets (within or across arms): only then do KM and the
    #: restricted mean say more than the plain means.
    budgets_differ: bool | None
    censored_frac: float
    censored_frac_star: float
    km: KaplanMeier
    km_star: KaplanMeier
    rmst_tau: float
    rmst: float
    rmst_star: float
    rmst_ratio: float
    rmst_ratio_ci: tuple[float, float]
    lambda_plain: float
    lambda_plain_ci: tuple[float, float]
    lambda_uncensored_pairs: float
    lambda_uncensored_pairs_ci: tuple[float, float]
    n_uncensored_pairs: int
    aft: dict[str, AFTFit]
    aft_ci: dict[str, tuple[float, float]]
    aft_boot: dict[str, AFTBootstrap] = field(repr=False)
    n_resamples: int
    n_resamples_aft: int
    confidence_level: float

    def to_row(self) -> dict[str, Any]:
        """Flat columns for OUT/censoring.csv (None/NaN where not identified)."""
        row: dict[str, Any] = {
            "n_items": self.n_items,
            "n_runs": self.n_runs,
            "n_runs_star": self.n_runs_star,
            "budget": self.budget,
            "budget_star": self.budget_star,
            "budgets_differ": self.budgets_differ,
            "censored_frac": self.censored_frac,
            "censored_frac_star": self.censored_frac_star,
        }
        for side, km in (("", self.km), ("_star", self.km_star)):
            for name, q in (("q25", km.q25), ("median", km.median), ("q75", km.q75)):
                row[f"km_{name}{side}"] = q.value
                row[f"km_{name}{side}_lo"] = q.ci_low
                row[f"km_{name}{side}_hi"] = q.ci_high
                row[f"km_{name}{side}_reason"] = q.reason
        row.update(
            rmst_tau=self.rmst_tau,
            rmst=self.rmst,
            rmst_star=self.rmst_star,
            rmst_ratio=self.rmst_ratio,
            rmst_ratio_lo=self.rmst_ratio_ci[0],
            rmst_ratio_hi=self.rmst_ratio_ci[1],
            lambda_plain=self.lambda_plain,
            lambda_plain_lo=self.lambda_plain_ci[0],
            lambda_plain_hi=self.lambda_plain_ci[1],
            lambda_uncensored_pairs=self.lambda_uncensored_pairs,
            lambda_uncensored_pairs_lo=self.lambda_uncensored_pairs_ci[0],
            lambda_uncensored_pairs_hi=self.lambda_uncensored_pairs_ci[1],
            n_uncensored_pairs=self.n_uncensored_pairs,
        )
        for dist in _DISTS:
            fit, ci, boot = self.aft[dist], self.aft_ci[dist], self.aft_boot[dist]
            p = f"lambda_aft_{dist}"
            row[p] = fit.lambda_aft
            row[f"{p}_lo"], row[f"{p}_hi"] = ci
            row[f"{p}_sigma"] = fit.sigma
            row[f"{p}_converged"] = fit.converged
            row[f"{p}_boot_infinite"] = boot.n_infinite
            row[f"{p}_boot_failed"] = boot.n_failed
            row[f"{p}_reason"] = fit.reason
        row["n_resamples"] = self.n_resamples
        row["n_resamples_aft"] = self.n_resamples_aft
        row["confidence_level"] = self.confidence_level
        return row

    def to_frame(self) -> pd.DataFrame:
        """The ratios side by side: plain, uncensored pairs, restricted mean, AFT log-normal and Weibull."""
        rows = [
            ("plain (censored at budget)", self.lambda_plain, *self.lambda_plain_ci),
            (f"uncensored pairs (n={self.n_uncensored_pairs})", self.lambda_uncensored_pairs,
             *self.lambda_uncensored_pairs_ci),
            (f"restricted mean ratio (tau={self.rmst_tau:g})", self.rmst_ratio, *self.rmst_ratio_ci),
        ]
        rows += [(f"AFT {d} time ratio", self.aft[d].lambda_aft, *self.aft_ci[d]) for d in _DISTS]
        return pd.DataFrame(rows, columns=["estimate", "lambda", "lo", "hi"])

    def _repr_html_(self) -> str:
        note = (
            f"{self.n_items} items; censored {self.censored_frac:.0%} (relaxed) vs "
            f"{self.censored_frac_star:.0%} (baseline); {self.confidence_level:.0%} paired percentile "
            f"bootstrap ({self.n_resamples} resamples, {self.n_resamples_aft} for AFT)."
        )
        return _html("Length ratio with censoring", self.to_frame(), note)


def _budget_summary(budget, n: int) -> tuple[np.ndarray | None, float | None]:
    if budget is None:
        return None, None
    b = np.broadcast_to(np.asarray(budget, dtype=float), (n,))
    return b, float(b.max())


def _ratio_ci(num: np.ndarray, den: np.ndarray, level: float) -> tuple[float, float]:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = num / den
    return _percentile(r, (1 - level) / 2), _percentile(r, 1 - (1 - level) / 2)


def censoring_cell(
    L: np.ndarray,
    censored: np.ndarray,
    budget: float | np.ndarray | None,
    L_star: np.ndarray,
    censored_star: np.ndarray,
    budget_star: float | np.ndarray | None,
    counts: np.ndarray,
    *,
    item_index: np.ndarray | None = None,
    item_index_star: np.ndarray | None = None,
    n_resamples_aft: int = DEFAULT_AFT_RESAMPLES,
    confidence_level: float = 0.95,
) -> CensoringCell:
    """All censoring-aware length summaries of one cell, with intervals from the shared ``counts``.

    ``L``/``censored``/``budget`` describe the relaxed arm's runs, the ``_star`` arguments the
    lossless baseline's; ``budget`` is a scalar or one value per run (None if unknown; it is then
    only missing from the report). ``counts`` (B, n_items) is the lead's item bootstrap matrix.
    With one run per item (``item_index=None``) arrays are aligned by item. With several runs per
    item pass ``item_index`` (run -> counts column); ``item_index_star`` defaults to it, meaning
    both arms' arrays are aligned run by run (same item and seed), so "pairs" are runs. If the
    arms' runs are not aligned, pass ``item_index_star`` and pairs become items: an item counts as
    an uncensored pair when none of its runs on either side is censored.
    """
    L = np.asarray(L, dtype=float)
    Ls = np.asarray(L_star, dtype=float)
    c = np.asarray(censored, dtype=bool)
    cs = np.asarray(censored_star, dtype=bool)
    counts = np.asarray(counts)
    if counts.ndim != 2:
        raise ValueError("counts must be (B, n_items)")
    B, n_items = counts.shape
    aligned = item_index_star is None
    if item_index is None:
        if item_index_star is not None:
            raise ValueError("item_index_star needs item_index")
        if not (len(L) == len(Ls) == n_items):
            raise ValueError("with item_index=None both arms need one run per item (= counts columns)")
        idx = np.arange(n_items)
        idx_s = idx
    else:
        idx = np.asarray(item_index, dtype=int)
        idx_s = idx if aligned else np.asarray(item_index_star, dtype=int)
    if not (L.shape == c.shape == idx.shape and Ls.shape == cs.shape == idx_s.shape):
        raise ValueError("lengths, censored flags and item indices must align within each arm")
    if aligned and len(L) != len(Ls):
        raise ValueError("aligned arms (no item_index_star) need the same number of runs")
    if idx.min() < 0 or max(idx.max(), idx_s.max()) >= n_items:
        raise ValueError("item_index out of range of counts columns")
    b_run, b_max = _budget_summary(budget, len(L))
    bs_run, bs_max = _budget_summary(budget_star, len(Ls))
    Cf = counts.astype(float)

    # Kaplan–Meier per side and restricted means up to a horizon both sides identify.
    km = kaplan_meier(L, c, confidence_level=confidence_level)
    km_s = kaplan_meier(Ls, cs, confidence_level=confidence_level)
    tau_candidates = [km.horizon, km_s.horizon]
    if b_max is not None:
        tau_candidates.append(b_max)
    if bs_max is not None:
        tau_candidates.append(bs_max)
    tau = min(tau_candidates)
    if not math.isfinite(tau):
        tau = max(km.max_time, km_s.max_time)
    rmst, rmst_s = km.restricted_mean(tau), km_s.restricted_mean(tau)
    def item_sums(values: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Per-resample weighted sums of per-run values, via per-item totals (no (B, runs) gather)."""
        return Cf @ np.bincount(index, weights=values, minlength=n_items)

    def resampled_rmst(lengths: np.ndarray, cens: np.ndarray, index: np.ndarray) -> np.ndarray:
        # Censoring only at or beyond tau: KM up to tau is the empirical law, so the restricted
        # mean is a weighted mean of min(L, tau) for every resample (a matrix product).
        if not np.any(cens & (lengths < tau)):
            return item_sums(np.minimum(lengths, tau), index) / item_sums(np.ones(len(lengths)), index)
        return _restricted_means_many(lengths, (~cens).astype(float), Cf[:, index], tau)

    rm_b = resampled_rmst(L, c, idx)
    rms_b = resampled_rmst(Ls, cs, idx_s)
    rmst_ci = _ratio_ci(rm_b, rms_b, confidence_level)

    # Plain lambda (ratio of per-run means; censored runs at their budget) and its bootstrap.
    lam = float(L.mean() / Ls.mean())
    ones, ones_s = np.ones(len(L)), np.ones(len(Ls))
    lam_ci = _ratio_ci(
        item_sums(L, idx) / item_sums(ones, idx), item_sums(Ls, idx_s) / item_sums(ones_s, idx_s), confidence_level
    )

    # Plain lambda on pairs where neither side is censored.
    if aligned:
        keep = ~c & ~cs
        keep_s = keep
        n_pairs = int(keep.sum())
    else:
        bad_item = np.zeros(n_items, dtype=bool)
        bad_item[idx[c]] = True
        bad_item[idx_s[cs]] = True
        has = np.zeros(n_items, dtype=bool)
        has[idx] = True
        has_s = np.zeros(n_items, dtype=bool)
        has_s[idx_s] = True
        keep, keep_s = ~bad_item[idx], ~bad_item[idx_s]
        n_pairs = int(np.sum(~bad_item & has & has_s))
    if n_pairs:
        lam_u = float(L[keep].mean() / Ls[keep_s].mean())
        with np.errstate(divide="ignore", invalid="ignore"):
            lam_u_ci = _ratio_ci(
                item_sums(L * keep, idx) / item_sums(ones * keep, idx),
                item_sums(Ls * keep_s, idx_s) / item_sums(ones_s * keep_s, idx_s),
                confidence_level,
            )
    else:
        lam_u, lam_u_ci = math.nan, (math.nan, math.nan)

    # AFT fits on both arms pooled; a resample weights each run by its item's count.
    lengths = np.concatenate([L, Ls])
    cens_all = np.concatenate([c, cs])
    x = np.concatenate([np.ones(len(L)), np.zeros(len(Ls))])
    items_all = np.concatenate([idx, idx_s])
    n_aft = min(n_resamples_aft, B)
    Waft = Cf[:n_aft][:, items_all]
    fits: dict[str, AFTFit] = {}
    cis: dict[str, tuple[float, float]] = {}
    boots: dict[str, AFTBootstrap] = {}
    lo_q, hi_q = (1 - confidence_level) / 2, 1 - (1 - confidence_level) / 2
    positive = bool(np.all(lengths > 0))
    for dist in _DISTS:
        if not positive:
            reason = "AFT not fitted: a completion of length 0 (log-length undefined)"
            fits[dist] = AFTFit(dist, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan,
                                float(len(lengths)), float((~cens_all).sum()), False, 0, reason)
            boots[dist] = AFTBootstrap(dist, np.full(n_aft, np.nan), np.zeros(n_aft, bool), 0, n_aft)
            cis[dist] = (math.nan, math.nan)
            continue
        fit = fit_aft(lengths, cens_all, x, None, dist)
        boot = fit_aft_bootstrap(lengths, cens_all, x, Waft, dist, start=fit)
        lam_b = np.exp(boot.beta)
        fits[dist], boots[dist] = fit, boot
        cis[dist] = (_percentile(lam_b, lo_q), _percentile(lam_b, hi_q))

    return CensoringCell(
        n_items=n_items,
        n_runs=len(L),
        n_runs_star=len(Ls),
        budget=b_max,
        budget_star=bs_max,
        budgets_differ=None if b_run is None or bs_run is None
        else bool(np.unique(np.concatenate([b_run, bs_run])).size > 1),
        censored_frac=float(c.mean()),
        censored_frac_star=float(cs.mean()),
        km=km,
        km_star=km_s,
        rmst_tau=float(tau),
        rmst=rmst,
        rmst_star=rmst_s,
        rmst_ratio=rmst / rmst_s,
        rmst_ratio_ci=rmst_ci,
        lambda_plain=lam,
        lambda_plain_ci=lam_ci,
        lambda_uncensored_pairs=lam_u,
        lambda_uncensored_pairs_ci=lam_u_ci,
        n_uncensored_pairs=n_pairs,
        aft=fits,
        aft_ci=cis,
        aft_boot=boots,
        n_resamples=B,
        n_resamples_aft=n_aft,
        confidence_level=confidence_level,
    )
