"""The ungraded box and terminal line: there exactly when ok runs of a graded benchmark have no verdict, with the
count, the reason and the flag that grades them; never otherwise."""

import dataclasses

import polars as pl

from lengthlens.data.grading.correctness import merge_not_executed, not_executed_counts
from lengthlens.report import model as M
from lengthlens.report import wording


def _ungraded_lines(analysis):
    return [line for line in wording.summary_lines(analysis) if line.startswith("ungraded:")]


def _boxes(analysis):
    return [b for b in M.build(analysis, figures={})["boxes"] if b["id"] == "ungraded-warning"]


def test_no_box_and_no_line_when_every_run_is_graded(example_analysis):
    t = example_analysis.runs.table
    assert t.filter((pl.col("status") == "ok") & pl.col("correct").is_null()).height == 0
    assert wording.ungraded_warning(example_analysis) is None
    assert _ungraded_lines(example_analysis) == [] and _boxes(example_analysis) == []


def _with_ungraded(analysis, n_not_executed):
    """The example with the ok runs of one longbench_v2 arm left without a verdict, ``n_not_executed`` of them
    because code execution was off (as the load's warning says)."""
    t = analysis.runs.table
    arm = (pl.col("dataset") == "longbench_v2") & (pl.col("method") == "cactus") & (pl.col("status") == "ok")
    arm = arm & (pl.col("params") == t.filter(arm).get_column("params").min())
    k = t.filter(arm).height
    t = t.with_columns(pl.when(arm).then(None).otherwise(pl.col("correct")).alias("correct"))
    warns = merge_not_executed([f"{n_not_executed} runs (humaneval {n_not_executed}) were left ungraded because code "
                                "execution is off: pass --execute-code"] if n_not_executed else [])
    runs = dataclasses.replace(analysis.runs, table=t, warnings=(*analysis.runs.warnings, *warns))
    return dataclasses.replace(analysis, runs=runs), k


def test_box_and_one_line_count_the_runs_and_name_reason_and_flag(example_analysis):
    a, k = _with_ungraded(example_analysis, 0)
    text = wording.ungraded_warning(a)
    assert text.startswith(f"{k:,} runs of graded benchmarks (longbench_v2 {k:,}) were left ungraded")
    assert "--problems FILE" in text and "--grades FILE" in text and "--execute-code" not in text
    assert _ungraded_lines(a) == [f"ungraded: {text}"]
    (box,) = _boxes(a)
    assert box["text"] == text and box["label"] == "Ungraded"
    assert M.build(a, figures={})["boxes"][0]["id"] == "ungraded-warning"  # first, at the top of the report


def test_code_not_executed_is_named_with_its_flag(example_analysis):
    a, k = _with_ungraded(example_analysis, 3)
    text = wording.ungraded_warning(a)
    assert f"{k:,} runs of graded benchmarks" in text
    assert "3 because their code was not executed (pass --execute-code" in text
    assert f"{k - 3:,} because the grader could not decide them" in text
    assert not_executed_counts(a.runs.warnings) == {"humaneval": 3}
