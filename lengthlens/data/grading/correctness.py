"""Attach per-run correctness to the normalized table, in the documented order of precedence.

1. ``correct`` already in the record (flat files); 2. grade files: the study's
``campaign/grades/<dataset>.json``, or a generic ``item_id[, seed[, turn]], correct`` file
(:mod:`lengthlens.data.grading.generic`); 3. lengthlens' own graders on the output text (see
:mod:`lengthlens.data.grading`). A grade is attached only when it provably belongs to the run: the
keys match and, where the grade file logged it, the output length matches too.
"""

from __future__ import annotations

from collections.abc import Sequence

import re
from pathlib import Path
from typing import Iterable

import polars as pl

from lengthlens.data.errors import LoadError
from lengthlens.data.grading.budget import SPENT, Session, budget_seconds
from lengthlens.data.grading.budget import current as current_budget
from lengthlens.data.grading.generic import attach_generic, is_generic, load_generic_grades
from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, display_path, max_file_bytes, read_file

_KEY = ["dataset", "method", "params", "item_id", "seed"]


def find_grade_files(raw_roots: Iterable[Path]) -> list[tuple[Path, Path]]:
    """Grade files of the study's layout near raw roots, each with the tree it grades.

    ``<x>/campaign/grades/*.json`` grades the runs under ``<x>``; x is the root, one of its two
    parents, or one of its subfolders (a folder holding several studies' trees).
    """
    found: list[tuple[Path, Path]] = []
    for root in raw_roots:
        root = root.resolve()
        bases = [root, root.parent, root.parent.parent]
        hit = [b for b in bases if (b / "campaign" / "grades").is_dir()]
        if hit:
            bases = hit[:1]
        else:
            try:
                bases = sorted(d for d in root.iterdir() if d.is_dir() and (d / "campaign" / "grades").is_dir())
            except OSError:
                bases = []  # an unreadable root is reported by the run discovery
        for b in bases:
            found.extend((f, b) for f in sorted((b / "campaign" / "grades").glob("*.json")))
    return list(dict.fromkeys(found))


def read_grade_file(path: str | Path, max_bytes: int | None = None) -> pl.DataFrame:
    """:func:`~lengthlens.data.grading.load_grade_file` after the checks every input file gets, reading it once.

    A grade file that cannot be used is a :class:`~lengthlens.data.errors.LoadError` naming it in
    one line: left out, it would silently change accuracies. Checked: a regular file under the size
    cap, valid UTF-8 JSON with no key given twice, and the study's entries with the types they need.
    """
    from lengthlens.data.grading.study import grade_frame

    where = display_path(path)
    try:
        return grade_frame(decode_json(read_file(path, max_file_bytes(max_bytes))), path)
    except FileNotFoundError:
        raise LoadError(f"{where}: grade file not found") from None
    except JSONProblem as exc:
        line = f":{exc.line}" if exc.line is not None else ""
        raise LoadError(f"{where}{line}: unusable grade file: {exc.reason}") from None
    except UnreadableFile as exc:
        raise LoadError(f"{where}: unusable grade file: {exc}") from None
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError, pl.exceptions.PolarsError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        msg = msg.removeprefix(f"{path}: ")
        raise LoadError(f"{where}: invalid grade file: {msg}") from None


