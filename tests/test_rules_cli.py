"""The rule verdicts on the command line: printed first by `lengthlens report` (with --margin), rules.csv."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lengthlens import cli
from lengthlens.report.wording import rule_verdict_line


def _runs_file(tmp_path: Path) -> Path:
    """Six datasets of 15 items: `fast` needs 0.7× the rounds and keeps every verdict; `lossy` loses a third of them."""
    rng = np.random.default_rng(4)
    rows = []
    for ds in ("a", "b", "c", "d", "e", "f"):
        for i in range(15):
            L = int(rng.integers(300, 900))
            ok = bool(rng.random() < 0.8)
            for m, f, correct in (("strict", 1.0, ok), ("fast", 0.7, ok), ("lossy", 1.0, ok and rng.random() < 0.66)):
                R = max(1, int(L / 3 * f * rng.uniform(0.95, 1.05)))
                rows.append(dict(target="T", draft="D", dataset=ds, method=m, params="strict" if m == "strict" else "alpha0.3",
                                 item_id=f"q{i}", seed=0, status="ok", output_tokens=L, max_new_tokens=4096,
                                 finish_reason="stop", draft_rounds=R, accepted_tokens=L - R, wall_time_s=R / 40,
                                 correct=correct))
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rules-cli")
    runs, out = _runs_file(tmp), tmp / "out"
    return runs, out


def test_report_prints_one_verdict_line_per_rule_first(reported, capsys):
    runs, out = reported
    assert cli.main(["report", str(runs), "--out", str(out), "--no-pdf", "--no-figures", "--n-resamples", "200",
                     "--margin", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Rule verdicts, each rule's cells pooled across datasets")
    assert "−5 points" in lines[0]
    assert lines[1].startswith("  fast: R/R* ") and lines[2].startswith("  lossy: R/R* ")
    rules_csv = pd.read_csv(out / "rules.csv").set_index("method")
    assert (rules_csv["margin_pp"] == 5).all()
    # each line is rules.csv's row in words: the numbers it quotes are the file's
    fast = rules_csv.loc["fast"]
    assert f"R/R* {fast['rounds_ratio']:.2f} [{fast['rounds_ratio_lo']:.2f}, {fast['rounds_ratio_hi']:.2f}] faster" in lines[1]
    assert fast["verdict_rounds"] == "faster" and fast["n_cells"] == 6 and fast["n_items"] == 90
    lossy = rules_csv.loc["lossy"]
    # a loss is quoted with a minus sign, as the heading's margin is: a hyphen reads as a dash in print
    assert lossy["accuracy_delta_pp"] < 0 and f"Δacc −{-lossy['accuracy_delta_pp']:.1f} pp [−" in lines[2]
    assert lossy["verdict_accuracy"] == "worse" and not re.search(r"-\d", lines[2])
    assert "(6 cells, 90 items)" in lines[2]


def test_verdict_line_says_why_an_interval_off_1_is_still_open():
    r = pd.Series({"target": "all", "draft": "all", "serving": "", "method": "x", "rounds_ratio": 0.86,
                   "rounds_ratio_lo": 0.77, "rounds_ratio_hi": 0.97, "rounds_ratio_k": 6, "rounds_ratio_p_holm": 0.08,
                   "verdict_rounds": "can't tell", "time_ratio": float("nan"), "time_ratio_lo": float("nan"),
                   "time_ratio_hi": float("nan"), "time_ratio_k": 0, "verdict_time": "not computed",
                   "verdict_accuracy": "ungraded", "accuracy_delta_pp": float("nan"), "accuracy_delta_pp_k": 0,
                   "accuracy_mdd_pp": float("nan"), "n_cells": 6, "n_items": 72, "n_cells_accuracy": 0,
                   "n_items_accuracy": 0, "n_probes_excluded": 2})
    line = rule_verdict_line(r)
    assert line == ("x: R/R* 0.86 [0.77, 0.97] can't tell (Holm p 0.08); T/T* not computed; accuracy ungraded "
                    "(6 cells, 72 items; 2 probe cells left out)")


def test_verdict_line_quotes_a_loss_with_a_minus_sign_and_no_detectable_loss_past_100_points():
    r = pd.Series({"target": "all", "draft": "all", "serving": "", "method": "x", "rounds_ratio": 1.2,
                   "rounds_ratio_lo": 0.9, "rounds_ratio_hi": 1.6, "rounds_ratio_k": 3, "rounds_ratio_p_holm": 0.5,
                   "verdict_rounds": "can't tell", "time_ratio": float("nan"), "time_ratio_lo": float("nan"),
                   "time_ratio_hi": float("nan"), "time_ratio_k": 0, "verdict_time": "not computed",
                   "verdict_accuracy": "can't tell", "accuracy_delta_pp": -9.44, "accuracy_delta_pp_lo": -50.6,
                   "accuracy_delta_pp_hi": 31.8, "accuracy_delta_pp_k": 3, "accuracy_mdd_pp": 122.0, "n_cells": 3,
                   "n_items": 40, "n_cells_accuracy": 3, "n_items_accuracy": 40, "n_probes_excluded": 0})
    assert rule_verdict_line(r).endswith(
        "Δacc −9.4 pp [−50.6, +31.8] can't tell (not even a loss of 100 pp would be seen 80 % of the time) "
        "(3 cells, 40 items)")
    assert "(a loss of 37 pp would be seen 80 % of the time)" in rule_verdict_line(r.copy().replace(122.0, 37.0))
