"""Generation at realistic load: interleaved serial runs, the batched path, serving conditions, engine rules.

The runner's backends are stand-ins for the runner's own ``Backend`` interface (as in
test_layout_runner.py); the batched vLLM backend's request building and its mapping of vLLM's
per-request counters are checked here on structures read from vLLM 0.33.0's source
(``vllm/outputs.py`` ``RequestOutput`` / ``CompletionOutput``, ``vllm/v1/metrics/stats.py``
``RequestSpecDecodeMetrics`` / ``RequestStateStats``), and against the real classes in tests/vllm_job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

import lengthlens as ll
from lengthlens.generate.config import Arm, config_from_dict
from lengthlens.generate.layout import RunResult
from lengthlens.generate.runner import default_order, plan, run_campaign
from lengthlens.generate.vllm_batched import build_requests, result_fields


def _cfg(tmp_path, **extra):
    (tmp_path / "items.jsonl").write_text("".join(json.dumps({"id": i, "prompt": f"{i}+1", "reference": "2"}) + "\n"
                                                  for i in range(3)))
    d = {"target": "t", "draft": "d", "datasets": {"toy": "items.jsonl"}, "seeds": [0],
         "arms": ["strict", {"rule": "cactus", "alpha": 0.1}, {"rule": "r_fuzzy", "alpha": 0.2}], **extra}
    return config_from_dict(d, base=tmp_path)


def test_serial_runs_interleave_arms_item_by_item(tmp_path):
    cfg = _cfg(tmp_path)
    runs = plan(cfg, tmp_path / "out")
    order = [(r.item.case, r.arm.method) for r in runs]
    # every arm of an item before the next item; the arms' order rotated by one per item
    assert order == [("case_001", "strict"), ("case_001", "cactus"), ("case_001", "r_fuzzy"),
                     ("case_002", "cactus"), ("case_002", "r_fuzzy"), ("case_002", "strict"),
                     ("case_003", "r_fuzzy"), ("case_003", "strict"), ("case_003", "cactus")]
    by_arm = [(r.item.case, r.arm.method) for r in plan(cfg, tmp_path / "out", order="by_arm")]
    assert by_arm[:3] == [("case_001", "strict"), ("case_002", "strict"), ("case_003", "strict")]
    assert sorted(order) == sorted(by_arm)  # the same runs
    assert default_order(cfg) == "interleaved"
    assert default_order(_cfg(tmp_path, backend="vllm-batched")) == "by_arm"
    assert default_order(_cfg(tmp_path, backend="vllm", vllm={"engine_per": "arm"})) == "by_arm"
    assert default_order(_cfg(tmp_path, backend="vllm", order="interleaved", vllm={"engine_per": "arm"})) == "interleaved"
    with pytest.raises(ValueError, match="order must be one of"):
        _cfg(tmp_path, order="random")


class Batched:
    """The runner's batched interface: ``run_batch`` gets each arm's pending runs together."""

    name = "stand-in"
    engine_version = "0"

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def run_batch(self, items, arm):
        self.calls.append((arm.method, len(items)))
        if arm.method == "r_fuzzy":
            raise RuntimeError("out of memory")
        return [RunResult(text=f"{p} = 2", output_tokens=10 + s, finish_reason="stop", draft_rounds=None,
                          accepted_tokens=None, draft_tokens=None, wall_time_seconds=None, input_tokens=3,
                          extra={"concurrency": len(items), "batch_size": 2, "gpu": "NVIDIA H200"})
                for p, s in items]

    def close(self):
        pass


def test_batched_path_one_call_per_arm_and_chunk(tmp_path):
    cfg = _cfg(tmp_path, vllm={"requests_per_call": 2}, order="by_arm")
    be = Batched()
    s = run_campaign(cfg, tmp_path / "out", backend=be, log=lambda m: None)
    # 3 items per arm in calls of at most 2; a failed call records every run of it as failed, the rest go on
    assert be.calls == [("strict", 2), ("strict", 1), ("cactus", 2), ("cactus", 1), ("r_fuzzy", 2), ("r_fuzzy", 1)]
    assert (s.written, s.failed) == (6, 3)
    rj = json.loads((tmp_path / "out/runs/toy/strict/strict/case_001/seed_0/run.json").read_text())
    assert rj["draft_rounds"] is None and rj["wall_time_seconds"] is None and rj["l_bar"] is None
    runs = ll.load(tmp_path / "out")
    t = runs.table.filter(runs.table["status"] == "ok")
    assert set(t["concurrency"]) == {1, 2} and set(t["batch_size"]) == {2} and set(t["gpu"]) == {"NVIDIA H200"}
    assert t["draft_rounds"].null_count() == t.height


def test_serving_condition_of_the_serial_reference_runs(tmp_path):
    class Serial:
        name, engine_version = "stand-in", "0"

        def run(self, prompt, arm, seed):
            return RunResult(text="x", output_tokens=1, finish_reason="stop", draft_rounds=1, accepted_tokens=0,
                             draft_tokens=4, wall_time_seconds=0.1, input_tokens=2, extra={"concurrency": 1, "batch_size": 1})

        def close(self):
            pass

    run_campaign(_cfg(tmp_path), tmp_path / "out", backend=Serial(), log=lambda m: None)
    t = ll.load(tmp_path / "out").table
    assert set(t["concurrency"]) == {1} and set(t["batch_size"]) == {1} and t["gpu"].null_count() == t.height


def test_build_requests_one_seed_and_budget_each(tmp_path):
    cfg = _cfg(tmp_path, sampling={"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 64})
    prompts, params = build_requests(cfg, [[1, 2], [1, 3, 4]], [0, 5], [64, 16])
    assert prompts == [{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [1, 3, 4]}]
    assert params == [{"temperature": 0.6, "top_p": 0.95, "max_tokens": 64, "seed": 0},
                      {"temperature": 0.6, "top_p": 0.95, "max_tokens": 16, "seed": 5}]
    with pytest.raises(ValueError, match="one seed and one budget"):
        build_requests(cfg, [[1]], [0, 1], [64])


# vLLM 0.33.0's output objects, field for field (vllm/outputs.py, vllm/v1/metrics/stats.py).
@dataclass
class RequestSpecDecodeMetrics:
    num_spec_tokens: int
    histogram: list[int] = field(default_factory=list)
    num_draft_tokens: int = 0
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:  # the payload fields of vLLM's to_dict
        steps = sum(self.histogram)
        acc = sum(j * c for j, c in enumerate(self.histogram))
        return {"mean_acceptance_length": 1.0 + acc / steps if steps else 1.0, "acceptance_histogram": self.histogram,
                "num_spec_steps": steps, "num_accepted_draft_tokens": acc, "num_draft_tokens": self.num_draft_tokens,
                "num_spec_tokens": self.num_spec_tokens}


@dataclass
class RequestStateStats:
    num_generation_tokens: int = 0
    arrival_time: float = 0.0
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: Any
    finish_reason: str | None = None
    stop_reason: Any = None
    spec_decode_metrics: RequestSpecDecodeMetrics | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestStateStats | None = None


def test_counters_of_an_offline_request_output():
    sd = RequestSpecDecodeMetrics(num_spec_tokens=3, histogram=[2, 3, 4, 5], num_draft_tokens=42)
    comp = CompletionOutput(0, "The answer is 1.", list(range(41)), None, None, "stop", None, sd)
    out = RequestOutput("0", None, [1] * 21, None, [comp], True,
                        RequestStateStats(41, 1.7e9, 100.0, 100.0025, 100.0375, 100.4475))
    r = result_fields(out)
    # histogram [2, 3, 4, 5]: 14 steps, 26 accepted; wall = last token - scheduled = 0.445 s
    assert (r["draft_rounds"], r["accepted_tokens"], r["draft_tokens"], r["output_tokens"]) == (14, 26, 42, 41)
    assert r["wall_time_s"] == pytest.approx(0.445) and r["finish_reason"] == "stop" and r["input_tokens"] == 21
    comp.spec_decode_metrics, out.metrics = None, None  # vLLM without per-request metrics, log stats off
    r = result_fields(out)
    assert r.get("draft_rounds") is None and r["wall_time_s"] is None


def test_fly_is_an_arm_and_vllm_s_relaxed_rules_are_named(tmp_path):
    from lengthlens.generate.engine_rules import ENGINE_RELAXED_METHODS, check_campaign_speculative_config

    cfg = _cfg(tmp_path, backend="vllm", arms=["strict", {"rule": "fly", "alpha": 0.3, "window": 6}])
    assert [(a.method, a.params) for a in cfg.arms] == [("strict", "strict"), ("fly", "alpha0.3_w6")]
    assert cfg.arms[1] == Arm("fly", 0.3, None, 6)
    with pytest.raises(ValueError, match="'window' is FLy's"):
        _cfg(tmp_path, arms=[{"rule": "cactus", "alpha": 0.1, "window": 3}])
    with pytest.raises(ValueError, match="would apply to every arm"):
        check_campaign_speculative_config({"rejection_sample_method": "fly"})
    check_campaign_speculative_config({"rejection_sample_method": "block"})  # lossless block verification
    assert {"fly", "synthetic", "assistant_ensemble", "medusa_typical", "hydra_typical"} <= set(ENGINE_RELAXED_METHODS)
    from lengthlens.analyses.methods import LOSSLESS_METHODS

    assert not set(ENGINE_RELAXED_METHODS) & LOSSLESS_METHODS  # analysed as relaxed arms


def test_reference_backend_refuses_vllm_rules(tmp_path):
    pytest.importorskip("transformers")
    from lengthlens.generate.reference_backend import ReferenceBackend

    cfg = _cfg(tmp_path, arms=["strict", {"rule": "fly", "alpha": 0.3}])
    with pytest.raises(ValueError, match="vLLM's own"):
        ReferenceBackend(cfg)
