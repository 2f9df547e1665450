"""The HTML's wide tables keep their key columns in sight at 1,400 px: scrolled sideways to their last column, the
cell tables and Table 3 still show which row is which (rule, params, serving), measured in headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil

from .helpers import chromium_dom, chromium_screenshot, keep_artifact

#: Opens every table, scrolls each wide one in the given sections to its right end, then records where its key
#: headers and its last header are against the scrolling box, in CSS pixels.
PROBE = """<script>
window.addEventListener("load", function () {
  toggleAll(true);
  setTimeout(function () {
    var out = [];
    document.querySelectorAll(%s).forEach(function (w) {
      var t = w.querySelector("table"), head = t.tHead.rows[0].cells;
      w.scrollLeft = w.scrollWidth;
      var box = w.getBoundingClientRect(), end = head[head.length - 1].getBoundingClientRect();
      out.push({scrolls: w.scrollWidth > w.clientWidth, box: [box.left, box.right], last: [end.left, end.right],
        keys: Array.from(head).filter(function (c) { return c.classList.contains("k"); }).map(function (c) {
          var r = c.getBoundingClientRect(); return [c.textContent, r.left, r.right]; })});
    });
    document.body.setAttribute("data-probe", JSON.stringify(out));
    // For the screenshot: the probed tables at the top of the page, as they were measured.
    document.querySelectorAll("body > *:not(section), section").forEach(function (e) {
      if (!e.querySelector(%s) && e.tagName !== "SCRIPT") e.style.display = "none"; });
  }, 200);
});
</script></body>"""


def probe(report, tmp_path, sections=("cells", "table3"), width=1400):
    """Where the key columns of ``sections``' tables are when each table is scrolled to its last column."""
    page = tmp_path / "report.html"
    shutil.copy(report / "report.html", page)
    sel = json.dumps(", ".join(f"section#{s} .scroll" for s in sections))
    page.write_text(page.read_text().replace("</body>", PROBE % (sel, sel), 1))
    dom = chromium_dom(page, width)
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, "the probe did not run"
    shot = tmp_path / f"key-columns-{'-'.join(sections)}-{width}.png"
    chromium_screenshot(page, shot, width, 1000)
    keep_artifact(shot)
    return json.loads(html.unescape(found.group(1)))


def test_key_columns_stay_in_sight_at_1400px(example_report, tmp_path):
    tables = probe(example_report, tmp_path, ("cells",)) + probe(example_report, tmp_path, ("table3",))
    # The test means something only when some table is wider than the window and scrolls.
    assert len(tables) >= 3 and any(t["scrolls"] for t in tables)
    for t in tables:
        left, right = t["box"]
        assert 0 <= left and right <= 1400
        assert [k[0] for k in t["keys"]][:1] == ["rule"], t["keys"]
        for label, k_left, k_right in t["keys"]:
            assert left - 0.5 <= k_left and k_right <= right + 0.5, (label, t)
        # Scrolled to its end: the last column is in sight, to the right of the key columns, not under them.
        assert t["last"][1] <= right + 0.5 and t["last"][0] >= t["keys"][-1][2] - 0.5, t
