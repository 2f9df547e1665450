"""Figures: each function returns a matplotlib Figure drawing the analysis' numbers; SVG output is inlineable and stable."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.figure import Figure

from lengthlens.report import plots as F


@pytest.mark.parametrize("key", list(F.FIGURES))
def test_every_figure_is_a_figure(example_analysis, key):
    fig = F.FIGURES[key][0](example_analysis)
    assert isinstance(fig, Figure)
    assert fig.axes
    F.to_svg(fig)


def _scatter_points(fig: Figure) -> np.ndarray:
    pts = [c.get_offsets() for ax in fig.axes for c in ax.collections if isinstance(c, PathCollection)]
    return np.concatenate([np.asarray(p) for p in pts if len(p)])


def test_gain_vs_lambda_plots_every_cell_at_its_numbers(example_analysis):
    cells = example_analysis.tables["cells"]
    pts = _scatter_points(F.fig_gain_vs_lambda(example_analysis))
    got = np.array(sorted(map(tuple, pts.round(9))))
    want = np.array(sorted(zip(cells["gain"].round(9), cells["lambda"].round(9))))
    np.testing.assert_allclose(got, want)


def test_rounds_vs_time_and_accuracy_points(example_analysis):
    cells = example_analysis.tables["cells"]
    pts = _scatter_points(F.fig_rounds_vs_time(cells))
    assert sorted(map(tuple, pts.round(9))) == sorted(zip(cells["rounds_ratio"].round(9), cells["time_ratio"].round(9)))
    graded = cells[cells["n_graded"] > 0]
    pts = _scatter_points(F.fig_accuracy_vs_gain(cells))
    assert len(pts) == len(graded)
    np.testing.assert_allclose(np.sort(pts[:, 1]), np.sort(graded["accuracy_delta_pp"].to_numpy()))


def test_forest_draws_every_interval(example_analysis):
    cells = example_analysis.tables["cells"]
    fig = F.fig_lambda_forest(cells)  # without a dataset: every cell in one panel
    segs = [s for ax in fig.axes for c in ax.collections if isinstance(c, LineCollection) for s in c.get_segments()]
    ends = sorted((round(s[0][0], 9), round(s[1][0], 9)) for s in segs)
    assert ends == sorted(zip(cells["lambda_lo"].round(9), cells["lambda_hi"].round(9)))


def test_km_curve_matches_hand_computation():
    from lengthlens.analyses.censoring import survival_curve

    # lengths 1,2,2,3(censored),4: S(1)=4/5, S(2)=4/5*(1-2/4)=0.4, 3 censored (no step), S(4)=0.4*(1-1/1)=0
    curve = survival_curve(np.array([1, 2, 2, 3, 4]), np.array([False, False, False, True, False]))
    np.testing.assert_allclose(curve.times, [0, 1, 2, 4])
    np.testing.assert_allclose(curve.survival, [1, 0.8, 0.4, 0.0])
    # the censoring mark sits on the curve at its length: S(3) = 0.4
    assert curve.censored_times.tolist() == [3.0] and curve.censored_survival.tolist() == [0.4]
    # all censored: a flat curve at 1 out to the longest run
    flat = survival_curve(np.array([5.0, 7.0]), np.array([True, True]))
    assert flat.times.tolist() == [0.0, 7.0] and flat.survival.tolist() == [1.0, 1.0]


def test_survival_panels_per_dataset(example_analysis):
    fig = F.fig_survival(example_analysis)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    datasets = sorted(example_analysis.tables["cells"]["dataset"].unique())
    assert [t.split()[0] for t in titles] == datasets  # the name, then its counts (on a line of their own)


def test_attribution_bars_are_each_cells_extra_chars_per_run(example_analysis):
    """One solid bar per cell (of 10 or more items): its thinking characters per run; every bar has its rule's label."""
    attr = example_analysis.tables["attribution"]
    fig = F.fig_attribution(attr)
    heights = sorted(round(p.get_height(), 6) for ax in fig.axes for p in ax.patches if p.get_hatch() is None
                     and not np.isnan(p.get_height()))
    big = attr[attr["n_items"] >= 10]
    assert heights == sorted((big["extra_chars_thinking"] / big["n_runs"]).round(6))
    labels = sorted(t.get_text() for ax in fig.axes if ax.get_visible() for t in ax.get_xticklabels())
    assert labels == sorted(big["method"])
    assert F.drawn(fig).points == len(big) and F.drawn(fig).left_out.get("cell{s} with fewer than 10 items", 0) == len(attr) - len(big)


