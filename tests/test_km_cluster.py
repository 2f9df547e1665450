"""Kaplan–Meier quantile intervals by item-level resampling: against a plain loop of weighted KM fits, and covering
with several seeds per item where the run-level Brookmeyer–Crowley interval does not."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lengthlens.analyses.censoring import KM_RESAMPLES, censoring_cell
from lengthlens.stats.resample import item_counts
from lengthlens.stats.survival import kaplan_meier, km_quantiles_many


def _runs(rng, n, seeds, budget=np.inf):
    """Lengths of n items x seeds runs with an item effect (log-sd 0.8) and run noise (0.3), rounded (ties)."""
    mu = rng.normal(6, 0.8, n)
    item = np.repeat(np.arange(n), seeds)
    L = np.round(np.exp(mu[item] + rng.normal(0, 0.3, item.size)))
    return np.minimum(L, budget), L >= budget, item


def test_weighted_quantiles_equal_a_loop_of_weighted_kaplan_meier_fits():
    rng = np.random.default_rng(3)
    L, cut, item = _runs(rng, 12, 3, budget=700.0)
    W = item_counts(12, 300, rng)[:, item]
    q = km_quantiles_many(L, ~cut, W)
    for b in range(len(W)):
        km = kaplan_meier(L, cut, weights=W[b])
        ref = [np.inf if np.isnan(e.point) else e.point for e in km.quantiles]
        assert q[b].tolist() == ref


@pytest.mark.parametrize("n_items, seeds, early", [(15, 2, 0.15), (130, 3, 0.0), (130, 3, 0.1), (86, 3, 0.02)])
def test_item_weights_give_every_resample_s_curve_at_once_as_a_loop_of_weighted_fits_does(n_items, seeds, early):
    """Item weights (B, n_items) with each run's item, all rows at once and in blocks, against one weighted KM fit per
    resample (its survival checked against lifelines' weighted KaplanMeierFitter): censoring at the budget only (the
    quantiles from the event counts alone), and before it too (some rows' quantiles from the product); short rows and
    long ones (searched chunk by chunk)."""
    from lifelines import KaplanMeierFitter

    rng = np.random.default_rng(n_items + int(100 * early))
    L, cut, item = _runs(rng, n_items, seeds, budget=500.0)
    cut |= rng.random(L.size) < early  # censoring before the budget too
    counts = item_counts(n_items, 120, rng).astype(np.uint8)
    counts[5] = 0  # a row with no weight: NaN
    q = km_quantiles_many(L, ~cut, counts, item=item, block=7)
    assert np.isnan(q[5]).all()
    counts[5] = 1
    fitter = KaplanMeierFitter()
    q[5] = km_quantiles_many(L, ~cut, counts[5:6], item=item)[0]
    for b in range(len(counts)):
        w = counts[b][item].astype(float)
        km = kaplan_meier(L, cut, weights=w)
        assert q[b].tolist() == [np.inf if np.isnan(e.point) else e.point for e in km.quantiles]
        if b < 10:
            keep = w > 0
            fitter.fit(L[keep], ~cut[keep], weights=w[keep])
            sf = fitter.survival_function_.iloc[:, 0]
            np.testing.assert_allclose(km.survival, sf.loc[km.times].to_numpy(), rtol=1e-12)


def test_cell_median_interval_is_the_expanded_percentile_interval_of_item_resampled_medians():
    rng = np.random.default_rng(8)
    L, cut, item = _runs(rng, 10, 4)
    Ls, cut_s, _ = _runs(rng, 10, 4)
    counts = item_counts(10, 500, rng)
    cell = censoring_cell(L, cut, None, Ls, cut_s, None, counts, item_index=item)
    medians = [kaplan_meier(L, cut, weights=c[item]).median.point for c in counts[:KM_RESAMPLES]]
    # the expanded percentile levels at 10 items: Φ(∓ sqrt(10/9) t_9(0.975)) (Hesterberg 2015)
    a = stats.norm.cdf(-np.sqrt(10 / 9) * stats.t.ppf(0.975, 9))
    assert cell.km.median.method == "expanded_percentile"
    assert (cell.km.median.low, cell.km.median.high) == pytest.approx(tuple(np.quantile(medians, [a, 1 - a])), rel=1e-12)


def test_cluster_median_interval_covers_with_four_seeds_per_item():
    """200 cells of 12 items x 4 seeds (truth: the population median, exp(6)): the item-level interval covers about
    95 % (0.90 is three binomial SEs below it); the run-level Brookmeyer–Crowley one about 72 %."""
    rng = np.random.default_rng(1)
    truth = float(np.exp(6.0))  # median of exp(N(6, 0.8) + N(0, 0.3)) is exp(6)
    hit = bc = 0
    for _ in range(200):
        L, cut, item = _runs(rng, 12, 4)
        cell = censoring_cell(L, cut, None, L, cut, None, item_counts(12, 400, rng), item_index=item)
        hit += cell.km.median.low <= truth <= cell.km.median.high
        km = kaplan_meier(L, cut)
        bc += km.median.low <= truth <= km.median.high
    assert hit / 200 >= 0.90 and bc / 200 < 0.85, (hit, bc)
