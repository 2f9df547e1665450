"""Per-item sums of a cell's runs and the split of runs into groups: the inputs of every resampled sum.

The item is the resampling unit: an item's seeds add up into one row, and a resample is a vector
of counts over a group's items, so any resampled sum is ``counts @ item_sums``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import polars as pl

from lengthlens.data.runset import RunSet
from lengthlens.data.pairing import CELL_KEY
from lengthlens.data.schema import GROUP_KEY
from lengthlens.stats.distinct_product import GroupProducts
from lengthlens.stats.parallel import map_ordered
from lengthlens.stats.resample import DrawCache

R = TypeVar("R")


def item_positions(frame: pl.DataFrame, index: dict[str, int]) -> np.ndarray:
    """Each run's item as a column of its group's count matrix (KeyError naming an item not in ``index``)."""
    # One dict look-up per run over the column as a list: a cell's few hundred runs take ~55 us, where an enum
    # cast took ~430 us (building the enum of the group's items on each call, 1,080 calls per paper-scale
    # report) and replace_strict ~1 ms. Iterating the Series itself, element by element, is what was slow.
    ids = frame.get_column("item_id").to_list()
    return np.fromiter(map(index.__getitem__, ids), dtype=np.int64, count=len(ids))


def item_sums(frame: pl.DataFrame, columns: list[str] | tuple[str, ...], index: dict[str, int]) -> np.ndarray:
    """(n_items, len(columns)) sums of per-run columns by item: the seeds of an item add up, since the item is resampled."""
    X = np.zeros((len(index), len(columns)))
    np.add.at(X, item_positions(frame, index), frame.select(columns).to_numpy().astype(np.float64))
    return X


def all_group_items(runs: RunSet) -> dict[tuple, list[str]]:
    """Every group's resampling units (its baseline's items, sorted), computed once."""
    base = runs.paired.filter(pl.col("method") == "strict").select(*GROUP_KEY, "item_id").unique()
    out: dict[tuple, list[str]] = {}
    for g in base.partition_by(list(GROUP_KEY), maintain_order=False):
        out[tuple(g.row(0)[:len(GROUP_KEY)])] = g.get_column("item_id").sort().to_list()
    return out


def group_frames(frame: pl.DataFrame) -> list[tuple[tuple, pl.DataFrame]]:
    """``frame`` split by group, each as (group names, rows), in the order groups first appear."""
    return [(tuple(k), g) for k, g in frame.partition_by(list(GROUP_KEY), maintain_order=True, as_dict=True).items()]


def map_groups(runs: RunSet, frame: pl.DataFrame, fn: Callable[[pl.DataFrame, tuple, list[str]], R],
               workers: int | None = None) -> list[R]:
    """``fn(rows, group names, group's items)`` for each group of ``frame``, in the order groups first appear,
    on ``workers`` threads (:func:`lengthlens.stats.parallel.map_ordered`; the largest groups start first)."""
    all_items = all_group_items(runs)
    return map_ordered(lambda g: fn(g[1], g[0], all_items[g[0]]), group_frames(frame), workers, cost=lambda g: g[1].height)


def group_bootstrap_sums(group_df: pl.DataFrame, group: tuple, n_group: int, columns: list[str],
                         draws: DrawCache) -> list[tuple[dict, np.ndarray, np.ndarray, int]]:
    """For each cell of one group, sums of ``columns`` over its units: (cell key, point (Q,), per resample (B, Q), n_items).

    Uses the very draws of :func:`lengthlens.stats.estimate.cells` (same seed, group and item set), so a secondary analysis'
    intervals are consistent with the cell table's; cells on the same items share one matrix product.
    ``n_group``: the group's item count (a cell on all of them uses the group's draws).
    """
    frames = group_df.partition_by(list(CELL_KEY), maintain_order=True)
    return plan_group_bootstrap_sums(frames, n_group, columns, GroupProducts(draws, group))()


def plan_group_bootstrap_sums(cell_frames: list[pl.DataFrame], n_group: int, columns: list[str],
                              products: GroupProducts) -> Callable[[], list[tuple[dict, np.ndarray, np.ndarray, int]]]:
    """:func:`group_bootstrap_sums` in two steps, on the group's runs already split by cell (``cell_frames``, the
    results in their order): the cells' columns are added to ``products`` now, their sums read by the returned function."""
    parts = []
    for af in cell_frames:
        own = tuple(sorted(set(af.get_column("item_id").to_list())))
        X = item_sums(af, columns, {it: i for i, it in enumerate(own)})
        product = products.over(own, complete=len(own) == n_group)
        parts.append(({k: af.row(0, named=True)[k] for k in CELL_KEY}, X, product, product.add(X), len(own)))

    def finish() -> list[tuple[dict, np.ndarray, np.ndarray, int]]:
        return [(key, X.sum(axis=0), product.sums(rows).T, n_items) for key, X, product, rows, n_items in parts]

    return finish
