"""Shared look of the report's figures: palette, markers, rc settings, the Figure class, legends and SVG output."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

if TYPE_CHECKING:  # pragma: no cover
    from lengthlens.analyses.analyse import AnalysisResult

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
    "axes.formatter.useoffset": False,  # an axis reads 0.15, never "1e-13+1.5e-1"
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


def cells_of(obj: AnalysisResult | pd.DataFrame) -> pd.DataFrame:
    if isinstance(obj, pd.DataFrame):
        return obj
    return obj.tables["cells"]


@dataclass(frozen=True)
class VisualKey:
    """The legend key of a whole report: one colour per rule, one marker per benchmark, the serving conditions in
    load order. Computed once from the analysis (:func:`visual_key`) and passed to every figure, so that a symbol
    means the same in each; a figure's legend shows the entries it drew.
    """

    colors: Mapping[str, str]
    markers: Mapping[str, str]
    #: Serving conditions, lightest load first (empty or one: no load to keep apart).
    loads: tuple[str, ...] = ()

    @property
    def by_load(self) -> bool:
        """Whether the runs come under several serving conditions (every figure then keeps them apart)."""
        return len(self.loads) > 1

    def color(self, method: str) -> str:
        return self.colors.get(str(method), "#7F7F7F")

    def marker(self, benchmark: str) -> str:
        return self.markers.get(str(benchmark), "o")

    def shade(self, method: str, serving: str) -> str:
        """The rule's colour for one load: the heaviest load in full colour, lighter loads mixed towards white."""
        from matplotlib.colors import to_hex, to_rgb

        base = np.array(to_rgb(self.color(method)))
        if not self.by_load or serving not in self.loads:
            return to_hex(base)
        f = 0.6 * (1 - self.loads.index(serving) / (len(self.loads) - 1))
        return to_hex(base + (1 - base) * f)

    def dashes(self, serving: str) -> str | tuple:
        """A line style per load (solid for the heaviest), as the figures that draw lines tell loads apart."""
        if not self.by_load or serving not in self.loads:
            return "-"
        styles: list[str | tuple] = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3))]
        return styles[(len(self.loads) - 1 - self.loads.index(serving)) % len(styles)]


def visual_key(obj: AnalysisResult | pd.DataFrame | None) -> VisualKey:
    """The report's :class:`VisualKey`: every rule and benchmark of every table (and survival curve) of the analysis,
    or of one frame; colours and markers in sorted-name order, so two reports of the same names agree too.

    Parameters
    ----------
    obj : the AnalysisResult behind a report, or one of its tables (a figure drawn from a frame keys that frame).

    Returns
    -------
    VisualKey

    Examples
    --------
    >>> import pandas as pd
    >>> k = visual_key(pd.DataFrame({"target": "T", "dataset": ["gsm8k", "aime24"], "method": ["x", "strict"],
    ...                              "serving": ["c=16", "c=4"]}))
    >>> k.markers, k.loads, k.color("strict")
    ({'aime24': 'o', 'gsm8k': 's'}, ('c=4', 'c=16'), '#222222')
    """
    from lengthlens.data.serving import serving_conditions

    frames = [obj] if isinstance(obj, pd.DataFrame) else list(getattr(obj, "tables", {}).values())
    methods: set[str] = set()
    benchmarks: set[str] = set()
    labels: set[str] = set()
    for df in frames:
        if df is None or df.empty:
            continue
        if "method" in df.columns:
            methods |= {str(m) for m in df["method"].dropna().unique() if str(m) != "all"}
        if "dataset" in df.columns and "target" in df.columns:
            d = df[(df["dataset"].astype(str) != "all") & df["dataset"].notna()]
            benchmarks |= set(with_benchmark(d[["dataset", "target"]].drop_duplicates())["benchmark"])
        if "serving" in df.columns:
            labels |= {str(v) for v in df["serving"].fillna("").unique() if str(v) != "all"}
    for d in getattr(obj, "survival", {}).values() if not isinstance(obj, pd.DataFrame) and obj is not None else ():
        methods |= set(d.curves)
    loads = tuple(serving_conditions(labels)) if len(labels) > 1 else ()
    return VisualKey(method_colors(methods), dataset_markers(benchmarks), loads)


