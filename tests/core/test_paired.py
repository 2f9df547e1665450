"""Paired accuracy statistics (lengthlens.stats.paired) against published values, independent oracles and exact enumeration."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import scipy.stats
from scipy import optimize, special

from lengthlens.stats.mcnemar import mcnemar_exact, mcnemar_midp
from lengthlens.stats.paired import (
    ALPHA_ONE_SIDED, MARGIN, flag_power, item_interval, item_noninferiority_test, minimum_detectable_drop_pp,
    noninferiority_test, score_statistic, smallest_attainable_p, table_probabilities, tables, tango_interval, truth,
)
from lengthlens.stats.signflip import sign_flip_test

from . import exact
from .exact import bootstrap_percentile_interval, exact_coverage, exact_rejection_rate

Z975 = float(special.ndtri(0.975))
#: The audit's grid: background discordance and true drop (proportions).
DISCORDANCE = (0.10, 0.15, 0.25)
DROPS = (0.0, 0.02, 0.05, 0.10, 0.20)


# ------------------------------------------------------------------------------------------------
# An independent Tango score statistic: the restricted MLE by numerical maximization, not the closed form.
# ------------------------------------------------------------------------------------------------

def _oracle_z(b, c, n, delta):
    """Score statistic with p01 maximizing b log(p01 + δ) + c log p01 + (n − b − c) log(1 − 2 p01 − δ) numerically."""
    lo, hi = max(0.0, -delta), (1.0 - delta) / 2.0
    if hi - lo < 1e-15:
        p = lo
    else:
        def nll(p):
            return -(special.xlogy(b, p + delta) + special.xlogy(c, p) + special.xlogy(n - b - c, 1 - 2 * p - delta))
        p = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13}).x
    var = n * (2 * p + delta - delta * delta)
    num = b - c - n * delta
    return num / math.sqrt(var) if var > 0 else (0.0 if num == 0 else math.copysign(math.inf, num))


def _oracle_interval(b, c, n, step=1e-4):
    """The δ on a grid of spacing ``step`` where |Z| ≤ z, by brute force: its smallest and largest member.

    A grid of spacing 0.01 over (−1, 1) first, then the fine grid within 0.01 of each end of what it found
    (the intervals tested are wider than 0.01, so the coarse grid has members inside).
    """
    def members(grid):
        return [d for d in grid if abs(_oracle_z(b, c, n, d)) <= Z975]

    coarse = members(np.arange(-0.995, 1.0, 0.01))
    lo = min(members(np.arange(max(-1 + step, coarse[0] - 0.01), coarse[0] + step, step)))
    hi = max(members(np.arange(coarse[-1], min(1 - step, coarse[-1] + 0.01) + step / 2, step)))
    return lo, hi


@pytest.mark.parametrize("b,c,n", [(6, 16, 161), (1, 7, 21), (0, 3, 12), (2, 2, 12), (5, 0, 30), (1, 10, 12), (0, 1, 12)])
def test_tango_interval_equals_a_brute_force_grid_of_the_score_statistic(b, c, n):
    lo, hi = tango_interval(b, c, n)
    o_lo, o_hi = _oracle_interval(b, c, n)
    # The grid's members lie inside the interval, within one step of its limits.
    assert lo - 1e-9 <= o_lo <= lo + 1e-4 and hi - 1e-4 <= o_hi <= hi + 1e-9
    for d in (lo, hi):  # at the limits, the closed-form statistic equals the numerical one and is ±z
        assert float(score_statistic(b, c, n, d)) == pytest.approx(_oracle_z(b, c, n, d), abs=1e-6)
        assert abs(float(score_statistic(b, c, n, d))) == pytest.approx(Z975, abs=1e-8)


def test_tango_interval_published_example():
    # Fagerland, Lydersen & Laake (2017), Statistical Analysis of Contingency Tables, ch. 8: complete response
    # before/after consolidation therapy (Cavo et al. 2012), table [[59, 6], [16, 80]], n = 161. Δ̂ = (6 − 16)/161
    # = −0.0621; Tango's asymptotic score interval −0.1240 to −0.0054 (printed to 4 decimals).
    lo, hi = tango_interval(6, 16, 161)
    assert (round(lo, 4), round(hi, 4)) == (-0.1240, -0.0054)
    # At δ = 0 the restricted MLE of p01 is (b + c) / 2n, so the statistic is McNemar's z = (b − c)/√(b + c).
    assert float(score_statistic(6, 16, 161, 0.0)) == pytest.approx((6 - 16) / math.sqrt(22), rel=1e-12)


def test_tango_interval_edges():
    # b = c = 0: for δ < 0, p̃01 = −δ and Z = √(n(−δ)/(1 + δ)); Z = z at δ = −z²/(n + z²), symmetric above.
    h = Z975**2 / (12 + Z975**2)
    assert tuple(tango_interval(0, 0, 12)) == pytest.approx((-h, h), abs=1e-12)
    # every pair flipped one way: that limit is the end of the range, the other strictly inside
    lo, hi = tango_interval(0, 12, 12)
    assert lo == -1.0 and -1.0 < hi < 0
    lo, hi = tango_interval(12, 0, 12)
    assert 0 < lo < 1.0 and hi == 1.0
    assert tuple(tango_interval(3, 9, 12)) == pytest.approx(tuple(-x for x in tuple(tango_interval(9, 3, 12))[::-1]), abs=1e-12)
    assert all(math.isnan(x) for x in tango_interval(0, 0, 0))
    with pytest.raises(ValueError):
        tango_interval(7, 6, 12)


def test_tables_and_their_probabilities_are_the_multinomial():
    b, c = tables(12)
    assert b.size == 13 * 14 // 2 and ((b + c) <= 12).all() and len(set(zip(b.tolist(), c.tolist()))) == b.size
    p = table_probabilities(12, 0.07, 0.12)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    for k in (0, 17, 50, 90):
        expect = scipy.stats.multinomial.pmf([b[k], c[k], 12 - b[k] - c[k]], 12, [0.07, 0.12, 0.81])
        assert p[k] == pytest.approx(expect, rel=1e-10)


def test_the_exact_enumeration_helpers_examples_run():
    result = doctest.testmod(exact, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# ------------------------------------------------------------------------------------------------
# Item 1: the default Δacc interval covers at 12 and 30 items (exact enumeration); the percentile one does not.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [12, 30])
def test_tango_interval_covers_on_the_audit_grid_by_exact_enumeration(n):
    cov = np.array([[exact_coverage(n, psi, d) for d in DROPS] for psi in DISCORDANCE])
    assert cov.min() >= 0.93, cov
    pct = np.array([[exact_coverage(n, psi, d, bootstrap_percentile_interval) for d in DROPS] for psi in DISCORDANCE])
    assert pct.min() < 0.90  # what the item bootstrap's percentile interval did (57.6 % at n = 12, 84.3 % at 30)


def test_bootstrap_percentile_interval_is_the_limit_of_the_bootstrap():
    rng = np.random.default_rng(0)
    b, c, n = 2, 5, 30
    draws = rng.multinomial(n, [b / n, c / n, 1 - (b + c) / n], size=400_000)
    delta = (draws[:, 0] - draws[:, 1]) / n
    lo, hi = bootstrap_percentile_interval(b, c, n)
    # The quantiles of a discrete distribution: 400k draws put them on the same atom unless it sits on the edge.
    assert lo == pytest.approx(np.quantile(delta, 0.025, method="inverted_cdf"))
    assert hi == pytest.approx(np.quantile(delta, 0.975, method="inverted_cdf"))
    assert bootstrap_percentile_interval(0, 0, 12) == (0.0, 0.0)


def _draw_seeds(rng, n_items, seeds, drop, spread=0.1, couple=0.8):
    """Per-item (graded pairs, correct − correct*) with several seeds, true Δ = −drop over the item population.

    Item i: baseline accuracy pᵢ ~ U(0.35, 0.65), relaxed qᵢ = pᵢ − drop + eᵢ with eᵢ ~ U(−spread, spread)
    (mean 0: the population change is −drop, and q stays inside [0, 1]); a seed's two runs share their
    uniform draw with probability ``couple`` (correlated pairs, as runs on the same prompt are).
    """
    p = rng.uniform(0.35, 0.65, n_items)
    q = p - drop + rng.uniform(-spread, spread, n_items)
    u = rng.random((n_items, seeds))
    v = np.where(rng.random((n_items, seeds)) < couple, u, rng.random((n_items, seeds)))
    return np.full(n_items, float(seeds)), (v < q[:, None]).sum(axis=1) - (u < p[:, None]).sum(axis=1).astype(float)


def test_item_interval_is_the_t_interval_of_item_means_with_equal_seeds():
    rng = np.random.default_rng(3)
    n_graded, d = _draw_seeds(rng, 12, 4, 0.05)
    r = item_interval(n_graded, d)
    lo, hi, how = r.low, r.high, r.method
    means = d / n_graded
    expect = scipy.stats.t.interval(0.95, 11, loc=means.mean(), scale=scipy.stats.sem(means))
    assert how == "item_t" and (lo, hi) == pytest.approx(expect, rel=1e-12)
    # no item changed: the items as single pairs, Tango's interval for b = c = 0 on 12
    r = item_interval(np.full(12, 4.0), np.zeros(12))
    assert (r.low, r.high) == pytest.approx(tuple(tango_interval(0, 0, 12))) and r.method == "tango_items"


def test_item_interval_covers_with_four_seeds_at_12_items():
    """1,500 cells of 12 items x 4 seeds at a true drop of 5 points: 93-97 % (3 SE of 95 % is 1.7 points)."""
    rng = np.random.default_rng(12)
    hits = 0
    for _ in range(1500):
        lo, hi = item_interval(*_draw_seeds(rng, 12, 4, 0.05)).confidence_interval
        hits += lo <= -0.05 <= hi
    assert 0.93 <= hits / 1500 <= 0.97


# ------------------------------------------------------------------------------------------------
# Item 2: the loss flag holds its level at the margin, and its power is what it is.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [12, 30])
def test_loss_flag_holds_its_level_at_the_margin_by_exact_enumeration(n):
    # the audit's discordances and a sweep of the whole range (the exact p takes the worst case over it)
    for psi in (*DISCORDANCE, *np.linspace(0.0, 0.96, 49)):
        assert flag_power(n, psi, MARGIN) <= ALPHA_ONE_SIDED + 1e-9, psi
    # the same rate by brute force: every table's p-value from noninferiority_test, summed multinomial mass
    brute = exact_rejection_rate(n, 0.15, MARGIN, lambda b, c, m: noninferiority_test(b, c, m).pvalue, ALPHA_ONE_SIDED)
    assert brute == pytest.approx(flag_power(n, 0.15, MARGIN), abs=1e-12)


def test_loss_test_p_value_is_the_worst_tail_over_the_nuisance():
    """At n = 12, by brute force: max over p10 of Σ P(table) over tables with Z ≤ z_obs at Δ = −margin."""
    n, b0, c0 = 12, 0, 5
    b, c = tables(n)
    z = score_statistic(b, c, n, -MARGIN)
    z_obs = float(score_statistic(b0, c0, n, -MARGIN))
    tail = z <= z_obs + 1e-9
    worst = max(table_probabilities(n, p10, p10 + MARGIN)[tail].sum() for p10 in np.linspace(0, (1 - MARGIN) / 2, 2001))
    # the test's grid is coarser than 2,001 points but has this one's maximum to 1e-4 (the M p-value; at 12 pairs the
    # default is E+M)
    assert noninferiority_test(b0, c0, n, method="m").pvalue == pytest.approx(worst, abs=1e-4)
    assert noninferiority_test(b0, c0, n).statistic == pytest.approx(z_obs)


def test_score_statistic_falls_as_right_to_wrong_flips_rise_within_each_number_of_discordant_pairs():
    # The loss test's tail is c >= c*(k) within each k = b + c, found by bisection over c: that needs Z(k − c, c)
    # strictly decreasing in c for every k.
    for n in (5, 12, 30, 60, 150):
        b, c = tables(n)
        z = score_statistic(b, c, n, -MARGIN)
        for k in range(1, n + 1):
            row = (b + c) == k
            order = np.argsort(c[row])
            assert np.all(np.diff(z[row][order]) < 0), (n, k)
    for k in np.linspace(1, 18_466, 25).astype(int):  # rows of the largest cells, at their full length
        cc = np.arange(k + 1)
        assert np.all(np.diff(score_statistic(k - cc, cc, 18_466, -MARGIN)) < 0), k


def _brute_force_loss_test(n):
    """Every table's exact p-value, the rejection region and its z_crit by full enumeration: for each nuisance value of
    the test's grid, the tables sorted by Z and their probabilities summed in that order (the tail of each value)."""
    from lengthlens.stats.paired import _nuisance_grid  # the grid defines the test's supremum; the oracle shares it

    b, c = tables(n)
    z = score_statistic(b, c, n, -MARGIN)
    order = np.argsort(z, kind="stable")
    z_sorted = z[order]
    grid = _nuisance_grid(MARGIN)
    cum = np.array([np.cumsum(table_probabilities(n, g, g + MARGIN)[order]) for g in grid])

    def pvalue(z_obs):  # Z ≤ z_obs with the test's relative allowance of 1e-9
        i = np.searchsorted(z_sorted, z_obs + 1e-9 * max(1.0, abs(z_obs)), side="right")
        return float(cum[:, i - 1].max()) if i else 0.0

    values = np.unique(z)
    rejecting = [v for v in values if pvalue(v) < ALPHA_ONE_SIDED]
    z_crit = max(rejecting) if rejecting else -math.inf
    region = z <= z_crit + 1e-9 * max(1.0, abs(z_crit)) if rejecting else np.zeros(b.size, bool)
    return b, c, z, pvalue, z_crit, region


