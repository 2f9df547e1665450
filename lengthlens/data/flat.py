"""Read flat tables of normalized run records (JSONL, CSV, Parquet) written by any generator."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from lengthlens.data.schema import RunRecord

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


def read_flat_frame(path: str | Path) -> tuple[pl.DataFrame, pl.Series, list[str]] | None:
    """A flat file as one polars frame of its known columns, the file line of each row, and unknown columns.

    Returns None when the file cannot be read as one typed table (malformed JSON lines, or a
    column mixing types): the caller then reads it row by row, which names each bad line.
    """
    path = Path(path)
    kind = flat_kind(path)
    try:
        if kind == "parquet":
            df = pl.read_parquet(path)
            lines = pl.Series("_line", range(1, df.height + 1), dtype=pl.Int64)
        elif kind == "csv":
            df = pl.read_csv(path, infer_schema_length=None)
            lines = pl.Series("_line", range(2, df.height + 2), dtype=pl.Int64)
        elif kind == "jsonl":
            df = pl.read_ndjson(path, infer_schema_length=None)
            with open(path, encoding="utf-8") as fh:
                nonblank = [i for i, line in enumerate(fh, start=1) if line.strip()]
            if len(nonblank) != df.height:
                return None
            lines = pl.Series("_line", nonblank, dtype=pl.Int64)
        else:
            raise ValueError(f"{path}: not a flat records file (expected .jsonl, .csv or .parquet)")
    except (pl.exceptions.PolarsError, ValueError, UnicodeDecodeError) as exc:
        if kind == "parquet":
            raise ValueError(f"{path}: unreadable Parquet file ({exc})") from None
        return None
    unknown = [c for c in df.columns if c not in _FIELDS]
    return df.select([c for c in df.columns if c in _FIELDS]), lines, unknown


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
