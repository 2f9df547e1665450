"""How much data a verdict needs (lengthlens.plan): the power formula, the design search, and the simulation check."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

import lengthlens as ll
from lengthlens import synth
from lengthlens.analyses.plan import (MAX_ITEMS, Design, _accuracy_cells, _items_needed, _se, plan, pooled_power,
                                      simulate_power)
from lengthlens.analyses.cells import SMALL_N_ITEMS
from lengthlens.data.schema import POLARS_SCHEMA
from lengthlens.stats.meta import accuracy_change_variance


def test_pooled_power_is_the_noncentral_t_statsmodels_computes():
    from statsmodels.stats.power import TTestPower

    for effect, se, k, alpha in ((5.0, 2.0, 6, 0.005), (2.0, 1.5, 24, 0.025), (0.05, 0.02, 12, 0.01)):
        # TTestPower: df = nobs − 1, noncentrality = effect size × √nobs
        expected = TTestPower().power(effect_size=effect / se / math.sqrt(k), nobs=k, alpha=alpha, alternative="larger")
        assert pooled_power(effect, se, k, alpha) == pytest.approx(expected, rel=1e-6)


def test_items_needed_is_the_fewest_that_reach_the_power():
    args = dict(unit_var=1500.0, tau2=9.0, k=24, n_seeds=1, rho=0.5)
    n = _items_needed(**args, effect=5.0, alpha=0.005, power=0.8)
    assert n is not None and n > SMALL_N_ITEMS
    power_at = lambda m: pooled_power(5.0, _se(args["unit_var"], args["tau2"], 24, m, 1, 0.5), 24, 0.005)  # noqa: E731
    assert power_at(n) >= 0.8 > power_at(n - 1)
    # between-dataset spread alone beyond the effect: no number of items will do at 6 datasets
    assert _items_needed(1500.0, 100.0, 6, 1, 0.5, 5.0, 0.005, 0.8) is None
    assert _items_needed(1.0, 0.0, 6, 1, 0.5, 50.0, 0.025, 0.8) == SMALL_N_ITEMS  # never a probe-sized cell
    assert MAX_ITEMS >= 1000


def test_the_simulation_uses_the_pooled_estimators_cell_variance():
    rng = np.random.default_rng(1)
    d = rng.integers(-4, 5, size=(3, 5, 12)).astype(float)
    y, v = _accuracy_cells(d, 4)
    for i in range(3):
        for j in range(5):
            change, var = accuracy_change_variance(np.full(12, 4.0), np.maximum(d[i, j], 0), np.maximum(-d[i, j], 0))
            assert y[i, j] == pytest.approx(100 * change, abs=1e-12) and v[i, j] == pytest.approx(1e4 * var, rel=1e-12)


@pytest.fixture(scope="module")
def example_cells(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "example.parquet"
    synth.simulate(synth.example(), seed=0).select(POLARS_SCHEMA.names()).write_parquet(path)
    return ll.cells(ll.load(path, cache=False), n_resamples=200)


def test_plan_on_the_example_proposes_designs_that_hold_up_in_simulation(example_cells):
    result = plan(example_cells, n_sim=400)
    assert result.targets == ("accuracy loss of 2 points", "accuracy loss of 5 points", "R/R* change of 5 %")
    assert result.pilot.k == 6 and result.pilot.n_rules == 5
    assert result.alpha == pytest.approx(0.025 / 5)
    # what the pilot detects now is what its own pooled SE gives
    assert 0 < result.detectable_accuracy_pp < 100 and 0 < result.detectable_rounds_change < 1
    assert result.proposed, "no design proposed"
    for d in result.proposed:
        assert d.simulated_power >= 0.77 and d.n_items >= SMALL_N_ITEMS
        # an independent simulation, more studies and another seed: the design holds at 75 %
        again = simulate_power(result.pilot, Design(d.target, d.effect, d.k, d.n_items, d.n_seeds, d.power), result.alpha,
                               n_sim=800, seed=99)
        assert again >= 0.75, (d, again)
    df = result.to_frame()
    assert df["proposed"].sum() == len(result.proposed) and "<table>" in result._repr_html_()


def test_more_datasets_or_items_never_need_more_of_the_other(example_cells):
    result = plan(example_cells, check=False)
    for target in result.targets:
        rows = sorted((d.k, d.n_seeds, d.n_items) for d in result.designs if d.target == target)
        for s in {r[1] for r in rows}:
            items = [n for k, ss, n in rows if ss == s]
            assert items == sorted(items, reverse=True)  # K ascending: items per cell never rise


def test_plan_command_on_the_example(capsys):
    from lengthlens import cli

    assert cli.main(["plan", "--example", "--no-check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Pilot: 6 datasets × ") and out[1].startswith("At these sizes the pooled verdict")
    assert any(line.startswith("To detect an accuracy loss of 5 points with 80% power:") for line in out)


@pytest.mark.shared
def test_plan_on_the_real_logs(shared_data):
    cells = ll.cells(ll.load(shared_data / "runs"), n_resamples=200)
    result = plan(cells, n_sim=400)
    assert result.pilot.k == 6 and result.pilot.n_items == 12
    for d in result.proposed:
        assert d.simulated_power >= 0.77
