"""Read SGLang's per-request records: ``meta_info`` of native ``/generate`` and ``Engine.generate``, and ``sglext``.

SGLang puts each finished request's counters in ``meta_info`` (built in
``sglang/srt/managers/tokenizer_manager.py``: ``_handle_batch_output`` and
``_calculate_spec_decoding_metrics``). The same dict is what the native ``/generate`` endpoint returns
(``{"text", "output_ids", "meta_info"}``, a list for a batch) and what ``Engine.generate`` returns
offline. The OpenAI-compatible server carries the speculative part, when the request asks
``return_spec_tokens_details``, under the response's ``sglext.spec_tokens_details`` (one object, a list
for ``n > 1``; ``SpecTokensDetails`` in ``sglang/srt/entrypoints/openai/protocol.py``), and the whole
``meta_info`` in each choice with ``return_meta_info``. The mapping:

- ``draft_rounds`` = ``spec_verify_ct`` (verification steps);
- ``accepted_tokens`` = ``spec_num_correct_drafts`` (SGLang 0.5.2x; draft tokens the target accepted,
  bonus excluded) or, in older releases (0.5.9), ``spec_accept_token_num`` (the same count);
  ``draft_tokens`` = ``spec_num_proposed_drafts`` / ``spec_draft_token_num`` (SGLang derives it as
  steps x (draft tokens - 1));
- where only ``spec_accept_length`` is logged: SGLang defines it as ``completion_tokens /
  spec_verify_ct``, and ``completion_tokens`` holds the prefill's token (not a verification step)
  plus, per step, the accepted drafts and the bonus token, so with V steps and A accepted drafts
  ``spec_accept_length = (1 + A + V) / V`` and lengthlens' ℓ̄ = A / V = ``spec_accept_length - 1 -
  1/V`` (:func:`l_bar_from_accept_length`); the reader then derives A = completion_tokens - V - 1
  and says so (tokens cut at a stop string make this an under-count);
- ``output_tokens`` = ``completion_tokens``, ``input_tokens`` = ``prompt_tokens``, ``reasoning_tokens`` =
  ``reasoning_tokens`` (0.5.2x; the OpenAI ``usage.reasoning_tokens`` /
  ``completion_tokens_details.reasoning_tokens``), ``finish_reason`` = ``finish_reason.type``
  (``stop`` / ``length``; ``abort`` gives status ``error``);
- ``wall_time_s`` = ``e2e_latency`` (seconds from the request's arrival at the tokenizer manager to
  its last output: queueing included). The OpenAI response has no time without ``meta_info``;
- identity, item and seed as for the other engine readers (:mod:`lengthlens.data.readers.common`);
  ``target`` = the OpenAI response's ``model`` unless given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lengthlens.data.readers.common import engine_model, kind_of, mapping, place, read_response_files, seconds, unwrap, whole
from lengthlens.data.readers import ReadResult

_ACCEPTED = ("spec_num_correct_drafts", "spec_accept_token_num")
_PROPOSED = ("spec_num_proposed_drafts", "spec_draft_token_num")


def l_bar_from_accept_length(spec_accept_length: float, spec_verify_ct: int) -> float:
    """lengthlens' ℓ̄ (accepted drafts per step, bonus excluded) from SGLang's ``spec_accept_length``.

    SGLang's ``spec_accept_length`` is ``completion_tokens / spec_verify_ct`` and ``completion_tokens``
    counts the prefill's token plus A accepted drafts and one bonus token per step, so
    ``spec_accept_length = (1 + A + V) / V`` and ``A / V = spec_accept_length - 1 - 1 / V``.

    Examples
    --------
    >>> round(l_bar_from_accept_length(101 / 40, 40), 12)   # 101 tokens = 1 + 60 accepted + 40 bonus
    1.5
    """
    if spec_verify_ct <= 0:
        raise ValueError("spec_verify_ct must be positive")
    return spec_accept_length - 1.0 - 1.0 / spec_verify_ct


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((d[k] for k in keys if d.get(k) is not None), None)


def spec_fields(meta: dict[str, Any], completion_tokens: int | None,
                finish: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Run-record counters from SGLang's speculative fields (``meta_info`` or ``spec_tokens_details``), and warnings."""
    rounds = whole(meta.get("spec_verify_ct"), "spec_verify_ct")
    if rounds is None:
        logged = [k for k in (*_ACCEPTED, *_PROPOSED) if meta.get(k) is not None]
        if logged:
            raise ValueError(f"field 'spec_verify_ct' is missing beside {logged[0]}: the speculative counters are incomplete")
        return {}, []
    acc = whole(_first(meta, _ACCEPTED), "spec_num_correct_drafts")
    out: dict[str, Any] = {"draft_rounds": rounds, "draft_tokens": whole(_first(meta, _PROPOSED), "spec_num_proposed_drafts")}
    warns: list[str] = []
    length = meta.get("spec_accept_length")
    if acc is None and rounds > 0 and completion_tokens is not None and isinstance(length, (int, float)):
        acc = completion_tokens - rounds - 1
        warns.append(f"accepted tokens not logged: {acc} derived from completion_tokens {completion_tokens} and "
                     f"{rounds} steps (ℓ̄ = spec_accept_length - 1 - 1/steps)")
        if acc < 0:
            raise ValueError(f"completion_tokens {completion_tokens} < spec_verify_ct {rounds} + 1: the counters disagree")
    elif (acc is not None and rounds > 0 and finish != "length"  # a run cut at the budget drops accepted tokens
          and isinstance(length, (int, float)) and not isinstance(length, bool)):
        lbar = l_bar_from_accept_length(float(length), rounds)
        if abs(lbar - acc / rounds) > 1.0 / rounds + 1e-9:  # more than one token apart
            warns.append(f"spec_accept_length {length} gives ℓ̄ {lbar:.4f}, not accepted/steps {acc}/{rounds}")
    out["accepted_tokens"] = acc
    return out, warns


