"""One pass over the groups for every resampled analysis of a report: cells, censoring and attribution.

Each (target, draft, dataset) group's draws are made once, as float64, used by the three
analyses while one worker holds the group, and dropped: no count matrix is kept for the whole
report and none is converted twice. Groups run on several threads (:mod:`lengthlens.stats.parallel`).
The numbers are those of :func:`lengthlens.cells`, :func:`censoring_table` and :func:`attribution`
called one after another: each group's results depend only on its runs and the seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import polars as pl

from lengthlens.analyses.attribution import Attribution, attribution_group, attribution_result, attribution_units
from lengthlens.analyses.censoring_table import censoring_frame, censoring_group, censoring_options
from lengthlens.data.loading import RunSet
from lengthlens.stats.estimate import cell_table, check_ci, group_cells, unit_quantities
from lengthlens.stats.item_sums import all_group_items, group_frames
from lengthlens.stats.parallel import map_ordered
from lengthlens.stats.resample import DrawCache
from lengthlens.stats.results import CellTable


@dataclass(frozen=True)
class GroupPass:
    """What one pass over the groups computed: the cell table, censoring rows and attribution rows (in group order).

    Censoring and attribution are finished with :meth:`censoring` and :meth:`attribution`, which need
    the cell table's frame and Table 3's cells.
    """

    cells: CellTable
    censoring_rows: list[dict]
    attribution_rows: list[dict]
    channels: tuple[pl.DataFrame, list[str], list[tuple[str, str, str]]]

    def censoring(self, cells_df: pd.DataFrame) -> pd.DataFrame:
        return censoring_frame(self.censoring_rows, cells_df)

    def attribution(self, table3_cells: pd.DataFrame | None) -> Attribution:
        return attribution_result(self.attribution_rows, self.channels, table3_cells)


def group_pass(runs: RunSet, channels: tuple[pl.DataFrame, list[str], list[tuple[str, str, str]]], *, n_resamples: int,
               seed: int, ci: str, confidence_level: float, n_resamples_aft: int, aft_ci: str,
               workers: int | None = None) -> GroupPass:
    """Cells, censoring rows and attribution rows of every group, each group's draws made once.

    ``channels``: :func:`lengthlens.analyses.attribution.channel_units` (the runs paired once).
    """
    check_ci(ci)
    units = channels[0]
    draws = DrawCache(seed, n_resamples, keep=False)
    all_items = all_group_items(runs)
    quantities = group_frames(unit_quantities(units))
    by_group = dict(group_frames(units))
    by_group_attr = dict(group_frames(attribution_units(units)))
    opts = censoring_options(n_resamples, n_resamples_aft, aft_ci)

    def one(item: tuple[tuple, pl.DataFrame]) -> tuple:
        group, q = item
        items = all_items[group]
        try:
            cells_part = group_cells(q, group, items, draws, ci, confidence_level)
            cens = censoring_group(by_group[group], group, len(items), draws, confidence_level, opts)
            attr = (attribution_group(by_group_attr[group], group, len(items), draws, confidence_level)
                    if group in by_group_attr else [])
        finally:
            draws.release()  # this group's matrices: the worker's next group draws its own
        return cells_part, cens, attr

    parts = map_ordered(one, quantities, workers, cost=lambda g: g[1].height)
    table = cell_table([p[0] for p in parts], n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level)
    return GroupPass(cells=table, censoring_rows=[r for p in parts for r in p[1]],
                     attribution_rows=[r for p in parts for r in p[2]], channels=channels)
