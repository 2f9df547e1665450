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

from lengthlens.stats.delta import item_products, metrics_and_ses, moment_pairs
from lengthlens.stats.dual import Dual
from lengthlens.stats.metrics import SUM_FIELDS, SUM_INDEX, _div
from lengthlens.stats.resample import item_counts


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


def _loop_se(name: str, X: np.ndarray, w: np.ndarray) -> float:
    """The SE by its definition: items one by one, weighted by their counts."""
    n = w.sum()
    S = {f: float(sum(w[i] * X[i, SUM_INDEX[f]] for i in range(len(w)))) for f in SUM_FIELDS}
    g = _gradient(name, S)
    var = 0.0
    for i in range(len(w)):
        lin = sum(gk * (X[i, SUM_INDEX[f]] - S[f] / n) for f, gk in g.items())
        var += w[i] * lin * lin
    return float(np.sqrt(var))


def _items(rng, n: int) -> np.ndarray:
    X = np.zeros((n, len(SUM_FIELDS)))
    col = {f: X[:, SUM_INDEX[f]] for f in SUM_FIELDS}
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
    return X


NAMES = ("lambda", "gain", "rounds_ratio_predicted", "time_per_round_ratio")


@pytest.mark.parametrize("n_items", [12, 30])
def test_ses_equal_hand_derived_gradients_in_a_loop(n_items):
    rng = np.random.default_rng(n_items)
    X = _items(rng, n_items)
    counts = item_counts(n_items, 40, rng).astype(float)
    counts[0] = 1.0  # the point estimate: every item once
    names = NAMES + ("accuracy_delta_pp",)
    pairs = moment_pairs(names)
    Xe = np.concatenate([X, item_products(X, pairs)], axis=1)
    boot = counts @ Xe  # (B, fields + pairs)
    n_q = len(SUM_FIELDS)
    s = {f: boot[:, i] for f, i in SUM_INDEX.items()}
    moments = {p: boot[:, n_q + j] for j, p in enumerate(pairs)}
    log_ses = metrics_and_ses(NAMES, s, moments, n_items, log=True)
    id_ses = metrics_and_ses(("accuracy_delta_pp",), s, moments, n_items, log=False)
    for name in names:
        got = (id_ses if name == "accuracy_delta_pp" else log_ses)[name][1]
        want = [_loop_se(name, X, counts[b]) for b in range(len(counts))]
        np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=name)


def test_lossless_arm_has_se_zero():
    """Relaxed sums equal to the baseline's: lambda is 1 in every resample and its SE exactly 0 (no rounding noise)."""
    rng = np.random.default_rng(5)
    X = _items(rng, 20)
    X[:, SUM_INDEX["L"]] = X[:, SUM_INDEX["L_star"]]
    pairs = moment_pairs(("lambda",))
    boot = item_counts(20, 50, rng).astype(float) @ np.concatenate([X, item_products(X, pairs)], axis=1)
    s = {f: boot[:, i] for f, i in SUM_INDEX.items()}
    value, se = metrics_and_ses(("lambda",), s, {p: boot[:, len(SUM_FIELDS) + j] for j, p in enumerate(pairs)},
                                20, log=True)["lambda"]
    assert np.all(value == 0.0) and np.all(se == 0.0)


def test_dual_arithmetic():
    """Each operation's derivative, by hand: x = 3 (field 0), y = 4 (field 1)."""
    x, y = Dual.variable(np.array([3.0]), 0), Dual.variable(np.array([4.0]), 1)
    q = _div(x, y)  # x / y: d/dx = 1/y = 0.25, d/dy = -x/y^2 = -0.1875
    assert q.value[0] == 0.75 and q.grad[0][0] == 0.25 and q.grad[1][0] == -0.1875
    e = 100.0 * (np.array([1.0]) - _div(x * y + 2.0, y - x))  # 100 (1 - (xy + 2)/(y - x)) = 100 (1 - 14) = -1300
    # d/dx of (xy + 2)/(y - x) = (y (y - x) + (xy + 2)) / (y - x)^2 = 4 + 14 = 18; d/dy = (x (y - x) - (xy + 2)) = 3 - 14 = -11
    assert e.value[0] == -1300.0 and e.grad[0][0] == -1800.0 and e.grad[1][0] == 1100.0
    z = _div(np.array([6.0]), -x)  # 6 / (-x) = -2; d/dx = 6 / x^2 = 2/3
    assert z.value[0] == -2.0 and z.grad[0][0] == pytest.approx(2 / 3, rel=1e-15)
    nan = _div(x, Dual.variable(np.array([0.0]), 1))  # a zero denominator: NaN, as in the plain definition
    assert np.isnan(nan.value[0])
