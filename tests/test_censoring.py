"""Censoring-aware lengths against independent oracles: statsmodels KM, lifelines AFT, planted truth."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.duration.survfunc import SurvfuncRight

from lengthlens.analyses.censoring import censoring_cell
from lengthlens.stats.aft import DISTS, fit_aft
from lengthlens.stats.aft import fit_aft_bootstrap
from lengthlens.stats.intervals import quantiles_with_inf
from lengthlens.stats.survival import kaplan_meier

LEVELS = (0.25, 0.5, 0.75)


def _tied_censored(rng: np.random.Generator, n: int, frac: float):
    """Integer lengths (many ties) with random right-censoring, some censored at event times."""
    t = rng.integers(1, 40, size=n).astype(float)
    c = rng.random(n) < frac
    return t, c


def _sm_quantile(sf: SurvfuncRight, p: float):
    """statsmodels' quantile and interval, inf upper limits as None (our 'not identified')."""
    v = sf.quantile(p)
    lo, hi = sf.quantile_ci(p)
    conv = lambda a: None if (a is None or not np.isfinite(a)) else float(a)  # noqa: E731
    return conv(v), conv(lo), conv(hi)


# --------------------------------------------------------------------------------------------
# Kaplan–Meier
# --------------------------------------------------------------------------------------------


def _none(v: float) -> float | None:
    """A limit as statsmodels gives it: None where not identified (NaN here)."""
    return None if math.isnan(v) else v


