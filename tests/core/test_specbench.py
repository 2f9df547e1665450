"""Spec-Bench answer files read as they are (no converter), checked against a plain pandas computation.

The oracle reads the answer files with json + pandas only: per (question, turn), new_tokens,
decoding_steps and wall_time; pairs each speculative method with vanilla on the turns where neither
is an ERROR; and takes ratios of sums (lambda, R/R*, T/T*), the mean per-turn accepted tokens per
step (bonus excluded: (new_tokens - steps) / steps) for gain, and the share of turns at the budget.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest

import lengthlens as ll
from lengthlens.cli import main
from lengthlens.data.readers.specbench import parse_model_id
from lengthlens.analyses.engine import group_items as all_group_items
from lengthlens.report import wording

#: The Spec-Bench sample lives beside the study logs (../shared/data/spec-bench); LENGTHLENS_SHARED_DATA
#: (the study logs' folder, as in tests/conftest.py) moves both.
SPECBENCH = Path(os.environ.get("LENGTHLENS_SHARED_DATA",
                                Path(__file__).resolve().parents[2].parent / "shared" / "data" / "lossy-token-eff")
                 ).parent / "spec-bench"


@pytest.fixture(scope="module")
def specbench() -> Path:
    if not (SPECBENCH / "README.md").is_file():
        pytest.skip(f"Spec-Bench sample not found at {SPECBENCH}")
    return SPECBENCH


def _turns(path: Path) -> pd.DataFrame:
    rows = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        c = r["choices"][0]
        for t, text in enumerate(c["turns"]):
            rows.append({"qid": str(r["question_id"]), "turn": t, "text": text, "new": c["new_tokens"][t],
                         "steps": c["decoding_steps"][t], "wall": c["wall_time"][t]})
    return pd.DataFrame(rows)


def _oracle(arm: Path, vanilla: Path, budget: int = 1024) -> dict[str, float]:
    m = _turns(arm).merge(_turns(vanilla), on=["qid", "turn"], suffixes=("", "_v"))
    m = m[(m.text != "ERROR") & (m.text_v != "ERROR")]
    lbar = ((m.new - m.steps) / m.steps).mean()
    lbar_v = ((m.new_v - m.steps_v) / m.steps_v).mean()
    return {"lambda": m.new.sum() / m.new_v.sum(), "rounds_ratio": m.steps.sum() / m.steps_v.sum(),
            "time_ratio": m.wall.sum() / m.wall_v.sum(), "gain": (lbar + 1) / (lbar_v + 1),
            "censored_frac": (m.new >= budget).mean(), "censored_frac_star": (m.new_v >= budget).mean(),
            "n_items": m.qid.nunique(), "n_runs": len(m)}


@pytest.fixture(scope="module")
def sb_cells(specbench):
    runs = ll.load(specbench, format="specbench")
    return runs, ll.cells(runs, n_resamples=200)


@pytest.mark.parametrize("task, method", [
    ("multiclass_product_classification", "eagle"), ("multiclass_product_classification", "hydra"),
    ("query_product_rank", "eagle"), ("sentiment_analysis", "hydra"), ("test_bench", "sps"), ("test_bench", "medusa"),
])
def test_cells_equal_a_pandas_computation(sb_cells, specbench, task, method):
    runs, cells = sb_cells
    folder = specbench / task / "model_answer"
    arm = next(p for p in folder.glob(f"vicuna-7b-v1.3-{method}-*.jsonl"))
    want = _oracle(arm, folder / "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl")
    cell = cells.get(dataset=task, method=method)
    assert cell.target == "vicuna-7b-v1.3"
    assert (cell.n_items, cell.n_runs) == (want["n_items"], want["n_runs"])
    for name in ("lambda", "rounds_ratio", "time_ratio", "gain", "censored_frac", "censored_frac_star"):
        assert cell[name].point == pytest.approx(want[name], rel=1e-12), name
    assert cell.to_row()["unavailable"] is None


def test_vanilla_is_one_baseline_for_every_draft(sb_cells):
    runs, cells = sb_cells
    t = runs.table
    # vicuna-7b vanilla on test_bench: 4 questions x 2 turns, loaded once, serving 5 drafts.
    van = t.filter((pl.col("dataset") == "test_bench") & (pl.col("method") == "strict") & (pl.col("target") == "vicuna-7b-v1.3"))
    assert van.filter(~pl.col("shared_baseline"))["draft"].to_list() == [""] * 8
    assert sorted(van.filter(pl.col("shared_baseline"))["draft"].unique()) == ["eagle", "eagle3", "hydra", "medusa", "sps-68m"]
    arms = ll.arms(runs)
    assert len(arms[(arms.method == "strict") & (arms.dataset == "test_bench") & (arms.target == "vicuna-7b-v1.3")]) == 1
    assert "4 draft" not in runs.summary() and "serves 5 draft(s)" in runs.summary()
    # The skipped list names each failed vanilla turn once, not once per draft.
    assert runs.skipped.filter(pl.col("path").str.contains("13b-v1.3-vanilla")).height == 8
    # Draftless baseline with no speculative arm of its own model stays as it is (13b).
    assert t.filter(pl.col("target") == "vicuna-13b-v1.3")["draft"].unique().to_list() == [""]


def test_multi_turn_conversation_is_the_resampling_unit(sb_cells):
    runs, cells = sb_cells
    items = all_group_items(runs)[("vicuna-7b-v1.3", "sps-68m", "test_bench", "")]  # no serving condition logged
    assert items == ["81", "82", "83", "84"]  # questions, not (question, turn)
    c = cells.get(dataset="test_bench", method="sps")
    assert (c.n_items, c.n_runs) == (4, 8)


def test_error_turns_are_status_error(sb_cells):
    runs, _ = sb_cells
    e3 = runs.table.filter(pl.col("method") == "eagle3")
    assert e3.height == 8 and set(e3["status"]) == {"error"} and e3["wall_time_s"].null_count() == 8


@pytest.mark.parametrize("model_id, want", [
    ("vicuna-7b-v1.3-sps-68m-float16-temp-0.0", ("vicuna-7b-v1.3", "sps", "sps-68m", "float16-temp0.0", 0.0)),
    ("vicuna-7b-v1.3-eagle-float16-temperature-0.0", ("vicuna-7b-v1.3", "eagle", "eagle", "float16-temp0.0", 0.0)),
    ("Qwen2.5-7B-Instruct-vanilla-float16-temp-0.7", ("Qwen2.5-7B-Instruct", "autoregressive", "", "float16-temp0.7", 0.7)),
    ("vicuna-7b-v1.3-medusa-float16", ("vicuna-7b-v1.3", "medusa", "medusa", "float16", None)),
])
def test_parse_model_id(model_id, want):
    got = parse_model_id(model_id)
    assert (got["target"], got["method"], got["draft"], got["params"], got["temperature"]) == want


def test_unreadable_model_id_is_named():
    with pytest.raises(ValueError, match="cannot read 'my-run' as"):
        parse_model_id("my-run")


def _answer(qid, turns, news, steps, walls):
    acc = []
    for n, k in zip(news, steps):  # k steps emitting n tokens: one step emits the remainder
        acc += [1] * (k - 1) + [n - (k - 1)] if k else []
    return {"question_id": qid, "choices": [{"index": 0, "turns": turns, "new_tokens": news, "decoding_steps": steps,
                                             "wall_time": walls, "accept_lengths": acc}]}


def _write(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def two_turn_tree(tmp_path):
    """Three 2-turn questions, budget 1024: sps's turn 1 of q1 runs to 1025 tokens (one past the budget)."""
    ma = tmp_path / "mt" / "model_answer"
    _write(ma / "m-7b-vanilla-float16-temp-0.0.jsonl", [
        _answer(1, ["a", "b"], [1000, 500], [1000, 500], [10.0, 5.0]),
        _answer(2, ["a", "b"], [200, 300], [200, 300], [2.0, 3.0]),
        _answer(3, ["a", "ERROR"], [100, 0], [100, 0], [1.0, float("nan")]),
    ])
    _write(ma / "m-7b-sps-68m-float16-temp-0.0.jsonl", [
        _answer(1, ["a", "b"], [1025, 400], [400, 200], [4.0, 2.0]),
        _answer(2, ["a", "b"], [200, 300], [100, 100], [1.0, 1.0]),
        _answer(3, ["a", "b"], [120, 80], [60, 40], [0.5, 0.5]),
    ])
    return tmp_path


