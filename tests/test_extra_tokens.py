"""Lossy-only token stats: equal to plain-Python oracles on hand-made traces, and the real trace's facts pinned."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import defaultdict
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

from lengthlens.analyses.extra_tokens import (
    PROPOSAL_SCHEMA,
    STAT_COLUMNS,
    ExtraTokens,
    extra_token_stats,
    extra_tokens,
    proposal_files,
    scan_proposals,
)
from lengthlens.data.schema import ARM_KEY, parse_alpha

#: The arm as this fixture names it (it logs no serving condition).
_ARM = [k for k in ARM_KEY if k != "serving"]

K = 6  # draft length of the study (and of the fake traces)


# --- hand-made traces -------------------------------------------------------------------------

def _fake_trace(rng: random.Random, method: str, n_rounds: int) -> list[dict]:
    """Rows shaped like the study's: accepted drafts, then the first rejection or a bonus, per round."""
    rows, pos = [], 0
    for r in range(n_rounds):
        for j in range(K + 1):
            base = {"round": r, "batch": 0, "pos_in_round": j, "output_position": pos,
                    "draft_token_text": "x", "q": rng.random(), "u": rng.random(), "trace_anomaly": None}
            pos += 1
            if j == K:  # all K accepted: as in the study, the bonus row omits every draft-side field
                rows.append({"round": r, "pos_in_round": j, "output_position": base["output_position"],
                             "emission_source": "bonus"})
                break
            strict = rng.random() < 0.6
            lossy = strict if method == "strict" else (strict or rng.random() < 0.4)
            if method == "casc" and strict and rng.random() < 0.1:
                lossy = False  # a relaxation that rejects some strict-accepted tokens
            # Few distinct p values and small ranks so that medians hit ties and even counts.
            rows.append({**base, "p": rng.choice([0.01, 0.2, 0.5, 0.75, 0.9, rng.random()]),
                         "target_rank": rng.randrange(0, 5), "strict_would_accept": strict,
                         "lossy_would_accept": lossy, "actually_accepted": lossy,
                         "lossy_only_accepted": lossy and not strict,
                         "emission_source": "accepted_draft" if lossy else "recovered"})
            if not lossy:
                break
    return rows


@pytest.fixture()
def fake_study(tmp_path: Path):
    """A raw-layout tree of 2 relaxed arms + strict, 3 items x 2 seeds; one trace missing, one run failed."""
    rng = random.Random(7)
    records, traces = [], {}
    for method, params in [("strict", "strict"), ("loose", "alpha0.3"), ("casc", "alpha0.5")]:
        for item in ("case_001", "case_002", "case_003"):
            for seed in (0, 1):
                folder = tmp_path / "runs" / "toy" / method / params / item / f"seed_{seed}"
                folder.mkdir(parents=True)
                rows = _fake_trace(rng, method, rng.randrange(1, 25))
                out_tokens = len(rows) - rng.randrange(0, 4)  # trace runs a little past the completion
                status = "ok"
                if (method, item, seed) == ("loose", "case_002", 1):
                    status = "error"  # its trace exists but must be ignored
                if (method, item, seed) != ("casc", "case_003", 0):  # this run has no trace at all
                    with open(folder / "proposals.jsonl", "w") as f:
                        f.writelines(json.dumps(row) + "\n" for row in rows)
                    traces[str(folder)] = rows
                records.append({"target": "T", "draft": "D", "dataset": "toy", "method": method, "params": params,
                                    "alpha": parse_alpha(params), "item_id": item, "seed": seed, "status": status,
                                    "output_tokens": out_tokens, "source": str(folder)})
    return pl.DataFrame(records), traces


