"""The decision view's rules on cells built for them, per-pair counts against plain pandas, the arms appendix with
excluded runs, accuracy under both grading policies, the drill-down and the time model against plain loops."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import polars as pl
import pytest

import lengthlens as ll
from lengthlens.analyses.drilldown import item_drivers
from lengthlens.analyses.grading_policies import GRADING_DISAGREEMENT_SHARE, PolicyComparison
from lengthlens.analyses.tables import arms, arms_excluded, table3_by_pair, table3_cells
from lengthlens.analyses.time_model import time_model
from lengthlens.analyses.verdicts import (CANT_TELL, FASTER, NO_CHANGE, NOT_COMPUTED, PARTLY_GRADED, SLOWER, UNGRADED,
                                          WORSE, accuracy_verdict, speed_verdict, verdicts, with_verdicts)

NAN = float("nan")


@pytest.mark.parametrize("lo,hi,verdict", [
    (0.80, 0.99, FASTER),
    (0.80, 1.00, CANT_TELL),          # touching 1 holds 1
    (1.00, 1.30, CANT_TELL),
    (1.0000001, 2.0, SLOWER),
    (1.2, math.inf, SLOWER),          # an unbounded upper limit above a lower one past 1
    (0.0, 0.5, FASTER),
    (NAN, 0.9, NOT_COMPUTED),
    (0.9, NAN, NOT_COMPUTED),
    (None, None, NOT_COMPUTED),
])
def test_speed_verdict_boundaries(lo, hi, verdict):
    assert speed_verdict(lo, hi) == verdict


@pytest.mark.parametrize("flag,n_graded,partial,verdict", [
    (True, 30, False, WORSE), (False, 30, False, NO_CHANGE), (np.bool_(True), 12, None, WORSE),
    (None, 0, False, UNGRADED), (None, None, None, UNGRADED), (NAN, 0, NAN, UNGRADED),
    (None, 5, True, PARTLY_GRADED), (pd.NA, 5, False, PARTLY_GRADED),
])
def test_accuracy_verdict(flag, n_graded, partial, verdict):
    assert accuracy_verdict(flag, n_graded, partial) == verdict


def _cells_frame(seed: int = 0, n: int = 60) -> pd.DataFrame:
    """Cells of two pairs, three rules, four alphas, some small and some ungraded, intervals on either side of 1."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        pair = ("A", "a") if i % 2 else ("B", "b")
        r = rng.uniform(0.6, 1.5)
        w = rng.uniform(0.02, 0.4)
        t = rng.uniform(0.6, 1.5)
        graded = rng.random() > 0.2
        rows.append({"target": pair[0], "draft": pair[1], "dataset": f"d{i % 3}", "method": ["x", "y", "z"][i % 3],
                     "params": f"alpha{i % 4}", "alpha": float(i % 4), "n_items": int(rng.choice([3, 12, 30])),
                     "rounds_ratio_lo": r - w, "rounds_ratio_hi": r + w, "time_ratio_lo": t - w,
                     "time_ratio_hi": [t + w, NAN][int(rng.random() < 0.1)],
                     "drop_2pp": bool(rng.random() < 0.3) if graded else None, "n_graded": 40 if graded else 0,
                     "graded_partial": False, "accuracy_mdd_pp": rng.uniform(3, 12) if graded else NAN})
    df = pd.DataFrame(rows)
    df["small_n"] = df["n_items"] < 10
    return df


def test_rule_counts_equal_a_plain_pandas_count():
    df = with_verdicts(_cells_frame())
    v = verdicts(df).to_frame()
    kept = df[~df["small_n"]]

    def expect(d: pd.DataFrame, col: str, value: str) -> int:
        return int((d[col] == value).sum())

    for _, row in v.iterrows():
        d = kept[kept["method"] == row["method"]]
        if row["target"] != "all":
            d = d[(d["target"] == row["target"]) & (d["draft"] == row["draft"])]
        assert row["n_cells"] == len(d)
        # each verdict by its own rule, from the intervals
        assert row["n_rounds_faster"] == int((d["rounds_ratio_hi"] < 1).sum())
        assert row["n_rounds_slower"] == int((d["rounds_ratio_lo"] > 1).sum())
        assert row["n_time_cant_tell"] == int(((d["time_ratio_lo"] <= 1) & (d["time_ratio_hi"] >= 1)).sum())
        assert row["n_accuracy_worse"] == int((d["drop_2pp"] == True).sum())  # noqa: E712
        assert row["n_accuracy_no_change"] == expect(d, "verdict_accuracy", NO_CHANGE)
        assert row["n_graded"] == int((d["n_graded"] > 0).sum())
        no_change = d.loc[d["drop_2pp"] == False, "accuracy_mdd_pp"]  # noqa: E712
        assert (math.isnan(row["accuracy_mdd_pp_median"]) if no_change.empty
                else row["accuracy_mdd_pp_median"] == pytest.approx(float(no_change.median()), rel=1e-15))
        all_of_rule = df[df["method"] == row["method"]]
        if row["target"] != "all":
            all_of_rule = all_of_rule[all_of_rule["target"] == row["target"]]
        assert row["n_small_excluded"] == int(all_of_rule["small_n"].sum())


