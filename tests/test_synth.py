"""Synthetic run logs: determinism, consistent counters, planted effects recovered, raw == flat, grades == text."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import lengthlens
from lengthlens import synth
from lengthlens.data.schema import POLARS_SCHEMA, STRICT
from lengthlens.synth import Arm, Dataset, Effect, ForceCommit, Pair, SynthSpec

KEY = ["target", "draft", "dataset", "method", "params", "item_id", "seed"]
H_FINAL = "<|channel|>final<|message|>"


@pytest.fixture(scope="module")
def example_tree(tmp_path_factory) -> Path:
    """The example spec written once for the read-only tests of this module."""
    root = tmp_path_factory.mktemp("synth") / "ex"
    synth.write_raw(synth.example(), root)
    return root


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _read_tree(root: Path) -> pl.DataFrame:
    """An independent mini-reader of the raw layout (not lengthlens.io): one normalized record per run folder."""
    rows = []
    for run_json in sorted(root.glob("*/runs/*/*/*/case_*/seed_*/run.json")):
        d = run_json.parent
        rj = json.loads(run_json.read_text())
        cfg = json.loads((d / "config.json").read_text())
        dataset, method, params, case = d.parts[-5], d.parts[-4], d.parts[-3], d.parts[-2]
        rows.append({
            "target": cfg["model"], "draft": cfg["draft_model"], "dataset": dataset, "method": method,
            "params": params, "alpha": (cfg["lossy_parameters"] or {}).get("alpha"), "item_id": case,
            "seed": int(d.name.split("_")[1]), "status": rj["status"], "output_tokens": rj["output_tokens"],
            "finish_reason": rj["finish_reason"], "max_new_tokens": cfg["max_new_tokens"],
            "draft_rounds": int(rj["draft_rounds"]), "accepted_tokens": int(rj["accepted_tokens"]),
            "draft_tokens": int(rj["draft_tokens"]), "wall_time_s": rj["wall_time_seconds"],
            "temperature": cfg["temperature"], "top_p": cfg["top_p"], "input_tokens": rj["input_tokens"],
            "l_bar_logged": rj["l_bar"], "analysis_chars": rj["analysis_chars"], "final_chars": rj["final_chars"],
            "reached_final_channel": rj["reached_final_channel"], "reference_answer": cfg["reference_answer"],
            "prompt_source_id": cfg["prompt_source_id"], "backend": rj["backend"],
            "engine_version": cfg["vllm"]["version"], "force_commit_fired": rj.get("force_commit_fired"),
            "text": (d / "output.txt").read_text(),
            "_dir": str(d), "_k": cfg["synthetic"]["speculative_tokens"],
        })
    return pl.DataFrame(rows, infer_schema_length=None)


def _split(text: str) -> tuple[str, str | None, int, int]:
    """(thinking, answer or None, analysis_chars, final_chars) by the study's counting convention."""
    if text.startswith("<think>"):
        body = text[len("<think>"):]
        if "</think>" not in body:
            return body, None, len(body), 0
        think, ans = body.split("</think>", 1)
        return think, ans, len(think.strip()), len(ans.strip())
    i = text.find(H_FINAL)
    if i < 0:
        return text[len("<|channel|>analysis<|message|>"):], None, len(text), 0
    ans = text[i + len(H_FINAL):]
    return text[len("<|channel|>analysis<|message|>"):i - len("<|end|><|start|>assistant")], ans, i, len(ans)


# --------------------------------------------------------------------------------------------


def test_write_is_deterministic_and_worker_independent(tmp_path: Path) -> None:
    spec = synth.example()
    a, b = tmp_path / "a", tmp_path / "b"
    synth.write_raw(spec, a)
    synth.write_raw(spec, b, workers=2)
    da, db = _tree_digest(a), _tree_digest(b)
    n_runs = spec.n_runs
    # 3 files per run, one grade file per (pair, graded dataset), one marker per pair.
    assert len(da) == 3 * n_runs + len(spec.pairs) * (1 + sum(d.graded for d in spec.datasets))
    assert da == db
    synth.write_flat(spec, tmp_path / "f1.jsonl")
    synth.write_flat(spec, tmp_path / "f2.jsonl")
    assert (tmp_path / "f1.jsonl").read_bytes() == (tmp_path / "f2.jsonl").read_bytes()
    # Another generator seed gives other data.
    synth.write_flat(spec, tmp_path / "f3.jsonl", seed=1)
    assert (tmp_path / "f1.jsonl").read_bytes() != (tmp_path / "f3.jsonl").read_bytes()
    # Rewriting a synth tree replaces it (same bytes); a foreign folder of that name is refused.
    synth.write_raw(spec, a)
    assert _tree_digest(a) == db
    foreign = tmp_path / "c" / spec.pairs[0].slug
    foreign.mkdir(parents=True)
    with pytest.raises(FileExistsError):
        synth.write_raw(spec, tmp_path / "c")
    assert foreign.is_dir()


