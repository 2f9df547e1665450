"""The completion-length survival figure (Kaplan–Meier per dataset, strict against each rule); see :mod:`lengthlens.report.plots`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from lengthlens.report.plot_style import RC, Drawn, VisualKey, attach, empty_panel, subplots, visual_key

if TYPE_CHECKING:  # pragma: no cover
    from lengthlens.analyses.analyse import AnalysisResult
    from lengthlens.analyses.censoring import DatasetSurvival


def _thin(t: np.ndarray, s: np.ndarray, max_points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Keep a step curve's shape with at most ~max_points vertices (thousands of steps bloat the SVG)."""
    if len(t) <= max_points:
        return t, s
    grid = np.linspace(t[0], t[-1], max_points)
    idx = np.searchsorted(t, grid, side="right") - 1
    return grid, s[idx]


def _survival_panel(ax: Any, d: DatasetSurvival, ds: str, key: VisualKey, record: Drawn) -> bool:
    """One dataset's Kaplan–Meier curves (strict first), censoring marks, budget lines and labels; whether the axis
    ends before the budget (every run far below it)."""
    budgets = d.budgets
    for m, curve in d.curves.items():
        tt, ss = _thin(curve.times, curve.survival)
        lw, z = (1.8, 5) if m == "strict" else (1.1, 4)
        ax.step(tt, ss, where="post", color=key.color(m), lw=lw, zorder=z)
        record.mark(key, m)
        record.points += 1
        if curve.censored_times.size:  # censored runs: a "+" at each distinct censoring length, at the curve's height
            ax.plot(curve.censored_times, curve.censored_survival, "+", color=key.color(m), ms=7, mew=1.4, zorder=6)
            record.hollow += int(curve.censored_times.size)
    for b in budgets:
        ax.axvline(b, color="#a8322d", lw=0.8, ls="--")
    longest = max((float(c.times[-1]) for c in d.curves.values() if c.times.size), default=0.0)
    short = False
    if budgets and not d.n_censored and 0 < longest < 0.5 * budgets[-1]:
        # Every run ended far below the budget: the axis ends at the longest run and names the budget instead.
        ax.set_xlim(0, longest * 1.05)
        ax.text(0.98, 0.97, f"budget {budgets[-1]:,} tokens →", ha="right", va="top", fontsize=6.5, color="#a8322d",
                transform=ax.transAxes)
        short = True
    elif budgets:
        ax.text(budgets[-1], 0.97, "budget ", ha="right", va="top", fontsize=6.5, color="#a8322d",
                transform=ax.get_xaxis_transform())
        ax.set_xlim(0, budgets[-1] * 1.04)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{ds}\n({d.n_runs} runs, {d.n_censored} censored)", fontsize=8)  # a long name: the counts below it
    if d.incomplete:  # an arm cut short: its curve is not the rule's on the whole dataset
        ax.text(0.98, 0.80, "incomplete: " + ", ".join(d.incomplete), ha="right", va="top", fontsize=6.5,
                color="#a8322d", transform=ax.transAxes)
    ax.set_xlabel("completion length (tokens)")
    ax.set_ylabel("P(L > x)")
    return short


def fig_survival(analysis: AnalysisResult | None = None, *, data: dict[str, DatasetSurvival] | None = None,
                 key: VisualKey | None = None) -> Figure:
    """Completion-length survival P(L > x), strict against each rule, one panel per dataset (and serving condition).

    Draws the curves the analysis computed (:func:`lengthlens.analyses.censoring.survival_curves`):
    Kaplan–Meier over the paired runs of every target–draft pair (pooled), for the arms that enter
    Table 3; runs that hit the token budget are censored and drawn as "+" where the curve stops; the
    budget is the dashed line. A curve ending high at the budget means many runs never finished.
    Where runs come under several serving conditions, each load has its panels (loads are not pooled).
    """
    data = analysis.survival if data is None else data
    key = key if key is not None else visual_key(analysis)
    record = Drawn(unit="curve")
    with matplotlib.rc_context(RC):
        if not data:
            fig, ax = subplots(figsize=(6.4, 2), layout="constrained")
            return attach(empty_panel(fig, ax, "no paired runs"), record)
        panels = list(data)
        ncol = min(3, len(panels))
        nrow = -(-len(panels) // ncol)
        # At least 6.4 in wide: one panel's title and the legend below it keep their room.
        fig, axes = subplots(nrow, ncol, figsize=(max(3.3 * ncol, 6.4), 2.5 * nrow + 0.8), layout="constrained",
                             squeeze=False)
        short = sum(_survival_panel(ax, data[ds], ds, key, record) for ax, ds in zip(axes.flat, panels))
        if short:
            record.notes.append(f"In {short} of the {len(panels)} panels every run ended below half the token budget: "
                                "their axis ends at the longest run and names the budget instead of drawing it.")
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        record.panels = len(panels)
        loads = {d.serving for d in data.values() if d.serving}
        record.loads = tuple(ld for ld in key.loads if ld in loads) or tuple(sorted(loads))
        methods = [m for m in key.colors if m in record.colors]
        handles = [Line2D([], [], color=key.color(m), label=m, lw=1.8 if m == "strict" else 1.1)
                   for m in ["strict", *[m for m in methods if m != "strict"]] if m in record.colors]
        handles.append(Line2D([], [], ls="", marker="+", color="#555", label="censored at budget", ms=7, mew=1.4))
        width = fig.get_figwidth()
        fig.legend(handles=handles, loc="outside lower center", ncol=max(1, min(len(handles), int(width / 1.25))),
                   frameon=False)
        fig.suptitle("Completion-length survival, strict against each rule\n(Kaplan–Meier, pairs pooled)"
                     if ncol == 1 else "Completion-length survival, strict against each rule (Kaplan–Meier, pairs pooled)",
                     fontsize=9.5)
        return attach(fig, record)
