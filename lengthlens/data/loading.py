"""Load run logs from any mix of raw-layout folders and flat files into one validated, paired table.

read (raw layout or flat records) -> validate each record -> normalized polars table ->
cross-record rules -> pairing checks. Every run found ends up in ``RunSet.table`` or in
``RunSet.skipped`` with its reason; nothing is dropped silently.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import polars as pl

from lengthlens.data.readers.flat import flat_kind, flat_listing, read_flat, read_flat_frame, read_parquet_parts
from lengthlens.data.readers.rawroot import load_raw_root
from lengthlens.data.validation.records import field_failure, reattach, resolve, validate_records
from lengthlens.data.runset import LoadError, RunSet  # noqa: F401  (public here: ll.load returns a RunSet)
from lengthlens.data import safeio
from lengthlens.data.safeio import display_path, os_reason
from lengthlens.data.schema import POLARS_SCHEMA, RunRecord, validate_record
from lengthlens.data.validation.screen import screen_frame
from lengthlens.data.serving import with_serving
from lengthlens.data.validation.table import (
    drop_duplicates,
    drop_mixed_alphas,
    finish_reason_warnings,
    l_bar_warnings,
    missing_length_warnings,
    pairing_checks,
    share_draftless_baselines,
)

_SKIP_SCHEMA = pl.Schema({"path": pl.String, "reason": pl.String, "stage": pl.String})
_FIELDS = set(RunRecord.model_fields)


def _places(file: str, lines: pl.Series) -> pl.Series:
    """``file:line`` for every line number."""
    return pl.select(pl.concat_str(pl.lit(f"{file}:"), lines.cast(pl.String))).to_series().alias("_where")


def _validate_frame(df: pl.DataFrame, where: pl.Series) -> tuple[pl.DataFrame, list[dict[str, str]]]:
    """Validate a flat table: screened rows in bulk, the rest record by record (naming file, line, field).

    ``where``: each row's place, ``file:line`` (or ``part:row``), which also becomes its ``source`` when none is logged.
    """
    table, needs = screen_frame(df)
    table = table.with_columns(where.alias("_where"), pl.int_range(0, df.height, dtype=pl.Int64).alias("_row"))
    good = table.filter(~needs)
    failures: list[dict[str, str]] = []
    if needs.any():
        checked = []
        rows = table.get_column("_row").filter(needs).to_list()
        for row, place, data in zip(rows, where.filter(needs).to_list(), df.filter(needs).iter_rows(named=True)):
            file, _, line = place.rpartition(":")
            rec, errs = validate_record(data, file, int(line))
            if rec is None:
                failures.append(field_failure(place, errs))
            else:
                checked.append({**rec.__dict__, "_where": place, "_row": row})
        if checked:
            schema = {**POLARS_SCHEMA, "_where": pl.String, "_row": pl.Int64}
            good = pl.concat([good, pl.DataFrame(checked, schema=schema, orient="row")]).sort("_row")
    good = good.with_columns(pl.col("source").fill_null(pl.col("_where"))).drop("_where", "_row")
    return good, failures


def _load_flat(p: Path, with_text: bool = True) -> tuple[pl.DataFrame, list[dict[str, str]], int, list[str]]:
    """Validated table, failures, rows found and unknown columns of one flat file."""
    try:
        framed = read_flat_frame(p, with_text)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    if framed is not None:
        df, lines, unknown = framed
        if df.height == 0:
            raise LoadError(f"{p}: the file holds no records")
        table, fails = _validate_frame(df, _places(str(p), lines))
        return table, fails, df.height, unknown
    # Not readable as one typed table (malformed lines, mixed types): row by row, naming each line.
    try:
        rows, unknown = read_flat(p)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
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
    table, invalid = validate_records(records)
    return table, fails + invalid, count, unknown


def _part_failure(part: Path, reason: str) -> dict[str, str]:
    return {"path": display_path(part), "reason": reason, "stage": "read"}


def _load_flat_parts(folder: Path, parts: list[Path], with_text: bool) -> tuple[pl.DataFrame, list[dict[str, str]], int,
                                                                             list[str], list[str]]:
    """A folder of flat record files as one table: each part checked and named, Parquet parts of one schema in one lazy
    scan. Returns the table, failures (a part that cannot be read is one, named), entries found, unknown columns and
    warnings. Parts that cannot be read are skipped, the others loaded."""
    from lengthlens.data.safeio import UnreadableFile, check_regular

    fails: list[dict[str, str]] = []
    readable: list[Path] = []
    for part in parts:
        try:
            check_regular(part)
            readable.append(part)
        except FileNotFoundError:
            fails.append(_part_failure(part, "cannot follow symlink: it points to nothing"))
        except UnreadableFile as exc:
            fails.append(_part_failure(part, str(exc)))
    tables: list[pl.DataFrame] = []
    unknown: list[str] = []
    warnings: list[str] = []
    found = len(fails)
    if readable and all(flat_kind(p) == "parquet" for p in readable):
        groups: dict[tuple, list[Path]] = {}
        for part in readable:
            try:
                schema = pl.read_parquet_schema(part)
            except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
                fails.append(_part_failure(part, f"unreadable Parquet part ({exc})"))
                found += 1
                continue
            groups.setdefault(tuple(schema.items()), []).append(part)
        for schema, group in groups.items():  # parts of one schema together; another numeric type validated apart
            try:
                framed = [read_parquet_parts(group, with_text)]
            except ValueError:
                framed = []
                for part in group:  # read one by one: the error names its part, the others load
                    try:
                        framed.append(read_parquet_parts([part], with_text))
                    except ValueError as exc:
                        fails.append(_part_failure(part, str(exc).split(": ", 1)[-1]))
                        found += 1
            names = {n for n, _ in schema}
            if "output_tokens" not in names:
                shown = ", ".join(p.name for p in group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
                warnings.append(f"{folder}: part(s) {shown} have no output_tokens column: λ and censoring are "
                                f"empty for the cells of their runs")
            for df, where, unk in framed:
                unknown += unk
                table, f = _validate_frame(df, where)
                tables.append(table)
                fails += f
                found += df.height
    else:
        for part in readable:
            try:
                table, f, n, unk = _load_flat(part, with_text)
            except LoadError as exc:
                fails.append(_part_failure(part, str(exc).removeprefix(f"{part}: ")))
                found += 1
                continue
            tables.append(table)
            fails += f
            found += n
            unknown += unk
    table = pl.concat(tables, how="diagonal_relaxed") if tables else pl.DataFrame(schema=POLARS_SCHEMA)
    return table, fails, found, list(dict.fromkeys(unknown)), warnings


def read_format(path: str | os.PathLike[str], name: str, **options: Any) -> tuple[pl.DataFrame, list[dict[str, str]], int, list[str]]:
    """The validated records one log-format reader finds (not yet paired): table, failures, runs found, warnings."""
    from lengthlens.data.readers import reader

    p = Path(path)
    _check_source(p)
    try:
        result = reader(name)(p, **options)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    table, invalid = validate_records(result.records)
    return table, result.failures + invalid, result.n_found, result.warnings


def _check_source(p: Path) -> None:
    """LoadError unless the source exists and can be stat'ed (a symlink loop or a path past PATH_MAX is named)."""
    try:
        os.stat(p)
    except FileNotFoundError:
        raise LoadError(f"{display_path(p)}: no such file or folder") from None
    except OSError as exc:
        raise LoadError(f"{display_path(p)}: {os_reason(exc)}") from None


