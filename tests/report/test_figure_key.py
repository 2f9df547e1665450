"""Every figure of a report speaks one visual language and its caption counts what it drew.

On the example (two model families), the serving demo (four loads) and the example with one benchmark
left ungraded (so that the graded figures draw a subset of the benchmarks): each figure's markers and
colours are the report's key, in its legends and in its drawn points; the numbers in each caption are
the numbers of marks found in the figure's artists; clip arrows, left-out counts and loads are said as
drawn; no axis uses offset notation, and no legend covers a panel or leaves the canvas.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.colors import to_hex, to_rgb
from matplotlib.lines import Line2D
from matplotlib.markers import MarkerStyle

from lengthlens.report.model import figure_jobs
from lengthlens.report import plots as F
from lengthlens.report.plot_style import CLIP_GLYPHS, CLIPS_LABEL, POINTS_LABEL, plural

N_RESAMPLES = 300


@pytest.fixture(scope="module")
def serving_analysis(tmp_path_factory):
    import lengthlens as ll
    from lengthlens.data.schema import POLARS_SCHEMA
    from lengthlens.synth.serving import loads, serving_example, simulate_serving

    p = tmp_path_factory.mktemp("serving") / "runs.jsonl"
    simulate_serving(serving_example(20), loads((1, 4, 16, 64)), seed=1).select(POLARS_SCHEMA.names()).write_ndjson(p)
    return ll.analyse(ll.load(p), n_resamples=N_RESAMPLES)


@pytest.fixture(scope="module")
def partly_graded(example_analysis):
    """The example with aime24 ungraded: the accuracy figures draw the other benchmarks only."""
    cells = example_analysis.tables["cells"].copy()
    aime = cells["dataset"] == "aime24"
    cells.loc[aime, "n_graded"] = 0
    cells.loc[aime, [c for c in cells.columns if c.startswith("accuracy_delta")]] = np.nan
    return dataclasses.replace(example_analysis, tables={**example_analysis.tables, "cells": cells})


@pytest.fixture(params=["example", "serving", "partly_graded"])
def analysis(request):
    return request.getfixturevalue({"example": "example_analysis", "serving": "serving_analysis",
                                    "partly_graded": "partly_graded"}[request.param])


#: Each analysis' figures, drawn once for the module's tests (they only read them); the analysis is kept so its id stays its own.
_DRAWN: dict[int, tuple[object, list]] = {}


def _figures(analysis):
    if id(analysis) not in _DRAWN:
        _DRAWN[id(analysis)] = (analysis, [(key, make()) for key, _spec, make in figure_jobs(analysis)])
    return _DRAWN[id(analysis)][1]


def _marker_path(marker: str) -> bytes:
    ms = MarkerStyle(marker)
    return ms.get_path().transformed(ms.get_transform()).vertices.round(9).tobytes()


def _collections(fig, label: str) -> list[PathCollection]:
    return [c for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection) and c.get_label() == label]


def _n_offsets(colls: list[PathCollection]) -> int:
    return sum(int(np.isfinite(np.ma.filled(np.ma.asarray(c.get_offsets()), np.nan)).all(axis=1).sum()) for c in colls)


def _legend_entries(fig):
    for leg in [*fig.legends, *[ax.get_legend() for ax in fig.axes if ax.get_legend()]]:
        yield from zip(leg.legend_handles, (t.get_text() for t in leg.get_texts()))


def test_every_figure_draws_with_the_reports_key(analysis):
    vk = F.visual_key(analysis)
    shades = {to_hex(vk.shade(m, ld)) for m in vk.colors for ld in (vk.loads or ("",))}
    figures = _figures(analysis)
    assert len(figures) >= 8
    for key, fig in figures:
        rec = F.drawn(fig)
        assert rec.markers.items() <= dict(vk.markers).items(), key
        assert rec.colors.items() <= dict(vk.colors).items(), key
        # What the reader sees in the legends: a benchmark's marker and a rule's colour are the key's.
        for handle, label in _legend_entries(fig):
            if not isinstance(handle, Line2D):
                continue
            if label in vk.markers and handle.get_marker() not in ("", "None", None):
                assert handle.get_marker() == vk.markers[label], (key, label)
            if label in vk.colors:
                assert to_hex(handle.get_color()) == to_hex(vk.colors[label]), (key, label)
        # What is drawn: every point's shape is a drawn benchmark's marker, its fill a drawn rule's colour or shade.
        points = _collections(fig, POINTS_LABEL)
        allowed = {_marker_path(vk.markers[b]) for b in rec.markers}
        fills = {to_hex(vk.color(m)) for m in rec.colors} | {to_hex(c) for c in shades}
        for c in points:
            for path in c.get_paths():
                assert path.vertices.round(9).tobytes() in allowed, key
            for rgba in c.get_facecolors():
                assert rgba[3] == 0 or to_hex(rgba[:3]) in fills | {"#ffffff"}, (key, to_hex(rgba[:3]))


def test_one_marker_per_benchmark_and_one_colour_per_rule_across_the_report(partly_graded):
    """The reader's check: ▲ means one benchmark in every figure, and a rule has one colour, although the accuracy
    figures draw a subset of the benchmarks (aime24 ungraded)."""
    markers, colors = {}, {}
    vk = F.visual_key(partly_graded)
    for key, fig in _figures(partly_graded):
        for handle, label in _legend_entries(fig):
            if isinstance(handle, Line2D) and label in vk.markers and handle.get_marker() not in ("", "None", None):
                markers.setdefault(label, set()).add(handle.get_marker())
            if isinstance(handle, Line2D) and label in vk.colors:
                colors.setdefault(label, set()).add(to_hex(handle.get_color()))
    assert all(len(v) == 1 for v in markers.values()) and all(len(v) == 1 for v in colors.values())
    assert len({next(iter(v)) for v in markers.values()}) == len(markers)  # no marker for two benchmarks
    assert len(markers) == 3 and "aime24" in markers


def _expected_marks(key: str, fig, rec) -> int | None:
    """The number of data marks the figure's artists hold, as a multiple of its units (None: not point marks)."""
    base = key.partition(":")[0]
    if base in ("gain_vs_lambda", "rounds_vs_time", "accuracy_vs_gain", "lambda_forest"):
        return rec.points
    if base in ("tradeoff", "time_model"):
        return 2 * rec.points  # two panels draw each cell
    if base == "accuracy_vs_length":
        return rec.points
    if base == "cost_per_correct":
        return rec.points * rec.panels
    return None


