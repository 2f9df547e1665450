"""Progress lines of ``lengthlens report``: one per stage on stderr, on a terminal only, never with --quiet.

The command runs in a fresh process with its stderr on a pseudo-terminal (as a user at a shell
sees it) or on a pipe (as a log or CI sees it).
"""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lengthlens.cli import Progress

REPO = Path(__file__).resolve().parents[1]
FAST = ["--no-pdf", "--n-resamples", "200", "--aft-resamples", "10"]


@pytest.fixture(scope="module")
def flat(tmp_path_factory) -> Path:
    """The example cut to one pair, one small dataset and the two rules that have force-commit arms: every stage
    still runs (Table 4, extra tokens), in a fraction of the example's time."""
    from dataclasses import replace

    from lengthlens import synth

    spec = synth.example()
    rules = {fc.method for fc in spec.force_commit}
    tiny = replace(spec, pairs=spec.pairs[:1], datasets=(replace(spec.datasets[0], n_items=6),),
                   arms=tuple(a for a in spec.arms if a.method in rules))
    return synth.write_flat(tiny, tmp_path_factory.mktemp("progress") / "tiny.parquet", text=True)


def report(flat: Path, out: Path, *extra: str, tty: bool) -> str:
    """Run ``lengthlens report``; return what it wrote to stderr (through a pseudo-terminal when ``tty``)."""
    cmd = [sys.executable, "-m", "lengthlens", "report", str(flat), "--out", str(out), *FAST, *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    if not tty:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=slave, env=env, cwd=REPO)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0
    return b"".join(chunks).decode()


STAGES = ("load", "cells, censoring, attribution, cost per correct answer", "arms and Table 3", "lossless check, method pairs", "Table 4",
          "extra tokens", "figures", "tables (CSV), report.html")


def test_terminal_gets_a_line_per_stage_with_its_time(flat, tmp_path):
    err = report(flat, tmp_path / "o", tty=True)
    for stage in STAGES:
        # shown while it runs, then rewritten in place with its seconds
        assert f"lengthlens: {stage} ..." in err, err
        assert re.search(rf"\r\x1b\[Klengthlens: {re.escape(stage)} \d+\.\d s\r?\n", err), err


def test_quiet_terminal_gets_nothing(flat, tmp_path):
    assert report(flat, tmp_path / "o", "--quiet", tty=True) == ""


def test_pipe_gets_nothing_unless_asked(flat, tmp_path):
    assert "lengthlens:" not in report(flat, tmp_path / "o", tty=False)
    err = report(flat, tmp_path / "o2", "--progress", tty=False)
    lines = [ln for ln in err.splitlines() if ln.startswith("lengthlens: ")]
    assert [ln.rsplit(" ", 2)[0][len("lengthlens: "):] for ln in lines] == list(STAGES), err
    assert "\r" not in err and "\x1b" not in err  # a log gets plain finished lines


class _FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_rewrites_the_running_line_and_keeps_times():
    s = _FakeTerminal()
    p = Progress(enabled=True, stream=s)
    p("load")
    p("report.pdf")
    p.close()
    p.close()  # closing twice writes nothing more
    out = s.getvalue()
    assert out.startswith("lengthlens: load ...\r\x1b[Klengthlens: load ")
    assert out.count("\n") == 2 and "lengthlens: report.pdf ...\r\x1b[Klengthlens: report.pdf " in out
    assert set(p.times) == {"load", "report.pdf"} and all(t >= 0 for t in p.times.values())
    off = io.StringIO()
    q = Progress(enabled=False, stream=off)
    q("load")
    q.close()
    assert off.getvalue() == "" and "load" in q.times