@pytest.mark.parametrize("n", [5, 12, 30, 60, 150])
def test_loss_test_equals_full_enumeration(n):
    from lengthlens.stats.paired import _rejection_region

    b, c, z, pvalue, z_crit, region = _brute_force_loss_test(n)
    # p-values: every table up to 30 pairs, an even spread of 150 beyond; the two sum the same tail terms in another
    # order (and the test drops terms below 1e-18), so they agree to rounding.
    for i in (range(b.size) if n <= 30 else np.linspace(0, b.size - 1, 150).astype(int)):
        assert noninferiority_test(int(b[i]), int(c[i]), n, method="m").pvalue == pytest.approx(pvalue(float(z[i])), abs=1e-12)
    assert _rejection_region(n, MARGIN, ALPHA_ONE_SIDED)[0] == z_crit
    for psi in (0.02, 0.10, 0.15, 0.25, 0.5, 0.9):
        for d in DROPS:
            if psi + d <= 1:
                expect = float(table_probabilities(n, *truth(psi, d))[region].sum())
                assert flag_power(n, psi, d, method="m") == pytest.approx(expect, abs=1e-12)


def test_loss_test_runs_in_linear_memory_at_18_466_pairs():
    """The full enumeration of 18,466 pairs has 1.7e8 tables (1.4 GB per array); the test and its power need O(n)."""
    import tracemalloc

    from lengthlens.stats import paired

    paired._grid_mass.cache_clear()
    tracemalloc.start()
    r = noninferiority_test(900, 1300, 18_466)
    mdd = minimum_detectable_drop_pp(18_466, 0.12)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # 400 more right→wrong than wrong→right flips in 18,466 (−2.2 points) does not clear a 2-point margin with
    # confidence; a 3-point drop at this size is detectable.
    assert 0.025 < r.pvalue < 0.5 and 2.0 < mdd < 3.5
    assert peak < 100e6, peak


