"""The serving condition of a run: the load it was served under, as one label that cells are formed within.

``serving`` is derived from the logged ``concurrency``, ``request_rate``, ``batch_size`` and ``gpu``
(:data:`~lengthlens.data.schema.SERVING_FIELDS`): ``"c=8, gpu=NVIDIA H200"``, ``"rate=4/s"``,
``"bs=16"``; ``""`` when none of them is logged (then it changes nothing: the key of every arm and
group is the same as without it, and so are the resampling draws).
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from lengthlens.data.schema import SERVING_FIELDS

__all__ = ["serving_conditions", "serving_label", "serving_sort_key", "serving_value", "with_serving"]

_TAGS = {"concurrency": "c={}", "request_rate": "rate={}/s", "batch_size": "bs={}", "gpu": "gpu={}"}


def _number(v: Any) -> str:
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:g}" if isinstance(v, float) else str(v)


def serving_label(concurrency: int | None = None, request_rate: float | None = None, batch_size: int | None = None,
                  gpu: str | None = None) -> str:
    """The serving condition's label from its logged fields ("" when none is logged).

    Examples
    --------
    >>> serving_label(concurrency=8, gpu="H100"), serving_label(request_rate=4.0), serving_label()
    ('c=8, gpu=H100', 'rate=4/s', '')
    """
    values = {"concurrency": concurrency, "request_rate": request_rate, "batch_size": batch_size, "gpu": gpu}
    parts = [_TAGS[k].format(v if k == "gpu" else _number(v)) for k, v in values.items() if v is not None and v != ""]
    return ", ".join(p.replace("=inf/s", "=inf") for p in parts)


def serving_value(label: str, field: str) -> float | None:
    """One numeric field back from a label (``serving_value("c=8, bs=16", "concurrency") == 8.0``), None if absent.

    Examples
    --------
    >>> serving_value("c=8, rate=inf", "concurrency"), serving_value("c=8, rate=inf", "request_rate")
    (8.0, inf)
    """
    head = _TAGS[field].split("=")[0] + "="
    for part in (label or "").split(", "):
        if part.startswith(head):
            return float(part[len(head):].removesuffix("/s"))
    return None


def with_serving(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` with its ``serving`` column (kept where present; ``""`` for runs that log no serving field).

    The labels are made once per distinct combination of the fields, so a large table costs one join.
    """
    if "serving" in table.columns:
        return table
    present = [f for f in SERVING_FIELDS if f in table.columns and table.get_column(f).null_count() < table.height]
    if not present:
        return table.with_columns(pl.lit("", dtype=pl.String).alias("serving"))
    combos = table.select(present).unique(maintain_order=True)
    labels = [serving_label(**dict(zip(present, row))) for row in combos.iter_rows()]
    combos = combos.with_columns(pl.Series("serving", labels, dtype=pl.String))
    return table.join(combos, on=present, how="left", nulls_equal=True, maintain_order="left")


def serving_sort_key(label: str | None) -> tuple:
    """Sort key of a serving label, lightest load first: by concurrency, request rate, batch size (as numbers, absent
    first), then GPU name, so that tables and figures list c=1, 4, 16, 64 and not c=1, 16, 4, 64.

    Parameters
    ----------
    label : a label of :func:`serving_label` ("" or None: no serving field logged).

    Returns
    -------
    tuple
        A key for ``sorted`` (labels with equal loads fall back to their text).

    Examples
    --------
    >>> sorted(["c=16", "c=4", "c=64", "c=1"], key=serving_sort_key)
    ['c=1', 'c=4', 'c=16', 'c=64']
    """
    label = label or ""
    numbers = tuple(-math.inf if (v := serving_value(label, f)) is None else v
                    for f in ("concurrency", "request_rate", "batch_size"))
    gpu = next((p[4:] for p in (label or "").split(", ") if p.startswith("gpu=")), "")
    return (*numbers, gpu, label)


def serving_conditions(labels: Any) -> list[str]:
    """The distinct serving conditions among ``labels``, lightest load first (c=2 before c=16; "" first).

    Examples
    --------
    >>> serving_conditions(["c=16", "c=2", "c=16", "c=2, gpu=A100"])
    ['c=2', 'c=2, gpu=A100', 'c=16']
    """
    return sorted({str(v) if v is not None else "" for v in labels}, key=serving_sort_key)
