"""Starting one program: in bubblewrap (namespaces, read-only binds, a tmpfs, the seccomp filter) or, unsafe,
as a plain child with resource limits; both with the same runner, token and output collection."""

from __future__ import annotations

import math
import os
import secrets
import subprocess
import sys
import tempfile

from lengthlens.data.grading.collect import close_fd, collect
from lengthlens.data.grading.limits import Limits, RunResult, SandboxInfo
from lengthlens.data.grading.seccomp import seccomp_filter

__all__ = ["base_interpreter", "run_bwrap", "run_unsafe"]

NOBODY = 65534  # the overflow uid/gid: the conventional unprivileged identity

# --------------------------------------------------------------------------------------------
# The runner: the first code inside the child. Reads the token, caps itself, runs the program.
# --------------------------------------------------------------------------------------------

_RUNNER = r"""
import atexit, os, resource, sys
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
    finished = []

    def sentinel():
        # Registered before the program's own exit handlers, so it runs after them and after the interpreter
        # joined the program's non-daemon threads: the program is over.
        if not finished:
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        data = b"\n" + token + b"\n"
        while data:
            data = data[os.write(1, data):]
        os._exit(0)  # nothing may print after the token (finalizers would)

    atexit.register(sentinel)
    sys.argv = [prog]
    sys.setrecursionlimit(10000)
    import runpy
    try:
        runpy.run_path(prog, run_name=run_name)
    except SystemExit as exc:
        # A script's own exit status 0 ends a stdin test normally; anywhere else it came before the tests.
        if not (script and exc.code in (None, 0)):
            raise
    finished.append(True)
_ll_run()
"""


def base_interpreter() -> str:
    """The base interpreter of the running Python (a virtual environment's packages stay outside the sandbox)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _interpreter_roots(python: str) -> list[str]:
    """Folders the interpreter needs beyond the system's: its prefix (``<prefix>/bin/python``) and, for the
    running interpreter, ``sys.base_prefix`` and ``sys.base_exec_prefix``."""
    roots = [os.path.dirname(os.path.dirname(python))]
    if python == base_interpreter():
        roots += [os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)]
    out: list[str] = []
    for r in roots:
        if r in ("/", "") or r == "/usr" or r.startswith("/usr/") or r in out:
            continue
        out.append(r)
    return out


def _system_binds() -> list[str]:
    """Read-only binds of the system's libraries and programs, with /bin, /lib* as links where the host has links."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    if os.path.isfile("/etc/ld.so.cache"):
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


def _runner_args(python: str, tok_fd: int, limits: Limits, prog: str, run_name: str, script: bool,
                 nproc: int) -> list[str]:
    """The runner's command line: the interpreter, the runner, and its arguments (no secret: the token is in a pipe)."""
    return [python, "-I", "-c", _RUNNER, str(tok_fd), str(limits.memory_mb << 20), str(math.ceil(limits.cpu_s)),
            str(limits.disk_mb << 20), str(nproc), str(limits.open_files), prog, run_name, "1" if script else "0"]


def _token_pipe() -> tuple[int, bytes]:
    """The read end of a pipe holding a fresh random token, and the token (the runner reads it before the program)."""
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


def run_bwrap(info: SandboxInfo, source: str, stdin: str, limits: Limits, run_name: str, script: bool) -> RunResult:
    """One program in a bubblewrap sandbox set up as :class:`SandboxInfo` says (see :mod:`.sandbox` for the design)."""
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
                "--new-session", "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "sandbox",
                "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
                "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONHASHSEED", "0", "--setenv", "PYTHONIOENCODING", "utf-8",
                *_system_binds()]
        for root in _interpreter_roots(info.python):
            args += ["--ro-bind", root, root]
        args += ["--ro-bind-data", str(src_fd), prog, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
                 "--size", str(limits.disk_mb << 20), "--tmpfs", "/tmp", "--remount-ro", "/", "--chdir", "/tmp",
                 "--seccomp", str(sec_r), "--info-fd", str(info_w),
                 *_runner_args(info.python, tok_fd, limits, prog, run_name, script, nproc)]
        drop = dict(user=NOBODY, group=NOBODY, extra_groups=[]) if info.dropped else {}
        proc = subprocess.Popen(args, stdin=in_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                pass_fds=(tok_fd, src_fd, sec_r, info_w), env={"PATH": "/usr/bin:/bin"},
                                start_new_session=True, **drop)
    except BaseException:
        close_fd(info_r)
        raise
    finally:
        for fd in fds:
            close_fd(fd)
    try:
        return collect(proc, token, limits, info_fd=info_r)
    finally:
        close_fd(info_r)


def run_unsafe(python: str, source: str, stdin: str, limits: Limits, run_name: str, script: bool) -> RunResult:
    """One program as a plain child in a temporary folder: resource limits and a process-group kill, no isolation."""
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
            close_fd(in_fd)
            close_fd(tok_fd)
        return collect(proc, token, limits, info_fd=None)
