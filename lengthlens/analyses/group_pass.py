"""One pass over the groups for every resampled analysis of a report: cells, censoring and attribution.

Each (target, draft, dataset) group is one job: its draws are made once, as float64, used by the
three analyses and dropped, so no count matrix is kept for the whole report and none is drawn or
converted twice; the three analyses' resampled sums come from one product per item set
(:mod:`lengthlens.stats.distinct_product`). A job needs only its group's paired runs (the columns below) and the group's
items, so jobs run on threads or in worker processes (:mod:`lengthlens.stats.parallel`). The
numbers are those of :func:`lengthlens.cells`, :func:`censoring_table` and :func:`attribution`
called one after another (a sum of non-integer values may differ in its last bit, see that
module): each group's results depend only on its runs and the seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from lengthlens.analyses import WORKER_MODULES  # noqa: F401 (re-exported)
from lengthlens.analyses.attribution import Attribution, attribution_result, attribution_units, plan_attribution_group
from lengthlens.analyses.censoring_table import CENSORING_INPUTS, censoring_frame, censoring_options, plan_censoring_group
from lengthlens.data.runset import RunSet
from lengthlens.data.pairing import CELL_KEY
from lengthlens.data.schema import UNIT_KEY
from lengthlens.stats.distinct_product import GroupProducts
from lengthlens.stats.estimate import QUANTITY_INPUTS, cell_table, check_ci, plan_group_cells, unit_quantities
from lengthlens.stats.item_sums import all_group_items, group_frames
from lengthlens.stats.parallel import map_ordered
from lengthlens.stats.resample import DrawCache
from lengthlens.stats.results import CellTable

if TYPE_CHECKING:  # pandas is imported where a frame is built: worker processes need none
    import pandas as pd

#: The paired-run columns a group's job reads (what is sent to a worker process).
_CHANNEL_INPUTS = ("thinking_chars", "answer_chars", "thinking_chars_star", "answer_chars_star")
PASS_COLUMNS = tuple(dict.fromkeys((*CELL_KEY, *UNIT_KEY, *QUANTITY_INPUTS, *CENSORING_INPUTS, *_CHANNEL_INPUTS)))
#: Fewer paired runs than this are computed on threads even when processes are asked for: sending the
#: jobs would cost more than the GIL does.
PROCESS_MIN_RUNS = 20_000


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
               workers: int | None = None, processes: bool = False,
               meanwhile: Callable[[], None] | None = None) -> GroupPass:
    """Cells, censoring rows and attribution rows of every group, each group's draws made once.

    ``channels``: :func:`lengthlens.analyses.attribution.channel_units` (the runs paired once).
    ``workers``/``processes``: see :func:`lengthlens.stats.parallel.map_ordered` (processes only from
    :data:`PROCESS_MIN_RUNS` paired runs on); ``meanwhile``: called in this thread while the groups are computed.
    """
    check_ci(ci)
    units = channels[0]
    all_items = all_group_items(runs)
    settings = {"n_resamples": n_resamples, "seed": seed, "ci": ci, "level": confidence_level,
                "censoring": censoring_options(n_resamples, n_resamples_aft, aft_ci)}
    jobs = [(group, frame, all_items[group], settings)
            for group, frame in group_frames(units.select(PASS_COLUMNS))]
    parts = map_ordered(group_job, jobs, workers, cost=lambda job: job[1].height,
                        processes=processes and units.height >= PROCESS_MIN_RUNS, meanwhile=meanwhile)
    table = cell_table([p[0] for p in parts], n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level)
    return GroupPass(cells=table, censoring_rows=[r for p in parts for r in p[1]],
                     attribution_rows=[r for p in parts for r in p[2]], channels=channels)


def group_job(job: tuple[tuple, pl.DataFrame, list[str], dict]) -> tuple:
    """One group's cells (with accuracy-change replicates), censoring rows and attribution rows.

    ``job``: (group names, the group's paired runs, the group's items, settings).
    """
    group, units, items, s = job
    # Every analysis adds its columns first, then each reads its sums: one product per item set for all three
    products = GroupProducts(DrawCache(s["seed"], s["n_resamples"], keep=False), group)
    cells_part = plan_group_cells(unit_quantities(units), items, products, s["ci"], s["level"])
    cens = plan_censoring_group(units, len(items), products, s["level"], s["censoring"])
    attr_units = attribution_units(units)
    attr = plan_attribution_group(attr_units, len(items), products, s["level"]) if attr_units.height else list
    return cells_part(), cens(), attr()
