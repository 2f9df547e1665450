"""Read input files defensively: regular files only, each under a size cap, JSON checked for duplicate keys and depth.

Every reader of the data stage opens files through :func:`read_file`, :func:`read_input` or
:func:`iter_lines`, so that a FIFO (which would block forever), a device such as ``/dev/zero`` (read
until memory runs out), a folder, a symlink loop or a path past PATH_MAX each becomes a one-line
reason instead of a hang or a traceback. A gzip file (told by its first bytes, whatever its name) is
read decompressed, its output under the same cap, and a UTF-8 byte-order mark at the start of a file
is dropped. :func:`decode_json` parses JSON the way every read path must agree on: a key given twice
in one object is an error (Python's ``json`` keeps the last value, other readers the first), and
nesting too deep for the parser is a reason, not a crash.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from typing import Any

#: Largest file of one run (run.json, config.json, output.txt), grade file or problems file read, in bytes.
DEFAULT_MAX_FILE_BYTES = 256 * 2**20
#: Environment variable that sets the cap when ``max_file_bytes`` is not passed.
MAX_FILE_BYTES_ENV = "LENGTHLENS_MAX_FILE_BYTES"

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class UnreadableFile(ValueError):
    """A file that exists but cannot be read as input; the message is the reason, without the path."""


def max_file_bytes(value: int | None = None) -> int:
    """The size cap in bytes: ``value`` when given, else ``$LENGTHLENS_MAX_FILE_BYTES``, else 256 MiB.

    Raises ValueError for a cap that is not a positive whole number of bytes.
    """
    if value is None:
        raw = os.environ.get(MAX_FILE_BYTES_ENV, "").strip()
        if not raw:
            return DEFAULT_MAX_FILE_BYTES
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{MAX_FILE_BYTES_ENV}={raw!r}: give the largest file size in bytes, e.g. 268435456") from None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"max_file_bytes must be a positive number of bytes, not {value!r}")
    return value


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as valid UTF-8 text: bytes that are not UTF-8 (kept by the OS as surrogates) shown as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def os_reason(exc: OSError) -> str:
    """A short reason for an OS error on a path (symlink loop, path too long, permission, ...)."""
    named = {errno.ELOOP: "symlink loop (too many levels of symbolic links)",
             errno.ENAMETOOLONG: "path too long for the operating system (past PATH_MAX or NAME_MAX)",
             errno.EACCES: "permission denied", errno.EISDIR: "is a folder, not a file",
             errno.ENOTDIR: "a part of the path is not a folder"}
    return named.get(exc.errno, exc.strerror or type(exc).__name__)


def _kind(mode: int) -> str | None:
    return next((name for test, name in _KINDS if test(mode)), None) if not stat.S_ISREG(mode) else None


def read_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    Raises FileNotFoundError when nothing is there, and :class:`UnreadableFile` (with the reason)
    for anything else that is not a readable regular file under the cap. The file is checked
    before it is opened (a FIFO is never opened) and again through the open descriptor.
    """
    return read_file_stamped(path, limit)[0]


