"""A small clean raw tree, one damaged run of each kind, and what loading them gives (run in a worker with a time limit).

The clean tree (:func:`clean_tree`) has a strict baseline and one relaxed arm (cactus, alpha 0.3) on ten
gsm8k items, graded from their texts, with counters that differ between items so that every cell number
(l_bar, gain, lambda, R/R*, T/T*, accuracy) is informative. The *victim* is the relaxed run of
case_009: a damage kind rewrites it (or puts something next to it), and the reference is the same
tree with the victim gone, which is what a skipped run must be equivalent to.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .minitree import write_run

N_ITEMS = 10
DATASET, METHOD, PARAMS = "gsm8k", "cactus", "alpha0.3"
#: Columns of cells.csv compared between a damaged tree and its reference (every number, not only the headline).
CELL_KEY = ["target", "draft", "dataset", "method", "params"]


def run_dir(root: Path, method: str = METHOD, params: str = PARAMS, case: int = N_ITEMS - 1, seed: int = 0) -> Path:
    return root / DATASET / method / params / f"case_{case:03d}" / f"seed_{seed}"


def clean_tree(root: Path) -> Path:
    """Write the clean tree under ``root`` and return it (every run passes every plausibility rule)."""
    for method, params, alpha in (("strict", "strict", None), (METHOD, PARAMS, 0.3)):
        relaxed = alpha is not None
        for i in range(N_ITEMS):
            out = 300 + 37 * i + (41 * (i % 3) if relaxed else 0)
            rounds = 90 + 5 * i - (9 * (i % 4) if relaxed else 0)
            answer = "4" if (i + relaxed) % 3 else "5"
            d = write_run(root, DATASET, method, params, f"case_{i:03d}", 0, output_tokens=out, rounds=rounds,
                          accepted=out - rounds - 1, wall=1.0 + 0.1 * i + (0.05 * (i % 2) if relaxed else 0),
                          alpha=alpha, text=f"<think>work {i}</think>#### {answer}",
                          run_extra={"draft_tokens": float(6 * rounds)})
            cfg = json.loads((d / "config.json").read_text())
            cfg["reference_answer"] = "4"
            (d / "config.json").write_text(json.dumps(cfg))
    return root


def edit_json(path: Path, **fields: Any) -> None:
    """Set fields of a JSON file (``lossy_parameters__alpha`` sets a nested one)."""
    data = json.loads(path.read_text())
    for k, v in fields.items():
        if "__" in k:
            outer, inner = k.split("__")
            data.setdefault(outer, {})[inner] = v
        else:
            data[k] = v
    path.write_text(json.dumps(data))


def replace_with(path: Path, kind: str, target: str | None = None) -> None:
    """Replace a file by a FIFO, a folder, a symlink (to ``target``) or a symlink loop."""
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "symlink":
        path.symlink_to(target)
    elif kind == "loop":
        path.symlink_to(path.name)  # a link to itself
    else:
        raise ValueError(kind)


def deep_path(base: Path, total: int) -> Path:
    """Create folders under ``base`` until the path is longer than ``total`` bytes (past PATH_MAX), without using long paths."""
    fd = os.open(base, os.O_RDONLY)
    length = len(str(base))
    name = "d" * 200
    try:
        while length <= total:
            os.mkdir(name, dir_fd=fd)
            new = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
            length += len(name) + 1
    finally:
        os.close(fd)
    return base


def summary(sources: list[str], **options: Any) -> dict[str, Any]:
    """What loading gives, as plain data (runs in the worker): counts, skipped rows, warnings and the cells' numbers."""
    import polars as pl

    import lengthlens as ll

    runs = ll.load(*sources, **options)
    t = runs.table
    if "shared_baseline" in t.columns:
        t = t.filter(~pl.col("shared_baseline"))
    not_loaded = runs.skipped.filter(pl.col("stage") != "pairing")
    frame = ll.cells(runs, n_resamples=50).to_frame() if runs.table.filter(pl.col("paired")).height else None
    cells = [] if frame is None or frame.empty else frame.sort_values(CELL_KEY).to_dict("records")
    return {"n_found": runs.n_found, "n_loaded": t.height, "n_not_loaded": not_loaded.height,
            "skipped": [tuple(r) for r in runs.skipped.select("path", "reason", "stage").iter_rows()],
            "warnings": list(runs.warnings), "cells": cells}


def flat_rows(root: Path) -> list[dict[str, Any]]:
    """The clean tree's records as flat rows (JSON values), the victim last; ``source`` and ``text`` left out."""
    import polars as pl

    import lengthlens as ll

    t = ll.load(root).table.drop("text", "source", "paired", "shared_baseline", "grade_source", "graded_answer", strict=False)
    victim = (pl.col("method") == METHOD) & (pl.col("item_id") == f"case_{N_ITEMS - 1:03d}")
    return t.filter(~victim).to_dicts() + t.filter(victim).to_dicts()


def write_jsonl(path: Path, rows: list[dict[str, Any]], last: str | bytes | None = None) -> Path:
    """Rows as JSONL; ``last`` (text or raw bytes) replaces the last row's line."""
    lines = [json.dumps(r).encode() for r in rows]
    if last is not None:
        lines[-1] = last if isinstance(last, bytes) else last.encode()
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path
