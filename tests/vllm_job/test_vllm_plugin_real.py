"""The rules plugin inside the real vLLM package, on a CPU (no fakes).

Run in a venv of its own: ``pip install -e .[vllm,test] && python -m pytest -m vllm tests/vllm_job``
(``.ci/run`` does). Skipped when vLLM is not importable. Checked on vLLM 0.26.0 and 0.33.0.

What runs here, for real: vLLM's plugin loader (``vllm.plugins.load_general_plugins``) finding the
``lengthlens_rules`` entry point and calling ``register``; the module globals that V1's
``RejectionSampler.forward`` and the V2 runner's ``RejectionSampler`` look ``rejection_sample``
up in; real ``SpecDecodeMetadata`` / ``SamplingMetadata`` objects; V1's ``RejectionSampler.forward``
(bonus sampling with vLLM's ``Sampler``, logits processors, temperature) calling the patched
function on CPU tensors; and the engine-start checks in both runners' ``RejectionSampler``.

Not covered on a CPU (Triton kernels need CUDA; ``tests/gpu`` covers them on a GPU):
  * ``expand_batch_to_tokens`` (Triton ``expand_kernel``), which ``apply_sampling_constraints``
    uses to spread each request's temperature over its draft rows; here a pure-torch equivalent
    stands in for it, checked against its documented example;
  * the stock kernels: the greedy verification that mixed greedy/random batches keep
    (``rejection_greedy_sample_kernel``), the stock random path, and all of model-runner V2's
    ``RejectionSampler.__call__`` (``apply_sampling_params``, gather and rejection kernels), so the
    V2 wrapper is called here directly, through the name the V2 caller uses, with arguments bound
    by the real 0.26.0 / 0.33.0 signature;
  * end-to-end engine runs and vLLM's spec-decode counters.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

pytestmark = pytest.mark.vllm

vllm = pytest.importorskip("vllm", reason="needs the real vLLM package (pip install -e .[vllm,test])")
if getattr(vllm, "__file__", None) is None:
    # A folder named vllm somewhere on sys.path imports as an empty namespace package: not vLLM.
    # (This folder is vllm_job, not vllm, for that reason.)
    pytest.skip("needs the real vLLM package (pip install -e .[vllm,test])", allow_module_level=True)
torch = pytest.importorskip("torch")

from vllm.v1.sample import rejection_sampler as rs  # noqa: E402
from vllm.v1.sample.metadata import SamplingMetadata  # noqa: E402
from vllm.v1.sample.sampler import Sampler  # noqa: E402
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata  # noqa: E402

from lengthlens.generate import rules as R  # noqa: E402
from lengthlens.generate import vllm_plugin as P  # noqa: E402
from lengthlens.generate.vllm_tensors import race_sample  # noqa: E402

v2 = pytest.importorskip(P.V2_MODULE)
v2u = pytest.importorskip(P.V2_UTILS_MODULE)

V = 11


@pytest.fixture(autouse=True)
def _clean(monkeypatch, tmp_path):
    monkeypatch.setenv(P.ENV_TRACE, str(tmp_path / "trace.txt"))
    monkeypatch.delenv(P.ENV_RULE, raising=False)
    monkeypatch.delenv(P.ENV_ALPHA, raising=False)
    P.restore()
    yield
    P.restore()


def _load_through_vllm(monkeypatch, rule: str, alpha: str) -> None:
    """Load the general plugins as vLLM does in each process it starts."""
    import vllm.plugins as plugins

    monkeypatch.setenv(P.ENV_RULE, rule)
    monkeypatch.setenv(P.ENV_ALPHA, alpha)
    monkeypatch.setenv("VLLM_PLUGINS", "lengthlens_rules")
    monkeypatch.setattr(plugins, "plugins_loaded", False)
    plugins.load_general_plugins()


def _callers(cls) -> list:
    """Methods of ``cls`` whose code calls a global named ``rejection_sample``."""
    out = []
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if "rejection_sample" in fn.__code__.co_names:
            out.append(fn)
    return out


def test_plugin_loads_through_vllm_and_patches_what_the_runners_call(monkeypatch, tmp_path):
    stock1, stock2 = rs.rejection_sample, v2u.rejection_sample
    assert stock1.__module__ == P.V1_MODULE and P.check_signature(stock1, P.V1_SIGNATURES, "v1") in ("0.26.0", "0.33.0")
    _load_through_vllm(monkeypatch, "cactus", "0.3")
    assert rs.rejection_sample.__lengthlens_rule__ == ("cactus", 0.3)
    assert rs.rejection_sample.__wrapped__ is stock1
    # V1: RejectionSampler.forward calls the module global that was patched.
    (fwd,) = _callers(rs.RejectionSampler)
    assert fwd.__name__ == "forward" and fwd.__globals__ is vars(rs)
    assert fwd.__globals__["rejection_sample"] is rs.rejection_sample
    # V2: the runner's RejectionSampler calls the name imported into its own module; both are patched.
    callers = _callers(v2.RejectionSampler)
    assert callers and all(f.__globals__ is vars(v2) for f in callers)
    assert v2.rejection_sample is v2u.rejection_sample
    assert v2.rejection_sample.__lengthlens_rule__ == ("cactus", 0.3) and v2.rejection_sample.__wrapped__ is stock2
    line = (tmp_path / "trace.txt").read_text().splitlines()[0]
    assert f"register vllm={vllm.__version__} cactus 0.3" in line and f"{P.V2_MODULE}.rejection_sample" in line
    P.restore()
    assert rs.rejection_sample is stock1 and v2.rejection_sample is stock2 and v2u.rejection_sample is stock2


def test_no_rule_leaves_vllm_untouched(monkeypatch):
    stock = rs.rejection_sample
    _load_through_vllm(monkeypatch, "", "0")
    assert rs.rejection_sample is stock


def test_unknown_signature_is_refused_naming_version_and_function(monkeypatch):
    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_probs, bonus_token_ids, sampling_metadata):  # the layout the plugin used to assume
        raise AssertionError("never called")

    monkeypatch.setattr(rs, "rejection_sample", rejection_sample)
    with pytest.raises(P.UnsupportedVLLM) as exc:
        _load_through_vllm(monkeypatch, "cactus", "0.3")
    msg = str(exc.value)
    assert f"vLLM {vllm.__version__}" in msg and f"{P.V1_MODULE}.rejection_sample" in msg and "target_probs" in msg
    assert rs.rejection_sample is rejection_sample  # nothing half-patched


def test_engine_start_checks_in_both_runners():
    P.apply("spec_casc_tok", 0.5)
    ok = dict(method="draft_model", rejection_sample_method="standard", draft_sample_method="probabilistic",
              synthetic_acceptance_rates=None, num_speculative_tokens=3)
    spec = _spec(**ok)
    rs.RejectionSampler(Sampler(), spec, torch.device("cpu"))  # passes
    with pytest.raises(RuntimeError, match="draft_sample_method='probabilistic'"):
        rs.RejectionSampler(Sampler(), _spec(**{**ok, "draft_sample_method": "greedy"}), torch.device("cpu"))
    with pytest.raises(RuntimeError, match="ngram"):
        rs.RejectionSampler(Sampler(), _spec(**{**ok, "method": "ngram"}), torch.device("cpu"))
    # The function the runner calls was put back to the stock one: the engine must not start.
    stock = rs.rejection_sample.__wrapped__
    rs.rejection_sample = stock
    try:
        with pytest.raises(RuntimeError, match="unpatched"):
            rs.RejectionSampler(Sampler(), spec, torch.device("cpu"))
    finally:
        P.restore()
    # V2's sampler runs the same check at construction.
    P.apply("spec_casc_tok", 0.5)
    v2.rejection_sample = v2u.rejection_sample.__wrapped__
    with pytest.raises(RuntimeError, match="V2 model runner"):
        v2.RejectionSampler(_V2Sampler(), spec, torch.device("cpu"))


class _V2Sampler:
    use_fp64_gumbel = False
    logprobs_mode = "raw_logprobs"


def _spec(**kw):
    """A stand-in for SpeculativeConfig with the fields the samplers read (building a real one needs model files)."""
    import types

    defaults = dict(fly_window_size=None, fly_entropy_threshold=None, fly_entropy_top_k=3,
                    enable_adaptive_verification=False, watermark_config=None)
    return types.SimpleNamespace(**{**defaults, **kw})


# ---- V1: the real RejectionSampler.forward on CPU tensors ------------------------------------

def _expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """Pure-torch stand-in for vLLM's Triton expand_kernel (needs CUDA)."""
    counts = torch.diff(cu_num_tokens.long(), prepend=torch.zeros(1, dtype=torch.long))
    out = torch.repeat_interleave(torch.where(x == replace_from, torch.full_like(x, replace_to), x), counts)
    assert out.shape[0] == num_tokens
    return out


