"""The interval kernel's fast paths against the previous implementation, kept here as the oracle.

The cell table's numbers are published: the kernel was made cheaper on the condition that every
number stays the same, to the bit where the arithmetic is the same. The oracle below is the code
of commit c628a1c (np.unique over columns and a gathered copy of the product, one delta-method SE
per metric by central differences, item counts with int64 offsets, t statistics by np.where),
copied unchanged; the tests compare on random data built like a group's item sums (baseline
columns shared by the cells, counters equal to each other, zeros). Two changes are not bit for
bit, and are compared within their own error: the SEs take exact derivatives (the central
differences were off by ~1e-10 relative, and by rounding noise where the SE is 0), and the
transposed product may add a dot product's terms in another order (last bit).
"""

from __future__ import annotations

import numpy as np
import pytest

from lengthlens.stats import delta
from lengthlens.stats.delta import metric_fields, metrics_and_ses, moment_pairs
from lengthlens.stats.distinct_product import ColumnProduct, GroupProducts
from lengthlens.stats.estimate import cell_intervals
from lengthlens.stats.metrics import INTERVAL_METRICS, METRIC_BY_NAME, SUM_FIELDS, SUM_INDEX, evaluate
from lengthlens.stats.resample import (DrawCache, _t_statistics, bca_interval, item_counts, jackknife_sums, percentile_interval,
                                       studentized_interval)


# ---- the oracle: the previous implementation (commit c628a1c), unchanged --------------------------------------
_STEP = 1e-5  # its relative step of the central differences


def _old_transform(values, log):
    if not log:
        return values
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(values)
    out = np.asarray(out)
    if out.ndim == 0:
        return out if values > 0 else np.asarray(np.nan)
    out[~(values > 0)] = np.nan
    return out


def _old_metric_and_se(name, sums, moments, pairs, n_items, log):
    fields = metric_fields(name)
    fn = METRIC_BY_NAME[name].fn
    s = {f: sums[..., i] for f, i in SUM_INDEX.items()}
    value = _old_transform(fn(s), log)
    grads = []
    for k in fields:
        field = SUM_FIELDS[k]
        h = _STEP * np.maximum(np.abs(s[field]), 1.0)
        f_up = _old_transform(fn({**s, field: s[field] + h}), log)
        f_down = _old_transform(fn({**s, field: s[field] - h}), log)
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


def _old_item_products(X, pairs):
    if not pairs:
        return X[..., :0]
    return X[..., [k for k, _ in pairs]] * X[..., [l for _, l in pairs]]


def _old_cell_intervals(X, counts, ci, level):
    n_items, n_cells, n_q = X.shape
    B = counts.shape[0]
    stud = [m for m in INTERVAL_METRICS if ci == "studentized" and METRIC_BY_NAME[m].scale == "log"]
    pairs = moment_pairs(tuple(stud))
    Xe = np.concatenate([X, _old_item_products(X, pairs)], axis=2)
    X2 = Xe.reshape(n_items, -1)
    uniq, inverse = np.unique(X2, axis=1, return_inverse=True)
    boot = (counts @ uniq)[:, inverse.ravel()].reshape(B, n_cells, Xe.shape[2])
    rest = [k for k, m in enumerate(INTERVAL_METRICS) if m not in stud]
    reps = evaluate(boot[..., :n_q], tuple(INTERVAL_METRICS[k] for k in rest) + ("accuracy_delta_pp",))
    stacked = np.stack([reps[INTERVAL_METRICS[k]] for k in rest] or [np.zeros((B, n_cells))], axis=1)
    if ci == "bca":
        jack = evaluate(jackknife_sums(X.reshape(n_items, -1)).reshape(n_items, n_cells, n_q), INTERVAL_METRICS)
        jack_stacked = np.stack([jack[m] for m in INTERVAL_METRICS], axis=1)
        point = evaluate(X.sum(axis=0))
        pt = np.stack([point[m] for m in INTERVAL_METRICS], axis=0)
        return bca_interval(stacked, pt, jack_stacked, level), reps["accuracy_delta_pp"]
    shape = (len(INTERVAL_METRICS), n_cells)
    lo, hi, und = np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape, dtype=np.int64)
    if rest:
        lo[rest], hi[rest], und[rest] = percentile_interval(stacked, level)
    sums = Xe.sum(axis=0)
    for m in stud:
        k = INTERVAL_METRICS.index(m)
        est, se = _old_metric_and_se(m, sums[..., :n_q], sums[..., n_q:], pairs, n_items, log=True)
        est_b, se_b = _old_metric_and_se(m, boot[..., :n_q], boot[..., n_q:], pairs, n_items, log=True)
        l_, h_, und[k] = studentized_interval(est, se, est_b, se_b, level)
        with np.errstate(over="ignore"):
            lo[k], hi[k] = np.exp(l_), np.exp(h_)
    return (lo, hi, und), reps["accuracy_delta_pp"]


