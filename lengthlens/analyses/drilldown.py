"""Per-item drill-down: which items drive a cell's length ratio λ and its accuracy change.

Per cell and item (its runs summed over seeds and turns): L = Σ output tokens of the relaxed runs,
L* the baseline's, the item's own λ, the cell's λ with the item left out (Σ L − Lᵢ) / (Σ L* − L*ᵢ),
and the change in correct runs (graded pairs). The items listed are the ``top`` that move λ most
(|λ − λ without|) and the ``top`` whose correct count changed most. Cells come most influenced first
(the largest |λ − λ without| of any of their items), their items by how much they move λ; each item
counts its runs cut at the token budget on both sides (their length is a lower bound, so is its λ's part).
"""

from __future__ import annotations

import pandas as pd
import polars as pl

from lengthlens.analyses.outputs import Column, Context, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.schema import ARM_KEY
from lengthlens.data.serving import with_serving

__all__ = ["DRILLDOWN_TOP", "DrilldownReport", "item_drivers"]

#: Items listed per cell for each reason (λ, accuracy).
DRILLDOWN_TOP = 3


def item_drivers(units: pl.DataFrame, top: int = DRILLDOWN_TOP) -> pd.DataFrame:
    """drilldown.csv: per cell the items that move λ most and those whose correct count changed most.

    Parameters
    ----------
    units : paired runs, one row per (relaxed run, baseline run) with the baseline's fields suffixed ``_star``
        (:func:`lengthlens.data.pairing.cell_units`).
    top : items per cell for each reason.

    Returns
    -------
    pandas.DataFrame
        ARM_KEY, item_id, n_runs, L, L_star, lambda_item, lambda_without, lambda_shift, correct_change,
        n_censored and n_censored_star (runs of the item cut at the budget, relaxed and baseline), driver (``λ``,
        ``accuracy`` or ``λ, accuracy``) and cell_influence (the cell's largest |lambda_shift|): cells most
        influenced first, each cell's items by |lambda_shift|, largest first.

    Examples
    --------
    >>> import polars as pl
    >>> u = pl.DataFrame({"target": "t", "draft": "d", "dataset": "x", "method": "m", "params": "p", "serving": "",
    ...                   "item_id": ["a", "b", "c"], "output_tokens": [300, 100, 100],
    ...                   "output_tokens_star": [100, 100, 100], "correct": [False, True, True],
    ...                   "correct_star": [True, True, True]})
    >>> item_drivers(u, top=1)[["item_id", "lambda_without", "correct_change", "driver"]].values.tolist()
    [['a', 1.0, -1, 'λ, accuracy']]
    """
    cols = [*ARM_KEY, "item_id", "n_runs", "L", "L_star", "lambda_item", "lambda_without", "lambda_shift",
            "correct_change", "n_censored", "n_censored_star", "driver", "cell_influence"]
    if units.is_empty() or "output_tokens" not in units.columns:
        return pd.DataFrame(columns=cols)
    units = with_serving(units)  # paired runs built by hand have no serving condition: ""
    graded = (pl.col("correct").is_not_null() & pl.col("correct_star").is_not_null()
              if "correct" in units.columns and "correct_star" in units.columns else pl.lit(False))
    change = (pl.when(graded).then(pl.col("correct").cast(pl.Int64) - pl.col("correct_star").cast(pl.Int64)).otherwise(0)
              if "correct" in units.columns and "correct_star" in units.columns else pl.lit(0))
    cut = [(pl.col(c).fill_null(False).cast(pl.Int64).sum() if c in units.columns else pl.lit(0, dtype=pl.Int64)).alias(f"n_{c}")
           for c in ("censored", "censored_star")]
    items = (units.group_by([*ARM_KEY, "item_id"])
             .agg(pl.len().alias("n_runs"), pl.col("output_tokens").cast(pl.Float64).sum().alias("L"),
                  pl.col("output_tokens_star").cast(pl.Float64).sum().alias("L_star"), change.sum().alias("correct_change"),
                  *cut))
    cell = pl.col("L").sum().over(ARM_KEY), pl.col("L_star").sum().over(ARM_KEY)
    items = items.with_columns(
        (pl.col("L") / pl.col("L_star")).alias("lambda_item"),
        ((cell[0] - pl.col("L")) / (cell[1] - pl.col("L_star"))).alias("lambda_without"),
        (cell[0] / cell[1]).alias("_lambda"),
    ).with_columns((pl.col("_lambda") - pl.col("lambda_without")).alias("lambda_shift"))
    # Ranks within the cell: ties broken by item id, so the listing is the same in every run.
    items = items.sort([*ARM_KEY, "item_id"]).with_columns(
        pl.col("lambda_shift").abs().fill_nan(None).rank("ordinal", descending=True).over(ARM_KEY).alias("_rl"),
        pl.col("correct_change").abs().rank("ordinal", descending=True).over(ARM_KEY).alias("_ra"))
    by_lambda = pl.col("_rl") <= top
    by_acc = (pl.col("_ra") <= top) & (pl.col("correct_change") != 0)
    out = items.filter(by_lambda | by_acc).with_columns(
        pl.when(by_lambda & by_acc).then(pl.lit("λ, accuracy")).when(by_lambda).then(pl.lit("λ")).otherwise(pl.lit("accuracy"))
        .alias("driver"))
    # Most influenced cells first (ties by name), then each cell's items by how much they move λ.
    out = out.with_columns(pl.col("lambda_shift").abs().fill_nan(None).max().over(ARM_KEY).fill_null(0.0)
                           .alias("cell_influence"))
    out = out.sort(["cell_influence", *ARM_KEY, "_rl"], descending=[True] + [False] * (len(ARM_KEY) + 1),
                   maintain_order=True).with_columns(pl.col("correct_change").cast(pl.Int64))
    return out.select(cols).to_pandas()