def test_expand_stand_in_matches_vllm_documented_example():
    doc = rs.expand_batch_to_tokens.__doc__
    assert "x = [a, b, c] and cu_num_tokens = [2, 5, 6]" in doc and "[a, a, b, b, b, c]" in doc
    got = _expand_batch_to_tokens(torch.tensor([1.0, 0.0, 3.0]), torch.tensor([2, 5, 6]), 6, 0, 1)
    assert got.tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 3.0]


def _sampling_metadata(temps, seeds):
    fields = {f.name for f in dataclasses.fields(SamplingMetadata)}
    from vllm.v1.sample.logits_processor import LogitsProcessors

    kw = dict(temperature=torch.tensor(temps, dtype=torch.float32), all_greedy=False, all_random=True,
              top_p=None, top_k=None, generators={i: torch.Generator().manual_seed(s) for i, s in enumerate(seeds)},
              max_num_logprobs=None, no_penalties=True, prompt_token_ids=None, frequency_penalties=torch.tensor([]),
              presence_penalties=torch.tensor([]), repetition_penalties=torch.tensor([]),
              output_token_ids=[[] for _ in temps], allowed_token_ids_mask=None, bad_words_token_ids={},
              logitsprocs=LogitsProcessors(), logprob_token_ids=None, spec_token_ids=None,
              thinking_budget_state_holder=None)
    return SamplingMetadata(**{k: v for k, v in kw.items() if k in fields})


