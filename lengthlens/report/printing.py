"""The report's HTML as WeasyPrint prints it: lean markup, fixed table layout, big per-cell tables left to the CSV.

WeasyPrint's time grows with every element it styles and lays out; at paper scale (360 cells) the
per-cell tables are ~20,000 cells and most of the PDF's time. :func:`print_html` rewrites the HTML
report (which keeps every table) into what the PDF needs:

* a per-cell secondary table (censoring, attribution, ...) of more than :data:`PRINT_MAX_ROWS` rows is
  replaced by a sentence that names its rows, its columns and where they are (its CSV and report.html);
  the Cells table, Table 3, Table 4 and the summaries are always printed in full;
* every table gets ``table-layout: fixed`` with a ``<colgroup>`` whose widths follow each column's
  longest text (WeasyPrint's automatic layout measures every cell twice);
* what does nothing on paper goes: interval spans (grey only), tooltips, header word spans;
  inline SVG figures become ``<img>`` (parsed once by WeasyPrint's SVG reader instead of as HTML), their
  styles presentation attributes and their empty groups gone (:func:`lean_svg`: the same pixels).
"""

from __future__ import annotations

import base64
import functools
import html as _html
import re
import unicodedata
from pathlib import Path
from typing import Any

__all__ = ["PRINT_MAX_ROWS", "column_widths", "fixed_layout", "lean_svg", "lean_tables", "print_html", "printer", "text_width"]

#: Rows above which a marked per-cell table is left out of the PDF. The example's tables have at most 48 rows
#: and the study's real logs 120 cells and 126 arms: they print in full; a paper-scale report's 360 cells do not
#: (each 100 rows of a per-cell table cost WeasyPrint about a second).
PRINT_MAX_ROWS = 150

#: A table marked in the template as ``<!--table:NAME-->…<!--/table:NAME-->`` may be left out of the PDF.
_MARKED = re.compile(r"<!--table:([a-z0-9_]+)-->(.*?)<!--/table:\1-->", re.S)
_TABLE = re.compile(r"<table\b([^>]*)>(.*?)</table>", re.S)
_ROW = re.compile(r"<tr\b([^>]*)>(.*?)</tr>", re.S)
_CELL = re.compile(r"<t([dh])\b([^>]*)>(.*?)</t\1>", re.S)
_TAG = re.compile(r"<[^>]+>")
_CI_SPAN = re.compile(r"<span class=ci>(.*?)</span>")
_NW_SPAN = re.compile(r'<span class="nw">([^<]*)</span>')
_TITLE = re.compile(r' title="[^"]*"')
_SVG = re.compile(r"<svg\b.*?</svg>", re.S)

# Advance widths of DejaVu Sans, in thousandths of an em, of the printable ASCII characters (32-126); others
# count as 0.8 em (combining marks as 0). Bold text is ~10 % wider.
_ASCII_WIDTHS = (
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636, 636, 636, 636, 636, 636,
    636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656, 557, 863, 748, 787,
    603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500, 500, 613, 635, 550, 635, 615, 352, 635,
    634, 278, 278, 579, 278, 974, 634, 612, 635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838)
_BOLD = 1.1


def text_width(s: str, bold: bool = False) -> float:
    """Estimated width of ``s`` in em in DejaVu Sans (the report's font)."""
    w = 0.0
    for ch in s:
        o = ord(ch)
        if 32 <= o < 127:
            w += _ASCII_WIDTHS[o - 32] / 1000
        elif not unicodedata.combining(ch):
            w += 0.8
    return w * (_BOLD if bold else 1.0)


def _text(cell_html: str) -> str:
    return _html.unescape(_TAG.sub("", cell_html)).strip()


def column_widths(header: list[str], rows: list[list[float]], *, cap: float = 24.0, pad: float = 0.9) -> list[float]:
    """Each column's width in em: its widest cell (cells do not wrap), at least its header's longest word (headers wrap).

    ``rows`` holds each cell's text width in em (:func:`text_width`); a column of long text is capped at ``cap`` em
    (its cells wrap in print), ``pad`` em is the cell's padding.
    """
    widths = []
    for j, head in enumerate(header):
        words = [text_width(w, bold=True) for w in head.split()] or [0.0]
        data = [r[j] for r in rows if j < len(r)] or [0.0]
        widths.append(min(max(max(words), max(data)), cap) + pad)
    return widths


