"""Right-censored lengths: Kaplan–Meier survival with quantile intervals, and restricted means.

A run that stops at its token budget is right-censored: its true length is at least the budget.
Kaplan–Meier (KM) survival of completion length gives the median and quartiles with their
Brookmeyer–Crowley intervals (log-log transform, as statsmodels' ``SurvfuncRight.quantile_ci``), or
``None`` with the reason when too much is censored to identify them. Those treat every run as
independent; a cell's quartiles get intervals from resampling items instead
(:func:`km_quantiles_weighted`: a statistic of the items on the engine, every resample's weighted KM curve
computed at once, an item's seeds together). With one budget per arm, KM
below the budget *is* the empirical distribution and the restricted mean up to the budget *is*
``mean(min(L, budget))``: they add information only when budgets differ between runs or arms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from scipy import special

from lengthlens.results import ConfidenceInterval, Estimate, frame, frame_html
from lengthlens.stats.intervals import Weighted

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["KaplanMeier", "kaplan_meier", "km_quantiles_many", "km_quantiles_weighted", "restricted_means_many",
           "with_item_intervals"]

#: The interval method of Kaplan–Meier quantiles (Brookmeyer–Crowley, log-log), as statsmodels names it.
KM_QUANTILE_CI = "brookmeyer_crowley"


# ---------------------------------------------------------------------------------------------
# Kaplan–Meier
# ---------------------------------------------------------------------------------------------


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
    #: The quantiles as estimates: NaN where not identified, with the reason in ``note``.
    median: Estimate
    q25: Estimate
    q75: Estimate
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
    def quantiles(self) -> tuple[Estimate, Estimate, Estimate]:
        """First quartile, median and third quartile."""
        return (self.q25, self.median, self.q75)

    def to_frame(self) -> pd.DataFrame:
        """The survival table, one row per event time."""
        return frame(
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
        return frame([{"p": p, "value": q.point, "low": q.low, "high": q.high, "reason": q.note}
                      for p, q in zip((0.25, 0.5, 0.75), self.quantiles)])

    def _repr_html_(self) -> str:
        how = ("Brookmeyer–Crowley (log-log)" if self.median.method == KM_QUANTILE_CI
               else f"item-resampled {self.median.method.replace('_', ' ')}")
        note = f"n={self.n_obs:g}, censored={self.n_censored:g}; {self.confidence_level:.0%} {how} intervals."
        return frame_html(self.quantile_frame(), "Kaplan–Meier quantiles of completion length") + f"<p><small>{note}</small></p>"


def _km_table(time: np.ndarray, event: np.ndarray, weights: np.ndarray | None):
    """Risk sets and events at the distinct event times (frequency weights act as repetition)."""
    utime, rank = np.unique(time, return_inverse=True)
    w = np.ones_like(time, dtype=float) if weights is None else np.asarray(weights, dtype=float)
    d = np.bincount(rank, weights=w * event, minlength=len(utime))
    n = np.cumsum(np.bincount(rank, weights=w, minlength=len(utime))[::-1])[::-1]
    keep = d > 0
    return utime[keep], n[keep], d[keep]


def _km_quantile(p: float, times: np.ndarray, surv: np.ndarray, se: np.ndarray, z: float, level: float) -> Estimate:
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
    nan = float("nan")
    return Estimate(nan if value is None else value, ConfidenceInterval(nan if lo is None else lo, nan if hi is None else hi),
                    method=KM_QUANTILE_CI, confidence_level=level, note="; ".join(reasons))


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

    Parameters
    ----------
    lengths : completion lengths, one per run.
    censored : True where the run hit its budget.
    weights : non-negative frequency weights, one per run; None weighs every run 1.
    confidence_level : two-sided level of the pointwise and the quantile intervals.

    Returns
    -------
    KaplanMeier
        The curve at the event times, with ``median``, ``q25`` and ``q75`` as
        :class:`~lengthlens.results.Estimate` (Brookmeyer–Crowley intervals; NaN with the reason where
        not identified).

    Examples
    --------
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored = L >= 512
    >>> km = kaplan_meier(L, censored)
    >>> km.survival[:3].round(3).tolist(), km.median.point, km.median.low, km.median.high
    ([0.9, 0.8, 0.7], 180.0, 90.0, 300.0)
    >>> km.q75.point, km.q75.high, km.q75.note
    (300.0, nan, 'upper confidence limit not identified: it lies beyond the last event time')
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
        z = special.ndtri(0.5 + confidence_level / 2)  # the normal quantile, as scipy.stats.norm.ppf
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
        median=_km_quantile(0.5, times, surv, se, z, confidence_level),
        q25=_km_quantile(0.25, times, surv, se, z, confidence_level),
        q75=_km_quantile(0.75, times, surv, se, z, confidence_level),
        confidence_level=confidence_level,
    )


def _risk_blocks(time: np.ndarray, event: np.ndarray, W: np.ndarray, item: np.ndarray | None, block: int,
                 event_times: bool = False):
    """Per block of weight rows: (rows, total weight, events d and risk sets n at each distinct time (rows x K), times).

    ``W`` weighs runs (B, N), or items (B, n_items) when ``item`` gives each run's item (a gather per
    block, no (B, N) copy of run weights for the whole matrix). Rows go ``block`` at a time, so memory
    stays at block x N. Integer weights (counts) are summed as cumulative sums over the runs in time
    order, differenced at each time's first and last run (exact, and along rows where grouping ties
    column by column is not), with ``event_times`` only at the times where some run ends in an event
    (S changes nowhere else); other weights are grouped by time directly, at every distinct time.
    """
    time, event = np.asarray(time, dtype=float), np.asarray(event, dtype=float)
    order = np.argsort(time, kind="stable")
    ts, ev = time[order], event[order]
    columns = order if item is None else np.asarray(item, dtype=np.intp)[order]
    starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])
    ends = np.r_[starts[1:], ts.size]
    W = np.asarray(W)
    if not np.issubdtype(W.dtype, np.integer):
        utime = ts[starts]
        for b0 in range(0, W.shape[0], block):
            Ws = np.asarray(W[b0:b0 + block][:, columns], dtype=np.float64)
            d, m = np.add.reduceat(Ws * ev, starts, axis=1), np.add.reduceat(Ws, starts, axis=1)
            # n_k = the weight still at risk at time k: the total less what ended (event or censored) before it
            n = np.cumsum(m[:, ::-1], axis=1)[:, ::-1]
            yield slice(b0, b0 + len(Ws)), n[:, 0], d, n, utime
        return
    if event_times:
        keep = np.add.reduceat(ev, starts) > 0 if starts.size else np.zeros(0, dtype=bool)
        starts, ends = starts[keep], ends[keep]
    utime = ts[starts]
    is_event = ev > 0
    ev_columns = columns[is_event]
    events_before = np.r_[0, np.cumsum(is_event)]  # event runs among the first j runs in time order
    ev_lo, ev_hi = events_before[starts], events_before[ends]
    for b0 in range(0, W.shape[0], block):
        Wb = W[b0:b0 + block]
        C = np.zeros((Wb.shape[0], columns.size + 1), dtype=np.int64)
        np.cumsum(Wb[:, columns], axis=1, out=C[:, 1:])
        E = np.zeros((Wb.shape[0], ev_columns.size + 1), dtype=np.int64)
        np.cumsum(Wb[:, ev_columns], axis=1, out=E[:, 1:])
        total = C[:, -1]
        n = (total[:, None] - C[:, starts]).astype(np.float64)
        d = (E[:, ev_hi] - E[:, ev_lo]).astype(np.float64)
        yield slice(b0, b0 + Wb.shape[0]), total, d, n, utime


def _survival(d: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Kaplan–Meier survival at each distinct time, per row: the product of (1 - d/n), 1 where none is at risk."""
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = 1.0 - d / n
    factor[n <= 0] = 1.0
    return np.cumprod(factor, axis=1, out=factor)


