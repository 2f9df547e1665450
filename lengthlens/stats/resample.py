"""Item-level paired bootstrap: one count matrix per (target, draft, dataset), reused by every metric and arm.

Resampling items (not runs) keeps each item's baseline and relaxed runs together, which is what
makes the intervals *paired*; reusing the same draws across the arms of a group keeps intervals
jointly consistent (arm A vs arm B on the same resampled items). A resample is represented as
counts (how often each item is drawn), so any sum over resampled items is ``counts @ x``.
"""

from __future__ import annotations

import threading
import zlib
from typing import Callable, Sequence

import numpy as np

DEFAULT_N_RESAMPLES = 10_000
DEFAULT_SEED = 20260817  # fixed so that two runs of a report agree bit for bit
DEFAULT_CONFIDENCE = 0.95


def group_rng(seed: int, group: Sequence[str]) -> np.random.Generator:
    """The generator for one group: depends only on the seed and the group's names, not on what else was loaded."""
    tag = zlib.crc32("\x1f".join(group).encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence([int(seed), tag]))


def item_counts(n_items: int, n_resamples: int, rng: np.random.Generator, dtype: type = np.int64) -> np.ndarray:
    """(n_resamples, n_items) matrix; row b counts how often each item is drawn in resample b.

    Each row is n_items draws with replacement (a multinomial(n_items, uniform) vector). Indices
    are drawn as int32 in blocks and counted a few rows per bincount (small enough to stay in
    cache, large enough to avoid a Python loop per row); ``dtype`` lets the caller get float64
    counts ready for a matrix product without another copy.
    """
    out = np.empty((n_resamples, max(n_items, 0)), dtype=dtype)
    limit = np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else None
    if n_items <= 0:
        return out
    check = limit is not None and n_items > limit  # a count is at most n_items: only then can it overflow
    block = max(1, (1 << 22) // n_items)  # rows per call of the generator: fixes the draws, never change it
    sub = max(1, (1 << 16) // n_items)  # rows counted per bincount: small enough to stay in cache
    offsets = np.arange(sub, dtype=np.int32)[:, None] * np.int32(n_items)  # < max(2^16, n_items): fits int32
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n_items, size=(stop - start, n_items), dtype=np.int32)
        for s0 in range(0, stop - start, sub):
            s1 = min(stop - start, s0 + sub)
            rows = idx[s0:s1]
            np.add(rows, offsets[: s1 - s0], out=rows)  # in place: row r's draw of item i becomes r * n_items + i
            counts = np.bincount(rows.ravel(), minlength=(s1 - s0) * n_items).reshape(s1 - s0, n_items)
            if check and counts.max(initial=0) > limit:
                raise OverflowError(f"an item was drawn {counts.max()} times, more than {np.dtype(dtype).name} holds")
            out[start + s0:start + s1] = counts
    return out


def counts_for_group(seed: int, group: Sequence[str], n_items: int, n_resamples: int, dtype: type = np.int64) -> np.ndarray:
    """The count matrix of a group, reproducible from (seed, group names, n_items, n_resamples) alone."""
    return item_counts(n_items, n_resamples, group_rng(seed, group), dtype)


def subset_rng(seed: int, group: Sequence[str], items: Sequence[str]) -> np.random.Generator:
    """The generator of a cell that covers only some of its group's items: seed, group names and the item ids."""
    tag = zlib.crc32("\x1f".join(group).encode("utf-8"))
    tag_items = zlib.crc32("\x1f".join(items).encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence([int(seed), tag, tag_items, len(items)]))


def counts_for_items(seed: int, group: Sequence[str], items: Sequence[str], complete: bool, n_resamples: int,
                     dtype: type = np.int64) -> np.ndarray:
    """(n_resamples, len(items)) counts over a cell's own items.

    A cell on every item of its group (``complete``) uses the group's draws; a cell on a subset
    draws its own multinomial(len(items)) counts over just those items, so every resample holds
    exactly n_cell items (cells with the same item set get the same draws).
    """
    if complete:
        return counts_for_group(seed, group, len(items), n_resamples, dtype)
    return item_counts(len(items), n_resamples, subset_rng(seed, group, items), dtype)


class DrawCache:
    """Each group's count matrices, drawn once and shared by every analysis of a report; safe across threads.

    The draws are those of :func:`counts_for_items` (same seed, group, items), so sharing changes
    no number. Every use is a matrix product, so counts are handed out as float64; each thread
    keeps those of the group it is working on (cells sharing an item set share one copy, and the
    analyses of a group done one after another by one thread draw once). With ``keep`` (the
    default) the draws of every group are also kept compact (uint8) for the cache's lifetime, for
    analyses run one after another over all groups; without it each group's draws live only
    while a thread works on that group (a report's single pass over the groups).
    """

    def __init__(self, seed: int = DEFAULT_SEED, n_resamples: int = DEFAULT_N_RESAMPLES, keep: bool = True):
        self.seed = seed
        self.n_resamples = n_resamples
        self.keep = keep
        self._store: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def counts(self, group: Sequence[str], n_items: int, n_resamples: int | None = None) -> np.ndarray:
        """(n_resamples, n_items) float64 counts of the group (the first n_resamples rows of its draws)."""
        rows = self.n_resamples if n_resamples is None else n_resamples
        return self.compact(group, n_items)[:rows].astype(np.float64)

    def compact(self, group: Sequence[str], n_items: int) -> np.ndarray:
        """The group's counts as stored (uint8 unless an item was drawn more than 255 times)."""
        return self._get((tuple(group), n_items), lambda dt: counts_for_group(self.seed, group, n_items, self.n_resamples, dt))

    def item_counts(self, group: Sequence[str], items: Sequence[str], complete: bool) -> np.ndarray:
        """Float64 (n_resamples, len(items)) counts over a cell's own items (:func:`counts_for_items`); read-only."""
        group, items = tuple(group), tuple(items)
        local = self._local
        if getattr(local, "group", None) != group:  # a new group: drop the last one's matrices
            local.group, local.floats = group, {}
        key = (items, bool(complete))
        c = local.floats.get(key)
        if c is None:
            c = self._float_counts(group, items, bool(complete))
            c.flags.writeable = False  # shared by every analysis of the group
            local.floats[key] = c
        return c

    def _float_counts(self, group: tuple, items: tuple, complete: bool) -> np.ndarray:
        # Drawn compact, then converted: counting into uint8 and one conversion pass is about twice as
        # fast as counting straight into float64 (an eighth of the memory traffic while counting).
        def draw(dt: type) -> np.ndarray:
            return counts_for_items(self.seed, group, items, complete, self.n_resamples, dt)

        if not self.keep:
            return _compact(draw).astype(np.float64)
        return (self.compact(group, len(items)) if complete else self._get((group, items, False), draw)).astype(np.float64)

    def _get(self, key: tuple, draw: Callable[[type], np.ndarray]) -> np.ndarray:
        with self._lock:
            c = self._store.get(key)
        if c is None:
            c = _compact(draw)
            with self._lock:  # two threads may draw the same key at once: identical draws, keep the first
                c = self._store.setdefault(key, c)
        return c


def _compact(draw: Callable[[type], np.ndarray]) -> np.ndarray:
    """Counts as uint8, or int64 when an item was drawn more than 255 times (only with tiny groups)."""
    try:
        return draw(np.uint8)
    except OverflowError:
        return draw(np.int64)


def percentile_interval(replicates: np.ndarray, confidence_level: float = DEFAULT_CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Percentile interval along axis 0, ignoring undefined (NaN/inf) replicates; also their count."""
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


def bca_interval(replicates: np.ndarray, point: np.ndarray, jackknife: np.ndarray,
                 confidence_level: float = DEFAULT_CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bias-corrected and accelerated interval (Efron 1987), per column.

    ``jackknife`` holds the leave-one-item-out estimates (n_items, ...); the acceleration comes
    from their skewness, as in scipy.stats.bootstrap(method='BCa').
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


Statistic = Callable[[np.ndarray], np.ndarray]


def quantiles_with_inf(values: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """Linear-interpolation quantiles (numpy's default) per column, NaN dropped, +/-inf kept as extremes.

    Returns (len(qs), *values.shape[1:]); interpolating towards an infinite value gives that
    infinity; an all-NaN column gives NaN.
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
                         confidence_level: float = DEFAULT_CONFIDENCE, symmetric: bool = True,
                         fell_back: list | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bootstrap-t interval per column, with t_b = (rep_b - point) / se_b.

    ``symmetric`` (default): point +/- q se with q the ``confidence_level`` quantile of |t_b|
    (Hall 1988; it covers better than the equal-tailed form at 12-150 items in simulation, see
    README). Otherwise equal-tailed: [point - t_hi se, point - t_lo se]. All arrays on the scale the
    interval is built on (the caller takes logs for ratios). A resample whose SE is 0 but whose
    value differs from the point (one distinct item) has t = +/-inf: kept as an extreme value, so
    the limit can be unbounded. Resamples with an undefined value or SE are dropped and counted.
    With ``se`` 0 (every item agrees) the interval is the point. "0" means below 1e-12 (1 + |point|).

    Where so many resamples have SE 0 with a changed value that a limit comes out unbounded (nearly
    every item unchanged, as in a check of a lossless method, where a resample without the few items
    that differ has no spread), the bootstrap-t says nothing: that column gets the percentile
    interval of the same replicates instead, and ``fell_back`` (if given) receives the columns' mask.
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
        p_lo, p_hi, _ = percentile_interval(replicates, confidence_level)
        lo, hi = np.where(degenerate, p_lo, lo), np.where(degenerate, p_hi, hi)
    if fell_back is not None:
        fell_back.append(degenerate)
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi), undefined


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
