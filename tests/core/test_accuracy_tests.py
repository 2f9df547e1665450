"""The accuracy tests beside Δacc in the cell table: multiplicity over the accuracy family, the sign-flip test, the flags."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

import lengthlens as ll
from lengthlens.analyses.cells import Cell, accuracy_family, family_can_reject
from lengthlens import results
from lengthlens.stats.mcnemar import mcnemar_exact, mcnemar_midp
from lengthlens.stats.metrics import drop_2pp_point
from lengthlens.stats.multiplicity import benjamini_hochberg, holm
from lengthlens.stats.paired import noninferiority_test, tango_interval
from lengthlens.stats.signflip import item_differences, sign_flip_test


@pytest.mark.parametrize("seed", range(6))
def test_holm_and_bh_equal_statsmodels(seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, 40) ** 3
    p[rng.integers(0, 40, 5)] = p[0]  # ties
    p[[3, 17]] = np.nan  # ungraded cells: not in the family
    ok = np.isfinite(p)
    h, q = holm(p), benjamini_hochberg(p)
    assert np.isnan(h[[3, 17]]).all() and np.isnan(q[[3, 17]]).all()
    np.testing.assert_allclose(h[ok], multipletests(p[ok], method="holm")[1], rtol=1e-12)
    np.testing.assert_allclose(q[ok], multipletests(p[ok], method="fdr_bh")[1], rtol=1e-12)


def test_holm_by_hand():
    # p sorted 0.01, 0.02, 0.04 (m = 3): 3*0.01 = 0.03, max(0.03, 2*0.02) = 0.04, max(0.04, 1*0.04) = 0.04.
    np.testing.assert_allclose(holm([0.04, 0.01, 0.02]), [0.04, 0.03, 0.04])
    # BH: 3*0.04/3 = 0.04, min(0.04, 3*0.02/2 = 0.03) = 0.03, min(0.03, 3*0.01/1) = 0.03.
    np.testing.assert_allclose(benjamini_hochberg([0.04, 0.01, 0.02]), [0.04, 0.03, 0.03])


def _oracle(d):
    d = [x for x in d if x != 0]
    obs = abs(sum(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= obs - 1e-9 for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


@pytest.mark.parametrize("seed", range(5))
def test_sign_flip_exact_equals_plain_loop(seed):
    rng = np.random.default_rng(seed)
    k = rng.integers(4, 6, 11)
    d = (rng.binomial(k, 0.6) - rng.binomial(k, 0.45)) / k
    r = sign_flip_test(d)
    assert r.method == "sign_flip_exact" and r.statistic == pytest.approx(float(np.sum(d)), abs=1e-12)
    assert r.pvalue == pytest.approx(_oracle(d), abs=1e-15)


@pytest.mark.parametrize("w2r,r2w", [(0, 0), (1, 0), (0, 5), (2, 7), (6, 6), (3, 12)])
def test_one_run_per_item_sign_flip_is_mcnemar(w2r, r2w):
    d = [1.0] * w2r + [-1.0] * r2w + [0.0] * 4
    assert sign_flip_test(d).pvalue == pytest.approx(mcnemar_exact(w2r, r2w), rel=1e-12)


def test_sign_flip_monte_carlo_is_fixed_and_close_to_exact():
    rng = np.random.default_rng(3)
    d = (rng.binomial(5, 0.6, 20) - rng.binomial(5, 0.4, 20)) / 5
    exact = sign_flip_test(d, exact_max_items=25).pvalue
    r1, p2 = sign_flip_test(d), sign_flip_test(d).pvalue
    p1 = r1.pvalue
    assert r1.method == "sign_flip_monte_carlo" and p1 == p2
    se = np.sqrt(exact * (1 - exact) / 20_000)
    assert abs(p1 - exact) < 4 * se + 1e-4


def test_item_differences():
    np.testing.assert_allclose(item_differences([2, 0, 4], [2, 0, 1], [1, 0, 3]), [0.5, -0.5])


def test_point_rule():
    assert drop_2pp_point(-2.0) and not drop_2pp_point(-1.99)


def _null_cell(rng, n_items, seeds=(4, 5), effect=0.3):
    """Per-item (n_graded, c, c_star) under no change with item-varying effects: item i has base accuracy
    pᵢ ~ U(0.35, 0.65) and an effect eᵢ ~ U(−0.3, 0.3) moving the relaxed arm to pᵢ + eᵢ and the baseline to
    pᵢ − eᵢ (the arms are exchangeable within an item: the null holds), with 4 or 5 seeds per item."""
    p = rng.uniform(0.35, 0.65, n_items)
    e = rng.uniform(-effect, effect, n_items)
    k = rng.integers(seeds[0], seeds[1] + 1, n_items)
    rel = [rng.random(ki) < pi + ei for ki, pi, ei in zip(k, p, e)]
    base = [rng.random(ki) < pi - ei for ki, pi, ei in zip(k, p, e)]
    w2r = sum(int((r & ~b).sum()) for r, b in zip(rel, base))
    r2w = sum(int((~r & b).sum()) for r, b in zip(rel, base))
    return k.astype(float), np.array([r.sum() for r in rel], float), np.array([b.sum() for b in base], float), w2r, r2w


@pytest.mark.parametrize("n_items", [12, 30])
def test_item_level_test_keeps_type_one_error(n_items):
    """Planted null with item-varying effects and 4-5 seeds per item: runs-McNemar over-rejects, the item test
    (its mid-p, the default) does not. 800 sims: the standard error of 5 % is 0.77 points."""
    rng = np.random.default_rng(n_items)
    mc = sf = 0
    for _ in range(800):
        k, c, cs, w2r, r2w = _null_cell(rng, n_items)
        mc += mcnemar_midp(w2r, r2w) < 0.05
        sf += sign_flip_test(item_differences(k, c, cs), n_resamples=2000, mid_p=True).pvalue < 0.05
    assert mc / 800 > 0.08
    assert 0.03 <= sf / 800 <= 0.07


def _records(n_items, flips, *, dataset="d", method="cactus", graded=None):
    """One run per item, strict all right; ``flips`` items wrong on the relaxed arm (right→wrong)."""
    recs = []
    for i in range(n_items):
        for m in ("strict", method):
            c = not (m == method and i < flips)
            if graded is not None and i >= graded:
                c = None
            recs.append(dict(target="T", draft="D", dataset=dataset, method=m, params="strict" if m == "strict" else "alpha0.3",
                             alpha=None if m == "strict" else 0.3, item_id=f"i{i}", seed=0, status="ok", output_tokens=100,
                             max_new_tokens=1000, finish_reason="stop", draft_rounds=25, accepted_tokens=75,
                             draft_tokens=100, wall_time_s=1.0, correct=c))
    return recs


def _load(tmp_path, recs):
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return ll.load(f)


def test_cell_accuracy_change_gets_tango_interval_not_zero_width(tmp_path):
    """12 items, none changed: the percentile interval was [0, 0]; the default is Tango's ±z²/(n + z²)."""
    cell = ll.cells(_load(tmp_path, _records(12, 0)), n_resamples=200).get(method="cactus")
    est = cell["accuracy_delta_pp"]
    assert est.method == "tango_score"
    lo, hi = tango_interval(0, 0, 12)
    assert (est.low, est.high) == (pytest.approx(100 * lo), pytest.approx(100 * hi)) and est.high > 20
    pct = ll.cells(_load(tmp_path, _records(12, 0)), n_resamples=200, ci="percentile").get(method="cactus")
    assert pct["accuracy_delta_pp"].method == "percentile" and tuple(pct["accuracy_delta_pp"].confidence_interval) == (0.0, 0.0)