def from_meta_info(meta: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Run-record fields from one request's ``meta_info``, and warnings.

    Examples
    --------
    >>> rec, _ = from_meta_info({"finish_reason": {"type": "length", "length": 64}, "completion_tokens": 64,
    ...                          "prompt_tokens": 9, "e2e_latency": 0.5, "spec_verify_ct": 20,
    ...                          "spec_num_correct_drafts": 43})
    >>> rec["draft_rounds"], rec["accepted_tokens"], rec["finish_reason"], rec["wall_time_s"]
    (20, 43, 'length', 0.5)
    """
    if not isinstance(meta, dict):
        raise ValueError("meta_info is not an object")  # noqa: TRY004 - bad file content
    fin = meta.get("finish_reason")
    kind = fin.get("type") if isinstance(fin, dict) else fin
    completion = whole(meta.get("completion_tokens"), "completion_tokens")
    rec: dict[str, Any] = {
        "status": "error" if kind == "abort" else "ok", "finish_reason": kind, "output_tokens": completion,
        "input_tokens": whole(meta.get("prompt_tokens"), "prompt_tokens"),
        "reasoning_tokens": whole(meta.get("reasoning_tokens"), "reasoning_tokens"),
        "wall_time_s": seconds(meta.get("e2e_latency"), "s", "meta_info.e2e_latency"), "backend": "sglang",
    }
    spec, warns = spec_fields(meta, completion, kind)
    rec.update(spec)
    return rec, warns


def _openai(resp: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Records of an OpenAI-compatible SGLang response: choices, usage, ``sglext.spec_tokens_details``."""
    choices = resp["choices"]
    usage = mapping(resp.get("usage"), "usage")
    details = mapping(resp.get("sglext"), "sglext").get("spec_tokens_details")
    if details is not None and not isinstance(details, (dict, list)):
        raise ValueError(f"field 'sglext.spec_tokens_details' is {kind_of(details)}, not an object or a list")
    per_choice = details if isinstance(details, list) else [details] * len(choices)
    if len(per_choice) != len(choices):
        raise ValueError(f"field 'sglext.spec_tokens_details' has {len(per_choice)} entries for {len(choices)} choices")
    out, warns = [], []
    for choice, spec in zip(choices, per_choice):
        if not isinstance(choice, dict):
            raise ValueError(f"field 'choices' holds {kind_of(choice)}, not an object")
        if spec is not None and not isinstance(spec, dict):
            raise ValueError(f"field 'sglext.spec_tokens_details' holds {kind_of(spec)}, not an object")
        if choice.get("meta_info") is not None:
            mapping(choice["meta_info"], "choices.meta_info")
            rec, w = from_meta_info(choice["meta_info"])
        else:
            reasoning = usage.get("reasoning_tokens") or mapping(usage.get("completion_tokens_details"),
                                                                  "usage.completion_tokens_details").get("reasoning_tokens")
            one = len(choices) == 1
            rec = {"status": "error" if choice.get("finish_reason") == "abort" else "ok",
                   "finish_reason": choice.get("finish_reason"), "backend": "sglang",
                   "output_tokens": whole(usage.get("completion_tokens"), "usage.completion_tokens") if one else None,
                   "input_tokens": whole(usage.get("prompt_tokens"), "usage.prompt_tokens"),
                   "reasoning_tokens": whole(reasoning, "reasoning_tokens") if one else None}
            w = []
            if isinstance(spec, dict):
                s, w = spec_fields(spec, rec["output_tokens"], rec["finish_reason"])
                rec.update(s)
        msg = choice.get("message")
        rec["text"] = msg.get("content") if isinstance(msg, dict) else choice.get("text")
        if isinstance(msg, dict) and msg.get("reasoning_content"):
            rec["text"] = f"<think>{msg['reasoning_content']}</think>{msg.get('content') or ''}"
        out.append(rec)
        warns += w
    return out, warns


def from_response(resp: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Run-record fields of one SGLang output: native (``meta_info``; a list for a batch) or OpenAI-compatible."""
    if isinstance(resp, list):
        recs, warns = [], []
        for r in resp:
            more, w = from_response(r)
            recs += more
            warns += w
        return recs, warns
    if not isinstance(resp, dict):
        raise ValueError(f"expected a JSON object, got {type(resp).__name__}")  # noqa: TRY004 - bad file content
    if isinstance(resp.get("choices"), list) and resp["choices"]:
        return _openai(resp)
    if "meta_info" not in resp:
        raise ValueError("not an SGLang output (no 'meta_info' and no 'choices')")
    rec, warns = from_meta_info(resp["meta_info"])
    if isinstance(resp.get("text"), str):
        rec["text"] = resp["text"]
    return [rec], warns


def _line_records(obj: Any, base: dict[str, Any], position: int, where: str) -> tuple[list[dict[str, Any]], list[str], bool]:
    payload, extra = unwrap(obj)
    recs, warns = from_response(payload)
    out = [place({"target": engine_model(obj, payload), **base, **{k: v for k, v in f.items() if v is not None}, **extra},
                 position, where, i, len(recs)) for i, f in enumerate(recs)]
    return out, warns, "item_id" not in extra


def read(path: Path, *, arm: dict[str, Any] | None = None, max_new_tokens: int | None = None) -> ReadResult:
    """Every SGLang output under ``path`` (a .jsonl/.json file or a folder of them) as run-record mappings.

    ``arm``: identity and settings for every file (arm.json files and the lines themselves win);
    ``max_new_tokens``: the budget when neither the request (``sampling_params.max_new_tokens``) nor
    the arm gives one.
    """
    return read_response_files(Path(path), arm, max_new_tokens, "SGLang outputs", _line_records)
