"""Plausibility rules: each bound on both sides, the same verdict on a record and on a table, the same params rule everywhere."""

from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lengthlens as ll
from lengthlens.data.validation.plausibility import RULE_FIELDS, RULES, violated, violations
from lengthlens.data.schema import POLARS_SCHEMA, check_params, validate_record

from .minitree import write_run

BASE = dict(target="t", draft="d", dataset="x", method="cactus", params="alpha0.3", alpha=0.3, item_id="1", seed=0,
            status="ok", output_tokens=500, finish_reason="stop", max_new_tokens=2048, draft_rounds=200,
            accepted_tokens=299, draft_tokens=1200, wall_time_s=3.0)


def _fields(**changes) -> list[str]:
    rec, errs = validate_record({**BASE, **changes}, "f.jsonl", 7)
    return [] if rec is not None else [e.field for e in errs]


@pytest.mark.parametrize("budget,allowed", [(2048, 102), (1000, 64), (20000, 1000)])
def test_budget_allowance_is_the_larger_of_64_tokens_and_5_percent(budget, allowed):
    # Derivation: allowance = max(64, budget / 20): 2048 -> 102.4 (102 whole tokens), 1000 -> 64, 20000 -> 1000.
    at = dict(max_new_tokens=budget, finish_reason="length", draft_rounds=10, accepted_tokens=0)
    assert _fields(output_tokens=budget + allowed, **at) == []
    assert _fields(output_tokens=budget + allowed + 1, **at) == ["output_tokens"]
    # Without a budget finish_reason no excess at all is allowed.
    assert _fields(output_tokens=budget + 1, **{**at, "finish_reason": "stop"}) == ["output_tokens"]
    assert _fields(output_tokens=budget, **{**at, "finish_reason": "stop"}) == []


@pytest.mark.parametrize("changes,field", [
    (dict(accepted_tokens=501), "accepted_tokens"),          # more accepted than emitted
    (dict(accepted_tokens=300, draft_tokens=299), "accepted_tokens"),  # more accepted than drafted
    (dict(draft_rounds=0), "draft_rounds"),                  # output past the prefill token with no round
    (dict(draft_rounds=502), "draft_rounds"),                # more rounds than output + 1
    (dict(wall_time_s=1e6 + 1), "wall_time_s"),
    (dict(wall_time_s=math.inf), "wall_time_s"),
    (dict(output_tokens=True), "output_tokens"),
    (dict(temperature=True), "temperature"),
    (dict(draft_rounds=12.9), "draft_rounds"),
    (dict(seed=2**63), "seed"),
    (dict(alpha=math.inf), "alpha"),
    (dict(alpha=0.5), "params"),
    (dict(params="alpha1e999", alpha=None), "params"),
    (dict(params="alphanan", alpha=None), "params"),
])
def test_each_rule_names_its_field(changes, field):
    assert _fields(**changes) == [field]


@pytest.mark.parametrize("changes", [
    dict(accepted_tokens=500, draft_tokens=500, output_tokens=500),  # all emitted tokens accepted drafts: possible
    dict(draft_rounds=501),                                            # rounds = output + 1: the allowed slack
    dict(draft_rounds=0, output_tokens=1, accepted_tokens=0),          # the prefill token alone
    dict(wall_time_s=1e6),
    dict(draft_tokens=None),                                           # a rule with a missing input does not fire
    dict(params="float16", alpha=0.7),                                 # a label: the alpha field is the alpha
])
def test_the_edges_that_are_possible_pass(changes):
    assert _fields(**changes) == []


def test_check_params_is_the_one_rule_for_alpha():
    assert check_params("alpha0.3_k8", None) == 0.3
    assert check_params("alphaneg0.3", -0.3 * (1 + 1e-12)) == -0.3  # within the tolerance: the name's number
    assert check_params("strict", None) is None and check_params("float16", 0.2) == 0.2
    for params in ("alpha1e999", "alphanan", "alphainf", "alphaXYZ"):
        with pytest.raises(ValueError):
            check_params(params, None)
    with pytest.raises(ValueError, match="contradicts"):
        check_params("alpha0.3", 0.31)


def test_a_record_fills_alpha_from_its_params_like_the_raw_reader(tmp_path):
    rec, _ = validate_record({**BASE, "alpha": None}, "f", 1)
    assert rec.alpha == 0.3
    write_run(tmp_path / "runs", "x", "cactus", "alpha0.3", "case_000", 0)
    assert ll.load(tmp_path / "runs", run_graders=False).table["alpha"].to_list() == [0.3]


_count = st.one_of(st.none(), st.integers(0, 3000))
_records = st.fixed_dictionaries({
    "output_tokens": _count, "max_new_tokens": st.one_of(st.none(), st.integers(1, 3000)), "draft_rounds": _count,
    "accepted_tokens": _count, "draft_tokens": _count,
    "finish_reason": st.sampled_from([None, "stop", "length", "max_tokens", "eos"]),
})


@settings(max_examples=300, deadline=None)
@given(st.lists(_records, min_size=1, max_size=20))
def test_rules_give_the_same_verdict_on_a_record_and_on_a_table(records):
    frame = pl.DataFrame(records, schema={f: POLARS_SCHEMA[f] for f in RULE_FIELDS})
    on_table = frame.select(violated().alias("v"))["v"].to_list()
    assert on_table == [bool(violations(r)) for r in records]
    for rule in RULES:  # and rule by rule, so that one rule's error cannot hide behind another's
        col = frame.select(rule.fires.expr.fill_null(False).alias("v"))["v"].to_list()
        assert col == [rule.fires.fn(r) is True for r in records]


def test_the_real_logs_break_no_rule(shared_data):
    """The study's own runs are the reference users' data: none is skipped by a plausibility rule."""
    runs = ll.load(shared_data / "runs", shared_data / "old_runs", run_graders=False, with_text=False)
    reasons = runs.skipped.filter(pl.col("stage") != "pairing")["reason"].to_list()
    assert all(r.startswith("duplicate of ") for r in reasons), reasons  # old_runs repeats 24 runs of runs/
    assert runs.n_found == 2495 and len(reasons) == 24


def test_one_params_label_at_two_alphas_in_two_arms_is_kept_and_an_arm_mixing_them_is_skipped_whole():
    """An arm is skipped for its own alphas, not for another arm's: a label may mean alpha 0.3 on one dataset and
    0.5 on another."""
    from lengthlens.data.validation.table import drop_mixed_alphas

    def runs(dataset, alphas):
        return [{"target": "T", "draft": "D", "dataset": dataset, "method": "cactus", "params": "fp16", "serving": "",
                 "alpha": a, "item_id": f"q{i}", "seed": 0, "turn": 1, "source": f"{dataset}.jsonl:{i + 1}"}
                for i, a in enumerate(alphas)]

    base = [{**r, "method": "strict", "params": "", "alpha": None} for r in runs("a", [0.0, 0.0])]
    table = pl.DataFrame(base + runs("a", [0.3, 0.3]) + runs("b", [0.5, 0.5]))
    kept, skipped = drop_mixed_alphas(table)
    assert kept.equals(table) and skipped.height == 0
    kept, skipped = drop_mixed_alphas(pl.DataFrame(base + runs("a", [0.3, 0.3]) + runs("b", [0.5, 0.3])))
    assert kept.height == 4 and set(kept["dataset"]) == {"a"}
    assert skipped["path"].to_list() == ["b.jsonl:1", "b.jsonl:2"]
    assert all("different alphas (0.3, 0.5)" in r for r in skipped["reason"])
