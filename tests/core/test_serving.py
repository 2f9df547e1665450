"""Serving conditions: cells formed within each, pairing that never crosses them, planted truth recovered per condition,
and numbers unchanged where none is logged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import lengthlens as ll
from lengthlens.analyses.serving import serving_table
from lengthlens.data.pairing import cell_units
from lengthlens.data.schema import POLARS_SCHEMA
from lengthlens.data.serving import serving_conditions, serving_label, with_serving
from lengthlens.report.snapshot import check
from lengthlens.stats.resample import counts_for_group
from lengthlens.synth import example, simulate
from lengthlens.synth.serving import loads, serving_example, serving_truth, simulate_serving

FIXTURES = Path(__file__).parent / "fixtures" / "serving"


def _write(tmp_path: Path, df: pl.DataFrame, name: str = "runs.jsonl") -> Path:
    p = tmp_path / name
    df.select(POLARS_SCHEMA.names()).write_ndjson(p)
    return p


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    spec, ld = serving_example(), loads()
    p = _write(tmp_path_factory.mktemp("serving"), simulate_serving(spec, ld, seed=0))
    return ll.load(p), serving_truth(spec, ld)


def test_labels_and_their_order():
    assert serving_label(concurrency=8, request_rate=float("inf"), batch_size=16, gpu="NVIDIA H200") == \
        "c=8, rate=inf, bs=16, gpu=NVIDIA H200"
    assert serving_label(request_rate=0.5) == "rate=0.5/s" and serving_label() == ""
    assert serving_conditions(["c=64", "c=4", "", "c=16", "c=4"]) == ["", "c=4", "c=16", "c=64"]
    t = with_serving(pl.DataFrame({"concurrency": [1, None, 8], "gpu": ["A", None, None]}))
    assert t.get_column("serving").to_list() == ["c=1, gpu=A", "", "c=8"]


def test_cells_per_condition_recover_the_planted_values(served):
    """Every cell's 99.9 % interval holds its condition's planted R/R*, T/T*, tokens/s ratio and λ (24 intervals,
    one fixed draw); the planted T/T* crosses 1 (cactus near c=6, r_fuzzy near c=50), and serving.csv sees it."""
    runs, truth = served
    table = ll.cells(runs, n_resamples=2000, seed=3, confidence_level=0.999)
    df = table.to_frame()
    assert sorted(df["serving"].unique()) == sorted(ld.serving for ld in loads())
    want = truth.filter(pl.col("method") != "strict").to_pandas().set_index(["method", "serving"])
    for metric, planted in (("rounds_ratio", "rounds_ratio"), ("time_ratio", "time_ratio"),
                            ("throughput_ratio", "throughput_ratio"), ("lambda", "lambda_")):
        for r in df.itertuples():
            value = want.loc[(r.method, r.serving), planted]
            lo, hi = getattr(r, f"{metric}_lo"), getattr(r, f"{metric}_hi")
            assert lo <= value <= hi, (metric, r.method, r.serving, lo, value, hi)
    # At the usual 95 %: both rules win alone; cactus (planted T/T* 1.17 at c=64) clearly loses at the heaviest load.
    st = serving_table(ll.cells(runs, n_resamples=2000, seed=3).to_frame()).set_index(["method", "serving"])
    assert st.loc[("r_fuzzy", "c=1"), "time_ratio_hi"] < 1 and st.loc[("cactus", "c=1"), "time_ratio_hi"] < 1
    assert st.loc[("cactus", "c=64"), "time_ratio_lo"] > 1 and st.loc[("r_fuzzy", "c=64"), "time_ratio_hi"] > 1
    # The lightest load past a win whose interval no longer lies below 1.
    for method in ("cactus", "r_fuzzy"):
        rows = st.loc[method]
        wins = list(rows["time_ratio_hi"] < 1)
        first = next(s for s, w, seen in zip(rows.index, wins, np.cumsum(wins) > 0) if seen and not w)
        assert set(rows["advantage_lost_at"]) == {first}
    assert list(st.loc["r_fuzzy", "load"]) == [1.0, 4.0, 16.0, 64.0]


def test_pairing_never_crosses_conditions(served):
    """Each relaxed run's baseline is the baseline run of its own condition (same item and seed): its wall time
    is that run's, not the other conditions'."""
    runs, _ = served
    units = cell_units(runs.paired)
    assert (units["concurrency"] == units["concurrency_star"]).all()
    base = runs.paired.filter(pl.col("method") == "strict").select("concurrency", "item_id", "seed",
                                                                   pl.col("wall_time_s").alias("own"))
    joined = units.join(base, on=["concurrency", "item_id", "seed"])
    assert joined.height == units.height and (joined["wall_time_s_star"] == joined["own"]).all()
    assert units.height == 4 * 2 * 150 * 2  # conditions x rules x items x seeds


def test_an_arm_without_a_baseline_at_its_condition_is_skipped_with_its_reason(tmp_path):
    df = simulate_serving(serving_example(20), loads((1, 4, 16)), seed=1)
    df = df.filter(~((pl.col("method") == "strict") & (pl.col("concurrency") == 16)))
    runs = ll.load(_write(tmp_path, df))
    sk = runs.skipped.to_pandas()
    assert len(sk) == 2 * 20 * 2  # both rules at c=16, every item and seed
    assert set(sk["reason"]) == {"no ok strict baseline at serving condition 'c=16' for this target, draft and dataset "
                                 "(its baseline was served at: c=1; c=4)"}
    cells = ll.cells(runs, n_resamples=100).to_frame()
    assert sorted(set(cells["serving"])) == ["c=1", "c=4"]


def test_table3_is_per_condition(served):
    runs, _ = served
    t3 = ll.table3(ll.cells(runs, n_resamples=200))
    assert list(t3["serving"]) == [s for s in ("c=1", "c=4", "c=16", "c=64") for _ in range(2)] + ["all"]
    assert list(t3["method"])[:2] == ["cactus", "r_fuzzy"] and t3["method"].iloc[-1] == "all"
    assert t3["n_cells"].iloc[-1] == 8 and (t3["n_cells"].iloc[:-1] == 1).all()


def test_without_serving_fields_the_numbers_are_those_of_before(tmp_path):
    """The snapshot was written by lengthlens before serving conditions existed (same synthetic runs, no serving
    field): every number, interval limits included, is reproduced; so are the draws (names without serving)."""
    df = simulate(example(), seed=0).filter(pl.col("dataset") == "gsm8k")
    runs = ll.load(_write(tmp_path, df))
    assert set(runs.table["serving"]) == {""}
    result = check(runs, FIXTURES / "no_serving.snapshot.json")
    assert result.ok, result.report(limit=20)
    cells = ll.cells(runs, n_resamples=300, seed=5, ci="percentile")
    c = cells.get(target="Qwen3-8B", method="cactus")
    t = runs.table.filter((pl.col("target") == "Qwen3-8B") & (pl.col("dataset") == "gsm8k")).sort("item_id")
    L = t.filter(pl.col("method") == "cactus")["output_tokens"].cast(pl.Float64).to_numpy()
    Ls = t.filter(pl.col("method") == "strict")["output_tokens"].cast(pl.Float64).to_numpy()
    counts = counts_for_group(5, ("Qwen3-8B", "Qwen3-0.6B", "gsm8k"), len(L), 300)
    lo, hi = np.percentile((counts @ L) / (counts @ Ls), [2.5, 97.5])
    assert (c["lambda"].low, c["lambda"].high) == pytest.approx((lo, hi), rel=1e-12)


def test_the_report_shows_serving_conditions_only_when_there_are_several(served, tmp_path):
    from lengthlens.report import render_html, wording

    runs, _ = served
    a = ll.analyse(runs, n_resamples=300, proposals=False)
    html = render_html(a)
    assert '<section id="serving"' in html and 'id="fig-serving"' in html
    sentence = wording.serving_sentence(a)
    lost = a["serving"].drop_duplicates(["method"]).set_index("method")["advantage_lost_at"]
    assert sentence in html and all(f"{m} " in sentence and f"at {lost[m]}" in sentence for m in lost.index if lost[m])
    one = ll.load(_write(tmp_path, simulate(example(), seed=0).filter(pl.col("dataset") == "gsm8k")))
    b = ll.analyse(one, n_resamples=100, proposals=False)
    assert "serving" not in b.tables and wording.serving_sentence(b) == ""
    assert '<section id="serving"' not in render_html(b, with_figures=False)


def test_check_leaves_a_metric_the_snapshot_lacks_out_of_the_fallback_lists():
    """A snapshot from before throughput_ratio existed: its entry in the fallback lists is not checked, like its columns;
    a changed entry of a metric the snapshot has is."""
    import pandas as pd

    from lengthlens.report.snapshot import snapshot

    now = pd.DataFrame([{"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p", "serving": "",
                         "lambda": 1.2, "throughput_ratio": 1.1,
                         "interval_fallback": "lambda: unbounded; throughput_ratio: unbounded",
                         "percentile_fallback": "lambda,throughput_ratio"}])
    before = snapshot(now.drop(columns="throughput_ratio").assign(interval_fallback="lambda: unbounded",
                                                                   percentile_fallback="lambda"))
    assert before["cells"][0]["key"] == {"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p"}
    assert check(now, before).ok
    moved = check(now.assign(interval_fallback="lambda: other; throughput_ratio: unbounded"), before)
    assert [d.column for d in moved.differences] == ["interval_fallback"]
