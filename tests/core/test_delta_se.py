"""The delta-method SEs against hand-derived gradients in a plain loop over items, and the duals' arithmetic.

For a ratio metric on the log scale the SE is sqrt(sum_i w_i (g . (x_i - S/n))^2), with S the
(count-weighted) sums, w_i the item's count and g the gradient of log f at S. The gradients below
are derived by hand from the definitions in lengthlens.stats.metrics:

- lambda = L / L*:                       g_L = 1/L, g_L* = -1/L*
- gain = (lbar/nl + 1) / (lbar*/nl* + 1): log gain = log(lbar + nl) - log nl - log(lbar* + nl*) + log nl*,
  so g_lbar = 1/(lbar + nl), g_nl = 1/(lbar + nl) - 1/nl, and the baseline's with the opposite signs
- rounds_ratio_predicted = lambda / gain_pooled = (L/L*) / ((A/R + 1) / (A*/R* + 1)):
  log = log L - log L* - log(A + R) + log R + log(A* + R*) - log R*
- time_per_round_ratio = (T/T*) / (R/R*): g_T = 1/T, g_T* = -1/T*, g_R = -1/R, g_R* = 1/R*
- accuracy_delta_pp (identity scale) = 100 (c - c*) / ng: g_c = 100/ng, g_c* = -100/ng, g_ng = -100 (c - c*)/ng^2
"""

from __future__ import annotations

import numpy as np
import pytest

from lengthlens.stats.delta import Stratum, item_products, moment_pairs, values_and_ses
from lengthlens.stats.dual import Dual
from lengthlens.stats.metrics import REGISTRY, Sums
from lengthlens.stats.resample import item_counts

FIELDS = REGISTRY.quantity_names


def _gradient(name: str, S: dict) -> dict[str, float]:
    if name == "lambda":
        return {"L": 1 / S["L"], "L_star": -1 / S["L_star"]}
    if name == "gain":
        a, b = 1 / (S["lbar"] + S["n_lbar"]), 1 / (S["lbar_star"] + S["n_lbar_star"])
        return {"lbar": a, "n_lbar": a - 1 / S["n_lbar"], "lbar_star": -b, "n_lbar_star": 1 / S["n_lbar_star"] - b}
    if name == "rounds_ratio_predicted":
        a, b = 1 / (S["A"] + S["R"]), 1 / (S["A_star"] + S["R_star"])
        return {"L": 1 / S["L"], "L_star": -1 / S["L_star"], "A": -a, "R": 1 / S["R"] - a,
                "A_star": b, "R_star": b - 1 / S["R_star"]}
    if name == "time_per_round_ratio":
        return {"T": 1 / S["T"], "T_star": -1 / S["T_star"], "R": -1 / S["R"], "R_star": 1 / S["R_star"]}
    if name == "accuracy_delta_pp":
        ng = S["n_graded"]
        return {"c": 100 / ng, "c_star": -100 / ng, "n_graded": -100 * (S["c"] - S["c_star"]) / ng ** 2}
    raise KeyError(name)


def _loop_se(name: str, X: dict[str, np.ndarray], w: np.ndarray) -> float:
    """The SE by its definition: items one by one, weighted by their counts."""
    n = w.sum()
    S = {f: float(sum(w[i] * X[f][i] for i in range(len(w)))) for f in FIELDS}
    g = _gradient(name, S)
    var = 0.0
    for i in range(len(w)):
        lin = sum(gk * (X[f][i] - S[f] / n) for f, gk in g.items())
        var += w[i] * lin * lin
    return float(np.sqrt(var))


def _resampled(X: dict[str, np.ndarray], counts: np.ndarray, names) -> tuple[Sums, list[Stratum]]:
    """Count-weighted sums of the item totals and of the products the SEs of ``names`` need."""
    pairs = moment_pairs([REGISTRY.metric(n).of for n in names], FIELDS)
    prods = item_products(X, pairs)
    sums = Sums({f: counts @ X[f] for f in FIELDS})
    return sums, [Stratum(sums, {p: counts @ v for p, v in prods.items()}, float(counts.shape[1]))]


def _items(rng, n: int) -> dict[str, np.ndarray]:
    col = {f: np.zeros(n) for f in FIELDS}
    col["n"][:] = col["n_lbar"][:] = col["n_lbar_star"][:] = col["n_graded"][:] = 2.0
    col["L_star"][:] = rng.integers(100, 4000, n)
    col["L"][:] = np.round(col["L_star"] * rng.uniform(0.7, 2.0, n))
    col["R_star"][:] = rng.integers(30, 1500, n)
    col["R"][:] = np.round(col["R_star"] * rng.uniform(0.5, 1.5, n))
    col["A_star"][:] = np.round(col["R_star"] * rng.uniform(0.5, 3.0, n))
    col["A"][:] = np.round(col["R"] * rng.uniform(0.5, 4.0, n))
    col["T_star"][:] = rng.uniform(1.0, 60.0, n)
    col["T"][:] = col["T_star"] * rng.uniform(0.5, 1.8, n)
    col["lbar_star"][:] = rng.uniform(0.5, 6.0, n)
    col["lbar"][:] = col["lbar_star"] * rng.uniform(0.9, 2.0, n)
    col["c_star"][:] = rng.integers(0, 3, n)
    col["c"][:] = rng.integers(0, 3, n)
    return col


NAMES = ("lambda", "gain", "rounds_ratio_predicted", "time_per_round_ratio")


