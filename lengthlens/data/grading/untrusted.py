"""Untrusted serialized data decoded without running anything: pickles admitted as plain data only."""

from __future__ import annotations

import base64
import binascii
import io
import pickle
import zlib
from typing import Any

__all__ = ["MAX_TESTS_BYTES", "decode_pickled", "plain_unpickle"]

#: The largest decompressed private-test blob accepted (a zlib bomb is refused, not inflated).
MAX_TESTS_BYTES = 1 << 30

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
    stack = [obj]
    while stack:  # iterative: a deeply nested value must not overflow the check
        v = stack.pop()
        if type(v) not in _PLAIN:
            raise pickle.UnpicklingError(f"it holds a {type(v).__name__}, not plain data")
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return obj


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
