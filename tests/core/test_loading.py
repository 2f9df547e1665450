"""Loading: every run accounted for, clear errors naming file, line and field, and the cross-record rules."""

from __future__ import annotations

import json

import polars as pl
import pytest

import lengthlens as ll
from lengthlens.cli import main
from lengthlens.data.schema import parse_alpha

from .minitree import write_run


def _tree(root, n=4, methods=(("strict", "strict", None), ("cactus", "alpha0.3", 0.3))):
    for m, p, a in methods:
        for i in range(n):
            write_run(root, "ds", m, p, f"case_{i:03d}", 0, output_tokens=100 + 10 * i + (20 if m != "strict" else 0),
                      rounds=40, accepted=60 + 10 * i + (20 if m != "strict" else 0), alpha=a)


@pytest.mark.parametrize("params,alpha", [("strict", None), ("alpha0.35", 0.35), ("alphaneg0.3", -0.3),
                                          ("alpha0.3_k8", 0.3), ("alpha0.3_t28000", 0.3), ("alpha1e-3", 0.001)])
def test_parse_alpha(params, alpha):
    assert parse_alpha(params) == alpha


def test_parse_alpha_rejects_garbage():
    with pytest.raises(ValueError, match="alpha<number>"):
        parse_alpha("beta0.3")


def test_raw_tree_loads_and_pairs(tmp_path):
    _tree(tmp_path / "runs")
    runs = ll.load(tmp_path / "runs", cache=False)
    assert runs.n_found == 8 and runs.table.height == 8 and runs.skipped.height == 0
    assert runs.table["target"].unique().to_list() == ["tgt"]
    cell = ll.cells(runs, n_resamples=50).get(method="cactus")
    assert cell["lambda"].point == pytest.approx((4 * 100 + 60 + 80) / (4 * 100 + 60))


def test_every_run_is_loaded_or_skipped(tmp_path):
    root = tmp_path / "runs"
    _tree(root)
    bad = write_run(root, "ds", "cactus", "alpha0.3", "case_010", 0)
    (bad / "run.json").write_text('{"status": "ok",\n "output_tokens": }')
    gone = write_run(root, "ds", "cactus", "alpha0.3", "case_011", 0)
    (gone / "run.json").unlink()
    write_run(root, "ds", "cactus", "alpha0.3", "case_012", 0, status="error")
    write_run(root, "ds", "cactus", "alpha0.3", "case_013", 0)  # not in the baseline
    write_run(root, "ds", "cactus", "alpha0.3", "case_014", 0, output_tokens=-5)
    write_run(root, "other", "cactus", "alpha0.3", "case_000", 0)  # no baseline at all
    write_run(root, "ds", "mentored_dec", "alpha0.5", "case_000", 0, budget=2000)  # budget differs from baseline
    runs = ll.load(root, cache=False)
    assert runs.n_found == 8 + 7
    accounted = set(runs.table.filter(pl.col("paired"))["source"].to_list()) | set(runs.skipped["path"].to_list())
    assert len(accounted) == runs.n_found
    reasons = dict(zip([p.split("/")[-2] + "/" + p.split("/")[-3] + "/" + p.split("/")[-5] for p in runs.skipped["path"]],
                       runs.skipped["reason"]))
    assert "invalid JSON" in reasons["case_010/alpha0.3/ds"] and "run.json:2" in reasons["case_010/alpha0.3/ds"]
    assert reasons["case_011/alpha0.3/ds"] == "missing run.json"
    assert reasons["case_012/alpha0.3/ds"] == "status is 'error', not 'ok'"
    assert reasons["case_013/alpha0.3/ds"] == "item/seed missing (or not ok) in the baseline"
    assert "field 'output_tokens'" in reasons["case_014/alpha0.3/ds"]
    assert reasons["case_000/alpha0.3/other"] == "no ok strict baseline for this target, draft and dataset"
    assert reasons["case_000/alpha0.5/ds"] == "setting differs from the baseline: max_new_tokens 2000 != baseline 1000"
    assert any("mentored_dec" in w and "max_new_tokens 2000" in w for w in runs.warnings)


def test_duplicates_across_roots_are_skipped_naming_the_kept_run(tmp_path):
    _tree(tmp_path / "a" / "runs")
    _tree(tmp_path / "b" / "runs")
    runs = ll.load(tmp_path / "a" / "runs", tmp_path / "b" / "runs", cache=False)
    assert runs.table.height == 8 and runs.skipped.height == 8
    assert runs.skipped["reason"].str.starts_with("duplicate of " + str((tmp_path / "a").resolve())).all()


