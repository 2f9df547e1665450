"""``lengthlens import`` writes like ``report``: checked before reading, beside the target, renamed into place.

Each case copies a vLLM fixture folder, runs the command in-process under a time limit, and asserts
the one-line answer, that the inputs and any file at ``--out`` are byte-identical where the write was
refused or failed, and that no temporary file is left.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from lengthlens import cli

pytestmark = pytest.mark.timeout(60)

FIXTURE = Path(__file__).parent / "core" / "fixtures" / "engines" / "vllm" / "fly"


@pytest.fixture
def logs(tmp_path) -> Path:
    d = tmp_path / "fly"
    shutil.copytree(FIXTURE, d)
    return d


def files(folder: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else os.readlink(p)
                                         if p.is_symlink() else "special")
            for p in sorted(folder.rglob("*"))}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["import", "vllm", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_good_import_is_written_whole(logs, tmp_path, capsys):
    out = tmp_path / "sub" / "runs.parquet"
    rc, stdout, _ = run(capsys, str(logs), "--out", str(out))
    assert rc == 0 and "written to" in stdout
    assert pl.read_parquet(out).height > 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["runs.parquet"]


def test_an_out_that_is_the_input_is_refused_before_reading(logs, capsys):
    before = files(logs)
    src = logs / "responses.jsonl"
    for target in (src, logs / "converted.jsonl"):  # the input file; a file inside the input folder
        rc, _, err = run(capsys, str(src if target == src else logs), "--out", str(target))
        assert rc == 2 and err.count("\n") == 1 and "input" in err
    assert files(logs) == before


def test_a_symlink_out_is_not_written_through(logs, tmp_path, capsys):
    outside = tmp_path / "precious.jsonl"
    outside.write_text("not a lengthlens file\n")
    link = tmp_path / "runs.jsonl"
    link.symlink_to(outside)
    rc, _, err = run(capsys, str(logs), "--out", str(link))
    assert rc == 2 and "symbolic link" in err and err.count("\n") == 1
    assert outside.read_text() == "not a lengthlens file\n" and link.is_symlink()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_out_is_refused_without_blocking(logs, tmp_path, capsys, kind):
    out = tmp_path / "runs.jsonl"
    os.mkfifo(out) if kind == "fifo" else out.mkdir()
    rc, _, err = run(capsys, str(logs), "--out", str(out))
    assert rc == 2 and err.count("\n") == 1 and ("FIFO" in err or "folder" in err)


def test_a_full_disk_leaves_the_earlier_file_and_no_temporary_one(logs, tmp_path, capsys, monkeypatch):
    out = tmp_path / "runs.jsonl"
    out.write_text("the earlier import\n")
    os.chmod(out, 0o640)

    def full(self, path, *a, **k):
        Path(path).write_bytes(b"x" * 4096)  # what a full disk leaves: the first block
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(pl.DataFrame, "write_ndjson", full)
    rc, _, err = run(capsys, str(logs), "--out", str(out))
    assert rc == 2 and "No space left on device" in err and err.count("\n") == 1
    assert out.read_text() == "the earlier import\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fly", "runs.jsonl"]
    monkeypatch.undo()
    rc, _, _ = run(capsys, str(logs), "--out", str(out))
    assert rc == 0 and oct(os.stat(out).st_mode & 0o777) == oct(0o640)  # replaced, its mode kept


# --- lengthlens grades lm-eval --out writes the same way -------------------------------------------------------

LM_EVAL = Path(__file__).parent / "core" / "fixtures" / "tools" / "lm_eval" / "fly"


@pytest.fixture
def samples(tmp_path) -> Path:
    (src,) = LM_EVAL.glob("samples_*.jsonl")
    return Path(shutil.copy(src, tmp_path / src.name))


def grades(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["grades", "lm-eval", *argv, "--arm", "method=fly"])
    out, err = capsys.readouterr()
    return rc, out, err


def test_grades_writes_whole_and_refuses_its_input_a_link_a_fifo_and_a_folder(samples, tmp_path, capsys):
    before = samples.read_bytes()
    out = tmp_path / "g.csv"
    rc, stdout, _ = grades(capsys, str(samples), "--out", str(out))
    assert rc == 0 and "grades written to" in stdout and pl.read_csv(out).height > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["g.csv", samples.name])
    as_csv = samples.with_suffix(".csv")  # a .csv --out that is the samples file itself (renamed)
    samples.rename(as_csv)
    rc, _, err = grades(capsys, str(as_csv), "--out", str(as_csv))
    assert rc == 2 and err.count("\n") == 1 and "input" in err and as_csv.read_bytes() == before
    outside = tmp_path / "precious.csv"
    outside.write_text("not a lengthlens file\n")
    (tmp_path / "link.csv").symlink_to(outside)
    rc, _, err = grades(capsys, str(as_csv), "--out", str(tmp_path / "link.csv"))
    assert rc == 2 and "symbolic link" in err and "lengthlens grades" in err and err.count("\n") == 1
    assert outside.read_text() == "not a lengthlens file\n"
    os.mkfifo(tmp_path / "fifo.csv")
    (tmp_path / "dir.csv").mkdir()
    for target in ("fifo.csv", "dir.csv"):
        rc, _, err = grades(capsys, str(as_csv), "--out", str(tmp_path / target))
        assert rc == 2 and err.count("\n") == 1 and ("FIFO" in err or "folder" in err)


def test_grades_a_full_disk_leaves_the_earlier_file(samples, tmp_path, capsys, monkeypatch):
    import pandas as pd

    out = tmp_path / "g.csv"
    out.write_text("the earlier grades\n")

    def full(self, path, *a, **k):
        Path(path).write_bytes(b"x" * 4096)
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    rc, _, err = grades(capsys, str(samples), "--out", str(out))
    assert rc == 2 and "No space left on device" in err and err.count("\n") == 1
    assert out.read_text() == "the earlier grades\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["g.csv", samples.name])


@pytest.mark.parametrize("damage,reason", [
    ("fifo", "FIFO"), ("dev_zero", "character device"), ("bad_line", "invalid JSON"), ("list_line", "JSON object"),
])
def test_grades_names_a_samples_file_it_cannot_read_without_blocking(tmp_path, capsys, damage, reason):
    f = tmp_path / "samples_x.jsonl"
    if damage == "fifo":
        os.mkfifo(f)
    elif damage == "dev_zero":
        f.symlink_to("/dev/zero")
    else:
        f.write_text('{"doc_id": 0, "exact_match": 1}\n' + ("{oops\n" if damage == "bad_line" else "[1]\n"))
    rc, _, err = grades(capsys, str(f), "--out", str(tmp_path / "g.csv"))
    assert rc == 2 and reason in err and err.count("\n") == 1, err
    if damage in ("bad_line", "list_line"):
        assert "samples_x.jsonl:2" in err
    assert not (tmp_path / "g.csv").exists()
