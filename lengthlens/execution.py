"""How independent pieces of work run: one after another, in spawned worker processes, or on threads.

The one place that knows about process pools and thread limits. Results come back in the order of
the inputs; BLAS is held to one thread in every worker and in the calling process, because
OpenBLAS's products differ in the last bit with its thread count and the numbers must not depend on
the machine or on ``workers``.

Workers are spawned, not forked: a forked child inherits polars' and OpenBLAS's thread pools in
whatever state they were, which can deadlock. A spawned worker imports what the work needs, so the
function must be importable (a module-level function) and its inputs picklable; where the main script
cannot be re-imported (a script read from stdin), the work runs here, one after another.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SCRATCH_MAX", "WORKERS_ENV", "iter_ordered", "map_ordered", "one_blas_thread", "resolve_workers", "scratch"]

T = TypeVar("T")
R = TypeVar("R")

#: Environment variable that sets the default number of workers.
WORKERS_ENV = "LENGTHLENS_WORKERS"
#: Thread counts a worker process starts with (read when it first imports numpy or polars).
_ONE_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "POLARS_MAX_THREADS")


def resolve_workers(workers: int | None) -> int:
    """Workers: ``workers``, else $LENGTHLENS_WORKERS, else the cores this process may use (at most 8).

    Examples
    --------
    >>> resolve_workers(3)
    3
    """
    if workers is not None:
        if int(workers) < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        return int(workers)
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"{WORKERS_ENV} must be a whole number of at least 1, not {env!r}")
        return int(env)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def one_blas_thread() -> AbstractContextManager:
    """BLAS held to one thread while the context lasts (restored after)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


#: The largest buffer :func:`scratch` keeps (numbers).
SCRATCH_MAX = 1 << 22

_scratch = threading.local()


def scratch(size: int) -> np.ndarray:
    """A float64 buffer of at least ``size`` numbers, this thread's, kept between calls up to 2^22 numbers (32 MB).

    For work arrays filled before each use (the count-matrix product's converted counts): a fresh large array
    costs its page faults at every use.

    Parameters
    ----------
    size : numbers needed.

    Returns
    -------
    numpy.ndarray
        A 1-d float64 array of at least ``size`` numbers, its contents undefined.

    Examples
    --------
    >>> scratch(10).size >= 10
    True
    """
    import numpy as np

    buf = getattr(_scratch, "buffer", None)
    if buf is None or buf.size < size:
        buf = np.empty(size)
        if size <= SCRATCH_MAX:
            _scratch.buffer = buf
    return buf


def _can_spawn() -> bool:
    """Whether spawned workers can start: they re-import the main script, which a script read from stdin has not on disk."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path is None or os.path.exists(path)


def _worker_start() -> None:
    for name in _ONE_THREAD_ENV:
        os.environ[name] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def map_ordered(fn: Callable[[T], R], items: Iterable[T], *, workers: int = 1, cost: Callable[[T], float] | None = None,
                threads: bool = False) -> list[R]:
    """``[fn(x) for x in items]``, computed by ``workers`` spawned processes (or threads), in the order of ``items``.

    Parameters
    ----------
    fn : a module-level function (it crosses to the worker processes by name).
    items : its inputs (picklable).
    workers : processes (or threads) at once; 1 runs the plain loop here.
    cost : a rough size of each item's work: the largest start first, so that none is left running alone at the end.
    threads : threads instead of processes, for work that waits (subprocesses, files) rather than computes.

    Returns
    -------
    list
        The results, in the order of ``items``. The first exception raised by ``fn`` is raised here.

    Examples
    --------
    >>> map_ordered(abs, [-2, 1, -3])
    [2, 1, 3]
    """
    items = list(items)
    n = min(max(1, int(workers)), len(items))
    if n <= 1 or (not threads and not _can_spawn()):
        with one_blas_thread():
            return [fn(x) for x in items]
    order = sorted(range(len(items)), key=lambda i: -cost(items[i])) if cost is not None else list(range(len(items)))
    if threads:
        from concurrent.futures import ThreadPoolExecutor

        with one_blas_thread(), ThreadPoolExecutor(max_workers=n, thread_name_prefix="lengthlens") as pool:
            futures = {i: pool.submit(fn, items[i]) for i in order}
            return [futures[i].result() for i in range(len(items))]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_start) as pool:
        futures = {i: pool.submit(fn, items[i]) for i in order}
        return [futures[i].result() for i in range(len(items))]


def iter_ordered(fn: Callable[[T], R], items: Iterable[T], *, workers: int = 1) -> Iterator[R]:
    """:func:`map_ordered` that yields each result as soon as it and those before it are done (for progress bars).

    Examples
    --------
    >>> list(iter_ordered(abs, [-1, 2]))
    [1, 2]
    """
    items = list(items)
    n = min(max(1, int(workers)), len(items))
    if n <= 1 or not _can_spawn():
        with one_blas_thread():
            for x in items:
                yield fn(x)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_start) as pool:
        yield from pool.map(fn, items)
