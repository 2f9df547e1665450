"""Print the report's PDF over several cores: its major sections laid out in parallel, the pages put back together.

WeasyPrint lays out and draws a document on one core, and the PDF was half of a paper-scale report's time. A
section of class ``major`` starts a page (``break-before: page``), so each run of sections from one major
section to the next (a *part*) lays out alone exactly as it does in the whole document. The parts are printed
in forked processes (:func:`lengthlens.report.parallel.run_forked`), without footers; what depends on the whole
document is done afterwards, from the parts' page counts:

* a *skeleton* is printed: the document's start (title, contents, provenance: everything before the first major
  section), then one blank page per part page, of the same size. Its footers ("page X of Y") are the whole
  document's; its contents list gets the parts' page numbers as text (``target-counter`` cannot see them);
* the pages are put together with pypdf: the skeleton's first pages, then each part's pages with the skeleton's
  blank page (its footer) drawn over them;
* the named destinations, the outline (bookmarks) and the links are the whole document's: WeasyPrint keeps a
  link only when its target is in the same document, so a part writes a link to another part's anchor as a
  link to a placeholder URI, which the merge turns back into a link to the named destination.

The result has the serial print's pages, text, footers, outline, destinations and links (tests compare them).
Anything this cannot do exactly (no ``fork``, one worker, one part, a page size the skeleton does not reproduce,
markup it cannot split, an error in the merge) prints the serial way instead.
"""

from __future__ import annotations

import io
import logging
import re
from types import SimpleNamespace
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Part", "print_pdf", "split_parts"]

log = logging.getLogger(__name__)

#: A major section: it starts a page, so the document can be cut in front of it.
_MAJOR = re.compile(r'<section id="[^"]*" class="[^"]*\bmajor\b[^"]*">')
_BODY = re.compile(r"<body\b[^>]*>")
_TOC_LINK = re.compile(r'(<nav class="toc"[^>]*>)(.*?)(</nav>)', re.S)
_HREF = re.compile(r'<a href="#([^"]+)"')
_ID = re.compile(r'\bid="([^"]+)"')

#: The parts print without anything in the page margins (the report's footers count pages): the skeleton's are
#: drawn over them.
_MARGIN_BOXES = ("top-left-corner", "top-left", "top-center", "top-right", "top-right-corner", "right-top",
                 "right-middle", "right-bottom", "bottom-right-corner", "bottom-right", "bottom-center", "bottom-left",
                 "bottom-left-corner", "left-bottom", "left-middle", "left-top")
_NO_FOOTERS = "@page { " + " ".join(f"@{box} {{ content: none }}" for box in _MARGIN_BOXES) + " }"
#: The contents list of the skeleton: page numbers of other parts' sections as text (``data-page``).
_TOC_NUMBERS = "@media print { nav.toc a[data-page]::after { content: leader('.') attr(data-page) } }"
#: Rough cost (seconds) of a part: a table cell, a byte of markup (mostly the figures' base64 SVG), and the
#: skeleton and merge that follow in this process; fitted to a paper-scale report's parts, only to balance the
#: parts over the workers.
_CELL_COST, _BYTE_COST, _PART_COST, _MERGE_COST = 1.4e-3, 2.9e-6, 0.05, 2.0


@dataclass(frozen=True)
class Part:
    """One part of the document as a worker printed it: its PDF and what the merge needs of its pages."""

    index: int
    pdf: bytes
    sizes: list[tuple[float, float]]  # each page's width and height, CSS px
    anchors: list[dict[str, tuple[float, float]]]  # each page's anchors, CSS px
    bookmarks: list[list[Any]]  # each page's WeasyPrint bookmarks