def _read_source(p: Path, *, explicit: list, find_grades: bool, cache: bool, with_text: bool, workers: int | None,
                 progress: bool, run_graders: bool, problems: object, grading: str, format: str | None,
                 format_options: dict[str, Any] | None, max_bytes: int,
                 options: dict[str, Any], execute_code: bool | str = False) -> tuple[pl.DataFrame, list, int, list[str]]:
    """One source read and validated, with verdicts resolved: (table, failures, runs found, warnings)."""
    from lengthlens.data.grading.correctness import find_grade_files

    _check_source(p)
    if format is not None:
        table, fails, found, fwarn = read_format(p, format, **(format_options or {}))
        table, gwarn = resolve(table, explicit, run_graders, problems, grading, max_bytes, execute_code)
        return table, fails, found, fwarn + gwarn
    listing = flat_listing(p) if p.is_dir() else None
    if listing is not None:  # a folder of Parquet parts or JSONL shards: one table
        parts, others = listing
        table, fails, found, unknown, warn = _load_flat_parts(p, parts, with_text)
        if unknown:
            warn.append(f"{p}: columns not in the run record schema were ignored: {', '.join(sorted(unknown))}")
        if others:
            shown = ", ".join(o.name for o in others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            warn.append(f"{p}: {len(others)} file(s) that are not flat record files (.jsonl, .csv, .parquet) were not "
                        f"read: {shown}")
        table, gwarn = resolve(table, explicit, run_graders, problems, grading, max_bytes, execute_code)
        return table, fails, found, warn + gwarn
    if p.is_dir():
        gfiles = explicit + (find_grade_files([p]) if find_grades else [])
        table, fails, found, gwarn = load_raw_root(p, options=options, cache=cache, with_text=with_text, workers=workers,
                                                   progress=progress, grade_files=gfiles, run_graders=run_graders,
                                                   problems=problems, grading=grading, max_bytes=max_bytes,
                                                   execute_code=execute_code)
        if found == 0:
            raise LoadError(f"{p}: no run folders found (expected <dataset>/<method>/<params>/case_NNN/seed_K/run.json below it)")
        return table, fails, found, gwarn
    if flat_kind(p):
        table, fails, found, unknown = _load_flat(p, with_text)
        warn = [f"{p}: columns not in the run record schema were ignored: {', '.join(sorted(unknown))}"] if unknown else []
        table, gwarn = resolve(table, explicit, run_graders, problems, grading, max_bytes, execute_code)
        return table, fails, found, warn + gwarn
    raise LoadError(f"{p}: neither a folder of raw runs nor a .jsonl/.csv/.parquet file")


def _check_execution(execute_code: bool | str) -> list[str]:
    """Refuse before reading where code execution was asked for and cannot be isolated; the unsafe mode's warning."""
    from lengthlens.data.grading.sandbox import SandboxUnavailable, resolve as resolve_execution

    try:
        ex = resolve_execution(execute_code)
    except SandboxUnavailable as exc:
        raise LoadError(f"cannot execute generated code safely: {exc}; or pass --execute-code-unsafe "
                        f"(execute_code='unsafe') to run it with resource limits only") from None
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    return [ex.warning] if ex is not None and ex.warning else []


def _expand_globs(sources: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Each source as a path; a pattern that is not itself a path (``runs/part-*.parquet``) as its matches, sorted."""
    import glob

    out: list[Path] = []
    for src in sources:
        text = os.fspath(src)
        if not os.path.exists(text) and glob.has_magic(text):
            matches = sorted(glob.glob(text))
            if not matches:
                raise LoadError(f"{text}: no file matches this pattern")
            out += [Path(m) for m in matches]
        else:
            out.append(Path(text))
    return out


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
    table = with_serving(table)  # the serving condition is part of every arm's key from here on
    # The texts are most of the table's bytes: the joins and sorts below run on the rest, and the
    # texts are gathered back by row id at the end.
    table = table.with_row_index("_rid")
    texts = table.get_column("text")
    slim = table.drop("text")

    skipped_parts = [pl.DataFrame(failures, schema=_SKIP_SCHEMA) if failures else pl.DataFrame(schema=_SKIP_SCHEMA)]
    slim, sk = drop_duplicates(slim)
    skipped_parts.append(sk)
    slim, sk = drop_mixed_alphas(slim)
    skipped_parts.append(sk)
    warnings += missing_length_warnings(slim) + finish_reason_warnings(slim) + l_bar_warnings(slim)
    slim, shared_notes = share_draftless_baselines(slim)
    warnings += shared_notes
    slim, sk, pair_warn = pairing_checks(slim)
    skipped_parts.append(sk)
    warnings += pair_warn
    skipped = pl.concat(skipped_parts)
    extra = [c for c in slim.columns if c not in POLARS_SCHEMA and c != "_rid"]
    del table
    table = slim.with_columns(reattach(slim, texts).alias("text")).select(*POLARS_SCHEMA.names(), *extra)
    return table, skipped


def load(*sources: str | os.PathLike[str], grades: Sequence[str | os.PathLike[str]] | None = None,
         find_grades: bool = True, strict: bool = False, cache: bool = False, with_text: bool = True,
         workers: int | None = None, progress: bool = False, run_graders: bool = True,
         problems: object = None, grading: str = "default", format: str | None = None,
         format_options: dict[str, Any] | None = None, max_file_bytes: int | None = None,
         execute_code: bool | str = False, grading_budget_s: float | None = None) -> RunSet:
    """Load runs from raw-layout folders and/or flat record files (JSONL, CSV, Parquet).

    Parameters
    ----------
    sources : raw-layout folders (``runs/``, ``old_runs/``, a dataset folder) or flat record files.
    grades : grade files in the study's format (``{"runs": [{case, seed, method, params, verdict}]}``);
        with ``find_grades`` the files under ``campaign/grades/`` next to a raw root are used too.
    strict : raise :class:`LoadError` listing every invalid record instead of skipping them.
    cache : keep the normalized table of each raw tree on disk and reuse it while none of its
        files, none of these options and nothing of the environment that changes it changed (in
        ``$LENGTHLENS_CACHE_DIR`` or ``~/.cache/lengthlens``; bounded, see :mod:`lengthlens.data.cache`
        and docs/input-rules.md). Off by default in the library, which writes nothing unless asked;
        the command line turns it on.
    with_text : keep each run's output text (needed for grading and thinking attribution).
    run_graders : grade runs still without a verdict with lengthlens' own graders (from the answer text).
    problems : HumanEval problems / LiveCodeBench tests for the execution graders (mapping or JSONL path).
    grading : ``default`` (lengthlens' graders: only the answer part; a run cut at the budget inside its
        thinking is incorrect) or ``study`` (the study's grade scripts' rules, :mod:`lengthlens.data.grading.policy`).
        Grade files and records' own verdicts come first under either.
    format : read every source with this log-format reader instead (``"specbench"``: Spec-Bench
        answer folders; see :mod:`lengthlens.data.readers`), with ``format_options`` passed to it.
    max_file_bytes : the largest file of one run, grade file or problems file read (default
        ``$LENGTHLENS_MAX_FILE_BYTES``, else 256 MiB); a run with a larger file is skipped, naming it.
    execute_code : let the HumanEval/LiveCodeBench graders run the answers' code: ``False`` (default: such
        runs stay ungraded, one warning counts them), ``True`` (isolated by bubblewrap; a :class:`LoadError`
        where it cannot run) or ``"unsafe"`` (isolated where possible, else with resource limits only, and a
        warning). See docs/execution.md.
    grading_budget_s : the most seconds the execution graders may spend in all (default
        ``$LENGTHLENS_GRADING_BUDGET_S``, else 600); runs still ungraded when it is spent stay ungraded,
        and one warning counts them (:mod:`lengthlens.data.grading.budget`).

    Returns
    -------
    RunSet
        Every run found, loaded (``table``) or listed with its reason (``skipped``), and the warnings.

    Examples
    --------
    >>> import lengthlens as ll                                  # doctest: +SKIP
    >>> print(ll.load("runs/", "old_runs/").summary())           # doctest: +SKIP
    """
    # Every keyword option, taken before anything else is bound: the cache key holds all of them.
    options = {k: v for k, v in locals().items() if k != "sources"}
    if not sources:
        raise LoadError("no sources given: pass raw-layout folders or flat record files")
    if grading not in ("default", "study"):
        raise LoadError(f"grading must be 'default' or 'study', not {grading!r}")
    from lengthlens.data.grading import budget
    from lengthlens.execution import resolve_workers

    try:
        max_bytes = safeio.max_file_bytes(max_file_bytes)
        seconds = budget.budget_seconds(grading_budget_s)
        n_workers = resolve_workers(workers)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    opts = dict(explicit=[Path(g) for g in (grades or [])], find_grades=find_grades, cache=cache, with_text=with_text,
                workers=workers, progress=progress, run_graders=run_graders, problems=problems, grading=grading,
                format=format, format_options=format_options, max_bytes=max_bytes, options=options,
                execute_code=execute_code)
    sources = _expand_globs(sources)
    frames, failures, n_found = [], [], 0
    warnings: list[str] = _check_execution(execute_code) if run_graders else []
    with budget.session(seconds, n_workers):  # one grading time budget for every source
        for src in sources:
            table, fails, found, warn = _read_source(src, **opts)
            frames.append(table)
            failures.extend(fails)
            warnings.extend(warn)
            n_found += found
    _raise_if_strict(strict, failures)
    from lengthlens.data.grading.correctness import merge_not_executed

    warnings = merge_not_executed(warnings)
    table, skipped = _checked_table(frames, failures, warnings)
    return RunSet(table=table, skipped=skipped, sources=tuple(str(s) for s in sources), n_found=n_found, warnings=tuple(warnings),
                  grading=grading)
