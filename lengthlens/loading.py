"""Load run logs from any mix of raw-layout folders and flat files into one validated, paired table.

read (raw layout or flat records) -> validate each record -> normalized polars table ->
cross-record rules -> pairing checks. Every run found ends up in ``RunSet.table`` or in
``RunSet.skipped`` with its reason; nothing is dropped silently.
"""

from __future__ import annotations

import hashlib
import html
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd
import polars as pl

from lengthlens import __version__
from lengthlens.io.flat import flat_kind, read_flat
from lengthlens.io.raw import READER_VERSION, discover, file_fingerprint, read_runs
from lengthlens.schema import ARM_KEY, POLARS_SCHEMA, SCHEMA_VERSION, FieldError, RunRecord, validate_record
from lengthlens.validate import drop_duplicates, drop_over_budget, finish_reason_warnings, l_bar_warnings, pairing_checks

_SKIP_SCHEMA = pl.Schema({"path": pl.String, "reason": pl.String, "stage": pl.String})
_FIELDS = set(RunRecord.model_fields)


class LoadError(ValueError):
    """Input that cannot be analysed at all (wrong root, or invalid records with strict=True)."""


@dataclass(frozen=True)
class RunSet:
    """Every run found: the validated normalized table and the runs skipped with their reasons.

    ``table`` holds one row per distinct valid run (all statuses) with a boolean ``paired``
    column: True for ok runs that enter a cell (baselines and relaxed runs whose item/seed the
    baseline has). ``skipped`` has (path, reason, stage) for every run not loaded or not paired.
    """

    table: pl.DataFrame
    skipped: pl.DataFrame
    sources: tuple[str, ...]
    n_found: int
    warnings: tuple[str, ...] = field(default=())

    @property
    def paired(self) -> pl.DataFrame:
        """Ok runs that enter cells."""
        return self.table.filter(pl.col("paired"))

    def to_frame(self) -> pd.DataFrame:
        """The normalized table as pandas (text column left out: it is large and rarely wanted here)."""
        return self.table.drop("text").to_pandas()

    def summary(self) -> str:
        """A few lines for a terminal: what was found, loaded, skipped and why."""
        t = self.table
        arms = t.select(ARM_KEY).unique().height
        lines = [
            f"{self.n_found} runs found in {len(self.sources)} source(s); {t.height} loaded "
            f"({self.paired.height} paired into cells), {self.skipped.height} listed as skipped or unpaired",
            f"{arms} arms, {t.select('target', 'draft').unique().height} target-draft pair(s), "
            f"{t['dataset'].n_unique()} dataset(s)",
        ]
        if self.skipped.height:
            reasons = (
                self.skipped.with_columns(pl.col("reason").str.replace(r"duplicate of .*", "duplicate of another run")
                                          .str.replace(r"^field 'output_tokens'.*", "output_tokens exceeds the budget")
                                          .str.replace(r"setting differs from the baseline: .*", "setting differs from the baseline"))
                .group_by("reason").len().sort("len", descending=True)
            )
            for r in reasons.head(8).iter_rows(named=True):
                lines.append(f"  skipped {r['len']:>6}: {r['reason'][:160]}")
            if reasons.height > 8:
                lines.append(f"  ... {reasons.height - 8} more reasons (see skipped.csv)")
        for w in self.warnings[:10]:
            lines.append(f"  warning: {w}")
        if len(self.warnings) > 10:
            lines.append(f"  ... {len(self.warnings) - 10} more warnings")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(self.summary()) + "</pre>"

    def __repr__(self) -> str:
        return f"RunSet({self.summary().splitlines()[0]})"


def _cache_dir() -> Path:
    base = os.environ.get("LENGTHLENS_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lengthlens"


def _load_raw_root(root: Path, *, cache: bool, with_text: bool, workers: int | None, progress: bool) -> tuple[list[dict[str, Any]], list[dict[str, str]], int]:
    """Records (unvalidated mappings) and read failures of one raw root; cached by file fingerprint."""
    runs, unplaced = discover(root)
    failures = [{"path": p, "reason": r, "stage": "read"} for p, r in unplaced]
    if cache:
        fp = hashlib.sha256(pickle.dumps((SCHEMA_VERSION, READER_VERSION, __version__, with_text, file_fingerprint(runs)))).hexdigest()
        key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:24]
        cache_file = _cache_dir() / f"raw-{key}.pkl"
        try:
            with open(cache_file, "rb") as fh:
                stored_fp, records, stored_failures = pickle.load(fh)
            if stored_fp == fp:
                return records, failures + stored_failures, len(runs) + len(unplaced)
        except (OSError, pickle.UnpicklingError, EOFError, ValueError):
            pass
    bar = None
    if progress and len(runs) > 2000:
        from tqdm import tqdm

        bar = tqdm(total=len(runs), desc=f"reading {root.name}", unit="run", leave=False)
    records: list[dict[str, Any]] = []
    read_failures: list[dict[str, str]] = []
    for res in read_runs(runs, with_text=with_text, workers=workers, progress=bar):
        if res.record is None:
            read_failures.append({"path": res.path, "reason": res.reason or "unreadable", "stage": "read"})
        else:
            records.append(res.record)
    if bar is not None:
        bar.close()
    if cache:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
            with open(tmp, "wb") as fh:
                pickle.dump((fp, records, read_failures), fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, cache_file)
        except OSError:
            pass  # a read-only home only costs the speed-up
    return records, failures + read_failures, len(runs) + len(unplaced)