def split_parts(html: str) -> tuple[str, str, list[str]] | None:
    """``(head, start, parts)``: the HTML up to ``<body>``, the body before the first major section, and one body
    fragment per major section (with what follows it up to the next); None when it cannot be cut that way.

    Each cut must be at the top level of the body: every fragment opens and closes as many sections, divs and
    details as it holds.
    """
    body = _BODY.search(html)
    end = html.rfind("</body>")
    if body is None or end < 0:
        return None
    cuts = [m.start() for m in _MAJOR.finditer(html, body.end(), end)]
    if not cuts:
        return None
    bounds = [body.end(), *cuts, end]
    pieces = [html[a:b] for a, b in zip(bounds, bounds[1:])]
    for piece in pieces:
        for tag in ("section", "div", "details", "table", "nav"):
            if len(re.findall(rf"<{tag}\b", piece)) != piece.count(f"</{tag}>"):
                return None
    return html[:body.end()], pieces[0], pieces[1:]


def _document(head: str, body: str, style: str = "") -> str:
    """A whole HTML document from the report's head and a body fragment; ``style`` goes last in the head, so that
    its rules win over the report's own of the same specificity (stylesheets given to ``render()`` are the user's,
    which the report's author rules override)."""
    if style:
        at = head.rfind("</head>")
        head = f"{head[:at]}<style>{style}</style>{head[at:]}" if at >= 0 else f"<style>{style}</style>{head}"
    return f"{head}{body}</body></html>"


def _weight(fragment: str) -> float:
    return _PART_COST + _CELL_COST * (fragment.count("<td") + fragment.count("<th")) + _BYTE_COST * len(fragment)


#: A link to an anchor in another part is written as a link to this URI scheme + the anchor's name (WeasyPrint
#: drops a link to an anchor it does not have); the merge makes it a link to the named destination again.
_ELSEWHERE = "lengthlens-elsewhere:"


def _links_elsewhere(document: Any) -> None:
    """Write every internal link whose target is not in ``document`` as a link to :data:`_ELSEWHERE` + the target."""
    own = {name for page in document.pages for name in page.anchors}
    for page in document.pages:
        page.links = [(("external", _ELSEWHERE + target, *rest) if kind == "internal" and target not in own
                       else (kind, target, *rest)) for kind, target, *rest in page.links]


def _page_anchors(page: Any) -> dict[str, tuple[float, float]]:
    """A WeasyPrint page's anchors as ``{name: (x, y)}`` in CSS px (what a Part carries across processes)."""
    return {name: (a[0], a[1]) for name, a in page.anchors.items()}


def _print_part(head: str, base_url: str, index: int, fragment: str) -> Part:
    from lengthlens.report.printing import printer

    document = printer()(string=_document(head, fragment, _NO_FOOTERS), base_url=base_url).render()
    anchors = [_page_anchors(page) for page in document.pages]
    _links_elsewhere(document)
    return Part(index, document.write_pdf(), [(p.width, p.height) for p in document.pages], anchors,
                [list(p.bookmarks) for p in document.pages])


def _print_parts(job: tuple[str, str, list[tuple[int, str]]]) -> list[Part]:
    head, base_url, fragments = job
    return [_print_part(head, base_url, i, fragment) for i, fragment in fragments]


def _start_ids(start: str) -> set[str]:
    """The ids of the start's own elements that its contents list links to."""
    toc = _TOC_LINK.search(start)
    return set(_HREF.findall(toc.group(2))) & set(_ID.findall(start)) if toc else set()


def _skeleton_body(start: str, numbers: dict[str, int], sizes: list[tuple[float, float]]) -> str:
    """The document's start with the contents list's numbers as text, then one blank page per part page."""

    def toc(m: re.Match) -> str:
        links = _HREF.sub(lambda a: f'{a.group(0)} data-page="{numbers[a.group(1)]}"' if a.group(1) in numbers
                          else a.group(0), m.group(2))
        return m.group(1) + links + m.group(3)

    blanks = "".join(f'<div class="ll-blank" style="break-before:page{";page:wide" if w > h else ""}"'
                     f'{" id=ll-blank-start" if i == 0 else ""}></div>' for i, (w, h) in enumerate(sizes))
    return _TOC_LINK.sub(toc, start) + blanks


