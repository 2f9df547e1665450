"""The metric registry: every metric evaluates on arrays and on duals, says why it is missing, and is added in one place."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import lengthlens as ll
from lengthlens.analyses.cells import cells
from lengthlens.report import write_report
from lengthlens.stats import metrics
from lengthlens.stats.dual import Dual
from lengthlens.stats.metrics import REGISTRY, Metric, Quantity, Sums


def _sums(rng, shape=()) -> dict[str, np.ndarray]:
    """Positive sums of every quantity (counts below their totals, so every ratio is defined)."""
    s = {q: rng.uniform(20.0, 200.0, shape) for q in REGISTRY.quantity_names}
    s["n"] = s["n_lbar"] = s["n_lbar_star"] = s["n_graded"] = np.full(shape, 250.0)
    return s


def test_every_metric_evaluates_on_arrays_and_on_duals_to_the_same_values():
    rng = np.random.default_rng(0)
    s = _sums(rng, (7,))
    plain = REGISTRY.evaluate(s)
    for m in REGISTRY.metrics:
        assert plain[m.name].shape == (7,) and np.isfinite(plain[m.name]).all(), m.name
        deps = REGISTRY.sums_of(m.name)
        dual = m.of(Sums({**s, **{k: Dual.variable(s[k], k) for k in deps}}))
        value = dual.value if isinstance(dual, Dual) else dual
        np.testing.assert_array_equal(value, plain[m.name], err_msg=m.name)  # the same operations on the same arrays
        # the gradient of each dependency against a central difference (step 1e-6 relative: error ~1e-9)
        for k in deps:
            h = 1e-6 * s[k]
            up, down = dict(s), dict(s)
            up[k], down[k] = s[k] + h, s[k] - h
            fd = (REGISTRY.evaluate(up, [m.name])[m.name] - REGISTRY.evaluate(down, [m.name])[m.name]) / (2 * h)
            np.testing.assert_allclose(dual.grad[k], fd, rtol=1e-5, err_msg=f"{m.name} by {k}")


def test_every_metric_has_a_label_a_formula_a_description_and_known_inputs():
    for m in REGISTRY.metrics:
        assert m.label and m.formula and m.description, m.name
        assert m.interval in (None, "ratio", "difference") and m.fmt
        assert set(REGISTRY.inputs_of(m.name)) <= set(REGISTRY.inputs), m.name
    assert REGISTRY.inputs_of("lambda") == ("output_tokens",)
    assert set(REGISTRY.inputs_of("gain")) == {"accepted_tokens", "draft_rounds"}


def test_a_zero_denominator_is_undefined_not_infinite():
    s = _sums(np.random.default_rng(1))
    s["L_star"] = np.float64(0.0)
    assert math.isnan(REGISTRY.evaluate(s, ["lambda"])["lambda"])


def test_a_missing_input_gives_the_reason():
    why = REGISTRY.unavailable({"wall_time_s": 3, "output_tokens": 0}, 10)
    assert why["time_ratio"] == "wall_time_s not logged on 3 of 10 paired runs"
    assert "lambda" not in why
    assert set(why) == {"time_ratio", "time_per_round_ratio", "throughput_ratio", "time_ratio_median_item"}


def test_a_metric_defined_twice_is_refused():
    with pytest.raises(ValueError, match="defined twice"):
        metrics.Registry(REGISTRY.quantities, REGISTRY.metrics + (REGISTRY.metric("lambda"),))


def _records(n_items: int = 14, draft_tokens: bool = True) -> list[dict]:
    rng = np.random.default_rng(4)
    out = []
    for i in range(n_items):
        for method, scale in (("strict", 1.0), ("cactus", 1.4)):
            L = int(rng.integers(200, 900) * scale)
            r = dict(target="T", draft="D", dataset="d", method=method, params="strict" if method == "strict" else "alpha0.3",
                     alpha=None if method == "strict" else 0.3, item_id=f"q{i:02d}", seed=0, status="ok", output_tokens=L,
                     max_new_tokens=2048, finish_reason="stop", draft_rounds=L // 3, accepted_tokens=L - L // 3,
                     wall_time_s=L / 40)
            if draft_tokens:
                r["draft_tokens"] = 2 * L  # drafted tokens = 2 x output: their ratio is lambda, exactly
            out.append(r)
    return out


DRAFT = (Quantity("Dtest", lambda r: r.draft_tokens, ("draft_tokens",), "draft tokens of the relaxed run"),
         Quantity("Dtest_star", lambda r: r.draft_tokens_star, ("draft_tokens",), "draft tokens of the baseline run"),
         Metric("test_draft_ratio", lambda s: s.Dtest / s.Dtest_star, "D/D*", "Σᵢ Dᵢ / Σᵢ D*ᵢ", "drafted tokens, relaxed over strict",
                better="lower"))


def test_a_metric_added_in_one_place_reaches_cells_csv_and_report_html(tmp_path):
    """One Metric row (and the two Quantity rows it sums) and nothing else: the metric is in cells.csv with its
    interval and in the report's cell table. Drafted tokens are twice the output tokens here, so their ratio is λ
    bit for bit (the sums scale by a power of two exactly), and so is its studentized interval."""
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    runs = ll.load(path)
    with metrics.extended(*DRAFT):
        analysis = ll.analyse(runs, n_resamples=2000)
        write_report(analysis, tmp_path / "out", pdf=False, figures=False)
    df = pd.read_csv(tmp_path / "out" / "cells.csv")
    assert {"test_draft_ratio", "test_draft_ratio_lo", "test_draft_ratio_hi"} <= set(df.columns)
    row = df.iloc[0]
    assert (row.test_draft_ratio, row.test_draft_ratio_lo, row.test_draft_ratio_hi) == (row["lambda"], row.lambda_lo, row.lambda_hi)
    assert row.test_draft_ratio_lo < row.test_draft_ratio < row.test_draft_ratio_hi
    html = (tmp_path / "out" / "report.html").read_text()
    assert ">D/D*<" in html and f"{row.test_draft_ratio:.2f}" in html
    assert "Σᵢ Dᵢ / Σᵢ D*ᵢ" in html  # the Methods section lists its formula
    assert "test_draft_ratio" not in cells(runs, n_resamples=100).to_frame().columns  # gone with the with-block


def test_an_added_metric_whose_input_is_not_logged_is_empty_with_the_reason(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records(draft_tokens=False)))
    with metrics.extended(*DRAFT):
        cell = cells(ll.load(path), n_resamples=200).cells[0]
    assert math.isnan(cell["test_draft_ratio"].point) and math.isnan(cell["test_draft_ratio"].low)
    assert cell.unavailable["test_draft_ratio"] == "draft_tokens not logged on 14 of 14 paired runs"
    assert cell["lambda"].point > 1  # the others are computed


def _partly_drafted(n_items: int = 14, missing: int = 5) -> list[dict]:
    """The issue's case: draft_tokens logged on the baseline and on all but ``missing`` of the relaxed runs."""
    recs = _records(n_items)
    relaxed = [r for r in recs if r["method"] == "cactus"]
    for r in relaxed[:missing]:
        del r["draft_tokens"]
    return recs