def test_counters_and_char_counts_are_consistent(example_tree: Path) -> None:
    t = _read_tree(example_tree)
    spec = synth.example()
    assert t.height == spec.n_runs == 640
    for r in t.iter_rows(named=True):
        L, A, R, D = r["output_tokens"], r["accepted_tokens"], r["draft_rounds"], r["draft_tokens"]
        assert A + R == L and D == r["_k"] * R and 1 <= R < L
        assert r["l_bar_logged"] == A / R
        think, ans, a_chars, f_chars = _split(r["text"])
        assert (r["analysis_chars"], r["final_chars"]) == (a_chars, f_chars)
        censored = r["finish_reason"] == "length"
        assert censored == (L == r["max_new_tokens"]) == (ans is None) == (not r["reached_final_channel"])
        # Thinking is plain words: no digit a grader could mistake for an answer.
        assert re.search(r"\d", think) is None
    # Plausible characters per token overall.
    cpt = (t["analysis_chars"] + t["final_chars"]).sum() / t["output_tokens"].sum()
    assert 2.8 < cpt < 4.6
    # Censoring happens in the example, mostly in aime24 (16k budget for a 7k mean).
    cens = t.filter(pl.col("finish_reason") == "length")
    assert cens.height > 10 and cens.filter(pl.col("dataset") == "aime24").height > cens.height / 2
    # run.json / config.json are exactly json.dumps(indent=2) of their content (templates are faithful).
    some = sorted(example_tree.glob("*/runs/*/*/*/case_00[12]/seed_0"))
    assert len(some) > 50
    for d in some:
        for name in ("run.json", "config.json"):
            s = (d / name).read_text()
            assert s == json.dumps(json.loads(s), indent=2)
        rj = json.loads((d / "run.json").read_text())
        assert rj["mean_accept_length"] == rj["l_bar"] + 1
        assert rj["draft_acceptance_rate"] == rj["accepted_tokens"] / rj["draft_tokens"]
        assert rj["usage"]["total_tokens"] == rj["input_tokens"] + rj["output_tokens"]
        assert isinstance(rj["draft_rounds"], float) and rj["eos_reached"] != rj["reached_max_new_tokens"]


def test_config_fields_match_the_study(example_tree: Path) -> None:
    d = example_tree / "gpt-oss-20b__nebius-EAGLE3-gpt-oss-20b" / "runs" / "gsm8k"
    s = json.loads((d / "strict/strict/case_001/seed_0/config.json").read_text())
    assert (s["mode"], s["lossy_method"], s["lossy_parameters"], s["tag"]) == ("strict", None, {}, "strict")
    c = json.loads((d / "spec_casc_opt/alphaneg0.1/case_001/seed_0/config.json").read_text())
    assert (c["mode"], c["lossy_method"], c["lossy_parameters"], c["tag"]) == ("lossy", "spec_casc_opt", {"alpha": -0.1}, "specCascOptneg0.1")
    assert c["model"] == "gpt-oss-20b" and c["draft_model"] == "nebius/EAGLE3-gpt-oss-20b"
    assert c["prompt_case"] == "case_001" and c["prompt_source_id"] == "openai/gsm8k:test:0"
    assert c["vllm"]["version"] == "0.26.0" and c["timestamp_utc"] == synth.FIXED_TIMESTAMP
    assert synth.alpha_params(0.35) == "alpha0.35" and synth.alpha_params(-0.3) == "alphaneg0.3"


