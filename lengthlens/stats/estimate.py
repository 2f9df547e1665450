"""Per-cell point estimates and paired bootstrap intervals, for all cells of a group in one matrix product.

For each (target, draft, dataset) group: items are the baseline's items, sorted; X[i, (cell, q)]
is the sum of per-run quantity q (metrics.SUM_FIELDS) over cell's paired runs of item i (several
seeds of an item are summed: the item is the resampling unit). With the group's count matrix C
(B x n_items), C @ X gives every sum of every cell in every resample at once; metrics follow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Literal

import numpy as np
import polars as pl

from lengthlens.data.runset import RunSet
from lengthlens.data.pairing import CELL_KEY, cell_units
from lengthlens.data.schema import UNIT_KEY
from lengthlens.stats.delta import is_log_scale, item_products, metric_and_se, metric_fields, metrics_and_ses, moment_pairs
from lengthlens.stats.distinct_product import ColumnProduct, GroupProducts
from lengthlens.stats.metrics import (
    INTERVAL_METRICS,
    METRIC_BY_NAME,
    METRIC_INPUTS,
    METRICS,
    SUM_FIELDS,
    SUM_INDEX,
    drop_2pp,
    drop_2pp_point,
    evaluate,
    unavailable,
    unavailable_note,
)
from lengthlens.stats.item_sums import all_group_items, item_positions, item_sums, map_groups  # noqa: F401 (re-exported)
from lengthlens.stats.multiplicity import benjamini_hochberg, holm
from lengthlens.stats.paired_test import paired_accuracy_test
from lengthlens.stats.resample import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
    DrawCache,
    bca_interval,
    jackknife_sums,
    percentile_interval,
    studentized_interval,
)
from lengthlens.stats.results import Cell, CellTable, ConfidenceInterval, Estimate


def unit_quantities(units: pl.DataFrame) -> pl.DataFrame:
    """Per paired run, the quantities that metrics sum (columns named as metrics.SUM_FIELDS)."""
    graded = pl.col("correct").is_not_null() & pl.col("correct_star").is_not_null()

    def num(c: str) -> pl.Expr:  # a missing counter adds 0 here; the metrics it feeds are blanked per cell
        return pl.col(c).cast(pl.Float64).fill_null(0.0)

    return units.select(
        *CELL_KEY, *UNIT_KEY,
        pl.lit(1.0).alias("n"),
        num("output_tokens").alias("L"),
        num("output_tokens_star").alias("L_star"),
        num("draft_rounds").alias("R"),
        num("draft_rounds_star").alias("R_star"),
        num("wall_time_s").alias("T"),
        num("wall_time_s_star").alias("T_star"),
        pl.col("l_bar").fill_null(0.0).alias("lbar"),
        pl.col("l_bar_star").fill_null(0.0).alias("lbar_star"),
        pl.col("l_bar").is_not_null().cast(pl.Float64).alias("n_lbar"),
        pl.col("l_bar_star").is_not_null().cast(pl.Float64).alias("n_lbar_star"),
        num("accepted_tokens").alias("A"),
        num("accepted_tokens_star").alias("A_star"),
        graded.cast(pl.Float64).alias("n_graded"),
        (graded & pl.col("correct")).cast(pl.Float64).alias("c"),
        (graded & pl.col("correct_star")).cast(pl.Float64).alias("c_star"),
        (graded & pl.col("correct") & ~pl.col("correct_star")).cast(pl.Float64).alias("w2r"),
        (graded & ~pl.col("correct") & pl.col("correct_star")).cast(pl.Float64).alias("r2w"),
        num("censored").alias("cens"),
        num("censored_star").alias("cens_star"),
        (pl.col("draft_rounds") / pl.col("draft_rounds_star")).alias("_rounds_ratio_unit"),
        (pl.col("wall_time_s") / pl.col("wall_time_s_star")).alias("_time_ratio_unit"),
        pl.col("max_new_tokens").alias("_budget"),
        *[(pl.col(f).is_null() | pl.col(f"{f}_star").is_null()).alias(f"_missing_{f}") for f in _INPUT_FIELDS],
    )


def graded_items(units: pl.DataFrame) -> int:
    """Items of a cell with at least one unit graded on both sides (``units`` from :func:`unit_quantities`)."""
    return int(units.filter(pl.col("n_graded") > 0).get_column("item_id").n_unique())


def is_partly_graded(n_graded_items: int, n_items: int) -> bool:
    """A cell graded on fewer than half its items: its accuracy is shown, marked, and kept out of accuracy counts.

    This is what a grader that can only judge some runs produces (e.g. code datasets without their
    tests, where only runs cut at the budget get a verdict): an accuracy change on a biased few items.
    """
    return 0 < n_graded_items and 2 * n_graded_items < n_items


#: Run fields some metric needs (metrics.METRIC_INPUTS); their absence is counted per cell.
_INPUT_FIELDS = tuple(sorted({f for fs in METRIC_INPUTS.values() for f in fs}))
#: The paired-run columns :func:`unit_quantities` reads.
QUANTITY_INPUTS = (*dict.fromkeys(f"{c}{side}" for c in ("output_tokens", "draft_rounds", "wall_time_s", "l_bar", "accepted_tokens",
                                                       "correct", "censored", *_INPUT_FIELDS) for side in ("", "_star")),
                   "max_new_tokens")


#: Cells with fewer items than this are flagged ``small_n``: their intervals are unreliable (left
#: out of Table 3, the headline and the figures' interval bars unless asked for).
SMALL_N_ITEMS = 10

CI_METHODS = ("studentized", "percentile", "bca")


def cells(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
          ci: Literal["studentized", "percentile", "bca"] = "studentized", confidence_level: float = DEFAULT_CONFIDENCE,
          draws: DrawCache | None = None, units: pl.DataFrame | None = None, workers: int | None = None) -> CellTable:
    """Every cell (relaxed arm x its baseline on shared items) with item-level paired bootstrap intervals.

    Parameters
    ----------
    n_resamples : bootstrap resamples per group (the same draws serve every arm of the group).
    seed : with the group's names, fixes the draws: same seed, same numbers, bit for bit.
    ci : ``studentized`` (default: bootstrap-t on the log scale with the delta-method SE for ratio
        metrics; percentile for the accuracy change), ``percentile``, or ``bca`` (bias-corrected
        and accelerated, jackknife over items).
    draws : a DrawCache (same seed and n_resamples) to share the draws with other analyses.
    units : ``cell_units(runs.paired)`` when the caller has it already (a report pairs the runs once).
    workers : groups computed at once on threads (default: the cores available, see
        :mod:`lengthlens.stats.parallel`); any number gives the same numbers.

    A cell on every item of its group resamples with the group's draws (arms jointly consistent);
    a cell on a subset of the items draws its own multinomial(n_cell) counts over those items.
    """
    check_ci(ci)
    draws = draws if draws is not None else DrawCache(seed, n_resamples, keep=False)
    if (draws.seed, draws.n_resamples) != (seed, n_resamples):
        raise ValueError("draws must have the same seed and n_resamples as the cell table")
    parts = map_groups(runs, unit_quantities(cell_units(runs.paired) if units is None else units),
                       lambda df, group, items: group_cells(df, group, items, draws, ci, confidence_level), workers)
    return cell_table(parts, n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level)


def check_ci(ci: str) -> None:
    if ci not in CI_METHODS:
        raise ValueError(f"ci must be one of {CI_METHODS}, not {ci!r}")


def cell_table(parts: list[tuple[list[Cell], np.ndarray]], *, n_resamples: int, seed: int, ci: str,
               confidence_level: float) -> CellTable:
    """The cell table from each group's (cells, accuracy-change replicates) of :func:`group_cells`, in group order."""
    out = [c for group_cells_, _ in parts for c in group_cells_]
    reps = [delta for _, delta in parts]
    return CellTable(cells=adjust_across_cells(out), n_resamples=n_resamples, seed=seed, ci_method=ci,
                     confidence_level=confidence_level,
                     replicates={"accuracy_delta_pp": np.concatenate(reps, axis=1) if reps else np.empty((0, 0))})


