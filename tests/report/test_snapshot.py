"""Regression snapshots: save, check, name what moved; tolerances; the CLI subcommands and the pytest helper."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest

from lengthlens.data.loading import load
from lengthlens.report.snapshot import (
    check,
    load_snapshot,
    resample_tolerance,
    save_snapshot,
    snapshot,
)
from lengthlens.report.snapshot_cli import add_parsers
from lengthlens.analyses.cells import cells as compute_cells
from lengthlens.testing import UPDATE_ENV, assert_matches_snapshot

FIXTURES = Path(__file__).parent / "fixtures"


def _records(seed: int = 0, n_items: int = 24) -> list[dict]:
    """One target-draft-dataset group: strict and two relaxed arms, lengths scaled by 1.3 and 1.6, some censored."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(6.0, 0.5, size=n_items)
    recs = []
    for method, lam, params in (("strict", 1.0, "strict"), ("cactus", 1.3, "alpha0.2"), ("r_fuzzy", 1.6, "alpha0.1")):
        for i in range(n_items):
            L = int(min(1500, max(2, round(lam * rng.lognormal(mu[i], 0.4)))))
            lb = rng.uniform(1.5, 3.0) if method == "strict" else rng.uniform(2.0, 4.0)
            R = max(1, round(L / (lb + 1)))
            recs.append({"target": "T", "draft": "D", "dataset": "ds", "method": method, "params": params,
                         "alpha": None if method == "strict" else float(params[5:]), "item_id": f"case_{i:03d}",
                         "seed": 0, "status": "ok", "output_tokens": L,
                         "finish_reason": "length" if L >= 1500 else "stop", "max_new_tokens": 1500,
                         "draft_rounds": R, "accepted_tokens": L - R, "draft_tokens": 4 * R,
                         "wall_time_s": round(R * 0.025, 6), "correct": bool(rng.random() < 0.75)})
    return recs


def _write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.fixture()
def mini(tmp_path) -> Path:
    return _write(tmp_path / "runs.jsonl", _records())


def test_tolerance_is_monte_carlo_error_of_a_percentile():
    # 6 SE of the 2.5% percentile: width 1 -> spread 1/(2*1.95996); SE = spread*sqrt(.025*.975/B)/phi(1.95996)
    assert resample_tolerance(1.0, 10_000, 0.95) == pytest.approx(6 * 0.2551067 * 0.0015612495 / 0.05844507, rel=1e-5)
    assert resample_tolerance(2.0, 10_000) == pytest.approx(2 * resample_tolerance(1.0, 10_000))
    assert resample_tolerance(1.0, 2_500) == pytest.approx(2 * resample_tolerance(1.0, 10_000))


def test_roundtrip_matches(mini, tmp_path):
    runs = load(mini, cache=False)
    path = save_snapshot(runs, tmp_path / "expected.json", settings={"n_resamples": 500, "seed": 7})
    snap = load_snapshot(path)
    assert snap["settings"] == {"n_resamples": 500, "seed": 7, "ci": "studentized", "confidence_level": 0.95}
    assert [c["key"]["method"] for c in snap["cells"]] == ["cactus", "r_fuzzy"]
    ct = compute_cells(runs, n_resamples=500, seed=7)
    assert snap["cells"][0]["values"]["lambda"] == ct.get(method="cactus")["lambda"].point
    result = check(runs, path)
    assert result.ok and result.n_cells == 2 and result.n_numbers > 60
    assert "match the snapshot" in str(result)


def test_other_seed_stays_within_resample_tolerance(mini, tmp_path):
    """A different bootstrap seed moves interval limits, within the Monte-Carlo tolerance; point estimates not at all."""
    runs = load(mini, cache=False)
    path = save_snapshot(runs, tmp_path / "expected.json", settings={"n_resamples": 2000, "seed": 1})
    moved = 0
    for seed in (2, 3, 4):
        other = compute_cells(runs, n_resamples=2000, seed=seed)
        res = check(other, path)
        assert res.ok, res.report()
        a = other.to_frame().set_index("method")
        b = compute_cells(runs, n_resamples=2000, seed=1).to_frame().set_index("method")
        moved += int((a["lambda_lo"] != b["lambda_lo"]).sum())
        assert (a["lambda"] == b["lambda"]).all()
    assert moved > 0  # the limits did move: the tolerance was exercised, not bypassed by equality


def test_a_changed_run_is_named(mini, tmp_path):
    runs = load(mini, cache=False)
    path = save_snapshot(runs, tmp_path / "expected.json", settings={"n_resamples": 500, "seed": 7})
    recs = _records()
    for r in recs:  # one cactus run gets longer
        if r["method"] == "cactus" and r["item_id"] == "case_003":
            r["output_tokens"] += 200
            r["draft_rounds"] += 40
            r["accepted_tokens"] += 160
            r["draft_tokens"] += 160  # 4 drafted per round: accepted stays within drafted (else the run is skipped)
    changed = load(_write(tmp_path / "changed.jsonl", recs), cache=False)
    res = check(changed, path)
    assert not res.ok
    cells = {d.cell for d in res.differences}
    assert cells == {"T / D / ds / cactus / alpha0.2"}
    cols = {d.column for d in res.differences}
    assert {"lambda", "rounds_ratio", "l_bar", "gain"} <= cols
    assert "time_ratio" not in cols and "accuracy_delta_pp" not in cols  # unchanged quantities are not flagged
    lam = next(d for d in res.differences if d.column == "lambda")
    assert lam.actual > lam.expected
    assert "lambda = " in res.report() and "exact" in res.report()


