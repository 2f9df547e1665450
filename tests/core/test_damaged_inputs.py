"""A damaged-input corpus: every kind of damage gives a named skip (or a one-line error), no hang, no traceback, and no moved number.

Each case damages the relaxed run of case_009 in a small clean tree (:mod:`tests.core.damaged`), or
puts something next to it, and loads the tree in a worker process with a time limit. Asserted for
every case: the load returns (no hang, no exception but a one-line LoadError where that is the
answer); every entry found is loaded or skipped (``n_found == loaded + skipped``); the damage is
listed with its path and a reason naming the field or the problem; and every number of every cell
(l_bar, gain, lambda, R/R*, T/T*, accuracy, intervals) equals that of the reference tree: the same
tree without the victim run (a skipped run must count as an absent one) or, for damage next to the
victim, the clean tree.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from . import damaged
from .damaged import clean_tree, edit_json, replace_with, run_dir
from .isolated import CallFailed, Isolated

SUMMARY = f"{damaged.__name__}:summary"
LIMIT_S = 60


@pytest.fixture(scope="module")
def worker():
    w = Isolated()
    yield w
    w.close()


@pytest.fixture(scope="module")
def references(tmp_path_factory, worker):
    """Cells of the clean tree and of the tree without the victim (computed once)."""
    base = tmp_path_factory.mktemp("ref")
    clean = clean_tree(base / "clean" / "runs")
    gone = clean_tree(base / "gone" / "runs")
    shutil.rmtree(run_dir(gone))
    return {"clean": worker.call(SUMMARY, [str(clean)], timeout=LIMIT_S),
            "victim_gone": worker.call(SUMMARY, [str(gone)], timeout=LIMIT_S)}


def _run(v: Path, **fields) -> None:
    edit_json(v / "run.json", **fields)


def _dup_key(v: Path) -> None:
    text = (v / "run.json").read_text()
    (v / "run.json").write_text(text[:-1] + ', "output_tokens": 5}')


def _deep(v: Path) -> None:
    (v / "run.json").write_text('{"status": "ok", "output_tokens": 300, "x": ' + "[" * 200_000 + "]" * 200_000 + "}")


def _seed_file(v: Path) -> None:
    shutil.rmtree(v)
    v.write_text("not a folder")


def _case_file(v: Path) -> None:
    shutil.rmtree(v.parent)
    v.parent.write_text("not a folder")


def _non_utf8(v: Path) -> None:
    case = v.parent
    os.rename(os.fsencode(case), os.fsencode(case) + b"\xff")


# (id, damage, where the skip is listed (a path relative to the tree root), reason contains, reference, load options)
RAW_CASES = [
    ("output_tokens_1e7_at_budget", lambda v: _run(v, output_tokens=10**7, finish_reason="length"), "", "field 'output_tokens'", "victim_gone", {}),
    ("accepted_over_output", lambda v: _run(v, accepted_tokens=10**4, draft_tokens=10**5), "", "field 'accepted_tokens'", "victim_gone", {}),
    ("accepted_over_drafted", lambda v: _run(v, accepted_tokens=50, draft_tokens=20), "", "only 20 drafted", "victim_gone", {}),
    ("zero_rounds", lambda v: _run(v, draft_rounds=0), "", "field 'draft_rounds'", "victim_gone", {}),
    ("rounds_over_output", lambda v: _run(v, draft_rounds=10**4), "", "field 'draft_rounds'", "victim_gone", {}),
    ("wall_nan", lambda v: _run(v, wall_time_seconds=math.nan), "", "field 'wall_time_s'", "victim_gone", {}),
    ("wall_inf", lambda v: _run(v, wall_time_seconds=math.inf), "", "field 'wall_time_s'", "victim_gone", {}),
    ("wall_negative", lambda v: _run(v, wall_time_seconds=-1.0), "", "field 'wall_time_s'", "victim_gone", {}),
    ("wall_1e308", lambda v: _run(v, wall_time_seconds=1e308), "", "field 'wall_time_s'", "victim_gone", {}),
    ("bool_for_count", lambda v: _run(v, output_tokens=True), "", "boolean", "victim_gone", {}),
    ("fractional_count", lambda v: _run(v, output_tokens=12.9), "", "whole number", "victim_gone", {}),
    ("int_beyond_int64", lambda v: _run(v, output_tokens=10**30), "", "64-bit", "victim_gone", {}),
    ("config_alpha_nan", lambda v: edit_json(v / "config.json", lossy_parameters__alpha=math.nan), "", "lossy_parameters.alpha", "victim_gone", {}),
    ("config_alpha_inf", lambda v: edit_json(v / "config.json", lossy_parameters__alpha=math.inf), "", "not a finite number", "victim_gone", {}),
    ("config_alpha_contradicts_folder", lambda v: edit_json(v / "config.json", lossy_parameters__alpha=0.5), "", "contradicts", "victim_gone", {}),
    ("duplicate_json_key", _dup_key, "", "field 'output_tokens'", "victim_gone", {}),
    ("json_200k_deep", _deep, "", "nested too deeply", "victim_gone", {}),
    ("invalid_json", lambda v: (v / "run.json").write_text('{"status": "ok",\n "output_tokens": }'), "", "run.json:2", "victim_gone", {}),
    ("output_fifo", lambda v: replace_with(v / "output.txt", "fifo"), "", "FIFO", "victim_gone", {}),
    ("output_dev_zero", lambda v: replace_with(v / "output.txt", "symlink", "/dev/zero"), "", "character device", "victim_gone", {}),
    ("output_is_folder", lambda v: replace_with(v / "output.txt", "dir"), "", "it is a folder", "victim_gone", {}),
    ("output_over_cap", lambda v: (v / "output.txt").write_text("x" * 5000), "", "over the limit", "victim_gone", {"max_file_bytes": 4096}),
    ("run_json_is_folder", lambda v: replace_with(v / "run.json", "dir"), "", "it is a folder", "victim_gone", {}),
    ("run_json_fifo", lambda v: replace_with(v / "run.json", "fifo"), "", "FIFO", "victim_gone", {}),
    ("run_json_symlink_loop", lambda v: replace_with(v / "run.json", "loop"), "", "symlink loop", "victim_gone", {}),
    ("seed_folder_is_a_file", _seed_file, "", "is a file, not a run folder", "victim_gone", {}),
    ("case_folder_is_a_file", _case_file, "..", "is a file, not a case folder", "victim_gone", {}),
    ("non_utf8_folder_name", _non_utf8, None, "not valid UTF-8", "victim_gone", {}),
    ("stray_folder_in_case", lambda v: (v.parent / "notes").mkdir(), "../notes", "not named seed_<K>", "clean", {}),
    ("symlink_cycle", lambda v: (v.parents[3] / "loop").symlink_to(".."), "../../../../loop", "symlink cycle", "clean", {}),
    ("dangling_symlink", lambda v: (v.parents[2] / "gone").symlink_to("/nonexistent/x"), "../../../gone", "cannot follow symlink", "clean", {}),
    ("self_symlink_loop", lambda v: (v.parents[2] / "self").symlink_to("self"), "../../../self", "symlink loop", "clean", {}),
    ("path_past_path_max", lambda v: damaged.deep_path(_mkdir(v.parents[3] / "deep"), 4200), None, "path too long", "clean", {}),
]


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


def _nan_equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


def assert_same_cells(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want) and want, (len(got), len(want))
    for g, w in zip(got, want):
        moved = {k: (g[k], w[k]) for k in w if not _nan_equal(g.get(k), w[k])}
        assert not moved, f"numbers moved: {moved}"


def assert_accounted(s: dict) -> None:
    assert s["n_found"] == s["n_loaded"] + s["n_not_loaded"], (s["n_found"], s["n_loaded"], s["n_not_loaded"])


@pytest.mark.parametrize("case", RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_damaged_run_is_a_named_skip_and_moves_no_number(tmp_path, worker, references, case):
    name, damage, where, reason, reference, options = case
    root = clean_tree(tmp_path / "runs")
    victim = run_dir(root)
    damage(victim)
    s = worker.call(SUMMARY, [str(root)], timeout=LIMIT_S, **options)
    assert_accounted(s)
    listed = [(p, r) for p, r, stage in s["skipped"] if stage != "pairing"]
    if where is None:  # a path that is not valid UTF-8, or deeper than PATH_MAX: listed under the tree
        hits = [(p, r) for p, r in listed if reason in r]
    else:
        path = os.path.normpath(os.path.join(str(victim.resolve()), where))
        hits = [(p, r) for p, r in listed if p == path and reason in r]
    assert len(hits) == 1, f"{name}: expected one skip with {reason!r} at {where!r}, got {listed}"
    assert_same_cells(s["cells"], references[reference]["cells"])


def test_the_corpus_reference_is_not_trivial(references):
    """Guard: the victim matters, so a damaged run that were loaded would move numbers."""
    with pytest.raises(AssertionError, match="numbers moved"):
        assert_same_cells(references["clean"]["cells"], references["victim_gone"]["cells"])
    assert references["clean"]["n_not_loaded"] == 0 and references["victim_gone"]["n_not_loaded"] == 0
    (cell,) = references["clean"]["cells"]
    assert cell["n_items"] == damaged.N_ITEMS and 0 < cell["accuracy"] < 1 and cell["gain"] != 1 and cell["lambda"] != 1


@pytest.mark.parametrize("content,reason", [
    ("{not json", "invalid JSON"),
    (json.dumps({"runs": [["a list, not an entry"]]}), "invalid grade file"),
    (json.dumps({"runs": [{"case": "case_000", "seed": "x", "method": "strict", "params": "strict", "verdict": "correct"}]}),
     "invalid grade file"),
    ('{"runs": [], "runs": []}', "appears twice"),
    ("fifo", "FIFO"),
])
def test_an_invalid_grade_file_is_one_line_naming_it(tmp_path, worker, content, reason):
    root = clean_tree(tmp_path / "runs")
    grades = root / "campaign" / "grades"
    grades.mkdir(parents=True)
    if content == "fifo":
        os.mkfifo(grades / "gsm8k.json")
    else:
        (grades / "gsm8k.json").write_text(content)
    with pytest.raises(CallFailed) as err:
        worker.call(SUMMARY, [str(root)], timeout=LIMIT_S)
    assert err.value.kind == "LoadError", err.value.trace
    assert "\n" not in err.value.message and str(grades / "gsm8k.json") in err.value.message and reason in err.value.message


def _victim_line(rows, **fields) -> str:
    return json.dumps({**rows[-1], **fields})


# (id, the victim's line given the clean rows, reason contains)
FLAT_CASES = [
    ("bool_for_count", lambda r: _victim_line(r, output_tokens=True), "boolean"),
    ("fractional_count", lambda r: _victim_line(r, output_tokens=12.9), "whole number"),
    ("int_beyond_int64", lambda r: _victim_line(r, output_tokens=10**30), "64-bit"),
    ("params_alpha1e999", lambda r: _victim_line(r, params="alpha1e999"), "alpha must be finite"),
    ("params_alphanan", lambda r: _victim_line(r, params="alphanan"), "alpha must be finite"),
    ("alpha_contradicts_params", lambda r: _victim_line(r, alpha=0.5), "contradicts"),
    ("alpha_nan", lambda r: _victim_line(r, alpha=math.nan), "field 'alpha'"),
    ("wall_infinity", lambda r: _victim_line(r, wall_time_s=math.inf), "field 'wall_time_s'"),
    ("accepted_over_output", lambda r: _victim_line(r, accepted_tokens=10**4, draft_tokens=10**5), "field 'accepted_tokens'"),
    ("zero_rounds", lambda r: _victim_line(r, draft_rounds=0), "field 'draft_rounds'"),
    ("output_1e7_at_budget", lambda r: _victim_line(r, output_tokens=10**7, finish_reason="length"), "field 'output_tokens'"),
    ("duplicate_key", lambda r: _victim_line(r)[:-1] + ', "output_tokens": 5}', "appears twice"),
    ("non_utf8_byte", lambda r: _victim_line(r, status="ok").replace('"ok"', '"o\udcffk"').encode("utf-8", "surrogateescape"),
     "not valid UTF-8"),
    ("json_200k_deep", lambda r: _victim_line(r)[:-1] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested too deeply"),
    ("invalid_json", lambda r: _victim_line(r)[:-5], "invalid JSON"),
]


@pytest.fixture(scope="module")
def flat(tmp_path_factory, worker):
    """The clean tree's rows, and the cells of the flat file without the victim."""
    base = tmp_path_factory.mktemp("flat")
    rows = damaged.flat_rows(clean_tree(base / "runs"))
    ref = damaged.write_jsonl(base / "ref.jsonl", rows[:-1])
    return rows, worker.call(SUMMARY, [str(ref)], timeout=LIMIT_S)


