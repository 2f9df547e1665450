"""A report folder that only ever replaces what a report wrote: written aside, then moved in, by one writer at a time.

:func:`report_folder`, in order:

1. ``out`` is followed to the folder it names (a symlink stays a link; ``.`` and ``x/..`` are folders like
   any other) and made if missing.
2. A lock file inside it is taken atomically: a file already holding the writer's pid is linked to the
   lock's name (O_EXCL semantics), so a lock never exists without its owner. A second writer sees a live
   owner and stops; a lock whose owner is gone is taken over.
3. Temporary folders left by killed writers are removed (only folders of this module's own naming).
4. The earlier report's files are those its manifest (``.lengthlens-report.json``, read only when it is a
   small regular file) lists with the SHA-256 they still have. Any other entry with a name a report
   writes (a user's ``report.pdf``, a table edited since, a FIFO, a folder, a link) stops the run with
   one line naming it, and so does an input of the analysis among the files to be replaced.
5. The report is written into a temporary folder inside ``out``; when anything fails (an error, Ctrl-C,
   a full or read-only disk) that folder is removed and ``out`` is left as it was.
6. Commit: a manifest listing the earlier report's files and the new ones is put in place first (so a
   writer killed during the commit leaves a folder the next run still recognises), each new file is
   renamed into place, the earlier report's files this one did not write again are removed, and the
   final manifest replaces the transitional one.

Nothing else in ``out`` is moved, copied or changed: the user's files and folders, mount points, the
folder's mode, owner and inode (a shell inside it stays where it was).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from lengthlens.data.errors import InputError

__all__ = ["MANIFEST", "SUBFOLDER", "ForeignFiles", "OutputBusy", "ReportFolder", "check_file_out", "check_out",
           "disk_error", "neutralize_csv_text", "report_folder", "write_file", "written_by_report"]

#: The list of the files a report wrote, with their SHA-256, kept in its folder: what a later report may replace.
MANIFEST = ".lengthlens-report.json"
#: The lock a writer holds inside the folder while it writes.
LOCK = ".lengthlens-report.lock"
#: Where ``--into-subfolder`` writes when ``out`` holds files a report did not write.
SUBFOLDER = "lengthlens-report"
MANIFEST_FORMAT = 2
#: A manifest larger than this is not one of lengthlens' (a report lists a few dozen files).
MANIFEST_MAX_BYTES = 1 << 20
#: Files larger than this are not hashed (so never taken for a report's): no report file comes near it.
HASH_MAX_BYTES = 4 << 30
_TMP_PREFIX = ".lengthlens-tmp-"
_LOCK_PREFIX = ".lengthlens-lock-"
_SHOWN = 5
#: How long a lock without an owner counts as being written (only where the file system has no hard links).
_EMPTY_LOCK_GRACE_S = 30.0


class OutputBusy(InputError):
    """Another lengthlens process is writing the same output folder."""


class ForeignFiles(InputError):
    """The output folder holds files with a report's names that no earlier lengthlens report wrote (or that changed since)."""


# ------------------------------------------------------------------------------------------------
# What is in the folder.
# ------------------------------------------------------------------------------------------------

def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a file"


def _lexists(path: Path) -> bool:
    try:
        os.lstat(path)
        return True
    except FileNotFoundError:
        return False


def _file_digest(path: Path) -> str | None:
    """SHA-256 of a regular file (not followed through a link), None for anything else or past :data:`HASH_MAX_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > HASH_MAX_BYTES:
            return None
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def _digest(path: Path) -> str | None:
    """A content digest of a regular file, or of a folder of them (names and digests, recursively); None for anything
    else (a link, a FIFO, a device, a mount point, an unreadable entry)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        return _file_digest(path)
    if not stat.S_ISDIR(st.st_mode):
        return None
    h = hashlib.sha256(b"folder\n")
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    for name in names:
        sub = path / name
        try:
            if os.lstat(sub).st_dev != st.st_dev:
                return None  # a mount point inside: not something a report wrote
        except OSError:
            return None
        d = _digest(sub)
        if d is None:
            return None
        h.update(f"{name}\0{d}\n".encode("utf-8", "surrogateescape"))
    return "folder:" + h.hexdigest()