def test_missing_and_new_cells(mini, tmp_path):
    runs = load(mini, cache=False)
    path = save_snapshot(runs, tmp_path / "expected.json", settings={"n_resamples": 200})
    recs = [r for r in _records() if r["method"] != "r_fuzzy"]
    recs += [{**r, "method": "mentored_dec", "params": "alpha0.5", "alpha": 0.5} for r in _records() if r["method"] == "cactus"]
    res = check(load(_write(tmp_path / "other.jsonl", recs), cache=False), path)
    kinds = {(d.cell.split(" / ")[3], d.kind) for d in res.differences}
    assert kinds == {("r_fuzzy", "missing cell"), ("mentored_dec", "new cell")}


def test_nan_and_inf_roundtrip(tmp_path):
    import pandas as pd

    df = pd.DataFrame([{"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p", "a": float("nan"),
                        "b": math.inf, "a_lo": 0.5, "a_hi": 1.5, "n": 3, "flag": None}])
    snap = snapshot(df, settings={"n_resamples": 1000, "confidence_level": 0.95})
    json.dumps(snap, allow_nan=False)  # strict JSON
    assert check(df, snap).ok
    df2 = df.assign(a=1.0)
    assert [d.column for d in check(df2, snap).differences] == ["a"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lengthlens")
    add_parsers(p.add_subparsers(dest="command", required=True))
    return p


def test_cli_snapshot_and_check(mini, tmp_path, capsys):
    p = _parser()
    out = tmp_path / "expected.json"
    args = p.parse_args(["snapshot", str(mini), "-o", str(out), "--n-resamples", "300", "--no-cache"])
    assert args.func(args) == 0
    assert load_snapshot(out)["settings"]["n_resamples"] == 300
    args = p.parse_args(["check", str(mini), "--against", str(out), "--no-cache"])
    assert args.func(args) == 0
    assert "match the snapshot" in capsys.readouterr().out
    recs = _records()
    recs[30]["wall_time_s"] *= 3  # a cactus run (items 24..47) got slower
    changed = _write(tmp_path / "changed.jsonl", recs)
    args = p.parse_args(["check", str(changed), "--against", str(out), "--no-cache"])
    assert args.func(args) == 1
    text = capsys.readouterr().out
    assert "T / D / ds / cactus / alpha0.2: time_ratio = " in text and "r_fuzzy" not in text


def test_subcommands_join_the_main_parser():
    from lengthlens.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if "check" not in sub.choices:  # until the CLI wires them, the test adds them as the CLI will
        add_parsers(sub)
    args = parser.parse_args(["check", "runs", "--against", "x.json"])
    assert args.command == "check" and args.against == "x.json" and callable(args.func)


def test_pytest_helper(mini, tmp_path, monkeypatch):
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    runs = load(mini, cache=False)
    path = tmp_path / "snap.json"
    with pytest.raises(AssertionError, match="wrote it now"):
        assert_matches_snapshot(runs, path)
    assert assert_matches_snapshot(runs, path).ok
    recs = _records()
    recs[50]["output_tokens"] += 100  # an r_fuzzy run
    changed = load(_write(tmp_path / "c.jsonl", recs), cache=False)
    with pytest.raises(AssertionError, match=r"r_fuzzy / alpha0.1: lambda = "):
        assert_matches_snapshot(changed, path)
    monkeypatch.setenv(UPDATE_ENV, "1")
    assert assert_matches_snapshot(changed, path).ok
    monkeypatch.delenv(UPDATE_ENV)
    assert assert_matches_snapshot(changed, path).ok


def test_committed_fixture_numbers(tmp_path):
    """The project's own regression fixture: a committed run file and its committed snapshot."""
    assert_matches_snapshot(load(FIXTURES / "mini_runs.jsonl", cache=False), FIXTURES / "mini.snapshot.json")


def test_skewed_interval_gets_the_long_side_spread():
    import pandas as pd

    row = {"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p",
           "lambda": 1.1, "lambda_lo": 1.0, "lambda_hi": 1.9}  # long upper side
    snap = snapshot(pd.DataFrame([row]), settings={"n_resamples": 10_000, "confidence_level": 0.95})
    tol = snap["cells"][0]["tolerance"]
    assert tol["lambda_lo"] == pytest.approx(resample_tolerance(0.9, 10_000))  # half-width side: the width
    assert tol["lambda_hi"] == pytest.approx(resample_tolerance(1.6, 10_000))  # 2 x (1.9 - 1.1)


def test_undefined_resamples_is_checked_with_a_monte_carlo_tolerance():
    import pandas as pd

    from lengthlens.report.snapshot import RESAMPLE_Z, snapshot

    df = pd.DataFrame([{"target": "T", "draft": "D", "dataset": "ds", "method": "m", "params": "p", "lambda": 1.2,
                        "undefined_resamples": 100}])
    snap = snapshot(df, settings={"n_resamples": 1000, "seed": 1, "ci": "studentized", "confidence_level": 0.95})
    tol = snap["cells"][0]["tolerance"]["undefined_resamples"]
    assert tol == pytest.approx(RESAMPLE_Z * (100 * 0.9) ** 0.5 + 1)