def restricted_means_many(time: np.ndarray, event: np.ndarray, W: np.ndarray, tau: float, *,
                          item: np.ndarray | None = None, block: int = 1024) -> np.ndarray:
    """Weighted-KM restricted means up to ``tau`` for every row of the weight matrix ``W``: (B,).

    ``W`` weighs runs (B, N), or items (B, n_items) with ``item`` each run's item. A resample whose last
    drawn run is censored before ``tau`` has S carried flat from there (the usual convention; ``tau`` is
    identified on the full data, so this affects only such rows).

    Parameters
    ----------
    time : lengths, one per run.
    event : 1 where the run finished, 0 where it was censored.
    W : (B, N) weights of the runs, or (B, n_items) weights of the items with ``item``.
    tau : the horizon: the mean of min(L, tau) under each row's curve.
    item : each run's item (0 .. n_items - 1), when ``W`` weighs items.
    block : rows computed at a time (memory about block x N).

    Returns
    -------
    ndarray
        (B,), the restricted mean of each row.

    Examples
    --------
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored = L >= 512
    >>> W = np.array([[1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [2, 0, 1, 1, 1, 2, 0, 1, 1, 0]])
    >>> restricted_means_many(L, (~censored).astype(float), W, 400.0).round(2).tolist(), float(np.minimum(L, 400).mean())
    ([217.0, 198.89], 217.0)
    """
    W = np.asarray(W)
    out = np.empty(W.shape[0])
    for rows, _, d, n, utime in _risk_blocks(time, event, W, item, block):
        surv = _survival(d, n)
        t = utime[utime < tau]
        edges = np.diff(np.concatenate(([0.0], t, [tau])))
        out[rows] = np.concatenate((np.ones((surv.shape[0], 1)), surv[:, : len(t)]), axis=1) @ edges
    return out


