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
  limit ``wall_factor`` times longer; one process (a seccomp filter refuses ``fork``, ``vfork``,
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

import math
import os
import platform
import re
import secrets
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "ENV_VAR", "PYTHON_ENV_VAR", "Execution", "Limits", "RunResult", "SandboxInfo", "SandboxUnavailable", "execution_mode",
    "mode_from_env", "resolve", "run", "sandbox_info",
]

#: The environment variable the command line reads when neither ``--execute-code`` nor
#: ``--execute-code-unsafe`` is given: ``1``/``true``/``yes``/``sandbox`` (execute, isolated), ``unsafe``
#: (execute, isolated where possible), ``0``/``false``/``no``/``off`` or unset (do not execute).
ENV_VAR = "LENGTHLENS_EXECUTE_CODE"

#: The environment variable naming the interpreter programs run on (default: the running Python's base
#: interpreter; as root, the system's of the same version where only root can reach that one).
PYTHON_ENV_VAR = "LENGTHLENS_SANDBOX_PYTHON"

_NOBODY = 65534  # the overflow uid/gid: the conventional unprivileged identity


class SandboxUnavailable(RuntimeError):
    """Raised when code execution was asked for but the sandbox cannot run here (one line says why)."""


@dataclass(frozen=True)
class Limits:
    """What one program run may use; the defaults suit HumanEval and LiveCodeBench tests."""

    cpu_s: float = 10.0  # CPU seconds of the program (rounded up to whole seconds: RLIMIT_CPU's unit)
    wall_factor: float = 10.0  # the wall limit is cpu_s times this (generous, so load does not decide)
    memory_mb: int = 1024  # address space of the whole program (one process: all its threads together)
    threads: int = 32  # threads besides the main one (enforced where the program's user is not root outside)
    disk_mb: int = 16  # bytes the program may write, all files together (the tmpfs size), and per file
    output_mb: int = 32  # bytes of stdout and stderr together that lengthlens reads; beyond: killed
    open_files: int = 64  # open file descriptors

    @property
    def wall_s(self) -> float:
        """The wall-clock limit: ``cpu_s * wall_factor``, at least one second more than the CPU limit."""
        return max(self.cpu_s * self.wall_factor, math.ceil(self.cpu_s) + 1.0)


@dataclass(frozen=True)
class RunResult:
    """What one program run did."""

    ok: bool  # exited 0 after the program and its tests returned (the sentinel was printed), within the limits
    timed_out: bool  # stopped by the CPU or the wall limit
    returncode: int | None  # exit status (None when lengthlens stopped it)
    stdout: str  # what the program printed (the sentinel removed), at most Limits.output_mb
    error: str  # last line of stderr (the exception), or why it failed or was stopped; "" when ok
    stopped_by: str | None = None  # "cpu", "wall", "output" or None: the limit that ended the run


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


@dataclass(frozen=True)
class Execution:
    """A resolved choice to execute code: isolated (``sandbox``) or, where that was impossible and allowed, ``unsafe``."""

    isolation: str  # "sandbox" or "unsafe"
    warning: str | None = None  # the line the load prints when programs run without isolation


# --------------------------------------------------------------------------------------------
# The choice.
# --------------------------------------------------------------------------------------------

_ON = {"1", "true", "yes", "on", "sandbox"}
_OFF = {"", "0", "false", "no", "off"}


def execution_mode(value: Any) -> str:
    """``off``, ``sandbox`` or ``unsafe`` from an ``execute_code`` argument (False/True/"unsafe" or those names).

    Examples
    --------
    >>> execution_mode(False), execution_mode(True), execution_mode("unsafe")
    ('off', 'sandbox', 'unsafe')
    """
    if value is None or value is False:
        return "off"
    if value is True:
        return "sandbox"
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _OFF:
            return "off"
        if v in _ON:
            return "sandbox"
        if v == "unsafe":
            return "unsafe"
    raise ValueError(f"execute_code must be False, True or 'unsafe', not {value!r}")


