"""Readers for log formats other than lengthlens' own (the raw folder layout and flat record files).

A reader turns one path (a file or a folder, as the format has it) into run-record mappings; the
loader then validates them exactly like flat-file rows, resolves correctness and pairs them. To
add a format:

1. write a module in ``lengthlens/data/readers/`` with a function ``read(path: Path, **options) -> ReadResult``
   that yields one mapping per run (per turn for multi-turn logs) with the fields of
   :class:`lengthlens.data.schema.RunRecord` (leave out what the format does not log: every
   metric is computed where its inputs exist), one failure per unreadable line naming file and
   line, and warnings for anything the reader had to assume;
2. add it to :data:`BUILTIN` (name -> ``"module:function"``), or call :func:`register` at run time;
3. test it against a plain computation from the files (see ``tests/core/test_specbench.py``).

``lengthlens report --format NAME`` and ``lengthlens import NAME`` then work with it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

#: (file, line or None, record fields) of one run, as the readers return them.
Record = tuple[str, int | None, dict[str, Any]]


@dataclass(frozen=True)
class ReadResult:
    """What a reader found: records to validate, failures (path, reason, stage='read'), warnings, runs found."""

    records: list[Record]
    failures: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    n_found: int = 0


ReadFn = Callable[..., ReadResult]

#: Built-in readers, imported when first used (docs/readers.md describes each: fields, metrics, assumptions).
BUILTIN: dict[str, str] = {
    "specbench": "lengthlens.data.readers.specbench:read",
    "vllm": "lengthlens.data.readers.vllm_records:read",
    "sglang": "lengthlens.data.readers.sglang:read",
    "aiperf": "lengthlens.data.readers.aiperf:read",
    "vllm-bench": "lengthlens.data.readers.vllm_bench:read",
    "inspect": "lengthlens.data.readers.inspect_log:read",
}
_REGISTERED: dict[str, ReadFn] = {}


def register(name: str, read: ReadFn) -> None:
    """Make ``read`` available as format ``name`` (``lengthlens.load(..., format=name)``)."""
    _REGISTERED[name] = read


def names() -> list[str]:
    """Every known format name."""
    return sorted({*BUILTIN, *_REGISTERED})


def reader(name: str) -> ReadFn:
    """The read function of a format; ValueError naming the known ones for any other name.

    The function returned refuses, with a ValueError naming them, options its format does not take
    (``--questions`` given to the vLLM reader), instead of a TypeError from deep inside.
    """
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in BUILTIN:
        raise ValueError(f"unknown log format {name!r}; known: {', '.join(names())}")
    module, fn = BUILTIN[name].split(":")
    return _checked(name, getattr(importlib.import_module(module), fn))


def _checked(name: str, read: ReadFn) -> ReadFn:
    params = inspect.signature(read).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    known = [k for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]

    @functools.wraps(read)
    def call(path, **options):
        bad = [] if takes_any else sorted(set(options) - set(known))
        if bad:
            raise ValueError(f"the {name} reader takes no option {', '.join(bad)} (it takes: {', '.join(known) or 'none'})")
        return read(path, **options)

    return call