class DrilldownReport(ReportAnalysis):
    """drilldown.csv: per cell, the items that move its λ most and those whose correct count changed most."""

    name = "drill-down"
    stage = "lossless check, method pairs"
    reads = ("output_tokens", "correct")
    outputs = Outputs(
        tables=(Table("drilldown", columns=(
            Column("item_id", "the item", label="item", fmt="text"),
            Column("n_runs", "its paired runs", label="runs", fmt="int"),
            Column("L", "Σ output tokens of its relaxed runs", label="L", fmt="int"),
            Column("L_star", "the same of its baseline runs", label="L*", fmt="int"),
            Column("lambda_item", "its own λ", label="item λ", fmt="f2"),
            Column("lambda_without", "the cell's λ with this item left out", label="λ without it", fmt="f3"),
            Column("lambda_shift", "the cell's λ minus λ without it", label="λ − λ without", fmt="f3"),
            Column("correct_change", "correct relaxed runs minus correct baseline runs (graded pairs)", label="Δ correct",
                   fmt="int", tone="loss_if_negative"),
            Column("n_censored", "its relaxed runs cut at the token budget (their length is a lower bound)", label="cut",
                   fmt="int", tone="loss_if_positive"),
            Column("n_censored_star", "its baseline runs cut at the token budget", label="cut*", fmt="int"),
            Column("driver", "why listed: λ, accuracy or both", label="why listed", fmt="text"),
            Column("cell_influence", "the cell's largest absolute λ − λ without over its items (cells most influenced first)"),
            *keys(also=("target", "draft", "dataset", "method", "params", "serving"))),
            per="(cell, item) among the items driving it; cells most influenced first", written="when there are cells"),),
        sections=(Section("drilldown", "Per-item drill-down", order=85, landscape=False, new_page=False),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        cells_df = ctx.tables["cells"]
        units = ctx.units
        drivers = item_drivers(units.filter(pl.col("method").is_in(list(cells_df["method"].unique()))) if not cells_df.empty
                               else units.head(0))
        return {} if drivers.empty else {"drilldown": drivers}
