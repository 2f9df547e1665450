"""The engines' record files under tests/core/fixtures/engines/, built from the engines' own output structures.

Each builder writes what the engine writes, field for field, read from its source:

* vLLM 0.33.0 (PyPI wheel, commit g4ba787ec9; the same models in 0.29.0, g98dff2a81):
  ``ChatCompletionResponse.model_dump()`` as the server returns it (``vllm/entrypoints/openai/
  chat_completion/protocol.py``, ``api_router.py``), with ``PerRequestMetrics`` and
  ``SpeculativeDecodingMetrics`` of ``vllm/entrypoints/generate/base/protocol.py`` filled as
  ``RequestSpecDecodeMetrics.to_dict()`` (``vllm/v1/metrics/stats.py``) fills them; the
  ``vllm bench serve --save-result --save-detailed`` file as ``vllm/benchmarks/serve.py`` builds
  ``result_json`` (``benchmark()``'s ``result`` plus ``main``'s settings and ``--metadata``).
  ``tests/vllm_job`` checks the vLLM responses against the real pydantic models.
* SGLang 0.5.23 (PyPI wheel): native ``/generate`` output ``{"text", "output_ids", "meta_info"}`` with
  ``meta_info`` as ``TokenizerManager._handle_batch_output`` and ``_calculate_spec_decoding_metrics``
  build it (``sglang/srt/managers/tokenizer_manager.py``), ``finish_reason`` as
  ``FINISH_LENGTH/FINISH_MATCHED_TOKEN.to_json()`` (``schedule_batch.py``); the OpenAI-compatible
  ``ChatCompletionResponse`` with ``sglext.spec_tokens_details`` (``SpecTokensDetails``,
  ``sglang/srt/entrypoints/openai/protocol.py``); SGLang 0.5.9's older names
  (``spec_accept_token_num``, ``spec_draft_token_num``, ``spec_accept_histogram``).
* AIPerf 0.13.0 (PyPI wheel): ``profile_export.jsonl`` lines as ``RecordExportJSONLWriter`` writes
  ``MetricRecordInfo`` (``model_dump(exclude_none=True, mode="json")``; ``aiperf/common/models/
  record_models.py``, ``spec_decode_models.py``), metric tags and display units of
  ``aiperf/metrics/types/`` (request_latency in ms), ``inputs.json`` as ``InputsFile``.

Counters follow the engines' identities: a vLLM/SGLang completion of V verification steps with A
accepted drafts has 1 + A + V tokens (the prefill's token, then drafts plus a bonus per step), cut
to the budget when it stops for length. ``python -m tests.core.engine_fixtures`` rewrites the files;
a test checks they are what this module builds.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "fixtures" / "engines"
TARGET = "Qwen/Qwen3-8B"
K = 3  # num_speculative_tokens
BUDGET = 64
ITEMS = ("q1", "q2", "q3", "q4")

#: Per arm and item: (histogram of accepted drafts per step, j = 0..K; reasoning tokens; ttft ms; generation ms).
VLLM_ARMS = {
    "strict": {"q1": ([2, 3, 4, 5], 30, 35.0, 410.0), "q2": ([1, 2, 2, 3], 16, 30.0, 240.0),
               "q3": ([3, 4, 5, 6], 40, 33.0, 520.0), "q4": ([4, 6, 8, 6], 64, 31.0, 700.0)},
    "fly": {"q1": ([1, 2, 4, 9], 41, 36.0, 455.0), "q2": ([0, 2, 3, 5], 25, 29.0, 280.0),
            "q3": ([1, 3, 6, 10], 64, 34.0, 560.0), "q4": ([1, 2, 5, 12], 64, 30.0, 580.0)},
}


def counts(hist: list[int], budget: int = BUDGET) -> tuple[int, int, int, str]:
    """(steps V, accepted A, completion tokens, finish reason) of a histogram: 1 + A + V tokens, cut at the budget."""
    v = sum(hist)
    a = sum(j * c for j, c in enumerate(hist))
    n = 1 + a + v
    return v, a, min(n, budget), "length" if n >= budget else "stop"


def vllm_response(item: str, arm: str, detailed: bool) -> dict:
    """vLLM 0.33.0 ChatCompletionResponse.model_dump() with per-request timing and speculative metrics."""
    hist, reasoning, ttft, gen = VLLM_ARMS[arm][item]
    v, a, n, finish = counts(hist)
    spec = {"mean_acceptance_length": 1.0 + a / v, "draft_acceptance_rate": a / (K * v), "acceptance_histogram": hist,
            "num_spec_steps": v, "num_accepted_draft_tokens": a, "num_draft_tokens": K * v, "num_spec_tokens": K,
            "per_step_accepted": None, "per_step_drafted": None}
    if detailed:  # --per-request-spec-decode-metrics detailed: the ordered per-step arrays
        spec["per_step_accepted"] = [j for j, c in enumerate(hist) for _ in range(c)]
        spec["per_step_drafted"] = [K] * v
    prompt = 20 + int(item[1:])
    return {
        "id": f"chatcmpl-{arm}-{item}", "object": "chat.completion", "created": 1764662400, "model": TARGET,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": f"The answer is {item[1:]}.", "refusal": None,
                                             "annotations": None, "audio": None, "function_call": None,
                                             "reasoning": "Let me think step by step."},
                     "logprobs": None, "finish_reason": finish, "stop_reason": None, "token_ids": None,
                     "routed_experts": None, "weight_versions": None}],
        "service_tier": None, "system_fingerprint": "fp_vllm_0.33.0",
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt + n, "completion_tokens": n, "prompt_tokens_details": None,
                  "completion_tokens_details": {"reasoning_tokens": reasoning}, "weight_versions": None},
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": {"time_to_first_token_ms": ttft, "generation_time_ms": gen, "queue_time_ms": 2.5,
                    "mean_itl_ms": gen / (n - 1), "tokens_per_second": n / (ttft + gen) * 1000, "speculative_decoding": spec},
    }


def vllm_lines(arm: str) -> list[dict]:
    """One wrapper line per item (item id, request body, response); the fly arm adds an aborted and an error response."""
    lines = [{"item_id": it, "request": {"model": TARGET, "messages": [{"role": "user", "content": f"Question {it}"}],
                                         "max_tokens": BUDGET, "temperature": 0.6, "top_p": 0.95, "seed": 0},
              "response": vllm_response(it, arm, detailed=arm == "fly")} for it in ITEMS]
    if arm == "fly":
        aborted = vllm_response("q1", arm, detailed=False)
        aborted["choices"][0]["finish_reason"] = "abort"
        lines.append({"item_id": "q5", "request": lines[0]["request"], "response": aborted})
        lines.append({"item_id": "q6", "request": lines[0]["request"], "response": {"error": {"message": "The model `x` does not exist.",
                                                               "type": "NotFoundError", "param": None, "code": 404}}})
    return lines


#: SGLang arms: (folder, method, params, response shape), items as in vLLM's: histogram, reasoning tokens, e2e s.
SGLANG_ARMS = {
    "strict": ("strict", "strict", "native", {"q1": ([2, 3, 4, 5], 30, 0.61), "q2": ([1, 2, 2, 3], 16, 0.33),
                                               "q3": ([3, 4, 5, 6], 40, 0.72), "q4": ([4, 6, 8, 6], 64, 0.95)}),
    "cactus": ("cactus", "alpha0.3", "openai", {"q1": ([1, 2, 4, 9], 41, 0.55), "q2": ([0, 2, 3, 5], 25, 0.36),
                                                "q3": ([1, 3, 6, 10], 64, 0.70), "q4": ([1, 2, 5, 12], 64, 0.74)}),
    "typical": ("typical", "pt0.09", "native_059", {"q1": ([1, 3, 4, 6], 0, 0.58), "q2": ([1, 1, 3, 3], 0, 0.31),
                                              "q3": ([2, 4, 5, 7], 0, 0.69), "q4": ([3, 5, 8, 8], 0, 0.90)}),
}


def sglang_meta(item: str, hist: list[int], reasoning: int, e2e: float, names: str) -> dict:
    """SGLang meta_info of a finished speculative request (0.5.23 names, or 0.5.9's with ``names="059"``)."""
    v, a, n, finish = counts(hist)
    fin = {"type": "length", "length": BUDGET} if finish == "length" else {"type": "stop", "matched": 151645}
    meta = {"id": f"rid-{item}", "finish_reason": fin, "prompt_tokens": 20 + int(item[1:]), "weight_version": "default"}
    if names == "059":
        meta.update(total_retractions=0, completion_tokens=n, cached_tokens=0, e2e_latency=e2e,
                    spec_accept_rate=a / (K * v), spec_accept_length=n / v, spec_accept_token_num=a,
                    spec_draft_token_num=K * v, spec_verify_ct=v, spec_accept_histogram=hist)
    else:
        meta.update(num_retractions=0, reasoning_tokens=reasoning, completion_tokens=n, cached_tokens=0, e2e_latency=e2e,
                    spec_accept_rate=a / (K * v), spec_accept_length=n / v, spec_num_correct_drafts=a,
                    spec_num_proposed_drafts=K * v, spec_verify_ct=v, spec_correct_drafts_histogram=hist)
    return meta


def sglang_lines(arm: str) -> list[dict]:
    """Wrapper lines (item id, request, response) of one SGLang arm, in its response shape."""
    _, _, shape, items = SGLANG_ARMS[arm]
    out = []
    for it in ITEMS:
        hist, reasoning, e2e = items[it]
        meta = sglang_meta(it, hist, reasoning, e2e, "059" if shape == "native_059" else "")
        n = meta["completion_tokens"]
        if shape.startswith("native"):
            req = {"text": f"Question {it}", "sampling_params": {"max_new_tokens": BUDGET, "temperature": 0.6}}
            resp = {"text": f"The answer is {it[1:]}.", "output_ids": list(range(100, 100 + n)), "meta_info": meta}
        else:
            req = {"model": TARGET, "messages": [{"role": "user", "content": f"Question {it}"}], "max_tokens": BUDGET,
                   "temperature": 0.6, "return_spec_tokens_details": True}
            details = {k: meta[k] for k in ("spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts",
                                            "spec_num_proposed_drafts", "spec_verify_ct", "spec_correct_drafts_histogram")}
            details.update(spec_cap_length=0.0, spec_block_accept_length=0.0, spec_cap_lens_histogram=[])
            resp = {"id": meta["id"], "object": "chat.completion", "created": 1764662400, "model": TARGET,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": f"The answer is {it[1:]}.",
                                                         "reasoning_content": None},
                                 "logprobs": None, "finish_reason": meta["finish_reason"]["type"], "matched_stop":
                                 meta["finish_reason"].get("matched")}],
                    "usage": {"prompt_tokens": meta["prompt_tokens"], "total_tokens": meta["prompt_tokens"] + n,
                              "completion_tokens": n, "prompt_tokens_details": None, "reasoning_tokens": reasoning,
                              "completion_tokens_details": {"reasoning_tokens": reasoning}},
                    "metadata": {"weight_version": "default"}, "sglext": {"spec_tokens_details": details}}
        out.append({"item_id": it, "request": req, "response": resp})
    return out


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def build(root: Path = ROOT) -> None:
    """Write every fixture file under ``root`` (the AIPerf and vllm-bench ones by :mod:`.engine_fixtures_bench`)."""
    from .engine_fixtures_bench import build_aiperf, build_vllm_bench

    for arm, (method, params) in {"strict": ("strict", "strict"), "fly": ("fly", "w5_e0.3")}.items():
        d = root / "vllm" / arm
        (d).mkdir(parents=True, exist_ok=True)
        (d / "arm.json").write_text(json.dumps({"draft": "eagle3-qwen3-8b", "method": method, "params": params,
                                                "dataset": "gsm8k", "concurrency": 8, "gpu": "NVIDIA H200"}) + "\n")
        _write_jsonl(d / "responses.jsonl", vllm_lines(arm))
    with open(root / "vllm" / "fly" / "responses.jsonl", "a") as fh:
        fh.write('{"item_id": "q7", "response": \n')  # a line cut short, as a killed client leaves it
    for arm, (folder, params, _, _) in SGLANG_ARMS.items():
        d = root / "sglang" / folder
        d.mkdir(parents=True, exist_ok=True)
        (d / "arm.json").write_text(json.dumps({"target": TARGET, "draft": "eagle3-qwen3-8b", "method": folder,
                                                "params": params, "dataset": "gsm8k"}) + "\n")
        _write_jsonl(d / "outputs.jsonl", sglang_lines(arm))
    build_aiperf(root / "aiperf")
    build_vllm_bench(root / "vllm_bench")


if __name__ == "__main__":
    build()
