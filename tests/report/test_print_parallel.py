"""The PDF printed in parts over several processes is the PDF one process prints: pages, text, footers, outline,
named destinations, links and metadata, compared through pypdf; and every case it cannot do prints serially."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import pytest
from pypdf import PdfReader

from lengthlens.report import print_parallel as PP
from lengthlens.report import render_pdf
from lengthlens.report.parallel import can_fork
from lengthlens.report.printing import print_html, printer

fork_only = pytest.mark.skipif(not can_fork(), reason="needs the fork start method")


def pdf_facts(pdf: bytes) -> dict:
    """What a reader sees of a PDF, independent of how its objects are numbered or its fonts subset."""
    r = PdfReader(io.BytesIO(pdf))

    def outline(items, depth):
        out = []
        for it in items:
            if isinstance(it, list):
                out += outline(it, depth + 1)
            else:
                out.append((it.title, depth, r.get_destination_page_number(it), round(float(it.left), 2),
                            round(float(it.top), 2)))
        return out

    links = []
    for i, page in enumerate(r.pages):
        for a in page.get("/Annots") or []:
            a = a.get_object()
            links.append((i, tuple(round(float(x), 2) for x in a["/Rect"]), str(a.get("/Dest")),
                          str(a.get("/A", {}).get("/URI"))))
    return {
        "sizes": [tuple(round(float(x), 2) for x in p.mediabox) for p in r.pages],
        "text": [p.extract_text() for p in r.pages],
        "outline": outline(r.outline, 0),
        "dests": {k: (r.get_destination_page_number(v), round(float(v.left), 2), round(float(v.top), 2))
                  for k, v in r.named_destinations.items()},
        "links": sorted(links),
        "info": {k: v for k, v in (r.metadata or {}).items() if k not in ("/CreationDate", "/ModDate")},
    }


def _serial(html: str, tmp_path: Path) -> bytes:
    # base_url: the report's folder, as render_pdf gives it (WeasyPrint then reads "#id" as a link inside the document)
    return printer()(string=html, base_url=str(tmp_path)).write_pdf()


def _parallel(html: str, tmp_path: Path, workers: int = 2) -> bytes:
    path = tmp_path / f"parallel-{workers}.pdf"
    assert PP.print_pdf(html, path, base_url=str(tmp_path), workers=workers) is True  # the parallel path, not the fallback
    return path.read_bytes()


@pytest.fixture(scope="module")
def example_print(example_report) -> str:
    return print_html((example_report / "report.html").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def example_serial(example_print, tmp_path_factory) -> dict:
    return pdf_facts(_serial(example_print, tmp_path_factory.mktemp("serial")))


@fork_only
@pytest.mark.parametrize("workers", [2, 3])
def test_the_example_prints_the_same_in_parts(example_print, example_serial, tmp_path, workers):
    facts = pdf_facts(_parallel(example_print, tmp_path, workers))
    assert len(facts["sizes"]) == len(example_serial["sizes"]) >= 6
    for key in example_serial:
        assert facts[key] == example_serial[key], key
    # the footers and the contents list's numbers are there to compare: "page 3 of N" on page 3
    n = len(facts["sizes"])
    assert all(f"page {i + 1} of {n}" in text for i, text in enumerate(facts["text"]))
    assert example_serial["outline"] and example_serial["dests"]
    assert {d for _p, _r, d, _u in example_serial["links"]} >= {"provenance", "cells", "methods"}  # links inside


def _head() -> str:
    css = (Path(PP.__file__).parents[1] / "templates" / "report.css").read_text(encoding="utf-8")
    return f"<!doctype html><html lang=en><head><meta charset=utf-8><title>parts</title><style>{css}</style></head><body>"


def _section(sid: str, title: str, paragraphs: int, *, major: bool = True, wide: bool = False, extra: str = "") -> str:
    cls = " ".join(c for c, on in (("major", major), ("wide", wide)) if on)
    text = "".join(f"<p id={sid}-p{i}>{title} paragraph {i}: " + "words of text " * 60 + "</p>" for i in range(paragraphs))
    return f'<section id="{sid}" class="{cls}"><h2>{title}</h2>{extra}{text}<h3>{title}, more</h3></section>'


def _document_with_a_long_start() -> str:
    """A start of two pages with its own section in the contents, portrait and landscape parts, links between parts
    (back to the start, forward, to a paragraph) and one to an id that is nowhere (WeasyPrint drops it)."""
    toc = ('<nav class="toc" id="contents"><h2>Contents</h2><ol>'
           + "".join(f'<li><a href="#{s}">{s}</a></li>' for s in ("intro", "one", "two", "three", "four"))
           + "</ol></nav>")
    body = ("<header><h1>Parts</h1></header>" + toc + _section("intro", "Intro", 14, major=False)
            + _section("one", "One", 3, extra='<p><a href="#three-p1">forward</a> <a href="#intro">back</a></p>')
            + _section("two", "Two", 9, wide=True, extra='<p><a href="#nowhere">gone</a></p>')
            + _section("two-b", "Two b", 1, major=False)
            + _section("three", "Three", 2, extra='<p><a href="#one">back to one</a> <a href="https://example.org/">out</a></p>')
            + _section("four", "Four", 1, wide=True))
    return _head() + body + "</body></html>"


@fork_only
def test_a_two_page_start_cross_links_and_page_sizes_print_the_same(tmp_path):
    html = _document_with_a_long_start()
    serial = pdf_facts(_serial(html, tmp_path))
    head, start, parts = PP.split_parts(html)
    assert len(parts) == 4 and "Intro" in start
    skeleton_pages = sum(1 for i, t in enumerate(serial["text"]) if "Intro" in t and "One" not in t)
    assert skeleton_pages >= 2  # the start is longer than a page: the contents' numbers need the second print
    facts = pdf_facts(_parallel(html, tmp_path))
    for key in serial:
        assert facts[key] == serial[key], key
    wide = [s for s in serial["sizes"] if s[2] > s[3]]
    assert wide and len(wide) < len(serial["sizes"])  # landscape and portrait pages both
    dests = {d for _p, _r, d, _u in serial["links"]}
    assert dests >= {"three-p1", "intro", "one"} and "nowhere" not in dests  # one process drops a link to nowhere
    assert ("https://example.org/" in {u for *_x, u in serial["links"]})


def test_split_parts_cuts_in_front_of_major_sections_only():
    html = _document_with_a_long_start()
    head, start, parts = PP.split_parts(html)
    assert head.endswith("<body>") and start.startswith("<header>")
    assert all(p.startswith(f'<section id="{s}" class="major') for p, s in zip(parts, ("one", "two", "three", "four")))
    assert "two-b" in parts[1]  # a section that is not major stays with the one before it
    assert head + start + "".join(parts) + "</body></html>" == html
    assert PP.split_parts(_head() + _section("a", "A", 1, major=False) + "</body></html>") is None  # nothing to cut
    nested = _head() + "<div>" + _section("a", "A", 1) + _section("b", "B", 1) + "</div></body></html>"
    assert PP.split_parts(nested) is None  # a cut inside a div would break the markup


def test_one_worker_or_one_part_prints_serially(tmp_path):
    html = _document_with_a_long_start()
    assert PP.print_pdf(html, tmp_path / "a.pdf", base_url=str(tmp_path), workers=1) is False
    one_part = _head() + "<h1>x</h1>" + _section("a", "A", 1) + "</body></html>"
    assert PP.print_pdf(one_part, tmp_path / "b.pdf", base_url=str(tmp_path), workers=4) is False
    assert not (tmp_path / "a.pdf").exists() and not (tmp_path / "b.pdf").exists()


@fork_only
def test_a_worker_that_dies_leaves_its_parts_to_this_process(tmp_path, monkeypatch):
    html = _document_with_a_long_start()
    serial = pdf_facts(_serial(html, tmp_path))
    parent, real = os.getpid(), PP._print_part

    def dies(*args, **kwargs):
        if os.getpid() != parent:
            os._exit(3)
        return real(*args, **kwargs)

    monkeypatch.setattr(PP, "_print_part", dies)
    assert pdf_facts(_parallel(html, tmp_path, workers=3)) == serial


@fork_only
def test_what_cannot_be_merged_exactly_prints_serially(tmp_path, monkeypatch, caplog):
    html = _document_with_a_long_start()
    serial = pdf_facts(_serial(html, tmp_path))
    # a skeleton whose blank pages are missing: no merge, nothing written, render_pdf prints in one process
    monkeypatch.setattr(PP, "_skeleton_body", lambda start, numbers, sizes: start)
    assert PP.print_pdf(html, tmp_path / "a.pdf", base_url=str(tmp_path), workers=2) is False
    assert not (tmp_path / "a.pdf").exists()
    monkeypatch.undo()

    def broken(*_a, **_k):
        raise TypeError("an API that changed")

    monkeypatch.setattr(PP, "_assemble", broken)
    with caplog.at_level(logging.WARNING, logger=PP.__name__):
        assert PP.print_pdf(html, tmp_path / "b.pdf", base_url=str(tmp_path), workers=2) is False
    assert "an API that changed" in caplog.text and not (tmp_path / "b.pdf").exists()
    pdf = render_pdf(html, tmp_path / "c.pdf", max_rows=10_000, workers=2)
    assert pdf_facts(pdf.read_bytes()) == serial
