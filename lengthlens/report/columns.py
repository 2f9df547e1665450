"""The report's columns: which columns a table shows, their headers, formats and colours, and how a value is written.

Formatting lives here once so that the HTML, the PDF and the tests agree on how a number is written:
:func:`fmt` is what a reader sees, and tests format CSV values with it to find them in the PDF text.
The columns a table shows come from its declaration (:mod:`lengthlens.analyses.outputs`: a column with a
label is shown, in declaration order); a table nobody described shows every column.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from lengthlens.analyses.outputs import Column, ReportAnalysis


def _labels(analyses: tuple[ReportAnalysis, ...], metrics: Any) -> dict[str, str]:
    from lengthlens.analyses.outputs import KEY_COLUMNS

    out = {k: label for k, (_, label) in KEY_COLUMNS.items()}
    for m in metrics.metrics:
        out.setdefault(m.name, m.label)
    for a in analyses:
        for t in a.outputs.tables:
            for c in t.all_columns():
                if c.label is not None and "{" not in c.name:
                    out.setdefault(c.name, c.label)
    return out


def labels() -> dict[str, str]:
    """Every declared column's header (the keys', the registry's metrics', the analyses' shown columns): the header of a
    column wherever a table nobody described shows it."""
    from lengthlens.analyses import registry
    from lengthlens.stats.metrics import registry as metrics

    analyses, reg = registry.analyses(), metrics()
    if _LABELS[0] is not analyses or _LABELS[1] is not reg:  # made once per registry in use
        _LABELS[:] = [analyses, reg, _labels(analyses, reg)]
    return _LABELS[2]


_LABELS: list[Any] = [None, None, {}]


#: Magnitudes from which a decimal (``fN``, ``auto``) or an integer is written as ``m×10ᵏ``: an interval's limit of
#: 1e300 (a ratio over a resampled zero) would otherwise be 300 digits that run off the page.
SCIENTIFIC_FROM = {"decimal": 1e5, "int": 1e12}
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _scientific(v: float) -> str:
    """``v`` as two significant digits times a power of ten: 3.4×10¹⁵ (at most 9 characters up to 10³⁰⁸)."""
    mant, exp = f"{v:.1e}".split("e")
    return f"{mant.replace('-', '−')}×10{str(int(exp)).translate(_SUPERSCRIPT)}"


def fmt(v: Any, kind: str = "auto") -> str:
    """A value as the report writes it: ``f2``/``f3``/``f1`` fixed decimals, ``int``, ``pct``, ``p`` (p-value), ``auto``.

    A magnitude of :data:`SCIENTIFIC_FROM` or more is written ``m×10ᵏ`` so that no number is wider than a column.

    Examples
    --------
    >>> fmt(1.23456, "f2"), fmt(2.5e300, "f2"), fmt(1234, "int")
    ('1.23', '2.5×10³⁰⁰', '1,234')
    """
    if v is None:
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return "–"
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
    if kind == "text" or isinstance(v, str):
        return str(v)
    whole = kind in ("int", "rank") or kind == "auto" and float(v).is_integer()
    if abs(v) >= SCIENTIFIC_FROM["int" if whole else "decimal"] and kind not in ("pct", "p"):
        return _scientific(float(v))
    if kind == "int":
        return f"{round(v):,}"
    if kind.startswith("f") and kind[1:].isdigit():
        # An extreme limit (a ratio's interval when a resample's denominator is near 0) in 3 significant
        # digits: 300 printed digits would push the table's later columns out of view.
        return f"{v:.3g}" if abs(v) >= 1e5 else f"{v:.{int(kind[1:])}f}"
    if kind == "rank":  # a rank (or a median of ranks): an integer, or a half between two
        return f"{int(v):,}" if float(v).is_integer() else f"{v:.1f}"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "p":
        return "<0.001" if v < 0.001 else f"{v:.3f}"
    # auto: integers as integers, otherwise 3 decimals (4 significant digits for tiny values)
    if isinstance(v, (int, np.integer)) or float(v).is_integer() and abs(v) >= 10:
        return f"{int(v):,}"
    if v != 0 and abs(v) < 0.01:
        return f"{v:.2g}"
    return f"{v:.3f}"


@dataclass(frozen=True)
class Col:
    """One displayed column: a source column, its label and format; ``ci`` shows ``[lo, hi]`` from <stem>_lo/_hi."""

    name: str
    label: str | None = None
    kind: str = "auto"
    ci: str | None = None  # interval stem, e.g. "lambda" -> lambda_lo, lambda_hi
    css: Callable[[dict[str, Any]], str] | None = None
    left: bool = False
    title: str | None = None  # tooltip

    def text(self) -> str:
        """The header's text."""
        return self.label or labels().get(self.name, self.name.replace("_", " "))

    def parts(self, row: dict[str, Any]) -> tuple[str, str, str]:
        """One row's cell as (value, interval ``[lo, hi]`` or "", colour class or ""): what the HTML and the PDF write."""
        ci = ""
        if self.ci and (row.get(f"{self.ci}_lo") is not None):
            lo, hi = row.get(f"{self.ci}_lo"), row.get(f"{self.ci}_hi")
            if not (_nan(lo) and _nan(hi)):
                ci = f"[{fmt(lo, self.kind)}, {fmt(hi, self.kind)}]"
        return fmt(row.get(self.name), self.kind), ci, (self.css(row) if self.css else "") or ""