def test_loss_flag_power_and_minimum_detectable_drop():
    # power rises with the drop and with n
    p12 = [flag_power(12, 0.15, d) for d in (0.05, 0.10, 0.20)]
    p30 = [flag_power(30, 0.15, d) for d in (0.05, 0.10, 0.20)]
    assert p12 == sorted(p12) and p30 == sorted(p30) and all(a < b for a, b in zip(p12, p30))
    for n in (12, 30, 150):
        mdd = minimum_detectable_drop_pp(n, 0.15)
        assert flag_power(n, 0.15, mdd / 100) >= 0.8 > flag_power(n, 0.15, mdd / 100 - 0.005)
    assert minimum_detectable_drop_pp(12, 0.15) > minimum_detectable_drop_pp(30, 0.15) > minimum_detectable_drop_pp(150, 0.15)
    assert minimum_detectable_drop_pp(12, 0.6) == math.inf  # drops up to 40 points: none detected with 80 %


def test_item_loss_test_is_the_one_sided_t_test_of_item_means():
    rng = np.random.default_rng(8)
    n_graded, d = _draw_seeds(rng, 12, 4, 0.10)
    r = item_noninferiority_test(n_graded, d)
    expect = scipy.stats.ttest_1samp(d / n_graded, -MARGIN, alternative="less")
    assert r.method == "item_t_noninferiority"
    assert (r.statistic, r.pvalue) == (pytest.approx(expect.statistic, rel=1e-10), pytest.approx(expect.pvalue, rel=1e-10))


