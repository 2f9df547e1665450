"""Shared look of the report's figures: palette, markers, rc settings, the Figure class, legends and SVG output."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

if TYPE_CHECKING:  # pragma: no cover
    from lengthlens.analyses.analyse import Analysis

STRICT_COLOR = "#222222"
#: Okabe–Ito colours (colour-blind safe), then tab10 for more rules than eight.
_PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#F0E442",
            "#7F7F7F", "#BCBD22", "#17BECF", "#9467BD"]
#: Fifteen distinct filled markers: no two datasets share one up to fifteen datasets.
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*", "H", "d", "8"]

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 8.5,
    "axes.titlesize": 9.5,
    "axes.titley": 1.0,  # titles at the top (none of our axes has tick labels above): no per-draw title placement
    "axes.labelsize": 8.5,
    "legend.fontsize": 7.5,
    "xtick.labelsize": 7.5,
    "ytick.labelsize": 7.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e6e9ef",
    "grid.linewidth": 0.6,
    "svg.fonttype": "none",  # text stays text: small files, searchable in HTML and PDF
    "svg.hashsalt": "lengthlens",  # stable ids so that two renders of a report are identical
    "text.parse_math": False,  # names come from the logs: "$x$" in a rule's name is text, not mathtext
}


class LensFigure(Figure):
    """A matplotlib Figure that shows itself in Jupyter whatever the backend (a PNG repr), since figures here bypass pyplot."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        with matplotlib.rc_context(RC):
            self.savefig(buf, format="png", dpi=110)
        return buf.getvalue()


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], squeeze: bool = True,
              layout: str = "constrained", **kw: Any) -> tuple[Figure, Any]:
    """Like pyplot.subplots but without pyplot: no GUI backend, nothing kept in a global registry, no double display in Jupyter."""
    fig = LensFigure(figsize=figsize, layout=layout)
    return fig, fig.subplots(nrows, ncols, squeeze=squeeze, **kw)


def cells_of(obj: Analysis | pd.DataFrame) -> pd.DataFrame:
    if isinstance(obj, pd.DataFrame):
        return obj
    return obj.tables["cells"]


def method_colors(methods: Iterable[str]) -> dict[str, str]:
    """A fixed colour per rule (sorted names), so a rule has the same colour in every figure; strict is black."""
    names = sorted({str(m) for m in methods if m != "strict"})
    colors = {m: _PALETTE[i % len(_PALETTE)] for i, m in enumerate(names)}
    colors["strict"] = STRICT_COLOR
    return colors


def dataset_markers(datasets: Iterable[str]) -> dict[str, str]:
    return {d: _MARKERS[i % len(_MARKERS)] for i, d in enumerate(sorted(set(datasets)))}


def empty_panel(fig: Figure, ax: Any, text: str) -> Figure:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#667085")
    ax.set_xticks([])
    ax.set_yticks([])
    return fig


def legends(ax: Any, colors: dict[str, str], markers: dict[str, str] | None, loc: str = "upper left",
             outside: bool = False, extra: list[Any] | None = None) -> None:
    """Two compact legends: colour = rule, marker = dataset (beside the axes, as figure legends, with ``outside``);
    ``extra`` handles join the marker legend."""
    handles = [Line2D([], [], ls="", marker="o", color=c, label=m, markersize=5) for m, c in colors.items() if m != "strict"]
    mh = [Line2D([], [], ls="", marker=mk, color="#555", label=d, markersize=5)
          for d, mk in (markers or {}).items()] + list(extra or [])
    if outside:
        # Figure legends with "outside" locations are what constrained layout reserves room for.
        fig = ax.figure
        fig.legend(handles=handles, title="rule", frameon=False, title_fontsize=7.5, loc="outside right upper")
        if len(mh) > 1:
            fig.legend(handles=mh, title="dataset", frameon=False, title_fontsize=7.5, loc="outside right lower")
        return
    first = ax.legend(handles=handles, title="rule", frameon=False, title_fontsize=7.5, loc=loc)
    if len(mh) > 1:
        ax.add_artist(first)
        ax.legend(handles=mh, title="dataset", frameon=False, title_fontsize=7.5, loc="lower right")