def attach_grades(table: pl.DataFrame, files: Iterable[Path | tuple[Path, Path | None]],
                  max_bytes: int | None = None) -> tuple[pl.DataFrame, list[str]]:
    """Fill ``correct`` (where still null) from grade files; return the table and warnings.

    Each file may come with a scope folder: its grades apply only to runs stored under it (the
    study's keys name no model, so two trees' grade files must not grade each other's runs).

    A grade whose logged output_tokens differs from the run's is not applied and is counted in a
    warning: it grades another run (e.g. an older campaign stored under the same keys).
    """
    warnings: list[str] = []
    frames = []
    generic = []
    for entry in files:
        f, scope = entry if isinstance(entry, tuple) else (entry, None)
        if is_generic(Path(f)):
            generic.append(f)
            continue
        g = read_grade_file(f, max_bytes)
        frames.append(g.with_columns(pl.lit(str(f)).alias("_grade_file"),
                                     pl.lit(None if scope is None else str(Path(scope).resolve()) + "/", dtype=pl.String).alias("_scope")))
    if not frames:
        return _attach_generic_files(table, generic, max_bytes, warnings)
    grades = pl.concat(frames, how="diagonal_relaxed")
    if "output_tokens" not in grades.columns:
        grades = grades.with_columns(pl.lit(None, dtype=pl.Int64).alias("output_tokens"))
    key = [*_KEY, "_scope"]
    dup = grades.filter(pl.struct(key).is_duplicated())
    if dup.height:
        warnings.append(f"{dup.height} grade entries share their (dataset, method, params, case, seed) with another "
                        f"in the same tree; the first is used")
    grades = grades.unique(subset=key, keep="first", maintain_order=True).select(
        *key, pl.col("correct").alias("_g_correct"), pl.col("output_tokens").cast(pl.Int64).alias("_g_tokens"), "_grade_file")
    t = table.with_row_index("_row").join(grades, on=_KEY, how="left", nulls_equal=True)
    in_scope = pl.col("_scope").is_null() | pl.col("source").str.starts_with(pl.col("_scope")).fill_null(False)
    # A run may match the same keys in several scopes; keep the in-scope grade, else nothing.
    t = (t.with_columns(pl.when(in_scope).then(pl.col("_g_correct")).otherwise(None).alias("_g_correct"))
         .sort("_row", pl.col("_g_correct").is_null()).unique(subset="_row", keep="first", maintain_order=True).drop("_row"))
    matched = pl.col("_g_correct").is_not_null()
    mismatch = matched & pl.col("_g_tokens").is_not_null() & (pl.col("_g_tokens") != pl.col("output_tokens"))
    n_mismatch = t.filter(mismatch).height
    if n_mismatch:
        ex = t.filter(mismatch).row(0, named=True)
        warnings.append(
            f"{n_mismatch} grade entries were not applied because their output_tokens differ from the run they name "
            f"(e.g. {ex['source']}: run has {ex['output_tokens']}, {ex['_grade_file']} says {ex['_g_tokens']})"
        )
    apply = matched & ~mismatch & pl.col("correct").is_null()
    t = t.with_columns(pl.when(apply).then(pl.col("_g_correct")).otherwise(pl.col("correct")).alias("correct"))
    return _attach_generic_files(t.drop("_g_correct", "_g_tokens", "_grade_file", "_scope"), generic, max_bytes, warnings)