@dataclass
class Drawn:
    """What a figure drew, counted as it drew it: the figure's caption is written from it (:func:`drawn`)."""

    #: What one mark stands for ("cell", "intervention arm", "run", ...).
    unit: str = "cell"
    #: Marks drawn (points, bars or curves: one per unit).
    points: int = 0
    intervals: int = 0
    #: Intervals that ran past an axis, drawn to its edge with an arrow; the arrows' glyphs in ``clip_glyphs``.
    clipped: int = 0
    clip_glyphs: set[str] = field(default_factory=set)
    hollow: int = 0
    #: Marks drawn out (e.g. Table 3's cells outlined).
    highlighted: int = 0
    #: Units left out, by reason: a phrase with ``{s}`` where its noun takes the plural ("cell{s} with few items").
    left_out: dict[str, int] = field(default_factory=dict)
    #: The markers and colours drawn: a subset of the report's key.
    markers: dict[str, str] = field(default_factory=dict)
    colors: dict[str, str] = field(default_factory=dict)
    #: The serving conditions drawn apart (a facet, shade or line style each).
    loads: tuple[str, ...] = ()
    panels: int = 0
    #: Further sentences for the caption (what a figure alone knows).
    notes: list[str] = field(default_factory=list)

    def mark(self, key: VisualKey, method: str | None = None, benchmark: str | None = None) -> None:
        """Record that a mark of ``method``'s colour and ``benchmark``'s marker was drawn."""
        if method is not None:
            self.colors[str(method)] = key.color(method)
        if benchmark is not None:
            self.markers[str(benchmark)] = key.marker(benchmark)

    def leave_out(self, reason: str, n: int) -> None:
        if n:
            self.left_out[reason] = self.left_out.get(reason, 0) + int(n)


def drawn(fig: Figure) -> Drawn:
    """The :class:`Drawn` record a figure function attached to ``fig`` (an empty one for a figure without it)."""
    return getattr(fig, "lengthlens_drawn", None) or Drawn()


def attach(fig: Figure, record: Drawn) -> Figure:
    """Attach ``record`` to ``fig`` (see :func:`drawn`) and return the figure."""
    fig.lengthlens_drawn = record  # type: ignore[attr-defined]
    return fig


def method_colors(methods: Iterable[str]) -> dict[str, str]:
    """A fixed colour per rule (sorted names), so a rule has the same colour in every figure; strict is black.

    Intervention arms (``<rule>_force_commit``) come after the rules, so that a rule's colour does not depend on
    whether its interventions were run."""
    names = sorted({str(m) for m in methods if m != "strict"}, key=lambda m: (m.endswith("_force_commit"), m))
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


