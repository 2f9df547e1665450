"""The per-cell censoring table (censoring.csv): each group's cells from one matrix product per item set."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal

import numpy as np
import polars as pl

from lengthlens.analyses.censoring import DEFAULT_AFT_RESAMPLES, prepare_cell
from lengthlens.analyses.censoring_aft import aft_estimates_many
from lengthlens.data.runset import RunSet
from lengthlens.data.pairing import CELL_KEY, cell_units
from lengthlens.stats.distinct_product import GroupProducts
from lengthlens.stats.estimate import cells as compute_cells
from lengthlens.stats.item_sums import item_positions, map_groups
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED, DrawCache

if TYPE_CHECKING:  # pandas is imported where a frame is built: worker processes need none
    import pandas as pd


#: The paired-run columns :func:`censoring_group` reads.
CENSORING_INPUTS = ("output_tokens", "censored", "max_new_tokens", "output_tokens_star", "censored_star", "max_new_tokens_star")


def censoring_table(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
                    n_resamples_aft: int = DEFAULT_AFT_RESAMPLES, confidence_level: float = DEFAULT_CONFIDENCE,
                    draws: DrawCache | None = None, aft_ci: Literal["sandwich", "bootstrap"] = "sandwich",
                    cells_df: pd.DataFrame | None = None, units: pl.DataFrame | None = None,
                    workers: int | None = None) -> pd.DataFrame:
    """OUT/censoring.csv: per cell, censored shares, Kaplan–Meier quantiles, and censoring-aware length ratios.

    Uses the cell table's draws over each cell's own items (same seed, group and item set);
    ``n_items`` is the cell's own. Plain lambda and its interval are the cell table's
    (``cells_df``, computed with the default interval when not given). AFT intervals:
    cluster-robust sandwich from one fit (default), or ``aft_ci="bootstrap"``: refits on the
    first ``n_resamples_aft`` draws.
    """
    draws = draws if draws is not None else DrawCache(seed, n_resamples, keep=cells_df is None)
    units = cell_units(runs.paired) if units is None else units
    if cells_df is None:
        cells_df = compute_cells(runs, n_resamples=n_resamples, seed=seed, confidence_level=confidence_level,
                                 draws=draws, units=units, workers=workers).to_frame()
    opts = censoring_options(n_resamples, n_resamples_aft, aft_ci)
    parts = map_groups(runs, units, lambda df, group, items: censoring_group(df, group, len(items), draws, confidence_level, opts),
                       workers)
    return censoring_frame([r for part in parts for r in part], cells_df)


def censoring_options(n_resamples: int, n_resamples_aft: int, aft_ci: str) -> dict:
    """The AFT interval options of :func:`censoring_group` (refits on at most n_resamples draws)."""
    return {"n_resamples_aft": min(n_resamples_aft, n_resamples), "aft_ci": aft_ci}


def censoring_group(group_df: pl.DataFrame, group: tuple, n_group: int, draws: DrawCache, level: float,
                    opts: dict) -> list[dict]:
    """Censoring rows of one group's cells: one matrix product per item set for all their resampled sums."""
    return plan_censoring_group(group_df, n_group, GroupProducts(draws, group), level, opts)()


def plan_censoring_group(group_df: pl.DataFrame, n_group: int, products: GroupProducts, level: float, opts: dict
                         ) -> Callable[[], list[dict]]:
    """:func:`censoring_group` in two steps: each cell's columns are added to ``products`` now; the returned
    function, called once every analysis of the group has added its own, reads the sums and makes the rows."""
    prepared, keys, rows_of = [], [], []
    for af in group_df.partition_by(list(CELL_KEY), maintain_order=True):
        if any(af[c].null_count() for c in ("output_tokens", "censored", "output_tokens_star", "censored_star")):
            continue  # lengths or censoring not known on every run: cells.csv's `unavailable` says which
        own = tuple(sorted(set(af.get_column("item_id").to_list())))
        product = products.over(own, complete=len(own) == n_group)
        arrays = (af[c].to_numpy() for c in CENSORING_INPUTS)
        cell = prepare_cell(*arrays, product.counts, item_index=item_positions(af, {it: i for i, it in enumerate(own)}),
                            confidence_level=level)
        prepared.append(cell)
        rows_of.append((product, product.add(cell.X)))
        keys.append({k: af.row(0, named=True)[k] for k in CELL_KEY})

    def finish() -> list[dict]:
        # Sandwich AFT estimates of every cell of the group from one fit per law (refits per cell with the bootstrap)
        aft = aft_estimates_many([p.d for p in prepared], level) if opts["aft_ci"] == "sandwich" else [None] * len(prepared)
        out = []
        for j, (product, rows) in enumerate(rows_of):
            with np.errstate(divide="ignore", invalid="ignore"):  # undefined resamples are counted, not warned about
                cell = prepared[j].finish(product.sums(rows).T, aft=aft[j], **opts)
            out.append({**keys[j], **cell.to_row()})
        return out

    return finish


def censoring_frame(rows: list[dict], cells_df: pd.DataFrame) -> pd.DataFrame:
    """censoring.csv from every group's :func:`censoring_group` rows (in group order), with plain lambda's interval
    taken from the cell table (same draws and definition, the cell table's method)."""
    import pandas as pd
    cz = pd.DataFrame(rows)
    if cz.empty or cells_df.empty:
        return cz
    keys = list(CELL_KEY)
    src = cells_df[keys + ["lambda_lo", "lambda_hi"]].rename(columns={"lambda_lo": "_lo", "lambda_hi": "_hi"})
    merged = cz.merge(src, on=keys, how="left", validate="one_to_one")
    cz["lambda_plain_lo"] = merged["_lo"].to_numpy()
    cz["lambda_plain_hi"] = merged["_hi"].to_numpy()
    return cz
