"""Shared test fixtures: where the study's real logs are, and skipping when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]
#: The study's real logs live beside the checkout (CI has them); override with LENGTHLENS_SHARED_DATA.
SHARED_DATA = Path(os.environ.get("LENGTHLENS_SHARED_DATA", _REPO.parent / "shared" / "data" / "lossy-token-eff"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data/lossy-token-eff; the test is skipped (with the reason) when it is absent."""
    if not (SHARED_DATA / "runs").is_dir():
        pytest.skip(f"real study logs not found at {SHARED_DATA} (CI has them; set LENGTHLENS_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def example_flat(tmp_path_factory) -> Path:
    """The embedded example as one flat Parquet file with texts, written once per session (read-only for tests)."""
    from lengthlens import synth

    return synth.write_flat(synth.example(), tmp_path_factory.mktemp("example-flat") / "ex.parquet", text=True)
