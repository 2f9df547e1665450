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

Every file a reader is given or finds is read or listed as skipped with its reason: :func:`files_under`
lists what matches a reader's names but is not a readable regular file (a FIFO, a folder, a device, a
dangling link), :func:`json_lines` reads through :func:`lengthlens.data.safeio.iter_lines` (gzip files
decompressed, a byte-order mark dropped, a file that holds no record named as empty), and a field of
the wrong type (:func:`mapping`, :func:`seconds`, :func:`whole`) skips its record, naming the field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterator

from lengthlens.data.readers import ReadResult
from lengthlens.data.readers.stream import assemble_lines, sse_lines
from lengthlens.data.safeio import (
    JSONProblem,
    UnreadableFile,
    check_regular,
    decode_json,
    display_path,
    iter_lines,
    kind_of,
    os_reason,
    read_input,
)
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
        if os.path.lexists(f):
            try:
                data = decode_json(read_input(f, 1 << 20))
            except (OSError, UnreadableFile, JSONProblem) as exc:
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


def json_lines(path: Path) -> Iterator[tuple[int | None, Any, str | None]]:
    """(line number, parsed JSON or None, reason when unreadable) per non-blank line; a bad byte spoils only its line.

    A problem of the whole file (not a regular file, no record in it) is one ``(None, None, reason)``.
    """
    found = False
    try:
        for lineno, raw, bad in iter_lines(path):
            if bad is not None:
                found = True
                yield lineno, None, bad
                continue
            if not raw.strip():
                continue
            found = True
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
                yield lineno, decode_json(text), None
            except JSONProblem as exc:
                yield lineno, None, (f"field '{exc.field}': " if exc.field else "") + exc.reason
    except FileNotFoundError:
        found = True
        yield None, None, "gone while it was read"
    except UnreadableFile as exc:
        found = True
        yield None, None, str(exc)
    if not found:
        yield None, None, "an empty file: it holds no record"


def where_in(path: Path, lineno: int | None) -> str:
    """``file:line``, or the file alone for what concerns it whole."""
    return str(path) if lineno is None else f"{path}:{lineno}"


def mapping(value: Any, field: str) -> dict[str, Any]:
    """A field that must hold an object: the object, ``{}`` when absent (null); ValueError naming the field otherwise.

    Examples
    --------
    >>> mapping(None, "usage")
    {}
    >>> mapping([1], "usage")
    Traceback (most recent call last):
    ...
    ValueError: field 'usage' is a list, not an object
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"field '{field}' is {kind_of(value)}, not an object")
    return value


def record_fields(d: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The run-record fields a wrapper line carries beside the engine's payload, and its other keys."""
    return {k: v for k, v in d.items() if k in _FIELDS}, [k for k in d if k not in _FIELDS]