#: A user's rows as the issue wrote them: no inputs declared (they are derived from what the definitions read).
UNDECLARED = (Quantity("Dtest", lambda r: r.draft_tokens, description="draft tokens of the relaxed run"),
              Quantity("Dtest_star", lambda r: r.draft_tokens_star, description="draft tokens of the baseline run"),
              DRAFT[2])


def test_inputs_are_derived_from_the_fields_a_quantity_reads():
    assert UNDECLARED[0].inputs == ("draft_tokens",) and UNDECLARED[1].inputs == ("draft_tokens",)
    assert REGISTRY.metric("lambda") and dict((q.name, q.inputs) for q in REGISTRY.quantities)["T_star"] == ("wall_time_s",)
    # a verdict's absence is an ungraded pair, which the accuracy quantities handle themselves
    assert dict((q.name, q.inputs) for q in REGISTRY.quantities)["c"] == ()


def test_a_quantity_reading_a_field_it_does_not_declare_is_refused():
    with pytest.raises(ValueError, match=r"'Dtest' reads wall_time_s but does not declare it"):
        Quantity("Dtest", lambda r: r.draft_tokens / r.wall_time_s, ("draft_tokens",))


def test_a_missing_input_of_an_undeclared_quantity_is_nan_with_the_reason_not_zero(tmp_path):
    """draft_tokens missing on 5 of 14 relaxed runs: the ratio is empty with the reason (a missing value read as 0 gave
    Σ over 9 runs / Σ over 14 runs, a wrong number without a word)."""
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _partly_drafted()))
    runs = ll.load(path)
    with metrics.extended(*UNDECLARED):
        cell = cells(runs, n_resamples=200).cells[0]
    assert math.isnan(cell["test_draft_ratio"].point) and math.isnan(cell["test_draft_ratio"].low)
    assert cell.unavailable["test_draft_ratio"] == "draft_tokens not logged on 5 of 14 paired runs"
    assert cell["lambda"].point > 1


def test_a_partly_missing_input_reaches_the_reports_cells_csv_as_nan_with_its_reason(tmp_path):
    """Through the registered analyses (analyse() and the report's cells table): the metric is empty in cells.csv,
    its reason is in the unavailable column and in the report's notes, and the other metrics are computed."""
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _partly_drafted()))
    with metrics.extended(*UNDECLARED):
        analysis = ll.analyse(ll.load(path), n_resamples=200)
    row = analysis["cells"].iloc[0]
    assert math.isnan(row.test_draft_ratio) and math.isnan(row.test_draft_ratio_lo) and math.isnan(row.test_draft_ratio_hi)
    assert "test_draft_ratio: draft_tokens not logged on 5 of 14 paired runs" in row.unavailable
    assert any("draft_tokens not logged" in n and "test_draft_ratio" in n for n in analysis.notes)
    assert row["lambda"] > 1


