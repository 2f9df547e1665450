"""The report as a PDF: the report's model (:mod:`lengthlens.report.model`) typeset by Typst (``templates/report.typ``).

The model is plain data: section titles, sentences, tables as their displayed text (formatted and
coloured by the same :class:`~lengthlens.report.columns.Col` specs as the HTML) and the figures' SVG.
Typst reads it as JSON from ``sys.inputs``, so a string from the logs is only ever text in the
document, never Typst markup. Each block type is one Typst function; this module only hands Typst
the blocks the PDF shows, with each figure's size, and compiles.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["render_pdf", "typst_model"]

#: The Typst document that typesets the model.
TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "report.typ"
_SIZE = re.compile(r'data-w="([\d.]+)" data-h="([\d.]+)"')


def _figure(b: dict[str, Any]) -> dict[str, Any]:
    """A figure block with an explicit size in its SVG (Typst needs one) and its aspect ratio."""
    svg = str(b["svg"])
    m = _SIZE.search(svg)
    w, h = (float(m.group(1)), float(m.group(2))) if m else (1.0, 0.62)
    if m:
        svg = svg[:m.start()] + f'width="{w}pt" height="{h}pt"' + svg[m.end():]
    return {"type": "figure", "svg": svg, "aspect": h / w, "number": b["number"], "caption": b["caption"]}


def _blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from lengthlens.report.model import for_medium

    return [_figure(b) if b["type"] == "figure" else
            {**b, "blocks": _blocks(b["blocks"])} if b["type"] == "collapsible" else b for b in for_medium(blocks, "pdf")]


def typst_model(model: dict[str, Any]) -> dict[str, Any]:
    """The model as report.typ reads it: the PDF's blocks only, figures sized."""
    return {**model, "sections": [{**s, "blocks": _blocks(s["blocks"])} for s in model["sections"]]}


def _fonts() -> list[str]:
    """Where the PDF's fonts are: Typst embeds its own text fonts; matplotlib's DejaVu Sans is what the figures use."""
    import matplotlib

    return [str(Path(matplotlib.get_data_path()) / "fonts" / "ttf")]


def render_pdf(model: dict[str, Any], path: Path) -> Path:
    """Typeset ``model`` (:func:`lengthlens.report.model.build`) with Typst into ``path`` (A4; wide tables on landscape pages).

    Only the fonts bundled with Typst and matplotlib are used (no system fonts), so the PDF is the same on every
    machine; ``SOURCE_DATE_EPOCH`` fixes its timestamp. Raises ``typst.TypstError`` when Typst cannot compile it.
    """
    import typst

    typst.compile(str(TEMPLATE), output=str(path), **_options(model))
    return path


def _options(model: dict[str, Any]) -> dict[str, Any]:
    """Typst's arguments besides the template and the output: the model as JSON, the fonts, the time stamp."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    data = json.dumps(typst_model(model), ensure_ascii=False, allow_nan=False)
    return {"root": str(TEMPLATE.parent), "font_paths": _fonts(), "ignore_system_fonts": True,
            "sys_inputs": {"model": data}, "timestamp": int(epoch) if epoch and epoch.isdigit() else None}
