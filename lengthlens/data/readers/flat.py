"""Read flat tables of normalized run records (JSONL, CSV, Parquet) written by any generator.

Two paths read a file: one typed polars table (:func:`read_flat_frame`, the fast path), or row by
row (:func:`read_flat`), which names the line of every row it cannot read. A file goes the row way
whenever the fast path could read it differently from the row path: a JSONL line that is not valid
UTF-8 or may hold a key twice (polars keeps the first value, Python's ``json`` the last; the row
path refuses the line), a CSV with ragged rows, or anything polars cannot type. Only regular files
are read (a FIFO or a device is an error naming the file).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from lengthlens.data.safeio import (
    BOM,
    GZIP_MAGIC,
    JSONProblem,
    UnreadableFile,
    check_regular,
    decode_json,
    decode_text,
    display_path,
    gunzip,
    max_file_bytes,
    read_file,
)
from lengthlens.data.schema import RunRecord

FLAT_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
_FIELDS = set(RunRecord.model_fields)
# A JSON string followed by a colon: an object key (strings inside strings cannot hold an unescaped quote).
_KEY = r'"(?:[^"\\]|\\.)*"\s*:'


@dataclass(frozen=True)
class FlatRow:
    """One row of a flat file with where it came from (``line`` is 1-based as an editor shows it)."""

    file: str
    line: int
    data: dict[str, Any] | None
    reason: str | None


def flat_kind(path: str | Path) -> str | None:
    """'jsonl', 'csv' or 'parquet' for a flat records file (a gzip-compressed JSONL file too), None for anything else."""
    p = Path(path)
    if p.suffix.lower() == ".gz":
        kind = FLAT_SUFFIXES.get(Path(p.stem).suffix.lower())
        return kind if kind == "jsonl" else None
    return FLAT_SUFFIXES.get(p.suffix.lower())


def _jsonl_bytes(path: Path) -> bytes:
    """A JSONL file's bytes: gzip decompressed (told by its magic bytes), a leading byte-order mark dropped."""
    try:
        data = read_file(path, 2**62)
        if data[:2] == GZIP_MAGIC:
            data = gunzip(data, max_file_bytes())
    except FileNotFoundError:
        raise ValueError(f"{display_path(path)}: no such file") from None
    except UnreadableFile as exc:
        raise ValueError(f"{display_path(path)}: {exc}") from None
    return data[len(BOM):] if data.startswith(BOM) else data


def _open_check(path: Path) -> None:
    """ValueError naming the file unless it is a regular file (a FIFO would block, a device never end)."""
    try:
        check_regular(path)
    except FileNotFoundError:
        raise ValueError(f"{display_path(path)}: no such file") from None
    except UnreadableFile as exc:
        raise ValueError(f"{display_path(path)}: {exc}") from None


def read_flat(path: str | Path) -> tuple[Iterator[FlatRow], list[str]]:
    """Rows of a flat file as mappings, plus the file's columns that the record schema does not know.

    Unknown columns are reported, not silently kept or dropped: the caller lists them in its warnings.
    """
    path = Path(path)
    kind = flat_kind(path)
    if kind is None:
        raise ValueError(f"{path}: not a flat records file (expected .jsonl, .csv or .parquet)")
    _open_check(path)
    if kind == "jsonl":
        return _jsonl_rows(path), []
    if kind == "csv":
        return _csv_rows(path)
    try:
        df = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable Parquet file ({exc})") from None
    unknown = [c for c in df.columns if c not in _FIELDS]
    df = df.select([c for c in df.columns if c in _FIELDS])

    def rows() -> Iterator[FlatRow]:
        for i, d in enumerate(df.iter_rows(named=True)):
            yield FlatRow(str(path), i + 1, d, None)

    return rows(), unknown


