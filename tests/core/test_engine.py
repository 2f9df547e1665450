"""The engine: groups as numpy arrays against a polars oracle, one pass for every analysis, any number of workers."""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd
import polars as pl
import pytest

import lengthlens as ll
from lengthlens.analyses import engine
from lengthlens.analyses.analyse import analyse, attribution, censoring_table
from lengthlens.analyses.tables import table3_cells
from lengthlens.data.pairing import cell_units
from lengthlens.execution import Pool, map_ordered
from lengthlens.stats.metrics import Sums


@pytest.fixture(scope="module")
def runs(example_flat):
    return ll.load(example_flat, run_graders=False)


def test_groups_hold_each_cells_runs_summed_by_item_as_a_polars_group_by_does(runs):
    units = cell_units(runs.paired)
    groups = engine.groups_of(units, ("output_tokens", "output_tokens_star"), engine.group_items(runs))
    want = (units.group_by("target", "draft", "dataset", "method", "params", "item_id")
            .agg(pl.col("output_tokens").sum(), pl.len().alias("n")))
    got = []
    for g in groups:
        assert list(g.items) == sorted(g.items)
        for c in g.cells:
            L, n = c.by_item(c.fields["output_tokens"]), c.runs_per_item()
            got += [{**{k: c.key[k] for k in ("target", "draft", "dataset", "method", "params")}, "item_id": it,
                     "output_tokens": L[i], "n": n[i]} for i, it in enumerate(c.items)]
    got = pl.DataFrame(got).sort(["target", "draft", "dataset", "method", "params", "item_id"])
    want = want.sort(["target", "draft", "dataset", "method", "params", "item_id"])
    assert got.select("item_id").equals(want.select("item_id"))
    assert np.array_equal(got["output_tokens"].to_numpy(), want["output_tokens"].to_numpy().astype(float))
    assert np.array_equal(got["n"].to_numpy(), want["n"].to_numpy().astype(float))
    assert sum(g.n_runs for g in groups) == units.height


def test_groups_are_the_same_from_shuffled_pairs_and_without_given_items(runs):
    """The groups do not depend on the pairs' row order, and without ``items`` a group's items are the sorted ones
    its runs cover (the example's baselines cover every item their relaxed runs have)."""
    units = cell_units(runs.paired)
    fields = ("output_tokens", "output_tokens_star")
    want = engine.groups_of(units, fields, engine.group_items(runs))
    shuffled = units[np.random.default_rng(0).permutation(units.height)]
    for got in (engine.groups_of(shuffled, fields, engine.group_items(runs)), engine.groups_of(units, fields)):
        assert [g.names for g in got] == [g.names for g in want]
        for g, w in zip(got, want):
            assert g.items == w.items and [c.key for c in g.cells] == [c.key for c in w.cells]
            for c, cw in zip(g.cells, w.cells):
                assert c.items == cw.items
                assert np.array_equal(c.by_item(c.fields["output_tokens"]), cw.by_item(cw.fields["output_tokens"]))


def test_a_run_whose_item_is_not_among_its_groups_items_is_named(runs):
    units = cell_units(runs.paired)
    items = engine.group_items(runs)
    names = next(iter(items))
    dropped = items[names][0]
    with pytest.raises(KeyError, match=f"item '{dropped}' of {re.escape(str(names))} is not among its group's items"):
        engine.groups_of(units, ("output_tokens",), {**items, names: items[names][1:]})


def test_a_subset_keeps_the_items_its_runs_cover():
    cell = engine.CellRuns(key={}, group=("g",), n_items_group=3, items=("a", "b", "c"), item=np.array([0, 1, 1, 2]),
                           fields=Sums({"x": np.array([1.0, 2.0, 3.0, 4.0])}))
    part = cell.subset(np.array([False, True, True, False]))
    assert part.items == ("b",) and part.item.tolist() == [0, 0] and part.by_item(part.fields["x"]).tolist() == [5.0]
    assert not part.complete and cell.complete


def test_one_pass_gives_the_separate_functions_numbers(runs):
    """analyse() runs cells, censoring and attribution in one pass (one product per item set): each equals its
    function run alone. Sums of non-integer values may be added in another order in a wider product: last bits."""
    a = analyse(runs, n_resamples=300)
    cells_df = ll.cells(runs, n_resamples=300).to_frame()
    last_bits = {"check_exact": False, "rtol": 1e-12, "atol": 0.0}
    pd.testing.assert_frame_equal(a.tables["cells"], cells_df, **last_bits)
    pd.testing.assert_frame_equal(a.tables["censoring"], censoring_table(runs, n_resamples=300), **last_bits)
    alone = attribution(runs, n_resamples=300, table3_cells=table3_cells(cells_df, "loosest"))
    pd.testing.assert_frame_equal(a.tables["attribution"], alone.cells, **last_bits)
    pd.testing.assert_frame_equal(a.tables["attribution_summary"], alone.summary, **last_bits)


