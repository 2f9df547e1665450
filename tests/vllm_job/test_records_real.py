"""The vLLM reader, the recorder and the batched backend's glue against the real vLLM classes, on a CPU.

Run in the vLLM job's own venv (``bash tests/vllm_job/run_job.sh``); skipped when vLLM is not
importable, and the per-request metrics part on a vLLM before 0.29.0 (which has none). What runs for
real: ``RequestSpecDecodeMetrics`` accumulating verification steps and its ``to_dict``, the response
models ``SpeculativeDecodingMetrics`` / ``PerRequestMetrics`` / ``ChatCompletionResponse`` (the
committed fixture responses of tests/core/fixtures/engines/vllm are exactly what they dump, on
0.33.x, whose models the fixtures were built from), offline ``RequestOutput`` / ``CompletionOutput`` /
``RequestStateStats`` mapped by the batched backend and the recorder, ``SamplingParams`` built from
the backend's request keywords, and the batched backend's engine keywords checked against
``EngineArgs``' fields (so ``vllm.LLM`` takes them). Engine runs themselves need a GPU (tests/gpu).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

vllm = pytest.importorskip("vllm", reason="needs the real vLLM package (pip install -e .[vllm,test])")
if getattr(vllm, "__file__", None) is None:
    pytest.skip("needs the real vLLM package (pip install -e .[vllm,test])", allow_module_level=True)
stats = pytest.importorskip("vllm.v1.metrics.stats")
if not hasattr(stats, "RequestSpecDecodeMetrics"):
    pytest.skip(f"vLLM {vllm.__version__} has no per-request speculative metrics (0.29.0 and later)",
                allow_module_level=True)

from vllm.outputs import CompletionOutput, RequestOutput  # noqa: E402

from lengthlens.data.readers.record import record_outputs  # noqa: E402
from lengthlens.data.readers.vllm_records import from_openai_response, spec_fields  # noqa: E402
from lengthlens.generate.config import config_from_dict  # noqa: E402
from lengthlens.generate.vllm_batched import (  # noqa: E402
    VLLMBatchedBackend,
    build_requests,
    result_fields,
    supports_per_request_metrics,
)

FIXTURES = Path(__file__).resolve().parents[1] / "core" / "fixtures" / "engines" / "vllm"
V033 = tuple(int(x) for x in vllm.__version__.split(".")[:2]) == (0, 33)


def _metrics(hist: list[int], k: int = 3, detailed: bool = False):
    """A real RequestSpecDecodeMetrics after one verification step per histogram count (j accepted of k)."""
    m = stats.RequestSpecDecodeMetrics.new(k)
    for j, count in enumerate(hist):
        for _ in range(count):
            m.observe(k, j, detailed=detailed)
    return m


def test_spec_fields_of_real_per_request_metrics():
    d = _metrics([2, 3, 4, 5], detailed=True).to_dict()
    got, warns = spec_fields(d)
    # 14 steps, 0*2 + 1*3 + 2*4 + 3*5 = 26 accepted drafts (bonus excluded), 3 drafted per step
    assert (got["draft_rounds"], got["accepted_tokens"], got["draft_tokens"]) == (14, 26, 42) and warns == []
    assert got["l_bar_logged"] == pytest.approx(26 / 14)  # vLLM's mean_acceptance_length - 1


def _fixture_lines():
    for f in sorted(FIXTURES.glob("*/responses.jsonl")):
        for line in f.read_text().splitlines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # the fixture's deliberately cut line


@pytest.mark.skipif(not V033, reason="the fixtures are vLLM 0.33's response shape")
def test_fixture_responses_are_what_vllm_s_models_dump():
    from vllm.entrypoints.generate.base.protocol import SpeculativeDecodingMetrics
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse

    n = 0
    for d in _fixture_lines():
        resp = d["response"]
        if "choices" not in resp:
            continue
        assert ChatCompletionResponse.model_validate(resp).model_dump() == resp
        sd = resp["metrics"]["speculative_decoding"]
        real = _metrics(sd["acceptance_histogram"], detailed=sd["per_step_accepted"] is not None).to_dict()
        assert SpeculativeDecodingMetrics(**real).model_dump() == sd  # the builder fills it as vLLM does
        n += 1
    assert n == 9


def test_offline_request_output_through_the_batched_backend_and_the_recorder():
    comp = CompletionOutput(index=0, text="The answer is 1.", token_ids=list(range(41)), cumulative_logprob=None,
                            logprobs=None, finish_reason="stop", spec_decode_metrics=_metrics([2, 3, 4, 5]))
    st = stats.RequestStateStats(arrival_time=1.7e9, queued_ts=100.0, scheduled_ts=100.0025,
                                 first_token_ts=100.0375, last_token_ts=100.4475)
    out = RequestOutput(request_id="0", prompt=None, prompt_token_ids=[1] * 21, prompt_logprobs=None,
                        outputs=[comp], finished=True, metrics=st)
    r = result_fields(out)
    assert (r["draft_rounds"], r["accepted_tokens"], r["draft_tokens"], r["output_tokens"]) == (14, 26, 42, 41)
    assert r["wall_time_s"] == pytest.approx(0.445) and r["token_ids"] == list(range(41))
    recs = record_outputs([out], target="t", draft="d", method="fly", params="alpha0.3", dataset="x", item_ids=["q1"])
    assert recs[0]["accepted_tokens"] == 26 and recs[0]["input_tokens"] == 21 and recs[0]["finish_reason"] == "stop"


def test_openai_response_built_by_vllm_s_serving_helpers():
    from vllm.entrypoints.generate.base.serving import build_spec_decoding_metrics

    comp = CompletionOutput(index=0, text="x", token_ids=[5] * 24, cumulative_logprob=None, logprobs=None,
                            finish_reason="length", spec_decode_metrics=_metrics([1, 2, 2, 3]))
    ro = RequestOutput(request_id="0", prompt=None, prompt_token_ids=[1], prompt_logprobs=None, outputs=[comp], finished=True)
    sd = build_spec_decoding_metrics(ro).model_dump()  # what the server puts under metrics.speculative_decoding
    recs, _ = from_openai_response({"model": "m", "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                                    "usage": {"prompt_tokens": 1, "completion_tokens": 24},
                                    "metrics": {"speculative_decoding": sd}})
    assert (recs[0]["draft_rounds"], recs[0]["accepted_tokens"]) == (8, 15)  # 1*2 + 2*2 + 3*3 = 15


def test_batched_backend_builds_what_vllm_takes(tmp_path):
    from vllm.engine.arg_utils import EngineArgs

    (tmp_path / "i.jsonl").write_text('{"id": 1, "prompt": "x"}\n')
    cfg = config_from_dict({"backend": "vllm-batched", "target": "/m/t", "draft": "/m/d", "datasets": {"d": "i.jsonl"},
                            "arms": ["strict", {"rule": "fly", "alpha": 0.3, "window": 2}],
                            "vllm": {"max_num_seqs": 32, "llm_kwargs": {"enforce_eager": True}}}, base=tmp_path)
    be = VLLMBatchedBackend(cfg)
    assert supports_per_request_metrics() and be.per_request
    kwargs = be.engine_kwargs()
    assert kwargs["per_request_spec_decode_metrics"] == "summary" and kwargs["max_num_seqs"] == 32
    assert set(kwargs) <= {f.name for f in dataclasses.fields(EngineArgs)}
    prompts, params = build_requests(cfg, [[1, 2, 3]], [4], [16])
    sp = vllm.SamplingParams(**params[0])
    assert (sp.max_tokens, sp.seed, sp.temperature) == (16, 4, 1.0)
    spec = be.speculative_config(cfg.arms[1])
    from vllm.config import SpeculativeConfig

    fields = set(getattr(SpeculativeConfig, "model_fields", {})) or {f.name for f in dataclasses.fields(SpeculativeConfig)}
    if "fly_window_size" not in fields:
        pytest.skip(f"vLLM {vllm.__version__} has no FLy (0.33 and later)")
    assert {"rejection_sample_method", "fly_entropy_threshold", "fly_window_size"} <= fields
    assert (spec["rejection_sample_method"], spec["fly_entropy_threshold"], spec["fly_window_size"]) == ("fly", 0.3, 2)
