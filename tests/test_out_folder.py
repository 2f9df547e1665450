"""The report folder corpus: a report only ever replaces what a report wrote, and says so in one line before any work.

Each case builds its own folder, runs the report (in-process through ``cli.main``, or the writer
itself where the command line adds nothing) under a time limit, and asserts that every file the
user had is byte-identical afterwards, that the inputs survive, and that nothing of lengthlens' own
(temporary folders, locks) is left behind.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lengthlens import cli, report
from lengthlens.report import REPORT_FILES
from lengthlens.report.output import LOCK, MANIFEST, SUBFOLDER, ForeignFiles, OutputBusy, check_out, report_folder

from test_outputs import _runs_file  # tests/ is on sys.path (pytest prepends it)

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

FAST = ("--no-pdf", "--no-figures", "-q", "--n-resamples", "200", "--no-cache")
NAMES = frozenset({"cells.csv", "report.pdf", "table4.csv", "skipped.csv"})


def tree(folder: Path) -> dict[str, object]:
    """Every entry under ``folder`` (links not followed): file bytes, link targets, kinds."""
    out: dict[str, object] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root, name)
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "special"
    return out


def user_files(folder: Path) -> dict[str, object]:
    return {k: v for k, v in tree(folder).items() if not k.startswith(".lengthlens")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return _runs_file(tmp_path_factory.mktemp("in"))


@pytest.fixture(scope="module")
def analysis(runs):
    import lengthlens as ll

    return ll.analyse(ll.load(runs), n_resamples=200)


@pytest.fixture
def no_load(monkeypatch):
    """Fail the test if the command gets as far as loading: refusals must come before any work."""
    from lengthlens.data import loading

    def load(*a, **k):
        raise AssertionError("the input was loaded before --out was refused")

    monkeypatch.setattr(loading, "load", load)


def main(*argv: str) -> int:
    return cli.main(list(argv))


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------------------------------
# Files that are not a report's.
# ------------------------------------------------------------------------------------------------

def test_a_users_files_with_report_names_stop_the_run_before_any_work(runs, tmp_path, capsys, no_load):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("report.pdf", "table3.tex", "table4.csv", "attribution.tex", "skipped.csv"):
        (out / name).write_bytes(f"the user's {name}".encode())
    before = tree(out)
    assert main("report", str(runs), "--out", str(out), *FAST) == 2
    err = one_line_error(capsys)
    assert "report.pdf" in err and "skipped.csv" in err and "--into-subfolder" in err
    assert tree(out) == before


def test_into_subfolder_writes_beside_the_users_files(runs, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "cells.csv").write_text("the user's table")
    before = tree(out)
    assert main("report", str(runs), "--out", str(out), "--into-subfolder", *FAST) == 0
    assert {k: v for k, v in tree(out).items() if not k.startswith(SUBFOLDER)} == before
    assert (out / SUBFOLDER / "cells.csv").read_text().startswith("target")
    capsys.readouterr()


@pytest.mark.parametrize("kind", ["folder", "fifo", "symlink", "changed"])
def test_any_entry_with_a_report_name_that_no_report_wrote_is_refused(analysis, tmp_path, kind):
    out = tmp_path / "out"
    report.write_report(analysis, out, pdf=False, figures=False)
    victim = out / "cells.csv"
    if kind == "changed":
        victim.write_text(victim.read_text() + "an edit\n")
    else:
        victim.unlink()
        {"folder": lambda: victim.mkdir(), "fifo": lambda: os.mkfifo(victim),
         "symlink": lambda: victim.symlink_to(tmp_path / "elsewhere")}[kind]()
    before = tree(out)
    with pytest.raises(ForeignFiles, match="cells.csv"):
        report.write_report(analysis, out, pdf=False, figures=False)
    assert tree(out) == before


def test_an_older_manifest_without_digests_protects_its_files(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"files": ["cells.csv"]}))
    (out / "cells.csv").write_text("maybe edited since")
    with pytest.raises(ForeignFiles, match="without content digests"):
        check_out(out, names=NAMES)


def test_a_forged_manifest_never_removes_a_file_that_is_not_a_reports(tmp_path):
    import hashlib

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (tmp_path / "outside.txt").write_text("mine too")
    digest = hashlib.sha256(b"mine").hexdigest()
    (out / MANIFEST).write_text(json.dumps({"format": 2, "files": {"notes.txt": [digest]}}))
    with report_folder(out, NAMES) as f:
        (f.path / "cells.csv").write_text("new")
    assert (out / "notes.txt").read_text() == "mine"
    (out / MANIFEST).write_text(json.dumps({"format": 2, "files": {"../outside.txt": [digest]}}))
    with pytest.raises(ForeignFiles, match="not a lengthlens report manifest"):
        check_out(out, names=NAMES)
    assert (tmp_path / "outside.txt").read_text() == "mine too"


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge", "folder"])
def test_a_manifest_that_is_not_a_small_regular_file_is_refused_before_any_work(runs, tmp_path, capsys, no_load, kind):
    out = tmp_path / "out"
    out.mkdir()
    m = out / MANIFEST
    if kind == "fifo":
        os.mkfifo(m)
    elif kind == "dev_zero":
        m.symlink_to("/dev/zero")
    elif kind == "folder":
        m.mkdir()
    else:
        m.write_bytes(b"{" + b" " * (2 << 20) + b"}")
    before = tree(out)
    assert main("report", str(runs), "--out", str(out), *FAST) == 2
    assert MANIFEST in one_line_error(capsys)
    assert tree(out) == before


# ------------------------------------------------------------------------------------------------
# Inputs.
# ------------------------------------------------------------------------------------------------

def test_an_out_holding_the_input_is_refused_before_loading(tmp_path, capsys, no_load):
    folder = tmp_path / "data"
    folder.mkdir()
    flat = _runs_file(folder)
    cells = folder / "cells.csv"
    cells.write_bytes(flat.read_bytes().replace(b"\n", b"\n"))  # any file named like a report's
    before = tree(folder)
    for out in (folder, tmp_path):  # the input's own folder, and a folder above it
        assert main("report", str(flat), "--out", str(out), *FAST) == 2
        assert "input" in one_line_error(capsys)
    assert main("report", str(folder), "--out", str(folder), *FAST) == 2  # --out equal to the input folder
    assert "input" in one_line_error(capsys)
    assert tree(folder) == before


def test_the_writer_refuses_to_replace_its_own_input(analysis, tmp_path):
    import dataclasses

    out = tmp_path / "out"
    report.write_report(analysis, out, pdf=False, figures=False)
    # An analysis of the earlier report's cells.csv (its source), written back over it.
    again = dataclasses.replace(analysis, runs=dataclasses.replace(analysis.runs, sources=(str(out / "cells.csv"),)))
    before = tree(out)
    with pytest.raises(Exception, match="is an input of this report"):
        report.write_report(again, out, pdf=False, figures=False)
    assert tree(out) == before


# ------------------------------------------------------------------------------------------------
# The folder itself.
# ------------------------------------------------------------------------------------------------

def test_a_symlinked_out_is_followed_and_stays_a_link(runs, tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    (real / "mine.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(real)
    assert main("report", str(runs), "--out", str(link), *FAST) == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert (real / "cells.csv").is_file() and (real / "mine.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    capsys.readouterr()


def test_mode_inode_and_the_users_files_are_kept(analysis, tmp_path):
    out = tmp_path / "out"
    report.write_report(analysis, out, pdf=False, figures=False, latex=True)
    os.chmod(out, 0o751)
    (out / "mine.txt").write_text("mine")
    (out / "sub").mkdir()
    (out / "sub" / "cells.csv").write_text("a report name, one level down")
    mine = user_files(out)
    st = os.stat(out)
    report.write_report(analysis, out, pdf=False, figures=False)
    st2 = os.stat(out)
    assert (st2.st_mode, st2.st_ino, st2.st_uid) == (st.st_mode, st.st_ino, st.st_uid)
    after = user_files(out)
    assert {k: after[k] for k in ("mine.txt", "sub", "sub/cells.csv")} == {k: mine[k] for k in ("mine.txt", "sub", "sub/cells.csv")}


def test_out_dot_and_dotdot_and_a_255_character_name(runs, tmp_path, capsys, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    (here / "mine.txt").write_text("mine")
    monkeypatch.chdir(here)
    assert main("report", str(runs), "--out", ".", *FAST) == 0
    assert (here / "cells.csv").is_file() and (here / "mine.txt").read_text() == "mine"
    assert Path.cwd() == here and os.path.samefile(".", here)  # the shell's folder is still the folder
    assert main("report", str(runs), "--out", "missing/..", *FAST) == 0  # the same folder again, a report's
    long = tmp_path / ("x" * 255)
    assert main("report", str(runs), "--out", str(long), *FAST) == 0
    assert (long / "cells.csv").is_file()
    capsys.readouterr()


def test_an_out_that_is_a_file_is_one_line(runs, tmp_path, capsys, no_load):
    f = tmp_path / "out"
    f.write_text("a file")
    assert main("report", str(runs), "--out", str(f), *FAST) == 2
    assert "not a folder" in one_line_error(capsys)
    assert f.read_text() == "a file"


_MOUNTED = r"""
import sys
from pathlib import Path
from lengthlens.report.output import report_folder
out = Path(sys.argv[1])
with report_folder(out, frozenset({"cells.csv", "report.pdf"})) as f:
    (f.path / "cells.csv").write_text("new")
