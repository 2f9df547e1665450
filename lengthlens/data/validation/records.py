"""Validated records into tables: record-by-record validation (naming file, line and field) and correctness on a table.

Shared by every reader's path through the loader (:mod:`lengthlens.data.loading`,
:mod:`lengthlens.data.readers.rawroot`).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from lengthlens.data.schema import POLARS_SCHEMA, FieldError, validate_record


def field_failure(where: str, errors: list[FieldError]) -> dict[str, str]:
    """A skipped.csv row for a record that failed validation, naming every bad field."""
    return {"path": where, "reason": "; ".join(f"field '{e.field}': {e.message}" for e in errors), "stage": "validate"}


def validate_dicts(records: list[tuple[str, int | None, dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The validated field mappings and the failures (no polars: this runs in worker processes)."""
    valid: list[dict[str, Any]] = []
    failures: list[dict[str, str]] = []
    for file, line, data in records:
        rec, errs = validate_record(data, file, line)
        if rec is None:
            failures.append(field_failure(f"{file}:{line}" if line is not None else file, errs))
        else:
            valid.append(rec.__dict__)
    return valid, failures


def validate_records(records: list[tuple[str, int | None, dict[str, Any]]]) -> tuple[pl.DataFrame, list[dict[str, str]]]:
    """Validate mappings one by one with RunRecord; invalid ones become failures naming file, line and field."""
    valid, failures = validate_dicts(records)
    table = pl.DataFrame(valid, schema=POLARS_SCHEMA, orient="row") if valid else pl.DataFrame(schema=POLARS_SCHEMA)
    return table, failures


def reattach(slim: pl.DataFrame, texts: pl.Series) -> pl.Series:
    """The texts in slim's row order: the same buffers when no row moved or went (no copy of the largest column)."""
    rid = slim.get_column("_rid")
    if slim.height == len(texts) and bool((rid == pl.int_range(0, len(texts), eager=True, dtype=rid.dtype)).all()):
        return texts
    return texts.gather(rid)


def resolve(table: pl.DataFrame, grade_files: list, run_graders: bool, problems: object,
            grading: str = "default", max_bytes: int | None = None,
            execute_code: bool | str = False) -> tuple[pl.DataFrame, list[str]]:
    """Correctness for one source's table; the texts stay out of the joins (they are most of its bytes).

    Columns that are neither the record's nor correctness' (a reader's bookkeeping) are kept after them.
    """
    from lengthlens.data.grading.correctness import resolve_correctness

    table = table.with_row_index("_rid")
    texts = table.get_column("text")
    slim, warnings = resolve_correctness(table.drop("text"), grade_files, run_graders=run_graders, problems=problems,
                                         grading=grading, texts=texts, max_bytes=max_bytes,
                                         execute_code=execute_code)
    extra = [c for c in slim.columns if c not in POLARS_SCHEMA and c != "_rid"]
    return slim.with_columns(reattach(slim, texts).alias("text")).select(*POLARS_SCHEMA.names(), *extra), warnings
