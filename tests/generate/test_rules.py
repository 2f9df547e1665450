"""The verification rules against independent oracles: formulas in numpy, enumeration, chi-square."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.spatial.distance import jensenshannon

from lengthlens.generate import rules as R

ALPHAS = {
    "lossless": [0.0],
    "mentored_dec": [0.0, 0.15, 0.5, 0.9],
    "cactus": [0.0, 0.03, 0.3, 2.0],
    "spec_casc_opt": [-math.inf, -0.3, -0.02, 0.05, 0.5],
    "spec_casc_tok": [-math.inf, -0.5, 0.0, 0.35, 0.8],
    "r_fuzzy": [-math.inf, 0.03, 0.15, 0.6],
}


# ---- the oracle: each rule transcribed from the issue text, one scalar case at a time, in numpy ----

def _ratio(px: float, qx: float) -> float:
    if qx > 0:
        return px / qx
    return math.inf if px > 0 else 0.0


def _norm_pos(r: np.ndarray, p: np.ndarray) -> np.ndarray:
    r = np.maximum(r, 0.0)
    # Same no-mass tolerance as the module (its docstring): rounding noise of a zero residual.
    return r / r.sum() if r.sum() > 8 * np.finfo(float).eps else p


def oracle(rule: str, a: float, p: np.ndarray, q: np.ndarray, x: int) -> tuple[float, np.ndarray]:
    """(P(accept | x), residual distribution) straight from the formulas."""
    px, qx = p[x], q[x]
    lossless = min(1.0, _ratio(px, qx))
    res = _norm_pos(p - q, p)
    if rule == "lossless":
        return lossless, res
    if rule == "mentored_dec":
        # accept iff p(x) / ((1 - a) q(x)) >= u
        return min(1.0, _ratio(px, (1 - a) * qx)), res
    if rule == "cactus":
        g = min(px + math.sqrt(2 * a * px * (1 - px)), 1.0)
        h = np.array([g if y == x else (p[y] * (1 - g) / (1 - px) if px < 1 else 0.0) for y in range(len(p))])
        return min(1.0, _ratio(g, qx)), _norm_pos(h - q, p)
    if rule == "spec_casc_opt":
        tv = np.maximum(p - q, 0).sum()
        defer = q.max() < p.max() - (a * tv if tv > 0 else 0.0)
        return (lossless if defer else 1.0), res
    if rule == "spec_casc_tok":
        in_a = p >= (1 - a) * p.max()
        eta = 1 - q[in_a].sum()
        pi = q * in_a + eta * p
        return min(1.0, _ratio(pi[x], qx)), _norm_pos(pi - q, p)
    if rule == "r_fuzzy":
        js = jensenshannon(p, q) ** 2  # scipy returns the distance (sqrt), natural log by default
        return (1.0 if js < a else lossless), res
    raise AssertionError(rule)


def oracle_output(rule: str, a: float, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Exact emitted-token distribution: sum_x q(x) [a(x) 1{y=x} + (1 - a(x)) r_x(y)]."""
    out = np.zeros_like(p)
    for x in range(len(p)):
        acc, res = oracle(rule, a, p, q, x)
        out[x] += q[x] * acc
        out += q[x] * (1 - acc) * res
    return out


def _dists(seed: int, v: int = 6, zeros: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(v, 0.7))
    q = rng.dirichlet(np.full(v, 0.7))
    if zeros:
        p[rng.integers(v)] = 0.0
        q[rng.integers(v)] = 0.0
        p, q = p / p.sum(), q / q.sum()
    return p, q


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64)


CASES = [(rule, a) for rule, al in ALPHAS.items() for a in al]


