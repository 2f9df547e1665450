"""reports/example holds the example report; a fresh run of the example gives the numbers committed there.

Regenerate with ``lengthlens report --example --out reports/example --latex`` (see reports/README.md).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import lengthlens as ll

REPORT = Path(__file__).resolve().parents[2] / "reports" / "example"
KEY = ["target", "draft", "dataset", "method", "params"]


def _compare(fresh: pd.DataFrame, committed: pd.DataFrame, key: list[str]) -> None:
    # The fresh frame goes through the same CSV round trip as the committed file, so both have the same types
    # (an all-empty text column is read back as NaN on both sides, booleans as booleans).
    fresh = pd.read_csv(io.StringIO(fresh.to_csv(index=False)))
    assert sorted(map(tuple, fresh[key].astype(str).values)) == sorted(map(tuple, committed[key].astype(str).values))
    fresh = fresh.astype({k: str for k in key}).set_index(key).sort_index()
    committed = committed.astype({k: str for k in key}).set_index(key).sort_index()
    missing = [c for c in committed.columns if c not in fresh.columns]
    assert not missing, f"columns in the committed report that a fresh run lacks: {missing}"
    for col in committed.columns:
        a, b = fresh[col], committed[col]
        if pd.api.types.is_numeric_dtype(b) and not pd.api.types.is_bool_dtype(b):
            # CSVs hold 10 significant digits
            np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=col)
        else:  # text and booleans: equal, value by value, an empty field only where the other is empty
            assert a.isna().tolist() == b.isna().tolist(), col
            assert (a[a.notna()].astype(str) == b[b.notna()].astype(str)).all(), col


@pytest.fixture(scope="module")
def fresh_cell_table(example_runs):
    """The cells with the CLI's default bootstrap settings (what the committed report used)."""
    return ll.cells(example_runs)


@pytest.fixture(scope="module")
def fresh_cells(fresh_cell_table):
    return fresh_cell_table.to_frame()


def test_committed_cells_match_a_fresh_run(fresh_cells):
    committed = pd.read_csv(REPORT / "cells.csv")
    _compare(fresh_cells, committed, KEY)


def test_committed_table3_matches_a_fresh_run(fresh_cell_table):
    committed = pd.read_csv(REPORT / "table3.csv")
    _compare(ll.table3(fresh_cell_table), committed, ["method"])


def test_committed_report_files():
    for name in ("report.html", "report.pdf", "table3.tex", "table4.tex", "attribution.tex", "cells.csv", "table3.csv"):
        assert (REPORT / name).is_file(), name
    html = (REPORT / "report.html").read_text()
    t3 = pd.read_csv(REPORT / "table3.csv")
    a = t3[t3["method"] == "all"].iloc[0]
    assert f"Across {int(a['n_cells'])} cells (each rule at its most aggressive alpha per dataset" in html
    assert f"the mean per-round gain was {a['gain_mean']:.2f}" in html
