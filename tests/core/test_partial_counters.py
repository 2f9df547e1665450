"""Logs with only some counters: each metric is computed where its inputs exist, empty with the reason otherwise.

The fixture is a flat file as a batched-vLLM study without speculative counters would write it:
identity, output_tokens, max_new_tokens and correct only; the baseline is plain autoregressive
decoding (method `autoregressive`, no draft). Expected values are computed by hand below.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import lengthlens as ll
from lengthlens.report import write_report
from lengthlens.analyses.cells import CellTable
from lengthlens.analyses.engine import Settings
from lengthlens.report import wording

#            item: (L baseline, correct*, L relaxed, correct)   budget 512
ITEMS = {"q1": (100, True, 150, True), "q2": (512, False, 512, False), "q3": (300, True, 400, False),
         "q4": (200, True, 180, True)}


def _rows(**extra):
    rows = []
    for item, (lb, cb, lr, cr) in ITEMS.items():
        rows.append({"target": "qwen3-8b", "draft": "", "dataset": "gsm8k", "method": "autoregressive",
                     "params": "autoregressive", "item_id": item, "seed": 0, "status": "ok", "output_tokens": lb,
                     "max_new_tokens": 512, "correct": cb, **extra})
        rows.append({"target": "qwen3-8b", "draft": "qwen3-0.6b", "dataset": "gsm8k", "method": "cactus",
                     "params": "alpha0.3", "item_id": item, "seed": 0, "status": "ok", "output_tokens": lr,
                     "max_new_tokens": 512, "correct": cr, **extra})
    return rows


@pytest.fixture
def minimal(tmp_path):
    path = tmp_path / "minimal.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    return path


def test_lambda_accuracy_censoring_from_lengths_and_correctness_only(minimal):
    runs = ll.load(minimal)
    assert runs.skipped.height == 0 and not [w for w in runs.warnings if "finish_reason" in w]
    cell = ll.cells(runs, n_resamples=200).get(method="cactus")
    assert cell["lambda"].point == pytest.approx((150 + 512 + 400 + 180) / (100 + 512 + 300 + 200))
    assert cell["lambda"].confidence_interval.low <= cell["lambda"].point <= cell["lambda"].confidence_interval.high
    assert (cell["accuracy"].point, cell["accuracy_star"].point) == (0.5, 0.75)
    assert cell["accuracy_delta_pp"].point == pytest.approx(-25.0)
    assert (cell["censored_frac"].point, cell["censored_frac_star"].point) == (0.25, 0.25)
    for name in ("gain", "gain_pooled", "l_bar", "rounds_ratio", "rounds_ratio_predicted", "time_ratio", "time_per_round_ratio"):
        assert math.isnan(cell[name].point), name
    assert math.isnan(cell["gain"].confidence_interval.low)
    why = cell.to_row()["unavailable"]
    assert "gain" in why and "accepted_tokens and draft_rounds not logged on 4 of 4 paired runs" in why
    assert "time_ratio, throughput_ratio, time_ratio_median_item: wall_time_s not logged on 4 of 4 paired runs" in why
    assert "lambda" not in why.replace("l_bar", "")


def test_one_missing_wall_time_empties_time_ratio_only(tmp_path):
    rows = _rows(wall_time_s=1.0, draft_rounds=10, accepted_tokens=20)
    del rows[3]["wall_time_s"]
    path = tmp_path / "partial.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cell = ll.cells(ll.load(path), n_resamples=50).get(method="cactus")
    assert math.isnan(cell["time_ratio"].point) and cell["rounds_ratio"].point == 1.0
    assert cell.to_row()["unavailable"] == ("time_ratio, time_per_round_ratio, throughput_ratio, time_ratio_median_item: "
                                            "wall_time_s not logged on 1 of 4 paired runs")


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no "Mean of empty slice" from metrics not computed
def test_report_without_counters_has_no_nan_and_explains(minimal, tmp_path):
    assert "No cell enters Table 3" in wording.headline(ll.analyse(ll.load(minimal), n_resamples=50))  # 4 items: small
    analysis = ll.analyse(ll.load(minimal), n_resamples=50, include_small=True)
    assert "nan" not in wording.headline(analysis)
    assert "gain not computed" in wording.headline(analysis)
    assert any("not computed in 1 of 1 cells" in n and "draft_rounds" in n for n in analysis.notes)
    write_report(analysis, tmp_path / "out", pdf=False)
    html = (tmp_path / "out" / "report.html").read_text()
    assert "not computed in 1 of 1 cells" in html
    assert "The length illusion at a glance" not in html  # its figure plots gain, which these logs cannot give
    assert "qwen3-8b ← (no draft: autoregressive)" in html
    assert "8 found, 8 loaded, 8 paired" in html  # the shared baseline counted once


def test_unknown_censoring_is_not_taken_as_uncensored(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "max_new_tokens"} for r in _rows()]
    path = tmp_path / "nobudget.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = ll.load(path)
    cell = ll.cells(runs, n_resamples=50).get(method="cactus")
    assert math.isnan(cell["censored_frac"].point) and not math.isnan(cell["lambda"].point)
    assert "finish_reason or max_new_tokens not logged" in cell.to_row()["unavailable"]
    assert ll.analyse(runs, n_resamples=50).tables["censoring"].empty


def test_only_a_baseline_may_lack_a_draft(tmp_path):
    rows = _rows()
    rows[1]["draft"] = ""
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = ll.load(path)
    reasons = dict(zip(runs.skipped["path"], runs.skipped["reason"]))
    assert "only a baseline" in reasons[f"{path}:2"]


def test_zero_cells_frame_has_the_usual_columns():
    df = CellTable(cells=(), settings=Settings(n_resamples=10, seed=0, ci="percentile")).to_frame()
    assert len(df) == 0
    for c in ("target", "draft", "dataset", "method", "params", "n_items", "lambda", "lambda_lo", "gain_hi",
              "accuracy_delta_lo", "censored_frac"):
        assert c in df.columns
    assert isinstance(df, pd.DataFrame)


def test_csv_with_an_empty_draft_for_the_baseline(tmp_path):
    path = tmp_path / "minimal.csv"
    rows = [{**r, "method": "strict", "params": "strict"} if r["draft"] == "" else r for r in _rows()]
    pd.DataFrame(rows).to_csv(path, index=False)  # the baseline's empty draft is an empty cell
    runs = ll.load(path)
    assert runs.skipped.height == 0
    cell = ll.cells(runs, n_resamples=50).get(method="cactus")
    assert cell["lambda"].point == pytest.approx((150 + 512 + 400 + 180) / (100 + 512 + 300 + 200))


def test_a_draft_with_its_own_strict_baseline_keeps_it(tmp_path):
    rows = _rows()
    # A second draft with its own strict baseline (lengths 10 x the autoregressive ones' item order).
    for item, (lb, cb, lr, cr) in ITEMS.items():
        rows.append({"target": "qwen3-8b", "draft": "qwen3-1.7b", "dataset": "gsm8k", "method": "strict",
                     "params": "strict", "item_id": item, "seed": 0, "status": "ok", "output_tokens": 100,
                     "max_new_tokens": 512})
        rows.append({"target": "qwen3-8b", "draft": "qwen3-1.7b", "dataset": "gsm8k", "method": "cactus",
                     "params": "alpha0.3", "item_id": item, "seed": 0, "status": "ok", "output_tokens": 120,
                     "max_new_tokens": 512})
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cells = ll.cells(ll.load(path), n_resamples=50)
    assert cells.get(draft="qwen3-1.7b")["lambda"].point == pytest.approx(1.2)
    assert cells.get(draft="qwen3-0.6b")["lambda"].point == pytest.approx((150 + 512 + 400 + 180) / (100 + 512 + 300 + 200))


def test_flat_multi_turn_resamples_conversations(tmp_path):
    """Turns in a flat file: λ sums turns; the interval resamples whole conversations.

    Oracle: the group's count matrix (counts_for_group, the same draws cells() uses) applied to
    per-conversation sums of both turns, percentile interval by a plain numpy loop.
    """
    from lengthlens.stats.resample import DEFAULT_SEED, counts_for_group

    rng = np.random.default_rng(5)
    rows, L, Ls = [], {}, {}
    for i in range(12):
        for turn in (1, 2):
            lb, lr = int(rng.integers(50, 400)), int(rng.integers(50, 400))
            L[f"c{i:02d}"] = L.get(f"c{i:02d}", 0) + lr
            Ls[f"c{i:02d}"] = Ls.get(f"c{i:02d}", 0) + lb
            for d, m, p, n in (("", "vanilla", "vanilla", lb), ("eagle", "eagle", "t0", lr)):
                rows.append({"target": "m", "draft": d, "dataset": "mt", "method": m, "params": p, "item_id": f"c{i:02d}",
                             "seed": 0, "turn": turn, "status": "ok", "output_tokens": n, "max_new_tokens": 1024})
    path = tmp_path / "turns.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cell = ll.cells(ll.load(path), n_resamples=400, ci="percentile").get(method="eagle")
    assert (cell.n_items, cell.n_runs) == (12, 24)
    items = sorted(L)
    x, xs = np.array([L[i] for i in items], float), np.array([Ls[i] for i in items], float)
    assert cell["lambda"].point == pytest.approx(x.sum() / xs.sum())
    C = counts_for_group(DEFAULT_SEED, ("m", "eagle", "mt"), 12, 400).astype(float)
    reps = np.array([(c * x).sum() / (c * xs).sum() for c in C])
    lo, hi = np.percentile(reps, [2.5, 97.5])
    assert (cell["lambda"].confidence_interval.low, cell["lambda"].confidence_interval.high) == pytest.approx((lo, hi), rel=1e-12)