def _plain_name(name: object) -> bool:
    """A single path component (a manifest cannot point outside its folder)."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name
            and os.sep not in name)


def _read_manifest(out: Path) -> tuple[dict[str, set[str]], bool]:
    """(name -> the digests the earlier report recorded, whether the manifest had no digests (an older lengthlens));
    ``({}, False)`` without a manifest. :class:`ForeignFiles` when the manifest's name holds anything but a small
    regular file of lengthlens' format: it would be replaced."""
    path = out / MANIFEST
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {}, False
    except OSError as exc:
        raise ForeignFiles(f"{path}: cannot be read ({exc.strerror}); move it away or choose another --out") from None
    if not stat.S_ISREG(st.st_mode):
        raise ForeignFiles(f"{path} is {_kind(st.st_mode)}, not a lengthlens report manifest; lengthlens will not "
                           f"replace it: move it away or choose another --out")
    from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, read_file

    try:
        data = decode_json(read_file(path, MANIFEST_MAX_BYTES))
    except (OSError, UnreadableFile, JSONProblem) as exc:
        raise ForeignFiles(f"{path}: not a lengthlens report manifest ({exc}); lengthlens will not replace it: "
                           f"move it away or choose another --out") from None
    files = data.get("files") if isinstance(data, dict) else None
    if isinstance(files, list) and all(_plain_name(n) for n in files):
        return {}, True  # an older lengthlens' manifest: names without digests
    if (not isinstance(files, dict) or data.get("format") != MANIFEST_FORMAT
            or not all(_plain_name(n) and isinstance(v, list) and all(isinstance(h, str) for h in v)
                       for n, v in files.items())):
        raise ForeignFiles(f"{path}: not a lengthlens report manifest; lengthlens will not replace it: move it "
                           f"away or choose another --out")
    return {n: set(v) for n, v in files.items()}, False


def written_by_report(out: str | os.PathLike[str], names: Iterable[str]) -> dict[str, str]:
    """Of ``names``, the entries of ``out`` that an earlier report wrote and that still hold what it wrote: name -> digest.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (out / "cells.csv").write_text("mine")
    >>> written_by_report(out, ["cells.csv"])
    {}
    """
    out = Path(out)
    recorded, _ = _read_manifest(out)
    ours = {}
    for name in names:
        if name in recorded:
            d = _digest(out / name)
            if d is not None and d in recorded[name]:
                ours[name] = d
    return ours


