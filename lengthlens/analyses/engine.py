"""The engine of every resampled analysis: groups of paired runs as numpy arrays, one driver, one execution.

A :class:`Group` is the paired runs of one (target, draft, dataset) with the items they are
resampled over; it is the only place where polars becomes numpy. An analysis (:class:`Analysis`)
says which paired-run fields it reads and, per cell, which item columns it wants resampled and
which statistics of their sums it wants estimated (:class:`Plan`); it turns each cell's results
into rows and the rows into its table. The driver (:func:`run`) draws each group's counts once
(per item set: a cell on a subset of the items draws its own), multiplies every column of every
analysis of that item set in one count-matrix product, estimates every statistic with the same
interval code (:func:`lengthlens.stats.intervals.estimates`), and hands each analysis its columns by
name.

Groups are independent (their draws depend only on the seed and the group's names), so they run
one after another or in worker processes (:mod:`lengthlens.execution`) with the same numbers, bit
for bit. No analysis knows how the groups are executed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np
import polars as pl

from lengthlens.data.pairing import CELL_KEY, cell_units
from lengthlens.data.runset import RunSet
from lengthlens.data.schema import GROUP_KEY, STRICT, UNIT_KEY
from lengthlens.execution import map_ordered, scratch
from lengthlens.stats.intervals import CI_METHODS, Resampled, Statistic, estimates, moment_columns
from lengthlens.stats.metrics import Sums
from lengthlens.stats.products import ColumnProduct
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED, draw_counts
from lengthlens.results import Estimate

if TYPE_CHECKING:
    from lengthlens.execution import Pool

__all__ = ["Analysis", "CellRuns", "CellResult", "Group", "Plan", "Settings", "group_items", "groups_of", "pooled_group",
           "resample_plan", "run", "run_on"]

Row = TypeVar("Row")
Out = TypeVar("Out")

#: Paired runs below which worker processes are not started: sending the groups costs more than it saves.
PROCESS_MIN_RUNS = 20_000


@dataclass(frozen=True)
class Settings:
    """How the resampled analyses are done: resamples, seed, interval method and level, and whether every estimate
    keeps its bootstrap distribution (:attr:`~lengthlens.results.Estimate.replicates`)."""

    n_resamples: int = DEFAULT_N_RESAMPLES
    seed: int = DEFAULT_SEED
    ci: str = "studentized"
    confidence_level: float = DEFAULT_CONFIDENCE
    keep_replicates: bool = False

    def __post_init__(self) -> None:
        if self.ci not in CI_METHODS:
            raise ValueError(f"ci must be one of {CI_METHODS}, not {self.ci!r}")
        if int(self.n_resamples) < 1:
            raise ValueError(f"n_resamples must be at least 1, not {self.n_resamples}")
        if not 0 < float(self.confidence_level) < 1:
            raise ValueError(f"confidence_level must lie between 0 and 1, not {self.confidence_level}")


# ------------------------------------------------------------------------------------------------
# Groups and cells
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)  # holds arrays
class CellRuns:
    """One cell's paired runs as numpy arrays: what an analysis sees of a cell.

    ``key`` holds the cell's names (target, draft, dataset, method, params, alpha); ``fields`` the
    paired runs' fields by name (the baseline's with ``_star``), float64 with NaN where not logged;
    ``item`` each run's position in ``items`` (the cell's own items, sorted), ``strata`` each item's
    stratum (None: one). ``group`` names the group whose draws the cell uses, ``n_items_group`` its
    items: a cell on all of them uses the group's draws, a cell on fewer draws its own.
    """

    key: Mapping[str, Any]
    group: tuple[str, ...]
    n_items_group: int
    items: tuple[str, ...]
    item: np.ndarray
    fields: Sums
    strata: np.ndarray | None = None

    @property
    def n_items(self) -> int:
        return len(self.items)

    @property
    def n_runs(self) -> int:
        return int(self.item.shape[0])

    @property
    def complete(self) -> bool:
        """On every item of its group (then the group's draws are used)."""
        return self.n_items == self.n_items_group

    def by_item(self, values: np.ndarray) -> np.ndarray:
        """Per-run values summed by item (n_items,): an item's seeds add up, since the item is resampled."""
        return np.bincount(self.item, weights=np.asarray(values, dtype=np.float64), minlength=self.n_items)

    def runs_per_item(self) -> np.ndarray:
        return np.bincount(self.item, minlength=self.n_items).astype(np.float64)

    def subset(self, keep: np.ndarray) -> CellRuns:
        """The cell restricted to the runs where ``keep``; its items are those that keep a run."""
        keep = np.asarray(keep, dtype=bool)
        present = np.unique(self.item[keep])
        position = np.full(self.n_items, -1, dtype=np.int64)
        position[present] = np.arange(present.size)
        return replace(self, items=tuple(self.items[i] for i in present), item=position[self.item[keep]],
                       fields=Sums({k: v[keep] for k, v in self.fields.items()}),
                       strata=None if self.strata is None else self.strata[present])


@dataclass(frozen=True, eq=False)
class Group:
    """The paired runs of one (target, draft, dataset, serving condition), or of one comparison's strata, as numpy arrays.

    ``items`` are the group's resampling units (its baseline's items, sorted); ``cells`` its cells
    (one per relaxed arm) in order; ``draw_names`` seed its draws (default ``names``). A cell pooling
    several groups (:func:`pooled_group`: its ``strata``, item -> stratum) resamples items within each
    stratum, each drawn as its own group draws them: with the draws of the stratum's names
    (``stratum_names``), the group's own where the cell covers all of that group's items
    (``stratum_items``), else the subset's.
    """

    names: tuple[str, ...]
    items: tuple[str, ...]
    cells: tuple[CellRuns, ...]
    stratum_names: tuple[tuple[str, ...], ...] = ()
    #: The names the draws are seeded by, when they differ from ``names`` (an empty serving condition is left
    #: out, so that runs logging none get the draws they had before serving conditions existed).
    draw_names: tuple[str, ...] | None = None
    #: Each stratum's group items (its baseline's), where known: a cell covering them gets that group's draws.
    stratum_items: tuple[tuple[str, ...] | None, ...] = ()

    @property
    def n_runs(self) -> int:
        return sum(c.n_runs for c in self.cells)


def groups_of(units: pl.DataFrame, fields: Sequence[str], items: Mapping[tuple, Sequence[str]] | None = None,
              *, group_key: Sequence[str] = GROUP_KEY, _consume: bool = False) -> list[Group]:
    """The groups of paired runs ``units`` (one row per paired run, the baseline's fields with ``_star``).

    ``fields``: the paired-run columns the analyses read (converted to float64, NaN for null);
    ``items``: each group's resampling units (default: the items its runs cover), keyed by the
    group's names. Groups and cells come in the order of their keys. Only the key columns and
    ``fields`` are taken from ``units``, as whole columns; each cell's arrays are slices of them.
    ``_consume``: take each field column out of ``units`` as it is converted (for a caller that made
    ``units`` for this alone: its columns and the arrays are then not held together).
    """
    gkey = list(group_key)
    ckey = [k for k in CELL_KEY if k not in gkey]
    present = [f for f in dict.fromkeys(fields) if f in units.columns]
    # The keys are joined and sorted apart from the fields, and each field is converted on its own: at scale a
    # frame of every column, sorted or joined whole, would hold copies of the paired runs.
    frame = units.select(*gkey, *ckey, "item_id")
    order = frame.select(pl.arg_sort_by([*gkey, *ckey], maintain_order=True)).to_series().to_numpy()
    if np.array_equal(order, np.arange(frame.height)):
        order = None
    else:
        frame = frame[order]
    cid = frame.select(pl.struct([*gkey, *ckey]).rle_id()).to_series().to_numpy()
    keys = frame.select(*gkey, *ckey)
    groups = _segments(frame.select(pl.struct(gkey).rle_id()).to_series().to_numpy())
    names_of = [tuple(keys.row(g0)[:len(gkey)]) for g0, _ in groups]
    # Each run's item is looked up among its own group's items, one group at a time: a join of every run on the
    # key strings would copy every key column of every paired run.
    item_ids = frame.get_column("item_id")
    group_items_of, pos = [], np.empty(frame.height, dtype=np.int64)
    for (g0, g1), names in zip(groups, names_of):
        own = item_ids.slice(g0, g1 - g0)
        listed, at = _item_positions(own, items.get(names, ()) if items is not None else None)
        if (at < 0).any():
            raise KeyError(f"item {own[int(np.argmax(at < 0))]!r} of {names} is not among its group's items")
        group_items_of.append(listed)
        pos[g0:g1] = at
    cell_segments = [[(g0 + c0, g0 + c1) for c0, c1 in _segments(cid[g0:g1])] for g0, g1 in groups]
    cell_keys = [[dict(zip([*gkey, *ckey], keys.row(c0))) for c0, _ in segs] for segs in cell_segments]
    key_columns = frame.columns
    del frame, keys, cid, item_ids
    if _consume:  # the key strings are read: free them before the fields are converted
        for c in key_columns:
            if c not in present:
                units.drop_in_place(c)
    arrays = {f: _field_array(units.drop_in_place(f) if _consume else units.get_column(f), order) for f in present}
    out = []
    for names, group_items, segs, ckeys in zip(names_of, group_items_of, cell_segments, cell_keys):
        cells = []
        for (c0, c1), ck in zip(segs, ckeys):
            positions = pos[c0:c1]
            own = np.unique(positions)
            remap = np.full(len(group_items), -1, dtype=np.int64)
            remap[own] = np.arange(own.size)
            cells.append(CellRuns(key={k: ck[k] for k in CELL_KEY}, group=names, n_items_group=len(group_items),
                                  items=tuple(group_items[i] for i in own), item=remap[positions],
                                  fields=Sums({f: v[c0:c1] for f, v in arrays.items()})))
        out.append(Group(names=names, items=group_items, cells=tuple(cells), draw_names=_draw_names(gkey, names)))
    return out


def _item_positions(item_ids: pl.Series, listed: Sequence[str] | None = None) -> tuple[tuple[str, ...], np.ndarray]:
    """The items ``listed`` (default: the distinct ``item_ids``, sorted) and each run's position among them (−1: not
    listed), by one hash lookup per run."""
    order = pl.Series("item_id", listed if listed is not None else item_ids.unique().sort(), dtype=item_ids.dtype)
    at = item_ids.replace_strict(order, pl.int_range(order.len(), dtype=pl.Int64, eager=True), default=-1)
    return tuple(order.to_list()), at.to_numpy()


def _field_array(column: pl.Series, order: np.ndarray | None) -> np.ndarray:
    """One paired-run field as float64 (NaN where not logged), in ``order`` (None: as it is)."""
    values = column.cast(pl.Float64).to_numpy()
    return values if order is None else values[order]


def _draw_names(gkey: Sequence[str], names: tuple) -> tuple | None:
    """The names a group's draws are seeded by: its names without an empty serving condition (None: all of them)."""
    if "serving" in gkey and not names[list(gkey).index("serving")]:
        return tuple(v for k, v in zip(gkey, names) if k != "serving")
    return None


def _segments(ids: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of each run of equal values in ``ids``."""
    if ids.size == 0:
        return []
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return list(zip(starts.tolist(), np.r_[starts[1:], ids.size].tolist()))


def pooled_group(units: pl.DataFrame, fields: Sequence[str], key: Mapping[str, Any], strata_key: Sequence[str],
                 items: Mapping[tuple, Sequence[str]] | None = None) -> Group:
    """One cell of paired runs ``units`` pooled over the groups ``strata_key`` names (a comparison of any two arms).

    Items are resampled within each stratum (a stratum is a group: its items are not mixed with another
    dataset's), each drawn as :func:`run` draws that group for the cell table: with the group's draws where
    the runs cover every one of its ``items`` (its baseline's, keyed by the stratum's names), else the
    draws of the subset. A comparison within one group is therefore the cell table's cell, same items,
    same draws: the same intervals. ``key`` names the cell; ``fields`` are the paired-run columns read.
    """
    skey = list(strata_key)
    units = units.sort([*skey, *UNIT_KEY, *(c for c in ("method", "params") if c in units.columns)], maintain_order=True)
    present = [f for f in dict.fromkeys(fields) if f in units.columns]
    names_s, items_s, group_s, index = [], [], [], []
    offset = 0
    parts = units.select(*skey, "item_id").partition_by(skey, maintain_order=True, as_dict=True)
    for names, part in parts.items():
        own, at = _item_positions(part.get_column("item_id"))
        index.append(offset + at)
        offset += len(own)
        names_s.append(tuple(names))
        items_s.append(own)
        group_s.append(None if items is None or tuple(names) not in items else tuple(items[tuple(names)]))
    item = np.concatenate(index) if index else np.empty(0, dtype=np.int64)
    values = {f: units.get_column(f).cast(pl.Float64).to_numpy() for f in present}
    all_items = tuple(it for own in items_s for it in own)
    draw = [_draw_names(skey, n) or n for n in names_s]
    strata = np.repeat(np.arange(len(items_s)), [len(own) for own in items_s])
    n_group = sum(len(g) if g is not None else len(own) for g, own in zip(group_s, items_s))
    names = names_s[0] if len(names_s) == 1 else tuple(map(str, key.values()))
    cell = CellRuns(key=key, group=names, n_items_group=n_group, items=all_items, item=item, fields=Sums(values),
                    strata=strata)
    return Group(names=names, items=all_items, cells=(cell,), stratum_names=tuple(draw), stratum_items=tuple(group_s))


def group_items(runs: RunSet) -> dict[tuple, list[str]]:
    """Every group's resampling units: the items of its baseline's paired runs, sorted."""
    base = (runs.table.lazy().filter(pl.col("paired") & (pl.col("method") == STRICT)).select(*GROUP_KEY, "item_id")
            .unique().collect())
    return {names: part.get_column("item_id").sort().to_list() for names, part in _partition(base, list(GROUP_KEY))}


def _partition(frame: pl.DataFrame, by: list[str]) -> list[tuple[tuple, pl.DataFrame]]:
    """``frame`` split by the columns ``by``, in the order their values first appear."""
    return [(tuple(k), part) for k, part in frame.partition_by(by, maintain_order=True, as_dict=True).items()]


# ------------------------------------------------------------------------------------------------
# The analysis protocol
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Plan:
    """What one analysis wants of one cell: item columns to resample and statistics of their sums.

    ``cell`` is the cell or the part of it the analysis uses (:meth:`CellRuns.subset`); its items set
    the draws. ``columns``: name -> per-item totals (n_items,); ``statistics``: name -> a statistic
    over the columns' sums (a registry metric, or :class:`lengthlens.stats.intervals.Ratio`);
    ``data``: anything the analysis wants back in :meth:`Analysis.finish`.
    """

    cell: CellRuns
    columns: Mapping[str, np.ndarray]
    statistics: Mapping[str, Statistic] = field(default_factory=dict)
    data: Any = None


@dataclass(frozen=True, eq=False)
class CellResult:
    """One cell's results for an analysis: its plan, the estimates and replicates of its statistics, its sums."""

    plan: Plan
    estimates: Mapping[str, Estimate]
    replicates: Mapping[str, np.ndarray]
    sums: Resampled

    @property
    def cell(self) -> CellRuns:
        return self.plan.cell


class Analysis(Protocol, Generic[Row, Out]):
    """A resampled analysis on the engine.

    ``fields``: the paired-run fields it reads. ``plan(cell)``: what to resample for a cell (None:
    nothing, the cell has no row). ``finish(results, settings)``: one group's rows from its cells'
    results (a list, in cell order). ``collect(rows, settings)``: the analysis' result from every
    group's rows, in group order. Analyses must be picklable (module-level classes) to run in
    worker processes.
    """

    fields: tuple[str, ...]
    #: Optional (default False): its columns are multiplied in a product of their own over the same draws, so that
    #: they cannot move another analysis' resampled sums in the last bit, nor theirs be moved (see
    #: :mod:`lengthlens.stats.products`).
    own_product: bool

    def plan(self, cell: CellRuns, settings: Settings) -> Plan | None: ...

    def finish(self, results: list[CellResult], settings: Settings) -> list[Row]: ...

    def collect(self, rows: list[Row], settings: Settings) -> Out: ...


def group_results(group: Group, analyses: Sequence[Analysis], settings: Settings) -> list[list[Any]]:
    """Every analysis' rows for one group: plans first, one product per item set, then estimates and rows.

    The draws of an item set are made once for every analysis; an analysis with ``own_product`` gets a product of
    its own over them.
    """
    products: dict[tuple, tuple[ColumnProduct, np.ndarray]] = {}
    drawn: dict[tuple, np.ndarray] = {}
    planned: list[list[tuple]] = []
    for k, analysis in enumerate(analyses):
        own = k if getattr(analysis, "own_product", False) else None
        mine = []
        for cell in group.cells:
            plan = analysis.plan(cell, settings)
            if plan is None:
                continue
            extra = moment_columns(plan.statistics, plan.columns, settings.ci, plan.cell.strata)
            names = (*plan.columns, *extra)
            block = np.column_stack([*plan.columns.values(), *extra.values()]) if names else np.zeros((plan.cell.n_items, 0))
            product, counts = _product(products, drawn, own, group, plan.cell, settings)
            mine.append((plan, extra, product.add(block), names, product, counts))
        planned.append(mine)
    out = []
    memo: dict = {}  # statistics of the items evaluated once per draws (the counts in ``drawn`` outlive it)
    for analysis, mine in zip(analyses, planned):
        results = [_result(plan, extra, names, product.rows(rows), counts, settings, memo)
                   for plan, extra, rows, names, product, counts in mine]
        out.append(analysis.finish(results, settings))
    return out


def _result(plan: Plan, extra: Mapping[str, np.ndarray], names: Sequence[str], boot: Sequence[np.ndarray],
            counts: np.ndarray, settings: Settings, memo: dict | None = None) -> CellResult:
    """A cell's result from its plan and the resampled sums of its columns (``boot``, in ``names`` order)."""
    r = Resampled(items={**plan.columns, **extra}, boot={n: boot[k] for k, n in enumerate(names)}, counts=counts,
                  strata=plan.cell.strata)
    est, reps = estimates(plan.statistics, r, ci=settings.ci, confidence_level=settings.confidence_level,
                          keep_replicates=settings.keep_replicates, memo=memo)
    return CellResult(plan, est, reps, r)


def resample_plan(plan: Plan, counts: np.ndarray, settings: Settings) -> CellResult:
    """One plan's result with the given draws ``counts`` (B, n_items): what the driver does for each cell.

    For the array-level functions (:func:`lengthlens.analyses.censoring.censoring_cell`) and for tests
    that bring their own draws.
    """
    extra = moment_columns(plan.statistics, plan.columns, settings.ci, plan.cell.strata)
    names = (*plan.columns, *extra)
    product = ColumnProduct(np.asarray(counts))
    block = np.column_stack([*plan.columns.values(), *extra.values()]) if names else np.zeros((plan.cell.n_items, 0))
    rows = product.add(block)
    return _result(plan, extra, names, product.rows(rows), product.counts, settings)


def _product(products: dict, drawn: dict, own: int | None, group: Group, cell: CellRuns, settings: Settings
             ) -> tuple[ColumnProduct, np.ndarray]:
    """The product over a cell's item set, made once per item set (and once more for each analysis that keeps its
    own, ``own``: its position): the group's draws, or the cell's own, drawn once."""
    items = (cell.items, cell.complete)
    key = (own, *items)
    if key not in products:
        if items not in drawn:
            drawn[items] = _counts(group, cell, settings)
        products[key] = (ColumnProduct(drawn[items], scratch), drawn[items])
    return products[key]


def _counts(group: Group, cell: CellRuns, settings: Settings) -> np.ndarray:
    """(B, n_items) draws over a cell's items (compact integers); with strata, each stratum's items drawn on their own."""
    if not group.stratum_names:
        names = group.names if group.draw_names is None else group.draw_names
        return draw_counts(settings.seed, names, cell.items, cell.complete, settings.n_resamples)
    draws = []
    for s, names in enumerate(group.stratum_names):
        inside = np.flatnonzero(cell.strata == s)
        items = tuple(cell.items[i] for i in inside)
        baseline = group.stratum_items[s] if s < len(group.stratum_items) else None
        draws.append((inside, draw_counts(settings.seed, names, items, items == baseline, settings.n_resamples)))
    parts = np.empty((settings.n_resamples, cell.n_items), dtype=np.result_type(*(d.dtype for _, d in draws)))
    for inside, d in draws:
        parts[:, inside] = d
    return parts


# ------------------------------------------------------------------------------------------------
# Execution
# ------------------------------------------------------------------------------------------------

def run(groups: Sequence[Group], analyses: Sequence[Analysis], settings: Settings, *, workers: int = 1,
        pool: Pool | None = None) -> list[Any]:
    """Each analysis' result over every group: ``analysis.collect(rows of every group, in group order)``.

    ``workers`` above 1 computes the groups in that many worker processes when the groups hold at
    least :data:`PROCESS_MIN_RUNS` paired runs (the analyses must then be picklable); the numbers are
    the same either way.
    """
    per_group = _map(groups, analyses, settings, workers, pool)
    return [analysis.collect([row for part in per_group for row in part[k]], settings)
            for k, analysis in enumerate(analyses)]


def _job(job: tuple[Group, Sequence[Analysis], Settings]) -> list[list[Any]]:
    return group_results(*job)


def _shared_job(shared: tuple[Sequence[Analysis], Settings], group: Group) -> list[list[Any]]:
    return group_results(group, *shared)


def _map(groups: Sequence[Group], analyses: Sequence[Analysis], settings: Settings, workers: int,
         pool: Pool | None = None) -> list[list[list[Any]]]:
    """Each group's rows: in worker processes when that pays and the analyses can cross to them, else here.

    A ``pool`` with workers running (:class:`~lengthlens.execution.Pool`) computes them on its workers and this
    process together, with no process started for them; else ``workers`` processes are spawned for the groups.
    """
    from lengthlens.stats import metrics

    jobs = [(g, analyses, settings) for g in groups]
    # A metric added at run time (metrics.extended) is not in the module the workers import: then serially.
    portable = metrics.registry() is metrics.REGISTRY
    big = sum(g.n_runs for g in groups) >= PROCESS_MIN_RUNS
    if portable and big and pool is not None and pool.spawned:
        return pool.map(_shared_job, groups, shared=(analyses, settings), cost=lambda g: g.n_runs)
    return map_ordered(_job, jobs, workers=workers if portable and big else 1, cost=lambda job: job[0].n_runs)


def run_on(runs: RunSet, analyses: Sequence[Analysis], settings: Settings, *, workers: int = 1,
           units: pl.DataFrame | None = None, pool: Pool | None = None) -> list[Any]:
    """:func:`run` on loaded runs: each relaxed run paired with its baseline run, grouped, every analysis' result.

    ``units``: the paired runs (:func:`lengthlens.data.pairing.cell_units`) when the caller has them,
    e.g. with channel counts added; ``pool``: worker processes already started (:func:`run`).
    """
    fields = tuple(dict.fromkeys(f for a in analyses for f in a.fields))
    if units is None:  # pair only the columns the analyses read; the groups take them over as they convert them
        # A lazy filter: the pairing then reads only those columns of the paired runs, never a copy of them all.
        paired = runs.table.lazy().filter(pl.col("paired"))
        groups = groups_of(cell_units(paired, [f.removesuffix("_star") for f in fields]), fields, group_items(runs),
                           _consume=True)
    else:
        groups = groups_of(units, fields, group_items(runs))
    return run(groups, analyses, settings, workers=workers, pool=pool)