def test_item_loss_test_holds_its_level_with_four_seeds():
    """2,000 cells of 12 items x 4 seeds at a true drop of exactly the margin: rate ≤ 2.5 % + 3 SE (1.0 point)."""
    rng = np.random.default_rng(30)
    hits = sum(item_noninferiority_test(*_draw_seeds(rng, 12, 4, MARGIN)).pvalue < ALPHA_ONE_SIDED for _ in range(2000))
    assert hits / 2000 <= ALPHA_ONE_SIDED + 3 * math.sqrt(0.025 * 0.975 / 2000)


# ------------------------------------------------------------------------------------------------
# Item 8: mid-p tests are the default; their size is nearer nominal than the exact ones', and still below it.
# ------------------------------------------------------------------------------------------------

def test_mcnemar_midp_published_value_and_definition():
    # Fagerland, Lydersen & Laake (2017), ch. 8, Cavo et al. (2012): the McNemar mid-P test, P = 0.034690.
    assert round(mcnemar_midp(6, 16), 6) == 0.034690
    for b, c in [(0, 0), (0, 4), (3, 3), (2, 9), (11, 1)]:
        exact = mcnemar_exact(b, c)
        point = scipy.stats.binom.pmf(min(b, c), b + c, 0.5) if b + c else 1.0
        assert mcnemar_midp(b, c) == pytest.approx(1.0 if b == c else exact - point, rel=1e-12)
        if b != c:  # one run per item: the mid-p sign-flip test is the mid-p McNemar test
            assert sign_flip_test([1.0] * b + [-1.0] * c + [0.0] * 3, mid_p=True).pvalue == pytest.approx(mcnemar_midp(b, c))


