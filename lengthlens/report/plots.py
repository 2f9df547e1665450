"""The report's figures as matplotlib Figures (Agg backend): returned for notebooks, inlined as SVG in the report.

Every function takes an :class:`~lengthlens.analyses.analyse.Analysis` (or, where noted, the DataFrame it
needs, e.g. ``analysis.tables["cells"]``) and returns a new :class:`matplotlib.figure.Figure`;
nothing is shown or saved. :func:`to_svg` turns a figure into an SVG string that can be inlined
into HTML next to other figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

if TYPE_CHECKING:  # pragma: no cover
    from lengthlens.analyses.analyse import Analysis

__all__ = ["FIGURES", "fig_accuracy_vs_gain", "fig_alpha_sweep", "fig_attribution", "fig_gain_vs_lambda",
           "fig_lambda_forest", "fig_rounds_vs_time", "fig_serving", "fig_table4_costs", "fig_time_model", "fig_tradeoff",
           "fig_survival", "few_items", "method_colors", "with_benchmark", "to_svg"]

from lengthlens.report.plot_style import (
    RC,
    add_caption_note,
    clip_marks,
    robust_linear_limits,
    robust_log_limits,
    log_limits,
    cells_of,
    dataset_markers,
    empty_panel,
    legends,
    Marks,
    subplots,
    few_items,
    method_colors,
    ratio_ticks,
    to_svg,
    with_benchmark,
)
from lengthlens.report.plot_survival import fig_survival  # noqa: F401 - re-exported


def _with_ci(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose interval is drawn: cells with fewer than 10 items (``small_n``) get their point only."""
    return df[~df["small_n"].astype(bool)] if "small_n" in df else df


