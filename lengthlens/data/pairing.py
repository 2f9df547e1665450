"""Pair runs of one arm with runs of another on the same (item, seed): the unit every cell metric is built on."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from lengthlens.data.schema import (
    ARM_KEY,
    GROUP_KEY,
    LENGTH_FINISH_REASONS,
    STRICT,
    UNIT_KEY,
)

CELL_KEY = (*ARM_KEY, "alpha")


def with_derived(table: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """Add per-run derived columns: ``l_bar`` (accepted / rounds, null without rounds) and ``censored``.

    ``censored`` is null (unknown) when the run has no finish_reason and no budget or length to compare.
    """
    says = pl.col("finish_reason").is_in(list(LENGTH_FINISH_REASONS)).fill_null(False)
    at_budget = pl.col("output_tokens") >= pl.col("max_new_tokens")
    unknown = pl.col("finish_reason").is_null() & at_budget.is_null()
    return table.with_columns(
        pl.when(pl.col("draft_rounds") > 0).then(pl.col("accepted_tokens") / pl.col("draft_rounds")).otherwise(None).alias("l_bar"),
        pl.when(unknown).then(None).otherwise(says | at_budget.fill_null(False)).alias("censored"),
    )


def _paired(x: pl.LazyFrame, y: pl.LazyFrame, on: tuple[str, ...], suffix: str) -> pl.LazyFrame:
    """The join of :func:`pair` as a lazy plan, after checking that ``on`` is unique in ``y``."""
    dup = y.select(list(on)).filter(pl.struct(list(on)).is_duplicated()).collect().height
    if dup:
        raise ValueError(f"the comparison side has {dup} runs sharing their {on} key; pairing needs one run per key")
    y_cols = [c for c in y.collect_schema().names() if c not in on]
    return x.join(y.select(*on, *[pl.col(c).alias(c + suffix) for c in y_cols]), on=list(on), how="inner", nulls_equal=True)


def pair(x: pl.DataFrame, y: pl.DataFrame, *, on: tuple[str, ...] = (*GROUP_KEY, *UNIT_KEY), suffix: str = "_star") -> pl.DataFrame:
    """Inner-join runs ``x`` with runs ``y`` on ``on``; y's columns get ``suffix``.

    This is the general "arm X against arm Y on the same items" operation; cells are
    pair(relaxed runs, strict runs). Each (on) key must be unique in y.
    """
    return _paired(x.lazy(), y.lazy(), on, suffix).collect()


def cell_units(paired_runs: pl.DataFrame, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """Every relaxed ok run joined with its strict baseline run (one row per cell unit), sorted canonically.

    ``columns``: the run columns to keep on both sides besides the keys (default all; the derived ``l_bar``
    and ``censored`` are kept either way). One lazy plan (derive, split, join, sort): polars then holds no
    intermediate copy of the runs, and reads only the columns asked for.
    """
    t = with_derived(paired_runs.lazy())
    if columns is not None:
        keep = dict.fromkeys([*CELL_KEY, *UNIT_KEY, "l_bar", "censored", *columns])
        t = t.select([c for c in keep if c in paired_runs.columns or c in ("l_bar", "censored")])
    units = _paired(t.filter(pl.col("method") != STRICT), t.filter(pl.col("method") == STRICT), (*GROUP_KEY, *UNIT_KEY),
                    "_star")
    return units.sort([*ARM_KEY, *UNIT_KEY], maintain_order=True).collect()