class Marks:
    """Markers and vertical interval bars gathered group by group, then drawn as one PathCollection and one
    LineCollection: what one ``ax.scatter`` and ``ax.vlines`` per group draws, in the same order (a collection
    draws its elements in order, as the axes drew the groups' collections), at a fraction of the cost of
    hundreds of artists. Points or bars with a non-finite coordinate are left out, as scatter leaves them undrawn.
    """

    def __init__(self) -> None:
        self._pts: list[tuple] = []
        self._bars: list[tuple] = []
        self._segs: list[tuple] = []
        self._lines: list[tuple] = []

    def points(self, x: Any, y: Any, *, marker: str, size: float, color: Any, edgecolor: Any = "face",
               linewidth: float = 1.0, alpha: float = 1.0) -> None:
        """``ax.scatter(x, y, marker=, s=size, color=, edgecolors=, linewidths=, alpha=)``; ``color="none"``: hollow."""
        from matplotlib.colors import to_rgba

        face = to_rgba(color, alpha) if color != "none" else (0.0, 0.0, 0.0, 0.0)
        edge = face if edgecolor == "face" else to_rgba(edgecolor, alpha)
        for xi, yi in zip(np.asarray(x, dtype=float), np.asarray(y, dtype=float)):
            self._pts.append((xi, yi, marker, size, face, edge, linewidth))

    def vbars(self, x: Any, lo: Any, hi: Any, *, color: Any, alpha: float = 1.0, linewidth: float = 1.0) -> None:
        """``ax.vlines(x, lo, hi, color=, alpha=, lw=)``."""
        from matplotlib.colors import to_rgba

        rgba = to_rgba(color, alpha)
        for xi, a, b in zip(*(np.asarray(v, dtype=float) for v in (x, lo, hi))):
            self._bars.append((xi, a, b, rgba, linewidth))

    def hbars(self, y: Any, lo: Any, hi: Any, *, color: Any, alpha: float = 1.0, linewidth: float = 1.0) -> None:
        """``ax.hlines(y, lo, hi, color=, alpha=, lw=)``."""
        from matplotlib.colors import to_rgba

        rgba = to_rgba(color, alpha)
        for yi, a, b in zip(*(np.asarray(v, dtype=float) for v in (y, lo, hi))):
            self._segs.append((((a, yi), (b, yi)), rgba, linewidth))

    def line(self, x: Any, y: Any, *, color: Any, alpha: float = 1.0, linewidth: float = 1.0, dashes: str = "-") -> None:
        """``ax.plot(x, y, ls=dashes, color=, alpha=, lw=)`` (a polyline; non-finite points left out)."""
        from matplotlib.colors import to_rgba

        pts = [(a, b) for a, b in zip(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) if np.isfinite(a) and np.isfinite(b)]
        if len(pts) > 1:
            self._lines.append((pts, to_rgba(color, alpha), linewidth, dashes))

    def draw(self, ax: Any, *, zorder: float = 3, bar_zorder: float = 2) -> None:
        """Add the lines, bars and points (those there are) to ``ax``, updating its data limits."""
        from matplotlib.collections import LineCollection, PathCollection
        from matplotlib.markers import MarkerStyle
        from matplotlib.transforms import IdentityTransform

        for style in dict.fromkeys(ln[3] for ln in self._lines):
            ls = [ln for ln in self._lines if ln[3] == style]
            ax.add_collection(LineCollection([ln[0] for ln in ls], colors=[ln[1] for ln in ls],
                                             linewidths=[ln[2] for ln in ls], linestyles=style, zorder=bar_zorder))
        bars = [b for b in self._bars if np.isfinite(b[:3]).all()]
        segs = [((x, a), (x, b)) for x, a, b, _c, _w in bars] + [sg[0] for sg in self._segs if np.isfinite(sg[0]).all()]
        if segs:
            ok = [sg for sg in self._segs if np.isfinite(sg[0]).all()]
            ax.add_collection(LineCollection(segs, colors=[b[3] for b in bars] + [sg[1] for sg in ok],
                                             linewidths=[b[4] for b in bars] + [sg[2] for sg in ok], zorder=bar_zorder))
        pts = [p for p in self._pts if np.isfinite(p[:2]).all()]
        if not pts:
            return
        shapes = {}
        for m in {p[2] for p in pts}:
            ms = MarkerStyle(m)
            shapes[m] = ms.get_path().transformed(ms.get_transform())
        coll = PathCollection([shapes[p[2]] for p in pts], [p[3] for p in pts],
                              offsets=np.array([p[:2] for p in pts]), offset_transform=ax.transData,
                              facecolors=[p[4] for p in pts], edgecolors=[p[5] for p in pts],
                              linewidths=[p[6] for p in pts], zorder=zorder)
        coll.set_transform(IdentityTransform())
        ax.add_collection(coll)


