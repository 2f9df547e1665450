"""Regression snapshots of cell numbers: save them once, then check that a new run of the analysis reproduces them.

``lengthlens snapshot RUNS -o expected.json`` stores every number of every cell (cells.csv) with the
settings that produced it; ``lengthlens check RUNS --against expected.json`` recomputes the cells with
those settings and names every number that moved beyond its tolerance:

* deterministic quantities (point estimates, counts, flags) must match exactly, up to floating-point
  rounding (relative 1e-9, so a different BLAS or summation order does not fail a check);
* resampled quantities (interval limits, ``*_lo``/``*_hi``) may move by ``RESAMPLE_Z`` Monte-Carlo
  standard errors of a bootstrap percentile, derived from the interval's width: for a sampling
  distribution of spread s, interval width w = 2 z s (z the normal quantile of the confidence
  level), and the percentile at p = (1 - level)/2 estimated from B resamples has standard error
  s * sqrt(p (1 - p) / B) / phi(z). For a skewed interval the spread of a limit's side is taken
  from that side (twice the point-to-limit distance) when it is the larger. The normal approximation
  is rough for cells with few items and lumpy bootstrap distributions: on the example (12-16 items
  per cell) a changed seed moved about 1 limit in 2,000 beyond it. ``check`` uses the snapshot's
  seed and resample count by default, which reproduces every limit exactly. With the same seed and B the limits are reproduced exactly;
  the tolerance is what a change of seed, platform or resample count may legitimately move them.
  Statistics on a lattice (accuracy differences, steps of 100/n points) get one step more.

A snapshot is plain JSON (one object per cell, keyed by target, draft, dataset, method, params and,
where one is logged, the serving condition) so
that a diff of two snapshots is readable in review.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from lengthlens._version import __version__

__all__ = ["CheckResult", "Difference", "check", "load_snapshot", "resample_tolerance", "save_snapshot", "snapshot"]

SNAPSHOT_FORMAT = 1
KEY = ("target", "draft", "dataset", "method", "params", "serving")
#: Relative tolerance of "exact" (deterministic) numbers: floating-point rounding only.
EXACT_REL = 1e-9
#: Monte-Carlo standard errors a resampled limit may move. Two runs differ by sqrt(2) SE in sd, so 6 SE is
#: ~4.2 sd of the difference: a correct re-run of 1,000 limits fails with ~3% chance even if the normal
#: approximation is off in the tails (few items, skewed ratios), and a real change of a few percent of
#: an interval's width is still caught.
RESAMPLE_Z = 6.0
_SETTINGS = ("n_resamples", "seed", "ci", "confidence_level")
#: Interval stems of statistics on a lattice: one lattice step is added to their tolerance, since a
#: percentile of a discrete bootstrap distribution jumps a whole step when the seed changes
#: (accuracy difference on n graded pairs moves in steps of 100/n points).
LATTICE_STEP = {"accuracy_delta": lambda row: 100.0 / row["n_graded"] if row.get("n_graded") else 0.0}


def resample_tolerance(width: float, n_resamples: int, confidence_level: float = 0.95) -> float:
    """How far a bootstrap percentile limit may move between runs: RESAMPLE_Z Monte-Carlo standard errors (module docstring).

    ``width`` is twice the distance that sets the spread: the interval's width, or for one limit of a
    skewed interval twice the distance from the point estimate to that limit (see :func:`snapshot`).
    """
    if width is None or not math.isfinite(width) or n_resamples <= 0:
        return math.inf if width is not None and math.isinf(width) else 0.0
    p = (1.0 - confidence_level) / 2.0
    z = float(special.ndtri(1.0 - p))  # the normal quantile, as scipy.stats.norm.ppf
    spread = abs(width) / (2.0 * z)
    se = spread * math.sqrt(p * (1.0 - p) / n_resamples) / (math.exp(-z * z / 2.0) / math.sqrt(2.0 * math.pi))  # normal density at z
    return RESAMPLE_Z * se


def _point_columns() -> dict[str, str]:
    """Interval stem -> point-estimate column (accuracy_delta -> accuracy_delta_pp)."""
    from lengthlens.stats.metrics import METRICS

    return {m.stem: m.name for m in METRICS}


_POINT_OF = _point_columns()


def _is_resampled(col: str) -> bool:
    """Interval limits and the count of undefined resamples move with the draws; everything else is exact."""
    return col.endswith(("_lo", "_hi")) or col == "undefined_resamples"


def _clean(v: Any) -> Any:
    """A JSON-safe scalar (NaN/inf -> None / strings, numpy -> Python)."""
    if v is None:
        return None
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, (pd.Timestamp,)):
        return v.isoformat()
    return v if isinstance(v, (int, str)) else str(v)


def _num(v: Any) -> Any:
    if v == "inf":
        return math.inf
    if v == "-inf":
        return -math.inf
    return v


def _cells_and_settings(obj: Any, settings: Mapping[str, Any] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Cells frame and bootstrap settings from an Analysis, a CellTable, a RunSet (cells computed) or a cells DataFrame."""
    from lengthlens.analyses.cells import CellTable
    from lengthlens.data.loading import RunSet

    settings = dict(settings or {})
    if isinstance(obj, RunSet):
        from lengthlens.analyses.cells import cells as compute_cells
        from lengthlens.stats.resample import (
            DEFAULT_CONFIDENCE,
            DEFAULT_N_RESAMPLES,
            DEFAULT_SEED,
        )

        kw = {"n_resamples": int(settings.get("n_resamples") or DEFAULT_N_RESAMPLES),
              "seed": int(settings["seed"]) if settings.get("seed") is not None else DEFAULT_SEED,
              "ci": settings.get("ci") or "studentized",
              "confidence_level": float(settings.get("confidence_level") or DEFAULT_CONFIDENCE)}
        obj = compute_cells(obj, **kw)
    if isinstance(obj, CellTable):
        return obj.to_frame(), {"n_resamples": obj.n_resamples, "seed": obj.seed, "ci": obj.ci_method,
                                "confidence_level": obj.confidence_level}
    if hasattr(obj, "tables") and hasattr(obj, "settings"):  # an Analysis
        return obj.tables["cells"], {k: obj.settings.get(k) for k in _SETTINGS}
    if isinstance(obj, pd.DataFrame):
        return obj, {k: settings.get(k) for k in _SETTINGS}
    raise TypeError(f"cannot snapshot a {type(obj).__name__}: give an Analysis, a CellTable, a RunSet or a cells DataFrame")


