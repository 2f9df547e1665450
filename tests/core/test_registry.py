"""The metric registry: every metric evaluates on arrays and on duals, says why it is missing, and is added in one place."""

from __future__ import annotations

import json
import math

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
    assert "lambda" not in why and set(why) == {"time_ratio", "time_per_round_ratio", "throughput_ratio"}


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


DRAFT = (Quantity("D", lambda r: r.draft_tokens, ("draft_tokens",), "draft tokens of the relaxed run"),
         Quantity("D_star", lambda r: r.draft_tokens_star, ("draft_tokens",), "draft tokens of the baseline run"),
         Metric("draft_ratio", lambda s: s.D / s.D_star, "D/D*", "Σᵢ Dᵢ / Σᵢ D*ᵢ", "drafted tokens, relaxed over strict",
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
    assert {"draft_ratio", "draft_ratio_lo", "draft_ratio_hi"} <= set(df.columns)
    row = df.iloc[0]
    assert (row.draft_ratio, row.draft_ratio_lo, row.draft_ratio_hi) == (row["lambda"], row.lambda_lo, row.lambda_hi)
    assert row.draft_ratio_lo < row.draft_ratio < row.draft_ratio_hi
    html = (tmp_path / "out" / "report.html").read_text()
    assert ">D/D*<" in html and f"{row.draft_ratio:.2f}" in html
    assert "Σᵢ Dᵢ / Σᵢ D*ᵢ" in html  # the Methods section lists its formula
    assert "draft_ratio" not in cells(runs, n_resamples=100).to_frame().columns  # gone with the with-block


def test_an_added_metric_whose_input_is_not_logged_is_empty_with_the_reason(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records(draft_tokens=False)))
    with metrics.extended(*DRAFT):
        cell = cells(ll.load(path), n_resamples=200).cells[0]
    assert math.isnan(cell["draft_ratio"].point) and math.isnan(cell["draft_ratio"].low)
    assert cell.unavailable["draft_ratio"] == "draft_tokens not logged on 14 of 14 paired runs"
    assert cell["lambda"].point > 1  # the others are computed
