"""One engine for every resampled statistic: statistics of sums and of the items themselves share a cell's draws and
the interval code, each interval declared with its statistic, ``ci=`` honoured by all of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lengthlens as ll
from lengthlens import synth
from lengthlens.stats import metrics
from lengthlens.stats.intervals import Resampled, Weighted, estimates, expanded_percentile_levels
from lengthlens.stats.metrics import REGISTRY, ItemInterval, Metric
from lengthlens.stats.resample import item_counts

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = synth.write_flat(synth.example(), tmp_path_factory.mktemp("one_engine") / "ex.parquet")
    return ll.load(path, run_graders=False)


def test_the_accuracy_change_interval_is_the_one_its_row_declares_and_the_docs_name(runs):
    """Tango's score interval is declared in the registry row, so outputs.md names it and every graded cell has it."""
    row = REGISTRY.metric("accuracy_delta_pp")
    assert row.default_ci is metrics.ACCURACY_CHANGE_CI and "Tango's score interval" in row.interval_method
    line = next(x for x in (DOCS / "outputs.md").read_text().splitlines() if x.startswith("| `accuracy_delta_pp` |"))
    assert f"({row.interval_method})" in line and "percentile" not in line
    table = ll.cells(runs, n_resamples=300)
    graded = [c for c in table if c.n_graded]
    assert graded
    for c in graded:
        assert c["accuracy_delta_pp"].method in ("tango_score", "item_t", "tango_items"), c["accuracy_delta_pp"].method
    # ci="percentile" asks for the percentile interval of every metric, the accuracy change's included
    assert {c["accuracy_delta_pp"].method for c in ll.cells(runs, n_resamples=300, ci="percentile") if c.n_graded} \
        == {"percentile"}


def test_a_declared_default_interval_is_used_by_the_engine_for_any_row():
    """A row's own default_ci (here a made-up interval from the item columns) is what ci='studentized' gives."""
    def spread(items, level):
        x = items.L / items.L_star
        return float(x.min()), float(x.max()), float(x.std()), "item_range"

    row = Metric("lambda_range", lambda s: s.L / s.L_star, "λr", "ΣL/ΣL*", "λ with the item range as its interval",
                 default_ci=ItemInterval(spread, "the range of the item ratios"))
    assert row.interval_method == "the range of the item ratios"
    L, Ls = np.array([10.0, 30.0, 20.0, 40.0]), np.array([10.0, 20.0, 20.0, 20.0])
    counts = item_counts(4, 200, np.random.default_rng(0))
    r = Resampled({"L": L, "L_star": Ls}, {"L": counts @ L, "L_star": counts @ Ls}, counts)
    est, reps = estimates({"x": row}, r)
    assert (est["x"].method, est["x"].low, est["x"].high, est["x"].point) == ("item_range", 1.0, 2.0, 100.0 / 70.0)
    est, _ = estimates({"x": row}, r, ci="percentile")
    assert est["x"].method == "percentile" and est["x"].low == pytest.approx(np.nanpercentile(reps["x"], 2.5))


def test_an_estimate_keeps_its_bootstrap_distribution_when_asked(runs):
    kept = ll.cells(runs, n_resamples=400, ci="percentile", keep_replicates=True)
    plain = ll.cells(runs, n_resamples=400, ci="percentile")
    for c, d in zip(kept, plain):
        e = c["lambda"]
        assert e.replicates.shape == (400,) and d["lambda"].replicates is None
        assert (e.low, e.high) == pytest.approx(tuple(np.nanpercentile(e.replicates, [2.5, 97.5])), rel=1e-14)
        assert e == d["lambda"]  # the distribution is carried, not compared
    assert c["l_bar_star"].replicates is None  # no interval, nothing resampled


def _median_of(x):
    """The weighted median (first value whose cumulative weight reaches half) of x, per row of item weights."""
    order = np.argsort(x, kind="stable")

    def of(w):
        c = np.cumsum(np.asarray(w, dtype=float)[:, order], axis=1)
        return x[order][np.argmax(c >= c[:, -1:] / 2, axis=1)]
    return of