def test_cell_loss_flag_is_the_one_sided_test(tmp_path):
    """3 of 30 items lost (−10 points): the point rule fires, the loss test (p ≈ 0.2) does not; 9 of 30 it does."""
    for flips, flagged in ((3, False), (9, True)):
        cell = ll.cells(_load(tmp_path, _records(30, flips)), n_resamples=200).get(method="cactus")
        test = noninferiority_test(0, flips, 30)
        assert cell.drop_2pp_p == pytest.approx(test.pvalue) and cell.drop_2pp is flagged is (test.pvalue < 0.025)
        assert cell.drop_2pp_point is True
        assert 20 < cell.accuracy_mdd_pp < 60
        row = cell.to_row()
        assert (row["drop_2pp"], row["drop_2pp_p"], row["accuracy_mdd_pp"]) == (cell.drop_2pp, cell.drop_2pp_p,
                                                                                cell.accuracy_mdd_pp)


def _cell(n_items, p, *, graded_items=None, test="mcnemar_midp"):
    graded_items = n_items if graded_items is None else graded_items
    return Cell("T", "D", "d", "m", f"n{n_items}", None, n_items, n_items, graded_items, graded_items, n_items, None,
                {"accuracy_delta_pp": results.Estimate(-5.0)},
                accuracy=results.AccuracyChange(test=results.TestResult(-1.0, p, test)))


def test_family_leaves_out_probes_and_partly_graded_cells(tmp_path):
    """A 3-item probe and a cell graded on 5 of 30 items are not in the family; Holm counts the other cells only."""
    recs = (_records(30, 9, dataset="full") + _records(30, 2, dataset="partial", graded=5)
            + _records(3, 3, dataset="probe") + _records(12, 1, dataset="twelve"))
    df = ll.cells(_load(tmp_path, recs), n_resamples=200).to_frame().set_index("dataset")
    assert df["in_accuracy_family"].to_dict() == {"full": True, "partial": False, "probe": False, "twelve": True}
    assert df.loc[["partial", "probe"], "accuracy_p_holm"].isna().all()
    p = df.loc[["full", "twelve"], "accuracy_p"].to_numpy(float)
    assert np.allclose(df.loc[["full", "twelve"], "accuracy_p_holm"].to_numpy(float), holm(p))
    assert df.loc["full", "accuracy_p"] == pytest.approx(mcnemar_midp(0, 9))
    assert df.loc["full", "accuracy_p_exact"] == pytest.approx(mcnemar_exact(0, 9))


