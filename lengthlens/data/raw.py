"""Read the study's raw run-log layout into normalized run records.

Layout: ``<dataset>/<method>/<params>/case_NNN/seed_K/{run.json, config.json, output.txt[, proposals.jsonl]}``.
A root may be any folder above run folders: ``runs/``, one dataset folder, one arm folder, or a
folder holding several such trees. Every ``seed_K`` folder found under a ``case_*`` folder is a
run: it is turned into a record, or reported as skipped with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from lengthlens.data.schema import STRICT, parse_alpha

#: Bumped whenever read_run's output changes, so cached normalized tables are rebuilt.
READER_VERSION = 3

_CASE = re.compile(r"^case_.+$")
_SEED = re.compile(r"^seed_(\d+)$")


@dataclass(frozen=True)
class RunDir:
    """A run folder found on disk with the arm coordinates its path gives."""

    path: str
    dataset: str
    method: str
    params: str
    item_id: str
    seed: int


@dataclass(frozen=True)
class RawResult:
    """What reading one run folder gave: a record mapping, or the reason it could not be read."""

    path: str
    record: dict[str, Any] | None
    reason: str | None
    #: What the reader noticed about a run it kept (``text_missing``, ``text_not_utf8``).
    note: str | None = None


def _name(entry: os.DirEntry) -> str:
    return entry.name


def discover(root: str | os.PathLike[str]) -> tuple[list[RunDir], list[tuple[str, str]]]:
    """Find every run folder under ``root``; also return folders that look like runs but cannot be placed.

    The dataset/method/params of a run are the three folders above its ``case_*`` folder, so the
    root may sit anywhere above them; a ``seed_K`` folder with fewer than three named folders
    between it and the root's parent cannot be placed and is reported.
    """
    root_path = Path(root).resolve()
    found: list[RunDir] = []
    unplaced: list[tuple[str, str]] = []
    # The root itself may be a case folder or deeper, so path components above it count too.
    base_parts = root_path.parts

    def walk(d: str, depth_parts: tuple[str, ...]) -> None:
        try:
            entries = sorted(os.scandir(d), key=_name)
        except OSError as exc:
            unplaced.append((d, f"cannot list folder: {exc.strerror}"))
            return
        for e in entries:
            if not e.is_dir(follow_symlinks=True) or e.name.startswith("."):
                continue
            parts = depth_parts + (e.name,)
            if _CASE.match(e.name):
                with os.scandir(e.path) as it:
                    seeds = list(it)
                if len(seeds) > 1:
                    seeds.sort(key=_name)
                for s in seeds:
                    m = _SEED.match(s.name)
                    if not (m and s.is_dir(follow_symlinks=True)):
                        continue
                    if len(parts) < 4:
                        unplaced.append((s.path, "run folder is not under <dataset>/<method>/<params>/"))
                        continue
                    dataset, method, params = parts[-4], parts[-3], parts[-2]
                    found.append(RunDir(s.path, dataset, method, params, e.name, int(m.group(1))))
            else:
                walk(e.path, parts)

    if _SEED.match(root_path.name) and _CASE.match(root_path.parent.name):
        # A single run folder given as root.
        parts = base_parts
        if len(parts) >= 5:
            found.append(RunDir(str(root_path), parts[-5], parts[-4], parts[-3], parts[-2], int(_SEED.match(parts[-1]).group(1))))
        return found, unplaced
    if _CASE.match(root_path.name):
        walk(str(root_path.parent), base_parts[:-1])
        found = [r for r in found if Path(r.path).parent == root_path]
        return found, unplaced
    walk(str(root_path), base_parts)
    return found, unplaced


def _read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}:1: expected a JSON object, got {type(data).__name__}")
    return data


def _alpha_of(params: str, cfg: dict[str, Any]) -> float | None:
    lp = cfg.get("lossy_parameters") or {}
    if params == STRICT:
        return None
    if isinstance(lp, dict) and isinstance(lp.get("alpha"), (int, float)) and not isinstance(lp.get("alpha"), bool):
        return float(lp["alpha"])
    return parse_alpha(params)


def _read_jsons(p: str) -> tuple[dict[str, Any], dict[str, Any]] | RawResult:
    """A run folder's run.json and config.json, or the skip saying which is missing or unreadable."""
    run_json = os.path.join(p, "run.json")
    cfg_json = os.path.join(p, "config.json")
    try:
        rj = _read_json(run_json)
    except FileNotFoundError:
        return RawResult(p, None, "missing run.json")
    except (OSError, UnicodeDecodeError) as exc:
        return RawResult(p, None, f"unreadable run.json: {exc}")
    except ValueError as exc:
        return RawResult(p, None, f"unreadable run.json: {exc}")
    try:
        cfg = _read_json(cfg_json)
    except FileNotFoundError:
        return RawResult(p, None, "missing config.json (target, draft and budget are unknown)")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return RawResult(p, None, f"unreadable config.json: {exc}")
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


