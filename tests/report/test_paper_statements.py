"""The paper's statements as numbers: cost per correct answer and accuracy by completion length, against oracles."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from lengthlens.analyses.accuracy_length import accuracy_by_length, wilson_interval
from lengthlens.data.pairing import cell_units

KEYS = ["target", "draft", "dataset", "method", "params", "serving"]


def test_cost_per_correct_is_rounds_and_seconds_per_correct_answer(example_analysis):
    """Against a plain loop over the paired runs: (Σ R / Σ correct) / (Σ R* / Σ correct*) over pairs graded on both sides."""
    cost = example_analysis.tables["cost_per_correct"].set_index(KEYS)
    units = cell_units(example_analysis.runs.paired, ["draft_rounds", "wall_time_s", "correct"]).to_pandas()
    graded = units[units["correct"].notna() & units["correct_star"].notna()]
    assert len(cost) == graded.groupby(KEYS).ngroups > 0
    for key, g in graded.groupby(KEYS):
        c, cs = g["correct"].astype(float).sum(), g["correct_star"].astype(float).sum()
        row = cost.loc[key]
        assert (row["correct"], row["correct_star"], row["n_runs_graded"]) == (c, cs, len(g))
        want_r = (g["draft_rounds"].sum() / c) / (g["draft_rounds_star"].sum() / cs)
        want_t = (g["wall_time_s"].sum() / c) / (g["wall_time_s_star"].sum() / cs)
        np.testing.assert_allclose([row["rounds_per_correct_ratio"], row["seconds_per_correct_ratio"]], [want_r, want_t],
                                   rtol=1e-12)
        assert row["rounds_per_correct_ratio_lo"] <= want_r <= row["rounds_per_correct_ratio_hi"]
    # Where every pair is graded, it is the rounds ratio over the accuracy ratio.
    cells = example_analysis.tables["cells"].set_index(KEYS)
    full = cells[cells["n_graded"] == cells["n_runs"]]
    both = full.join(cost, rsuffix="_c", how="inner")
    np.testing.assert_allclose(both["rounds_per_correct_ratio"],
                               both["rounds_ratio"] * both["accuracy_star"] / both["accuracy"], rtol=1e-10)


def test_wilson_interval_matches_statsmodels():
    from statsmodels.stats.proportion import proportion_confint

    for k, n in ((0, 5), (3, 10), (12, 12), (40, 97)):
        np.testing.assert_allclose(wilson_interval(k, n), proportion_confint(k, n, method="wilson"), rtol=1e-12)


def test_accuracy_by_length_counts_each_run_once_and_bins_both_arms_alike(example_analysis):
    units = cell_units(example_analysis.runs.paired, ["output_tokens", "correct", "source"])
    table = accuracy_by_length(units)
    graded = units.filter(pl.col("correct").is_not_null() & pl.col("correct_star").is_not_null())
    # Every graded relaxed run once; every graded baseline run once however many rules pair with it.
    relaxed = table[table["method"] != "strict"]
    assert relaxed["n_runs"].sum() == graded.height
    assert table.loc[table["method"] == "strict", "n_runs"].sum() == graded.select("source_star").n_unique()
    assert relaxed["n_correct"].sum() == int(graded.get_column("correct").cast(pl.Int64).sum())
    for (_t, _d, _s), panel in table.groupby(["target", "dataset", "serving"]):
        edges = panel.groupby("method")[["length_lo", "length_hi"]].apply(lambda g: tuple(g.to_numpy().ravel()))
        assert edges.nunique() == 1  # one set of bins for the panel's arms
        ok = panel["n_runs"] > 0
        assert ((panel.loc[ok, "length_median"] >= panel.loc[ok, "length_lo"])
                & (panel.loc[ok, "length_median"] <= panel.loc[ok, "length_hi"])).all()
        np.testing.assert_allclose(panel.loc[ok, "accuracy"], panel.loc[ok, "n_correct"] / panel.loc[ok, "n_runs"])


def test_accuracy_by_length_keeps_the_arms_asked_for(example_analysis):
    chosen = example_analysis.tables["alpha_selected"].rename(columns={"params_selected": "params"})
    units = cell_units(example_analysis.runs.paired, ["output_tokens", "correct", "source"])
    table = accuracy_by_length(units, chosen)
    assert set(table["method"]) - {"strict"} == set(chosen["method"])
    assert table.equals(example_analysis.tables["accuracy_length"])


@pytest.mark.parametrize("key", ["accuracy_vs_length", "cost_per_correct"])
def test_new_figures_are_in_the_report(example_analysis, key):
    from lengthlens.report import _figure_blocks

    blocks = _figure_blocks(example_analysis)
    assert key in blocks
    assert blocks[key]["caption"].startswith(("Accuracy against completion length", "Cost per correct answer"))


def test_attribution_claim_counts_the_cells(example_analysis):
    """The claim's counts from the attribution table itself: Table 3's cells whose completions grew, those whose
    share's lower limit is ≥ 0.9, and those whose share is undefined."""
    from lengthlens.analyses.tables import table3_cells
    from lengthlens.report.wording import attribution_claim

    attr = example_analysis.tables["attribution"]
    t3 = table3_cells(example_analysis.tables["cells"], "loosest")[KEYS].drop_duplicates()
    cells = attr.merge(t3, on=KEYS)
    longer = cells[cells["extra_chars"] > 0]
    n_90 = int(((longer["thinking_share_lo"] >= 0.9) & longer["thinking_share"].notna()).sum())
    undefined = int(longer["thinking_share"].isna().sum())
    claim = attribution_claim(example_analysis)
    assert claim.startswith(f"≥ 90% of the extra length is in the thinking in {n_90} of Table 3's {len(longer)} cells "
                            f"whose completions grew (of {len(cells)})")
    assert f"in {undefined} the extra length's interval holds 0" in claim
    for m, g in longer.groupby("method"):
        assert f"{m} {int((g['thinking_share_lo'] >= 0.9).sum())} of {len(g)}" in claim


