"""The vectorised screen of flat tables agrees with RunRecord: a screened row always validates to the same values."""

from __future__ import annotations

import math

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from lengthlens.data.schema import POLARS_SCHEMA, RunRecord
from lengthlens.data.validation.screen import screen_frame

N = 6
ints = st.one_of(st.none(), st.integers(-3, 5000))
floats = st.one_of(st.none(), st.floats(-2, 5000), st.sampled_from([math.nan, math.inf, -0.0, 0.5]), st.integers(0, 10).map(float))
texts = st.one_of(st.none(), st.sampled_from(["", "ok", "strict", "alpha0.3", "error", "x", "12", "1.5", "true",
                                              "alpha1e999", "alphanan", "float16", "alpha0.5_k8", "length", "stop"]))
bools = st.one_of(st.none(), st.booleans())


VALID = {
    pl.String: st.lists(st.sampled_from(["ok", "strict", "t", "x", "float16", "alpha0.5", "length"]), min_size=N, max_size=N),
    pl.Int64: st.lists(st.integers(1, 5000), min_size=N, max_size=N),
    pl.Float64: st.lists(st.floats(0.01, 1.0), min_size=N, max_size=N),
    pl.Boolean: st.lists(st.booleans(), min_size=N, max_size=N),
}


def column(field: str):
    """Strategies for a column of N values in one dtype: valid native values, and plausible wrong ones."""
    target = POLARS_SCHEMA[field]
    valid = st.tuples(st.just(target), VALID[target])
    if target == pl.String:
        wrong = [st.tuples(st.just(pl.String), st.lists(texts, min_size=N, max_size=N)),
                 st.tuples(st.just(pl.Int64), st.lists(ints, min_size=N, max_size=N))]
    elif target == pl.Int64:
        wrong = [st.tuples(st.just(pl.Int64), st.lists(ints, min_size=N, max_size=N)),
                 st.tuples(st.just(pl.Float64), st.lists(floats, min_size=N, max_size=N)),
                 st.tuples(st.just(pl.String), st.lists(texts, min_size=N, max_size=N))]
    elif target == pl.Float64:
        wrong = [st.tuples(st.just(pl.Float64), st.lists(floats, min_size=N, max_size=N)),
                 st.tuples(st.just(pl.Int64), st.lists(ints, min_size=N, max_size=N))]
    else:
        wrong = [st.tuples(st.just(pl.Boolean), st.lists(bools, min_size=N, max_size=N)),
                 st.tuples(st.just(pl.String), st.lists(texts, min_size=N, max_size=N))]
    return valid, st.one_of(*wrong)


FIELDS = ["target", "draft", "dataset", "method", "params", "alpha", "item_id", "seed", "status", "output_tokens",
          "max_new_tokens", "draft_rounds", "accepted_tokens", "draft_tokens", "wall_time_s", "correct", "top_p",
          "finish_reason"]


@st.composite
def frames(draw):
    # Most fields valid, a few wrong: rows then do get screened, and each kind of wrongness is tried.
    wrong = set(draw(st.lists(st.sampled_from(FIELDS), max_size=3)))
    cols = {}
    for f in FIELDS:
        valid, bad = column(f)
        dtype, values = draw(bad if f in wrong else valid)
        cols[f] = pl.Series(f, values, dtype=dtype)
    return pl.DataFrame(cols)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@settings(max_examples=300, deadline=None)
@given(frames())
def test_screened_rows_validate_to_the_same_values(df):
    table, needs = screen_frame(df)
    for i, (row, need) in enumerate(zip(df.iter_rows(named=True), needs)):
        if need:
            continue
        rec = RunRecord.model_validate(row)  # must not raise
        for f, v in rec.__dict__.items():
            assert _same(table[f][i], v), (f, table[f][i], v)


def test_valid_typed_frame_needs_no_model():
    df = pl.DataFrame({"target": ["t"], "draft": ["d"], "dataset": ["x"], "method": ["strict"], "params": ["strict"],
                       "item_id": [7], "seed": [0], "status": ["ok"], "output_tokens": [10.0], "max_new_tokens": [100],
                       "draft_rounds": [3.0], "accepted_tokens": [7], "draft_tokens": [12], "wall_time_s": [1]})
    table, needs = screen_frame(df)
    assert not needs.any()
    assert table["item_id"].to_list() == ["7"] and table["output_tokens"].dtype == pl.Int64


def test_fractional_counter_goes_to_the_model():
    df = pl.DataFrame({"draft_rounds": [2.5, 2.0]})
    _, needs = screen_frame(df)
    assert needs.to_list() == [True, True]  # both also lack required fields; the first is fractional too


def test_the_property_test_screens_rows():
    """Guard against a vacuous property: the generator must produce rows the screen accepts (the screen alone on
    40 of its frames, not the whole property again: a frame with no wrong field screens all its rows)."""
    seen = {"screened": 0, "rows": 0}

    @settings(max_examples=40, deadline=None, database=None)
    @given(frames())
    def count(df):
        needs = screen_frame(df)[1]
        seen["screened"] += int((~needs).sum())
        seen["rows"] += len(needs)

    count()
    assert seen["screened"] > 5, seen
