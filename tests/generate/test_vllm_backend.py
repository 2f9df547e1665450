"""The vLLM runner's glue against a fake ``vllm`` module: metric deltas, engine lifecycle, force-commit."""

from __future__ import annotations

import json
import os
import sys
import types
from dataclasses import dataclass

import pytest

from lengthlens.generate.config import Arm, config_from_dict
from lengthlens.generate.runner import run_campaign
from lengthlens.generate.vllm_backend import spec_counters


@dataclass
class Metric:
    name: str
    value: float


def test_spec_counters_sums_and_ignores_other_metrics():
    ms = [Metric("vllm:spec_decode_num_drafts", 3.0), Metric("vllm:spec_decode_num_drafts_total", 2.0),
          Metric("vllm:spec_decode_num_draft_tokens", 20.0), Metric("vllm:spec_decode_num_accepted_tokens", 9.0),
          Metric("vllm:spec_decode_num_accepted_tokens_per_pos", 1.0), Metric("vllm:prompt_tokens", 50.0)]
    assert spec_counters(ms) == {"draft_rounds": 5.0, "draft_tokens": 20.0, "accepted_tokens": 9.0}


def _fake_vllm():
    """A stand-in for vllm.LLM: emits 'x' tokens, 2 rounds and 3 accepted drafts per 5 tokens."""
    m = types.ModuleType("vllm")
    m.__version__ = "0.26.0"
    m.engines = []

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class Tok:
        # Bytes as ids, and a BOS (id 1) in front when asked to add special tokens.
        def encode(self, s, add_special_tokens=True):
            return ([1] if add_special_tokens else []) + list(s.encode())

    class LLM:
        def __init__(self, model, speculative_config, **kw):
            self.model, self.spec, self.kw = model, speculative_config, kw
            self.env_rule = os.environ.get("LENGTHLENS_RULE")
            self.totals = {"drafts": 0.0, "tokens": 0.0, "acc": 0.0}
            self.prompts = []
            m.engines.append(self)

        def get_metrics(self):
            return [Metric("vllm:spec_decode_num_drafts", self.totals["drafts"]),
                    Metric("vllm:spec_decode_num_draft_tokens", self.totals["tokens"]),
                    Metric("vllm:spec_decode_num_accepted_tokens", self.totals["acc"])]

        def get_tokenizer(self):
            return Tok()

        def generate(self, prompts, sp, use_tqdm=False):
            self.prompts.append(prompts[0]["prompt_token_ids"])
            n = min(sp.max_tokens, 40)
            rounds = (n + 4) // 5
            self.totals["drafts"] += rounds
            self.totals["tokens"] += rounds * self.spec["num_speculative_tokens"]
            self.totals["acc"] += 3 * rounds
            comp = types.SimpleNamespace(text="x" * n, token_ids=[ord("x")] * n,
                                         finish_reason="length" if n == sp.max_tokens else "stop")
            return [types.SimpleNamespace(outputs=[comp], prompt_token_ids=list(prompts[0]["prompt_token_ids"]))]

    m.LLM, m.SamplingParams = LLM, SamplingParams
    return m


@pytest.fixture
def plugin_calls(monkeypatch):
    """The plugin's apply/restore recorded (the plugin itself is tested against the real vLLM in tests/vllm_job)."""
    from lengthlens.generate import vllm_plugin

    calls = []
    monkeypatch.setattr(vllm_plugin, "apply", lambda rule, alpha: calls.append(("apply", rule, alpha)) or [])
    monkeypatch.setattr(vllm_plugin, "restore", lambda: calls.append(("restore",)))
    return calls


def test_vllm_backend_with_fake_engine(tmp_path, monkeypatch, plugin_calls):
    fake = _fake_vllm()
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.delenv("VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", raising=False)
    monkeypatch.delenv("LENGTHLENS_RULE", raising=False)
    (tmp_path / "items.jsonl").write_text('{"id": "a", "prompt": "p1"}\n{"id": "b", "prompt": "p2"}\n')
    cfg = config_from_dict({
        "backend": "vllm", "target": {"name": "T", "path": "/models/t"}, "draft": {"name": "D", "path": "/models/d"},
        "datasets": {"toy": "items.jsonl"}, "speculative": {"num_draft_tokens": 4},
        "sampling": {"max_new_tokens": 64}, "thinking": {"format": "think", "opened_in_prompt": True},
        "arms": ["strict", {"rule": "cactus", "alpha": 0.3, "force_commit": 16}],
        "prompt": {"add_special_tokens": True},
        "vllm": {"engine_per": "run", "llm_kwargs": {"enforce_eager": True}, "tensor_parallel_size": 2,
                 "pipeline_parallel_size": 2, "distributed_executor_backend": "ray", "draft_tensor_parallel_size": 1},
    }, base=tmp_path)
    s = run_campaign(cfg, tmp_path / "out", log=lambda m: None)
    assert (s.written, s.failed) == (4, 0)
    # A fresh engine per measurement, prefix caching off, probabilistic drafting, rule by environment.
    assert len(fake.engines) == 4
    e = fake.engines[0]
    assert e.kw["enable_prefix_caching"] is False and e.kw["enforce_eager"] is True
    # Parallel settings pass through to vLLM (targets that need several GPUs).
    assert (e.kw["tensor_parallel_size"], e.kw["pipeline_parallel_size"], e.kw["distributed_executor_backend"]) == (2, 2, "ray")
    assert e.spec == {"method": "draft_model", "model": "/models/d", "num_speculative_tokens": 4,
                      "draft_sample_method": "probabilistic", "draft_tensor_parallel_size": 1}
    # Interleaved: item a's arms (strict, cactus), then item b's with the order rotated (cactus, strict).
    assert [x.env_rule for x in fake.engines] == [None, "cactus", "cactus", None]
    assert ("apply", "cactus", 0.3) in plugin_calls
    # Token ids, with the BOS the campaign asked for (add_special_tokens: true).
    assert fake.engines[0].prompts == [[1, *b"p1"]]
    rj = json.loads((tmp_path / "out/runs/toy/strict/strict/case_001/seed_0/run.json").read_text())
    assert (rj["output_tokens"], rj["draft_rounds"], rj["accepted_tokens"], rj["draft_tokens"]) == (40, 8.0, 24.0, 32.0)
    assert rj["backend"] == "vllm" and rj["finish_reason"] == "stop" and rj["input_tokens"] == 3
    assert rj["tensor_parallel_size"] == 2
    cj = json.loads((tmp_path / "out/runs/toy/strict/strict/case_001/seed_0/config.json").read_text())
    assert cj["engine_version"] == "0.26.0" and cj["model"] == "T" and cj["draft_model"] == "D"
    # Force-commit: 16 tokens, still thinking -> marker appended, then the rest of the budget.
    fc = tmp_path / "out/runs/toy/cactus_force_commit/alpha0.3_t16/case_002/seed_0"
    rj = json.loads((fc / "run.json").read_text())
    marker = len("</think>")
    assert rj["force_commit_fired"] is True and rj["force_commit_at"] == 16
    assert rj["output_tokens"] == 16 + marker + 40
    assert rj["draft_rounds"] == 4.0 + 8.0
    assert (fc / "output.txt").read_text() == "x" * 16 + "</think>" + "x" * 40
    # The continuation is the first request's ids, the completion's ids and the marker's: no second BOS.
    assert fake.engines[2].prompts == [[1, *b"p2"], [1, *b"p2", *b"x" * 16, *b"</think>"]]
    assert "LENGTHLENS_RULE" not in os.environ  # closing the backend clears the rule


