"""Read the study's raw run-log layout into normalized run records.

Layout: ``<dataset>/<method>/<params>/case_NNN/seed_K/{run.json, config.json, output.txt[, proposals.jsonl]}``.
A root may be any folder above run folders: ``runs/``, one dataset folder, one arm folder, or a
folder holding several such trees. Every ``seed_K`` folder found under a ``case_*`` folder is a
run (:mod:`lengthlens.data.readers.discover`): it is turned into a record, or reported as skipped with the
reason. Files are read through :mod:`lengthlens.data.safeio`: regular files only, each under the
size cap, JSON with no key given twice.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from lengthlens.execution import iter_ordered, map_ordered
from lengthlens.data.readers.discover import CASE_PATTERN, SEED_PATTERN, RunDir, discover
from lengthlens.data.safeio import (
    DEFAULT_MAX_FILE_BYTES,
    JSONProblem,
    UnreadableFile,
    check_regular,
    decode_json,
    file_stamp,
    max_file_bytes,
    read_file,
    read_file_stamped,
    too_large,
)
from lengthlens.data.schema import STRICT, check_params, parse_alpha

__all__ = ["RunDir", "RawResult", "discover", "read_run", "read_runs", "read_output", "read_text", "note_warnings",
           "tree_fingerprint", "unreadable_traces"]

#: Bumped whenever read_run's output changes, so cached normalized tables are rebuilt.
READER_VERSION = 4

@dataclass(frozen=True)
class RawResult:
    """What reading one run folder gave: a record mapping, or the reason it could not be read."""

    path: str
    record: dict[str, Any] | None
    reason: str | None
    #: What the reader noticed about a run it kept (``text_missing``, ``text_not_utf8``).
    note: str | None = None
    #: :func:`~lengthlens.data.safeio.file_stamp` of the output.txt read (a cache re-reads the text only if it is unchanged).
    text_stamp: str | None = None


def _read_json(path: str, limit: int) -> dict[str, Any]:
    data = decode_json(read_file(path, limit))
    if not isinstance(data, dict):
        raise JSONProblem(f"expected a JSON object, got {type(data).__name__}", 1)
    return data


def _problem(name: str, path: str, exc: JSONProblem) -> str:
    where = f"{path}:{exc.line}" if exc.line is not None else path
    field = f"field '{exc.field}': " if exc.field else ""
    return f"unreadable {name}: {where}: {field}{exc.reason}"


def _read_one(p: str, name: str, limit: int, missing: str) -> dict[str, Any] | RawResult:
    path = os.path.join(p, name)
    try:
        return _read_json(path, limit)
    except FileNotFoundError:
        return RawResult(p, None, missing)
    except JSONProblem as exc:
        return RawResult(p, None, _problem(name, path, exc))
    except UnreadableFile as exc:
        return RawResult(p, None, f"unreadable {name}: {exc}")
    except OSError as exc:
        return RawResult(p, None, f"unreadable {name}: {exc.strerror or exc}")


def _alpha_of(params: str, cfg: dict[str, Any]) -> float | None | str:
    """The run's alpha: the params folder's number, checked against config.json's; a str is the reason to skip."""
    if params == STRICT:
        return None
    lp = cfg.get("lossy_parameters")
    logged = lp.get("alpha") if isinstance(lp, dict) else None
    if logged is None:
        return parse_alpha(params)
    where = "config.json: field 'lossy_parameters.alpha'"
    if isinstance(logged, bool) or not isinstance(logged, (int, float)):
        return f"{where}: {logged!r} is not a number"
    try:
        value = float(logged)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        return f"{where}: {logged!r} is not a finite number"
    try:
        return check_params(params, value)
    except ValueError as exc:
        return f"{where}: {exc}"


def _read_jsons(p: str, limit: int) -> tuple[dict[str, Any], dict[str, Any]] | RawResult:
    """A run folder's run.json and config.json, or the skip saying which is missing or unreadable."""
    rj = _read_one(p, "run.json", limit, "missing run.json")
    if isinstance(rj, RawResult):
        return rj
    cfg = _read_one(p, "config.json", limit, "missing config.json (target, draft and budget are unknown)")
    if isinstance(cfg, RawResult):
        return cfg
    return rj, cfg