def _foreign(out: Path, names: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """(entries of ``out`` named like a report's file that no earlier report wrote, the ones it did: name -> digest)."""
    names = sorted(set(names) - {MANIFEST})  # the manifest is checked by reading it: a bad one raises
    ours = written_by_report(out, names)
    return [n for n in names if n not in ours and _lexists(out / n)], ours


def _foreign_error(out: Path, foreign: list[str], legacy: bool, subfolder: bool = True) -> ForeignFiles:
    shown = ", ".join(foreign[:_SHOWN]) + (f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else "")
    one = len(foreign) == 1
    why = ("listed by an older lengthlens without content digests, so whether they changed since cannot be told"
           if legacy else "not in the manifest of an earlier lengthlens report, or changed since")
    how = f", or add --into-subfolder to write the report into {out / SUBFOLDER}" if subfolder else ""
    return ForeignFiles(f"{out}: {shown} would be replaced by the report but {'is' if one else 'are'} not an earlier "
                        f"report's ({why}); lengthlens leaves {'it' if one else 'them'} alone: move "
                        f"{'it' if one else 'them'}, choose another --out{how}")


# ------------------------------------------------------------------------------------------------
# Before any work: the command line's check of --out.
# ------------------------------------------------------------------------------------------------

def _out_path(out: str | os.PathLike[str]) -> Path:
    """``out`` followed through symlinks to the folder it names, made absolute (``.``, ``x/..`` included)."""
    path = Path(os.path.realpath(os.fspath(out)))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise InputError(f"{out}: cannot be used as the output folder ({exc.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{out}: exists and is {_kind(st.st_mode)}, not a folder; choose another --out")
    return path


def _expand(sources: Iterable[str | os.PathLike[str]]) -> list[Path]:
    out = []
    for s in sources:
        text = os.fspath(s)
        matches = sorted(glob.glob(text)) if not os.path.lexists(text) and glob.has_magic(text) else [text]
        out += [Path(os.path.realpath(m)) for m in matches]
    return out


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_out(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = (),
              names: Iterable[str] = frozenset(), *, into_subfolder: bool = False) -> Path:
    """The folder a report may be written to, checked before any work; :class:`~lengthlens.data.errors.InputError` in
    one line otherwise.

    Refused: an ``out`` that is not a folder, that equals or contains one of ``inputs`` (its files would
    be replaced, or read as input by the next run), and one holding entries named like the report's
    files (``names``) that no earlier report wrote, unless ``into_subfolder``, which then gives
    ``out/lengthlens-report`` (checked the same way).

    Parameters
    ----------
    out : the output folder (a symlink is followed; it may not exist yet).
    inputs : the report's inputs (files, folders or glob patterns).
    names : every file name a report may write.
    into_subfolder : write into :data:`SUBFOLDER` inside ``out`` where ``out`` holds files that are not a report's.

    Returns
    -------
    Path
        The folder, absolute, symlinks resolved.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "cells.csv").write_text("mine")
    >>> check_out(d, names={"cells.csv"}, into_subfolder=True) == d.resolve() / SUBFOLDER
    True
    """
    given = out
    path = _out_path(out)
    for src in _expand(inputs):
        if _inside(src, path):
            what = "is" if src == path else "contains"
            raise InputError(f"--out {given} {what} the input {src}: the report would replace or be read as the "
                             f"input's files; choose another --out")
    if not path.is_dir():
        return path
    foreign, _ = _foreign(path, names)
    if foreign:
        if into_subfolder and path.name != SUBFOLDER:
            return check_out(path / SUBFOLDER, inputs, names, into_subfolder=True)
        raise _foreign_error(path, foreign, _read_manifest(path)[1], subfolder=not into_subfolder)
    return path


# ------------------------------------------------------------------------------------------------
# The lock.
# ------------------------------------------------------------------------------------------------

def _start_time(pid: int) -> str | None:
    """The process' start time in clock ticks since boot (Linux), to tell a live owner from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, ValueError):
        return None


def _owner() -> str:
    return json.dumps({"pid": os.getpid(), "start": _start_time(os.getpid()), "host": socket.gethostname()})


def _alive(owner: dict) -> bool:
    if "pid" not in owner:
        return owner.get("age_s", 1e9) < _EMPTY_LOCK_GRACE_S  # being written (no hard links here), else not a writer's
    pid = owner.get("pid")
    if owner.get("host") not in (None, socket.gethostname()):
        return True  # another machine's process: it cannot be checked from here
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive
    start = owner.get("start")
    return start is None or _start_time(pid) in (None, start)


def _read_owner(lock: Path) -> tuple[dict, int] | None:
    """The lock's owner and inode, None when the lock is gone. An owner that cannot be read is ``{}``, with the lock's age
    (``age_s``): a lock being written where hard links are not available is empty for a moment."""
    from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, read_file

    try:
        st = os.lstat(lock)
    except FileNotFoundError:
        return None
    except OSError:
        return {}, 0
    try:
        data = decode_json(read_file(lock, 4096))
    except FileNotFoundError:
        return None
    except (OSError, UnreadableFile, JSONProblem):
        data = None
    if not isinstance(data, dict) or "pid" not in data:
        data = {"age_s": time.time() - st.st_mtime}
    return data, st.st_ino


def _take_over(lock: Path, ino: int) -> None:
    """Remove a lock whose owner is gone, unless it was replaced meanwhile (by a writer that took it over first)."""
    aside = lock.with_name(f"{_LOCK_PREFIX}{os.getpid()}-stale-{os.urandom(4).hex()}")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return
    try:
        if os.lstat(aside).st_ino != ino:  # a fresh lock taken since it was read: put it back
            with contextlib.suppress(OSError):
                os.link(aside, lock)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(aside)


def _link_or_create(mine: str, lock: Path) -> None:
    """Make ``lock`` the file ``mine`` (which holds the owner) atomically; FileExistsError when a lock is there.

    Where the file system has no hard links, the lock is created with O_EXCL and the owner written at once.
    """
    try:
        os.link(mine, lock)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
    fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(Path(mine).read_text())


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    lock = out / LOCK
    fd, mine = tempfile.mkstemp(prefix=f"{_LOCK_PREFIX}{os.getpid()}-", dir=out)
    with os.fdopen(fd, "w") as f:  # the owner is in the file before the file is the lock
        f.write(_owner())
        f.flush()
        os.fsync(f.fileno())
    try:
        for _ in range(20):
            try:
                _link_or_create(mine, lock)
                break
            except FileExistsError:
                seen = _read_owner(lock)
                if seen is None:
                    continue
                owner, ino = seen
                if _alive(owner):
                    who = f" (pid {owner['pid']})" if "pid" in owner else ""
                    raise OutputBusy(f"{out}: another lengthlens process{who} is writing this folder; wait for it, "
                                     f"or remove {lock} if it is gone") from None
                _take_over(lock, ino)
        else:
            raise OutputBusy(f"{out}: could not take the lock {lock}; another writer keeps taking it")
        my_ino = os.lstat(lock).st_ino
    finally:
        with contextlib.suppress(OSError):
            os.unlink(mine)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if os.lstat(lock).st_ino == my_ino:  # still this writer's (not taken over as stale meanwhile)
                os.unlink(lock)


def _clean_leftovers(out: Path, known: frozenset[str]) -> None:
    """Remove what killed writers left: temporary folders of this module's naming inside ``out`` (the lock is held, so
    no live writer owns one), files that were to become the lock of a process that is gone, and an earlier lengthlens' temporary report folders beside it
    (``.<out>.new-*``) that hold nothing but a report's files."""
    for e in os.scandir(out):
        if e.name.startswith(_TMP_PREFIX) and e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path, ignore_errors=True)
        elif e.name.startswith(_LOCK_PREFIX) and e.is_file(follow_symlinks=False):
            pid = e.name[len(_LOCK_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not _alive({"pid": int(pid)}):  # a live writer's is about to become the lock
                with contextlib.suppress(OSError):
                    os.unlink(e.path)
    with contextlib.suppress(OSError):
        for e in os.scandir(out.parent):
            if e.name.startswith(f".{out.name}.new-") and e.is_dir(follow_symlinks=False):
                inside = list(os.scandir(e.path))
                if all(x.is_file(follow_symlinks=False) and x.name in known | {MANIFEST} for x in inside):
                    shutil.rmtree(e.path, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# Writing.
# ------------------------------------------------------------------------------------------------

class ReportFolder:
    """Where a report is being written (``path``); after the block, ``out`` (the folder it went to) and ``dropped``:
    the earlier report's files it replaced and did not write again."""

    def __init__(self, path: Path, out: Path):
        self.path = path
        self.out = out
        self.dropped: list[str] = []


def _check_inputs(out: Path, inputs: Iterable[str | os.PathLike[str]], replaced: set[str]) -> None:
    for src in _expand(inputs):
        if src == out or (src.parent == out and src.name in replaced):
            raise InputError(f"{src} is an input of this report and a file the report would replace; choose another --out")


@contextlib.contextmanager
def report_folder(out: str | os.PathLike[str], known: frozenset[str] = frozenset(),
                  inputs: Iterable[str | os.PathLike[str]] = ()) -> Iterator[ReportFolder]:
    """A temporary folder to write a report into; on success its files take their places in ``out`` (module docstring).

    Parameters
    ----------
    out : the output folder (created if missing; a symlink is followed).
    known : the names of every file a report may write: an entry with one of these names that no earlier report
        wrote stops the run (:class:`ForeignFiles`), and only such names are ever removed.
    inputs : the report's inputs: one among the files to be replaced stops the run.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "report"
    >>> with report_folder(out, frozenset({"cells.csv"})) as folder:
    ...     _ = (folder.path / "cells.csv").write_text("a,b\\n")
    >>> sorted(p.name for p in out.iterdir())
    ['.lengthlens-report.json', 'cells.csv']
    """
    out = _out_path(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with _lock(out):
            _clean_leftovers(out, frozenset(known))
            foreign, ours = _foreign(out, known)
            if foreign:
                raise _foreign_error(out, foreign, _read_manifest(out)[1], subfolder=False)
            _check_inputs(out, inputs, set(known) | set(ours))
            folder = ReportFolder(Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=out)), out)
            try:
                yield folder
                folder.dropped = _commit(folder.path, out, frozenset(known), inputs)
            finally:
                shutil.rmtree(folder.path, ignore_errors=True)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(out)  # made for this report and empty: gone with it
        raise


def _write_manifest(tmp: Path, out: Path, files: dict[str, list[str]]) -> None:
    from lengthlens._version import __version__

    staged = tmp / (MANIFEST + ".staged")
    with open(staged, "w", encoding="utf-8") as f:
        json.dump({"format": MANIFEST_FORMAT, "generator": f"lengthlens {__version__}",
                   "files": {n: files[n] for n in sorted(files)}}, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(staged, out / MANIFEST)


def _remove(path: Path) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _commit(tmp: Path, out: Path, known: frozenset[str], inputs: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Move the new report's files from ``tmp`` into ``out``; return the earlier report's files removed."""
    new: dict[str, str] = {}
    for e in sorted(os.scandir(tmp), key=lambda e: e.name):
        d = _digest(Path(e.path))
        if d is None or not _plain_name(e.name) or e.name == MANIFEST:
            raise InputError(f"{e.path}: a report may write only plain files and folders")  # a bug of a writer
        new[e.name] = d
    # Checked again now: the folder may have changed while the report was computed.
    foreign, ours = _foreign(out, set(known) | set(new))
    if foreign:
        raise _foreign_error(out, foreign, _read_manifest(out)[1], subfolder=False)
    _check_inputs(out, inputs, set(new) | set(ours))
    dropped = sorted(n for n in ours if n not in new and n in known and n != MANIFEST)
    transitional = {n: [h] for n, h in new.items()}
    for n, h in ours.items():
        if n != MANIFEST and h not in transitional.setdefault(n, []):
            transitional[n].append(h)
    _write_manifest(tmp, out, transitional)
    aside = tmp / ".replaced"
    for name in new:
        target = out / name
        if os.path.isdir(target) and not os.path.islink(target):  # a folder of the earlier report: os.replace cannot
            aside.mkdir(exist_ok=True)
            os.replace(target, aside / name)
        os.replace(tmp / name, target)
    for name in dropped:
        _remove(out / name)
    _write_manifest(tmp, out, {n: [h] for n, h in new.items()})
    _fsync_dir(out)
    return dropped


# ------------------------------------------------------------------------------------------------
# One file (``lengthlens import``): checked first, written beside the target, renamed into place.
# ------------------------------------------------------------------------------------------------

def check_file_out(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = (),
                   command: str = "lengthlens import") -> Path:
    """The file ``lengthlens import`` (or ``command``) may write, checked before anything is read; InputError in one
    line otherwise.

    Refused: a symbolic link (the write would land wherever it points), a folder, a FIFO or device (a
    write would block or go nowhere), and a path that is one of ``inputs`` or inside an input folder.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> check_file_out(d / "runs.parquet") == d / "runs.parquet"
    True
    """
    path = Path(out)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"--out {out}: cannot be used ({exc.strerror})") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise InputError(f"--out {out} is a symbolic link (to {os.readlink(path)}); {command} does not write "
                         f"through links it did not make: give the file itself")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"--out {out} is {_kind(st.st_mode)}, not a file; choose another --out")
    real = Path(os.path.realpath(path))
    for src in _expand(inputs):
        if _inside(real, src):
            what = "is the input" if real == src else f"is inside the input folder {src}"
            raise InputError(f"--out {out} {what}: writing it would replace what is read; choose another --out")
    return path


def write_file(out: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Write a file whole or not at all: ``write(tmp)`` fills a temporary file beside ``out``, which is then flushed to
    disk and renamed over ``out`` (a link at ``out`` is replaced, never written through); on any failure the
    temporary file is removed and ``out`` is as it was. An existing file's mode is kept.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> write_file(f, lambda tmp: tmp.write_text("x")).read_text()
    'x'
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(out).st_mode) if out.is_file() and not out.is_symlink() else None
    except OSError:
        mode = None
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, name = tempfile.mkstemp(prefix=".lengthlens-write-", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(out.parent)
    return out


def disk_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full, over quota, read-only or failing (then no part of a report may stand)."""
    codes = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}
    if isinstance(exc, OSError) and exc.errno in codes:
        return True
    text = str(exc)
    return any(f"os error {c})" in text for c in codes) or any(
        os.strerror(c) in text for c in (errno.ENOSPC, errno.EDQUOT))


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralize_csv_text(value: object) -> object:
    """A text cell that a spreadsheet would run as a formula (it starts with = + - @) gets a leading apostrophe.

    Numbers are left alone (a negative number is a number, not a formula).
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