def test_budgets_and_censoring_apply_per_turn(two_turn_tree):
    runs = ll.load(two_turn_tree, format="specbench")
    c = ll.cells(runs, n_resamples=100).get(method="sps")
    # Paired turns: q1 t1, q1 t2, q2 t1, q2 t2, q3 t1 (vanilla's q3 turn 2 is an ERROR).
    assert (c.n_items, c.n_runs) == (3, 5)
    assert c["lambda"].point == pytest.approx((1025 + 400 + 200 + 300 + 120) / (1000 + 500 + 200 + 300 + 100))
    # The 1,025-token turn is censored against its own 1,024 budget (summed per question it would not be).
    assert c["censored_frac"].point == pytest.approx(1 / 5)
    assert c["censored_frac_star"].point == 0
    # Accepted tokens exclude the bonus token: (new - steps) / steps per turn, mean over turns.
    lbar = np.mean([(1025 - 400) / 400, 200 / 200, 100 / 100, 200 / 100, 60 / 60])
    assert c["l_bar"].point == pytest.approx(lbar)
    assert c["gain"].point == pytest.approx(lbar + 1)


def test_budget_option(two_turn_tree):
    runs = ll.load(two_turn_tree, format="specbench", format_options={"max_new_tokens": 2048})
    assert ll.cells(runs, n_resamples=50).get(method="sps")["censored_frac"].point == 0
    assert not any("no token budget" in w for w in runs.warnings)


