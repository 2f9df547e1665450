"""analyse() pairs the runs once for every analysis, with the numbers the separate functions give.

The separate entry points (ll.cells, censoring_table, attribution, extra tokens) each pair the
runs on their own; analyse() pairs them once (with the channel counts attribution needs) and hands
the units down. The count below fails on a per-analysis pairing (cell_units three or four times).
analyse() also makes each group's draws once for cells, censoring and attribution (one pass over
the groups, on several threads); the separate functions draw their own, one loop each, and the
numbers must agree exactly, for any number of workers.
"""

from __future__ import annotations

import pandas as pd
import pytest

import lengthlens as ll
from lengthlens import synth
from lengthlens.analyses import analyse as analyse_mod
from lengthlens.analyses import attribution as attribution_mod
from lengthlens.analyses.analyse import analyse, censoring_table
from lengthlens.analyses.attribution import attribution
from lengthlens.analyses.tables import table3_cells
from lengthlens.data import pairing
from lengthlens.stats import estimate


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = synth.write_flat(synth.example(), tmp_path_factory.mktemp("shared") / "ex.parquet", text=True)
    return ll.load(path, run_graders=False)


def test_runs_are_paired_once(runs, monkeypatch):
    calls = []
    real = pairing.cell_units

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    for mod in (analyse_mod, attribution_mod, estimate):  # every module that imported cell_units by name
        monkeypatch.setattr(mod, "cell_units", counted)
    a = analyse(runs, n_resamples=300, proposals=True)
    assert len(calls) == 1
    assert "cells, censoring, attribution" in a.timings  # one pass over the groups for the three


#: The pass makes one product per item set for all three analyses, the separate functions one each: a sum of
#: non-integer values (wall time, per-run l_bar) can differ in its last bit (stats.distinct_product), nothing more.
_LAST_BITS = {"check_exact": False, "rtol": 1e-12, "atol": 0.0}


def test_shared_units_give_the_separate_functions_numbers(runs):
    a = analyse(runs, n_resamples=300)
    cells_df = ll.cells(runs, n_resamples=300).to_frame()
    pd.testing.assert_frame_equal(a.tables["cells"], cells_df, **_LAST_BITS)
    pd.testing.assert_frame_equal(a.tables["censoring"], censoring_table(runs, n_resamples=300, cells_df=cells_df),
                                  **_LAST_BITS)
    alone = attribution(runs, n_resamples=300, table3_cells=table3_cells(cells_df, "loosest"))
    pd.testing.assert_frame_equal(a.tables["attribution"], alone.cells, **_LAST_BITS)
    pd.testing.assert_frame_equal(a.tables["attribution_summary"], alone.summary, **_LAST_BITS)


@pytest.fixture(scope="module")
def serial_analysis(runs):
    return analyse(runs, n_resamples=300, workers=1)


@pytest.mark.parametrize("workers,processes", [(1, False), (3, False), (2, True)])
def test_any_number_of_workers_gives_the_same_tables(runs, serial_analysis, workers, processes):
    # analyse() with 1 or 3 threads, or 2 worker processes, matches the serial pass bit for bit, and the separate
    # functions (run serially) to the last bits.
    from lengthlens.analyses import group_pass
    from lengthlens.stats import parallel

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(group_pass, "PROCESS_MIN_RUNS", 0)  # the example is small: send it to processes anyway
            a = analyse(runs, n_resamples=300, workers=workers, processes=processes)
        if processes:
            assert parallel._processes is not None  # the worker processes did run
    finally:
        parallel.stop_processes()
    for name in ("cells", "censoring", "attribution", "attribution_summary", "table3"):
        pd.testing.assert_frame_equal(a.tables[name], serial_analysis.tables[name], check_exact=True)
    cells_df = ll.cells(runs, n_resamples=300, workers=1).to_frame()
    pd.testing.assert_frame_equal(a.tables["cells"], cells_df, **_LAST_BITS)
    pd.testing.assert_frame_equal(a.tables["censoring"], censoring_table(runs, n_resamples=300, cells_df=cells_df, workers=1),
                                  **_LAST_BITS)
    alone = attribution(runs, n_resamples=300, table3_cells=table3_cells(cells_df, "loosest"), workers=1)
    pd.testing.assert_frame_equal(a.tables["attribution"], alone.cells, **_LAST_BITS)
    assert a.cells.replicates["accuracy_delta_pp"].tobytes() == ll.cells(runs, n_resamples=300, workers=2).replicates[
        "accuracy_delta_pp"].tobytes()


def test_group_draws_are_made_once_per_group(runs, monkeypatch):
    # analyse() draws each (group, item set) once for its three analyses: count the draws.
    from lengthlens.stats import resample

    seen = []
    real = resample.counts_for_items

    def counted(seed, group, items, complete, n_resamples, dtype=None):
        seen.append((tuple(group), tuple(items), complete))
        return real(seed, group, items, complete, n_resamples, dtype)

    monkeypatch.setattr(resample, "counts_for_items", counted)
    analyse(runs, n_resamples=50, proposals=False, workers=2)
    assert seen and len(seen) == len(set(seen))