def test_table4_claim_gives_accuracy_over_fired_and_all_runs(example_analysis):
    """Over all runs of the intervention arms: each forced run against the base arm's run of the same item and seed."""
    from lengthlens.report.wording import table4_claim

    t = example_analysis.runs.table.filter(pl.col("status") == "ok").to_pandas()
    forced = t[t["method"].str.endswith("_force_commit")].copy()
    forced["base_method"] = forced["method"].str.removesuffix("_force_commit")
    forced["base_params"] = forced["params"].str.replace(r"_t\d+", "", regex=True)
    base = t.rename(columns={"method": "base_method", "params": "base_params"})
    on = ["target", "draft", "dataset", "serving", "base_method", "base_params", "item_id", "seed", "turn"]
    both = forced.merge(base[[*on, "correct"]], on=on, suffixes=("", "_base"))
    graded = both[both["correct"].notna() & both["correct_base"].notna()]
    total = example_analysis.tables["table4"].iloc[-1]
    assert (total["runs"], total["n_graded_all"]) == (len(both), len(graded))
    before, after = graded["correct_base"].astype(bool).mean(), graded["correct"].astype(bool).mean()
    np.testing.assert_allclose([total["accuracy_before_all"], total["accuracy_after_all"]], [before, after])
    claim = table4_claim(example_analysis)
    assert claim.startswith(f"Forcing the thinking closed fired on {int(total['fired'])} of {len(both)} runs; on the "
                            f"{int(total['n_graded'])} graded ones correct answers went from {int(total['correct_before'])} "
                            f"to {int(total['correct_after'])}")
    assert f"accuracy {before:.1%} without the intervention and {after:.1%} with it" in claim


def test_the_claims_open_their_sections(example_analysis):
    """The attribution and Table 4 claims stand at the top of their sections, right under the intro, above the tables."""
    from lengthlens.report import model as M
    from lengthlens.report.wording import attribution_claim, table4_claim

    sections = {s["id"]: s["blocks"] for s in M.build(example_analysis, figures={})["sections"]}
    attribution = [b.get("text") for b in sections["attribution"][1:3]]
    assert attribution == [attribution_claim(example_analysis, "table3"), attribution_claim(example_analysis, "all")]
    assert sections["table4"][1] == {"type": "paragraph", "text": table4_claim(example_analysis), "muted": False,
                                     "aside": ""}
    assert sections["table4"][2]["type"] == "table"


def test_headline_says_how_many_cells_are_graded(example_analysis):
    from lengthlens.report import wording

    used = example_analysis.results["table3_cells_used"]
    used = used[~used["method"].str.endswith("_force_commit")]
    assert used["drop_2pp"].notna().all()
    assert wording.headline(example_analysis).endswith(f"All {len(used)} cells are graded.")