@pytest.mark.parametrize("seed", range(40))
def test_km_matches_statsmodels(seed):
    rng = np.random.default_rng(seed)
    t, c = _tied_censored(rng, int(rng.integers(8, 120)), float(rng.uniform(0.0, 0.6)))
    km = kaplan_meier(t, c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sf = SurvfuncRight(t, (~c).astype(int))
        np.testing.assert_array_equal(km.times, sf.surv_times)
        np.testing.assert_allclose(km.n_at_risk, sf.n_risk)
        np.testing.assert_allclose(km.n_events, sf.n_events)
        np.testing.assert_allclose(km.survival, sf.surv_prob, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(km.survival_se, sf.surv_prob_se, rtol=1e-10, equal_nan=True)
        for p, q in zip((0.25, 0.5, 0.75), km.quantiles):
            value, lo, hi = _sm_quantile(sf, p)
            assert (_none(q.low), _none(q.high)) == (lo, hi)
            # Where S equals 1-p exactly, statsmodels' exp(sum(log)) rounding picks an end of the
            # step at random; we take the midpoint (tested separately). Elsewhere: identical.
            if np.min(np.abs(km.survival - (1 - p))) > 1e-9:
                assert _none(q.point) == value


def test_km_compared_quantiles_often_enough():
    """Guard: the statsmodels comparison above does compare most quantiles (not all skipped)."""
    compared = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        t, c = _tied_censored(rng, int(rng.integers(8, 120)), float(rng.uniform(0.0, 0.6)))
        km = kaplan_meier(t, c)
        compared += sum(np.min(np.abs(km.survival - (1 - p))) > 1e-9 for p in LEVELS)
    assert compared >= 80


@pytest.mark.parametrize("n", [4, 9, 12, 13, 50])
def test_km_without_censoring_is_the_empirical_distribution(n):
    rng = np.random.default_rng(n)
    t = rng.integers(100, 130, size=n).astype(float)
    km = kaplan_meier(t, np.zeros(n, dtype=bool))
    assert km.median.point == np.median(t)
    grid = np.arange(95, 135)
    np.testing.assert_allclose(km.survival_at(grid), [(t > g).mean() for g in grid], atol=1e-12)


def test_km_median_not_identified_when_over_half_censored():
    budget = 512.0
    t = np.array([100, 150, 200, 300, 400] + [budget] * 7)
    c = t == budget
    km = kaplan_meier(t, c)
    # S = 11/12, 10/12, 9/12 at 100, 150, 200: exactly 0.75 on [200, 300), so the midpoint.
    assert km.q25.point == 250.0
    # The median is not identified, but a lower confidence limit still is (statsmodels agrees).
    assert math.isnan(km.median.point) and math.isnan(km.median.high)
    assert km.median.low == SurvfuncRight(t, (~c).astype(int)).quantile_ci(0.5)[0] == 150.0
    assert "censored" in km.median.note
    assert math.isnan(km.q75.point) and km.q75.note


def test_km_weights_equal_repetition():
    rng = np.random.default_rng(7)
    t, c = _tied_censored(rng, 30, 0.3)
    w = rng.integers(0, 4, size=30)
    a = kaplan_meier(t, c, weights=w)
    b = kaplan_meier(np.repeat(t, w), np.repeat(c, w))
    np.testing.assert_array_equal(a.times, b.times)
    np.testing.assert_allclose(a.survival, b.survival, rtol=1e-13)
    np.testing.assert_allclose(a.survival_se, b.survival_se, rtol=1e-12, equal_nan=True)
    assert (a.median, a.q25, a.q75) == (b.median, b.q25, b.q75)


@pytest.mark.parametrize("seed", range(5))
def test_restricted_mean_with_one_budget_is_mean_of_min(seed):
    rng = np.random.default_rng(seed)
    budget = 600.0
    true = np.ceil(rng.lognormal(6.0, 0.7, size=80))
    L, c = np.minimum(true, budget), true >= budget
    km = kaplan_meier(L, c)
    assert km.restricted_mean(budget) == pytest.approx(np.minimum(L, budget).mean(), rel=1e-12)
    for tau in (50.0, 333.5, 599.0):
        assert km.restricted_mean(tau) == pytest.approx(np.minimum(L, tau).mean(), rel=1e-12)
    if c.any():
        with pytest.raises(ValueError, match="not identified"):
            km.restricted_mean(budget + 1)


def test_km_frames_render():
    km = kaplan_meier([3, 5, 5, 8, 9, 9], [False, False, True, False, True, True])
    assert list(km.to_frame().columns)[:4] == ["length", "n_at_risk", "n_events", "survival"]
    assert "<table" in km._repr_html_()


# --------------------------------------------------------------------------------------------
# AFT
# --------------------------------------------------------------------------------------------


def _paired_censored(rng, n=40, beta=0.4, sigma=0.6, tau=0.5, budget=np.exp(6.6)):
    u = rng.normal(0, tau, n)
    x = np.r_[np.ones(n), np.zeros(n)]
    T = np.ceil(np.exp(6 + beta * x + np.r_[u, u] + sigma * rng.normal(size=2 * n)))
    c = T >= budget
    return np.minimum(T, np.floor(budget)), c, x


@pytest.mark.parametrize("dist", ["lognormal", "weibull"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aft_matches_lifelines(dist, seed):
    lifelines = pytest.importorskip("lifelines")
    rng = np.random.default_rng(seed)
    T, c, x = _paired_censored(rng)
    assert 0.1 < c[x == 1].mean() < 0.6
    df = pd.DataFrame({"T": T, "E": (~c).astype(int), "x": x})
    ours = fit_aft(T, c, x, dist=dist)
    assert ours.converged
    Fitter = lifelines.LogNormalAFTFitter if dist == "lognormal" else lifelines.WeibullAFTFitter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = Fitter().fit(df, "T", "E", fit_options={"gtol": 1e-9})
    p = ref.params_
    if dist == "lognormal":
        a, beta, sigma = p[("mu_", "Intercept")], p[("mu_", "x")], math.exp(p[("sigma_", "Intercept")])
    else:  # lifelines: S(t) = exp(-(t/lambda)^rho), log lambda = a + beta x, sigma = 1/rho
        a, beta, sigma = p[("lambda_", "Intercept")], p[("lambda_", "x")], math.exp(-p[("rho_", "Intercept")])
    assert ours.beta == pytest.approx(beta, rel=1e-4, abs=1e-6)
    assert ours.intercept == pytest.approx(a, rel=1e-4)
    assert ours.sigma == pytest.approx(sigma, rel=1e-4)
    # Our likelihood is of T (Jacobian included) and at least as high as lifelines' optimum.
    assert ours.loglik == pytest.approx(ref.log_likelihood_, rel=1e-8)
    assert ours.loglik >= ref.log_likelihood_ - 1e-8
    # Model-based SE agrees with lifelines' (same observed information, delta method).
    assert ours.beta_se == pytest.approx(ref.standard_errors_[("mu_" if dist == "lognormal" else "lambda_", "x")], rel=2e-3)


@pytest.mark.parametrize("dist", ["lognormal", "weibull"])
def test_aft_weights_equal_repetition(dist):
    rng = np.random.default_rng(11)
    T, c, x = _paired_censored(rng, n=25)
    w = rng.integers(0, 4, size=len(T))
    w[[0, 25]] = 1  # keep both arms populated
    a = fit_aft(T, c, x, weights=w, dist=dist)
    b = fit_aft(np.repeat(T, w), np.repeat(c, w), np.repeat(x, w), dist=dist)
    for f in ("intercept", "beta", "sigma", "loglik", "beta_se", "n_obs", "n_events"):
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9, abs=1e-11), f


@pytest.mark.parametrize("dist", ["lognormal", "weibull"])
def test_aft_bootstrap_rows_equal_single_weighted_fits(dist):
    rng = np.random.default_rng(5)
    n = 30
    T, c, x = _paired_censored(rng, n=n)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=40)
    W = counts[:, np.r_[np.arange(n), np.arange(n)]]
    start = fit_aft(T, c, x, dist=dist)
    boot = fit_aft_bootstrap(T, c, x, W, dist, start=start)
    for b in range(0, 40, 7):
        single = fit_aft(T, c, x, weights=W[b], dist=dist)
        if math.isinf(boot.beta[b]):
            assert single.beta == boot.beta[b]
        else:
            assert boot.beta[b] == pytest.approx(single.beta, rel=1e-8, abs=1e-10)
    assert boot.n_failed == 0


def test_aft_lognormal_without_censoring_is_ratio_of_geometric_means():
    rng = np.random.default_rng(2)
    L = np.ceil(rng.lognormal(6.3, 0.9, 30))
    Ls = np.ceil(rng.lognormal(6.0, 0.4, 30))  # different spreads: arithmetic ratio differs
    x = np.r_[np.ones(30), np.zeros(30)]
    fit = fit_aft(np.r_[L, Ls], np.zeros(60, bool), x)
    geo = math.exp(np.log(L).mean() - np.log(Ls).mean())
    assert fit.lambda_aft == pytest.approx(geo, rel=1e-10)
    # ... and the ML sigma is the pooled residual SD with denominator n (no censoring: OLS).
    resid = np.r_[np.log(L) - np.log(L).mean(), np.log(Ls) - np.log(Ls).mean()]
    assert fit.sigma == pytest.approx(math.sqrt(np.mean(resid**2)), rel=1e-10)


def test_aft_all_relaxed_censored_has_no_mle():
    L = np.full(6, 512.0)
    Ls = np.array([100.0, 200, 300, 400, 512, 250])
    c = np.r_[np.ones(6, bool), np.array([0, 0, 0, 0, 1, 0], bool)]
    fit = fit_aft(np.r_[L, Ls], c, np.r_[np.ones(6), np.zeros(6)])
    assert fit.beta == math.inf and not fit.converged and "every relaxed run is censored" in fit.reason


def test_percentile_matches_numpy_and_handles_infinity():
    rng = np.random.default_rng(0)
    v = rng.normal(size=999)
    for q in (0.025, 0.5, 0.975):
        assert quantiles_with_inf(v, (q,))[0] == pytest.approx(np.quantile(v, q), rel=1e-14)
    v[:30] = np.inf  # 3 % of resamples with every relaxed run censored
    assert quantiles_with_inf(v, (0.975,))[0] == math.inf
    assert quantiles_with_inf(v, (0.025,))[0] == pytest.approx(np.quantile(v[30:], 0.025 * 998 / 968), abs=0.05)
    assert math.isnan(quantiles_with_inf(np.full(5, np.nan), (0.5,))[0])


# --------------------------------------------------------------------------------------------
# Cell
# --------------------------------------------------------------------------------------------


def _cell_data(rng, n, beta=math.log(1.5), sigma=0.6, tau=0.5, budget=1835):
    """Paired log-normal lengths, baseline median 1000, one budget: ~40 % of relaxed runs censored."""
    u = rng.normal(0.0, tau, n)
    T = np.ceil(np.exp(math.log(1000) + beta + u + sigma * rng.normal(size=n)))
    Ts = np.ceil(np.exp(math.log(1000) + u + sigma * rng.normal(size=n)))
    return np.minimum(T, budget), T >= budget, np.minimum(Ts, budget), Ts >= budget


def test_censoring_cell_values_and_row():
    rng = np.random.default_rng(3)
    n, budget = 60, 1835
    L, c, Ls, cs = _cell_data(rng, n)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=300)
    cell = censoring_cell(L, c, budget, Ls, cs, budget, counts, n_resamples_aft=200, aft_ci="bootstrap", ci="percentile",
                          aft_dists=DISTS)
    assert cell.censored_frac == c.mean() and cell.censored_frac_star == cs.mean()
    assert cell.lambda_plain.point == pytest.approx(L.mean() / Ls.mean(), rel=1e-14)
    keep = ~c & ~cs
    assert cell.n_uncensored_pairs == keep.sum()
    assert cell.lambda_uncensored_pairs.point == pytest.approx(L[keep].mean() / Ls[keep].mean(), rel=1e-14)
    # One shared budget: the restricted mean ratio is plain lambda (the documented non-news).
    assert cell.rmst_tau == budget
    assert cell.rmst_ratio.point == pytest.approx(cell.lambda_plain.point, rel=1e-12)
    assert (cell.rmst_ratio.low, cell.rmst_ratio.high) == pytest.approx((cell.lambda_plain.low, cell.lambda_plain.high),
                                                                        rel=1e-12)
    # Plain-lambda bootstrap: the percentile of per-resample ratios of weighted means.
    r = (counts @ L) / (counts @ Ls)
    assert (cell.lambda_plain.low, cell.lambda_plain.high) == pytest.approx((np.quantile(r, 0.025), np.quantile(r, 0.975)),
                                                                            rel=1e-12)
    for dist in ("lognormal", "weibull"):
        fit = fit_aft(np.r_[L, Ls], np.r_[c, cs], np.r_[np.ones(n), np.zeros(n)], dist=dist)
        assert cell.aft[dist].lambda_aft == pytest.approx(fit.lambda_aft, rel=1e-12)
        est = cell.gm_ratio_aft[dist]
        assert est.low < fit.lambda_aft < est.high and est.method == "percentile"
        assert len(cell.aft_boot[dist].beta) == 200
    row = cell.to_row()
    for col in (
        "gm_ratio_aft_lognormal", "gm_ratio_aft_lognormal_lo", "gm_ratio_aft_lognormal_hi",
        "gm_ratio_aft_weibull", "gm_ratio_aft_weibull_lo", "gm_ratio_aft_weibull_hi",
        "lambda_aft_lognormal", "lambda_aft_lognormal_lo", "lambda_aft_weibull_hi",  # old names, one release
        "lambda_plain", "lambda_uncensored_pairs", "n_uncensored_pairs", "censored_frac",
        "censored_frac_star", "km_median", "km_median_lo", "km_median_hi", "km_median_star",
        "km_q75_reason", "rmst_ratio",
    ):
        assert col in row
    assert all(np.isscalar(v) or v is None for v in row.values())
    pd.DataFrame([row])  # flat: one CSV row
    assert "<table" in cell._repr_html_()


def test_censoring_cell_duplicated_seeds_via_item_index():
    """Two identical seeds per item (runs aligned) give the same estimates as one run per item."""
    rng = np.random.default_rng(4)
    n = 20
    L, c, Ls, cs = _cell_data(rng, n)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=100)
    one = censoring_cell(L, c, 1835, Ls, cs, 1835, counts, n_resamples_aft=100, aft_ci="bootstrap", aft_dists=DISTS)
    idx = np.repeat(np.arange(n), 2)
    two = censoring_cell(L[idx], c[idx], 1835, Ls[idx], cs[idx], 1835, counts, item_index=idx,
                         n_resamples_aft=100, aft_ci="bootstrap", aft_dists=DISTS)
    one_s = censoring_cell(L, c, 1835, Ls, cs, 1835, counts, aft_dists=DISTS)
    two_s = censoring_cell(L[idx], c[idx], 1835, Ls[idx], cs[idx], 1835, counts, item_index=idx, aft_dists=DISTS)
    for dist in ("lognormal", "weibull"):
        assert two.aft[dist].lambda_aft == pytest.approx(one.aft[dist].lambda_aft, rel=1e-9)
        np.testing.assert_allclose(two.aft_boot[dist].beta, one.aft_boot[dist].beta, rtol=1e-7, atol=1e-9)
        # Sandwich by item: a duplicated run doubles the information and the item's score alike.
        a, b = two_s.gm_ratio_aft[dist], one_s.gm_ratio_aft[dist]
        assert (a.low, a.high) == pytest.approx((b.low, b.high), rel=1e-6)
    assert (two.lambda_plain.low, two.lambda_plain.high) == pytest.approx((one.lambda_plain.low, one.lambda_plain.high),
                                                                          rel=1e-12)
    assert two.n_uncensored_pairs == 2 * one.n_uncensored_pairs


