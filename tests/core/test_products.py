"""The count-matrix product and the draws, against plain loops."""

from __future__ import annotations

import numpy as np
import pytest

from lengthlens.stats.products import ColumnProduct
from lengthlens.stats.resample import draw_counts, item_counts

EPS = np.finfo(float).eps


@pytest.mark.parametrize("odd", [False, True])
def test_column_product_multiplies_each_distinct_column_once(odd):
    """Blocks added one after another give counts @ X for every column, each distinct column multiplied once; ``odd``:
    -0.0 (its own column, same sums), NaN, negatives."""
    rng = np.random.default_rng(8)
    X = rng.integers(0, 5000, (57, 6)).astype(float)
    X[:, 4] = rng.uniform(0.5, 60, 57)  # non-integer: wall times
    X[:, 5] = X[:, 0]  # a repeated column
    if odd:
        X[3, 2], X[5, 1], X[7, 4] = -0.0, np.nan, -3.0
    counts = item_counts(57, 501, rng).astype(float)  # odd B: a kernel's remainder rows too
    product = ColumnProduct(counts)
    other = np.stack([X[:, 0], np.ones(57), rng.normal(size=57)], axis=1)
    rows_x, rows_other = product.add(X), product.add(other)
    assert product.n_distinct == 5 + 2  # X's five distinct columns, then ones and normals (X[:, 0] again is no new one)
    assert rows_x[5] == rows_x[0] == rows_other[0]
    for block, rows in ((X, rows_x), (other, rows_other)):
        want = np.array([[sum(counts[b, i] * block[i, j] for i in range(57)) for j in range(block.shape[1])]
                         for b in range(0, 501, 50)])  # a plain loop, every 50th resample
        got = product.sums(rows).T[::50]
        # A dot product of 57 terms in any order: |error| <= 57 eps sum |c x| (a bound, not one machine's result).
        bound = 57 * EPS * (np.abs(counts[::50]) @ np.abs(np.nan_to_num(block)))
        finite = np.isfinite(want)
        assert np.all(np.abs(got[finite] - want[finite]) <= bound[finite])
        assert np.array_equal(np.isnan(got), np.isnan(want))
    with pytest.raises(RuntimeError):
        product.add(other)  # after the product was taken: its rows would not exist


def test_a_block_of_the_wrong_items_is_refused():
    product = ColumnProduct(np.ones((4, 3)))
    with pytest.raises(ValueError, match="2 items for counts over 3"):
        product.add(np.ones((2, 1)))


@pytest.mark.parametrize("n_items", [1, 2, 3, 30, 255, 1319])
def test_item_counts_are_the_generators_draws_counted(n_items):
    """Each row counts n_items uniform draws: the same generator's integers, counted by a plain loop."""
    n_resamples = 7
    got = item_counts(n_items, n_resamples, np.random.default_rng(11), np.int64)
    idx = np.random.default_rng(11).integers(0, n_items, size=(n_resamples, n_items), dtype=np.int32)
    want = np.zeros((n_resamples, n_items), dtype=np.int64)
    for b in range(n_resamples):
        for i in idx[b]:
            want[b, i] += 1
    assert np.array_equal(got, want) and (got.sum(axis=1) == n_items).all()


def test_item_counts_are_multinomial():
    c = item_counts(7, 50_000, np.random.default_rng(0))
    # Each count is Binomial(7, 1/7): mean 1, variance 6/7; the mean's SE is sqrt(6/7 / 350000) = 0.0016.
    assert c.mean() == pytest.approx(1.0, abs=0.01) and c.var() == pytest.approx(6 / 7, abs=0.02)


class _AllFirst:
    """A generator that draws item 0 every time: the count of item 0 is n_items."""

    def integers(self, low, high, size, dtype):
        return np.zeros(size, dtype=dtype)


def test_a_count_beyond_uint8_is_an_overflow_and_draw_counts_gives_floats():
    assert item_counts(255, 3, _AllFirst(), np.uint8)[:, 0].tolist() == [255] * 3
    with pytest.raises(OverflowError, match="drawn 256 times"):
        item_counts(256, 3, _AllFirst(), np.uint8)
    items = [f"i{k}" for k in range(4)]
    a = draw_counts(5, ("g",), items, True, 20)
    assert a.dtype == np.uint8 and (a.sum(axis=1) == 4).all()


def test_a_compact_count_matrix_is_multiplied_a_block_at_a_time_with_the_same_sums(monkeypatch):
    """uint8 counts converted a few resamples at a time: integer sums exact, others within the dot product's bound."""
    from lengthlens.stats import products

    rng = np.random.default_rng(2)
    counts = item_counts(300, 1001, rng, np.uint8)
    X = np.stack([rng.integers(0, 4000, 300).astype(float), rng.uniform(0, 50, 300)], axis=1)
    whole = ColumnProduct(counts.astype(np.float64))
    rows = whole.add(X)
    monkeypatch.setattr(products, "BLOCK", 300 * 7)  # blocks of 7 resamples
    blocked = ColumnProduct(counts)
    blocked.add(X)
    a, b = whole.sums(rows), blocked.sums(rows)
    assert np.array_equal(a[0], b[0])
    assert np.all(np.abs(a[1] - b[1]) <= 300 * EPS * (counts.astype(float) @ np.abs(X[:, 1])))
