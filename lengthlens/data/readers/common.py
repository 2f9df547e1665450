"""What the engines' record readers share: an arm's identity, tolerant line reading, units.

The engines' own records (vLLM and SGLang responses, AIPerf's ``profile_export.jsonl``, ``vllm bench
serve`` results) say what happened to a request, not which arm of an evaluation it belonged to.
The identity (target, draft, dataset, method, params) and the run's place (item, seed) come from,
most specific first:

1. the record itself, where the format logs it (a wrapper line ``{"item_id": ..., "response": {...}}``,
   the model name an engine echoes, ``vllm bench serve --metadata KEY=VALUE``);
2. an ``arm.json`` beside the file or in a folder above it (up to the path given to the reader),
   nearer files overriding farther ones, e.g. ``{"draft": "eagle3-8b", "method": "eagle3",
   "params": "k4", "dataset": "gsm8k", "concurrency": 32}``;
3. the reader's ``arm`` option (``lengthlens report --format vllm --arm method=eagle3 ...``).

A record still missing an identity field is a read failure that says where to give it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Iterator

from lengthlens.data.readers import ReadResult
from lengthlens.data.readers.stream import assemble_lines, sse_lines
from lengthlens.data.schema import RunRecord

#: File holding an arm's identity and serving condition, beside the records or in a folder above them.
ARM_FILE = "arm.json"
IDENTITY = ("target", "draft", "dataset", "method", "params")
#: Fields an arm.json / ``arm`` option may set: identity, seed, settings, serving condition, provenance.
ARM_KEYS = frozenset({*IDENTITY, "seed", "temperature", "top_p", "max_new_tokens", "concurrency", "request_rate",
                      "batch_size", "gpu", "backend", "engine_version", "category", "alpha"})
_FIELDS = frozenset(RunRecord.model_fields)
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0}


def check_arm(arm: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """``arm`` with its keys checked against :data:`ARM_KEYS` (ValueError naming the unknown ones)."""
    arm = dict(arm or {})
    unknown = sorted(set(arm) - ARM_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown arm field(s) {', '.join(unknown)}; known: {', '.join(sorted(ARM_KEYS))}")
    return arm


_INT_KEYS = frozenset({"seed", "max_new_tokens", "concurrency", "batch_size"})
_FLOAT_KEYS = frozenset({"temperature", "top_p", "request_rate", "alpha"})


def parse_arm_items(items: list[str]) -> dict[str, Any]:
    """``["method=eagle3", "concurrency=32"]`` (the command line's ``--arm``) as arm fields with their types.

    Examples
    --------
    >>> parse_arm_items(["method=eagle3", "concurrency=32", "request_rate=inf"])
    {'method': 'eagle3', 'concurrency': 32, 'request_rate': inf}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--arm {item!r}: expected KEY=VALUE")
        try:
            out[key] = int(value) if key in _INT_KEYS else float(value) if key in _FLOAT_KEYS else value
        except ValueError:
            raise ValueError(f"--arm {item!r}: {key} must be a number") from None
    return check_arm(out, "--arm")


def arm_from_files(file: Path, root: Path) -> dict[str, Any]:
    """The arm.json fields that apply to ``file``: every arm.json from ``root`` down to the file's folder."""
    folders = [file.parent]
    root = root if root.is_dir() else root.parent
    while folders[-1] != root and root in folders[-1].parents:
        folders.append(folders[-1].parent)
    out: dict[str, Any] = {}
    for folder in reversed(folders):
        f = folder / ARM_FILE
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ValueError(f"{f}: unreadable arm file ({exc})") from None
            if not isinstance(data, dict):
                raise ValueError(f"{f}: expected a JSON object with the arm's fields")  # noqa: TRY004 - bad file
            out.update(check_arm(data, str(f)))
    return out


def missing_identity(rec: dict[str, Any]) -> list[str]:
    """Identity fields a record still lacks (``draft`` may be empty only for a baseline: the record says so)."""
    return [k for k in IDENTITY if rec.get(k) is None or (k != "draft" and rec.get(k) == "")]


def identity_failure(where: str, missing: list[str]) -> dict[str, str]:
    """A read failure for a record whose arm is not known, saying where to give it."""
    return {"path": where, "stage": "read",
            "reason": f"the record does not say its {', '.join(missing)}: give them in an {ARM_FILE} beside the file "
                      f"(or a folder above it) or with --arm KEY=VALUE (arm= in the API)"}


def json_lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, parsed JSON or None, reason when unreadable) per non-blank line; a bad byte spoils only its line."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            if not raw.strip(b"\x00 \t\r\n"):
                yield lineno, None, (f"padding of {raw.count(0)} NUL bytes, not a record (a file preallocated or cut "
                                     "while it was written)")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield lineno, None, f"not UTF-8 (byte {exc.start + 1} of the line)"
                continue
            try:
                yield lineno, json.loads(text), None
            except json.JSONDecodeError as exc:
                yield lineno, None, f"invalid JSON ({exc.msg}, column {exc.colno})"
            except RecursionError:
                yield lineno, None, "JSON nested too deeply"