def test_cli_report_and_import(two_turn_tree, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", "--format", "specbench", str(two_turn_tree / "mt"), "--out", str(out), "--no-pdf",
                 "--n-resamples", "200", "--no-figures", "-q"]) == 0
    direct = pd.read_csv(out / "cells.csv")
    records = tmp_path / "runs.parquet"
    assert main(["import", "specbench", str(two_turn_tree / "mt"), "--out", str(records)]) == 0
    via = ll.cells(ll.load(records), n_resamples=50).to_frame()
    assert direct["lambda"].tolist() == pytest.approx(via["lambda"].tolist())
    assert via["n_runs"].tolist() == [5]


def test_report_exits_nonzero_without_cells(tmp_path, capsys):
    ma = tmp_path / "t" / "model_answer"
    _write(ma / "m-7b-sps-68m-float16-temp-0.0.jsonl", [_answer(1, ["a"], [10], [5], [1.0])])
    assert main(["report", "--format", "specbench", str(tmp_path / "t"), "--out", str(tmp_path / "o"), "--no-pdf"]) == 2
    err = capsys.readouterr().err
    assert "no cell could be formed" in err and "no ok strict baseline" in err
    assert not (tmp_path / "o" / "report.html").exists()


def test_gsm8k_reference_with_hash_marker():
    from lengthlens.data.grading import grade

    ref = "Natalia sold 48/2 = 24 clips in May.\nShe sold 48+24 = 72 clips.\n#### 72"
    assert grade("gsm8k", "So she sold 72 clips in all. #### 72", ref).correct is True
    assert grade("gsm8k", "#### 71", ref).correct is False


def test_nan_wall_time_message():
    from lengthlens.data.schema import validate_record

    base = dict(target="t", draft="d", dataset="x", method="m", params="p", item_id="1", seed=0, output_tokens=3)
    rec, errs = validate_record({**base, "status": "error", "wall_time_s": float("nan")}, "f.jsonl", 1)
    assert rec is not None and rec.wall_time_s is None
    rec, errs = validate_record({**base, "status": "ok", "wall_time_s": float("nan")}, "f.jsonl", 2)
    assert rec is None and "is NaN" in str(errs[0]) and "f.jsonl:2" in str(errs[0])
    assert not math.isnan(0.0)


