"""Pair runs of one arm with runs of another on the same (item, seed): the unit every cell metric is built on."""

from __future__ import annotations

import polars as pl

from lengthlens.data.schema import (
    ARM_KEY,
    GROUP_KEY,
    LENGTH_FINISH_REASONS,
    STRICT,
    UNIT_KEY,
)

CELL_KEY = (*ARM_KEY, "alpha")


def with_derived(table: pl.DataFrame) -> pl.DataFrame:
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


def pair(x: pl.DataFrame, y: pl.DataFrame, *, on: tuple[str, ...] = (*GROUP_KEY, *UNIT_KEY), suffix: str = "_star") -> pl.DataFrame:
    """Inner-join runs ``x`` with runs ``y`` on ``on``; y's columns get ``suffix``.

    This is the general "arm X against arm Y on the same items" operation; cells are
    pair(relaxed runs, strict runs). Each (on) key must be unique in y.
    """
    dup = y.filter(pl.struct(list(on)).is_duplicated())
    if dup.height:
        raise ValueError(f"the comparison side has {dup.height} runs sharing their {on} key; pairing needs one run per key")
    y_cols = [c for c in y.columns if c not in on]
    return x.join(y.select(*on, *[pl.col(c).alias(c + suffix) for c in y_cols]), on=list(on), how="inner", nulls_equal=True)


def cell_units(paired_runs: pl.DataFrame) -> pl.DataFrame:
    """Every relaxed ok run joined with its strict baseline run (one row per cell unit), sorted canonically."""
    t = with_derived(paired_runs)
    base = t.filter(pl.col("method") == STRICT)
    relaxed = t.filter(pl.col("method") != STRICT)
    units = pair(relaxed, base)
    return units.sort([*ARM_KEY, *UNIT_KEY])
