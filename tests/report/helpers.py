"""Helpers for the report tests: system binaries that CI installs and local machines may lack."""

from __future__ import annotations

import shutil

import pytest


def need(binary: str) -> str:
    """Path of a system binary, or skip the test with the reason (CI installs them: see .ci/run)."""
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} not installed (apt-get install chromium poppler-utils)")
    return path