def test_raw_and_flat_hold_the_same_records(example_tree: Path, tmp_path: Path) -> None:
    spec = synth.example()
    raw = _read_tree(example_tree).drop("_dir", "_k").sort(KEY)
    flat = synth.simulate(spec, text=True).sort(KEY)
    for c in raw.columns:
        assert raw[c].to_list() == flat[c].to_list(), c
    # The three flat formats read back to the same table (POLARS_SCHEMA columns and types).
    want = synth.simulate(spec).select(POLARS_SCHEMA.names())
    for ext in ("jsonl", "csv", "parquet"):
        p = synth.write_flat(spec, tmp_path / f"runs.{ext}")
        got = {"jsonl": pl.read_ndjson, "csv": pl.read_csv, "parquet": pl.read_parquet}[ext](p, schema=POLARS_SCHEMA) \
            if ext != "csv" else pl.read_csv(p, schema=POLARS_SCHEMA)
        assert got.equals(want), ext
    assert want.columns == POLARS_SCHEMA.names() and want.height == 640


def test_grade_files_agree_with_the_text(example_tree: Path) -> None:
    spec = synth.example()
    runs = {(r["_dir"]): r for r in _read_tree(example_tree).iter_rows(named=True)}
    flat = synth.simulate(spec).select(*KEY, "correct")
    correct = {tuple(r[k] for k in KEY): r["correct"] for r in flat.iter_rows(named=True)}
    n = 0
    for pair in spec.pairs:
        for ds in spec.datasets:
            g = json.loads((example_tree / pair.slug / "campaign/grades" / f"{ds.name}.json").read_text())["runs"]
            assert len(g) == ds.n_items * len(spec.arms_of(ds))
            for e in g:
                d = example_tree / pair.slug / "runs" / ds.name / e["method"] / e["params"] / e["case"] / f"seed_{e['seed']}"
                r = runs[str(d)]
                _think, ans, _a, _f = _split(r["text"])
                assert e["output_tokens"] == r["output_tokens"] and e["l_bar"] == r["l_bar_logged"]
                if ans is None:
                    assert (e["verdict"], e["answer"], e["hit_cap"]) == ("no_answer", None, True)
                else:
                    pat = {"gsm8k": r"#### (\d+)$", "aime24": r"\\boxed\{(\d+)\}\n\\\]$",
                           "longbench_v2": r"The correct answer is \(([A-D])\)$"}[ds.name]
                    got = re.search(pat, ans).group(1)
                    assert got == e["answer"]
                    assert e["verdict"] == ("correct" if got == e["reference"] else "wrong")
                    assert e["reference"] == r["reference_answer"]
                key = (pair.target, pair.draft, ds.name, e["method"], e["params"], e["case"], e["seed"])
                assert correct[key] == (e["verdict"] == "correct")
                n += 1
    assert n == 640


def _big_spec(n_items: int, budget: int = 10**8, kind: str = "gsm8k", seeds: tuple[int, ...] = (0,)) -> SynthSpec:
    ds = Dataset("bench", n_items, budget, kind, mean_len=600, log_sd=0.8, final_frac=0.1)
    strict = Effect(l_bar=2.2, accuracy=0.7, time_per_round=0.02)
    arms = (Arm("cactus", 0.2, Effect(lambda_=1.6, l_bar=3.6, accuracy=0.62, think_share=0.9, time_per_round=0.021)),
            Arm("mentored_dec", 0.5, Effect(lambda_=1.25, l_bar=2.9, accuracy=0.69, think_share=0.7, time_per_round=0.02)))
    return SynthSpec(pairs=(Pair("T", "D", k=6),), datasets=(ds,), arms=arms, strict=strict, seeds=seeds)