def _old_item_counts(n_items, n_resamples, rng, dtype=np.int64):
    out = np.empty((n_resamples, max(n_items, 0)), dtype=dtype)
    limit = np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else None
    if n_items <= 0:
        return out
    block = max(1, (1 << 22) // n_items)
    sub = max(1, (1 << 16) // n_items)
    offsets = np.arange(sub, dtype=np.int64)[:, None] * n_items
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n_items, size=(stop - start, n_items), dtype=np.int32)
        for s0 in range(0, stop - start, sub):
            s1 = min(stop - start, s0 + sub)
            flat = (idx[s0:s1] + offsets[: s1 - s0]).ravel()
            counts = np.bincount(flat, minlength=(s1 - s0) * n_items).reshape(s1 - s0, n_items)
            if limit is not None and counts.max(initial=0) > limit:
                raise OverflowError(f"an item was drawn {counts.max()} times, more than {np.dtype(dtype).name} holds")
            out[start + s0:start + s1] = counts
    return out


def _old_t(point, replicates, se_replicates):
    tol = 1e-12 * (1.0 + np.abs(point))
    diff = replicates - point
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se_replicates > tol, diff / se_replicates,
                     np.where(np.abs(diff) <= tol, 0.0, np.sign(diff) * np.inf))
    return np.where(np.isfinite(replicates) & np.isfinite(se_replicates), t, np.nan)
# ---- end of the oracle ---------------------------------------------------------------------------------------------


