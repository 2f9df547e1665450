"""Load run logs from any mix of raw-layout folders and flat files into one validated, paired table.

read (raw layout or flat records) -> validate each record -> normalized polars table ->
cross-record rules -> pairing checks. Every run found ends up in ``RunSet.table`` or in
``RunSet.skipped`` with its reason; nothing is dropped silently.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Any, Sequence

import polars as pl

from lengthlens._version import __version__
from lengthlens.data.flat import flat_kind, read_flat, read_flat_frame
from lengthlens.data.raw import READER_VERSION, discover, note_warnings, read_runs, tree_fingerprint
from lengthlens.data.schema import (
    POLARS_SCHEMA,
    SCHEMA_VERSION,
    FieldError,
    RunRecord,
    validate_record,
)
from lengthlens.data.screen import screen_frame
from lengthlens.data.runset import LoadError, RunSet  # noqa: F401  (public here: ll.load returns a RunSet)
from lengthlens.data.validate import (
    drop_duplicates,
    finish_reason_warnings,
    l_bar_warnings,
    pairing_checks,
    share_draftless_baselines,
)

_SKIP_SCHEMA = pl.Schema({"path": pl.String, "reason": pl.String, "stage": pl.String})
_FIELDS = set(RunRecord.model_fields)


def _cache_dir() -> Path:
    base = os.environ.get("LENGTHLENS_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lengthlens"


def _validate_records(records: list[tuple[str, int | None, dict[str, Any]]]) -> tuple[pl.DataFrame, list[dict[str, str]]]:
    """Validate mappings one by one with RunRecord; invalid ones become failures naming file, line and field."""
    valid, failures = _validate_dicts(records)
    table = pl.DataFrame(valid, schema=POLARS_SCHEMA, orient="row") if valid else pl.DataFrame(schema=POLARS_SCHEMA)
    return table, failures


def _field_failure(where: str, errors: list[FieldError]) -> dict[str, str]:
    """A skipped.csv row for a record that failed validation, naming every bad field."""
    return {"path": where, "reason": "; ".join(f"field '{e.field}': {e.message}" for e in errors), "stage": "validate"}


def _validate_dicts(records: list[tuple[str, int | None, dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The validated field mappings and the failures (no polars: this runs in forked workers)."""
    valid: list[dict[str, Any]] = []
    failures: list[dict[str, str]] = []
    for file, line, data in records:
        rec, errs = validate_record(data, file, line)
        if rec is None:
            failures.append(_field_failure(f"{file}:{line}" if line is not None else file, errs))
        else:
            valid.append(rec.__dict__)
    return valid, failures


def _validate_raw_chunk(results: list) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Worker side of a raw read: read failures plus the validated records of the readable runs."""
    fails = [{"path": r.path, "reason": r.reason or "unreadable", "stage": "read"} for r in results if r.record is None]
    valid, invalid = _validate_dicts([(r.path, None, r.record) for r in results if r.record is not None])
    kept = {v["source"] for v in valid}
    notes = [{"path": r.path, "reason": r.note, "stage": "note"} for r in results if r.note and r.path in kept]
    return valid, fails + invalid + notes


def _grades_key(grade_files: list, run_graders: bool, problems: object, grading: str = "default") -> tuple | None:
    """What correctness depends on besides the runs (None: not cacheable, e.g. problems given as a mapping)."""
    if problems is not None and not isinstance(problems, (str, os.PathLike)):
        return None
    files = []
    for entry in grade_files:
        f, scope = entry if isinstance(entry, tuple) else (entry, None)
        try:
            st = os.stat(f)
            files.append((str(f), str(scope), st.st_size, st.st_mtime_ns))
        except OSError:
            files.append((str(f), str(scope), -1, 0))
    prob = None
    if problems is not None:
        st = os.stat(problems)
        prob = (str(problems), st.st_size, st.st_mtime_ns)
    return (tuple(files), run_graders, prob, grading)


def _reattach(slim: pl.DataFrame, texts: pl.Series) -> pl.Series:
    """The texts in slim's row order: the same buffers when no row moved or went (no copy of the largest column)."""
    rid = slim.get_column("_rid")
    if slim.height == len(texts) and bool((rid == pl.int_range(0, len(texts), eager=True, dtype=rid.dtype)).all()):
        return texts
    return texts.gather(rid)


