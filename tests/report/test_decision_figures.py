"""The new figures render, and their captions say what is drawn: clipped intervals, intervals left out, probes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lengthlens.report import plots as F
from lengthlens.report.plot_style import caption_notes, robust_log_limits, to_svg


def _cells(n: int = 24, extreme: bool = False, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        lam, r, t, g = (rng.uniform(0.8, 1.6) for _ in range(4))
        d = rng.uniform(-8, 3)
        rows.append({"target": "T", "draft": "D", "dataset": f"d{i % 2}", "method": ["x", "y"][i % 2], "params": f"alpha{i % 3}",
                     "alpha": 0.1 * (i % 3 + 1), "n_items": 3 if i == 5 else 30, "n_graded": 30, "graded_partial": False,
                     "gain": g, "lambda": lam, "lambda_lo": lam * 0.9, "lambda_hi": lam * 1.1, "rounds_ratio": r,
                     "rounds_ratio_lo": r * 0.9, "rounds_ratio_hi": r * 1.1, "time_ratio": t, "time_ratio_lo": t * 0.9,
                     "time_ratio_hi": t * 1.1, "accuracy_delta_pp": d, "accuracy_delta_lo": d - 4, "accuracy_delta_hi": d + 4})
    df = pd.DataFrame(rows)
    df["small_n"] = df["n_items"] < 10
    if extreme:  # one interval running to 1e300 (a resample's denominator near zero)
        df.loc[0, ["rounds_ratio_hi", "lambda_hi"]] = 1e300
    return df


def test_robust_axis_ignores_an_extreme_limit():
    lo, hi = robust_log_limits([pd.Series([0.8, 1.5])], [pd.Series([0.7, 1e300, 1.7])])
    assert lo < 0.8 and 1.7 < hi < 2.0


def test_tradeoff_clips_an_extreme_interval_and_says_so():
    fig = F.fig_tradeoff(_cells(extreme=True))
    ax = fig.axes[0]
    assert ax.get_ylim()[1] < 10  # the 1e300 limit did not stretch the axis
    caption = F.figure_caption("tradeoff", fig)
    assert "1 interval runs past the axis, drawn to its edge and marked with an arrow (↑)." in caption
    assert "Left out: 1 graded cell with fewer than 10 items." in caption
    assert "<svg" in to_svg(fig)


def test_tradeoff_without_extremes_has_no_clipping_note():
    assert "run past" not in F.figure_caption("tradeoff", F.fig_tradeoff(_cells()))


def test_gain_vs_lambda_draws_table3s_intervals_and_says_so():
    from lengthlens.analyses.tables import table3_cells

    df = _cells()
    fig = F.fig_gain_vs_lambda(df)
    keys = ["target", "draft", "dataset", "method", "params"]
    picked = table3_cells(df)[keys].drop_duplicates()
    merged = df.merge(picked, on=keys, how="left", indicator=True)  # this frame repeats keys: every row of a key is drawn out
    n3 = int(((merged["_merge"] == "both") & ~merged["small_n"]).sum())
    caption = F.figure_caption("gain_vs_lambda", fig)
    assert f"Table 3's {n3} cells (each rule at its most aggressive complete α per dataset) are outlined, {n3} with" in caption
    assert "1 cell with fewer than 10 items (e.g. calibration probes) is hollow, without an interval." in caption
    assert f"{len(df) - n3 - 1} cells at other α values are pale" in caption and "1 cell with fewer than 10 items" in caption
    clipped = F.fig_gain_vs_lambda(_cells(extreme=True))
    assert clipped.axes[0].get_ylim()[1] < 10
    caption = F.figure_caption("gain_vs_lambda", clipped)
    assert ("1 interval of λ run past" in caption) == (("T", "D", "d0", "x", "alpha0", "") in F._table3_keys(_cells()))


def test_alpha_sweep_marks_probes_and_draws_every_alpha():
    df = _cells()
    fig = F.fig_alpha_sweep(df)
    assert "1 cell with fewer than 10 items (e.g. calibration probes) is hollow" in F.figure_caption("alpha_sweep", fig)
    # five metrics x two rules
    assert len([a for a in fig.axes if a.get_visible()]) == 10
    assert fig.axes[0].get_title() == "x"
    to_svg(fig)


def test_time_model_and_table4_costs_render():
    tm = pd.DataFrame({"target": "T", "draft": "D", "dataset": ["a", "b"], "method": "x", "params": "p", "n_runs": 10,
                       "seconds_per_round": [0.02, 0.03], "seconds_fixed": 0.3, "seconds_per_round_star": [0.02, 0.02],
                       "seconds_fixed_star": 0.3, "rounds_ratio": [0.9, 1.1], "time_ratio": [0.95, 1.4],
                       "time_ratio_predicted": [0.92, 1.08]})
    fig = F.fig_time_model(tm)
    assert fig.axes[1].get_xlabel().startswith("T/T* predicted")
    to_svg(fig)
    t4 = pd.DataFrame({"target": ["T", "all"], "draft": ["D", "all"], "dataset": ["a", "all"], "method": ["x_force_commit", "all"],
                       "params": ["alpha0.3_t100", "all"], "fired": [5, 5], "length_ratio": [0.7, 0.7], "rounds_ratio": [0.8, 0.8],
                       "time_ratio": [0.85, 0.85]})
    fig = F.fig_table4_costs(t4)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["a · x alpha0.3_t100"]
    to_svg(fig)


def test_report_figures_carry_their_notes(example_analysis):
    """On the example: every new figure is in the report, and the attribution figure says which cells it averages."""
    from lengthlens.report import _figure_blocks

    blocks = _figure_blocks(example_analysis)
    for key in ("tradeoff", "alpha_sweep", "time_model", "table4_costs"):
        assert key in blocks, key
    assert "The cells are Table 3's: each rule at its most aggressive complete α" in blocks["attribution"]["caption"]
