"""Helpers for the report tests: system binaries that CI installs and local machines may lack."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def need(binary: str) -> str:
    """Path of a system binary, or skip the test with the reason (CI installs them: see .ci/run)."""
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} not installed (apt-get install chromium poppler-utils)")
    return path


def _chromium(html_path: Path, width: int, height: int, *mode: str, check: bool) -> subprocess.CompletedProcess:
    """Headless Chromium on a page at ``width`` × ``height`` with a fresh profile, in ``mode`` (screenshot or DOM dump)."""
    exe = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if exe is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             f"--user-data-dir={profile}", *mode, f"--window-size={width},{height}", "--virtual-time-budget=3000",
             html_path.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, check=check)


def chromium_screenshot(html_path: Path, shot: Path, width: int = 1400, height: int = 1000) -> list[str]:
    """Load a page in headless Chromium, save a screenshot; return the browser console lines (errors, logs)."""
    proc = _chromium(html_path, width, height, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", check=False)
    return [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


def chromium_dom(html_path: Path, width: int = 1400, height: int = 1000) -> str:
    """Load a page in headless Chromium at ``width`` × ``height`` and return its DOM once its scripts have run."""
    return _chromium(html_path, width, height, "--dump-dom", check=True).stdout


def keep_artifact(path: Path) -> None:
    """Copy a screenshot or page image to $LENGTHLENS_TEST_ARTIFACTS (when set) so that a person can look at it."""
    dest = os.environ.get("LENGTHLENS_TEST_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, Path(dest) / path.name)
