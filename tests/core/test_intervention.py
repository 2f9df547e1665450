"""Table 4 and arm-against-arm comparisons on hand-made runs with hand-computed answers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar

import lengthlens as ll
from lengthlens.analyses.compare import compare
from lengthlens.analyses.intervention import base_arm_of, force_commit_pairs, table4
from lengthlens.stats.mcnemar import mcnemar_exact


def _rec(method, params, item, L, correct, *, text, budget=100, fired=None, alpha=0.3):
    r = dict(target="T", draft="D", dataset="aime", method=method, params=params, alpha=None if method == "strict" else alpha,
             item_id=f"case_{item:03d}", seed=0, status="ok", output_tokens=L, finish_reason="length" if L >= budget else "stop",
             max_new_tokens=budget, draft_rounds=max(1, L // 4), accepted_tokens=L - max(1, L // 4), draft_tokens=4 * max(1, L // 4),
             wall_time_s=L / 100, correct=correct, text=text)
    if fired is not None:
        r["force_commit_fired"] = fired
    return r


OPEN = "<think>" + "x" * 300                       # thinking never closed
CLOSED_LATE = "<think>" + "x" * 270 + "</think>" + "a" * 30   # 90 % thinking
CLOSED_EARLY = "<think>" + "x" * 30 + "</think>" + "a" * 270  # 10 % thinking


@pytest.fixture()
def runs(tmp_path):
    # Base arm cactus/alpha0.3 and its intervention at threshold 60 tokens (budget 100).
    # item: base length, base text, base correct | intervention length, correct
    spec = [
        (0, 100, OPEN, False, 70, True),          # fired (open at budget): wrong -> right
        (1, 100, OPEN, False, 100, False),        # fired, still capped, wrong -> wrong
        (2, 80, CLOSED_LATE, True, 65, False),    # fired (0.9 * 80 = 72 >= 60): right -> wrong
        (3, 80, CLOSED_EARLY, True, 80, True),    # not fired (0.1 * 80 = 8 < 60)
        (4, 40, OPEN, False, 40, False),          # not fired (never reached the threshold)
        (5, 100, OPEN, False, 75, True),          # fired: wrong -> right
    ]
    recs = []
    for item, bl, bt, bc, il, ic in spec:
        recs.append(_rec("strict", "strict", item, 50, True, text="<think>x</think>a"))
        recs.append(_rec("cactus", "alpha0.3", item, bl, bc, text=bt))
        recs.append(_rec("cactus_force_commit", "alpha0.3_t60", item, il, ic, text="<think>x</think>a"))
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs))
    return ll.load(f)


def test_base_arm_of():
    assert base_arm_of("cactus_force_commit", "alpha0.3_t28000") == ("cactus", "alpha0.3", 28000)
    assert base_arm_of("cactus_force_commit", "alpha0.3_k8_t500") == ("cactus", "alpha0.3_k8", 500)
    assert base_arm_of("cactus", "alpha0.3") is None


def test_fired_inference(runs):
    p = force_commit_pairs(runs).sort("item_id")
    assert p["fired"].to_list() == [True, True, True, False, False, True]
    assert not p["fired_logged"].any()


def test_table4_hand_computed(runs):
    t4 = table4(runs)
    arm = t4.iloc[0]
    # Fired: items 0, 1, 2, 5. Before: 0 F, 1 F, 2 T, 5 F -> 1 correct; after: T, F, F, T -> 2 correct.
    assert (arm.fired, arm.correct_before, arm.correct_after) == (4, 1, 2)
    assert (arm.wrong_to_right, arm.right_to_wrong, arm.still_capped) == (2, 1, 1)
    assert arm.mcnemar_p == pytest.approx(1.0)  # 2 vs 1 discordant: 2 * P(Bin(3, .5) <= 1) = 1
    # mid-p: 2 [P(X <= 1) - P(X = 1) / 2] = 2 (4/8 - 3/16) = 5/8
    assert (arm.accuracy_test, arm.accuracy_p) == ("mcnemar_midp", pytest.approx(5 / 8))
    total = t4.iloc[-1]
    assert total.method == "all" and total.fired == 4


def test_logged_flag_wins(tmp_path):
    recs = [_rec("strict", "strict", 0, 50, True, text="a"), _rec("cactus", "alpha0.3", 0, 100, False, text=OPEN),
            _rec("cactus_force_commit", "alpha0.3_t60", 0, 70, True, text="a", fired=False)]
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs))
    p = force_commit_pairs(ll.load(f))
    assert p["fired"].to_list() == [False] and p["fired_logged"].to_list() == [True]


@pytest.mark.parametrize("b,c", [(0, 0), (1, 0), (5, 1), (12, 30), (100, 80)])
def test_mcnemar_matches_statsmodels(b, c):
    expected = mcnemar(np.array([[10, b], [c, 7]]), exact=True).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_compare_equals_plain_loop(runs):
    cmp = compare(runs, {"method": "cactus_force_commit"}, {"method": "cactus"}, n_resamples=500)
    base = {r["item_id"]: r for r in runs.table.filter(runs.table["method"] == "cactus").iter_rows(named=True)}
    inter = list(runs.table.filter(runs.table["method"] == "cactus_force_commit").iter_rows(named=True))
    L = sum(r["output_tokens"] for r in inter)
    Lb = sum(base[r["item_id"]]["output_tokens"] for r in inter)
    assert cmp["lambda"].point == pytest.approx(L / Lb)
    assert cmp.n_runs == 6 and (cmp.wrong_to_right, cmp.right_to_wrong) == (2, 1)
    acc = sum(r["correct"] for r in inter) - sum(base[r["item_id"]]["correct"] for r in inter)
    assert cmp["accuracy_delta_pp"].point == pytest.approx(100 * acc / 6)


def test_fired_inference_agrees_with_the_logged_flag_on_the_example(tmp_path):
    """On the synthetic example (which logs force_commit_fired), inferring from the base run gives the same answer."""
    import polars as pl

    from lengthlens import synth
    from lengthlens.data.loading import RunSet

    synth.write_raw(synth.example(), tmp_path / "ex")
    rs = ll.load(tmp_path / "ex", cache=False)
    logged = force_commit_pairs(rs).sort("target", "dataset", "method", "item_id")
    blind = RunSet(table=rs.table.with_columns(pl.lit(None, dtype=pl.Boolean).alias("force_commit_fired")),
                   skipped=rs.skipped, sources=rs.sources, n_found=rs.n_found)
    inferred = force_commit_pairs(blind).sort("target", "dataset", "method", "item_id")
    assert logged["fired_logged"].all() and not inferred["fired_logged"].any()
    assert logged["fired"].sum() > 0
    assert inferred["fired"].to_list() == logged["fired"].to_list()


def test_table4_tests_items_not_runs_with_several_seeds(tmp_path):
    """Three seeds per item, all fired (logged): the test is the sign-flip test on per-item mean differences."""
    # item: (base correct per seed, intervention correct per seed)
    spec = {0: ((False, False, True), (True, True, True)), 1: ((False, False, False), (True, False, True)),
            2: ((True, True, False), (True, False, False)), 3: ((False, True, False), (True, True, True))}
    recs = []
    for item, (before, after) in spec.items():
        for s in range(3):
            for r in (_rec("strict", "strict", item, 50, True, text="<think>x</think>a"),
                      _rec("cactus", "alpha0.3", item, 100, before[s], text=OPEN),
                      _rec("cactus_force_commit", "alpha0.3_t60", item, 70, after[s], text="<think>x</think>a", fired=True)):
                r["seed"] = s
                recs.append(r)
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs))
    arm = table4(ll.load(f)).iloc[0]
    # per-item mean differences after - before: 2/3, 2/3, -1/3, 2/3; |sum| = 5/3. Of the 16 sign patterns only
    # all-equal signs of the three 2/3 with either sign of -1/3 reach |sum| >= 5/3: (+,+,+,-) 5/3 and (-,-,-,+) 5/3,
    # (+,+,+,+) 7/3 and (-,-,-,-) 7/3 -> p = 4/16.
    assert (arm.accuracy_test, arm.mcnemar_p) == ("sign_flip_midp_exact", pytest.approx(0.25))
    # mid-p: the patterns tying |sum| = 5/3 (2 of 16) count half: 4/16 - 1/16
    assert arm.accuracy_p == pytest.approx(3 / 16)
    assert arm.mcnemar_p != pytest.approx(mcnemar_exact(int(arm.wrong_to_right), int(arm.right_to_wrong)))
