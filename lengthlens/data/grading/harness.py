"""Evaluation harnesses' per-sample verdicts as a generic grades file (:mod:`lengthlens.data.grading.generic`).

lm-evaluation-harness (``lm_eval ... --log_samples``) writes ``samples_<task>_<date>.jsonl``: one line per
document and filter with ``doc_id`` (the document's index in the task's split, the same for every model
run on the task), ``filter`` (``none``, ``strict-match``, ``flexible-extract``, ...), ``metrics`` (the
names of the task's metrics) and each metric's value on that document (``exact_match`` 1.0 / 0.0,
``acc``, ...). It keeps no engine counters; the runs themselves come from the serving logs of the same
requests (a vLLM server's responses, a recording proxy, AIPerf), whose ``item_id`` must then be the
``doc_id``. :func:`lm_eval_grades` turns one samples file into ``item_id, correct`` rows with the arm's
columns; ``lengthlens grades lm-eval SAMPLES --arm method=... --out grades.csv`` writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

#: The metrics read as a verdict when none is named, in this order (each 1 = correct, 0 = not).
VERDICT_METRICS = ("exact_match", "acc", "pass@1", "acc_norm", "em")


def lm_eval_grades(path: str | Path, *, metric: str | None = None, filter: str | None = None,  # noqa: A002
                   arm: dict[str, Any] | None = None) -> pd.DataFrame:
    """Verdicts of an lm-eval ``--log_samples`` file keyed by ``doc_id``, as a generic grades table.

    Parameters
    ----------
    path : a ``samples_<task>_<date>.jsonl`` file.
    metric : the metric that decides (default: the first of :data:`VERDICT_METRICS` the file has).
    filter : the filter whose answers count (default: the file's only filter; required when it has several,
        such as gsm8k's ``strict-match`` and ``flexible-extract``).
    arm : columns every row gets (``method``, ``params``, ``dataset``, ...), so the file grades one arm's runs.

    Returns
    -------
    pandas.DataFrame with the arm's columns, ``item_id`` (the ``doc_id``), ``seed`` (0) and ``correct``.
    ValueError naming the line of an entry whose metric is not 0 or 1.

    Examples
    --------
    >>> import tempfile, pathlib, json
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "samples_arith.jsonl"
    >>> _ = f.write_text("".join(json.dumps({"doc_id": i, "filter": "none", "metrics": ["exact_match"],
    ...                                      "exact_match": float(i % 2)}) + "\\n" for i in range(3)))
    >>> lm_eval_grades(f, arm={"method": "fly"})[["method", "item_id", "correct"]].values.tolist()
    [['fly', '0', False], ['fly', '1', True], ['fly', '2', False]]
    """
    from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, iter_lines

    path = Path(path)
    rows = []
    try:  # read as every input is: a regular file, each line under the size cap, gzip decompressed, a BOM dropped
        for lineno, raw, bad in iter_lines(path):
            if bad is not None:
                raise ValueError(f"{path}:{lineno}: {bad}")
            if raw.strip():
                try:
                    rows.append((lineno, decode_json(raw)))
                except JSONProblem as exc:
                    raise ValueError(f"{path}:{lineno}: " + (f"field '{exc.field}': " if exc.field else "")
                                     + exc.reason) from None
    except UnreadableFile as exc:
        raise ValueError(f"{path}: {exc}") from None
    bad_row = next((n for n, r in rows if not isinstance(r, dict)), None)
    if bad_row is not None:
        raise ValueError(f"{path}:{bad_row}: expected a JSON object (one sample per line)")
    if not rows:
        raise ValueError(f"{path}: no samples")
    filters = sorted({str(r.get("filter", "none")) for _, r in rows})
    if filter is None:
        if len(filters) > 1:
            raise ValueError(f"{path}: the samples have several filters ({', '.join(filters)}): name one (filter=)")
        filter = filters[0]  # noqa: A001
    elif filter not in filters:
        raise ValueError(f"{path}: no samples with filter {filter!r} (the file has {', '.join(filters)})")
    rows = [(n, r) for n, r in rows if str(r.get("filter", "none")) == filter]
    if metric is None:
        have = {m for _, r in rows for m in (r.get("metrics") or [k for k in r if k in VERDICT_METRICS])}
        metric = next((m for m in VERDICT_METRICS if m in have), None)
        if metric is None:
            raise ValueError(f"{path}: none of the metrics {', '.join(VERDICT_METRICS)} in the samples: name one (metric=)")
    out = []
    for n, r in rows:
        if "doc_id" not in r:
            raise ValueError(f"{path}:{n}: no doc_id")
        v = r.get(metric)
        if isinstance(v, bool) or v not in (0, 1):
            raise ValueError(f"{path}:{n}: metric {metric!r} is {v!r}, not 0 or 1")
        out.append({**(arm or {}), "item_id": str(r["doc_id"]), "seed": 0, "correct": bool(v)})
    return pd.DataFrame(out)
