"""Read vLLM's own per-request records: OpenAI-compatible responses with per-request speculative metrics.

vLLM 0.29.0 and later (``--per-request-spec-decode-metrics summary|detailed``; not in 0.28.0, the
release before it on PyPI) put each request's speculative-decoding counters in the response under
``metrics.speculative_decoding`` (the ``SpeculativeDecodingMetrics`` model of
``vllm/entrypoints/generate/base/protocol.py``, filled from ``RequestSpecDecodeMetrics.to_dict()``
in ``vllm/v1/metrics/stats.py``); offline, the same object is ``CompletionOutput.spec_decode_metrics``.
Only single-sequence requests (``n == 1``) get them. ``--enable-per-request-metrics`` adds timing
(``time_to_first_token_ms``, ``generation_time_ms``, ``queue_time_ms``) beside them.

One JSON object per line (``.jsonl``; a ``.json`` file may hold one object or a list), either the
response as vLLM returned it, or a wrapper ``{"item_id": ..., "seed": ..., "request": {...},
"response": {...}}`` with any run-record fields beside the response (``wall_time_s`` measured by the
client, ``turn``, ``correct``...) and the request body, from which ``max_tokens`` /
``max_completion_tokens`` (the budget), ``temperature``, ``top_p`` and ``seed`` are taken. The
mapping (docs/readers.md has the table):

- ``draft_rounds`` = ``num_spec_steps`` (verification steps), ``accepted_tokens`` =
  ``num_accepted_draft_tokens`` (bonus excluded, as lengthlens counts), ``draft_tokens`` =
  ``num_draft_tokens``; vLLM's ``mean_acceptance_length`` counts the bonus token, so
  ``l_bar_logged`` = ``mean_acceptance_length - 1`` (checked against accepted/rounds, never used);
- ``output_tokens`` = ``usage.completion_tokens``, ``input_tokens`` = ``usage.prompt_tokens``,
  ``reasoning_tokens`` = ``usage.completion_tokens_details.reasoning_tokens`` (only with a
  reasoning parser), ``finish_reason`` = the choice's (``abort`` / ``error`` give status ``error``);
- ``wall_time_s``: the engine's time from scheduling to the last token,
  ``time_to_first_token_ms + generation_time_ms`` (queueing excluded; ``wall_time="e2e"`` adds
  ``queue_time_ms``); a wrapper's own ``wall_time_s`` wins;
- ``text`` = the message content; a separate ``reasoning`` (0.29 and later; ``reasoning_content`` earlier) is
  put back in front as ``<think>...</think>`` so the thinking attribution sees both parts;
- ``target`` = the response's ``model`` unless given; the rest of the arm from ``arm.json`` or
  ``arm=`` (:mod:`lengthlens.data.readers.common`); ``item_id`` from the wrapper, else the line's
  position among the file's records (warned: then every arm's file must list the items in one order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lengthlens.data.readers.common import engine_model, kind_of, mapping, place, read_response_files, seconds, unwrap, whole
from lengthlens.data.readers import ReadResult

#: finish_reason values that mean the request did not finish (vLLM's FinishReason ABORT / ERROR).
FAILED_FINISH = frozenset({"abort", "error"})


def spec_fields(sd: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Run-record counters from vLLM's per-request speculative metrics, and warnings where they disagree."""
    rounds = whole(sd.get("num_spec_steps"), "num_spec_steps")
    acc = whole(sd.get("num_accepted_draft_tokens"), "num_accepted_draft_tokens")
    drafted = whole(sd.get("num_draft_tokens"), "num_draft_tokens")
    counters = {"num_spec_steps": rounds, "num_accepted_draft_tokens": acc, "num_draft_tokens": drafted}
    if any(v is not None for v in counters.values()) and (rounds is None or acc is None):
        missing = [k for k in ("num_spec_steps", "num_accepted_draft_tokens") if counters[k] is None]
        raise ValueError(f"field 'speculative_decoding.{missing[0]}' is missing beside the other counters")
    out: dict[str, Any] = {"draft_rounds": rounds, "accepted_tokens": acc, "draft_tokens": drafted}
    mal = sd.get("mean_acceptance_length")
    if rounds and isinstance(mal, (int, float)) and not isinstance(mal, bool):
        out["l_bar_logged"] = float(mal) - 1.0  # vLLM's mean counts the bonus token, lengthlens' does not
    warns = []
    hist = sd.get("acceptance_histogram")
    if isinstance(hist, list) and rounds is not None and acc is not None:
        if sum(hist) != rounds or sum(j * c for j, c in enumerate(hist)) != acc:
            warns.append(f"acceptance_histogram {hist} does not add up to {rounds} steps and {acc} accepted tokens")
    per_step = sd.get("per_step_accepted")
    if isinstance(per_step, list) and rounds is not None and (len(per_step) != rounds or sum(per_step) != acc):
        warns.append(f"per_step_accepted has {len(per_step)} steps summing to {sum(per_step)}, "
                     f"not {rounds} steps and {acc} accepted tokens")
    return out, warns


