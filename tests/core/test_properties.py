"""Property tests (hypothesis) for pairing and resampling."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

import lengthlens as ll
from lengthlens.data.loading import RunSet
from lengthlens.data.pairing import cell_units
from lengthlens.data.schema import POLARS_SCHEMA
from lengthlens.data.validation.table import pairing_checks
from lengthlens.stats.resample import counts_for_group, item_counts


def _runset(rows: list[dict]) -> RunSet:
    table = pl.DataFrame(rows, schema=POLARS_SCHEMA, orient="row")
    table, skipped, warnings = pairing_checks(table)
    return RunSet(table=table, skipped=skipped, sources=("mem",), n_found=len(rows), warnings=tuple(warnings))


def _row(method, item, seed, L, status="ok"):
    return dict(target="t", draft="d", dataset="x", method=method, params="strict" if method == "strict" else "alpha0.1",
                alpha=None if method == "strict" else 0.1, item_id=f"i{item}", seed=seed, status=status, output_tokens=L,
                finish_reason="stop", max_new_tokens=10_000, draft_rounds=max(1, L // 3), accepted_tokens=L - max(1, L // 3),
                draft_tokens=4 * max(1, L // 3), wall_time_s=0.01 * L, correct=None, temperature=1.0, top_p=1.0,
                input_tokens=None, l_bar_logged=None, analysis_chars=None, final_chars=None, reached_final_channel=None,
                reference_answer=None, prompt_source_id=None, backend=None, engine_version=None, force_commit_fired=None, text=None,
                source=f"{method}/i{item}/{seed}")


run_sets = st.lists(
    st.tuples(st.sampled_from(["strict", "cactus"]), st.integers(0, 6), st.integers(0, 2), st.integers(5, 500),
              st.sampled_from(["ok", "ok", "ok", "error"])),
    min_size=1, max_size=40, unique_by=lambda t: (t[0], t[1], t[2]))


@settings(max_examples=60, deadline=None)
@given(run_sets)
def test_pairing_accounts_for_every_run_and_pairs_exactly_the_shared_units(rows):
    rs = _runset([_row(*r) for r in rows])
    paired_sources = set(rs.paired["source"].to_list())
    skipped_sources = set(rs.skipped["path"].to_list())
    assert paired_sources.isdisjoint(skipped_sources)
    assert paired_sources | skipped_sources == {f"{m}/i{i}/{s}" for m, i, s, _, _ in rows}
    base_ok = {(i, s) for m, i, s, _, st_ in rows if m == "strict" and st_ == "ok"}
    rel_ok = {(i, s) for m, i, s, _, st_ in rows if m == "cactus" and st_ == "ok"}
    units = cell_units(rs.paired)
    assert {(int(r["item_id"][1:]), r["seed"]) for r in units.iter_rows(named=True)} == base_ok & rel_ok
    # Each unit carries its own baseline run's length.
    lengths = {(m, i, s): L for m, i, s, L, _ in rows}
    for r in units.iter_rows(named=True):
        assert r["output_tokens_star"] == lengths[("strict", int(r["item_id"][1:]), r["seed"])]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 300), st.integers(0, 2**32 - 1))
def test_count_rows_are_resamples_of_all_items(n_items, n_resamples, seed):
    c = item_counts(n_items, n_resamples, np.random.default_rng(seed))
    assert c.shape == (n_resamples, n_items)
    assert (c >= 0).all() and (c.sum(axis=1) == n_items).all()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 30), st.text(min_size=1, max_size=8), st.integers(0, 1000))
def test_counts_depend_only_on_seed_and_group(n, name, seed):
    a = counts_for_group(seed, ("t", "d", name), n, 50)
    b = counts_for_group(seed, ("t", "d", name), n, 50)
    assert np.array_equal(a, b)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(5, 400), st.integers(5, 400)), min_size=2, max_size=15))
def test_lambda_interval_scales_with_lengths(pairs):
    """Scaling every relaxed length by 3 scales lambda and both bounds by 3: the same draws, a ratio of sums."""
    rows = [_row("strict", i, 0, b) for i, (b, _) in enumerate(pairs)] + [_row("cactus", i, 0, r) for i, (_, r) in enumerate(pairs)]
    rows2 = [_row("strict", i, 0, b) for i, (b, _) in enumerate(pairs)] + [_row("cactus", i, 0, 3 * r) for i, (_, r) in enumerate(pairs)]
    c1 = ll.cells(_runset(rows), n_resamples=300).get(method="cactus")["lambda"]
    c2 = ll.cells(_runset(rows2), n_resamples=300).get(method="cactus")["lambda"]
    assert np.isclose(c2.point, 3 * c1.point)
    assert np.isclose(c2.confidence_interval.low, 3 * c1.confidence_interval.low)
    assert np.isclose(c2.confidence_interval.high, 3 * c1.confidence_interval.high)
