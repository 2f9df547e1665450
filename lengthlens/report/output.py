"""A report folder written whole or not at all, by one writer at a time.

:func:`report_folder` hands out a fresh temporary folder beside the output folder; when the block
ends without an error, the temporary folder takes the output folder's place (a rename, so a reader
sees the old report or the new one, never a mix), files of an earlier report that this one did not
write are gone with it, and files that were not a report's (the example's runs, the user's own)
are moved into the new folder. When the block fails (an error, Ctrl-C, a full or read-only disk),
the temporary folder is removed and the old report is left as it was. A lock file beside the
folder refuses a second writer while the first one runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lengthlens.data.errors import InputError

__all__ = ["MANIFEST", "OutputBusy", "ReportFolder", "neutralize_csv_text", "report_folder"]

#: The list of the files a report wrote, kept in its folder: what a later report may replace.
MANIFEST = ".lengthlens-report.json"


class OutputBusy(InputError):
    """Another lengthlens process is writing the same output folder."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    lock = out.parent / f".{out.name}.lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and _alive(pid) and pid != os.getpid():
                raise OutputBusy(f"{out}: another lengthlens process (pid {pid}) is writing this folder; "
                                 f"wait for it or remove {lock} if it is gone") from None
            lock.unlink(missing_ok=True)  # left by a process that no longer runs
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        break
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _earlier_report_files(out: Path, known: frozenset[str]) -> set[str]:
    """The files an earlier report in ``out`` wrote: its manifest's, and any of ``known`` (a report's file names,
    for folders written before the manifest existed)."""
    names = {p.name for p in out.iterdir()}
    try:
        listed = set(json.loads((out / MANIFEST).read_text(encoding="utf-8"))["files"]) | {MANIFEST}
    except (OSError, ValueError, KeyError, TypeError):
        listed = set()
    return (listed | known) & names


class ReportFolder:
    """Where a report is being written (``path``); after the block, ``dropped``: the earlier report's files it replaced
    and did not write again."""

    def __init__(self, path: Path):
        self.path = path
        self.dropped: list[str] = []


@contextlib.contextmanager
def report_folder(out: str | Path, known: frozenset[str] = frozenset()) -> Iterator[ReportFolder]:
    """A temporary folder to write a report into; on success it becomes ``out`` (see the module docstring).

    Parameters
    ----------
    out : the output folder.
    known : names of a report's files, recognised as an earlier report's even without its manifest.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "report"
    >>> with report_folder(out) as folder:
    ...     _ = (folder.path / "cells.csv").write_text("a,b\\n")
    >>> sorted(p.name for p in out.iterdir())
    ['.lengthlens-report.json', 'cells.csv']
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder; choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out):
        folder = ReportFolder(Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent)))
        try:
            yield folder
            written = sorted(p.name for p in folder.path.iterdir())
            (folder.path / MANIFEST).write_text(json.dumps({"files": written}, indent=1), encoding="utf-8")
            folder.dropped = _swap(folder.path, out, known)
        except BaseException:
            shutil.rmtree(folder.path, ignore_errors=True)
            raise


def _swap(new: Path, out: Path, known: frozenset[str]) -> list[str]:
    """``new`` takes ``out``'s place; what in ``out`` was not an earlier report's moves over into it. Returns the earlier
    report's files that ``new`` does not have (gone with it)."""
    if not out.exists():
        os.replace(new, out)
        return []
    ours = _earlier_report_files(out, known)
    theirs = [p.name for p in out.iterdir() if p.name not in ours and not (new / p.name).exists()]
    dropped = sorted(n for n in ours if n != MANIFEST and not (new / n).exists())
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(new, out)
    for name in theirs:  # the user's files (the example's runs): moved, never copied or deleted
        os.replace(old / out.name / name, out / name)
    shutil.rmtree(old, ignore_errors=True)
    return dropped


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralize_csv_text(value: object) -> object:
    """A text cell that a spreadsheet would run as a formula (it starts with = + - @) gets a leading apostrophe.

    Numbers are left alone (a negative number is a number, not a formula).
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