def test_empty_inputs_give_a_figure_not_an_error():
    for fn in (F.fig_gain_vs_lambda, F.fig_lambda_forest, F.fig_rounds_vs_time, F.fig_accuracy_vs_gain, F.fig_attribution):
        assert isinstance(fn(pd.DataFrame()), Figure)


def test_svg_is_inlineable_and_deterministic(example_analysis):
    a = F.to_svg(F.fig_gain_vs_lambda(example_analysis))
    b = F.to_svg(F.fig_gain_vs_lambda(example_analysis))
    assert a == b
    assert a.startswith("<svg") and "viewBox" in a and "<?xml" not in a
    assert not re.search(r'id="(figure|axes|patch)_\d+"', a)
    # every referenced id is defined in the same SVG
    for ref in set(re.findall(r'(?:href|url\()\"?#([\w-]+)', a)):
        assert f'id="{ref}"' in a


def test_small_n_cells_get_points_but_no_interval(example_analysis):
    cells = example_analysis.tables["cells"].copy()
    cells["small_n"] = False
    cells.loc[cells.index[:4], "small_n"] = True
    fig = F.fig_lambda_forest(cells)
    segs = [s for ax in fig.axes for c in ax.collections if isinstance(c, LineCollection) for s in c.get_segments()]
    big = cells[~cells["small_n"]]
    assert sorted((round(s[0][0], 9), round(s[1][0], 9)) for s in segs) == sorted(
        zip(big["lambda_lo"].round(9), big["lambda_hi"].round(9)))
    pts = _scatter_points(F.fig_gain_vs_lambda(cells))
    assert len(pts) == len(cells)  # every point still drawn
    from lengthlens.analyses.tables import table3_cells

    fig = F.fig_gain_vs_lambda(cells)
    vert = {(round(s[0][0], 9), round(min(s[0][1], s[1][1]), 9), round(max(s[0][1], s[1][1]), 9))
            for ax in fig.axes for c in ax.collections if isinstance(c, LineCollection) for s in c.get_segments()
            if len(c.get_segments()) and s[0][0] == s[1][0]}
    # Figure 1 draws the intervals of Table 3's cells (none of them small), and no other.
    t3 = table3_cells(cells)
    assert not t3["small_n"].any() and len(t3) < len(big)
    assert vert == set(zip(t3["gain"].round(9), t3["lambda_lo"].round(9), t3["lambda_hi"].round(9)))
    assert F.drawn(fig).highlighted == len(t3) and F.drawn(fig).hollow == 4


def test_gain_vs_lambda_log_axes_pairs_few_items_and_unclipped_intervals(example_analysis):
    cells = example_analysis.tables["cells"].copy()
    # Plant a 3-item calibration probe in the first group (12 items elsewhere): it must be hollow, without its interval.
    probe = cells.iloc[[0]].assign(params="alpha0.01", n_items=3, lambda_lo=0.01, lambda_hi=50.0)
    if "small_n" in cells:
        probe = probe.assign(small_n=True)
    cells = pd.concat([cells, probe], ignore_index=True)
    fig = F.fig_gain_vs_lambda(cells)
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    pairs = cells[["target", "draft"]].drop_duplicates()
    assert len(axes) == len(pairs) == 2  # one panel per target–draft pair
    assert {ax.get_title() for ax in axes} == {f"{t} ← {d}" for t, d in pairs.itertuples(index=False)}
    for ax in axes:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        lo, hi = ax.get_ylim()
        for c in ax.collections:
            for seg in getattr(c, "get_segments", lambda: [])():
                assert lo <= seg[:, 1].min() and seg[:, 1].max() <= hi  # no interval clipped
    from matplotlib.collections import PathCollection

    def hollow(c: PathCollection) -> int:  # points drawn without a fill (none, or fully transparent)
        fc = c.get_facecolors()
        return len(c.get_offsets()) if len(fc) == 0 else sum(fc[i % len(fc)][3] == 0 for i in range(len(c.get_offsets())))

    assert sum(hollow(c) for ax in axes for c in ax.collections if isinstance(c, PathCollection)) == 1
    # Its interval (0.01 to 50) is not drawn; the axes would have to reach 50 otherwise.
    assert max(ax.get_ylim()[1] for ax in axes) < 50
    assert F.few_items(cells).sum() == 1


