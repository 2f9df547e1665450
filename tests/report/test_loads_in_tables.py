"""Runs under several serving loads: every per-cell table of the report shows the load, in numeric order."""

import pytest

from lengthlens.data.serving import serving_sort_key
from lengthlens.report import model as M
from lengthlens.report.columns import by_load

N_RESAMPLES = 60


@pytest.fixture(scope="module")
def serving_model(tmp_path_factory):
    import lengthlens as ll
    from lengthlens.data.schema import POLARS_SCHEMA
    from lengthlens.synth.serving import loads, serving_example, simulate_serving

    p = tmp_path_factory.mktemp("serving") / "runs.jsonl"
    simulate_serving(serving_example(20), loads((1, 4, 16, 64)), seed=1).select(POLARS_SCHEMA.names()).write_ndjson(p)
    analysis = ll.analyse(ll.load(p), n_resamples=N_RESAMPLES)
    return analysis, M.build(analysis, figures={})


def _tables(blocks, where=""):
    for b in blocks:
        if b["type"] == "table":
            yield where, b
        elif b["type"] == "collapsible":
            yield from _tables(b["blocks"], where + "/" + b["summary"])


def _loads(table):
    """The serving column's values down the table, a list per run of rows between header rows (datasets)."""
    at = [c["label"] for c in table["columns"]].index("serving")
    runs = [[]]
    for r in table["rows"]:
        if r["kind"] == "group":
            runs.append([])
        elif r["kind"] == "row":
            runs[-1].append(r["cells"][at][0])
    return [r for r in runs if r]


def test_every_per_cell_table_shows_the_load_in_numeric_order(serving_model):
    analysis, model = serving_model
    seen = set()
    for section in model["sections"]:
        for where, t in _tables(section["blocks"], section["id"]):
            labels = [c["label"] for c in t["columns"]]
            if section["id"] in ("drilldown",):  # one block per cell: the load is in the block's summary
                assert any(load in where for load in ("c=1", "c=4", "c=16", "c=64")), where
                continue
            assert "serving" in labels, (where, labels)
            seen.add(section["id"])
            if section["id"] == "serving":
                continue  # each arm's curve along the load: c=1 … c=64 per arm
            for run in _loads(t):
                loads = [x for x in run if x != "all"]
                firsts = list(dict.fromkeys(loads))
                assert firsts == sorted(firsts, key=serving_sort_key), (where, run)
    assert {"decision", "table3", "cells", "censoring", "attribution", "cost_per_correct", "arms"} <= seen


def test_per_rule_counts_and_lines_keep_loads_apart(serving_model):
    """The verdicts and the attribution summary count each load's cells alone; the headline, the verdict lines and
    the attribution claim say one line per load, lightest first."""
    from lengthlens.report import wording

    analysis, _model = serving_model
    order = ["c=1", "c=4", "c=16", "c=64"]
    cells = analysis.tables["cells"]
    chosen = analysis.results["table3_cells"]
    for name, frame in (("verdicts", analysis.tables["verdicts"]), ("attribution_summary", analysis.tables["attribution_summary"])):
        assert set(frame["serving"]) == set(order), name
        for load, g in frame[(frame["method"] != "all") & (frame["target"] == "all")].groupby("serving"):
            scope = g[g["scope"] == "all"]
            # every cell of the rule under that load, and none from another load
            for _, r in scope.iterrows():
                assert r["n_cells"] == ((cells["serving"] == load) & (cells["method"] == r["method"])
                                        & ~cells["method"].str.endswith("_force_commit")).sum(), (name, load, r["method"])
    lines = wording.headline(analysis).splitlines()
    assert lines[0].startswith(f"Across {len(chosen)} cells under 4 serving conditions")
    assert [ln.split(":")[0] for ln in lines[1:5]] == order and lines[5].endswith("All 8 cells are graded.")
    for load, ln in zip(order, lines[1:5]):
        n = int(((chosen["serving"] == load) & ~chosen["method"].str.endswith("_force_commit")).sum())
        assert ln.startswith(f"{load}: {n} cells, "), ln
    verdict_lines = [s for tg, _d, _m, s in wording.verdict_sentences(analysis) if tg == "all"]
    for method in sorted(set(analysis.tables["verdicts"]["method"])):
        mine = [s for s in verdict_lines if s.startswith(f"{method} at ")]
        assert [s.split(" at ")[1].split(",")[0] for s in mine] == order, mine
    assert _model["cards"] == []  # the four pooled numbers would pool the loads
    claim = wording.attribution_claim(analysis).splitlines()
    assert [ln.split(":")[0] for ln in claim] == [f"At {c}" for c in order]


def test_the_cell_table_lists_loads_1_4_16_64(serving_model):
    _analysis, model = serving_model
    cells = next(s for s in model["sections"] if s["id"] == "cells")
    (where, t), *_ = list(_tables(cells["blocks"], "cells"))
    run = _loads(t)[0]
    assert list(dict.fromkeys(run)) == ["c=1", "c=4", "c=16", "c=64"]


def test_by_load_keeps_each_datasets_rows_together():
    import pandas as pd

    d = pd.DataFrame({"dataset": ["a", "a", "a", "b", "b"], "method": ["x", "y", "x", "x", "x"],
                      "serving": ["c=16", "c=16", "c=4", "c=64", "c=2"]})
    out = by_load(d)
    assert out[["dataset", "method", "serving"]].values.tolist() == [
        ["a", "x", "c=4"], ["a", "x", "c=16"], ["a", "y", "c=16"], ["b", "x", "c=2"], ["b", "x", "c=64"]]
    one = d.assign(serving="c=1")
    assert by_load(one) is one
