"""Spec-Bench's main set as its users have it: one question.jsonl of several tasks, repeat folders, other ids.

The folder is built here in the benchmark's layout (``data/spec_bench/question.jsonl``,
``model_answer_temp0_run_N/<model-id>.jsonl``, as ``evaluation/eval.py`` and ``speed.py``'s
``get_mean_speedup`` of hemingkx/Spec-Bench, commit fd2c1cd, write and read them), with vanilla and
SpS on every question and two runs, ``samd`` (an eval.sh id without a dtype) cut to half the
questions, EAGLE's own answer file (``idxs``, a free-form id, no category) and Medusa's own
(typical acceptance). Oracles: per-task cells from json + pandas on the files; the speed-up table
against Spec-Bench's speed.py formula, written out below from its definition (per question tokens
over time summed over turns, mean over the task's questions, the ratio of means per run, the mean
and ddof-1 std over runs; the baseline's tokens re-tokenized, here by a whitespace tokenizer that adds
a BOS, as speed.py subtracts one for it; #Mean accepted tokens the mean of all accept_lengths).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest

import lengthlens as ll
from lengthlens.analyses.specbench_speedup import speedup_table
from lengthlens.data.coverage import arm_coverage

QUESTIONS = {81: "writing", 82: "writing", 111: "math", 112: "math", 161: "translation", 162: "translation",
             163: "translation", 321: "qa", 322: "qa", 323: "qa"}
MT = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
EAGLE_ID = "ess-vicuna-7b-fp16-temperature-0.0"
MEDUSA_ID = "medusa-vicuna-7b-v1.3-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3"
METHOD_MAP = {"ess-vicuna-7b-fp16-*": {"target": "vicuna-7b-v1.3", "method": "eagle", "draft": "EAGLE-Vicuna-7B-v1.3"}}


def _turns(qid: int) -> int:
    return 2 if QUESTIONS[qid] in MT else 1


def _split(n: int, k: int) -> list[int]:
    """n tokens over k steps, as even as possible (each step emits at least one)."""
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def _choice(qid: int, run: int, method: str) -> dict:
    news, steps, walls, acc, texts = [], [], [], [], []
    for t in range(_turns(qid)):
        n = 20 + (qid % 7) * 5 + 10 * t + (0 if method == "vanilla" else qid % 3)
        k = n if method == "vanilla" else math.ceil(n / (2.5 if method == "sps" else 3.2))
        news.append(n)
        steps.append(k)
        walls.append(round(k * (0.025 + 0.002 * run) + 0.05, 6))
        acc += _split(n, k)
        texts.append(" ".join(["w"] * n))
    c = {"index": 0, "turns": texts, "new_tokens": news, "wall_time": walls}
    if method in ("eagle", "medusa"):
        c["idxs"] = [k - 1 for k in steps]  # EAGLE's / Medusa's eagenerate: the 0-based last loop index
    else:
        c.update(decoding_steps=steps, accept_lengths=acc)
    return c


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sb") / "data" / "spec_bench"
    _write(root / "question.jsonl", [{"question_id": q, "category": c, "turns": ["?"] * _turns(q)} for q, c in QUESTIONS.items()])
    for run in (1, 2):
        folder = root / f"model_answer_temp0_run_{run}"
        for mid, method in (("vicuna-7b-v1.3-vanilla-float16-temp-0.0", "vanilla"),
                            ("vicuna-7b-v1.3-sps-68m-float16-temp-0.0", "sps")):
            _write(folder / f"{mid}.jsonl", [{"question_id": q, "category": c, "model_id": mid,
                                              "choices": [_choice(q, run, method)]} for q, c in QUESTIONS.items()])
    first = root / "model_answer_temp0_run_1"
    _write(first / "vicuna-7b-v1.3-samd.jsonl", [{"question_id": q, "category": QUESTIONS[q], "choices": [_choice(q, 1, "samd")]}
                                                  for q in (81, 82, 111, 112, 161)])  # cut at 5 of 10 questions
    _write(first / f"{EAGLE_ID}.jsonl", [{"question_id": q, "model_id": EAGLE_ID, "choices": [_choice(q, 1, "eagle")]}
                                         for q in QUESTIONS])  # EAGLE writes no category
    _write(first / f"{MEDUSA_ID}.jsonl", [{"question_id": q, "model_id": MEDUSA_ID, "choices": [_choice(q, 1, "medusa")]}
                                          for q in QUESTIONS])
    return root


@pytest.fixture(scope="module")
def runs(bench):
    return ll.load(bench, format="specbench", format_options={"method_map": METHOD_MAP})


def _frame(path: Path, seed: int) -> pd.DataFrame:
    rows = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        c = r["choices"][0]
        steps = c.get("decoding_steps") or [i + 1 for i in c["idxs"]]
        task = "mt_bench" if QUESTIONS[r["question_id"]] in MT else QUESTIONS[r["question_id"]]
        for t in range(len(c["turns"])):
            rows.append({"qid": str(r["question_id"]), "seed": seed, "turn": t, "task": task, "new": c["new_tokens"][t],
                         "steps": steps[t], "wall": c["wall_time"][t]})
    return pd.DataFrame(rows)


def _oracle(bench: Path, mid: str, task: str, runs=(1, 2)) -> dict:
    parts = []
    for run in runs:
        f = bench / f"model_answer_temp0_run_{run}"
        parts.append(_frame(f / f"{mid}.jsonl", 1000 * (run - 1)).merge(
            _frame(f / "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl", 1000 * (run - 1)),
            on=["qid", "seed", "turn", "task"], suffixes=("", "_v")))
    m = pd.concat(parts)
    m = m[m.task == task]
    lbar = ((m.new - m.steps) / m.steps).mean()
    lbar_v = ((m.new_v - m.steps_v) / m.steps_v).mean()
    return {"n_items": m.qid.nunique(), "n_runs": len(m), "lambda": m.new.sum() / m.new_v.sum(),
            "rounds_ratio": m.steps.sum() / m.steps_v.sum(), "time_ratio": m.wall.sum() / m.wall_v.sum(),
            "gain": (lbar + 1) / (lbar_v + 1)}


@pytest.mark.parametrize("task", ["mt_bench", "translation", "qa"])
def test_task_is_the_dataset_and_cells_equal_a_plain_computation(runs, bench, task):
    cells = ll.cells(runs, n_resamples=100)
    cell = cells.get(dataset=task, method="sps")
    want = _oracle(bench, "vicuna-7b-v1.3-sps-68m-float16-temp-0.0", task)
    assert (cell.n_items, cell.n_runs) == (want["n_items"], want["n_runs"])
    for name in ("lambda", "rounds_ratio", "time_ratio", "gain"):
        assert cell[name].point == pytest.approx(want[name], rel=1e-12), name


def test_categories_seeds_and_the_ids_of_every_method(runs):
    t = runs.table.filter(~pl.col("shared_baseline"))
    assert set(t["dataset"]) == {"mt_bench", "translation", "qa"}
    assert set(t.filter(pl.col("dataset") == "mt_bench")["category"]) == {"writing", "math"}
    assert set(t.filter(pl.col("method") == "sps")["seed"]) == {0, 1000}  # model_answer_temp0_run_1, _run_2
    arms = set(t.select("method", "draft", "target").unique().iter_rows())
    assert arms == {("strict", "", "vicuna-7b-v1.3"), ("sps", "sps-68m", "vicuna-7b-v1.3"), ("samd", "samd", "vicuna-7b-v1.3"),
                    ("eagle", "EAGLE-Vicuna-7B-v1.3", "vicuna-7b-v1.3"),
                    ("medusa_typical", "medusa-vicuna-7b-v1.3", "vicuna-7b-v1.3")}
    eagle = t.filter((pl.col("method") == "eagle") & (pl.col("item_id") == "161")).row(0, named=True)
    n = 20 + (161 % 7) * 5 + 161 % 3
    k = math.ceil(n / 3.2)  # idxs = k - 1 in the file: rounds = idxs + 1
    assert (eagle["draft_rounds"], eagle["accepted_tokens"], eagle["category"]) == (k, n - k, "translation")
    assert t.filter(pl.col("method") == "medusa_typical")["params"].unique().to_list() == ["pt0.09_pa0.3"]


def test_incomplete_arm_is_flagged(runs):
    cov = arm_coverage(runs).filter(pl.col("method") == "samd").sort("dataset")
    assert cov.select("dataset", "n_items", "n_items_baseline", "complete", "not_run").rows() == [
        ("mt_bench", 4, 4, True, False), ("qa", 0, 3, False, True), ("translation", 1, 3, False, False)]
    summary = runs.summary()
    assert "incomplete arm vicuna-7b-v1.3 / samd / translation / samd / default: 1 of the baseline's 3 items (33%)" in summary
    # The task samd never reached has a row of its own, named in the console.
    assert "not run: samd (vicuna-7b-v1.3 / samd) never ran on qa (the baseline has 3 items there): coverage 0, no cell" \
        in summary
    table = speedup_table(runs).set_index(["method", "dataset"])
    assert not table.loc[("samd", "overall"), "complete"] and table.loc[("samd", "overall"), "coverage"] == 0.5
    # ... and in Spec-Bench's speed-up table: a row with coverage 0 and no speed-up, as speed.py cannot compute one.
    qa = table.loc[("samd", "qa")]
    assert (qa["n_items"], qa["n_items_baseline"], qa["coverage"], qa["complete"]) == (0, 3, 0.0, False)
    assert np.isnan(qa["speedup"]) and np.isnan(qa["mean_accepted_tokens"]) and np.isnan(qa["l_bar"])


def test_incomplete_arm_is_flagged_in_cells_table3_figures_and_the_report(runs, tmp_path):
    """samd covers 1 of translation's 3 questions: cells.csv, Table 3, the forest plot, the survival panel, the warning."""
    from lengthlens.report import plot_style, plots
    from lengthlens.report.plot_survival import fig_survival
    from lengthlens.report.wording import incomplete_warning

    a = ll.analyse(runs, n_resamples=200)
    cells = a.tables["cells"]
    samd = cells[cells["method"] == "samd"].set_index("dataset")
    assert samd.loc["translation", ["coverage", "complete"]].tolist() == [1 / 3, False]
    assert bool(samd.loc["mt_bench", "complete"])
    assert cells.loc[cells["method"] != "samd", "complete"].all()
    # These cells are too small (< 10 items) for the report's Table 3; kept in, the cut one is counted as incomplete.
    assert a.tables["table3"].set_index("method").loc["samd", "n_incomplete"] == 0
    t3 = ll.table3(cells, include_small=True).set_index("method")
    assert t3.loc["samd", "n_incomplete"] == 1 and t3.loc["sps", "n_incomplete"] == 0 and t3.loc["all", "n_incomplete"] == 1
    warning = incomplete_warning(a)
    # The cut cell has 1 item: counted among the small probes, not named (the naming is tested below).
    assert warning.startswith("1 of ") and "1 of them have fewer than 10 items" in warning
    # Tasks a method never reached are named too (the runs have no cell there).
    assert "Never run (no cell, coverage 0): " in warning and "samd on qa" in warning
    fig = plots.fig_lambda_forest(a, "translation")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert [lab for lab in labels if "incomplete" in lab] == ["vicuna-7b-v1.3 · samd default (1 items) [incomplete: 1/3]"]
    assert any("labelled [incomplete]" in n for n in plot_style.caption_notes(fig))
    assert a.survival["translation"].incomplete == ("samd",) and a.survival["mt_bench"].incomplete == ()
    texts = [t.get_text() for ax in fig_survival(a).axes for t in ax.texts]
    assert "incomplete: samd" in texts
    ll.report.write_report(a, tmp_path / "rep", pdf=False)
    html = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert 'id="incomplete-warning"' in html and "1 of them have fewer than 10 items" in html


