"""The vLLM plugin's tensor code on a CPU (no vLLM): layouts, distributions, padding, dtypes."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from scipy import stats

from lengthlens.generate import rules as R
from lengthlens.generate import vllm_plugin as P
from lengthlens.generate.vllm_tensors import (
    PLACEHOLDER_TOKEN_ID,
    race_sample,
    v1_rejection_sample,
    v2_rejection_sample,
)


def _loop_reference(rule, alpha, drafts, p, q, bonus, u, noise_row):
    """One request, token by token: accept until the first rejection, then resample or add the bonus."""
    out = []
    for i, x in enumerate(drafts):
        v = R.verify(rule, alpha, p[i:i + 1], q[i:i + 1], torch.tensor([x]), u[i:i + 1])
        if bool(v.accept[0]):
            out.append(x)
            continue
        out.append(int(race_sample(v.residual[0], noise_row)))
        return out
    return out + [bonus]


def _random_batch(seed, counts, v=7):
    g = torch.Generator().manual_seed(seed)
    t = sum(counts)
    p = torch.distributions.Dirichlet(torch.full((v,), 0.6, dtype=torch.float64)).sample((t,))
    q = torch.distributions.Dirichlet(torch.full((v,), 0.6, dtype=torch.float64)).sample((t,))
    x = torch.multinomial(q, 1, generator=g).squeeze(-1) if t else torch.zeros(0, dtype=torch.long)
    u = 1.0 - torch.rand(t, generator=g, dtype=torch.float64)
    noise = torch.empty(len(counts), v, dtype=torch.float64).exponential_(generator=g)
    bonus = torch.randint(0, v, (len(counts), 1), generator=g)
    return p, q, x, u, noise, bonus


@pytest.mark.parametrize("rule,alpha", [("lossless", 0.0), ("mentored_dec", 0.5), ("cactus", 0.3),
                                        ("spec_casc_opt", 0.05), ("spec_casc_tok", 0.5), ("r_fuzzy", 0.2)])
def test_v1_layout_matches_token_loop(rule, alpha):
    counts = [2, 0, 3, 1, 3]
    for seed in range(5):
        p, q, x, u, noise, bonus = _random_batch(seed, counts)
        out = v1_rejection_sample(rule, alpha, x, counts, 3, q, p, bonus, u, noise)
        assert out.dtype == torch.int32 and out.shape == (5, 4)
        start = 0
        for b, n in enumerate(counts):
            ref = _loop_reference(rule, alpha, x[start:start + n].tolist(), p[start:start + n], q[start:start + n],
                                  int(bonus[b, 0]), u[start:start + n], noise[b])
            row = out[b].tolist()
            assert row[: len(ref)] == ref and all(t == PLACEHOLDER_TOKEN_ID for t in row[len(ref):])
            start += n


def _v1_to_v2(p, q, x, counts, k):
    """The same batch in V2's layout: one extra (bonus) row per request, drafts shifted by one."""
    r = len(counts)
    v = p.shape[-1]
    rows, sampled = [], []
    draft_logits = torch.zeros(r + 2, k, v, dtype=torch.float64)  # extra unused slots
    idx_mapping = torch.tensor([r + 1 - i for i in range(r)])  # state slots are not request order
    bonus_logits = torch.log(torch.distributions.Dirichlet(torch.ones(v, dtype=torch.float64)).sample((r,)))
    start = 0
    for j, n in enumerate(counts):
        sampled.append(0)  # the last accepted token sits before the first verified row
        for i in range(n):
            rows.append(torch.log(p[start + i]))
            sampled.append(int(x[start + i]))
            draft_logits[idx_mapping[j], i] = torch.log(q[start + i])
        rows.append(bonus_logits[j])
        start += n
    target_logits = torch.stack(rows)
    # Each request's rows start at its placeholder entry, so row i verifies draft_sampled[i + 1].
    draft_sampled = torch.tensor(sampled)
    cu = torch.tensor([0] + list(np.cumsum([n + 1 for n in counts])))
    return target_logits, draft_logits, draft_sampled, cu, idx_mapping, bonus_logits


