"""The readers on files the real tools wrote (tests/core/fixtures/tools, made by make.sh beside them).

aiperf 0.13.0, ``vllm bench serve`` (vLLM 0.33.0), inspect_ai 0.3.224, curl and the openai client ran against
the loopback server written for the tests (server.py, shaped like vLLM 0.33's responses), a strict and a
relaxed ("fly") arm. Every cell is compared with a plain computation from the raw files (json, zipfile).
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import polars as pl
import pytest

import lengthlens as ll
from lengthlens.data.readers.vllm_bench import pooled_cells

TOOLS = Path(__file__).resolve().parent / "fixtures" / "tools"
ARMS = ("strict", "fly")


def _cell(runs) -> dict:
    return ll.cells(runs, n_resamples=200).to_frame().set_index("method").loc["fly"].to_dict()


def _plain(per_arm: dict[str, dict[str, dict]]) -> dict[str, float]:
    """λ, R/R*, gain (per-run ℓ̄ averaged) and the censored shares over the items both arms have."""
    s, f = per_arm["strict"], per_arm["fly"]
    items = sorted(set(s) & set(f))
    tot = lambda arm, k: sum(arm[i][k] for i in items)  # noqa: E731
    lbar = lambda arm: sum(arm[i]["A"] / arm[i]["V"] for i in items) / len(items)  # noqa: E731
    return {"n": len(items), "lambda": tot(f, "L") / tot(s, "L"), "rounds_ratio": tot(f, "V") / tot(s, "V"),
            "gain": (lbar(f) + 1) / (lbar(s) + 1), "censored_frac": sum(f[i]["cens"] for i in items) / len(items),
            "censored_frac_star": sum(s[i]["cens"] for i in items) / len(items)}


def _check(cell: dict, want: dict) -> None:
    assert cell["n_items"] == want["n"]
    for k in ("lambda", "rounds_ratio", "gain", "censored_frac", "censored_frac_star"):
        assert cell[k] == pytest.approx(want[k], rel=1e-12), k


# --- AIPerf: every request with its own budget -------------------------------------------------------------

def _aiperf_raw(arm: str) -> dict[str, dict]:
    d = TOOLS / "aiperf" / arm
    budgets = {s["session_id"]: s["payloads"][0]["max_completion_tokens"]
               for s in json.loads((d / "inputs.json").read_text())["data"]}
    out = {}
    for line in (d / "profile_export.jsonl").read_text().splitlines():
        r = json.loads(line)
        cid, sd = r["metadata"]["conversation_id"], r["spec_decode_acceptance"]
        L = r["metrics"]["usage_completion_tokens"]["value"]
        out[cid] = {"L": L, "V": sd["num_spec_steps"], "A": sd["num_accepted_draft_tokens"], "budget": budgets[cid],
                    "cens": L >= budgets[cid]}
    return out


def test_aiperf_per_request_budgets_pair_every_run_and_censor_at_their_own_budget():
    raw = {a: _aiperf_raw(a) for a in ARMS}
    assert len({r["budget"] for r in raw["strict"].values()}) > 5  # the budgets do differ item by item
    runs = ll.load(TOOLS / "aiperf", format="aiperf")
    assert runs.n_found == 48 and runs.table.filter(pl.col("paired")).height == 48 and runs.skipped.height == 0
    t = runs.table.filter(pl.col("method") == "fly")
    assert dict(zip(t["item_id"], t["max_new_tokens"])) == {i: r["budget"] for i, r in raw["fly"].items()}
    want = _plain(raw)
    assert want["n"] == 24 and 0 < want["censored_frac_star"] < 1  # some runs stop before their budget, some at it
    _check(_cell(runs), want)


def test_aiperf_command_line_budget_does_not_override_inputs_json():
    runs = ll.load(TOOLS / "aiperf", format="aiperf", format_options={"max_new_tokens": 64})
    raw = _aiperf_raw("fly")
    t = runs.table.filter(pl.col("method") == "fly")
    assert dict(zip(t["item_id"], t["max_new_tokens"])) == {i: r["budget"] for i, r in raw.items()}
    assert _cell(runs)["censored_frac"] == pytest.approx(sum(r["cens"] for r in raw.values()) / 24)


def test_generic_grades_file_grades_aiperf_runs(tmp_path):
    """AIPerf keeps no text; a grades file (item_id, correct) per arm joins verdicts to any reader's runs."""
    verdict = {a: {i: (int(i[1:]) % (3 if a == "fly" else 4)) != 0 for i in _aiperf_raw(a)} for a in ARMS}
    f = tmp_path / "grades.csv"
    f.write_text("method,item_id,correct\n" + "".join(f"{a},{i},{int(v)}\n" for a in ARMS for i, v in verdict[a].items()))
    runs = ll.load(TOOLS / "aiperf", format="aiperf", grades=[f])
    assert runs.table["grade_source"].to_list() == ["grade_file"] * 48
    cell = _cell(runs)
    acc = {a: sum(verdict[a].values()) / 24 for a in ARMS}
    assert cell["n_graded"] == 24
    assert cell["accuracy_delta_pp"] == pytest.approx(100 * (acc["fly"] - acc["strict"]), rel=1e-12)
    # The same verdicts as JSON lines with seed, and as Parquet.
    j = tmp_path / "grades.jsonl"
    j.write_text("".join(json.dumps({"method": a, "item_id": i, "seed": 0, "correct": v}) + "\n"
                         for a in ARMS for i, v in verdict[a].items()))
    pq = tmp_path / "grades.parquet"
    pl.read_csv(f, schema_overrides={"item_id": pl.String}).write_parquet(pq)
    for g in (j, pq):
        assert _cell(ll.load(TOOLS / "aiperf", format="aiperf", grades=[g]))["accuracy_delta_pp"] == \
            pytest.approx(cell["accuracy_delta_pp"], rel=1e-12)


