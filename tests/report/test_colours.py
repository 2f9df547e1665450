"""The cell table colours each estimate against its own reference, and the legend states every rule it applies."""

from __future__ import annotations

from lengthlens.report.columns import REFERENCE_COLUMNS, cell_columns, colour_rules
from lengthlens.report.wording import cells_note, colour_legend


def _css(name: str):
    return next(c.css for c in cell_columns() if c.name == name)


def test_l_bar_is_coloured_against_the_baselines_l_bar():
    css = _css("l_bar")
    # Spec-Bench's SpS: ℓ̄ 0.44 over a baseline with ℓ̄* = 0 (plain decoding accepts nothing): a rise, not a loss.
    assert css({"l_bar": 0.44, "l_bar_lo": 0.40, "l_bar_hi": 0.48, "l_bar_star": 0.0}) == "win"
    # Two tokens a round under a baseline's three: a loss, though above one token.
    assert css({"l_bar": 2.0, "l_bar_lo": 1.8, "l_bar_hi": 2.2, "l_bar_star": 3.0}) == "loss"
    assert css({"l_bar": 2.0, "l_bar_lo": 1.8, "l_bar_hi": 3.2, "l_bar_star": 3.0}) == ""  # holds ℓ̄*
    assert css({"l_bar": 2.0, "l_bar_lo": 1.8, "l_bar_hi": 2.2}) == ""  # no ℓ̄* logged: no colour
    # The ratios keep 1 as their reference.
    assert _css("lambda")({"lambda": 1.3, "lambda_lo": 1.1, "lambda_hi": 1.5}) == "loss"
    assert _css("gain")({"gain": 1.3, "gain_lo": 1.1, "gain_hi": 1.5}) == "win"


def test_the_legend_states_each_rule_once_as_applied():
    rules = colour_rules()
    legend = colour_legend(rules)
    assert ("ℓ̄", "higher", "ℓ̄*") in rules and REFERENCE_COLUMNS["l_bar"] == "l_bar_star"
    for label, _better, ref in rules:
        assert legend.count(f" {label} against {ref}") == 1, label  # " gain", not "λ/gain"
    assert "ℓ̄ against 1" not in legend and "loss flag" in legend and "Grey italics" in legend
    assert cells_note({"ci": "studentized", "confidence_level": 0.95}, rules).count(legend) == 1
