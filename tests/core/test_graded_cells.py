"""The cell-graded rule: accuracy only on units graded on both sides; cells graded on < half their items are marked
and left out of the accuracy counts (what a grader that only judges runs cut at the budget produces)."""

from __future__ import annotations

import json

import pytest

import lengthlens as ll


def _recs(method, params, correct_of):
    out = []
    for i in range(12):
        out.append(dict(target="T", draft="D", dataset="lcb", method=method, params=params,
                        alpha=None if method == "strict" else 0.5, item_id=f"case_{i:03d}", seed=0, status="ok",
                        output_tokens=100 + i, finish_reason="stop", max_new_tokens=1000, draft_rounds=40,
                        accepted_tokens=60, draft_tokens=160, wall_time_s=1.0, correct=correct_of(i)))
    return out


def _load(tmp_path, recs):
    p = tmp_path / "runs.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return ll.load(p)


def test_partly_graded_cell_is_marked_and_left_out_of_accuracy_counts(tmp_path):
    # strict graded on every item (all right); "cactus" graded only on items 0-2 (wrong there: the runs cut at the
    # budget), "r_fuzzy" on items 0-5 (exactly half: not partial), with item 5 graded on the relaxed side only.
    recs = (_recs("strict", "strict", lambda i: True)
            + _recs("cactus", "alpha0.5", lambda i: False if i < 3 else None)
            + _recs("r_fuzzy", "alpha0.5", lambda i: i % 2 == 0 if i < 6 else None))
    runs = _load(tmp_path, recs)
    table = ll.cells(runs, n_resamples=50)
    cactus, fuzzy = table.get(method="cactus"), table.get(method="r_fuzzy")
    # cactus: 3 units graded on both sides of 12 items -> partial; its Δacc (-100 pp on 3 items) is kept but marked.
    assert (cactus.n_graded, cactus.n_graded_items, cactus.graded_partial) == (3, 3, True)
    assert cactus["accuracy_delta_pp"].point == pytest.approx(-100.0)
    assert cactus.drop_2pp is None and cactus.drop_2pp_point is None
    # r_fuzzy: 6 of 12 items graded -> not partial; accuracy on those 6 units: relaxed 3/6 right, strict 6/6.
    assert (fuzzy.n_graded, fuzzy.n_graded_items, fuzzy.graded_partial) == (6, 6, False)
    assert fuzzy["accuracy"].point == pytest.approx(3 / 6) and fuzzy["accuracy_star"].point == pytest.approx(1.0)
    assert fuzzy.drop_2pp_point is True and fuzzy.drop_2pp is not None
    t3 = ll.table3(table).set_index("method")
    # Before: cactus counted as a graded cell that dropped, so n_graded 2 and n_drop_2pp_point 2.
    assert (t3.loc["all", "n_graded"], t3.loc["all", "n_drop_2pp_point"], t3.loc["all", "n_graded_partial"]) == (1, 1, 1)
    assert (t3.loc["cactus", "n_graded"], t3.loc["cactus", "n_graded_partial"]) == (0, 1)


def test_units_graded_on_one_side_only_do_not_count(tmp_path):
    # Baseline graded on items 0-9, relaxed on items 2-11: units 2-9 are graded on both sides.
    recs = (_recs("strict", "strict", lambda i: i < 5 if i < 10 else None)
            + _recs("cactus", "alpha0.5", lambda i: True if i >= 2 else None))
    cell = ll.cells(_load(tmp_path, recs), n_resamples=50).get(method="cactus")
    assert cell.n_graded == 8 and cell.n_graded_items == 8
    # relaxed: 8/8 right; baseline on items 2-9: items 2, 3, 4 right -> 3/8.
    assert cell["accuracy"].point == pytest.approx(1.0)
    assert cell["accuracy_star"].point == pytest.approx(3 / 8)
    assert cell["accuracy_delta_pp"].point == pytest.approx(100 * 5 / 8)


def test_report_shows_graded_and_marks_partly_graded_cells(tmp_path):
    from lengthlens.report import render_html

    recs = (_recs("strict", "strict", lambda i: True)
            + _recs("cactus", "alpha0.5", lambda i: False if i < 3 else None))
    html = render_html(ll.analyse(_load(tmp_path, recs), n_resamples=50), with_figures=False)
    # the Δacc of the partly graded cell (−100.0 from 3 of 12 items): its graded share, grey italics, not the number
    assert '<td class="partial">3 of 12 items graded' in html and '<td class="partial">-100.0' not in html
    assert '<td class="partial">3</td>' in html   # its graded units
    assert ">partly</span> <span class=\"nw\">graded<" in html  # Table 3 counts it apart
    assert "graded on fewer than half its items" in html
