"""HTML tables of the report: explicit columns for the paper's tables, sensible defaults for any other frame.

Formatting lives here once so that the HTML, the PDF (same HTML) and the tests agree on how a
number is written: :func:`fmt` is what a reader sees, and tests format CSV values with it to find
them in the PDF text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from markupsafe import Markup

#: Display labels of known columns; unknown columns show their name with spaces.
LABELS: dict[str, str] = {
    "target": "target", "draft": "draft", "dataset": "dataset", "method": "rule", "params": "params",
    "alpha": "α", "n_items": "items", "n_runs": "runs", "n_graded": "graded", "n_cells": "cells",
    "l_bar": "ℓ̄", "l_bar_star": "ℓ̄*", "gain": "gain", "lambda": "λ", "rounds_ratio": "R/R*",
    "rounds_ratio_predicted": "λ/gain", "time_ratio": "T/T*", "accuracy": "acc", "accuracy_star": "acc*",
    "accuracy_delta_pp": "Δacc pp", "censored_frac": "cens", "censored_frac_star": "cens*",
    "km_median": "KM median", "km_median_star": "KM median*", "lambda_uncensored_pairs": "λ uncensored pairs",
    "gm_ratio_aft_lognormal": "GM ratio AFT log-normal", "gm_ratio_aft_weibull": "GM ratio AFT Weibull",
    "extra_chars": "extra chars", "extra_chars_thinking": "extra chars thinking", "thinking_share": "thinking share",
    "fired": "fired", "correct_before": "correct before", "correct_after": "correct after",
    "wrong_to_right": "wrong→right", "right_to_wrong": "right→wrong", "still_capped": "still capped",
    "accuracy_p": "paired p", "mcnemar_p": "paired p", "n_lossy_only": "lossy-only tokens", "lossy_only_rate": "lossy-only rate",
    "budget": "budget",
}


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

    def header(self) -> str:
        # Headers wrap between words only, never inside a symbol such as R/R* or λ_lo>1.
        words = self.text().split(" ")
        lab = " ".join(f'<span class="nw">{html.escape(w)}</span>' for w in words if w)
        if self.ci:
            lab += " <span class=ci>[95%]</span>"
        cls = ' class="l"' if self.left else ""
        tip = f' title="{html.escape(self.title)}"' if self.title else ""
        return f"<th{cls}{tip}>{lab}</th>"

    def text(self) -> str:
        """The header's text."""
        return self.label or LABELS.get(self.name, self.name.replace("_", " "))

    def parts(self, row: dict[str, Any]) -> tuple[str, str, str]:
        """One row's cell as (value, interval ``[lo, hi]`` or "", colour class or ""): what the HTML and the PDF write."""
        ci = ""
        if self.ci and (row.get(f"{self.ci}_lo") is not None):
            lo, hi = row.get(f"{self.ci}_lo"), row.get(f"{self.ci}_hi")
            if not (_nan(lo) and _nan(hi)):
                ci = f"[{fmt(lo, self.kind)}, {fmt(hi, self.kind)}]"
        return fmt(row.get(self.name), self.kind), ci, (self.css(row) if self.css else "") or ""

    def cell(self, row: dict[str, Any]) -> str:
        value, ci, css = self.parts(row)
        txt = html.escape(value)
        if ci:
            txt += f" <span class=ci>{html.escape(ci)}</span>"
        classes = ["l"] if self.left else []
        if css:
            classes.append(css)
        cls = f' class="{" ".join(classes)}"' if classes else ""
        return f"<td{cls}>{txt}</td>"


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


