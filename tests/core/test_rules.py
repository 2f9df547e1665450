"""Rule-level pooled estimates and verdicts (lengthlens.rules) on data built for them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import lengthlens as ll
from lengthlens.analyses.rules import (CANT_TELL, FASTER, NONINFERIOR, SLOWER, UNGRADED, WORSE, rule_columns, rules)
from lengthlens.stats.meta import random_effects
from lengthlens.stats.multiplicity import holm

DATASETS = ("d1", "d2", "d3", "d4", "d5", "d6")


def _rec(target, dataset, method, params, alpha, item, *, correct, L, R, T, seed=0, budget=100_000, **extra):
    return dict(target=target, draft="D", dataset=dataset, method=method, params=params, alpha=alpha,
                item_id=f"case_{item:03d}", seed=seed, status="ok", output_tokens=int(L), max_new_tokens=budget,
                finish_reason="stop", draft_rounds=int(R), accepted_tokens=int(L - R), draft_tokens=int(6 * R),
                wall_time_s=float(T), correct=correct, **extra)


def _write(tmp_path, recs, name="r.jsonl"):
    f = tmp_path / name
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return ll.load(f, cache=False)


def _study(rng, *, n_items=100, targets=("T",), rules_=None, datasets=DATASETS, graded=True, extra=None):
    """Strict and relaxed arms per dataset: rule -> (rounds factor, accuracy: 'same' | 'worse' | 'noisy')."""
    rules_ = rules_ or {"fast": (0.7, "same"), "slow": (1.4, "noisy"), "lossy": (1.0, "worse")}
    recs = []
    for target in targets:
        for ds in datasets:
            for i in range(n_items):
                L = int(rng.integers(300, 900))
                R = L // 3
                base_ok = bool(rng.random() < 0.7)
                recs.append(_rec(target, ds, "strict", "strict", None, i, correct=base_ok if graded else None, L=L, R=R,
                                 T=R * 0.02, **(extra or {})))
                for k, (rule, (factor, acc)) in enumerate(rules_.items()):
                    r = max(1, int(R * factor * rng.uniform(0.9, 1.1)))
                    ok = {"same": base_ok, "worse": base_ok and rng.random() < 0.4,
                          "noisy": bool(rng.random() < 0.7)}[acc]
                    recs.append(_rec(target, ds, rule, "alpha0.3", 0.3, i, correct=ok if graded else None,
                                     L=int(L * rng.uniform(0.95, 1.05)), R=r, T=r * 0.02 * rng.uniform(0.98, 1.02),
                                     **(extra or {})))
    return recs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    rng = np.random.default_rng(5)
    runs = _write(tmp_path_factory.mktemp("rules"), _study(rng))
    cells = ll.cells(runs, n_resamples=200, seed=3)
    return cells, rules(cells)


def test_verdicts_on_data_built_for_them(built):
    _, table = built
    fast, slow, lossy = table.get("fast"), table.get("slow"), table.get("lossy")
    assert (fast.verdict_rounds, fast.verdict_time) == (FASTER, FASTER)
    assert (slow.verdict_rounds, slow.verdict_time) == (SLOWER, SLOWER)
    assert lossy.verdict_rounds == CANT_TELL  # rounds unchanged: the interval holds 1
    # the same verdicts on every item: non-inferior at 2 points with 600 pairs; 60 % of the right answers lost: worse
    assert fast.verdict_accuracy == NONINFERIOR
    assert lossy.verdict_accuracy == WORSE
    assert fast.estimate("rounds_ratio").high < 1 < slow.estimate("rounds_ratio").low
    assert lossy.estimate("accuracy_delta_pp").high < 0
    assert fast.estimate("accuracy_delta_pp").point == 0 and fast.estimate("accuracy_delta_pp").low > -2
    assert (fast.n_cells, fast.n_items, fast.n_cells_accuracy, fast.n_items_accuracy) == (6, 600, 6, 600)


def test_the_pooled_estimates_are_the_meta_analysis_of_the_cells(built):
    """Each rule's pooled R/R* and Δacc, recomputed from the cells: log point and (SE/point)² n/(n − 1); Δacc from the
    2×2 counts by Agresti–Min's formula, by hand."""
    cells, table = built
    for rule in ("fast", "slow", "lossy"):
        mine = [c for c in cells if c.method == rule]
        y = [math.log(c["rounds_ratio"].point) for c in mine]
        v = [(c["rounds_ratio"].standard_error / c["rounds_ratio"].point) ** 2 * c.n_items / (c.n_items - 1) for c in mine]
        m = random_effects(y, v)
        got = table.get(rule)
        assert got.pooled["rounds_ratio"].estimate == pytest.approx(m.estimate, rel=1e-12)
        assert got.estimate("rounds_ratio").low == pytest.approx(math.exp(m.low), rel=1e-12)
        ya, va = [], []
        for c in mine:
            b, cc, n = c.wrong_to_right, c.right_to_wrong, c.n_graded
            tilde = (b - cc) / (n + 2)
            ya.append(100 * (b - cc) / n)
            va.append(1e4 * ((b + cc + 1) / (n + 2) - tilde**2) / (n + 2))
        ma = random_effects(ya, va)
        assert got.pooled["accuracy_delta_pp"].estimate == pytest.approx(ma.estimate, rel=1e-12, abs=1e-12)
        assert got.pooled["accuracy_delta_pp"].high == pytest.approx(ma.high, rel=1e-12)