def _resolve(table: pl.DataFrame, grade_files: list, run_graders: bool, problems: object,
             grading: str = "default") -> tuple[pl.DataFrame, list[str]]:
    """Correctness for one source's table; the texts stay out of the joins (they are most of its bytes)."""
    from lengthlens.data.correctness import resolve_correctness

    table = table.with_row_index("_rid")
    texts = table.get_column("text")
    slim, warnings = resolve_correctness(table.drop("text"), grade_files, run_graders=run_graders, problems=problems,
                                         grading=grading,
                                         texts=texts)
    extra = [c for c in slim.columns if c not in POLARS_SCHEMA and c != "_rid"]
    return slim.with_columns(_reattach(slim, texts).alias("text")).select(*POLARS_SCHEMA.names(), *extra), warnings


def _load_raw_root(root: Path, *, cache: bool, with_text: bool, workers: int | None, progress: bool, grade_files: list,
                   run_graders: bool, problems: object,
                   grading: str = "default") -> tuple[pl.DataFrame, list[dict[str, str]], int, list[str]]:
    """Validated, graded table, failures, runs found and grading warnings of one raw root.

    Cached (Arrow IPC) under the fingerprint of every run file and grade file it depends on.
    """
    gkey = _grades_key(grade_files, run_graders, problems, grading)
    cache = cache and gkey is not None
    if cache:
        digest, n_runs, unplaced = tree_fingerprint(root, workers=workers)
        n_found = n_runs + len(unplaced)
        fp = hashlib.sha256(pickle.dumps((SCHEMA_VERSION, tuple(POLARS_SCHEMA.names()), READER_VERSION, __version__, with_text,
                                          digest, gkey))).hexdigest()  # the columns too: a new field invalidates old caches
        key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:24]
        cache_table = _cache_dir() / f"raw-{key}.arrow"
        cache_meta = _cache_dir() / f"raw-{key}.pkl"
        failures = [{"path": p, "reason": r, "stage": "read"} for p, r in unplaced]
        try:
            with open(cache_meta, "rb") as fh:
                stored_fp, stored_failures, stored_warnings = pickle.load(fh)
            if stored_fp == fp:
                return pl.read_ipc(cache_table), failures + stored_failures, n_found, stored_warnings
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, pl.exceptions.PolarsError):
            pass
    runs, unplaced = discover(root)
    n_found = len(runs) + len(unplaced)
    failures = [{"path": p, "reason": r, "stage": "read"} for p, r in unplaced]
    bar = None
    if progress and len(runs) > 2000:
        from tqdm import tqdm

        bar = tqdm(total=len(runs), desc=f"reading {root.name}", unit="run", leave=False)
    tables: list[pl.DataFrame] = []
    own_failures: list[dict[str, str]] = []
    for valid, fails in read_runs(runs, with_text=with_text, workers=workers, progress=bar, convert=_validate_raw_chunk):
        if valid:
            tables.append(pl.DataFrame(valid, schema=POLARS_SCHEMA, orient="row"))
        own_failures += fails
    if bar is not None:
        bar.close()
    notes = [f for f in own_failures if f["stage"] == "note"]
    own_failures = [f for f in own_failures if f["stage"] != "note"]
    table = pl.concat(tables, rechunk=False) if tables else pl.DataFrame(schema=POLARS_SCHEMA)
    del tables
    table, grade_warnings = _resolve(table, grade_files, run_graders, problems, grading)
    grade_warnings = note_warnings(notes) + grade_warnings
    if cache:
        try:
            cache_table.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_table.with_suffix(f".tmp{os.getpid()}")
            table.write_ipc(tmp)
            os.replace(tmp, cache_table)
            tmp = cache_meta.with_suffix(f".tmp{os.getpid()}")
            with open(tmp, "wb") as fh:
                pickle.dump((fp, own_failures, grade_warnings), fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, cache_meta)
        except OSError:
            pass  # a read-only home only costs the speed-up
    return table, failures + own_failures, n_found, grade_warnings