def test_caption_counts_are_what_was_drawn(analysis):
    for key, fig in _figures(analysis):
        rec = F.drawn(fig)
        caption = F.figure_caption(key, fig)
        base = key.partition(":")[0]
        assert rec.points > 0, key
        assert plural(rec.points, rec.unit) in caption, (key, caption)
        for reason, n in rec.left_out.items():
            assert f"{n} {reason.format(s='' if n == 1 else 's')}" in caption, (key, caption)
        want = _expected_marks(key, fig, rec)
        if want is not None:
            assert _n_offsets(_collections(fig, POINTS_LABEL)) == want, key
        if base == "attribution":
            solid = [p for ax in fig.axes for p in ax.patches if p.get_hatch() is None and np.isfinite(p.get_height())]
            assert len(solid) == rec.points
        if base == "table4_costs":
            assert all(len(ax.patches) == rec.points for ax in fig.axes if ax.get_visible())
        if base == "survival":
            steps = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_drawstyle() == "steps-post"]
            assert len(steps) == rec.points
        # Clip arrows: as many as the caption says (an interval clipped at both ends has two), glyphs as drawn.
        arrows = _collections(fig, CLIPS_LABEL)
        n_arrows = _n_offsets(arrows)
        if rec.clipped:
            assert rec.clipped <= n_arrows <= 2 * rec.clipped, key
            assert plural(rec.clipped, "interval") in caption
            drawn_glyphs = set()
            for c in arrows:
                for path in c.get_paths():
                    v = path.vertices
                    tip = v[np.argmax(np.abs(v).sum(axis=1) == 0)] if (np.abs(v).sum(axis=1) == 0).any() else None
                    assert tip is not None  # the tip sits on the axis edge
                    body = v.mean(axis=0)  # the body lies opposite the direction the arrow points
                    direction = ("down" if body[1] > 0 else "up") if abs(body[1]) > abs(body[0]) else \
                        ("left" if body[0] > 0 else "right")
                    drawn_glyphs.add(CLIP_GLYPHS[direction])
            assert f"({' '.join(g for g in CLIP_GLYPHS.values() if g in drawn_glyphs)})" in caption, key
        else:
            assert n_arrows == 0 and "run past" not in caption, key


def test_gain_vs_lambda_counts_match_the_tables(example_analysis):
    from lengthlens.analyses.tables import table3_cells

    cells = example_analysis.tables["cells"]
    fig = F.fig_gain_vs_lambda(example_analysis)
    rec = F.drawn(fig)
    t3 = table3_cells(cells, "loosest")
    small = cells["small_n"].astype(bool)
    assert (rec.points, rec.highlighted, rec.hollow) == (len(cells), len(t3), int(small.sum()))
    caption = F.figure_caption("gain_vs_lambda", fig)
    assert f"{len(cells)} cells." in caption and f"Table 3's {len(t3)} cells" in caption
    assert f"{len(cells) - len(t3) - int(small.sum())} cells at other α values are pale" in caption


def test_tradeoff_left_out_counts_match_the_tables(partly_graded):
    cells = partly_graded.tables["cells"]
    rules = cells[~cells["method"].str.endswith("_force_commit")]
    ungraded = int((rules["n_graded"] == 0).sum())
    small = int(((rules["n_graded"] > 0) & rules["small_n"] & ~rules["graded_partial"].fillna(False).astype(bool)).sum())
    rec = F.drawn(F.fig_tradeoff(partly_graded))
    assert rec.left_out.get("ungraded cell{s}", 0) == ungraded > 0
    assert rec.left_out.get("graded cell{s} with fewer than 10 items", 0) == small
    assert rec.points + ungraded + small + rec.left_out.get("cell{s} graded on fewer than half their items", 0) == len(rules)