_PLAIN_ID = re.compile(r'\sid="(?:figure|axes|patch|line2d|text|legend|matplotlib\.axis|xtick|ytick|PathCollection|'
                       r'LineCollection|PolyCollection|FillBetweenPolyCollection|QuadMesh|image|Poly3DCollection|'
                       r'BarContainer|Rectangle|[A-Za-z]+Collection)_\d+"')


def to_svg(fig: Figure, *, close: bool = True) -> str:
    """The figure as an SVG element for inlining in HTML (no XML prolog, no per-element ids, responsive width).

    Matplotlib names elements ``figure_1``, ``axes_1``...; several figures on one page would repeat
    those ids, so they are dropped (nothing refers to them). Referenced ids are content hashes, so the
    same figure gives the same bytes in any process.
    """
    buf = io.StringIO()
    with matplotlib.rc_context(RC):
        _print_svg(fig, buf)
    if close:
        plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = _PLAIN_ID.sub("", svg)
    # Scale with the page: keep the viewBox, drop the fixed size, let CSS set the width.
    svg = re.sub(r'<svg([^>]*?)\swidth="([\d.]+)pt"\sheight="([\d.]+)pt"',
                 lambda m: f'<svg{m.group(1)} data-w="{m.group(2)}" data-h="{m.group(3)}"', svg, count=1)
    return svg


def _print_svg(fig: Figure, buf: io.StringIO) -> None:
    """Write the figure as SVG after laying it out once, measuring text as the SVG writer does: one layout, one draw.

    ``savefig`` with a layout engine draws the figure once without output to run the layout, then again
    to write it, and the layout measures every axes twice; drawing once more first (so that legends
    beside the axes are measured before the layout is fixed) made three draws. Here the constrained
    layout runs once on an SVG canvas (the SVG writer's text metrics, not Agg's: the positions savefig
    gives, to 1e-5 pt), then the SVG canvas draws the figure once with that layout frozen. The figure
    gets its engine, canvas and dpi back.
    """
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    engine, canvas, dpi = fig.get_layout_engine(), fig.canvas, fig.dpi
    svg_canvas = FigureCanvasSVG(fig)
    try:
        if engine is not None:
            engine.execute(fig)
            fig.set_layout_engine("none")
        fig.dpi = dpi
        svg_canvas.print_svg(buf, metadata={"Date": None, "Creator": None})
    finally:
        if engine is not None:
            fig.set_layout_engine(engine)
        fig.dpi = dpi
        fig.set_canvas(canvas)


#: Tick values of a ratio's log axis, coarse to fine: the finest tier that fits is used.
_RATIO_TIERS = (
    (0.01, 0.1, 0.5, 1.0, 2.0, 10.0, 100.0),
    (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0),
    (0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0, 20.0, 50.0, 100.0),
    (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 10.0, 20.0, 50.0, 100.0),
    (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.7, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 10.0),
)