def test_holm_is_over_the_rules(built):
    _, table = built
    rows = list(table)
    raw = [r.pooled["rounds_ratio"].pvalue(0.0) for r in rows]
    assert [r.rounds_ratio_p_holm for r in rows] == pytest.approx(list(holm(raw)), rel=1e-12)
    raw = [r.pooled["accuracy_delta_pp"].pvalue(0.0, "less") for r in rows]
    assert [r.accuracy_worse_p_holm for r in rows] == pytest.approx(list(holm(raw)), rel=1e-12)
    raw = [r.pooled["accuracy_delta_pp"].pvalue(-2.0, "greater") for r in rows]
    assert [r.accuracy_noninferior_p_holm for r in rows] == pytest.approx(list(holm(raw)), rel=1e-12)


def test_rules_csv_columns(built):
    _, table = built
    df = table.to_frame()
    assert list(df.columns) == rule_columns()
    assert set(df["method"]) == {"fast", "slow", "lossy"} and (df["target"] == "all").all()
    row = df.set_index("method").loc["fast"]
    assert row["rounds_ratio"] < 1 and row["rounds_ratio_k"] == 6 and row["verdict_rounds"] == FASTER
    assert "<table>" in table._repr_html_()


def test_the_margin_decides_non_inferiority(built):
    cells, _ = built
    fast = rules(cells, margin_pp=0.5).get("fast")
    assert fast.verdict_accuracy == CANT_TELL  # ±2.4 points cannot rule out a loss of half a point


def test_probes_never_enter_and_partly_graded_cells_not_the_accuracy_pool(tmp_path):
    rng = np.random.default_rng(8)
    recs = _study(rng, n_items=20, rules_={"fast": (0.7, "same")})
    # d6: the rule only as a 3-item probe (the complete arm missing there), so Table 3 picks it and the pool leaves it out
    recs = [r for r in recs if not (r["dataset"] == "d6" and r["method"] == "fast" and int(r["item_id"][-3:]) >= 3)]
    # d5: graded on 5 of 20 items only (partly graded): in the speed pool, not in the accuracy pool
    for r in recs:
        if r["dataset"] == "d5" and int(r["item_id"][-3:]) >= 5:
            r["correct"] = None
    table = rules(ll.cells(_write(tmp_path, recs), n_resamples=100))
    fast = table.get("fast")
    assert fast.n_probes_excluded == 1 and fast.n_cells == 5 and fast.n_items == 100
    assert fast.n_cells_accuracy == 4 and fast.pooled["accuracy_delta_pp"].k == 4


