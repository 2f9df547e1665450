"""The batched vLLM backend (GPU): one engine per arm, an arm's items in one ``generate`` call, as served.

Speculative decoding's per-round gain shrinks under batching (the verifier's forward pass costs more
with more sequences in it), which a batch-1 measurement cannot show. Here each arm gets one engine
(``engine_per: arm``, the rules plugin as for the serial backend), the runner hands it the arm's
pending runs of the shard in one call (or in calls of ``vllm.requests_per_call``), and vLLM
schedules them ``max_num_seqs`` at a time (``vllm.max_num_seqs``, passed to ``vllm.LLM``).

Counters per request come from vLLM's per-request speculative metrics (0.29.0 and later; the
engine is started with ``per_request_spec_decode_metrics="summary"``): ``CompletionOutput.
spec_decode_metrics`` mapped as :mod:`lengthlens.data.readers.vllm_records` maps it, so a run written here
and a response read from a server are counted alike. On a vLLM without them (0.26.0) the engine's
counters are totals over the whole batch, so ``draft_rounds`` / ``accepted_tokens`` / ``draft_tokens``
are not recorded (the runs give λ, T/T* and accuracy, not gain or R/R*), and the backend says so
when it starts. Wall time per request is the engine's, from scheduling to the last token
(``RequestOutput.metrics``); the serving condition (``concurrency`` = requests in flight, at most
``max_num_seqs``; ``batch_size`` = ``max_num_seqs``; ``gpu``) goes into each run.json.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from lengthlens.data.readers.vllm_records import from_request_output
from lengthlens.generate.config import Arm, GenerateConfig
from lengthlens.generate.layout import CLOSE_MARKERS, RunResult, thinking_open
from lengthlens.generate.vllm_backend import VLLMBackend

log = logging.getLogger("lengthlens.vllm_batched")


def supports_per_request_metrics() -> bool:
    """Whether the installed vLLM's engine arguments have ``per_request_spec_decode_metrics`` (0.29.0 and later)."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return False
    fields = {f.name for f in dataclasses.fields(EngineArgs)} if dataclasses.is_dataclass(EngineArgs) else set()
    return "per_request_spec_decode_metrics" in fields