def read_run(run: RunDir, *, with_text: bool = True) -> RawResult:
    """Turn one run folder into a normalized record mapping (not yet validated), or a skip reason."""
    p = run.path
    loaded = _read_jsons(p)
    if isinstance(loaded, RawResult):
        return loaded
    rj, cfg = loaded
    text, note = _read_text(p) if with_text else (None, None)
    if run.params != STRICT:
        # The folder name is the arm's identity: one that does not parse is a damaged layout, even
        # when config.json logs an alpha, so the run is listed in skipped.csv rather than guessed at.
        try:
            parse_alpha(run.params)
        except ValueError as exc:
            return RawResult(p, None, f"folder name: {exc}")
    alpha = _alpha_of(run.params, cfg)
    record = _record(run, rj, cfg, alpha, text)
    # The seed in config.json must agree with the folder; a mismatch means files were moved.
    if isinstance(cfg.get("seed"), int) and cfg["seed"] != run.seed:
        return RawResult(p, None, f"config.json: field 'seed' is {cfg['seed']} but the folder says seed_{run.seed}")
    return RawResult(p, record, None, note)


def _read_text(run_path: str) -> tuple[str | None, str | None]:
    """A run's output.txt and a note: ``text_missing`` (no file) or ``text_not_utf8`` (bytes that are not UTF-8).

    Bytes that are not UTF-8 become U+FFFD (the run is kept; the loader warns naming it). Kept as
    surrogates they would abort the whole load when the table is built.
    """
    try:
        # Read as bytes: "\r" stays as written (character counts must match the generator's).
        with open(os.path.join(run_path, "output.txt"), "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None, "text_missing"
    try:
        text = raw.decode("utf-8")
        note = None
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        note = "text_not_utf8"
    return text, note


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


def _read_chunk(args: tuple[list[RunDir], bool, Callable[[list[RawResult]], Any] | None]) -> Any:
    runs, with_text, convert = args
    results = [read_run(r, with_text=with_text) for r in runs]
    return results if convert is None else convert(results)


def read_runs(runs: list[RunDir], *, with_text: bool = True, workers: int | None = None, progress: Any = None,
              chunk_size: int = 2000, convert: Callable[[list[RawResult]], Any] | None = None) -> Iterator[Any]:
    """Read run folders in chunks, in parallel processes when there are many; chunks come back in input order.

    Each chunk yields its list of RawResult, or ``convert(results)`` computed in the worker (so
    that validation and table building run in parallel too, and less crosses process boundaries).
    """
    if workers is None:
        workers = min(os.cpu_count() or 1, 8)
    chunks = [runs[i:i + chunk_size] for i in range(0, len(runs), chunk_size)]
    if workers <= 1 or len(runs) < 4 * chunk_size:
        for c in chunks:
            res = _read_chunk((c, with_text, convert))
            if progress is not None:
                progress.update(len(c))
            yield res
        return
    import multiprocessing as mp

    # fork: workers start at once and need no importable __main__ (Jupyter, stdin). ``convert``
    # must not use polars there: its thread pool does not survive a fork.
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
        for c, res in zip(chunks, pool.map(_read_chunk, [(c, with_text, convert) for c in chunks])):
            if progress is not None:
                progress.update(len(c))
            yield res


def _subtree_fingerprint(path: str) -> tuple[str, int, list[tuple[str, str]]]:
    runs, unplaced = discover(path)
    h = hashlib.sha256()
    stat = os.stat
    for r in runs:
        base = r.path + "/"
        parts = []
        for name in ("run.json", "config.json", "output.txt"):
            try:
                st = stat(base + name)
                parts.append(f"{st.st_size}:{st.st_mtime_ns}")
            except FileNotFoundError:
                parts.append("-")
        h.update(f"{base}|{'|'.join(parts)}\n".encode())
    return h.hexdigest(), len(runs), unplaced


def tree_fingerprint(root: str | os.PathLike[str], *, workers: int | None = None) -> tuple[str, int, list[tuple[str, str]]]:
    """A digest of every run file's (path, size, mtime) under root, the number of runs, and unplaced folders.

    This is what decides whether a cached table is still valid, so it must stat every file; the
    top-level subfolders are walked in parallel processes (the walk is system-call bound).
    """
    root_path = Path(root).resolve()
    children = []
    if not (_CASE.match(root_path.name) or _SEED.match(root_path.name)):
        try:
            children = sorted(e.path for e in os.scandir(root_path) if e.is_dir() and not e.name.startswith("."))
        except OSError:
            children = []
    if workers is None:
        workers = min(os.cpu_count() or 1, 8)
    if len(children) < 2 or workers <= 1 or any(_CASE.match(os.path.basename(c)) for c in children):
        return _subtree_fingerprint(str(root_path))
    import multiprocessing as mp

    # fork is safe here: the children only walk folders and hash (no polars, no threads).
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
        parts = list(pool.map(_subtree_fingerprint, children))
    digest = hashlib.sha256("".join(d for d, _, _ in parts).encode()).hexdigest()
    return digest, sum(n for _, n, _ in parts), [u for _, _, us in parts for u in us]