def test_censoring_cell_with_everything_censored_on_relaxed_side():
    rng = np.random.default_rng(8)
    n = 12
    Ls = np.ceil(rng.lognormal(6, 0.3, n))
    L = np.full(n, 4096.0)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=50)
    cell = censoring_cell(L, np.ones(n, bool), 4096, Ls, np.zeros(n, bool), 4096, counts, n_resamples_aft=50)
    row = cell.to_row()
    assert row["gm_ratio_aft_lognormal"] == math.inf and "every relaxed run" in row["gm_ratio_aft_lognormal_reason"]
    assert math.isnan(row["km_median"]) and row["km_median_reason"]
    assert row["n_uncensored_pairs"] == 0 and math.isnan(row["lambda_uncensored_pairs"])


# --------------------------------------------------------------------------------------------
# Simulation with a planted time ratio under heavy censoring
# --------------------------------------------------------------------------------------------

PLANTED = 1.5  # time ratio; with a common sigma also the ratio of medians and of means


def _simulate(n_sims: int, n_items: int, n_resamples: int, seed: int):
    rng = np.random.default_rng(seed)
    hits, plain, plain_hits, aft, cens = [], [], [], [], []
    for _ in range(n_sims):
        L, c, Ls, cs = _cell_data(rng, n_items, beta=math.log(PLANTED))
        counts = rng.multinomial(n_items, np.full(n_items, 1 / n_items), size=n_resamples)
        cell = censoring_cell(L, c, 1835, Ls, cs, 1835, counts, n_resamples_aft=n_resamples)
        lo, hi = cell.lambda_aft["lognormal"].low, cell.lambda_aft["lognormal"].high
        hits.append(lo <= PLANTED <= hi)
        aft.append(math.log(cell.aft["lognormal"].lambda_aft))
        plain.append(cell.lambda_plain.point)
        plain_hits.append(PLANTED in cell.lambda_plain.confidence_interval)
        cens.append(cell.censored_frac)
    return np.array(hits), np.array(plain), np.array(plain_hits), np.array(aft), np.array(cens)