def _validate_frame(df: pl.DataFrame, lines: pl.Series, file: str) -> tuple[pl.DataFrame, list[dict[str, str]]]:
    """Validate a flat table: screened rows in bulk, the rest record by record (naming file, line, field)."""
    table, needs = screen_frame(df)
    table = table.with_columns(lines.alias("_line"))
    good = table.filter(~needs)
    failures: list[dict[str, str]] = []
    if needs.any():
        checked = []
        for line, data in zip(lines.filter(needs), df.filter(needs).iter_rows(named=True)):
            rec, errs = validate_record(data, file, int(line))
            if rec is None:
                failures.append(_field_failure(f"{file}:{line}", errs))
            else:
                checked.append({**rec.__dict__, "_line": int(line)})
        if checked:
            good = pl.concat([good, pl.DataFrame(checked, schema={**POLARS_SCHEMA, "_line": pl.Int64}, orient="row")]).sort("_line")
    good = good.with_columns(pl.col("source").fill_null(pl.format("{}:{}", pl.lit(file), pl.col("_line")))).drop("_line")
    return good, failures


def _load_flat(p: Path) -> tuple[pl.DataFrame, list[dict[str, str]], int, list[str]]:
    """Validated table, failures, rows found and unknown columns of one flat file."""
    try:
        framed = read_flat_frame(p)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    if framed is not None:
        df, lines, unknown = framed
        if df.height == 0:
            raise LoadError(f"{p}: the file holds no records")
        table, fails = _validate_frame(df, lines, str(p))
        return table, fails, df.height, unknown
    # Not readable as one typed table (malformed lines, mixed types): row by row, naming each line.
    rows, unknown = read_flat(p)
    records: list[tuple[str, int | None, dict[str, Any]]] = []
    fails: list[dict[str, str]] = []
    count = 0
    for row in rows:
        count += 1
        if row.data is None:
            fails.append({"path": f"{row.file}:{row.line}", "reason": row.reason or "unreadable", "stage": "read"})
            continue
        unknown = list(dict.fromkeys([*unknown, *(k for k in row.data if k not in _FIELDS)]))
        data = {k: v for k, v in row.data.items() if k in _FIELDS}
        data.setdefault("source", f"{row.file}:{row.line}")
        records.append((row.file, row.line, data))
    if count == 0:
        raise LoadError(f"{p}: the file holds no records")
    table, invalid = _validate_records(records)
    return table, fails + invalid, count, unknown


def read_format(path: str | os.PathLike[str], name: str, **options: Any) -> tuple[pl.DataFrame, list[dict[str, str]], int, list[str]]:
    """The validated records one log-format reader finds (not yet paired): table, failures, runs found, warnings."""
    from lengthlens.data.readers import reader

    p = Path(path)
    if not p.exists():
        raise LoadError(f"{p}: no such file or folder")
    try:
        result = reader(name)(p, **options)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    table, invalid = _validate_records(result.records)
    return table, result.failures + invalid, result.n_found, result.warnings


def _read_source(p: Path, *, explicit: list, find_grades: bool, cache: bool, with_text: bool, workers: int | None,
                 progress: bool, run_graders: bool, problems: object, grading: str, format: str | None,
                 format_options: dict[str, Any] | None) -> tuple[pl.DataFrame, list, int, list[str]]:
    """One source read and validated, with verdicts resolved: (table, failures, runs found, warnings)."""
    from lengthlens.data.correctness import find_grade_files

    if not p.exists():
        raise LoadError(f"{p}: no such file or folder")
    if format is not None:
        table, fails, found, fwarn = read_format(p, format, **(format_options or {}))
        table, gwarn = _resolve(table, explicit, run_graders, problems, grading)
        return table, fails, found, fwarn + gwarn
    if p.is_dir():
        gfiles = explicit + (find_grade_files([p]) if find_grades else [])
        table, fails, found, gwarn = _load_raw_root(p, cache=cache, with_text=with_text, workers=workers, progress=progress,
                                                    grade_files=gfiles, run_graders=run_graders, problems=problems,
                                                    grading=grading)
        if found == 0:
            raise LoadError(f"{p}: no run folders found (expected <dataset>/<method>/<params>/case_NNN/seed_K/run.json below it)")
        return table, fails, found, gwarn
    if flat_kind(p):
        table, fails, found, unknown = _load_flat(p)
        warn = [f"{p}: columns not in the run record schema were ignored: {', '.join(sorted(unknown))}"] if unknown else []
        table, gwarn = _resolve(table, explicit, run_graders, problems, grading)
        return table, fails, found, warn + gwarn
    raise LoadError(f"{p}: neither a folder of raw runs nor a .jsonl/.csv/.parquet file")