def test_family_can_reject_says_when_no_cell_could():
    # 180 cells of 12 items: the smallest mid-p is 0.5^12; Holm's first step 180 x 2.4e-4 = 0.044 < 0.05.
    cells = [_cell(12, 0.5) for _ in range(180)]
    fam = accuracy_family(cells)
    assert fam.n_cells == 180 and fam.smallest_adjusted_p == pytest.approx(180 * 0.5**12) and fam.can_reject
    # with the exact test it could not (180 x 2 x 0.5^12 = 0.088): the case
    assert not family_can_reject([_cell(12, 0.5, test="mcnemar_exact") for _ in range(180)])
    # 3-item probes do not count, and could never have rejected
    probes = [_cell(3, 0.25) for _ in range(40)]
    assert accuracy_family(cells + probes).n_cells == 180
    assert not family_can_reject(probes) and accuracy_family(probes).n_cells == 0
    # 300 cells of 12 items: no cell can reach it
    assert not family_can_reject([_cell(12, 0.5) for _ in range(300)])
    assert not family_can_reject([replace(c, n_graded_items=4) for c in cells])  # partly graded: out


def test_compare_and_cells_test_items_not_runs_with_several_seeds(tmp_path):
    from lengthlens.stats.signflip import paired_accuracy_test

    rng = np.random.default_rng(12)
    recs, diffs = [], {}
    for i in range(10):
        k = int(rng.integers(4, 6))
        for method in ("strict", "cactus"):
            for s in range(k):
                c = bool(rng.random() < 0.55)
                recs.append(dict(target="T", draft="D", dataset="d", method=method,
                                 params="strict" if method == "strict" else "alpha0.3", alpha=None if method == "strict" else 0.3,
                                 item_id=f"i{i}", seed=s, status="ok", output_tokens=100, max_new_tokens=1000, finish_reason="stop",
                                 draft_rounds=25, accepted_tokens=75, draft_tokens=100, wall_time_s=1.0, correct=c))
                diffs.setdefault(i, {}).setdefault(s, [0, 0])[method == "strict"] = int(c)
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    runs = ll.load(f)
    d = [np.mean([v[0] - v[1] for v in per_seed.values()]) for per_seed in diffs.values()]
    expect = sign_flip_test(d, mid_p=True)
    assert expect.method == "sign_flip_midp_exact"
    cell = ll.cells(runs, n_resamples=100).get(method="cactus")
    assert (cell.accuracy_p, cell.accuracy_test.method) == (pytest.approx(expect.pvalue, rel=1e-12), "sign_flip_midp_exact")
    assert cell["accuracy_delta_pp"].method in ("item_t", "tango_items")
    cmp = ll.compare(runs, {"method": "cactus"}, {"method": "strict"}, n_resamples=100)
    assert (cmp.accuracy_test.pvalue, cmp.accuracy_test.method) == (pytest.approx(expect.pvalue, rel=1e-12),
                                                                    "sign_flip_midp_exact")
    # one pair per item: McNemar; the statistic is wrong->right minus right->wrong
    test = paired_accuracy_test([1, 1, 1, 0], [1, 0, 1, 0], [0, 1, 0, 0])
    assert (test.pvalue, test.method, test.statistic) == (pytest.approx(mcnemar_midp(2, 1)), "mcnemar_midp", 1.0)
    test = paired_accuracy_test([1, 1, 1, 0], [1, 0, 1, 0], [0, 1, 0, 0], mid_p=False)
    assert (test.pvalue, test.method) == (pytest.approx(mcnemar_exact(2, 1)), "mcnemar_exact")


def test_headline_says_when_no_cell_of_the_family_could_reach_significance():
    import pandas as pd

    from lengthlens.analyses.cells import AccuracyFamily
    from lengthlens.report import wording

    a = pd.Series({"n_graded": 25, "accuracy_delta_pp_mean": -12.0, "accuracy_delta_pp_mean_lo": -20.0,
                   "accuracy_delta_pp_mean_hi": -4.0, "n_drop_2pp": 1, "n_drop_2pp_point": 14, "n_drop_holm": 0,
                   "accuracy_mdd_pp_median": 61.0})
    none = wording._accuracy_clause(a, AccuracyFamily(180, 180 * 2 * 0.5**12, 0))
    assert "none of the 180 cells of the accuracy family could reach significance" in none
    assert "0 significant" not in none
    assert "detects a true drop of 61 points with 80 % power" in none
    assert "1 of 25 graded cells lost more than 2 points by a one-sided test at 2.5%" in none
    some = wording._accuracy_clause(a, AccuracyFamily(66, 66 * 0.5**12, 0))
    assert "0 significant after a Holm correction over 66 cells" in some
    assert "accuracy changed by −12.0 points on average [−20.0, −4.0]" in some  # minus signs, not hyphens
    beyond = wording._accuracy_clause(a.copy().replace(61.0, 104.0), AccuracyFamily(66, 66 * 0.5**12, 0))
    assert "that test detects no drop with 80 % power" in beyond and "104" not in beyond
