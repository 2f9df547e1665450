"""AIPerf and ``vllm bench serve`` fixture files (see engine_fixtures.py for the sources read)."""

from __future__ import annotations

import json
from pathlib import Path

from .engine_fixtures import BUDGET, ITEMS, K, TARGET, VLLM_ARMS, counts, vllm_response

#: AIPerf arms: folder -> (method, params, dataset, with per-request speculative records (AIPerf 0.13)).
AIPERF_ARMS = {"strict": ("strict", "strict", "gsm8k", True), "fly": ("fly", "w5_e0.3", "gsm8k", True),
               "old_strict": ("strict", "strict", "math", False), "old_fly": ("fly", "w5_e0.3", "math", False)}


def aiperf_record(n: int, item: str, arm: str, spec: bool, phase: str = "profiling") -> dict:
    """One ``MetricRecordInfo.model_dump(exclude_none=True, mode="json")`` line of AIPerf 0.13."""
    vllm_arm = "fly" if "fly" in arm else "strict"
    hist, reasoning, ttft, gen = VLLM_ARMS[vllm_arm][item]
    v, a, out, _ = counts(hist)
    start = 1764662400_000_000_000 + n * 1_000_000_000
    latency_ms = ttft + gen + 4.0  # the client's time: the engine's plus transport
    meta = {"session_num": n, "x_request_id": f"req-{arm}-{item}", "x_correlation_id": f"corr-{arm}-{item}",
            "conversation_id": f"conv-{item}", "turn_index": 0, "request_start_ns": start,
            "request_ack_ns": start + int(ttft * 1e6), "request_end_ns": start + int(latency_ms * 1e6),
            "worker_id": "worker_359d423a", "record_processor_id": "record_processor_1fa47cd7",
            "benchmark_phase": phase, "was_cancelled": False, "context_overflow_skip": False, "agent_depth": 0}
    metrics = {"input_sequence_length": {"value": 20 + int(item[1:]), "unit": "tokens"},
               "time_to_first_token": {"value": ttft + 2.0, "unit": "ms"},
               "request_latency": {"value": latency_ms, "unit": "ms"},
               "output_token_count": {"value": out - reasoning, "unit": "tokens"},
               "reasoning_token_count": {"value": reasoning, "unit": "tokens"},
               "output_sequence_length": {"value": out, "unit": "tokens"},
               "usage_prompt_tokens": {"value": 20 + int(item[1:]), "unit": "tokens"},
               "usage_completion_tokens": {"value": out, "unit": "tokens"},
               "usage_reasoning_tokens": {"value": reasoning, "unit": "tokens"}}
    line: dict = {"metadata": meta, "metrics": metrics}
    if spec:
        metrics.update(spec_decode_acceptance_length={"value": 1 + a / v, "unit": "ratio"},
                       spec_decode_steps={"value": v, "unit": "count"},
                       spec_decode_accepted_draft_tokens={"value": a, "unit": "tokens"},
                       spec_decode_draft_tokens={"value": K * v, "unit": "tokens"})
        line["spec_decode_acceptance"] = {
            "engine": "vllm", "mean_acceptance_length": 1 + a / v, "draft_acceptance_rate": a / (K * v),
            "acceptance_histogram": {str(j): c for j, c in enumerate(hist) if c}, "num_accepted_draft_tokens": a,
            "num_draft_tokens": K * v, "num_spec_steps": v, "num_spec_tokens": K, "completion_tokens": out}
    return line


