"""Item-level paired bootstrap: one count matrix per (target, draft, dataset), reused by every metric and arm.

Resampling items (not runs) keeps each item's baseline and relaxed runs together, which is what
makes the intervals *paired*; reusing the same draws across the arms of a group keeps intervals
jointly consistent (arm A vs arm B on the same resampled items). A resample is represented as
counts (how often each item is drawn), so any sum over resampled items is ``counts @ x``.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

#: Bootstrap resamples of a report by default.
DEFAULT_N_RESAMPLES = 10_000
#: The default seed, fixed so that two runs of a report agree bit for bit.
DEFAULT_SEED = 20260817
#: The default two-sided confidence level.
DEFAULT_CONFIDENCE = 0.95


def group_rng(seed: int, group: Sequence[str]) -> np.random.Generator:
    """The generator for one group: depends only on the seed and the group's names, not on what else was loaded."""
    tag = zlib.crc32("\x1f".join(group).encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence([int(seed), tag]))


def item_counts(n_items: int, n_resamples: int, rng: np.random.Generator, dtype: type = np.int64) -> np.ndarray:
    """The item bootstrap as counts: row b says how often each item is drawn in resample b.

    Each row is n_items draws with replacement (a multinomial(n_items, uniform) vector), so a sum over
    resampled items is ``counts @ x``. Indices are drawn as int32 in blocks and counted a few rows per
    bincount (small enough to stay in cache, large enough to avoid a Python loop per row).

    Parameters
    ----------
    n_items : items to draw from.
    n_resamples : resamples (rows).
    rng : the generator (e.g. :func:`group_rng`); the same generator state gives the same counts.
    dtype : the counts' type: float64 gives counts ready for a matrix product without another copy.

    Returns
    -------
    numpy.ndarray
        (n_resamples, n_items) counts, each row summing to n_items.

    Raises
    ------
    OverflowError
        When a count does not fit ``dtype`` (e.g. uint8 and an item drawn more than 255 times).

    Examples
    --------
    >>> c = item_counts(5, 3, np.random.default_rng(0))
    >>> c.shape, c.sum(axis=1).tolist()
    ((3, 5), [5, 5, 5])
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


def draw_counts(seed: int, group: Sequence[str], items: Sequence[str], complete: bool, n_resamples: int) -> np.ndarray:
    """A cell's bootstrap counts over its own items (:func:`counts_for_items`), kept compact.

    uint8, or int64 where an item is drawn more than 255 times (only tiny item sets can reach it):
    a count matrix of 10,000 resamples of 20,000 items is 200 MB so, 1.6 GB as float64.
    :class:`~lengthlens.stats.products.ColumnProduct` converts it a block at a time.

    Parameters
    ----------
    seed : the report's seed.
    group : the group's names (target, draft, dataset, ...): with the seed they fix the draws.
    items : the cell's item ids.
    complete : the cell covers every item of its group: it reuses the group's draws.
    n_resamples : resamples (rows).

    Returns
    -------
    numpy.ndarray
        (n_resamples, len(items)) counts, each row summing to len(items).

    Examples
    --------
    >>> c = draw_counts(1, ("T", "D", "gsm8k"), ["a", "b", "c"], True, 4)
    >>> c.dtype.name, c.shape, c.sum(axis=1).tolist()
    ('uint8', (4, 3), [3, 3, 3, 3])
    >>> bool((c == draw_counts(1, ("T", "D", "gsm8k"), ["a", "b", "c"], True, 4)).all())   # same seed, same draws
    True
    """
    def draw(dtype: type) -> np.ndarray:
        return counts_for_items(seed, group, items, complete, n_resamples, dtype)

    try:
        return draw(np.uint8)
    except OverflowError:
        return draw(np.int64)