def _oracle(runs: pl.DataFrame, traces: dict, keep=None, within_output=False) -> dict:
    """Per-arm stats by a plain loop over the rows (statistics.median/mean), independent of polars."""
    acc = defaultdict(lambda: defaultdict(list))
    counts = defaultdict(lambda: defaultdict(int))
    for run in runs.iter_rows(named=True):
        if run["status"] != "ok" or (keep is not None and not keep(run)):
            continue
        arm = tuple(run[k] for k in _ARM)
        counts[arm]["n_runs"] += 1
        rows = traces.get(run["source"])
        if rows is None:
            continue
        counts[arm]["n_runs_with_proposals"] += 1
        for row in rows:
            if within_output and row["output_position"] >= run["output_tokens"]:
                continue
            c = counts[arm]
            c["n_rows"] += 1
            if row.get("actually_accepted") is None:
                continue
            c["n_proposed"] += 1
            c["n_accepted"] += row["actually_accepted"]
            c["n_lossy_only"] += row["lossy_only_accepted"]
            c["n_strict_only_rejected"] += row["strict_would_accept"] and not row["lossy_would_accept"]
            if row["lossy_only_accepted"]:
                acc[arm]["p_lo"].append(row["p"]); acc[arm]["r_lo"].append(row["target_rank"])
            if row["actually_accepted"] and row["strict_would_accept"]:
                c["n_strict_accepted"] += 1
                acc[arm]["p_sa"].append(row["p"]); acc[arm]["r_sa"].append(row["target_rank"])
    out = {}
    for arm, c in counts.items():
        v = acc[arm]
        med = lambda xs: statistics.median(xs) if xs else None
        mean = lambda xs: statistics.fmean(xs) if xs else None
        out[arm] = {
            **{k: c[k] for k in ("n_runs", "n_runs_with_proposals", "n_rows", "n_proposed", "n_accepted",
                                 "n_strict_accepted", "n_lossy_only", "n_strict_only_rejected")},
            "lossy_only_per_proposed": c["n_lossy_only"] / c["n_proposed"] if c["n_proposed"] else None,
            "lossy_only_per_accepted": c["n_lossy_only"] / c["n_accepted"] if c["n_accepted"] else None,
            "p_lossy_only_median": med(v["p_lo"]), "p_lossy_only_mean": mean(v["p_lo"]),
            "rank_lossy_only_median": med(v["r_lo"]), "rank_lossy_only_mean": mean(v["r_lo"]),
            "p_strict_accepted_median": med(v["p_sa"]), "p_strict_accepted_mean": mean(v["p_sa"]),
            "rank_strict_accepted_median": med(v["r_sa"]), "rank_strict_accepted_mean": mean(v["r_sa"]),
        }
    return out


def _assert_equal(stats: pl.DataFrame, expected: dict) -> None:
    got = {tuple(r[k] for k in _ARM): r for r in stats.iter_rows(named=True)}
    assert {r["serving"] for r in stats.iter_rows(named=True)} <= {""}  # no serving condition is logged
    assert set(got) == set(expected)
    for arm, exp in expected.items():
        for col in STAT_COLUMNS:
            g, e = got[arm][col], exp[col]
            if e is None:
                assert g is None, (arm, col, g)
            else:
                assert g == pytest.approx(e, rel=1e-12, abs=0), (arm, col, g, e)


@pytest.mark.parametrize("engine", ["streaming", "in-memory"])
@pytest.mark.parametrize("within_output", [False, True])
def test_stats_equal_python_loop(fake_study, engine, within_output):
    runs, traces = fake_study
    stats = extra_token_stats(runs, within_output=within_output, engine=engine)
    assert stats.columns == [*ARM_KEY, "alpha", *STAT_COLUMNS]
    expected = _oracle(runs, traces, within_output=within_output)
    _assert_equal(stats, expected)
    # The fixture is built to exercise every class: lossy-only, strict-only rejections, no-trace runs.
    loose = expected[("T", "D", "toy", "loose", "alpha0.3")]
    assert loose["n_runs"] == 5 and loose["n_lossy_only"] > 0
    assert expected[("T", "D", "toy", "casc", "alpha0.5")]["n_runs_with_proposals"] == 5
    assert expected[("T", "D", "toy", "casc", "alpha0.5")]["n_strict_only_rejected"] > 0
    strict = expected[("T", "D", "toy", "strict", "strict")]
    assert strict["n_lossy_only"] == 0 and strict["p_lossy_only_median"] is None