def _metadata(drafts: list[list[int]]) -> SpecDecodeMetadata:
    """Real SpecDecodeMetadata, laid out as the V1 runner builds it: each request's drafts then its bonus row."""
    md = SpecDecodeMetadata.make_dummy(drafts, torch.device("cpu"))
    target, bonus, row = [], [], 0
    for d in drafts:
        target += list(range(row, row + len(d)))
        bonus.append(row + len(d))
        row += len(d) + 1
    return dataclasses.replace(md, target_logits_indices=torch.tensor(target, dtype=torch.int32),
                               bonus_logits_indices=torch.tensor(bonus, dtype=torch.int32),
                               logits_indices=torch.arange(row, dtype=torch.int32))


def _loop(rule, alpha, drafts, p, q, u, noise_row, bonus):
    """Token by token with rules.verify: accept until the first rejection, then resample, else the bonus."""
    out = []
    for i, x in enumerate(drafts):
        v = R.verify(rule, alpha, p[i:i + 1], q[i:i + 1], torch.tensor([x]), u[i:i + 1])
        if bool(v.accept[0]):
            out.append(x)
            continue
        return out + [int(race_sample(v.residual[0], noise_row))], False
    return out + [bonus], True


def _forward(rule, alpha, counts, temps, seed, monkeypatch):
    """Run RejectionSampler.forward with ``rule`` patched in; return (output, what the patched function got, ...)."""
    g = torch.Generator().manual_seed(seed)
    n = sum(counts)
    logits = torch.randn(n + len(counts), V, generator=g) * 2.0
    draft_probs = torch.softmax(torch.randn(n, V, generator=g) * 2.0, -1)
    flat = torch.multinomial(draft_probs, 1, generator=g).squeeze(-1).tolist()  # drafted from q, as a drafter does
    drafts, start = [], 0
    for c in counts:
        drafts.append(flat[start:start + c])
        start += c
    md = _metadata(drafts)
    sm = _sampling_metadata(temps, [100 + seed + i for i in range(len(drafts))])
    monkeypatch.setattr(rs, "expand_batch_to_tokens", _expand_batch_to_tokens)  # Triton on GPU (see docstring)
    P.apply(rule, alpha)
    sampler = rs.RejectionSampler(Sampler(), None, torch.device("cpu"))  # engine-start check passes
    patched = rs.rejection_sample
    seen = {}

    def spy(*args, **kwargs):
        b = inspect.signature(patched.__wrapped__).bind(*args, **kwargs)
        seen.update(b.arguments)
        seen["states"] = {i: gen.get_state() for i, gen in sm.generators.items()}
        return patched(*args, **kwargs)

    monkeypatch.setattr(rs, "rejection_sample", spy)
    out = sampler.forward(md, draft_probs, logits.clone(), sm)
    return out, seen, logits, draft_probs, md, drafts