def load(*sources: str | os.PathLike[str], grades: Sequence[str | os.PathLike[str]] | None = None,
         find_grades: bool = True, strict: bool = False, cache: bool = True, with_text: bool = True,
         workers: int | None = None, progress: bool = False, run_graders: bool = True,
         problems: object = None) -> RunSet:
    """Load runs from raw-layout folders and/or flat record files (JSONL, CSV, Parquet).

    Parameters
    ----------
    grades : grade files in the study's format (``{"runs": [{case, seed, method, params, verdict}]}``);
        with ``find_grades`` the files under ``campaign/grades/`` next to a raw root are used too.
    strict : raise :class:`LoadError` listing every invalid record instead of skipping them.
    cache : reuse the normalized records of a raw tree whose files have not changed
        (cache in ``$LENGTHLENS_CACHE_DIR`` or ``~/.cache/lengthlens``).
    with_text : keep each run's output text (needed for grading and thinking attribution).
    run_graders : grade runs still without a verdict with lengthlens' own graders (from the answer text).
    problems : HumanEval problems / LiveCodeBench tests for the execution graders (mapping or JSONL path).
    """
    if not sources:
        raise LoadError("no sources given: pass raw-layout folders or flat record files")
    raw_records: list[tuple[str | None, int | None, dict[str, Any]]] = []
    failures: list[dict[str, str]] = []
    warnings: list[str] = []
    n_found = 0
    raw_roots: list[Path] = []
    for src in sources:
        p = Path(src)
        if not p.exists():
            raise LoadError(f"{p}: no such file or folder")
        if p.is_dir():
            records, fails, found = _load_raw_root(p, cache=cache, with_text=with_text, workers=workers, progress=progress)
            if found == 0:
                raise LoadError(f"{p}: no run folders found (expected <dataset>/<method>/<params>/case_NNN/seed_K/run.json below it)")
            raw_roots.append(p)
            n_found += found
            failures.extend(fails)
            raw_records.extend((r["source"], None, r) for r in records)
        elif flat_kind(p):
            rows, unknown = read_flat(p)
            unknown_seen: set[str] = set(unknown)
            count = 0
            for row in rows:
                count += 1
                if row.data is None:
                    failures.append({"path": f"{row.file}:{row.line}", "reason": row.reason or "unreadable", "stage": "read"})
                    continue
                extra = [k for k in row.data if k not in _FIELDS]
                if extra:
                    unknown_seen.update(extra)
                    row = type(row)(row.file, row.line, {k: v for k, v in row.data.items() if k in _FIELDS}, None)
                data = dict(row.data)
                data.setdefault("source", f"{row.file}:{row.line}")
                raw_records.append((row.file, row.line, data))
            if count == 0:
                raise LoadError(f"{p}: the file holds no records")
            n_found += count
            if unknown_seen:
                warnings.append(f"{p}: columns not in the run record schema were ignored: {', '.join(sorted(unknown_seen))}")
        else:
            raise LoadError(f"{p}: neither a folder of raw runs nor a .jsonl/.csv/.parquet file")

    valid: list[dict[str, Any]] = []
    errors: list[FieldError] = []
    for file, line, data in raw_records:
        rec, errs = validate_record(data, file or data.get("source") or "?", line)
        if rec is None:
            errors.extend(errs)
            where = f"{file}:{line}" if line is not None else (data.get("source") or file or "?")
            failures.append({"path": where, "reason": "; ".join(f"field '{e.field}': {e.message}" for e in errs), "stage": "validate"})
        else:
            valid.append(rec.__dict__)
    if strict and errors:
        shown = "\n".join(str(e) for e in errors[:50])
        more = f"\n... and {len(errors) - 50} more" if len(errors) > 50 else ""
        raise LoadError(f"{len(errors)} invalid field(s) in the input:\n{shown}{more}")

    table = pl.DataFrame(valid, schema=POLARS_SCHEMA, orient="row") if valid else pl.DataFrame(schema=POLARS_SCHEMA)
    from lengthlens.correctness import find_grade_files, resolve_correctness

    files: list = [Path(g) for g in (grades or [])]
    if find_grades:
        files += find_grade_files(raw_roots)
    table, grade_warnings = resolve_correctness(table, files, run_graders=run_graders, problems=problems)
    warnings.extend(grade_warnings)

    skipped_parts = [pl.DataFrame(failures, schema=_SKIP_SCHEMA) if failures else pl.DataFrame(schema=_SKIP_SCHEMA)]
    table, sk = drop_duplicates(table)
    skipped_parts.append(sk)
    table, sk = drop_over_budget(table)
    skipped_parts.append(sk)
    warnings += finish_reason_warnings(table) + l_bar_warnings(table)
    table, sk, pair_warn = pairing_checks(table)
    skipped_parts.append(sk)
    warnings += pair_warn
    skipped = pl.concat(skipped_parts)
    return RunSet(table=table, skipped=skipped, sources=tuple(str(s) for s in sources), n_found=n_found, warnings=tuple(warnings))
