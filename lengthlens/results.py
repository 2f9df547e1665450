"""The result types every analysis returns: one interval, one estimate, one test, like scipy.stats' results.

They are small frozen dataclasses with a ``to_frame()`` (pandas, imported when called) and an HTML
repr for Jupyter. They import nothing numerical, so that :mod:`lengthlens.stats` (numpy and scipy
only) can return them.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ConfidenceInterval", "Estimate", "TestResult", "frame", "frame_html"]

_NAN = float("nan")


@dataclass(frozen=True)
class ConfidenceInterval:
    """A two-sided interval; NaN limits mean it is not defined (e.g. too few items), ±inf that it is unbounded."""

    low: float
    high: float

    def __contains__(self, x: float) -> bool:
        return self.low <= x <= self.high

    def __iter__(self):
        """``low, high = interval``, as scipy's intervals unpack."""
        return iter((self.low, self.high))

    @property
    def defined(self) -> bool:
        """Both limits are numbers (finite or infinite)."""
        return not (math.isnan(self.low) or math.isnan(self.high))


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval and how the interval was made.

    ``method`` names the interval actually used (``studentized``, ``percentile``, ``bca``, ``score``,
    ``sandwich``, ...; empty when the estimate has no interval). ``note`` says why it differs from the
    method asked for (e.g. the bootstrap-t was unbounded and the percentile interval stands in) or why
    the estimate is undefined. ``undefined_resamples`` counts resamples where the statistic had no value
    (e.g. a zero denominator): they are left out of the interval and reported rather than hidden.
    ``replicates`` is the statistic in every resample (a numpy array, NaN where undefined) when the
    caller asked to keep it (``keep_replicates=True``), else None.

    Examples
    --------
    >>> e = Estimate(1.25, ConfidenceInterval(1.1, 1.4), method="percentile", confidence_level=0.95)
    >>> f"{e:.2f}"
    '1.25 [1.10, 1.40]'
    """

    point: float
    confidence_interval: ConfidenceInterval | None = None
    standard_error: float = _NAN
    method: str = ""
    confidence_level: float = _NAN
    undefined_resamples: int = 0
    note: str = ""
    replicates: Any = field(default=None, repr=False, compare=False)

    @property
    def low(self) -> float:
        return self.confidence_interval.low if self.confidence_interval is not None else _NAN

    @property
    def high(self) -> float:
        return self.confidence_interval.high if self.confidence_interval is not None else _NAN

    def __format__(self, spec: str) -> str:
        spec = spec or ".3g"
        if self.confidence_interval is None:
            return format(self.point, spec)
        return f"{format(self.point, spec)} [{format(self.low, spec)}, {format(self.high, spec)}]"

    def __str__(self) -> str:
        return format(self)

    def to_frame(self) -> pd.DataFrame:
        """One row: point, low, high, standard error, method, level, undefined resamples, note."""
        return frame([{"point": self.point, "low": self.low, "high": self.high, "standard_error": self.standard_error,
                       "method": self.method, "confidence_level": self.confidence_level,
                       "undefined_resamples": self.undefined_resamples, "note": self.note}])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame())


@dataclass(frozen=True)
class TestResult:
    """A hypothesis test: its statistic, p-value and the test's name (e.g. ``mcnemar_exact``, ``sign_flip_exact``)."""

    statistic: float
    pvalue: float
    method: str

    def to_frame(self) -> pd.DataFrame:
        return frame([{f.name: getattr(self, f.name) for f in fields(self)}])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame())


def frame(rows: list[dict[str, Any]] | dict[str, Any], columns: list[str] | None = None) -> pd.DataFrame:
    """A pandas DataFrame from records (or columns); the one place result objects import pandas."""
    import pandas as pd

    return pd.DataFrame(rows, columns=columns)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def frame_html(df: pd.DataFrame, title: str | None = None, max_rows: int = 60) -> str:
    """A compact HTML table for notebooks (numbers to 4 significant digits)."""
    shown = df.head(max_rows)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>"
                   for r in shown.itertuples(index=False))
    more = f"<p>… {len(df) - max_rows} more rows (use .to_frame())</p>" if len(df) > max_rows else ""
    cap = f"<caption>{html.escape(title)}</caption>" if title else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}"
