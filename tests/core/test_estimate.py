"""Cell estimates against independent oracles: a plain per-item loop and scipy.stats.bootstrap."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar

import lengthlens as ll
from lengthlens.stats.signflip import sign_flip_test
from lengthlens.stats.resample import counts_for_group, item_counts


def _records(rng: np.random.Generator, n_items: int, arms: dict[str, float], *, seeds=(0,), budget=4000,
             graded=True, dataset="ds", target="T", draft="D"):
    """Flat records for one group: strict plus relaxed arms whose lengths are scaled by the given lambda."""
    recs = []
    mu = rng.normal(6.0, 0.5, size=n_items)
    for method, lam in {"strict": 1.0, **arms}.items():
        params = "strict" if method == "strict" else "alpha0.5"
        for i in range(n_items):
            for s in seeds:
                L = int(min(budget, max(2, round(lam * rng.lognormal(mu[i], 0.4)))))
                lb = rng.uniform(1.5, 3.5) if method == "strict" else rng.uniform(2.0, 4.5)
                R = max(1, int(round(L / (lb + 1))))
                recs.append(dict(target=target, draft=draft, dataset=dataset, method=method, params=params,
                                 alpha=None if method == "strict" else 0.5, item_id=f"case_{i:03d}", seed=s,
                                 status="ok", output_tokens=L, finish_reason="length" if L >= budget else "stop",
                                 max_new_tokens=budget, draft_rounds=R, accepted_tokens=L - R, draft_tokens=5 * R,
                                 wall_time_s=float(R * rng.uniform(0.02, 0.03)),
                                 correct=bool(rng.random() < (0.8 if method == "strict" else 0.7)) if graded else None))
    return recs


def _write_jsonl(path: Path, recs) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return path


@pytest.fixture()
def flat_runs(tmp_path):
    rng = np.random.default_rng(7)
    recs = _records(rng, 25, {"cactus": 1.4, "r_fuzzy": 1.1}, seeds=(0, 1))
    return ll.load(_write_jsonl(tmp_path / "runs.jsonl", recs)), recs


def test_point_estimates_equal_plain_loop(flat_runs):
    runs, recs = flat_runs
    table = ll.cells(runs, n_resamples=200)
    assert len(table) == 2
    base = {(r["item_id"], r["seed"]): r for r in recs if r["method"] == "strict"}
    for method in ("cactus", "r_fuzzy"):
        cell = table.get(method=method)
        L = Ls = R = Rs = T = Ts = lb = lbs = c = cs = cens = A = As = 0.0
        n = w2r = r2w = 0
        ratios: dict[str, list[float]] = {}
        diffs: dict[str, list[float]] = {}
        for r in recs:
            if r["method"] != method:
                continue
            b = base[(r["item_id"], r["seed"])]
            n += 1
            L += r["output_tokens"]; Ls += b["output_tokens"]
            R += r["draft_rounds"]; Rs += b["draft_rounds"]
            T += r["wall_time_s"]; Ts += b["wall_time_s"]
            lb += r["accepted_tokens"] / r["draft_rounds"]; lbs += b["accepted_tokens"] / b["draft_rounds"]
            A += r["accepted_tokens"]; As += b["accepted_tokens"]
            c += r["correct"]; cs += b["correct"]
            w2r += r["correct"] and not b["correct"]; r2w += b["correct"] and not r["correct"]
            cens += r["output_tokens"] >= r["max_new_tokens"]
            ratios.setdefault(r["item_id"], []).append(r["draft_rounds"] / b["draft_rounds"])
            diffs.setdefault(r["item_id"], []).append(float(r["correct"]) - float(b["correct"]))
        assert cell.n_runs == n == 50 and cell.n_items == 25
        assert cell["lambda"].point == pytest.approx(L / Ls, rel=1e-12)
        assert cell["rounds_ratio"].point == pytest.approx(R / Rs, rel=1e-12)
        assert cell["time_ratio"].point == pytest.approx(T / Ts, rel=1e-12)
        assert cell["l_bar"].point == pytest.approx(lb / n, rel=1e-12)
        assert cell["gain"].point == pytest.approx((lb / n + 1) / (lbs / n + 1), rel=1e-12)
        gain_pooled = (A / R + 1) / (As / Rs + 1)
        assert cell["gain_pooled"].point == pytest.approx(gain_pooled, rel=1e-12)
        assert cell["rounds_ratio_predicted"].point == pytest.approx((L / Ls) / gain_pooled, rel=1e-12)
        # The records have accepted + rounds = output exactly, so the identity R/R* = lambda / gain_pooled holds.
        assert cell["rounds_ratio_predicted"].point == pytest.approx(R / Rs, rel=1e-12)
        assert cell["time_per_round_ratio"].point == pytest.approx((T / Ts) / (R / Rs), rel=1e-12)
        assert cell["accuracy_delta_pp"].point == pytest.approx(100 * (c - cs) / n, rel=1e-12)
        assert cell["censored_frac"].point == pytest.approx(cens / n)
        # Two seeds per item: medians over per-item means, the accuracy test on per-item mean differences.
        assert cell.rounds_ratio_median_item == pytest.approx(float(np.median([np.mean(v) for v in ratios.values()])))
        assert cell.drop_2pp_point == (100 * (c - cs) / n <= -2)
        assert cell.drop_2pp == (cell.drop_2pp_p < 0.025)
        assert (cell.wrong_to_right, cell.right_to_wrong) == (w2r, r2w)
        d = [np.mean(v) for v in diffs.values()]
        expect = sign_flip_test(d, mid_p=True)
        assert cell.accuracy_test.method == expect.method
        assert cell.accuracy_p == pytest.approx(expect.pvalue, rel=1e-12)
        assert cell.accuracy_p_exact == pytest.approx(sign_flip_test(d).pvalue, rel=1e-12)


def test_single_seed_cells_use_mcnemar_mid_p_and_keep_the_exact_p(tmp_path):
    rng = np.random.default_rng(5)
    recs = _records(rng, 30, {"cactus": 1.2})
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", recs))
    cell = ll.cells(runs, n_resamples=200).get(method="cactus")
    w2r, r2w = cell.wrong_to_right, cell.right_to_wrong
    exact = mcnemar(np.array([[0, w2r], [r2w, 0]]), exact=True).pvalue
    assert cell.accuracy_test.method == "mcnemar_midp"
    assert cell.accuracy_p_exact == pytest.approx(exact, rel=1e-12)
    # mid-p: the exact p less the observed point probability, P(X = min(b, c)) for X ~ Bin(b + c, 1/2)
    k, m = min(w2r, r2w), w2r + r2w
    assert cell.accuracy_p == pytest.approx(min(1.0, exact - scipy.stats.binom.pmf(k, m, 0.5)) if w2r != r2w else 1.0,
                                            rel=1e-12)
    assert cell.to_row()["mcnemar_p"] == cell.accuracy_p_exact


def test_intervals_agree_with_scipy_bootstrap(tmp_path):
    """One seed per item: our item bootstrap is scipy's paired bootstrap of (L, L*) with a ratio of means."""
    rng = np.random.default_rng(11)
    recs = _records(rng, 40, {"cactus": 1.3})
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", recs))
    cell = ll.cells(runs, n_resamples=20_000, seed=3, ci="percentile").get(method="cactus")
    base = {r["item_id"]: r for r in recs if r["method"] == "strict"}
    rel = sorted((r for r in recs if r["method"] == "cactus"), key=lambda r: r["item_id"])
    L = np.array([r["output_tokens"] for r in rel], float)
    Ls = np.array([base[r["item_id"]]["output_tokens"] for r in rel], float)
    R = np.array([r["draft_rounds"] for r in rel], float)
    Rs = np.array([base[r["item_id"]]["draft_rounds"] for r in rel], float)
    for name, (x, y) in {"lambda": (L, Ls), "rounds_ratio": (R, Rs)}.items():
        res = stats.bootstrap((x, y), lambda a, b, axis=-1: a.mean(axis=axis) / b.mean(axis=axis), paired=True,
                              vectorized=True, n_resamples=20_000, method="percentile", random_state=np.random.default_rng(5))
        ci = cell[name].confidence_interval
        width = res.confidence_interval.high - res.confidence_interval.low
        # Monte-Carlo error of a 2.5 % quantile from 20k resamples is well under 3 % of the width.
        assert abs(ci.low - res.confidence_interval.low) < 0.03 * width
        assert abs(ci.high - res.confidence_interval.high) < 0.03 * width


