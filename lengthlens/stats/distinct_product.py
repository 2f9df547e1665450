"""Resampled sums of many item columns that repeat, each distinct column multiplied once.

The cells of a group share columns: the baseline's sums (and their products) are the same for
every arm on the same runs, and counters like ``n`` or ``n_lbar`` are often equal to each other.
The count-matrix product C @ X is the bulk of the interval kernel, so each distinct column is
multiplied once and each cell's sums are read back from the product.

The product is taken transposed, ``uniq.T @ counts.T``, so that it comes out with each column's
resampled sums contiguous without a copy of the (B, n_distinct) result. Its entries are the same
dot products; a BLAS kernel may add their terms in another order than for ``counts @ uniq`` (it
depends on the widths), so a sum of non-integer values can differ in its last bit. Finding the
distinct columns is fast too: when every entry is a non-negative number (no NaN, no
-0.0: the sums of counts and times always are), the big-endian bytes of a column compare like its
values, so a sort of the columns as byte strings gives numpy's lexicographic order; otherwise
numpy's own structured sort is used.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from lengthlens.stats.delta import metric_fields
from lengthlens.stats.metrics import SUM_FIELDS


def unique_columns(X2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(X2, axis=1, return_inverse=True)`` for a 2-D float array: the distinct columns (an F-ordered
    (n_rows, n_distinct) array, as numpy returns it) and each column's index among them."""
    n, m = X2.shape
    rows = np.ascontiguousarray(X2.T)  # a column per row, as np.unique lays them out
    if n == 0 or m == 0 or np.signbit(rows).any() or np.isnan(rows).any():
        uniq, inverse = np.unique(X2, axis=1, return_inverse=True)
        return uniq, inverse.ravel()
    keys = rows.astype(">f8").view(np.dtype((np.void, 8 * n))).ravel()  # non-negative doubles: bytes order = value order
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return rows[first].T, inverse.ravel()


def resampled_columns(X: np.ndarray, counts: np.ndarray, columns: Sequence[int]) -> dict[int, np.ndarray]:
    """{column c: the cells' sums of X[:, :, c] in every resample}, as (n_cells, B) arrays.

    ``X`` (n_items, n_cells, n_cols) holds item sums, ``counts`` (B, n_items) the draws. Only ``columns``
    are multiplied, each distinct one once, and the product is laid out one row per distinct column; a
    column that is the same for every cell comes back as a (1, B) view (it broadcasts).
    """
    n_items, n_cells, _ = X.shape
    columns = list(columns)
    uniq, inverse = unique_columns(X[:, :, columns].reshape(n_items, -1))
    product = uniq.T @ counts.T  # (n_distinct, B), each distinct column's sums contiguous: BLAS transposes, nothing is copied
    position = inverse.reshape(n_cells, -1)
    out: dict[int, np.ndarray] = {}
    for k, c in enumerate(columns):
        pos = position[:, k]
        out[c] = product[pos[0]][None, :] if (pos == pos[0]).all() else product[pos]
    return out


def resampled_sums(Xe: np.ndarray, counts: np.ndarray, n_q: int, pairs: tuple[tuple[int, int], ...],
                   names: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[tuple[int, int], np.ndarray]]:
    """The sums that the metrics ``names`` read, by field name, and the item-product sums of ``pairs``, by pair,
    in every resample: (n_cells, B) arrays (one row where the cells agree).

    ``Xe`` (n_items, n_cells, n_q + len(pairs)) holds the item sums (metrics.SUM_FIELDS), then the item products.
    """
    fields = sorted({k for m in names for k in metric_fields(m)})
    cols = resampled_columns(Xe, counts, fields + [n_q + j for j in range(len(pairs))])
    return {SUM_FIELDS[k]: cols[k] for k in fields}, {p: cols[n_q + j] for j, p in enumerate(pairs)}