def build_aiperf(root: Path) -> None:
    """One artifacts folder per arm: profile_export.jsonl, inputs.json (the budget), arm.json."""
    for arm, (method, params, dataset, spec) in AIPERF_ARMS.items():
        d = root / arm
        d.mkdir(parents=True, exist_ok=True)
        (d / "arm.json").write_text(json.dumps({"target": TARGET, "draft": "eagle3-qwen3-8b", "method": method,
                                                "params": params, "dataset": dataset, "concurrency": 16}) + "\n")
        lines = [aiperf_record(0, "q1", arm, spec, phase="warmup")]
        lines += [aiperf_record(n, it, arm, spec) for n, it in enumerate(ITEMS, start=1)]
        if arm == "fly":  # a request cancelled by --request-cancellation-rate
            lines.append({"metadata": {**lines[1]["metadata"], "session_num": 9, "conversation_id": "conv-q9",
                                       "was_cancelled": True, "cancellation_time_ns": lines[1]["metadata"]["request_end_ns"]},
                          "metrics": {"error_isl": {"value": 29, "unit": "tokens"}},
                          "error": {"code": 499, "type": "RequestCancellationError",
                                    "message": "Request was cancelled after 0.000 seconds"}})
        (d / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        inputs = {"data": [{"session_id": f"conv-{it}", "payloads": [
            {"messages": [{"role": "user", "content": f"Question {it}"}], "model": TARGET, "stream": True,
             "max_completion_tokens": BUDGET}]} for it in ITEMS]}
        (d / "inputs.json").write_text(json.dumps(inputs, indent=2) + "\n")


#: vllm bench serve runs: arm -> (method, params) given with --metadata.
BENCH_ARMS = {"strict": ("strict", "strict"), "fly": ("fly", "w5_e0.3")}


def bench_result(arm: str) -> dict:
    """``result_json`` of ``vllm bench serve --save-result --save-detailed --metadata ...`` (vLLM 0.33.0)."""
    method, params = BENCH_ARMS[arm]
    resps = [vllm_response(it, arm, detailed=False) for it in ITEMS]
    outs = [r["usage"]["completion_tokens"] for r in resps]
    lat = [(r["metrics"]["time_to_first_token_ms"] + r["metrics"]["generation_time_ms"]) / 1000 + 0.004 for r in resps]
    ttfts = [r["metrics"]["time_to_first_token_ms"] / 1000 + 0.002 for r in resps]
    spec = [counts(VLLM_ARMS[arm][it][0]) for it in ITEMS]
    drafts, acc = sum(s[0] for s in spec) + 3, sum(s[1] for s in spec) + 5  # + the benchmark's warm-up request
    outs_fail = [*outs, 0]
    return {
        "date": "20261202-101500", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
        "model_id": TARGET, "tokenizer_id": TARGET, "num_prompts": 5,
        "draft": "eagle3-qwen3-8b", "method": method, "params": params, "dataset": "gsm8k",  # --metadata KEY=VALUE
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4,
        "duration": 2.5, "completed": 4, "failed": 1, "total_input_tokens": 90, "total_output_tokens": sum(outs),
        "request_throughput": 1.6, "request_goodput": None, "output_throughput": sum(outs) / 2.5,
        "total_token_throughput": (90 + sum(outs)) / 2.5,
        "input_lens": [21, 22, 23, 24, 25], "output_lens": outs_fail, "ttfts": [*ttfts, 0.0],
        "itls": [[0.01] * (n - 1) for n in outs] + [[]], "latencies": [*lat, 0.0],
        "start_times": [0.0, 0.01, 0.02, 0.03, 0.04], "queue_times": [0.0, 0.0, 0.0, 0.0, 0.3],
        "generated_texts": [r["choices"][0]["message"]["content"] for r in resps] + [""],
        "errors": ["", "", "", "", "Bad Request: prompt too long"],
        "max_output_tokens_per_s": 120.0, "max_concurrent_requests": 4, "rtfx": 0.0,
        "spec_decode_acceptance_rate": acc / (K * drafts) * 100, "spec_decode_acceptance_length": 1 + acc / drafts,
        "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": K * drafts, "spec_decode_accepted_tokens": acc,
        "spec_decode_per_position_acceptance_rates": [0.8, 0.6, 0.4],
    }


def build_vllm_bench(root: Path) -> None:
    """One result file per arm, named as vllm bench serve names them."""
    root.mkdir(parents=True, exist_ok=True)
    for arm in BENCH_ARMS:
        (root / f"openai-chat-infqps-concurrency4-Qwen3-8B-{arm}.json").write_text(json.dumps(bench_result(arm)) + "\n")
