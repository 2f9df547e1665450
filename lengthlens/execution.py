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

import itertools
import os
import pickle
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SCRATCH_MAX", "WORKERS_ENV", "Pool", "Started", "iter_ordered", "map_ordered", "one_blas_thread",
           "resolve_workers", "scratch"]

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


def _spawned(n: int):
    """A process pool of ``n`` spawned workers, each held to one BLAS thread (:func:`_worker_start`)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_start)


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
    with _spawned(n) as pool:
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
    with _spawned(n) as pool:
        yield from pool.map(fn, items)


#: The object :meth:`Pool.map` shares with every item, as unpickled in this worker process (token, object).
_SHARED: list = [None, None]
_TOKENS = itertools.count()


def _nothing() -> None:
    return None


def _call_shared(token: str, blob: bytes, fn: Callable, item: object) -> object:
    """``fn(shared, item)`` in a worker, the shared object unpickled once per :meth:`Pool.map` call and process."""
    if _SHARED[0] != token:
        _SHARED[:] = [token, pickle.loads(blob)]
    return fn(_SHARED[1], item)


class Pool:
    """Spawned worker processes that share a list of work with the calling process, started before the work is known.

    ``Pool(workers)`` spawns ``workers - 1`` processes (none for 1, nor where spawned workers cannot start), each
    running ``warm`` (imports, caches) at once, so that their start is paid while the caller is still busy with
    something else (the report's figure workers start while the analysis runs). :meth:`map` then computes a list
    on the workers and on the calling process together.

    Examples
    --------
    >>> with Pool(1) as pool:
    ...     pool.map(pow, [1, 2, 3], shared=2)
    [2, 4, 8]
    """

    def __init__(self, workers: int = 1, *, warm: Callable[[], object] | None = None) -> None:
        self.workers = max(1, int(workers))
        #: Worker processes started (0: everything runs in the calling process).
        self.spawned = 0
        self._executor = None
        if self.workers > 1 and _can_spawn():
            self._executor = _spawned(self.workers - 1)
            for _ in range(self.workers - 1):  # each submission past the idle workers spawns one more
                self._executor.submit(warm or _nothing)
            self.spawned = self.workers - 1

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (what they have not started is dropped)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
            self.spawned = 0

    def map(self, fn: Callable[[object, T], R], items: Iterable[T], *, shared: object = None,
            cost: Callable[[T], float] | None = None) -> list[R]:
        """``[fn(shared, x) for x in items]``, on the workers and this process at once, in the order of ``items``.

        Each process takes the next item as it finishes one (the largest ``cost`` first), so that none is left
        with a large item at the end; ``shared`` (picklable) crosses to each worker once per call, not per item.

        Parameters
        ----------
        fn : a module-level function of ``(shared, item)`` (it crosses to the worker processes by name).
        items : its inputs (picklable).
        shared : what every item needs (e.g. the tables the figures read).
        cost : a rough size of each item's work.

        Returns
        -------
        list
            The results, in the order of ``items``. The exception of the first item that failed is raised here; an
            item whose worker died is computed here.
        """
        return self.start(fn, items, shared=shared, cost=cost).results()

    def start(self, fn: Callable[[object, T], R], items: Iterable[T], *, shared: object = None,
              cost: Callable[[T], float] | None = None) -> Started[R]:
        """:meth:`map`, with the workers starting on the items now and this process joining in only when it asks
        for the results (:meth:`Started.results`): in between it can do work of its own."""
        return Started(self._executor, self.workers - 1 if self._executor is not None else 0, fn, list(items),
                       shared, cost)


class Started(Generic[R]):
    """A :meth:`Pool.map` under way: the workers take the items one at a time; :meth:`results` joins in and waits."""

    def __init__(self, executor: object, feeders: int, fn: Callable, items: list, shared: object,
                 cost: Callable | None) -> None:
        self._fn, self._items, self._shared = fn, items, shared
        order = sorted(range(len(items)), key=lambda i: -cost(items[i])) if cost is not None else list(range(len(items)))
        self._todo = iter(order)
        self._lock = threading.Lock()
        self._results: dict[int, R] = {}
        self._errors: dict[int, BaseException] = {}
        self._again: list[int] = []
        self._feeders: list[threading.Thread] = []
        if executor is None or len(items) <= 1:
            return
        blob = pickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL)
        token = f"{os.getpid()}-{next(_TOKENS)}"
        self._feeders = [threading.Thread(target=self._feed, args=(executor, token, blob), daemon=True,
                                          name=f"lengthlens-feed-{k}") for k in range(feeders)]
        for t in self._feeders:
            t.start()

    def _take(self) -> int | None:
        with self._lock:
            return None if self._errors else next(self._todo, None)

    def _feed(self, executor: object, token: str, blob: bytes) -> None:
        """One item in flight per worker: the rest stay here for whoever is free first."""
        from concurrent.futures import BrokenExecutor

        while (i := self._take()) is not None:
            try:
                self._results[i] = executor.submit(_call_shared, token, blob, self._fn, self._items[i]).result()
            except BrokenExecutor:  # a worker died (killed, out of memory): its item is done here
                self._again.append(i)
                return
            except BaseException as e:  # noqa: BLE001 - raised in results()
                self._errors[i] = e

    def _here(self, i: int) -> None:
        try:
            self._results[i] = self._fn(self._shared, self._items[i])
        except BaseException as e:  # noqa: BLE001 - raised in results(), once the workers have stopped
            self._errors[i] = e

    def results(self) -> list[R]:
        """The results in the order of the items, this process taking items until none is left; the exception of the
        first item that failed is raised here."""
        try:
            with one_blas_thread():
                while (i := self._take()) is not None:
                    self._here(i)
        finally:
            for t in self._feeders:
                t.join()
        with one_blas_thread():
            for i in sorted(self._again):
                if not self._errors:
                    self._here(i)
        if self._errors:
            raise self._errors[min(self._errors)]
        return [self._results[i] for i in range(len(self._items))]