def test_planted_time_ratio_recovered_fast():
    hits, plain, plain_hits, log_aft, cens = _simulate(30, 60, 200, seed=123)
    assert 0.3 <= cens.mean() <= 0.5
    assert hits.mean() >= 0.75
    assert abs(log_aft.mean() - math.log(PLANTED)) < 0.06
    assert plain.mean() < 0.92 * PLANTED  # plain lambda visibly biased down
    assert plain_hits.mean() < 0.5


@pytest.mark.slow
def test_planted_time_ratio_coverage_200_sims():
    n_sims = 200
    hits, plain, plain_hits, log_aft, cens = _simulate(n_sims, 80, 1000, seed=2026)
    assert 0.3 <= cens.mean() <= 0.5
    # Coverage within a binomial tolerance of 95 % (3 SDs: 0.95 +/- 0.046).
    tol = 3 * math.sqrt(0.95 * 0.05 / n_sims)
    assert abs(hits.mean() - 0.95) <= tol, hits.mean()
    # Point estimate unbiased on the log scale to within 3 Monte-Carlo SEs.
    se = log_aft.std(ddof=1) / math.sqrt(n_sims)
    assert abs(log_aft.mean() - math.log(PLANTED)) < 3 * se + 0.01
    # Plain lambda: biased down by more than 10 %, and its interval rarely covers the truth.
    assert plain.mean() < 0.9 * PLANTED
    assert stats.binomtest(int(plain_hits.sum()), n_sims, 0.95).pvalue < 1e-6


