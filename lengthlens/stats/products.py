"""Resampled sums of item columns: one count-matrix product per item set, each distinct column multiplied once.

A resampled sum is ``counts @ x`` for a column x of per-item sums. The analyses of a group (the
cell table, censoring, attribution) need many such columns over the same draws, and many repeat:
the baseline's sums and their products are the same for every arm on the same runs, counters
like ``n`` or ``n_lbar`` are often equal, a cell's lengths enter the cell table and the censoring
table alike. A :class:`ColumnProduct` collects the columns analyses add, a block at a time, keeps
each distinct one once and multiplies them all in one product: the engine
(:mod:`lengthlens.analyses.engine`) makes one product per item set for every analysis of a group,
one pass over the counts and no narrow products.

The product is ``distinct @ counts.T``, so each column's resampled sums come out contiguous. Its
entries are dot products whose terms a BLAS kernel may add in another order depending on the
matrix's shape and the row's place in it: a sum of non-integer values (wall times, per-run
l_bar) can move in its last bit when other columns are added, so the cell table alone and the
cell table of a report's pass can differ there. Sums of integers (counts, tokens, characters)
are exact in any order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


#: Numbers of a count matrix converted to float64 at once for the product (32 MB).
BLOCK = 1 << 22


class ColumnProduct:
    """``counts @ X`` for blocks X of item columns added one after another, each distinct column multiplied once.

    ``scratch``: where the product gets a float64 buffer of at least a given size for the converted counts (the
    engine's keeps one between products: a fresh 32 MB array each time costs its page faults again); default a
    new array.
    """

    def __init__(self, counts: np.ndarray, scratch: Callable[[int], np.ndarray] | None = None):
        self.counts = counts
        self._scratch = scratch or np.empty
        self._index: dict[bytes, int] = {}
        self._columns: list[np.ndarray] = []
        self._product: np.ndarray | None = None

    def add(self, X: np.ndarray) -> np.ndarray:
        """The rows of the product that will hold the resampled sums of X's columns (X: (n_items, w)).

        Columns are the same when their values are the same to the bit (a -0.0 and a 0.0 are two
        columns, with the same sums). Read the sums with :meth:`sums` once every block is added.
        """
        if self._product is not None:
            raise RuntimeError("a block was added after the product was taken")
        columns = np.ascontiguousarray(np.asarray(X, dtype=np.float64).T)  # one row per column
        if columns.shape[1] != self.counts.shape[1]:
            raise ValueError(f"a block of {columns.shape[1]} items for counts over {self.counts.shape[1]}")
        rows = np.empty(columns.shape[0], dtype=np.intp)
        for j, column in enumerate(columns):
            rows[j] = self._index.setdefault(column.tobytes(), len(self._columns))
            if rows[j] == len(self._columns):
                self._columns.append(column)
        return rows

    @property
    def n_distinct(self) -> int:
        return len(self._columns)

    def product(self) -> np.ndarray:
        """(n_distinct, B): each distinct column's resampled sums (multiplied on the first call).

        The counts may be kept compact (uint8): they are converted to float64 a block of resamples at a
        time (at most :data:`BLOCK` numbers), so a group of tens of thousands of items never holds a
        float64 copy of its whole count matrix. Blocks split the resamples, not the sum over items.
        """
        if self._product is None:
            B, n = self.counts.shape
            distinct = np.stack(self._columns) if self._columns else np.zeros((0, n))
            if self.counts.dtype == np.float64 and B * n <= BLOCK:
                self._product = distinct @ self.counts.T
            else:
                self._product = np.empty((distinct.shape[0], B))
                # The same blocks as ever (the matrix shapes fix how a BLAS kernel adds), converted into one buffer
                # and multiplied straight into the product.
                step = max(1, BLOCK // max(n, 1))
                buf = self._scratch(min(step, B) * n)
                for start in range(0, B, step):
                    rows = self.counts[start:start + step]
                    block = buf[:rows.size].reshape(rows.shape)
                    np.copyto(block, rows, casting="unsafe")
                    np.matmul(distinct, block.T, out=self._product[:, start:start + step])
        return self._product

    def sums(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows), B) resampled sums of the columns at ``rows`` (from :meth:`add`)."""
        return self.product()[rows]

    def rows(self, rows: np.ndarray) -> list[np.ndarray]:
        """The resampled sums of the columns at ``rows`` as read-only views (B,) of the product: no copy of a block
        that several cells' columns share."""
        product = self.product()
        product.setflags(write=False)
        return [product[int(k)] for k in rows]
