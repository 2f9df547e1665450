"""How much single items move a ratio of sums: their share of each sum, the item ratios and the leave-one-out range.

A ratio of sums ΣLᵢ / ΣL*ᵢ is the mean of the item ratios Lᵢ / L*ᵢ weighted by L*ᵢ, so no resample of
items can leave the range of the item ratios; where one item carries most of a sum, the ratio (and a
bootstrap interval of it) is mostly that item's. These diagnostics say when that is so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["INFLUENTIAL_SHARE", "RatioInfluence", "ratio_influence"]

#: An item carrying more than this share of a sum makes its cell ``influential``.
INFLUENTIAL_SHARE = 0.5

_NAN = float("nan")


@dataclass(frozen=True)
class RatioInfluence:
    """Single items' weight in one ratio of sums Σxᵢ / Σyᵢ over a cell's items (their seeds added up).

    ``top_share``: the largest share one item has of either sum; ``item_min``/``item_max``: the range
    of the item ratios xᵢ / yᵢ (items with yᵢ > 0); ``loo_lo``/``loo_hi``: the range of the ratio with
    one item left out (NaN with fewer than two items).
    """

    ratio: float
    top_share: float
    item_min: float
    item_max: float
    loo_lo: float
    loo_hi: float

    @property
    def dominated(self) -> bool:
        """One item carries more than :data:`INFLUENTIAL_SHARE` of a sum."""
        return bool(self.top_share > INFLUENTIAL_SHARE)

    @property
    def loo_crosses_one(self) -> bool:
        """Leaving some one item out puts the ratio on the other side of 1."""
        return bool(self.loo_lo < 1.0 < self.loo_hi)


def ratio_influence(x: np.ndarray, y: np.ndarray) -> RatioInfluence:
    """How much single items weigh in a ratio of sums Σx / Σy: largest share, item ratios, leave-one-out range.

    Parameters
    ----------
    x, y : per-item totals (an item's seeds added up) of the numerator's and the denominator's sums.

    Returns
    -------
    RatioInfluence
        The ratio, the largest share one item has of either sum, the smallest and largest item ratio,
        and the smallest and largest ratio with one item left out (NaN where undefined).

    Examples
    --------
    >>> inf = ratio_influence(np.array([1.0, 2.0, 30.0]), np.array([1.0, 2.0, 5.0]))
    >>> round(inf.ratio, 3), round(inf.top_share, 3), inf.item_min, inf.item_max, inf.dominated
    (4.125, 0.909, 1.0, 6.0, True)
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    sx, sy = float(x.sum()), float(y.sum())
    with np.errstate(all="ignore"):
        shares = [v.max() / s for v, s in ((x, sx), (y, sy)) if v.size and s > 0]
        items = x[y > 0] / y[y > 0]
        loo = (sx - x) / (sy - y) if x.size > 1 else np.empty(0)
    loo = loo[np.isfinite(loo)]
    return RatioInfluence(ratio=sx / sy if sy > 0 else _NAN, top_share=float(max(shares)) if shares else _NAN,
                          item_min=float(items.min()) if items.size else _NAN,
                          item_max=float(items.max()) if items.size else _NAN,
                          loo_lo=float(loo.min()) if loo.size else _NAN, loo_hi=float(loo.max()) if loo.size else _NAN)