@pytest.mark.parametrize("rule,alpha", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_acceptance_and_residual_match_formulas(rule, alpha, seed):
    p, q = _dists(seed, zeros=seed % 2 == 1)
    v = len(p)
    xs = torch.arange(v)
    pp, qq = _t(p).expand(v, v), _t(q).expand(v, v)
    acc = R.acceptance_probability(rule, alpha, pp, qq, xs)
    _, res, _ = R.thresholds_and_residuals(rule, alpha, pp, qq, xs)
    for x in range(v):
        a_ref, r_ref = oracle(rule, alpha, p, q, x)
        assert float(acc[x]) == pytest.approx(a_ref, abs=1e-12), (rule, alpha, x)
        np.testing.assert_allclose(res[x].numpy(), r_ref, atol=1e-12)


@pytest.mark.parametrize("rule,alpha", CASES)
@pytest.mark.parametrize("seed", range(3))
def test_output_distribution_enumeration(rule, alpha, seed):
    p, q = _dists(100 + seed, zeros=seed == 2)
    got = R.output_distribution(rule, alpha, _t(p), _t(q)).numpy()
    np.testing.assert_allclose(got, oracle_output(rule, alpha, p, q), atol=1e-12)
    assert got.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_lossless_output_is_exactly_p(seed):
    p, q = _dists(200 + seed, v=7, zeros=seed % 2 == 0)
    got = R.output_distribution("lossless", 0.0, _t(p), _t(q)).numpy()
    np.testing.assert_allclose(got, p, atol=1e-14)


def _monte_carlo(rule: str, alpha: float, p: np.ndarray, q: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Counts of emitted tokens over n independent draft-verify-resample draws through R.verify."""
    g = torch.Generator().manual_seed(seed)
    v = len(p)
    pt, qt = _t(p), _t(q)
    x = torch.multinomial(qt, n, replacement=True, generator=g)
    u = 1.0 - torch.rand(n, generator=g, dtype=torch.float64)
    verdict = R.verify(rule, alpha, pt.expand(n, v), qt.expand(n, v), x, u)
    y = torch.multinomial(verdict.residual, 1, generator=g).squeeze(-1)
    out = torch.where(verdict.accept, x, y)
    return np.bincount(out.numpy(), minlength=v)


def _chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    mask = probs > 0
    assert counts[~mask].sum() == 0, "emitted a token of zero probability"
    exp = probs[mask] * counts.sum()
    return float(stats.chisquare(counts[mask], exp * counts[mask].sum() / exp.sum()).pvalue)


def test_lossless_output_matches_p_statistically():
    p, q = _dists(7, v=8)
    counts = _monte_carlo("lossless", 0.0, p, q, 200_000, seed=1)
    assert _chi2_pvalue(counts, p) > 1e-3


@pytest.mark.parametrize("rule,alpha", [("mentored_dec", 0.5), ("cactus", 0.3), ("spec_casc_opt", 0.05),
                                        ("spec_casc_tok", 0.35), ("r_fuzzy", 0.6)])
def test_relaxed_output_enumeration_equals_monte_carlo(rule, alpha):
    # A pair on which every rule relaxes: q is peakier than p and disagrees with it.
    p = np.array([0.45, 0.2, 0.15, 0.1, 0.05, 0.05])
    q = np.array([0.1, 0.55, 0.1, 0.1, 0.1, 0.05])
    exact = R.output_distribution(rule, alpha, _t(p), _t(q)).numpy()
    counts = _monte_carlo(rule, alpha, p, q, 200_000, seed=2)
    assert _chi2_pvalue(counts, exact) > 1e-3
    # The relaxation is real on this pair: the emitted distribution is not p.
    assert np.abs(exact - p).sum() > 1e-3


@pytest.mark.parametrize("rule", ["mentored_dec", "cactus", "spec_casc_opt", "spec_casc_tok", "r_fuzzy"])
def test_strict_limit_is_bit_identical_to_lossless(rule):
    g = torch.Generator().manual_seed(3)
    n, v = 400, 9
    p = torch.distributions.Dirichlet(torch.full((v,), 0.5, dtype=torch.float64)).sample((n,))
    q = torch.distributions.Dirichlet(torch.full((v,), 0.5, dtype=torch.float64)).sample((n,))
    p[::7] = q[::7]  # p == q rows: TV = 0 and JSD = 0 corner cases
    x = torch.multinomial(q, 1, generator=g).squeeze(-1)
    u = 1.0 - torch.rand(n, generator=g, dtype=torch.float64)
    ref = R.verify("lossless", 0.0, p, q, x, u)
    got = R.verify(rule, R.STRICT_ALPHA[rule], p, q, x, u)
    assert torch.equal(got.accept, ref.accept)
    assert torch.equal(got.residual, ref.residual)
    assert torch.equal(got.strict_accept, ref.strict_accept)


def test_spec_casc_tok_alpha_zero_is_not_strict():
    p = _t(np.array([0.5, 0.3, 0.2]))
    q = _t(np.array([0.2, 0.3, 0.5]))
    lossless = R.output_distribution("lossless", 0.0, p, q)
    tok0 = R.output_distribution("spec_casc_tok", 0.0, p, q)
    assert not torch.allclose(tok0, lossless)


def test_q_of_x_zero():
    p = _t(np.array([0.5, 0.5, 0.0]))
    q = _t(np.array([0.0, 0.5, 0.5]))
    # x = 0: q(x) = 0 with p(x) > 0 is accepted; x = 2: p(x) = 0 is never accepted, even at u = 1e-300.
    x = torch.tensor([0, 2])
    u = _t(np.array([1.0, 1e-300]))
    for rule, alpha in [("lossless", 0.0), ("mentored_dec", 0.5), ("cactus", 0.0), ("spec_casc_tok", -math.inf)]:
        v = R.verify(rule, alpha, p.expand(2, 3), q.expand(2, 3), x, u)
        assert v.accept.tolist() == [True, False], rule
        assert torch.isfinite(v.residual).all()


def test_p_one_hot():
    p = _t(np.array([0.0, 1.0, 0.0, 0.0]))
    q = _t(np.array([0.25, 0.25, 0.25, 0.25]))
    for rule, alpha in [("lossless", 0.0), ("mentored_dec", 0.3), ("cactus", 0.5), ("spec_casc_tok", 0.5)]:
        out = R.output_distribution(rule, alpha, p, q)
        # From a one-hot target every rule that rejects p(x) = 0 tokens emits the target token.
        np.testing.assert_allclose(out.numpy(), p.numpy(), atol=1e-15, err_msg=rule)
    # cactus with p(x) = 1: gamma = 1 and H is the point mass (no division by 1 - p(x) = 0).
    acc = R.acceptance_probability("cactus", 0.3, p.expand(1, 4), q.expand(1, 4), torch.tensor([1]))
    assert float(acc[0]) == 1.0


def test_ties():
    # spec_casc_tok at alpha 0: A holds every tied maximum of p.
    p = _t(np.array([0.4, 0.4, 0.2]))
    q = _t(np.array([0.1, 0.1, 0.8]))
    t, _, _ = R.thresholds_and_residuals("spec_casc_tok", 0.0, p.expand(3, 3), q.expand(3, 3), torch.arange(3))
    eta = 1 - 0.2
    np.testing.assert_allclose(t.numpy(), [(0.1 + eta * 0.4) / 0.1, (0.1 + eta * 0.4) / 0.1, eta * 0.2 / 0.8], atol=1e-12)
    # spec_casc_opt with max q == max p - alpha TV exactly: not deferred (strict inequality) -> accept.
    p2 = _t(np.array([0.6, 0.4]))
    q2 = _t(np.array([0.4, 0.6]))
    # TV = 0.2, max p = max q = 0.6: defer iff 0.6 < 0.6 - 0.2 alpha -> alpha < 0.
    acc0 = R.acceptance_probability("spec_casc_opt", 0.0, p2.expand(2, 2), q2.expand(2, 2), torch.arange(2))
    assert acc0.tolist() == [1.0, 1.0]
    accm = R.acceptance_probability("spec_casc_opt", -0.01, p2.expand(2, 2), q2.expand(2, 2), torch.arange(2))
    np.testing.assert_allclose(accm.numpy(), [1.0, 0.4 / 0.6], atol=1e-12)


def test_jsd_matches_scipy():
    for s in range(5):
        p, q = _dists(300 + s, v=5, zeros=True)
        assert float(R.jsd(_t(p), _t(q))) == pytest.approx(jensenshannon(p, q) ** 2, abs=1e-12)


def test_alpha_domains():
    p = _t(np.array([0.5, 0.5]))
    for rule, bad in [("mentored_dec", 1.0), ("mentored_dec", -0.1), ("cactus", -0.1), ("nope", 0.0),
                      ("r_fuzzy", math.inf), ("cactus", math.nan)]:
        with pytest.raises(ValueError):
            R.verify(rule, bad, p.expand(1, 2), p.expand(1, 2), torch.tensor([0]), _t(np.array([0.5])))


def test_temperature_and_top_p():
    from lengthlens.generate.sampling import probs_from_logits

    logits = torch.tensor([2.0, 1.0, 0.5, -1.0, 2.0])
    g = probs_from_logits(logits, 0.0)
    assert g.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]  # first maximal index, like argmax
    full = torch.softmax(logits.double() / 0.7, -1)
    np.testing.assert_allclose(probs_from_logits(logits, 0.7).numpy(), full.numpy(), atol=1e-15)
    # top_p: smallest set of top tokens whose mass reaches top_p.
    srt = full.sort(descending=True)
    k = int((srt.values.cumsum(-1) < 0.8).sum()) + 1
    keep = set(srt.indices[:k].tolist())
    tp = probs_from_logits(logits, 0.7, 0.8)
    assert {i for i in range(5) if tp[i] > 0} == keep
    assert float(tp.sum()) == pytest.approx(1.0)


_weights = st.lists(st.one_of(st.just(0.0), st.floats(0.01, 10.0)), min_size=2, max_size=8)


@settings(max_examples=150, deadline=None)
@given(pw=_weights, qw=_weights, rule_i=st.integers(0, len(CASES) - 1))
def test_property_output_is_a_distribution_and_strict_limits_hold(pw, qw, rule_i):
    n = min(len(pw), len(qw))
    p, q = np.array(pw[:n]), np.array(qw[:n])
    if p.sum() == 0 or q.sum() == 0:
        return
    p, q = p / p.sum(), q / q.sum()
    rule, alpha = CASES[rule_i]
    out = R.output_distribution(rule, alpha, _t(p), _t(q)).numpy()
    assert (out >= -1e-15).all() and abs(out.sum() - 1) < 1e-12
    np.testing.assert_allclose(out, oracle_output(rule, alpha, p, q), atol=1e-12)
    if alpha == R.STRICT_ALPHA[rule]:
        np.testing.assert_allclose(out, p, atol=1e-12)
