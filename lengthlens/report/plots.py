"""The report's figures as matplotlib Figures (Agg backend): returned for notebooks, inlined as SVG in the report.

Every function takes an :class:`~lengthlens.analyses.analyse.AnalysisResult` (or, where noted, the DataFrame it
needs, e.g. ``analysis.tables["cells"]``) and an optional :class:`~lengthlens.report.plot_style.VisualKey`
(the report computes one and passes it to every figure, so that a colour or marker means the same in
each), and returns a new :class:`matplotlib.figure.Figure`; nothing is shown or saved. Each figure
carries a :class:`~lengthlens.report.plot_style.Drawn` record of what it drew (:func:`drawn`), from
which :func:`figure_caption` writes its caption, counts included. :func:`to_svg` turns a figure into an
SVG string that can be inlined into HTML next to other figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

if TYPE_CHECKING:  # pragma: no cover
    from lengthlens.analyses.analyse import AnalysisResult

__all__ = ["FIGURES", "Drawn", "VisualKey", "drawn", "fig_accuracy_vs_gain", "fig_accuracy_vs_length", "fig_alpha_sweep",
           "fig_attribution", "fig_cost_per_correct", "fig_gain_vs_lambda", "fig_lambda_forest", "fig_rounds_vs_time",
           "fig_serving", "fig_survival", "fig_table4_costs", "fig_time_model", "fig_tradeoff", "few_items",
           "figure_caption", "method_colors", "to_svg", "visual_key", "with_benchmark"]

from lengthlens.report.plot_style import (
    RC,
    Drawn,
    Marks,
    VisualKey,
    attach,
    cells_of,
    clip_marks,
    clip_sentence,
    drawn,
    empty_panel,
    few_items,
    key_handles,
    key_legend,
    legend_width,
    log_limits,
    method_colors,
    ratio_ticks,
    robust_linear_limits,
    robust_log_limits,
    plural,
    subplots,
    verb,
    to_svg,
    visual_key,
    with_benchmark,
)
from lengthlens.report.plot_survival import fig_survival  # noqa: F401 - re-exported

#: Cells with fewer items than this are drawn hollow, without their interval (the cell table's ``small_n``).
SMALL = 10


def _hollow_entry(n: int, face: str = "none") -> list[Line2D]:
    """The legend entry for cells drawn hollow (fewer than SMALL items), with their count; none when there are none."""
    return ([Line2D([], [], ls="", marker="o", color="#555", markerfacecolor=face, markersize=5,
                    label=f"hollow: < {SMALL} items ({n})")] if n else [])


def _key(obj: Any, key: VisualKey | None) -> VisualKey:
    """The report's key when given, else one made from ``obj`` (a figure drawn on its own)."""
    return key if key is not None else visual_key(obj)


def _loads_in(df: pd.DataFrame, key: VisualKey) -> tuple[str, ...]:
    """The serving conditions of ``df`` in the key's load order (empty when the report has one load)."""
    if not key.by_load or df.empty or "serving" not in df:
        return ()
    present = set(df["serving"].fillna("").astype(str))
    return tuple(ld for ld in key.loads if ld in present)


def _serving(df: pd.DataFrame) -> pd.Series:
    return df["serving"].fillna("").astype(str) if "serving" in df else pd.Series("", index=df.index)


def _by_load(df: pd.DataFrame, key: VisualKey) -> list[tuple[str, pd.DataFrame]]:
    """``df`` split by serving condition, lightest load first: the facets of a figure when loads are kept apart."""
    loads = _loads_in(df, key)
    if not loads:
        return [("", df)]
    s = _serving(df)
    return [(ld, df[s == ld]) for ld in loads]


def _left_out_sentence(record: Drawn) -> str:
    """ "Left out: 34 cells with fewer than 10 items; 2 ungraded cells." ("" when nothing was left out)."""
    parts = [f"{n} {reason.format(s='' if n == 1 else 's')}" for reason, n in record.left_out.items() if n]
    return f"Left out: {'; '.join(parts)}." if parts else ""


def _load_sentence(record: Drawn, how: str) -> str:
    """How a figure keeps serving conditions apart ("" with one load)."""
    if not record.loads:
        return ""
    return f"Serving conditions kept apart, {how}: {', '.join(record.loads)}."


def _join(*sentences: str) -> str:
    return " ".join(s for s in sentences if s)


def _table3_keys(obj: AnalysisResult | pd.DataFrame) -> set[tuple] | None:
    """(target, draft, dataset, method, params, serving) of the cells Table 3 summarises (None: not known)."""
    from lengthlens.analyses.tables import table3_cells

    df = cells_of(obj)
    settings = getattr(obj, "settings", {}) or {}
    try:
        picked = table3_cells(df, settings.get("alphas", "loosest"), include_small=bool(settings.get("include_small")))
    except (KeyError, ValueError):
        return None
    return {_cell_id(r) for r in picked.to_dict("records")}


def _cell_id(r: dict) -> tuple:
    serving = r.get("serving", "")
    return (r["target"], r["draft"], r["dataset"], r["method"], r["params"],
            "" if serving is None or (isinstance(serving, float) and np.isnan(serving)) else str(serving))


def _cell_ids(df: pd.DataFrame) -> list[tuple]:
    return [_cell_id(r) for r in df.to_dict("records")]


def _graded(df: pd.DataFrame, record: Drawn, small_out: bool = False) -> pd.DataFrame:
    """The cells with an accuracy change to draw; the others are counted in ``record.left_out`` by reason."""
    if df.empty:
        return df
    ungraded = ~(df["n_graded"] > 0) if "n_graded" in df else pd.Series(True, index=df.index)
    partial = (df["graded_partial"].fillna(False).astype(bool) if "graded_partial" in df
               else pd.Series(False, index=df.index)) & ~ungraded
    small = (few_items(df) & ~ungraded & ~partial) if small_out else pd.Series(False, index=df.index)
    record.leave_out("ungraded cell{s}", int(ungraded.sum()))
    record.leave_out("cell{s} graded on fewer than half their items", int(partial.sum()))
    record.leave_out(f"graded cell{{s}} with fewer than {SMALL} items", int(small.sum()))
    return df[~ungraded & ~partial & ~small]


# --------------------------------------------------------------------------------------------------------------
# Figure: gain against λ