@pytest.mark.parametrize("n", [12, 30])
def test_mid_p_mcnemar_rejects_nearer_the_nominal_rate_under_no_change(n):
    for psi in DISCORDANCE:
        exact = exact_rejection_rate(n, psi, 0.0, lambda b, c, m: mcnemar_exact(b, c), 0.05)
        mid = exact_rejection_rate(n, psi, 0.0, lambda b, c, m: mcnemar_midp(b, c), 0.05)
        assert exact < mid <= 0.05


def test_smallest_attainable_p():
    # every one of 12 graded pairs flipped one way: exact 2 / 2^12, mid-p 1 / 2^12
    assert smallest_attainable_p(12, "mcnemar_exact") == pytest.approx(mcnemar_exact(0, 12))
    assert smallest_attainable_p(12, "mcnemar_midp") == pytest.approx(mcnemar_midp(0, 12))
    assert smallest_attainable_p(5, "sign_flip_midp_exact") == pytest.approx(sign_flip_test([0.5] * 5, mid_p=True).pvalue)
    assert smallest_attainable_p(0, "mcnemar_midp") == 1.0


def test_truth_rejects_impossible_tables():
    assert truth(0.1, 0.05) == pytest.approx((0.05, 0.10))
    with pytest.raises(ValueError):
        truth(0.5, 0.8)