@pytest.mark.parametrize("case", FLAT_CASES, ids=[c[0] for c in FLAT_CASES])
def test_damaged_flat_line_is_a_named_skip_and_moves_no_number(tmp_path, worker, flat, case):
    name, line, reason = case
    rows, ref = flat
    f = damaged.write_jsonl(tmp_path / "runs.jsonl", rows, line(rows))
    s = worker.call(SUMMARY, [str(f)], timeout=LIMIT_S)
    assert_accounted(s)
    listed = [(p, r) for p, r, stage in s["skipped"] if stage != "pairing"]
    assert listed == [(f"{f}:{len(rows)}", listed[0][1])] and reason in listed[0][1], f"{name}: {listed}"
    assert_same_cells(s["cells"], ref["cells"])


def test_flat_arm_mixing_alphas_is_skipped_whole(tmp_path, worker, flat):
    rows, _ = flat
    # A params name that is a label (not alpha<number>): the alpha field is the alpha, and must be one per arm.
    labelled = [{**r, "params": "float16"} if r["method"] != "strict" else r for r in rows]
    labelled[-1]["alpha"] = 0.5
    s = worker.call(SUMMARY, [str(damaged.write_jsonl(tmp_path / "mixed.jsonl", labelled))], timeout=LIMIT_S)
    assert_accounted(s)
    mixed = [r for _, r, stage in s["skipped"] if "different alphas (0.3, 0.5)" in r]
    assert len(mixed) == damaged.N_ITEMS and s["cells"] == []