def ratio_ticks(axis: Any, lo: float, hi: float, most: int = 10) -> None:
    """Label a ratio's log axis with plain numbers (0.8, 1, 1.5, 2): the finest of :data:`_RATIO_TIERS` that fits."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks: list[float] = []
    for tier in _RATIO_TIERS:
        inside = [t for t in tier if lo <= t <= hi]
        if len(inside) <= most and len(inside) >= len(ticks):
            ticks = inside
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))


def few_items(df: pd.DataFrame) -> pd.Series:
    """Cells with few items: the ``small_n`` flag where the table has one, else fewer than half the items of the
    largest cell of their (target, draft, dataset) group (e.g. the study's 3-item calibration probes among 12-item arms)."""
    if df.empty:
        return pd.Series(False, index=df.index)
    if "small_n" in df.columns:
        return df["small_n"].fillna(False).astype(bool)
    biggest = df.groupby(["target", "draft", "dataset"])["n_items"].transform("max")
    return df["n_items"] < 0.5 * biggest


def with_benchmark(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``benchmark`` column: the dataset without a suffix naming its target (``aime24_qwen3`` on
    Qwen3-8B is ``aime24``), so that one benchmark has one marker whatever the target."""
    from lengthlens.report.context import benchmark_of

    if df.empty:
        return df.assign(benchmark=pd.Series(dtype=object))
    names = {(d, t): benchmark_of(d, [t]) for d, t in df[["dataset", "target"]].drop_duplicates().itertuples(index=False)}
    return df.assign(benchmark=[names[(d, t)] for d, t in zip(df["dataset"], df["target"])])


def log_limits(values: list[pd.Series]) -> tuple[float, float]:
    """Limits of a log axis that hold every finite positive value (and 1), with a margin."""
    v = pd.concat(values).replace([np.inf, -np.inf], np.nan).dropna()
    v = v[v > 0]
    lo, hi = min(float(v.min()) if len(v) else 1.0, 1.0), max(float(v.max()) if len(v) else 1.0, 1.0)
    return lo / 1.06, hi * 1.06


def add_caption_note(fig: Figure, note: str) -> None:
    """A sentence the figure's caption must carry (what was left out or clipped): the report appends it."""
    notes = getattr(fig, "_lengthlens_notes", None)
    if notes is None:
        notes = []
        fig._lengthlens_notes = notes  # type: ignore[attr-defined]
    if note not in notes:
        notes.append(note)


def caption_notes(fig: Figure) -> list[str]:
    """The sentences :func:`add_caption_note` attached to ``fig`` (none for most figures)."""
    return list(getattr(fig, "_lengthlens_notes", []))


#: A robust axis holds the point estimates and interval limits up to this factor beyond the points' range.
ROBUST_FACTOR = 3.0


def robust_log_limits(points: list[pd.Series], limits: list[pd.Series], factor: float = ROBUST_FACTOR) -> tuple[float, float]:
    """Log-axis limits that hold every point (and 1) and the interval limits up to ``factor`` beyond the points' range:
    one extreme interval cannot stretch the axis; the limits past it are clipped (see :func:`clip_marks`)."""
    p_lo, p_hi = log_limits(points)
    v = pd.concat(limits).replace([np.inf, -np.inf], np.nan).dropna() if limits else pd.Series(dtype=float)
    v = v[(v > 0) & (v >= p_lo / factor) & (v <= p_hi * factor)]
    lo = min(p_lo, float(v.min()) / 1.06) if len(v) else p_lo
    hi = max(p_hi, float(v.max()) * 1.06) if len(v) else p_hi
    return lo, hi


def robust_linear_limits(points: list[pd.Series], limits: list[pd.Series], pad: float = 1.0) -> tuple[float, float]:
    """Linear-axis limits holding every point (and 0) and the interval limits up to the points' span beyond them."""
    p = pd.concat(points).replace([np.inf, -np.inf], np.nan).dropna()
    p_lo, p_hi = (min(float(p.min()), 0.0), max(float(p.max()), 0.0)) if len(p) else (-1.0, 1.0)
    span = max(p_hi - p_lo, 1.0)
    v = pd.concat(limits).replace([np.inf, -np.inf], np.nan).dropna() if limits else pd.Series(dtype=float)
    v = v[(v >= p_lo - pad * span) & (v <= p_hi + pad * span)]
    lo = min(p_lo, float(v.min())) if len(v) else p_lo
    hi = max(p_hi, float(v.max())) if len(v) else p_hi
    m = 0.04 * (hi - lo or 1.0)
    return lo - m, hi + m


def clip_marks(ax: Any, lo: np.ndarray, hi: np.ndarray, at: np.ndarray, limits: tuple[float, float], *, vertical: bool,
               color: Any = "#444", marks: Marks | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Interval limits clipped to ``limits``, with a ▸ (◂, ▴, ▾) at the axis edge where an interval runs past it;
    returns the clipped limits and how many intervals were clipped. ``at``: the other coordinate of each interval.
    With ``marks`` the edge markers join its points (drawn by the caller) instead of being drawn here."""
    lo, hi, at = (np.asarray(a, dtype=float) for a in (lo, hi, at))
    below, above = lo < limits[0], hi > limits[1]
    for mask, edge, mark in ((below, limits[0], "v" if vertical else "<"), (above, limits[1], "^" if vertical else ">")):
        if mask.any():
            xs, ys = (at[mask], np.full(mask.sum(), edge)) if vertical else (np.full(mask.sum(), edge), at[mask])
            if marks is not None:
                marks.points(xs, ys, marker=mark, size=16, color=color)
            else:
                ax.plot(xs, ys, ls="", marker=mark, ms=4, color=color, clip_on=False, zorder=4)
    return np.clip(lo, *limits), np.clip(hi, *limits), int((below | above).sum())
