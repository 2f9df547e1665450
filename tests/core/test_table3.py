"""Table 3's choice of cells and its accuracy columns, attribution counted by interval limits, against plain computations."""

from __future__ import annotations

import json

import numpy as np
import scipy.stats
import pandas as pd
import pytest

import lengthlens as ll
from lengthlens.analyses.analyse import attribution
from lengthlens.analyses.tables import alpha_selected, select_alphas, table3_cells
from lengthlens.stats.metrics import REGISTRY
from lengthlens.stats.resample import counts_for_group
from lengthlens.report import wording


def _rec(dataset, method, params, alpha, item, *, correct, L=400, think=None, answer=30):
    R = max(1, L // 4)
    r = dict(target="T", draft="D", dataset=dataset, method=method, params=params, alpha=alpha, item_id=f"case_{item:03d}",
             seed=0, status="ok", output_tokens=L, max_new_tokens=4000, finish_reason="stop", draft_rounds=R,
             accepted_tokens=L - R, draft_tokens=4 * R, wall_time_s=L / 50, correct=correct)
    if think is not None:
        r["text"] = f"<think>{'t' * think}</think>{'a' * answer}"
    return r


def _load(tmp_path, recs):
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return ll.load(f)


@pytest.fixture()
def graded(tmp_path):
    """Two datasets, 12 and 30 items, strict ~70 % correct; rules with different true drops."""
    rng = np.random.default_rng(4)
    recs = []
    for ds, n in (("a", 12), ("b", 30)):
        base = rng.random(n) < 0.7
        for i in range(n):
            recs.append(_rec(ds, "strict", "strict", None, i, correct=bool(base[i])))
        for method, p_flip in (("cactus", 0.15), ("r_fuzzy", 0.45)):
            for i in range(n):
                # flip right -> wrong with p_flip, wrong -> right with 0.1
                c = bool(base[i]) and rng.random() > p_flip or (not base[i] and rng.random() < 0.1)
                recs.append(_rec(ds, method, "alpha0.3", 0.3, i, correct=c, L=int(rng.integers(300, 600))))
    return _load(tmp_path, recs)


def test_table3_reports_both_drop_rules_and_holm(graded):
    cells = ll.cells(graded, n_resamples=2000, seed=2)
    df = cells.to_frame()
    t3 = ll.table3(cells).set_index("method")
    # drop_2pp is the one-sided loss test at 2.5 %
    assert int(t3.loc["all", "n_drop_2pp"]) == int((df["drop_2pp_p"] < 0.025).sum())
    assert int(t3.loc["all", "n_drop_2pp_point"]) == int((df["accuracy_delta_pp"] <= -2).sum())
    assert t3.loc["all", "n_drop_2pp"] <= t3.loc["all", "n_drop_2pp_point"]
    # Holm over the four cells of the accuracy family (graded, >= 10 items), by hand from the mid-p values.
    assert df["in_accuracy_family"].all()
    p = np.sort(df["accuracy_p"].to_numpy(float))
    holm_sorted = np.minimum(1, np.maximum.accumulate((4 - np.arange(4)) * p))
    assert np.allclose(np.sort(df["accuracy_p_holm"].to_numpy(float)), holm_sorted)
    expect = int(((df["accuracy_delta_pp"] < 0) & (df["accuracy_p_holm"] < 0.05)).sum())
    assert int(t3.loc["all", "n_drop_holm"]) == expect
    # "predicted rounds win" follows the pooled identity lambda / gain_pooled
    predicted = df["lambda"] / df["gain_pooled"]
    assert np.allclose(predicted, df["rounds_ratio_predicted"], rtol=1e-12)
    assert int(t3.loc["all", "n_predicted_win_time_loses"]) == int(((predicted < 1) & (df["time_ratio"] >= 1)).sum())


def test_mean_accuracy_change_interval_equals_plain_loop(graded):
    """Table 3's Δacc interval is for the across-dataset mean (issue 31): the cells' spread, floored at the bootstrap's."""
    cells = ll.cells(graded, n_resamples=3000, seed=9)
    t3 = ll.table3(cells).set_index("method")
    df = cells.to_frame()
    runs = graded.table.to_pandas()
    # Per resample b: each cell's delta from its group's draws, then the mean over the rule's cells (one per dataset).
    for method in ("cactus", "r_fuzzy"):
        per_cell = []
        for ds, n in (("a", 12), ("b", 30)):
            counts = counts_for_group(9, ("T", "D", ds), n, 3000)
            base = runs[(runs.dataset == ds) & (runs.method == "strict")].sort_values("item_id")["correct"].to_numpy(float)
            rel = runs[(runs.dataset == ds) & (runs.method == method)].sort_values("item_id")["correct"].to_numpy(float)
            per_cell.append(100 * (counts @ (rel - base)) / counts.sum(axis=1))
        reps = np.mean(per_cell, axis=0)
        # Hartung–Knapp with equal weights: mean ± t(K − 1) · max(s/√K, SD of the replicates' mean), K = 2 cells.
        y = df[df.method == method]["accuracy_delta_pp"].to_numpy(float)
        se = max(y.std(ddof=1) / np.sqrt(len(y)), reps.std(ddof=1))
        half = scipy.stats.t.ppf(0.975, len(y) - 1) * se
        lo, hi = y.mean() - half, y.mean() + half
        assert t3.loc[method, "accuracy_delta_pp_mean"] == pytest.approx(df[df.method == method]["accuracy_delta_pp"].mean())
        assert t3.loc[method, "accuracy_delta_pp_mean_lo"] == pytest.approx(lo, rel=1e-9)
        assert t3.loc[method, "accuracy_delta_pp_mean_hi"] == pytest.approx(hi, rel=1e-9)


def test_one_failed_run_keeps_the_arm_complete(tmp_path):
    """alpha 0.5 lost one of 30 items (29 >= 95 % of 30): it stays the loosest complete arm; the 3-item probe does not."""
    recs = [_rec("d", "strict", "strict", None, i, correct=True) for i in range(30)]
    recs += [_rec("d", "cactus", "alpha0.3", 0.3, i, correct=True) for i in range(30)]
    recs += [_rec("d", "cactus", "alpha0.5", 0.5, i, correct=True) for i in range(30) if i != 7]
    recs += [_rec("d", "cactus", "alpha0.9", 0.9, i, correct=True) for i in range(3)]
    cells = ll.cells(_load(tmp_path, recs), n_resamples=200)
    df = cells.to_frame()
    picked = select_alphas(df)
    assert picked["params"].tolist() == ["alpha0.5"]
    assert table3_cells(cells)["params"].tolist() == ["alpha0.5"]
    assert ll.alpha_selected(df).equals(alpha_selected(df))
    sel = alpha_selected(df).iloc[0]
    assert (sel.alpha_selected, sel.params_selected, sel.n_items, sel.n_items_baseline, sel.complete) == (0.5, "alpha0.5", 29, 30, True)
    assert (sel.alphas_complete, sel.alphas_incomplete) == ("0.5;0.3", "0.9")
    a = ll.analyse(_load(tmp_path, recs), n_resamples=200, n_resamples_aft=50, proposals=False)
    assert a.tables["alpha_selected"].equals(alpha_selected(df))
    assert "most aggressive alpha" in wording.headline(a)


def test_time_per_round_ratio_interval(graded):
    cells = ll.cells(graded, n_resamples=1000, seed=1, ci="percentile")  # the percentile oracle below
    c = cells.get(dataset="b", method="cactus")
    runs = graded.table.to_pandas()
    b = runs[(runs.dataset == "b") & (runs.method == "strict")].sort_values("item_id")
    r = runs[(runs.dataset == "b") & (runs.method == "cactus")].sort_values("item_id")
    counts = counts_for_group(1, ("T", "D", "b"), 30, 1000)
    reps = ((counts @ r.wall_time_s.to_numpy()) / (counts @ b.wall_time_s.to_numpy())) / (
        (counts @ r.draft_rounds.to_numpy(float)) / (counts @ b.draft_rounds.to_numpy(float)))
    lo, hi = np.percentile(reps, [2.5, 97.5])
    ci = c["time_per_round_ratio"].confidence_interval
    assert (ci.low, ci.high) == pytest.approx((lo, hi), rel=1e-9)


def test_identity_exact_with_pooled_l_bar():
    """Where accepted + rounds = output for every run, lambda / gain_pooled is R/R* exactly; the paper's gain misses it."""
    rng = np.random.default_rng(0)
    n = 50
    L, Ls = rng.integers(100, 5000, n).astype(float), rng.integers(100, 5000, n).astype(float)
    R, Rs = np.floor(L / rng.uniform(1.5, 6, n)), np.floor(Ls / rng.uniform(1.5, 4, n))
    s = dict.fromkeys(REGISTRY.quantity_names, 0.0)
    s.update(n=n, L=L.sum(), L_star=Ls.sum(), R=R.sum(), R_star=Rs.sum(), A=(L - R).sum(), A_star=(Ls - Rs).sum(),
             lbar=((L - R) / R).sum(), lbar_star=((Ls - Rs) / Rs).sum(), n_lbar=n, n_lbar_star=n)
    m = REGISTRY.evaluate(s)
    assert m["rounds_ratio_predicted"] == pytest.approx(R.sum() / Rs.sum(), rel=1e-12)
    assert abs(m["lambda"] / m["gain"] / m["rounds_ratio"] - 1) > 1e-3  # the mean of per-run l_bar does not close it


def test_thinking_share_undefined_when_extra_length_is_noise(tmp_path):
    rng = np.random.default_rng(8)
    recs = []
    for i in range(12):
        tb = int(rng.integers(200, 400))
        recs.append(_rec("d", "strict", "strict", None, i, correct=True, think=tb))
        # noise: the extra length is symmetric around 0
        recs.append(_rec("d", "cactus", "alpha0.3", 0.3, i, correct=True, think=tb + int(rng.integers(-60, 61))))
        # a real shift, almost all of it thinking
        recs.append(_rec("d", "r_fuzzy", "alpha0.3", 0.3, i, correct=True, think=tb + int(rng.integers(200, 400)),
                         answer=30 + int(rng.integers(0, 3))))
    runs = _load(tmp_path, recs)
    a = attribution(runs, n_resamples=2000, seed=3, table3_cells=ll.cells(runs, n_resamples=100).to_frame().iloc[[1]])
    cells = a.cells.set_index("method")
    noise = cells.loc["cactus"]
    assert noise.extra_chars_mean_lo <= 0 <= noise.extra_chars_mean_hi
    assert np.isnan(noise.thinking_share) and noise.thinking_share_reason == "the interval of the extra length includes 0"
    real = cells.loc["r_fuzzy"]
    assert real.extra_chars_mean_lo > 0 and real.thinking_share_reason == ""
    assert real.thinking_share_lo >= 0.9
    s = a.summary.set_index(["scope", "method"])
    n_longer = int((a.cells.extra_chars > 0).sum())
    assert s.loc[("all", "all"), "n_cells_longer"] == n_longer
    assert s.loc[("all", "all"), "n_share_undefined"] == int(noise.extra_chars > 0)
    assert s.loc[("all", "all"), "n_share_lo_ge_90"] == 1
    assert s.loc[("table3", "all"), "n_cells"] == 1 and ("table3", "r_fuzzy") in s.index


def test_alpha_selected_equals_a_per_group_pandas_loop():
    """Many groups, unsorted rows, missing alphas, incomplete arms, an intervention: the one-pass listing equals the
    plain per-group loop (the function's former body) value for value."""
    from lengthlens.analyses.tables import _ranked, _relaxed_rules

    rng = np.random.default_rng(3)
    rows = []
    for target in ("T2", "T1"):
        for dataset in ("b", "a"):
            for method in ("cactus", "r_fuzzy", "cactus_force_commit"):
                for alpha in (0.1, 0.5, 0.9, None):
                    n = int(rng.choice([3, 29, 30]))
                    rows.append(dict(target=target, draft="D", dataset=dataset, method=method,
                                     params=f"alpha{alpha}", alpha=alpha, n_items=n, n_items_baseline=30))
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=1).reset_index(drop=True)

    def oracle(cells_df):
        out = []
        for _, g in _ranked(_relaxed_rules(cells_df)).groupby(["target", "draft", "dataset", "serving", "method"], sort=True):
            top = g.iloc[0]
            fmt = lambda d: ";".join(f"{a:g}" for a in d["alpha"].dropna().astype(float))  # noqa: E731
            out.append({"target": top["target"], "draft": top["draft"], "dataset": top["dataset"], "serving": top["serving"],
                        "method": top["method"],
                        "alpha_selected": top["alpha"], "params_selected": top["params"], "n_items": int(top["n_items"]),
                        "n_items_baseline": int(top["n_items_baseline"]) if "n_items_baseline" in g else np.nan,
                        "complete": bool(top["_complete"]), "alphas_complete": fmt(g[g["_complete"]]),
                        "alphas_incomplete": fmt(g[~g["_complete"]])})
        return pd.DataFrame(out)

    for frame in (df, df.drop(columns=["n_items_baseline"])):
        got, want = alpha_selected(frame), oracle(frame)
        assert len(got) == 8  # 2 targets x 2 datasets x 2 rules (the intervention is Table 4's)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