def test_verdict_sentence_quotes_the_counts():
    from lengthlens.report.wording import verdict_sentence

    v = verdicts(_cells_frame()).to_frame()
    r = v[(v["target"] == "all") & (v["method"] == "x")].iloc[0]
    s = verdict_sentence(r)
    assert s.startswith(f"x, {int(r['n_cells'])} cells over every α")
    assert (f"verifier rounds (R/R*) faster in {r['n_rounds_faster']}, slower in {r['n_rounds_slower']}, "
            f"can't tell in {r['n_rounds_cant_tell']}") in s
    assert f"accuracy worse in {r['n_accuracy_worse']} of {r['n_graded']} graded cells" in s
    assert f"median minimum detectable drop {r['accuracy_mdd_pp_median']:.1f} points" in s


# --- on loaded runs -------------------------------------------------------------------------

def _rec(target, dataset, method, params, alpha, item, *, correct=True, L=400, budget=4000, seed=0, T=None):
    R = max(1, L // 4)
    return dict(target=target, draft="D", dataset=dataset, method=method, params=params, alpha=alpha,
                item_id=f"case_{item:03d}", seed=seed, status="ok", output_tokens=L, max_new_tokens=budget,
                finish_reason="stop", draft_rounds=R, accepted_tokens=L - R, draft_tokens=4 * R,
                wall_time_s=L / 50 if T is None else T, correct=correct)


def _load(tmp_path, recs, **kw):
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return ll.load(f, cache=False, **kw)


@pytest.fixture()
def two_pairs(tmp_path):
    rng = np.random.default_rng(11)
    recs = []
    for target in ("T1", "T2"):
        for ds in ("a", "b"):
            for i in range(14):
                L = int(rng.integers(200, 500))
                recs.append(_rec(target, ds, "strict", "strict", None, i, correct=bool(rng.random() < 0.7), L=L))
                for m, f in (("cactus", 1.4), ("r_fuzzy", 0.9)):
                    for a in (0.1, 0.3):
                        recs.append(_rec(target, ds, m, f"alpha{a}", a, i, correct=bool(rng.random() < 0.6),
                                         L=int(L * f * rng.uniform(0.8, 1.3))))
    return _load(tmp_path, recs)


def test_table3_per_pair_equals_plain_pandas(two_pairs):
    table = ll.cells(two_pairs, n_resamples=300, seed=1)
    chosen = table3_cells(table.to_frame())
    tp = table3_by_pair(table)
    assert set(zip(tp["target"], tp["method"])) == {(t, m) for t in ("T1", "T2") for m in ("all", "cactus", "r_fuzzy")}
    for (tg, m), row in tp.set_index(["target", "method"]).iterrows():
        d = chosen[chosen["target"] == tg]
        d = d if m == "all" else d[d["method"] == m]
        assert row["n_cells"] == len(d)
        assert row["gain_mean"] == pytest.approx(d["gain"].mean(), rel=1e-12)
        assert row["rounds_ratio_median"] == pytest.approx(d["rounds_ratio"].median(), rel=1e-12)
        assert row["n_lambda_lo_gt_1"] == int((d["lambda_lo"] > 1).sum())
        assert row["n_drop_2pp"] == int(d["drop_2pp"].astype(bool).sum())
    # the pooled Table 3 is not a pair's
    pooled = ll.table3(table).set_index("method")
    assert pooled.loc["all", "n_cells"] == tp.loc[tp["method"] == "all", "n_cells"].sum()


def test_attribution_counts_per_pair(two_pairs, tmp_path):
    from lengthlens.analyses.attribution import summarize

    rng = np.random.default_rng(2)
    cells_df = pd.DataFrame({"target": ["T1", "T1", "T2", "T2"], "draft": "D", "dataset": "a", "method": ["x", "y", "x", "y"],
                             "params": "p", "extra_chars": rng.integers(-50, 400, 4), "extra_chars_thinking": 100,
                             "thinking_share": [0.95, 0.5, np.nan, 0.93], "thinking_share_lo": [0.91, 0.2, np.nan, 0.9]})
    s = summarize(cells_df)
    for tg in ("T1", "T2"):
        d = cells_df[cells_df["target"] == tg]
        row = s[(s["target"] == tg) & (s["method"] == "all")].iloc[0]
        longer = d[d["extra_chars"] > 0]
        assert row["n_cells_longer"] == len(longer)
        assert row["n_share_lo_ge_90"] == int((longer["thinking_share_lo"] >= 0.9).sum())
    assert s[(s["target"] == "all") & (s["method"] == "all")].iloc[0]["n_cells"] == 4


def test_arms_appendix_lists_excluded_runs_apart(tmp_path):
    """A strict arm with 5-token probes (another budget): arms.csv shows the runs the cells use; the probes are apart."""
    recs = []
    for i in range(12):
        recs.append(_rec("T", "a", "strict", "strict", None, i, correct=i % 4 != 0))
        recs.append(_rec("T", "a", "cactus", "alpha0.3", 0.3, i, correct=i % 3 != 0, L=500))
    for i in range(3):  # probes: 5-token budget, all wrong, other seeds
        recs.append(_rec("T", "a", "strict", "strict", None, i, correct=False, L=5, budget=5, seed=7))
    runs = _load(tmp_path, recs)
    a = arms(runs).set_index("method")
    assert a.loc["strict", "n_runs"] == 15 and a.loc["strict", "n_ok"] == 12
    assert a.loc["strict", "accuracy"] == pytest.approx(9 / 12)           # not (9 + 0) / 15
    assert a.loc["strict", "mean_completion_length"] == pytest.approx(400)
    ex = arms_excluded(runs)
    assert len(ex) == 1
    r = ex.iloc[0]
    assert (r["method"], r["n_runs"], r["n_items"], r["budget"], r["accuracy"]) == ("strict", 3, 3, 5, 0.0)
    assert "max_new_tokens" in r["reason"]
    analysis = ll.analyse(runs, n_resamples=200)
    assert "arms_excluded" in analysis.tables
    html = __import__("lengthlens.report", fromlist=["render_html"]).render_html(analysis, with_figures=False)
    assert "Runs left out of every cell (3)" in html


def _policy_recs(n_disagree: int, n: int = 20):
    """LongBench v2 runs cut at the budget with their thinking open and a bare letter: the study's policy reads it,
    the default one counts it wrong (tests/test_grading_policy.py)."""
    recs = []
    cut = "<think>Option C is ... wait, maybe. Let me reconsider the options again and again"
    fine = "<think>short</think>The answer is C."
    for i in range(n):
        for method, params, alpha in (("strict", "strict", None), ("cactus", "alpha0.3", 0.3)):
            r = _rec("T", "longbench_v2", method, params, alpha, i, L=300)
            r.pop("correct")
            bad = method == "cactus" and i < n_disagree
            r.update(text=cut if bad else fine, reference_answer="C", finish_reason="length" if bad else "stop",
                     output_tokens=4000 if bad else 300)
            recs.append(r)
    return recs


@pytest.mark.parametrize("n_disagree,warns", [(0, False), (6, True)])
def test_both_grading_policies_and_the_warning(tmp_path, n_disagree, warns):
    from lengthlens.report import wording

    runs = _load(tmp_path, _policy_recs(n_disagree))
    analysis = ll.analyse(runs, n_resamples=200)
    g = analysis.grading
    assert (g.policy, g.other, g.n_regraded, g.n_disagree) == ("default", "study", 40, n_disagree)
    a = analysis.tables["arms"].set_index("method")
    assert a.loc["cactus", "accuracy"] == pytest.approx((20 - n_disagree) / 20)
    assert a.loc["cactus", "accuracy_study"] == pytest.approx(1.0)
    assert a.loc["strict", "accuracy_study"] == a.loc["strict", "accuracy"] == 1.0
    assert int(a.loc["cactus", "n_policy_disagree"]) == n_disagree
    warning = wording.grading_warning(analysis)
    assert (warning is not None) == warns
    if warns:
        assert f"{n_disagree:,} of the 40 runs" in warning and "15%" in warning
    assert "default grading policy" in wording.headline(analysis)


def test_warning_threshold_is_the_constant():
    from lengthlens.report import wording

    class A:  # the warning reads only the comparison
        grading = PolicyComparison("default", "study", pl.DataFrame({"n_policy_disagree": [3]}), 100, 3)

    assert GRADING_DISAGREEMENT_SHARE == 0.03 and not A.grading.warns and wording.grading_warning(A) is None
    A.grading = PolicyComparison("default", "study", pl.DataFrame({"n_policy_disagree": [4]}), 100, 4)
    assert A.grading.warns and "4 of the 100 runs" in wording.grading_warning(A)


def test_drilldown_equals_a_plain_loop():
    rng = np.random.default_rng(5)
    rows = []
    for m in ("x", "y"):
        for i in range(9):
            for seed in range(2):
                rows.append({"target": "T", "draft": "D", "dataset": "a", "method": m, "params": "p", "serving": "", "item_id": f"i{i}",
                             "output_tokens": int(rng.integers(50, 900)), "output_tokens_star": int(rng.integers(50, 900)),
                             "correct": bool(rng.random() < 0.5), "correct_star": bool(rng.random() < 0.6)})
    u = pl.DataFrame(rows)
    got = item_drivers(u, top=2)
    df = u.to_pandas()
    for m, g in df.groupby("method"):
        L, Ls = g["output_tokens"].sum(), g["output_tokens_star"].sum()
        per = g.groupby("item_id").agg(L=("output_tokens", "sum"), Ls=("output_tokens_star", "sum"),
                                       c=("correct", "sum"), cs=("correct_star", "sum"))
        without = (L - per["L"]) / (Ls - per["Ls"])
        shift = (L / Ls - without).abs().sort_values(ascending=False, kind="mergesort")
        mine = got[got["method"] == m].set_index("item_id")
        assert set(shift.index[:2]) <= set(mine.index)
        for item in mine.index:
            assert mine.loc[item, "lambda_without"] == pytest.approx(without[item], rel=1e-12)
            assert mine.loc[item, "correct_change"] == per.loc[item, "c"] - per.loc[item, "cs"]


def test_time_model_fits_equal_numpy_polyfit():
    rng = np.random.default_rng(9)
    R, Rs = rng.integers(20, 200, 30), rng.integers(20, 200, 30)
    T, Ts = 0.4 + 0.021 * R + rng.normal(0, 0.05, 30), 0.3 + 0.018 * Rs + rng.normal(0, 0.05, 30)
    u = pl.DataFrame({"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p", "serving": "", "draft_rounds": R,
                      "wall_time_s": T, "draft_rounds_star": Rs, "wall_time_s_star": Ts})
    r = time_model(u).iloc[0]
    b, a = np.polyfit(R, T, 1)
    bs, as_ = np.polyfit(Rs, Ts, 1)
    assert (r["seconds_per_round"], r["seconds_fixed"]) == pytest.approx((b, a), rel=1e-9)
    assert (r["seconds_per_round_star"], r["seconds_fixed_star"]) == pytest.approx((bs, as_), rel=1e-9)
    assert r["time_ratio"] == pytest.approx(T.sum() / Ts.sum(), rel=1e-12)
    assert r["time_ratio_predicted"] == pytest.approx((30 * as_ + bs * R.sum()) / (30 * as_ + bs * Rs.sum()), rel=1e-9)


def test_notebook_reprs_name_target_and_draft(two_pairs):
    table = ll.cells(two_pairs, n_resamples=200, seed=1)
    c = table.get(target="T2", dataset="a", method="cactus", params="alpha0.3")
    f = c.to_frame()
    assert list(f.columns[:5]) == ["target", "draft", "dataset", "method", "params"] and set(f["target"]) == {"T2"}
    assert "target T2 ← draft D" in c._repr_html_()
    html = table._repr_html_()
    # The draft is the same on every row: said once above the table, not repeated on each row.
    assert "<th>target</th>" in html and "<th>draft</th>" not in html and " · draft D</caption>" in html
    assert "<th>verdict_rounds</th>" in html
    v = ll.verdicts(table.to_frame())
    assert "Verdicts:" in v._repr_html_() and len(v.cells_frame()) == len(table)