def record_fields(d: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The run-record fields a wrapper line carries beside the engine's payload, and its other keys."""
    return {k: v for k, v in d.items() if k in _FIELDS}, [k for k in d if k not in _FIELDS]


def seconds(value: Any, unit: str | None) -> float | None:
    """A time in seconds from a value and its unit (``ns``, ``ms``, ``s``, ...); None when absent or not finite."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    factor = _TIME_UNITS.get((unit or "s").strip().lower())
    if factor is None:
        raise ValueError(f"unknown time unit {unit!r}")
    out = float(value) * factor
    return out if math.isfinite(out) else None


def whole(value: Any, what: str) -> int | None:
    """A count as an int; ValueError naming ``what`` for a non-whole or non-numeric value (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    return int(value)


def files_under(path: Path, patterns: tuple[str, ...]) -> list[Path]:
    """``path`` itself when a file, else every file below it matching one of the glob ``patterns``, sorted."""
    if path.is_file():
        return [path]
    found = {p for pat in patterns for p in path.rglob(pat) if p.is_file() and p.name != ARM_FILE}
    return sorted(found)


def cap_warnings(file: Path, warns: list[str], limit: int = 20) -> list[str]:
    """At most ``limit`` warnings of one file, then one line counting the rest."""
    return warns[:limit] + ([f"{file}: ... and {len(warns) - limit} more"] if len(warns) > limit else [])


def request_fields(req: dict[str, Any]) -> dict[str, Any]:
    """Budget and sampling settings from an OpenAI-style request body (``max_completion_tokens`` / ``max_tokens``)."""
    out: dict[str, Any] = {}
    budget = req.get("max_completion_tokens", req.get("max_tokens", req.get("max_new_tokens")))
    if budget is not None:
        out["max_new_tokens"] = budget
    for key in ("temperature", "top_p", "seed"):
        if req.get(key) is not None:
            out[key] = req[key]
    return out


def unwrap(obj: Any) -> tuple[Any, dict[str, Any]]:
    """(the engine's payload, run-record fields) of one line: a wrapper ``{"response": ..., "request": ..., ...}`` or bare.

    The request body may be native (SGLang's ``sampling_params`` inside it) or OpenAI-style.
    """
    if not isinstance(obj, dict) or "response" not in obj:
        return obj, {}
    extra, _ = record_fields({k: v for k, v in obj.items() if k not in ("response", "request")})
    req = obj.get("request")
    if isinstance(req, dict):
        sp = req.get("sampling_params")
        extra = {**request_fields(req), **(request_fields(sp) if isinstance(sp, dict) else {}), **extra}
    return obj["response"], extra


def engine_model(obj: Any, payload: Any) -> str | None:
    """The model name the engine echoed (the response's ``model``), else the request's: the target's fallback."""
    for d in (payload, obj.get("request") if isinstance(obj, dict) else None):
        if isinstance(d, dict) and isinstance(d.get("model"), str) and d["model"]:
            return d["model"]
    return None


def place(rec: dict[str, Any], position: int, where: str, index: int = 0, n: int = 1) -> dict[str, Any]:
    """A record with its item (the line's position when not given), seed (0; +index for the n outputs of one request), source."""
    rec.setdefault("item_id", str(position))
    rec.setdefault("seed", 0)
    if n > 1:
        rec["seed"] = int(rec["seed"]) + index
    rec["source"] = where + (f"#choice{index}" if n > 1 else "")
    return rec


def json_objects(path: Path) -> list[tuple[int, Any, str | None]]:
    """A .json file as one object or a list of them (numbered from 1), a .jsonl file line by line."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            return [(1, None, f"unreadable JSON ({exc})")]
        return [(i + 1, d, None) for i, d in enumerate(data if isinstance(data, list) else [data])]
    return list(json_lines(path))


def response_objects(f: Path) -> tuple[list[tuple[int, Any, str | None]], list[str]]:
    """The objects of one response file, saved streams (JSON chunks or server-sent events) assembled per request.

    See :mod:`lengthlens.data.readers.stream`; the notes say how many chunks became how many responses.
    """
    sse = f.suffix.lower() == ".sse" or _starts_with_data(f)
    return assemble_lines(sse_lines(f) if sse else json_objects(f))


def _starts_with_data(f: Path) -> bool:
    """Whether the file's first non-blank line is a server-sent event (``data: ...``)."""
    with open(f, "rb") as fh:
        for raw in fh:
            if raw.strip():
                return raw.lstrip().startswith((b"data:", b"event:"))
    return False


LineFn = Callable[[Any, dict[str, Any], int, str], tuple[list[dict[str, Any]], list[str], bool]]


def read_response_files(path: Path, arm: dict[str, Any] | None, max_new_tokens: int | None, what: str,
                        line_records: LineFn) -> ReadResult:
    """Every line of every .jsonl/.json file under ``path`` through ``line_records``; the loop the response readers share.

    ``line_records(obj, base, position, where)`` returns the line's records, its warnings and whether
    the item id was taken from the line's position. Records still missing an identity field, and
    lines that raise ValueError/TypeError, become failures naming file and line.
    """
    opts = check_arm(arm, "arm option")
    if max_new_tokens is not None:
        opts.setdefault("max_new_tokens", max_new_tokens)
    files = files_under(path, ("*.jsonl", "*.json", "*.sse"))
    if not files:
        raise ValueError(f"{path}: no .jsonl/.json/.sse files of {what}")
    out = ReadResult(records=[])
    n = 0
    for f in files:
        base = {**opts, **arm_from_files(f, path)}
        objects, notes = response_objects(f)
        warns = [f"{f}: {x}" for x in notes]
        positional = False
        for pos, (lineno, obj, bad) in enumerate(objects, start=1):
            where = f"{f}:{lineno}"
            try:
                if bad:
                    raise ValueError(bad)
                recs, w, by_pos = line_records(obj, base, pos, where)
            except (ValueError, TypeError, KeyError) as exc:
                n += 1
                out.failures.append({"path": where, "reason": str(exc), "stage": "read"})
                continue
            n += len(recs)
            positional |= by_pos
            warns += [f"{where}: {x}" for x in w]
            for rec in recs:
                miss = missing_identity(rec)
                if miss:
                    out.failures.append(identity_failure(rec["source"], miss))
                else:
                    out.records.append((str(f), lineno, rec))
        if positional:
            warns.insert(0, f"{f}: no item_id on some lines: items numbered by their position in the file "
                            "(pair only files that list the same items in the same order)")
        out.warnings.extend(cap_warnings(f, warns))
    return ReadResult(out.records, out.failures, out.warnings, n)
