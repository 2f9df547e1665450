"""GPU check (one H100/H200, under 5 minutes): the rules on CUDA, and a tiny target-draft pair end to end in vLLM.

Run: ``pip install -e .[vllm,reference,test] && pytest tests/gpu -m gpu -q`` (vLLM 0.26.0 or 0.33.x).
Skipped without a CUDA GPU; the vLLM part is skipped without vLLM. The package must be installed
(not only on PYTHONPATH) so vLLM's engine processes find the ``lengthlens_rules`` plugin entry point.
The module sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` (a spawned engine loads the plugins itself,
whatever this process did before, so the result does not depend on test order or on CUDA having
been initialised here), ``HF_HUB_OFFLINE=1`` and ``VLLM_NO_USAGE_STATS=1``.

What this proves that the CPU ``vllm`` job (``tests/vllm_job``) cannot:
  * the CUDA side: rules.verify and the V1/V2 layout code give the same decisions on CUDA as on the
    CPU, and vLLM's Triton kernels (temperature expansion, the stock greedy and random paths, the
    whole model-runner-V2 sampler) run around the patched function;
  * end to end in a real engine: at temperature 0, vLLM's speculative output equals plain greedy
    decoding of the target (the CPU reference oracle), and rounds/accepted match the CPU reference
    sampler's deterministic counts (within vLLM's documented one-round metric slack at EOS);
  * at temperature 1, a relaxed arm really runs through the plugin inside vLLM's engine process:
    the trace shows the plugin registered there, the runner's engine-start check passed, and the
    patched function of that same runner (V1 on 0.26.0's draft_model, V2 by default on 0.33) was
    called; vLLM's spec-decode counters are consistent on every run: draft_tokens = K * draft_rounds
    and output_tokens = accepted + rounds up to the final round's truncation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

VLLM_ENV = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


@pytest.fixture(autouse=True)
def _vllm_env(monkeypatch):
    for key, value in VLLM_ENV.items():
        monkeypatch.setenv(key, value)


K = 3
BUDGET = 48


def test_rules_on_cuda_match_cpu():
    from lengthlens.generate import rules as R
    from lengthlens.generate.vllm_tensors import v1_rejection_sample

    g = torch.Generator().manual_seed(0)
    n, v = 512, 1000
    p = torch.softmax(torch.randn(n, v, generator=g) * 3, -1)
    q = torch.softmax(torch.randn(n, v, generator=g) * 3, -1)
    x = torch.multinomial(q, 1, generator=g).squeeze(-1)
    u = 1.0 - torch.rand(n, generator=g)
    noise = torch.empty(n // 4, v).exponential_(generator=g)
    bonus = torch.randint(0, v, (n // 4, 1), generator=g)
    for rule, alpha in [("lossless", 0.0), ("mentored_dec", 0.5), ("cactus", 0.3), ("spec_casc_opt", 0.05),
                        ("spec_casc_tok", 0.5), ("r_fuzzy", 0.2)]:
        a = R.verify(rule, alpha, p, q, x, u)
        b = R.verify(rule, alpha, p.cuda(), q.cuda(), x.cuda(), u.cuda())
        # Float32 reductions differ in order on the GPU: compare decisions away from the boundary.
        clear = (a.threshold - u).abs() > 1e-5
        assert torch.equal(a.accept[clear], b.accept.cpu()[clear]), rule
        torch.testing.assert_close(a.residual, b.residual.cpu(), atol=1e-5, rtol=1e-4)
        out_a = v1_rejection_sample(rule, alpha, x, [4] * (n // 4), 4, q, p, bonus, u, noise)
        out_b = v1_rejection_sample(rule, alpha, x.cuda(), [4] * (n // 4), 4, q.cuda(), p.cuda(), bonus.cuda(),
                                    u.cuda(), noise.cuda())
        assert (out_a == out_b.cpu()).float().mean() > 0.99, rule


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """A tiny Llama target and a perturbed draft saved as HF folders (head_dim 64 for vLLM's kernels)."""
    from lengthlens.generate.tiny import build_tiny_model, build_tiny_tokenizer, perturbed_copy

    root = tmp_path_factory.mktemp("models")
    tok = build_tiny_tokenizer()
    target = build_tiny_model(len(tok), hidden=256, layers=2, heads=4, seed=0, logit_scale=6.0, max_positions=512)
    # noise 0.1: about half the greedy drafts are accepted on CPU (checked), so counts are informative.
    draft = perturbed_copy(target, noise=0.1, seed=1)
    for name, m in (("target", target), ("draft", draft)):
        m.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return root, tok, target, draft


def _campaign(root: Path, items: Path, temperature: float, arms: list) -> dict:
    return {
        "backend": "vllm",
        "target": {"name": "tiny-target", "path": str(root / "target")},
        "draft": {"name": "tiny-draft", "path": str(root / "draft")},
        "speculative": {"num_draft_tokens": K},
        "sampling": {"temperature": temperature, "top_p": 1.0, "max_new_tokens": BUDGET},
        "seeds": [0],
        "datasets": {"toy": str(items)},
        "prompt": {"template": "<bos>{prompt}\n<think>", "add_special_tokens": False},
        "thinking": {"format": "think", "opened_in_prompt": True},
        "arms": arms,
        "vllm": {"engine_per": "arm", "llm_kwargs": {"enforce_eager": True, "dtype": "float32",
                                                      "gpu_memory_utilization": 0.3, "max_model_len": 256}},
    }


def test_vllm_tiny_pair_end_to_end(tiny_pair, tmp_path, monkeypatch):
    vllm = pytest.importorskip("vllm")
    if getattr(vllm, "__file__", None) is None:  # a folder named vllm on sys.path: not vLLM
        pytest.skip("needs vLLM (pip install -e .[vllm,reference,test])")
    from lengthlens.generate.config import config_from_dict
    from lengthlens.generate.reference import greedy_generate, speculative_generate
    from lengthlens.generate.runner import run_campaign

    root, tok, target, draft = tiny_pair
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "prompt": "q: 12+7=?", "reference": "19"}\n'
                     '{"id": "b", "prompt": "q: 30-4=?", "reference": "26"}\n')
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("LENGTHLENS_PLUGIN_TRACE", str(trace))
    out = tmp_path / "out"

    # Temperature 0: output = greedy decoding of the target; counts = the CPU reference's.
    s0 = run_campaign(config_from_dict(_campaign(root, items, 0.0, ["strict"])), out / "t0", log=print, fail_fast=True)
    assert s0.written == 2
    for case, prompt in (("case_001", "q: 12+7=?"), ("case_002", "q: 30-4=?")):
        d = out / "t0/runs/toy/strict/strict" / case / "seed_0"
        rj = json.loads((d / "run.json").read_text())
        ids = tok.encode(f"<bos>{prompt}\n<think>", add_special_tokens=False)
        greedy = greedy_generate(target.float(), ids, BUDGET, eos_id=tok.eos_token_id)
        assert (d / "output.txt").read_text() == tok.decode(greedy, skip_special_tokens=True)
        assert rj["output_tokens"] == len(greedy)
        ref = speculative_generate(target, draft, ids, num_draft=K, temperature=0.0, max_new_tokens=BUDGET,
                                   seed=0, eos_id=tok.eos_token_id, log_proposals=False)
        assert abs(rj["draft_rounds"] - ref.draft_rounds) <= 1
        assert abs(rj["accepted_tokens"] - ref.accepted_tokens) <= K

    # Temperature 1: strict and a relaxed rule; the rule runs inside vLLM's engine process.
    cfg1 = _campaign(root, items, 1.0, ["strict", {"rule": "cactus", "alpha": 0.5}])
    s1 = run_campaign(config_from_dict(cfg1), out / "t1", log=print, fail_fast=True)
    assert s1.written == 4
    lines = trace.read_text().splitlines() if trace.exists() else []
    engine_lines = [ln for ln in lines if not ln.startswith(f"{os.getpid()} ")]
    assert any("register" in ln and "cactus" in ln for ln in engine_lines), (
        f"the plugin did not register in vLLM's engine process (is lengthlens pip-installed?): {lines}")
    checks = {ln.split()[2] for ln in engine_lines if ln.split()[1] == "check" and "cactus" in ln}
    calls = {ln.split()[2].upper() for ln in engine_lines if ln.split()[1] == "call" and "cactus" in ln}
    assert checks and calls and calls <= checks, lines  # the runner that was checked is the one that ran
    for rjp in (out / "t1/runs").glob("toy/*/*/case_*/seed_0/run.json"):
        rj = json.loads(rjp.read_text())
        assert rj["status"] == "ok" and rj["draft_tokens"] == K * rj["draft_rounds"]
        slack = rj["output_tokens"] - (rj["accepted_tokens"] + rj["draft_rounds"])
        assert -K <= slack <= 1, rj  # final-round truncation; vLLM may miss the last round at EOS
