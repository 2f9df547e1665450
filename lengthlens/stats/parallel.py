"""Run independent per-group computations on several cores, with the same numbers as one after another.

Each (target, draft, dataset) group's intervals depend only on its own runs and on draws fixed by
the seed and the group's names, so groups can be computed in any order: results come back in the
order given, bit for bit those of a plain loop. Threads suffice because the work is numpy (ufunc
loops, sorting, matrix products) and polars, which release the GIL; BLAS is held to one thread,
since a second level of threads on the same cores only adds contention (and changes last bits).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Environment variable that sets the default number of workers (e.g. 1 to run serially).
WORKERS_ENV = "LENGTHLENS_WORKERS"


def default_workers() -> int:
    """Workers when none are asked for: $LENGTHLENS_WORKERS, else the cores this process may use (at most 8)."""
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"{WORKERS_ENV} must be a whole number, not {env!r}") from None
        if n < 1:
            raise ValueError(f"{WORKERS_ENV} must be at least 1, not {n}")
        return n
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def resolve_workers(workers: int | None) -> int:
    """``workers`` checked, or the default when None."""
    if workers is None:
        return default_workers()
    if int(workers) < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    return int(workers)


def _one_blas_thread():
    """BLAS held to one thread for the pool's lifetime (restored after)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def map_ordered(fn: Callable[[T], R], items: Iterable[T], workers: int | None = None,
                cost: Callable[[T], float] | None = None) -> list[R]:
    """``[fn(x) for x in items]``, computed on ``workers`` threads (default :func:`default_workers`).

    ``cost`` (a rough size of each item's work) starts the largest items first, so that no big one
    is left running alone at the end; results keep the order of ``items`` either way. With one
    worker (or one item) it is that plain loop. BLAS runs on one thread either way: OpenBLAS's
    products differ in the last bit with its thread count, and the numbers must not depend on the
    cores of the machine or on ``workers``. The first exception raised by ``fn`` (in start order)
    is raised here, after the pool has stopped.
    """
    items = list(items)
    n = min(resolve_workers(workers), len(items))
    if n <= 1:
        with _one_blas_thread():
            return [fn(x) for x in items]
    order = sorted(range(len(items)), key=lambda i: -cost(items[i])) if cost is not None else range(len(items))
    with _one_blas_thread(), ThreadPoolExecutor(max_workers=n, thread_name_prefix="lengthlens") as pool:
        futures = {i: pool.submit(fn, items[i]) for i in order}
        try:
            done = {i: futures[i].result() for i in order}
        except BaseException:
            for f in futures.values():  # stop what has not started; the pool waits for what has
                f.cancel()
            raise
    return [done[i] for i in range(len(items))]