def test_ragged_csv_row_and_huge_parquet_integer_are_named_skips(tmp_path, worker, flat):
    import polars as pl

    rows, ref = flat
    cols = list(rows[0])
    lines = [",".join(cols)] + [",".join("" if r[c] is None else str(r[c]) for c in cols) for r in rows]
    lines[-1] += ",surplus"
    csv_file = tmp_path / "runs.csv"
    csv_file.write_text("\n".join(lines) + "\n")
    s = worker.call(SUMMARY, [str(csv_file)], timeout=LIMIT_S)
    assert_accounted(s)
    assert [(p, r) for p, r, st in s["skipped"] if st != "pairing"] == [(f"{csv_file}:{len(rows) + 1}",
                                                                          f"{len(cols) + 1} fields but the header has {len(cols)} (a ragged row)")]
    assert_same_cells(s["cells"], ref["cells"])
    df = pl.DataFrame(rows).with_columns(pl.col("output_tokens").cast(pl.UInt64))
    df = df.with_columns(pl.when(pl.int_range(pl.len()) == len(rows) - 1).then(pl.lit(2**64 - 1, pl.UInt64))
                         .otherwise(pl.col("output_tokens")).alias("output_tokens"))
    df.write_parquet(tmp_path / "runs.parquet")
    s = worker.call(SUMMARY, [str(tmp_path / "runs.parquet")], timeout=LIMIT_S)
    assert_accounted(s)
    (skip,) = [r for p, r, st in s["skipped"] if st != "pairing"]
    assert "field 'output_tokens'" in skip and "64-bit" in skip
    assert_same_cells(s["cells"], ref["cells"])