def _jsonl_screen(data: bytes) -> tuple[list[int], bool]:
    """Line numbers of the non-blank lines, and whether every line is safe for the fast path.

    A line is not safe when it is not valid UTF-8 or when a key string appears twice in it (a
    duplicated key, or only a key reused in a nested object: the row path tells them apart).
    """
    raw = data.split(b"\n")
    numbers = [i for i, line in enumerate(raw, start=1) if line.strip()]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return numbers, False
    keys = pl.Series("l", text.split("\n"), dtype=pl.String).str.extract_all(_KEY)
    return numbers, not bool((keys.list.len() != keys.list.n_unique()).any())


def flat_listing(folder: str | Path) -> tuple[list[Path], list[Path]] | None:
    """(the entries of a folder named as flat record files, whatever they are, and its other files), sorted, for a
    folder without subfolders that holds at least one such entry (Parquet parts, JSONL shards); None for any
    other folder (a raw-layout root has subfolders). Hidden entries are left out."""
    folder = Path(folder)
    entries = [e for e in folder.iterdir() if not e.name.startswith(".")]
    if any(e.is_dir() and not e.is_symlink() for e in entries):
        return None
    parts = sorted(e for e in entries if flat_kind(e))
    return (parts, sorted(e for e in entries if not flat_kind(e))) if parts else None


def flat_parts(folder: str | Path) -> list[Path] | None:
    """The entries named as flat record files of a folder that holds only files (see :func:`flat_listing`), or None."""
    listing = flat_listing(folder)
    return None if listing is None else listing[0]


def read_parquet_parts(paths: list[Path], with_text: bool = True) -> tuple[pl.DataFrame, pl.Series, list[str]]:
    """Parquet parts as one typed table with one lazy scan, reading only the record's columns (no ``text`` unless
    ``with_text``); the row's place ``part:row`` as its line, and the columns the record does not know."""
    for p in paths:
        _open_check(p)
    try:
        schemas = [pl.read_parquet_schema(p) for p in paths]
        names = list(dict.fromkeys(n for sch in schemas for n in sch))
        keep = [n for n in names if n in _FIELDS and (with_text or n != "text")]
        if any(set(sch) != set(schemas[0]) for sch in schemas):  # parts with different columns: one scan each
            frames = [pl.scan_parquet(p, include_file_paths="_part").select([c for c in keep if c in sch] + ["_part"])
                      for p, sch in zip(paths, schemas)]
            lf = pl.concat(frames, how="diagonal_relaxed")
        else:
            lf = pl.scan_parquet([str(p) for p in paths], include_file_paths="_part").select(*keep, "_part")
        df = _contiguous(lf.with_columns(pl.col("_part").cast(pl.Categorical)).collect())
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        where = paths[0] if len(paths) == 1 else paths[0].parent
        raise ValueError(f"{display_path(where)}: unreadable Parquet {'file' if len(paths) == 1 else 'parts'} "
                         f"({exc})") from None
    return df.drop("_part"), _part_rows(df.get_column("_part")), [n for n in names if n not in _FIELDS]


def _contiguous(df: pl.DataFrame) -> pl.DataFrame:
    """``df``'s columns, each in one chunk, as a new frame; ``df`` is left empty (each column is let go once moved).

    A scan gives a column per row group; polars' next operation on the frame would join the chunks of
    every column at once, holding two copies of the table.
    """
    names = df.columns
    cols = [df.drop_in_place(name).rechunk() for name in names]
    return pl.DataFrame(cols)


def _part_rows(part: pl.Series) -> pl.Series:
    """Each row's place ``part:row`` (row 1-based within its part), built one stretch of a part at a time: a
    window over the whole column would hold several full-length copies of the places while it works."""
    pieces, seen = [], {}
    for length, name in part.rle().struct.unnest().iter_rows():
        first = seen.get(name, 0) + 1
        seen[name] = first - 1 + length
        rows = pl.int_range(first, first + length, dtype=pl.Int64, eager=True)
        pieces.append(pl.select(pl.concat_str(pl.lit(f"{name}:"), rows.cast(pl.String))).to_series())
    if not pieces:
        return pl.Series("_where", [], dtype=pl.String)
    return pl.concat(pieces, rechunk=False).alias("_where")


