"""Per-cell point estimates and paired bootstrap intervals, for all cells of a group in one matrix product.

For each (target, draft, dataset) group: items are the baseline's items, sorted; X[i, (cell, q)]
is the sum of per-run quantity q (metrics.SUM_FIELDS) over cell's paired runs of item i (several
seeds of an item are summed: the item is the resampling unit). With the group's count matrix C
(B x n_items), C @ X gives every sum of every cell in every resample at once; metrics follow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np
import polars as pl

from lengthlens.data.loading import RunSet
from lengthlens.data.pairing import CELL_KEY, cell_units
from lengthlens.data.schema import GROUP_KEY, UNIT_KEY
from lengthlens.stats.metrics import (
    INTERVAL_METRICS,
    METRICS,
    SUM_FIELDS,
    drop_2pp,
    drop_2pp_point,
    evaluate,
)
from lengthlens.stats.multiplicity import benjamini_hochberg, holm
from lengthlens.stats.paired_test import paired_accuracy_test
from lengthlens.stats.resample import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
    DrawCache,
    bca_interval,
    counts_for_group,
    jackknife_sums,
    percentile_interval,
)
from lengthlens.stats.results import Cell, CellTable, ConfidenceInterval, Estimate


def unit_quantities(units: pl.DataFrame) -> pl.DataFrame:
    """Per paired run, the quantities that metrics sum (columns named as metrics.SUM_FIELDS)."""
    graded = pl.col("correct").is_not_null() & pl.col("correct_star").is_not_null()
    return units.select(
        *CELL_KEY, *UNIT_KEY,
        pl.lit(1.0).alias("n"),
        pl.col("output_tokens").cast(pl.Float64).alias("L"),
        pl.col("output_tokens_star").cast(pl.Float64).alias("L_star"),
        pl.col("draft_rounds").cast(pl.Float64).alias("R"),
        pl.col("draft_rounds_star").cast(pl.Float64).alias("R_star"),
        pl.col("wall_time_s").alias("T"),
        pl.col("wall_time_s_star").alias("T_star"),
        pl.col("l_bar").fill_null(0.0).alias("lbar"),
        pl.col("l_bar_star").fill_null(0.0).alias("lbar_star"),
        pl.col("l_bar").is_not_null().cast(pl.Float64).alias("n_lbar"),
        pl.col("l_bar_star").is_not_null().cast(pl.Float64).alias("n_lbar_star"),
        pl.col("accepted_tokens").cast(pl.Float64).alias("A"),
        pl.col("accepted_tokens_star").cast(pl.Float64).alias("A_star"),
        graded.cast(pl.Float64).alias("n_graded"),
        (graded & pl.col("correct")).cast(pl.Float64).alias("c"),
        (graded & pl.col("correct_star")).cast(pl.Float64).alias("c_star"),
        (graded & pl.col("correct") & ~pl.col("correct_star")).cast(pl.Float64).alias("w2r"),
        (graded & ~pl.col("correct") & pl.col("correct_star")).cast(pl.Float64).alias("r2w"),
        pl.col("censored").cast(pl.Float64).alias("cens"),
        pl.col("censored_star").cast(pl.Float64).alias("cens_star"),
        (pl.col("draft_rounds") / pl.col("draft_rounds_star")).alias("_rounds_ratio_unit"),
        (pl.col("wall_time_s") / pl.col("wall_time_s_star")).alias("_time_ratio_unit"),
        pl.col("max_new_tokens").alias("_budget"),
    )


def item_positions(frame: pl.DataFrame, index: dict[str, int]) -> np.ndarray:
    """Each run's item as a column of its group's count matrix."""
    return np.fromiter((index[i] for i in frame.get_column("item_id")), dtype=np.int64, count=frame.height)


def item_sums(frame: pl.DataFrame, columns: list[str] | tuple[str, ...], index: dict[str, int]) -> np.ndarray:
    """(n_items, len(columns)) sums of per-run columns by item: the seeds of an item add up, since the item is resampled."""
    X = np.zeros((len(index), len(columns)))
    np.add.at(X, item_positions(frame, index), frame.select(columns).to_numpy().astype(np.float64))
    return X


def _float_counts(draws: DrawCache | None, seed: int, group: tuple, n_items: int, n_resamples: int) -> np.ndarray:
    return (draws.counts(group, n_items) if draws is not None
            else counts_for_group(seed, group, n_items, n_resamples, dtype=np.float64))


def all_group_items(runs: RunSet) -> dict[tuple, list[str]]:
    """Every group's resampling units (its baseline's items, sorted), computed once."""
    base = runs.paired.filter(pl.col("method") == "strict").select(*GROUP_KEY, "item_id").unique()
    out: dict[tuple, list[str]] = {}
    for g in base.partition_by(list(GROUP_KEY), maintain_order=False):
        out[tuple(g.row(0)[:len(GROUP_KEY)])] = g.get_column("item_id").sort().to_list()
    return out


def cells(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
          ci: Literal["percentile", "bca"] = "percentile", confidence_level: float = DEFAULT_CONFIDENCE,
          draws: DrawCache | None = None) -> CellTable:
    """Every cell (relaxed arm x its baseline on shared items) with item-level paired bootstrap intervals.

    Parameters
    ----------
    n_resamples : bootstrap resamples per group (the same draws serve every arm of the group).
    seed : with the group's names, fixes the draws: same seed, same numbers, bit for bit.
    ci : ``percentile`` (default) or ``bca`` (bias-corrected and accelerated, jackknife over items).
    draws : a DrawCache (same seed and n_resamples) to share the draws with other analyses.
    """
    if ci not in ("percentile", "bca"):
        raise ValueError(f"ci must be 'percentile' or 'bca', not {ci!r}")
    units = cell_units(runs.paired)
    q = unit_quantities(units)
    all_items = all_group_items(runs)
    out: list[Cell] = []
    delta_reps: list[np.ndarray] = []  # per group (B, n_cells): Table 3's mean accuracy change interval
    n_q = len(SUM_FIELDS)
    for group_df in q.partition_by(list(GROUP_KEY), maintain_order=True):
        group = tuple(group_df.row(0, named=True)[k] for k in GROUP_KEY)
        items = all_items[group]
        item_index = {it: i for i, it in enumerate(items)}
        arm_frames = group_df.partition_by(list(CELL_KEY), maintain_order=True)
        n_cells = len(arm_frames)
        X = np.stack([item_sums(af, SUM_FIELDS, item_index) for af in arm_frames], axis=1)
        X2 = X.reshape(len(items), n_cells * n_q)
        # Columns repeat across cells (the baseline's sums on the same units, counts): multiply the
        # distinct ones only.
        uniq, inverse = np.unique(X2, axis=1, return_inverse=True)
        counts = _float_counts(draws, seed, group, len(items), n_resamples)
        boot = (counts @ uniq)[:, inverse.ravel()].reshape(n_resamples, n_cells, n_q)
        del counts
        point_sums = X.sum(axis=0)
        point = evaluate(point_sums)
        reps = evaluate(boot, INTERVAL_METRICS)
        del boot
        # One percentile call for every (metric, cell) of the group.
        stacked = np.stack([reps[m] for m in INTERVAL_METRICS], axis=1)  # (B, n_metrics, n_cells)
        if ci == "bca":
            jack = evaluate(jackknife_sums(X2).reshape(len(items), n_cells, n_q), INTERVAL_METRICS)
            jack_stacked = np.stack([jack[m] for m in INTERVAL_METRICS], axis=1)
            pt = np.stack([point[m] for m in INTERVAL_METRICS], axis=0)
            lo, hi, und = bca_interval(stacked, pt, jack_stacked, confidence_level)
        else:
            lo, hi, und = percentile_interval(stacked, confidence_level)
        for j, af in enumerate(arm_frames):
            key = af.row(0, named=True)
            ests: dict[str, Estimate] = {}
            for m in METRICS:
                p = float(point[m.name][j])
                if m.interval:
                    k = INTERVAL_METRICS.index(m.name)
                    ests[m.name] = Estimate(p, ConfidenceInterval(float(lo[k, j]), float(hi[k, j])), int(und[k, j]))
                else:
                    ests[m.name] = Estimate(p)
            n_graded = int(point_sums[j, SUM_FIELDS.index("n_graded")])
            extras = cell_extras(af, X[:, j, :], ests, n_graded, len(items))
            out.append(Cell(
                target=key["target"], draft=key["draft"], dataset=key["dataset"], method=key["method"],
                params=key["params"], alpha=key["alpha"], n_items=int(af.get_column("item_id").n_unique()),
                n_runs=af.height, n_graded=n_graded, estimates=ests, extras=extras,
            ))
        delta_reps.append(reps["accuracy_delta_pp"])
    return CellTable(cells=adjust_across_cells(out), n_resamples=n_resamples, seed=seed, ci_method=ci,
                     confidence_level=confidence_level,
                     replicates={"accuracy_delta_pp": np.concatenate(delta_reps, axis=1) if delta_reps else np.empty((0, 0))})


def cell_extras(af: pl.DataFrame, item_x: np.ndarray, ests: dict[str, Estimate], n_graded: int,
                n_items_baseline: int) -> dict:
    """A cell's flags and tests beside its metrics: both drop rules, the paired accuracy test, per-item medians.

    ``item_x`` holds the cell's per-item sums (n_items, SUM_FIELDS). The accuracy test is exact
    McNemar on runs when every item has at most one graded pair, else the item-level sign-flip test
    (:mod:`lengthlens.stats.paired_test`); ``accuracy_test`` says which.
    """
    col = {name: item_x[:, i] for i, name in enumerate(SUM_FIELDS)}
    delta = ests["accuracy_delta_pp"]
    w2r, r2w = int(col["w2r"].sum()), int(col["r2w"].sum())
    p, test = paired_accuracy_test(col["n_graded"], col["c"], col["c_star"]) if n_graded else (None, None)
    hi = delta.confidence_interval.high if delta.confidence_interval is not None else np.nan
    return {
        "drop_2pp": (drop_2pp(hi) if n_graded else None),
        "drop_2pp_point": (drop_2pp_point(delta.point) if n_graded else None),
        "wrong_to_right": w2r if n_graded else None,
        "right_to_wrong": r2w if n_graded else None,
        "mcnemar_p": p,
        "accuracy_test": test,
        "rounds_ratio_median_item": median_of_item_means(af, "_rounds_ratio_unit"),
        "time_ratio_median_item": median_of_item_means(af, "_time_ratio_unit"),
        "budget": int(af.get_column("_budget").max()),
        "n_items_baseline": n_items_baseline,
    }


def median_of_item_means(af: pl.DataFrame, column: str) -> float:
    """Median over items of the mean of a per-run quantity over the item's runs (seeds), so items count once each."""
    return float(af.group_by("item_id").agg(pl.col(column).mean()).get_column(column).median())