def test_with_seeds_the_minimum_detectable_drop_is_the_item_t_tests():
    """Several graded pairs per item: the flag is the t test over items, so its detectable drop is margin + δ·se, δ the
    noncentrality at which a one-sided t test (m − 1 df, 2.5 %) has 80 % power: statsmodels' TTestPower as the oracle
    (its effect size d = δ/√m)."""
    from statsmodels.stats.power import TTestPower

    from lengthlens.stats.paired import _item_parts, accuracy_mdd_pp

    rng = np.random.default_rng(4)
    for m in (12, 30):
        n = np.full(m, 4)
        c, c_star = rng.binomial(4, 0.6, m), rng.binomial(4, 0.7, m)
        _point, se, _m = _item_parts(n, c - c_star)
        d = TTestPower().solve_power(nobs=m, alpha=0.025, power=0.8, alternative="larger")
        assert accuracy_mdd_pp(n, c, c_star) == pytest.approx(2.0 + 100 * d * math.sqrt(m) * se, rel=1e-5)
        # Finite where the single-pair figure at these items' discordance is not, or larger.
        single = accuracy_mdd_pp(np.ones(m), (c > c_star).astype(float), np.zeros(m))
        assert math.isfinite(accuracy_mdd_pp(n, c, c_star)) and accuracy_mdd_pp(n, c, c_star) < single
    # No spread over items: the items as single pairs, as the test itself does.
    n = np.full(12, 4)
    assert accuracy_mdd_pp(n, np.full(12, 3.0), np.full(12, 3.0)) == minimum_detectable_drop_pp(12, 0.10)


def test_detectable_drop_leaves_the_drop_out_of_the_background_rate():
    """The table (b, c, n) = (0, 6, 12): the flag fires (exact p 0.008), and the drop it could detect is finite. The
    observed discordance (b + c)/n = 0.5 holds the drop itself and allows none; the background rate is 2·min(b, c)/n,
    here 0 (one side without a flip says nothing of it), so the assumed 0.10."""
    from lengthlens.stats.paired import ASSUMED_DISCORDANCE, accuracy_mdd_pp, background_discordance

    assert noninferiority_test(0, 6, 12, method="m").pvalue == pytest.approx(0.0081, abs=5e-5)
    assert noninferiority_test(0, 6, 12).pvalue == pytest.approx(0.0076, abs=5e-5)  # E+M, the default at 12 pairs
    mdd = accuracy_mdd_pp(np.ones(12), np.r_[np.zeros(6), np.ones(6)], np.ones(12))
    assert math.isfinite(mdd) and mdd == minimum_detectable_drop_pp(12, ASSUMED_DISCORDANCE)
    assert minimum_detectable_drop_pp(12, 0.5) == math.inf
    # (2, 6, 30): the background is 4/30, not 8/30.
    assert background_discordance(2, 6, 30) == pytest.approx(4 / 30, rel=1e-15)
    relaxed = np.r_[np.ones(2), np.zeros(6), np.ones(22)]
    base = np.r_[np.zeros(2), np.ones(6), np.ones(22)]
    assert accuracy_mdd_pp(np.ones(30), relaxed, base) == minimum_detectable_drop_pp(30, 4 / 30)


# ------------------------------------------------------------------------------------------------
# Lloyd's E+M p-value (the flag's up to EM_MAX_PAIRS pairs)
# ------------------------------------------------------------------------------------------------