def text_width(text: str, size: float = 7.5) -> float:
    """Width of ``text`` in inches at ``size`` points in the figures' font (Agg's metrics; the SVG's agree to a few %)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    w, _h, _d = _RENDERER(RendererAgg).get_text_width_height_descent(str(text), FontProperties(family=RC["font.family"],
                                                                                               size=size), ismath=False)
    return w / 72.0


_RENDERERS: dict[str, Any] = {}


def _RENDERER(cls: Any) -> Any:
    """One small Agg renderer at 72 dpi (text widths in points), made once."""
    if "agg" not in _RENDERERS:
        _RENDERERS["agg"] = cls(10, 10, 72)
    return _RENDERERS["agg"]


def _header(text: str) -> Line2D:
    return Line2D([], [], ls="", marker="", label=text)


def key_handles(key: VisualKey, record: Drawn, *, rules: bool = True, datasets: bool = True,
                extra: list[Any] | None = None, load_style: str | None = None) -> list[Line2D]:
    """The legend entries of what a figure drew, in the report key's order, under section headers ("rule",
    "dataset", "load", then ``extra`` under "marks"): colour dots for rules, grey markers for benchmarks, and per
    load its shade (``load_style="shade"``) or line style (``"dashes"``)."""
    handles: list[Any] = []
    if rules and record.colors:
        handles.append(_header("rule"))
        handles += [Line2D([], [], ls="", marker="o", color=c, label=m, markersize=5)
                    for m, c in key.colors.items() if m in record.colors]
    if datasets and record.markers:
        handles.append(_header("dataset"))
        handles += [Line2D([], [], ls="", marker=mk, color="#555", label=d, markersize=5)
                    for d, mk in key.markers.items() if d in record.markers]
    if load_style and record.loads:
        handles.append(_header("load"))
        for ld in record.loads:
            if load_style == "shade":
                handles.append(Line2D([], [], ls="", marker="o", color=_grey(key, ld), label=ld, markersize=5))
            else:  # lines: the load's line style, its points in its shade
                handles.append(Line2D([], [], color=_grey(key, ld), ls=key.dashes(ld), lw=1.1, marker="o", markersize=4,
                                      label=ld))
    if extra:
        handles.append(_header("marks"))
        handles += list(extra)
    return handles


def _grey(key: VisualKey, serving: str) -> str:
    """A neutral grey at one load's shade (the legend's sample of :meth:`VisualKey.shade`)."""
    from matplotlib.colors import to_hex

    if not key.by_load or serving not in key.loads:
        return "#555555"
    f = 0.6 * (1 - key.loads.index(serving) / (len(key.loads) - 1))
    base = np.array([0.33, 0.33, 0.33])
    return to_hex(base + (1 - base) * f)


#: Height of one legend row and the legend's frame, inches (7.5 pt text, matplotlib's default spacing).
_LEGEND_ROW, _LEGEND_PAD = 0.165, 0.25


def legend_columns(handles: list[Any], height: float) -> int:
    """Columns a legend of ``handles`` needs to fit ``height`` inches."""
    rows = max(1, int((height - _LEGEND_PAD) / _LEGEND_ROW))
    lines = sum(1 + h.get_label().count("\n") for h in handles)
    return max(1, -(-lines // rows))


def legend_width(handles: list[Any], ncol: int = 1) -> float:
    """Width in inches a legend of ``handles`` in ``ncol`` columns takes (labels measured; handle and padding added)."""
    if not handles:
        return 0.0
    rows = -(-len(handles) // ncol)
    cols = [handles[i * rows:(i + 1) * rows] for i in range(ncol)]
    return sum(max(text_width(line) for h in c for line in h.get_label().split("\n")) + 0.42 for c in cols if c) + 0.15


def key_legend(fig: Figure, handles: list[Any], *, at: tuple[float, float] | None = None,
               height: float | None = None, below: bool = False) -> Any:
    """One legend of ``handles`` (from :func:`key_handles`) right of the panels: section headers in bold, as many
    columns as its height needs. With constrained layout (``at`` None) it is an "outside" legend the layout makes room
    for; with a fixed layout its upper left corner goes at ``at`` (figure fraction) and the caller reserved
    :func:`legend_width` for it."""
    if not handles:
        return None
    if below:  # a row under the panels (section headers inline), as many columns as the width holds
        ncol = max(1, min(len(handles), int(fig.get_figwidth() / max(legend_width(handles[:1]), 1.3))))
    else:
        ncol = legend_columns(handles, height if height is not None else fig.get_figheight() - 0.3)
    # borderaxespad: room at the canvas edge for a browser font a little wider than the one measured here
    kw = dict(handles=handles, frameon=False, ncol=ncol, handletextpad=0.4, columnspacing=1.0, borderaxespad=1.2)
    if below:
        leg = fig.legend(loc="outside lower center", **kw)
    elif at is None:
        leg = fig.legend(loc="outside right upper", **kw)
    else:  # the caller reserved legend_width(): the corner goes exactly there
        leg = fig.legend(loc="upper left", bbox_to_anchor=at, **{**kw, "borderaxespad": 0.0})
    for h, t in zip(leg.legend_handles, leg.get_texts()):
        if isinstance(h, Line2D) and h.get_marker() in ("", "None", None) and h.get_linestyle() in ("", "None", "none"):
            t.set_fontweight("bold")
    return leg


#: Labels of the collections :class:`Marks` draws (a leading "_": no legend entry), so that tests find them.
POINTS_LABEL, CLIPS_LABEL = "_lengthlens_points", "_lengthlens_clips"


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
        self._clips: list[tuple] = []

    def clip(self, x: Any, y: Any, direction: str, *, color: Any = "#444") -> None:
        """Arrows (:func:`clip_arrow`) at ``(x, y)``: where intervals run past an axis; drawn above the points."""
        from matplotlib.colors import to_rgba

        rgba = to_rgba(color)
        for xi, yi in zip(np.asarray(x, dtype=float), np.asarray(y, dtype=float)):
            self._clips.append((xi, yi, direction, 110.0, rgba, rgba, 0.0))

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
        for rows, label, z, clip_on in ((self._pts, POINTS_LABEL, zorder, True), (self._clips, CLIPS_LABEL, zorder + 1, False)):
            pts = [p for p in rows if np.isfinite(p[:2]).all()]
            if not pts:
                continue
            shapes = {}
            for m in {p[2] for p in pts}:
                ms = MarkerStyle(clip_arrow(m) if m in CLIP_GLYPHS else m)
                shapes[m] = ms.get_path().transformed(ms.get_transform())
            coll = PathCollection([shapes[p[2]] for p in pts], [p[3] for p in pts],
                                  offsets=np.array([p[:2] for p in pts]), offset_transform=ax.transData,
                                  facecolors=[p[4] for p in pts], edgecolors=[p[5] for p in pts],
                                  linewidths=[p[6] for p in pts], zorder=z)
            coll.set_transform(IdentityTransform())
            coll.set_label(label)
            coll.set_clip_on(clip_on)
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

    from matplotlib.ticker import MaxNLocator

    ticks: list[float] = []
    for tier in _RATIO_TIERS:
        inside = [t for t in tier if lo <= t <= hi]
        if len(inside) <= most and len(inside) >= len(ticks):
            ticks = inside
    if len(ticks) < 3:  # a narrow axis (every ratio near 1): evenly spaced plain numbers instead of a lone tick
        ticks = [float(t) for t in MaxNLocator(min(most, 5)).tick_values(lo, hi) if lo <= t <= hi] or ticks
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


def caption_notes(fig: Figure) -> list[str]:
    """The further sentences of ``fig``'s caption that only the figure knows (its :class:`Drawn` record's notes)."""
    return list(drawn(fig).notes)


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


#: The arrow drawn where an interval runs past an axis, per direction, as captions name it.
CLIP_GLYPHS = {"up": "↑", "down": "↓", "left": "←", "right": "→"}


def clip_arrow(direction: str) -> Any:
    """A filled arrow marker (shaft and head) pointing ``direction`` with its tip at the data point: drawn at an axis
    edge it points off the axis, and no dataset marker (▲ ▼ ◀ ▶ among them) looks like it."""
    from matplotlib.path import Path

    up = np.array([(-0.1, -1.0), (0.1, -1.0), (0.1, -0.5), (0.4, -0.5), (0.0, 0.0), (-0.4, -0.5), (-0.1, -0.5),
                   (-0.1, -1.0)])
    turn = {"up": 0, "left": 1, "down": 2, "right": 3}[direction]
    rot = np.array([[0.0, -1.0], [1.0, 0.0]])  # a quarter turn anticlockwise
    v = up @ np.linalg.matrix_power(rot, turn).T
    return Path(v, [Path.MOVETO, *[Path.LINETO] * (len(v) - 2), Path.CLOSEPOLY])


def clip_marks(ax: Any, lo: np.ndarray, hi: np.ndarray, at: np.ndarray, limits: tuple[float, float], *, vertical: bool,
               color: Any = "#444", marks: Marks | None = None, record: Drawn | None = None
               ) -> tuple[np.ndarray, np.ndarray, int]:
    """Interval limits clipped to ``limits``, with an arrow (:func:`clip_arrow`) at the axis edge where an interval
    runs past it; returns the clipped limits and how many intervals were clipped. ``at``: the other coordinate of
    each interval. With ``marks`` the arrows join its clip marks (drawn by the caller), else they are drawn here;
    ``record`` counts the clipped intervals and the arrows' glyphs for the caption."""
    lo, hi, at = (np.asarray(a, dtype=float) for a in (lo, hi, at))
    below, above = lo < limits[0], hi > limits[1]
    own = marks is None
    marks = Marks() if marks is None else marks
    for mask, edge, direction in ((below, limits[0], "down" if vertical else "left"),
                                  (above, limits[1], "up" if vertical else "right")):
        if mask.any():
            xs, ys = (at[mask], np.full(mask.sum(), edge)) if vertical else (np.full(mask.sum(), edge), at[mask])
            marks.clip(xs, ys, direction, color=color)
            if record is not None:
                record.clip_glyphs.add(CLIP_GLYPHS[direction])
    if own:
        marks.draw(ax)
    n = int((below | above).sum())
    if record is not None:
        record.clipped += n
    return np.clip(lo, *limits), np.clip(hi, *limits), n


def plural(n: int, noun: str) -> str:
    """A count with its noun: "1 cell", "3 graded cells", "2 axes" (the last word takes the plural)."""
    if n == 1:
        return f"{n} {noun}"
    head, _, last = noun.rpartition(" ")
    last = {"axis": "axes"}.get(last, last + ("es" if last.endswith("s") else "s"))
    return f"{n} {head + ' ' if head else ''}{last}"


def verb(n: int, singular: str, plural_form: str) -> str:
    """The verb agreeing with a count: ``verb(1, "is", "are")``."""
    return singular if n == 1 else plural_form


def clip_sentence(record: Drawn, of: str = "") -> str:
    """The caption's sentence for clipped intervals, naming the arrows drawn ("" when none was clipped)."""
    n = record.clipped
    if not n:
        return ""
    glyphs = " ".join(g for g in CLIP_GLYPHS.values() if g in record.clip_glyphs)
    return (f"{plural(n, 'interval')}{of} {verb(n, 'runs', 'run')} past the axis, drawn to its edge and marked with "
            f"an arrow ({glyphs}).")
