"""The study's own grading policy (``--grading study``), beside lengthlens' default one.

The study graded with one script per dataset. Written here from their documented rules, so that its
verdicts can be reproduced and compared with lengthlens' default policy:

* **Answer segment.** The text after the LAST GPT-OSS final-channel marker
  ``<|channel|>final<|message|>``; else the text after the first ``</think>`` (Qwen3); else, for a
  text in GPT-OSS's harmony format (it has ``<|channel|>`` markers) that never reached its final
  channel, no answer (``no_final_channel``: how the study's grade files for GPT-OSS record these
  runs); else the whole text. The budget plays no part: a run cut inside its thinking is graded
  on whatever the segment holds.
* **GSM8K**: the last ``#### N``, else the last number in the segment; equal as numbers.
* **AIME**: the last ``\\boxed{N}`` with N of one to three digits, else the last free-standing
  one-to-three-digit integer; equal as integers.
* **Multiple choice (LongBench-v2)**: the last ``\\boxed{X}`` (X in A-D, either case), else the
  last bare capital A-D standing as a word. So a letter inside degenerate text that never closed its
  thinking counts, where the default policy calls the run incorrect.
* **HumanEval**: the last fenced code block after the first final-channel marker (cut at the next
  ``<|end|>``), run on its own with the problem's tests and ``check(entry_point)``.
* **LiveCodeBench**: the last fenced code block of the segment, run against the public tests.

The two code graders run programs only with ``execute_code`` (as the default policy's, isolated by
:mod:`lengthlens.data.grading.sandbox`); without it such a run is ungraded (:data:`NOT_EXECUTED`),
while one without a code block is still incorrect.

Where the default policy differs: it reads only the answer part of lengthlens' channel split, calls a
run cut at the budget with its thinking open incorrect, and parses answers more leniently
(:mod:`lengthlens.data.grading.answers`).
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from lengthlens.data.grading.code import (
    NOT_EXECUTED,
    ProblemsUnavailable,
    humaneval_task_id,
    lcb_question_id,
    load_humaneval_problems,
    load_livecodebench_tests,
    run_lcb_tests,
    run_program,
)
from lengthlens.data.grading.sandbox import execution_mode

#: Names of the grading policies (``lengthlens report --grading``).
POLICIES = ("default", "study")

FINAL_MARKER = "<|channel|>final<|message|>"
_THINK_CLOSE = "</think>"
_HARMONY = "<|channel|>"
_END = "<|end|>"
_HASH = re.compile(r"####\s*\$?(-?[0-9][0-9,]*(?:\.[0-9]+)?)")
_NUMBER = re.compile(r"(-?[0-9][0-9,]*(?:\.[0-9]+)?)")
_AIME_BOXED = re.compile(r"\\boxed\{\s*([0-9]{1,3})\s*\}")
_AIME_INT = re.compile(r"\b([0-9]{1,3})\b")
_CHOICE_BOXED = re.compile(r"\\boxed\{\s*([A-Da-d])\s*\}")
_CHOICE_BARE = re.compile(r"\b([A-D])\b")
_HUMANEVAL_BLOCK = re.compile(r"```(?:python)?\s*\n(.*?)```", re.DOTALL)
_ANY_BLOCK = re.compile(r"```(?:\w+)?\s*\n(.*?)```", re.DOTALL)


def study_segment(text: str) -> tuple[str | None, str]:
    """The answer segment under the study's policy and how it was found; None: no answer."""
    if FINAL_MARKER in text:
        return text.split(FINAL_MARKER)[-1], "final_channel"
    if _THINK_CLOSE in text:
        return text.split(_THINK_CLOSE, 1)[1], "after_think"
    if _HARMONY in text:
        return None, "no_final_channel"
    if text.strip():
        return text, "whole_text"
    return None, "empty"


def _gsm8k(seg: str, reference: str | None) -> tuple[str | None, bool | None, str]:
    hashed = _HASH.findall(seg)
    found, how = (hashed, "hash_marker") if hashed else (_NUMBER.findall(seg), "last_number")
    if not found:
        return None, False, "no number"
    ans = found[-1]
    try:
        ref = float(str(reference).replace(",", ""))
    except (TypeError, ValueError):
        return ans, None, f"unusable reference {reference!r}"
    return ans, float(ans.replace(",", "")) == ref, how