def _table_widths(table_body: str) -> tuple[tuple[str, ...], list[float]] | None:
    """One table's header texts and column widths in em (:func:`column_widths`); None for an irregular table."""
    header, rows = None, []
    for attrs, row in _ROW.findall(table_body):
        cells = _CELL.findall(row)
        if any("colspan" in a for _, a, _ in cells):
            continue  # a group's header row spans the table
        if header is None:
            header = [_text(c) for _, _, c in cells]
            continue
        if len(cells) != len(header):
            return None
        bold_row = "total" in attrs
        rows.append([text_width(_text(c), bold=bold_row or "loss" in a) for _, a, c in cells])
    if not header:
        return None
    return tuple(header), column_widths(header, rows)


#: Widest table (em at its own font size) given its natural width; wider ones take the whole line.
_FULL_WIDTH_EM = 60.0


def fixed_layout(html: str) -> str:
    """Give every regular table a <colgroup> and ``table-layout: fixed`` (see :func:`column_widths`).

    Tables with the same header (the blocks of one grouped table, e.g. the Cells table's target–draft pairs) get
    the same widths, the widest of each column, so that their columns line up from one block to the next.
    """
    found = [_table_widths(m.group(2)) for m in _TABLE.finditer(html)]
    shared: dict[tuple[str, ...], list[float]] = {}
    for got in found:
        if got is not None:
            head, widths = got
            shared[head] = [max(a, b) for a, b in zip(shared.get(head, widths), widths)]
    it = iter(found)

    def one(m: re.Match) -> str:
        got = next(it)
        if got is None:
            return m.group(0)
        widths = shared[got[0]]
        total = sum(widths)
        cols = "".join(f'<col style="width:{100 * w / total:.2f}%">' for w in widths)
        width = "100%" if total >= _FULL_WIDTH_EM else f"{total * 1.08:.1f}em"
        return f'<table{m.group(1)} style="table-layout:fixed;width:{width}"><colgroup>{cols}</colgroup>{m.group(2)}</table>'

    return _TABLE.sub(one, html)


def _count_rows(block: str) -> int:
    """Data rows of a table block (a group's header row and the column header are not counted)."""
    return sum(1 for attrs, row in _ROW.findall(block) if "<td" in row and 'class="sub"' not in attrs)


def _left_out(name: str, block: str) -> str:
    """The sentence that stands in the PDF for a table left out: its rows, its columns, and where they are."""
    n = _count_rows(block)
    head = _ROW.search(block)
    labels = [_text(c) for _, _, c in _CELL.findall(head.group(2))] if head else []
    cols = f" Its columns: {_html.escape(', '.join(labels))}." if labels else ""
    return (f'<p class="leftout">The {n:,} rows of this table are too many to print: the PDF leaves them out. '
            f"Every row is in <b>{_html.escape(name)}.csv</b> and in this section of <b>report.html</b>.{cols}</p>")


_SECTION = re.compile(r'<section id="([a-z0-9_]+)" class="([^"]*)">(.*?)</section>', re.S)


def lean_tables(html: str, max_rows: int = PRINT_MAX_ROWS) -> str:
    """Replace each marked table of more than ``max_rows`` rows by a sentence saying where its rows are.

    The sentence goes to the table's ``<!--leftout:NAME-->`` mark (under its section's intro) when there is one,
    else where the table was; a section left with text only loses its own (landscape) page.
    """
    left: dict[str, str] = {}

    def one(m: re.Match) -> str:
        name, block = m.group(1), m.group(2)
        if _count_rows(block) <= max_rows:
            return m.group(0)
        left[name] = _left_out(name, block)
        return "" if f"<!--leftout:{name}-->" in html else left.pop(name)

    html = _MARKED.sub(one, html)
    for name, sentence in left.items():
        html = html.replace(f"<!--leftout:{name}-->", sentence, 1)

    def text_only(m: re.Match) -> str:
        sid, cls, body = m.groups()
        if 'class="leftout"' not in body or "<table" in body or "<figure" in body:
            return m.group(0)
        rest = " ".join(c for c in cls.split() if c not in ("major", "wide"))
        return f'<section id="{sid}" class="{rest}">{body}</section>'

    return _SECTION.sub(text_only, html)


_SVG_NS = "http://www.w3.org/2000/svg"
_UNIVERSAL_RULE = re.compile(r"\s*\*\s*\{([^{}]*)\}\s*")
_SEMICOLON_INSIDE = re.compile(r"\([^)]*;")


def _declarations(text: str) -> dict[str, str] | None:
    """``a: b; c: d`` as {a: b, c: d}; None when it holds what a plain split would misread (``!important``, quotes
    or brackets around a ``;``)."""
    if "!" in text or _SEMICOLON_INSIDE.search(text) or text.count("'") % 2 or text.count('"') % 2:
        return None
    out = {}
    for part in text.split(";"):
        name, colon, value = part.partition(":")
        if colon:
            out[name.strip()] = value.strip()
        elif part.strip():
            return None
    return out


