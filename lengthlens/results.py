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

__all__ = ["AccuracyChange", "AccuracyChangeInterval", "ConfidenceInterval", "Estimate", "PercentileInterval", "TestResult",
           "frame", "frame_html"]

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

    def to_frame(self) -> pd.DataFrame:
        """One row: low, high."""
        return frame([{"low": self.low, "high": self.high}])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame())


@dataclass(frozen=True)
class AccuracyChangeInterval:
    """An interval for an accuracy change (proportions), its standard error and the method that made it.

    ``method`` is ``tango_score`` (Tango's score interval, one graded pair per item), ``item_t`` (a t
    interval over items, several graded pairs per item) or ``tango_items`` (the items as single pairs,
    where they show no spread). NaN limits: nothing graded.
    """

    low: float
    high: float
    standard_error: float
    method: str
    confidence_level: float = _NAN

    @property
    def confidence_interval(self) -> ConfidenceInterval:
        return ConfidenceInterval(self.low, self.high)

    def __contains__(self, x: float) -> bool:
        return self.low <= x <= self.high

    def to_frame(self) -> pd.DataFrame:
        """One row: low, high, standard error, method, level."""
        return frame([{f.name: getattr(self, f.name) for f in fields(self)}])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame())


@dataclass(frozen=True)
class PercentileInterval:
    """Percentile limits of replicates along their first axis (arrays, one entry per column), and how many
    replicates of each column were undefined (NaN or infinite) and left out."""

    low: Any
    high: Any
    undefined: Any

    def to_frame(self) -> pd.DataFrame:
        """One row per column of the replicates: low, high, undefined resamples."""
        import numpy as np

        return frame({"low": np.atleast_1d(self.low), "high": np.atleast_1d(self.high),
                      "undefined_resamples": np.atleast_1d(self.undefined)})

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame())


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

    __test__ = False  # a result, not a pytest test class (doctest collection imports this module)

    statistic: float
    pvalue: float
    method: str

    def to_frame(self) -> pd.DataFrame:
        return frame([{f.name: getattr(self, f.name) for f in fields(self)}])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame())


@dataclass(frozen=True)
class AccuracyChange:
    """A cell's accuracy test results: the paired test, the loss flag, their counts and the adjusted p-values.

    ``test`` is the paired accuracy test, mid-p (McNemar with one graded pair per item, the item-level
    sign-flip test with several seeds), ``test_exact`` the same test's exact p-value; both None when nothing
    is graded. ``loss_test`` is the one-sided test of a loss of more than 2 points at 2.5 %, ``drop_2pp``
    its verdict and ``drop_2pp_point`` the study's point rule (both None when the cell is ungraded or graded
    on fewer than half its items). ``mdd_pp``: the smallest true loss (points) the loss test detects with
    80 % power. ``p_holm`` / ``q_bh``: the mid-p adjusted over the cells of the accuracy family (None
    outside it). The accuracy change itself, with its interval, is the cell's ``accuracy_delta_pp`` estimate.

    Examples
    --------
    >>> a = AccuracyChange(TestResult(-2.0, 0.25, "mcnemar_midp"), wrong_to_right=1, right_to_wrong=3)
    >>> a.p, a.to_frame()[["wrong_to_right", "right_to_wrong", "accuracy_p", "accuracy_test"]].values.tolist()
    (0.25, [[1, 3, 0.25, 'mcnemar_midp']])
    """

    test: TestResult | None = None
    test_exact: TestResult | None = None
    wrong_to_right: int | None = None
    right_to_wrong: int | None = None
    loss_test: TestResult | None = None
    drop_2pp: bool | None = None
    drop_2pp_point: bool | None = None
    mdd_pp: float = _NAN
    p_holm: float | None = None
    q_bh: float | None = None

    @property
    def p(self) -> float | None:
        """The paired test's mid-p value (cells.csv's ``accuracy_p``)."""
        return None if self.test is None else self.test.pvalue

    @property
    def p_exact(self) -> float | None:
        """The same test's exact p-value (``accuracy_p_exact``)."""
        return None if self.test_exact is None else self.test_exact.pvalue

    @property
    def drop_2pp_p(self) -> float | None:
        """The loss test's one-sided p-value (``drop_2pp_p``)."""
        return None if self.loss_test is None else self.loss_test.pvalue

    def columns(self) -> dict[str, Any]:
        """The values under cells.csv's column names."""
        return {"drop_2pp": self.drop_2pp, "drop_2pp_p": self.drop_2pp_p, "drop_2pp_point": self.drop_2pp_point,
                "accuracy_mdd_pp": self.mdd_pp, "wrong_to_right": self.wrong_to_right,
                "right_to_wrong": self.right_to_wrong, "accuracy_p": self.p,
                "accuracy_test": None if self.test is None else self.test.method, "accuracy_p_exact": self.p_exact,
                "accuracy_p_holm": self.p_holm, "accuracy_q_bh": self.q_bh}

    def to_frame(self) -> pd.DataFrame:
        """One row under cells.csv's column names."""
        return frame([self.columns()])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame())


