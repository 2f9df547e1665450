"""Run model-generated Python in an isolated, resource-capped child: the only place lengthlens executes code.

Execution is opt-in (``--execute-code``, ``LENGTHLENS_EXECUTE_CODE=1``, ``lengthlens.load(execute_code=True)``);
docs/execution.md describes the whole design. In short, a program runs under bubblewrap (``bwrap``) in
fresh user, PID, network, mount, IPC, UTS and cgroup namespaces:

* **Filesystem.** Read-only binds of ``/usr`` (and the ``/bin``, ``/lib*`` links) and the interpreter's
  installation; a fresh ``/proc`` of the new PID namespace; a minimal read-only ``/dev``; the program
  itself as a read-only file; a size-capped tmpfs at ``/tmp`` (the working directory) as the only
  writable place. Nothing else of the host (home folders, ``/etc``, ``/work``) is visible.
* **User.** Uid/gid 65534 inside a user namespace, with no capabilities; when lengthlens runs as root
  and the interpreter is reachable by an unprivileged user, bwrap itself runs as uid/gid 65534 too, so
  the program is not root outside its namespace either (see :class:`SandboxInfo`).
* **No network** (an empty network namespace), an empty environment but for ``PATH``, ``HOME``,
  ``TMPDIR``, ``LANG``, ``PYTHONHASHSEED`` and ``PYTHONIOENCODING``, and no inherited descriptors.
* **Limits.** CPU seconds (``RLIMIT_CPU``: verdicts do not depend on the machine's load) with a wall
  limit of twice that plus 5 s (``wall_factor``, ``wall_margin_s``), and the load's total grading budget
  (:mod:`.budget`); one process (a seccomp filter refuses ``fork``, ``vfork``,
  ``clone`` without ``CLONE_THREAD``, ``clone3`` and ``memfd_create``), so the address-space limit is
  the limit on the program's total memory; threads (``RLIMIT_NPROC``, where the program's user is not
  root outside); open files; bytes written (the tmpfs size and ``RLIMIT_FSIZE``); bytes of output
  read (streamed, the child killed beyond the cap).
* **End.** The whole PID namespace is killed at the wall limit, at the output cap, and when the
  program's main process ends (double-forked or detached processes cannot survive it); bwrap dies
  with lengthlens (``--die-with-parent``).
* **Verdict.** A run passes only when it exits 0 *and* printed, after the program and its tests
  returned, a random token read from a pipe that is closed before any program code runs (a
  ``sys.exit(0)`` or ``os._exit(0)`` before the tests is a failure).

Where bwrap is missing or cannot create its namespaces, :func:`resolve` refuses with one line naming
what is missing, unless the caller allows unsafe execution (``execute_code="unsafe"``): then the program
runs with the same limits set by ``setrlimit`` and a process-group kill only, as the calling user, and
the load warns about it.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from lengthlens.data.execute import ENV_VAR, add_execution_flags, execution_mode, mode_from_args, mode_from_env
from lengthlens.data.grading.budget import BudgetSpent
from lengthlens.data.grading.budget import current as current_budget
from lengthlens.data.grading.launch import base_interpreter, run_bwrap, run_unsafe
from lengthlens.data.grading.limits import Limits, RunResult, SandboxInfo, SandboxUnavailable
from lengthlens.data.grading.seccomp import seccomp_filter

__all__ = [
    "ENV_VAR", "PYTHON_ENV_VAR", "Execution", "Limits", "RunResult", "SandboxInfo", "SandboxUnavailable",
    "add_execution_flags", "execution_mode", "mode_from_args", "mode_from_env", "resolve", "run", "sandbox_info",
    "seccomp_filter",
]

#: The environment variable naming the interpreter programs run on (default: the running Python's base
#: interpreter; as root, the system's of the same version where only root can reach that one).
PYTHON_ENV_VAR = "LENGTHLENS_SANDBOX_PYTHON"


@dataclass(frozen=True)
class Execution:
    """A resolved choice to execute code: isolated (``sandbox``) or, where that was impossible and allowed, ``unsafe``."""

    isolation: str  # "sandbox" or "unsafe"
    warning: str | None = None  # the line the load prints when programs run without isolation


# --------------------------------------------------------------------------------------------
# The choice.
# --------------------------------------------------------------------------------------------

def resolve(execute_code: Any) -> Execution | None:
    """What ``execute_code`` means on this machine: None (off), isolated execution, or unsafe execution.

    Parameters
    ----------
    execute_code : False/None (do not execute), True (execute isolated; refuse where the sandbox cannot
        run) or ``"unsafe"`` (isolated where the sandbox runs, else with resource limits only).

    Returns
    -------
    Execution or None

    Raises
    ------
    SandboxUnavailable
        ``execute_code=True`` where bubblewrap is missing or cannot create its namespaces.

    Examples
    --------
    >>> resolve(False) is None
    True
    """
    mode = execution_mode(execute_code)
    if mode == "off":
        return None
    try:
        sandbox_info()
    except SandboxUnavailable as exc:
        if mode == "sandbox":
            raise
        return Execution("unsafe", f"generated code was executed WITHOUT isolation ({exc}; "
                                   f"--execute-code-unsafe): only CPU, memory, file-size and output limits and a "
                                   f"process-group kill applied; the programs could read your files, use the "
                                   f"network and outlive lengthlens")
    return Execution("sandbox")


# --------------------------------------------------------------------------------------------
# Finding out what works here.
# --------------------------------------------------------------------------------------------

def _candidates(python: str, substitute: bool) -> list[tuple[str, bool]]:
    """(interpreter, drop privileges) to try, best isolation first.

    As root, bwrap itself runs as uid 65534 where that user can reach the interpreter; with
    ``substitute``, a root-only interpreter (e.g. under /root) is followed by the system's interpreter
    of the same version, tried before keeping root outside the namespace.
    """
    if os.geteuid() != 0:
        return [(python, False)]
    out = [(python, True)]
    system = os.path.realpath(f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}")
    if substitute and system != python and os.access(system, os.X_OK):
        out.append((system, True))
    return out + [(python, False)]


@lru_cache(maxsize=4)
def _probe(python: str, substitute: bool) -> SandboxInfo:
    """Run a trivial program in the sandbox the best way that works here, and keep that way."""
    if sys.platform != "linux":
        raise SandboxUnavailable(f"the code sandbox needs Linux namespaces (bubblewrap); this is {sys.platform}")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install the package bubblewrap "
                                 "(Debian/Ubuntu: apt-get install bubblewrap)")
    seccomp_filter()  # raises on an architecture without a filter
    if not os.access(python, os.X_OK):
        raise SandboxUnavailable(f"the interpreter {python} is not executable")
    last = ""
    for interp, drop in _candidates(python, substitute):
        info = SandboxInfo(bwrap, interp, drop, threads_capped=drop or os.geteuid() != 0)
        r = run_bwrap(info, "import sys\nprint(sys.version_info[0])\n", "", Limits(cpu_s=5), "__main__", False)
        if r.ok and r.stdout.strip() == "3":
            return _count_base_tasks(info) if info.threads_capped else info
        last = r.error or f"exit status {r.returncode}"
    raise SandboxUnavailable(f"bubblewrap ({bwrap}) cannot start the sandbox here: {last}")


_COUNT_THREADS = """
import _thread, time
n = 0
try:
    for _ in range(64):
        _thread.start_new_thread(time.sleep, (0.2,))
        n += 1
