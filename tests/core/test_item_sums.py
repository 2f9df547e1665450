"""item_positions and item_sums against plain loops over the runs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from lengthlens.stats.item_sums import item_positions, item_sums


def _frame() -> tuple[pl.DataFrame, dict[str, int]]:
    rng = np.random.default_rng(3)
    items = [f"q{i:03d}" for i in range(40)]
    index = {it: k for k, it in enumerate(rng.permutation(items))}  # places not in the items' order
    picks = rng.integers(0, 40, 300)
    return pl.DataFrame({"item_id": [items[i] for i in picks], "x": rng.integers(0, 5000, 300),
                         "y": rng.random(300)}), index


def test_item_positions_are_each_runs_place_in_the_index() -> None:
    frame, index = _frame()
    expected = [index[it] for it in frame.get_column("item_id")]  # the plain loop
    got = item_positions(frame, index)
    assert got.dtype == np.int64 and got.tolist() == expected
    assert item_positions(frame.head(0), index).shape == (0,)


def test_an_item_outside_the_index_is_named() -> None:
    frame, index = _frame()
    bad = pl.concat([frame, pl.DataFrame({"item_id": ["not-an-item"], "x": [1], "y": [0.5]})])
    with pytest.raises(KeyError, match="not-an-item"):
        item_positions(bad, index)


def test_item_sums_add_the_seeds_of_an_item() -> None:
    frame, index = _frame()
    expected = np.zeros((len(index), 2))
    for it, x, y in frame.iter_rows():
        expected[index[it], 0] += x
        expected[index[it], 1] += y
    got = item_sums(frame, ["x", "y"], index)
    assert np.array_equal(got[:, 0], expected[:, 0])  # integers: exact in any order
    np.testing.assert_allclose(got[:, 1], expected[:, 1], rtol=1e-13)


def test_medians_of_item_means_count_each_item_once() -> None:
    from lengthlens.stats.estimate import medians_of_item_means

    # item a: runs 1 and 3 (mean 2); b: 10 (mean 10); c: 4 and 6 and 8 (mean 6) -> median of {2, 10, 6} = 6,
    # where the median over runs {1, 3, 10, 4, 6, 8} would be 5. The second column is logged for no run.
    af = pl.DataFrame({"item_id": ["a", "a", "b", "c", "c", "c"], "r": [1.0, 3.0, 10.0, 4.0, 6.0, 8.0],
                       "t": [None] * 6}, schema_overrides={"t": pl.Float64})
    got = medians_of_item_means(af, ["r", "t"])
    assert got["r"] == 6.0 and np.isnan(got["t"])