def _estimates(point: dict, interval: dict, why: dict[str, str]) -> dict[str, Estimate]:
    """A cell's estimates from its point values and (lo, hi, undefined) per interval metric; NaN for metrics in ``why``."""
    nan = float("nan")
    ests: dict[str, Estimate] = {}
    for m in METRICS:
        if m.name in why:
            ests[m.name] = Estimate(nan, ConfidenceInterval(nan, nan) if m.interval else None)
        elif m.interval:
            lo, hi, und = interval[m.name]
            ests[m.name] = Estimate(float(point[m.name]), ConfidenceInterval(float(lo), float(hi)), int(und))
        else:
            ests[m.name] = Estimate(float(point[m.name]))
    return ests


def cell_extras(af: pl.DataFrame, item_x: np.ndarray, ests: dict[str, Estimate], n_graded: int,
                n_items_baseline: int, why: dict[str, str] | None = None) -> dict:
    """A cell's flags and tests beside its metrics: both drop rules, the paired accuracy test, per-item medians.

    ``item_x`` holds the cell's per-item sums (n_items, SUM_FIELDS). The accuracy test is exact
    McNemar on runs when every item has at most one graded pair, else the item-level sign-flip test
    (:mod:`lengthlens.stats.paired_test`); ``accuracy_test`` says which. ``why``: metrics left empty
    (inputs not logged) and the reason, listed in ``unavailable``.
    """
    why = why or {}
    budget = af.get_column("_budget").max()
    col = {name: item_x[:, i] for i, name in enumerate(SUM_FIELDS)}
    delta = ests["accuracy_delta_pp"]
    w2r, r2w = int(col["w2r"].sum()), int(col["r2w"].sum())
    p, test = paired_accuracy_test(col["n_graded"], col["c"], col["c_star"]) if n_graded else (None, None)
    hi = delta.confidence_interval.high if delta.confidence_interval is not None else np.nan
    medians = medians_of_item_means(af, ["_rounds_ratio_unit", "_time_ratio_unit"])
    return {
        "drop_2pp": (drop_2pp(hi) if n_graded else None),
        "drop_2pp_point": (drop_2pp_point(delta.point) if n_graded else None),
        "wrong_to_right": w2r if n_graded else None,
        "right_to_wrong": r2w if n_graded else None,
        "mcnemar_p": p,
        "accuracy_test": test,
        **{f"{m}_median_item": np.nan if m in why else medians[f"_{m}_unit"] for m in ("rounds_ratio", "time_ratio")},
        "budget": None if budget is None else int(budget),
        "n_items_baseline": n_items_baseline,
        "unavailable": unavailable_note(why) or None,  # None (empty in cells.csv) when every metric is computed
    }


