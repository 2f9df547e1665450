"""Studentized (bootstrap-t) intervals and subset cells against plain per-resample loops."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lengthlens as ll
from lengthlens.stats.resample import counts_for_group, item_counts, subset_rng
from lengthlens.stats.intervals import percentile_interval, quantiles_with_inf

from .test_estimate import _records, _write_jsonl
from lengthlens.report import wording


def _item_totals(recs, method, items, field):
    """Per item, the sum over its seeds of ``field`` for one arm (the item is the resampling unit)."""
    out = np.zeros(len(items))
    pos = {it: i for i, it in enumerate(items)}
    for r in recs:
        if r["method"] == method and r["item_id"] in pos:
            out[pos[r["item_id"]]] += r[field]
    return out


def _bootstrap_t(counts, stat_and_influence, level=0.95):
    """Plain loop: for each resample, the statistic (log scale) and sqrt(sum_i c_i (u_i - u_bar)^2)."""
    est, u = stat_and_influence(np.ones(counts.shape[1]))
    se = math.sqrt(np.sum((u - u.mean()) ** 2))
    ts = []
    for c in counts:
        e_b, u_b = stat_and_influence(c)
        u_bar = np.sum(c * u_b) / c.sum()
        se_b = math.sqrt(np.sum(c * (u_b - u_bar) ** 2))
        ts.append((e_b - est) / se_b)
    q = np.percentile(np.abs(ts), 100 * level)  # symmetric bootstrap-t
    return math.exp(est - q * se), math.exp(est + q * se)


def test_studentized_lambda_and_gain_equal_plain_loop(tmp_path):
    rng = np.random.default_rng(21)
    recs = _records(rng, 14, {"cactus": 1.3}, seeds=(0, 1))
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", recs))
    B = 400
    cell = ll.cells(runs, n_resamples=B, seed=5).get(method="cactus")
    items = sorted({r["item_id"] for r in recs})
    counts = counts_for_group(5, ("T", "D", "ds"), len(items), B).astype(float)
    L, Ls = (_item_totals(recs, m, items, "output_tokens") for m in ("cactus", "strict"))

    def lam(c):
        a, b = c @ L, c @ Ls
        return math.log(a / b), L / a - Ls / b  # d log(sum L / sum L*) / d item totals

    for r in recs:  # per-run l_bar as the metric defines it
        r["lbar"] = r["accepted_tokens"] / r["draft_rounds"]
        r["one"] = 1.0
    lb, lbs = (_item_totals(recs, m, items, "lbar") for m in ("cactus", "strict"))
    nl, nls = (_item_totals(recs, m, items, "one") for m in ("cactus", "strict"))

    def gain(c):
        m1, m0 = (c @ lb) / (c @ nl), (c @ lbs) / (c @ nls)
        u = (lb - m1 * nl) / (c @ nl) / (m1 + 1) - (lbs - m0 * nls) / (c @ nls) / (m0 + 1)
        return math.log((m1 + 1) / (m0 + 1)), u

    for name, fn in (("lambda", lam), ("gain", gain)):
        lo, hi = _bootstrap_t(counts, fn)
        ci = cell[name].confidence_interval
        assert ci.low == pytest.approx(lo, rel=1e-6)
        assert ci.high == pytest.approx(hi, rel=1e-6)


def test_studentized_is_default_and_wider_than_percentile_at_small_n(tmp_path):
    rng = np.random.default_rng(3)
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", _records(rng, 12, {"cactus": 1.4})))
    t = ll.cells(runs, n_resamples=2000)
    p = ll.cells(runs, n_resamples=2000, ci="percentile")
    assert t.ci_method == "studentized"
    a, b = t.get(method="cactus")["lambda"].confidence_interval, p.get(method="cactus")["lambda"].confidence_interval
    assert (a.high - a.low) > (b.high - b.low)
    # The accuracy change gets its own default (Tango's score interval, one run per item), not the bootstrap-t.
    assert t.get(method="cactus")["accuracy_delta_pp"].method == "tango_score"
    assert p.get(method="cactus")["accuracy_delta_pp"].method == "percentile"


def test_percentile_interval_of_an_undefined_column_is_nan_without_a_warning():
    """An all-undefined column: NaN limits, counted, and no RuntimeWarning, also from several threads at once
    (silencing it with warnings.catch_warnings() was process-wide, so one thread's exit let another's through)."""
    import warnings
    from concurrent.futures import ThreadPoolExecutor

    reps = np.random.default_rng(0).normal(size=(2000, 3, 4))
    reps[:, 1, 2] = np.nan
    reps[:5, 0, 0] = np.inf
    small = reps[:50, :2, 1:3].copy()  # many short calls interleave most (the former code warned in 1-5 of 3000 here)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: percentile_interval(small), range(3000)))
        r = percentile_interval(reps)
        lo, hi, undefined = r.low, r.high, r.undefined
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert np.isnan(lo[1, 2]) and np.isnan(hi[1, 2]) and undefined[1, 2] == 2000 and undefined[0, 0] == 5
    with warnings.catch_warnings():  # the former computation, over every column at once, as the oracle
        warnings.simplefilter("ignore", RuntimeWarning)
        a = (1 - 0.95) / 2  # 0.025 as the function computes it (not the literal: the quantile differs in its last bit)
        want_lo, want_hi = np.nanpercentile(np.where(np.isfinite(reps), reps, np.nan), [100 * a, 100 * (1 - a)], axis=0)
    assert np.array_equal(lo, want_lo, equal_nan=True) and np.array_equal(hi, want_hi, equal_nan=True)
    parts = [(x.low, x.high, x.undefined) for x in results]
    for r in parts[1:]:
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(r, parts[0]))
    assert np.isnan(parts[0][0][1, 1]) and parts[0][2][1, 1] == 50


def test_quantiles_with_inf_match_numpy_and_keep_infinity():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(101, 3))
    v[5, 1] = np.nan
    got = quantiles_with_inf(v, (0.025, 0.975))
    want = np.stack([np.nanpercentile(v, [2.5, 97.5], axis=0)])[0]
    assert np.allclose(got, want, rtol=1e-12)
    w = np.r_[np.arange(10.0), np.inf][:, None]
    assert quantiles_with_inf(w, (0.99,))[0, 0] == np.inf


def _sorted_quantiles(values: np.ndarray, q: float) -> np.ndarray:
    """The oracle: sort every column, interpolate between the two order statistics around (n_valid - 1) q, an
    infinite one taken as is (a plain loop over columns)."""
    out = []
    for col in values.T:
        v = np.sort(col[~np.isnan(col)])
        if not v.size:
            out.append(np.nan)
            continue
        h = (v.size - 1) * q
        a, b = v[int(np.floor(h))], v[int(np.ceil(h))]
        out.append(a if a == b or np.isinf(a) else b if np.isinf(b) else a + (h - np.floor(h)) * (b - a))
    return np.array(out)


@pytest.mark.parametrize("n", [1, 2, 999, 10_000])
def test_quantiles_with_inf_complete_and_incomplete_columns_match_a_sorting_loop(n):
    """Complete columns and columns with NaN give the values of the loop to the bit."""
    rng = np.random.default_rng(n)
    v = np.round(rng.standard_normal((n, 6)), 1)  # ties
    v[rng.random(v.shape) < 0.01] = np.inf
    v[rng.random(v.shape) < 0.01] = -np.inf
    gapped = v.copy()
    gapped[0, 2] = np.nan
    for values in (v, gapped):
        for q in (0.0, 0.025, 0.5, 0.95, 0.975, 1.0):
            assert np.array_equal(quantiles_with_inf(values, (q,))[0], _sorted_quantiles(values, q), equal_nan=True)


@pytest.mark.parametrize("n_cell,n_group", [(3, 12), (7, 30)])
def test_subset_cell_is_a_paired_bootstrap_over_its_own_items(tmp_path, n_cell, n_group):
    """A cell on n_cell of its group's n_group items: resamples of exactly its own items, none dropped."""
    rng = np.random.default_rng(n_cell)
    recs = _records(rng, n_group, {"cactus": 1.3, "r_fuzzy": 1.1})
    own = [f"case_{i:03d}" for i in sorted(rng.choice(n_group, n_cell, replace=False))]
    recs = [r for r in recs if r["method"] != "cactus" or r["item_id"] in own]
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", recs))
    B = 3000
    t = ll.cells(runs, n_resamples=B, seed=11, ci="percentile")
    cell = t.get(method="cactus")
    assert cell.n_items == n_cell and cell.small_n == (n_cell < 10)
    assert cell.undefined_resamples == 0
    counts = item_counts(n_cell, B, subset_rng(11, ("T", "D", "ds"), own)).astype(float)
    L, Ls = (_item_totals(recs, m, own, "output_tokens") for m in ("cactus", "strict"))
    lam = np.array([(c @ L) / (c @ Ls) for c in counts])
    lo, hi = np.percentile(lam, [2.5, 97.5])
    ci = cell["lambda"].confidence_interval
    assert (ci.low, ci.high) == pytest.approx((lo, hi), rel=1e-12)
    # The complete arm keeps the group's draws (unchanged by the subset cell).
    full = ll.cells(ll.load(_write_jsonl(tmp_path / "f.jsonl", [r for r in recs if r["method"] != "cactus"])),
                    n_resamples=B, seed=11, ci="percentile").get(method="r_fuzzy")
    assert t.get(method="r_fuzzy")["lambda"] == full["lambda"]
    # Censoring reports the cell's own item count.
    cz = ll.analyse(runs, n_resamples=200, seed=11).tables["censoring"]
    assert int(cz.loc[cz.method == "cactus", "n_items"].iloc[0]) == n_cell


