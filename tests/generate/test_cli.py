"""``lengthlens generate`` end to end on tiny CPU models: a config campaign, resume, and the example."""

from __future__ import annotations

import argparse
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from lengthlens.generate.cli import add_parser


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="lengthlens")
    sub = ap.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return ap


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return args.func(args)


CAMPAIGN = """
backend: reference
target: {name: tiny-t, tiny: {hidden: 32, layers: 1, seed: 0, logit_scale: 3.0}}
draft: {name: tiny-d, tiny: {copy_of: target, noise: 0.4, seed: 1}}
tokenizer: tiny
speculative: {num_draft_tokens: 3}
sampling: {temperature: 1.0, top_p: 0.95, max_new_tokens: 24}
seeds: [0, 1]
datasets: {toy: items.jsonl}
thinking: {format: think, opened_in_prompt: true}
prompt: {template: "<bos>{prompt}\\n<think>"}
arms:
  - strict
  - {rule: cactus, alpha: 0.3}
  - {rule: spec_casc_tok, alpha: 0.5, force_commit: 8}
"""


def test_generate_config_campaign_and_resume(tmp_path, capsys):
    (tmp_path / "items.jsonl").write_text('{"id": "a", "prompt": "q: 1+2=?", "reference": "3"}\n'
                                          '{"id": "b", "prompt": "q: 5-1=?", "reference": "4"}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CAMPAIGN)
    out = tmp_path / "out"
    assert _run(["generate", str(cfg), str(out), "--quiet"]) == 0
    runs = sorted((out / "runs").glob("toy/*/*/case_*/seed_*"))
    assert len(runs) == 12
    fc = out / "runs/toy/spec_casc_tok_force_commit/alpha0.5_t8/case_001/seed_0"
    rj = json.loads((fc / "run.json").read_text())
    cj = json.loads((fc / "config.json").read_text())
    assert cj["lossy_parameters"] == {"alpha": 0.5, "force_commit_threshold": 8}
    assert cj["force_commit"]["marker"] == "</think>"
    assert isinstance(rj["force_commit_fired"], bool)
    if rj["force_commit_fired"]:
        assert "</think>" in (fc / "output.txt").read_text()
    for r in runs:
        rj = json.loads((r / "run.json").read_text())
        assert rj["status"] == "ok" and rj["output_tokens"] <= 24
        assert rj["output_tokens"] == rj["accepted_tokens"] + rj["draft_rounds"] + rj["forced_tokens"] - rj["truncated_tokens"]
    # Same seed, same output: a second campaign into another folder reproduces every text.
    out2 = tmp_path / "out2"
    assert _run(["generate", str(cfg), str(out2), "--quiet", "--max-items", "1"]) == 0
    a = (out / "runs/toy/cactus/alpha0.3/case_001/seed_1/output.txt").read_text()
    b = (out2 / "runs/toy/cactus/alpha0.3/case_001/seed_1/output.txt").read_text()
    assert a == b
    # Resume: nothing left to do, nothing rewritten.
    stamp = (runs[0] / "run.json").stat().st_mtime_ns
    assert _run(["generate", str(cfg), str(out), "--quiet"]) == 0
    assert (runs[0] / "run.json").stat().st_mtime_ns == stamp
    capsys.readouterr()
    assert _run(["generate", str(cfg), str(out), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 12 and all(line.startswith("done\t") for line in lines)


def test_generate_usage_errors(tmp_path):
    assert _run(["generate"]) == 2
    assert _run(["generate", str(tmp_path / "missing.yaml")]) == 2
    assert _run(["generate", "x.yaml", "--example", str(tmp_path)]) == 2


def test_example_writes_strict_plus_five_rules_and_loads(tmp_path):
    out = tmp_path / "ex"
    assert _run(["generate", "--backend", "reference", "--example", str(out), "--example-items", "2", "--quiet"]) == 0
    arms = sorted(p.relative_to(out / "runs" / "gsm8k_toy").as_posix() for p in (out / "runs" / "gsm8k_toy").glob("*/*"))
    assert arms == ["cactus/alpha0.3", "mentored_dec/alpha0.5", "r_fuzzy/alpha0.15", "spec_casc_opt/alpha0.05",
                    "spec_casc_tok/alpha0.5", "strict/strict"]
    l_bars = []
    for r in (out / "runs").glob("gsm8k_toy/*/*/case_*/seed_0"):
        rj = json.loads((r / "run.json").read_text())
        assert rj["status"] == "ok"
        l_bars.append(rj["l_bar"])
    assert len(l_bars) == 12
    assert 1.0 < sum(l_bars) / len(l_bars) < 4.0  # a realistic pair, not a copy and not unrelated
    loading = pytest.importorskip("lengthlens.data.loading")
    runs = loading.load(out, cache=False, progress=False)
    assert "12 loaded" in runs.summary() and "0 listed as skipped" in runs.summary()
    # Named gsm8k_*, the toy answers are graded by the GSM8K grader (a final number).
    assert runs.table["correct"].null_count() == 0
    # The logged thinking/answer counts are the ones the reader's audit derives from the text.
    assert not [w for w in runs.warnings if "channel counts" in str(w)], runs.warnings


def test_generate_with_local_model_folders(tmp_path):
    # Path-based models (what a user's own pair looks like), loaded offline from local folders.
    from lengthlens.generate.tiny import build_tiny_model, build_tiny_tokenizer, perturbed_copy

    tok = build_tiny_tokenizer()
    target = build_tiny_model(len(tok), hidden=32, layers=1, seed=2, logit_scale=3.0)
    for name, m in (("t", target), ("d", perturbed_copy(target, noise=0.3, seed=3))):
        m.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    (tmp_path / "items.jsonl").write_text('{"id": "a", "prompt": "q: 1+2=?", "reference": "3"}\n')
    (tmp_path / "c.toml").write_text(
        'arms = ["strict", {rule = "mentored_dec", alpha = 0.3}]\nseeds = [4]\n'
        f'[target]\nname = "T"\npath = "{tmp_path / "t"}"\n[draft]\nname = "D"\npath = "{tmp_path / "d"}"\n'
        '[datasets]\ntoy = "items.jsonl"\n[sampling]\nmax_new_tokens = 16\n')
    assert _run(["generate", str(tmp_path / "c.toml"), str(tmp_path / "out"), "--quiet"]) == 0
    rj = json.loads((tmp_path / "out/runs/toy/mentored_dec/alpha0.3/case_001/seed_4/run.json").read_text())
    assert rj["status"] == "ok" and 1 <= rj["output_tokens"] <= 16


def test_shards_are_disjoint_cover_the_campaign_and_report_together(tmp_path, capsys):
    (tmp_path / "items.jsonl").write_text("".join(f'{{"id": "{i}", "prompt": "q: {i}+1=?", "reference": "{i + 1}"}}\n'
                                                  for i in range(5)))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CAMPAIGN.replace("max_new_tokens: 24", "max_new_tokens: 6"))
    capsys.readouterr()
    assert _run(["generate", str(cfg), str(tmp_path / "all"), "--dry-run"]) == 0
    whole = {ln.split("\t")[1].split("/runs/")[1] for ln in capsys.readouterr().out.splitlines()}
    assert len(whole) == 30  # 5 items x 2 seeds x 3 arms
    parts = []
    for k in (1, 2, 3):  # three machines, each with its own output folder
        assert _run(["generate", str(cfg), str(tmp_path / f"m{k}"), "--shard", f"{k}/3", "--quiet"]) == 0
        parts.append({p.relative_to(tmp_path / f"m{k}" / "runs").as_posix()
                      for p in (tmp_path / f"m{k}" / "runs").glob("toy/*/*/case_*/seed_*")})
    assert set.union(*parts) == whole and sum(map(len, parts)) == len(whole)  # disjoint, complete
    for part in parts:  # every arm of a (case, seed) unit is in the same shard: pairs stay whole
        units = {tuple(p.split("/")[3:]) for p in part}
        assert len(part) == 3 * len(units)
    assert sorted(map(len, parts)) == [9, 9, 12]  # 10 units dealt round-robin: 4, 3, 3
    import lengthlens as ll

    runs = ll.load(*(tmp_path / f"m{k}" / "runs" for k in (1, 2, 3)), cache=False, progress=False)
    assert "30 loaded" in runs.summary()
    assert _run(["generate", str(cfg), str(tmp_path / "m1"), "--shard", "4/3"]) == 2
    assert _run(["generate", str(cfg), str(tmp_path / "m1"), "--shard", "x"]) == 2
