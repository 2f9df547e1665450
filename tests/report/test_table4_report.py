"""Table 4 in the report: every column on the page, target–draft once per pair, arms that never fired in one line,
and a sentence where the logs have no force-commit arm."""

from __future__ import annotations

import json
import re
import subprocess

import lengthlens as ll
from lengthlens.analyses.intervention import table4
from lengthlens.report import render_html

from .helpers import need

OPEN = "<think>" + "x" * 300


def _rec(method, params, item, L, correct, *, text, budget=100, target="T", draft="D"):
    return dict(target=target, draft=draft, dataset="aime", method=method, params=params,
                alpha=None if method == "strict" else 0.3, item_id=f"case_{item:03d}", seed=0, status="ok",
                output_tokens=L, finish_reason="length" if L >= budget else "stop", max_new_tokens=budget,
                draft_rounds=max(1, L // 4), accepted_tokens=L - max(1, L // 4), draft_tokens=4 * max(1, L // 4),
                wall_time_s=L / 100, correct=correct, text=text)


def _runs(tmp_path, *, interventions=True):
    recs = []
    for item in range(6):
        recs.append(_rec("strict", "strict", item, 50, True, text="<think>x</think>a"))
        # cactus reaches the budget with its thinking open on even items; r_fuzzy never gets near the threshold.
        recs.append(_rec("cactus", "alpha0.3", item, 100 if item % 2 == 0 else 40, item % 2 == 1, text=OPEN))
        recs.append(_rec("r_fuzzy", "alpha0.3", item, 30, True, text=OPEN))
        if interventions:
            recs.append(_rec("cactus_force_commit", "alpha0.3_t60", item, 70, True, text="<think>x</think>a"))
            recs.append(_rec("r_fuzzy_force_commit", "alpha0.3_t60", item, 30, True, text="<think>x</think>a"))
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs))
    return ll.load(f)


def test_table4_html_pairs_once_and_never_fired_arms_in_a_line(tmp_path):
    runs = _runs(tmp_path)
    t4 = table4(runs)
    assert list(t4["fired"]) == [3, 0, 3]  # cactus fired on items 0, 2, 4; r_fuzzy never; total
    page = render_html(ll.analyse(runs, n_resamples=50), with_figures=False)
    html = re.search(r'<section id="table4".*?</section>', page, re.S).group(0)
    body = html.split("</table>")[0]
    # One header row for the pair, one row for the arm that fired, the total; target and draft are not columns.
    assert body.count('<tr class="sub">') == 1 and "T ← D" in body
    assert body.count("<tr>") == 2 and body.count('<tr class="total">') == 1
    assert ">target<" not in body and ">draft<" not in body and ">T<" not in body
    assert "r_fuzzy" not in body and ">cactus<" in body
    header = [re.sub(r"<[^>]+>", "", th) for th in re.findall(r"<th[^>]*>(.*?)</th>", body.split("</thead>")[0])]
    assert header == ["dataset", "rule", "params", "fired", "graded", "correct before", "correct after", "wrong → right",
                      "right → wrong", "still capped", "paired p", "acc. all runs: base", "forced"]
    tail = html.split("</table>")[1]
    assert "1 of 2 intervention arms never fired" in tail and "T aime r_fuzzy alpha0.3_t60" in tail


def test_report_says_when_there_is_no_force_commit_arm(tmp_path):
    runs = _runs(tmp_path, interventions=False)
    html = render_html(ll.analyse(runs, n_resamples=50), with_figures=False)
    section = re.search(r'<section id="table4".*?</section>', html, re.S)
    assert section is not None and "no force-commit arm" in section.group(0)
    assert '<a href="#table4">' in html  # listed in the contents too


def test_table4_fits_the_pdf_page(example_report):
    pdftotext = need("pdftotext")
    out = subprocess.run([pdftotext, "-bbox", str(example_report / "report.pdf"), "-"], capture_output=True, text=True,
                         check=True).stdout
    pages = re.findall(r'<page width="([\d.]+)" height="[\d.]+">(.*?)</page>', out, re.S)
    hits = [(float(w), body) for w, body in pages if "McNemar" in body and "capped" in body]
    assert hits, "Table 4's last columns are missing from the PDF"
    for width, body in hits:
        xs = [float(x) for x in re.findall(r'xMax="([\d.]+)"[^>]*>(?:McNemar|capped)<', body)]
        assert xs and max(xs) <= width, f"Table 4 runs off the page: x {max(xs)} > page width {width}"


def test_table3_fits_the_pdf_page(example_report):
    """Table 3 has grown (time/round, two drop rules, Holm, mean Δacc): it prints on a landscape page, whole."""
    pdftotext = need("pdftotext")
    out = subprocess.run([pdftotext, "-bbox", str(example_report / "report.pdf"), "-"], capture_output=True, text=True,
                         check=True).stdout
    pages = re.findall(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', out, re.S)
    hits = [(float(w), float(h), body) for w, h, body in pages if ">Table</word>" in body and ">acceptance</word>" in body
            and "T/T*≥1" in body]
    assert hits, "Table 3's last column is missing from the PDF"
    width, height, body = hits[0]
    assert width > height  # landscape
    xs = [float(x) for x in re.findall(r'xMax="([\d.]+)"[^>]*>T/T\*≥1<', body)]
    assert xs and max(xs) <= width


def test_methods_definitions_fit_the_pdf_page(example_report):
    """Every column of the definitions table is on the page (a long formula once pushed 'meaning' off it)."""
    pdftotext = need("pdftotext")
    out = subprocess.run([pdftotext, "-bbox", str(example_report / "report.pdf"), "-"], capture_output=True, text=True,
                         check=True).stdout
    pages = re.findall(r'<page width="([\d.]+)" height="[\d.]+">(.*?)</page>', out, re.S)
    hits = [(float(w), body) for w, body in pages if ">Definitions</word>" in body]
    assert hits
    width, body = hits[0]
    xs = [float(x) for x in re.findall(r'xMax="([\d.]+)"[^>]*>meaning<', body)]
    assert xs and max(xs) <= width


def test_table4_summary_line_names_the_test_its_p_comes_from():
    from lengthlens.stats.signflip import accuracy_test_label

    assert accuracy_test_label("mcnemar_exact") == "McNemar"
    assert accuracy_test_label("sign_flip_exact") == "sign-flip"
    assert accuracy_test_label("sign_flip_monte_carlo") == "sign-flip"