def test_planted_effects_are_recovered_within_standard_errors() -> None:
    """n = 6000 items, no censoring: lambda, gain, accuracy, thinking share and time ratio match the truth.

    Each estimate is compared with its planted value in units of its own standard error (delta
    method over items); the tolerance is 4 SE, and the SEs are small enough for the check to bite.
    """
    spec = _big_spec(6000)
    df = synth.simulate(spec)
    truth = synth.truth(spec)
    base = df.filter(pl.col("method") == STRICT).sort("item_id")
    assert not df["censored"].any()
    Ls = base["output_tokens"].to_numpy().astype(float)
    for arm in spec.arms:
        tr = truth.filter(pl.col("method") == arm.method).row(0, named=True)
        a = df.filter(pl.col("method") == arm.method).sort("item_id")
        assert a["item_id"].to_list() == base["item_id"].to_list()
        La = a["output_tokens"].to_numpy().astype(float)
        n = len(La)

        def ratio(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
            r = x.sum() / y.sum()
            return r, float(np.std(x - r * y, ddof=1) / math.sqrt(n) / y.mean())

        lam, se_lam = ratio(La, Ls)
        assert abs(lam - tr["lambda_"]) < 4 * se_lam and se_lam < 0.02
        # gain = (sum L / sum R) / (sum L* / sum R*): each factor is a ratio estimator; combine SEs.
        Ra, Rs = a["draft_rounds"].to_numpy().astype(float), base["draft_rounds"].to_numpy().astype(float)
        la1, se1 = ratio(La, Ra)
        ls1, se2 = ratio(Ls, Rs)
        gain = la1 / ls1
        se_gain = gain * math.hypot(se1 / la1, se2 / ls1)
        assert abs(gain - tr["gain"]) < 4 * se_gain and se_gain < 0.005
        assert abs(la1 - 1 - arm.effect.l_bar) < 4 * se1
        ca = a["correct"].to_numpy().astype(float)
        se_acc = math.sqrt(tr["accuracy"] * (1 - tr["accuracy"]) / n)
        assert abs(ca.mean() - tr["accuracy"]) < 4 * se_acc
        cs = base["correct"].to_numpy().astype(float)
        assert abs(cs.mean() - tr["accuracy_strict"]) < 4 * math.sqrt(0.7 * 0.3 / n)
        # Extra thinking / extra length = think_share (a ratio of mean differences).
        Ta, Ts = a["thinking_tokens"].to_numpy().astype(float), base["thinking_tokens"].to_numpy().astype(float)
        share = (Ta.mean() - Ts.mean()) / (La.mean() - Ls.mean())
        d_t, d_l = Ta - Ts, La - Ls
        se_share = float(np.std(d_t - share * d_l, ddof=1) / math.sqrt(n) / d_l.mean())
        # The split is nearly deterministic given L, so whole-token rounding of the answer part
        # (up to one token a run) dominates: allow it on top of 4 SE.
        assert abs(share - arm.effect.think_share) < 4 * se_share + 1.0 / d_l.mean()
        # Time ratio: rounds ratio x time-per-round ratio.
        Wa, Ws = a["wall_time_s"].to_numpy(), base["wall_time_s"].to_numpy()
        tr_hat, se_t = ratio(Wa, Ws)
        assert abs(tr_hat - tr["time_ratio"]) < 4 * se_t


def test_censoring_biases_plain_lambda_as_truth_says() -> None:
    """Heavy censoring: censored share and the plain (observed) lambda match truth's censored values, not lambda_."""
    spec = _big_spec(6000, budget=900)
    df = synth.simulate(spec)
    truth = synth.truth(spec)
    base = df.filter(pl.col("method") == STRICT).sort("item_id")
    n = base.height
    Ls = base["output_tokens"].to_numpy().astype(float)
    assert (base.filter(pl.col("censored"))["output_tokens"] == 900).all()
    for arm in spec.arms:
        tr = truth.filter(pl.col("method") == arm.method).row(0, named=True)
        a = df.filter(pl.col("method") == arm.method).sort("item_id")
        p = a["censored"].mean()
        assert abs(p - tr["censored_rate"]) < 4 * math.sqrt(p * (1 - p) / n) and p > 0.15
        La = a["output_tokens"].to_numpy().astype(float)
        lam = La.sum() / Ls.sum()
        se = float(np.std(La - lam * Ls, ddof=1) / math.sqrt(n) / Ls.mean())
        assert abs(lam - tr["lambda_censored"]) < 4 * se
        assert lam < tr["lambda_"] - 10 * se  # the plain ratio is clearly biased low
        # Censored runs are wrong: accuracy = planted x P(uncensored).
        acc = a["correct"].mean()
        assert abs(acc - tr["accuracy_expected"]) < 4 * math.sqrt(acc * (1 - acc) / n)
        # The true (uncensored) lengths still carry the planted lambda.
        lt = a["L_true"].to_numpy().astype(float).sum() / base["L_true"].to_numpy().astype(float).sum()
        assert abs(lt - tr["lambda_"]) < 0.05


def test_force_commit_arms(example_tree: Path) -> None:
    spec = synth.example()
    df = synth.simulate(spec, text=True)
    assert df.filter(pl.col("method").str.ends_with("_force_commit")).height == 2 * 2 * 40  # arms x pairs x items
    for fc in spec.force_commit:
        for ds in spec.datasets:
            t = fc.threshold_for(ds.budget)
            base = df.filter((pl.col("method") == fc.method) & (pl.col("dataset") == ds.name)).sort("pair", "item_id")
            arm = df.filter((pl.col("method") == fc.arm_method) & (pl.col("dataset") == ds.name)).sort("pair", "item_id")
            assert set(arm["params"]) == {f"{synth.alpha_params(fc.alpha)}_t{t}"}
            fired = arm["fired"].to_numpy()
            assert (fired == (base["thinking_tokens"].to_numpy() >= t)).all()
            same = [c for c in POLARS_SCHEMA.names() if c not in ("method", "params", "force_commit_fired")]
            assert base.filter(~pl.Series(fired)).select(same).equals(arm.filter(~pl.Series(fired)).select(same))
            f = arm.filter(pl.Series(fired))
            assert (f["thinking_tokens"] == t).all() and (f["finish_reason"] == "stop").all()
            assert (f["output_tokens"] < ds.budget).all() and f["reached_final_channel"].all()
    # Censored base runs always fire, and some uncensored ones do too (aime24, threshold 9800 < 16384).
    aime = df.filter((pl.col("dataset") == "aime24") & (pl.col("method") == "cactus_force_commit"))
    base = df.filter((pl.col("dataset") == "aime24") & (pl.col("method") == "cactus")).sort("pair", "item_id")
    assert aime.sort("pair", "item_id").filter(base["censored"])["fired"].all()
    assert 0 < aime["fired"].sum() < aime.height
    # The intervention run's files equal the base run's where it did not fire (config aside).
    tree = example_tree / spec.pairs[0].slug / "runs" / "aime24"
    for case_dir in sorted((tree / "cactus_force_commit").glob("*/case_*")):
        b = tree / "cactus" / "alpha0.18" / case_dir.name / "seed_0"
        rec = aime.filter((pl.col("pair") == spec.pairs[0].slug) & (pl.col("item_id") == case_dir.name)).row(0, named=True)
        same = (b / "output.txt").read_bytes() == (case_dir / "seed_0" / "output.txt").read_bytes()
        assert same != rec["fired"]


def test_force_commit_fire_rate_and_accuracy_match_truth() -> None:
    spec = replace(_big_spec(6000, budget=2500), force_commit=(ForceCommit("cactus", 0.2, threshold=1500, accuracy_after=0.25),))
    df = synth.simulate(spec)
    tr = synth.truth(spec).filter(pl.col("method") == "cactus_force_commit").row(0, named=True)
    a = df.filter(pl.col("method") == "cactus_force_commit")
    n = a.height
    fire = a["fired"].mean()
    assert abs(fire - tr["fire_rate"]) < 4 * math.sqrt(fire * (1 - fire) / n) and 0.1 < fire < 0.9
    acc = a["correct"].mean()
    assert abs(acc - tr["accuracy_expected"]) < 4 * math.sqrt(acc * (1 - acc) / n)
    assert abs(a.filter(pl.col("fired"))["correct"].mean() - 0.25) < 4 * math.sqrt(0.25 * 0.75 / a["fired"].sum())
    La = a["output_tokens"].to_numpy().astype(float)
    Ls = df.filter(pl.col("method") == STRICT).sort("item_id")["output_tokens"].to_numpy().astype(float)
    lam = La.sum() / Ls.sum()
    se = float(np.std(La - lam * Ls, ddof=1) / math.sqrt(n) / Ls.mean())
    assert abs(lam - tr["lambda_censored"]) < 4 * se


def test_proposals_match_the_counters(tmp_path: Path) -> None:
    spec = replace(synth.example(), datasets=(replace(synth.example().datasets[0], n_items=4),), force_commit=())
    root = synth.write_raw(spec, tmp_path / "p", proposals=True)
    dirs = sorted(root.glob("*/runs/*/*/*/case_*/seed_*"))
    assert len(dirs) == spec.n_runs
    for d in dirs:
        rj = json.loads((d / "run.json").read_text())
        k = json.loads((d / "config.json").read_text())["synthetic"]["speculative_tokens"]
        rows = [json.loads(x) for x in (d / "proposals.jsonl").read_text().splitlines()]
        assert len(rows) == rj["output_tokens"]
        assert sum(bool(r.get("actually_accepted")) for r in rows) == rj["accepted_tokens"]
        assert len({r["round"] for r in rows}) == rj["draft_rounds"]
        assert [r["output_position"] for r in rows] == list(range(len(rows)))
        strict = "/strict/strict/" in str(d)
        for r in rows:
            if r["emission_source"] == "accepted_draft":
                assert r["pos_in_round"] < k
                assert r["strict_would_accept"] == (r["u"] <= r["p"] / r["q"] + 1e-6)
                assert r["lossy_only_accepted"] == (not r["strict_would_accept"])
                assert not (strict and r["lossy_only_accepted"])
            elif r["emission_source"] == "recovered":
                assert not r["actually_accepted"] and not r["lossy_would_accept"] and r["u"] >= r["p"] / r["q"] - 1e-6
            else:
                assert r["emission_source"] == "bonus" and r["pos_in_round"] == k


def test_spec_validation_and_paper_scale_truth() -> None:
    spec = synth.paper_scale()
    assert spec.n_runs == 12 * 6 * (1319 + 30 + 164 + 400 + 80 + 503) == 179_712
    tr = synth.truth(spec).filter(pl.col("method") != STRICT)
    assert tr.height == 12 * 6 * 5
    assert abs(tr["gain"].mean() - 1.34) < 1e-6 and abs(tr["lambda_"].mean() - 1.54) < 1e-6  # effects rounded to 6 places
    assert (tr["l_bar"] < tr["k"]).all() and (tr["gain"] > 1).all()
    fc = synth.paper_scale(force_commit=True)
    assert fc.n_runs == spec.n_runs + 12 * 2 * (1319 + 30 + 400)
    bad = replace(spec.pairs[0], k=3)
    with pytest.raises(ValueError, match="too close to k"):
        replace(synth.example(), pairs=(bad,))
    with pytest.raises(ValueError, match="no base arm"):
        replace(synth.example(), force_commit=(ForceCommit("cactus", 0.99),))


@pytest.mark.skipif(not hasattr(lengthlens, "load"), reason="lengthlens.load not available yet")
def test_round_trip_through_the_reader(example_tree: Path) -> None:
    """write_raw then lengthlens.load: every run loaded, none skipped, records equal write_flat's (source aside)."""
    runs = lengthlens.load(example_tree, cache=False)
    spec = synth.example()
    assert runs.table.height == spec.n_runs and runs.skipped.height == 0
    assert runs.table["paired"].all()
    cols = [c for c in POLARS_SCHEMA.names() if c != "source"]
    got = runs.table.select(cols).sort(KEY)
    want = synth.simulate(spec, text=True).select(cols).sort(KEY)
    assert got.equals(want)
    assert all(s.startswith(str(example_tree.resolve())) for s in runs.table["source"])
    flat = lengthlens.load(synth.write_flat(spec, example_tree.parent / "ex.parquet", text=True), cache=False)
    assert flat.table.select(cols).sort(KEY).equals(want)


def _coverage(n_sets: int, n_items: int, n_resamples: int, workdir: Path) -> tuple[int, int]:
    """How many of n_sets simulated data sets have the planted lambda inside their 95% interval."""
    spec = _big_spec(n_items)
    planted = {a.method: a.effect.lambda_ for a in spec.arms}
    hits = total = 0
    for s in range(n_sets):
        p = synth.write_flat(spec, workdir / f"cov_{s}.parquet", seed=s)
        df = lengthlens.cells(lengthlens.load(p, cache=False), n_resamples=n_resamples, seed=s).to_frame()
        for r in df.itertuples():
            total += 1
            hits += int(r.lambda_lo <= planted[r.method] <= r.lambda_hi)
        p.unlink()
    return hits, total


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(lengthlens, "cells"), reason="lengthlens.cells not available yet")
def test_lambda_interval_coverage(tmp_path: Path) -> None:
    """Over 200 data sets x 2 arms the planted lambda lies in the 95% interval about 95% of the time.

    400 intervals (pairs from one data set share items, so the count is conservative as a binomial):
    SD of the coverage is sqrt(.95 * .05 / 400) = 1.1 pp; accept 95% +/- 3.5 SD (91.2%..98.8%).
    """
    hits, total = _coverage(200, 150, 1000, tmp_path)
    sd = math.sqrt(0.95 * 0.05 / total)
    assert abs(hits / total - 0.95) < 3.5 * sd, f"coverage {hits}/{total}"