@pytest.mark.parametrize("n_items", [12, 30])
def test_ses_equal_hand_derived_gradients_in_a_loop(n_items):
    rng = np.random.default_rng(n_items)
    X = _items(rng, n_items)
    counts = item_counts(n_items, 40, rng).astype(float)
    counts[0] = 1.0  # the point estimate: every item once
    names = NAMES + ("accuracy_delta_pp",)
    sums, strata = _resampled(X, counts, names)
    fns = {n: REGISTRY.metric(n).of for n in names}
    got = values_and_ses(fns, sums, strata, {n: n != "accuracy_delta_pp" for n in names})
    for name in names:
        want = [_loop_se(name, X, counts[b]) for b in range(len(counts))]
        np.testing.assert_allclose(got[name][1], want, rtol=1e-9, err_msg=name)


def test_stratified_se_is_the_sum_of_the_strata_variances():
    """Items resampled within two strata: se² = Σₛ g′(Mₛ − SₛSₛ′/nₛ)g, against the loop on each stratum's centring."""
    rng = np.random.default_rng(3)
    X = _items(rng, 20)
    strata_of = np.repeat([0, 1], 10)
    g = _gradient("lambda", {f: X[f].sum() for f in FIELDS})
    want = 0.0
    for s in (0, 1):
        inside = strata_of == s
        lin = [sum(gk * (X[f][i] - X[f][inside].mean()) for f, gk in g.items()) for i in np.flatnonzero(inside)]
        want += float(np.sum(np.square(lin)))
    pairs = moment_pairs([REGISTRY.metric("lambda").of], FIELDS)
    strata = [Stratum(Sums({f: X[f][strata_of == s].sum() for f in FIELDS}),
                      {p: v[strata_of == s].sum() for p, v in item_products(X, pairs).items()}, 10.0) for s in (0, 1)]
    (_, se), = values_and_ses({"lambda": REGISTRY.metric("lambda").of}, Sums({f: X[f].sum() for f in FIELDS}), strata,
                              {"lambda": True}).values()
    assert se == pytest.approx(np.sqrt(want), rel=1e-10)


def test_lossless_arm_has_se_zero():
    """Relaxed sums equal to the baseline's: lambda is 1 in every resample and its SE exactly 0 (no rounding noise)."""
    rng = np.random.default_rng(5)
    X = _items(rng, 20)
    X["L"] = X["L_star"].copy()
    sums, strata = _resampled(X, item_counts(20, 50, rng).astype(float), ("lambda",))
    value, se = values_and_ses({"lambda": REGISTRY.metric("lambda").of}, sums, strata, {"lambda": True})["lambda"]
    assert np.all(value == 0.0) and np.all(se == 0.0)


def test_dual_arithmetic():
    """Each operation's derivative, by hand: x = 3, y = 4."""
    x, y = Dual.variable(np.array([3.0]), "x"), Dual.variable(np.array([4.0]), "y")
    q = x / y  # d/dx = 1/y = 0.25, d/dy = -x/y^2 = -0.1875
    assert q.value[0] == 0.75 and q.grad["x"][0] == 0.25 and q.grad["y"][0] == -0.1875
    e = 100.0 * (np.array([1.0]) - (x * y + 2.0) / (y - x))  # 100 (1 - (xy + 2)/(y - x)) = 100 (1 - 14) = -1300
    # d/dx of (xy + 2)/(y - x) = (y (y - x) + (xy + 2)) / (y - x)^2 = 4 + 14 = 18; d/dy = (x (y - x) - (xy + 2)) = 3 - 14 = -11
    assert e.value[0] == -1300.0 and e.grad["x"][0] == -1800.0 and e.grad["y"][0] == 1100.0
    z = np.array([6.0]) / -x  # 6 / (-x) = -2; d/dx = 6 / x^2 = 2/3
    assert z.value[0] == -2.0 and z.grad["x"][0] == pytest.approx(2 / 3, rel=1e-15)
    with np.errstate(all="ignore"):
        nan = x / Dual.variable(np.array([0.0]), "y")  # a zero denominator: not finite, as in the plain definition
    assert not np.isfinite(nan.value[0])


def test_dual_powers_logs_exps_and_roots():
    """x = 3, y = 4: x**2 (6), sqrt(y) (1/(2·2) = 0.25), log(x/y) (1/x, −1/y), exp(x − y) (e^{-1}, −e^{-1}), x**y."""
    x, y = Dual.variable(np.array([3.0]), "x"), Dual.variable(np.array([4.0]), "y")
    assert (x ** 2).value[0] == 9.0 and (x ** 2).grad["x"][0] == 6.0
    r = np.sqrt(y)
    assert r.value[0] == 2.0 and r.grad["y"][0] == 0.25
    lg = np.log(x / y)
    assert lg.grad["x"][0] == pytest.approx(1 / 3, rel=1e-15) and lg.grad["y"][0] == pytest.approx(-0.25, rel=1e-15)
    ex = np.exp(x - y)
    assert ex.grad["x"][0] == pytest.approx(np.exp(-1.0), rel=1e-15) and ex.grad["y"][0] == pytest.approx(-np.exp(-1.0))
    p = x ** y  # d/dx = y x^(y-1) = 4 · 27 = 108; d/dy = x^y log x = 81 log 3
    assert p.value[0] == pytest.approx(81.0) and p.grad["x"][0] == pytest.approx(108.0)
    assert p.grad["y"][0] == pytest.approx(81.0 * np.log(3.0))
    assert (2.0 ** x).grad["x"][0] == pytest.approx(8.0 * np.log(2.0))  # d/dx 2^x = 2^x log 2