def medians_of_item_means(af: pl.DataFrame, columns: list[str]) -> dict[str, float]:
    """Per column, the median over items of the mean of a per-run quantity over the item's runs (seeds), so items
    count once each; the columns in one pass over the items."""
    means = af.group_by("item_id").agg(pl.col(c).mean() for c in columns)
    medians = {c: means.get_column(c).median() for c in columns}
    return {c: np.nan if m is None else float(m) for c, m in medians.items()}  # None: no item has the quantity


def adjust_across_cells(cells_: list[Cell]) -> tuple[Cell, ...]:
    """Holm (family-wise) and Benjamini–Hochberg (false discovery rate) adjusted accuracy-test p-values over every graded cell."""
    p = np.array([np.nan if c.extras.get("mcnemar_p") is None else c.extras["mcnemar_p"] for c in cells_], dtype=float)
    p_holm, q_bh = holm(p), benjamini_hochberg(p)
    return tuple(
        replace(c, extras={**c.extras,
                           "mcnemar_p_holm": None if np.isnan(p_holm[i]) else float(p_holm[i]),
                           "mcnemar_q_bh": None if np.isnan(q_bh[i]) else float(q_bh[i])})
        for i, c in enumerate(cells_))


def item_sets(present: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cells grouped by the items they cover: [(item columns, cell columns)] from present (n_items, n_cells)."""
    patterns, inverse = np.unique(present.T, axis=0, return_inverse=True)
    return [(np.flatnonzero(p), np.flatnonzero(inverse.ravel() == k)) for k, p in enumerate(patterns)]


def group_cells(group_df: pl.DataFrame, group: tuple, items: list[str], draws: DrawCache, ci: str,
                level: float) -> tuple[list[Cell], np.ndarray]:
    """The cells of one group (sums by item, then intervals per item set with shared draws within a
    set) and their accuracy-change replicates (B, n_cells) for Table 3's mean."""
    return plan_group_cells(group_df, items, GroupProducts(draws, group), ci, level)()


def plan_group_cells(group_df: pl.DataFrame, items: list[str], products: GroupProducts, ci: str, level: float
                     ) -> Callable[[], tuple[list[Cell], np.ndarray]]:
    """:func:`group_cells` in two steps: its columns are added to ``products`` now; the returned function,
    called once every analysis of the group has added its own, reads the sums and makes the cells."""
    item_index = {it: i for i, it in enumerate(items)}
    arm_frames = group_df.partition_by(list(CELL_KEY), maintain_order=True)
    X = np.stack([item_sums(af, SUM_FIELDS, item_index) for af in arm_frames], axis=1)  # (n_items, n_cells, n_q)
    plans = []
    for cols, cell_cols in item_sets(X[:, :, SUM_INDEX["n"]] > 0):
        product = products.over([items[i] for i in cols], complete=len(cols) == len(items))
        plans.append((cell_cols, plan_cell_intervals(X[cols][:, cell_cols], product, ci, level)))

    def finish() -> tuple[list[Cell], np.ndarray]:
        point_sums = X.sum(axis=0)
        point = evaluate(point_sums)
        shape = (len(INTERVAL_METRICS), len(arm_frames))
        lo, hi, und = np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape, dtype=np.int64)
        delta = np.full((products.draws.n_resamples, len(arm_frames)), np.nan)
        fallback = np.zeros(shape, dtype=bool)
        for cell_cols, intervals in plans:
            reps: dict[str, np.ndarray] = {}
            lo[:, cell_cols], hi[:, cell_cols], und[:, cell_cols] = intervals(reps)
            delta[:, cell_cols] = reps["accuracy_delta_pp"]
            if "percentile_fallback" in reps:
                fallback[:, cell_cols] = reps["percentile_fallback"]
        cells_ = [_make_cell(af, point, point_sums[j], j, lo, hi, und, X[:, j, :], len(items),
                             [m for k, m in enumerate(INTERVAL_METRICS) if fallback[k, j]])
                  for j, af in enumerate(arm_frames)]
        return cells_, delta

    return finish