def test_grades_file_without_an_arm_is_refused_for_two_arms(tmp_path):
    f = tmp_path / "g.csv"
    f.write_text("item_id,correct\nq01,1\n")
    with pytest.raises(ll.LoadError, match=r"g\.csv: invalid grades file: the file names no arm .* 2 arms"):
        ll.load(TOOLS / "aiperf", format="aiperf", grades=[f])
    bad = tmp_path / "bad.csv"
    bad.write_text("method,item_id,correct\nfly,q01,maybe\n")
    with pytest.raises(ll.LoadError, match=r"bad\.csv: invalid grades file: line 2: field 'correct'"):
        ll.load(TOOLS / "aiperf", format="aiperf", grades=[bad])


# --- Saved streams ---------------------------------------------------------------------------------------

def _final_chunks(arm: str) -> list[dict]:
    return [json.loads(x) for x in (TOOLS / "stream" / "usage_only" / arm / "final.jsonl").read_text().splitlines()]


def _stream_raw(arm: str) -> dict[str, dict]:
    """Per request (numbered in order): tokens and counters of the final chunk, censored where a chunk said ``length``."""
    chunks = json.loads((TOOLS / "stream" / "json" / arm / "chunks.json").read_text())
    out = {}
    for pos, c in enumerate(_final_chunks(arm), start=1):
        sd = c["metrics"]["speculative_decoding"]
        finish = [x["choices"][0]["finish_reason"] for x in chunks if x["id"] == c["id"] and x["choices"]][-1]
        out[str(pos)] = {"L": c["usage"]["completion_tokens"], "V": sd["num_spec_steps"], "A": sd["num_accepted_draft_tokens"],
                         "cens": finish == "length"}
    return out


@pytest.mark.parametrize("form", ["sse", "json", "jsonl"])
def test_saved_stream_reads_as_one_run_per_request_with_its_counters(form):
    runs = ll.load(TOOLS / "stream" / form, format="vllm", run_graders=False)
    assert runs.n_found == 12 and runs.table.height == 12 and runs.skipped.height == 0
    chunks = json.loads((TOOLS / "stream" / "json" / "fly" / "chunks.json").read_text())
    t = runs.table.filter(pl.col("method") == "fly").sort("item_id")
    for pos, final in enumerate(_final_chunks("fly"), start=1):
        row = t.filter(pl.col("item_id") == str(pos)).row(0, named=True)
        mine = [c for c in chunks if c["id"] == final["id"]] if form != "sse" else None
        sd = final["metrics"]["speculative_decoding"]
        assert row["output_tokens"] == final["usage"]["completion_tokens"]
        assert (row["draft_rounds"], row["accepted_tokens"]) == (sd["num_spec_steps"], sd["num_accepted_draft_tokens"])
        assert row["reasoning_tokens"] == final["usage"]["completion_tokens_details"]["reasoning_tokens"]
        assert row["wall_time_s"] == pytest.approx((final["metrics"]["time_to_first_token_ms"]
                                                    + final["metrics"]["generation_time_ms"]) / 1000)
        if mine is not None:
            content = "".join(c["choices"][0]["delta"].get("content") or "" for c in mine if c["choices"])
            reasoning = "".join(c["choices"][0]["delta"].get("reasoning") or "" for c in mine if c["choices"])
            assert row["text"] == f"<think>{reasoning}</think>{content}"
            assert row["finish_reason"] == [c for c in mine if c["choices"]][-1]["choices"][0]["finish_reason"]
    _check(_cell(runs), _plain({a: _stream_raw(a) for a in ARMS}))
    assert any("stream chunks assembled into 6 response(s)" in w for w in runs.warnings)


