"""A grades file any tool can write: one verdict per item (and seed, turn), joined to the runs of any reader.

Columns (CSV with a header, JSON lines, or Parquet): ``item_id`` and ``correct`` (true/false, 1/0),
optionally ``seed`` and ``turn`` (the run's unit; without them the verdict grades every seed and
turn of the item), and any of ``target``, ``draft``, ``dataset``, ``method``, ``params`` to say
which arm's runs it grades (without them it grades the item in every arm loaded from the same
source, which is refused where that source holds several arms: their outputs differ). Other
columns are ignored. Evaluation harnesses' outputs become such a file with
:mod:`lengthlens.data.grading.harness` (lm-eval's ``--log_samples``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

#: Columns that identify the runs a verdict belongs to, in the order a join uses them.
ARM_COLUMNS = ("target", "draft", "dataset", "method", "params")
UNIT_COLUMNS = ("item_id", "seed", "turn")
KEY_COLUMNS = (*ARM_COLUMNS, *UNIT_COLUMNS)
SUFFIXES = (".csv", ".jsonl", ".parquet")
_TRUE = {"true", "1", "yes", "correct", "c"}
_FALSE = {"false", "0", "no", "incorrect", "i"}


def is_generic(path: Path) -> bool:
    """Whether ``path`` is a generic grades file (by suffix, also gzip-compressed; the study's grade files are ``.json``)."""
    name = path.name.lower().removesuffix(".gz")
    return name.endswith(SUFFIXES)


def verdict(value: Any, where: str) -> bool:
    """A ``correct`` value as a bool: true/false, 1/0 (also as text), ``C``/``I``; ValueError naming ``where`` otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{where}: field 'correct' must be true/false or 1/0, got {value!r}")


def _rows(path: Path, max_bytes: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The rows of a grades file read as every input is (:func:`lengthlens.data.safeio.read_input`: a regular file
    under the size cap, gzip decompressed, a byte-order mark dropped), each with where it stands (``line n``, ``row n``);
    ValueError naming the line or what is wrong."""
    import io

    from lengthlens.data.safeio import JSONProblem, decode_json, read_input

    data = read_input(path, max_bytes)
    suffix = path.name.lower().removesuffix(".gz").rpartition(".")[2]
    if suffix == "parquet":
        return [(f"row {i}", r) for i, r in enumerate(pl.read_parquet(io.BytesIO(data)).to_dicts(), start=1)]
    if suffix == "csv":  # the header is line 1
        return [(f"line {i}", r) for i, r in enumerate(pl.read_csv(io.BytesIO(data), infer_schema=False).to_dicts(), start=2)]
    rows = []
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = decode_json(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"line {lineno}: not UTF-8 (byte {exc.start + 1} of the line)") from None
        except JSONProblem as exc:
            raise ValueError(f"line {lineno}: " + (f"field '{exc.field}': " if exc.field else "") + exc.reason) from None
        if not isinstance(obj, dict):
            raise ValueError(f"line {lineno}: expected a JSON object")  # noqa: TRY004 - bad file content
        rows.append((f"line {lineno}", obj))
    return rows


def load_generic_grades(path: str | Path, max_bytes: int | None = None) -> pl.DataFrame:
    """The verdicts of a generic grades file: its key columns (as given) and ``correct``.

    Parameters
    ----------
    path : a ``.csv``, ``.jsonl`` or ``.parquet`` file with ``item_id`` and ``correct`` (and optionally
        ``seed``, ``turn``, ``target``, ``draft``, ``dataset``, ``method``, ``params``), gzip-compressed or not.
    max_bytes : the size cap of the file and of its decompressed content (default
        :func:`lengthlens.data.safeio.max_file_bytes`).

    Returns
    -------
    polars.DataFrame with the key columns the file has (strings; ``seed`` and ``turn`` as integers)
    and ``correct`` (bool). ValueError naming the line and field of a bad entry.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "grades.csv"
    >>> _ = f.write_text("item_id,seed,correct\\nq1,0,1\\nq2,0,false\\n")
    >>> load_generic_grades(f)["correct"].to_list()
    [True, False]
    """
    path = Path(path)
    placed = _rows(path, max_bytes)
    rows = [r for _, r in placed]
    if not rows:
        raise ValueError("no grades in the file")
    cols = [c for c in KEY_COLUMNS if any(c in r for r in rows)]
    if "item_id" not in cols or not any("correct" in r for r in rows):
        raise ValueError("a grades file needs the columns item_id and correct (and optionally seed, turn, "
                         "target, draft, dataset, method, params)")
    out: dict[str, list[Any]] = {c: [] for c in (*cols, "correct")}
    for where, r in placed:
        for c in cols:
            v = r.get(c)
            if v is None or v == "":
                raise ValueError(f"{where}: field {c!r} is empty (a column given must be filled on every line)")
            if c in ("seed", "turn"):
                try:
                    v = int(v) if not isinstance(v, float) or v == int(v) else None
                except (TypeError, ValueError):
                    v = None
                if v is None:
                    raise ValueError(f"{where}: field {c!r} must be a whole number, got {r.get(c)!r}")
            else:
                v = str(v)
            out[c].append(v)
        out["correct"].append(verdict(r.get("correct"), where))
    schema = {c: (pl.Int64 if c in ("seed", "turn") else pl.String) for c in cols} | {"correct": pl.Boolean}
    return pl.DataFrame(out, schema=schema)


def attach_generic(table: pl.DataFrame, grades: pl.DataFrame, where: str) -> tuple[pl.DataFrame, int, list[str]]:
    """Fill ``correct`` (where still null) from one generic grades table; (table, runs graded, warnings).

    The join uses the key columns the file has. A verdict given twice for one key keeps the first (warned);
    a file naming no arm may grade only a table of one arm (ValueError otherwise).
    """
    keys = [c for c in KEY_COLUMNS if c in grades.columns]
    warnings = []
    dup = grades.filter(pl.struct(keys).is_duplicated())
    if dup.height:
        warnings.append(f"{where}: {dup.height} grades share their ({', '.join(keys)}) with another; the first is used")
        grades = grades.unique(subset=keys, keep="first", maintain_order=True)
    g = grades.select(*keys, pl.col("correct").alias("_g_correct"))
    t = table.with_row_index("_grow").join(g, on=keys, how="left", nulls_equal=True, maintain_order="left")
    hit = pl.col("_g_correct").is_not_null()
    if not any(c in keys for c in ARM_COLUMNS):
        arms = t.filter(hit).select(*ARM_COLUMNS).unique().height
        if arms > 1:
            raise ValueError(f"{where}: the file names no arm (no target, draft, dataset, method or params column) but "
                             f"its items match runs of {arms} arms: add the arm's columns (method, params, ...) or "
                             f"load each arm with its own grades file")
    n = t.filter(hit & pl.col("correct").is_null()).height
    if t.filter(hit).height == 0:
        warnings.append(f"{where}: no run matches any of its {grades.height} grades on ({', '.join(keys)})")
    t = t.with_columns(pl.when(pl.col("correct").is_null()).then(pl.col("_g_correct")).otherwise(pl.col("correct")).alias("correct"))
    return t.sort("_grow").drop("_grow", "_g_correct"), n, warnings