def _same_bits(a, b) -> bool:
    """Equal as stored numbers: NaN where NaN, and the same sign of every zero."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return (a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
            and np.array_equal(np.signbit(a) & ~np.isnan(a), np.signbit(b) & ~np.isnan(b)))


_BASELINE = ("n", "L_star", "R_star", "T_star", "lbar_star", "n_lbar_star", "A_star", "c_star", "cens_star")


def _group_sums(rng, n_items: int, n_cells: int, seeds: int = 1) -> np.ndarray:
    """Item sums (n_items, n_cells, SUM_FIELDS) shaped like a group's: the baseline's fields shared by every cell,
    counters equal to each other (one seed: n = n_lbar = n_graded = 1), wall times with full mantissas, a few
    items without l_bar or grade, one cell identical to its baseline (SE 0: the percentile fallback)."""
    def per_item(lo, hi, size):
        return sum(rng.uniform(lo, hi, size) for _ in range(seeds))

    X = np.zeros((n_items, n_cells, len(SUM_FIELDS)))
    base = {"n": np.full(n_items, float(seeds)), "L_star": np.round(per_item(20, 900, n_items)),
            "R_star": np.round(per_item(5, 300, n_items)), "T_star": per_item(0.5, 40.0, n_items),
            "lbar_star": per_item(0.5, 4.0, n_items), "n_lbar_star": np.full(n_items, float(seeds)),
            "c_star": rng.integers(0, seeds + 1, n_items).astype(float), "cens_star": rng.integers(0, 2, n_items) * 1.0}
    base["A_star"] = np.round(base["R_star"] * rng.uniform(0.5, 3.0, n_items))
    for c in range(n_cells):
        for f in _BASELINE:
            X[:, c, SUM_INDEX[f]] = base[f]
        if c == n_cells - 1:  # a lossless arm: every relaxed sum equals its baseline's
            for f in ("L", "R", "T", "lbar", "A", "c", "cens"):
                X[:, c, SUM_INDEX[f]] = base[f + "_star"]
        else:
            X[:, c, SUM_INDEX["L"]] = np.round(base["L_star"] * rng.uniform(0.7, 1.6, n_items))
            X[:, c, SUM_INDEX["R"]] = np.round(base["R_star"] * rng.uniform(0.5, 1.2, n_items))
            X[:, c, SUM_INDEX["T"]] = base["T_star"] * rng.uniform(0.4, 1.3, n_items)
            X[:, c, SUM_INDEX["lbar"]] = base["lbar_star"] * rng.uniform(0.9, 2.0, n_items)
            X[:, c, SUM_INDEX["A"]] = np.round(X[:, c, SUM_INDEX["R"]] * rng.uniform(0.5, 4.0, n_items))
            X[:, c, SUM_INDEX["c"]] = rng.integers(0, seeds + 1, n_items)
            X[:, c, SUM_INDEX["cens"]] = rng.integers(0, 2, n_items)
        X[:, c, SUM_INDEX["n_lbar"]] = seeds
        X[:, c, SUM_INDEX["n_graded"]] = seeds
    X[: max(1, n_items // 10), :, SUM_INDEX["n_graded"]] = 0  # ungraded items
    X[: max(1, n_items // 10), :, [SUM_INDEX["c"], SUM_INDEX["c_star"]]] = 0
    X[-1:, :, [SUM_INDEX["lbar"], SUM_INDEX["n_lbar"]]] = 0  # an item without l_bar
    X[:, :, SUM_INDEX["w2r"]] = np.maximum(X[:, :, SUM_INDEX["c"]] - X[:, :, SUM_INDEX["c_star"]], 0)
    X[:, :, SUM_INDEX["r2w"]] = np.maximum(X[:, :, SUM_INDEX["c_star"]] - X[:, :, SUM_INDEX["c"]], 0)
    return X


@pytest.mark.parametrize("ci", ["studentized", "percentile", "bca"])
@pytest.mark.parametrize(("n_items", "n_cells", "seeds"), [(2, 2, 1), (12, 3, 1), (30, 5, 1), (83, 4, 3), (250, 6, 2)])
def test_cell_intervals_agree_with_the_previous_implementation(ci, n_items, n_cells, seeds, monkeypatch):
    monkeypatch.setattr(delta, "_SLICE", 256)  # the SEs of the resamples in several slices
    rng = np.random.default_rng(n_items * 100 + n_cells)
    X = _group_sums(rng, n_items, n_cells, seeds)
    counts = item_counts(n_items, 999, np.random.default_rng(n_items), np.uint8).astype(np.float64)
    reps: dict = {}
    got = cell_intervals(X, counts, ci, 0.95, replicates=reps)
    want, want_delta = _old_cell_intervals(X, counts, ci, 0.95)
    for g, w, what in zip(got[:2], want[:2], ("lo", "hi")):
        # 1e-8: the SEs' 1e-10 relative change moves a t quantile by as little; absolute 1e-8 for the
        # lossless arm, whose SE was rounding noise (~1e-9 on the log scale) and is now 0 or as small
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-8, err_msg=what)
        assert np.array_equal(np.isnan(g), np.isnan(w)), what
    assert _same_bits(got[2], want[2])  # undefined resamples: the same
    np.testing.assert_allclose(reps["accuracy_delta_pp"], want_delta, rtol=1e-13, atol=0)
    if ci == "studentized":  # the lossless arm has no spread: its ratio intervals fell back to the percentile
        assert reps["percentile_fallback"][:, -1].any()


@pytest.mark.parametrize("log", [True, False])
@pytest.mark.parametrize("slice_", [None, 100])
def test_metrics_and_ses_agree_with_central_differences(log, slice_, monkeypatch):
    if slice_:
        monkeypatch.setattr(delta, "_SLICE", slice_)
    rng = np.random.default_rng(3)
    names = tuple(m for m in INTERVAL_METRICS if METRIC_BY_NAME[m].scale == "log") + ("accuracy_delta_pp",)
    pairs = moment_pairs(names)
    X = _group_sums(rng, 40, 4, seeds=2)
    Xe = np.concatenate([X, _old_item_products(X, pairs)], axis=2)
    counts = item_counts(40, 300, rng).astype(float)
    boot = np.einsum("bi,icq->bcq", counts, Xe)  # (B, n_cells, fields + pairs)
    boot[:7, 0, SUM_INDEX["R_star"]] = 0.0  # undefined ratios in a few resamples
    n_q = len(SUM_FIELDS)
    s = {f: boot[..., i] for f, i in SUM_INDEX.items()}
    s["n"] = boot[:, :1, SUM_INDEX["n"]]  # a field shared by every cell may come as one column: it broadcasts
    moments = {p: boot[..., n_q + j] for j, p in enumerate(pairs)}
    got = metrics_and_ses(names, s, moments, 40, log=log)
    for name in names:
        value, se = _old_metric_and_se(name, boot[..., :n_q], boot[..., n_q:], pairs, 40, log=log)
        assert _same_bits(got[name][0], value), name  # the metric itself: the plain definition's array
        # central differences: truncation ~1e-10 relative, cancellation up to ~1e-7 on the identity scale
        np.testing.assert_allclose(got[name][1], se, rtol=1e-6, atol=1e-8, err_msg=name)  # atol: a 0 SE as noise
        assert np.array_equal(np.isnan(got[name][1]), np.isnan(se)), name
        if name == "rounds_ratio":  # R* = 0 in a few resamples: undefined there only
            assert np.isnan(se).any() and np.isfinite(se).any()


@pytest.mark.parametrize("odd", [False, True])
def test_column_product_multiplies_each_distinct_column_once(odd):
    """Blocks added one after another (a group's cells, then censoring-like columns that repeat some of them) give
    counts @ X for every column, each distinct column once; ``odd``: -0.0 (its own column, same sums), NaN, negatives."""
    rng = np.random.default_rng(8)
    X = _group_sums(rng, 57, 5)
    if odd:
        X[3, 2, SUM_INDEX["T"]] = -0.0
        X[5, 1, SUM_INDEX["L"]] = np.nan
        X[7, 0, SUM_INDEX["A"]] = -3.0
    counts = item_counts(57, 501, rng).astype(float)  # odd B: the kernel's remainder rows too
    product = ColumnProduct(counts)
    cells_block = X.reshape(57, -1)
    other = np.stack([X[:, 0, SUM_INDEX["L"]], np.ones(57), X[:, 3, SUM_INDEX["L_star"]], rng.normal(size=57)], axis=1)
    rows_cells = product.add(cells_block)
    rows_other = product.add(other)
    distinct = {c.tobytes() for c in np.ascontiguousarray(np.concatenate([cells_block, other], axis=1).T)}
    assert product.n_distinct == len(distinct) < cells_block.shape[1]
    assert rows_other[0] == rows_cells[SUM_INDEX["L"]] and rows_other[2] == rows_cells[SUM_INDEX["L_star"]]
    for block, rows in ((cells_block, rows_cells), (other, rows_other)):
        want = counts @ block
        # the same dot products, their terms maybe added in another order: last bit (integer sums exact)
        np.testing.assert_allclose(product.sums(rows).T, want, rtol=1e-14, atol=0)
    per_cell = rows_cells.reshape(5, -1)
    assert product.per_cell(per_cell[:, SUM_INDEX["L_star"]]).shape == (1, 501)  # the baseline's: one row for all
    assert product.per_cell(per_cell[:, SUM_INDEX["R"]]).shape == (5, 501)
    with pytest.raises(RuntimeError):
        product.add(other)  # after the product was taken: its rows would not exist


@pytest.mark.parametrize("rows", [[0, 2, 4], [1, 3, 5], [5, 3, 1], [0, 1, 3], [2], [2, 2, 2]])
def test_per_cell_reads_the_rows_in_order(rows):
    """Evenly spaced rows come back as a view, others gathered, one repeated row as one broadcastable row."""
    counts = np.random.default_rng(0).integers(0, 3, (50, 7)).astype(float)
    X = np.random.default_rng(1).normal(size=(7, 6))
    product = ColumnProduct(counts)
    product.add(X)
    got = product.per_cell(np.array(rows))
    want = (counts @ X).T[rows[:1] if len(set(rows)) == 1 else rows]
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_group_products_share_one_product_per_item_set():
    """The draws are the cell table's (DrawCache.item_counts), one ColumnProduct per (items, complete)."""
    draws = DrawCache(seed=3, n_resamples=200, keep=False)
    products = GroupProducts(draws, ("t", "d", "ds"))
    full, again, part = products.over(["a", "b", "c"], True), products.over(("a", "b", "c"), True), products.over(["a", "c"], False)
    assert full is again and part is not full
    assert np.array_equal(full.counts, draws.item_counts(("t", "d", "ds"), ("a", "b", "c"), True))
    assert np.array_equal(part.counts, draws.item_counts(("t", "d", "ds"), ("a", "c"), False))


@pytest.mark.parametrize("n_items", [1, 2, 3, 30, 255, 256, 1319, 70_000])
@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float64])
def test_item_counts_equal_the_previous_counting(n_items, dtype):
    for n_resamples, seed in ((1, 0), (7, 1), (999, 20260817), (3000, 5)):
        if n_items * n_resamples > 3e7:
            continue
        got = item_counts(n_items, n_resamples, np.random.default_rng(seed), dtype)
        want = _old_item_counts(n_items, n_resamples, np.random.default_rng(seed), dtype)
        assert got.dtype == want.dtype and np.array_equal(got, want)