def cell_intervals(X: np.ndarray, counts: np.ndarray, ci: str, level: float, replicates: dict | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals of every interval metric for cells on the same items: (n_metrics, n_cells) lo, hi, undefined.

    ``X`` (n_items, n_cells, n_q) holds the cells' item sums, ``counts`` (B, n_items) the draws.
    ``replicates``, when given, receives the accuracy change's replicates (B, n_cells).
    """
    return plan_cell_intervals(X, ColumnProduct(counts), ci, level)(replicates)


def plan_cell_intervals(X: np.ndarray, product: ColumnProduct, ci: str, level: float
                        ) -> Callable[[dict | None], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`cell_intervals` in two steps: the sums and item products its metrics read are added to ``product``
    now; the returned function (``replicates`` as for cell_intervals) reads their resampled sums."""
    n_items, n_cells, n_q = X.shape
    stud = tuple(m for m in INTERVAL_METRICS if ci == "studentized" and is_log_scale(m))
    pairs = moment_pairs(stud)
    rest = [k for k, m in enumerate(INTERVAL_METRICS) if m not in stud]  # percentile or BCa for these
    rest_names = tuple(dict.fromkeys([INTERVAL_METRICS[k] for k in rest] + ["accuracy_delta_pp"]))
    fields = sorted({k for m in rest_names + stud for k in metric_fields(m)})
    products_ = item_products(X, pairs)
    # the fields the metrics read, then the item products for the SEs: one block of (n_cells x columns)
    block = np.concatenate([X[:, :, fields], products_], axis=2)
    rows = product.add(block.reshape(n_items, -1)).reshape(n_cells, -1)

    def finish(replicates: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        B = product.counts.shape[0]
        boot = {SUM_FIELDS[k]: product.per_cell(rows[:, i]) for i, k in enumerate(fields)}
        boot_moments = {p: product.per_cell(rows[:, len(fields) + j]) for j, p in enumerate(pairs)}

        def full(a: np.ndarray) -> np.ndarray:  # (n_cells, B) or one row -> (B, n_cells), as the interval functions read them
            return np.broadcast_to(a, (n_cells, B)).T

        reps = {m: METRIC_BY_NAME[m].fn(boot) for m in rest_names}
        if replicates is not None:
            replicates["accuracy_delta_pp"] = full(reps["accuracy_delta_pp"])
        stacked = np.stack([full(reps[INTERVAL_METRICS[k]]) for k in rest] or [np.zeros((B, n_cells))], axis=1)  # (B, n_rest, n_cells)
        if ci == "bca":
            jack = evaluate(jackknife_sums(X.reshape(n_items, -1)).reshape(n_items, n_cells, n_q), INTERVAL_METRICS)
            jack_stacked = np.stack([jack[m] for m in INTERVAL_METRICS], axis=1)
            point = evaluate(X.sum(axis=0))
            pt = np.stack([point[m] for m in INTERVAL_METRICS], axis=0)
            return bca_interval(stacked, pt, jack_stacked, level)
        shape = (len(INTERVAL_METRICS), n_cells)
        lo, hi, und = np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape, dtype=np.int64)
        if rest:
            lo[rest], hi[rest], und[rest] = percentile_interval(stacked, level)
        sums, moment_sums = X.sum(axis=0), products_.sum(axis=0)
        point_se = metrics_and_ses(stud, {f: sums[..., i] for f, i in SUM_INDEX.items()},
                                   {p: moment_sums[..., j] for j, p in enumerate(pairs)}, n_items, log=True)
        boot_se = metrics_and_ses(stud, boot, boot_moments, n_items, log=True)
        fallback = np.zeros(shape, dtype=bool)  # degenerate bootstrap-t: percentile used instead (see studentized_interval)
        for m in stud:
            k = INTERVAL_METRICS.index(m)
            mask: list = []
            (est, se), (est_b, se_b) = point_se[m], boot_se[m]
            lo[k], hi[k], und[k] = studentized_interval(est, se, full(est_b), full(se_b), level, fell_back=mask)
            with np.errstate(over="ignore"):  # built on the log scale
                lo[k], hi[k] = np.exp(lo[k]), np.exp(hi[k])
            fallback[k] = mask[0]
        if replicates is not None:
            replicates["percentile_fallback"] = fallback
        return lo, hi, und

    return finish


def studentized_identity(X: np.ndarray, counts: np.ndarray, name: str, level: float):
    """Bootstrap-t on the identity scale for one metric (used to check the accuracy change's coverage)."""
    pairs = moment_pairs((name,))
    Xe = np.concatenate([X, item_products(X, pairs)], axis=2)
    boot = np.einsum("bi,icq->bcq", counts, Xe)
    n_q = X.shape[2]
    est, se = metric_and_se(name, Xe.sum(axis=0)[..., :n_q], Xe.sum(axis=0)[..., n_q:], pairs, X.shape[0], log=False)
    est_b, se_b = metric_and_se(name, boot[..., :n_q], boot[..., n_q:], pairs, X.shape[0], log=False)
    return studentized_interval(est, se, est_b, se_b, level)


def _make_cell(af: pl.DataFrame, point: dict, sums: np.ndarray, j: int, lo: np.ndarray, hi: np.ndarray,
               und: np.ndarray, item_x: np.ndarray, n_items_baseline: int, fallback: list[str] = ()) -> Cell:
    key = af.row(0, named=True)
    why = unavailable(missing_inputs(af), af.height)  # metrics whose inputs are not logged: empty, with the reason
    ests = _estimates({m: point[m][j] for m in point},
                      {m: (lo[k, j], hi[k, j], und[k, j]) for k, m in enumerate(INTERVAL_METRICS)}, why)
    n_graded = int(sums[SUM_FIELDS.index("n_graded")])
    n_items = int(af.get_column("item_id").n_unique())
    extras = {**cell_extras(af, item_x, ests, n_graded, n_items_baseline, why),
              "small_n": n_items < SMALL_N_ITEMS, "undefined_resamples": _undefined(ests),
              # Metrics whose bootstrap-t degenerated (resamples with no spread): their interval is the percentile one.
              "percentile_fallback": ",".join(m for m in fallback if m not in why) or None}
    n_graded_items = graded_items(af)
    partial = bool(n_graded) and is_partly_graded(n_graded_items, n_items)
    extras.update(n_graded_items=n_graded_items, graded_partial=partial)
    if partial:  # keeps its accuracy numbers, but is left out of the accuracy counts
        extras.update(drop_2pp=None, drop_2pp_point=None)
    return Cell(target=key["target"], draft=key["draft"], dataset=key["dataset"], method=key["method"],
                params=key["params"], alpha=key["alpha"], n_items=n_items, n_runs=af.height, n_graded=n_graded,
                estimates=ests, extras=extras)


def _undefined(ests: dict[str, Estimate]) -> int:
    """Most resamples left out of any interval whose point estimate exists (an ungraded cell's accuracy change,
    undefined in every resample, does not count)."""
    return max((e.undefined_resamples for e in ests.values()
                if e.confidence_interval is not None and np.isfinite(e.point)), default=0)


def missing_inputs(quantities: pl.DataFrame) -> dict[str, int]:
    """Per metric input field, the paired runs (rows of :func:`unit_quantities`) where it is null on either side."""
    return {f: int(quantities.get_column(f"_missing_{f}").sum()) for f in _INPUT_FIELDS}
