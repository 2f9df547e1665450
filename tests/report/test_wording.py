"""Report wording computed from the data: channel names per model, one disagreement line per model with its cause,
one benchmark on two targets counted once."""

from __future__ import annotations

import json

import polars as pl

import lengthlens as ll
from lengthlens.report import context as ctx
from lengthlens.report import wording


def _rec(target, dataset, method, item, text, **extra):
    return dict(target=target, draft="D", dataset=dataset, method=method, params="strict" if method == "strict" else "alpha0.3",
                alpha=None if method == "strict" else 0.3, item_id=f"case_{item:03d}", seed=0, status="ok",
                output_tokens=100, finish_reason="stop", max_new_tokens=1000, draft_rounds=40, accepted_tokens=60,
                draft_tokens=160, wall_time_s=1.0, correct=True, text=text, **extra)


def test_disagreeing_logged_counts_are_one_line_per_model_with_the_cause(tmp_path):
    recs = []
    for i in range(4):
        for m in ("strict", "cactus"):
            q = "<think>reasoning here</think>The answer is 4."
            # Qwen3: the generator's harmony counter logged the whole text as analysis and nothing as final.
            recs.append(_rec("Qwen3-8B", "gsm8k_qwen3", m, i, q, analysis_chars=len(q), final_chars=0))
            g = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>4"
            recs.append(_rec("gpt-oss-20b", "gsm8k", m, i, g))
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs))
    runs = ll.load(f)
    a = ll.analyse(runs, n_resamples=50)
    lines = [n for n in a.notes if "logged channel counts" in n]
    assert len(lines) == 1  # not one per run: 8 Qwen runs disagree
    assert lines[0].startswith("Qwen3-8B: 8 runs'") and "<think> tags" in lines[0]
    names = ctx.thinking_names(a)
    assert names == {"Qwen3-8B": "the <think> block", "gpt-oss-20b": "the analysis channel (GPT-OSS harmony)"}
    assert "(analysis) channel" not in ctx.thinking_sentence(a)
    # gsm8k on GPT-OSS and gsm8k_qwen3 on Qwen3 are one benchmark: dataset and target are separate columns.
    assert ctx.benchmarks(runs.table) == [{"name": "gsm8k", "folders": ["gsm8k", "gsm8k_qwen3"]}]


def test_benchmark_of_keeps_suffixes_that_name_no_target():
    assert ctx.benchmark_of("aime24_qwen3", ["Qwen3-8B"]) == "aime24"
    assert ctx.benchmark_of("longbench_v2", ["Qwen3-8B"]) == "longbench_v2"
    assert ctx.benchmark_of("aime24", ["gpt-oss-20b"]) == "aime24"
    assert ctx.benchmarks(pl.DataFrame(schema={"dataset": pl.String, "target": pl.String})) == []


def test_print_has_no_click_hint_and_uses_ge(example_report):
    import subprocess

    from .helpers import need

    html = (example_report / "report.html").read_text(encoding="utf-8")
    assert '<span class="noprint"> (click to open)</span>' in html
    text = subprocess.run([need("pdftotext"), str(example_report / "report.pdf"), "-"], capture_output=True, text=True,
                          check=True).stdout
    assert "click to open" not in text and ">=" not in text
    assert "more than 2 accuracy points" in text and "≥" in text


def test_limitations_say_time_intervals_are_conditional_on_the_session(tmp_path):
    recs = [_rec("T", "gsm8k", m, i, "The answer is 4.") for i in range(4) for m in ("strict", "cactus")]
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    lines = ctx.limitations(ll.analyse(ll.load(f), n_resamples=50))
    assert wording.TIME_CONDITIONAL in lines and wording.TIME_PER_ROUND_BIAS in lines