class _AllFirst:
    """A generator that draws item 0 every time: the count of item 0 is n_items."""

    def integers(self, low, high, size, dtype):
        return np.zeros(size, dtype=dtype)


@pytest.mark.parametrize("n_items", [255, 256, 700])
def test_item_counts_overflow_like_before(n_items):
    if n_items <= 255:  # a count is at most n_items: fits uint8 however the draws fall
        assert np.array_equal(item_counts(n_items, 3, _AllFirst(), np.uint8),
                              _old_item_counts(n_items, 3, _AllFirst(), np.uint8))
        return
    for counting in (item_counts, _old_item_counts):
        with pytest.raises(OverflowError, match=f"drawn {n_items} times"):
            counting(n_items, 3, _AllFirst(), np.uint8)


def test_t_statistics_equal_the_where_formula():
    rng = np.random.default_rng(4)
    point = np.array([0.3, -1.2, 0.0, np.nan, 2.0])
    reps = point + rng.normal(0, 0.1, size=(2000, 5))
    se = rng.uniform(0.01, 0.2, size=(2000, 5))
    se[::7, 0] = 0.0  # SE 0 with a changed value: +/-inf
    reps[::11, 0] = point[0]
    se[::11, 0] = 0.0  # SE 0, value unchanged: t = 0
    se[::13, 1] = 1e-15  # below the tolerance
    reps[::17, 2] = np.inf
    se[::19, 4] = np.nan
    tol = 1e-12 * (1.0 + np.abs(point))
    assert _same_bits(_t_statistics(point, reps, se, tol), _old_t(point, reps, se))
    assert _same_bits(_t_statistics(point, reps.T.copy().T, se.T.copy().T, tol), _old_t(point, reps, se))