def mode_from_env(environ: Any = None) -> str:
    """The execution mode :data:`ENV_VAR` asks for (``off`` when unset); a value it does not know is an error."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "")
    try:
        return execution_mode(raw)
    except ValueError:
        raise ValueError(f"{ENV_VAR}={raw!r} is not understood: use 1 (execute, isolated), unsafe "
                         f"(isolated where possible) or 0") from None


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
# The seccomp filter: one process, threads allowed.
# --------------------------------------------------------------------------------------------

# Classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6];}.
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EAGAIN, _EPERM, _ENOSYS = 11, 1, 38
_CLONE_THREAD = 0x00010000
#: Per architecture: (AUDIT_ARCH, {syscall: errno} refused outright, clone's number, first number of a
#: second ABI on the same architecture (x32) or None).
_ARCHES = {
    "x86_64": (0xC000003E, {435: _ENOSYS, 57: _EAGAIN, 58: _EAGAIN, 319: _EPERM}, 56, 0x40000000),
    "aarch64": (0xC00000B7, {435: _ENOSYS, 279: _EPERM}, 220, None),
}


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_filter(machine: str | None = None) -> bytes:
    """The compiled filter bwrap loads (``--seccomp``): refuses new processes and ``memfd_create``, allows the rest.

    ``clone3`` answers ENOSYS, so the C library falls back to ``clone``, whose flags a classic BPF
    filter can read: with ``CLONE_THREAD`` (a thread) it is allowed, without it (a process) refused
    with EAGAIN, as a process limit would. System calls of another ABI (i386 ``int 0x80``, x32) are
    refused.

    Raises
    ------
    SandboxUnavailable
        On an architecture without a filter here.
    """
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise SandboxUnavailable(f"no process-count filter for the {machine} architecture (only {', '.join(_ARCHES)})")
    arch, refused, clone_nr, second_abi = _ARCHES[machine]
    prog = [_ins(_LD_ABS, 0, 0, 4), _ins(_JEQ, 1, 0, arch), _ins(_RET, 0, 0, _ERRNO | _ENOSYS),
            _ins(_LD_ABS, 0, 0, 0)]
    if second_abi is not None:
        prog += [_ins(_JGE, 0, 1, second_abi), _ins(_RET, 0, 0, _ERRNO | _ENOSYS)]
    for nr, errno in refused.items():
        prog += [_ins(_JEQ, 0, 1, nr), _ins(_RET, 0, 0, _ERRNO | errno)]
    # clone: allowed only with CLONE_THREAD in its flags (args[0]; its low 32 bits at offset 16).
    prog += [_ins(_JEQ, 0, 3, clone_nr), _ins(_LD_ABS, 0, 0, 16), _ins(_JSET, 1, 0, _CLONE_THREAD),
             _ins(_RET, 0, 0, _ERRNO | _EAGAIN), _ins(_RET, 0, 0, _ALLOW)]
    return b"".join(prog)


# --------------------------------------------------------------------------------------------
# The runner: the first code inside the child. Reads the token, caps itself, runs the program.
# --------------------------------------------------------------------------------------------

_RUNNER = r"""
import os, resource, sys
def _ll_run():
    tok_fd, mem, cpu, fsize, nproc, nofile = (int(x) for x in sys.argv[1:7])
    prog, run_name, script = sys.argv[7], sys.argv[8], sys.argv[9] == "1"
    token = b""
    while True:
        chunk = os.read(tok_fd, 256)
        if not chunk:
            break
        token += chunk
    os.close(tok_fd)
    os.closerange(3, 65536)
    limits = [(resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_NOFILE, nofile, nofile),
              (resource.RLIMIT_FSIZE, fsize, fsize), (resource.RLIMIT_CPU, cpu, cpu + 1),
              (resource.RLIMIT_AS, mem, mem)]
    if nproc > 0:
        limits.insert(0, (resource.RLIMIT_NPROC, nproc, nproc))
    for lim, soft, hard in limits:
        try:
            resource.setrlimit(lim, (soft, hard))
        except (ValueError, OSError) as exc:
            os.write(2, f"lengthlens sandbox: cannot set resource limit {lim}: {exc}\n".encode())
            os._exit(125)
    sys.argv = [prog]
    sys.setrecursionlimit(10000)
    import runpy
    try:
        runpy.run_path(prog, run_name=run_name)
    except SystemExit as exc:
        # A script's own exit status 0 ends a stdin test normally; anywhere else it came before the tests.
        if not (script and exc.code in (None, 0)):
            raise
    threading = sys.modules.get("threading")
    if threading is not None:
        while True:
            alive = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
            if not alive:
                break
            for t in alive:
                t.join()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    data = b"\n" + token + b"\n"
    while data:
        data = data[os.write(1, data):]
    os._exit(0)