def test_units_restrict_to_cells(fake_study):
    runs, traces = fake_study
    units = pl.DataFrame({
        "target": ["T"] * 3, "draft": ["D"] * 3, "dataset": ["toy"] * 3,
        "method": ["loose", "loose", "casc"], "params": ["alpha0.3", "alpha0.3", "alpha0.5"],
        "item_id": ["case_001", "case_002", "case_003"], "seed": pl.Series([0, 1, 0], dtype=pl.Int32),
    })
    wanted = {(r["method"], r["item_id"], r["seed"]) for r in units.iter_rows(named=True)}
    res = extra_tokens(runs, units)
    assert isinstance(res, ExtraTokens) and res.per_cell
    expected = _oracle(runs, traces, keep=lambda r: (r["method"], r["item_id"], r["seed"]) in wanted)
    # loose/case_002/seed 1 failed, so the loose cell keeps one run; casc/case_003/0 has no trace.
    assert expected[("T", "D", "toy", "loose", "alpha0.3")]["n_runs"] == 1
    _assert_equal(res.stats, expected)
    assert res.missing.select("method", "item_id", "seed").rows() == [("casc", "case_003", 0)]
    casc = res.stats.filter(pl.col("method") == "casc").row(0, named=True)
    assert casc["n_runs_with_proposals"] == 0 and casc["n_rows"] == 0 and casc["lossy_only_per_proposed"] is None
    assert res.to_frame().shape == (2, len(res.stats.columns))
    assert "1 run(s) without proposals.jsonl" in res._repr_html_()


def test_per_run_counts_and_per_file_scan_agree(fake_study):
    runs, traces = fake_study
    res = extra_tokens(runs)
    by_source = {r["source"]: r for r in res.per_run.iter_rows(named=True)}
    ok_with_trace = [r for r in runs.iter_rows(named=True) if r["status"] == "ok" and r["source"] in traces]
    assert set(by_source) == {r["source"] for r in ok_with_trace} and len(by_source) == 16
    for run in ok_with_trace:
        rows = traces[run["source"]]
        got = by_source[run["source"]]
        assert (got["method"], got["item_id"], got["seed"]) == (run["method"], run["item_id"], run["seed"])
        assert got["n_rows"] == len(rows)
        assert got["n_proposed"] == sum(r.get("actually_accepted") is not None for r in rows)
        assert got["n_accepted"] == sum(bool(r.get("actually_accepted")) for r in rows)
        assert got["n_lossy_only"] == sum(bool(r.get("lossy_only_accepted")) for r in rows)
    # The per-file-scan variant (benchmark only) gives the same table.
    from lengthlens.analyses.extra_tokens import _compute
    assert _compute(runs, None, False, "streaming", per_file=True)[0].equals(res.stats)


def test_within_output_keeps_runs_without_output_tokens(fake_study):
    runs, _ = fake_study
    blank = runs.with_columns(pl.lit(None, pl.Int64).alias("output_tokens"))
    assert extra_token_stats(blank, within_output=True).equals(extra_token_stats(runs))


def test_scan_attaches_keys_and_skips_missing(fake_study, tmp_path):
    runs, traces = fake_study
    files = proposal_files(runs)
    assert files.filter(~pl.col("has_proposals"))["source"].to_list() == [
        str(tmp_path / "runs/toy/casc/alpha0.5/case_003/seed_0")]
    lf = scan_proposals(runs)
    assert isinstance(lf, pl.LazyFrame)
    df = lf.collect(engine="streaming")
    assert set(PROPOSAL_SCHEMA) <= set(df.columns) and "q" not in df.columns  # unused fields never parsed
    per_run = {(m, i, s): n for m, i, s, n in df.group_by("method", "item_id", "seed").len().iter_rows()}
    expected = {(r["method"], r["item_id"], r["seed"]): len(traces[r["source"]])
                for r in runs.iter_rows(named=True) if r["source"] in traces}
    assert per_run == expected  # scan_proposals itself does not filter on status