@pytest.mark.parametrize("rule,alpha", [("lossless", 0.0), ("cactus", 0.5), ("spec_casc_tok", 0.6), ("r_fuzzy", 0.3)])
def test_v1_forward_runs_the_rule_on_cpu(rule, alpha, monkeypatch):
    counts = [3, 2, 3, 1]
    temps = [1.0, 0.7, 1.3, 1.0]
    relaxed_changed = 0
    for seed in range(8):
        out, seen, logits, draft_probs, md, drafts = _forward(rule, alpha, counts, temps, seed, monkeypatch)
        tokens = out.sampled_token_ids
        assert tokens.dtype == torch.int32 and tokens.shape == (len(drafts), md.max_spec_len + 1)
        # vLLM hands the patched function the target logits after temperature, as the plugin assumes.
        t_rows = torch.repeat_interleave(torch.tensor(temps), torch.tensor(counts))
        torch.testing.assert_close(seen["target_logits"], logits[md.target_logits_indices.long()] / t_rows[:, None])
        assert seen["draft_probs"] is draft_probs and seen["synthetic_mode"] is False
        # Rebuild the randomness the wrapper drew from each request's generator, and verify token by token.
        gens = {}
        for i, st in seen["states"].items():
            gens[i] = torch.Generator()
            gens[i].set_state(st)
        u = rs.generate_uniform_probs(md.draft_token_ids.shape[0], md.num_draft_tokens, gens, torch.device("cpu"))
        u = u.to(torch.float32).clamp_min(torch.finfo(torch.float32).tiny)
        noise = torch.empty(len(drafts), V)
        for i in range(len(drafts)):
            noise[i].exponential_(generator=gens[i])
        p = torch.softmax(seen["target_logits"], -1)
        start = 0
        for b, d in enumerate(drafts):
            rows = slice(start, start + len(d))
            want, all_acc = _loop(rule, alpha, d, p[rows], draft_probs[rows], u[rows], noise[b],
                                  int(seen["bonus_token_ids"][b, 0]))
            row = tokens[b].tolist()
            assert row[:len(want)] == want, (rule, seed, b)
            assert all(t == rs.PLACEHOLDER_TOKEN_ID for t in row[len(want):])  # rejected tail is padding
            # Positions the rule accepted where the lossless test with the same u rejects.
            strict = R.verify("lossless", 0.0, p[rows], draft_probs[rows], torch.tensor(d), u[rows])
            n_acc = len(want) - 1
            relaxed_changed += int((~strict.accept[:n_acc]).sum())
            start += len(d)
        # The bonus token is vLLM's own sampler's draw from the bonus rows.
        assert seen["bonus_token_ids"].shape == (len(drafts), 1)
        P.restore()
    if rule == "lossless":
        assert relaxed_changed == 0
    else:  # the relaxed rule accepted drafts the lossless test on the same u rejected
        assert relaxed_changed > 0, rule


