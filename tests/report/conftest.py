"""Fixtures for the report tests: the embedded example analysed once per session and rendered once (HTML, PDF, LaTeX)."""

from __future__ import annotations

from pathlib import Path

import pytest

#: Resamples for the session's example analysis: enough for stable intervals, few enough to stay fast.
N_RESAMPLES = 2000


@pytest.fixture(scope="session")
def example_root(tmp_path_factory) -> Path:
    """The runs ``lengthlens report --example`` analyses, written exactly as the CLI writes them."""
    from lengthlens.cli import _example_runs

    (root,) = _example_runs(tmp_path_factory.mktemp("example"))
    return root


@pytest.fixture(scope="session")
def example_runs(example_root):
    from lengthlens.data.loading import load

    return load(example_root, cache=False)


@pytest.fixture(scope="session")
def example_analysis(example_runs):
    from lengthlens.analyses.analyse import analyse

    return analyse(example_runs, n_resamples=N_RESAMPLES)


@pytest.fixture(scope="session")
def example_report(example_analysis, tmp_path_factory) -> Path:
    """OUT of write_report(example, pdf=True, latex=True)."""
    from lengthlens.report import write_report

    out = tmp_path_factory.mktemp("example-report")
    write_report(example_analysis, out, pdf=True, latex=True)
    return out