def test_a_statistic_of_the_items_gets_the_interval_ci_asks_for():
    """A weighted median over the cell's draws: its declared default (expanded percentile at n items), the plain
    percentile interval, and BCa from the leave-one-item-out jackknife, against direct computations."""
    rng = np.random.default_rng(2)
    x = rng.lognormal(5, 0.7, 15)
    counts = item_counts(15, 2000, rng)
    r = Resampled({}, {}, counts)
    of = _median_of(x)
    med = of(counts)
    st = Weighted(of)
    est, reps = estimates({"m": st}, r)
    levels = expanded_percentile_levels(15, 0.95)
    assert est["m"].method == "expanded_percentile" and np.array_equal(reps["m"], med)
    assert (est["m"].low, est["m"].high) == tuple(np.quantile(med, levels))
    assert est["m"].point == of(np.ones((1, 15)))[0]
    est, _ = estimates({"m": st}, r, ci="percentile")
    assert est["m"].method == "percentile" and (est["m"].low, est["m"].high) == tuple(np.quantile(med, [0.025, 0.975]))
    from scipy import special
    est, _ = estimates({"m": st}, r, ci="bca")
    jack = of(1.0 - np.eye(15))
    z0 = special.ndtri(np.mean(med < est["m"].point))
    d = jack.mean() - jack
    acc = np.sum(d ** 3) / (6 * np.sum(d ** 2) ** 1.5)
    q = [special.ndtr(z0 + (z0 + z) / (1 - acc * (z0 + z))) for z in special.ndtri([0.025, 0.975])]
    assert est["m"].method == "bca" and (est["m"].low, est["m"].high) == pytest.approx(tuple(np.percentile(med, 100 * np.array(q))), rel=1e-12)
    # a costly statistic on the first draws only
    est, reps = estimates({"m": Weighted(of, "percentile", max_resamples=300)}, r)
    assert reps["m"].shape == (300,) and est["m"].low == np.quantile(med[:300], 0.025)


def test_censoring_intervals_are_declared_statistics_that_honour_ci():
    """The Kaplan–Meier quartiles, the restricted-mean ratio with censoring before the horizon and the AFT refits were
    intervals built by hand with three percentile rules, ci= ignored; each now gets what ci asks for from the cell's
    draws: its declared default, the plain percentile interval, or BCa."""
    from lengthlens.analyses.censoring import KM_RESAMPLES, censoring_cell
    from lengthlens.stats.survival import kaplan_meier, restricted_means_many

    rng = np.random.default_rng(6)
    n = 14
    L, Ls = np.round(rng.lognormal(6, 0.6, n)), np.round(rng.lognormal(5.8, 0.6, n))
    budget = np.where(np.arange(n) % 2, 600.0, 900.0)  # two budgets: censoring comes before the horizon
    cut, cut_s = L >= budget, Ls >= budget
    L, Ls = np.minimum(L, budget), np.minimum(Ls, budget)
    counts = item_counts(n, 1500, rng)
    medians = np.array([kaplan_meier(L, cut, weights=c).median.point for c in counts[:KM_RESAMPLES]])
    medians = np.where(np.isnan(medians), np.inf, medians)
    default = censoring_cell(L, cut, budget, Ls, cut_s, budget, counts, aft_ci="bootstrap", n_resamples_aft=200)
    plain = censoring_cell(L, cut, budget, Ls, cut_s, budget, counts, ci="percentile", aft_ci="bootstrap",
                           n_resamples_aft=200)
    bca = censoring_cell(L, cut, budget, Ls, cut_s, budget, counts, ci="bca")
    lv = expanded_percentile_levels(n, 0.95)
    assert default.km.median.method == "expanded_percentile"
    assert (default.km.median.low, default.km.median.high) == pytest.approx(tuple(np.quantile(medians, lv)), rel=1e-14)
    assert plain.km.median.method == "percentile"
    assert (plain.km.median.low, plain.km.median.high) == pytest.approx(tuple(np.quantile(medians, [0.025, 0.975])),
                                                                        rel=1e-14)
    assert bca.km.median.method == "bca" and bca.km.median.point == default.km.median.point
    tau = default.rmst_tau
    assert np.any(cut & (L < tau)) or np.any(cut_s & (Ls < tau))  # the weighted restricted means are used
    ratio = (restricted_means_many(L, (~cut).astype(float), counts, tau)
             / restricted_means_many(Ls, (~cut_s).astype(float), counts, tau))
    assert default.rmst_ratio.method == "expanded_percentile" and default.rmst_ratio.note
    assert (default.rmst_ratio.low, default.rmst_ratio.high) == pytest.approx(tuple(np.quantile(ratio, lv)), rel=1e-14)
    assert plain.rmst_ratio.method == "percentile"
    assert plain.rmst_ratio.low == pytest.approx(np.quantile(ratio, 0.025), rel=1e-14)
    aft = default.gm_ratio_aft["lognormal"]
    beta = default.aft_boot["lognormal"].beta
    assert aft.method == "percentile" and beta.shape == (200,) and aft.undefined_resamples == int(np.isnan(beta).sum())
    assert (aft.low, aft.high) == pytest.approx(tuple(np.quantile(np.exp(beta[np.isfinite(beta)]), [0.025, 0.975])),
                                                rel=1e-12)


