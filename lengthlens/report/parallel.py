"""Render the report's figures to SVG over several cores: forked worker processes, with a serial fallback.

:func:`run_forked` (a part here, the others in forked children) also prints the PDF's parts
(:mod:`lengthlens.report.print_parallel`).

Each job is ``(key, make, weight, pinned)``: ``make()`` returns a matplotlib Figure, ``weight`` its rough cost,
``pinned`` keeps it in this process (e.g. a figure that runs polars, whose thread pool a forked child must not
use). The jobs are split into balanced parts; this process renders the first part while forked children
render the others, and the SVG strings come back through the pool. The SVG of a figure does not depend on
the process that writes it (ids are content hashes, see :func:`~lengthlens.report.plot_style.to_svg`), so the
result is the same, byte for byte, whatever the worker count. Where ``fork`` is not available, with one
worker, or on any failure of the pool (a child that dies, raises or does not answer within ``timeout``),
the parts not received are rendered here, one after the other.

Fork, unlike the analysis' spawned workers (:mod:`lengthlens.stats.parallel`): a forked child starts at once
with matplotlib imported and the analysis in memory (nothing to pickle), and its jobs use no polars, whose
thread pool is what makes fork unsafe there. The worker count defaults to the analysis' (``$LENGTHLENS_WORKERS``).
"""

from __future__ import annotations

import gc
import multiprocessing
import warnings
from collections.abc import Callable
from typing import Any

Job = tuple[str, Callable[[], Any], float, bool]

#: The parts of the forked run in progress and the function run on each: set before the pool forks, so that
#: children inherit them (closures over the analysis need no pickling) and receive only a part's index.
_JOBS: list[Any] = []
_RUN: Callable[[Any], Any] | None = None


def default_workers() -> int:
    """The analysis' default (:func:`lengthlens.stats.parallel.default_workers`): ``$LENGTHLENS_WORKERS``, else the
    cores this process may use (at most 8)."""
    from lengthlens.stats.parallel import default_workers as analysis_default

    return analysis_default()


def balanced_parts(jobs: list[Job], n: int) -> list[list[Job]]:
    """``n`` parts of about equal weight (heaviest job first onto the lightest part); pinned jobs go to part 0.
    Within a part, jobs keep their given order. Empty parts are dropped (part 0 is kept)."""
    n = max(1, min(n, len(jobs)))
    parts: list[list[int]] = [[] for _ in range(n)]
    load = [0.0] * n
    for i, job in enumerate(jobs):
        if job[3]:
            parts[0].append(i)
            load[0] += job[2]
    for i in sorted((i for i, j in enumerate(jobs) if not j[3]), key=lambda i: (-jobs[i][2], i)):
        k = min(range(n), key=lambda k: (load[k], k))
        parts[k].append(i)
        load[k] += jobs[i][2]
    return [[jobs[i] for i in sorted(p)] for k, p in enumerate(parts) if p or k == 0]


def _render(part: list[Job]) -> list[tuple[str, str]]:
    """The part's SVGs, with the cyclic garbage collector paused: each figure is a web of reference cycles
    that it would otherwise walk, with everything else the process holds, again and again (10-20 % of the time)."""
    from lengthlens.report.plot_style import to_svg

    paused = gc.isenabled()
    gc.disable()
    try:
        return [(key, to_svg(make())) for key, make, _w, _p in part]
    finally:
        if paused:
            gc.enable()


def render_svgs(jobs: list[Job], workers: int | None = None, *, timeout: float = 120.0) -> dict[str, str]:
    """``{key: svg}`` in the jobs' order, rendered by up to ``workers`` processes (default :func:`default_workers`)."""
    parts = balanced_parts(jobs, default_workers() if workers is None else workers)
    done: dict[str, str] = {}
    if len(parts) > 1 and can_fork():
        for got in run_forked(parts, _render, timeout).values():
            done.update(got)
    for part in parts:  # this process's part, or everything a child did not deliver
        if any(key not in done for key, *_ in part):
            done.update(_render([j for j in part if j[0] not in done]))
    return {key: done[key] for key, *_ in jobs}


def can_fork() -> bool:
    """Whether this platform has the ``fork`` start method (not Windows; macOS has it)."""
    return "fork" in multiprocessing.get_all_start_methods()


def _run_child(k: int) -> Any:
    assert _RUN is not None
    return _RUN(_JOBS[k])


def run_forked(parts: list[Any], run: Callable[[Any], Any], timeout: float) -> dict[int, Any]:
    """``{k: run(parts[k])}``: ``parts[1:]`` in forked children while this process runs ``parts[0]``.

    On any failure (a child that dies, raises or does not answer within ``timeout``, or an error here) the
    children are stopped and what arrived is returned: the caller runs the missing parts itself, so that an
    error is raised where it happens, in this process.
    """
    global _JOBS, _RUN
    from concurrent.futures import ProcessPoolExecutor

    done: dict[int, Any] = {}
    _JOBS, _RUN = parts, run
    pool = None
    try:
        pool = ProcessPoolExecutor(len(parts) - 1, mp_context=multiprocessing.get_context("fork"))
        with warnings.catch_warnings():
            # Python >= 3.12 warns on any fork of a process with threads (polars', BLAS'): the children here
            # use neither polars nor locks those threads hold, and a child that hangs is given up after ``timeout``.
            warnings.filterwarnings("ignore", message=r".*multi-threaded, use of fork\(\) may lead to deadlocks",
                                    category=DeprecationWarning)
            futures = {k: pool.submit(_run_child, k) for k in range(1, len(parts))}
        done[0] = run(parts[0])
        for k, f in futures.items():
            done[k] = f.result(timeout)
    except Exception:  # noqa: BLE001 - a child that died, raised or hangs: the caller runs what is missing
        if pool is not None:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
    finally:
        _JOBS, _RUN = [], None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return done