def fig_gain_vs_lambda(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """Per cell, the per-round gain against the length ratio on log axes; above the line lambda = gain measured rounds lose.

    R/R* = lambda / gain, so a cell breaks even in verifier rounds exactly on the diagonal: the
    "length illusion" is every point above it, where the gain acceptance length promised is eaten
    by longer completions. One panel per target–draft pair (and per serving condition where there are
    several); colour = rule, marker = benchmark. Table 3's cells (each rule at its most aggressive
    complete α) are outlined, with their intervals; every other α is drawn pale, without its interval;
    cells with few items (:func:`few_items`) are hollow.
    """
    df = cells_of(obj).reset_index(drop=True)  # positions, not whatever index a caller's frame carries
    key = _key(obj, key)
    record = Drawn(unit="cell")
    with matplotlib.rc_context(RC):
        if df.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no cells"), record)
        df = with_benchmark(df)
        record.loads = _loads_in(df, key)
        pairs = sorted(df[["target", "draft"]].drop_duplicates().itertuples(index=False, name=None))
        facets = [(p, ld) for p in pairs for ld in (record.loads or ("",))]
        ncol = min(2, len(facets))
        nrow = -(-len(facets) // ncol)
        fig, axes = subplots(nrow, ncol, figsize=(7.4 if ncol == 1 else 9.0, 4.6 if nrow == 1 else 3.4 * nrow),
                             layout="constrained", squeeze=False, sharex=True, sharey=True)
        few = few_items(df).to_numpy()
        t3 = _table3_keys(obj if not isinstance(obj, pd.DataFrame) else df)
        focus = np.array([c in t3 for c in _cell_ids(df)]) if t3 is not None else ~few
        show_ci = "lambda_lo" in df
        ci_rows = focus & ~few
        xlim = log_limits([df["gain"]])
        ylim = robust_log_limits([df["lambda"], pd.Series(list(xlim))],
                                 [df.loc[ci_rows, "lambda_lo"], df.loc[ci_rows, "lambda_hi"]] if show_ci else [])
        serving = _serving(df).to_numpy()
        for ax, ((tgt, drf), ld) in zip(axes.flat, facets):
            sel = np.flatnonzero((df["target"].to_numpy() == tgt) & (df["draft"].to_numpy() == drf)
                                 & ((serving == ld) if ld else True))
            _gain_lambda_panel(ax, df.iloc[sel], few[sel], focus[sel], key, record, show_ci, xlim, ylim)
            title = " · ".join(t for t in ((f"{tgt} ← {drf}" if len(pairs) > 1 else ""), ld) if t)
            ax.set_title(title or f"Gain against length ratio, {len(df)} cells")
        record.panels = len(facets)
        ax = axes.flat[0]  # the axes share x and y: their scale, limits and tickers are set once for all
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ratio_ticks(ax.xaxis, *xlim)
        ratio_ticks(ax.yaxis, *ylim)
        for ax in list(axes.flat)[len(facets):]:
            ax.set_visible(False)
        fig.supxlabel("per-round gain (ℓ+1)/(ℓ*+1): what acceptance length promises (log scale)", fontsize=8.5)
        fig.supylabel("length ratio λ = mean L / mean L* (log scale)", fontsize=8.5)
        extra = []
        if record.highlighted:
            extra.append(Line2D([], [], ls="", marker="o", color="#888", markeredgecolor="#111", markeredgewidth=1.0,
                                markersize=5.5, label=f"outlined: Table 3's cells ({record.highlighted})"))
        pale = record.points - record.highlighted - record.hollow
        if pale:
            extra.append(Line2D([], [], ls="", marker="o", color="#888", alpha=0.35, markersize=5,
                                label=f"pale: other α ({pale})"))
        extra += _hollow_entry(record.hollow)
        key_legend(fig, key_handles(key, record, extra=extra))
        return attach(fig, record)


def _gain_lambda_panel(ax: Any, df: pd.DataFrame, small: np.ndarray, focus: np.ndarray, key: VisualKey,
                       record: Drawn, show_ci: bool, xlim: tuple[float, float], ylim: tuple[float, float]) -> None:
    """One facet's cells with the break-even diagonal and the shaded region above it (log axes, set by the caller)."""
    marks = Marks()
    gain, lam = df["gain"].to_numpy(float), df["lambda"].to_numpy(float)
    drawn_ci = show_ci and "lambda_lo" in df
    with_ci = focus & ~small
    if drawn_ci:
        lo, hi, _n = clip_marks(ax, np.where(with_ci, df["lambda_lo"].to_numpy(float), np.nan),
                                np.where(with_ci, df["lambda_hi"].to_numpy(float), np.nan), gain, ylim, vertical=True,
                                marks=marks, record=record)
    ok = np.isfinite(gain) & np.isfinite(lam)
    for (m, d), at in sorted(df.groupby(["method", "benchmark"]).indices.items()):
        at = at[ok[at]]
        if not len(at):
            continue
        record.mark(key, m, d)
        c, mk = key.color(m), key.marker(d)
        hollow, strong = at[small[at]], at[~small[at] & focus[at]]
        pale = at[~small[at] & ~focus[at]]
        if drawn_ci and len(strong):
            bars = strong[np.isfinite(lo[strong]) & np.isfinite(hi[strong])]
            marks.vbars(gain[bars], lo[bars], hi[bars], color=c, alpha=0.45, linewidth=0.9)
            record.intervals += len(bars)
        marks.points(gain[pale], lam[pale], color=c, marker=mk, size=18, alpha=0.35, edgecolor="white", linewidth=0.3)
        marks.points(gain[strong], lam[strong], color=c, marker=mk, size=30, edgecolor="#111111", linewidth=0.9)
        marks.points(gain[hollow], lam[hollow], color="none", edgecolor=c, marker=mk, size=22, linewidth=0.8, alpha=0.8)
        record.points += len(at)
        record.highlighted += len(strong)
        record.hollow += len(hollow)
    record.leave_out("cell{s} without a gain or λ", int((~ok).sum()))
    marks.draw(ax, zorder=3, bar_zorder=2)
    xs = np.geomspace(min(xlim[0], ylim[0]), max(xlim[1], ylim[1]), 50)
    ax.fill_between(xs, xs, ylim[1] * 10, color="#fbe9e7", zorder=0, lw=0)
    ax.plot(xs, xs, color="#a8322d", lw=1.1, zorder=1)
    ax.axhline(1, color="#98a2b3", lw=0.8, ls=":")
    ax.axvline(1, color="#98a2b3", lw=0.8, ls=":")
    ax.text(0.02, 0.98, "above the line: more verifier rounds than strict\n(R/R* = λ / gain > 1)",
            transform=ax.transAxes, ha="left", va="top", color="#a8322d", fontsize=7.5)


def _caption_gain_vs_lambda(d: Drawn) -> str:
    pale = d.points - d.highlighted - d.hollow
    focus = ""
    if d.highlighted:
        focus = (f"Table 3's {plural(d.highlighted, 'cell')} (each rule at its most aggressive complete α per dataset) "
                 f"{verb(d.highlighted, 'is', 'are')} outlined, {d.intervals} with the 95% interval of λ"
                 + (f"; {plural(pale, 'cell')} at other α values {verb(pale, 'is', 'are')} pale, without an interval."
                    if pale else "."))
    elif d.intervals:
        focus = f"{d.intervals} cells carry the 95% interval of λ."
    return _join(
        f"The length illusion at a glance: per-round gain against length ratio, {plural(d.points, 'cell')}. "
        "Measured rounds break even on the diagonal (R/R* = λ / gain = 1); every cell above it needs more verifier "
        "rounds than strict decoding although its acceptance length rose. Log axes; one panel per target–draft pair; "
        "colour is the rule, marker the benchmark.", focus,
        (f"{plural(d.hollow, 'cell')} with fewer than {SMALL} items (e.g. calibration probes) {verb(d.hollow, 'is', 'are')} "
         "hollow, without an interval." if d.hollow else ""),
        _load_sentence(d, "one panel per load"),
        clip_sentence(d, " of λ"), _left_out_sentence(d), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: forest of λ per dataset


def fig_lambda_forest(obj: AnalysisResult | pd.DataFrame, dataset: str | None = None, max_labels: int = 44,
                      key: VisualKey | None = None) -> Figure:
    """Forest plot of one dataset: lambda with its bootstrap interval per cell, sorted by lambda (log axis).

    ``dataset`` picks the dataset (the report draws one figure per dataset, so that every label is
    printed at about the body text's size); without it, every dataset's cells in one panel. Rows
    are labelled (pair, rule, params, serving condition) up to ``max_labels`` cells (a taller figure
    would be shrunk to fit a page, and its labels with it); colour = rule, marker = benchmark; cells
    with few items are hollow, without their interval.
    """
    df = cells_of(obj)
    key = _key(obj, key)
    record = Drawn(unit="cell")
    if dataset is not None and not df.empty:
        df = df[df["dataset"] == dataset]
    with matplotlib.rc_context(RC):
        if df.empty:
            fig, ax = subplots(figsize=(6.4, 2), layout="constrained")
            return attach(empty_panel(fig, ax, "no cells"), record)
        g = with_benchmark(df.sort_values("lambda", kind="mergesort").reset_index(drop=True))
        labelled = len(g) <= max_labels
        fig, ax = subplots(figsize=(7.2, 1.1 + len(g) * (0.19 if labelled else 0.08)), layout="constrained")
        few = few_items(g).to_numpy()
        record.loads = _loads_in(g, key)
        y = np.arange(len(g))
        lim = robust_log_limits([g["lambda"]], [g.loc[~few, "lambda_lo"], g.loc[~few, "lambda_hi"]])
        marks = Marks()
        lo, hi, _n = clip_marks(ax, np.where(few, np.nan, g["lambda_lo"].to_numpy(float)),
                                np.where(few, np.nan, g["lambda_hi"].to_numpy(float)), y, lim, vertical=False,
                                marks=marks, record=record)
        g["_s"] = _serving(g)
        for (m, b, sv), at in sorted(g.groupby(["method", "benchmark", "_s"]).indices.items()):
            record.mark(key, m, b)
            c, mk = key.shade(m, sv), key.marker(b)
            full, hollow = at[~few[at]], at[few[at]]
            bars = full[np.isfinite(lo[full]) & np.isfinite(hi[full])]
            marks.hbars(y[bars], lo[bars], hi[bars], color=c, alpha=0.8, linewidth=1.1)
            marks.points(g["lambda"].to_numpy(float)[full], y[full], color=c, marker=mk, size=20)
            marks.points(g["lambda"].to_numpy(float)[hollow], y[hollow], color="white", edgecolor=c, marker=mk, size=20,
                         linewidth=0.9)
            record.points += len(at)
            record.intervals += len(bars)
            record.hollow += len(hollow)
        marks.draw(ax, zorder=3, bar_zorder=2)
        ax.axvline(1, color="#98a2b3", lw=0.9, ls="--")
        ax.set_xscale("log")
        ax.set_xlim(*lim)
        ratio_ticks(ax.xaxis, *lim)
        ax.set_ylim(-1, max(len(g), 1))
        if labelled:
            short_pair = df[["target", "draft"]].drop_duplicates().shape[0] > 1
            labels = [(f"{r.target} · " if short_pair else "") + f"{r.method} {r.params}"
                      + (f" · {r.serving}" if record.loads else "")
                      + (f" ({r.n_items} items)" if few[i] else "")
                      + (f" [incomplete: {r.n_items}/{r.n_items_baseline}]" if not getattr(r, "complete", True) else "")
                      for i, r in enumerate(g.itertuples())]
            ax.set_yticks(y, labels, fontsize=8)
        else:
            ax.set_yticks([])
        ax.grid(axis="y", visible=False)
        n_incomplete = int((~g["complete"].astype(bool)).sum()) if "complete" in g else 0
        if n_incomplete:
            record.notes.append(f"{n_incomplete} cell(s) of arms covering fewer than 95% of their baseline's items"
                                + (" are labelled [incomplete]." if labelled else " are drawn among the others."))
        name = dataset if dataset is not None else ", ".join(sorted(df["dataset"].unique()))
        ax.set_title(f"λ per cell: {name} ({len(g)} cells; dashed: λ = 1)")
        ax.set_xlabel("λ with its 95% interval (log scale)")
        extra = _hollow_entry(record.hollow, face="white")
        handles = [h for h in key_handles(key, record, datasets=False, extra=extra, load_style="shade")
                   if h.get_marker() not in ("", None)]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(5, len(handles)), frameon=False)
        return attach(fig, record)


def _caption_lambda_forest(d: Drawn) -> str:
    return _join(f"Length ratio λ with its paired item-bootstrap interval, {plural(d.points, 'cell')} sorted by λ "
                 f"({d.intervals} intervals drawn); colour is the rule, marker the benchmark.",
                 (f"{plural(d.hollow, 'cell')} with fewer than {SMALL} items {verb(d.hollow, 'is', 'are')} hollow, "
                  "without an interval." if d.hollow else ""),
                 _load_sentence(d, "named on each row and shaded, the heaviest load darkest"), clip_sentence(d),
                 *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: rounds against wall time


def _scatter_facets(df: pd.DataFrame, key: VisualKey, record: Drawn, title: str, width: float = 7.4,
                    height: float = 4.6) -> tuple[Figure, list[tuple[Any, str, pd.DataFrame]]]:
    """A figure with one panel, or one per serving condition (two to a row), and its (axes, load, cells)."""
    facets = _by_load(df, key)
    record.loads = tuple(ld for ld, _ in facets if ld)
    record.panels = len(facets)
    ncol = min(2, len(facets))
    nrow = -(-len(facets) // ncol)
    fig, axes = subplots(nrow, ncol, figsize=(width if ncol == 1 else 9.0, height if nrow == 1 else 3.4 * nrow),
                         layout="constrained", squeeze=False, sharex=True, sharey=True)
    for ax in list(axes.flat)[len(facets):]:
        ax.set_visible(False)
    out = [(ax, ld, sub) for ax, (ld, sub) in zip(axes.flat, facets)]
    for ax, ld, _sub in out:
        ax.set_title(ld if ld else title)
    if record.loads:
        fig.suptitle(title, fontsize=9.5)
    return fig, out


def fig_rounds_vs_time(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """Measured rounds ratio R/R* against wall-time ratio T/T*: fewer rounds do not always mean less time.

    One panel, or one per serving condition; colour = rule, marker = benchmark; every α of each rule.
    """
    df = cells_of(obj)
    key = _key(obj, key)
    record = Drawn(unit="cell")
    with matplotlib.rc_context(RC):
        if df.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no cells"), record)
        df = with_benchmark(df.reset_index(drop=True))
        ok = np.isfinite(df["rounds_ratio"].to_numpy(float)) & np.isfinite(df["time_ratio"].to_numpy(float))
        record.leave_out("cell{s} without rounds or wall time", int((~ok).sum()))
        df = df[ok]
        fig, facets = _scatter_facets(df, key, record, "Verifier rounds against wall time per cell (dotted: T/T* = R/R*)")
        lo, hi = log_limits([df["rounds_ratio"], df["time_ratio"]])
        for ax, _ld, sub in facets:
            marks = Marks()
            few = few_items(sub).to_numpy()
            for (m, d), at in sorted(sub.groupby(["method", "benchmark"]).indices.items()):
                record.mark(key, m, d)
                g = sub.iloc[at]
                f = few[at]
                marks.points(g["rounds_ratio"][~f], g["time_ratio"][~f], color=key.color(m), marker=key.marker(d),
                             size=22, alpha=0.85, edgecolor="white", linewidth=0.4)
                marks.points(g["rounds_ratio"][f], g["time_ratio"][f], color="none", edgecolor=key.color(m),
                             marker=key.marker(d), size=20, linewidth=0.8)
                record.points += len(g)
                record.hollow += int(f.sum())
            marks.draw(ax, zorder=3)
            ax.plot([lo, hi], [lo, hi], color="#98a2b3", lw=0.8, ls=":")
            ax.axhline(1, color="#a8322d", lw=0.9)
            ax.axvline(1, color="#a8322d", lw=0.9)
            ax.fill_between([lo, 1], 1, hi, color="#fbe9e7", lw=0, zorder=0)
            ax.text(0.02, 0.98, "fewer rounds,\nmore time", transform=ax.transAxes, va="top", ha="left", fontsize=7,
                    color="#a8322d")
        ax = facets[0][0]
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ratio_ticks(ax.xaxis, lo, hi)
        ratio_ticks(ax.yaxis, lo, hi)
        fig.supxlabel("measured rounds ratio R/R* (log scale)", fontsize=8.5)
        fig.supylabel("wall-time ratio T/T* (log scale)", fontsize=8.5)
        extra = _hollow_entry(record.hollow)
        key_legend(fig, key_handles(key, record, extra=extra))
        return attach(fig, record)


def _caption_rounds_vs_time(d: Drawn) -> str:
    return _join(f"Measured rounds ratio against wall-time ratio, {plural(d.points, 'cell')} (every α of each rule); "
                 "colour is the rule, marker the benchmark. Left of R/R* = 1 and above T/T* = 1 (shaded) a rule saves "
                 "verifier rounds but not time.",
                 (f"{plural(d.hollow, 'cell')} with fewer than {SMALL} items (e.g. calibration probes) "
                  f"{verb(d.hollow, 'is', 'are')} hollow." if d.hollow else ""),
                 _load_sentence(d, "one panel per load"), _left_out_sentence(d), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: accuracy against gain


def fig_accuracy_vs_gain(obj: AnalysisResult | pd.DataFrame, drop_pp: float = 2.0, key: VisualKey | None = None) -> Figure:
    """Accuracy change (percentage points, graded cells) against the per-round gain; the dashed line is the 2-point drop.

    One panel, or one per serving condition; intervals drawn up to 60 cells a panel.
    """
    df = cells_of(obj)
    key = _key(obj, key)
    record = Drawn(unit="graded cell")
    with matplotlib.rc_context(RC):
        g_all = _graded(df, record) if not df.empty else df
        if g_all.empty or "accuracy_delta_pp" not in g_all:
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no graded cells"), record)
        g_all = with_benchmark(g_all.reset_index(drop=True))
        fig, facets = _scatter_facets(g_all, key, record, f"Accuracy change against gain, {len(g_all)} graded cells",
                                      height=4.4)
        for ax, _ld, sub in facets:
            show_ci = len(sub) <= 60 and "accuracy_delta_lo" in sub
            few = few_items(sub).to_numpy()
            marks = Marks()
            for (m, d), at in sorted(sub.groupby(["method", "benchmark"]).indices.items()):
                record.mark(key, m, d)
                g, f = sub.iloc[at], few[at]
                if show_ci:
                    gc = g[~f]
                    ok = np.isfinite(gc["accuracy_delta_lo"].to_numpy(float)) & np.isfinite(gc["accuracy_delta_hi"].to_numpy(float))
                    marks.vbars(gc["gain"][ok], gc["accuracy_delta_lo"][ok], gc["accuracy_delta_hi"][ok],
                                color=key.color(m), alpha=0.3, linewidth=0.8)
                    record.intervals += int(ok.sum())
                marks.points(g["gain"][~f], g["accuracy_delta_pp"][~f], color=key.color(m), marker=key.marker(d), size=22,
                             alpha=0.85, edgecolor="white", linewidth=0.4)
                marks.points(g["gain"][f], g["accuracy_delta_pp"][f], color="none", edgecolor=key.color(m),
                             marker=key.marker(d), size=20, linewidth=0.8)
                record.points += len(g)
                record.hollow += int(f.sum())
            marks.draw(ax, zorder=3, bar_zorder=2)
            ax.axhline(0, color="#98a2b3", lw=0.8)
            ax.axhline(-drop_pp, color="#a8322d", lw=0.9, ls="--")
        for ax, _ld, _sub in facets:
            ax.autoscale_view()
            ax.text(1.0, -drop_pp, f"−{drop_pp:g} pp ", va="bottom", ha="right", fontsize=7, color="#a8322d",
                    transform=ax.get_yaxis_transform())
        fig.supxlabel("per-round gain (ℓ+1)/(ℓ*+1)", fontsize=8.5)
        fig.supylabel("accuracy change, percentage points", fontsize=8.5)
        extra = _hollow_entry(record.hollow)
        key_legend(fig, key_handles(key, record, extra=extra))
        return attach(fig, record)


def _caption_accuracy_vs_gain(d: Drawn) -> str:
    return _join(f"Accuracy change against per-round gain, {plural(d.points, 'graded cell')} (every α of each rule), "
                 f"{d.intervals} with the 95% interval of the change; the dashed line is a 2-point drop.",
                 (f"{plural(d.hollow, 'cell')} with fewer than {SMALL} items {verb(d.hollow, 'is', 'are')} hollow, "
                  "without an interval." if d.hollow else ""),
                 _load_sentence(d, "one panel per load"), _left_out_sentence(d), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: where the extra characters go


def _attribution_cells(obj: AnalysisResult | pd.DataFrame, record: Drawn) -> tuple[pd.DataFrame, str]:
    """The attribution rows the figure draws (Table 3's cells when the analysis says which) and how they were chosen."""
    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("attribution")
    chosen = "every row of the table (every α of each rule)"
    if df is None or df.empty:
        return pd.DataFrame(), chosen
    if not isinstance(obj, pd.DataFrame) and "alpha_selected" in obj.tables:
        # One α per rule and dataset (Table 3's), so that a panel shows each rule once.
        sel = obj.tables["alpha_selected"].rename(columns={"params_selected": "params"})
        on = [k for k in ("target", "draft", "dataset", "method", "params", "serving") if k in sel and k in df]
        df = df.merge(sel[on], how="inner", on=on)
        chosen = "Table 3's: each rule at its most aggressive complete α per dataset"
    if "n_items" in df.columns:
        small = df["n_items"] < SMALL
        record.leave_out(f"cell{{s}} with fewer than {SMALL} items", int(small.sum()))
        df = df[~small]
    return df.reset_index(drop=True), chosen


def fig_attribution(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """Where the extra characters go: extra characters per run (relaxed − strict) split into thinking and answer.

    One small panel per dataset (three to a row, so that labels keep their size at the study's
    twelve datasets), a bar per cell labelled with its rule (and target, and load, where there are
    several), with the 95% interval of the extra characters per run. With the AnalysisResult, the cells
    are Table 3's (one α per rule); with a frame, every row of it.
    """
    key = _key(obj, key)
    record = Drawn(unit="cell")
    df, chosen = _attribution_cells(obj, record)
    with matplotlib.rc_context(RC):
        if df.empty or not {"extra_chars", "extra_chars_thinking"} <= set(df.columns):
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no attribution table (needs completion texts)"), record)
        record.notes.append(f"The cells are {chosen}.")
        per = df["n_runs"].where(df["n_runs"] > 0) if "n_runs" in df.columns else 1.0
        d = df.assign(think=df["extra_chars_thinking"] / per, answer=(df["extra_chars"] - df["extra_chars_thinking"]) / per)
        d = d.assign(total=d["think"] + d["answer"])
        record.loads = _loads_in(d, key)
        several = d["target"].nunique() > 1  # bars grouped by target (Spec-Bench's drafts differ by method: one target)
        order = {ld: i for i, ld in enumerate(record.loads)}
        d = d.assign(_load=[order.get(s, 0) for s in _serving(d)]).sort_values(
            ["dataset", "target", "draft", "method", "_load"], kind="mergesort")
        datasets = sorted(d["dataset"].unique())
        most = int(d.groupby("dataset").size().max())
        ncol = min(3 if most <= 6 else 2, len(datasets))
        nrow = -(-len(datasets) // ncol)
        fig, axes = subplots(nrow, ncol, figsize=(7.4, 0.8 + (2.3 if several or record.loads else 2.0) * nrow),
                             layout="constrained", squeeze=False)
        ci = {"extra_chars_mean_lo", "extra_chars_mean_hi"} <= set(d.columns)
        for ax, ds in zip(axes.flat, datasets):
            g = d[d["dataset"] == ds]
            x = np.arange(len(g))
            colors = [key.shade(m, sv) for m, sv in zip(g["method"], _serving(g))]
            think, ans = g["think"].to_numpy(float), g["answer"].to_numpy(float)
            ax.bar(x, think, 0.75, color=colors)
            # The answer part sits on the thinking part when both go the same way, else from zero.
            bottom = np.where(np.sign(ans) == np.sign(think), think, 0.0)
            ax.bar(x, ans, 0.75, bottom=bottom, color=colors, alpha=0.35, hatch="///", edgecolor="white", lw=0)
            if ci:
                lo, hi = g["extra_chars_mean_lo"].to_numpy(float), g["extra_chars_mean_hi"].to_numpy(float)
                tot = g["total"].to_numpy(float)
                ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(tot)
                ax.errorbar(x[ok], tot[ok], yerr=[np.maximum(tot[ok] - lo[ok], 0), np.maximum(hi[ok] - tot[ok], 0)],
                            fmt="none", ecolor="#333", elinewidth=0.8, capsize=2)
                record.intervals += int(ok.sum())
            for m in g["method"]:
                record.mark(key, m)
            record.points += len(g)
            ax.axhline(0, color="#667085", lw=0.8)
            labels = [str(r.method) + (f" {r.serving}" if record.loads else "") for r in g.itertuples()]
            ax.set_xticks(x, labels, rotation=40, ha="right", rotation_mode="anchor", fontsize=7)
            if several:  # bars grouped by target: a rule between groups and the target's name over its group
                tg = g["target"].astype(str).to_numpy()
                starts = [0, *[i for i in range(1, len(tg)) if tg[i] != tg[i - 1]]]
                for a, b in zip(starts, [*starts[1:], len(tg)]):
                    ax.text((a + b - 1) / 2, 1.0, tg[a], transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                            fontsize=6.5, color="#475467")
                    if a:
                        ax.axvline(a - 0.5, color="#d0d5dd", lw=0.8)
            ax.grid(axis="x", visible=False)
            ax.set_title(ds, fontsize=9, pad=12 if several else 4)
            span = float(np.ptp(ax.get_ylim()))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}") if span >= 20 else
                                         FuncFormatter(lambda v, _p: f"{v:g}"))
        record.panels = len(datasets)
        for ax in list(axes.flat)[len(datasets):]:
            ax.set_visible(False)
        fig.supylabel("extra characters per run (relaxed − strict)", fontsize=8.5)
        handles = [Rectangle((0, 0), 1, 1, color="#888", label="thinking"),
                   Rectangle((0, 0), 1, 1, color="#888", alpha=0.35, hatch="///", label="answer")]
        if ci:
            handles.append(Line2D([], [], color="#333", lw=0.8, marker="_", ms=6, label="95% interval of the total"))
        handles += [h for h in key_handles(key, record, rules=False, datasets=False, load_style="shade")
                    if h.get_marker() not in ("", None)]  # the loads' shades, where there are several
        fig.legend(handles=handles, frameon=False, loc="outside lower center", ncol=min(len(handles), 7))
        fig.suptitle("Extra characters per run: thinking (solid) and answer (hatched)", fontsize=9.5)
        return attach(fig, record)


def _caption_attribution(d: Drawn) -> str:
    return _join(f"Extra characters per run of relaxed runs over strict, {plural(d.points, 'cell')} (one bar each, "
                 "labelled with its rule), split into the thinking part (solid; GPT-OSS's analysis channel, or a <think> "
                 f"block) and the answer (hatched); {d.intervals} bars carry the 95% interval of the total extra "
                 "characters per run. Panel titles are datasets; colour is the rule.",
                 _load_sentence(d, "named under each bar and shaded, the heaviest load darkest"), *d.notes,
                 _left_out_sentence(d))


# --------------------------------------------------------------------------------------------------------------
# Figure: the speed–accuracy trade-off


def _rule_cells(obj: AnalysisResult | pd.DataFrame) -> pd.DataFrame:
    """Cells of relaxed rules (interventions are Table 4's)."""
    df = cells_of(obj)
    if df.empty:
        return df
    return df[~df["method"].astype(str).str.endswith("_force_commit")]


def _fixed_right_legend(fig: Figure, handles: list, width: float, height: float, top: float) -> None:
    """A legend right of fixed-layout panels: its corner at the reserved margin (see :func:`legend_width`)."""
    if handles:
        w = legend_width(handles, 1)
        key_legend(fig, handles, at=(1 - (w + 0.05) / width, 1 - top / height), height=height - top - 0.2)


def _right_margin(handles: list, height: float, top: float) -> float:
    """Inches a fixed layout reserves right of its panels for the legend of ``handles``."""
    from lengthlens.report.plot_style import legend_columns

    return legend_width(handles, legend_columns(handles, height - top - 0.2)) + 0.15 if handles else 0.3


def fig_tradeoff(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """The speed–accuracy trade-off: R/R* (top) and T/T* (bottom) against the accuracy change, with both intervals, per rule.

    One column per rule; marker = benchmark; serving conditions (where several) are shades of the rule's
    colour. The lower-right quadrant (fewer rounds, no accuracy lost) is where a rule pays. Graded
    cells only; cells with fewer than 10 items are left out. Axes hold the points and the intervals up
    to a robust range; longer intervals are clipped at the edge and marked with an arrow.
    """
    df = _rule_cells(obj)
    key = _key(obj, key)
    record = Drawn(unit="graded cell")
    with matplotlib.rc_context(RC):
        df = _graded(df, record, small_out=True) if not df.empty else df
        if df.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no graded cells with 10 or more items"), record)
        df = with_benchmark(df.reset_index(drop=True))
        record.loads = _loads_in(df, key)
        methods = sorted(df["method"].astype(str).unique())
        for m in methods:
            record.mark(key, m)
        for b in df["benchmark"].unique():
            record.mark(key, None, b)
        handles = key_handles(key, record, rules=False, load_style="shade")
        ncol = len(methods)
        height, top = 4.6, 0.6
        right = _right_margin(handles, height, top)
        width = max(6.4, 1.75 * ncol + 0.75 + right)
        fig, axes = subplots(2, ncol, figsize=(width, height), layout="none", squeeze=False, sharex=True, sharey="row")
        fig.subplots_adjust(left=0.75 / width, right=1 - right / width, bottom=0.65 / height, top=1 - top / height,
                            wspace=0.12, hspace=0.12)
        xlim = robust_linear_limits([df["accuracy_delta_pp"]], [df["accuracy_delta_lo"], df["accuracy_delta_hi"]])
        serving = _serving(df)
        for row, (metric, label) in enumerate((("rounds_ratio", "R/R* (log)"), ("time_ratio", "T/T* (log)"))):
            ylim = robust_log_limits([df[metric]], [df[f"{metric}_lo"], df[f"{metric}_hi"]])
            for ax, m in zip(axes[row], methods):
                g = df[df["method"] == m]
                x, y = g["accuracy_delta_pp"].to_numpy(float), g[metric].to_numpy(float)
                marks = Marks()
                ylo, yhi, _ = clip_marks(ax, g[f"{metric}_lo"], g[f"{metric}_hi"], x, ylim, vertical=True, marks=marks,
                                         record=record)
                xlo, xhi, _ = clip_marks(ax, g["accuracy_delta_lo"], g["accuracy_delta_hi"], y, xlim, vertical=False,
                                         marks=marks, record=record)
                shades = [key.shade(m, s) for s in serving[g.index]]
                for i in range(len(g)):
                    marks.vbars(x[i:i + 1], ylo[i:i + 1], yhi[i:i + 1], color=shades[i], alpha=0.45, linewidth=0.8)
                    marks.hbars(y[i:i + 1], xlo[i:i + 1], xhi[i:i + 1], color=shades[i], alpha=0.45, linewidth=0.8)
                for (b, s), at in sorted(g.assign(_s=serving[g.index].to_numpy()).groupby(["benchmark", "_s"]).indices.items()):
                    marks.points(x[at], y[at], marker=key.marker(b), size=22, color=key.shade(m, s), edgecolor="white",
                                 linewidth=0.4)
                if row == 0:
                    record.points += len(g)
                    record.intervals += int((np.isfinite(ylo) & np.isfinite(yhi)).sum())
                marks.draw(ax, zorder=3, bar_zorder=2)
                ax.axhline(1, color="#98a2b3", lw=0.8, ls=":")
                ax.axvline(0, color="#98a2b3", lw=0.8, ls=":")
                ax.set_yscale("log")
                ax.set_ylim(*ylim)
                ax.set_xlim(*xlim)
                ratio_ticks(ax.yaxis, *ylim, most=6)
                ax.xaxis.set_major_locator(MaxNLocator(4))
                if row == 0:
                    ax.set_title(m, color=key.color(m))
            axes[row][0].set_ylabel(label)
        record.panels = 2 * ncol
        fig.supxlabel("accuracy change, percentage points (relaxed − strict)", fontsize=8.5, y=0.1 / height, va="bottom")
        _fixed_right_legend(fig, handles, width, height, top)
        fig.suptitle(f"Speed against accuracy, {len(df)} graded cells (every α)", fontsize=9.5, y=1 - 0.08 / height,
                     va="top")
        return attach(fig, record)


def _caption_tradeoff(d: Drawn) -> str:
    return _join(f"The speed–accuracy trade-off, {plural(d.points, 'graded cell')} (every α): measured verifier rounds "
                 "R/R* (top) and wall time T/T* (bottom) against the accuracy change, with both 95% intervals, one column "
                 "per rule; marker = benchmark. A rule pays below the dotted line at 1 and right of the one at 0.",
                 _load_sentence(d, "as shades of the rule's colour, the heaviest load darkest"),
                 clip_sentence(d), _left_out_sentence(d), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: the α sweep

#: The α sweep's rows: metric, label, log scale.
_SWEEP = (("gain", "gain", True), ("lambda", "λ", True), ("rounds_ratio", "R/R*", True), ("time_ratio", "T/T*", True),
          ("accuracy_delta_pp", "Δacc pp", False))


def fig_alpha_sweep(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """The α sweep: gain, λ, R/R*, T/T* and the accuracy change against α, one column per rule, a line per dataset.

    Every α run is drawn; cells with few items (e.g. calibration probes) are hollow and drawn without
    their interval. Serving conditions (where several) get a line each, told apart by line style and
    shade; several target–draft pairs are told apart by line style otherwise.
    """
    df = _rule_cells(obj)
    key = _key(obj, key)
    record = Drawn(unit="cell")
    with matplotlib.rc_context(RC):
        df = df[df["alpha"].notna()] if not df.empty else df
        if df.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no cells with an α"), record)
        df = with_benchmark(df.reset_index(drop=True))
        df["_s"] = _serving(df)
        record.loads = _loads_in(df, key)
        methods = sorted(df["method"].astype(str).unique())
        pairs = sorted(df[["target", "draft"]].drop_duplicates().itertuples(index=False, name=None))
        pair_styles = dict(zip(pairs, ["-", "--", ":", "-."] * 8))
        few = few_items(df)
        rows = [r for r in _SWEEP if r[0] in df.columns and df[r[0]].notna().any()]
        for m in methods:
            record.mark(key, m)
        for b in df["benchmark"].unique():
            record.mark(key, None, b)
        extra = []
        if len(pairs) > 1 and not record.loads:
            extra += [Line2D([], [], color="#555", ls=pair_styles[p], label=f"{p[0]} ←\n{p[1]}") for p in pairs]
        extra += _hollow_entry(int(few.sum()), face="white")
        handles = key_handles(key, record, rules=False, load_style="dashes", extra=extra)
        # A fixed layout: constrained layout would measure every tick of the 25 small axes twice.
        height, top = 1.35 * len(rows) + 0.8, 0.45
        right = _right_margin(handles, height, top)
        width = max(6.4, 1.75 * len(methods) + 0.75 + right)
        fig, axes = subplots(len(rows), len(methods), figsize=(width, height), layout="none", squeeze=False,
                             sharex="col", sharey="row")
        fig.subplots_adjust(left=0.75 / width, right=1 - right / width, bottom=0.5 / height, top=1 - top / height,
                            wspace=0.12, hspace=0.14)
        # Each rule's cells in α order and split into lines once, as arrays: the 25 panels index them by position.
        by_method = {}
        for m in methods:
            g = df[df["method"] == m].sort_values("alpha", kind="mergesort")
            by_method[m] = (g, few.loc[g.index].to_numpy(), g["alpha"].to_numpy(float),
                            sorted(g.groupby(["target", "draft", "benchmark", "_s"]).indices.items()))
        for i, (metric, label, log) in enumerate(rows):
            stem = "accuracy_delta" if metric == "accuracy_delta_pp" else metric
            lims = [df.loc[~few, f"{stem}_lo"], df.loc[~few, f"{stem}_hi"]] if f"{stem}_lo" in df else []
            ylim = robust_log_limits([df[metric]], lims) if log else robust_linear_limits([df[metric]], lims)
            for ax, m in zip(axes[i], methods):
                g, few_g, alpha_g, lines = by_method[m]
                y_g = g[metric].to_numpy(float)
                ci_g = (g[f"{stem}_lo"].to_numpy(float), g[f"{stem}_hi"].to_numpy(float)) if f"{stem}_lo" in g else None
                marks = Marks()
                for (tg, dr, b, s), at in lines:
                    f = few_g[at]
                    x, yv = alpha_g[at], y_g[at]
                    color = key.shade(m, s)
                    style = key.dashes(s) if record.loads else pair_styles[(tg, dr)]
                    marks.line(x, yv, color=color, alpha=0.8, linewidth=0.9, dashes=style)
                    marks.points(x[~f], yv[~f], marker=key.marker(b), size=16, color=color)
                    marks.points(x[f], yv[f], marker=key.marker(b), size=14, color="white", edgecolor=color)
                    if ci_g is not None:
                        lo, hi, _k = clip_marks(ax, ci_g[0][at][~f], ci_g[1][at][~f],
                                                x[~f], ylim, vertical=True, marks=marks, record=record)
                        marks.vbars(x[~f], lo, hi, color=color, alpha=0.3, linewidth=0.8)
                        record.intervals += int((np.isfinite(lo) & np.isfinite(hi)).sum())
                marks.draw(ax, zorder=3, bar_zorder=2)
                ax.axhline(0 if not log else 1, color="#98a2b3", lw=0.8, ls=":")
                if log:
                    ax.set_yscale("log")
                    ratio_ticks(ax.yaxis, *ylim, most=5)
                else:
                    ax.yaxis.set_major_locator(MaxNLocator(4))
                ax.set_ylim(*ylim)
                if i == 0:
                    ax.set_title(m, color=key.color(m))
                if i == len(rows) - 1:
                    ax.set_xlabel("α")
            axes[i][0].set_ylabel(label)
        for ax, m in zip(axes[0], methods):  # x limits per column: a single α gets a margin, not a degenerate axis
            a = df.loc[df["method"] == m, "alpha"].astype(float)
            lo, hi = float(a.min()), float(a.max())
            pad = 0.08 * (hi - lo) if hi > lo else max(0.05 * abs(hi), 0.01)
            ax.set_xlim(lo - pad, hi + pad)
            ax.xaxis.set_major_locator(MaxNLocator(3) if hi > lo else matplotlib.ticker.FixedLocator([lo]))
        record.points = len(df)
        record.hollow = int(few.sum())
        record.panels = len(rows) * len(methods)
        _fixed_right_legend(fig, handles, width, height, top)
        fig.suptitle("The α sweep: each rule's cells against α (a line per dataset"
                     + (" and load" if record.loads else "") + ")", fontsize=9.5, y=1 - 0.08 / height, va="top")
        return attach(fig, record)


def _caption_alpha_sweep(d: Drawn) -> str:
    return _join(f"The α sweep, {plural(d.points, 'cell')}: gain, λ, R/R*, T/T* and the accuracy change against α, one "
                 "column per rule, a line per dataset (marker = benchmark), with 95% intervals.",
                 _load_sentence(d, "a line each, by line style (solid: the heaviest) and shade"),
                 (f"{plural(d.hollow, 'cell')} with fewer than {SMALL} items (e.g. calibration probes) "
                  f"{verb(d.hollow, 'is', 'are')} hollow, without an interval." if d.hollow else ""),
                 clip_sentence(d), _left_out_sentence(d), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: the time model


def fig_time_model(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """The time model, T/T* = R/R* × time per round: each arm's fitted seconds per verifier round against its
    baseline's (left), and T/T* predicted from the rounds at the baseline's cost against the measured T/T* (right)."""
    from lengthlens.analyses.cells import SMALL_N_ITEMS

    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("time_model", pd.DataFrame())
    key = _key(obj, key)
    record = Drawn(unit="cell")
    with matplotlib.rc_context(RC):
        fig, (a1, a2) = subplots(1, 2, figsize=(8.6, 3.9), layout="constrained")
        if df is not None and not df.empty:
            few = df["n_runs"] < SMALL_N_ITEMS  # a line through a handful of runs is noise
            record.leave_out(f"cell{{s}} with fewer than {SMALL_N_ITEMS} runs", int(few.sum()))
            df = df[~few]
        if df is None or df.empty:
            return attach(empty_panel(fig, a1, "no wall times and rounds logged"), record)
        d = with_benchmark(df.reset_index(drop=True))
        d["_s"] = _serving(d)
        record.loads = _loads_in(d, key)
        ms = 1000.0
        left, right = Marks(), Marks()
        for (m, b, s), g in d.groupby(["method", "benchmark", "_s"], sort=True):
            record.mark(key, m, b)
            c = key.shade(m, s)
            left.points(g["seconds_per_round_star"] * ms, g["seconds_per_round"] * ms, marker=key.marker(b), size=20,
                        color=c, edgecolor="white", linewidth=0.4)
            right.points(g["time_ratio_predicted"], g["time_ratio"], marker=key.marker(b), size=20, color=c,
                         edgecolor="white", linewidth=0.4)
            record.points += len(g)
        left.draw(a1)
        right.draw(a2)
        a1.autoscale_view()
        v = pd.concat([d["seconds_per_round_star"], d["seconds_per_round"]]).replace([np.inf, -np.inf], np.nan).dropna() * ms
        if len(v):
            lo, hi = float(v.min()), float(v.max())
            pad = 0.05 * (hi - lo or 1.0)
            a1.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="#98a2b3", lw=0.8, ls=":")
        a1.set_xlabel("baseline: ms per verifier round (fitted slope)")
        a1.set_ylabel("relaxed arm: ms per verifier round")
        a1.set_title("Cost of a round (dotted: the same)")
        lim = log_limits([d["time_ratio_predicted"], d["time_ratio"]])
        a2.plot(lim, lim, color="#98a2b3", lw=0.8, ls=":")
        a2.set_xscale("log")
        a2.set_yscale("log")
        a2.set_xlim(*lim)
        a2.set_ylim(*lim)
        ratio_ticks(a2.xaxis, *lim)
        ratio_ticks(a2.yaxis, *lim)
        a2.set_xlabel("T/T* predicted: rounds at the baseline's cost")
        a2.set_ylabel("T/T* measured")
        a2.set_title("Predicted against measured wall time")
        record.panels = 2
        key_legend(fig, key_handles(key, record, load_style="shade"))
        return attach(fig, record)


def _caption_time_model(d: Drawn) -> str:
    return _join(f"The time model, T/T* = R/R* × time per round, {plural(d.points, 'cell')}. Left: each cell's fitted "
                 "cost of a verifier round (slope of wall time on rounds over its runs), relaxed against baseline. Right: "
                 "T/T* predicted from the arm's rounds at its baseline's fitted cost (fixed and per-round) against the "
                 "measured T/T*; above the dotted line a round of the relaxed arm costs more (time_model.csv).",
                 _load_sentence(d, "as shades of the rule's colour, the heaviest load darkest"),
                 _left_out_sentence(d), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: Table 4's costs


def fig_table4_costs(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """Table 4's costs: length, verifier rounds and wall time of the forced runs over their base runs, per intervention arm.

    Three panels side by side (length, rounds, time), a bar per intervention arm that fired, coloured by its rule.
    """
    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("table4", pd.DataFrame())
    key = _key(obj, key)
    record = Drawn(unit="intervention arm")
    with matplotlib.rc_context(RC):
        cols = [("length_ratio", "completion length"), ("rounds_ratio", "verifier rounds"), ("time_ratio", "wall time")]
        ok = df is not None and not df.empty and "length_ratio" in df
        d = df[(df["method"] != "all") & (df["fired"] > 0)] if ok else pd.DataFrame()
        if ok:
            record.leave_out("intervention arm{s} that never fired", int(((df["method"] != "all") & (df["fired"] <= 0)).sum()))
        if d.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no intervention fired"), record)
        d = d.reset_index(drop=True)
        several = d[["target", "draft"]].drop_duplicates().shape[0] > 1
        loads = _loads_in(d, key)
        record.loads = loads
        labels = [(f"{r.target} · " if several else "") + f"{r.dataset} · {str(r.method).removesuffix('_force_commit')} "
                  f"{r.params}" + (f" · {r.serving}" if loads else "") for r in d.itertuples()]
        fig, axes = subplots(1, 3, figsize=(8.6, 1.0 + 0.24 * len(d)), layout="constrained", sharey=True, squeeze=False)
        y = np.arange(len(d))
        colors = [key.shade(m, sv) for m, sv in zip(d["method"], _serving(d))]
        for m in d["method"]:
            record.mark(key, m)
        values = pd.concat([d[c] for c, _ in cols]).astype(float)
        hi = max(1.05, float(np.nanmax(values.to_numpy())) * 1.08) if values.notna().any() else 1.1
        for ax, (c, lab) in zip(axes[0], cols):
            v = d[c].astype(float).to_numpy()
            ax.barh(y, np.nan_to_num(v), 0.7, color=colors)
            for yi in y[~np.isfinite(v)]:
                ax.text(0.02, yi, "not logged", va="center", fontsize=7, color="#667085")
            ax.axvline(1, color="#667085", lw=0.9, ls="--")
            ax.set_xlim(0, hi)
            ax.set_title(lab, fontsize=9)
            ax.grid(axis="y", visible=False)
            ax.xaxis.set_major_locator(MaxNLocator(4))
        axes[0, 0].set_yticks(y, labels, fontsize=7.5)
        axes[0, 0].invert_yaxis()
        record.points = len(d)
        record.panels = 3
        axes[0, 1].set_xlabel("forced over base runs (Σ forced / Σ base over the fired pairs); dashed: 1")
        key_legend(fig, key_handles(key, record, load_style="shade"), below=True)
        return attach(fig, record)


def _caption_table4_costs(d: Drawn) -> str:
    return _join(f"Table 4's costs, {plural(d.points, 'intervention arm')} that fired: completion length, verifier "
                 "rounds and wall time of the forced runs over their base runs (ratios of sums over the fired pairs); "
                 "colour is the rule. Below the dashed line at 1 forcing the thinking closed saved that much.",
                 _load_sentence(d, "named on each row and shaded, the heaviest load darkest"), _left_out_sentence(d),
                 *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: serving conditions

#: Panels of the serving figure: metric, axis label.
_SERVING_PANELS = (("rounds_ratio", "R/R* (verifier rounds)"), ("time_ratio", "T/T* (wall time)"),
                   ("throughput_ratio", "output tokens/s, relaxed / strict"))
#: Rows (target, draft, dataset) the serving figure draws at most; serving.csv holds every arm.
SERVING_MAX_ROWS = 6


def fig_serving(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """R/R*, T/T* and the tokens-per-second ratio of every rule against the load (concurrency, request rate or batch size).

    One row of panels per (target, draft, dataset[, fixed part of the condition]) up to
    :data:`SERVING_MAX_ROWS`; one line per rule and params with its intervals (colour = rule, marker =
    benchmark, line style = params where a rule has several); loads in their numeric order on a log axis.
    The dotted line is 1: where T/T* climbs over it (or tokens/s falls under it) the rule's advantage is gone.
    Takes the AnalysisResult or its ``serving`` table (:func:`lengthlens.analyses.serving.serving_table`).
    """
    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("serving", pd.DataFrame())
    key = _key(obj, key)
    record = Drawn(unit="cell")
    with matplotlib.rc_context(RC):
        keys = list(dict.fromkeys(df[["target", "draft", "dataset", "series"]].itertuples(index=False, name=None))) \
            if not df.empty else []
        shown = keys[:SERVING_MAX_ROWS]
        fig, axes = subplots(max(1, len(shown)), 3, figsize=(9.6, 2.7 * max(1, len(shown)) + 0.6), layout="constrained",
                             squeeze=False, sharex=True)
        if df.empty:
            return attach(empty_panel(fig, axes[0, 0], "one serving condition: nothing to compare"), record)
        df = with_benchmark(df.reset_index(drop=True))
        axis = str(df["load_axis"].iloc[0])
        numeric = axis != "condition" and bool((df["load"] > 0).all())
        params_style = {}
        for m, g in df.groupby("method"):
            for i, p in enumerate(sorted(g["params"].astype(str).unique())):
                params_style[(m, p)] = ["-", "--", ":", "-."][i % 4]
        drawn_rows = set()
        for row, k in zip(axes, shown):
            part = df[(df["target"] == k[0]) & (df["draft"] == k[1]) & (df["dataset"] == k[2]) & (df["series"] == k[3])]
            for ax, (metric, label) in zip(row, _SERVING_PANELS):
                for (m, p, b), g in part.groupby(["method", "params", "benchmark"], sort=True):
                    g = g.sort_values("load", kind="mergesort")
                    x, y = g["load"].to_numpy(float), g[metric].to_numpy(float)
                    lo, hi = g[f"{metric}_lo"].to_numpy(float), g[f"{metric}_hi"].to_numpy(float)
                    bars = ~g["small_n"].astype(bool).to_numpy() & np.isfinite(lo) & np.isfinite(hi)
                    ax.plot(x, y, color=key.color(m), lw=1.2, ls=params_style[(m, str(p))], marker=key.marker(b), ms=3.5,
                            label=f"{m} {p}")
                    if bars.any():
                        ax.errorbar(x[bars], y[bars], yerr=[y[bars] - lo[bars], hi[bars] - y[bars]], fmt="none",
                                    ecolor=key.color(m), elinewidth=0.9, capsize=2.5, alpha=0.6)
                    record.mark(key, m, b)
                    record.intervals += int(bars.sum())
                    drawn_rows |= set(g.index)
                ax.axhline(1, color="#a8322d", lw=0.8, ls=":")
                ax.set_ylabel(label, fontsize=8)
            row[0].set_title(" / ".join(part for part in k if part), fontsize=8.5, loc="left")
        record.points = len(drawn_rows)
        record.loads = tuple(dict.fromkeys(df.sort_values("load", kind="mergesort")["serving"].astype(str)))
        record.leave_out("cell{s} of further target / draft / dataset groups (serving.csv has them)",
                         len(df) - len(drawn_rows))
        record.panels = 3 * len(shown)
        ticks = sorted(set(df["load"].astype(float)))
        names = dict(zip(df["load"].astype(float), df["serving"]))
        for ax in axes[-1]:
            if numeric:
                ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [f"{t:g}" if numeric else names[t] for t in ticks], fontsize=7)
            ax.minorticks_off()
            ax.set_xlabel({"concurrency": "concurrency (requests in flight)", "request_rate": "request rate (1/s)",
                           "batch_size": "batch size"}.get(axis, "serving condition"), fontsize=8)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(handles)), frameon=False, fontsize=7.5)
        if len(keys) > len(shown):
            fig.suptitle(f"the first {len(shown)} of {len(keys)} target / draft / dataset groups (serving.csv has all)",
                         fontsize=8)
        return attach(fig, record)


def _caption_serving(d: Drawn) -> str:
    return _join(f"Serving conditions ({', '.join(d.loads)}): verifier rounds, wall time and output tokens per second of "
                 f"each rule relative to its baseline at the same load, {plural(d.points, 'cell')}, {d.intervals} "
                 "with their 95% intervals. R/R* does not depend on the load; where T/T* rises over the dotted line "
                 "(tokens/s falls under it) the rule's advantage has disappeared.", _left_out_sentence(d), *d.notes)


def _caption_survival(d: Drawn) -> str:
    return _join(f"Completion-length survival, {plural(d.panels, 'panel')}: strict against each rule per dataset "
                 f"({plural(d.points, 'curve')}); the dashed line is the token budget and + marks runs cut there "
                 f"(censored{', ' + str(d.hollow) + ' marks' if d.hollow else ''}).",
                 _load_sentence(d, "one panel per dataset and load"), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: accuracy against completion length


def fig_accuracy_vs_length(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """Accuracy against completion length, strict and each rule: longer completions are less often right.

    One panel per target and dataset (and serving condition); per arm, its accuracy in each length bin
    (bins shared by the panel's arms: quantiles of their pooled lengths) at the arm's median length in the
    bin, with the Wilson interval; strict in black, each rule in its colour, marker = benchmark. Takes the
    AnalysisResult or its ``accuracy_length`` table (:func:`lengthlens.analyses.accuracy_length.accuracy_by_length`).
    """
    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("accuracy_length", pd.DataFrame())
    key = _key(obj, key)
    record = Drawn(unit="point")
    with matplotlib.rc_context(RC):
        if df is None or df.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no graded runs"), record)
        d = with_benchmark(df.reset_index(drop=True))
        d["_s"] = _serving(d)
        record.loads = _loads_in(d, key)
        order = {ld: i for i, ld in enumerate(record.loads)}
        panels = sorted(d[["dataset", "target", "_s"]].drop_duplicates().itertuples(index=False, name=None),
                        key=lambda p: (p[0], p[1], order.get(p[2], 0)))
        several = d["target"].nunique() > 1
        ncol = min(3, len(panels))
        nrow = -(-len(panels) // ncol)
        # Every panel has the same y axis, set on each rather than shared: a shared axis makes each change visit
        # every panel, which is quadratic in the panels; the inner panels' tick labels are hidden as sharing would.
        fig, axes = subplots(nrow, ncol, figsize=(max(3.0 * ncol, 6.4), 2.4 * nrow + 0.9), layout="constrained",
                             squeeze=False)
        for ax in axes[:, 1:].flat:
            ax.yaxis.set_tick_params(which="both", labelleft=False)
        for ax, (ds, tg, ld) in zip(axes.flat, panels):
            g = d[(d["dataset"] == ds) & (d["target"] == tg) & (d["_s"] == ld)]
            marks = Marks()
            methods = ["strict", *sorted(m for m in g["method"].unique() if m != "strict")]
            for m in methods:
                gm = g[(g["method"] == m) & (g["n_runs"] > 0)].sort_values("bin")
                if gm.empty:
                    continue
                b = str(gm["benchmark"].iloc[0])
                record.mark(key, m, b)
                x, y = gm["length_median"].to_numpy(float), gm["accuracy"].to_numpy(float)
                c = key.color(m)
                marks.line(x, y, color=c, linewidth=1.8 if m == "strict" else 1.1)
                marks.vbars(x, gm["accuracy_lo"], gm["accuracy_hi"], color=c, alpha=0.35, linewidth=0.8)
                marks.points(x, y, color=c, marker=key.marker(b), size=18, edgecolor="white", linewidth=0.4)
                record.points += len(gm)
                record.intervals += len(gm)
            marks.draw(ax, zorder=3, bar_zorder=2)
            ax.autoscale_view()
            ax.set_ylim(-0.03, 1.03)
            ax.set_title(" · ".join(t for t in (ds, tg if several else "", ld) if t), fontsize=8.5)
            ax.xaxis.set_major_locator(MaxNLocator(4))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        record.panels = len(panels)
        n_runs = int(d["n_runs"].sum())
        n_strict = int(d.loc[d["method"] == "strict", "n_runs"].sum())
        n_cut = int(d["n_censored"].sum())
        record.notes.append(f"From {n_runs:,} graded runs ({n_strict:,} strict, {n_runs - n_strict:,} relaxed"
                            + (f"; {n_cut:,} of them cut at the budget, counted at the budget's length)." if n_cut
                               else ")."))
        fig.supxlabel("completion length (tokens): the arm's median in each length bin", fontsize=8.5)
        fig.supylabel("accuracy (share of graded runs correct)", fontsize=8.5)
        key_legend(fig, key_handles(key, record))
        return attach(fig, record)


def _caption_accuracy_vs_length(d: Drawn) -> str:
    return _join(f"Accuracy against completion length, {plural(d.panels, 'panel')} (target and dataset), "
                 f"{plural(d.points, 'point')}: each arm's accuracy in a length bin (bins shared by the panel's arms: "
                 "quantiles of their pooled lengths) at its median length there, with the 95% Wilson interval; strict "
                 "in black, each rule (at Table 3's α) in its colour. Where the curves fall to the right, longer "
                 "completions are less often right, and a rule that lengthens completions moves its runs there.",
                 _load_sentence(d, "one panel per load"), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# Figure: cost per correct answer


def _table3_rows(obj: AnalysisResult | pd.DataFrame, df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Rows of a per-cell table at Table 3's cells (each rule's chosen α per dataset) when the analysis says which."""
    if isinstance(obj, pd.DataFrame) or "alpha_selected" not in obj.tables or df.empty:
        return df, "every row of the table"
    sel = obj.tables["alpha_selected"].rename(columns={"params_selected": "params"})
    on = [k for k in ("target", "draft", "dataset", "method", "params", "serving") if k in sel and k in df]
    return df.merge(sel[on], how="inner", on=on), "Table 3's: each rule at its most aggressive complete α per dataset"


#: Panels of the cost-per-correct figure: column, axis label.
_PER_CORRECT = (("rounds_per_correct_ratio", "verifier rounds per correct answer,\nrelaxed / strict (log)"),
                ("seconds_per_correct_ratio", "wall time per correct answer,\nrelaxed / strict (log)"))


def fig_cost_per_correct(obj: AnalysisResult | pd.DataFrame, key: VisualKey | None = None) -> Figure:
    """What a correct answer costs, relaxed against strict: verifier rounds and wall time per correct answer, per rule.

    A row per rule, a point per cell (Table 3's cells with the AnalysisResult; marker = benchmark, shade = load
    where there are several) with its 95% interval, and a black bar at the rule's median. Right of the dotted
    line at 1 a correct answer costs more than under strict decoding, however many rounds a run saved.
    Takes the AnalysisResult or its ``cost_per_correct`` table (:mod:`lengthlens.analyses.cost_per_correct`).
    """
    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("cost_per_correct", pd.DataFrame())
    key = _key(obj, key)
    record = Drawn(unit="cell")
    with matplotlib.rc_context(RC):
        df = df if df is not None else pd.DataFrame()
        if not df.empty:
            df = df[~df["method"].astype(str).str.endswith("_force_commit")]
            df, chosen = _table3_rows(obj, df)
            small = df["n_items"] < SMALL
            record.leave_out(f"cell{{s}} with fewer than {SMALL} items", int(small.sum()))
            df = df[~small]
            panels = [(c, lab) for c, lab in _PER_CORRECT if c in df and df[c].notna().any()]
        if df.empty or not panels:
            fig, ax = subplots(figsize=(6.4, 2))
            return attach(empty_panel(fig, ax, "no graded cells with rounds or wall time"), record)
        d = with_benchmark(df.reset_index(drop=True))
        serving = _serving(d)
        record.loads = _loads_in(d, key)
        methods = sorted(d["method"].astype(str).unique())
        fig, axes = subplots(1, len(panels), figsize=(8.6, 1.3 + 0.42 * len(methods) * (1.6 if record.loads else 1.0)),
                             layout="constrained", squeeze=False, sharey=True)
        undefined = 0
        for ax, (col, label) in zip(axes[0], panels):
            v = d[col].astype(float)
            finite = np.isfinite(v.to_numpy())
            lim = robust_log_limits([v[finite]], [d.loc[finite, f"{col}_lo"], d.loc[finite, f"{col}_hi"]])
            marks = Marks()
            for i, m in enumerate(methods):
                g = d[(d["method"] == m) & finite].sort_values(["dataset", "target"], kind="mergesort")
                if g.empty:
                    continue
                offs = np.linspace(-0.3, 0.3, len(g)) if len(g) > 1 else np.zeros(1)
                y = i + offs
                x = g[col].to_numpy(float)
                lo, hi, _n = clip_marks(ax, g[f"{col}_lo"], g[f"{col}_hi"], y, lim, vertical=False, marks=marks,
                                        record=record)
                shades = [key.shade(m, s) for s in serving[g.index]]
                for j in range(len(g)):
                    marks.hbars(y[j:j + 1], lo[j:j + 1], hi[j:j + 1], color=shades[j], alpha=0.45, linewidth=0.9)
                    marks.points(x[j:j + 1], y[j:j + 1], color=shades[j], marker=key.marker(g["benchmark"].iloc[j]),
                                 size=22, edgecolor="white", linewidth=0.4)
                    record.mark(key, m, g["benchmark"].iloc[j])
                ax.plot([np.median(x)] * 2, [i - 0.42, i + 0.42], color="#111", lw=1.6, zorder=4)
                if col == panels[0][0]:
                    record.points += len(g)
                    record.intervals += int((np.isfinite(lo) & np.isfinite(hi)).sum())
            undefined += int((~finite).sum()) if col == panels[0][0] else 0
            marks.draw(ax, zorder=3, bar_zorder=2)
            ax.axvline(1, color="#98a2b3", lw=0.9, ls=":")
            ax.set_xscale("log")
            ax.set_xlim(*lim)
            ratio_ticks(ax.xaxis, *lim)
            ax.set_xlabel(label)
            ax.grid(axis="y", visible=False)
        record.leave_out("cell{s} without a correct answer on one side", undefined)
        axes[0, 0].set_yticks(range(len(methods)), methods)
        for tick, m in zip(axes[0, 0].get_yticklabels(), methods):
            tick.set_color(key.color(m))
        axes[0, 0].set_ylim(len(methods) - 0.5, -0.5)
        record.panels = len(panels)
        record.notes.append(f"The cells are {chosen}.")
        extra = [Line2D([], [], color="#111", lw=1.6, label="the rule's median")]
        key_legend(fig, key_handles(key, record, rules=False, load_style="shade", extra=extra))
        fig.suptitle("What a correct answer costs, relaxed against strict", fontsize=9.5)
        return attach(fig, record)


def _caption_cost_per_correct(d: Drawn) -> str:
    return _join(f"Cost per correct answer, {plural(d.points, 'cell')}, a row per rule: verifier rounds (left) and wall "
                 "time (right) per correct answer of the relaxed runs over those of their strict runs (graded pairs; the "
                 f"rounds ratio over the accuracy ratio), {d.intervals} with the 95% paired item-bootstrap interval; "
                 "marker = benchmark; the black bar is the rule's median. Right of the dotted line at 1 a correct answer "
                 "costs more than under strict decoding.",
                 _load_sentence(d, "as shades of the rule's colour, the heaviest load darkest"),
                 clip_sentence(d), _left_out_sentence(d), *d.notes)


# --------------------------------------------------------------------------------------------------------------
# The report's figures

#: Report figures in the order they appear: key -> (function, caption from the figure's :class:`Drawn` record).
FIGURES: dict[str, tuple[Callable[..., Figure], Callable[[Drawn], str]]] = {
    "gain_vs_lambda": (fig_gain_vs_lambda, _caption_gain_vs_lambda),
    "lambda_forest": (fig_lambda_forest, _caption_lambda_forest),
    "rounds_vs_time": (fig_rounds_vs_time, _caption_rounds_vs_time),
    "survival": (fig_survival, _caption_survival),
    "attribution": (fig_attribution, _caption_attribution),
    "accuracy_vs_gain": (fig_accuracy_vs_gain, _caption_accuracy_vs_gain),
    "accuracy_vs_length": (fig_accuracy_vs_length, _caption_accuracy_vs_length),
    "serving": (fig_serving, _caption_serving),
    "tradeoff": (fig_tradeoff, _caption_tradeoff),
    "cost_per_correct": (fig_cost_per_correct, _caption_cost_per_correct),
    "alpha_sweep": (fig_alpha_sweep, _caption_alpha_sweep),
    "time_model": (fig_time_model, _caption_time_model),
    "table4_costs": (fig_table4_costs, _caption_table4_costs),
}


def figure_caption(key: str, fig: Figure) -> str:
    """The caption of report figure ``key`` (``lambda_forest:<dataset>`` for a forest plot), written from what ``fig``
    drew (:func:`drawn`): what is drawn, how many, what was left out or clipped, and how loads are kept apart.

    Parameters
    ----------
    key : a key of :data:`FIGURES`, with ``:<dataset>`` for the per-dataset forest plots.
    fig : the figure that key's function drew.

    Returns
    -------
    str

    Examples
    --------
    >>> import pandas as pd
    >>> fig = fig_table4_costs(pd.DataFrame({"target": "T", "draft": "D", "dataset": "a", "method": "x_force_commit",
    ...                                      "params": "alpha0.3_t100", "fired": [5], "length_ratio": 0.7,
    ...                                      "rounds_ratio": 0.8, "time_ratio": 0.85}))
    >>> figure_caption("table4_costs", fig)[:40]
    "Table 4's costs, 1 intervention arm that"
    """
    base, _, ds = key.partition(":")
    return FIGURES[base][1](drawn(fig)) + (f" Dataset {ds}." if ds else "")