def _choice_text(choice: dict[str, Any]) -> str | None:
    msg = choice.get("message")
    if isinstance(msg, dict):
        content = msg.get("content")
        reasoning = msg.get("reasoning") or msg.get("reasoning_content")
        if reasoning:
            return f"<think>{reasoning}</think>{content or ''}"
        return content
    text = choice.get("text")
    return text if isinstance(text, str) else None


def _wall_time(metrics: dict[str, Any], mode: str) -> float | None:
    ttft = seconds(metrics.get("time_to_first_token_ms"), "ms", "metrics.time_to_first_token_ms")
    gen = seconds(metrics.get("generation_time_ms"), "ms", "metrics.generation_time_ms")
    if ttft is None or gen is None:
        return None
    total = ttft + gen
    if mode == "e2e":
        queue = seconds(metrics.get("queue_time_ms"), "ms", "metrics.queue_time_ms")
        return None if queue is None else total + queue
    return total


def from_openai_response(resp: dict[str, Any], *, wall_time: str = "inference") -> tuple[list[dict[str, Any]], list[str]]:
    """Run-record fields of each choice of one vLLM OpenAI-compatible response, and warnings.

    Parameters
    ----------
    resp : a ``ChatCompletionResponse`` or ``CompletionResponse`` as JSON (vLLM's field names).
    wall_time : ``inference`` (scheduled to last token) or ``e2e`` (with the queue time).

    Returns
    -------
    One mapping per choice (``output_tokens``, ``finish_reason``, counters, ...), and warnings.

    Examples
    --------
    >>> recs, _ = from_openai_response({"model": "m", "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
    ...                                 "usage": {"completion_tokens": 2, "prompt_tokens": 5}})
    >>> recs[0]["output_tokens"], recs[0]["finish_reason"]
    (2, 'stop')
    """
    if not isinstance(resp, dict):
        raise ValueError(f"expected a JSON object, got {type(resp).__name__}")  # noqa: TRY004 - bad file content
    if resp.get("object") == "error" or "error" in resp and "choices" not in resp:
        return [{"status": "error"}], []
    choices = resp.get("choices")
    usage = mapping(resp.get("usage"), "usage")
    metrics = mapping(resp.get("metrics"), "metrics")
    if choices == [] and (usage or metrics):
        # A stream's final usage chunk on its own: the request's counters without its text.
        choices = [{"index": 0, "finish_reason": None}]
    if not isinstance(choices, list) or not choices:
        raise ValueError("not a vLLM response (no 'choices')")
    details = mapping(usage.get("completion_tokens_details"), "usage.completion_tokens_details")
    warns: list[str] = []
    out = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise ValueError(f"field 'choices' holds {kind_of(choice)}, not an object")
        finish = choice.get("finish_reason")
        rec: dict[str, Any] = {"status": "error" if finish in FAILED_FINISH else "ok", "finish_reason": finish,
                               "input_tokens": whole(usage.get("prompt_tokens"), "usage.prompt_tokens"),
                               "text": _choice_text(choice), "backend": "vllm"}
        if len(choices) == 1:
            rec["output_tokens"] = whole(usage.get("completion_tokens"), "usage.completion_tokens")
            rec["reasoning_tokens"] = whole(details.get("reasoning_tokens"), "reasoning_tokens")
            rec["wall_time_s"] = _wall_time(metrics, wall_time)
            if metrics.get("speculative_decoding") is not None:
                spec, w = spec_fields(mapping(metrics["speculative_decoding"], "metrics.speculative_decoding"))
                rec.update(spec)
                warns += w
        elif isinstance(choice.get("token_ids"), list):
            rec["output_tokens"] = len(choice["token_ids"])  # usage sums the n sequences
        out.append(rec)
    return out, warns