def test_small_cells_left_out_of_table3_and_headline_unless_asked(tmp_path):
    rng = np.random.default_rng(9)
    big = _records(rng, 12, {"cactus": 1.3}, dataset="big")
    small = _records(rng, 6, {"cactus": 1.3, "r_fuzzy": 1.1}, dataset="small")  # every cell 6 items: small_n
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", big + small))
    a = ll.analyse(runs, n_resamples=300, proposals=False)
    cells = a.tables["cells"]
    assert cells.set_index("dataset")["small_n"].to_dict() == {"big": False, "small": True}
    t3 = a.tables["table3"].set_index("method")
    assert t3.loc["all", "n_cells"] == 1 and t3.loc["all", "n_small_excluded"] == 2
    assert t3.loc["cactus", "n_small_excluded"] == 1 and t3.loc["r_fuzzy", "n_small_excluded"] == 1
    assert "2 cells with fewer than 10 items left out" in wording.headline(a)
    b = ll.analyse(runs, n_resamples=300, proposals=False, include_small=True)
    t3b = b.tables["table3"].set_index("method")
    assert t3b.loc["all", "n_cells"] == 3 and t3b.loc["all", "n_small_excluded"] == 0
    assert "left out" not in wording.headline(b)
    assert b.tables["table3"]["lambda_mean"].iloc[-1] == pytest.approx(cells["lambda"].mean())


