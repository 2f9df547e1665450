"""benchmarks/bench_report_full.py's floor: the pass's draws and products are timed in place and counted right."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from lengthlens import synth
from lengthlens.stats.distinct_product import ColumnProduct
from lengthlens.analyses.censoring import DEFAULT_AFT_RESAMPLES
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_SEED, DrawCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_report_full as bench  # noqa: E402


@pytest.fixture(scope="module")
def example_flat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synth.write_flat(synth.example(), tmp_path_factory.mktemp("floor") / "ex.parquet")


def test_floor_counts_every_product_once_and_restores_the_methods(example_flat: Path) -> None:
    import lengthlens as ll
    from lengthlens.analyses.attribution import channel_units
    from lengthlens.analyses.group_pass import group_pass
    from lengthlens.stats.item_sums import all_group_items

    product_before, draws_before = ColumnProduct.product, DrawCache._float_counts
    floor = bench.pass_floor(example_flat, 200)
    assert ColumnProduct.product is product_before and DrawCache._float_counts is draws_before

    # The independent count: the item sets of every group, from a plain pass with the methods wrapped by hand.
    seen: list[tuple[int, int, int]] = []
    original = ColumnProduct.product

    def recording(self: ColumnProduct) -> np.ndarray:
        first = self._product is None
        out = original(self)
        if first:
            seen.append((self.n_distinct, *self.counts.shape))
        return out

    runs = ll.load(example_flat)
    ColumnProduct.product = recording
    try:
        group_pass(runs, channel_units(runs), n_resamples=200, seed=DEFAULT_SEED, ci="studentized",
                   confidence_level=DEFAULT_CONFIDENCE, n_resamples_aft=DEFAULT_AFT_RESAMPLES, aft_ci="sandwich", workers=1)
    finally:
        ColumnProduct.product = original
    assert floor["n_products"] == len(seen) >= len(all_group_items(runs))
    assert sorted(floor["columns"]) == sorted(c for c, _, _ in seen)
    assert floor["flop"] == sum(2.0 * c * b * n for c, b, n in seen)
    assert all(b == 200 for _, b, _ in seen)
    assert 0 < floor["draws"] + floor["products"] <= floor["pass"]


def test_print_floor_sets_the_fixed_part_against_the_other_stages(capsys: pytest.CaptureFixture[str]) -> None:
    floor = {"pass": 20.0, "draws": 4.0, "products": 4.0, "flop": 111e9, "n_products": 72, "columns": [172, 187]}
    no_pdf = {"stages": {"load": 1.0, "cells, censoring, attribution": 12.0, "figures": 3.0, "report.html": 0.5}}
    bench.print_floor(floor, no_pdf, {"stages": {"report.pdf": 17.5}}, cores=2)
    out = capsys.readouterr().out
    assert re.search(r"everything else\s+12\.0 s", out)  # 20 - 4 - 4
    # (4 + 4) / 2 cores + (1 + 3 + 0.5) = 8.5
    assert "8.0 s / 2 cores + the command's other stages 4.5 s = 8.5 s" in out
    assert "72 products of 172-187 distinct columns, 111 GFLOP, 28 GFLOP/s" in out
    assert "report.pdf alone (WeasyPrint, after the rest; its parts over 2 processes, the Cells table's part in one): 17.5 s" in out


def test_print_budget_sets_the_work_that_stays_against_the_targets_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    floor = {"pass": 20.0, "draws": 4.0, "products": 4.0, "flop": 111e9, "n_products": 72, "columns": [172, 187]}
    one_core = {"wall": 48.0, "cpu": 49.0, "stages": {"figures": 5.0, "report.pdf": 18.5}}
    bench.print_floor(floor, {"stages": {}}, {"stages": {}}, cores=2, one_core=one_core)
    out = capsys.readouterr().out
    # --no-pdf: 4 + 4 + 5 = 13 s of CPU against 6 s x 2 cores = 12 s
    assert ("CPU that stays, --no-pdf: draws and products 8.0 s + figures 5.0 s = 13.0 s; the target leaves 6 s x 2 "
            "cores = 12.0 s: over") in out
    # with the PDF: 13 + 18.5 = 31.5 s against 12 s x 2 = 24 s
    assert "+ report.pdf 18.5 s = 31.5 s; the target leaves 12 s x 2 cores = 24.0 s: over" in out
    # on 4 cores both budgets (24 s, 48 s) hold that work
    bench.print_floor(floor, {"stages": {}}, {"stages": {}}, cores=4, one_core=one_core)
    out = capsys.readouterr().out
    assert out.count(": within: this work does not rule the target out") == 2
