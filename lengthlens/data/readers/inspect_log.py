"""Read ``inspect_ai`` eval logs: each sample's score with the model call's speculative counters and timings.

An ``inspect eval`` log (``.eval``: a zip of ``header.json`` and ``samples/<id>_epoch_<n>.json``, each
member Zstandard-compressed by inspect_ai 0.3.2xx, or ``--log-format json``: one object with
``samples``) keeps per sample its ``id``, ``epoch``, ``scores`` (``{scorer: {value, answer, ...}}``),
``output`` (``usage`` with reasoning tokens, the choice's ``stop_reason``) and the ``events`` of the
sample, among them each ``model`` event's ``call``: the request body sent and the provider's raw
response. Against a vLLM server (0.29 and later, ``--per-request-spec-decode-metrics``) that response
is vLLM's own, with ``metrics.speculative_decoding`` and the timings, and is read exactly as the
``vllm`` reader reads a response (:func:`lengthlens.data.readers.vllm_records.from_openai_response`).
The mapping:

- ``item_id`` = the sample id, ``seed`` = epoch - 1 (inspect's epochs repeat each sample);
- ``correct`` from the score (``scorer=`` picks one; default the first): ``C`` / ``I``, true / false,
  1 / 0; a partial or other value leaves the run ungraded (counted in a warning);
- ``output_tokens``, ``reasoning_tokens``, counters, ``finish_reason`` and ``wall_time_s`` (vLLM's
  scheduled-to-last-token time) from the model call's response, summed over the sample's model calls
  (an agent's several generations are one run of the item); the budget from the request's
  ``max_tokens``; ``text`` the message content with its reasoning in front;
- without a logged call (a provider that keeps none): tokens from ``output.usage``, ``finish_reason``
  ``length`` where inspect's ``stop_reason`` is ``max_tokens``, wall time the model events'
  ``working_time`` (the client's), no speculative counters (warned);
- ``target`` the response's ``model`` (else the eval's, provider prefix dropped), ``dataset`` the task
  name unless ``arm.json`` / ``--arm`` give them; draft, method and params from ``arm.json`` or ``--arm``.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Any

from lengthlens.data.readers import ReadResult, Record
from lengthlens.data.readers.common import (
    arm_from_files,
    cap_warnings,
    check_arm,
    files_under,
    identity_failure,
    missing_identity,
    request_fields,
    seconds,
    whole,
)
from lengthlens.data.readers.vllm_records import from_openai_response

_ZSTD = 93
_CORRECT = {"C": True, "I": False, "CORRECT": True, "INCORRECT": False}
_SUMMED = ("output_tokens", "reasoning_tokens", "draft_rounds", "accepted_tokens", "draft_tokens", "wall_time_s")


def _member(z: zipfile.ZipFile, path: Path, name: str) -> bytes:
    """One member of a zip, Zstandard (inspect_ai's default) decompressed with pyarrow's codec."""
    info = z.getinfo(name)
    if info.compress_type != _ZSTD:
        return z.read(name)
    import pyarrow as pa

    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        head = fh.read(30)
        if head[:4] != b"PK\x03\x04":
            raise ValueError(f"{name}: not a zip member header")
        n_name, n_extra = struct.unpack("<HH", head[26:30])
        fh.seek(info.header_offset + 30 + n_name + n_extra)
        raw = fh.read(info.compress_size)
    return pa.Codec("zstd").decompress(raw, decompressed_size=info.file_size).to_pybytes()


def log_contents(path: Path) -> tuple[dict[str, Any], list[tuple[str, Any, str | None]]]:
    """(the log's ``eval`` header, [(where, sample or None, reason when unreadable)]) of one ``.eval`` or ``.json`` log."""
    if path.suffix.lower() == ".json":
        data = json.loads(path.read_bytes().decode("utf-8"))
        if not isinstance(data, dict) or "eval" not in data:
            raise ValueError("not an inspect_ai log (no 'eval' header)")
        return data["eval"], [(f"{path}#sample{i + 1}", s, None) for i, s in enumerate(data.get("samples") or [])]
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        if "header.json" in names:
            header = json.loads(_member(z, path, "header.json"))
        elif "_journal/start.json" in names:
            header = json.loads(_member(z, path, "_journal/start.json"))
        else:
            raise ValueError("not an inspect_ai .eval log (no header.json)")
        out: list[tuple[str, Any, str | None]] = []
        for name in sorted(n for n in names if n.startswith("samples/") and n.endswith(".json")):
            try:
                out.append((f"{path}#{name}", json.loads(_member(z, path, name)), None))
            except (ValueError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
                out.append((f"{path}#{name}", None, f"unreadable sample ({exc})"))
    return header.get("eval") or {}, out


def _score(sample: dict[str, Any], scorer: str | None) -> tuple[bool | None, str | None]:
    scores = sample.get("scores") or {}
    if not scores:
        return None, None
    name = scorer if scorer is not None else next(iter(scores))
    if name not in scores:
        raise ValueError(f"no score {name!r} (the sample has {', '.join(scores)})")
    v = (scores[name] or {}).get("value")
    if isinstance(v, bool):
        return v, name
    if isinstance(v, str) and v.upper() in _CORRECT:
        return _CORRECT[v.upper()], name
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v), name
    return None, name


def _resolve(obj: Any, attachments: dict[str, str]) -> Any:
    """``obj`` with inspect's ``attachment://<hash>`` strings replaced by the attached text."""
    if isinstance(obj, str) and obj.startswith("attachment://"):
        return attachments.get(obj[len("attachment://"):], obj)
    if isinstance(obj, dict):
        return {k: _resolve(v, attachments) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_resolve(v, attachments) for v in obj]
    return obj


def from_sample(sample: dict[str, Any], *, scorer: str | None = None,
                wall_time: str = "inference") -> tuple[dict[str, Any], list[str]]:
    """Run-record fields of one inspect sample (no arm), and warnings.

    Examples
    --------
    >>> s = {"id": "q1", "epoch": 1, "scores": {"match": {"value": "C"}},
    ...      "output": {"usage": {"output_tokens": 12}, "choices": [{"stop_reason": "stop"}]}, "events": []}
    >>> rec, _ = from_sample(s)
    >>> rec["item_id"], rec["correct"], rec["output_tokens"]
    ('q1', True, 12)
    """
    if not isinstance(sample, dict) or "id" not in sample:
        raise ValueError("not an inspect_ai sample (no 'id')")
    attachments = sample.get("attachments") or {}
    calls = [e for e in sample.get("events") or [] if isinstance(e, dict) and e.get("event") == "model"]
    responses = [(e, _resolve((e.get("call") or {}).get("response"), attachments)) for e in calls]
    responses = [(e, r) for e, r in responses if isinstance(r, dict) and r.get("choices") is not None]
    warns: list[str] = []
    rec: dict[str, Any] = {"item_id": str(sample["id"]), "seed": int(sample.get("epoch") or 1) - 1}
    correct, _ = _score(sample, scorer)
    rec["correct"] = correct
    if responses:
        parts = []
        for e, resp in responses:
            fields, w = from_openai_response(resp, wall_time=wall_time)
            warns += w
            parts.append(fields[0])
            req = (e.get("call") or {}).get("request")
            if isinstance(req, dict):
                rec.update(request_fields(req))
        last = parts[-1]
        rec.update(status=last["status"], finish_reason=last.get("finish_reason"), backend="vllm",
                   input_tokens=last.get("input_tokens"), text=last.get("text"), target=responses[-1][1].get("model"))
        for k in _SUMMED:
            vals = [p.get(k) for p in parts]
            rec[k] = None if any(v is None for v in vals) else sum(vals)
        if len(parts) > 1:
            warns.append(f"{len(parts)} model calls: their tokens, counters and times summed into one run of the item")
    else:
        out = sample.get("output") or {}
        usage = out.get("usage") or {}
        choice = (out.get("choices") or [{}])[0]
        stop = choice.get("stop_reason")
        rec.update(status="error" if sample.get("error") else "ok",
                   output_tokens=whole(usage.get("output_tokens"), "output.usage.output_tokens"),
                   reasoning_tokens=whole(usage.get("reasoning_tokens"), "output.usage.reasoning_tokens"),
                   input_tokens=whole(usage.get("input_tokens"), "output.usage.input_tokens"),
                   finish_reason="length" if stop == "max_tokens" else stop,
                   text=out.get("completion") if isinstance(out.get("completion"), str) else None)
        times = [seconds(e.get("working_time"), "s") for e in calls]
        rec["wall_time_s"] = sum(times) if times and all(t is not None for t in times) else None
        warns.append("no model call logged: tokens from the sample's usage, no speculative counters")
    if sample.get("error"):
        rec["status"] = "error"
    return {k: v for k, v in rec.items() if v is not None}, warns


def read(path: Path, *, arm: dict[str, Any] | None = None, max_new_tokens: int | None = None,
         scorer: str | None = None, wall_time: str = "inference") -> ReadResult:
    """Every sample of every inspect_ai log (``.eval`` or ``.json``) under ``path`` as run-record mappings.

    ``arm``: identity and settings for every file (arm.json files win); ``max_new_tokens``: the budget
    when the requests do not say; ``scorer``: the score that gives ``correct`` (default: the first);
    ``wall_time``: ``inference`` or ``e2e`` as for the vLLM reader.
    """
    path = Path(path)
    opts = check_arm(arm, "arm option")
    if max_new_tokens is not None:
        opts.setdefault("max_new_tokens", max_new_tokens)
    files = files_under(path, ("*.eval", "*.json"))
    files = [f for f in files if f.suffix.lower() == ".eval" or f.name != "arm.json"]
    if not files:
        raise ValueError(f"{path}: no inspect_ai logs (.eval or .json)")
    records: list[Record] = []
    failures: list[dict[str, str]] = []
    warnings: list[str] = []
    n = 0
    for f in files:
        base = {**opts, **arm_from_files(f, path)}
        try:
            header, samples = log_contents(f)
        except (ValueError, OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
            n += 1
            failures.append({"path": str(f), "reason": f"unreadable inspect_ai log ({exc})", "stage": "read"})
            continue
        model = str(header.get("model") or "")
        task = str(header.get("task") or "").rpartition("/")[2] or None
        warns: list[str] = []
        ungraded = 0
        for k, (where, sample, bad) in enumerate(samples, start=1):
            n += 1
            try:
                if bad:
                    raise ValueError(bad)
                fields, w = from_sample(sample, scorer=scorer, wall_time=wall_time)
            except (ValueError, TypeError, KeyError) as exc:
                failures.append({"path": where, "reason": str(exc), "stage": "read"})
                continue
            warns += [f"{where}: {x}" for x in w]
            ungraded += "correct" not in fields and bool(sample.get("scores"))
            rec = {"target": model.rsplit("/", 2)[-1] if model else None, "dataset": task, **base, **fields,
                   "source": where}
            rec["target"] = fields.get("target") or rec["target"]
            if "target" in base:
                rec["target"] = base["target"]
            miss = missing_identity(rec)
            if miss:
                failures.append(identity_failure(where, miss))
            else:
                records.append((str(f), k, rec))
        if ungraded:
            warns.insert(0, f"{f}: {ungraded} samples' scores are neither correct nor incorrect (partial or numeric): left ungraded")
        warnings.extend(cap_warnings(f, warns))
    return ReadResult(records, failures, warnings, n)
