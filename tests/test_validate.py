"""benchmarks/validate.py: its generator plants the truth it claims, its enumeration is complete, and it runs."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "validate.py"


@pytest.fixture(scope="module")
def validate():
    spec = importlib.util.spec_from_file_location("lengthlens_bench_validate", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_paired_table_once_with_probabilities_that_sum_to_one(validate):
    tabs = validate.tables_of(12)
    assert len(tabs) == math.comb(12 + 3, 3) and (tabs.sum(axis=1) == 12).all()
    assert len({tuple(t) for t in tabs}) == len(tabs) and (tabs >= 0).all()
    w = validate.table_probabilities(tabs, 0.15, -0.05)
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
    # The expected point estimate (b - c) / n is w2r - r2w = the change, exactly.
    assert w @ ((tabs[:, 1] - tabs[:, 2]) / 12) == pytest.approx(-0.05, abs=1e-12)
    assert validate.table_probabilities(tabs, 0.10, -0.20) is None  # more change than discordance


def test_the_generator_plants_discordance_and_change(validate):
    rng = np.random.default_rng(3)
    n = 200_000
    runs = validate._runs(rng, n // 4, 4, validate.NO_BUDGET, (validate.ArmSpec("x", discordance=0.15, change=-0.05),))
    s, r = runs["strict"]["correct"], runs["x"]["correct"]
    # Binomial SEs over 200,000 runs (seeds of an item are correlated, at most 4 runs per item: SE x 2 bounds it):
    # discordance sqrt(.15 * .85 / n) * 2 = 0.0016, change < 0.0018, baseline accuracy sqrt(.21 / n) * 2 = 0.0021.
    assert np.mean(s != r) == pytest.approx(0.15, abs=4 * 0.0016)
    assert np.mean(r.astype(float) - s) == pytest.approx(-0.05, abs=4 * 0.0018)
    assert np.mean(s) == pytest.approx(validate.P_STAR, abs=4 * 0.0021)


def test_the_monte_carlo_lambda_is_the_analytic_one(validate):
    t = validate.truth(validate.NO_BUDGET, n_items=200_000)
    # Each sum of 200,000 log-normal lengths (log SD 0.84-0.9) has CV <= 1.2 / sqrt(2e5) = 0.27 %; their ratio
    # within 4 x sqrt(2) x 0.27 % = 1.5 % (rounding to whole tokens moves it by far less).
    assert t["lambda"] == pytest.approx(validate.LAMBDA0 * math.exp(0.3**2 / 2), rel=0.015)
    assert t["time_per_round_ratio"] == pytest.approx(t["time_ratio"] / t["rounds_ratio"], rel=1e-12)
    censored = validate.truth(validate.BUDGET, n_items=200_000)
    assert censored["lambda"] < t["lambda"]  # the cap shortens the longer arm more


@pytest.mark.slow
def test_quick_run_prints_coverage_in_range(validate):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert validate.main(["--quick"]) == 0
    text = out.getvalue()
    coverage = text.split("## Coverage of the default intervals")[1].split("How the others failed")[0]
    header = next(r for r in coverage.splitlines() if r.startswith("| n |")).strip("| ").split(" | ")
    rows = [r for r in coverage.splitlines() if re.match(r"\| \d+ \| \d \|", r)]
    assert len(rows) == 2 * 2 * 2  # n = 3, 12; 1 and 4 seeds; with and without censoring
    values = [float(v) for r in rows for v in r.strip("| ").split(" | ")[3:]]
    assert all(0 <= v <= 100 for v in values)
    lam = [float(r.strip("| ").split(" | ")[header.index("λ")]) for r in rows if r.startswith("| 12 |")]
    assert min(lam) >= 60  # 10 cells each: a default covering 93 % covers 5 or fewer with probability < 5e-4
    assert "## The multiplicity family" in text and "Produced by" in text


@pytest.mark.slow
def test_the_default_ratio_intervals_cover_at_12_items(validate):
    """1,000 simulated 12-item cells, one seed, no censoring: λ and R/R* cover 93-97 % (SE of 95 % is 0.7 points)."""
    parts = [validate.coverage_task((5, 12, 1, validate.NO_BUDGET, k, 100)) for k in range(10)]
    t = validate.truth(validate.NO_BUDGET)
    for name in ("lambda", "rounds_ratio"):
        limits = np.concatenate([p[name] for p in parts])
        assert 0.93 <= validate.summarise(limits, t[name])["coverage"] <= 0.97, name


def test_the_pooled_truth_is_synths(validate):
    """Section 5's truths: a cell's planted log R/R* is log(λ_censored / gain) of lengthlens.synth.truth's row, the
    accuracy change the answered runs' difference; across datasets, rules planted 5 points apart (same λ and gain)
    differ by 5 points times the share of runs answered (capped runs count wrong), 0.8–1."""
    import polars as pl

    from lengthlens.synth import truth as synth_truth

    rng = np.random.default_rng(2)
    spec = validate._pooled_spec(validate._pooled_effects(rng), "T", 12, 1)
    truth_of = validate._pooled_truth(spec)
    assert set(truth_of) == {(r, s) for r in validate.POOLED_RULES for s, *_ in validate.POOLED_SLOTS}
    assert math.isnan(truth_of["p0a", "mtbench"]["accuracy_delta_pp"])  # ungraded
    row = synth_truth(spec).filter((pl.col("method") == "p2a") & (pl.col("dataset") == "aime24")).row(0, named=True)
    assert truth_of["p2a", "aime24"]["rounds_ratio"] == pytest.approx(math.log(row["lambda_censored"] / row["gain"]))
    assert truth_of["p2a", "aime24"]["accuracy_delta_pp"] == pytest.approx(
        100 * (row["accuracy_expected"] - row["accuracy_strict_expected"]))
    mu = validate.pooled_across_mean(1, 400)
    gap = mu["p0a", "accuracy_delta_pp"] - mu["p5a", "accuracy_delta_pp"]
    # 400 draws of 5 slots with SD 3 points each side: the difference within 4 SE of 5 × (0.8–1)
    assert 4.0 - 4 * 3 * math.sqrt(2 / 2000) <= gap <= 5.0 + 4 * 3 * math.sqrt(2 / 2000)


@pytest.mark.slow
def test_the_default_pooled_intervals_cover_at_the_study_shape(validate):
    """120 simulated studies of 6 datasets × 12 items (720 pooled intervals per metric): the default interval covers
    the across-dataset mean of log R/R* and of the accuracy change in at least 93 % (the validation's 96.8 % and 99.0 %,
    binomial SE 0.8 points at 95 %)."""
    across = validate.pooled_across_mean(7, 1000)
    rows = [row for k in range(12) for row in validate.pooled_task((7, 12, 1, k)) if row[2]]  # floored (default)
    for metric in ("rounds_ratio", "accuracy_delta_pp"):
        got = [(lo <= across[rule, metric] <= hi) for (_, _, _, rule, m, lo, hi, *_rest) in rows if m == metric]
        assert len(got) == 720 and np.mean(got) >= 0.93, metric