def seconds(value: Any, unit: Any, field: str = "time") -> float | None:
    """A time in seconds from a value and its unit (``ns``, ``ms``, ``s``, ...); None when absent.

    ValueError naming ``field`` for a value that is not a number, not finite or negative, and for an
    unknown unit: a malformed time skips its record rather than becoming a missing one.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"field '{field}' is {kind_of(value)}, not a number of seconds")
    factor = _TIME_UNITS.get(unit.strip().lower()) if isinstance(unit, str) else 1.0 if unit is None else None
    if factor is None:
        raise ValueError(f"field '{field}': unknown time unit {unit!r}")
    out = float(value) * factor
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"field '{field}' is {value!r}: not a time (a finite number, at least 0)")
    return out


def whole(value: Any, what: str) -> int | None:
    """A count as an int; ValueError naming ``what`` for a non-whole or non-numeric value (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    return int(value)


class FoundFiles(list):
    """The files a reader is to read (a list of paths), and ``skipped``: the entries found under the reader's names
    that are not readable regular files, as read failures with their reasons (each counts as one run found)."""

    def __init__(self, files: list[Path] = (), skipped: list[dict[str, str]] = ()):  # type: ignore[assignment]
        super().__init__(files)
        self.skipped = list(skipped)


def files_under(path: Path, patterns: tuple[str, ...]) -> FoundFiles:
    """``path`` itself when a file, else every entry below it matching one of the glob ``patterns`` (or the same name
    gzip-compressed, ``.gz``), sorted: regular files to read, the rest in ``skipped`` with the reason.

    A ``path`` that is neither a folder nor a regular file is a ValueError naming what it is.
    """
    path = Path(path)
    if not path.is_dir():
        try:
            check_regular(path)
        except FileNotFoundError:
            raise ValueError(f"{display_path(path)}: no such file or folder") from None
        except UnreadableFile as exc:
            raise ValueError(f"{display_path(path)}: {exc}") from None
        return FoundFiles([path])
    names = (*patterns, *(p + ".gz" for p in patterns if not p.endswith(".gz")))
    files: list[Path] = []
    skipped: list[dict[str, str]] = []

    def unlistable(exc: OSError) -> None:
        skipped.append({"path": display_path(exc.filename or path), "reason": f"cannot list folder: {os_reason(exc)}",
                        "stage": "read"})

    for root, dirs, entries in os.walk(path, onerror=unlistable):
        dirs.sort()
        for name in (*dirs, *entries):
            if name == ARM_FILE or not any(fnmatchcase(name, pat) for pat in names):
                continue
            f = Path(root, name)
            try:
                check_regular(f)
                files.append(f)
            except FileNotFoundError:
                skipped.append({"path": display_path(f), "reason": "cannot follow symlink: it points to nothing",
                                "stage": "read"})
            except UnreadableFile as exc:
                skipped.append({"path": display_path(f), "reason": str(exc), "stage": "read"})
    return FoundFiles(sorted(files), sorted(skipped, key=lambda d: d["path"]))


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


def json_objects(path: Path) -> list[tuple[int | None, Any, str | None]]:
    """A .json file (or .json.gz) as one object or a list of them (numbered from 1), a .jsonl file line by line."""
    if path.name.lower().endswith((".json", ".json.gz")):
        try:
            raw = read_input(path)
            if not raw.strip():
                return [(None, None, "an empty file: it holds no record")]
            data = decode_json(raw)
        except FileNotFoundError:
            return [(None, None, "gone while it was read")]
        except (UnreadableFile, OSError) as exc:
            return [(None, None, str(exc))]
        except JSONProblem as exc:
            return [(None, None, f"unreadable JSON ({(f'field {exc.field!r}: ' if exc.field else '') + exc.reason})")]
        items = data if isinstance(data, list) else [data]
        return [(i + 1, d, None) for i, d in enumerate(items)] or [(None, None, "an empty list: it holds no record")]
    return list(json_lines(path))


def response_objects(f: Path) -> tuple[list[tuple[int, Any, str | None]], list[str]]:
    """The objects of one response file, saved streams (JSON chunks or server-sent events) assembled per request.

    See :mod:`lengthlens.data.readers.stream`; the notes say how many chunks became how many responses.
    """
    sse = f.name.lower().endswith((".sse", ".sse.gz")) or _starts_with_data(f)
    return assemble_lines(sse_lines(f) if sse else json_objects(f))


def _starts_with_data(f: Path) -> bool:
    """Whether the file's first non-blank line is a server-sent event (``data: ...``); read as the records are (a file
    that cannot be read is not one, and the reading names why)."""
    try:
        for _, raw, bad in iter_lines(f):
            if bad is not None:
                return False
            if raw.strip():
                return raw.lstrip().startswith((b"data:", b"event:"))
    except (FileNotFoundError, UnreadableFile):
        pass
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
    if not files and not files.skipped:
        raise ValueError(f"{path}: no .jsonl/.json/.sse files of {what}")
    out = ReadResult(records=[], failures=list(files.skipped))
    n = len(files.skipped)
    for f in files:
        base = {**opts, **arm_from_files(f, path)}
        objects, notes = response_objects(f)
        warns = [f"{f}: {x}" for x in notes]
        positional = False
        for pos, (lineno, obj, bad) in enumerate(objects, start=1):
            where = where_in(f, lineno)
            try:
                if bad:
                    raise ValueError(bad)
                recs, w, by_pos = line_records(obj, base, pos, where)
            except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:  # a malformed record
                n += 1
                why = str(exc) if isinstance(exc, ValueError) else f"malformed record ({type(exc).__name__}: {exc})"
                out.failures.append({"path": where, "reason": why, "stage": "read"})
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