def _attach_generic_files(table: pl.DataFrame, files: list, max_bytes: int | None,
                          warnings: list[str]) -> tuple[pl.DataFrame, list[str]]:
    """Each generic grades file (``item_id[, seed[, turn]], correct``) in turn; a bad one is a LoadError naming it."""
    for f in files:
        where = display_path(f)
        try:
            grades = load_generic_grades(f, max_file_bytes(max_bytes))
            table, _, w = attach_generic(table, grades, where)
        except FileNotFoundError:
            raise LoadError(f"{where}: grade file not found") from None
        except UnreadableFile as exc:
            raise LoadError(f"{where}: unusable grade file: {exc}") from None
        except (ValueError, UnicodeDecodeError, pl.exceptions.PolarsError, OSError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise LoadError(f"{where}: invalid grades file: {msg.removeprefix(where + ': ')}") from None
        warnings += w
    return table, warnings


def resolve_correctness(table: pl.DataFrame, grade_files: list, *, run_graders: bool = True,
                        problems: object = None, texts: pl.Series | None = None,
                        grading: str = "default", execute_code: bool | str = False,
                        max_bytes: int | None = None) -> tuple[pl.DataFrame, list[str]]:
    """Fill ``correct`` in the documented order and record where each verdict came from.

    ``grading``: the policy of the graders that run on the text, ``default`` or ``study``
    (:mod:`lengthlens.data.grading.policy`). ``execute_code``: whether the code graders may run the
    answers' code (:func:`lengthlens.data.grading.grade`); without it those runs stay ungraded and
    one warning counts them.

    ``texts``: when the table's text column was set aside (the caller's memory-saving split), the
    texts indexed by the table's ``_rid`` column. ``max_bytes``: the size cap of a grade file
    (:func:`lengthlens.data.safeio.max_file_bytes`).

    Adds ``grade_source`` (``record``, ``grade_file``, ``grader:<name>``, or null when ungraded)
    and ``graded_answer`` (the answer a lengthlens grader extracted; null otherwise).
    """
    warnings: list[str] = []
    t = table.with_columns(pl.when(pl.col("correct").is_not_null()).then(pl.lit("record")).otherwise(None).alias("grade_source"),
                           pl.lit(None, dtype=pl.String).alias("graded_answer"))
    if grade_files:
        before = t["correct"].is_null()
        t, w = attach_grades(t, grade_files, max_bytes)
        warnings += w
        filled = before & t["correct"].is_not_null()
        t = t.with_columns(pl.when(filled).then(pl.lit("grade_file")).otherwise(pl.col("grade_source")).alias("grade_source"))
    if run_graders:
        from lengthlens.data.grading import NOT_EXECUTED, grade_frame, grader_name

        gradable = [d for d in t.get_column("dataset").unique().to_list() if grader_name(d) not in (None, "mtbench")]
        if texts is not None:
            has_text = texts.gather(t.get_column("_rid")).is_not_null()
        else:
            has_text = t.get_column("text").is_not_null()
        need = pl.col("correct").is_null() & (pl.col("status") == "ok") & has_text & pl.col("dataset").is_in(gradable)
        t = t.with_row_index("_row")
        todo = t.filter(need)
        if texts is not None and todo.height:
            todo = todo.with_columns(texts.gather(todo.get_column("_rid")).alias("text"))
        if todo.height:
            graded = grade_frame(todo.drop("correct"), problems=problems, policy=grading, execute_code=execute_code).select(
                "_row", pl.col("correct").alias("_c"), pl.col("grader").alias("_grader"), pl.col("graded_answer").alias("_ans"),
                pl.col("grade_detail").alias("_detail"))
            t = t.join(graded, on="_row", how="left")
            got = pl.col("_c").is_not_null()
            t = t.with_columns(
                pl.when(got).then(pl.col("_c")).otherwise(pl.col("correct")).alias("correct"),
                pl.when(got).then(pl.format("grader:{}", pl.col("_grader"))).otherwise(pl.col("grade_source")).alias("grade_source"),
                pl.when(got).then(pl.col("_ans")).otherwise(pl.col("graded_answer")).alias("graded_answer"),
            )
            not_run = graded.filter(pl.col("_c").is_null() & (pl.col("_detail") == NOT_EXECUTED))
            if not_run.height:
                warnings.append(_not_executed_warning(dict(not_run.group_by("_grader").len().iter_rows())))
            over = pl.col("_c").is_null() & pl.col("_detail").str.starts_with(SPENT).fill_null(False)
            out_of_time = graded.filter(over)
            if out_of_time.height:
                counts = ", ".join(f"{g} {n}" for g, n in sorted(out_of_time.group_by("_grader").len().iter_rows()))
                session = current_budget() or Session(budget_seconds(), 1)
                warnings.append(session.warning(out_of_time.height, counts))
            ungraded = graded.filter(pl.col("_c").is_null() & (pl.col("_detail") != NOT_EXECUTED) & ~over)
            if ungraded.height:
                ex = ungraded.row(0, named=True)
                warnings.append(f"{ungraded.height} runs could not be graded (e.g. {ex['_grader']}: {ex['_detail']})")
            t = t.drop("_c", "_grader", "_ans", "_detail")
        t = t.drop("_row")
    return t, warnings


def _not_executed_warning(counts: dict[str, int]) -> str:
    """The one line that counts the runs left ungraded because code execution is off (per grader)."""
    names = ", ".join(f"{g} {n}" for g, n in sorted(counts.items()))
    return (f"{sum(counts.values())} runs ({names}) were left ungraded because code execution is off: pass "
            f"--execute-code (LENGTHLENS_EXECUTE_CODE=1, or lengthlens.load(execute_code=True)) to run their code "
            f"in a sandbox (docs/execution.md)")


_NOT_EXECUTED_LINE = re.compile(r"^\d+ runs \((?P<names>[^)]*)\) were left ungraded because code execution is off")


def not_executed_counts(warnings: Sequence[str]) -> dict[str, int]:
    """Per grader, the runs the load's warnings say were left ungraded because code execution is off.

    Examples
    --------
    >>> not_executed_counts([_not_executed_warning({"humaneval": 3}), "something else"])
    {'humaneval': 3}
    """
    counts: dict[str, int] = {}
    for w in warnings:
        m = _NOT_EXECUTED_LINE.match(w)
        for item in (m.group("names").split(", ") if m else ()):
            name, n = item.rsplit(" ", 1)
            counts[name] = counts.get(name, 0) + int(n)
    return counts


def merge_not_executed(warnings: list[str]) -> list[str]:
    """``warnings`` with the per-source "left ungraded because code execution is off" lines merged into one."""
    counts: dict[str, int] = {}
    rest, first = [], None
    for w in warnings:
        m = _NOT_EXECUTED_LINE.match(w)
        if m is None:
            rest.append(w)
            continue
        first = len(rest) if first is None else first
        for item in m.group("names").split(", "):
            name, n = item.rsplit(" ", 1)
            counts[name] = counts.get(name, 0) + int(n)
    if first is not None:
        rest.insert(first, _not_executed_warning(counts))
    return rest