def test_worker_processes_give_the_serial_numbers_bit_for_bit(runs, monkeypatch):
    serial = analyse(runs, n_resamples=200, workers=1)
    monkeypatch.setattr(engine, "PROCESS_MIN_RUNS", 0)  # the example is small: send it to processes anyway
    spawned = analyse(runs, n_resamples=200, workers=2)
    from lengthlens.execution import Pool

    with Pool(2) as pool:  # the report's way: one started worker and this process share the groups
        pooled = analyse(runs, n_resamples=200, workers=2, pool=pool)
        assert pool.spawned == 1
    for other in (spawned, pooled):
        for name in ("cells", "censoring", "attribution", "cost_per_correct"):
            pd.testing.assert_frame_equal(other.tables[name], serial.tables[name], check_exact=True)
        assert np.array_equal(other.cells.replicates["accuracy_delta_pp"], serial.cells.replicates["accuracy_delta_pp"],
                              equal_nan=True)


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x * x


def test_map_ordered_keeps_the_order_and_raises_the_error():
    items = [5, 1, 4, 2]
    assert map_ordered(_fail_on_three, items, workers=2, cost=float, threads=True) == [25, 1, 16, 4]
    assert map_ordered(_fail_on_three, items, workers=2, cost=float) == [25, 1, 16, 4]  # spawned processes
    with pytest.raises(ValueError, match="three"):
        map_ordered(_fail_on_three, [1, 3, 2], workers=2, threads=True)


def test_an_analysis_with_its_own_product_in_the_shared_pass_gives_its_own_pass_numbers_bit_for_bit(runs):
    """Cost per correct answer rides in the report's pass on the cell table's draws with a product of its own: the
    same numbers as its function alone, and the cell table the same as without it, bit for bit."""
    from lengthlens.analyses.cells import CellsAnalysis
    from lengthlens.analyses.cost_per_correct import CostPerCorrectAnalysis, cost_per_correct

    settings = engine.Settings(n_resamples=200)
    alone = cost_per_correct(runs, settings)
    cells_alone, = engine.run_on(runs, [CellsAnalysis()], settings)
    cells_shared, shared = engine.run_on(runs, [CellsAnalysis(), CostPerCorrectAnalysis()], settings)
    assert len(alone) > 0 and alone["rounds_per_correct_ratio_lo"].notna().any()
    pd.testing.assert_frame_equal(shared, alone, check_exact=True)
    pd.testing.assert_frame_equal(cells_shared.to_frame(), cells_alone.to_frame(), check_exact=True)


def test_a_keyed_statistic_of_the_items_is_evaluated_once_per_draws():
    """Two cells with the same baseline runs and draws: their baseline KM quartiles are computed once, the same."""
    from lengthlens.stats.intervals import Resampled, Weighted, estimates

    calls = []

    def median(w):
        calls.append(w.shape)
        x = np.array([3.0, 1.0, 4.0, 1.5, 9.0])
        order = np.argsort(x)
        c = np.cumsum(w[:, order], axis=1)
        return x[order][np.argmax(c >= c[:, -1:] / 2, axis=1)]

    draws = np.random.default_rng(3).multinomial(5, [0.2] * 5, size=50)
    r = Resampled({}, {}, draws)
    memo: dict = {}
    first, _ = estimates({"m": Weighted(median, "percentile", key="x")}, r, memo=memo)
    second, _ = estimates({"m": Weighted(median, "percentile", key="x")}, r, memo=memo)
    unkeyed, _ = estimates({"m": Weighted(median, "percentile")}, r, memo=memo)
    assert calls.count((50, 5)) == 2  # on the draws: the keyed statistic once, the unkeyed one (besides each point)
    assert first["m"] == second["m"] == unkeyed["m"]
    values = median(draws)
    assert (first["m"].low, first["m"].high) == tuple(np.percentile(values, [2.5, 97.5]))


def test_the_cell_frame_is_made_once_and_each_caller_gets_its_own(runs):
    table = ll.cells(runs, n_resamples=200)
    a = table.to_frame()
    a.loc[:, "lambda"] = -1.0
    b = table.to_frame()
    assert (b["lambda"] > 0).all() and b is not a
    assert b.equals(table.to_frame())


def _scaled(shared: int, x: int) -> tuple[int, int]:
    if x == 3:
        raise ValueError("three")
    return shared * x, os.getpid()


def _die_in_a_worker(parent: int, x: int) -> int:
    if os.getpid() != parent:
        os._exit(1)  # a worker killed mid-item (e.g. out of memory)
    return 2 * x


def test_pool_shares_the_work_with_the_caller_in_order():
    items = [5, 1, 4, 2, 7, 6]
    with Pool(2) as pool:
        assert pool.spawned == 1
        got = pool.map(_scaled, items, shared=10, cost=float)
        assert [v for v, _pid in got] == [50, 10, 40, 20, 70, 60]
        with pytest.raises(ValueError, match="three"):
            pool.map(_scaled, [1, 3, 2], shared=1)
    with Pool(1) as pool:  # nothing is spawned: everything runs here
        assert pool.spawned == 0
        assert {pid for _v, pid in pool.map(_scaled, items, shared=1)} == {os.getpid()}


def test_an_item_whose_worker_died_is_computed_by_the_caller():
    with Pool(2) as pool:
        assert pool.map(_die_in_a_worker, [1, 2, 3, 4], shared=os.getpid()) == [2, 4, 6, 8]