except RuntimeError:
    pass
print(n)
"""


def _count_base_tasks(info: SandboxInfo) -> SandboxInfo:
    """Measure how many tasks of the namespace RLIMIT_NPROC counts besides the program's threads (bwrap's own
    processes in the nested user namespaces it builds), so that ``Limits.threads`` is exactly the threads allowed."""
    # RLIMIT_NPROC = 16; memory enough for 16 threads' stacks and malloc arenas, so that only RLIMIT_NPROC stops them.
    probe = Limits(cpu_s=5, memory_mb=4096, threads=16 - info.base_tasks)
    r = run_bwrap(info, _COUNT_THREADS, "", probe, "__main__", False)
    if not r.ok or not r.stdout.strip().isdigit() or int(r.stdout) >= 16:
        raise SandboxUnavailable(f"the sandbox's thread limit does not hold here: {r.error or r.stdout.strip()!r}")
    return SandboxInfo(info.bwrap, info.python, info.dropped, True, base_tasks=16 - int(r.stdout))


def sandbox_info(python: str | None = None) -> SandboxInfo:
    """How programs are isolated on this machine (cached); raises :class:`SandboxUnavailable` where they cannot be.

    ``python``: the interpreter to run programs on (default: ``$LENGTHLENS_SANDBOX_PYTHON``, else the running
    Python's base interpreter, or as root the system's one of the same version where only root can reach it).

    Examples
    --------
    >>> sandbox_info().bwrap  # doctest: +SKIP
    '/usr/bin/bwrap'
    """
    python = python or os.environ.get(PYTHON_ENV_VAR) or None
    return _probe(os.path.realpath(python), False) if python else _probe(base_interpreter(), True)


# --------------------------------------------------------------------------------------------
# Running one program.
# --------------------------------------------------------------------------------------------

def run(source: str, *, stdin: str = "", limits: Limits = Limits(), run_name: str = "__main__",
        script: bool = False, isolation: str = "sandbox", python: str | None = None) -> RunResult:
    """Run Python ``source`` isolated and capped; never raises for the program's own failures.

    Inside a load's grading :func:`~lengthlens.data.grading.budget.session`, a program is not started once the
    budget is spent and is stopped when it runs out: :class:`~lengthlens.data.grading.budget.BudgetSpent`.

    Parameters
    ----------
    source : the program (run as a file named ``/sandbox/program.py``).
    stdin : its standard input.
    limits : CPU, wall, memory, threads, disk and output limits.
    run_name : the module's ``__name__`` (``__main__`` runs ``if __name__ == "__main__"`` blocks).
    script : the program is a script whose own ``sys.exit(0)`` ends it normally (a stdin test); otherwise
        any exit before the program's end is a failure (the tests come at its end).
    isolation : ``sandbox`` (bubblewrap; raises :class:`SandboxUnavailable` where it cannot run) or
        ``unsafe`` (resource limits and a process-group kill only).
    python : the interpreter (default: the base interpreter of the running Python).

    Returns
    -------
    RunResult

    Examples
    --------
    >>> run("print(input()[::-1])", stdin="abc\\n").stdout  # doctest: +SKIP
    'cba\\n'
    """
    if isolation not in ("sandbox", "unsafe"):
        raise ValueError(f"isolation must be 'sandbox' or 'unsafe', not {isolation!r}")
    budget = current_budget()
    if budget is not None:  # the load's total grading time: not started once spent, stopped when it runs out
        stop_at = budget.deadline()
        if time.monotonic() >= stop_at:
            raise BudgetSpent(budget.detail)
        limits = replace(limits, stop_at=stop_at if limits.stop_at is None else min(stop_at, limits.stop_at))
    if isolation == "sandbox":
        r = run_bwrap(sandbox_info(python), source, stdin, limits, run_name, script)
    else:
        python = python or os.environ.get(PYTHON_ENV_VAR) or None
        r = run_unsafe(os.path.realpath(python) if python else base_interpreter(), source, stdin, limits, run_name,
                       script)
    if r.stopped_by == "budget" and budget is not None:
        raise BudgetSpent(budget.detail)
    return r
