"""The thread pool over groups and the thread-safe draw cache: order, errors, worker counts, identical draws."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from lengthlens.stats import parallel
from lengthlens.stats.parallel import default_workers, map_ordered, resolve_workers
from lengthlens.stats.resample import DrawCache, counts_for_items


def test_results_keep_the_order_of_the_items_whatever_starts_first():
    started = []

    def slow_square(x):
        started.append(x)
        time.sleep(0.002 * (x % 3))
        return x * x

    items = list(range(20))
    out = map_ordered(slow_square, items, workers=4, cost=lambda x: x)
    assert out == [x * x for x in items]
    assert started[:4] == [19, 18, 17, 16]  # the largest items start first


def test_really_uses_several_threads():
    names = set()
    barrier = threading.Barrier(2, timeout=10)

    def f(x):
        names.add(threading.current_thread().name)
        barrier.wait()  # deadlocks (times out) unless two items run at once
        return x

    assert map_ordered(f, [1, 2], workers=2) == [1, 2]
    assert len(names) == 2


def test_an_error_in_one_item_is_raised():
    def f(x):
        if x == 3:
            raise KeyError("item 3")
        return x

    with pytest.raises(KeyError, match="item 3"):
        map_ordered(f, range(8), workers=2)
    with pytest.raises(KeyError, match="item 3"):
        map_ordered(f, range(8), workers=1)


def test_blas_is_held_to_one_thread_inside_and_restored_after():
    from threadpoolctl import threadpool_info

    def blas_threads(_):
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads(None)
    for workers in (1, 2):
        inside = map_ordered(blas_threads, [0, 1], workers=workers)
        assert all(n == [1] * len(before) for n in inside)
    assert blas_threads(None) == before


def test_worker_counts(monkeypatch):
    monkeypatch.setenv(parallel.WORKERS_ENV, "3")
    assert default_workers() == 3 and resolve_workers(None) == 3 and resolve_workers(1) == 1
    monkeypatch.setenv(parallel.WORKERS_ENV, "two")
    with pytest.raises(ValueError, match="LENGTHLENS_WORKERS must be a whole number"):
        default_workers()
    monkeypatch.setenv(parallel.WORKERS_ENV, "0")
    with pytest.raises(ValueError, match="at least 1"):
        default_workers()
    monkeypatch.delenv(parallel.WORKERS_ENV)
    assert 1 <= default_workers() <= 8
    with pytest.raises(ValueError, match="at least 1"):
        resolve_workers(0)


@pytest.mark.parametrize("keep", [True, False])
def test_draw_cache_hands_out_the_seeded_draws_from_any_thread(keep):
    group = ("T", "D", "ds")
    items = tuple(f"i{k}" for k in range(40))
    subset = items[:25]
    cache = DrawCache(7, 300, keep=keep)
    want = {(items, True): counts_for_items(7, group, items, True, 300),
            (subset, False): counts_for_items(7, group, subset, False, 300)}

    def get(k):
        its, complete = list(want)[k % 2]
        c = cache.item_counts(group, its, complete)
        same_again = cache.item_counts(group, its, complete) is c  # one copy per thread and item set
        return c, same_again

    for c, same_again in map_ordered(get, range(12), workers=4):
        key = (items, True) if c.shape[1] == 40 else (subset, False)
        assert c.dtype == np.float64 and np.array_equal(c, want[key]) and same_again
        assert not c.flags.writeable  # shared by a group's analyses: nobody may change it
    assert (len(cache._store) == 2) is keep  # compact copies only when asked to keep them


def _square_unless_worker(x):
    """Squares x; in a worker process, item 0 (the first a worker takes: the caller takes from the end) kills the
    process (a worker lost to the OOM killer, say). Each item takes a moment, as real ones do, so that the workers
    get theirs while the caller computes."""
    import multiprocessing
    import os

    time.sleep(0.05)
    if x == 0 and multiprocessing.parent_process() is not None:
        os._exit(3)
    return x * x


def _blas_threads_here(x):
    import os

    from threadpoolctl import threadpool_info

    time.sleep(0.2)  # long enough for the worker to take its items while the caller computes its own
    return x, os.getpid(), [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_worker_processes_and_the_caller_keep_the_order_and_one_blas_thread():
    """Two workers are this process and one worker process: the worker takes the largest items, this process
    takes the smallest back from the queue; every result in its place, BLAS on one thread in both."""
    import os

    try:
        out = map_ordered(_blas_threads_here, range(8), workers=2, cost=lambda x: x, processes=True)
        assert [x for x, _, _ in out] == list(range(8))
        assert parallel._processes[0] == 1  # the caller is the second worker
        by = {x: pid for x, pid, _ in out}
        assert by[0] == os.getpid() and by[7] != os.getpid()  # smallest here, largest in the worker process
        assert all(n == [1] * len(n) for _, _, n in out)
        assert map_ordered(abs, [-3, 1, -2], workers=2, processes=True) == [3, 1, 2]
    finally:
        parallel.stop_processes()


def test_a_dead_worker_process_falls_back_to_threads_with_a_warning():
    try:
        with pytest.warns(RuntimeWarning, match="computing on threads instead"):
            out = map_ordered(_square_unless_worker, range(8), workers=2, processes=True)
        assert out == [x * x for x in range(8)]
        assert parallel._processes is None  # the broken pool is gone; the next call starts fresh workers
    finally:
        parallel.stop_processes()


def test_the_command_line_starts_workers_early_only_for_large_flat_files(tmp_path, monkeypatch):
    import argparse

    from lengthlens import cli

    started = []
    monkeypatch.setattr(parallel, "start_processes", lambda workers, modules: started.append((workers, modules)))
    small, big = tmp_path / "small.parquet", tmp_path / "big.parquet"
    small.write_bytes(b"x" * 1000)
    big.write_bytes(b"x" * (cli._PRESTART_BYTES + 1))
    args = argparse.Namespace(workers=2)
    cli._start_workers(args, [small, tmp_path])  # a small file and a folder (a raw tree: size unknown until read)
    assert started == []
    cli._start_workers(args, [big])
    assert started and started[0][0] == 2 and "lengthlens.analyses.group_pass" in started[0][1]


def _slow_square(x):
    time.sleep(0.05 if x == 0 else 0.5)
    return x * x


@pytest.mark.parametrize("mode", ["serial", "threads", "processes", "broken processes"])
def test_meanwhile_runs_once_in_the_calling_thread_while_the_items_are_computed(mode):
    """``meanwhile`` overlaps the jobs: called once, here, after a first job finished (so that every worker has
    had its first) and before the last; never twice when a broken pool falls back to threads."""
    calls = []
    finished = []

    def meanwhile():
        calls.append(threading.current_thread() is threading.main_thread())

    def square(x):
        out = _slow_square(x)
        finished.append(x)
        return out

    try:
        if mode == "serial":
            out = map_ordered(square, range(4), workers=1, meanwhile=meanwhile)
            assert finished == [0, 1, 2, 3] and calls == [True]
        elif mode == "threads":
            def check():
                meanwhile()
                assert 1 <= len(finished) < 4, finished  # after the first finished, while others still run
            out = map_ordered(square, range(4), workers=2, meanwhile=check)
        elif mode == "processes":
            out = map_ordered(_slow_square, range(4), workers=2, processes=True, meanwhile=meanwhile)
        else:
            with pytest.warns(RuntimeWarning, match="computing on threads instead"):
                out = map_ordered(_square_unless_worker, range(8), workers=2, processes=True, meanwhile=meanwhile)
            assert out == [x * x for x in range(8)]
        if mode != "broken processes":
            assert out == [0, 1, 4, 9]
        assert calls == [True]
        assert map_ordered(abs, [], workers=2, meanwhile=meanwhile) == [] and calls == [True, True]
    finally:
        parallel.stop_processes()


def test_analyse_imports_the_tables_modules_while_the_pass_runs(tmp_path):
    """analyse(meanwhile=...) hands the pass the imports of what the tables after it need and arms.csv, then the caller's
    work."""
    import sys

    import pandas as pd

    import lengthlens as ll
    from lengthlens import synth
    from lengthlens.analyses.analyse import _AFTER_PASS, analyse

    runs = ll.load(synth.write_flat(synth.example(), tmp_path / "ex.parquet"), run_graders=False)
    seen = []
    a = analyse(runs, n_resamples=100, n_resamples_aft=20, proposals=False, workers=2,
                meanwhile=lambda: seen.append(all(m in sys.modules for m in _AFTER_PASS)))
    assert seen == [True] and not a.tables["cells"].empty
    pd.testing.assert_frame_equal(a.tables["arms"], ll.arms(runs))  # computed while the pass ran