@pytest.mark.parametrize("make,reason", [
    (lambda p: p.write_text("a,a\n1,2\n"), "column 'a' appears twice in the header"),
    (lambda p: os.mkfifo(p), "FIFO"),
])
def test_unusable_flat_file_is_one_line(tmp_path, worker, make, reason):
    f = tmp_path / "runs.csv"
    make(f)
    with pytest.raises(CallFailed) as err:
        worker.call(SUMMARY, [str(f)], timeout=LIMIT_S)
    assert err.value.kind == "LoadError" and "\n" not in err.value.message and reason in err.value.message, err.value.trace


def _report(root: Path, out: Path, timeout: float = 180):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "lengthlens", "report", str(root), "--out", str(out), "--no-pdf", "--no-figures", "-q",
           "--n-resamples", "200", "--no-cache"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "default"})


def _with_traces(root: Path) -> None:
    row = {"round": 0, "pos_in_round": 0, "output_position": 0, "p": 0.5, "target_rank": 0, "strict_would_accept": True,
           "lossy_would_accept": True, "actually_accepted": True, "lossy_only_accepted": False, "emission_source": "accepted_draft"}
    for d in root.rglob("seed_0"):
        (d / "proposals.jsonl").write_text((json.dumps(row) + "\n") * 3)


def test_report_command_on_a_tree_with_several_damages(tmp_path):
    """The command line: exit 0, no traceback, every damage in skipped.csv, cells.csv as without the damaged runs."""
    import polars as pl

    root, ref = clean_tree(tmp_path / "d" / "runs"), clean_tree(tmp_path / "r" / "runs")
    _with_traces(root)
    replace_with(run_dir(root) / "output.txt", "fifo")  # case_009: a FIFO (blocked the command forever)
    _dup_key(run_dir(root, case=8))
    _non_utf8(run_dir(root, case=7))
    (run_dir(root).parents[3] / "loop").symlink_to("..")
    bad_trace = run_dir(root, case=0) / "proposals.jsonl"
    bad_trace.write_text(bad_trace.read_text() + "{broken\n")
    for case in (9, 8, 7):
        shutil.rmtree(run_dir(ref, case=case))
    got, want = _report(root, tmp_path / "out"), _report(ref, tmp_path / "ref_out")
    assert got.returncode == 0 and want.returncode == 0, got.stderr[-2000:]
    assert "Traceback" not in got.stderr
    assert str(bad_trace) in got.stderr and "line 4: invalid JSON" in got.stderr
    skipped = pl.read_csv(tmp_path / "out" / "skipped.csv")
    reasons = dict(zip(skipped["path"], skipped["reason"]))
    assert "FIFO" in reasons[str(run_dir(root).resolve())]
    assert "appears twice" in reasons[str(run_dir(root, case=8).resolve())]
    assert "symlink cycle" in reasons[str(run_dir(root.resolve()).parents[3] / "loop")]
    assert any("not valid UTF-8" in r for r in reasons.values())
    assert (tmp_path / "out" / "cells.csv").read_bytes() == (tmp_path / "ref_out" / "cells.csv").read_bytes()


def test_report_command_with_an_invalid_grade_file_is_one_line(tmp_path):
    root = clean_tree(tmp_path / "runs")
    grades = root / "campaign" / "grades"
    grades.mkdir(parents=True)
    (grades / "gsm8k.json").write_text('{"runs": [{"case": "case_000"}]}')
    r = _report(root, tmp_path / "out")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and str(grades / "gsm8k.json") in r.stderr and "lacks key" in r.stderr
