"""Untrusted serialized data decoded without running anything: pickles admitted as plain data only, within bounds.

A pickle can describe a value far larger than its bytes: a list that holds itself (8 bytes), or
levels of lists each holding the level below twice (2^40 values from a few hundred bytes). Decoding
is linear in the pickle's length; the value is then walked once, counting a shared value each time
it is reached, and refused past :data:`MAX_DEPTH` levels, :data:`MAX_VALUES` values or
:data:`MAX_TESTS_BYTES` bytes of text, so that nothing that later reads it (the test harness,
``str()``, ``json``) can be made to run without end.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
import zlib
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_TESTS_BYTES", "MAX_VALUES", "decode_pickled", "plain_unpickle"]

#: The largest decompressed private-test blob accepted (a zlib bomb is refused, not inflated), and the most
#: bytes of text and bytes the value may hold, a shared string counted each time it is used.
MAX_TESTS_BYTES = 1 << 30
#: The deepest nesting accepted: test cases are a list of objects of strings (3 levels); a value that holds
#: itself is infinitely deep.
MAX_DEPTH = 64
#: The most values (containers, strings, numbers) accepted, a shared one counted each time it is used.
MAX_VALUES = 5_000_000

_PLAIN = (str, bytes, int, float, bool, type(None), list, tuple, dict)


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain data: any global (class, function) is refused, so nothing runs."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it refers to the global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds a persistent reference")


def plain_unpickle(data: bytes) -> Any:
    """``pickle.loads`` for untrusted bytes: only str, bytes, int, float, bool, None, list, tuple and dict.

    Every way a pickle can call code goes through a global (``GLOBAL``/``STACK_GLOBAL``/``INST``/the
    extension registry, which all ask ``find_class``) or a persistent id; both are refused, and the
    result is checked to hold nothing but plain data.

    Raises
    ------
    pickle.UnpicklingError
        Saying what was refused.

    Examples
    --------
    >>> plain_unpickle(pickle.dumps({"a": [1, 2.5, None]}))
    {'a': [1, 2.5, None]}
    """
    obj = _PlainUnpickler(io.BytesIO(data)).load()
    _check_plain(obj)
    return obj


def _children(v: Any) -> Any:
    return (*v.keys(), *v.values()) if type(v) is dict else v


def _leaf(v: Any) -> int:
    """Bytes of text a plain leaf holds; UnpicklingError for anything that is not plain data or an outsized integer."""
    t = type(v)
    if t not in _PLAIN:
        raise pickle.UnpicklingError(f"it holds a {t.__name__}, not plain data")
    if t is int and v.bit_length() > 4096:
        raise pickle.UnpicklingError(f"it holds an integer of {v.bit_length():,} bits")
    return len(v) if t is str or t is bytes else 0


def _check_plain(obj: Any) -> None:
    """Raise UnpicklingError unless ``obj`` is plain data within :data:`MAX_DEPTH`, :data:`MAX_VALUES` and
    :data:`MAX_TESTS_BYTES`, a shared value counted each time it is used.

    Each distinct container is visited once (depth first, without recursion) and its expanded size,
    depth and text are summed from its children's, so shared structure costs its distinct size, not
    its expanded one; a container met again while it is being walked holds itself.
    """
    if type(obj) not in (list, tuple, dict):
        _leaf(obj)
        return
    done: dict[int, tuple[int, int, int]] = {}  # id -> (values, depth, bytes of text), expanded
    walking: set[int] = set()
    stack: list[tuple[Any, bool]] = [(obj, False)]
    while stack:
        v, finish = stack.pop()
        i = id(v)
        if finish:
            values, depth, text = 1, 1, 0
            for c in _children(v):
                if type(c) in (list, tuple, dict):
                    cv, cd, ct = done[id(c)]
                    values, depth, text = values + cv, max(depth, cd + 1), text + ct
                else:
                    values, text = values + 1, text + _leaf(c)
            walking.discard(i)
            if values > MAX_VALUES:
                raise pickle.UnpicklingError(f"it holds more than {MAX_VALUES:,} values (a shared value counted each "
                                             f"time it is used)")
            if depth > MAX_DEPTH:
                raise pickle.UnpicklingError(f"it is nested more than {MAX_DEPTH} levels deep")
            if text > MAX_TESTS_BYTES:
                raise pickle.UnpicklingError(f"it holds more than {MAX_TESTS_BYTES:,} bytes of text (a shared string "
                                             f"counted each time it is used)")
            done[i] = (values, depth, text)
            continue
        if i in done:
            continue
        if i in walking:
            raise pickle.UnpicklingError("it holds itself (a value that contains itself has no end)")
        walking.add(i)
        stack.append((v, True))
        stack.extend((c, False) for c in _children(v) if type(c) in (list, tuple, dict) and id(c) not in done)


def decode_pickled(text: str) -> Any:
    """base64(zlib(pickle)) text (how LiveCodeBench stores private tests) decoded as plain data only.

    Raises
    ------
    pickle.UnpicklingError
        The pickle refers to a global or holds anything but plain data (:func:`plain_unpickle`).
    ValueError
        Not base64, not zlib, not a pickle, or more than :data:`MAX_TESTS_BYTES` once decompressed.
    """
    try:
        raw = base64.b64decode(text.encode("utf-8"), validate=True)
        d = zlib.decompressobj()
        data = d.decompress(raw, MAX_TESTS_BYTES)
    except (binascii.Error, zlib.error, UnicodeEncodeError) as exc:
        raise ValueError(str(exc)) from None
    if d.unconsumed_tail:
        raise ValueError(f"it decompresses to more than {MAX_TESTS_BYTES} bytes")
    try:
        return plain_unpickle(data)
    except pickle.UnpicklingError:
        raise
    except (EOFError, IndexError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a pickle ({type(exc).__name__}: {exc})") from None
