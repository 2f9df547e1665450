"""The vLLM plugin's tensor code and glue on a CPU (no vLLM): layouts, distributions, patching."""

from __future__ import annotations

import inspect
import math
import sys
import types
from dataclasses import dataclass, field

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


# ---- the glue, against fake vLLM modules carrying the real functions' signatures ----

@dataclass
class FakeMeta:
    temperature: torch.Tensor
    all_greedy: bool = False
    all_random: bool = True
    generators: dict = field(default_factory=dict)


def _fake_v1_module():
    m = types.ModuleType(P.V1_MODULE)
    m.GREEDY_TEMPERATURE = 0
    m.calls = []

    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_probs, bonus_token_ids, sampling_metadata):
        m.calls.append("stock")
        out = torch.full((len(num_draft_tokens), max_spec_len + 1), 99, dtype=torch.int32)
        return out

    def generate_uniform_probs(num_tokens, num_draft_tokens, generators, device):
        return torch.rand(num_tokens, dtype=torch.float32, device=device)

    m.rejection_sample = rejection_sample
    m.generate_uniform_probs = generate_uniform_probs
    return m


def _fake_v2_module(name):
    m = types.ModuleType(name)
    m.calls = []

    def probabilistic_rejection_sample(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                                       expanded_idx_mapping, expanded_local_pos, temperature, seed,
                                       num_speculative_steps):
        m.calls.append("stock")
        r = cu_num_logits.shape[0] - 1
        return torch.full((r, num_speculative_steps + 1), 77, dtype=torch.int64), torch.ones(r, dtype=torch.int64)

    m.probabilistic_rejection_sample = probabilistic_rejection_sample
    return m


@pytest.fixture
def fake_vllm(monkeypatch):
    mods = {P.V1_MODULE: _fake_v1_module(), P.V2_MODULES[2]: _fake_v2_module(P.V2_MODULES[2])}
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    yield mods
    P.restore()


def test_rule_from_env():
    assert P.rule_from_env({}) is None
    assert P.rule_from_env({"LENGTHLENS_RULE": "cactus", "LENGTHLENS_ALPHA": "0.3"}) == ("cactus", 0.3)
    assert P.rule_from_env({"LENGTHLENS_RULE": "r_fuzzy", "LENGTHLENS_ALPHA": "-inf"}) == ("r_fuzzy", -math.inf)
    with pytest.raises(ValueError):
        P.rule_from_env({"LENGTHLENS_RULE": "mentored_dec", "LENGTHLENS_ALPHA": "1.5"})
    with pytest.raises(ValueError):
        P.rule_from_env({"LENGTHLENS_RULE": "bogus"})


def test_apply_patches_v1_and_v2_and_restores(fake_vllm):
    m1, m2 = fake_vllm[P.V1_MODULE], fake_vllm[P.V2_MODULES[2]]
    stock1, stock2 = m1.rejection_sample, m2.probabilistic_rejection_sample
    names = P.apply("cactus", 0.3)
    assert names == [f"{P.V1_MODULE}.rejection_sample", f"{P.V2_MODULES[2]}.probabilistic_rejection_sample"]
    assert m1.rejection_sample.__lengthlens_rule__ == ("cactus", 0.3)
    # The wrapper keeps the stock call's arguments usable by position and by name.
    assert next(iter(inspect.signature(stock1).parameters)) == "draft_token_ids"
    P.apply("r_fuzzy", 0.1)  # re-applying wraps the stock function, not the previous wrapper
    assert m1.rejection_sample.__lengthlens_rule__ == ("r_fuzzy", 0.1)
    P.restore()
    assert m1.rejection_sample is stock1 and m2.probabilistic_rejection_sample is stock2


def test_v1_wrapper_runs_rule_and_falls_back(fake_vllm):
    m1 = fake_vllm[P.V1_MODULE]
    P.apply("lossless", 0.0)
    p, q, x, _, _, bonus = _random_batch(0, [2, 1])
    p, q = p.float(), q.float()
    args = (x, [2, 1], 2, torch.tensor([2, 3]), q, p, bonus)
    out = m1.rejection_sample(*args, FakeMeta(torch.tensor([1.0, 1.0])))
    assert m1.calls == [] and out.shape == (2, 3) and int(out[0, 0]) != 99
    # Greedy batch, or no draft probabilities: the stock sampler.
    m1.rejection_sample(*args, FakeMeta(torch.tensor([0.0, 0.0]), all_greedy=True, all_random=False))
    m1.rejection_sample(x, [2, 1], 2, torch.tensor([2, 3]), None, p, bonus, FakeMeta(torch.tensor([1.0, 1.0])))
    assert m1.calls == ["stock", "stock"]
    # Mixed: the greedy request's row is the stock one.
    mixed = m1.rejection_sample(*args, sampling_metadata=FakeMeta(torch.tensor([0.0, 1.0]), all_random=False))
    assert mixed[0].tolist() == [99, 99, 99] and 99 not in mixed[1].tolist()


def test_v2_wrapper_runs_rule_and_is_seeded(fake_vllm):
    m2 = fake_vllm[P.V2_MODULES[2]]
    P.apply("spec_casc_tok", 0.5)
    p, q, x, _, _, _ = _random_batch(3, [2, 2])
    tl, dl, ds, cu, idx, _ = _v1_to_v2(p, q, x, [2, 2], 2)
    temp = torch.ones(dl.shape[0])
    seeds = torch.arange(dl.shape[0]) + 11
    pos = torch.arange(tl.shape[0]) + 40
    call = (tl.float(), dl.float(), ds, cu, pos, idx, None, None, temp, seeds, 2)
    a = m2.probabilistic_rejection_sample(*call)
    b = m2.probabilistic_rejection_sample(*call)
    assert m2.calls == []
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # same seeds and positions, same draw
    assert a[0].shape == (2, 3) and all(1 <= int(n) <= 3 for n in a[1])
    temp0 = torch.zeros(dl.shape[0])
    m2.probabilistic_rejection_sample(tl.float(), dl.float(), ds, cu, pos, idx, None, None, temp0, seeds, 2)
    m2.probabilistic_rejection_sample(tl.float(), None, ds, cu, pos, idx, None, None, temp, seeds, 2)
    assert m2.calls == ["stock", "stock"]


def test_unexpected_signatures_are_left_alone(monkeypatch):
    m1 = types.ModuleType(P.V1_MODULE)
    m1.rejection_sample = lambda draft_token_ids, target_probs: None  # not the layout we know
    m2 = types.ModuleType(P.V2_MODULES[0])
    m2.rejection_sample = lambda logits, input_batch: None
    monkeypatch.setitem(sys.modules, P.V1_MODULE, m1)
    monkeypatch.setitem(sys.modules, P.V2_MODULES[0], m2)
    try:
        assert P.apply("cactus", 0.3) == []
    finally:
        P.restore()