def test_restricted_mean_with_varying_budgets_matches_statsmodels_integral():
    """Budgets that differ per run: KM (not the plain mean) is what identifies E[min(L, tau)]."""
    rng = np.random.default_rng(9)
    true = np.ceil(rng.lognormal(6.0, 0.6, 200))
    budget = rng.choice([256.0, 512.0, 1024.0], size=200)
    L, c = np.minimum(true, budget), true >= budget
    km = kaplan_meier(L, c)
    sf = SurvfuncRight(L, (~c).astype(int))
    tau = 700.0
    t = sf.surv_times[sf.surv_times < tau]
    s = np.r_[1.0, sf.surv_prob[: len(t)]]
    expected = float(np.sum(s * np.diff(np.r_[0.0, t, tau])))
    assert km.restricted_mean(tau) == pytest.approx(expected, rel=1e-12)
    assert km.restricted_mean(tau) > np.minimum(L, tau).mean()  # plain mean understates
    assert km.restricted_mean(tau) == pytest.approx(np.minimum(true, tau).mean(), rel=0.05)


def test_cell_bootstrap_restricted_means_equal_weighted_km():
    rng = np.random.default_rng(10)
    n = 40
    L, c, Ls, cs = _cell_data(rng, n)
    budget = np.where(rng.random(n) < 0.5, 1835.0, 1500.0)  # per-run budgets on the relaxed side
    L, c = np.minimum(L, budget), c | (L >= budget)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=60)
    cell = censoring_cell(L, c, budget, Ls, cs, 1835, counts, n_resamples_aft=20)
    assert cell.budgets_differ and cell.rmst_tau == 1835.0
    ratios = [
        kaplan_meier(L, c, weights=w).restricted_mean(cell.rmst_tau)
        / kaplan_meier(Ls, cs, weights=w).restricted_mean(cell.rmst_tau)
        for w in counts
    ]
    # A restricted mean of weighted KM curves is not a function of sums: the expanded percentile interval, whose
    # levels at 40 items are Φ(∓ sqrt(40/39) t_39(0.975)) (Hesterberg 2015; scipy's t quantile here).
    from scipy import stats

    a = stats.norm.cdf(-np.sqrt(40 / 39) * stats.t.ppf(0.975, 39))
    assert cell.rmst_ratio.method == "expanded_percentile"
    assert tuple(cell.rmst_ratio.confidence_interval) == pytest.approx((np.quantile(ratios, a), np.quantile(ratios, 1 - a)),
                                                                       rel=1e-12)