def test_bca_agrees_with_scipy(tmp_path):
    rng = np.random.default_rng(12)
    recs = _records(rng, 30, {"cactus": 1.3})
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", recs))
    cell = ll.cells(runs, n_resamples=20_000, seed=3, ci="bca").get(method="cactus")
    base = {r["item_id"]: r for r in recs if r["method"] == "strict"}
    rel = sorted((r for r in recs if r["method"] == "cactus"), key=lambda r: r["item_id"])
    L = np.array([r["output_tokens"] for r in rel], float)
    Ls = np.array([base[r["item_id"]]["output_tokens"] for r in rel], float)
    res = stats.bootstrap((L, Ls), lambda a, b, axis=-1: a.mean(axis=axis) / b.mean(axis=axis), paired=True,
                          vectorized=True, n_resamples=20_000, method="BCa", random_state=np.random.default_rng(5))
    ci = cell["lambda"].confidence_interval
    width = res.confidence_interval.high - res.confidence_interval.low
    assert abs(ci.low - res.confidence_interval.low) < 0.04 * width
    assert abs(ci.high - res.confidence_interval.high) < 0.04 * width


def test_same_seed_same_numbers_bit_for_bit(flat_runs):
    runs, _ = flat_runs
    a = ll.cells(runs, n_resamples=500, seed=9).to_frame()
    b = ll.cells(runs, n_resamples=500, seed=9).to_frame()
    c = ll.cells(runs, n_resamples=500, seed=10).to_frame()
    assert a.equals(b)
    assert not a["lambda_lo"].equals(c["lambda_lo"])