def test_lone_final_usage_chunks_are_their_requests_counters():
    runs = ll.load(TOOLS / "stream" / "usage_only", format="vllm", run_graders=False)
    assert runs.table.height == 12 and runs.skipped.height == 0
    assert runs.table["text"].null_count() == 12
    cell, want = _cell(runs), _plain({a: _stream_raw(a) for a in ARMS})
    for k in ("lambda", "rounds_ratio", "gain"):
        assert cell[k] == pytest.approx(want[k], rel=1e-12), k
    # Without the choices no finish reason, and the requests' budgets are not in the chunks: censoring unknown.
    assert cell["censored_frac"] != cell["censored_frac"]


# --- inspect_ai ------------------------------------------------------------------------------------------

def _zstd_member(path: Path, name: str) -> dict:
    """One member of an .eval zip, read here with the zstandard format's frame as stored (pyarrow's codec)."""
    import pyarrow as pa

    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset + 26)
        n, m = struct.unpack("<HH", fh.read(4))
        fh.seek(info.header_offset + 30 + n + m)
        raw = fh.read(info.compress_size)
    return json.loads(pa.Codec("zstd").decompress(raw, decompressed_size=info.file_size).to_pybytes())


def _inspect_raw(arm: str) -> dict[str, dict]:
    (path,) = (TOOLS / "inspect" / arm).glob("*.eval")
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.startswith("samples/")]
    out = {}
    for name in names:
        s = _zstd_member(path, name)
        (call,) = [e["call"] for e in s["events"] if e["event"] == "model"]
        resp, req = call["response"], call["request"]
        sd = resp["metrics"]["speculative_decoding"]
        L = resp["usage"]["completion_tokens"]
        out[s["id"]] = {"L": L, "V": sd["num_spec_steps"], "A": sd["num_accepted_draft_tokens"],
                        "cens": resp["choices"][0]["finish_reason"] == "length" or L >= req["max_tokens"],
                        "correct": s["scores"]["match"]["value"] == "C"}
    return out


def test_inspect_eval_log_gives_graded_cells():
    raw = {a: _inspect_raw(a) for a in ARMS}
    runs = ll.load(TOOLS / "inspect", format="inspect", run_graders=False)
    assert runs.table.height == 24 and runs.skipped.height == 0
    assert runs.table["grade_source"].to_list() == ["record"] * 24
    t = runs.table.filter(pl.col("method") == "fly")
    assert dict(zip(t["item_id"], t["correct"])) == {i: r["correct"] for i, r in raw["fly"].items()}
    cell = _cell(runs)
    _check(cell, _plain(raw))
    acc = {a: sum(r["correct"] for r in raw[a].values()) / 12 for a in ARMS}
    assert cell["accuracy_delta_pp"] == pytest.approx(100 * (acc["fly"] - acc["strict"]), rel=1e-12)


# --- vllm bench serve ------------------------------------------------------------------------------------

def test_two_vllm_bench_results_give_a_pooled_cell():
    s, f = (json.loads((TOOLS / "vllm_bench" / f"{a}.json").read_text()) for a in ARMS)
    row = pooled_cells(TOOLS / "vllm_bench").iloc[0]
    lbar = lambda r: r["spec_decode_accepted_tokens"] / r["spec_decode_num_drafts"]  # noqa: E731
    assert row["method"] == "fly" and row["n_prompts"] == 24 == row["n_ok"]
    assert row["gain_pooled"] == pytest.approx((lbar(f) + 1) / (lbar(s) + 1), rel=1e-12)
    assert row["rounds_ratio"] == pytest.approx(f["spec_decode_num_drafts"] / s["spec_decode_num_drafts"], rel=1e-12)
    assert row["lambda"] == pytest.approx(sum(f["output_lens"]) / sum(s["output_lens"]), rel=1e-12)
    runs = ll.load(TOOLS / "vllm_bench", format="vllm-bench", run_graders=False)
    assert any(w.startswith("pooled cell fly / w5_e0.3 against strict") and f"R/R* {row['rounds_ratio']:.3f}" in w
               for w in runs.warnings)
    assert _cell(runs)["lambda"] == pytest.approx(row["lambda"], rel=1e-12)