def test_censoring_cell_zero_length_run_skips_aft_with_reason():
    rng = np.random.default_rng(12)
    n = 12
    L, c, Ls, cs = _cell_data(rng, n)
    Ls[3], cs[3] = 0.0, False  # an empty completion: log-length undefined
    counts = rng.multinomial(n, np.full(n, 1 / n), size=30)
    row = censoring_cell(L, c, 1835, Ls, cs, 1835, counts, n_resamples_aft=30, aft_dists=DISTS).to_row()
    assert math.isnan(row["gm_ratio_aft_weibull"]) and "length 0" in row["gm_ratio_aft_weibull_reason"]
    assert row["lambda_plain"] == pytest.approx(L.mean() / Ls.mean())


def test_inputs_are_validated():
    counts = np.ones((5, 3), dtype=int)
    with pytest.raises(ValueError, match="one run per item"):
        censoring_cell([1, 2], [False, False], 10, [1, 2], [False, False], 10, counts)
    with pytest.raises(ValueError, match="positive"):
        fit_aft([0.0, 1.0], [False, False], [1, 0])
    with pytest.raises(ValueError, match="0/1"):
        fit_aft([1.0, 2.0], [False, False], [2, 0])


def test_weibull_aft_is_not_fitted_by_default_and_the_aft_ratio_is_named_a_geometric_mean_ratio():
    rng = np.random.default_rng(5)
    L, c, Ls, cs = _cell_data(rng, 20)
    counts = rng.multinomial(20, np.full(20, 1 / 20), size=50)
    cell = censoring_cell(L, c, 1835, Ls, cs, 1835, counts)
    row = cell.to_row()
    assert set(cell.aft) == {"lognormal"} and not any("weibull" in k for k in row)
    assert row["gm_ratio_aft_lognormal"] == row["lambda_aft_lognormal"] == cell.aft["lognormal"].lambda_aft
    assert cell.lambda_aft is cell.gm_ratio_aft
    assert "geometric-mean" in cell.to_frame()["estimate"].iloc[-1]