def test_compare_methods_with_different_drafts(sb_cells, specbench):
    runs, cells = sb_cells
    folder = specbench / "query_product_rank" / "model_answer"
    want = _oracle(folder / "vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl",
                   folder / "vicuna-7b-v1.3-hydra-float16-temperature-0.0.jsonl")
    c = ll.compare(runs, {"method": "eagle", "dataset": "query_product_rank"},
                   {"method": "hydra", "dataset": "query_product_rank"}, n_resamples=300)
    assert (c.n_items, c.n_runs) == (50, 50)
    for name in ("lambda", "rounds_ratio", "time_ratio", "gain"):
        assert c[name].point == pytest.approx(want[name], rel=1e-12), name
        ci = c[name].confidence_interval
        assert ci.low <= c[name].point <= ci.high
    # Against the shared autoregressive baseline, compare gives the cell's numbers.
    sps = ll.compare(runs, {"method": "sps", "target": "vicuna-7b-v1.3", "dataset": "test_bench"},
                     {"method": "strict", "target": "vicuna-7b-v1.3", "dataset": "test_bench"}, n_resamples=50)
    cell = cells.get(dataset="test_bench", method="sps")
    for name in ("lambda", "rounds_ratio", "time_ratio", "gain"):
        assert sps[name].point == pytest.approx(cell[name].point, rel=1e-12)
    assert sps.n_runs == 8


def test_compare_leaves_uncomputable_metrics_empty(tmp_path):
    rows = [{"target": "t", "draft": d, "dataset": "x", "method": m, "params": p, "item_id": str(i), "seed": 0,
             "status": "ok", "output_tokens": 100 + 10 * i + k} for i in range(5)
            for k, (d, m, p) in enumerate([("a", "eagle", "p"), ("b", "sps", "p")])]
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = ll.compare(ll.load(path), {"method": "eagle"}, {"method": "sps"}, n_resamples=50)
    assert c["lambda"].point == pytest.approx(sum(100 + 10 * i for i in range(5)) / sum(101 + 10 * i for i in range(5)))
    assert math.isnan(c["gain"].point) and "draft_rounds" in c.unavailable["gain"]


def test_lossless_check_counts_differing_outputs(sb_cells, specbench):
    runs, cells = sb_cells
    from lengthlens.analyses.methods import lossless_check
    from lengthlens.data.pairing import cell_units

    df = lossless_check(cell_units(runs.paired), cells.to_frame())
    folder = specbench / "multiclass_product_classification" / "model_answer"
    m = _turns(folder / "vicuna-7b-v1.3-hydra-float16-temperature-0.0.jsonl").merge(
        _turns(folder / "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl"), on=["qid", "turn"], suffixes=("", "_v"))
    row = df[(df.method == "hydra") & (df.dataset == "multiclass_product_classification")].iloc[0]
    assert (row.n_runs, row.n_outputs_differ, row.n_lengths_differ) == (50, (m.text != m.text_v).sum(), (m.new != m.new_v).sum())
    assert row.n_outputs_differ == 4
    # The verdict follows the interval: the default (studentized) one includes 1 here, the percentile one
    # does not (all four differing outputs are shorter), and then the report says so plainly.
    # (All item ratios are at most 1, so the upper limit stops at the largest of them: 1, which the interval holds.)
    assert row.lambda_lo < 1 <= row.lambda_hi and "includes 1" in row.verdict
    pct = lossless_check(cell_units(runs.paired), ll.cells(runs, n_resamples=200, ci="percentile").to_frame())
    row = pct[(pct.method == "hydra") & (pct.dataset == "multiclass_product_classification")].iloc[0]
    assert row.lambda_hi < 1 and "not lossless in practice" in row.verdict