def test_vllm_bench_results_of_other_prompts_are_not_pooled(tmp_path):
    for a in ARMS:
        r = json.loads((TOOLS / "vllm_bench" / f"{a}.json").read_text())
        if a == "fly":
            r["input_lens"] = r["input_lens"][::-1]
        (tmp_path / f"{a}.json").write_text(json.dumps(r))
    row = pooled_cells(tmp_path).iloc[0]
    assert "prompts differ" in row["note"] and row["gain_pooled"] != row["gain_pooled"]  # NaN


# --- lm-evaluation-harness -------------------------------------------------------------------------------

def test_lm_eval_samples_become_a_grades_file_that_grades_runs_by_doc_id(tmp_path):
    """lm-eval keeps verdicts by doc_id and no counters; AIPerf's session_num numbers the same prompts from 0."""
    from lengthlens.cli import main

    raw = {}
    for a in ARMS:
        (f,) = (TOOLS / "lm_eval" / a).glob("samples_arith_*.jsonl")
        raw[a] = {str(r["doc_id"]): r["exact_match"] == 1.0 for r in map(json.loads, f.read_text().splitlines())}
        args = ["grades", "lm-eval", str(f), "--out", str(tmp_path / f"{a}.csv"), "--arm", f"method={a}"]
        assert main(args) == 0
    assert len(raw["fly"]) == 12
    runs = ll.load(TOOLS / "aiperf", format="aiperf", format_options={"item_key": "session_num"},
                   grades=[tmp_path / "strict.csv", tmp_path / "fly.csv"])
    t = runs.table.filter((pl.col("method") == "fly") & pl.col("correct").is_not_null())
    assert dict(zip(t["item_id"], t["correct"])) == raw["fly"]
    cell = _cell(runs)
    acc = {a: sum(raw[a].values()) / 12 for a in ARMS}
    assert cell["n_graded"] == 12
    assert cell["accuracy_delta_pp"] == pytest.approx(100 * (acc["fly"] - acc["strict"]), rel=1e-12)


def test_aiperf_record_category_is_the_dataset(tmp_path):
    """A record tagged with its dataset category (metadata.category) falls in that category's cells."""
    for a in ARMS:
        d = tmp_path / a
        d.mkdir()
        arm = json.loads((TOOLS / "aiperf" / a / "arm.json").read_text())
        arm.pop("dataset")
        (d / "arm.json").write_text(json.dumps(arm))
        (d / "inputs.json").write_text((TOOLS / "aiperf" / a / "inputs.json").read_text())
        lines = []
        for line in (TOOLS / "aiperf" / a / "profile_export.jsonl").read_text().splitlines():
            r = json.loads(line)
            r["metadata"]["category"] = "coding" if int(r["metadata"]["conversation_id"][1:]) % 2 else "math"
            lines.append(json.dumps(r))
        (d / "profile_export.jsonl").write_text("\n".join(lines) + "\n")
    runs = ll.load(tmp_path, format="aiperf")
    cells = ll.cells(runs, n_resamples=50).to_frame()
    assert sorted(cells["dataset"]) == ["coding", "math"] and cells["n_items"].tolist() == [12, 12]


def test_nul_padding_is_named_as_padding(tmp_path):
    d = tmp_path / "fly"
    d.mkdir()
    (d / "arm.json").write_text((TOOLS / "stream" / "usage_only" / "fly" / "arm.json").read_text())
    data = (TOOLS / "stream" / "usage_only" / "fly" / "final.jsonl").read_bytes()
    (d / "final.jsonl").write_bytes(data + b"\x00" * 300 + b"\n")
    runs = ll.load(tmp_path, format="vllm", run_graders=False)
    assert runs.table.height == 6
    (reason,) = runs.skipped.filter(pl.col("stage") == "read")["reason"].to_list()
    assert reason.startswith("padding of 300 NUL bytes, not a record")