def lean_svg(svg: str) -> str:
    """A matplotlib SVG as WeasyPrint draws it faster and the same to the pixel: style attributes become presentation
    attributes, the one universal CSS rule is written onto every element, and attribute-less groups and metadata go.

    WeasyPrint parses every ``style`` attribute with its CSS tokenizer and cascades every node: about a fifth of the
    profiled time drawing the paper-scale report's figures (which draw about a tenth faster lean). Its cascade copies a ``style`` declaration onto the node's
    attributes after the style sheet's rules and before inheritance to children, so ``{**rule, **style}`` as
    attributes is what it computes. Anything else (another rule, ``!important``, an unparsable SVG) is left as is.
    """
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(svg)
    except ET.ParseError:
        return svg
    rule: dict[str, str] = {}
    for parent in list(root.iter()):
        for child in list(parent):
            tag = child.tag.rpartition("}")[2]
            if tag == "metadata":
                parent.remove(child)
            elif tag == "style":
                m = _UNIVERSAL_RULE.fullmatch(child.text or "")
                decl = _declarations(m.group(1)) if m else None
                if decl is None:
                    return svg
                rule.update(decl)
                parent.remove(child)
    styles = []
    for el in root.iter():
        decl = _declarations(el.get("style", ""))
        if decl is None:
            return svg
        styles.append((el, decl))
    for el, decl in styles:
        el.attrib.pop("style", None)
        for name, value in {**rule, **decl}.items():
            el.set(name, value)

    def flatten(el: ET.Element) -> None:
        kept = []
        for child in list(el):
            flatten(child)
            kept.extend(list(child) if child.tag == f"{{{_SVG_NS}}}g" and not child.attrib else [child])
        el[:] = kept

    flatten(root)
    ET.register_namespace("", _SVG_NS)
    ET.register_namespace("xlink", "http://www.w3.org/1999/xlink")
    return ET.tostring(root, encoding="unicode")


def _svg_to_img(m: re.Match) -> str:
    """An inline SVG as an <img> with a data: URI (inline, every SVG node would go through the HTML cascade), lean."""
    svg = re.sub(r'data-w="([\d.]+)" data-h="([\d.]+)"', r'width="\1pt" height="\2pt"', m.group(0), count=1)
    return f'<img class="fig" alt="" src="data:image/svg+xml;base64,{base64.b64encode(lean_svg(svg).encode()).decode()}">'


def print_html(html: str, max_rows: int = PRINT_MAX_ROWS) -> str:
    """The report's HTML as the PDF prints it (see the module's docstring)."""
    html = _SVG.sub(_svg_to_img, html)  # first: the rest then neither scans nor touches the figures
    html = lean_tables(html, max_rows)
    html = _CI_SPAN.sub(r"\1", html)
    html = _NW_SPAN.sub(r"\1", html)
    html = _TITLE.sub("", html)
    return fixed_layout(html)


# WeasyPrint's user-agent stylesheet styles six pseudo-elements of *every* element (::marker, footnote and note
# calls and markers), and WeasyPrint computes each of those styles one by one: ~40,000 at paper scale, about a
# tenth of the PDF's time. The report has no footnotes and its only markers are list items' and <summary>'s.
_UA_PSEUDO = re.compile(r"^::(marker|footnote-call|footnote-marker|note-call|note-marker|note-callback) \{", re.M)


@functools.cache
def printer() -> Any:
    """``weasyprint.HTML``, whose user-agent stylesheet gives those pseudo-elements to ``li`` and ``summary`` only.

    Falls back to plain ``weasyprint.HTML`` when a WeasyPrint release lays its stylesheet or its hook out differently.
    """
    import weasyprint
    from weasyprint import CSS, HTML

    ua = Path(weasyprint.__file__).parent / "css" / "html5_ua.css"
    if not ua.is_file() or not callable(getattr(HTML, "_ua_stylesheets", None)):
        return HTML
    text, n = _UA_PSEUDO.subn(r"li::\1, summary::\1 {", ua.read_text(encoding="utf-8"))
    if n != 6:
        return HTML
    sheet = CSS(string=text, base_url=str(ua))

    class PrintHTML(HTML):
        def _ua_stylesheets(self, *args: Any, **kwargs: Any) -> list:
            sheets = list(super()._ua_stylesheets(*args, **kwargs))
            return [sheet, *sheets[1:]]

    return PrintHTML