def test_analysis_words_fit_lossless_methods(specbench):
    runs = ll.load(specbench / "test_bench", format="specbench")
    a = ll.analyse(runs, n_resamples=50)
    head = wording.headline(a)
    assert "lossless speculative methods" in head and "grew" not in head and "nan" not in head
    lo = a.tables["lossless"]
    line = next(x for x in wording.summary_lines(a) if x.startswith("lossless check"))
    assert f"on {lo['n_outputs_differ'].sum()} of {lo['n_runs'].sum()} paired runs" in line
    assert lo["n_runs"].sum() == 32  # eagle, hydra, medusa, sps: 4 questions x 2 turns each
    pairs = a.tables["methods"]
    # 4 speculative methods with their own drafts on test_bench (eagle3 only errored): 6 pairs.
    assert len(pairs) == 6 and set(pairs["x_method"]) | set(pairs["y_method"]) == {"eagle", "hydra", "medusa", "sps"}
    one = pairs[(pairs.x_method == "medusa") & (pairs.y_method == "sps")].iloc[0]
    want = ll.compare(runs, {"method": "medusa"}, {"method": "sps"}, n_resamples=50)
    assert one["rounds_ratio"] == pytest.approx(want["rounds_ratio"].point)


def test_gsm8k_questions_grade_spec_bench_answers(tmp_path):
    """question.jsonl references in GSM8K's own form ('... #### N') grade the answers; --questions overrides."""
    ma = tmp_path / "gsm8k" / "model_answer"
    refs = {1: "3 + 4 = 7\n#### 7", 2: "2 * 6 = 12\n#### 12"}
    _write(tmp_path / "gsm8k" / "question.jsonl", [{"question_id": q, "turns": ["?"], "reference": [r]} for q, r in refs.items()])
    for name, texts in (("m-7b-vanilla-float16-temp-0.0", ["It is 7.", "It is 12."]),
                        ("m-7b-eagle-float16-temp-0.0", ["It is 7.", "It is 13."])):
        _write(ma / f"{name}.jsonl", [_answer(q, [t], [20], [20 if "vanilla" in name else 5], [1.0])
                                      for q, t in zip(refs, texts)])
    cell = ll.cells(ll.load(tmp_path / "gsm8k", format="specbench"), n_resamples=50).get(method="eagle")
    assert (cell.n_graded, cell["accuracy"].point, cell["accuracy_star"].point) == (2, 0.5, 1.0)
    other = tmp_path / "other.jsonl"
    _write(other, [{"question_id": q, "turns": ["?"], "reference": ["#### 13"]} for q in refs])
    runs = ll.load(tmp_path / "gsm8k", format="specbench", format_options={"questions": other})
    assert ll.cells(runs, n_resamples=50).get(method="eagle")["accuracy"].point == 0.5  # 13 right on q2 only


def test_same_run_in_two_files_lists_both_paths(tmp_path):
    row = {"target": "t", "draft": "d", "dataset": "x", "method": "strict", "params": "strict", "item_id": "1",
           "seed": 0, "status": "ok", "output_tokens": 5}
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps(row) + "\n")
    b.write_text(json.dumps(row) + "\n")
    runs = ll.load(a, b)
    dup = runs.skipped.filter(pl.col("reason").str.contains("duplicate"))
    assert dup.height == 1 and dup["path"][0] == f"{b}:1" and f"{a}:1" in dup["reason"][0]


def test_report_exits_nonzero_when_nothing_loaded(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p",
                               "item_id": "1", "seed": -1, "status": "ok"}) + "\n")
    assert main(["report", str(bad), "--out", str(tmp_path / "o"), "--no-pdf", "-q"]) == 2
    assert "nothing was loaded" in capsys.readouterr().err


def test_example_cannot_be_read_with_a_format(tmp_path, capsys):
    assert main(["report", "--example", "--format", "specbench", "--out", str(tmp_path / "o")]) == 2
    assert "--example" in capsys.readouterr().err