def from_request_output(ro: Any, *, wall_time: str = "inference") -> tuple[list[dict[str, Any]], list[str]]:
    """Run-record fields of each sequence of one offline vLLM ``RequestOutput``, and warnings.

    Counters from ``CompletionOutput.spec_decode_metrics`` (``--per-request-spec-decode-metrics``,
    ``LLM(..., per_request_spec_decode_metrics="summary")``); wall time from ``RequestOutput.metrics``
    (``RequestStateStats``, only kept with ``disable_log_stats=False``): ``last_token_ts -
    scheduled_ts``, or ``- queued_ts`` with ``wall_time="e2e"`` (engine-core timestamps, one clock).
    Offline outputs have no reasoning parser, so no ``reasoning_tokens``.
    """
    stats = getattr(ro, "metrics", None)
    wall = None
    if stats is not None and getattr(stats, "last_token_ts", 0) > 0:
        start = stats.queued_ts if wall_time == "e2e" else stats.scheduled_ts
        wall = stats.last_token_ts - start if start > 0 else None
    prompt = getattr(ro, "prompt_token_ids", None)
    out, warns = [], []
    for comp in ro.outputs:
        finish = None if comp.finish_reason is None else str(comp.finish_reason)
        rec: dict[str, Any] = {"status": "error" if finish in FAILED_FINISH else "ok", "finish_reason": finish,
                               "output_tokens": len(comp.token_ids), "text": comp.text, "backend": "vllm",
                               "input_tokens": None if prompt is None else len(prompt),
                               "wall_time_s": wall if len(ro.outputs) == 1 else None}
        sd = getattr(comp, "spec_decode_metrics", None)
        if sd is not None:
            spec, w = spec_fields(sd.to_dict() if hasattr(sd, "to_dict") else dict(sd))
            rec.update(spec)
            warns += w
        out.append(rec)
    return out, warns


def _line_records(obj: Any, base: dict[str, Any], position: int, where: str,
                  wall_time: str) -> tuple[list[dict[str, Any]], list[str], bool]:
    """Records of one line (one per choice), warnings, and whether the item id was the line's position."""
    payload, extra = unwrap(obj)
    recs, warns = from_openai_response(payload, wall_time=wall_time)
    out = [place({"target": engine_model(obj, payload), **base, **{k: v for k, v in fields.items() if v is not None}, **extra},
                 position, where, i, len(recs)) for i, fields in enumerate(recs)]
    if len(recs) > 1:
        warns.append(f"{len(recs)} choices (n > 1): one run each, seeds seed+0..seed+{len(recs) - 1}; "
                     "vLLM gives no per-request counters for them")
    return out, warns, "item_id" not in extra


def read(path: Path, *, arm: dict[str, Any] | None = None, max_new_tokens: int | None = None,
         wall_time: str = "inference") -> ReadResult:
    """Every vLLM response under ``path`` (a .jsonl/.json file or a folder of them) as run-record mappings.

    ``arm``: identity and settings for every file (arm.json files and the lines themselves win);
    ``max_new_tokens``: the budget when neither the request nor the arm gives one; ``wall_time``:
    ``inference`` or ``e2e`` (see the module docstring).
    """
    if wall_time not in ("inference", "e2e"):
        raise ValueError(f"wall_time must be 'inference' or 'e2e', not {wall_time!r}")
    return read_response_files(Path(path), arm, max_new_tokens, "vLLM responses",
                               lambda obj, base, pos, where: _line_records(obj, base, pos, where, wall_time))