print(sorted(p.name for p in (out / "mnt").iterdir()), (out / "mnt" / "inside.txt").read_text().strip())
"""


def test_a_mount_point_inside_out_is_left_in_place(tmp_path):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root to mount a tmpfs in a private mount namespace")
    out = tmp_path / "out"
    (out / "mnt").mkdir(parents=True)
    (out / "mine.txt").write_text("mine")
    script = (f"mount -t tmpfs none {out}/mnt && echo here > {out}/mnt/inside.txt && "
              f"{sys.executable} -c '{_MOUNTED}' {out} && {sys.executable} -c '{_MOUNTED}' {out}")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    if "mount" in r.stderr and r.returncode != 0 and "Traceback" not in r.stderr:
        pytest.skip(f"cannot mount here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["['inside.txt'] here"] * 2
    assert (out / "mine.txt").read_text() == "mine" and (out / "cells.csv").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_pdf_lost_to_a_full_disk_fails_the_report_and_leaves_the_earlier_one(analysis, tmp_path, monkeypatch):
    out = tmp_path / "out"
    report.write_report(analysis, out, pdf=False, figures=False)
    before = tree(out)
    for exc in (OSError(errno.ENOSPC, "No space left on device"),
                RuntimeError("failed to write PDF file (No space left on device (os error 28))")):
        def full(*a, exc=exc, **k):
            raise exc

        monkeypatch.setattr(report, "render_pdf", full)
        with pytest.raises(OSError, match="report.pdf could not be written"):
            report.write_report(analysis, out, pdf=True, figures=False)
        assert tree(out) == before


# ------------------------------------------------------------------------------------------------
# Killed writers and the lock.
# ------------------------------------------------------------------------------------------------

_WRITER = r"""
import sys, time
from pathlib import Path
from lengthlens.report.output import report_folder
with report_folder(Path(sys.argv[1]), frozenset({"cells.csv"})) as f:
    (f.path / "cells.csv").write_text("half")
    print("inside", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_writers_leftovers_go_with_the_next_run(tmp_path, sig):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    p = subprocess.Popen([sys.executable, "-c", _WRITER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "inside"
        assert (out / LOCK).exists() and any(e.name.startswith(".lengthlens-tmp-") for e in out.iterdir())
    finally:
        p.send_signal(sig)
        p.wait(30)
    with report_folder(out, frozenset({"cells.csv"})) as f:  # the dead writer's lock is taken over
        (f.path / "cells.csv").write_text("whole")
    assert sorted(e.name for e in out.iterdir()) == [MANIFEST, "cells.csv", "mine.txt"]
    assert (out / "cells.csv").read_text() == "whole"


def test_an_unowned_lock_is_busy_only_while_it_may_be_being_written(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text("")
    with pytest.raises(OutputBusy):
        with report_folder(out):
            pass
    old = time.time() - 3600
    os.utime(out / LOCK, (old, old))
    with report_folder(out):
        pass
    assert not (out / LOCK).exists()


_RACER = r"""
import os, sys, time
from pathlib import Path
from lengthlens.report.output import OutputBusy, report_folder
out, log, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
held = 0
for _ in range(n):
    try:
        with report_folder(out):
            with open(log, "a") as f:
                f.write(f"in {os.getpid()} {time.monotonic_ns()}\n")
            time.sleep(0.002)
            with open(log, "a") as f:
                f.write(f"out {os.getpid()} {time.monotonic_ns()}\n")
            held += 1
    except OutputBusy:
        pass
print(held)
"""


def test_two_writers_never_hold_the_lock_at_once(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "log"
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(out), str(log), "40"], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    held = sum(int(p.communicate(timeout=100)[0]) for p in procs)
    lines = [ln.split() for ln in log.read_text().splitlines()]
    depth = 0
    for kind, _, _ in sorted(lines, key=lambda x: (int(x[2]), x[0] == "in")):
        depth += 1 if kind == "in" else -1
        assert depth in (0, 1), "two writers held the lock at once"
    assert held == len(lines) // 2 and held > 0
    assert sorted(e.name for e in out.iterdir()) == [MANIFEST]