def adjust_across_cells(cells_: list[Cell]) -> tuple[Cell, ...]:
    """Holm (family-wise) and Benjamini–Hochberg (false discovery rate) adjusted accuracy-test p-values over every graded cell."""
    p = np.array([np.nan if c.extras.get("mcnemar_p") is None else c.extras["mcnemar_p"] for c in cells_], dtype=float)
    p_holm, q_bh = holm(p), benjamini_hochberg(p)
    return tuple(
        replace(c, extras={**c.extras,
                           "mcnemar_p_holm": None if np.isnan(p_holm[i]) else float(p_holm[i]),
                           "mcnemar_q_bh": None if np.isnan(q_bh[i]) else float(q_bh[i])})
        for i, c in enumerate(cells_))


def cell_bootstrap_sums(runs: RunSet, units: pl.DataFrame, columns: list[str], *,
                        n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED, draws: DrawCache | None = None):
    """For each cell in ``units``, sums of ``columns`` over its units: point (Q,) and per resample (B, Q).

    Uses the very draws of :func:`cells` (same seed, group and items), so a secondary analysis'
    intervals are consistent with the cell table's. Yields (cell key dict, point, boot, n_items).
    """
    all_items = all_group_items(runs)
    for group_df in units.partition_by(list(GROUP_KEY), maintain_order=True):
        group = tuple(group_df.row(0, named=True)[k] for k in GROUP_KEY)
        items = all_items[group]
        index = {it: i for i, it in enumerate(items)}
        counts = _float_counts(draws, seed, group, len(items), n_resamples)
        for af in group_df.partition_by(list(CELL_KEY), maintain_order=True):
            X = item_sums(af, columns, index)
            key = {k: af.row(0, named=True)[k] for k in CELL_KEY}
            yield key, X.sum(axis=0), counts @ X, int(af.get_column("item_id").n_unique())
