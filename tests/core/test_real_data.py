"""The study's own aggregates (campaign/results/*.csv) reproduced from its raw logs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import lengthlens as ll


@pytest.fixture(scope="module")
def real(shared_data):
    runs = ll.load(shared_data / "runs", cache=False)
    return runs, ll.arms(runs)


def _study_rows(shared_data):
    frames = [pd.read_csv(f) for f in sorted((shared_data / "campaign" / "results").glob("*.csv"))]
    return pd.concat(frames, ignore_index=True)


def test_every_run_loaded_none_skipped(real):
    runs, _ = real
    assert runs.n_found == 1143 and runs.table.height == 1143 and runs.skipped.height == 0
    assert runs.paired.height == 1143


def test_campaign_results_reproduced(real, shared_data):
    """n_cases, mean_l_bar and mean_completion_length of every study row equal arms.csv (relative 1e-9).

    The study's results list only the arms run on all 12 cases: the 3-case arms are its alpha
    calibration probes (campaign/calibration/<dataset>.json, ``probe_cases``), which its aggregates
    leave out, while the 12-case arms are exactly the calibration's ``chosen_alphas``. arms.csv
    keeps the probes (n_items = 3), so the test maps each study row to its arm and checks that
    exactly the 3-case arms are the ones the study omits (85 of 126 arms are in its results).
    """
    _, arms = real
    study = _study_rows(shared_data)
    arms = arms.copy()
    arms["alpha_key"] = [("strict" if m == "strict" else round(a, 9)) for m, a in zip(arms["method"], arms["alpha"])]
    matched = set()
    for r in study.itertuples(index=False):
        key = "strict" if r.method == "strict" else round(float(r.alpha), 9)
        hit = arms[(arms.dataset == r.dataset) & (arms.method == r.method) & (arms.alpha_key == key)]
        assert len(hit) == 1, (r.dataset, r.method, r.alpha)
        a = hit.iloc[0]
        matched.add((a.dataset, a.method, a.params))
        assert a.n_ok == r.n_cases
        assert math.isclose(a.mean_l_bar, r.mean_l_bar, rel_tol=1e-9)
        assert math.isclose(a.mean_completion_length, r.mean_completion_length, rel_tol=1e-9)
    omitted = arms[[(d, m, p) not in matched for d, m, p in zip(arms.dataset, arms.method, arms.params)]]
    assert len(study) == 85 and len(omitted) == 126 - 85
    assert (omitted.n_ok == 3).all()
    # ... and the full arms are exactly the calibration's chosen alphas.
    import json

    for f in sorted((shared_data / "campaign" / "calibration").glob("*.json")):
        cal = json.loads(f.read_text())
        chosen = {(m, round(a, 9)) for m, alphas in cal["chosen_alphas"].items() for a in alphas}
        full = arms[(arms.dataset == cal["dataset"]) & (arms.method != "strict") & (arms.n_ok == 12)]
        assert set(zip(full.method, full.alpha_key)) == chosen


def test_cells_on_real_data_are_sane(real):
    runs, _ = real
    table = ll.cells(runs, n_resamples=2000)
    df = table.to_frame()
    assert len(df) == 120
    assert ((df.lambda_lo <= df["lambda"]) & (df["lambda"] <= df.lambda_hi)).all()
    # gsm8k cactus alpha0.35 by hand from campaign/results: l_bar 4.4461 vs strict 2.6914.
    c = table.get(dataset="gsm8k", method="cactus", params="alpha0.35")
    assert c["gain"].point == pytest.approx((4.446071152232115 + 1) / (2.691411545721184 + 1), rel=1e-12)
    assert c["lambda"].point == pytest.approx(569.5833333333334 / 273.3333333333333, rel=1e-12)


#: Study rows whose accuracy we do not reproduce, decided on the texts (see the test's docstring).
ACCURACY_EXCEPTIONS = {
    # The study's own grade file marks one more run incorrect than its aggregate: a run that hit the
    # token budget with its thinking still open (never graded from thinking; grade file agrees).
    ("gsm8k", "mentored_dec", 0.75): (11 / 12, 12 / 12),
    ("gsm8k", "cactus", 0.18): (10 / 12, 11 / 12),
    ("gsm8k", "spec_casc_opt", 0.05): (11 / 12, 12 / 12),
    ("aime24", "r_fuzzy", 0.25): (7 / 12, 8 / 12),
    # No grade file for longbench_v2: lengthlens' letter grader reads 8 of 12 correct, the study's
    # aggregate 6. case_010 ends "\[ \boxed{C} \]" and case_012 "**C – The water drop ...**", both
    # the reference letter; we count them correct. The study's grader is not in the data.
    ("longbench_v2", "r_fuzzy", 0.25): (8 / 12, 6 / 12),
}


def test_campaign_accuracy_reproduced(real, shared_data):
    """Accuracy of every study row that has one: 66 of 71 equal; the 5 others are decided in ACCURACY_EXCEPTIONS."""
    _, arms = real
    study = _study_rows(shared_data)
    study = study[study["accuracy"].notna()]
    assert len(study) == 71
    equal = 0
    for r in study.itertuples(index=False):
        sel = arms[(arms.dataset == r.dataset) & (arms.method == r.method)]
        if r.method != "strict":
            sel = sel[(sel.alpha - float(r.alpha)).abs() < 1e-9]
        ours = float(sel.accuracy.iloc[0])
        key = (r.dataset, r.method, None if r.method == "strict" else round(float(r.alpha), 9))
        if key in ACCURACY_EXCEPTIONS:
            assert (ours, r.accuracy) == pytest.approx(ACCURACY_EXCEPTIONS[key], rel=1e-12)
        else:
            assert ours == pytest.approx(r.accuracy, rel=1e-9), key
            equal += 1
    assert equal == 66


def test_arm_km_median_without_censoring_is_the_median(real):
    """With no run cut at the budget, Kaplan–Meier is the empirical distribution: its median is np.median."""
    import numpy as np
    import polars as pl

    runs, arms = real
    clean = arms[(arms.censored_frac == 0) & (arms.n_ok >= 12)]
    assert len(clean) > 20
    for a in clean.itertuples(index=False):
        lengths = runs.table.filter((pl.col("dataset") == a.dataset) & (pl.col("method") == a.method)
                                    & (pl.col("params") == a.params))["output_tokens"].to_numpy()
        assert a.km_median == pytest.approx(float(np.median(lengths)))
    # With censoring beyond half of the runs the median is not identified (NaN), never made up.
    heavy = arms[arms.censored_frac > 0.5]
    assert len(heavy) and heavy.km_median.isna().all()
