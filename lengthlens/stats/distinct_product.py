"""Resampled sums of many item columns that repeat, each distinct column multiplied once.

The cells of a group share columns: the baseline's sums (and their products) are the same for
every arm on the same runs, and counters like ``n`` or ``n_lbar`` are often equal to each other.
The count-matrix product C @ X is the bulk of the interval kernel, so each distinct column is
multiplied once, and each cell's sums are read as views of the product (no gathered copy).

Exactness: a column's resampled sums are C @ x for any column x equal to it (as floats), and the
product of one column does not depend on where the column sits in the matrix or how many
columns there are (BLAS accumulates each output over the items in the same order; checked in
tests/core/test_distinct_product.py against the previous ``np.unique(axis=1)`` formulation). Columns
that differ only in the sign of a zero give the same sums too: a zero term never changes a sum.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from lengthlens.stats.delta import metric_fields
from lengthlens.stats.metrics import SUM_FIELDS


def first_equal_rows(rows: np.ndarray) -> np.ndarray:
    """For each row of ``rows`` (m, n), the index of a row equal to it: the first one with the same
    fingerprint when equal to it, else itself (a NaN row stands alone; a duplicate may be missed,
    which costs a multiplication, never a wrong number)."""
    m, n = rows.shape
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    weights = np.random.default_rng(0x5EED).uniform(0.5, 1.5, size=n)  # fixed: a fingerprint, not a statistic
    with np.errstate(all="ignore"):
        fingerprint = rows @ weights
    _, first, inverse = np.unique(fingerprint, return_index=True, return_inverse=True)
    rep = first[inverse.ravel()]
    same = (rows == rows[rep]).all(axis=1)
    return np.where(same, rep, np.arange(m))


def resampled_columns(X: np.ndarray, counts: np.ndarray, columns: Sequence[int]) -> dict[int, np.ndarray]:
    """{column c: the cells' sums of X[:, :, c] in every resample}, as (n_cells, B) arrays.

    ``X`` (n_items, n_cells, n_cols) holds item sums, ``counts`` (B, n_items) the draws. A column
    that is the same for every cell comes back as a (1, B) view (it broadcasts against the others);
    the rows of a column are views of one (n_distinct, B) product wherever its cells' columns are
    new and consecutive, else a gathered copy.
    """
    n_items, n_cells, _ = X.shape
    columns = list(columns)
    rows = np.ascontiguousarray(X[:, :, columns].transpose(2, 1, 0)).reshape(-1, n_items)  # column-major, then cell
    keep, position = np.unique(first_equal_rows(rows), return_inverse=True)  # keep: ascending, so new columns stay in order
    product = rows[keep] @ counts.T  # (n_distinct, B)
    position = position.ravel().reshape(len(columns), n_cells)
    out: dict[int, np.ndarray] = {}
    for c, pos in zip(columns, position):
        if (pos == pos[0]).all():
            out[c] = product[pos[0]][None, :]
        elif (np.diff(pos) == 1).all():
            out[c] = product[pos[0]:pos[0] + n_cells]
        else:
            out[c] = product[pos]
    return out


def resampled_sums(Xe: np.ndarray, counts: np.ndarray, n_q: int, pairs: tuple[tuple[int, int], ...],
                   names: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[tuple[int, int], np.ndarray]]:
    """The sums that the metrics ``names`` read, by field name, and the item-product sums of ``pairs``, by pair,
    in every resample: (n_cells, B) arrays (one row where the cells agree). Only these columns are multiplied.

    ``Xe`` (n_items, n_cells, n_q + len(pairs)) holds the item sums (metrics.SUM_FIELDS), then the item products.
    """
    fields = sorted({k for m in names for k in metric_fields(m)})
    cols = resampled_columns(Xe, counts, fields + [n_q + j for j in range(len(pairs))])
    return {SUM_FIELDS[k]: cols[k] for k in fields}, {p: cols[n_q + j] for j, p in enumerate(pairs)}
