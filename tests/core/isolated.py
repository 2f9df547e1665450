"""Run test calls in a worker process with a time limit per call, so that a hang fails one test instead of the run.

The worker is spawned once (it imports lengthlens once) and answers calls in turn; a call that
runs past its limit kills the worker (the next call starts a fresh one) and raises
:class:`CallTimedOut`. A call that raises comes back as :class:`CallFailed` with the exception's
type, message and traceback text, so a test can assert that no traceback was produced.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import time
import traceback
from typing import Any


class CallTimedOut(AssertionError):
    """The call did not return within its limit (a hang)."""


class CallFailed(Exception):
    """The call raised: ``kind`` (the exception's class name), ``message`` and ``trace`` (the formatted traceback)."""

    def __init__(self, kind: str, message: str, trace: str):
        super().__init__(f"{kind}: {message}")
        self.kind, self.message, self.trace = kind, message, trace


#: Memory a worker may allocate: a regression that reads a device without end fails instead of exhausting the machine.
MEMORY_LIMIT = 4 * 2**30


def _serve(conn: Any) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):
        pass
    while True:
        try:
            target, args, kwargs = conn.recv()
        except EOFError:
            return
        module, name = target.split(":")
        try:
            result = getattr(importlib.import_module(module), name)(*args, **kwargs)
            conn.send(("ok", result))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the test
            conn.send(("error", (type(exc).__name__, str(exc), traceback.format_exc())))


class Isolated:
    """A worker process answering ``call("module:function", *args, timeout=s, **kwargs)``."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def call(self, target: str, *args: Any, timeout: float = 60.0, **kwargs: Any) -> Any:
        """The function's result (it must be picklable); CallTimedOut after ``timeout`` seconds, CallFailed if it raised."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send((target, args, kwargs))
        t0 = time.monotonic()
        if not self._conn.poll(timeout):
            self.close()
            raise CallTimedOut(f"{target} did not return within {timeout:.0f} s ({time.monotonic() - t0:.1f} s)")
        status, payload = self._conn.recv()
        if status == "error":
            raise CallFailed(*payload)
        return payload

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
            self._proc = None
            self._conn = None


def timed_call(target: str, *args: Any, **kwargs: Any) -> float:
    """CPU seconds one call of ``target`` (``module:function``) takes in the calling process (not wall time: other
    processes on the machine do not count)."""
    module, name = target.split(":")
    fn = getattr(importlib.import_module(module), name)
    t0 = time.process_time()
    fn(*args, **kwargs)
    return time.process_time() - t0