def fig_gain_vs_lambda(obj: Analysis | pd.DataFrame) -> Figure:
    """Per cell, the per-round gain against the length ratio on log axes; above the line lambda = gain measured rounds lose.

    R/R* = lambda / gain, so a cell breaks even in verifier rounds exactly on the diagonal: the
    "length illusion" is every point above it, where the gain acceptance length promised is eaten
    by longer completions. One panel per target–draft pair; colour = rule, marker = dataset (no
    marker repeats up to 15 datasets); cells with few items (:func:`few_items`) are hollow and
    drawn without their interval; the axes hold every interval.
    """
    df = cells_of(obj).reset_index(drop=True)  # positions, not whatever index a caller's frame carries
    with matplotlib.rc_context(RC):
        pairs = sorted(df[["target", "draft"]].drop_duplicates().itertuples(index=False, name=None)) if not df.empty else []
        ncol = min(2, max(1, len(pairs)))
        nrow = max(1, -(-len(pairs) // ncol))
        fig, axes = subplots(nrow, ncol, figsize=(7.4 if ncol == 1 else 9.0, 4.6 if nrow == 1 else 3.6 * nrow),
                              layout="constrained", squeeze=False, sharex=True, sharey=True)
        if df.empty:
            return empty_panel(fig, axes[0, 0], "no cells")
        colors = method_colors(df["method"])
        df = with_benchmark(df)
        markers = dataset_markers(df["benchmark"])
        few = few_items(df)
        show_ci = len(df) <= MAX_CI_CELLS  # intervals clutter beyond that; the forest plots carry them
        ci = [df.loc[~few, "lambda_lo"], df.loc[~few, "lambda_hi"]] if show_ci and "lambda_lo" in df else []
        xlim = log_limits([df["gain"]])
        ylim = robust_log_limits([df["lambda"], pd.Series(list(xlim))], ci)
        if not show_ci:
            add_caption_note(fig, f"With {len(df)} cells (more than {MAX_CI_CELLS}) the intervals are not drawn; the "
                                  "forest plots show them.")
        rows = df.groupby(["target", "draft"], sort=False).indices
        for ax, (tgt, drf) in zip(axes.flat, pairs):
            sel = rows[(tgt, drf)]
            _gain_lambda_panel(ax, df.iloc[sel], few.iloc[sel], colors, markers, show_ci, xlim, ylim)
            ax.set_title(f"{tgt} ← {drf}" if len(pairs) > 1 else f"Gain against length ratio, {len(df)} cells")
        ax = axes.flat[0]  # the axes share x and y: their scale, limits and tickers are set once for all
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ratio_ticks(ax.xaxis, *xlim)
        ratio_ticks(ax.yaxis, *ylim)
        for ax in list(axes.flat)[len(pairs):]:
            ax.set_visible(False)
        fig.supxlabel("per-round gain (ℓ+1)/(ℓ*+1): what acceptance length promises (log scale)", fontsize=8.5, x=0.42)
        fig.supylabel("length ratio λ = mean L / mean L* (log scale)", fontsize=8.5)
        extra = ([Line2D([], [], ls="", marker="o", color="#555", markerfacecolor="none", markersize=5,
                         label=f"hollow: few items ({int(few.sum())})")] if few.any() else [])
        legends(axes.flat[0], colors, markers, outside=True, extra=extra)
        add_caption_note(fig, "Every α of each rule is drawn.")
        if len(extra) and len(markers) < 2:
            fig.legend(handles=extra, frameon=False, loc="outside right lower")
        return fig


def _gain_lambda_panel(ax: Any, df: pd.DataFrame, few: pd.Series, colors: dict, markers: dict, show_ci: bool,
                       xlim: tuple[float, float], ylim: tuple[float, float]) -> None:
    """One pair's cells with the break-even diagonal and the shaded region above it (log axes, set by the caller)."""
    marks = Marks()
    gain, lam, small = df["gain"].to_numpy(float), df["lambda"].to_numpy(float), few.to_numpy(bool)
    ci = show_ci and "lambda_lo" in df
    lo, hi = (df["lambda_lo"].to_numpy(float), df["lambda_hi"].to_numpy(float)) if ci else (gain, gain)
    if ci:
        lo, hi, n_clipped = clip_marks(ax, np.where(small, np.nan, lo), np.where(small, np.nan, hi), gain, ylim, vertical=True)
        if n_clipped:
            add_caption_note(ax.figure, f"{n_clipped} interval(s) of λ run past the axis, drawn to its edge and marked ▴/▾.")
    for (m, d), at in sorted(df.groupby(["method", "benchmark"]).indices.items()):
        full, hollow = at[~small[at]], at[small[at]]
        if ci and len(full):
            marks.vbars(gain[full], lo[full], hi[full], color=colors[m], alpha=0.35, linewidth=0.8)
        marks.points(gain[full], lam[full], color=colors[m], marker=markers[d], size=26, alpha=0.9,
                     edgecolor="white", linewidth=0.4)
        if len(hollow):
            marks.points(gain[hollow], lam[hollow], color="none", edgecolor=colors[m], marker=markers[d],
                         size=22, linewidth=0.8, alpha=0.8)
    marks.draw(ax, zorder=3, bar_zorder=2)
    xs = np.geomspace(min(xlim[0], ylim[0]), max(xlim[1], ylim[1]), 50)
    ax.fill_between(xs, xs, ylim[1] * 10, color="#fbe9e7", zorder=0, lw=0)
    ax.plot(xs, xs, color="#a8322d", lw=1.1, zorder=1)
    ax.axhline(1, color="#98a2b3", lw=0.8, ls=":")
    ax.axvline(1, color="#98a2b3", lw=0.8, ls=":")
    ax.text(0.02, 0.98, "above the line: more verifier rounds than strict\n(R/R* = λ / gain > 1)",
            transform=ax.transAxes, ha="left", va="top", color="#a8322d", fontsize=7.5)


def fig_lambda_forest(obj: Analysis | pd.DataFrame, dataset: str | None = None, max_labels: int = 44) -> Figure:
    """Forest plot of one dataset: lambda with its bootstrap interval per cell, sorted by lambda (log axis).

    ``dataset`` picks the dataset (the report draws one figure per dataset, so that every label is
    printed at about the body text's size); without it, every dataset's cells in one panel. Rows
    are labelled (pair, rule, params) up to ``max_labels`` cells (a taller figure would be shrunk to fit a
    page, and its labels with it); cells with few items are hollow.
    """
    df = cells_of(obj)
    if dataset is not None and not df.empty:
        df = df[df["dataset"] == dataset]
    with matplotlib.rc_context(RC):
        if df.empty:
            fig, ax = subplots(figsize=(6.4, 2), layout="constrained")
            return empty_panel(fig, ax, "no cells")
        g = df.sort_values("lambda", kind="mergesort").reset_index(drop=True)
        labelled = len(g) <= max_labels
        fig, ax = subplots(figsize=(7.2, 0.9 + len(g) * (0.19 if labelled else 0.08)), layout="constrained")
        colors = method_colors(df["method"])
        few = few_items(g)
        y = np.arange(len(g))
        for m, gm in g.groupby("method"):
            yy = y[gm.index]
            small = few.loc[gm.index].to_numpy()
            # Cells with few items get their point only, as in Figure 1.
            ax.hlines(yy[~small], gm["lambda_lo"][~small].clip(upper=1e300), gm["lambda_hi"][~small].clip(upper=1e300),
                      color=colors[m], lw=1.1, alpha=0.8)
            ax.plot(gm["lambda"][~small], yy[~small], "o", color=colors[m], ms=4)
            ax.plot(gm["lambda"][small], yy[small], "o", color=colors[m], ms=4, markerfacecolor="white")
        ax.axvline(1, color="#98a2b3", lw=0.9, ls="--")
        ax.set_xscale("log")
        lim = robust_log_limits([g["lambda"]], [g.loc[~few, "lambda_lo"], g.loc[~few, "lambda_hi"]])
        _lo, _hi, n_clipped = clip_marks(ax, g.loc[~few, "lambda_lo"], g.loc[~few, "lambda_hi"], y[~few.to_numpy()], lim,
                                         vertical=False)
        if n_clipped:
            add_caption_note(fig, f"{n_clipped} interval(s) run past the axis, drawn to its edge and marked ▸/◂.")
        ax.set_xlim(*lim)
        ratio_ticks(ax.xaxis, *lim)
        ax.set_ylim(-1, max(len(g), 1))
        if labelled:
            short_pair = df[["target", "draft"]].drop_duplicates().shape[0] > 1
            labels = [(f"{r.target} · " if short_pair else "") + f"{r.method} {r.params}"
                      + (f" ({r.n_items} items)" if few.iloc[i] else "")
                      + (f" [incomplete: {r.n_items}/{r.n_items_baseline}]" if not getattr(r, "complete", True) else "")
                      for i, r in enumerate(g.itertuples())]
            ax.set_yticks(y, labels, fontsize=8)
        else:
            ax.set_yticks([])
        ax.grid(axis="y", visible=False)
        n_incomplete = int((~g["complete"].astype(bool)).sum()) if "complete" in g else 0
        if n_incomplete:
            add_caption_note(fig, f"{n_incomplete} cell(s) of arms covering fewer than 95% of their baseline's items"
                                  + (" are labelled [incomplete]." if labelled else " are drawn among the others."))
        name = dataset if dataset is not None else ", ".join(sorted(df["dataset"].unique()))
        ax.set_title(f"λ per cell: {name} ({len(g)} cells; dashed: λ = 1)")
        ax.set_xlabel("λ with its 95% interval (log scale)")
        handles = [Line2D([], [], marker="o", color=c, label=m, ms=4) for m, c in colors.items() if m != "strict"]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)), frameon=False)
        return fig