def file_stamp(st: os.stat_result) -> str:
    """What identifies a file's content without reading it: type, inode, size, mtime and ctime."""
    return f"{st.st_mode >> 12}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def read_file_stamped(path: str | os.PathLike[str], limit: int) -> tuple[bytes, str]:
    """:func:`read_file` and the :func:`file_stamp` of the descriptor it read (to check later that nothing changed)."""
    try:
        kind = _kind(os.stat(path).st_mode)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(os_reason(exc)) from None
    if kind is not None:
        raise UnreadableFile(f"not a regular file: it is {kind}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(os_reason(exc)) from None
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None:
            raise UnreadableFile(f"not a regular file: it is {kind}")
        if st.st_size > limit:
            raise UnreadableFile(too_large(st.st_size, limit))
        # Ask for the size fstat gave (a read of n bytes allocates n up front), then for what a growing file added.
        parts = []
        want, got = min(st.st_size, limit) + 1, 0
        while got <= limit:
            chunk = os.read(fd, want)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
            if len(chunk) < want and got >= st.st_size:
                break  # a short read of a regular file is its end
            want = min(limit + 1 - got, 2**20) if got > st.st_size else st.st_size + 1 - got
        data = parts[0] if len(parts) == 1 else b"".join(parts)
    except OSError as exc:
        raise UnreadableFile(os_reason(exc)) from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise UnreadableFile(too_large(len(data), limit))
    return data, file_stamp(st)


#: The first bytes of a gzip file, and the UTF-8 byte-order mark some editors put at the start of a text file.
GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"


def gunzip(data: bytes, limit: int) -> bytes:
    """``data`` (one or more gzip members) decompressed; :class:`UnreadableFile` past ``limit`` bytes or when damaged."""
    out: list[bytes] = []
    size = 0
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            chunk = d.decompress(data, limit + 1 - size)
        except zlib.error as exc:
            raise UnreadableFile(f"not a valid gzip file ({exc})") from None
        size += len(chunk)
        out.append(chunk)
        if size > limit or d.unconsumed_tail:
            raise UnreadableFile(f"decompresses to more than {limit:,} bytes, the limit per file "
                                 f"(raise it with max_file_bytes= or ${MAX_FILE_BYTES_ENV})")
        if not d.eof:
            raise UnreadableFile("gzip data ends early (a truncated file)")
        data = d.unused_data
    return b"".join(out)


def read_input(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of an input file as :func:`read_file` reads them, decompressed when gzip, without a leading BOM.

    ``limit`` (default :func:`max_file_bytes`) caps the file and its decompressed content alike.
    """
    limit = max_file_bytes() if limit is None else limit
    data = read_file(path, limit)
    if data[:2] == GZIP_MAGIC:
        data = gunzip(data, limit)
    return data[3:] if data[:3] == BOM else data


def _open_regular(path: str | os.PathLike[str]) -> int:
    """A descriptor of a regular file (checked before and after opening; a FIFO is never opened)."""
    check_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(os_reason(exc)) from None
    kind = _kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise UnreadableFile(f"not a regular file: it is {kind}")
    os.set_blocking(fd, True)
    return fd


def iter_lines(path: str | os.PathLike[str], max_line: int | None = None) -> Iterator[tuple[int, bytes | None, str | None]]:
    """``(line number, line without its newline, None)`` for each line of a regular file read as a stream, or
    ``(line number, None, reason)`` for a line past ``max_line`` bytes (default :func:`max_file_bytes`).

    A gzip file is decompressed as it is read, all of it under the same limit (a last ``(n, None,
    reason)`` says where it stopped, and so does a damaged or truncated stream); a leading UTF-8 BOM is
    dropped. Raises FileNotFoundError, or :class:`UnreadableFile` for a path that is not a readable
    regular file.
    """
    import gzip

    limit = max_file_bytes() if max_line is None else max_line
    with os.fdopen(_open_regular(path), "rb") as fh:
        zipped = fh.peek(2)[:2] == GZIP_MAGIC
        stream = gzip.GzipFile(fileobj=fh, mode="rb") if zipped else fh
        n, total = 0, 0
        try:
            if stream.peek(3)[:3] == BOM:
                stream.read(3)
            while True:
                line = stream.readline(limit + 1)
                if not line:
                    return
                n += 1
                total += len(line)
                if len(line) > limit:
                    yield n, None, f"line longer than {limit:,} bytes, the limit (max_file_bytes= or ${MAX_FILE_BYTES_ENV})"
                    while line and not line.endswith(b"\n") and (not zipped or total <= limit):  # the rest of it
                        line = stream.readline(1 << 20)
                        total += len(line)
                else:
                    yield n, line[:-1].rstrip(b"\r") if line.endswith(b"\n") else line, None
                if zipped and total > limit:
                    yield n + 1, None, (f"decompresses to more than {limit:,} bytes, the limit per file (raise it with "
                                        f"max_file_bytes= or ${MAX_FILE_BYTES_ENV}); lines after {n} not read")
                    return
        except (OSError, EOFError, zlib.error) as exc:
            what = "not a valid gzip file" if n == 0 else f"gzip data ends early or is damaged after line {n}"
            yield n + 1, None, f"{what} ({exc})"


def too_large(size: int, limit: int) -> str:
    """The reason for a file over the cap, saying how to raise it."""
    return (f"{size:,} bytes is over the limit of {limit:,} bytes per file "
            f"(raise it with max_file_bytes= or ${MAX_FILE_BYTES_ENV})")


def check_regular(path: str | os.PathLike[str]) -> None:
    """Raise FileNotFoundError or :class:`UnreadableFile` unless ``path`` is a regular file (symlinks followed)."""
    try:
        kind = _kind(os.stat(path).st_mode)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(os_reason(exc)) from None
    if kind is not None:
        raise UnreadableFile(f"not a regular file: it is {kind}")


class JSONProblem(ValueError):
    """JSON that cannot be taken as input: ``line`` (1-based, when known), ``field`` (a duplicated key) and the reason."""

    def __init__(self, reason: str, line: int | None = None, field: str | None = None):
        super().__init__(reason)
        self.reason, self.line, self.field = reason, line, field


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8; :class:`JSONProblem` naming the line and byte of the first invalid byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise JSONProblem(f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})", line) from None


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _Duplicate(dup)
    return d


class _Duplicate(Exception):
    """Raised from inside the parser; turned into a JSONProblem by :func:`decode_json`."""


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs_hook)


def _second_key_line(text: str, key: str) -> int | None:
    """The line of the second occurrence of ``"key":`` in ``text`` (where the duplicate most likely is)."""
    token = re.compile(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:")
    hits = token.finditer(text)
    next(hits, None)
    second = next(hits, None)
    return None if second is None else text.count("\n", 0, second.start()) + 1


_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}


def kind_of(value: Any) -> str:
    """What a JSON value is, in words (``a list``, ``a string``, ``a number``): for reasons that name a field's type."""
    return _JSON_KINDS.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def decode_json(text: str | bytes) -> Any:
    """Parse one JSON document; :class:`JSONProblem` for invalid JSON, a duplicated key, too deep nesting or a huge number.

    A key given twice in one object names the key as the problem's ``field``: readers disagree on
    which value counts, so the document is not used at all.
    """
    if isinstance(text, bytes):
        text = decode_text(text)
    try:
        return _DECODER.decode(text)
    except _Duplicate as exc:
        key = exc.args[0]
        raise JSONProblem(f"key {key!r} appears twice in one object (JSON readers disagree on which value counts)",
                          _second_key_line(text, key), key) from None
    except json.JSONDecodeError as exc:
        raise JSONProblem(f"invalid JSON ({exc.msg}, column {exc.colno})", exc.lineno) from None
    except RecursionError:
        raise JSONProblem("JSON nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer literal past Python's digit limit
        raise JSONProblem(f"invalid JSON ({exc})") from None
