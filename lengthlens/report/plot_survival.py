"""The completion-length survival figure (Kaplan–Meier per dataset, strict against each rule); see :mod:`lengthlens.report.plots`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
import polars as pl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from lengthlens.report.plot_style import _RC, _empty, _subplots, method_colors

if TYPE_CHECKING:  # pragma: no cover
    from lengthlens.analyses.analyse import Analysis


def _km_curve(lengths: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kaplan–Meier step function (times, survival just after each time), starting at (0, 1)."""
    order = np.argsort(lengths, kind="mergesort")
    t = lengths[order].astype(float)
    e = ~censored[order]
    uniq, first = np.unique(t, return_index=True)
    n_at_risk = len(t) - first
    d = np.add.reduceat(e.astype(float), first) if len(t) else np.array([])
    s = np.cumprod(1.0 - d / n_at_risk)
    return np.concatenate([[0.0], uniq]), np.concatenate([[1.0], s])


def _thin(t: np.ndarray, s: np.ndarray, max_points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Keep a step curve's shape with at most ~max_points vertices (thousands of steps bloat the SVG)."""
    if len(t) <= max_points:
        return t, s
    grid = np.linspace(t[0], t[-1], max_points)
    idx = np.searchsorted(t, grid, side="right") - 1
    return grid, s[idx]


def _survival_panel(ax: Any, d: dict[str, Any], ds: str, colors: dict[str, str]) -> None:
    """One dataset's Kaplan–Meier curves (strict first), censoring marks, budget lines and labels."""
    budgets = d["budgets"]
    for m, (L, c) in d["runs"].items():
        tt, ss = _km_curve(L, c)
        tt, ss = _thin(tt, ss)
        lw, z = (1.8, 5) if m == "strict" else (1.1, 4)
        ax.step(tt, ss, where="post", color=colors[m], lw=lw, zorder=z)
        if c.any():  # censored runs: a "+" at each distinct censoring length, at the curve's height there
            ct = np.unique(L[c])
            cs = ss[np.clip(np.searchsorted(tt, ct, side="right") - 1, 0, len(ss) - 1)]
            ax.plot(ct, cs, "+", color=colors[m], ms=7, mew=1.4, zorder=6)
    for b in budgets:
        ax.axvline(b, color="#a8322d", lw=0.8, ls="--")
    if budgets:
        ax.text(budgets[-1], 0.97, "budget ", ha="right", va="top", fontsize=6.5, color="#a8322d",
                transform=ax.get_xaxis_transform())
        ax.set_xlim(0, budgets[-1] * 1.04)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{ds} ({d['n']} runs, {d['n_censored']} censored)")
    ax.set_xlabel("completion length (tokens)")
    ax.set_ylabel("P(L > x)")


def _survival_data(analysis: Analysis, runs: pl.DataFrame | None = None,
                   arms: pd.DataFrame | None = None) -> dict[str, dict[str, Any]]:
    """Per dataset, what :func:`fig_survival` draws, as numpy arrays (polars stays here: the figure itself may be
    drawn in a forked process): ``runs`` {method: (lengths, censored)}, strict first, ``budgets``, ``n``, ``n_censored``."""
    from lengthlens.analyses.tables import select_alphas
    from lengthlens.data.pairing import with_derived

    t = with_derived(runs if runs is not None else analysis.runs.paired)
    cells = analysis.tables["cells"]
    if t.is_empty() or cells.empty:
        return {}
    if arms is None:
        arms = select_alphas(cells, analysis.settings.get("alphas", "loosest"))
    keys = pl.from_pandas(arms[["target", "draft", "dataset", "method", "params"]].drop_duplicates())
    strict = t.filter(pl.col("method") == "strict")
    relaxed = t.join(keys, on=["target", "draft", "dataset", "method", "params"], how="semi")
    data = pl.concat([strict, relaxed]).select("dataset", "method", "output_tokens", "censored", "max_new_tokens")
    out = {}
    for ds in sorted(data["dataset"].unique().to_list()):
        d = data.filter(pl.col("dataset") == ds)
        per = {}
        for m in ["strict", *sorted(x for x in d["method"].unique().to_list() if x != "strict")]:
            g = d.filter(pl.col("method") == m)
            if g.height:
                per[m] = (g["output_tokens"].to_numpy().astype(float), g["censored"].to_numpy().astype(bool))
        out[ds] = {"runs": per, "budgets": sorted(int(b) for b in d["max_new_tokens"].drop_nulls().unique().to_list()),
                   "n": d.height, "n_censored": d.filter(pl.col("censored")).height}
    return out


def fig_survival(analysis: Analysis | None, *, runs: pl.DataFrame | None = None, arms: pd.DataFrame | None = None,
                 data: dict[str, dict[str, Any]] | None = None) -> Figure:
    """Completion-length survival P(L > x), strict against each rule, one panel per dataset.

    Kaplan–Meier over the paired runs of every target–draft pair (pooled), for the arms that enter
    Table 3 (``alphas`` setting); runs that hit the token budget are censored and drawn as "+" where
    the curve stops; the budget is the dashed line. A curve ending high at the budget means many
    runs never finished. ``data``: what :func:`_survival_data` returns for the analysis, if at hand.
    """
    data = _survival_data(analysis, runs, arms) if data is None else data
    with matplotlib.rc_context(_RC):
        if not data:
            fig, ax = _subplots(figsize=(6.4, 2), layout="constrained")
            return _empty(fig, ax, "no paired runs")
        datasets = list(data)
        methods = {m for d in data.values() for m in d["runs"]}
        colors = method_colors(methods)
        ncol = min(3, len(datasets))
        nrow = -(-len(datasets) // ncol)
        fig, axes = _subplots(nrow, ncol, figsize=(3.3 * ncol, 2.5 * nrow + 0.6), layout="constrained", squeeze=False)
        for ax, ds in zip(axes.flat, datasets):
            _survival_panel(ax, data[ds], ds, colors)
        for ax in list(axes.flat)[len(datasets):]:
            ax.set_visible(False)
        handles = [Line2D([], [], color=c, label=m, lw=1.8 if m == "strict" else 1.1) for m, c in colors.items()
                   if m == "strict" or m in methods]
        handles.append(Line2D([], [], ls="", marker="+", color="#555", label="censored at budget", ms=7, mew=1.4))
        fig.legend(handles=handles, loc="outside lower center", ncol=min(7, len(handles)), frameon=False)
        fig.suptitle("Completion-length survival, strict against each rule (Kaplan–Meier, pairs pooled)", fontsize=9.5)
        return fig