def test_studentized_with_a_metric_constant_across_items_is_the_point():
    """Time logged as rounds x a constant: time per round is the same in every item, so its interval is the point."""
    from lengthlens.stats.intervals import studentized_interval

    point = np.array([0.3, 0.3])
    reps = np.array([[0.3 + 1e-16, 0.3], [0.3, 0.35], [0.3 - 1e-16, 0.2]])
    se_b = np.array([[1e-17, 0.0], [2e-17, 0.0], [0.0, 0.1]])
    lo, hi, und, fell_back = studentized_interval(point, np.array([1e-17, 0.05]), reps, se_b)
    assert lo[0] == hi[0] == 0.3 and und[0] == 0
    # Column 1: one resample moved with SE 0, so |t| = inf in 1 of 3 resamples and the bootstrap-t limits
    # would be unbounded; the percentile interval of the same replicates is used instead. numpy's linear
    # interpolation on the sorted [0.2, 0.3, 0.35]: 2.5 % -> 0.2 + 0.05 * 0.1 = 0.205,
    # 97.5 % -> 0.3 + 0.95 * 0.05 = 0.3475.
    assert und[1] == 0 and lo[1] == pytest.approx(0.205) and hi[1] == pytest.approx(0.3475)
    assert fell_back.tolist() == [False, True]


def test_nearly_lossless_cell_gets_a_bounded_interval_and_says_so(tmp_path):
    """18 of 20 items identical in both arms (a lossless method that drifted on two): most resamples hold no
    changed item, so the bootstrap-t is unbounded; the cell gets the percentile interval, flagged."""
    rng = np.random.default_rng(11)
    recs = _records(rng, 20, {"eagle": 1.0})
    strict = {r["item_id"]: r for r in recs if r["method"] == "strict"}
    for r in recs:
        if r["method"] == "eagle":
            s = strict[r["item_id"]]
            r.update(output_tokens=s["output_tokens"], finish_reason=s["finish_reason"])
            if r["item_id"] in ("case_003", "case_011"):
                r["output_tokens"] = s["output_tokens"] + 40
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", recs))
    cell = ll.cells(runs, n_resamples=2000).get(method="eagle")
    lam = cell["lambda"]
    ci = lam.confidence_interval
    assert np.isfinite(ci.low) and np.isfinite(ci.high) and ci.low <= lam.point <= ci.high
    assert "lambda" in cell.percentile_fallback
    # The same cell's gain has spread in every item (l_bar differs), so its bootstrap-t stands.
    assert "gain" not in cell.percentile_fallback


def test_undefined_resamples_ignores_metrics_undefined_at_the_point(tmp_path):
    """An ungraded cell's accuracy change is undefined in every resample; that is not a dropped resample."""
    rng = np.random.default_rng(4)
    runs = ll.load(_write_jsonl(tmp_path / "r.jsonl", _records(rng, 12, {"cactus": 1.2}, graded=False)))
    cell = ll.cells(runs, n_resamples=500).get(method="cactus")
    assert cell["accuracy_delta_pp"].undefined_resamples == 500
    assert cell.undefined_resamples == 0


def test_cli_passes_interval_options_to_analyse(tmp_path):
    from lengthlens.cli import analyse_from_args, build_parser

    rng = np.random.default_rng(5)
    path = _write_jsonl(tmp_path / "r.jsonl", _records(rng, 6, {"cactus": 1.2}))
    args = build_parser().parse_args(["report", str(path), "--out", str(tmp_path / "out"), "--n-resamples", "200",
                                      "--aft-ci", "bootstrap", "--aft-resamples", "50", "--include-small"])
    a = analyse_from_args(ll.load(path), args)
    assert a.settings["ci"] == "studentized" and a.settings["aft_ci"] == "bootstrap" and a.settings["include_small"]
    assert a.tables["censoring"]["aft_ci"].iloc[0] == "bootstrap"
    assert a.tables["table3"].set_index("method").loc["all", "n_cells"] == 1  # the 6-item cell kept
