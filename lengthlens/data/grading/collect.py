"""Reading a sandboxed run's output within its limits, ending the run as a whole, and deciding its verdict."""

from __future__ import annotations

import math
import os
import re
import selectors
import signal
import subprocess
import time

from lengthlens.data.grading.limits import Limits, RunResult

__all__ = ["collect", "close_fd"]


def close_fd(fd: int) -> None:
    """Close ``fd``; one already closed is no error."""
    try:
        os.close(fd)
    except OSError:
        pass


_CHILD_PID = re.compile(rb'"child-pid"\s*:\s*(\d+)')


class _Stopper:
    """Kills a run as a whole: the sandbox's PID namespace (through its init) and the launcher's process group."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.pidfd: int | None = None

    def adopt(self, info: bytes) -> None:
        """Hold the sandbox's init (its host pid is in bwrap's info) by a pidfd, immune to pid reuse."""
        m = _CHILD_PID.search(info)
        if m is None or self.pidfd is not None:
            return
        pid = int(m.group(1))
        try:
            self.pidfd = os.pidfd_open(pid)
        except OSError:  # already gone, and its namespace with it
            self.pidfd = -1
            return
        # The pid may have been reaped and reused before it was opened: keep it only if bwrap is its parent.
        if _parent_of(pid) != self.proc.pid:
            close_fd(self.pidfd)
            self.pidfd = -1

    def kill(self, group: bool = False) -> None:
        """SIGKILL to the namespace's init (the kernel then kills every process in it) and to the launcher's group
        while the launcher lives (or, ``group``, right after it was reaped: its stragglers keep the group's id);
        returns once the init is gone, so no process of the run is left."""
        if self.pidfd is not None and self.pidfd >= 0:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except OSError:
                pass
        if group or self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.pidfd is not None and self.pidfd >= 0:
            # A pidfd turns readable when its process has exited; an init exits after all of its namespace.
            with selectors.DefaultSelector() as sel:
                sel.register(self.pidfd, selectors.EVENT_READ)
                sel.select(timeout=10)
            close_fd(self.pidfd)
        self.pidfd = None


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])  # the field after the state, past the command name
    except (OSError, ValueError, IndexError):
        return None


def collect(proc: subprocess.Popen, token: bytes, limits: Limits, info_fd: int | None) -> RunResult:
    """Read the child's output within the limits, stop it as a whole, and decide the verdict.

    In the sandbox the pipes reach end of file only when every process of the namespace is gone, so
    reading until then waits for nothing else; without it (``info_fd`` None) a descendant may hold them
    open, so the main process' end ends the reading.
    """
    deadline = time.monotonic() + limits.wall_s
    by_budget = limits.stop_at is not None and limits.stop_at < deadline
    if by_budget:
        deadline = limits.stop_at
    cap = limits.output_mb << 20
    out, err = bytearray(), bytearray()
    bufs = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    stopper = _Stopper(proc)
    info = bytearray()
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    if info_fd is not None:
        sel.register(info_fd, selectors.EVENT_READ)
    stopped_by = None
    try:
        while sel.get_map() and stopped_by is None:
            left = deadline - time.monotonic()
            if left <= 0:
                stopped_by = "wall"
                break
            if info_fd is None and proc.poll() is not None:
                stopper.kill(group=True)
                stopped_by = _drain(sel, bufs, cap, deadline)
                break
            for key, _ in sel.select(timeout=min(0.1, left)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                elif key.fd == info_fd:
                    info += chunk
                    stopper.adopt(bytes(info))
                else:
                    bufs[key.fd] += chunk
                    if len(out) + len(err) > cap:
                        stopped_by = "output"
                        break
        if stopped_by is None:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stopped_by = "wall"
    finally:
        sel.close()
        stopper.kill()  # ended or stopped: nothing of the run may outlive it
        proc.stdout.close()
        proc.stderr.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILLed; it dies with lengthlens at the latest
            pass
    if stopped_by == "wall" and by_budget:
        stopped_by = "budget"
    return _verdict(proc.returncode, bytes(out[:cap]), bytes(err[-(1 << 16):]), token, limits, stopped_by)


def _drain(sel: selectors.BaseSelector, bufs: dict[int, bytearray], cap: int, deadline: float) -> str | None:
    """Read what the pipes still hold once the program has ended (its group killed); the limit that stopped it."""
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            return "wall"
        ready = sel.select(timeout=min(0.05, left))
        if not ready:
            return None  # a surviving descendant holds a pipe but writes nothing
        for key, _ in ready:
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fd)
                continue
            bufs[key.fd] += chunk
            if sum(map(len, bufs.values())) > cap:
                return "output"
    return None


def _dec(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _verdict(rc: int | None, out: bytes, err: bytes, token: bytes, limits: Limits, stopped_by: str | None) -> RunResult:
    stdout = out
    suffix = b"\n" + token + b"\n"
    finished = out.endswith(suffix)
    if finished:
        stdout = out[:-len(suffix)]
    if stopped_by == "budget":
        return RunResult(False, True, None, _dec(stdout), "stopped: the grading time budget was spent", "budget")
    if stopped_by == "wall":
        return RunResult(False, True, None, _dec(stdout), f"timed out after {limits.wall_s:g}s (wall limit)", "wall")
    if stopped_by == "output":
        return RunResult(False, False, None, _dec(stdout), f"output limit ({limits.output_mb} MiB) exceeded", "output")
    sig = _signal_of(rc)
    if sig == signal.SIGXCPU:
        return RunResult(False, True, rc, _dec(stdout), f"timed out after {math.ceil(limits.cpu_s)}s of CPU time "
                                                        f"(CPU time limit)", "cpu")
    if rc == 0 and finished:
        return RunResult(True, False, 0, _dec(stdout), "")
    lines = [ln for ln in _dec(err).strip().splitlines() if ln.strip()]
    if rc == 0:
        why = "exited before the program and its tests finished (no sentinel)"
    elif sig is not None:
        why = f"killed by signal {signal.Signals(sig).name}"
    else:
        why = lines[-1].strip() if lines else f"exit status {rc}"
    if why.startswith("MemoryError"):
        why += f" (memory limit {limits.memory_mb} MiB)"
    return RunResult(False, False, rc, _dec(stdout), why[:500])


def _signal_of(rc: int | None) -> int | None:
    """The signal that ended the child: negative status from Popen, or bwrap's 128 + signal."""
    if rc is None:
        return None
    if rc < 0:
        return -rc
    if 128 < rc < 128 + 65:
        try:
            return int(signal.Signals(rc - 128))
        except ValueError:
            return None
    return None