def test_no_trace_anywhere_gives_zero_rows(tmp_path):
    runs = pl.DataFrame({"target": ["T"], "draft": ["D"], "dataset": ["x"], "method": ["strict"],
                         "params": ["strict"], "item_id": ["a"], "seed": [0], "status": ["ok"],
                         "source": [str(tmp_path / "nope")]})
    stats = extra_token_stats(runs)
    assert stats.select("n_runs", "n_runs_with_proposals", "n_rows", "n_lossy_only").row(0) == (1, 0, 0, 0)
    assert stats["p_lossy_only_median"].to_list() == [None]


def test_write_csv(fake_study, tmp_path):
    runs, _ = fake_study
    path = extra_tokens(runs).write_csv(tmp_path / "OUT")
    back = pl.read_csv(path)
    assert path.name == "extra_tokens.csv" and back.height == 3 and back["n_runs"].to_list() == [6, 5, 6]


# --- the study's real traces (runs/gsm8k) ------------------------------------------------------

def _runs_from_layout(root: Path) -> pl.DataFrame:
    """A runs table from folder names + config.json/run.json, standing in for the loader."""
    rows = []
    for rj in sorted(root.glob("runs/*/*/*/*/seed_*/run.json")):
        folder = rj.parent
        dataset, method, params, item = folder.parts[-5:-1]
        cfg, run = json.loads((folder / "config.json").read_text()), json.loads(rj.read_text())
        rows.append({"target": cfg["model"], "draft": cfg["draft_model"], "dataset": dataset, "method": method,
                         "params": params, "alpha": parse_alpha(params), "item_id": item,
                         "seed": int(folder.name.removeprefix("seed_")), "status": run["status"],
                         "output_tokens": run.get("output_tokens"), "finish_reason": run.get("finish_reason"),
                         "draft_rounds": run.get("draft_rounds"), "accepted_tokens": run.get("accepted_tokens"),
                         "draft_tokens": run.get("draft_tokens"), "source": str(folder)})
    return pl.DataFrame(rows)


@pytest.fixture(scope="module")
def gsm8k(shared_data):
    """The gsm8k runs table and every trace row as plain dicts (json module; ~87k rows)."""
    runs = _runs_from_layout(shared_data).filter(pl.col("dataset") == "gsm8k")
    rows = {}
    for src in runs["source"]:
        with open(Path(src) / "proposals.jsonl") as f:
            rows[src] = [json.loads(line) for line in f]
    return runs, rows


@pytest.mark.shared
def test_real_trace_fields_and_nulls(gsm8k):
    runs, traces = gsm8k
    assert runs.height == 198 and len(traces) == 198
    flags = ("strict_would_accept", "lossy_would_accept", "actually_accepted", "lossy_only_accepted")
    n_bonus = n_judged = n_strict_only = 0
    for src, rows in traces.items():
        method = Path(src).parts[-4]
        for i, r in enumerate(rows):
            assert r["output_position"] == i  # contiguous, one row per emitted token
            if r["emission_source"] == "bonus":
                n_bonus += 1
                assert r["pos_in_round"] == K
                # Draft-side fields are absent from bonus rows (read as null), not written as null.
                assert not set(r) & {*flags, "p", "q", "u", "target_rank"}
                continue
            n_judged += 1
            assert all(r[k] is not None for k in (*flags, "p", "q", "u", "target_rank"))
            assert r["actually_accepted"] == r["lossy_would_accept"]
            assert r["actually_accepted"] == (r["emission_source"] == "accepted_draft")
            assert r["lossy_only_accepted"] == (r["lossy_would_accept"] and not r["strict_would_accept"])
            assert r["strict_would_accept"] == (r["u"] <= r["p"] / r["q"])  # the lossless test, recomputed
            if method == "strict":
                assert r["lossy_only_accepted"] is False and r["relaxation_param"] == 1.0
            if r["strict_would_accept"] and not r["lossy_would_accept"]:
                n_strict_only += 1
                assert method == "spec_casc_tok"
    assert (n_bonus, n_judged, n_strict_only) == (7075, 80238, 262)