def test_dataset_markers_do_not_repeat_up_to_fifteen():
    from lengthlens.report.plot_style import dataset_markers

    marks = dataset_markers([f"ds{i:02d}" for i in range(15)])
    assert len(set(marks.values())) == 15


def test_forest_one_dataset_labels_at_body_size(example_analysis):
    cells = example_analysis.tables["cells"]
    ds = sorted(cells["dataset"].unique())[0]
    fig = F.fig_lambda_forest(cells, dataset=ds)
    (ax,) = [a for a in fig.axes if a.get_visible()]
    labels = ax.get_yticklabels()
    assert len(labels) == (cells["dataset"] == ds).sum()
    # 7.2 in wide, printed at about 7 in: 8 pt labels stay at about the 9 pt body text's size.
    assert min(lab.get_fontsize() for lab in labels) >= 8 and fig.get_figwidth() <= 7.5


def test_attribution_is_faceted_so_labels_keep_their_size(example_analysis):
    fig = F.fig_attribution(example_analysis)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == sorted(example_analysis.tables["attribution"]["dataset"].unique())
    assert fig.get_figwidth() <= 7.5


def test_figures_are_numbered_in_the_order_they_appear(example_report):
    html = (example_report / "report.html").read_text(encoding="utf-8")
    numbers = [int(n) for n in re.findall(r"<b>Figure (\d+)\.</b>", html)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 6


def test_gain_vs_lambda_takes_frames_with_a_repeated_index(example_analysis):
    cells = example_analysis.tables["cells"]
    doubled = pd.concat([cells, cells.assign(dataset=cells["dataset"] + "_b")])  # index 0..n-1 twice
    pts = _scatter_points(F.fig_gain_vs_lambda(doubled))
    assert len(pts) == len(doubled)


def test_one_benchmark_on_two_targets_has_one_marker(example_analysis):
    cells = example_analysis.tables["cells"]
    qwen = cells["target"].str.startswith("Qwen")
    renamed = cells.assign(dataset=np.where(qwen, cells["dataset"] + "_qwen3", cells["dataset"]))
    fig = F.fig_gain_vs_lambda(renamed)
    legend_labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "aime24" in legend_labels and "aime24_qwen3" not in legend_labels
    assert set(F.with_benchmark(renamed)["benchmark"]) == set(cells["dataset"])


def test_marks_draw_what_one_scatter_and_vlines_per_group_draw():
    """Marks (one PathCollection, one LineCollection) against ax.scatter/ax.vlines per group: every point's
    position, marker shape, size, colours and width, and every bar, in the same order."""
    from matplotlib.collections import LineCollection

    from lengthlens.report.plot_style import LensFigure, Marks

    groups = [([1.0, 2.0], [3.0, 4.0], "o", 26, "#0072B2", "white", 0.4, 0.9),
              ([1.5], [2.5], "^", 22, "none", "#D55E00", 0.8, 0.8),
              ([2.5, np.nan], [1.0, 2.0], "s", 26, "#009E73", "white", 0.4, 0.9)]
    old = LensFigure().subplots()
    marks, new = Marks(), LensFigure().subplots()
    for x, y, mk, s, c, e, lw, al in groups:
        old.vlines(x, np.array(y) - 1, np.array(y) + 1, color=e if c == "none" else c, alpha=0.35, lw=0.8)
        if c == "none":
            old.scatter(x, y, facecolors="none", edgecolors=e, marker=mk, s=s, linewidths=lw, alpha=al, zorder=3)
        else:
            old.scatter(x, y, color=c, marker=mk, s=s, edgecolors=e, linewidths=lw, alpha=al, zorder=3)
        marks.vbars(x, np.array(y) - 1, np.array(y) + 1, color=e if c == "none" else c, alpha=0.35, linewidth=0.8)
        marks.points(x, y, color=c, edgecolor=e, marker=mk, size=s, linewidth=lw, alpha=al)
    marks.draw(new, zorder=3, bar_zorder=2)

    def expand(ax):  # one row per drawn point: x, y, size, face RGBA, edge RGBA, width, marker vertices
        rows = []
        for c in ax.collections:
            if isinstance(c, LineCollection):
                continue
            off = np.ma.filled(np.ma.asarray(c.get_offsets()), np.nan)
            fc, ec, lw, sz, paths = (c.get_facecolors(), c.get_edgecolors(), c.get_linewidths(), c.get_sizes(),
                                     c.get_paths())
            for i, (x, y) in enumerate(off):
                if np.isfinite([x, y]).all():
                    face = fc[i % len(fc)] if len(fc) else np.zeros(4)
                    rows.append((x, y, sz[i % len(sz)], *face, *ec[i % len(ec)], lw[i % len(lw)],
                                 paths[i % len(paths)].vertices.round(12).tobytes()))
        return rows

    def bars(ax):
        return [(tuple(np.ravel(s)), tuple(c.get_colors()[i % len(c.get_colors())]), c.get_linewidths()[0])
                for c in ax.collections if isinstance(c, LineCollection) for i, s in enumerate(c.get_segments())
                if len(s) and np.isfinite(s).all()]

    assert expand(new) == expand(old) and len(expand(new)) == 4
    assert bars(new) == bars(old) and len(bars(new)) == 4
    assert [c.get_zorder() for c in new.collections] == [2, 3]


def test_to_svg_lays_out_once_and_draws_once(example_analysis, monkeypatch):
    """The frozen single layout: one draw of the figure, and every axes where savefig's own constrained layout puts it."""
    import io

    import matplotlib

    from lengthlens.report.plot_style import RC, LensFigure

    ref = F.fig_gain_vs_lambda(example_analysis)
    with matplotlib.rc_context(RC):
        ref.savefig(io.StringIO(), format="svg")
    fig = F.fig_gain_vs_lambda(example_analysis)
    draws = []
    orig = LensFigure.draw
    monkeypatch.setattr(LensFigure, "draw", lambda self, r: (draws.append(1), orig(self, r))[1])
    F.to_svg(fig, close=False)
    assert len(draws) == 1
    got = np.array([ax.get_position().bounds for ax in fig.axes])
    want = np.array([ax.get_position().bounds for ax in ref.axes])
    np.testing.assert_allclose(got, want, atol=1e-6)  # in figure fractions: < 0.001 pt on a 9-inch figure
    assert fig.get_layout_engine() is not None  # the caller's figure keeps its engine


def test_a_figure_drawn_in_a_worker_process_is_the_same_bytes(example_analysis):
    """The figures shared with a spawned worker (``--workers 2``) come back as the SVG and caption drawn here."""
    from lengthlens.execution import Pool
    from lengthlens.report import model as M

    tasks = [(key, spec.key, ds) for key, spec, ds in M._figure_tasks(example_analysis)
             if spec.key in ("lambda_forest", "rounds_vs_time", "time_model")]
    data = M.figure_data(example_analysis)
    here = [M._draw_one(data, t) for t in tasks]
    with Pool(2, warm=M.warm_up) as pool:
        assert pool.spawned == 1
        shared = pool.map(M._draw_one, tasks, shared=data)
    assert len(tasks) >= 3
    assert shared == here