@pytest.mark.parametrize("slice_", [7, 100, 1 << 16])
def test_metrics_and_ses_in_slices_are_the_whole_arrays_to_the_bit(slice_, monkeypatch):
    """The SEs of the resamples are element-wise: any slice size gives the unsliced values and SEs bit for bit."""
    rng = np.random.default_rng(11)
    names = tuple(m for m in INTERVAL_METRICS if METRIC_BY_NAME[m].scale == "log")
    pairs = moment_pairs(names)
    X = _group_sums(rng, 30, 5, seeds=2)
    Xe = np.concatenate([X, _old_item_products(X, pairs)], axis=2)
    counts = item_counts(30, 2000, rng).astype(float)
    boot = np.einsum("bi,icq->cbq", counts, Xe)  # (n_cells, B, fields + pairs): resamples on the last axis, as the pass has them
    n_q = len(SUM_FIELDS)
    s = {f: boot[..., i] for f, i in SUM_INDEX.items()}
    moments = {p: boot[..., n_q + j] for j, p in enumerate(pairs)}
    monkeypatch.setattr(delta, "_SLICE", 1 << 30)
    whole = metrics_and_ses(names, s, moments, 30, log=True)
    monkeypatch.setattr(delta, "_SLICE", slice_)
    sliced = metrics_and_ses(names, s, moments, 30, log=True)
    for name in names:
        assert _same_bits(sliced[name][0], whole[name][0]) and _same_bits(sliced[name][1], whole[name][1]), name
