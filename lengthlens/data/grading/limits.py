"""What a sandboxed run may use and what it did: the sandbox's small value types (see :mod:`.sandbox`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Limits", "RunResult", "SandboxInfo", "SandboxUnavailable"]


class SandboxUnavailable(RuntimeError):
    """Raised when code execution was asked for but the sandbox cannot run here (one line says why)."""


@dataclass(frozen=True)
class Limits:
    """What one program run may use; the defaults suit HumanEval and LiveCodeBench tests."""

    cpu_s: float = 10.0  # CPU seconds of the program (rounded up to whole seconds: RLIMIT_CPU's unit)
    # The wall limit is (whole) cpu_s times this plus wall_margin_s: a program that computes gets its CPU seconds on
    # a machine loaded twice over (the graders run at most one program per worker) with time to start, one that
    # sleeps is stopped soon after.
    wall_factor: float = 2.0
    wall_margin_s: float = 5.0
    memory_mb: int = 1024  # address space of the whole program (one process: all its threads together)
    threads: int = 32  # threads besides the main one (enforced where the program's user is not root outside)
    disk_mb: int = 16  # bytes the program may write, all files together (the tmpfs size), and per file
    output_mb: int = 32  # bytes of stdout and stderr together that lengthlens reads; beyond: killed
    open_files: int = 64  # open file descriptors
    stop_at: float | None = None  # a time.monotonic() at which the run is stopped whatever its limits (the budget)

    @property
    def wall_s(self) -> float:
        """The wall-clock limit: ``ceil(cpu_s) * wall_factor + wall_margin_s``, at least one second more than the CPU
        limit (25 s for the default 10 CPU seconds)."""
        cpu = math.ceil(self.cpu_s)
        return max(cpu * self.wall_factor + self.wall_margin_s, cpu + 1.0)


@dataclass(frozen=True)
class RunResult:
    """What one program run did."""

    ok: bool  # exited 0 after the program and its tests returned (the sentinel was printed), within the limits
    timed_out: bool  # stopped by the CPU or the wall limit
    returncode: int | None  # exit status (None when lengthlens stopped it)
    stdout: str  # what the program printed (the sentinel removed), at most Limits.output_mb
    error: str  # last line of stderr (the exception), or why it failed or was stopped; "" when ok
    stopped_by: str | None = None  # "cpu", "wall", "output", "budget" or None: the limit that ended the run


@dataclass(frozen=True)
class SandboxInfo:
    """How programs are isolated on this machine: the bwrap found, the interpreter and the program's user."""

    bwrap: str  # path of the bubblewrap executable
    python: str  # interpreter the programs run on (bound read-only into the sandbox)
    dropped: bool  # bwrap runs as uid/gid 65534 (lengthlens is root): the program is not root outside either
    threads_capped: bool  # RLIMIT_NPROC holds (the program's user outside its namespace is not root)
    base_tasks: int = 2  # tasks RLIMIT_NPROC counts besides the program's threads (bwrap's init, the main thread)

    def describe(self) -> str:
        """One line for logs and reports."""
        who = ("uid 65534 inside and outside its user namespace" if self.dropped else
               "uid 65534 inside a user namespace, without capabilities")
        threads = "" if self.threads_capped else "; thread count bounded only by the memory limit (root outside)"
        return f"bubblewrap ({self.bwrap}), {who}, no network, one process, python {self.python}{threads}"