def _nan(v: Any) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))


def auto_columns(df: pd.DataFrame, *, first: Sequence[str] = (), skip: Iterable[str] = ()) -> list[Col]:
    """Columns for a frame nobody described: ``first`` in order, then the rest; x_lo/x_hi fold into x's interval."""
    skip = set(skip)
    names = [c for c in first if c in df.columns] + [c for c in df.columns if c not in first]
    stems = set(df.columns)
    cols: list[Col] = []
    for c in names:
        if c in skip:
            continue
        if c.endswith(("_lo", "_hi")) and c[:-3] in stems:
            continue
        ci = c if f"{c}_lo" in stems and f"{c}_hi" in stems else None
        left = df[c].dtype == object and not pd.api.types.is_numeric_dtype(df[c])
        kind = "p" if c.endswith("_p") or c == "p" else ("text" if left else "auto")
        cols.append(Col(c, kind=kind, ci=ci, left=left))
    return cols


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts, NaN as None. One object-array conversion: ``to_dict("records")`` boxes value by value
    through pandas' indexing (a third of the HTML tables' time at paper scale)."""
    cols = list(df.columns)
    return [{k: (None if _nan(v) else v) for k, v in zip(cols, row)} for row in df.to_numpy(dtype=object)]


# --- the report's described tables ---------------------------------------------------------

#: Estimates coloured against another column of their row instead of a number: ℓ̄ against its baseline's ℓ̄*
#: (a rule moves acceptance length from its baseline's, which is 0 for some methods and above 1 for others).
REFERENCE_COLUMNS = {"l_bar": "l_bar_star"}


def verdict_css(name: str, lo: str | None = None, hi: str | None = None, better: str | None = None,
                reference: float | str = 1.0) -> Callable[[dict[str, Any]], str]:
    """The one colouring rule of every estimate: "loss" when its whole interval lies on the worse side of
    ``reference`` (a number, or the name of the row's column holding it), "win" when it lies wholly on the better
    side, nothing when the interval crosses it or is missing."""
    lo, hi = lo or f"{name}_lo", hi or f"{name}_hi"

    def css(row: dict[str, Any]) -> str:
        low, high = row.get(lo), row.get(hi)
        ref = row.get(reference) if isinstance(reference, str) else reference
        if better is None or _nan(low) or _nan(high) or _nan(ref):
            return ""
        above, below = low > ref, high < ref
        if better == "lower":
            return "loss" if above else ("win" if below else "")
        return "loss" if below else ("win" if above else "")
    return css


def cell_columns() -> list[Col]:
    """The report's cell table: keys, then every registry metric marked for it (label, format, interval, colour)."""
    from lengthlens.stats.metrics import registry

    cols = [Col("dataset", left=True, kind="text"), Col("method", "rule", "text", left=True),
            Col("params", "params", "text", left=True), Col("n_items", "items", "int"), *VERDICT_COLS]
    for m in registry().metrics:
        if not m.table:
            continue
        ref = REFERENCE_COLUMNS.get(m.name, m.reference)
        css = verdict_css(m.name, f"{m.stem}_lo", f"{m.stem}_hi", m.better, ref) if m.interval else None
        if m.name == "accuracy_delta_pp":
            css = _acc_css
        cols.append(Col(m.name, m.label, m.fmt, ci=m.stem if m.interval else None, css=css, title=m.description))
    return cols + [Col("n_graded", "graded", "int", css=lambda r: "partial" if r.get("graded_partial") else "",
                       title="runs graded on both sides (only these enter accuracy)"),
                   Col("accuracy_p_holm", "p Holm", "p")]


def colour_rules() -> list[tuple[str, str, str]]:
    """The cell table's colouring rule per coloured estimate: (label, better side, reference), from the same registry
    rows and :data:`REFERENCE_COLUMNS` the colours come from, so that the legend states the rule in force."""
    from lengthlens.stats.metrics import registry

    labels = {m.name: m.label for m in registry().metrics}
    out = []
    for m in registry().metrics:
        if m.table and m.interval and m.better and m.name != "accuracy_delta_pp":
            ref = REFERENCE_COLUMNS.get(m.name)
            out.append((m.label, m.better, labels.get(ref, ref) if ref else f"{m.reference:g}"))
    return out


def _acc_css(row: dict[str, Any]) -> str:
    """Accuracy change: grey italic when the cell is graded on fewer than half its items; red when its loss flag
    fires (the accuracy verdict "worse"), green when its whole interval lies above 0."""
    if row.get("graded_partial"):
        return "partial"
    if row.get("drop_2pp") is True or row.get("drop_2pp") == 1:
        return "loss"
    return "win" if verdict_css("accuracy_delta_pp", "accuracy_delta_lo", "accuracy_delta_hi", "higher", 0.0)(row) == "win" else ""


def _verdict_class(col: str) -> Callable[[dict[str, Any]], str]:
    """The verdict's colour: slower or worse in red, faster in green, nothing for can't tell or no detectable change."""
    def css(row: dict[str, Any]) -> str:
        return {"faster": "win", "slower": "loss", "worse": "loss"}.get(str(row.get(col)), "")
    return css


#: The cell table's verdict columns (lengthlens.analyses.verdicts), coloured by the verdict itself.
VERDICT_COLS = [
    Col("verdict_rounds", "rounds", "text", css=_verdict_class("verdict_rounds"),
        title="faster / slower / can't tell: R/R*'s interval below 1, above 1, or holding 1"),
    Col("verdict_time", "time", "text", css=_verdict_class("verdict_time"), title="the same from T/T*'s interval"),
    Col("verdict_accuracy_text", "accuracy", "text", left=True, css=_verdict_class("verdict_accuracy"),
        title="worse: the one-sided loss test fires; else no detectable change, with the smallest drop the test "
              "detects with 80 % power (accuracy_mdd_pp)"),
]

# --- columns from the declarations ---------------------------------------------------------

def _tone(column: Column) -> Callable[[dict[str, Any]], str] | None:
    """A declared column's colouring: by its interval against its reference (``better``), or by its ``tone``."""
    name = column.name
    if column.better is not None and column.interval:
        stem = column.stem or name
        return verdict_css(name, f"{stem}_lo", f"{stem}_hi", column.better, column.reference)
    if column.tone == "loss_if_positive":
        return lambda r: "loss" if (r.get(name) or 0) > 0 else ""
    if column.tone == "win_if_positive":
        return lambda r: "win" if (r.get(name) or 0) > 0 else ""
    if column.tone == "loss_if_negative":
        return lambda r: "loss" if (r.get(name) or 0) < 0 else ""
    if column.tone == "verdict":
        return _verdict_class(name)
    return None


def col_of(column: Column) -> Col:
    """The displayed column of a declared one: its label, format, interval, colour and its description as a tooltip."""
    return Col(column.name, column.label, column.fmt, ci=(column.stem or column.name) if column.interval else None,
               css=_tone(column), left=column.fmt == "text", title=column.description)


def _declared(name: str, analyses: Sequence[ReportAnalysis] | None) -> list[Column]:
    from lengthlens.analyses import registry

    t = registry.table(name, tuple(analyses) if analyses else None)
    return [c for c in t.all_columns() if c.shown] if t is not None else []


#: Columns of tables nobody described that are bookkeeping, not for readers.
_NOISE = ("alpha",)


def described_columns(name: str, df: pd.DataFrame, analysis: Any = None) -> list[Col]:
    """The columns the report shows of the table ``name``: its declared shown columns present in ``df``, in
    declaration order; every column (intervals folded) where none is declared."""
    spec = [col_of(c) for c in _declared(name, getattr(analysis, "analyses", None)) if c.name in df.columns]
    if spec:
        shown = {c.name for c in spec}
        return serving_first(spec, df, after="params" if "params" in shown else None)
    return auto_columns(df, first=("target", "draft", "dataset", "method", "params"),
                        skip=[c for c in _NOISE if c in df.columns])


declared_columns = described_columns


def serving_first(cols: list[Col], df: pd.DataFrame, *, after: str | None = None) -> list[Col]:
    """``cols`` with the serving condition shown (after column ``after``, else first) where ``df`` has several: rows
    under different loads are different cells and must not read as repeats of one."""
    if not several_loads(df) or any(c.name == "serving" for c in cols):
        return cols
    at = next((k + 1 for k, c in enumerate(cols) if c.name == after), 0)
    return [*cols[:at], Col("serving", "serving", "text", left=True), *cols[at:]]


def several_loads(df: pd.DataFrame) -> bool:
    """Whether the rows of ``df`` come under more than one serving condition."""
    from lengthlens.data.serving import serving_conditions

    return "serving" in df and not df.empty and len(serving_conditions(df["serving"].fillna(""))) > 1


def by_load(df: pd.DataFrame) -> pd.DataFrame:
    """``df``'s rows with the serving conditions in load order (c=1, 4, 16, 64, not the text's c=1, 16, 4, 64) within
    each target, draft and dataset, rows of one load in their order; ``df`` itself with one condition or none.

    Examples
    --------
    >>> d = pd.DataFrame({"dataset": "x", "method": ["a", "a", "a"], "serving": ["c=1", "c=16", "c=4"]})
    >>> by_load(d)["serving"].tolist()
    ['c=1', 'c=4', 'c=16']
    """
    from lengthlens.data.serving import serving_conditions

    if not several_loads(df):
        return df
    serving = df["serving"].fillna("").astype(str)
    rank = serving.map({s: i for i, s in enumerate(serving_conditions(serving))})
    outer = [c for c in ("target", "draft", "dataset") if c in df.columns]
    group = df.groupby(outer, sort=False, dropna=False).ngroup() if outer else 0
    order = pd.DataFrame({"g": group, "r": rank}, index=df.index).sort_values(["g", "r"], kind="stable").index
    return df.loc[order]


def table3_columns(t3: pd.DataFrame, analysis: Any = None) -> list[Col]:
    """Table 3's columns (the serving condition first where it has several); the count of partly graded cells only
    when there are any."""
    cols = described_columns("table3", t3, analysis)
    if "n_graded_partial" not in t3 or not (t3["n_graded_partial"] > 0).any():
        cols = [c for c in cols if c.name != "n_graded_partial"]
    return serving_first(cols, t3)


def with_verdict_text(cells: pd.DataFrame) -> pd.DataFrame:
    """The cell table with its accuracy verdict in words, the minimum detectable drop beside "no detectable change"."""
    from lengthlens.report.wording import accuracy_verdict_text

    if cells.empty or "verdict_accuracy" not in cells.columns:
        return cells
    mdd = cells["accuracy_mdd_pp"] if "accuracy_mdd_pp" in cells.columns else [None] * len(cells)
    return cells.assign(verdict_accuracy_text=[accuracy_verdict_text(v, m) for v, m in zip(cells["verdict_accuracy"], mdd)])


def table4_columns(analysis: Any = None) -> list[Col]:
    """Table 4's columns in the report: target and draft go to a header row per pair, the rule loses its suffix."""
    cols = [col_of(c) for c in _declared("table4", getattr(analysis, "analyses", None))]
    return [replace(c, name="rule") if c.name == "method" else c for c in cols]


NO_TABLE4_TEXT = ("The logs have no force-commit arm (a `<rule>_force_commit` method with params "
                  "`alpha<a>_t<threshold>`), so there is no Table 4 for these runs.")


def table4_parts(t4: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, int] | None:
    """Table 4's arms that fired, its total row (dataset "all") and the arms that never fired, with the rule's suffix
    dropped, and the number of intervention arms; None without a force-commit arm."""
    if t4 is None or t4.empty:
        return None
    df = t4.copy()
    df["rule"] = df["method"].astype(str).str.replace(r"_force_commit$", "", regex=True)
    total = df[df["method"] == "all"].assign(dataset="all", rule="", params="")
    arms = df[df["method"] != "all"]
    return arms[arms["fired"] > 0], total, arms[arms["fired"] == 0], len(arms)