def _em_by_brute_force(n):
    """Every table's E+M p-value, its restricted nuisance found by numerical maximisation of the likelihood under
    Δ = −margin (not Tango's closed form), the E tail by enumeration, the M step over the test's nuisance grid."""
    from scipy import optimize

    from lengthlens.stats.paired import _nuisance_grid  # the grid defines the supremum; the oracle shares it

    b, c = tables(n)
    z = score_statistic(b, c, n, -MARGIN)
    p_e = np.empty(b.size)
    for i, (x, y) in enumerate(zip(b, c)):
        rest = n - x - y

        def nll(p01):  # p10 = p01 − margin, p00 = 1 − p10 − p01
            p10, p00 = p01 - MARGIN, 1 - 2 * p01 + MARGIN
            return -(special.xlogy(x, p10) + special.xlogy(y, p01) + special.xlogy(rest, p00))

        r = optimize.minimize_scalar(nll, bounds=(MARGIN, (1 + MARGIN) / 2), method="bounded",
                                     options={"xatol": 1e-12})
        p01 = min((MARGIN, (1 + MARGIN) / 2, r.x), key=nll)  # the bounds themselves when the maximum sits there
        tail = z <= z[i] + 1e-9 * max(1.0, abs(z[i]))
        p_e[i] = table_probabilities(n, p01 - MARGIN, p01)[tail].sum()
    grid = _nuisance_grid(MARGIN)
    mass = np.array([table_probabilities(n, g, g + MARGIN) for g in grid])
    return np.array([mass[:, p_e <= p * (1 + 1e-9) + 1e-15].sum(axis=1).max() for p in p_e])


@pytest.mark.parametrize("n", [7, 12, 20])
def test_em_p_value_equals_a_brute_force_computation(n):
    from lengthlens.stats.paired import EM_MAX_PAIRS

    assert n <= EM_MAX_PAIRS
    expect = _em_by_brute_force(n)
    b, c = tables(n)
    got = np.array([noninferiority_test(int(x), int(y), n).pvalue for x, y in zip(b, c)])
    # the numerical restricted MLE is good to ~1e-8 in the likelihood: p-values to 1e-6
    assert got == pytest.approx(expect, abs=1e-6)
    assert noninferiority_test(0, 5, n).method == "tango_noninferiority_em"


@pytest.mark.parametrize("n", [13, 21, 30, 51, 60])
def test_em_flag_holds_its_level_over_the_whole_nuisance_range(n):
    """The largest rejection rate at Δ = −2 points over every discordance (a grid of 2,001, the maximum refined): at
    most 2.5 %. (At 51 pairs it is 2.4995 %.)"""
    from scipy import optimize

    rates = [flag_power(n, psi, MARGIN) for psi in np.linspace(0.0, 1 - MARGIN, 2001)]
    i = int(np.argmax(rates))
    lo, hi = np.linspace(0.0, 1 - MARGIN, 2001)[[max(i - 1, 0), min(i + 1, 2000)]]
    r = optimize.minimize_scalar(lambda p: -flag_power(n, p, MARGIN), bounds=(lo, hi), method="bounded",
                                 options={"xatol": 1e-10})
    assert max(rates[i], -r.fun) <= ALPHA_ONE_SIDED


def test_em_is_more_powerful_than_m_where_m_falls_short_of_its_level():
    """benchmarks/lloyd_em.py's measurement, two of its rows: at 30 pairs a 10-point drop is flagged 14.0 % of the time
    by E+M against 9.9 % by M (discordance 0.10), at 20 pairs a 20-point one 31.0 % against 19.6 %."""
    assert flag_power(30, 0.10, 0.10) == pytest.approx(0.140, abs=5e-4)
    assert flag_power(30, 0.10, 0.10, method="m") == pytest.approx(0.099, abs=5e-4)
    assert flag_power(20, 0.10, 0.20) == pytest.approx(0.310, abs=5e-4)
    assert flag_power(20, 0.10, 0.20, method="m") == pytest.approx(0.196, abs=5e-4)
    # beyond EM_MAX_PAIRS the M test: the same numbers either way
    assert flag_power(61, 0.15, 0.10) == flag_power(61, 0.15, 0.10, method="m")
