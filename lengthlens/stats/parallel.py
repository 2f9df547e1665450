"""Run independent per-group computations on several cores, with the same numbers as one after another.

Each (target, draft, dataset) group's intervals depend only on its own runs and on draws fixed by
the seed and the group's names, so groups can be computed in any order: results come back in the
order given, bit for bit those of a plain loop. Two ways:

- threads (the library's default): no start-up cost, but only the numpy/polars parts (ufunc loops
  on large arrays, sorting, matrix products) run at once; Python code and small-array numpy hold
  the GIL, so a group's censoring and attribution (many small fits) hardly overlap;
- processes (what ``lengthlens report`` uses): worker processes started with ``spawn`` (not fork:
  polars' thread pool does not survive a fork) that scale with the cores; each costs an
  interpreter and its imports once (:func:`start_processes` starts them early, while the runs load).
  The calling process is one of the workers: with ``workers`` n it starts n - 1 processes and
  computes items itself, the smallest first, while they take the largest (an interpreter and
  its imports cost about a second of CPU, which on 2 cores was half a second of the report).

BLAS runs on one thread everywhere here: OpenBLAS's products differ in the last bit with its
thread count, and the numbers must not depend on the cores of the machine or on ``workers``; a
second level of threads on the same cores would only add contention anyway.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Environment variable that sets the default number of workers (e.g. 1 to run serially).
WORKERS_ENV = "LENGTHLENS_WORKERS"
#: Thread counts a worker process starts with (set before it imports numpy or polars).
_ONE_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "POLARS_MAX_THREADS")

_processes: tuple[int, Executor] | None = None


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
    """BLAS held to one thread while the context lasts (restored after)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _worker_start(modules: tuple[str, ...]) -> None:
    """A worker process's set-up: one thread for BLAS and polars, then the modules its jobs need, imported now."""
    import importlib

    for name in _ONE_THREAD_ENV:  # read when numpy/polars are first imported, which in a spawned worker is below
        os.environ[name] = "1"
    keep_heap_pages()
    for m in modules:
        importlib.import_module(m)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")  # in case the caller's main module imported numpy already


#: Bytes of freed memory glibc's malloc keeps at the top of a worker's heap (M_TOP_PAD) instead of returning them.
_TOP_PAD = 256 << 20