def _aime(seg: str, reference: str | None) -> tuple[str | None, bool | None, str]:
    boxed = _AIME_BOXED.findall(seg)
    found, how = (boxed, "boxed") if boxed else (_AIME_INT.findall(seg), "last_integer")
    if not found:
        return None, False, "no integer"
    ans = str(int(found[-1]))
    try:
        ref = int(str(reference).strip())
    except (TypeError, ValueError):
        return ans, None, f"unusable reference {reference!r}"
    return ans, int(ans) == ref, how


def _choice(seg: str, reference: str | None) -> tuple[str | None, bool | None, str]:
    boxed = _CHOICE_BOXED.findall(seg)
    found, how = (boxed, "boxed") if boxed else (_CHOICE_BARE.findall(seg), "last_bare_letter")
    if not found:
        return None, False, "no letter"
    ans = found[-1].upper()
    ref = (reference or "").strip().upper()
    if ref not in ("A", "B", "C", "D"):
        return ans, None, f"unusable reference {reference!r}"
    return ans, ans == ref, how


def _humaneval(text: str, source_id: str | None, problems: Any, timeout_s: float, memory_mb: int,
               execute_code: bool | str):
    if FINAL_MARKER in text:
        seg = text.split(FINAL_MARKER, 1)[1].split(_END, 1)[0]
    else:
        seg, _how = study_segment(text)
        if seg is None:
            return None, False, _how
    blocks = _HUMANEVAL_BLOCK.findall(seg)
    if not blocks:
        return None, False, "no code block"
    code = textwrap.dedent(blocks[-1]).strip("\n")
    if execution_mode(execute_code) == "off":
        return code, None, NOT_EXECUTED
    try:
        probs = load_humaneval_problems(problems)
    except ProblemsUnavailable as e:
        return code, None, str(e)
    prob = probs.get(humaneval_task_id(source_id))
    if prob is None:
        return code, None, f"HumanEval task of {source_id!r} not in the problems"
    src = f"{code}\n\n{prob['test']}\n\ncheck({prob['entry_point']})\n"
    r = run_program(src, timeout_s=timeout_s, memory_mb=memory_mb, run_name="__candidate__", execute_code=execute_code)
    return code, r.ok, "fenced_block" if r.ok else f"fenced_block: {r.error}"


def _livecodebench(seg: str, source_id: str | None, problems: Any, timeout_s: float, memory_mb: int,
                   execute_code: bool | str):
    blocks = _ANY_BLOCK.findall(seg)
    if not blocks:
        return None, False, "no code block"
    code = blocks[-1]
    if execution_mode(execute_code) == "off":
        return code, None, NOT_EXECUTED
    try:
        tests = load_livecodebench_tests(problems)
    except ProblemsUnavailable as e:
        return code, None, str(e)
    prob = tests.get(lcb_question_id(source_id))
    if prob is None:
        return code, None, f"LiveCodeBench question of {source_id!r} not in the tests"
    ok, detail = run_lcb_tests(prob, code, timeout_s=timeout_s, memory_mb=memory_mb, execute_code=execute_code)
    return code, ok, f"last_fenced_block: {detail}"


def study_grade(name: str, text: str, reference: str | None, source_id: str | None, *, problems: Any = None,
                timeout_s: float = 10.0, memory_mb: int = 1024,
                execute_code: bool | str = False) -> tuple[str | None, bool | None, str]:
    """(answer, correct, how) for one run under the study's policy; ``name`` is a grader name (``gsm8k``, ``aime``, ...).

    ``correct`` is None (ungraded) for MT-Bench, for an unusable reference and where a code
    dataset's tests are not at hand or its code would have to run and ``execute_code`` is off; a run with no
    answer segment or nothing to extract is incorrect.
    """
    if name == "mtbench":
        return None, None, "judge-scored; kept out of accuracy"
    if name == "humaneval":
        return _humaneval(text, source_id, problems, timeout_s, memory_mb, execute_code)
    seg, how = study_segment(text)
    if seg is None:
        return None, False, how
    if name == "livecodebench":
        return _livecodebench(seg, source_id, problems, timeout_s, memory_mb, execute_code)
    fn = {"gsm8k": _gsm8k, "aime": _aime, "longbench_v2": _choice}.get(name)
    if fn is None:
        return None, None, f"no study grader for {name!r}"
    ans, ok, found = fn(seg, reference)
    return ans, ok, f"{how}: {found}"