def km_quantiles_many(time: np.ndarray, event: np.ndarray, W: np.ndarray, ps: tuple[float, ...] = (0.25, 0.5, 0.75),
                      block: int = 256, *, item: np.ndarray | None = None) -> np.ndarray:
    """Weighted-KM quantiles (:class:`KaplanMeier`'s rule) for every row of the weight matrix ``W``: (B, len(ps)).

    ``W`` weighs runs (B, N), or items (B, n_items) with ``item`` each run's item (a resample of items
    weighs each of its runs by how often the item is drawn). A row whose curve never falls below 1 - p
    has the p-quantile ``inf`` (beyond its last event time), an all-zero row NaN. Every row's curve is
    computed at once, ``block`` rows at a time (memory block x N); S never rises, so the first time it
    falls below 1 - p, or onto 1 - p, is a count of the times it lies above.

    With integer weights (counts), S at an event time no later than the first censoring time is
    (total − events up to it) / total exactly (the product telescopes), so there the quantiles are
    found where the running event weight passes p·total (:class:`_Crossings`: integers, exact); only
    the rows whose quantile lies beyond the first censoring time compute the product.

    Parameters
    ----------
    time : lengths, one per run.
    event : 1 where the run finished, 0 where it was censored.
    W : (B, N) weights of the runs, or (B, n_items) weights of the items with ``item``.
    ps : the probabilities of the quantiles.
    block : rows computed at a time.
    item : each run's item (0 .. n_items - 1), when ``W`` weighs items.

    Returns
    -------
    ndarray
        (B, len(ps)): each row's quantiles; inf beyond its last event time, NaN for an all-zero row.

    Examples
    --------
    >>> L = np.array([10.0, 20.0, 30.0, 40.0])
    >>> km_quantiles_many(L, np.array([1.0, 1.0, 1.0, 0.0]), np.array([[1, 1, 1, 1], [0, 3, 1, 0]]), (0.5,)).ravel().tolist()
    [25.0, 20.0]
    """
    W = np.asarray(W)
    out = np.empty((W.shape[0], len(ps)))
    if not np.issubdtype(W.dtype, np.integer):
        for rows, total, d, n, utime in _risk_blocks(time, event, W, item, block):
            out[rows] = _quantiles(_survival(d, n), utime, total, ps)
        return out
    time, event = np.asarray(time, dtype=float), np.asarray(event, dtype=float)
    order = np.argsort(time, kind="stable")
    ts, ev = time[order], event[order] > 0
    columns = order if item is None else np.asarray(item, dtype=np.intp)[order]
    ev_ts = ts[ev]
    starts = np.flatnonzero(np.r_[True, ev_ts[1:] != ev_ts[:-1]]) if ev_ts.size else np.zeros(0, dtype=np.intp)
    utime = ev_ts[starts]  # the event times
    ev_hi = np.r_[starts[1:], ev_ts.size]  # event runs up to and including each event time
    first_censored = ts[~ev].min() if (~ev).any() else np.inf
    k_exact = int(np.searchsorted(utime, first_censored, side="right"))  # event times where S telescopes
    multiplicity = np.bincount(columns, minlength=W.shape[1]).astype(np.float64)  # runs per weight column
    ev_columns = columns[ev]
    group = np.repeat(np.arange(utime.size), np.diff(np.r_[starts, ev_ts.size]))  # each event run's event time
    group = np.r_[group, np.full(_CHUNK, utime.size)]  # past the last event run: no time
    step = max(block, (block * 1024) // max(ev_columns.size, 1))  # rows at a time: about block x 1024 weights
    for b0 in range(0, W.shape[0], step):
        Wb = W[b0:b0 + step]
        rows = slice(b0, b0 + Wb.shape[0])
        total = Wb @ multiplicity  # integer sums: exact
        crossing = _Crossings(Wb[:, ev_columns])
        late = np.zeros(Wb.shape[0], dtype=bool)
        for j, p in enumerate(ps):
            share = p * total
            # D_k = event weight up to time k: S ≥ 1 - p ⟺ D ≤ p·total, S > 1 - p ⟺ D < p·total (S = 1 - p exactly on a
            # step: the midpoint). The times with D ≤ p·total are those before the first event run past it.
            k_below = np.minimum(group[crossing.first(share, above=True)], k_exact)
            k_at = np.minimum(group[crossing.first(share, above=False)], k_exact)
            out[rows, j] = _first_or_midpoint(k_below, k_at, utime, k_exact)
            late |= k_below == k_exact
        out[rows][total == 0] = np.nan
        if k_exact < utime.size and late.any():  # the quantile lies beyond the first censoring time: the product
            later = np.flatnonzero(late) + b0
            for sub, tot, d, n, ut in _risk_blocks(time, event, W[later], item, block, event_times=True):
                out[later[sub]] = _quantiles(_survival(d, n), ut, tot, ps)
    return out


#: Runs per chunk of :class:`_Crossings` (a row's crossing is found among the chunk sums, then within one chunk).
_CHUNK = 64


class _Crossings:
    """The first position where each row's running sum of ``X`` (rows x N, non-negative integers) passes a threshold.

    For long rows the running sums are not formed: each row's chunk sums (``_CHUNK`` entries each,
    summed contiguously) locate the chunk, and one chunk per row is summed out, so a search reads
    each entry about once instead of a cumulative sum over the whole row (sequential, and several
    times slower); short rows are summed out whole. Sums are exact (integers).
    """

    def __init__(self, X: np.ndarray):
        b, n = X.shape
        self.n = n
        self.rows = np.arange(b)
        self.chunked = n > 4 * _CHUNK
        if not self.chunked:
            self.running = np.cumsum(X, axis=1, dtype=np.int64)
            return
        self.n_chunks = -(-n // _CHUNK)
        padded = np.zeros((b, self.n_chunks * _CHUNK), dtype=X.dtype)
        padded[:, :n] = X
        self.chunks = padded.reshape(b, self.n_chunks, _CHUNK)
        self.before = np.zeros((b, self.n_chunks + 1), dtype=np.float64)  # weight before each chunk (exact)
        np.cumsum(self.chunks.sum(axis=2, dtype=np.int64), axis=1, out=self.before[:, 1:])

    def first(self, threshold: np.ndarray, above: bool) -> np.ndarray:
        """Per row, the first position whose running sum is > ``threshold`` (``above``) or ≥ it; ``n`` or more if none."""
        t = threshold[:, None]
        if not self.chunked:
            return np.count_nonzero(self.running <= t if above else self.running < t, axis=1)
        ends = self.before[:, 1:]
        chunk = np.count_nonzero(ends <= t if above else ends < t, axis=1)
        inside = np.minimum(chunk, self.n_chunks - 1)
        running = np.cumsum(self.chunks[self.rows, inside], axis=1, dtype=np.int64) + self.before[self.rows, inside][:, None]
        within = np.count_nonzero(running <= t if above else running < t, axis=1)
        return np.where(chunk < self.n_chunks, inside * _CHUNK + within, self.n_chunks * _CHUNK)


def _first_or_midpoint(k_below: np.ndarray, k_at: np.ndarray, utime: np.ndarray, k_max: int) -> np.ndarray:
    """The quantile from the number of times S lies at or above 1 - p (``k_below``) and above it (``k_at``), among the
    first ``k_max`` of ``utime``: the first time below, or the midpoint of a step at 1 - p; inf if it never falls."""
    K = utime.size
    if K == 0:
        return np.full(k_below.shape, np.inf)
    has_below = k_below < k_max
    first = np.where(has_below, utime[np.minimum(k_below, K - 1)], np.inf)
    at_time = utime[np.minimum(k_at, K - 1)]
    mid = np.where(has_below, (at_time + first) / 2, at_time)
    return np.where(k_at < k_below, mid, first)


def _quantiles(surv: np.ndarray, utime: np.ndarray, total: np.ndarray, ps: tuple[float, ...]) -> np.ndarray:
    """Each row's quantiles from its survival at ``utime`` (rows x K): S falls below 1 - p at the first time it lies
    under the tolerance band around 1 - p; it lies in the band (S = 1 - p on a step) from the first time it is not
    above it, an event time, as S changes only there."""
    out = np.empty((surv.shape[0], len(ps)))
    for j, p in enumerate(ps):
        target = 1.0 - p
        k_below = np.count_nonzero(surv >= target - 1e-12, axis=1)
        k_at = np.count_nonzero(surv > target + 1e-12, axis=1)
        out[:, j] = _first_or_midpoint(k_below, k_at, utime, surv.shape[1])
    out[total == 0] = np.nan
    return out


def km_quantiles_weighted(km: KaplanMeier, time: np.ndarray, event: np.ndarray, item: np.ndarray,
                          max_resamples: int | None = None, names: str = "{}") -> Weighted:
    """The quartiles of a cell's Kaplan–Meier curve as a statistic of its items (:class:`Weighted`): each resample
    weighs a run by how often its item is drawn, so the seeds of one item move together (the Brookmeyer–Crowley
    intervals treat every run as independent and under-cover when an item has several seeds). Its default interval
    is the expanded percentile interval; ``km`` gives the point estimates; ``names`` formats the outputs' names
    (``q25``, ``median``, ``q75``).

    Parameters
    ----------
    km : the cell's :func:`kaplan_meier` curve (its quartiles are the point estimates).
    time : lengths, one per run.
    event : 1 where the run finished, 0 where it was censored.
    item : each run's item (0 .. n_items - 1).
    max_resamples : evaluate on the first that many draws only (None: all).
    names : a format string for the three outputs' names.

    Returns
    -------
    Weighted
        The statistic, for :func:`~lengthlens.stats.intervals.estimates` with the cell's draws.

    Examples
    --------
    >>> from lengthlens.stats.intervals import Resampled, estimates
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored = L >= 512
    >>> event, item = (~censored).astype(float), np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    >>> stat = km_quantiles_weighted(kaplan_meier(L, censored), L, event, item, names="length_{}")
    >>> stat.outputs, stat.point
    (('length_q25', 'length_median', 'length_q75'), [140.0, 180.0, 300.0])
    >>> draws = np.random.default_rng(1).multinomial(5, [0.2] * 5, size=200)   # 200 resamples of the 5 items
    >>> est, _ = estimates({"km": stat}, Resampled({}, {}, draws))
    >>> e = est["length_median"]
    >>> e.point, e.low, e.high, e.method
    (180.0, 130.0, 300.0, 'expanded_percentile')
    """
    time, event, item = np.asarray(time, dtype=float), np.asarray(event, dtype=float), np.asarray(item, dtype=np.intp)
    return Weighted(partial(km_quantiles_many, time, event, item=item),
                    "expanded_percentile", max_resamples, tuple(names.format(q) for q in ("q25", "median", "q75")),
                    point=[np.inf if np.isnan(q.point) else q.point for q in km.quantiles],
                    key=("km_quantiles", time.tobytes(), event.tobytes(), item.tobytes()))


def with_item_intervals(km: KaplanMeier, estimates: Mapping[str, Estimate]) -> KaplanMeier:
    """``km`` with its quartiles' intervals from resampling items (``estimates`` of :func:`km_quantiles_weighted`).

    A resample whose curve stays above 1 - p makes that limit unbounded: reported, with the reason, as not
    identified (as the Brookmeyer–Crowley upper limit beyond the last event time).

    Parameters
    ----------
    km : the cell's :func:`kaplan_meier` curve.
    estimates : ``q25``, ``median`` and ``q75`` as :func:`~lengthlens.stats.intervals.estimates` gives them
        for :func:`km_quantiles_weighted` (with its default ``names``).

    Returns
    -------
    KaplanMeier
        ``km`` with its quartiles' intervals replaced (the points kept); an unbounded limit is NaN and said so.

    Examples
    --------
    >>> from lengthlens.stats.intervals import Resampled, estimates
    >>> L = np.array([120.0, 150, 90, 200, 512, 160, 210, 140, 512, 300])   # tokens; 512 is the budget
    >>> censored = L >= 512
    >>> event, item = (~censored).astype(float), np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    >>> km = kaplan_meier(L, censored)
    >>> draws = np.random.default_rng(1).multinomial(5, [0.2] * 5, size=200)
    >>> est, _ = estimates({"km": km_quantiles_weighted(km, L, event, item)}, Resampled({}, {}, draws))
    >>> items = with_item_intervals(km, est)
    >>> (km.median.low, km.median.high), (items.median.low, items.median.high)
    ((90.0, 300.0), (130.0, 300.0))
    >>> items.q75.high, items.q75.note
    (nan, 'upper confidence limit not identified: resamples of the items put it beyond the last event time')
    """
    nan = float("nan")
    new = {}
    for name, est in zip(("q25", "median", "q75"), km.quantiles):
        e = estimates[name]
        reasons = [r for r in est.note.split("; ") if r.startswith("not identified")]
        low, high = e.low, e.high
        if not np.isfinite(high):
            reasons.append("upper confidence limit not identified: resamples of the items put it beyond the last event time")
        if not np.isfinite(low):
            reasons.append("interval not identified: too many resamples put the quantile beyond the last event time")
        new[name] = replace(e, point=est.point,
                            confidence_interval=ConfidenceInterval(low if np.isfinite(low) else nan,
                                                                   high if np.isfinite(high) else nan),
                            note="; ".join(reasons))
    return replace(km, **new)