def frame(rows: list[dict[str, Any]] | dict[str, Any], columns: list[str] | None = None) -> pd.DataFrame:
    """A pandas DataFrame from records (or columns); the one place result objects import pandas."""
    import pandas as pd

    return pd.DataFrame(rows, columns=columns)


#: Key columns a notebook table shows once, above it, when every row has the same value.
_KEY_COLUMNS = ("scope", "target", "draft", "dataset", "method", "params", "serving")
#: Interval columns written beside their estimate: (estimate, low, high) names, besides ``x``/``x_lo``/``x_hi``.
_TRIPLES = (("estimate", "low", "high"), ("point", "low", "high"))


def _is_p(column: str) -> bool:
    """A p-value column (printed as the report prints them: three decimals, "<0.001")."""
    c = column.lower()
    return c in ("p", "pvalue", "p_value") or c.endswith(("_p", "_pvalue")) or c.startswith(("p_", "accuracy_p"))


def _fmt(v: Any, column: str = "") -> str:
    """A value as the report's tables write it: integers with separators, 3 decimals (2 significant digits when tiny,
    3 when huge), p-values as 0.012 or <0.001, booleans yes/no, missing as –."""
    import numbers

    if v is None:
        return "–"
    if isinstance(v, bool) or getattr(getattr(v, "dtype", None), "kind", "") == "b":
        return "yes" if v else "no"
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}"
    if isinstance(v, numbers.Real):
        v = float(v)
        if math.isnan(v):
            return "–"
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        if _is_p(column):
            return "<0.001" if v < 0.001 else f"{v:.3f}"
        if v.is_integer() and abs(v) >= 10:
            return f"{int(v):,}" if abs(v) < 1e15 else f"{v:.3g}"
        if abs(v) >= 1e5:
            return f"{v:.3g}"
        if v != 0 and abs(v) < 0.01:
            return f"{v:.2g}"
        return f"{v:.3f}"
    return "" if isinstance(v, str) and not v else str(v)


def _display(df: pd.DataFrame) -> tuple[list[str], list[list[tuple[str, bool]]], list[str]]:
    """The columns a notebook table shows, its rows as (text, is a number) cells, and the key values said once above it.

    An estimate and its limits become one cell "1.23 [1.10, 1.40]"; a key column with one value for every row
    (of several) is said once instead of on each row.
    """
    import numbers

    cols = list(df.columns)
    said = [c for c in _KEY_COLUMNS if c in cols and len(df) > 1 and df[c].astype(str).nunique(dropna=False) == 1]
    above = [f"{c} {df[c].iloc[0]}" for c in said if str(df[c].iloc[0]) not in ("", "nan", "None")]
    limits: dict[str, tuple[str, str]] = {}
    for c in cols:
        if f"{c}_lo" in cols and f"{c}_hi" in cols:
            limits[c] = (f"{c}_lo", f"{c}_hi")
    for est, lo, hi in _TRIPLES:
        if est in cols and lo in cols and hi in cols:
            limits[est] = (lo, hi)
    hidden = set(said) | {x for pair in limits.values() for x in pair}
    shown = [c for c in cols if c not in hidden]
    rows = []
    for r in df.to_dict("records"):
        cells = []
        for c in shown:
            v = r[c]
            text = _fmt(v, c)
            if c in limits:
                lo, hi = (r[x] for x in limits[c])
                if not all(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
                    text += f" [{_fmt(lo, c)}, {_fmt(hi, c)}]"
            cells.append((text, isinstance(v, numbers.Number) and not isinstance(v, bool)))
        rows.append(cells)
    return shown, rows, above


def frame_html(df: pd.DataFrame, title: str | None = None, max_rows: int = 60) -> str:
    """A notebook table formatted like the report's: numbers as the report writes them (right-aligned), each estimate
    with its interval in one cell, and key columns that are the same on every row said once above the table.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"target": "T", "metric": ["lambda", "gain"], "estimate": [1.2345, 0.5],
    ...                    "low": [1.1, float("nan")], "high": [1.4, float("nan")], "n": [1200, 3]})
    >>> h = frame_html(df, "Cell")
    >>> "1.234 [1.100, 1.400]" in h, "<th>target</th>" in h, "target T" in h, "1,200" in h
    (True, False, True, True)
    """
    shown = df.head(max_rows)
    cols, rows, above = _display(shown)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f'<td style="text-align:{"right" if num else "left"}">{html.escape(t)}</td>'
                                    for t, num in r) + "</tr>" for r in rows)
    more = f"<p>… {len(df) - max_rows} more rows (use .to_frame())</p>" if len(df) > max_rows else ""
    text = " · ".join(x for x in (title, *above) if x)
    cap = f"<caption>{html.escape(text)}</caption>" if text else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"