def build_requests(cfg: GenerateConfig, prompt_ids: list[list[int]], seeds: list[int],
                   max_tokens: list[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(token-id prompts, ``SamplingParams`` keyword arguments) of one ``generate`` call: one seed and budget each.

    Examples
    --------
    >>> from lengthlens.generate.config import config_from_dict
    >>> cfg = config_from_dict({"target": "/t", "draft": "/d", "datasets": {"x": "x.jsonl"}, "arms": ["strict"]})
    >>> build_requests(cfg, [[1, 5]], [7], [64])
    ([{'prompt_token_ids': [1, 5]}], [{'temperature': 1.0, 'top_p': 1.0, 'max_tokens': 64, 'seed': 7}])
    """
    if not (len(prompt_ids) == len(seeds) == len(max_tokens)):
        raise ValueError("one seed and one budget per prompt")
    prompts = [{"prompt_token_ids": list(ids)} for ids in prompt_ids]
    params = [{"temperature": cfg.temperature, "top_p": cfg.top_p, "max_tokens": int(n), "seed": int(s)}
              for s, n in zip(seeds, max_tokens)]
    return prompts, params


def _add(a: int | float | None, b: int | float | None) -> int | float | None:
    return None if a is None or b is None else a + b


def result_fields(output: Any) -> dict[str, Any]:
    """The run's measured fields from one offline ``RequestOutput`` (its first sequence), via the vLLM reader's mapping."""
    recs, warns = from_request_output(output)
    for w in warns:
        log.warning("request %s: %s", getattr(output, "request_id", "?"), w)
    rec = recs[0]
    rec["token_ids"] = list(output.outputs[0].token_ids)
    return rec


class VLLMBatchedBackend(VLLMBackend):
    """Runs an arm's measurements together on one vLLM engine, with per-request counters where vLLM has them."""

    name = "vllm-batched"

    def __init__(self, cfg: GenerateConfig):
        cfg.vllm = {**cfg.vllm, "engine_per": "arm"}
        super().__init__(cfg)
        self.per_request = supports_per_request_metrics()
        if not self.per_request:
            log.warning("vLLM %s has no per-request speculative metrics (0.29.0 and later): batched runs record no "
                        "draft_rounds, accepted_tokens or draft_tokens (gain and R/R* unavailable)", self.engine_version)

    def engine_kwargs(self) -> dict[str, Any]:
        kwargs = super().engine_kwargs()
        if self.per_request:
            kwargs.setdefault("per_request_spec_decode_metrics", "summary")
        if self.cfg.vllm.get("max_num_seqs") is not None:
            kwargs.setdefault("max_num_seqs", int(self.cfg.vllm["max_num_seqs"]))
        return kwargs

    def _batch_bound(self, llm: Any) -> int | None:
        """The engine's max_num_seqs as it runs (vLLM's scheduler config), else the campaign's."""
        obj = llm
        for attr in ("llm_engine", "vllm_config", "scheduler_config", "max_num_seqs"):
            obj = getattr(obj, attr, None)
        return obj if isinstance(obj, int) else self.engine_kwargs().get("max_num_seqs")

    def _call(self, llm: Any, ids: list[list[int]], seeds: list[int], budgets: list[int]) -> list[dict[str, Any]]:
        prompts, params = build_requests(self.cfg, ids, seeds, budgets)
        outs = llm.generate(prompts, [self.vllm.SamplingParams(**kw) for kw in params], use_tqdm=False)
        return [result_fields(o) for o in outs]

    def _continue(self, llm: Any, ids: list[list[int]], seeds: list[int], first: list[dict[str, Any]],
                  arm: Arm) -> list[dict[str, Any]]:
        """Force-commit: append the closing marker to the runs still thinking at the threshold, then one more call."""
        cfg, budget = self.cfg, self.cfg.max_new_tokens
        marker = CLOSE_MARKERS[cfg.thinking_format]
        marker_ids = list(llm.get_tokenizer().encode(marker, add_special_tokens=False))
        fired = [i for i, r in enumerate(first) if r["finish_reason"] == "length" and r["output_tokens"] < budget
                 and thinking_open(r["text"], cfg.thinking_format, cfg.opened_in_prompt)]
        for r in first:
            r["extra"] = {"force_commit_fired": False, "force_commit_at": None}
        more = [i for i in fired if budget - first[i]["output_tokens"] - len(marker_ids) > 0]
        second = self._call(llm, [ids[i] + first[i]["token_ids"] + marker_ids for i in more], [seeds[i] for i in more],
                            [budget - first[i]["output_tokens"] - len(marker_ids) for i in more]) if more else []
        cont = dict(zip(more, second))
        for i in fired:
            r = first[i]
            r["extra"] = {"force_commit_fired": True, "force_commit_at": r["output_tokens"], "forced_tokens": len(marker_ids)}
            r["text"] += marker
            r["output_tokens"] += len(marker_ids)
            r["finish_reason"] = "length"
            if i in cont:
                c = cont[i]
                r["text"] += c["text"] or ""
                r["output_tokens"] += c["output_tokens"]
                r["finish_reason"] = c["finish_reason"]
                for k in ("draft_rounds", "accepted_tokens", "draft_tokens", "wall_time_s"):
                    r[k] = _add(r.get(k), c.get(k))
        return first

    def run_batch(self, items: list[tuple[str, int]], arm: Arm) -> list[RunResult]:
        """Generate every (prompt, seed) of ``items`` under ``arm`` in one call on the arm's engine."""
        cfg = self.cfg
        llm = self._engine(arm)
        ids = [self.prompt_ids(llm, p) for p, _ in items]
        seeds = [s for _, s in items]
        first = cfg.max_new_tokens if arm.force_commit is None else min(arm.force_commit, cfg.max_new_tokens)
        recs = self._call(llm, ids, seeds, [first] * len(items))
        if arm.force_commit is not None:
            recs = self._continue(llm, ids, seeds, recs, arm)
        bound = self._batch_bound(llm)
        serving = {**self.serving(min(len(items), bound) if bound else len(items)),
                   **({"batch_size": bound} if bound else {})}
        out = []
        for p_ids, r in zip(ids, recs):
            per_request = self.per_request and r.get("draft_rounds") is not None
            extra = {"num_speculative_tokens": cfg.num_draft_tokens, "vllm_finish_reason": r["finish_reason"],
                     **self.parallel, **serving, **r.get("extra", {})}
            out.append(RunResult(
                text=r["text"] or "", output_tokens=r["output_tokens"],
                finish_reason="length" if r["finish_reason"] == "length" else "stop",
                draft_rounds=r.get("draft_rounds") if per_request else None,
                accepted_tokens=r.get("accepted_tokens") if per_request else None,
                draft_tokens=r.get("draft_tokens") if per_request else None,
                wall_time_seconds=r.get("wall_time_s"), input_tokens=len(p_ids), proposals=None, extra=extra))
        return out