def test_draws_do_not_depend_on_other_groups(tmp_path):
    """Adding another dataset must not change a group's intervals (draws are keyed by the group's names)."""
    rng = np.random.default_rng(1)
    recs_a = _records(rng, 15, {"cactus": 1.2}, dataset="a")
    recs_b = _records(rng, 15, {"cactus": 1.2}, dataset="b")
    only_a = ll.cells(ll.load(_write_jsonl(tmp_path / "a.jsonl", recs_a)), n_resamples=300).to_frame()
    both = ll.cells(ll.load(_write_jsonl(tmp_path / "ab.jsonl", recs_b + recs_a)), n_resamples=300).to_frame()
    row = both[both.dataset == "a"].reset_index(drop=True)
    # The multiplicity-adjusted p-values depend on the family (every graded cell of the report) by design.
    family = ["mcnemar_p_holm", "mcnemar_q_bh", "accuracy_p_holm", "accuracy_q_bh"]
    assert row.drop(columns=family).equals(only_a.drop(columns=family))


def test_item_counts_are_multinomial():
    rng = np.random.default_rng(0)
    c = item_counts(7, 50_000, rng)
    assert c.shape == (50_000, 7) and (c.sum(axis=1) == 7).all()
    # Each count is Binomial(7, 1/7): mean 1, variance 6/7.
    assert c.mean() == pytest.approx(1.0, abs=0.01)
    assert c.var() == pytest.approx(6 / 7, abs=0.02)
    assert np.array_equal(counts_for_group(4, ("a", "b", "c"), 5, 10), counts_for_group(4, ("a", "b", "c"), 5, 10))


def test_joint_draws_across_arms(flat_runs):
    """Arms of one group share draws: the difference of two arms' lambdas is as stable as paired resampling implies."""
    runs, _ = flat_runs
    t = ll.cells(runs, n_resamples=1000)
    a, b = t.get(method="cactus"), t.get(method="r_fuzzy")
    assert a.n_items == b.n_items == 25
    assert math.isfinite(a["lambda"].confidence_interval.low)


def test_missing_item_in_arm_shrinks_cell_only(tmp_path):
    rng = np.random.default_rng(2)
    recs = _records(rng, 12, {"cactus": 1.2})
    recs = [r for r in recs if not (r["method"] == "cactus" and r["item_id"] == "case_003")]
    recs[-1]["status"] = "error"
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", recs))
    cell = ll.cells(runs, n_resamples=100).get(method="cactus")
    assert cell.n_items == 10
    assert runs.skipped.filter(runs.skipped["reason"].str.contains("status is 'error'")).height == 1