def fig_rounds_vs_time(obj: Analysis | pd.DataFrame) -> Figure:
    """Measured rounds ratio R/R* against wall-time ratio T/T*: fewer rounds do not always mean less time."""
    df = cells_of(obj)
    with matplotlib.rc_context(RC):
        fig, ax = subplots(figsize=(7.4, 4.6), layout="constrained")
        if df.empty:
            return empty_panel(fig, ax, "no cells")
        df = with_benchmark(df.reset_index(drop=True))
        colors = method_colors(df["method"])
        markers = dataset_markers(df["benchmark"])
        marks = Marks()
        for (m, d), g in df.groupby(["method", "benchmark"], sort=True):
            marks.points(g["rounds_ratio"], g["time_ratio"], color=colors[m], marker=markers[d], size=22, alpha=0.85,
                         edgecolor="white", linewidth=0.4)
        marks.draw(ax, zorder=3)
        lo, hi = log_limits([df["rounds_ratio"], df["time_ratio"]])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.plot([lo, hi], [lo, hi], color="#98a2b3", lw=0.8, ls=":")
        ax.axhline(1, color="#a8322d", lw=0.9)
        ax.axvline(1, color="#a8322d", lw=0.9)
        ax.fill_between([lo, 1], 1, hi, color="#fbe9e7", lw=0, zorder=0)
        ax.text(0.02, 0.98, "fewer rounds,\nmore time", transform=ax.transAxes, va="top", ha="left", fontsize=7,
                color="#a8322d")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ratio_ticks(ax.xaxis, lo, hi)
        ratio_ticks(ax.yaxis, lo, hi)
        ax.set_xlabel("measured rounds ratio R/R* (log scale)")
        ax.set_ylabel("wall-time ratio T/T* (log scale)")
        ax.set_title("Verifier rounds against wall time per cell (dotted: T/T* = R/R*)")
        legends(ax, colors, markers, outside=True)
        _note_every_cell(fig, df)
        return fig


def _note_every_cell(fig: Figure, df: pd.DataFrame, intervals: bool | None = None) -> None:
    """The caption's note for a figure of every cell: every α is drawn, and how many cells have few items."""
    few = int(few_items(df).sum())
    note = "Every α of each rule is drawn"
    if few:
        note += (f", {few} cell(s) with fewer than 10 items (e.g. calibration probes) among them"
                 + (", without their interval" if intervals else ""))
    if intervals is False:
        note += f"; with {len(df)} cells the intervals are not drawn"
    add_caption_note(fig, note + ".")


def fig_accuracy_vs_gain(obj: Analysis | pd.DataFrame, drop_pp: float = 2.0) -> Figure:
    """Accuracy change (percentage points, graded cells) against the per-round gain; the dashed line is the 2-point drop."""
    df = cells_of(obj)
    with matplotlib.rc_context(RC):
        fig, ax = subplots(figsize=(7.4, 4.4), layout="constrained")
        if not df.empty:  # cells graded on fewer than half their items are left out, as from the accuracy counts
            partial = df["graded_partial"].fillna(False).astype(bool) if "graded_partial" in df else False
            g_all = df[(df["n_graded"] > 0) & ~partial]
        else:
            g_all = df
        if g_all.empty or "accuracy_delta_pp" not in g_all:
            return empty_panel(fig, ax, "no graded cells")
        colors = method_colors(df["method"])
        g_all = with_benchmark(g_all.reset_index(drop=True))  # one marker per benchmark, as in every figure
        markers = dataset_markers(g_all["benchmark"])
        show_ci = len(g_all) <= 60
        marks = Marks()
        for (m, d), g in g_all.groupby(["method", "benchmark"], sort=True):
            if show_ci and "accuracy_delta_lo" in g:
                gc = _with_ci(g)
                marks.vbars(gc["gain"], gc["accuracy_delta_lo"], gc["accuracy_delta_hi"], color=colors[m], alpha=0.3,
                            linewidth=0.8)
            marks.points(g["gain"], g["accuracy_delta_pp"], color=colors[m], marker=markers[d], size=22, alpha=0.85,
                         edgecolor="white", linewidth=0.4)
        marks.draw(ax, zorder=3, bar_zorder=2)
        ax.axhline(0, color="#98a2b3", lw=0.8)
        ax.axhline(-drop_pp, color="#a8322d", lw=0.9, ls="--")
        ax.text(ax.get_xlim()[1], -drop_pp, f" −{drop_pp:g} pp", va="center", ha="left", fontsize=7, color="#a8322d",
                clip_on=False)
        ax.set_xlabel("per-round gain (ℓ+1)/(ℓ*+1)")
        ax.set_ylabel("accuracy change, percentage points")
        ax.set_title(f"Accuracy change against gain, {len(g_all)} graded cells")
        legends(ax, colors, markers, outside=True)
        _note_every_cell(fig, g_all, intervals=show_ci)
        return fig


