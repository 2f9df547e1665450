"""Notebook reprs read like the report's tables: formatted numbers, estimate and interval in one cell, keys once."""

from __future__ import annotations

import re

import lengthlens as ll
from lengthlens.results import frame_html


def _cells(html: str) -> list[list[str]]:
    body = html.split("<tbody>")[1]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in body.split("</tr>") if "<td" in row]


def test_comparison_repr_says_its_keys_once(example_analysis):
    c = ll.compare(example_analysis.runs, {"method": "cactus_force_commit"}, {"method": "cactus"}, n_resamples=200)
    html = c._repr_html_()
    head = re.findall(r"<th>(.*?)</th>", html)
    assert not {"target", "draft", "dataset", "method", "params"} & set(head)
    assert "method cactus_force_commit" in html.split("</caption>")[0]
    rows = _cells(html)
    assert len(rows) == len(c.to_frame())
    lam = next(r for r in rows if r[0] == "lambda")
    est = c["lambda"]
    assert lam[1] == f"{est.point:.3f} [{est.low:.3f}, {est.high:.3f}]"
    assert "low" not in head and "high" not in head


def test_cell_table_repr_formats_like_the_report(example_analysis):
    html = example_analysis.cells._repr_html_()
    head = re.findall(r"<th>(.*?)</th>", html)
    assert "lambda" in head and "lambda_lo" not in head
    rows = _cells(html)
    cells = example_analysis.tables["cells"]
    i = head.index("lambda")
    r0 = cells.iloc[0]
    assert rows[0][i] == f"{r0['lambda']:.3f} [{r0['lambda_lo']:.3f}, {r0['lambda_hi']:.3f}]"
    assert all(re.fullmatch(r"[\d,]+", r[head.index("n_items")]) for r in rows)


def test_frame_html_numbers():
    import pandas as pd

    df = pd.DataFrame({"x": [1234567.0, 0.004, float("nan"), float("inf")], "accuracy_p": [0.0004, 0.2, 0.05, 1.0],
                       "n": [1500, 2, 3, 4], "ok": [True, False, True, True]})
    rows = _cells(frame_html(df))
    assert [r[0] for r in rows] == ["1,234,567", "0.004", "–", "∞"]
    assert [r[1] for r in rows] == ["&lt;0.001", "0.200", "0.050", "1.000"]
    assert [r[2] for r in rows] == ["1,500", "2", "3", "4"] and [r[3] for r in rows] == ["yes", "no", "yes", "yes"]
