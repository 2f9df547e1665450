"""Cluster-robust AFT interval: scores at the MLE, SE against a plain numerical sandwich, coverage by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from lengthlens.analyses.censoring import censoring_cell
from lengthlens.stats.aft import fit_aft
from lengthlens.stats.aft import fit_aft_many
from lengthlens.stats.aft import aft_sandwich, aft_scores


def _paired(rng, n_items, seeds=2, beta=math.log(1.4), budget=2500.0):
    """Items with a shared random effect, ``seeds`` runs per arm per item, one budget (some censoring)."""
    u = np.repeat(rng.normal(0, 0.5, n_items), seeds)
    items = np.repeat(np.arange(n_items), seeds)
    T1 = np.exp(np.log(1000) + beta + u + 0.6 * rng.normal(size=u.size))
    T0 = np.exp(np.log(1000) + u + 0.6 * rng.normal(size=u.size))
    L = np.r_[np.minimum(T1, budget), np.minimum(T0, budget)]
    cens = np.r_[T1 >= budget, T0 >= budget]
    x = np.r_[np.ones(u.size), np.zeros(u.size)]
    return L, cens, x, np.r_[items, items]


def _oracle_se(L, cens, x, clusters, dist):
    """Sandwich SE of beta written plainly: theta = (a, beta, log sigma), finite-difference scores and Hessian."""
    y = np.log(L)
    law = stats.norm if dist == "lognormal" else stats.gumbel_l

    def loglik_runs(th):
        a, b, ls = th
        s = math.exp(ls)
        z = (y - a - b * x) / s
        return np.where(cens, law.logsf(z), law.logpdf(z) - ls)

    res = optimize.minimize(lambda th: -loglik_runs(th).sum(), x0=[y.mean(), 0.0, 0.0], method="BFGS",
                            options={"gtol": 1e-10})
    th, h = res.x, 1e-5
    S = np.stack([(loglik_runs(th + h * e) - loglik_runs(th - h * e)) / (2 * h) for e in np.eye(3)], axis=1)
    def total(t):
        return loglik_runs(t).sum()

    E = np.eye(3)
    H = np.array([[(total(th + h * E[i] + h * E[j]) - total(th + h * E[i] - h * E[j])
                    - total(th - h * E[i] + h * E[j]) + total(th - h * E[i] - h * E[j])) / (4 * h * h)
                   for j in range(3)] for i in range(3)])
    G = len(np.unique(clusters))
    U = np.stack([S[clusters == g].sum(axis=0) for g in np.unique(clusters)])
    Hinv = np.linalg.inv(-H)
    V = Hinv @ U.T @ U @ Hinv * G / (G - 1)
    return th[1], math.sqrt(V[1, 1])


@pytest.mark.parametrize("dist", ["lognormal", "weibull"])
def test_scores_sum_to_zero_at_the_mle(dist):
    L, cens, x, _ = _paired(np.random.default_rng(1), 15)
    fit = fit_aft(L, cens, x, dist=dist)
    s = aft_scores(fit, L, cens, x)
    assert cens.any() and fit.converged
    assert np.abs(s.sum(axis=0)).max() < 1e-6 * np.abs(s).sum()


@pytest.mark.parametrize("dist", ["lognormal", "weibull"])
def test_sandwich_se_equals_plain_numerical_sandwich(dist):
    L, cens, x, items = _paired(np.random.default_rng(2), 12)
    fit = fit_aft(L, cens, x, dist=dist)
    sw = aft_sandwich(fit, L, cens, x, items)
    beta, se = _oracle_se(L, cens, x, items, dist)
    assert fit.beta == pytest.approx(beta, abs=1e-5)
    assert sw.beta_se == pytest.approx(se, rel=1e-3)
    t = stats.t.ppf(0.975, 11)
    assert tuple(sw.ci) == pytest.approx((math.exp(fit.beta - t * sw.beta_se), math.exp(fit.beta + t * sw.beta_se)), rel=1e-12)
    # Pairing pays: the item effect shared by both arms cancels in the contrast, which the
    # model-based SE (runs independent) cannot see, so the clustered SE is smaller here.
    assert sw.beta_se < fit.beta_se


def test_censoring_cell_defaults_to_sandwich_and_keeps_bootstrap_option():
    L, cens, x, items = _paired(np.random.default_rng(3), 12, seeds=1)
    n = 12
    counts = np.random.default_rng(4).multinomial(n, np.full(n, 1 / n), size=200)
    args = (L[:n], cens[:n], 2500, L[n:], cens[n:], 2500, counts)
    cell = censoring_cell(*args)
    fit = fit_aft(L, cens, x)
    sw = aft_sandwich(fit, L, cens, x, items).ci
    assert (cell.lambda_aft["lognormal"].low, cell.lambda_aft["lognormal"].high) == pytest.approx((sw.low, sw.high), rel=1e-12)
    assert cell.to_row()["aft_ci"] == "sandwich" and cell.to_row()["lambda_aft_lognormal_boot_failed"] is None
    boot = censoring_cell(*args, aft_ci="bootstrap", n_resamples_aft=100)
    assert boot.lambda_aft["lognormal"].low != cell.lambda_aft["lognormal"].low and len(boot.aft_boot["lognormal"].beta) == 100
    with pytest.raises(ValueError, match="aft_ci"):
        censoring_cell(*args, aft_ci="wald")


@pytest.mark.slow
def test_sandwich_coverage_at_12_items():
    """Planted time ratio 1.4, item effects, ~10 % censoring: the t(G-1) sandwich covers ~95 % at 12 items."""
    rng = np.random.default_rng(2026)
    n_sims, hits = 1000, 0
    for _ in range(n_sims):
        L, cens, x, items = _paired(rng, 12, seeds=1)
        lo, hi = aft_sandwich(fit_aft(L, cens, x), L, cens, x, items).ci
        hits += lo <= 1.4 <= hi
    # 0.95 +/- 3 binomial SDs (0.021).
    assert abs(hits / n_sims - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / n_sims), hits / n_sims


@pytest.mark.parametrize("dist", ["lognormal", "weibull"])
def test_fits_of_many_data_sets_at_once_equal_one_fit_each(dist):
    """fit_aft_many against fit_aft per data set: regular ones (with and without censoring, 12-400 runs), one
    where every relaxed run is censored (no MLE), one where no run is censored; and the sandwich from its Hessian."""
    rng = np.random.default_rng(11)
    data = [_paired(rng, n, budget=b)[:3] for n, b in ((12, 2500.0), (60, 1800.0), (200, 1e9), (30, 900.0))]
    L, cens, x, _ = _paired(rng, 15)
    data.insert(2, (L, cens | (x == 1), x))  # every relaxed run censored: beta = +inf, no MLE
    many = fit_aft_many(data, dist, with_hessians=True)
    assert [f for f, _ in many] == fit_aft_many(data, dist)
    for (fit, hessian), (L, cens, x) in zip(many, data):
        one = fit_aft(L, cens, x, None, dist)
        assert fit.reason == one.reason and fit.converged == one.converged and fit.n_obs == one.n_obs
        if not one.converged:
            assert fit.beta == one.beta == math.inf and hessian is None
            continue
        assert fit.n_iter == one.n_iter
        for name in ("intercept", "beta", "sigma", "lambda_aft", "beta_se", "loglik"):
            assert getattr(fit, name) == pytest.approx(getattr(one, name), rel=1e-11, abs=1e-13), name
        clusters = np.r_[np.arange(len(L) // 2), np.arange(len(L) // 2)]
        got = aft_sandwich(fit, L, cens, x, clusters, hessian=hessian)
        want = aft_sandwich(one, L, cens, x, clusters)
        assert got.beta_se == pytest.approx(want.beta_se, rel=1e-9) and tuple(got.ci) == pytest.approx(tuple(want.ci), rel=1e-10)