def fig_attribution(obj: Analysis | pd.DataFrame) -> Figure:
    """Where the extra characters go: extra characters per run (relaxed − strict) split into thinking and answer.

    One small panel per dataset (three to a row, so that labels keep their size at the study's
    twelve datasets), a bar per rule. The attribution table holds sums over a cell's runs; they are
    divided by the cell's runs and averaged over target–draft pairs, so datasets with different
    item counts compare.
    """
    from lengthlens.analyses.cells import SMALL_N_ITEMS

    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("attribution")
    note = ""
    if df is not None and not df.empty and not isinstance(obj, pd.DataFrame) and "alpha_selected" in obj.tables:
        # One α per rule and dataset (Table 3's), so that the bars do not average over α.
        sel = obj.tables["alpha_selected"].rename(columns={"params_selected": "params"})
        df = df.merge(sel[[k for k in ("target", "draft", "dataset", "method", "params", "serving")
                           if k in sel and k in df]], how="inner")
        note = "Table 3's cells: each rule at its most aggressive complete α per dataset"
    if df is not None and not df.empty and "n_items" in df.columns:
        small = df["n_items"] < SMALL_N_ITEMS
        if small.any():
            note = (note or "Every α of each rule, averaged") + f"; {int(small.sum())} cell(s) with fewer than {SMALL_N_ITEMS} items left out"
        df = df[~small]
    with matplotlib.rc_context(RC):
        if df is None or df.empty or not {"extra_chars", "extra_chars_thinking"} <= set(df.columns):
            fig, ax = subplots(figsize=(6.4, 2))
            return empty_panel(fig, ax, "no attribution table (needs completion texts)")
        per = df["n_runs"].where(df["n_runs"] > 0) if "n_runs" in df.columns else 1.0
        d = df.assign(think=df["extra_chars_thinking"] / per, answer=(df["extra_chars"] - df["extra_chars_thinking"]) / per)
        agg = d.groupby(["dataset", "method"], sort=True)[["think", "answer"]].mean().reset_index()
        datasets = sorted(agg["dataset"].unique())
        methods = sorted(agg["method"].unique())
        colors = method_colors(methods)
        ncol = min(3, len(datasets))
        nrow = -(-len(datasets) // ncol)
        fig, axes = subplots(nrow, ncol, figsize=(7.4, 0.9 + 2.0 * nrow), layout="constrained", squeeze=False)
        for ax, ds in zip(axes.flat, datasets):
            g = agg[agg["dataset"] == ds].set_index("method").reindex(methods)
            x = np.arange(len(methods))
            think, ans = g["think"].to_numpy(), g["answer"].to_numpy()
            ax.bar(x, think, 0.75, color=[colors[m] for m in methods])
            # The answer part sits on the thinking part when both go the same way, else from zero.
            bottom = np.where(np.sign(ans) == np.sign(think), think, 0.0)
            ax.bar(x, ans, 0.75, bottom=bottom, color=[colors[m] for m in methods], alpha=0.35, hatch="///",
                   edgecolor="white", lw=0)
            ax.axhline(0, color="#667085", lw=0.8)
            ax.set_xticks([])
            ax.grid(axis="x", visible=False)
            ax.set_title(ds, fontsize=9)
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        for ax in list(axes.flat)[len(datasets):]:
            ax.set_visible(False)
        fig.supylabel("extra characters per run (relaxed − strict)", fontsize=8.5)
        handles = [Line2D([], [], color=colors[m], lw=6, label=m) for m in methods]
        handles += [Rectangle((0, 0), 1, 1, color="#888", label="thinking"),
                    Rectangle((0, 0), 1, 1, color="#888", alpha=0.35, hatch="///", label="answer")]
        fig.legend(handles=handles, frameon=False, loc="outside lower center", ncol=min(4, len(handles)))
        fig.suptitle("Extra characters per run: thinking (solid) and answer (hatched), mean over pairs", fontsize=9.5)
        add_caption_note(fig, (note or "Every α of each rule, averaged") + ".")
        return fig


#: Above this many cells Figure 1 draws points only (the forest plots carry the intervals).
MAX_CI_CELLS = 120


def _rule_cells(obj: Analysis | pd.DataFrame) -> pd.DataFrame:
    """Cells of relaxed rules (interventions are Table 4's), with enough items for an interval (small_n left out)."""
    df = cells_of(obj)
    if df.empty:
        return df
    df = df[~df["method"].astype(str).str.endswith("_force_commit")]
    return df


def _marker_legend(fig: Figure, markers: dict[str, str], extra: list | None = None,
                   at: tuple[float, float] = (0.84, 0.92)) -> None:
    """The benchmark markers (and ``extra`` handles) right of the panels, its upper left corner at ``at`` (figure
    fraction), when a colour legend would say nothing new (each panel is one rule, titled)."""
    handles = [Line2D([], [], ls="", marker=mk, color="#555", label=d, markersize=5) for d, mk in markers.items()]
    handles += list(extra or [])
    if handles:
        fig.legend(handles=handles, title="dataset", frameon=False, title_fontsize=7.5, loc="upper left",
                   bbox_to_anchor=at)


def fig_tradeoff(obj: Analysis | pd.DataFrame) -> Figure:
    """The speed–accuracy trade-off: R/R* (top) and T/T* (bottom) against the accuracy change, with both intervals, per rule.

    One column per rule; marker = benchmark; the lower-left quadrant (fewer rounds, no accuracy lost) is
    where a rule pays. Graded cells only; cells with fewer than 10 items are left out. Axes hold the
    points and the intervals up to a robust range; longer intervals are clipped at the edge and marked.
    """
    df = _rule_cells(obj)
    with matplotlib.rc_context(RC):
        if not df.empty:
            partial = df["graded_partial"].fillna(False).astype(bool) if "graded_partial" in df else False
            small = df["small_n"].fillna(False).astype(bool) if "small_n" in df else False
            n_small = int((small & (df["n_graded"] > 0)).sum()) if "small_n" in df else 0
            df = df[(df["n_graded"] > 0) & ~partial & ~small]
        if df.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return empty_panel(fig, ax, "no graded cells with 10 or more items")
        df = with_benchmark(df.reset_index(drop=True))
        methods = sorted(df["method"].astype(str).unique())
        colors, markers = method_colors(methods), dataset_markers(df["benchmark"])
        ncol = len(methods)
        width, height = max(6.4, 1.75 * ncol + 1.6), 4.6
        fig, axes = subplots(2, ncol, figsize=(width, height), layout="none", squeeze=False, sharex=True, sharey="row")
        fig.subplots_adjust(left=0.75 / width, right=1 - 1.3 / width, bottom=0.65 / height, top=1 - 0.6 / height,
                            wspace=0.12, hspace=0.12)
        xlim = robust_linear_limits([df["accuracy_delta_pp"]], [df["accuracy_delta_lo"], df["accuracy_delta_hi"]])
        n_clipped = 0
        for row, (metric, label) in enumerate((("rounds_ratio", "R/R* (log)"), ("time_ratio", "T/T* (log)"))):
            ylim = robust_log_limits([df[metric]], [df[f"{metric}_lo"], df[f"{metric}_hi"]])
            for ax, m in zip(axes[row], methods):
                g = df[df["method"] == m]
                x, y = g["accuracy_delta_pp"].to_numpy(float), g[metric].to_numpy(float)
                marks = Marks()
                ylo, yhi, k1 = clip_marks(ax, g[f"{metric}_lo"], g[f"{metric}_hi"], x, ylim, vertical=True, marks=marks)
                xlo, xhi, k2 = clip_marks(ax, g["accuracy_delta_lo"], g["accuracy_delta_hi"], y, xlim, vertical=False,
                                          marks=marks)
                n_clipped += k1 + k2
                marks.vbars(x, ylo, yhi, color=colors[m], alpha=0.35, linewidth=0.8)
                marks.hbars(y, xlo, xhi, color=colors[m], alpha=0.35, linewidth=0.8)
                for d, at in sorted(g.groupby("benchmark").indices.items()):
                    marks.points(x[at], y[at], marker=markers[d], size=22, color=colors[m], edgecolor="white", linewidth=0.4)
                marks.draw(ax, zorder=3, bar_zorder=2)
                ax.axhline(1, color="#98a2b3", lw=0.8, ls=":")
                ax.axvline(0, color="#98a2b3", lw=0.8, ls=":")
                ax.set_yscale("log")
                ax.set_ylim(*ylim)
                ax.set_xlim(*xlim)
                ratio_ticks(ax.yaxis, *ylim, most=6)
                ax.xaxis.set_major_locator(MaxNLocator(4))
                if row == 0:
                    ax.set_title(m)
            axes[row][0].set_ylabel(label)
        fig.supxlabel("accuracy change, percentage points (relaxed − strict)", fontsize=8.5, y=0.1 / height, va="bottom")
        _marker_legend(fig, markers, at=(1 - 1.25 / width, 1 - 0.6 / height))
        fig.suptitle(f"Speed against accuracy, {len(df)} graded cells (every α)", fontsize=9.5, y=1 - 0.08 / height, va="top")
        if n_small:
            add_caption_note(fig, f"{n_small} graded cell(s) with fewer than 10 items left out.")
        if n_clipped:
            add_caption_note(fig, f"{n_clipped} interval(s) run past the axes, drawn to the edge and marked ▸.")
        return fig


#: The α sweep's rows: metric, label, log scale.
_SWEEP = (("gain", "gain", True), ("lambda", "λ", True), ("rounds_ratio", "R/R*", True), ("time_ratio", "T/T*", True),
          ("accuracy_delta_pp", "Δacc pp", False))


def fig_alpha_sweep(obj: Analysis | pd.DataFrame) -> Figure:
    """The α sweep: gain, λ, R/R*, T/T* and the accuracy change against α, one column per rule, a line per dataset.

    Every α run is drawn; cells with few items (e.g. calibration probes) are hollow and drawn without
    their interval. Several target–draft pairs are told apart by the line style.
    """
    df = _rule_cells(obj)
    with matplotlib.rc_context(RC):
        df = df[df["alpha"].notna()] if not df.empty else df
        if df.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return empty_panel(fig, ax, "no cells with an α")
        df = with_benchmark(df.reset_index(drop=True))
        methods = sorted(df["method"].astype(str).unique())
        colors, markers = method_colors(methods), dataset_markers(df["benchmark"])
        pairs = sorted(df[["target", "draft"]].drop_duplicates().itertuples(index=False, name=None))
        styles = dict(zip(pairs, ["-", "--", ":", "-."] * 8))
        few = few_items(df)
        rows = [r for r in _SWEEP if r[0] in df.columns and df[r[0]].notna().any()]
        # A fixed layout: constrained layout would measure every tick of the 25 small axes twice.
        width, height = max(6.4, 1.75 * len(methods) + 1.6), 1.35 * len(rows) + 0.8
        fig, axes = subplots(len(rows), len(methods), figsize=(width, height), layout="none", squeeze=False,
                             sharex="col", sharey="row")
        fig.subplots_adjust(left=0.75 / width, right=1 - 2.0 / width, bottom=0.5 / height, top=1 - 0.45 / height,
                            wspace=0.12, hspace=0.14)
        n_clipped = 0
        for i, (metric, label, log) in enumerate(rows):
            stem = "accuracy_delta" if metric == "accuracy_delta_pp" else metric
            lims = [df.loc[~few, f"{stem}_lo"], df.loc[~few, f"{stem}_hi"]] if f"{stem}_lo" in df else []
            ylim = robust_log_limits([df[metric]], lims) if log else robust_linear_limits([df[metric]], lims)
            for ax, m in zip(axes[i], methods):
                g = df[df["method"] == m].sort_values("alpha", kind="mergesort")
                marks = Marks()
                for (tg, dr, b), at in sorted(g.groupby(["target", "draft", "benchmark"]).indices.items()):
                    gl = g.iloc[at]
                    f = few.loc[gl.index].to_numpy()
                    x, yv = gl["alpha"].to_numpy(float), gl[metric].to_numpy(float)
                    marks.line(x, yv, color=colors[m], alpha=0.8, linewidth=0.9, dashes=styles[(tg, dr)])
                    marks.points(x[~f], yv[~f], marker=markers[b], size=16, color=colors[m])
                    marks.points(x[f], yv[f], marker=markers[b], size=14, color="white", edgecolor=colors[m])
                    if f"{stem}_lo" in gl:
                        lo, hi, k = clip_marks(ax, gl[f"{stem}_lo"].to_numpy(float)[~f], gl[f"{stem}_hi"].to_numpy(float)[~f],
                                               x[~f], ylim, vertical=True, marks=marks)
                        n_clipped += k
                        marks.vbars(x[~f], lo, hi, color=colors[m], alpha=0.3, linewidth=0.8)
                marks.draw(ax, zorder=3, bar_zorder=2)
                ax.autoscale_view()
                ax.axhline(0 if not log else 1, color="#98a2b3", lw=0.8, ls=":")
                ax.xaxis.set_major_locator(MaxNLocator(3))
                if log:
                    ax.set_yscale("log")
                    ratio_ticks(ax.yaxis, *ylim, most=5)
                else:
                    ax.yaxis.set_major_locator(MaxNLocator(4))
                ax.set_ylim(*ylim)
                if i == 0:
                    ax.set_title(m)
                if i == len(rows) - 1:
                    ax.set_xlabel("α")
            axes[i][0].set_ylabel(label)
        extra = [Line2D([], [], color="#555", ls=styles[p], label=f"{p[0]} ← {p[1]}") for p in pairs] if len(pairs) > 1 else []
        if few.any():
            extra.append(Line2D([], [], ls="", marker="o", color="#555", markerfacecolor="white", markersize=5,
                                label=f"hollow: fewer than 10 items ({int(few.sum())})"))
        _marker_legend(fig, markers, extra, at=(1 - 1.95 / width, 1 - 0.45 / height))
        fig.suptitle("The α sweep: each rule's cells against α (a line per dataset)", fontsize=9.5, y=1 - 0.08 / height,
                     va="top")
        if few.any():
            add_caption_note(fig, f"{int(few.sum())} cell(s) with fewer than 10 items (e.g. calibration probes) are hollow, "
                                  "without their interval.")
        if n_clipped:
            add_caption_note(fig, f"{n_clipped} interval(s) run past the axes, drawn to the edge and marked ▴/▾.")
        return fig


def fig_time_model(obj: Analysis | pd.DataFrame) -> Figure:
    """The time model, T/T* = R/R* × time per round: each arm's fitted seconds per verifier round against its
    baseline's (left), and T/T* predicted from the rounds at the baseline's cost against the measured T/T* (right)."""
    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("time_model", pd.DataFrame())
    with matplotlib.rc_context(RC):
        fig, (a1, a2) = subplots(1, 2, figsize=(8.6, 3.9), layout="constrained")
        from lengthlens.analyses.cells import SMALL_N_ITEMS

        if df is not None and not df.empty:
            few = df["n_runs"] < SMALL_N_ITEMS  # a line through a handful of runs is noise
            if few.any():
                add_caption_note(fig, f"{int(few.sum())} cell(s) with fewer than {SMALL_N_ITEMS} runs left out.")
            df = df[~few]
        if df is None or df.empty:
            return empty_panel(fig, a1, "no wall times and rounds logged")
        d = with_benchmark(df.reset_index(drop=True))
        colors, markers = method_colors(d["method"]), dataset_markers(d["benchmark"])
        ms = 1000.0
        left, right = Marks(), Marks()
        for (m, b), g in d.groupby(["method", "benchmark"], sort=True):
            left.points(g["seconds_per_round_star"] * ms, g["seconds_per_round"] * ms, marker=markers[b], size=20,
                        color=colors[m], edgecolor="white", linewidth=0.4)
            right.points(g["time_ratio_predicted"], g["time_ratio"], marker=markers[b], size=20, color=colors[m],
                         edgecolor="white", linewidth=0.4)
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
        a2.set_xlabel("T/T* predicted: the arm's rounds at the baseline's cost")
        a2.set_ylabel("T/T* measured")
        a2.set_title("Predicted against measured wall time")
        legends(a2, colors, markers, outside=True)
        return fig


def fig_table4_costs(obj: Analysis | pd.DataFrame) -> Figure:
    """Table 4's costs: length, verifier rounds and wall time of the forced runs over their base runs, per intervention arm."""
    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("table4", pd.DataFrame())
    with matplotlib.rc_context(RC):
        cols = [("length_ratio", "length"), ("rounds_ratio", "rounds"), ("time_ratio", "time")]
        d = df[(df["method"] != "all") & (df["fired"] > 0)] if df is not None and not df.empty and "length_ratio" in df else pd.DataFrame()
        if d.empty:
            fig, ax = subplots(figsize=(6.4, 2))
            return empty_panel(fig, ax, "no intervention fired")
        d = d.reset_index(drop=True)
        several = d[["target", "draft"]].drop_duplicates().shape[0] > 1
        labels = [(f"{r.target} · " if several else "") + f"{r.dataset} · {str(r.method).removesuffix('_force_commit')} {r.params}"
                  for r in d.itertuples()]
        fig, ax = subplots(figsize=(7.4, 0.9 + 0.24 * len(d) * 1.0 + 0.6), layout="constrained")
        y = np.arange(len(d))
        palette = ["#0072B2", "#D55E00", "#009E73"]
        for k, ((c, lab), color) in enumerate(zip(cols, palette)):
            ax.barh(y + (k - 1) * 0.26, d[c], 0.26, color=color, label=lab)
        ax.axvline(1, color="#667085", lw=0.9, ls="--")
        ax.set_yticks(y, labels, fontsize=7.5)
        ax.invert_yaxis()
        ax.set_xlabel("forced over base runs (Σ forced / Σ base, fired pairs); dashed: 1")
        ax.set_title("What forcing the thinking closed cost")
        ax.legend(frameon=False, loc="lower right")
        return fig


#: Report figures in the order they appear: key -> (function, caption).
#: Panels of the serving figure: metric, axis label.
_SERVING_PANELS = (("rounds_ratio", "R/R* (verifier rounds)"), ("time_ratio", "T/T* (wall time)"),
                   ("throughput_ratio", "output tokens/s, relaxed / strict"))
#: Rows (target, draft, dataset) the serving figure draws at most; serving.csv holds every arm.
SERVING_MAX_ROWS = 6


def fig_serving(obj: Analysis | pd.DataFrame) -> Figure:
    """R/R*, T/T* and the tokens-per-second ratio of every rule against the load (concurrency, request rate or batch size).

    One row of panels per (target, draft, dataset[, fixed part of the condition]) up to
    :data:`SERVING_MAX_ROWS`; one line per rule and params with its intervals; log load axis. The
    dotted line is 1: where T/T* climbs over it (or tokens/s falls under it) the rule's advantage is gone.
    Takes the Analysis or its ``serving`` table (:func:`lengthlens.analyses.serving.serving_table`).
    """
    df = obj if isinstance(obj, pd.DataFrame) else obj.tables.get("serving", pd.DataFrame())
    with matplotlib.rc_context(RC):
        keys = list(dict.fromkeys(df[["target", "draft", "dataset", "series"]].itertuples(index=False, name=None))) \
            if not df.empty else []
        shown = keys[:SERVING_MAX_ROWS]
        fig, axes = subplots(max(1, len(shown)), 3, figsize=(9.6, 2.7 * max(1, len(shown)) + 0.6), layout="constrained",
                             squeeze=False, sharex=True)
        if df.empty:
            return empty_panel(fig, axes[0, 0], "one serving condition: nothing to compare")
        colors = method_colors(df["method"])
        axis = str(df["load_axis"].iloc[0])
        numeric = axis != "condition" and bool((df["load"] > 0).all())
        for row, key in zip(axes, shown):
            part = df[(df["target"] == key[0]) & (df["draft"] == key[1]) & (df["dataset"] == key[2]) & (df["series"] == key[3])]
            for ax, (metric, label) in zip(row, _SERVING_PANELS):
                for (m, p), g in part.groupby(["method", "params"], sort=True):
                    x, y = g["load"].to_numpy(float), g[metric].to_numpy(float)
                    lo, hi = g[f"{metric}_lo"].to_numpy(float), g[f"{metric}_hi"].to_numpy(float)
                    bars = ~g["small_n"].astype(bool).to_numpy() & np.isfinite(lo) & np.isfinite(hi)
                    ax.plot(x, y, color=colors[m], lw=1.2, marker="o", ms=3.5, label=f"{m} {p}")
                    if bars.any():
                        ax.errorbar(x[bars], y[bars], yerr=[y[bars] - lo[bars], hi[bars] - y[bars]], fmt="none",
                                    ecolor=colors[m], elinewidth=0.9, capsize=2.5, alpha=0.6)
                ax.axhline(1, color="#a8322d", lw=0.8, ls=":")
                ax.set_ylabel(label, fontsize=8)
            row[0].set_title(" / ".join(k for k in key if k), fontsize=8.5, loc="left")
        ticks = sorted(set(df["load"].astype(float)))
        names = dict(zip(df["load"].astype(float), df["serving"]))
        for ax in axes[-1]:
            if numeric:
                ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [f"{t:g}" if numeric else names[t] for t in ticks], fontsize=7)
            ax.set_xlabel({"concurrency": "concurrency (requests in flight)", "request_rate": "request rate (1/s)",
                           "batch_size": "batch size"}.get(axis, "serving condition"), fontsize=8)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(handles)), frameon=False, fontsize=7.5)
        if len(keys) > len(shown):
            fig.suptitle(f"the first {len(shown)} of {len(keys)} target / draft / dataset groups (serving.csv has all)",
                         fontsize=8)
        return fig


