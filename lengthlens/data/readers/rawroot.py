"""One raw-layout root loaded: discovered, read, validated and graded; through the cache (:mod:`lengthlens.data.cache`) when asked.

The cache holds the table without the output texts (unless ``$LENGTHLENS_CACHE_TEXTS=1``). On a
hit the texts are read again from the run folders, and each file's stamp (inode, size, mtime,
ctime) must equal the one it had when the entry was built; if any differs the entry is not used
and the root is read afresh.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from lengthlens.data.cache import (
    CACHE_FORMAT,
    TEXTS_ENV,
    NotCacheable,
    canonical,
    entry_key,
    environment_facts,
    read_entry,
    stamp,
    write_entry,
)
from lengthlens.data.grading.budget import SPENT_WARNING
from lengthlens.data.readers.raw import READER_VERSION, RawResult, discover, note_warnings, read_output, read_runs, tree_fingerprint
from lengthlens.data.validation.records import resolve, validate_dicts
from lengthlens.data.schema import POLARS_SCHEMA, SCHEMA_VERSION

#: Options of :func:`lengthlens.load` that change no loaded table (left out of the cache key); every other one is in it.
OPTIONS_OUTSIDE_KEY = frozenset({"cache", "progress"})
_STAMP = "_text_stamp"


def validate_raw_chunk(results: list[RawResult]) -> tuple[list[dict[str, Any]], list[str | None], list[dict[str, str]]]:
    """Worker side of a raw read: the validated records, their output.txt stamps, and read failures, invalid records and notes."""
    fails = [{"path": r.path, "reason": r.reason or "unreadable", "stage": "read"} for r in results if r.record is None]
    readable = [r for r in results if r.record is not None]
    valid, invalid = validate_dicts([(r.path, None, r.record) for r in readable])
    kept = {v["source"] for v in valid}
    stamps = [r.text_stamp for r in readable if r.path in kept]
    notes = [{"path": r.path, "reason": r.note, "stage": "note"} for r in results if r.note and r.path in kept]
    return valid, stamps, fails + invalid + notes


def _key(root: Path, options: dict[str, Any], grade_files: list, workers: int | None) -> str | None:
    """The cache key of a root under these options, or None when an option value cannot be described."""
    try:
        opts = canonical({k: v for k, v in sorted(options.items()) if k not in OPTIONS_OUTSIDE_KEY})
    except NotCacheable:
        return None
    digest, _ = tree_fingerprint(root, workers=workers)
    grades = []
    for entry in grade_files:
        f, scope = entry if isinstance(entry, tuple) else (entry, None)
        grades.append([str(f), str(scope), stamp(f)])
    return entry_key({"format": CACHE_FORMAT, "schema": [SCHEMA_VERSION, str(POLARS_SCHEMA)], "reader": READER_VERSION,
                      "root": str(root.resolve()), "tree": digest, "grade_files": grades, "options": opts,
                      "environment": environment_facts(), "execution": execution_key(options.get("execute_code", False))})


def execution_key(execute_code: bool | str) -> list:
    """What code execution would be on this machine (off, sandbox with its interpreter, unsafe): verdicts depend on it."""
    from lengthlens.data.grading.sandbox import resolve as resolve_execution, sandbox_info

    ex = resolve_execution(execute_code)
    if ex is None:
        return ["off"]
    return [ex.isolation, sandbox_info().python if ex.isolation == "sandbox" else None]


def _read_texts(table: pl.DataFrame, max_bytes: int) -> pl.Series | None:
    """The cached runs' texts read again, or None when any output.txt is not the file the entry was built from."""
    texts: list[bytes | None] = []
    for src, want in zip(table.get_column("source").to_list(), table.get_column(_STAMP).to_list()):
        raw, note, got = read_output(src, max_bytes)
        if got != want or (note is not None and note.startswith("unreadable")):
            return None
        texts.append(raw)
    # UTF-8 by construction (read_output replaced what was not): the cast only moves the bytes.
    return pl.Series("text", texts, dtype=pl.Binary).cast(pl.String)