def _raise_if_strict(strict: bool, failures: list[dict[str, str]]) -> None:
    invalid = [f for f in failures if f["stage"] == "validate"]
    if strict and invalid:
        shown = "\n".join(f"{f['path']}: {f['reason']}" for f in invalid[:50])
        more = f"\n... and {len(invalid) - 50} more" if len(invalid) > 50 else ""
        raise LoadError(f"{len(invalid)} invalid record(s) in the input:\n{shown}{more}")


def _checked_table(frames: list[pl.DataFrame], failures: list[dict[str, str]], warnings: list[str]
                   ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One table from every source after the cross-record rules and pairing checks, and what they skipped.

    ``warnings`` is extended in place with what the checks found.
    """
    table = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    # The texts are most of the table's bytes: the joins and sorts below run on the rest, and the
    # texts are gathered back by row id at the end.
    table = table.with_row_index("_rid")
    texts = table.get_column("text")
    slim = table.drop("text")

    skipped_parts = [pl.DataFrame(failures, schema=_SKIP_SCHEMA) if failures else pl.DataFrame(schema=_SKIP_SCHEMA)]
    slim, sk = drop_duplicates(slim)
    skipped_parts.append(sk)
    warnings += finish_reason_warnings(slim) + l_bar_warnings(slim)
    slim, shared_notes = share_draftless_baselines(slim)
    warnings += shared_notes
    slim, sk, pair_warn = pairing_checks(slim)
    skipped_parts.append(sk)
    warnings += pair_warn
    skipped = pl.concat(skipped_parts)
    extra = [c for c in slim.columns if c not in POLARS_SCHEMA and c != "_rid"]
    del table
    table = slim.with_columns(_reattach(slim, texts).alias("text")).select(*POLARS_SCHEMA.names(), *extra)
    return table, skipped


def load(*sources: str | os.PathLike[str], grades: Sequence[str | os.PathLike[str]] | None = None,
         find_grades: bool = True, strict: bool = False, cache: bool = False, with_text: bool = True,
         workers: int | None = None, progress: bool = False, run_graders: bool = True,
         problems: object = None, grading: str = "default", format: str | None = None,
         format_options: dict[str, Any] | None = None) -> RunSet:
    """Load runs from raw-layout folders and/or flat record files (JSONL, CSV, Parquet).

    Parameters
    ----------
    grades : grade files in the study's format (``{"runs": [{case, seed, method, params, verdict}]}``);
        with ``find_grades`` the files under ``campaign/grades/`` next to a raw root are used too.
    strict : raise :class:`LoadError` listing every invalid record instead of skipping them.
    cache : keep the normalized table of each raw tree on disk and reuse it while none of its
        files changed (in ``$LENGTHLENS_CACHE_DIR`` or ``~/.cache/lengthlens``). Off by default in
        the library, which writes nothing unless asked; the command line turns it on.
    with_text : keep each run's output text (needed for grading and thinking attribution).
    run_graders : grade runs still without a verdict with lengthlens' own graders (from the answer text).
    problems : HumanEval problems / LiveCodeBench tests for the execution graders (mapping or JSONL path).
    grading : ``default`` (lengthlens' graders: only the answer part; a run cut at the budget inside its
        thinking is incorrect) or ``study`` (the study's grade scripts' rules, :mod:`lengthlens.data.grading.policy`).
        Grade files and records' own verdicts come first under either.
    format : read every source with this log-format reader instead (``"specbench"``: Spec-Bench
        answer folders; see :mod:`lengthlens.data.readers`), with ``format_options`` passed to it.
    """
    if not sources:
        raise LoadError("no sources given: pass raw-layout folders or flat record files")
    if grading not in ("default", "study"):
        raise LoadError(f"grading must be 'default' or 'study', not {grading!r}")
    frames: list[pl.DataFrame] = []
    failures: list[dict[str, str]] = []
    warnings: list[str] = []
    n_found = 0
    opts = dict(explicit=[Path(g) for g in (grades or [])], find_grades=find_grades, cache=cache, with_text=with_text,
                workers=workers, progress=progress, run_graders=run_graders, problems=problems, grading=grading,
                format=format, format_options=format_options)
    for src in sources:
        table, fails, found, warn = _read_source(Path(src), **opts)
        frames.append(table)
        failures.extend(fails)
        warnings.extend(warn)
        n_found += found
    _raise_if_strict(strict, failures)
    table, skipped = _checked_table(frames, failures, warnings)
    return RunSet(table=table, skipped=skipped, sources=tuple(str(s) for s in sources), n_found=n_found, warnings=tuple(warnings),
                  grading=grading)