def _same_cell(c, cell):
    assert (c.n_items, c.n_runs, c.n_items_baseline) == (cell.n_items, cell.n_runs, cell.n_items_baseline)
    for m in ("lambda", "rounds_ratio"):
        assert (c[m].point, c[m].low, c[m].high, c[m].method) == (cell[m].point, cell[m].low, cell[m].high,
                                                                   cell[m].method), m
    for m, e in cell.estimates.items():
        assert c[m].method == e.method, m
        np.testing.assert_allclose([c[m].point, c[m].low, c[m].high], [e.point, e.low, e.high], rtol=1e-12, atol=0.0,
                                   err_msg=m)
    assert c.accuracy_test == cell.accuracy_test and c.drop_2pp_test == cell.drop_2pp_test


def test_compare_gives_an_arm_against_its_baseline_the_cell_tables_intervals(runs):
    """The same arm pair from compare() and from cells(), same seed and resamples: the same items, the same draws (the
    group's; a cell on fewer items draws its own, keyed by them), the same limits. λ and R/R* are ratios of integer
    sums, exact in any order: identical to the bit; sums of non-integer values (wall times, per-run ℓ̄) may be added
    in another order in the cell table's wider count-matrix product, so those agree to the last bits."""
    import polars as pl

    from lengthlens.analyses.cells import CellsAnalysis
    from lengthlens.analyses.engine import Settings, run_on
    from lengthlens.data.pairing import cell_units

    table = ll.cells(runs, n_resamples=1000)
    for cell in list(table)[:3]:
        arm = {"target": cell.target, "draft": cell.draft, "dataset": cell.dataset, "method": cell.method,
               "params": cell.params}
        _same_cell(ll.compare(runs, arm, {**arm, "method": "strict", "params": "strict"}, n_resamples=1000).cell, cell)
    # an arm missing three of its baseline's items: the cell table draws over its own items, and so does compare()
    units = cell_units(runs.paired)
    is_arm = pl.all_horizontal([pl.col(k) == v for k, v in arm.items()])
    dropped = sorted(units.filter(is_arm).get_column("item_id").unique().to_list())[:3]
    (short,) = run_on(runs, [CellsAnalysis()], Settings(n_resamples=1000),
                      units=units.filter(~(is_arm & pl.col("item_id").is_in(dropped))))
    cell = short.get(**arm)
    assert cell.n_items == cell.n_items_baseline - 3
    kept = [it for it in runs.paired.filter(is_arm).get_column("item_id").unique().to_list() if it not in dropped]
    _same_cell(ll.compare(runs, {**arm, "item_id": kept}, {**arm, "method": "strict", "params": "strict"},
                          n_resamples=1000).cell, cell)


def test_compare_pools_groups_each_drawn_as_its_cell(runs):
    """A comparison pooling two datasets resamples each dataset's items with that group's draws: its sums in every
    resample are the two cells' sums added."""
    from lengthlens.analyses.cells import CellsAnalysis
    from lengthlens.analyses.compare import _ok_runs, select
    from lengthlens.analyses.engine import Settings, _counts, group_items, groups_of, pooled_group
    from lengthlens.data.pairing import cell_units, pair
    from lengthlens.data.schema import GROUP_KEY, UNIT_KEY

    cell = next(c for c in ll.cells(runs, n_resamples=50) if c.n_items == c.n_items_baseline)
    arm = {"target": cell.target, "draft": cell.draft, "method": cell.method, "params": cell.params}
    t = _ok_runs(runs)
    units = pair(select(t, arm), select(t, {**arm, "method": "strict", "params": "strict"}), on=(*GROUP_KEY, *UNIT_KEY))
    items = group_items(runs)
    pooled = pooled_group(units, CellsAnalysis().fields, {"target": cell.target}, GROUP_KEY, items)
    settings = Settings(n_resamples=300)
    counts = _counts(pooled, pooled.cells[0], settings)
    by_group = {g.names: g for g in groups_of(cell_units(runs.paired), ("output_tokens",), items)}
    assert len(pooled.stratum_names) > 1
    for s, names in enumerate(pooled.stratum_names):
        inside = pooled.cells[0].strata == s
        full = next(g for n, g in by_group.items() if tuple(v for v in n if v) == names)
        mine = next(c for c in full.cells if c.key["method"] == cell.method and c.key["params"] == cell.params)
        assert tuple(np.array(pooled.cells[0].items)[inside]) == mine.items
        np.testing.assert_array_equal(counts[:, inside], _counts(full, mine, settings))