@pytest.mark.slow
def test_restricted_mean_ratio_with_differing_budgets_covers_at_12_items():
    """200 cells of 12 items, per-run budgets 500/800/1500 (censoring before the horizon, so the weighted-KM path):
    the expanded percentile interval covers the population ratio of restricted means within 93-97 % (give or take
    3 binomial SEs, 4.6 points); the plain percentile interval measured about 91-93 % in the same setting."""
    from lengthlens.stats.resample import item_counts

    rng = np.random.default_rng(2)
    N = 200_000
    mu = rng.normal(6, 0.8, N)
    pop_s = np.exp(mu + rng.normal(0, 0.3, N))
    pop = np.exp(mu + rng.normal(np.log(1.3), 0.3, N) + rng.normal(0, 0.3, N))
    hit, n = 0, 12
    for _ in range(200):
        m, la = rng.normal(6, 0.8, n), rng.normal(np.log(1.3), 0.3, n)
        Ls, L = np.round(np.exp(m + rng.normal(0, 0.3, n))), np.round(np.exp(m + la + rng.normal(0, 0.3, n)))
        b, bs = rng.choice([500.0, 800.0, 1500.0], n), rng.choice([500.0, 800.0, 1500.0], n)
        cell = censoring_cell(np.minimum(L, b), L >= b, b, np.minimum(Ls, bs), Ls >= bs, bs, item_counts(n, 1000, rng),
                              n_resamples_aft=10)
        tau = cell.rmst_tau
        truth = np.minimum(pop, tau).mean() / np.minimum(pop_s, tau).mean()
        hit += cell.rmst_ratio.low <= truth <= cell.rmst_ratio.high
    assert 0.93 - 0.046 <= hit / 200 <= 0.97 + 0.046, hit


def test_a_kaplan_meier_quantile_beyond_the_budget_prints_as_open(tmp_path):
    """Issue 31: an upper limit (or a quartile) the curve does not reach before the budget is "> budget", not NaN."""
    from lengthlens.report.columns import declared_columns

    cols = {c.name: c for c in declared_columns("censoring", pd.DataFrame(columns=["km_median", "km_median_star"]))}
    row = {"km_median": 2400.0, "km_median_lo": 1800.0, "km_median_hi": float("nan"), "budget": 4096,
           "km_median_star": float("nan"), "km_median_star_lo": 3000.0, "km_median_star_hi": float("nan"),
           "budget_star": 8192}
    assert cols["km_median"].parts(row)[:2] == ("2,400", "[1,800, > 4,096]")
    assert cols["km_median_star"].parts(row)[:2] == ("> 8,192", "[3,000, > 8,192]")
    closed = {**row, "km_median_hi": 3100.0}
    assert cols["km_median"].parts(closed)[:2] == ("2,400", "[1,800, 3,100]")
    # nothing identified at all stays missing
    empty = {**row, "km_median": float("nan"), "km_median_lo": float("nan")}
    assert cols["km_median"].parts(empty)[:2] == ("–", "")