def print_pdf(html: str, path: Path, *, base_url: str, workers: int, timeout: float = 600.0) -> bool:
    """Print ``html`` (already :func:`~lengthlens.report.printing.print_html`'s) to ``path`` over ``workers``
    processes; False, writing nothing, when it cannot be done exactly (the caller prints it serially).

    ``timeout``: seconds to wait for a worker; a part not delivered in time is printed here.
    """
    from lengthlens.report.parallel import balanced_parts, can_fork, run_forked

    split = split_parts(html)
    if split is None or workers < 2 or not can_fork() or html.count("target-counter(") > 1:
        return False
    head, start, fragments = split
    if len(fragments) < 2:
        return False
    # The skeleton and the merge run here after this process's parts: a pinned job of their weight keeps them in mind.
    jobs = [("merge", None, _MERGE_COST, True)] + [(str(i), None, _weight(f), False) for i, f in enumerate(fragments)]
    groups = [[int(key) for key, *_ in part if key != "merge"] for part in balanced_parts(jobs, workers)]
    work = [(head, base_url, [(i, fragments[i]) for i in group]) for group in groups]
    done = run_forked(work, _print_parts, timeout)
    parts = {p.index: p for k in range(len(work)) for p in (done[k] if k in done else _print_parts(work[k]))}
    ordered = [parts[i] for i in range(len(fragments))]
    try:
        merged = _merge(head, start, ordered, base_url)
    except Exception as err:  # noqa: BLE001 - e.g. a pypdf release that changed its API: print it the serial way
        log.warning("printing the PDF in parts failed (%s: %s); printing it in one process", type(err).__name__, err)
        return False
    if merged is None:
        return False
    path.write_bytes(merged)
    return True


def _merge(head: str, start: str, parts: list[Part], base_url: str) -> bytes | None:
    """The whole PDF from the parts (see the module's docstring); None when the skeleton's pages do not match."""
    from lengthlens.report.printing import printer

    sizes = [s for p in parts for s in p.sizes]
    page_of: dict[str, int] = {}  # anchor -> its first page among the parts' pages (from 0)
    for i, anchors in enumerate(a for part in parts for a in part.anchors):
        for name in anchors:
            page_of.setdefault(name, i)
    # The contents' numbers depend on the start's own pages: how many there are (1 for the report) and where the
    # start's own sections are. Guess, print, and print again with what the print showed (a page number's digits do
    # not move the start's page breaks, so the second print agrees with itself).
    pages_before, start_page = 1, dict.fromkeys(_start_ids(start), 1)
    for _attempt in range(3):
        numbers = {name: pages_before + i + 1 for name, i in page_of.items()} | start_page
        skeleton = printer()(string=_document(head, _skeleton_body(start, numbers, sizes), _TOC_NUMBERS),
                             base_url=base_url).render()
        first_blank = next((i for i, p in enumerate(skeleton.pages) if "ll-blank-start" in p.anchors), None)
        if first_blank is None:
            return None
        seen: dict[str, int] = {}  # an element over several pages has its anchor on each: the first counts
        for i, page in enumerate(skeleton.pages[:first_blank]):
            for name in page.anchors:
                if name in start_page:
                    seen.setdefault(name, i + 1)
        if first_blank == pages_before and seen == start_page:
            break  # (an id on no page, e.g. not printed, leaves ``start_page`` and keeps its target-counter)
        pages_before, start_page = first_blank, seen
    else:
        return None
    if len(skeleton.pages) != pages_before + len(sizes) or any(
            abs(p.width - w) > 0.01 or abs(p.height - h) > 0.01 for p, (w, h) in zip(skeleton.pages[pages_before:], sizes)):
        return None
    start_anchors = [{name: xy for name, xy in _page_anchors(p).items() if name != "ll-blank-start"}
                     for p in skeleton.pages[:pages_before]]
    _links_elsewhere(skeleton)
    skeleton_pdf = skeleton.write_pdf()
    return _assemble(skeleton, skeleton_pdf, pages_before, start_anchors, parts)


#: PDF points per CSS px, as WeasyPrint writes them.
_SCALE = 0.75