def table_html(df: pd.DataFrame, cols: Sequence[Col], *, css: str = "", bold: Callable[[dict[str, Any]], bool] | None = None,
               caption: str | None = None) -> Markup:
    """A plain table."""
    head = "".join(c.header() for c in cols)
    body = []
    for r in records(df):
        b = ' class="total"' if bold and bold(r) else ""
        body.append(f"<tr{b}>" + "".join(c.cell(r) for c in cols) + "</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    cls = f' class="{css}"' if css else ""
    return Markup(f"<table{cls}>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def grouped_html(df: pd.DataFrame, cols: Sequence[Col], *, group: Sequence[str] = ("target", "draft"),
                 sub: str | None = "dataset", open_first: bool = True, css: str = "") -> Markup:
    """One collapsible block per ``group`` (target–draft pair); inside, a table with a header row per ``sub`` value.

    At paper scale (12 pairs x 6 datasets x 5 rules) this is 12 blocks of 30 rows instead of one
    360-row table; print CSS opens every block.
    """
    if df.empty:
        return Markup("<p class=muted>No rows.</p>")
    group = [g for g in group if g in df.columns]
    shown = [c for c in cols if c.name not in group and c.name != sub]
    head = "".join(c.header() for c in shown)
    blocks = []
    groups = df.groupby(group, sort=True) if group else [((), df)]
    for i, (key, g) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        label = " / ".join(str(k) for k in key) or "all"
        rows = []
        parts = g.groupby(sub, sort=True) if sub and sub in g.columns else [(None, g)]
        for sk, sg in parts:
            if sk is not None:
                rows.append(f'<tr class="sub"><th class="l" colspan="{len(shown)}">{html.escape(str(sk))} '
                            f'<span class=muted>({len(sg)})</span></th></tr>')
            for r in records(sg):
                rows.append("<tr>" + "".join(c.cell(r) for c in shown) + "</tr>")
        opened = " open" if (open_first and i == 0) else ""
        cls = f' class="{css}"' if css else ""
        # Each table scrolls on its own: a wide one does not push the page or its block's summary out of view.
        blocks.append(f'<details class="group"{opened}><summary>{html.escape(label)} <span class=muted>({len(g)} rows)</span>'
                      f'</summary><div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
                      f'</tbody></table></div></details>')
    return Markup("".join(blocks))


# --- the report's described tables ---------------------------------------------------------

TABLE3_COLS = [
    Col("method", "rule", "text", left=True),
    Col("n_cells", "cells", "int"),
    Col("gain_mean", "gain mean", "f3"), Col("gain_median", "gain median", "f3"),
    Col("lambda_mean", "λ mean", "f3"), Col("lambda_median", "λ median", "f3"),
    Col("rounds_ratio_mean", "R/R* mean", "f3"),
    Col("rounds_ratio_median", "R/R* median", "f3"),
    Col("time_ratio_mean", "T/T* mean", "f3"),
    Col("time_ratio_median", "T/T* median", "f3"),
    Col("time_per_round_ratio_median", "time/round median", "f3", title="(T/T*)/(R/R*): wall time per verifier round"),
    Col("n_lambda_gt_1", "λ>1", "int"), Col("n_lambda_lo_gt_1", "λ_lo>1", "int", title="interval entirely above 1"),
    Col("n_rounds_ratio_gt_1", "R/R*>1", "int"), Col("n_time_ratio_gt_1", "T/T*>1", "int"),
    Col("n_graded", "graded", "int"),
    Col("n_drop_2pp", "drop >2pp (test)", "int", title="a loss of more than 2 points by the one-sided test at 2.5 % (drop_2pp)"),
    Col("n_drop_2pp_point", "drop ≥2pp (point)", "int", title="the study's rule: point estimate of Δacc ≤ −2 points"),
    Col("accuracy_mdd_pp_median", "detectable drop pp", "f0",
        title="median over graded cells of the smallest true drop drop_2pp detects with 80 % power"),
    Col("n_drop_holm", "drop, Holm p<0.05", "int", title="lower accuracy, Holm-adjusted mid-p < 0.05 over the accuracy family"),
    Col("accuracy_delta_pp_mean", "Δacc mean pp", "f1", ci="accuracy_delta_pp_mean"),
    Col("n_predicted_win_time_loses", "λ/gain<1, T/T*≥1", "int", title="predicted rounds win but time loses"),
    Col("n_measured_win_time_loses", "R/R*<1, T/T*≥1", "int", title="measured rounds win but time loses"),
]

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

#: The decision table: a rule's verdicts counted over its cells.
VERDICT_TABLE_COLS = [
    Col("method", "rule", "text", left=True), Col("n_cells", "cells", "int"),
    Col("n_rounds_faster", "R/R* faster", "int", css=lambda r: "win" if r.get("n_rounds_faster") else ""),
    Col("n_rounds_slower", "R/R* slower", "int", css=lambda r: "loss" if r.get("n_rounds_slower") else ""),
    Col("n_rounds_cant_tell", "R/R* can't tell", "int"),
    Col("n_time_faster", "T/T* faster", "int", css=lambda r: "win" if r.get("n_time_faster") else ""),
    Col("n_time_slower", "T/T* slower", "int", css=lambda r: "loss" if r.get("n_time_slower") else ""),
    Col("n_time_cant_tell", "T/T* can't tell", "int"),
    Col("n_graded", "graded", "int"),
    Col("n_accuracy_worse", "accuracy worse", "int", css=lambda r: "loss" if r.get("n_accuracy_worse") else ""),
    Col("n_accuracy_no_change", "no detectable change", "int"),
    Col("accuracy_mdd_pp_median", "min. detectable drop pp (median)", "f1",
        title="median over the cells with no detectable change of the smallest drop they would have detected"),
    Col("n_small_excluded", "small cells left out", "int"),
]


KEY_COLS = [Col("dataset", left=True, kind="text"), Col("method", "rule", "text", left=True),
            Col("params", "params", "text", left=True)]

#: Table 4's p-value column: mid-p McNemar, or the item-level sign-flip test's mid-p with several seeds per item.
_PAIRED_P = Col("accuracy_p", "paired p", "p",
                title="mid-p McNemar; the item-level sign-flip test when items have several seeds (accuracy_test)")

#: Curated columns of the lead's per-cell tables (each shown when present; the CSVs keep every column).
DESCRIBED: dict[str, list[Col]] = {
    "censoring": KEY_COLS + [
        Col("n_items", "items", "int"), Col("censored_frac", "cens", "f2"), Col("censored_frac_star", "cens*", "f2"),
        Col("km_median", "KM median", "int", ci="km_median"), Col("km_median_star", "KM median*", "int", ci="km_median_star"),
        Col("lambda_plain", "λ plain", "f2", ci="lambda_plain"),
        Col("lambda_uncensored_pairs", "λ uncensored pairs", "f2", ci="lambda_uncensored_pairs"),
        Col("gm_ratio_aft_lognormal", "GM ratio AFT log-normal", "f2", ci="gm_ratio_aft_lognormal",
            css=verdict_css("gm_ratio_aft_lognormal", better="lower"),
            title="geometric-mean (time) ratio of the log-normal AFT fit: a typical completion stretched by, not λ"),
        Col("gm_ratio_aft_weibull", "GM ratio AFT Weibull", "f2", ci="gm_ratio_aft_weibull",
            css=verdict_css("gm_ratio_aft_weibull", better="lower")),
    ],
    "attribution": KEY_COLS + [
        Col("n_items", "items", "int"), Col("chars_mean", "chars", "int"), Col("chars_mean_star", "chars*", "int"),
        Col("extra_chars", "extra chars", "int"), Col("extra_chars_thinking", "in thinking", "int"),
        Col("extra_chars_answer", "in answer", "int"), Col("thinking_share", "thinking share", "f2", ci="thinking_share"),
        Col("thinking_share_reason", "share undefined because", "text", left=True),
        Col("item_share_q25", "item share q25", "f2"), Col("item_share_median", "item share median", "f2"),
        Col("item_share_q75", "item share q75", "f2"),
    ],
    "extra_tokens": KEY_COLS + [
        Col("n_runs_with_proposals", "runs", "int"), Col("n_accepted", "accepted", "int"),
        Col("n_lossy_only", "lossy-only", "int"), Col("lossy_only_per_accepted", "lossy-only / accepted", "f3"),
        Col("p_lossy_only_median", "p lossy-only med.", "f3"), Col("p_strict_accepted_median", "p strict-acc. med.", "f3"),
        Col("rank_lossy_only_median", "rank lossy-only med. (0\u00a0=\u00a0top)", "rank",
            title="the target's rank of the token, 0-based: 0 is its most likely token"),
        Col("rank_strict_accepted_median", "rank strict-acc. med. (0\u00a0=\u00a0top)", "rank"),
        Col("p_lossy_only_mean", "p lossy-only mean", "f3"), Col("p_strict_accepted_mean", "p strict-acc. mean", "f3"),
    ],
    "table4": [
        Col("target", left=True, kind="text"), Col("draft", left=True, kind="text")] + KEY_COLS + [
        Col("threshold", "threshold", "int"), Col("fired", "fired", "int"), Col("n_graded", "graded", "int"),
        Col("correct_before", "correct before", "int"), Col("correct_after", "correct after", "int"),
        Col("wrong_to_right", "wrong→right", "int"), Col("right_to_wrong", "right→wrong", "int"),
        Col("still_capped", "still capped", "int"), _PAIRED_P,
    ],
    "attribution_summary": [
        Col("scope", "cells", "text", left=True),
        Col("method", "rule", "text", left=True), Col("n_cells", "cells", "int"), Col("n_cells_longer", "cells longer", "int"),
        Col("n_share_undefined", "share undefined", "int", title="the interval of the extra length includes 0"),
        Col("thinking_share_median", "thinking share median", "f2"), Col("thinking_share_pooled", "pooled", "f2"),
        Col("n_share_lo_ge_90", "share lo ≥ 0.90", "int"), Col("n_share_lo_ge_92", "share lo ≥ 0.92", "int"),
        Col("n_share_point_ge_90", "share ≥ 0.90 (point)", "int"),
    ],
}
#: Columns of tables nobody described that are bookkeeping, not for readers.
_NOISE = ("alpha",)


def described_columns(name: str, df: pd.DataFrame) -> list[Col]:
    """Columns to show for one of the analysis tables by name; every column (intervals folded) for unknown ones."""
    spec = [c for c in DESCRIBED.get(name, []) if c.name in df.columns]
    if len(spec) >= 4:
        return spec
    return auto_columns(df, first=("target", "draft", "dataset", "method", "params"),
                        skip=[c for c in _NOISE if c in df.columns])


#: Table 4's columns in the report: target and draft go to a header row per pair, the rule loses its suffix.
TABLE4_COLS = [
    Col("dataset", left=True, kind="text"), Col("rule", "rule", "text", left=True), Col("params", left=True, kind="text"),
    Col("fired", "fired", "int"), Col("n_graded", "graded", "int"),
    Col("correct_before", "correct before", "int"), Col("correct_after", "correct after", "int"),
    Col("wrong_to_right", "wrong → right", "int"), Col("right_to_wrong", "right → wrong", "int"),
    Col("still_capped", "still capped", "int"), _PAIRED_P,
    Col("accuracy_before_all", "acc. all runs: base", "pct", title="accuracy of the base arm over every graded pair"),
    Col("accuracy_after_all", "forced", "pct", title="accuracy of the intervention arm over every graded pair, fired or not"),
]

NO_TABLE4_TEXT = ("The logs have no force-commit arm (a <rule>_force_commit method with params alpha<a>_t<threshold>), "
                  "so there is no Table 4 for these runs.")
NO_TABLE4 = ("The logs have no force-commit arm (a <code>&lt;rule&gt;_force_commit</code> method with params "
             "<code>alpha&lt;a&gt;_t&lt;threshold&gt;</code>), so there is no Table 4 for these runs.")


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


def table4_html(t4: pd.DataFrame | None) -> Markup:
    """Table 4 for readers: arms that fired, one header row per target–draft pair, a total; arms that never fired in a line."""
    parts = table4_parts(t4)
    if parts is None:
        return Markup(f"<p>{NO_TABLE4}</p>")
    fired, total, never, n_arms = parts
    head = "".join(c.header() for c in TABLE4_COLS)
    rows = []
    for (tgt, drf), g in fired.groupby(["target", "draft"], sort=True):
        rows.append(f'<tr class="sub"><th class="l" colspan="{len(TABLE4_COLS)}">{html.escape(str(tgt))} ← '
                    f'{html.escape(str(drf))}</th></tr>')
        rows += ["<tr>" + "".join(c.cell(r) for c in TABLE4_COLS) + "</tr>" for r in records(g)]
    for r in records(total):
        rows.append('<tr class="total">' + "".join(c.cell(r) for c in TABLE4_COLS) + "</tr>")
    out = f'<table class="t4"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>' if len(fired) else (
        "<p>The intervention never fired in any arm.</p>")
    if len(never):
        names = "; ".join(f"{r['target']} {r['dataset']} {r['rule']} {r['params']}" for r in records(never))
        out += (f'<p class="muted">{len(never)} of {n_arms} intervention arms never fired (their base runs never '
                f"reached the threshold with the thinking open), so they have nothing to show: {html.escape(names)}.</p>")
    return Markup(out)