def test_prompt_ids_follow_add_special_tokens_on_a_tokenizer_that_adds_bos(monkeypatch, tmp_path):
    # A real fast tokenizer whose post-processor adds BOS: the template's own <bos> must not be doubled.
    pytest.importorskip("transformers")
    from tokenizers.processors import TemplateProcessing

    from lengthlens.generate.tiny import build_tiny_tokenizer
    from lengthlens.generate.vllm_backend import VLLMBackend

    tok = build_tiny_tokenizer()
    bos = tok.bos_token_id
    tok._tokenizer.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    assert tok.encode("ab")[0] == bos and tok.encode("<bos>ab").count(bos) == 2  # the trap
    fake = _fake_vllm()
    monkeypatch.setitem(sys.modules, "vllm", fake)
    (tmp_path / "i.jsonl").write_text('{"id": 1, "prompt": "ab"}\n')
    llm = types.SimpleNamespace(get_tokenizer=lambda: tok)
    for add, template, want in ((False, "<bos>{prompt}", 1), (True, "{prompt}", 1), (True, "<bos>{prompt}", 2)):
        cfg = config_from_dict({"backend": "vllm", "target": "/m/t", "draft": "/m/d", "datasets": {"d": "i.jsonl"},
                                "arms": ["strict"], "prompt": {"template": template, "add_special_tokens": add}},
                               base=tmp_path)
        ids = VLLMBackend(cfg).prompt_ids(llm, template.replace("{prompt}", "ab"))
        assert ids.count(bos) == want and ids[0] == bos and tok.decode(ids[-2:]) == "ab"


def test_parallel_settings_are_checked(monkeypatch, tmp_path):
    from lengthlens.generate.vllm_backend import parallel_kwargs

    assert parallel_kwargs({}) == ({}, {})
    assert parallel_kwargs({"tensor_parallel_size": 4})[0] == {"tensor_parallel_size": 4}
    for bad in ({"tensor_parallel_size": 0}, {"pipeline_parallel_size": "2"}, {"draft_tensor_parallel_size": True}):
        with pytest.raises(ValueError, match="positive integer"):
            parallel_kwargs(bad)


def test_vllm_backend_refuses_tiny_models(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm())
    from lengthlens.generate.vllm_backend import VLLMBackend

    (tmp_path / "i.jsonl").write_text('{"id": 1, "prompt": "x"}\n')
    cfg = config_from_dict({"target": {"tiny": {}}, "draft": {"tiny": {}}, "datasets": {"d": "i.jsonl"},
                            "arms": ["strict"]}, base=tmp_path)
    with pytest.raises(ValueError, match="needs 'path'"):
        VLLMBackend(cfg)
    assert Arm("lossless").params == "strict"


def test_cli_refuses_a_vllm_the_plugin_does_not_know(monkeypatch, tmp_path, capsys):
    # A "vllm" without the rejection sampler the plugin patches: the campaign stops before any engine starts.
    import argparse

    from lengthlens.generate import vllm_plugin as P
    from lengthlens.generate.cli import add_parser

    fake = _fake_vllm()
    fake.__version__ = "9.9.9"
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, P.V1_MODULE, None)
    (tmp_path / "i.jsonl").write_text('{"id": 1, "prompt": "x"}\n')
    (tmp_path / "c.yaml").write_text("backend: vllm\ntarget: /m/t\ndraft: /m/d\ndatasets: {d: i.jsonl}\n"
                                     "arms: [strict, {rule: cactus, alpha: 0.3}]\n")
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers(dest="command"))
    args = ap.parse_args(["generate", str(tmp_path / "c.yaml"), str(tmp_path / "out"), "--quiet"])
    assert args.func(args) == 3
    err = capsys.readouterr().err
    assert "vLLM 9.9.9" in err and f"{P.V1_MODULE}.rejection_sample" in err
    assert fake.engines == [] and not (tmp_path / "out" / "runs").exists()
