"""Read AIPerf's per-request records (``profile_export.jsonl``, ``--export-level records``), engine-neutral.

Each line is AIPerf's ``MetricRecordInfo`` (``aiperf/common/models/record_models.py``): ``metadata``
(``MetricRecordMetadata``: ``conversation_id``, ``turn_index``, ``session_num``, ``benchmark_phase``,
``was_cancelled``, ...), ``metrics`` (``{tag: {"value": v, "unit": u}}`` in display units), ``error``
(``ErrorDetails`` or null) and, from AIPerf 0.13, ``spec_decode_acceptance``
(``SpecDecodeAcceptanceRecord`` in ``aiperf/common/models/spec_decode_models.py``: per-request
``num_spec_steps``, ``num_accepted_draft_tokens`` (bonus excluded), ``num_draft_tokens``, the
histogram; filled by AIPerf's vLLM adapter from vLLM's ``metrics.speculative_decoding``). Lines are
written with ``exclude_none``, so absent fields are missing keys. The mapping:

- ``item_id`` = ``metadata.conversation_id`` (``item_key="session_num"`` or ``"x_correlation_id"``
  to choose another; AIPerf's dataset ids are seeded, so one dataset and seed give the same
  conversations to every arm), ``turn`` = ``turn_index + 1`` when the file holds multi-turn sessions;
- ``output_tokens`` = ``usage_completion_tokens`` (the server's count) or else
  ``output_sequence_length`` (AIPerf's count, reasoning included); ``reasoning_tokens`` =
  ``usage_reasoning_tokens`` or ``reasoning_token_count``; ``input_tokens`` =
  ``usage_prompt_tokens`` or ``input_sequence_length``;
- ``wall_time_s`` = ``request_latency`` (the client's request start to last response: network and
  server queueing included), converted from its unit;
- ``draft_rounds`` / ``accepted_tokens`` / ``draft_tokens`` from ``spec_decode_acceptance`` (or the
  per-record metrics ``spec_decode_steps`` / ``spec_decode_accepted_draft_tokens`` /
  ``spec_decode_draft_tokens``). Without them (AIPerf before 0.13, or a server without per-request
  counters) the records carry no speculative counters: gain, ℓ̄ and R/R* are unavailable per
  cell, and the reader says so (AIPerf's run-level totals are sums of the same per-request
  records, so there is then no pooled figure either);
- ``error`` or ``was_cancelled`` gives status ``error``; warm-up records are skipped, named;
- the budget (``max_tokens`` / ``max_completion_tokens``) from ``inputs.json`` beside the file
  (AIPerf's formatted request payloads, per session and turn: each request may have its own) when
  it is there, winning over the arm's or the command line's ``max_new_tokens``, which serve the
  requests it does not list; AIPerf logs no finish reason, so censoring is read from the length
  against each run's own budget;
- target, draft, method, params, dataset, seed and the serving condition from ``arm.json`` or ``arm=``
  (AIPerf's records do not carry the model name or the load); a record's own dataset category
  (``metadata.category``; 0.13.0 writes none) is its ``category`` and, where no dataset is given, its
  dataset, so one run over a benchmark's categories gives a cell per category.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lengthlens.data.readers.common import (
    arm_from_files,
    cap_warnings,
    check_arm,
    files_under,
    identity_failure,
    json_lines,
    kind_of,
    mapping,
    missing_identity,
    request_fields,
    seconds,
    where_in,
    whole,
)
from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, read_input
from lengthlens.data.readers import ReadResult, Record

ITEM_KEYS = ("conversation_id", "session_num", "x_correlation_id")
_SPEC_METRICS = {"spec_decode_steps": "draft_rounds", "spec_decode_accepted_draft_tokens": "accepted_tokens",
                 "spec_decode_draft_tokens": "draft_tokens"}


def _metric(metrics: dict[str, Any], *tags: str) -> tuple[Any, str | None]:
    for tag in tags:
        m = mapping(metrics.get(tag), f"metrics.{tag}")
        if m.get("value") is not None:
            return m["value"], m.get("unit")
    return None, None


def from_record(line: dict[str, Any]) -> dict[str, Any]:
    """Run-record fields (no identity) of one AIPerf ``MetricRecordInfo`` line.

    Examples
    --------
    >>> rec = from_record({"metadata": {"conversation_id": "c1", "turn_index": 0, "benchmark_phase": "profiling"},
    ...                    "metrics": {"output_sequence_length": {"value": 9, "unit": "tokens"},
    ...                                "request_latency": {"value": 297.5, "unit": "ms"}}})
    >>> rec["output_tokens"], rec["wall_time_s"]
    (9, 0.2975)
    """
    meta, metrics = line.get("metadata"), mapping(line.get("metrics"), "metrics")
    if not isinstance(meta, dict):
        raise ValueError("not an AIPerf record (no 'metadata' object)")
    failed = line.get("error") is not None or bool(meta.get("was_cancelled"))
    out_tok, _ = _metric(metrics, "usage_completion_tokens", "output_sequence_length")
    reasoning, _ = _metric(metrics, "usage_reasoning_tokens", "reasoning_token_count")
    prompt, _ = _metric(metrics, "usage_prompt_tokens", "input_sequence_length")
    latency, unit = _metric(metrics, "request_latency")
    rec: dict[str, Any] = {"status": "error" if failed else "ok",
                           "output_tokens": whole(out_tok, "output tokens"),
                           "reasoning_tokens": whole(reasoning, "reasoning tokens"),
                           "input_tokens": whole(prompt, "input tokens"),
                           "wall_time_s": seconds(latency, unit, "metrics.request_latency")}
    spec = line.get("spec_decode_acceptance")
    if spec is not None and not isinstance(spec, dict):
        raise ValueError(f"field 'spec_decode_acceptance' is {kind_of(spec)}, not an object")
    if isinstance(spec, dict):
        rec.update(draft_rounds=whole(spec.get("num_spec_steps"), "num_spec_steps"),
                   accepted_tokens=whole(spec.get("num_accepted_draft_tokens"), "num_accepted_draft_tokens"),
                   draft_tokens=whole(spec.get("num_draft_tokens"), "num_draft_tokens"))
    else:
        for tag, field in _SPEC_METRICS.items():
            v, _ = _metric(metrics, tag)
            if v is not None:
                rec[field] = whole(v, tag)
    return {k: v for k, v in rec.items() if v is not None}


def _budgets(folder: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(session id, turn index) -> budget and sampling settings, from AIPerf's inputs.json beside the records."""
    f = folder / "inputs.json"
    if not os.path.lexists(f):
        return {}
    try:
        data = decode_json(read_input(f))
    except (OSError, UnreadableFile, JSONProblem) as exc:
        raise ValueError(f"its inputs.json cannot be read ({exc})") from None
    out = {}
    sessions = mapping(data, "inputs.json").get("data") or []
    for session in sessions if isinstance(sessions, list) else ():
        if not isinstance(session, dict):
            continue
        for t, payload in enumerate(session.get("payloads") or []):
            if isinstance(payload, dict):
                out[(str(session.get("session_id")), t)] = request_fields(payload)
    return out


