"""Multiplicity adjustments of p-values across the tests of a report (one definition each).

``holm`` controls the family-wise error rate (Holm 1979, step-down Bonferroni); ``benjamini_hochberg``
controls the false discovery rate (Benjamini & Hochberg 1995, step-up). Both return adjusted
p-values in the input order (NaN entries are not tests: they stay NaN and do not count in the family),
as statsmodels.stats.multitest.multipletests(method='holm' / 'fdr_bh') does for the finite ones.
"""

from __future__ import annotations

import numpy as np


def _finite(p) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, dtype=float)
    return p, np.flatnonzero(np.isfinite(p))


def holm(p) -> np.ndarray:
    """Holm step-down adjusted p-values, to control the family-wise error rate over a report's tests.

    max over j ≤ i of min(1, (m − j) p_(j)), returned in input order.

    Parameters
    ----------
    p : p-values; NaN entries are not tests (they stay NaN and do not count in m).

    Returns
    -------
    numpy.ndarray
        The adjusted p-values, in the order given.

    Examples
    --------
    >>> holm([0.01, 0.04, float("nan"), 0.03]).tolist()
    [0.03, 0.06, nan, 0.06]
    """
    p, idx = _finite(p)
    out = np.full(p.shape, np.nan)
    m = idx.size
    if m == 0:
        return out
    order = idx[np.argsort(p[idx], kind="mergesort")]
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


def benjamini_hochberg(p) -> np.ndarray:
    """Benjamini–Hochberg step-up adjusted p-values (q-values), to control the false discovery rate over a report's tests.

    min over j ≥ i of min(1, m p_(j) / j), returned in input order.

    Parameters
    ----------
    p : p-values; NaN entries are not tests (they stay NaN and do not count in m).

    Returns
    -------
    numpy.ndarray
        The q-values, in the order given.

    Examples
    --------
    >>> [round(q, 4) for q in benjamini_hochberg([0.01, 0.04, float("nan"), 0.03]).tolist()]
    [0.03, 0.04, nan, 0.04]
    """
    p, idx = _finite(p)
    out = np.full(p.shape, np.nan)
    m = idx.size
    if m == 0:
        return out
    order = idx[np.argsort(p[idx], kind="mergesort")]
    raw = m * p[order] / np.arange(1, m + 1)
    adj = np.minimum(1.0, np.minimum.accumulate(raw[::-1])[::-1])
    out[order] = adj
    return out