_ll_run()
"""


# --------------------------------------------------------------------------------------------
# Finding out what works here.
# --------------------------------------------------------------------------------------------

def _interpreter() -> str:
    """The base interpreter of the running Python (a virtual environment's packages stay outside the sandbox)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _interpreter_roots(python: str) -> list[str]:
    """Folders the interpreter needs beyond the system's: its prefix (``<prefix>/bin/python``) and, for the
    running interpreter, ``sys.base_prefix`` and ``sys.base_exec_prefix``."""
    roots = [os.path.dirname(os.path.dirname(python))]
    if python == _interpreter():
        roots += [os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)]
    out: list[str] = []
    for r in roots:
        if r in ("/", "") or r == "/usr" or r.startswith("/usr/") or r in out:
            continue
        out.append(r)
    return out


def _system_binds() -> list[str]:
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    if os.path.isfile("/etc/ld.so.cache"):
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


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
        r = _run_bwrap(info, "import sys\nprint(sys.version_info[0])\n", "", Limits(cpu_s=5), "__main__", False)
        if r.ok and r.stdout.strip() == "3":
            return _count_base_tasks(info) if info.threads_capped else info
        last = r.error or f"exit status {r.returncode}"
    raise SandboxUnavailable(f"bubblewrap ({bwrap}) cannot start the sandbox here: {last}")


_COUNT_THREADS = """
import threading, time
n = 0
try:
    for _ in range(64):
        threading.Thread(target=time.sleep, args=(0.2,), daemon=True).start()
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
    r = _run_bwrap(info, _COUNT_THREADS, "", probe, "__main__", False)
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
    return _probe(os.path.realpath(python), False) if python else _probe(_interpreter(), True)


# --------------------------------------------------------------------------------------------
# Running one program.
# --------------------------------------------------------------------------------------------

def run(source: str, *, stdin: str = "", limits: Limits = Limits(), run_name: str = "__main__",
        script: bool = False, isolation: str = "sandbox", python: str | None = None) -> RunResult:
    """Run Python ``source`` isolated and capped; never raises for the program's own failures.

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
    if isolation == "sandbox":
        return _run_bwrap(sandbox_info(python), source, stdin, limits, run_name, script)
    if isolation == "unsafe":
        python = python or os.environ.get(PYTHON_ENV_VAR) or None
        return _run_unsafe(os.path.realpath(python) if python else _interpreter(), source, stdin, limits, run_name,
                           script)
    raise ValueError(f"isolation must be 'sandbox' or 'unsafe', not {isolation!r}")


def _runner_args(python: str, tok_fd: int, limits: Limits, prog: str, run_name: str, script: bool,
                 nproc: int) -> list[str]:
    return [python, "-I", "-c", _RUNNER, str(tok_fd), str(limits.memory_mb << 20), str(math.ceil(limits.cpu_s)),
            str(limits.disk_mb << 20), str(nproc), str(limits.open_files), prog, run_name, "1" if script else "0"]


def _token_pipe() -> tuple[int, bytes]:
    """A pipe holding a fresh random token (the read end, inheritable) and the token."""
    token = secrets.token_hex(16).encode()
    r, w = os.pipe()
    os.write(w, token)
    os.close(w)
    return r, token


