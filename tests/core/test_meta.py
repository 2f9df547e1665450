"""The random-effects meta-analysis (lengthlens.stats.meta) against published worked examples and independent computations."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from lengthlens.stats.meta import hksj_standard_error, paule_mandel_tau2, random_effects

# DerSimonian & Kacker (2007), the CLASP trials (Tables 3 and 4, pp. 111-112, as metafor's test of that analysis
# quotes them): log odds ratios of six trials, Paule–Mandel τ̂ = 0.3681, μ̂ = −0.3811, SE 0.2060.
CLASP_N1 = np.array([156, 303, 565, 1570, 103, 4659.0])
CLASP_N2 = np.array([74, 303, 477, 1565, 105, 4650.0])
CLASP_A = np.array([5, 5, 12, 69, 9, 313.0])
CLASP_C = np.array([8, 17, 9, 94, 11, 352.0])

# Raudenbush (2009), Table 16.3 (p. 309): the 19 teacher-expectancy studies (dat.raudenbush1985: yi, vi as published).
RAUD_Y = np.array([0.03, 0.12, -0.14, 1.18, 0.26, -0.06, -0.02, -0.32, 0.27, 0.80, 0.54, 0.18, -0.02, 0.23, -0.18, -0.06,
                   0.30, 0.07, -0.07])
RAUD_V = np.array([0.0156, 0.0216, 0.0279, 0.1391, 0.1362, 0.0106, 0.0106, 0.0484, 0.0269, 0.0630, 0.0912, 0.0497,
                   0.0835, 0.0841, 0.0253, 0.0279, 0.0193, 0.0088, 0.0303])

# Published figures are rounded to 4 decimals: they hold our values to half a unit in the last place.
ROUNDED = 0.5e-4 + 1e-12


def _clasp() -> tuple[np.ndarray, np.ndarray]:
    a, b, c, d = CLASP_A, CLASP_N1 - CLASP_A, CLASP_C, CLASP_N2 - CLASP_C
    return np.log(a * d / (b * c)), 1 / a + 1 / b + 1 / c + 1 / d


def test_paule_mandel_matches_dersimonian_kacker_clasp():
    y, v = _clasp()
    m = random_effects(y, v)
    assert abs(m.tau - 0.3681) <= ROUNDED
    assert abs(m.estimate - (-0.3811)) <= ROUNDED
    # At the Paule–Mandel root q = 1, so the HKSJ SE is the random-effects SE the paper gives.
    assert abs(m.standard_error - 0.2060) <= ROUNDED
    assert not m.floored
    t5 = stats.t.ppf(0.975, 5)
    assert m.low == pytest.approx(m.estimate - t5 * m.standard_error, abs=1e-12)
    assert m.high == pytest.approx(m.estimate + t5 * m.standard_error, abs=1e-12)


def test_hksj_matches_raudenbush_table_16_3():
    # Knapp–Hartung with the DerSimonian–Laird τ² (closed form): τ² 0.0259, μ 0.0893, SE 0.0636, CI [−0.0442, 0.2229].
    w = 1 / RAUD_V
    mu_fe = np.sum(w * RAUD_Y) / w.sum()
    q = np.sum(w * (RAUD_Y - mu_fe) ** 2)
    tau2_dl = max(0.0, (q - 18) / (w.sum() - np.sum(w * w) / w.sum()))
    assert abs(tau2_dl - 0.0259) <= ROUNDED
    mu, se, floored = hksj_standard_error(RAUD_Y, RAUD_V, tau2_dl, floor=True)
    assert (abs(mu - 0.0893) <= ROUNDED, abs(se - 0.0636) <= ROUNDED, floored) == (True, True, False)
    t18 = stats.t.ppf(0.975, 18)
    assert abs(mu - t18 * se - (-0.0442)) <= 2 * ROUNDED and abs(mu + t18 * se - 0.2229) <= 2 * ROUNDED
    # The equal-effects row (τ² = 0): μ 0.0604, SE 0.0515; Q/(K − 1) = 35.83/18 > 1, so the floor does not act.
    mu0, se0, floored0 = hksj_standard_error(RAUD_Y, RAUD_V, 0.0, floor=True)
    assert abs(mu0 - 0.0604) <= ROUNDED and abs(se0 - 0.0515) <= ROUNDED and not floored0


def _pm_by_bisection(y: np.ndarray, v: np.ndarray) -> float:
    """Paule–Mandel by plain bisection on Q(τ²) − (K − 1), one loop over the cells per evaluation."""
    k = len(y)

    def q_of(t: float) -> float:
        sw = swy = 0.0
        for yi, vi in zip(y, v):
            sw += 1 / (vi + t)
            swy += yi / (vi + t)
        mu = swy / sw
        return sum((yi - mu) ** 2 / (vi + t) for yi, vi in zip(y, v))

    if q_of(0.0) <= k - 1:
        return 0.0
    lo, hi = 0.0, 1.0
    while q_of(hi) > k - 1:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if q_of(mid) > k - 1 else (lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("seed", range(6))
def test_paule_mandel_matches_a_plain_loop(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 14))
    v = rng.uniform(0.005, 0.2, k)
    y = rng.normal(0.1, 0.3, k) + rng.normal(0, np.sqrt(v))
    ours, plain = paule_mandel_tau2(y, v), _pm_by_bisection(y, v)
    # Both solve the same monotone equation: Brent to 1e-12 relative, bisection to the float grid.
    assert ours == pytest.approx(plain, rel=1e-9, abs=1e-15)


def test_against_statsmodels_where_it_is_right():
    # statsmodels' "iterated" τ² is Paule–Mandel (truncated at 0, unlike its "dl"), and its "random effect wls" row is the
    # unfloored HKSJ interval: compare on data sets with τ̂² > 0, where the floor does not act.
    from statsmodels.stats.meta_analysis import combine_effects

    rng = np.random.default_rng(7)
    compared = 0
    for _ in range(20):
        k = int(rng.integers(3, 12))
        v = rng.uniform(0.01, 0.1, k)
        y = rng.normal(0, 0.4, k) + rng.normal(0, np.sqrt(v))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = combine_effects(y, v, method_re="iterated", use_t=True)
            row = r.summary_frame().loc["random effect wls"]
        m = random_effects(y, v)
        if m.tau2 <= 0:
            continue
        compared += 1
        # statsmodels iterates its τ² to its own tolerance (1e-5 of Q): compare to that, the HKSJ limits likewise.
        assert m.tau2 == pytest.approx(r.tau2, rel=1e-4, abs=1e-8)
        assert m.estimate == pytest.approx(row["eff"], abs=1e-5)
        assert m.low == pytest.approx(row["ci_low"], abs=1e-4) and m.high == pytest.approx(row["ci_upp"], abs=1e-4)
    assert compared >= 10


def test_truncated_tau_floors_the_interval_at_the_fixed_effect_width():
    y, v = np.array([0.10, 0.11, 0.09, 0.10]), np.array([0.01, 0.02, 0.015, 0.01])
    m = random_effects(y, v)
    assert m.tau2 == 0.0 and m.floored
    assert m.estimate == pytest.approx(m.fixed_effect, abs=1e-15)
    assert m.standard_error == pytest.approx(m.fixed_effect_se, rel=1e-12)
    plain = random_effects(y, v, floor=False)
    assert plain.standard_error < m.standard_error and not plain.floored
    # Unfloored: √(q / Σw) with q = Q / (K − 1), by hand.
    w = 1 / v
    q = np.sum(w * (y - np.sum(w * y) / w.sum()) ** 2) / 3
    assert plain.standard_error == pytest.approx(math.sqrt(q / w.sum()), rel=1e-12)


def test_prediction_interval_by_hand():
    y, v = _clasp()
    m = random_effects(y, v)
    half = stats.t.ppf(0.975, 4) * math.sqrt(m.tau2 + m.standard_error**2)
    assert m.prediction_interval.low == pytest.approx(m.estimate - half, abs=1e-12)
    assert m.prediction_interval.high == pytest.approx(m.estimate + half, abs=1e-12)
    assert random_effects(y[:2], v[:2]).prediction_interval.defined is False


def test_pvalue_inverts_the_interval():
    y, v = _clasp()
    m = random_effects(y, v)
    assert m.pvalue(m.high) == pytest.approx(0.05, abs=1e-9)
    assert m.pvalue(m.low) == pytest.approx(0.05, abs=1e-9)
    assert m.pvalue(m.high, "less") == pytest.approx(0.025, abs=1e-9)
    assert m.pvalue(m.low, "greater") == pytest.approx(0.025, abs=1e-9)


def test_one_cell_and_bad_input():
    m = random_effects([0.3], [0.04])
    assert m.k == 1 and m.fixed_effect == 0.3 and not m.confidence_interval.defined and math.isnan(m.tau2)
    assert m.fixed_effect_interval.low == pytest.approx(0.3 - 1.959963984540054 * 0.2, abs=1e-12)
    with pytest.raises(ValueError, match="variances"):
        random_effects([0.1, 0.2], [0.01, 0.0])
    with pytest.raises(ValueError, match="one variance per estimate"):
        random_effects([0.1, 0.2], [0.01])


def test_to_frame_and_html():
    m = random_effects(*_clasp())
    df = m.to_frame()
    assert df.loc[0, "k"] == 6 and df.loc[0, "tau"] == pytest.approx(m.tau) and df.loc[0, "method"] == "pm_hksj"
    assert "<table>" in m._repr_html_()


def test_coverage_under_the_normal_model():
    # K = 6 cells with known within variances, τ = 0.15: the HKSJ interval's coverage of μ. 2,000 meta-analyses:
    # a binomial SE of 0.49 points, so 93 % is 4 SE below the nominal 95 %.
    rng = np.random.default_rng(11)
    hits = 0
    n = 2000
    for _ in range(n):
        v = rng.uniform(0.01, 0.06, 6)
        y = 0.2 + rng.normal(0, 0.15, 6) + rng.normal(0, np.sqrt(v))
        hits += 0.2 in random_effects(y, v).confidence_interval
    assert hits / n >= 0.93


# ------------------------------------------------------------------------------------------------
# Within-cell variances
# ------------------------------------------------------------------------------------------------

from lengthlens.stats.meta import accuracy_change_variance, log_ratio_variance  # noqa: E402


@pytest.mark.parametrize("n", [12, 30])
def test_accuracy_variance_is_agresti_min_on_every_table(n):
    # Agresti & Min (2005): add 1/2 to each cell of the paired 2×2 table; with b wrong→right and c right→wrong pairs,
    # Δ̃ = (b − c)/(n + 2) and var = ((b + c + 1)/(n + 2) − Δ̃²)/(n + 2).
    for b in range(n + 1):
        for c in range(n + 1 - b):
            relaxed = [1] * b + [0] * c + [1] * (n - b - c)
            base = [0] * b + [1] * c + [1] * (n - b - c)
            d, var = accuracy_change_variance([1] * n, relaxed, base)
            tilde = (b - c) / (n + 2)
            assert d == pytest.approx((b - c) / n, abs=1e-15)
            assert var == pytest.approx(((b + c + 1) / (n + 2) - tilde**2) / (n + 2), rel=1e-12)
            assert var > 0


def test_accuracy_variance_with_seeds_is_the_pseudo_item_formula():
    # Four seeds per item, every seed graded: the item means xᵢ = Dᵢ/4 with pseudo-items +1 (weight 1/2), −1 (1/2) and
    # 0 (1) added, and the variance of their mean as a population of m + 2 items, divided by m + 2.
    rng = np.random.default_rng(3)
    n_graded = np.full(12, 4.0)
    c = rng.integers(0, 5, 12).astype(float)
    c_star = rng.integers(0, 5, 12).astype(float)
    x = (c - c_star) / 4
    values = np.concatenate([x, [1.0, -1.0, 0.0]])
    weights = np.concatenate([np.ones(12), [0.5, 0.5, 1.0]])
    mean = np.sum(weights * values) / 14
    second = np.sum(weights * values**2) / 14
    d, var = accuracy_change_variance(n_graded, c, c_star)
    assert d == pytest.approx(x.mean(), abs=1e-15)
    assert var == pytest.approx((second - mean**2) / 14, rel=1e-12)
    # Ungraded items do not count; nothing graded: NaN.
    d2, var2 = accuracy_change_variance(np.append(n_graded, 0), np.append(c, 0), np.append(c_star, 0))
    assert (d2, var2) == (pytest.approx(d), pytest.approx(var))
    assert all(math.isnan(x) for x in accuracy_change_variance([0, 0], [0, 0], [0, 0]))


def test_log_ratio_variance():
    assert log_ratio_variance(2.0, 0.2, 30) == pytest.approx(0.01 * 30 / 29, rel=1e-15)
    for bad in [(1.0, 0.0, 12), (0.0, 0.1, 12), (1.0, float("nan"), 12), (1.0, 0.1, 1)]:
        assert math.isnan(log_ratio_variance(*bad))
