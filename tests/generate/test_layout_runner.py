"""Raw-layout writer, campaign config and resumable runner (no torch: a fake backend stands in)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lengthlens.data.schema import parse_alpha, validate_record
from lengthlens.generate.config import Arm, config_from_dict, load_config, parse_arms
from lengthlens.generate.layout import (
    RunResult,
    arm_names,
    format_alpha,
    is_finished,
    thinking_open,
    thinking_split,
    write_run,
)
from lengthlens.generate.runner import plan, run_campaign


def test_arm_names_match_study_spelling():
    assert arm_names("lossless", None) == ("strict", "strict")
    assert arm_names("cactus", 0.03) == ("cactus", "alpha0.03")
    assert arm_names("spec_casc_opt", -0.3) == ("spec_casc_opt", "alphaneg0.3")
    assert arm_names("spec_casc_opt", -0.02) == ("spec_casc_opt", "alphaneg0.02")
    assert arm_names("spec_casc_tok", 0.35, 28000) == ("spec_casc_tok_force_commit", "alpha0.35_t28000")
    for a in (0.03, 0.35, -0.3, 0.05, 1.0, 0.0, 1e-5, 0.123456789):
        assert parse_alpha(arm_names("r_fuzzy", a)[1]) == a
    assert format_alpha(-0.0) == "0.0"
    with pytest.raises(ValueError):
        format_alpha(-math.inf)


def test_parse_arms_expands_grids():
    arms = parse_arms(["strict", {"rule": "cactus", "alpha": [0.03, 0.08]},
                       {"rule": "spec_casc_tok", "alpha": 0.35, "force_commit": [64, 96]}])
    assert [(a.method, a.params) for a in arms] == [
        ("strict", "strict"), ("cactus", "alpha0.03"), ("cactus", "alpha0.08"),
        ("spec_casc_tok_force_commit", "alpha0.35_t64"), ("spec_casc_tok_force_commit", "alpha0.35_t96")]
    assert arms[0] == Arm("lossless")
    for bad in ([], ["nope"], [{"rule": "cactus"}], [{"rule": "x", "alpha": 1}], ["strict", "strict"],
                [{"rule": "r_fuzzy", "alpha": float("-inf")}], [{"rule": "cactus", "alpha": 0.1, "force_commit": 0}]):
        with pytest.raises(ValueError):
            parse_arms(bad)


def test_thinking_split_and_open():
    s = thinking_split("abc</think>answer: 5", "think", opened_in_prompt=True)
    assert (s.analysis_chars, s.final_chars, s.reached_final_channel) == (3, 9, True)
    s = thinking_split("<think>ab</think>x", "think")
    assert (s.analysis_chars, s.final_chars, s.reached_final_channel) == (2, 1, True)
    s = thinking_split("still thinking", "think", opened_in_prompt=True)
    assert (s.analysis_chars, s.final_chars, s.reached_final_channel) == (14, 0, False)
    # A stray second close tag is markup, not answer text (as lengthlens.data.channels reads it).
    s = thinking_split("a</think>answer: 63.</think>answer: 29", "think", opened_in_prompt=True)
    assert (s.analysis_chars, s.final_chars) == (1, 21)
    s = thinking_split("no thinking at all", "think")
    assert (s.analysis_chars, s.final_chars, s.reached_final_channel) == (0, 18, True)
    h = "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>42"
    s = thinking_split(h, "harmony")
    assert s.final_chars == 2 and s.reached_final_channel and s.analysis_chars == h.index("<|channel|>final")
    assert thinking_open("abc", "think", opened_in_prompt=True)
    assert not thinking_open("abc</think>x", "think", opened_in_prompt=True)
    assert thinking_open("x</think>y<think>z", "think")
    assert not thinking_open("abc", "think")
    assert thinking_open("<|channel|>analysis<|message|>hm", "harmony")
    assert not thinking_open(h, "harmony")


class FakeBackend:
    """Deterministic stand-in for an engine; fails on demand."""

    name = "fake"
    engine_version = "fake 1"

    def __init__(self, fail_on: set[str] = frozenset()):
        self.calls: list[tuple[str, str, int]] = []
        self.fail_on = fail_on
        self.closed = False

    def run(self, prompt: str, arm: Arm, seed: int) -> RunResult:
        self.calls.append((prompt, arm.params, seed))
        if prompt in self.fail_on:
            raise RuntimeError("boom")
        rounds, acc = 5 + seed, 7
        return RunResult(text=f"think {prompt}</think>answer: 3", output_tokens=acc + rounds, finish_reason="stop",
                         draft_rounds=rounds, accepted_tokens=acc, draft_tokens=4 * rounds,
                         wall_time_seconds=0.01, input_tokens=3,
                         proposals=[{"round": 0, "pos_in_round": 0, "p": 0.5, "q": 0.25}])

    def close(self) -> None:
        self.closed = True


def _campaign(tmp_path: Path, fmt: str = "yaml") -> Path:
    (tmp_path / "items.jsonl").write_text(
        '{"id": "a:0", "prompt": "1+2", "reference": "3"}\n\n{"id": 7, "prompt": "2+1", "reference": 3}\n')
    if fmt == "yaml":
        p = tmp_path / "c.yaml"
        p.write_text(
            "target: {name: t, path: /m/t}\ndraft: {name: d, path: /m/d}\n"
            "datasets: {toy: items.jsonl}\nseeds: [0, 1]\nsampling: {max_new_tokens: 64}\n"
            "thinking: {format: think, opened_in_prompt: true}\n"
            "arms: [strict, {rule: cactus, alpha: [0.03]}, {rule: spec_casc_opt, alpha: -0.3}]\n")
    else:
        p = tmp_path / "c.toml"
        p.write_text(
            'seeds = [0, 1]\narms = ["strict", {rule = "cactus", alpha = [0.03]}, {rule = "spec_casc_opt", alpha = -0.3}]\n'
            '[target]\nname = "t"\npath = "/m/t"\n[draft]\nname = "d"\npath = "/m/d"\n'
            '[datasets]\ntoy = "items.jsonl"\n[sampling]\nmax_new_tokens = 64\n'
            '[thinking]\nformat = "think"\nopened_in_prompt = true\n')
    return p


def test_yaml_and_toml_configs_agree(tmp_path):
    a = load_config(_campaign(tmp_path, "yaml"))
    b = load_config(_campaign(tmp_path, "toml"))
    assert a.arms == b.arms and a.seeds == b.seeds and a.datasets == b.datasets
    assert [i.case for i in a.items("toy")] == ["case_001", "case_002"]
    assert a.items("toy")[1].id == "7" and a.items("toy")[1].reference == "3"
    with pytest.raises(ValueError, match="unknown config keys"):
        config_from_dict({"target": "t", "draft": "d", "datasets": {"x": "y"}, "arms": ["strict"], "bogus": 1})


def test_campaign_writes_readable_tree_and_resumes(tmp_path):
    cfg = load_config(_campaign(tmp_path))
    out = tmp_path / "out"
    be = FakeBackend(fail_on={"2+1"})
    s = run_campaign(cfg, out, backend=be, log=lambda m: None)
    assert (s.planned, s.written, s.failed, s.skipped) == (12, 6, 6, 0) and be.closed
    runs = plan(cfg, out)
    assert runs[0].path == out / "runs" / "toy" / "strict" / "strict" / "case_001" / "seed_0"
    d = out / "runs/toy/spec_casc_opt/alphaneg0.3/case_001/seed_1"
    rj = json.loads((d / "run.json").read_text())
    cj = json.loads((d / "config.json").read_text())
    # Field names and types as in the study's logs: counters are floats, l_bar = accepted / rounds.
    assert rj["status"] == "ok" and rj["draft_rounds"] == 6.0 and isinstance(rj["draft_rounds"], float)
    assert rj["l_bar"] == 7 / 6 and rj["wall_time_seconds"] == 0.01 and rj["finish_reason"] == "stop"
    assert (rj["analysis_chars"], rj["final_chars"], rj["reached_final_channel"]) == (len("think 1+2"), 9, True)
    assert cj["mode"] == "lossy" and cj["lossy_method"] == "spec_casc_opt" and cj["lossy_parameters"] == {"alpha": -0.3}
    assert cj["model"] == "t" and cj["draft_model"] == "d" and cj["seed"] == 1 and cj["max_new_tokens"] == 64
    assert cj["prompt_case"] == "case_001" and cj["prompt_source_id"] == "a:0" and cj["reference_answer"] == "3"
    assert (d / "proposals.jsonl").read_text().count("\n") == 1
    failed = out / "runs/toy/strict/strict/case_002/seed_0"
    assert json.loads((failed / "run.json").read_text())["status"] == "error" and not is_finished(failed)

    # Resume: finished runs are skipped, failed ones retried; nothing finished is rewritten.
    before = (d / "run.json").stat().st_mtime_ns
    be2 = FakeBackend()
    s2 = run_campaign(cfg, out, backend=be2, log=lambda m: None)
    assert (s2.written, s2.skipped, s2.failed) == (6, 6, 0)
    assert {c[0] for c in be2.calls} == {"2+1"}
    assert (d / "run.json").stat().st_mtime_ns == before
    s3 = run_campaign(cfg, out, backend=FakeBackend(), log=lambda m: None)
    assert (s3.written, s3.skipped) == (0, 12)
    with pytest.raises(FileExistsError):
        write_run(d, cj, be.run("x", Arm("lossless"), 0), "fake")


def test_written_tree_goes_through_the_reader(tmp_path):
    raw = pytest.importorskip("lengthlens.data.readers.raw")
    cfg = load_config(_campaign(tmp_path))
    out = tmp_path / "out"
    run_campaign(cfg, out, backend=FakeBackend(), log=lambda m: None)
    found, unplaced = raw.discover(out)
    assert len(found) == 12 and not unplaced
    for r in found:
        res = raw.read_run(r)
        assert res.reason is None, res.reason
        rec, errors = validate_record(res.record, r.path)
        assert not errors, errors
        assert rec.status == "ok" and rec.target == "t" and rec.draft == "d" and rec.dataset == "toy"
        assert rec.item_id in ("case_001", "case_002") and rec.reference_answer == "3"
        assert rec.alpha == (None if rec.method == "strict" else {"cactus": 0.03, "spec_casc_opt": -0.3}[rec.method])


@pytest.mark.shared
def test_field_names_cover_the_study_logs(shared_data, tmp_path):
    cfg = load_config(_campaign(tmp_path))
    out = tmp_path / "out"
    run_campaign(cfg, out, backend=FakeBackend(), log=lambda m: None)
    ours = out / "runs/toy/cactus/alpha0.03/case_001/seed_0"
    theirs = shared_data / "runs/gsm8k/cactus/alpha0.03/case_001/seed_0"
    for name in ("run.json", "config.json"):
        a = json.loads((ours / name).read_text())
        b = json.loads((theirs / name).read_text())
        wanted = {"run.json": ["status", "backend", "wall_time_seconds", "input_tokens", "output_tokens",
                               "finish_reason", "eos_reached", "reached_max_new_tokens", "analysis_chars",
                               "final_chars", "reached_final_channel", "draft_tokens", "accepted_tokens",
                               "draft_rounds", "draft_acceptance_rate", "l_bar", "mean_accept_length"],
                  "config.json": ["backend", "mode", "lossy_method", "lossy_parameters", "acceptance_rule",
                                  "model", "draft_model", "seed", "temperature", "top_p", "max_new_tokens",
                                  "prompt_case", "prompt_source_id", "reference_answer"]}[name]
        for k in wanted:
            assert k in a and k in b, (name, k)
            assert type(a[k]) is type(b[k]) or a[k] is None or b[k] is None, (name, k, a[k], b[k])


def test_light_modules_do_not_import_torch_or_vllm():
    # The CLI, config, writer, runner and vLLM glue must load without the extras installed.
    import subprocess
    import sys

    code = ("import sys\n"
            "import lengthlens.generate.cli, lengthlens.generate.runner, lengthlens.generate.config\n"
            "import lengthlens.generate.layout, lengthlens.generate.vllm_plugin, lengthlens.generate.vllm_backend\n"
            "import lengthlens.generate.example, lengthlens.generate.toy\n"
            "assert 'torch' not in sys.modules and 'vllm' not in sys.modules and 'transformers' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