def test_baseline_counted_once_in_the_summary(runs, bench):
    files = sorted(bench.rglob("*.jsonl"))
    n_turns = sum(_turns(json.loads(line)["question_id"]) for f in files if f.name != "question.jsonl"
                  for line in f.read_text().splitlines())
    head = runs.summary().splitlines()[0]
    assert head.startswith(f"{n_turns} runs found in 1 source(s); {n_turns} loaded ")
    assert runs.table.filter(~pl.col("shared_baseline")).height == n_turns


def _speed_py(bench: Path, mid: str, task: str, runs=(1, 2)) -> tuple[float, float, float]:
    """Spec-Bench's speed.py get_mean_speedup for one method and task: (speed-up mean, std, #mean accepted tokens)."""
    def data(path):
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        for r in rows:
            r.setdefault("category", QUESTIONS[r["question_id"]])
        if task == "overall":
            return rows
        if task == "mt_bench":
            return [r for r in rows if r["category"] in MT]
        return [r for r in rows if r["category"] == task]

    ratios, accept = [], []
    for run in runs:
        f = bench / f"model_answer_temp0_run_{run}"
        speeds = []
        for r in data(f / f"{mid}.jsonl"):
            c = r["choices"][0]
            speeds.append(sum(c["new_tokens"]) / sum(c["wall_time"]))
            accept.extend(c["accept_lengths"])
        speeds0 = []
        for r in data(f / "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl"):
            c = r["choices"][0]
            tokens = sum(len(["<s>", *text.split()]) - 1 for text in c["turns"])  # tokenizer with BOS, minus one
            speeds0.append(tokens / sum(c["wall_time"]))
        ratios.append(np.mean(speeds) / np.mean(speeds0))
    return float(np.mean(ratios)), float(np.std(ratios, ddof=1)), float(np.mean(accept))


