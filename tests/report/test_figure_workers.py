"""Figures rendered over several processes: the same SVG bytes as one process, balanced parts, a serial fallback."""

from __future__ import annotations

import os

import pytest

from lengthlens.report import figure_svgs, figures
from lengthlens.report import parallel as P
from lengthlens.report.plot_style import LensFigure

fork_only = pytest.mark.skipif(not P.can_fork(), reason="needs the fork start method")


@fork_only
def test_parallel_svgs_are_byte_identical_to_serial(example_analysis):
    serial = figure_svgs(example_analysis, workers=1)
    assert list(serial) == list(figures(example_analysis))  # every figure, in the figures() order
    for workers in (2, 3):
        assert figure_svgs(example_analysis, workers=workers) == serial
    assert figure_svgs(example_analysis, workers=1) == serial  # and run to run


def _job(key: str, weight: float, pinned: bool = False, make=None) -> P.Job:
    return (key, make or (lambda: None), weight, pinned)


def test_balanced_parts_split_by_weight_keep_order_and_pin():
    jobs = [_job("a", 5), _job("b", 1), _job("c", 4), _job("d", 2, pinned=True), _job("e", 3)]
    parts = P.balanced_parts(jobs, 2)
    assert sorted(k for p in parts for k, *_ in p) == list("abcde")
    assert "d" in [k for k, *_ in parts[0]]  # pinned: this process
    loads = [sum(w for _k, _m, w, _p in p) for p in parts]
    # d(2) pinned to part 0; then heaviest first onto the lighter part: a(5)->1, c(4)->0 (2+4), e(3)->1 (5+3), b(1)->0
    assert loads == [7, 8] and [[k for k, *_ in p] for p in parts] == [["b", "c", "d"], ["a", "e"]]
    for p in parts:  # jobs keep the given order within a part
        keys = [k for k, *_ in p]
        assert keys == sorted(keys)
    assert len(P.balanced_parts(jobs, 1)) == 1 and len(P.balanced_parts(jobs[:2], 8)) == 2
    assert P.balanced_parts([], 4) == [[]]


def _fig(text: str):
    fig = LensFigure(figsize=(2, 1), layout="constrained")
    fig.subplots().set_title(text)
    return fig


@fork_only
def test_a_child_that_dies_or_raises_falls_back_to_serial():
    parent = os.getpid()

    def dies():
        if os.getpid() != parent:
            os._exit(3)  # a crashed worker
        return _fig("dies")

    def raises():
        if os.getpid() != parent:
            raise RuntimeError("only in a child")
        return _fig("raises")

    jobs = [_job("ok", 1, make=lambda: _fig("ok")), _job("dies", 5, make=dies), _job("raises", 5, make=raises)]
    want = P.render_svgs(jobs, workers=1)
    assert set(want) == {"ok", "dies", "raises"} and all("<svg" in v for v in want.values())
    assert P.render_svgs(jobs, workers=3, timeout=60) == want
    assert P._JOBS == []


def test_an_error_in_a_figure_is_raised_not_swallowed():
    def broken():
        raise ValueError("bad figure")

    with pytest.raises(ValueError, match="bad figure"):
        P.render_svgs([_job("ok", 1, make=lambda: _fig("ok")), _job("broken", 1, make=broken)], workers=2)


def test_default_workers_follow_the_analysis_default(monkeypatch):
    monkeypatch.delenv("LENGTHLENS_WORKERS", raising=False)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    assert P.default_workers() == max(1, min(cores, 8))
    monkeypatch.setenv("LENGTHLENS_WORKERS", "1")
    assert P.default_workers() == 1
    assert len(P.balanced_parts([_job("a", 1), _job("b", 1)], P.default_workers())) == 1  # one part: no fork


def test_only_pinned_figure_jobs_run_polars(example_analysis, monkeypatch):
    """A forked child must not use polars' thread pool: jobs that may go to a child draw from pandas/numpy data only;
    survival, which runs polars, stays in this process."""
    import polars as pl

    from lengthlens.report import _figure_jobs

    jobs = _figure_jobs(example_analysis)
    assert "survival" in [k for k, *_ in jobs]

    def no_polars(*_a, **_k):
        raise AssertionError("polars called while drawing a figure")

    for name in ("filter", "join", "select", "unique", "to_numpy", "__getitem__"):
        monkeypatch.setattr(pl.DataFrame, name, no_polars)
    monkeypatch.setattr(pl.LazyFrame, "collect", no_polars)
    assert [k for k, _m, _w, pinned in jobs if pinned] == ["survival"]
    for _key, make, _w, pinned in jobs:
        if not pinned:
            make()