def keep_heap_pages() -> None:
    """Let glibc's malloc keep up to :data:`_TOP_PAD` of freed heap in a worker process, to be reused.

    A group's work allocates and frees arrays of 0.1-100 MB many times; with glibc's default
    (dynamic) thresholds much of that memory went back to the system and came back as fresh pages,
    each page zeroed by the kernel on first touch: in the paper-scale pass (one process) 176k page
    faults and 1.8-2.1 s of system time, against 22-30k and 0.8-1.0 s with the pad, at the same peak
    memory. Placement only: no number changes. Not glibc (macOS, musl): nothing to set.
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-2, _TOP_PAD)  # M_TOP_PAD


def start_processes(workers: int | None = None, modules: tuple[str, ...] = ()) -> int:
    """Start the worker processes now (they import ``modules`` while the caller goes on); return how many.

    ``workers`` counts the caller, which computes items too (:func:`map_ordered`): n workers are n - 1
    processes (none for one). Calling it again with the same number reuses the running ones.
    """
    global _processes
    n = resolve_workers(workers) - 1
    if n < 1:
        return 0
    if _processes is not None and _processes[0] == n:
        return n
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    stop_processes()
    pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_start, initargs=(tuple(modules),))
    for _ in range(n):  # one no-op each, so that every worker starts (and imports) now rather than at the first job
        pool.submit(int)
    _processes = (n, pool)
    return n


def stop_processes(wait: bool = True) -> None:
    """Stop the worker processes, if any (``wait``: until they have exited)."""
    global _processes
    if _processes is not None:
        _processes[1].shutdown(wait=wait, cancel_futures=True)
        _processes = None


def map_ordered(fn: Callable[[T], R], items: Iterable[T], workers: int | None = None,
                cost: Callable[[T], float] | None = None, processes: bool = False,
                meanwhile: Callable[[], None] | None = None) -> list[R]:
    """``[fn(x) for x in items]``, computed by ``workers`` threads or processes (default :func:`default_workers`).

    ``cost`` (a rough size of each item's work) starts the largest items first, so that no big one
    is left running alone at the end; results keep the order of ``items`` either way. With one
    worker (or one item) it is that plain loop. ``processes``: in worker processes (``fn`` and the
    items must pickle; ``fn`` a module-level function). The first exception raised by ``fn`` (in
    start order) is raised here, after what had started has finished. ``meanwhile()`` is called once, in
    this thread, when every item is submitted and a first one is computed, while the others are (before
    the plain loop when there is nothing to wait for): other work that can overlap them.
    """
    items = list(items)
    meanwhile = _once(meanwhile) if meanwhile is not None else None  # a pool that fails falls back to threads
    n = min(resolve_workers(workers), len(items))
    if n <= 1:
        if meanwhile is not None:
            meanwhile()
        with _one_blas_thread():
            return [fn(x) for x in items]
    order = sorted(range(len(items)), key=lambda i: -cost(items[i])) if cost is not None else range(len(items))
    if processes:
        from concurrent.futures.process import BrokenProcessPool

        start_processes(resolve_workers(workers))  # as the command line started them: reused, not restarted
        try:
            return _collect(_processes[1], fn, items, order, meanwhile, caller_works=_processes[0])
        except BrokenProcessPool as e:  # a worker died (killed, or the caller's script cannot be re-imported)
            import warnings

            stop_processes()
            warnings.warn(f"worker processes failed ({e}); computing on threads instead", RuntimeWarning, stacklevel=2)
    with _one_blas_thread(), ThreadPoolExecutor(max_workers=n, thread_name_prefix="lengthlens") as pool:
        return _collect(pool, fn, items, order, meanwhile)


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` that runs on its first call only."""
    done = []

    def call() -> None:
        if not done:
            done.append(True)
            fn()

    return call


def _collect(pool: Executor, fn: Callable[[T], R], items: list[T], order,
             meanwhile: Callable[[], None] | None = None, caller_works: int = 0) -> list[R]:
    """Every item's result, computed by ``pool`` in ``order``; with ``caller_works`` (the pool's process count)
    this thread computes items too, from the end of ``order``, and hands the pool items from the front as
    it goes, keeping each process one running and one or two waiting (not all at once: taking items back
    would mean cancelling them, which a broken ProcessPoolExecutor of Python 3.11 trips over)."""
    order = list(order)
    if not caller_works:
        futures = {i: pool.submit(fn, items[i]) for i in order}
    else:
        pending, futures, depth = deque(order), {}, 2 * caller_works + 1
    done: dict[int, R] = {}

    def hand_out() -> None:
        while pending and sum(not f.done() for f in futures.values()) < depth:
            i = pending.popleft()
            futures[i] = pool.submit(fn, items[i])

    try:
        if caller_works:
            hand_out()
            with _one_blas_thread():
                while pending:
                    i = pending.pop()
                    done[i] = fn(items[i])
                    if meanwhile is not None:  # after this thread's first item, as after the pool's first otherwise
                        meanwhile()
                        meanwhile = None
                    hand_out()
        if meanwhile is not None:
            # Once a job has finished, every worker has had its first: this thread's work (imports, which hold the
            # GIL) no longer holds up the pool's own threads that deliver them (a worker started 0.45 s late).
            wait(list(futures.values()), return_when=FIRST_COMPLETED)
            meanwhile()
        done.update({i: futures[i].result() for i in order if i in futures})
    except BaseException:
        for f in futures.values():  # stop what has not started
            f.cancel()
        raise
    return [done[i] for i in range(len(items))]
