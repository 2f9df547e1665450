"""Graders within bounds: a total time budget per load, a wall limit that scales with the CPU limit, programs run in
parallel up to the worker count, io_uring and ptrace refused, library warnings made printable.

Every case runs under a pytest-timeout limit that a regression (each sleeping program costing its full wall
limit, one after another) would pass; no case asserts a duration.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import polars as pl
import pytest

import lengthlens as ll
from lengthlens import cli
from lengthlens.data import grading
from lengthlens.data.grading import budget, grade_frame
from lengthlens.data.grading.limits import Limits
from lengthlens.data.grading.sandbox import SandboxUnavailable, run, sandbox_info

from core.minitree import write_run  # tests/ is on sys.path (pytest prepends it)

PROBLEM = {"task_id": "HumanEval/0", "prompt": "def total(xs):\n    \"\"\"Sum of xs.\"\"\"\n",
           "test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n", "entry_point": "total"}
SLEEPS = "```python\nimport time\ntime.sleep(100)\ndef total(xs):\n    return sum(xs)\n```"
RIGHT = "```python\ndef total(xs):\n    return sum(xs)\n```"


@pytest.fixture
def sandbox():
    try:
        return sandbox_info()
    except SandboxUnavailable as exc:
        pytest.skip(f"the code sandbox cannot run here: {exc}")


@pytest.fixture
def problems(tmp_path) -> Path:
    p = tmp_path / "problems.jsonl"
    p.write_text(json.dumps(PROBLEM) + "\n")
    return p


def _frame(answers: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"dataset": ["humaneval"] * len(answers), "text": answers,
                         "prompt_source_id": ["HumanEval/0"] * len(answers)})


_SYSCALLS = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for nr in (425, 426, 427):  # io_uring_setup, io_uring_enter, io_uring_register
    ctypes.set_errno(0)
    print(nr, libc.syscall(nr, 0, 0, 0, 0, 0), ctypes.get_errno())
ctypes.set_errno(0)
print("ptrace", libc.ptrace(0, 0, None, None), ctypes.get_errno())  # PTRACE_TRACEME
"""


@pytest.mark.timeout(30)
def test_the_sandbox_refuses_io_uring_and_ptrace(sandbox):
    r = run(_SYSCALLS, limits=Limits(cpu_s=2))
    assert r.ok, r.error
    assert r.stdout.split("\n")[:4] == ["425 -1 1", "426 -1 1", "427 -1 1", "ptrace -1 1"]  # EPERM each


def test_the_wall_limit_scales_with_the_cpu_limit():
    assert [Limits(cpu_s=c).wall_s for c in (0.5, 1, 2, 10)] == [7.0, 7.0, 9.0, 25.0]
    assert Limits(cpu_s=10).wall_s < 100  # was ten times the CPU limit: 100 s per sleeping program


@pytest.mark.timeout(60)
def test_a_sleeping_program_is_stopped_at_the_scaled_wall_limit(sandbox):
    r = run("import time\ntime.sleep(100)\n", limits=Limits(cpu_s=1, wall_margin_s=1))
    assert (r.ok, r.timed_out, r.stopped_by) == (False, True, "wall")
    assert "3s (wall limit)" in r.error


@pytest.mark.timeout(60)
def test_the_budget_bounds_a_load_of_sleeping_programs_and_says_so(sandbox, problems):
    # 12 programs that sleep: 12 x 30 s of wall limit without the budget (the 304 s load); 2 s with it.
    with budget.session(2.0, workers=4):
        out = grade_frame(_frame([SLEEPS] * 12), problems=problems, execute_code=True)
    assert out["correct"].to_list() == [None] * 12
    assert all(d.startswith(budget.SPENT) for d in out["grade_detail"])


@pytest.mark.timeout(120)
def test_a_load_past_its_budget_warns_grades_what_it_could_and_is_not_cached(sandbox, problems, tmp_path, monkeypatch):
    monkeypatch.setenv("LENGTHLENS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    for i, answer in enumerate([RIGHT, SLEEPS, SLEEPS]):
        d = write_run(root, "humaneval", "strict", "strict", f"case_{i:03d}", 0, text=answer)
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "prompt_source_id": "HumanEval/0"}))
    runs = ll.load(root, problems=problems, execute_code=True, grading_budget_s=3.0, workers=1, cache=True)
    correct = dict(zip(runs.table["source"].map_elements(lambda s: Path(s).parent.name, return_dtype=pl.String),
                       runs.table["correct"]))
    assert correct == {"case_000": True, "case_001": None, "case_002": None}
    (warning,) = [w for w in runs.warnings if budget.SPENT_WARNING in w]
    assert warning.startswith("2 runs (humaneval 2)") and "3 s" in warning
    assert not list((tmp_path / "cache").glob("raw-*.llcache"))  # which runs got graded depended on the clock


def test_graded_programs_run_in_parallel_up_to_the_worker_count(monkeypatch, problems):
    lock = threading.Lock()
    running, most = [0], [0]

    def fake_run_program(source, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return grading.code.RunResult(True, False, 0, "", "")

    monkeypatch.setattr(grading, "run_program", fake_run_program)
    for workers in (1, 3):
        most[0] = 0
        with budget.session(60.0, workers=workers):
            out = grade_frame(_frame([RIGHT] * 9), problems=problems, execute_code="unsafe")
        assert out["correct"].to_list() == [True] * 9 and most[0] == workers


def test_budget_seconds_from_the_option_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    assert budget.budget_seconds() == budget.DEFAULT_BUDGET_S
    monkeypatch.setenv(budget.BUDGET_ENV, "45")
    assert budget.budget_seconds() == 45.0 and budget.budget_seconds(5) == 5.0
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive number of seconds"):
            budget.budget_seconds(bad)
    monkeypatch.setenv(budget.BUDGET_ENV, "soon")
    with pytest.raises(ll.LoadError, match=budget.BUDGET_ENV):
        ll.load(Path(__file__))


def test_library_warnings_reach_the_terminal_without_escape_characters(capsys):
    import logging
    import warnings

    with cli._printable_library_output():
        warnings.warn("glyph \x1b[31m\x07 missing from font", UserWarning, stacklevel=1)
        # What a library's log record goes through where no handler is configured (pytest configures its own).
        logging.lastResort.handle(logging.makeLogRecord({"msg": "findfont: \x1b]0;title\x07 not found",
                                                         "levelno": logging.WARNING, "levelname": "WARNING"}))
    err = capsys.readouterr().err
    assert "glyph [31m missing" in err and "findfont: ]0;title not found" in err
    assert "\x1b" not in err and "\x07" not in err
