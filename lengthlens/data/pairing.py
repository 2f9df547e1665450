"""Pair runs of one arm with runs of another on the same (item, seed): the unit every cell metric is built on.

:class:`Derived` is one load's runs derived once (``RunSet.derived``): the derived columns, the
split of the texts into channels and every cell's pairs, computed on first use and then shared by
every analysis of the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

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


def cell_units(paired_runs: pl.DataFrame | pl.LazyFrame, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """Every relaxed ok run joined with its strict baseline run (one row per cell unit), sorted canonically.

    ``columns``: the run columns to keep on both sides besides the keys (default all, with the derived ``l_bar``;
    the derived ``censored`` is kept either way). One lazy plan (derive, split, join, sort): polars then
    holds no intermediate copy of the runs, and reads only the columns asked for.
    """
    return _cell_pairs(with_derived(paired_runs.lazy()), paired_runs.collect_schema().names(), columns)


def _cell_pairs(derived: pl.LazyFrame, present: Sequence[str], columns: Sequence[str] | None) -> pl.DataFrame:
    """:func:`cell_units` on runs that already have their derived columns (``present``: the runs' own columns)."""
    on = (*GROUP_KEY, *UNIT_KEY)
    relaxed, strict = derived.filter(pl.col("method") != STRICT), derived.filter(pl.col("method") == STRICT)
    if columns is not None:
        # The baseline side carries only the columns asked for: its arm is the strict one, and at scale each
        # extra column of the pairs is a column of every paired run.
        asked = [c for c in dict.fromkeys([*columns, "censored"]) if c in present or c in ("l_bar", "censored")]
        relaxed = relaxed.select([c for c in dict.fromkeys([*CELL_KEY, *UNIT_KEY, *asked]) if c in present or c in asked])
        strict = strict.select([c for c in dict.fromkeys([*on, *asked]) if c in present or c in asked])
    units = _paired(relaxed, strict, on, "_star").collect()
    return _sorted_by_columns(units, [*ARM_KEY, *UNIT_KEY])


def _sorted_by_columns(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``frame.sort(by, maintain_order=True)``, moving one column at a time: a sort of the whole frame holds it twice."""
    order = frame.select(pl.arg_sort_by(by, maintain_order=True)).to_series()
    return pl.DataFrame([frame.drop_in_place(name).gather(order) for name in list(frame.columns)])


#: The per-run columns the split into channels adds (:func:`lengthlens.data.channel_counts.run_channels`).
CHANNEL_COLUMNS = ("thinking_chars", "answer_chars", "thinking_closed", "channel_format", "chars_source")


class Derived:
    """One load's runs, derived once and shared by every analysis (``RunSet.derived``); each part on first use.

    ``runs``: every loaded run with ``l_bar`` and ``censored`` (:func:`with_derived`); ``paired``: those that
    enter cells; ``split``: the paired runs with their texts split into thinking and answer
    (:func:`~lengthlens.data.channel_counts.run_channels_audited`) and the audit of logged channel counts;
    ``ok``: every ok run, paired or not, split the same way (an intervention's base runs need not enter a
    cell); :meth:`units`: every cell's pairs.
    """

    def __init__(self, table: pl.DataFrame):
        self._table = table
        self._units: dict[tuple[str, ...] | None, pl.DataFrame] = {}

    @cached_property
    def runs(self) -> pl.DataFrame:
        return with_derived(self._table)

    @cached_property
    def paired(self) -> pl.DataFrame:
        return self.runs.filter(pl.col("paired"))

    @cached_property
    def split(self) -> tuple[pl.DataFrame, list[str], list[tuple[str, str, str]]]:
        """(paired runs with channel columns, logged counts the texts contradict, their (target, cause, source))."""
        from lengthlens.data.channel_counts import run_channels_audited

        return run_channels_audited(self.paired)

    @cached_property
    def ok(self) -> pl.DataFrame:
        """Every ok run with channel columns: the paired ones as :attr:`split` has them, the others split here."""
        from lengthlens.data.channel_counts import run_channels

        rest = self.runs.filter((pl.col("status") == "ok") & ~pl.col("paired"))
        if rest.is_empty():
            return self.split[0]
        return pl.concat([self.split[0], run_channels(rest)[0]], how="diagonal_relaxed")

    def units(self, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Every relaxed paired run with its baseline run (:func:`cell_units`) on ``columns`` (default all), channel
        columns included when asked for; the same columns give the same table, made once."""
        key = None if columns is None else tuple(dict.fromkeys(columns))
        if key not in self._units:
            split = key is None or any(c in CHANNEL_COLUMNS for c in key)
            runs = self.split[0] if split else self.paired
            self._units[key] = _cell_pairs(runs.lazy(), runs.columns, key)
        return self._units[key]