@pytest.mark.parametrize("rule,alpha", [("lossless", 0.0), ("cactus", 0.3), ("spec_casc_tok", 0.5), ("r_fuzzy", 0.2)])
def test_v2_layout_matches_v1(rule, alpha):
    counts = [3, 3, 1, 2]
    k = 3
    for seed in range(5):
        p, q, x, u, noise, _ = _random_batch(100 + seed, counts)
        tl, dl, ds, cu, idx, bonus_logits = _v1_to_v2(p, q, x, counts, k)
        # Uniforms in V2's row layout (the bonus row's entry is unused).
        u2 = torch.ones(tl.shape[0], dtype=torch.float64)
        start = 0
        for j, n in enumerate(counts):
            u2[int(cu[j]):int(cu[j]) + n] = u[start:start + n]
            start += n
        sampled, num = v2_rejection_sample(rule, alpha, tl, dl, ds, cu, idx, k, u2, noise)
        bonus = race_sample(torch.softmax(bonus_logits, -1), noise).unsqueeze(-1)
        ref = v1_rejection_sample(rule, alpha, x, counts, k, q, p, bonus, u, noise)
        for j in range(len(counts)):
            row = [t for t in ref[j].tolist() if t != PLACEHOLDER_TOKEN_ID]
            assert int(num[j]) == len(row)
            assert sampled[j, : len(row)].tolist() == row


@pytest.mark.parametrize("rule,alpha", [("lossless", 0.0), ("mentored_dec", 0.5), ("cactus", 0.3), ("spec_casc_tok", 0.35)])
def test_v1_emitted_distribution_equals_enumeration(rule, alpha):
    # 40,000 one-draft requests in one batch: the first emitted token is distributed as the rule says.
    n, v = 40_000, 5
    p1 = torch.tensor([0.45, 0.25, 0.15, 0.1, 0.05], dtype=torch.float64)
    q1 = torch.tensor([0.1, 0.5, 0.2, 0.1, 0.1], dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    x = torch.multinomial(q1, n, replacement=True, generator=g)
    u = 1.0 - torch.rand(n, generator=g, dtype=torch.float64)
    noise = torch.empty(n, v, dtype=torch.float64).exponential_(generator=g)
    bonus = torch.zeros(n, 1, dtype=torch.long)
    out = v1_rejection_sample(rule, alpha, x, [1] * n, 1, q1.expand(n, v), p1.expand(n, v), bonus, u, noise)
    counts = np.bincount(out[:, 0].numpy(), minlength=v)
    exact = R.output_distribution(rule, alpha, p1, q1).numpy()
    assert stats.chisquare(counts, exact * n).pvalue > 1e-3


# ---- padding, dtypes and the environment (the glue itself is tested against the real vLLM in tests/vllm_job) ----

def test_padded_drafts_are_rejected_with_the_lossless_residual():
    # vLLM pads drafts with -1; such a draft is never accepted, even by a rule that accepts everything.
    counts = [3, 2]
    p, q, x, u, noise, bonus = _random_batch(7, counts)
    x = x.clone()
    x[1] = -1  # request 0, second draft
    out = v1_rejection_sample("r_fuzzy", 10.0, x, counts, 3, q, p, bonus, u, noise)  # JSD < 10 always: accept
    assert out[0, 0] == x[0] and out[0, 1] == race_sample(R.normalize_residual(p[1] - q[1], p[1]), noise[0])
    assert out[0, 2:].tolist() == [PLACEHOLDER_TOKEN_ID, PLACEHOLDER_TOKEN_ID]
    assert out[1].tolist() == [int(x[3]), int(x[4]), int(bonus[1, 0]), PLACEHOLDER_TOKEN_ID]
    tl, dl, ds, cu, idx, _ = _v1_to_v2(p, q, x.clamp_min(0), counts, 3)
    ds = ds.clone()
    ds[2] = -1  # the same draft in V2's layout (row 1 verifies draft_sampled[2])
    sampled, num = v2_rejection_sample("r_fuzzy", 10.0, tl, dl, ds, cu, idx, 3, torch.ones(tl.shape[0]), noise)
    assert sampled.dtype == torch.int64 and num.dtype == torch.int32  # vLLM's dtypes
    assert num.tolist() == [2, 3] and int(sampled[0, 0]) == int(x[0])


def test_rule_from_env():
    assert P.rule_from_env({}) is None
    assert P.rule_from_env({"LENGTHLENS_RULE": "cactus", "LENGTHLENS_ALPHA": "0.3"}) == ("cactus", 0.3)
    assert P.rule_from_env({"LENGTHLENS_RULE": "r_fuzzy", "LENGTHLENS_ALPHA": "-inf"}) == ("r_fuzzy", -math.inf)
    with pytest.raises(ValueError):
        P.rule_from_env({"LENGTHLENS_RULE": "mentored_dec", "LENGTHLENS_ALPHA": "1.5"})
    with pytest.raises(ValueError):
        P.rule_from_env({"LENGTHLENS_RULE": "bogus"})


def test_plugin_without_vllm_refuses_to_patch(monkeypatch):
    # No vLLM importable: apply() names what is missing instead of pretending to patch.
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setitem(sys.modules, P.V1_MODULE, None)
    with pytest.raises(P.UnsupportedVLLM, match="rejection_sample"):
        P.apply("cactus", 0.3)
