"""Damaged raw files: a run's bad output.txt or params folder is reported naming the run, never aborts the load."""

from __future__ import annotations

import polars as pl
import lengthlens as ll

from .minitree import write_run


def _tree(root, n=4):
    for m, p, a in (("strict", "strict", None), ("cactus", "alpha0.3", 0.3)):
        for i in range(n):
            write_run(root, "ds", m, p, f"case_{i:03d}", 0, output_tokens=100 + 10 * i, alpha=a,
                      text="<think>a</think>answer #### 4")


def test_invalid_utf8_output_is_kept_with_a_warning_naming_the_run(tmp_path):
    root = tmp_path / "runs"
    _tree(root)
    bad = root / "ds" / "cactus" / "alpha0.3" / "case_002" / "seed_0"
    (bad / "output.txt").write_bytes(b"<think>ok</think>caf\xe9 \xff\xfe #### 4")
    runs = ll.load(root, cache=False)
    # Before: "'utf-8' codec can't encode characters ... surrogates not allowed", naming no file, nothing loaded.
    assert runs.table.height == 8 and runs.skipped.height == 0
    text = runs.table.filter(pl.col("source") == str(bad))["text"][0]
    assert text == "<think>ok</think>caf\ufffd \ufffd\ufffd #### 4"
    warn = [w for w in runs.warnings if "not valid UTF-8" in w]
    assert len(warn) == 1 and str(bad) in warn[0] and warn[0].startswith("1 run(s)")
    # The other runs and the cell are all there.
    assert ll.cells(runs, n_resamples=20).get(method="cactus").n_items == 4


def test_missing_output_is_kept_and_listed_as_without_text(tmp_path):
    root = tmp_path / "runs"
    _tree(root)
    gone = root / "ds" / "cactus" / "alpha0.3" / "case_001" / "seed_0"
    (gone / "output.txt").unlink()
    runs = ll.load(root, cache=False)
    row = runs.table.filter(pl.col("source") == str(gone))
    assert row.height == 1 and row["text"][0] is None and row["output_tokens"][0] == 110
    warn = [w for w in runs.warnings if "no output.txt" in w]
    assert len(warn) == 1 and str(gone) in warn[0] and "no thinking attribution" in warn[0]
    # Without texts asked for, a missing output.txt is nothing to report.
    assert not [w for w in ll.load(root, cache=False, with_text=False).warnings if "output.txt" in w]


def test_unparseable_params_folder_is_skipped_even_with_an_alpha_in_config(tmp_path):
    root = tmp_path / "runs"
    _tree(root)
    for i in range(4):
        write_run(root, "ds", "cactus", "alphaXYZ", f"case_{i:03d}", 0, alpha=0.5)
    runs = ll.load(root, cache=False)
    assert runs.table.filter(pl.col("params") == "alphaXYZ").height == 0
    skipped = runs.skipped.filter(pl.col("path").str.contains("alphaXYZ"))
    assert skipped.height == 4
    assert all(r.startswith("folder name: params 'alphaXYZ'") for r in skipped["reason"])
    assert set(runs.table["params"].unique()) == {"strict", "alpha0.3"}
