"""lengthlens.data.readers.record: one arm's engine outputs as flat records that lengthlens.load reads.

The outputs are the fixture responses of test_readers_engines.py (vLLM 0.33.0 and SGLang 0.5.23
structures, see engine_fixtures.py); the oracle is the reader of the same files: a record made by
the recorder and one read from the saved response must be the same run. Offline ``RequestOutput``
objects built with the real vLLM classes are recorded in tests/vllm_job.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

import lengthlens as ll
from lengthlens.data.readers.record import record_outputs, write_records

from .engine_fixtures import ROOT

FIELDS = ["item_id", "output_tokens", "draft_rounds", "accepted_tokens", "draft_tokens", "wall_time_s",
          "reasoning_tokens", "finish_reason", "input_tokens", "text"]


def _wrapped(path):
    return [json.loads(line) for line in path.read_text().splitlines()[:4]]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".csv"])
def test_recorded_vllm_responses_load_as_the_reader_reads_them(tmp_path, suffix):
    lines = _wrapped(ROOT / "vllm/strict/responses.jsonl")
    out = tmp_path / f"strict{suffix}"
    recs = record_outputs([d["response"] for d in lines], target="Qwen/Qwen3-8B", draft="eagle3-qwen3-8b",
                          method="strict", params="strict", dataset="gsm8k", item_ids=[d["item_id"] for d in lines],
                          max_new_tokens=64, temperature=0.6, top_p=0.95, concurrency=8, gpu="NVIDIA H200", out=out)
    assert len(recs) == 4 and recs[0]["draft_rounds"] == 14
    loaded = ll.load(out).table.sort("item_id").select(FIELDS)
    read = ll.load(ROOT / "vllm/strict", format="vllm").table.sort("item_id").select(FIELDS)
    assert loaded.equals(read)


def test_recorded_sglang_outputs(tmp_path):
    lines = _wrapped(ROOT / "sglang/strict/outputs.jsonl")
    recs = record_outputs([d["response"] for d in lines], target="Qwen/Qwen3-8B", draft="eagle3-qwen3-8b",
                          method="strict", params="strict", dataset="gsm8k", item_ids=[d["item_id"] for d in lines],
                          max_new_tokens=64, temperature=0.6, with_text=False)
    read = ll.load(ROOT / "sglang/strict", format="sglang").table.sort("item_id")
    assert [r["accepted_tokens"] for r in recs] == read["accepted_tokens"].to_list()
    assert [r["wall_time_s"] for r in recs] == read["wall_time_s"].to_list()
    assert all("text" not in r and r["backend"] == "sglang" for r in recs)


def test_record_checks_its_inputs(tmp_path):
    resp = _wrapped(ROOT / "vllm/strict/responses.jsonl")[0]["response"]
    ident = dict(target="t", draft="d", method="m", params="p", dataset="x")
    with pytest.raises(ValueError, match="1 outputs but 2 item_ids"):
        record_outputs([resp], item_ids=["a", "b"], **ident)
    with pytest.raises(ValueError, match="unknown arm field"):
        record_outputs([resp], colour="blue", **ident)
    with pytest.raises(ValueError, match="field 'params'"):
        record_outputs([resp], **{**ident, "params": ""})
    with pytest.raises(TypeError, match="cannot record a str"):
        record_outputs(["text"], **ident)
    with pytest.raises(ValueError, match="not .txt"):
        write_records([], tmp_path / "r.txt")
    recs = record_outputs([resp], seed=[7], **ident)
    assert recs[0]["seed"] == 7
    path = write_records(recs, tmp_path / "one.jsonl")
    assert ll.load(path).table["seed"].to_list() == [7]
    assert not list(tmp_path.glob(".*tmp"))  # written whole: no temporary file left


def test_infinite_request_rate_round_trips(tmp_path):
    resp = _wrapped(ROOT / "vllm/strict/responses.jsonl")[0]["response"]
    recs = record_outputs([resp], target="t", draft="d", method="m", params="p", dataset="x", request_rate=float("inf"))
    t = ll.load(write_records(recs, tmp_path / "r.jsonl")).table
    assert t["request_rate"].to_list() == [float("inf")] and t.schema["request_rate"] == pl.Float64