def _assemble(skeleton: Any, skeleton_pdf: bytes, pages_before: int, start_anchors: list[dict[str, tuple[float, float]]],
              parts: list[Part]) -> bytes:
    """Put the pages together with pypdf and write the whole document's destinations, links and outline."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import NameObject

    writer = PdfWriter()
    stamps = PdfReader(io.BytesIO(skeleton_pdf))
    for page in stamps.pages[:pages_before]:
        writer.add_page(page)
    k = pages_before
    for part in parts:
        for page in PdfReader(io.BytesIO(part.pdf)).pages:
            added = writer.add_page(page)
            added.merge_page(stamps.pages[k], over=True)
            added.compress_content_streams()  # the merge leaves the page's content uncompressed
            k += 1
    # Every page's anchors, bookmarks and height in the merged order, as WeasyPrint's own Document would have them.
    heights = [p.height for p in skeleton.pages]
    anchors = start_anchors + [a for part in parts for a in part.anchors]
    bookmarks = [list(p.bookmarks) for p in skeleton.pages[:pages_before]] + [b for part in parts for b in part.bookmarks]
    names = _named_destinations(writer, anchors, heights)
    _relink(writer, names)
    _outline(writer, bookmarks, heights)
    writer.add_metadata({key: value for key, value in (stamps.metadata or {}).items()})
    if "/Lang" in stamps.trailer["/Root"]:
        writer.root_object[NameObject("/Lang")] = stamps.trailer["/Root"]["/Lang"]
    writer.compress_identical_objects()  # drops the pages' replaced contents (and the parts' shared duplicates)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def _named_destinations(writer: Any, anchors: list[dict[str, tuple[float, float]]], heights: list[float]) -> set[str]:
    """Write every anchor's named destination (its first page, as WeasyPrint does); return their names."""
    from pypdf.generic import ArrayObject, DictionaryObject, FloatObject, NameObject, NumberObject, TextStringObject

    names: dict[str, ArrayObject] = {}
    for i, page_anchors in enumerate(anchors):
        for name, (x, y) in page_anchors.items():
            if name not in names:
                names[name] = ArrayObject([writer.pages[i].indirect_reference, NameObject("/XYZ"), FloatObject(x * _SCALE),
                                           FloatObject((heights[i] - y) * _SCALE), NumberObject(0)])
    if names:
        flat = ArrayObject()
        for name in sorted(names):
            flat += [TextStringObject(name), names[name]]
        writer.root_object[NameObject("/Names")] = DictionaryObject(
            {NameObject("/Dests"): DictionaryObject({NameObject("/Names"): flat})})
    return set(names)


def _relink(writer: Any, names: set[str]) -> None:
    """Links to another part's anchors (:data:`_ELSEWHERE`) become links to their named destinations again."""
    from pypdf.generic import ArrayObject, NameObject, TextStringObject

    for page in writer.pages:
        annotations = page.get("/Annots")
        if annotations is None:
            continue
        kept = ArrayObject()
        for ref in annotations.get_object():
            annotation = ref.get_object()
            uri = str(annotation.get("/A", {}).get("/URI", ""))
            if uri.startswith(_ELSEWHERE):
                name = uri[len(_ELSEWHERE):]
                if name not in names:  # an anchor in no part: one process drops the link, and says so
                    logging.getLogger("weasyprint").error("No anchor #%s for internal URI reference", name)
                    continue
                del annotation["/A"]
                annotation[NameObject("/Dest")] = TextStringObject(name)
            kept.append(ref)
        page[NameObject("/Annots")] = kept


def _outline(writer: Any, bookmarks: list[list[Any]], heights: list[float]) -> None:
    """The PDF outline WeasyPrint would write for pages with these bookmarks (its own tree-making, its destinations)."""
    from pypdf.generic import Fit
    from weasyprint.document import Document

    # what Document.make_bookmark_tree reads of a document: its pages' bookmarks and heights
    document = SimpleNamespace(pages=[SimpleNamespace(bookmarks=b, height=h) for b, h in zip(bookmarks, heights)])

    def add(subtrees: list, parent: Any) -> None:
        for label, (page, x, y), children, state in subtrees:
            item = writer.add_outline_item(title=label, page_number=page, parent=parent, fit=Fit.xyz(x, y, 0),
                                          is_open=state != "closed")
            add(children, item)

    add(Document.make_bookmark_tree(document, _SCALE, transform_pages=True), None)  # type: ignore[arg-type]