def test_pairs_get_their_own_rows_and_serving_conditions_are_never_pooled(tmp_path):
    rng = np.random.default_rng(9)
    two = _study(rng, n_items=15, targets=("T1", "T2"), rules_={"fast": (0.7, "same")}, datasets=DATASETS[:3])
    table = rules(ll.cells(_write(tmp_path, two, "two.jsonl"), n_resamples=100))
    assert [(r.target, r.method) for r in table] == [("all", "fast"), ("T1", "fast"), ("T2", "fast")]
    assert table.get("fast").n_cells == 6 and table.get("fast", "T1", "D").n_cells == 3
    loads = (_study(rng, n_items=15, rules_={"fast": (0.7, "same")}, datasets=DATASETS[:3], extra={"concurrency": 1})
             + _study(rng, n_items=15, rules_={"fast": (1.3, "same")}, datasets=DATASETS[:3], extra={"concurrency": 16}))
    table = rules(ll.cells(_write(tmp_path, loads, "loads.jsonl"), n_resamples=100))
    assert sorted(r.serving for r in table) == ["c=1", "c=16"]
    assert table.get("fast", serving="c=1").verdict_rounds == FASTER
    assert table.get("fast", serving="c=16").verdict_rounds == SLOWER
    assert all(r.n_cells == 3 for r in table)


def test_ungraded_and_one_cell(tmp_path):
    rng = np.random.default_rng(10)
    table = rules(ll.cells(_write(tmp_path, _study(rng, n_items=12, graded=False, rules_={"fast": (0.7, "same")},
                                                   datasets=("d1",))), n_resamples=100))
    fast = table.get("fast")
    assert fast.verdict_accuracy == UNGRADED and fast.n_cells == 1
    assert fast.verdict_rounds == CANT_TELL  # one cell says nothing across datasets
    assert math.isnan(fast.estimate("rounds_ratio").low) and "one cell" in fast.estimate("rounds_ratio").note
    assert math.isnan(fast.accuracy_mdd_pp)


@pytest.mark.shared
def test_on_the_real_logs(shared_data):
    """The GPT-OSS study logs: one pair, six datasets (mtbench ungraded), 12 items a cell; every pooled estimate lies
    within its cells' range (a weighted mean: the failure statsmodels' untruncated DL τ² showed on these logs)."""
    cells = ll.cells(ll.load(shared_data / "runs"), n_resamples=200)
    table = rules(cells)
    assert sorted(r.method for r in table) == ["cactus", "mentored_dec", "r_fuzzy", "spec_casc_opt", "spec_casc_tok"]
    chosen = {(c.method, c.dataset): c for c in cells if not c.small_n}
    for r in table:
        assert (r.n_cells, r.n_items, r.n_cells_accuracy, r.n_items_accuracy) == (6, 72, 5, 60)
        for m in ("rounds_ratio", "accuracy_delta_pp"):
            p = r.pooled[m]
            assert p.k == (6 if m == "rounds_ratio" else 5) and np.isfinite(p.low) and np.isfinite(p.high)
        assert r.verdict_rounds in (FASTER, SLOWER, CANT_TELL) and r.verdict_accuracy in (WORSE, NONINFERIOR, CANT_TELL)
    from lengthlens.analyses.tables import table3_cells

    t3 = table3_cells(cells)
    for r in table:
        mine = t3[t3["method"] == r.method]
        logs = np.log(mine["rounds_ratio"].astype(float))
        assert logs.min() <= r.pooled["rounds_ratio"].estimate <= logs.max()
        acc = mine["accuracy_delta_pp"].astype(float).dropna()
        assert acc.min() <= r.pooled["accuracy_delta_pp"].estimate <= acc.max()
    assert chosen  # the cells exist