def _read_root(root: Path, *, with_text: bool, workers: int | None, progress: bool, grade_files: list, run_graders: bool,
               problems: object, grading: str, max_bytes: int,
               execute_code: bool | str = False) -> tuple[pl.DataFrame, list[dict[str, str]], int, list[str]]:
    """Discover, read, validate and grade a root: (table with the text stamps, failures, entries found, warnings)."""
    runs, unplaced = discover(root)
    n_found = len(runs) + len(unplaced)
    failures = [{"path": p, "reason": r, "stage": "read"} for p, r in unplaced]
    bar = None
    if progress and len(runs) > 2000:
        from tqdm import tqdm

        bar = tqdm(total=len(runs), desc=f"reading {root.name}", unit="run", leave=False)
    tables: list[pl.DataFrame] = []
    for valid, stamps, fails in read_runs(runs, with_text=with_text, workers=workers, progress=bar,
                                          convert=validate_raw_chunk, max_bytes=max_bytes):
        if valid:
            tables.append(pl.DataFrame(valid, schema=POLARS_SCHEMA, orient="row")
                          .with_columns(pl.Series(_STAMP, stamps, dtype=pl.String)))
        failures += fails
    if bar is not None:
        bar.close()
    notes = [f for f in failures if f["stage"] == "note"]
    failures = [f for f in failures if f["stage"] != "note"]
    table = (pl.concat(tables, rechunk=False) if tables
             else pl.DataFrame(schema=POLARS_SCHEMA).with_columns(pl.lit(None, pl.String).alias(_STAMP)))
    del tables
    table, grade_warnings = resolve(table, grade_files, run_graders, problems, grading, max_bytes, execute_code)
    return table, failures, n_found, note_warnings(notes) + grade_warnings


def load_raw_root(root: Path, *, options: dict[str, Any], cache: bool, with_text: bool, workers: int | None, progress: bool,
                  grade_files: list, run_graders: bool, problems: object, grading: str,
                  max_bytes: int, execute_code: bool | str = False) -> tuple[pl.DataFrame, list[dict[str, str]], int, list[str]]:
    """Validated, graded table, failures, entries found and warnings of one raw root.

    ``options``: every keyword option :func:`lengthlens.load` was called with (the cache key holds
    all of them but :data:`OPTIONS_OUTSIDE_KEY`).
    """
    warnings: list[str] = []
    key = _key(root, options, grade_files, workers) if cache else None
    if key is not None:
        hit = read_entry(key, warnings)
        if hit is not None and all(k in hit[1] for k in ("failures", "n_found", "warnings")):
            table, meta = hit
            if "text" in table.columns:  # stored with the texts: the key's fingerprint vouches for them
                texts: pl.Series | None = table.get_column("text")
            elif with_text:
                texts = _read_texts(table, max_bytes)
            else:
                texts = pl.Series("text", [None] * table.height, dtype=pl.String)
            if texts is not None:
                order = [c for c in table.columns if c not in (_STAMP, "text")]
                order.insert(POLARS_SCHEMA.names().index("text"), "text")
                return (table.with_columns(texts).select(order), meta["failures"], meta["n_found"],
                        warnings + meta["warnings"])
    table, failures, n_found, read_warnings = _read_root(
        root, with_text=with_text, workers=workers, progress=progress, grade_files=grade_files, run_graders=run_graders,
        problems=problems, grading=grading, max_bytes=max_bytes, execute_code=execute_code)
    if key is not None and not any(SPENT_WARNING in w for w in read_warnings):  # grades cut short by the budget: not kept
        stored = table if os.environ.get(TEXTS_ENV) == "1" else table.drop("text")
        write_entry(key, stored, {"failures": failures, "n_found": n_found, "warnings": read_warnings})
    return table.drop(_STAMP), failures, n_found, warnings + read_warnings