def test_flat_errors_name_file_line_and_field(tmp_path):
    good = dict(target="t", draft="d", dataset="x", method="strict", params="strict", item_id="1", seed=0, status="ok",
                output_tokens=5, finish_reason="stop", max_new_tokens=10, draft_rounds=2, accepted_tokens=3,
                draft_tokens=8, wall_time_s=0.1)
    lines = [json.dumps(good), json.dumps({**good, "item_id": "2", "output_tokens": "many"}), "{not json",
             json.dumps({**good, "item_id": "3", "draft_rounds": 2.5, "extra_col": 1})]
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(lines) + "\n")
    runs = ll.load(f)
    sk = {r["path"]: r["reason"] for r in runs.skipped.iter_rows(named=True)}
    assert "field 'output_tokens'" in sk[f"{f}:2"]
    assert "invalid JSON" in sk[f"{f}:3"]
    assert "field 'draft_rounds'" in sk[f"{f}:4"] and "whole number" in sk[f"{f}:4"]
    assert any("extra_col" in w for w in runs.warnings)
    with pytest.raises(ll.LoadError, match=r"r.jsonl:2: field 'output_tokens'"):
        ll.load(f, strict=True)


def test_csv_and_parquet_equal_jsonl(tmp_path):
    _tree(tmp_path / "runs")
    runs = ll.load(tmp_path / "runs", cache=False)
    t = runs.table.drop("paired", "source")
    t.write_csv(tmp_path / "r.csv")
    t.write_parquet(tmp_path / "r.parquet")
    for f in ("r.csv", "r.parquet"):
        other = ll.load(tmp_path / f).table.drop("paired", "source")
        assert other.sort("method", "item_id").equals(t.sort("method", "item_id"))


def test_cache_is_invalidated_when_a_file_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("LENGTHLENS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    _tree(root)
    ll.load(root)
    assert not (tmp_path / "cache").exists()  # the library writes nothing unless asked
    first = ll.load(root, cache=True)
    assert list((tmp_path / "cache").iterdir())
    again = ll.load(root, cache=True)
    assert again.table.equals(first.table)
    d = root / "ds" / "cactus" / "alpha0.3" / "case_000" / "seed_0"
    run = json.loads((d / "run.json").read_text())
    run["output_tokens"] = 999
    (d / "run.json").write_text(json.dumps(run))
    changed = ll.load(root, cache=True)
    assert 999 in changed.table["output_tokens"].to_list()


def test_wrong_root_is_one_line_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no run folders found" in err
    assert main(["report", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_report_cli_writes_tables(tmp_path):
    _tree(tmp_path / "runs")
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--n-resamples", "200", "-q", "--no-cache"]) == 0
    for name in ("cells.csv", "arms.csv", "table3.csv", "skipped.csv", "report.html"):
        assert (tmp_path / "out" / name).is_file()
    cells = pl.read_csv(tmp_path / "out" / "cells.csv")
    required = ("target draft dataset method params alpha n_items l_bar l_bar_star l_bar_pooled l_bar_pooled_star gain gain_lo "
                "gain_hi lambda lambda_lo lambda_hi rounds_ratio rounds_ratio_lo rounds_ratio_hi rounds_ratio_predicted time_ratio "
                "time_ratio_lo time_ratio_hi accuracy accuracy_star accuracy_delta_pp accuracy_delta_lo accuracy_delta_hi drop_2pp "
                "censored_frac censored_frac_star").split()
    assert not [c for c in required if c not in cells.columns]


def test_each_item_keeps_its_own_budget(tmp_path):
    """Budgets that differ from item to item pair when both runs of an item had the same; the skip names the item."""
    root = tmp_path / "runs"
    budgets = [21, 27, 34, 27]
    for m, p, a in (("strict", "strict", None), ("cactus", "alpha0.3", 0.3)):
        for i, b in enumerate(budgets):
            relaxed_budget = 40 if (m == "cactus" and i == 3) else b
            out = b if i in (1, 2) else b - 5  # items 1 and 2 stop at their own budget
            write_run(root, "ds", m, p, f"case_{i:03d}", 0, output_tokens=out, budget=relaxed_budget, alpha=a,
                      rounds=8, accepted=out - 8 - 1)
    runs = ll.load(root, cache=False)
    paired = runs.table.filter(pl.col("paired"))
    assert paired.filter(pl.col("method") == "strict").height == 4
    assert sorted(paired.filter(pl.col("method") == "cactus")["item_id"].to_list()) == ["case_000", "case_001", "case_002"]
    (reason,) = runs.skipped.filter(pl.col("path").str.contains("case_003"))["reason"].to_list()
    assert reason == "setting differs from the baseline: max_new_tokens 40 != baseline 27"
    assert any("1 runs not paired, max_new_tokens 40 != baseline 27 (item case_003)" in w for w in runs.warnings)
    cell = ll.cells(runs, n_resamples=50).get(method="cactus")
    # Censoring reads each run's own budget: items 1 and 2 of each arm reached theirs.
    assert cell["censored_frac"].point == pytest.approx(2 / 3)