def test_a_metric_over_items_is_the_median_of_its_definition_on_each_item():
    """rounds_ratio_median_item: the median over items of each item's mean per-run R/R*, from the registry's rows."""
    rng = np.random.default_rng(5)
    n_items, seeds = 9, 3
    R, Rs = rng.integers(50, 400, (n_items, seeds)).astype(float), rng.integers(50, 400, (n_items, seeds)).astype(float)
    Rs[0, 1] = 0.0  # an undefined run ratio is left out of its item's mean
    item = np.repeat(np.arange(n_items), seeds)
    per_run = REGISTRY.quantities_of({"draft_rounds": R.ravel(), "draft_rounds_star": Rs.ravel()}, item.size)
    item_sums = {q: np.bincount(item, weights=v, minlength=n_items) for q, v in per_run.items()}
    got = REGISTRY.evaluate_items(item_sums, ["rounds_ratio_median_item"])["rounds_ratio_median_item"]
    means = [np.mean([R[i, j] / Rs[i, j] for j in range(seeds) if Rs[i, j] > 0]) for i in range(n_items)]
    assert got == pytest.approx(float(np.median(means)), rel=1e-14)
    assert "rounds_ratio_median_item" in REGISTRY.item_metrics and REGISTRY.metric("rounds_ratio_median_item").interval is None


def test_influence_metrics_are_the_rows_marked_so_with_the_sums_of_their_ratio():
    assert REGISTRY.influence_metrics == {"lambda": ("L", "L_star"), "rounds_ratio": ("R", "R_star"),
                                          "time_ratio": ("T", "T_star")}
    with pytest.raises(ValueError, match="not a ratio of two sums"):
        metrics.Registry(REGISTRY.quantities, REGISTRY.metrics + (
            Metric("gain_x", lambda s: (s.A / s.R + 1.0) / (s.A_star / s.R_star + 1.0), "g", "g", "g", influence=True),))


def test_spec_bench_l_bar_is_the_registry_row_and_empty_where_an_input_is_missing():
    """speedup_table's l_bar and l_bar_pooled are the registry's rows on the arm's runs (mean of per-run A/R, ΣA/ΣR);
    one run without accepted_tokens leaves them empty rather than counting it as 0."""
    import polars as pl

    from lengthlens.analyses.specbench_speedup import speedup_table

    A, R = [60, 30, 10], [40, 20, 20]
    t = pl.DataFrame({"target": ["m"] * 5, "draft": ["", "", "sps", "sps", "sps"], "dataset": ["qa"] * 5,
                      "method": ["strict", "strict", "sps", "sps", "sps"], "params": ["strict", "strict", "p", "p", "p"],
                      "seed": [0] * 5, "item_id": ["1", "2", "1", "2", "3"], "status": ["ok"] * 5,
                      "output_tokens": [100, 50, 100, 50, 30], "wall_time_s": [2.0, 1.0, 1.0, 0.5, 0.3],
                      "accepted_tokens": [0, 0, *A], "draft_rounds": [100, 50, *R]})
    row = speedup_table(t, overall=False).iloc[0]
    assert row.l_bar == pytest.approx(np.mean(np.array(A) / np.array(R)), rel=1e-15)
    assert row.l_bar_pooled == pytest.approx(sum(A) / sum(R), rel=1e-15)
    gap = speedup_table(t.with_columns(pl.when(pl.col("item_id") == "3").then(None).otherwise(pl.col("accepted_tokens"))
                                       .alias("accepted_tokens")), overall=False).iloc[0]
    assert math.isnan(gap.l_bar) and math.isnan(gap.l_bar_pooled) and gap.speedup == row.speedup


def test_the_metric_recipe_in_the_developers_guide_runs_as_written(tmp_path):
    """docs/development.md's rows, evaluated as written in metrics.py's namespace, give their metric in cells.csv
    (the tests' own rows above use other names, so a newcomer who adds the recipe to the registry breaks nothing);
    where the registry already holds them, the built-in rows are what is checked."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "development.md").read_text(encoding="utf-8")
    block = guide.split("## Adding a metric", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    rows = eval(f"({block})", vars(metrics))  # noqa: S307 - the guide's own code, as a newcomer pastes it
    names = {r.name for r in rows}
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    runs = ll.load(path)
    new = tuple(r for r in rows if r.name not in REGISTRY.names and r.name not in {q.name for q in REGISTRY.quantities})
    with metrics.extended(*new):
        cell = cells(runs, n_resamples=200).cells[0]
    metric = next(r.name for r in rows if isinstance(r, Metric))
    assert "draft_ratio" in names and cell[metric].point == pytest.approx(cell["lambda"].point, rel=1e-12)