def _record(run: RunDir, rj: dict[str, Any], cfg: dict[str, Any], alpha: float | None, text: str | None) -> dict[str, Any]:
    """The normalized record's fields from run.json, config.json and the folder names."""
    vllm = cfg.get("vllm")
    engine_version = vllm.get("version") if isinstance(vllm, dict) else cfg.get("engine_version")
    return {
        "target": cfg.get("model"),
        "draft": cfg.get("draft_model"),
        "dataset": run.dataset,
        "method": run.method,
        "params": run.params,
        "alpha": alpha,
        "item_id": run.item_id,
        "seed": run.seed,
        "status": rj.get("status"),
        "output_tokens": rj.get("output_tokens"),
        "finish_reason": rj.get("finish_reason"),
        "max_new_tokens": cfg.get("max_new_tokens"),
        "draft_rounds": rj.get("draft_rounds"),
        "accepted_tokens": rj.get("accepted_tokens"),
        "draft_tokens": rj.get("draft_tokens"),
        "wall_time_s": rj.get("wall_time_seconds", rj.get("wall_time_s")),
        "correct": None,
        "temperature": cfg.get("temperature"),
        "top_p": cfg.get("top_p"),
        "input_tokens": rj.get("input_tokens"),
        "l_bar_logged": rj.get("l_bar"),
        "analysis_chars": rj.get("analysis_chars"),
        "final_chars": rj.get("final_chars"),
        "reached_final_channel": rj.get("reached_final_channel"),
        "reference_answer": None if cfg.get("reference_answer") is None else str(cfg.get("reference_answer")),
        "prompt_source_id": cfg.get("prompt_source_id"),
        "backend": rj.get("backend", cfg.get("backend")),
        "engine_version": None if engine_version is None else str(engine_version),
        "force_commit_fired": rj.get("force_commit_fired"),
        # What a generator may log beside (lengthlens generate: the serving condition, in run.json).
        **{k: rj.get(k, cfg.get(k)) for k in ("reasoning_tokens", "concurrency", "request_rate", "batch_size", "gpu")},
        "text": text,
        "source": run.path,
    }