@pytest.mark.parametrize("task", ["mt_bench", "translation", "qa", "overall"])
def test_speedup_table_equals_spec_bench_speed_py(runs, bench, task):
    table = speedup_table(runs).set_index(["method", "dataset"])
    row = table.loc[("sps", task)]
    speedup, std, accepted = _speed_py(bench, "vicuna-7b-v1.3-sps-68m-float16-temp-0.0", task)
    assert row.speedup == pytest.approx(speedup, rel=1e-12) and row.speedup_std == pytest.approx(std, rel=1e-9)
    assert row.mean_accepted_tokens == pytest.approx(accepted, rel=1e-12)
    assert row.l_bar_pooled == pytest.approx(accepted - 1, rel=1e-12)  # bonus excluded
    assert row.n_seeds == 2 and bool(row.complete)


def test_plausibility_named_skips_others_loaded(tmp_path):
    folder = tmp_path / "b" / "model_answer"
    good = {"question_id": 1, "category": "qa", "choices": [{"index": 0, "turns": ["a"], "new_tokens": [12],
                                                              "decoding_steps": [5], "wall_time": [0.5]}]}
    lines = [json.dumps(good).encode(),
             json.dumps({**good, "question_id": 2, "choices": [{**good["choices"][0], "new_tokens": [12.9]}]}).encode(),
             json.dumps({**good, "question_id": 3, "choices": [{**good["choices"][0], "turns": "twenty chars long..."}]}).encode(),
             b'{"question_id": 4, "category": "qa", "choices": [{"turns": ["\xff"]}]}',
             json.dumps({**good, "question_id": 5, "choices": [{**good["choices"][0], "wall_time": ["slow"]}]}).encode(),
             json.dumps({**good, "question_id": 6, "choices": [{**good["choices"][0], "new_tokens": ["12"]}]}).encode(),
             json.dumps({**good, "question_id": 7}).encode()]
    folder.mkdir(parents=True)
    (folder / "m-7b-sps-68m-float16-temp-0.0.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    runs = ll.load(tmp_path / "b", format="specbench")
    assert sorted(runs.table["item_id"]) == ["1", "7"]
    why = dict(zip((p.rsplit(":", 1)[1] for p in runs.skipped["path"]), runs.skipped["reason"]))
    assert "new_tokens must be a whole number, got 12.9" in why["2"]
    assert "field 'turns': expected a list of texts, got str" in why["3"]
    assert "not UTF-8" in why["4"]
    assert "field 'wall_time'" in why["5"] and "new_tokens must be a whole number, got '12'" in why["6"]
    assert runs.n_found == 7


def test_method_ids_of_eval_sh_and_the_methods_own_scripts():
    from lengthlens.data.readers.specbench import parse_model_id
    from lengthlens.data.readers.specbench_ids import parse_method_map, resolve_id

    assert parse_model_id("vicuna-7b-v1.3-recycling")["method"] == "recycling"
    lade = parse_model_id("vicuna-7b-v1.3-lade-level-5-win-7-guess-7-float16")
    assert (lade["method"], lade["draft"], lade["params"]) == ("lade", "lade-level-5-win-7-guess-7", "float16")
    assert parse_model_id("vicuna-7b-v1.3-medusa-float16-temperature-0.7")["method"] == "medusa_typical"  # T > 0
    assert parse_model_id("vicuna-7b-v1.3-medusa-float16-temperature-0.0")["method"] == "medusa"  # greedy: lossless
    run = parse_model_id("medusa-vicuna-13b-v1.3-2-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3")
    assert (run["target"], run["method"], run["run"]) == ("vicuna-13b-v1.3", "medusa_typical", 2)
    hydra = parse_model_id("hydra-vicuna-7b-v1.3-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3")
    assert hydra["method"] == "hydra"  # Hydra takes the id's temperature: 0 is greedy
    with pytest.raises(ValueError, match="--method-map"):
        parse_model_id(EAGLE_ID)
    mm = parse_method_map([f"{EAGLE_ID}=eagle", 'base-*={"method": "vanilla", "target": "vicuna-7b-v1.3"}'])
    assert resolve_id(EAGLE_ID, mm) | {"run": None} == {"target": "ess-vicuna-7b-fp16", "method": "eagle", "draft": "eagle",
                                                         "params": "temp0.0", "temperature": 0.0, "run": None}
    assert resolve_id("base-temperature-0.0", mm)["method"] == "autoregressive"
    with pytest.raises(ValueError, match="needs 'method'"):
        parse_method_map(['x={"target": "t"}'])


def test_cli_method_map(bench, tmp_path, capsys):
    from lengthlens.cli import main

    out = tmp_path / "runs.jsonl"
    mm = json.dumps(METHOD_MAP["ess-vicuna-7b-fp16-*"])
    assert main(["import", "specbench", str(bench), "--out", str(out), "--method-map", f"ess-vicuna-7b-fp16-*={mm}"]) == 0
    methods = {json.loads(line)["method"] for line in out.read_text().splitlines()}
    assert "eagle" in methods and "samd" in methods
    assert main(["import", "specbench", str(bench), "--out", str(out)]) == 0  # without the map: that file is named
    assert f"{EAGLE_ID}.jsonl: cannot read" in capsys.readouterr().err


def test_the_incomplete_warning_names_cells_large_enough_for_table3_and_counts_the_probes():
    from types import SimpleNamespace

    from lengthlens.report.wording import incomplete_warning

    rows = [("eagle", "p", "m", "mt", 164, 480, False, False), ("sps", "p", "m", "mt", 480, 480, True, False),
            ("x", "a0.1", "m", "gsm8k", 3, 12, False, True), ("x", "a0.2", "m", "gsm8k", 3, 12, False, True)]
    cells = pd.DataFrame(rows, columns=["method", "params", "target", "dataset", "n_items", "n_items_baseline",
                                        "complete", "small_n"])
    w = incomplete_warning(SimpleNamespace(tables={"cells": cells}))
    assert w.startswith("3 of 4 cells cover fewer than 95% of their baseline's items")
    assert ": eagle p (m / mt: 164 of 480 items). 2 of them have fewer than 10 items" in w
    assert incomplete_warning(SimpleNamespace(tables={"cells": cells[cells.complete]})) is None


def test_the_report_shows_spec_bench_speedup_table_and_names_the_tasks(runs):
    """The analysis writes speedup_table's rows as specbench_speedup.csv and the report shows them in their own section,
    each pair's overall row last; the headline and the verdict lines name each method's tasks and say why no cell
    is graded."""
    from lengthlens.report import model as M
    from lengthlens.report import wording

    a = ll.analyse(runs, n_resamples=200, include_small=True)  # the set is a few questions per task
    got = a.tables["specbench_speedup"]
    want = speedup_table(runs)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    section = next(s for s in M.build(a, figures={})["sections"] if s["id"] == "specbench_speedup")
    tables = [b for c in section["blocks"] if c["type"] == "collapsible" for b in c["blocks"] if b["type"] == "table"]
    assert sum(len(t["rows"]) for t in tables) == len(want)
    for t in tables:
        at = [c["label"] for c in t["columns"]].index("dataset")
        assert t["rows"][-1]["cells"][at][0] == "overall" and t["rows"][-1]["kind"] == "total"
    used = a.results["table3_cells_used"]
    headline = wording.headline(a)
    for method, d in used.groupby("method"):
        assert f"{method} on {', '.join(sorted(set(d['dataset'])))}" in headline or method not in headline
        line = next(s for tg, _d, m, s in wording.verdict_sentences(a) if tg == "all" and m == method)
        assert f"({', '.join(sorted(set(d['dataset'])))})" in line, line
    n = len(used)
    graded = int((used["drop_2pp"].notna() & ~used["graded_partial"].astype(bool)).sum())
    assert (f"None of the {n} cells is graded" if not graded else f"{graded} of {n} cells are graded") in headline