def _key(row: Mapping[str, Any]) -> str:
    # An empty serving condition names nothing: a cell's key is then the one snapshots had before serving existed.
    return " / ".join(str(row.get(k)) for k in KEY if k != "serving" or row.get(k))


def snapshot(obj: Any, *, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The cell numbers of ``obj`` as a JSON-ready dict: settings, and per cell its values and the tolerance of resampled ones."""
    df, st = _cells_and_settings(obj, settings)
    n_res = int(st.get("n_resamples") or 0)
    level = float(st.get("confidence_level") or 0.95)
    cells = []
    for row in df.to_dict("records"):
        values = {c: _clean(v) for c, v in row.items() if c not in KEY}
        tol = {}
        for c in values:
            if c == "undefined_resamples":
                if values[c] is None or not n_res:
                    tol[c] = 0.0
                    continue
                # A count of resamples: binomial Monte-Carlo variation between seeds (RESAMPLE_Z SDs, plus 1).
                v = float(values[c])
                tol[c] = _clean(RESAMPLE_Z * math.sqrt(v * (1.0 - v / n_res)) + 1.0)
            elif _is_resampled(c):
                stem, side = c[:-3], c[-2:]
                lo, hi = row.get(f"{stem}_lo"), row.get(f"{stem}_hi")
                point = row.get(_POINT_OF.get(stem, stem))
                if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
                    tol[c] = 0.0
                    continue
                width = hi - lo
                if point is not None and not pd.isna(point) and lo <= point <= hi:
                    # A skewed interval has its long side where the bootstrap density is thin: use that side's
                    # distance (doubled) when it exceeds half the width.
                    width = max(width, 2.0 * ((point - lo) if side == "lo" else (hi - point)))
                t = resample_tolerance(float(width), n_res, level)
                t += LATTICE_STEP.get(stem, lambda _r: 0.0)(row)
                tol[c] = _clean(t)
        key = {k: _clean(row.get(k)) for k in KEY if k != "serving" or row.get(k)}
        cells.append({"key": key, "values": values, "tolerance": tol})
    cells.sort(key=lambda c: _key(c["key"]))
    return {
        "lengthlens_snapshot": SNAPSHOT_FORMAT,
        "lengthlens": __version__,
        "settings": {k: _clean(v) for k, v in st.items()},
        "exact_rel_tol": EXACT_REL,
        "resample_z": RESAMPLE_Z,
        "key": [k for k in KEY if k != "serving" or any("serving" in c["key"] for c in cells)],
        "cells": cells,
    }


def save_snapshot(obj: Any, path: str | Path, *, settings: Mapping[str, Any] | None = None) -> Path:
    """Write :func:`snapshot` of ``obj`` to ``path`` (indented JSON, sorted cells); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(snapshot(obj, settings=settings), indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def load_snapshot(path: str | Path) -> dict[str, Any]:
    """Read a snapshot file (checks its format)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("lengthlens_snapshot") != SNAPSHOT_FORMAT:
        raise ValueError(f"{path}: not a lengthlens snapshot (format {data.get('lengthlens_snapshot')!r})")
    return data


@dataclass(frozen=True)
class Difference:
    """One number (or cell) that does not match its snapshot."""

    cell: str
    column: str
    expected: Any
    actual: Any
    tolerance: float | None
    kind: str  # "moved", "missing cell", "new cell", "missing column"

    def __str__(self) -> str:
        if self.kind in ("missing cell", "new cell"):
            return f"{self.cell}: {self.kind}"
        if self.kind == "missing column":
            return f"{self.cell}: {self.column} missing (expected {self.expected!r})"
        tol = "exact" if not self.tolerance else f"tolerance {self.tolerance:.3g}"
        delta = ""
        if isinstance(self.expected, (int, float)) and isinstance(self.actual, (int, float)) \
                and not isinstance(self.expected, bool) and not isinstance(self.actual, bool):
            delta = f", moved {self.actual - self.expected:+.6g}"
        return f"{self.cell}: {self.column} = {self.actual!r}, expected {self.expected!r} ({tol}{delta})"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of :func:`check`: every difference, plus notes that do not fail a check (new columns, settings)."""

    differences: tuple[Difference, ...]
    n_cells: int
    n_numbers: int
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.differences

    def __bool__(self) -> bool:
        return self.ok

    def report(self, limit: int | None = None) -> str:
        """Human-readable lines: a summary, then every difference (or the first ``limit``)."""
        head = (f"{self.n_numbers} numbers in {self.n_cells} cells match the snapshot" if self.ok else
                f"{len(self.differences)} of {self.n_numbers} numbers in {self.n_cells} cells moved beyond tolerance:")
        lines = [head]
        diffs = self.differences if limit is None else self.differences[:limit]
        lines += [f"  {d}" for d in diffs]
        if limit is not None and len(self.differences) > limit:
            lines.append(f"  ... {len(self.differences) - limit} more")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()

    def _repr_html_(self) -> str:
        import html

        return "<pre>" + html.escape(self.report(limit=200)) + "</pre>"


#: Columns listing metrics (``name`` or ``name: reason`` entries) and their separators.
_METRIC_LISTS = {"percentile_fallback": ",", "interval_fallback": "; "}


def _equal_exact(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = _num(a), _num(b)
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= EXACT_REL * max(abs(a), abs(b)) or a == b
    return a == b


def check(obj: Any, expected: Mapping[str, Any] | str | Path) -> CheckResult:
    """Compare the cells of ``obj`` (a RunSet is analysed with the snapshot's settings) with a snapshot; list what moved."""
    exp = load_snapshot(expected) if isinstance(expected, (str, Path)) else expected
    actual = snapshot(obj, settings=exp.get("settings"))
    notes = []
    for k in _SETTINGS:
        a, e = actual["settings"].get(k), exp["settings"].get(k)
        if a is not None and e is not None and a != e:
            notes.append(f"setting {k} is {a!r}, the snapshot used {e!r}")
    got = {_key(c["key"]): c for c in actual["cells"]}
    want = {_key(c["key"]): c for c in exp["cells"]}
    diffs: list[Difference] = []
    n_numbers = 0
    new_cols: set[str] = set()
    for key, wc in want.items():
        gc = got.get(key)
        if gc is None:
            diffs.append(Difference(key, "", None, None, None, "missing cell"))
            continue
        for col, ev in wc["values"].items():
            n_numbers += 1
            if col not in gc["values"]:
                diffs.append(Difference(key, col, ev, None, None, "missing column"))
                continue
            av = gc["values"][col]
            if col in _METRIC_LISTS and isinstance(av, str):
                # A metric added since the snapshot is not checked, so neither is its entry in these lists.
                sep = _METRIC_LISTS[col]
                av = sep.join(e for e in av.split(sep) if e.split(":", 1)[0] in wc["values"]) or None
            if _is_resampled(col):
                tol = _num(wc.get("tolerance", {}).get(col) or 0.0)
                if ev is None or av is None:
                    ok = ev is None and av is None
                else:
                    ea, aa = _num(ev), _num(av)
                    ok = _equal_exact(ea, aa) or (math.isfinite(ea) and math.isfinite(aa) and abs(aa - ea) <= tol)
                if not ok:
                    diffs.append(Difference(key, col, ev, av, tol, "moved"))
            elif not _equal_exact(ev, av):
                diffs.append(Difference(key, col, ev, av, 0.0, "moved"))
        new_cols |= set(gc["values"]) - set(wc["values"])
    for key in sorted(set(got) - set(want)):
        diffs.append(Difference(key, "", None, None, None, "new cell"))
    if new_cols:
        notes.append(f"columns not in the snapshot (not checked): {', '.join(sorted(new_cols))}")
    return CheckResult(differences=tuple(diffs), n_cells=len(want), n_numbers=n_numbers, notes=tuple(notes))


# --- command line ------------------------------------------------------------------------------