def read_flat_frame(path: str | Path, with_text: bool = True) -> tuple[pl.DataFrame, pl.Series, list[str]] | None:
    """A flat file as one polars frame of its known columns, the file line of each row, and unknown columns.

    Returns None when the file cannot be read as one typed table (malformed JSON lines, a column
    mixing types, ragged CSV rows, bytes that are not UTF-8, a key that may be given twice): the
    caller then reads it row by row, which names each bad line.
    """
    path = Path(path)
    kind = flat_kind(path)
    if kind is None:
        raise ValueError(f"{path}: not a flat records file (expected .jsonl, .csv or .parquet)")
    _open_check(path)
    try:
        if kind == "parquet":
            names = list(pl.read_parquet_schema(path))
            df = pl.read_parquet(path, columns=[n for n in names if n in _FIELDS and (with_text or n != "text")])
            lines = pl.Series("_line", range(1, df.height + 1), dtype=pl.Int64)
            return df, lines, [n for n in names if n not in _FIELDS]
        elif kind == "csv":
            _csv_header(path)
            df = pl.read_csv(path, infer_schema_length=None)
            lines = pl.Series("_line", range(2, df.height + 2), dtype=pl.Int64)
        else:
            data = _jsonl_bytes(path)
            nonblank, safe = _jsonl_screen(data)
            if not safe:
                return None
            df = pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)
            if len(nonblank) != df.height:
                return None
            lines = pl.Series("_line", nonblank, dtype=pl.Int64)
    except (pl.exceptions.PolarsError, UnicodeDecodeError, OverflowError, OSError) as exc:
        if kind == "parquet":
            raise ValueError(f"{path}: unreadable Parquet file ({exc})") from None
        return None
    unknown = [c for c in df.columns if c not in _FIELDS]
    return df.select([c for c in df.columns if c in _FIELDS]), lines, unknown


def _jsonl_rows(path: Path) -> Iterator[FlatRow]:
    data = _jsonl_bytes(path)
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            d = decode_json(decode_text(raw))
        except JSONProblem as exc:
            field = f"field '{exc.field}': " if exc.field else ""
            yield FlatRow(str(path), lineno, None, field + exc.reason)
            continue
        if not isinstance(d, dict):
            yield FlatRow(str(path), lineno, None, f"expected a JSON object, got {type(d).__name__}")
            continue
        yield FlatRow(str(path), lineno, d, None)


def _csv_header(path: Path) -> list[str]:
    """The header of a CSV file; ValueError naming a column given twice (readers would rename or drop one)."""
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        header = next(csv.reader(fh), [])
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise ValueError(f"{display_path(path)}:1: column {display_path(name)!r} appears twice in the header")
        seen.add(name)
    return header


def _csv_rows(path: Path) -> tuple[Iterator[FlatRow], list[str]]:
    """CSV rows by Python's csv module: a ragged row or one with bytes that are not UTF-8 is a failure naming its line."""
    header = _csv_header(path)
    unknown = [c for c in header if c not in _FIELDS]

    def rows() -> Iterator[FlatRow]:
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
            reader = csv.reader(fh)
            next(reader, None)
            line = reader.line_num + 1
            for row in reader:
                start, line = line, reader.line_num + 1
                if not row:
                    continue
                if len(row) != len(header):
                    yield FlatRow(str(path), start, None, f"{len(row)} fields but the header has {len(header)} (a ragged row)")
                elif any(_has_surrogates(v) for v in row):
                    yield FlatRow(str(path), start, None, "not valid UTF-8")
                else:
                    # An empty cell is a missing value, as in the typed reader.
                    yield FlatRow(str(path), start, {k: (v if v != "" else None) for k, v in zip(header, row)
                                                      if k in _FIELDS}, None)

    return rows(), unknown


def _has_surrogates(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True