def _renderer(fig):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def test_no_offset_notation_and_legends_stay_clear(analysis):
    for key, fig in _figures(analysis):
        r = _renderer(fig)
        page = fig.bbox
        for ax in fig.axes:
            if ax.get_visible():
                assert ax.xaxis.get_offset_text().get_text() == "" and ax.yaxis.get_offset_text().get_text() == "", key
        panels = [ax.get_window_extent(r) for ax in fig.axes if ax.get_visible()]
        slack = 0.05 * fig.dpi  # a browser's font may be a little wider than the one measured here
        for leg in fig.legends:
            box = leg.get_window_extent(r)
            assert box.x0 >= page.x0 and box.x1 <= page.x1 - slack and box.y0 >= page.y0 and box.y1 <= page.y1, key
            assert not any(box.overlaps(p) for p in panels), key
        for text in [fig._suptitle, *[ax.title for ax in fig.axes if ax.get_visible()]]:
            if text is not None and text.get_text():
                box = text.get_window_extent(r)
                assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y1 <= page.y1 + 1, (key, text.get_text())


def test_loads_are_kept_apart_and_in_numeric_order(serving_analysis):
    vk = F.visual_key(serving_analysis)
    assert vk.loads == ("c=1", "c=4", "c=16", "c=64")
    figures = dict(_figures(serving_analysis))
    for key, fig in figures.items():
        assert F.drawn(fig).loads == vk.loads, key
        assert "c=1, c=4, c=16, c=64" in F.figure_caption(key, fig), key
    titles = [ax.get_title() for ax in figures["gain_vs_lambda"].axes if ax.get_visible()]
    assert titles == ["c=1", "c=4", "c=16", "c=64"]
    assert list(serving_analysis.survival) == ["gsm8k, c=1", "gsm8k, c=4", "gsm8k, c=16", "gsm8k, c=64"]
    ticks = [t.get_text() for t in figures["serving"].axes[-1].get_xticklabels()]
    assert ticks == ["1", "4", "16", "64"]


def test_alpha_sweep_draws_a_line_per_load(serving_analysis):
    """Two α per rule at four loads: in each panel a line per (rule, dataset, load), four, not one through stacked loads."""
    from matplotlib.collections import LineCollection

    cells = serving_analysis.tables["cells"]
    more = cells.assign(alpha=cells["alpha"] * 0.5, params=cells["params"] + "_half")
    both = pd.concat([cells, more], ignore_index=True)
    fig = F.fig_alpha_sweep(both, key=F.visual_key(serving_analysis))
    ax = fig.axes[0]
    lines = [s for c in ax.collections if isinstance(c, LineCollection) for s in c.get_segments()
             if len(s) == 2 and s[0][0] != s[1][0]]
    assert len(lines) == 4  # one rule, one dataset, four loads
    styles = {str(c.get_linestyle()) for c in ax.collections if isinstance(c, LineCollection)
              if any(len(s) == 2 and s[0][0] != s[1][0] for s in c.get_segments())}
    assert len(styles) == 4
    caption = F.figure_caption("alpha_sweep", fig)
    assert "Serving conditions kept apart, a line each" in caption and "c=1, c=4, c=16, c=64" in caption


def test_colours_keep_their_rule_when_interventions_are_run():
    """A rule's colour does not move when intervention arms (<rule>_force_commit) join the names."""
    a = F.method_colors(["cactus", "r_fuzzy", "spec_casc_tok"])
    b = F.method_colors(["cactus", "cactus_force_commit", "r_fuzzy", "spec_casc_tok", "spec_casc_tok_force_commit"])
    assert all(b[m] == c for m, c in a.items())
    assert len(set(b.values())) == len(b)


def test_clip_arrows_do_not_look_like_any_dataset_marker():
    from lengthlens.report.plot_style import _MARKERS, clip_arrow

    arrows = {clip_arrow(d).vertices.round(6).tobytes() for d in CLIP_GLYPHS}
    assert len(arrows) == 4
    shapes = {MarkerStyle(m).get_path().vertices.round(6).tobytes() for m in _MARKERS}
    assert not arrows & shapes
    for d in CLIP_GLYPHS:  # a shaft and a head: seven corners, the tip on the point
        v = clip_arrow(d).vertices
        assert len(np.unique(v.round(6), axis=0)) == 7 and (np.abs(v).sum(axis=1) == 0).any()


def test_shade_orders_loads_from_pale_to_full():
    vk = F.VisualKey({"x": "#0072B2"}, {}, ("c=1", "c=4", "c=16"))
    light = [np.mean(to_rgb(vk.shade("x", ld))) for ld in vk.loads]
    assert light[0] > light[1] > light[2] and vk.shade("x", "c=16") == "#0072b2"