@pytest.mark.shared
def test_real_counts_match_run_json(gsm8k):
    """accepted_tokens == accepted rows in the first draft_rounds rounds; the metrics miss the last round."""
    runs, traces = gsm8k
    short_by = defaultdict(int)
    past_output = []
    for run in runs.iter_rows(named=True):
        rows = traces[run["source"]]
        n_rounds = len({r["round"] for r in rows})
        # Each round ends in exactly one rejection ("recovered") or one bonus row.
        assert sum(r["emission_source"] != "accepted_draft" for r in rows) == n_rounds
        assert run["draft_tokens"] == K * run["draft_rounds"]
        short_by[(n_rounds - run["draft_rounds"], run["finish_reason"])] += 1
        counted = sum(bool(r.get("actually_accepted")) for r in rows if r["round"] < run["draft_rounds"])
        assert counted == run["accepted_tokens"], run["source"]
        past_output.append(len(rows) - run["output_tokens"])
        if run["finish_reason"] == "stop":
            assert 1 <= len(rows) - run["output_tokens"] <= 11  # trace tail past the EOS
    # The trace has one round more than run.json on 196 runs; 2 budget-capped runs agree.
    assert dict(short_by) == {(1, "stop"): 192, (1, "length"): 4, (0, "length"): 2}
    # Counting every accepted row instead overshoots accepted_tokens by 0..6 (the missed round).
    over = [sum(bool(r.get("actually_accepted")) for r in traces[s]) - a
            for s, a in zip(runs["source"], runs["accepted_tokens"])]
    assert min(over) == 0 and max(over) == K and sum(o == 0 for o in over) == 75
    assert (min(past_output), max(past_output)) == (-1, 11)


@pytest.mark.shared
@pytest.mark.parametrize("within_output", [False, True])
def test_real_per_arm_equals_pandas(gsm8k, within_output):
    runs, traces = gsm8k
    frames = []
    for run in runs.iter_rows(named=True):
        d = pd.DataFrame(traces[run["source"]], columns=list(PROPOSAL_SCHEMA))
        d["method"], d["params"], d["output_tokens"] = run["method"], run["params"], run["output_tokens"]
        frames.append(d)
    df = pd.concat(frames, ignore_index=True)
    if within_output:
        df = df[df["output_position"] < df["output_tokens"]]
    judged = df["actually_accepted"].notna()
    acc = df["actually_accepted"].eq(True)
    lo = df["lossy_only_accepted"].eq(True)
    sa = acc & df["strict_would_accept"].eq(True)
    g = df.assign(judged=judged, acc=acc, lo=lo, sa=sa).groupby(["method", "params"])
    exp = pd.DataFrame({
        "n_rows": g.size(), "n_proposed": g["judged"].sum(), "n_accepted": g["acc"].sum(),
        "n_strict_accepted": g["sa"].sum(), "n_lossy_only": g["lo"].sum(),
    })
    exp["lossy_only_per_proposed"] = exp["n_lossy_only"] / exp["n_proposed"]
    exp["lossy_only_per_accepted"] = exp["n_lossy_only"] / exp["n_accepted"]
    for name, mask in (("lossy_only", lo), ("strict_accepted", sa)):
        sub = df[mask].groupby(["method", "params"])
        exp[f"p_{name}_median"] = sub["p"].median()
        exp[f"p_{name}_mean"] = sub["p"].mean()
        exp[f"rank_{name}_median"] = sub["target_rank"].median()
        exp[f"rank_{name}_mean"] = sub["target_rank"].mean()

    stats = extra_token_stats(runs, within_output=within_output).to_pandas().set_index(["method", "params"])
    assert len(stats) == 21 and (stats["n_runs"] == stats["n_runs_with_proposals"]).all()
    for col in exp.columns:
        got, want = stats[col].sort_index(), exp[col].reindex(stats.index).sort_index()
        pd.testing.assert_series_equal(got.astype(float), want.astype(float), check_names=False, rtol=1e-12)
    assert stats.loc[("strict", "strict"), "n_lossy_only"] == 0
    assert math.isnan(stats.loc[("strict", "strict"), "p_lossy_only_median"])
    total = stats["n_rows"].sum()
    assert total == (87313 if not within_output else 87313 - sum(
        len(traces[s]) - min(len(traces[s]), o) for s, o in zip(runs["source"], runs["output_tokens"])))
