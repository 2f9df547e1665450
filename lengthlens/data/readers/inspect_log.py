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

import io
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
    kind_of,
    mapping,
    missing_identity,
    request_fields,
    seconds,
    whole,
)
from lengthlens.data.readers.vllm_records import from_openai_response
from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, max_file_bytes, read_input, too_large

_ZSTD = 93
_CORRECT = {"C": True, "I": False, "CORRECT": True, "INCORRECT": False}
_SUMMED = ("output_tokens", "reasoning_tokens", "draft_rounds", "accepted_tokens", "draft_tokens", "wall_time_s")


def _member(z: zipfile.ZipFile, data: bytes, name: str) -> bytes:
    """One member of the zip ``data``, Zstandard (inspect_ai's default) decompressed with pyarrow's codec, under the size
    cap of a file (:func:`lengthlens.data.safeio.max_file_bytes`): a member is read only when its stated size is within it."""
    info = z.getinfo(name)
    limit = max_file_bytes()
    if info.file_size > limit or info.compress_size > limit:
        raise UnreadableFile(f"member {name}: {too_large(max(info.file_size, info.compress_size), limit)}")
    if info.compress_type != _ZSTD:
        return z.read(name)
    import pyarrow as pa

    head = data[info.header_offset:info.header_offset + 30]
    if head[:4] != b"PK\x03\x04" or len(head) < 30:
        raise ValueError(f"{name}: not a zip member header")
    n_name, n_extra = struct.unpack("<HH", head[26:30])
    start = info.header_offset + 30 + n_name + n_extra
    raw = data[start:start + info.compress_size]
    return pa.Codec("zstd").decompress(raw, decompressed_size=info.file_size).to_pybytes()


def log_contents(path: Path) -> tuple[dict[str, Any], list[tuple[str, Any, str | None]]]:
    """(the log's ``eval`` header, [(where, sample or None, reason when unreadable)]) of one ``.eval`` or ``.json`` log.

    The file is read as every input is (:func:`lengthlens.data.safeio.read_input`: a regular file under the size
    cap, gzip decompressed, a byte-order mark dropped); ValueError for a file that is not an inspect_ai log.
    """
    data = read_input(path)
    if not data.strip():
        raise ValueError("an empty file: it holds no record")
    if path.name.lower().endswith((".json", ".json.gz")):
        log = decode_json(data)
        if not isinstance(log, dict) or "eval" not in log:
            raise ValueError("not an inspect_ai log (no 'eval' header)")
        samples = log.get("samples") or []
        if not isinstance(samples, list):
            raise ValueError(f"field 'samples' is {kind_of(samples)}, not a list")
        return mapping(log["eval"], "eval"), [(f"{path}#sample{i + 1}", s, None) for i, s in enumerate(samples)]
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        if "header.json" in names:
            header = decode_json(_member(z, data, "header.json"))
        elif "_journal/start.json" in names:
            header = decode_json(_member(z, data, "_journal/start.json"))
        else:
            raise ValueError("not an inspect_ai .eval log (no header.json)")
        out: list[tuple[str, Any, str | None]] = []
        for name in sorted(n for n in names if n.startswith("samples/") and n.endswith(".json")):
            try:
                out.append((f"{path}#{name}", decode_json(_member(z, data, name)), None))
            except JSONProblem as exc:
                out.append((f"{path}#{name}", None, "unreadable sample (" + (f"field '{exc.field}': " if exc.field else "")
                            + f"{exc.reason})"))
            except (ValueError, UnicodeDecodeError, zipfile.BadZipFile, OSError, EOFError) as exc:
                out.append((f"{path}#{name}", None, f"unreadable sample ({exc})"))
    return mapping(mapping(header, "header").get("eval"), "eval"), out


def _score(sample: dict[str, Any], scorer: str | None) -> tuple[bool | None, str | None]:
    scores = mapping(sample.get("scores"), "scores")
    if not scores:
        return None, None
    name = scorer if scorer is not None else next(iter(scores))
    if name not in scores:
        raise ValueError(f"no score {name!r} (the sample has {', '.join(scores)})")
    v = mapping(scores[name], f"scores.{name}").get("value")
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
    attachments = mapping(sample.get("attachments"), "attachments")
    events = sample.get("events") or []
    if not isinstance(events, list):
        raise ValueError(f"field 'events' is {kind_of(events)}, not a list")
    calls = [e for e in events if isinstance(e, dict) and e.get("event") == "model"]
    responses = [(e, _resolve(mapping(e.get("call"), "events[].call").get("response"), attachments)) for e in calls]
    responses = [(e, r) for e, r in responses if isinstance(r, dict) and r.get("choices") is not None]
    warns: list[str] = []
    rec: dict[str, Any] = {"item_id": str(sample["id"]), "seed": (whole(sample.get("epoch"), "field 'epoch'") or 1) - 1}
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
        out = mapping(sample.get("output"), "output")
        usage = mapping(out.get("usage"), "output.usage")
        choices = out.get("choices") or [{}]
        if not isinstance(choices, list):
            raise ValueError(f"field 'output.choices' is {kind_of(choices)}, not a list")
        stop = mapping(choices[0], "output.choices[0]").get("stop_reason")
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
    found = files_under(path, ("*.eval", "*.json"))
    files = [f for f in found if f.suffix.lower() == ".eval" or f.name != "arm.json"]
    if not files and not found.skipped:
        raise ValueError(f"{path}: no inspect_ai logs (.eval or .json)")
    records: list[Record] = []
    failures: list[dict[str, str]] = list(found.skipped)  # found but not a readable regular file: each named
    warnings: list[str] = []
    n = len(found.skipped)
    for f in files:
        base = {**opts, **arm_from_files(f, path)}
        try:
            header, samples = log_contents(f)
        except FileNotFoundError:
            n += 1
            failures.append({"path": str(f), "reason": "gone while it was read", "stage": "read"})
            continue
        except JSONProblem as exc:
            n += 1
            line = f":{exc.line}" if exc.line is not None else ""
            failures.append({"path": f"{f}{line}", "stage": "read", "reason": "unreadable inspect_ai log ("
                             + (f"field '{exc.field}': " if exc.field else "") + f"{exc.reason})"})
            continue
        except (ValueError, OSError, zipfile.BadZipFile, UnicodeDecodeError, EOFError) as exc:
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
            except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError) as exc:  # a malformed sample
                why = str(exc) if isinstance(exc, ValueError) else f"malformed sample ({type(exc).__name__}: {exc})"
                failures.append({"path": where, "reason": why, "stage": "read"})
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