def read_run(run: RunDir, *, with_text: bool = True, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> RawResult:
    """Turn one run folder into a normalized record mapping (not yet validated), or a skip reason.

    ``max_bytes``: the largest file read (:func:`lengthlens.data.safeio.read_file`).
    """
    p = run.path
    loaded = _read_jsons(p, max_bytes)
    if isinstance(loaded, RawResult):
        return loaded
    rj, cfg = loaded
    if run.params != STRICT:
        # The folder name is the arm's identity: one that does not parse is a damaged layout, even
        # when config.json logs an alpha, so the run is listed in skipped.csv rather than guessed at.
        try:
            parse_alpha(run.params)
        except ValueError as exc:
            return RawResult(p, None, f"folder name: {exc}")
    alpha = _alpha_of(run.params, cfg)
    if isinstance(alpha, str):
        return RawResult(p, None, alpha)
    # The seed in config.json must agree with the folder; a mismatch means files were moved.
    if type(cfg.get("seed")) is int and cfg["seed"] != run.seed:
        return RawResult(p, None, f"config.json: field 'seed' is {cfg['seed']} but the folder says seed_{run.seed}")
    text, note, text_stamp = read_text(p, max_bytes, with_text)
    if note is not None and note.startswith("unreadable"):
        return RawResult(p, None, note)
    return RawResult(p, _record(run, rj, cfg, alpha, text), None, note, text_stamp)


def read_output(run_path: str, limit: int) -> tuple[bytes | None, str | None, str | None]:
    """A run's output.txt as UTF-8 bytes, a note and the file's stamp (:func:`~lengthlens.data.safeio.file_stamp`).

    The note is ``text_missing`` (no file), ``text_not_utf8`` (each invalid byte replaced by U+FFFD:
    the run is kept and the loader warns naming it; kept as surrogates they would abort the whole
    load when the table is built), or ``unreadable output.txt: ...`` (the run is skipped).
    """
    try:
        # Read as bytes: "\r" stays as written (character counts must match the generator's).
        raw, st = read_file_stamped(os.path.join(run_path, "output.txt"), limit)
    except FileNotFoundError:
        return None, "text_missing", None
    except UnreadableFile as exc:
        return None, f"unreadable output.txt: {exc}", None
    if raw.isascii():
        return raw, None, st
    try:
        raw.decode("utf-8")
        return raw, None, st
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace").encode("utf-8"), "text_not_utf8", st


def read_text(run_path: str, limit: int, with_text: bool = True) -> tuple[str | None, str | None, str | None]:
    """A run's output.txt as text, with :func:`read_output`'s note and stamp.

    Without ``with_text`` the file is only checked (a regular file under the cap), so that both
    modes skip the same runs.
    """
    if not with_text:
        path = os.path.join(run_path, "output.txt")
        try:
            check_regular(path)
            size = os.stat(path).st_size
            if size > limit:
                raise UnreadableFile(too_large(size, limit))
        except FileNotFoundError:
            pass
        except UnreadableFile as exc:
            return None, f"unreadable output.txt: {exc}", None
        return None, None, None
    raw, note, st = read_output(run_path, limit)
    return (None if raw is None else raw.decode("utf-8")), note, st


#: What a reader's note on a kept run means, for the load warnings.
_NOTE_TEXT = {
    "text_missing": ("have no output.txt: kept for lengths and counters, listed here as having no text, so they get no "
                     "grade from the text and no thinking attribution"),
    "text_not_utf8": ("have an output.txt that is not valid UTF-8: kept, with each invalid byte read as U+FFFD "
                      "(grades and character counts of these runs may be off)"),
}


def note_warnings(notes: list[dict[str, str]]) -> list[str]:
    """One warning per kind of reader note, naming the runs (up to 10)."""
    out = []
    for kind, text in _NOTE_TEXT.items():
        paths = sorted(n["path"] for n in notes if n["reason"] == kind)
        if paths:
            more = f" and {len(paths) - 10} more" if len(paths) > 10 else ""
            out.append(f"{len(paths)} run(s) {text}: {', '.join(paths[:10])}{more}")
    return out


def _read_chunk(args: tuple[list[RunDir], bool, Callable[[list[RawResult]], Any] | None, int]) -> Any:
    runs, with_text, convert, max_bytes = args
    results = [read_run(r, with_text=with_text, max_bytes=max_bytes) for r in runs]
    return results if convert is None else convert(results)


def read_runs(runs: list[RunDir], *, with_text: bool = True, workers: int | None = None, progress: Any = None,
              chunk_size: int = 2000, convert: Callable[[list[RawResult]], Any] | None = None,
              max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Iterator[Any]:
    """Read run folders in chunks, in parallel processes when there are many; chunks come back in input order.

    Each chunk yields its list of RawResult, or ``convert(results)`` computed in the worker (so
    that validation and table building run in parallel too, and less crosses process boundaries).
    """
    if workers is None:
        workers = min(os.cpu_count() or 1, 8)
    chunks = [runs[i:i + chunk_size] for i in range(0, len(runs), chunk_size)]
    if workers <= 1 or len(runs) < 4 * chunk_size:
        for c in chunks:
            res = _read_chunk((c, with_text, convert, max_bytes))
            if progress is not None:
                progress.update(len(c))
            yield res
        return
    for c, res in zip(chunks, iter_ordered(_read_chunk, [(c, with_text, convert, max_bytes) for c in chunks],
                                           workers=workers)):
        if progress is not None:
            progress.update(len(c))
        yield res


#: The files of a run whose bytes the normalized record depends on.
RUN_FILES = ("run.json", "config.json", "output.txt")


def _file_stamp(path: str) -> str:
    try:
        return file_stamp(os.stat(path))
    except FileNotFoundError:
        return "-"
    except OSError as exc:
        return f"err{exc.errno}"


def _subtree_fingerprint(path: str) -> tuple[str, int]:
    runs, unplaced = discover(path)
    h = hashlib.sha256()
    for r in runs:
        base = r.path + "/"
        h.update(f"{base}|{'|'.join(_file_stamp(base + name) for name in RUN_FILES)}\n".encode())
    for where, why in unplaced:
        h.update(f"skip|{where}|{why}\n".encode())
    return h.hexdigest(), len(runs) + len(unplaced)


def tree_fingerprint(root: str | os.PathLike[str], *, workers: int | None = None) -> tuple[str, int]:
    """A digest of every run file's (path, inode, size, mtime, ctime) under root and of every entry listed as skipped.

    Returns ``(digest, entries)``. This decides whether a cached table is still valid, so it stats
    every file; the top-level subfolders are walked in parallel processes (the walk is system-call
    bound). The root's own listing is part of the digest, so a new top-level entry counts too.
    """
    root_path = Path(root).resolve()
    children: list[str] = []
    listing = ""
    if not (CASE_PATTERN.match(root_path.name) or SEED_PATTERN.match(root_path.name)):
        try:
            with os.scandir(root_path) as it:
                entries = sorted(it, key=lambda e: e.name)
            listing = "|".join(f"{e.name}:{_file_stamp(e.path)}" for e in entries).encode("utf-8", "backslashreplace").hex()
            children = [e.path for e in entries if not e.name.startswith(".") and e.is_dir()]
        except OSError as exc:
            listing = f"err{exc.errno}"
    if workers is None:
        workers = min(os.cpu_count() or 1, 8)
    if len(children) < 2 or workers <= 1 or any(CASE_PATTERN.match(os.path.basename(c)) for c in children):
        digest, n = _subtree_fingerprint(str(root_path))
        return hashlib.sha256(f"{listing}|{digest}".encode()).hexdigest(), n
    parts = map_ordered(_subtree_fingerprint, children, workers=workers)
    digest = hashlib.sha256((listing + "".join(d for d, _ in parts)).encode()).hexdigest()
    return digest, sum(n for _, n in parts)


def unreadable_traces(paths: list[str], schema: Any, max_bytes: int | None = None) -> dict[str, str]:
    """Per-run JSON-lines files (proposals.jsonl) that cannot be read with ``schema``: path -> reason naming the line.

    One scan of all the files checks them at once (every column parsed); only when it fails is each
    file scanned alone to find which. A missing file is not listed (the caller counts those).
    ``max_bytes``: the size cap (default :func:`lengthlens.data.safeio.max_file_bytes`).
    """
    import polars as pl

    max_bytes = max_file_bytes(max_bytes)
    bad: dict[str, str] = {}
    for p in paths:
        try:
            check_regular(p)
            if os.stat(p).st_size > max_bytes:
                bad[p] = too_large(os.stat(p).st_size, max_bytes)
        except FileNotFoundError:
            continue
        except (UnreadableFile, OSError) as exc:
            bad[p] = str(exc)
    rest = [p for p in paths if p not in bad and os.path.exists(p)]

    def scan(files: list[str]) -> None:
        (pl.scan_ndjson(files, schema=schema).select([pl.col(c).null_count() for c in schema])
         .collect(engine="streaming"))

    try:
        if rest:
            scan(rest)
        return bad
    except pl.exceptions.PolarsError:
        pass
    for p in rest:
        try:
            scan([p])
        except pl.exceptions.PolarsError as exc:
            bad[p] = _first_bad_line(p, max_bytes) or f"unreadable ({str(exc).splitlines()[0]})"
    return bad


def _first_bad_line(path: str, max_bytes: int) -> str | None:
    """``line N: <why>`` for the first line of a JSON-lines file that is not a JSON object, or None."""
    try:
        data = read_file(path, max_bytes)
    except (OSError, UnreadableFile):
        return None
    for n, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = decode_json(line)
        except JSONProblem as exc:
            return f"line {n}: {exc.reason}"
        if not isinstance(obj, dict):
            return f"line {n}: expected a JSON object, got {type(obj).__name__}"
    return None