def test_v1_relaxed_rule_without_draft_probs_refuses(monkeypatch):
    P.apply("cactus", 0.5)
    md = _metadata([[1, 2]])
    sm = _sampling_metadata([1.0], [0])
    monkeypatch.setattr(rs, "expand_batch_to_tokens", _expand_batch_to_tokens)
    sampler = rs.RejectionSampler(Sampler(), None, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="draft distribution"):
        sampler.forward(md, None, torch.randn(3, V), sm)


# ---- V2: the patched function through the name the V2 runner calls ---------------------------

def test_v2_patched_function_layout_and_dtypes():
    P.apply("r_fuzzy", 0.2)
    params = tuple(inspect.signature(v2.rejection_sample.__wrapped__).parameters)
    assert params in P.V2_SIGNATURES
    counts, k = [3, 1, 2], 3
    g = torch.Generator().manual_seed(0)
    n_logits = sum(c + 1 for c in counts)
    target_logits = torch.randn(n_logits, V, generator=g)
    draft_logits = torch.randn(5, k, V, generator=g)
    idx_mapping = torch.tensor([4, 0, 2], dtype=torch.int32)
    draft_sampled = torch.randint(0, V, (n_logits,), generator=g)
    cu = torch.tensor([0, 4, 6, 9], dtype=torch.int32)
    pos = torch.arange(n_logits) + 7
    exp_idx = torch.repeat_interleave(idx_mapping, torch.tensor([c + 1 for c in counts]))
    exp_pos = torch.cat([torch.arange(c + 1) for c in counts]).to(torch.int32)
    temperature, seed = torch.ones(5), torch.arange(5) + 3
    kwargs = dict(target_logits=target_logits, draft_logits=draft_logits, draft_sampled=draft_sampled,
                  cu_num_logits=cu, pos=pos, idx_mapping=idx_mapping, expanded_idx_mapping=exp_idx,
                  expanded_local_pos=exp_pos, temperature=temperature, seed=seed, num_speculative_steps=k)
    sampled, num_sampled = v2.rejection_sample(**kwargs)
    again = v2.rejection_sample(*kwargs.values())  # positionally, in the real signature's order
    assert torch.equal(sampled, again[0]) and torch.equal(num_sampled, again[1])  # seeded by (seed, position)
    assert sampled.dtype == torch.int64 and num_sampled.dtype == torch.int32  # vLLM's dtypes (its source)
    assert sampled.shape == (3, k + 1)
    p = torch.softmax(target_logits, -1)
    for r, c in enumerate(counts):
        n = int(num_sampled[r])
        assert 1 <= n <= c + 1
        start = int(cu[r])
        # Accepted drafts are the drafted tokens; r_fuzzy accepts outright where JSD(p, q) < alpha.
        for i in range(n - 1):
            assert int(sampled[r, i]) == int(draft_sampled[start + i + 1])
        q = torch.softmax(draft_logits[int(idx_mapping[r]), :c], -1)
        close = R.jsd(p[start:start + c], q) < 0.2
        lead_close = int(torch.cumprod(close.int(), 0).sum())
        assert n - 1 >= lead_close
    for bad, match in ((dict(use_block_verification=True), "block"),
                       (dict(synthetic_conditional_rates=torch.ones(k)), "synthetic"),
                       (dict(draft_logits=None), "draft distribution")):
        with pytest.raises(RuntimeError, match=match):
            v2.rejection_sample(**{**kwargs, **bad})


def test_backend_prompt_is_a_real_tokens_prompt():
    # The backend sends {"prompt_token_ids": ids}: vLLM's TokensPrompt.
    from vllm.inputs import TokensPrompt

    assert "prompt_token_ids" in TokensPrompt.__annotations__
    assert "prompts" in inspect.signature(vllm.LLM.generate).parameters