def _file_records(f: Path, base: dict[str, Any], item_key: str) -> tuple[list[Record], list[dict[str, str]], int]:
    try:
        budgets = _budgets(f.parent)
    except ValueError as exc:  # the file's records cannot get their budgets: the file is skipped, named
        return [], [{"path": str(f), "reason": str(exc), "stage": "read"}], 1
    rows, fails, n = [], [], 0
    for lineno, obj, bad in json_lines(f):
        n += 1
        where = where_in(f, lineno)
        try:
            if bad:
                raise ValueError(bad)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")  # noqa: TRY004 - bad file content
            meta = mapping(obj.get("metadata"), "metadata")
            if meta.get("benchmark_phase") == "warmup":
                raise ValueError("an AIPerf warm-up request (not measured)")
            fields = from_record(obj)
            if meta.get(item_key) is None:
                raise ValueError(f"metadata.{item_key} is missing: the record names no item")
            turn = whole(meta.get("turn_index") or 0, "metadata.turn_index")
        except (ValueError, TypeError, AttributeError) as exc:  # a malformed record: skipped, named
            fails.append({"path": where, "reason": str(exc), "stage": "read"})
            continue
        # The request's own payload wins over an arm-wide budget (AIPerf may give every request its own).
        rec = {**base, **budgets.get((str(meta.get("conversation_id")), turn), {}), **fields,
               "item_id": str(meta[item_key]), "turn": turn + 1, "source": where}
        rec.setdefault("seed", 0)
        category = meta.get("category") or meta.get("dataset_category")
        if isinstance(category, str) and category:
            # One run over a benchmark's categories (SPEED-Bench's habit): each category is a dataset of its own.
            rec["category"] = category
            rec.setdefault("dataset", category)
        rows.append((str(f), lineno, rec))
    if not any(r[2]["turn"] > 1 for r in rows):
        for r in rows:
            r[2]["turn"] = None  # single-turn sessions
    return rows, fails, n


def read(path: Path, *, arm: dict[str, Any] | None = None, max_new_tokens: int | None = None,
         item_key: str = "conversation_id") -> ReadResult:
    """Every AIPerf ``profile_export.jsonl`` under ``path`` (or the file given) as run-record mappings.

    ``arm``: identity, seed and serving condition for every file (arm.json files win);
    ``max_new_tokens``: the budget when inputs.json does not give it; ``item_key``: the metadata
    field that names the item (:data:`ITEM_KEYS`).
    """
    if item_key not in ITEM_KEYS:
        raise ValueError(f"item_key must be one of {', '.join(ITEM_KEYS)}, not {item_key!r}")
    path = Path(path)
    opts = check_arm(arm, "arm option")
    if max_new_tokens is not None:
        opts.setdefault("max_new_tokens", max_new_tokens)
    files = files_under(path, ("profile_export.jsonl",))
    if not files and not files.skipped:
        raise ValueError(f"{path}: no AIPerf profile_export.jsonl (run AIPerf with --export-level records)")
    out = ReadResult(records=[], failures=list(files.skipped))
    n = len(files.skipped)
    for f in files:
        rows, fails, k = _file_records(f, {**opts, **arm_from_files(f, path)}, item_key)
        warns: list[str] = []
        n += k
        out.failures.extend(fails)
        for _, lineno, rec in rows:
            miss = missing_identity(rec)
            if miss:
                out.failures.append(identity_failure(rec["source"], miss))
            else:
                out.records.append((str(f), lineno, rec))
        if rows and not any("draft_rounds" in r[2] for r in rows):
            warns.append(f"{f}: the records carry no per-request speculative counters (AIPerf before 0.13, or a server "
                         "without per-request metrics): gain, ℓ̄ and R/R* are unavailable per cell")
        out.warnings.extend(cap_warnings(f, warns))
    return ReadResult(out.records, out.failures, out.warnings, n)
