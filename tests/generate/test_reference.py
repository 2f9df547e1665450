"""The CPU reference sampler against plain decoding: greedy equality, target frequencies, counters."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from scipy import stats

from lengthlens.generate.reference import (
    ForceCommit,
    greedy_generate,
    next_token_probs,
    speculative_generate,
)
from lengthlens.generate.tiny import build_tiny_model, build_tiny_tokenizer, perturbed_copy

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def pair32():
    """A 32-token target and a clearly different draft (so rejections happen every round)."""
    target = build_tiny_model(32, hidden=32, layers=2, heads=4, seed=0, logit_scale=4.0)
    draft = perturbed_copy(target, noise=0.8, seed=1)
    return target, draft


@pytest.fixture(scope="module")
def pair12():
    """A 12-token pair for frequency tests (few cells, so chi-square has power with few runs)."""
    target = build_tiny_model(12, hidden=32, layers=1, heads=4, seed=3, logit_scale=2.5)
    draft = perturbed_copy(target, noise=0.6, seed=4)
    return target, draft


@pytest.mark.parametrize("rule,alpha", [("lossless", 0.0), ("mentored_dec", 0.5), ("cactus", 0.3),
                                        ("spec_casc_tok", 0.5), ("r_fuzzy", 0.5)])
def test_temperature_zero_equals_greedy(pair32, rule, alpha):
    # At temperature 0, p and q are one-hot: these rules reject any token that is not the target's
    # argmax (r_fuzzy below ln 2, the JSD of two different one-hots), so the output is greedy's.
    target, draft = pair32
    prompt = [5, 9, 2, 17]
    ref = greedy_generate(target, prompt, 40)
    for n in (1, 3, 5):
        g = speculative_generate(target, draft, prompt, rule=rule, alpha=alpha, num_draft=n,
                                 temperature=0.0, max_new_tokens=40, seed=0)
        assert g.tokens == ref, (rule, n)
        assert g.draft_rounds < 40  # some drafts were accepted, so the check is not vacuous


def test_temperature_zero_with_eos_stops_like_greedy(pair32):
    target, draft = pair32
    prompt = [1, 2, 3]
    ref = greedy_generate(target, prompt, 60)
    eos = ref[7]  # make a token greedy emits early the EOS
    ref_eos = greedy_generate(target, prompt, 60, eos_id=eos)
    g = speculative_generate(target, draft, prompt, num_draft=4, temperature=0.0, max_new_tokens=60, seed=0, eos_id=eos)
    assert g.tokens == ref_eos and g.finish_reason == "stop" and g.tokens[-1] == eos


def test_lossless_token_frequencies_match_target(pair12):
    target, draft = pair12
    prompt = [3, 7]
    n = 1000
    first = np.zeros(12, dtype=int)
    second = np.zeros(12, dtype=int)
    for s in range(n):
        g = speculative_generate(target, draft, prompt, num_draft=3, temperature=1.0,
                                 max_new_tokens=2, seed=s, log_proposals=False)
        first[g.tokens[0]] += 1
        second[g.tokens[1]] += 1
    # Exact marginals of sampling the target directly, by enumerating the first token.
    p1 = next_token_probs(target, [prompt])[0]
    p2_given = next_token_probs(target, [prompt + [t] for t in range(12)])
    p2 = (p1.unsqueeze(-1) * p2_given).sum(0)
    for counts, probs in ((first, p1.numpy()), (second, p2.numpy())):
        assert stats.chisquare(counts, probs * n).pvalue > 1e-3
    # The draft is far from the target, so the check has teeth: q's marginal is rejected.
    q1 = next_token_probs(draft, [prompt])[0].numpy()
    assert stats.chisquare(first, q1 * n).pvalue < 1e-6


@pytest.mark.parametrize("rule,alpha", [("lossless", 0.0), ("cactus", 0.5), ("spec_casc_opt", 0.1), ("r_fuzzy", 0.3)])
def test_counters_are_consistent(pair32, rule, alpha):
    target, draft = pair32
    for seed, budget, eos in [(0, 50, None), (1, 37, 4), (2, 64, 11), (3, 1, None)]:
        n = 4
        g = speculative_generate(target, draft, [1, 2, 3], rule=rule, alpha=alpha, num_draft=n,
                                 max_new_tokens=budget, seed=seed, eos_id=eos)
        assert len(g.tokens) == g.accepted_tokens + g.draft_rounds + g.forced_tokens - g.truncated_tokens
        assert 0 <= g.truncated_tokens <= n  # only the final round is cut
        assert g.draft_tokens == n * g.draft_rounds
        assert g.target_forwards == g.draft_rounds  # one target forward per verifier round
        assert len(g.tokens) <= budget
        if g.finish_reason == "length":
            assert len(g.tokens) == budget
        else:
            assert g.tokens[-1] == eos and eos not in g.tokens[:-1]
        rows = g.proposals
        assert sum(r["emission_source"] == "accepted_draft" for r in rows) == g.accepted_tokens
        assert len({r["round"] for r in rows}) == g.draft_rounds
        emitted = [r["emitted_token_id"] for r in rows if r["in_output"]]
        assert emitted == g.tokens
        assert [r["output_position"] for r in rows if r["in_output"]] == list(range(len(g.tokens)))
        for r in rows:
            if r["emission_source"] in ("accepted_draft", "recovered"):
                assert r["lossy_only_accepted"] == (r["actually_accepted"] and not r["strict_would_accept"])
                if rule == "lossless":
                    assert r["strict_would_accept"] == r["actually_accepted"]


def test_same_seed_same_output_bit_for_bit(pair32):
    target, draft = pair32
    a = speculative_generate(target, draft, [4, 4, 4], rule="cactus", alpha=0.2, max_new_tokens=40, seed=7)
    b = speculative_generate(target, draft, [4, 4, 4], rule="cactus", alpha=0.2, max_new_tokens=40, seed=7)
    c = speculative_generate(target, draft, [4, 4, 4], rule="cactus", alpha=0.2, max_new_tokens=40, seed=8)
    assert a.tokens == b.tokens and a.proposals == b.proposals
    assert a.tokens != c.tokens


def test_force_commit_appends_marker_once():
    tok = build_tiny_tokenizer()
    target = build_tiny_model(len(tok), hidden=32, layers=1, seed=5, logit_scale=3.0)
    draft = perturbed_copy(target, noise=0.3, seed=6)
    close = tok.encode("</think>", add_special_tokens=False)
    assert len(close) == 1
    prompt = tok.encode("<bos>q: 1+1=?\n<think>", add_special_tokens=False)
    calls = []

    def is_open(out):
        calls.append(len(out))
        return close[0] not in out

    fc = ForceCommit(threshold=10, marker_ids=close, is_open=is_open)
    g = speculative_generate(target, draft, prompt, num_draft=3, max_new_tokens=30, seed=0,
                             eos_id=tok.eos_token_id, force_commit=fc)
    if close[0] in g.tokens[: g.forced_at or 0]:
        pytest.skip("the model closed its thinking on its own before the threshold")
    assert g.forced_at is not None and 10 <= g.forced_at <= 10 + 3
    assert g.tokens[g.forced_at] == close[0] and g.forced_tokens == 1
    assert len(calls) == 1  # checked once, at the first round end past the threshold
    assert len(g.tokens) == g.accepted_tokens + g.draft_rounds + g.forced_tokens - g.truncated_tokens
    forced_rows = [r for r in g.proposals if r["emission_source"] == "forced"]
    assert [r["output_position"] for r in forced_rows] == [g.forced_at]
    # Without the intervention the same seed gives the same tokens up to the threshold.
    plain = speculative_generate(target, draft, prompt, num_draft=3, max_new_tokens=30, seed=0, eos_id=tok.eos_token_id)
    assert plain.tokens[: g.forced_at] == g.tokens[: g.forced_at]


def test_tiny_tokenizer_round_trip():
    tok = build_tiny_tokenizer()
    text = "q: 12+7=?\n<think>12+7 is 19.</think>answer: 19"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert len(tok.encode("<think>", add_special_tokens=False)) == 1
    assert tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == text
