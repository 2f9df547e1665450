"""Read flat tables of normalized run records (JSONL, CSV, Parquet) written by any generator."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from lengthlens.schema import RunRecord

FLAT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
_FIELDS = set(RunRecord.model_fields)


@dataclass(frozen=True)
class FlatRow:
    """One row of a flat file with where it came from (``line`` is 1-based as an editor shows it)."""

    file: str
    line: int
    data: dict[str, Any] | None
    reason: str | None


def flat_kind(path: str | Path) -> str | None:
    """'jsonl', 'csv' or 'parquet' for a flat records file, None for anything else."""
    return FLAT_SUFFIXES.get(Path(path).suffix.lower())


def read_flat(path: str | Path) -> tuple[Iterator[FlatRow], list[str]]:
    """Rows of a flat file as mappings, plus the file's columns that the record schema does not know.

    Unknown columns are reported, not silently kept or dropped: the caller lists them in its warnings.
    """
    path = Path(path)
    kind = flat_kind(path)
    if kind is None:
        raise ValueError(f"{path}: not a flat records file (expected .jsonl, .csv or .parquet)")
    if kind == "jsonl":
        return _jsonl_rows(path), []
    if kind == "csv":
        # Everything as text: pydantic converts per field and names the field that fails.
        df = pl.read_csv(path, infer_schema=False)
        first_line = 2  # line 1 is the header
    else:
        df = pl.read_parquet(path)
        first_line = 1
    unknown = [c for c in df.columns if c not in _FIELDS]
    keep = [c for c in df.columns if c in _FIELDS]
    df = df.select(keep)

    def rows() -> Iterator[FlatRow]:
        for i, d in enumerate(df.iter_rows(named=True)):
            yield FlatRow(str(path), i + first_line, d, None)

    return rows(), unknown


def _jsonl_rows(path: Path) -> Iterator[FlatRow]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                yield FlatRow(str(path), lineno, None, f"invalid JSON ({exc.msg}, column {exc.colno})")
                continue
            if not isinstance(d, dict):
                yield FlatRow(str(path), lineno, None, f"expected a JSON object, got {type(d).__name__}")
                continue
            yield FlatRow(str(path), lineno, d, None)
