"""Read the study's own grade files (campaign/grades/<dataset>.json) into a tidy polars frame."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

#: Every verdict the study's grade files use, and whether it means the run was correct. A verdict
#: not listed here is an error: guessing would silently change accuracies.
VERDICTS: dict[str, bool] = {
    "correct": True,
    "passed": True,
    "wrong": False,
    "incorrect": False,
    "failed": False,  # the program ran and a test failed
    "error": False,  # the program raised (SyntaxError, NameError, ...): the model's fault, not the grader's
    "no_answer": False,  # no final channel, or a final channel without a code block
}

#: Columns of :func:`load_grade_file`, in order.
GRADE_FILE_COLUMNS = pl.Schema({
    "dataset": pl.String, "method": pl.String, "params": pl.String, "item_id": pl.String,
    "seed": pl.Int64, "correct": pl.Boolean, "answer": pl.String, "grader": pl.String,
    "verdict": pl.String, "detail": pl.String,
})


def load_grade_file(path: str | Path) -> pl.DataFrame:
    """One row per graded run: dataset, method, params, item_id, seed, correct, answer, grader, verdict, detail.

    ``dataset`` is the file's stem (``gsm8k.json`` -> ``gsm8k``); ``grader`` is the study's
    ``extracted_by`` (``hash_marker``, ``boxed``, ``fenced_block``, ...); ``answer`` is its extracted
    answer (null for the code datasets, which record none); ``verdict`` is the raw verdict and
    ``correct`` its meaning (:data:`VERDICTS`).
    """
    path = Path(path)
    return grade_frame(json.loads(path.read_text(encoding="utf-8")), path)


def grade_frame(data: Any, path: str | Path) -> pl.DataFrame:
    """:func:`load_grade_file` of a grade file already parsed (``data``; ``path`` names it and gives the dataset).

    Parameters
    ----------
    data
        The file's JSON: a list of runs, or ``{"runs": [...], "dataset": ...}``.
    path
        The file, for the dataset (its stem, unless ``data`` names one) and for error messages.

    Returns
    -------
    polars.DataFrame
        One row per graded run, with the columns of :data:`GRADE_FILE_COLUMNS`.

    Examples
    --------
    >>> grade_frame([{"case": 3, "method": "strict", "params": "", "seed": 0, "verdict": "correct"}],
    ...             "grades/gsm8k.json").select("dataset", "item_id", "correct").row(0)
    ('gsm8k', '3', True)
    """
    path = Path(path)
    runs = data["runs"] if isinstance(data, dict) else data
    if not isinstance(runs, list):
        raise ValueError(f"{path}: expected a list of runs (or {{'runs': [...]}}), got {type(runs).__name__}")
    dataset = data.get("dataset", path.stem) if isinstance(data, dict) else path.stem
    rows = []
    for i, r in enumerate(runs):
        try:
            verdict = str(r["verdict"])
            item, method, params, seed = r["case"], r["method"], r["params"], r["seed"]
        except KeyError as e:
            raise ValueError(f"{path}: run #{i} lacks key {e}") from None
        if verdict not in VERDICTS:
            raise ValueError(f"{path}: run #{i} ({method}/{params}/{item}/seed {seed}) has unknown verdict "
                             f"{verdict!r}; known: {sorted(VERDICTS)}")
        ans = r.get("answer")
        rows.append({
            "dataset": dataset, "method": method, "params": params, "item_id": str(item), "seed": int(seed),
            "correct": VERDICTS[verdict], "answer": None if ans is None else str(ans),
            "grader": r.get("extracted_by"), "verdict": verdict, "detail": r.get("detail"),
        })
    return pl.DataFrame(rows, schema=GRADE_FILE_COLUMNS)
