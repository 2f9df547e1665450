"""The engines' own per-request records read as they are: vLLM, SGLang, AIPerf, ``vllm bench serve``.

Fixture files: tests/core/fixtures/engines/, built by engine_fixtures.py from the engines' output
structures as their sources define them (vLLM 0.33.0 wheel, commit g4ba787ec9, and 0.29.0,
g98dff2a81: ``vllm/entrypoints/generate/base/protocol.py`` ``SpeculativeDecodingMetrics`` /
``PerRequestMetrics``, ``vllm/v1/metrics/stats.py`` ``RequestSpecDecodeMetrics.to_dict``,
``vllm/entrypoints/openai/chat_completion/protocol.py``, ``vllm/benchmarks/serve.py``; SGLang 0.5.23
and 0.5.9 wheels: ``sglang/srt/managers/tokenizer_manager.py`` ``_handle_batch_output`` /
``_calculate_spec_decoding_metrics``, ``sglang/srt/entrypoints/openai/protocol.py`` ``SglExt`` /
``SpecTokensDetails``; AIPerf 0.13.0 wheel: ``aiperf/common/models/record_models.py``
``MetricRecordInfo``, ``spec_decode_models.py``, ``aiperf/post_processors/record_export_jsonl_writer.py``).
The AIPerf lines and SGLang's OpenAI responses were also checked to round-trip through the real
pydantic models (the optional tests at the end, which run where those packages are importable);
the vLLM responses are checked against vLLM's models in tests/vllm_job.

The oracle reads the same files with json + pandas only: per item, tokens, steps, accepted drafts and
time as each engine names them; pairs each arm with the strict arm on items ok on both sides; and
takes ratios of sums (λ, R/R*, T/T*), the mean per-run accepted/steps for gain, and the share at the
budget for censoring.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

import lengthlens as ll
from lengthlens.cli import main
from lengthlens.data.loading import LoadError

from .engine_fixtures import BUDGET, ROOT, build

METRICS = ("lambda", "rounds_ratio", "time_ratio", "gain", "censored_frac", "censored_frac_star")


def _lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def _oracle(arm: pd.DataFrame, base: pd.DataFrame) -> dict[str, float]:
    """Cell numbers from two per-item frames (item, ok, out, steps, acc, wall, length): plain pandas."""
    m = arm[arm.ok].merge(base[base.ok], on="item", suffixes=("", "_b"))
    out = {"lambda": m.out.sum() / m.out_b.sum(), "n_items": len(m),
           "censored_frac": m.length.mean(), "censored_frac_star": m.length_b.mean()}
    if m.steps.notna().all():
        out["rounds_ratio"] = m.steps.sum() / m.steps_b.sum()
        out["gain"] = ((m.acc / m.steps).mean() + 1) / ((m.acc_b / m.steps_b).mean() + 1)
    if m.wall.notna().all():
        out["time_ratio"] = m.wall.sum() / m.wall_b.sum()
    return out


def _check(cell, want: dict[str, float]) -> None:
    assert cell.n_items == want["n_items"]
    for name in METRICS:
        if name in want:
            assert cell[name].point == pytest.approx(want[name], rel=1e-12), name
        else:
            assert math.isnan(cell[name].point), name


def test_fixture_files_are_what_the_builder_writes(tmp_path):
    build(tmp_path)
    built = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert built == sorted(p.relative_to(ROOT) for p in ROOT.rglob("*") if p.is_file())
    for rel in built:
        assert (tmp_path / rel).read_bytes() == (ROOT / rel).read_bytes(), rel


# --- vLLM -------------------------------------------------------------------------------------

def _vllm_frame(path: Path) -> pd.DataFrame:
    rows = []
    for d in _lines(path):
        r = d["response"]
        if "choices" not in r:
            continue
        sd, m, ch = r["metrics"]["speculative_decoding"], r["metrics"], r["choices"][0]
        rows.append({"item": d["item_id"], "ok": ch["finish_reason"] not in ("abort", "error"),
                     "out": r["usage"]["completion_tokens"], "steps": sd["num_spec_steps"],
                     "acc": sd["num_accepted_draft_tokens"],
                     "wall": (m["time_to_first_token_ms"] + m["generation_time_ms"]) / 1000,
                     "length": ch["finish_reason"] == "length" or r["usage"]["completion_tokens"] >= d["request"]["max_tokens"]})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def vllm_runs():
    return ll.load(ROOT / "vllm", format="vllm")


def test_vllm_cells_equal_a_pandas_computation(vllm_runs):
    cell = ll.cells(vllm_runs, n_resamples=200).get(method="fly")
    assert (cell.target, cell.draft, cell.dataset) == ("Qwen/Qwen3-8B", "eagle3-qwen3-8b", "gsm8k")
    _check(cell, _oracle(_vllm_frame(ROOT / "vllm/fly/responses.jsonl"), _vllm_frame(ROOT / "vllm/strict/responses.jsonl")))
    assert cell.to_row()["unavailable"] is None


def test_vllm_fields_kept_and_failures_named(vllm_runs):
    t = vllm_runs.table
    q1 = t.filter((pl.col("method") == "strict") & (pl.col("item_id") == "q1")).row(0, named=True)
    # counts of the histogram [2, 3, 4, 5]: 14 steps, 26 accepted, 1 + 26 + 14 = 41 tokens; k = 3 drafts a step
    assert (q1["draft_rounds"], q1["accepted_tokens"], q1["draft_tokens"], q1["output_tokens"]) == (14, 26, 42, 41)
    assert (q1["reasoning_tokens"], q1["input_tokens"], q1["max_new_tokens"], q1["temperature"]) == (30, 21, BUDGET, 0.6)
    assert q1["l_bar_logged"] == pytest.approx(26 / 14) and q1["wall_time_s"] == pytest.approx(0.445)
    assert (q1["concurrency"], q1["gpu"], q1["backend"]) == (8, "NVIDIA H200", "vllm")
    assert q1["text"] == "<think>Let me think step by step.</think>The answer is 1."
    status = dict(t.filter(pl.col("method") == "fly").select("item_id", "status").iter_rows())
    assert status["q5"] == "error" and status["q6"] == "error"  # aborted; vLLM's ErrorResponse
    bad = vllm_runs.skipped.filter(pl.col("stage") == "read")
    assert bad.height == 1 and bad["path"][0].endswith("fly/responses.jsonl:7") and "invalid JSON" in bad["reason"][0]
    assert vllm_runs.n_found == 11 and not any("position" in w for w in vllm_runs.warnings)


def test_vllm_e2e_time_and_positional_items(tmp_path):
    resp = json.loads((ROOT / "vllm/strict/responses.jsonl").read_text().splitlines()[0])["response"]
    (tmp_path / "r.jsonl").write_text(json.dumps(resp) + "\n" + json.dumps(resp) + "\n")
    arm = {"draft": "d", "method": "strict", "params": "strict", "dataset": "x"}
    runs = ll.load(tmp_path / "r.jsonl", format="vllm", format_options={"arm": arm, "wall_time": "e2e"})
    assert runs.table["item_id"].to_list() == ["1", "2"]
    assert runs.table["wall_time_s"][0] == pytest.approx((35.0 + 410.0 + 2.5) / 1000)  # queue time added
    assert any("numbered by their position" in w for w in runs.warnings)


def test_vllm_without_identity_names_where_to_give_it(tmp_path):
    resp = json.loads((ROOT / "vllm/strict/responses.jsonl").read_text().splitlines()[0])
    (tmp_path / "r.jsonl").write_text(json.dumps(resp) + "\n")
    runs = ll.load(tmp_path, format="vllm")
    assert runs.table.height == 0
    reason = runs.skipped["reason"][0]
    assert "draft, dataset, method, params" in reason and "arm.json" in reason and "--arm" in reason


def test_option_the_format_does_not_take_is_refused():
    with pytest.raises(LoadError, match="vllm reader takes no option questions"):
        ll.load(ROOT / "vllm", format="vllm", format_options={"questions": "q.jsonl"})
    with pytest.raises(LoadError, match="unknown arm field"):
        ll.load(ROOT / "vllm", format="vllm", format_options={"arm": {"modle": "x"}})


# --- SGLang -----------------------------------------------------------------------------------

def _sglang_frame(path: Path) -> pd.DataFrame:
    rows = []
    for d in _lines(path):
        r = d["response"]
        if "meta_info" in r:
            mi = r["meta_info"]
            acc = mi.get("spec_num_correct_drafts", mi.get("spec_accept_token_num"))
            rows.append({"item": d["item_id"], "ok": True, "out": mi["completion_tokens"], "steps": mi["spec_verify_ct"],
                         "acc": acc, "wall": mi["e2e_latency"], "length": mi["finish_reason"]["type"] == "length"})
        else:
            sd = r["sglext"]["spec_tokens_details"]
            rows.append({"item": d["item_id"], "ok": True, "out": r["usage"]["completion_tokens"],
                         "steps": sd["spec_verify_ct"], "acc": sd["spec_num_correct_drafts"], "wall": None,
                         "length": r["choices"][0]["finish_reason"] == "length"})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def sglang_runs():
    return ll.load(ROOT / "sglang", format="sglang")


@pytest.mark.parametrize("method", ["cactus", "typical"])
def test_sglang_cells_equal_a_pandas_computation(sglang_runs, method):
    cell = ll.cells(sglang_runs, n_resamples=200).get(method=method)
    want = _oracle(_sglang_frame(ROOT / f"sglang/{method}/outputs.jsonl"), _sglang_frame(ROOT / "sglang/strict/outputs.jsonl"))
    _check(cell, want)
    assert "time_ratio" in want or "wall_time_s not logged" in cell.to_row()["unavailable"]


def test_sglang_accept_length_conversion_by_hand(tmp_path):
    from lengthlens.data.readers.sglang import from_meta_info, l_bar_from_accept_length

    # 40 steps accepting 60 drafts: completion = 1 (prefill) + 60 + 40 (bonus) = 101 tokens, so SGLang's
    # spec_accept_length = 101 / 40 = 2.525, and lengthlens' l_bar = 60 / 40 = 1.5 = 2.525 - 1 - 1/40.
    assert l_bar_from_accept_length(2.525, 40) == pytest.approx(1.5, abs=1e-12)
    meta = {"finish_reason": {"type": "stop", "matched": 2}, "completion_tokens": 101, "prompt_tokens": 12,
            "e2e_latency": 1.25, "spec_verify_ct": 40, "spec_accept_length": 2.525}
    rec, warns = from_meta_info(meta)  # an SGLang that logs no accepted count: derived, and said
    assert (rec["draft_rounds"], rec["accepted_tokens"]) == (40, 60) and "derived" in warns[0]
    rec, warns = from_meta_info({**meta, "spec_num_correct_drafts": 60})
    assert rec["accepted_tokens"] == 60 and warns == []
    rec, warns = from_meta_info({**meta, "spec_num_correct_drafts": 75})  # 15 tokens off: the counters disagree
    assert rec["accepted_tokens"] == 75 and "not accepted/steps 75/40" in warns[0]
    with pytest.raises(ValueError, match="disagree"):
        from_meta_info({**meta, "completion_tokens": 30})


def test_sglang_fields(sglang_runs):
    t = sglang_runs.table
    row = t.filter((pl.col("method") == "cactus") & (pl.col("item_id") == "q2")).row(0, named=True)
    # histogram [0, 2, 3, 5]: 10 steps, 2 + 6 + 15 = 23 accepted, 34 tokens; reasoning from usage
    assert (row["draft_rounds"], row["accepted_tokens"], row["draft_tokens"], row["output_tokens"]) == (10, 23, 30, 34)
    assert (row["reasoning_tokens"], row["max_new_tokens"], row["backend"]) == (25, BUDGET, "sglang")
    old = t.filter((pl.col("method") == "typical") & (pl.col("item_id") == "q1")).row(0, named=True)
    # SGLang 0.5.9's names; histogram [1, 3, 4, 6]: 14 steps, 3 + 8 + 18 = 29 accepted
    assert (old["draft_rounds"], old["accepted_tokens"], old["wall_time_s"]) == (14, 29, 0.58)


# --- AIPerf -----------------------------------------------------------------------------------

def _aiperf_frame(path: Path) -> pd.DataFrame:
    rows = []
    for d in _lines(path):
        md, m = d["metadata"], d["metrics"]
        if md["benchmark_phase"] != "profiling":
            continue
        ok = d.get("error") is None and not md["was_cancelled"]
        sd = d.get("spec_decode_acceptance") or {}
        out = m["usage_completion_tokens"]["value"] if ok else None
        rows.append({"item": md["conversation_id"], "ok": ok, "out": out, "steps": sd.get("num_spec_steps"),
                     "acc": sd.get("num_accepted_draft_tokens"), "wall": m["request_latency"]["value"] / 1000 if ok else None,
                     "length": ok and out >= BUDGET})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def aiperf_runs():
    return ll.load(ROOT / "aiperf", format="aiperf")


@pytest.mark.parametrize("dataset, arm, base", [("gsm8k", "fly", "strict"), ("math", "old_fly", "old_strict")])
def test_aiperf_cells_equal_a_pandas_computation(aiperf_runs, dataset, arm, base):
    cell = ll.cells(aiperf_runs, n_resamples=200).get(dataset=dataset, method="fly")
    want = _oracle(_aiperf_frame(ROOT / f"aiperf/{arm}/profile_export.jsonl"),
                   _aiperf_frame(ROOT / f"aiperf/{base}/profile_export.jsonl"))
    _check(cell, want)
    if dataset == "math":  # records without per-request counters: gain and R/R* unavailable, and said
        assert "draft_rounds not logged" in cell.to_row()["unavailable"]
        assert any("old_fly/profile_export.jsonl: the records carry no per-request speculative counters" in w
                   for w in aiperf_runs.warnings)


def test_aiperf_skips_are_named_and_budget_comes_from_inputs(aiperf_runs):
    warm = aiperf_runs.skipped.filter(pl.col("reason").str.contains("warm-up"))
    assert warm.height == 4 and all(p.endswith("profile_export.jsonl:1") for p in warm["path"])
    t = aiperf_runs.table
    assert t.filter(pl.col("item_id") == "conv-q9")["status"].to_list() == ["error"]  # cancelled
    assert set(t["max_new_tokens"].drop_nulls()) == {BUDGET} and t["concurrency"].unique().to_list() == [16]
    assert aiperf_runs.n_found == 21


# --- vllm bench serve -------------------------------------------------------------------------

def _bench_frame(path: Path) -> pd.DataFrame:
    r = json.loads(path.read_text())
    return pd.DataFrame({"item": [str(i) for i in range(len(r["output_lens"]))], "ok": [not e for e in r["errors"]],
                         "out": r["output_lens"], "steps": None, "acc": None, "wall": r["latencies"],
                         "length": [n >= BUDGET for n in r["output_lens"]]})


def test_vllm_bench_cells_pooled_counters_said_plainly():
    runs = ll.load(ROOT / "vllm_bench", format="vllm-bench", format_options={"max_new_tokens": BUDGET})
    cell = ll.cells(runs, n_resamples=200).get(method="fly")
    files = sorted((ROOT / "vllm_bench").glob("*.json"))
    _check(cell, _oracle(_bench_frame(files[0]), _bench_frame(files[1])))
    assert "gain" in cell.to_row()["unavailable"] and "rounds_ratio" in cell.to_row()["unavailable"]
    res = json.loads(files[0].read_text())
    pooled = res["spec_decode_accepted_tokens"] / res["spec_decode_num_drafts"]
    warn = next(w for w in runs.warnings if files[0].name in w)
    assert "only for the whole run" in warn and f"ℓ̄ {pooled:.4f}" in warn and "without item intervals" in warn
    t = runs.table.filter(pl.col("method") == "fly")
    assert t["request_rate"].to_list() == [math.inf] * 5 and t["concurrency"].to_list() == [4] * 5


def test_vllm_bench_run_summary():
    from lengthlens.data.readers.vllm_bench import run_summary

    s = run_summary(ROOT / "vllm_bench").sort_values("method")
    raw = [json.loads(p.read_text()) for p in sorted((ROOT / "vllm_bench").glob("*.json"))]
    assert s["method"].tolist() == ["fly", "strict"]
    assert s["l_bar_pooled"].tolist() == [r["spec_decode_accepted_tokens"] / r["spec_decode_num_drafts"] for r in raw]
    assert s["num_drafts"].tolist() == [r["spec_decode_num_drafts"] for r in raw]


def test_vllm_bench_without_save_detailed_is_named(tmp_path):
    res = json.loads(next((ROOT / "vllm_bench").glob("*fly.json")).read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times"):
        res.pop(key)  # what --save-result without --save-detailed keeps
    (tmp_path / "r.json").write_text(json.dumps(res))
    runs = ll.load(tmp_path, format="vllm-bench")
    assert runs.table.height == 0 and "--save-detailed" in runs.skipped["reason"][0]


# --- command line, reasoning split -------------------------------------------------------------

@pytest.mark.parametrize("fmt, sub", [("vllm", "vllm"), ("sglang", "sglang"), ("aiperf", "aiperf"), ("vllm-bench", "vllm_bench")])
def test_cli_report_and_import(tmp_path, fmt, sub, capsys):
    out = tmp_path / "rep"
    assert main(["report", "--format", fmt, str(ROOT / sub), "--out", str(out), "--no-pdf", "--no-figures",
                 "--n-resamples", "200", "-q", "--max-new-tokens", str(BUDGET)]) == 0
    direct = pd.read_csv(out / "cells.csv")
    records = tmp_path / "runs.parquet"
    assert main(["import", fmt, str(ROOT / sub), "--out", str(records), "--max-new-tokens", str(BUDGET)]) == 0
    via = ll.cells(ll.load(records), n_resamples=50).to_frame()
    assert direct["lambda"].tolist() == pytest.approx(via["lambda"].tolist())


def test_cli_arm_option(tmp_path):
    resp = json.loads((ROOT / "vllm/strict/responses.jsonl").read_text().splitlines()[0])
    for method in ("strict", "fly"):
        (tmp_path / method).mkdir()
        (tmp_path / method / "r.jsonl").write_text(json.dumps(resp) + "\n")
    out = tmp_path / "runs.jsonl"
    assert main(["import", "vllm", str(tmp_path / "fly"), "--out", str(out), "--arm", "method=fly", "--arm", "params=p1",
                 "--arm", "draft=d", "--arm", "dataset=x", "--arm", "concurrency=32"]) == 0
    row = json.loads(out.read_text().splitlines()[0])
    assert (row["method"], row["params"], row["concurrency"], row["item_id"]) == ("fly", "p1", 32, "q1")


def test_reasoning_split(vllm_runs):
    from lengthlens.data.reasoning import reasoning_split

    s = reasoning_split(vllm_runs).filter(pl.col("method") == "strict").sort("item_id")
    assert s["thinking_tokens"].to_list() == [30, 16, 40, 64]
    assert s["answer_tokens"].to_list() == [41 - 30, 24 - 16, 51 - 40, 0]
    assert set(s.columns) >= {"target", "draft", "dataset", "method", "params", "item_id", "seed", "turn"}


# --- the fixtures through the engines' own models, where installed ------------------------------

def test_aiperf_lines_round_trip_through_aiperf_models():
    rm = pytest.importorskip("aiperf.common.models.record_models", reason="AIPerf not installed (pip install aiperf)")
    for f in (ROOT / "aiperf").glob("*/profile_export.jsonl"):
        for d in _lines(f):
            assert rm.MetricRecordInfo.model_validate(d).model_dump(exclude_none=True, mode="json") == d


def test_sglang_openai_responses_round_trip_through_sglang_models():
    proto = pytest.importorskip("sglang.srt.entrypoints.openai.protocol", reason="SGLang not installed")
    for d in _lines(ROOT / "sglang/cactus/outputs.jsonl"):
        assert proto.ChatCompletionResponse.model_validate(d["response"]).model_dump() == d["response"]