def _memfd(data: bytes, name: str) -> int:
    """A read-only descriptor of an anonymous file holding ``data`` (the child cannot grow it)."""
    fd = os.memfd_create(name)
    try:
        view, n = memoryview(data), 0
        while n < len(data):
            n += os.write(fd, view[n:])
        ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    finally:
        os.close(fd)
    return ro


def _run_bwrap(info: SandboxInfo, source: str, stdin: str, limits: Limits, run_name: str, script: bool) -> RunResult:
    prog = "/sandbox/program.py"
    tok_fd, token = _token_pipe()
    src_fd = _memfd(source.encode("utf-8"), "program")
    in_fd = _memfd(stdin.encode("utf-8"), "stdin")
    sec_r, sec_w = os.pipe()
    info_r, info_w = os.pipe()
    fds = [tok_fd, src_fd, in_fd, sec_r, info_w]
    try:
        os.write(sec_w, seccomp_filter())
        os.close(sec_w)
        nproc = limits.threads + info.base_tasks if info.threads_capped else 0
        args = [info.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                "--new-session", "--uid", str(_NOBODY), "--gid", str(_NOBODY), "--hostname", "sandbox",
                "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
                "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0", "--setenv", "PYTHONIOENCODING", "utf-8",
                *_system_binds()]
        for root in _interpreter_roots(info.python):
            args += ["--ro-bind", root, root]
        args += ["--ro-bind-data", str(src_fd), prog, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
                 "--size", str(limits.disk_mb << 20), "--tmpfs", "/tmp", "--remount-ro", "/", "--chdir", "/tmp",
                 "--seccomp", str(sec_r), "--info-fd", str(info_w),
                 *_runner_args(info.python, tok_fd, limits, prog, run_name, script, nproc)]
        drop = dict(user=_NOBODY, group=_NOBODY, extra_groups=[]) if info.dropped else {}
        proc = subprocess.Popen(args, stdin=in_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                pass_fds=(tok_fd, src_fd, sec_r, info_w), env={"PATH": "/usr/bin:/bin"},
                                start_new_session=True, **drop)
    except BaseException:
        _close(info_r)
        raise
    finally:
        for fd in fds:
            _close(fd)
    try:
        return _collect(proc, token, limits, info_fd=info_r)
    finally:
        _close(info_r)


def _run_unsafe(python: str, source: str, stdin: str, limits: Limits, run_name: str, script: bool) -> RunResult:
    with tempfile.TemporaryDirectory(prefix="lengthlens-exec-") as tmp:
        prog = os.path.join(tmp, "program.py")
        with open(prog, "w", encoding="utf-8") as f:
            f.write(source)
        stdin_path = os.path.join(tmp, ".stdin")
        with open(stdin_path, "w", encoding="utf-8") as f:
            f.write(stdin)
        in_fd = os.open(stdin_path, os.O_RDONLY)
        os.unlink(stdin_path)
        tok_fd, token = _token_pipe()
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
               "PYTHONIOENCODING": "utf-8"}
        try:
            # RLIMIT_NPROC counts every process of the calling user: 1 refuses new processes in practice.
            proc = subprocess.Popen(_runner_args(python, tok_fd, limits, prog, run_name, script, 1), cwd=tmp, env=env,
                                    stdin=in_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(tok_fd,),
                                    start_new_session=True)
        finally:
            _close(in_fd)
            _close(tok_fd)
        return _collect(proc, token, limits, info_fd=None)


def _close(fd: int) -> None:
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
        try:
            self.pidfd = os.pidfd_open(int(m.group(1)))
        except OSError:  # already gone, and its namespace with it
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
            _close(self.pidfd)
        self.pidfd = None


def _collect(proc: subprocess.Popen, token: bytes, limits: Limits, info_fd: int | None) -> RunResult:
    """Read the child's output within the limits, stop it as a whole, and decide the verdict.

    In the sandbox the pipes reach end of file only when every process of the namespace is gone, so
    reading until then waits for nothing else; without it (``info_fd`` None) a descendant may hold them
    open, so the main process' end ends the reading.
    """
    deadline = time.monotonic() + limits.wall_s
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
