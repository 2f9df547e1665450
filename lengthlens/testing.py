"""Pytest helpers: regression-test cell numbers against a committed snapshot (see :mod:`lengthlens.report.snapshot`).

Typical use in a user's test suite::

    from lengthlens.data.loading import load
    from lengthlens.testing import assert_matches_snapshot

    def test_numbers_did_not_move():
        assert_matches_snapshot(load("fixtures/runs"), "fixtures/expected.json")

Set ``LENGTHLENS_UPDATE_SNAPSHOTS=1`` (or pass ``update=True``) to rewrite the snapshot after an
intended change; review the JSON diff like any other code change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lengthlens.report.snapshot import CheckResult, check, save_snapshot

__all__ = ["UPDATE_ENV", "assert_matches_snapshot"]

UPDATE_ENV = "LENGTHLENS_UPDATE_SNAPSHOTS"


def assert_matches_snapshot(obj: Any, path: str | Path, *, update: bool | None = None, limit: int = 50) -> CheckResult:
    """Fail (AssertionError naming every moved number) unless the cells of ``obj`` match the snapshot at ``path``.

    ``obj`` is an Analysis, a CellTable, a cells DataFrame or a RunSet (whose cells are computed with
    the snapshot's bootstrap settings). A missing snapshot is written and the assertion fails once,
    so that a new fixture is always looked at before it guards anything.
    """
    path = Path(path)
    if update is None:
        update = os.environ.get(UPDATE_ENV, "") not in ("", "0", "false", "no")
    if update:
        save_snapshot(obj, path)
        return check(obj, path)
    if not path.exists():
        save_snapshot(obj, path)
        raise AssertionError(f"no snapshot at {path}: wrote it now; review it, commit it and re-run")
    result = check(obj, path)
    if not result.ok:
        raise AssertionError(f"cell numbers differ from {path} (set {UPDATE_ENV}=1 to accept the change):\n"
                             + result.report(limit=limit))
    return result