FIGURES: dict[str, tuple[Any, str]] = {
    "gain_vs_lambda": (fig_gain_vs_lambda, ("The length illusion at a glance: per-round gain against length ratio per cell. "
                       "Measured rounds break even on the diagonal (R/R* = λ / gain = 1); every cell above it needs more "
                       "verifier rounds than strict decoding although its acceptance length rose. Log axes; one panel per target–draft "
                       "pair; colour is the rule, marker the benchmark; hollow markers are cells with fewer than 10 items "
                       "(small_n, e.g. calibration probes), drawn without their interval.")),
    "lambda_forest": (fig_lambda_forest, "Length ratio λ with its paired item-bootstrap interval, per cell."),
    "rounds_vs_time": (fig_rounds_vs_time, "Measured rounds ratio against wall-time ratio per cell."),
    "survival": (fig_survival, ("Completion-length survival: strict against each rule per dataset; the dashed line is the "
                 "token budget and + marks runs cut there (censored).")),
    "attribution": (fig_attribution, ("Extra characters per run of relaxed runs over strict, split into the thinking part "
                    "(solid; GPT-OSS's analysis channel, or a <think> block) and the answer (hatched); mean over "
                    "target–draft pairs. Panel titles are datasets; colour is the rule.")),
    "accuracy_vs_gain": (fig_accuracy_vs_gain, "Accuracy change against per-round gain for graded cells; dashed: a 2-point drop."),
    "serving": (fig_serving, ("Serving conditions: verifier rounds, wall time and output tokens per second of each rule "
                "relative to its baseline at the same load, with their intervals. R/R* does not depend on the load; "
                "where T/T* rises over the dotted line (tokens/s falls under it) the rule's advantage has disappeared.")),
    "tradeoff": (fig_tradeoff, ("The speed–accuracy trade-off: measured verifier rounds R/R* (top) and wall time T/T* (bottom) "
                 "against the accuracy change, with both 95% intervals, one column per rule, every α; marker = benchmark. "
                 "A rule pays below the dotted line at 1 and right of the one at 0. Graded cells graded on at least half "
                 "their items only.")),
    "alpha_sweep": (fig_alpha_sweep, ("The α sweep: gain, λ, R/R*, T/T* and the accuracy change against α, one column per "
                    "rule, a line per dataset (marker = benchmark), with 95% intervals.")),
    "time_model": (fig_time_model, ("The time model, T/T* = R/R* × time per round. Left: each cell's fitted cost of a "
                   "verifier round (slope of wall time on rounds over its runs), relaxed against baseline. Right: T/T* "
                   "predicted from the arm's rounds at its baseline's fitted cost (fixed and per-round) against the "
                   "measured T/T*; above the dotted line a round of the relaxed arm costs more (time_model.csv).")),
    "table4_costs": (fig_table4_costs, ("Table 4's costs: completion length, verifier rounds and wall time of the forced "
                     "runs over their base runs (ratios of sums over the fired pairs), per intervention arm that fired.")),
}
