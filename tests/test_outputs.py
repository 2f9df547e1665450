"""Outputs are written whole or not at all, by one writer; exit codes and terminal text say what happened."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pandas as pd
import pytest

import lengthlens as ll
from lengthlens import cli, report
from lengthlens.report.output import LOCK, MANIFEST, OutputBusy, report_folder

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _runs_file(tmp_path: Path, method: str = "cactus") -> Path:
    rows = []
    for i in range(12):
        for m, scale in (("strict", 1.0), (method, 1.3)):
            L = 200 + 37 * i if m == "strict" else int((200 + 37 * i) * scale)
            rows.append(dict(target="T", draft="D", dataset="d", method=m, params="strict" if m == "strict" else "alpha0.3",
                             item_id=f"q{i}", seed=0, status="ok", output_tokens=L, max_new_tokens=4096,
                             finish_reason="stop", draft_rounds=L // 3, accepted_tokens=L - L // 3, wall_time_s=L / 40))
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    return ll.analyse(ll.load(_runs_file(tmp_path_factory.mktemp("o"))), n_resamples=200)


def test_a_report_replaces_an_earlier_one_whole_and_keeps_the_users_files(analysis, tmp_path):
    out = tmp_path / "out"
    first = report.write_report(analysis, out, pdf=False, figures=False, latex=True)
    assert "table3.tex" in {p.name for p in first}
    (out / "notes.txt").write_text("mine")
    written = report.write_report(analysis, out, pdf=False, figures=False)
    names = {p.name for p in out.iterdir()}
    assert {"cells.csv", "report.html", MANIFEST, "notes.txt"} <= names
    assert not names & {"table3.tex", "table4.tex", "attribution.tex"}
    assert "table3.tex" in written.dropped and not set(written.dropped) & {p.name for p in written}
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert not [p for p in out.iterdir() if p.name.startswith(".lengthlens-") and p.name != MANIFEST]


def test_a_failure_while_writing_leaves_the_earlier_report_as_it_was(analysis, tmp_path, monkeypatch):
    out = tmp_path / "out"
    report.write_report(analysis, out, pdf=False, figures=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "report.html"))

    monkeypatch.setattr(report, "render_html", full_disk)
    with pytest.raises(OSError):
        report.write_report(analysis, out, pdf=False, figures=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_second_writer_is_refused_and_a_stale_lock_is_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK
    lock.write_text(json.dumps({"pid": os.getppid()}))  # a live process that is not this one
    with pytest.raises(OutputBusy, match=f"pid {os.getppid()}"):
        with report_folder(out):
            pass
    lock.write_text(json.dumps({"pid": 999999999}))  # no such process: left by a writer that died
    with report_folder(out) as folder:
        (folder.path / "a.csv").write_text("x\n")
    assert (out / "a.csv").is_file() and not lock.exists()


def test_csv_text_cells_that_a_spreadsheet_would_run_are_neutralised(tmp_path):
    runs = ll.load(_runs_file(tmp_path, method="=HYPERLINK(1)"))
    out = tmp_path / "out"
    report.write_report(ll.analyse(runs, n_resamples=200), out, pdf=False, figures=False)
    df = pd.read_csv(out / "cells.csv")
    assert df["method"].tolist() == ["'=HYPERLINK(1)"] and df["lambda"].iloc[0] > 1  # numbers untouched


def test_printable_strips_terminal_escapes():
    assert cli.printable("rule\x1b[31mred\x07\x9b\ttab\nline") == "rule[31mred\ttab\nline"


def _main(*argv: str) -> int:
    return cli.main(list(argv))


def test_exit_codes(tmp_path, capsys, monkeypatch):
    runs = _runs_file(tmp_path)
    out = tmp_path / "out"
    # usage: a resample count below the stated minimum, refused before anything is read
    with pytest.raises(SystemExit) as e:
        _main("report", str(runs), "--out", str(out), "--n-resamples", "5")
    assert e.value.code == 2 and f"at least {cli.MIN_RESAMPLES}" in capsys.readouterr().err
    # bad input: a missing file
    assert _main("report", str(tmp_path / "missing.jsonl"), "--out", str(out)) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    # success, then a check that finds a moved number
    assert _main("report", str(runs), "--out", str(out), "--no-pdf", "--no-figures", "-q", "--n-resamples", "200") == 0
    snap = tmp_path / "s.json"
    assert _main("snapshot", str(runs), "-o", str(snap), "--n-resamples", "200") == 0
    data = json.loads(snap.read_text())
    data["cells"][0]["values"]["lambda"] *= 1.01
    snap.write_text(json.dumps(data))
    assert _main("check", str(runs), "--against", str(snap)) == 1
    capsys.readouterr()


def test_a_bug_is_said_as_one_and_ctrl_c_leaves_the_report(tmp_path, capsys, monkeypatch):
    runs = _runs_file(tmp_path)
    out = tmp_path / "out"
    assert _main("report", str(runs), "--out", str(out), "--no-pdf", "--no-figures", "-q", "--n-resamples", "200") == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    from lengthlens.analyses import analyse as analyse_module

    def bug(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(analyse_module, "analyse", bug)
    assert _main("report", str(runs), "--out", str(out), "-q") == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" in err and "RuntimeError: boom" in err and "Traceback" not in err
    with pytest.raises(RuntimeError, match="boom"):
        _main("report", str(runs), "--out", str(out), "-q", "--debug")

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(analyse_module, "analyse", interrupted)
    assert _main("report", str(runs), "--out", str(out), "-q") == 130
    assert "interrupted" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
