"""Thinking-channel attribution: how much of a relaxed rule's extra length lands in the thinking trace.

Each output is split into thinking and answer by :mod:`lengthlens.data.channels` (GPT-OSS harmony
channels, ``<think>`` tags, or none). Counts are characters of message content, markers and tags
excluded. Per cell over paired runs: extra_chars = sum(chars - chars*), and the share of the extra
in the thinking part = sum(think - think*) / sum(chars - chars*), with a paired bootstrap interval
from the same draws as the cell table; plus the per-item distribution of that share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import polars as pl

from lengthlens.data.channels import check_logged_counts, split_channels
from lengthlens.data.runset import RunSet
from lengthlens.data.pairing import CELL_KEY, cell_units
from lengthlens.stats.distinct_product import GroupProducts
from lengthlens.stats.item_sums import map_groups, plan_group_bootstrap_sums
from lengthlens.stats.resample import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
    DrawCache,
    percentile_interval,
)
from lengthlens.stats.results import frame_html

if TYPE_CHECKING:  # pandas is imported where a frame is built: worker processes need none
    import pandas as pd

#: Cells putting at least these shares of their extra length into thinking (by the share's lower limit) are counted.
SHARE_THRESHOLDS = (0.90, 0.92)


def run_channels(table: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Add per-run ``thinking_chars``, ``answer_chars``, ``thinking_closed``, ``channel_format`` from the text; see
    :func:`run_channels_audited`, which also returns each disagreement's (target, cause, source)."""
    out, disagreements, _causes = run_channels_audited(table)
    return out, disagreements


def run_channels_audited(table: pl.DataFrame) -> tuple[pl.DataFrame, list[str], list[tuple[str, str, str]]]:
    """Add per-run ``thinking_chars``, ``answer_chars``, ``thinking_closed``, ``channel_format`` from the text.

    Runs without text fall back to the generator's logged counts (``chars_source`` says which).
    Logged counts that the text cannot explain are returned as messages, never trusted blindly.
    """
    # Runs without text take their logged counts as columns; only runs with text are split, one by one (a flat
    # file of counts has no text: 180k runs went through a Python loop for nothing).
    logged = pl.col("text").is_null() & pl.col("analysis_chars").is_not_null() & pl.col("final_chars").is_not_null()
    extra = table.select(
        pl.lit(None, dtype=pl.String).alias("channel_format"),
        pl.when(logged).then(pl.col("analysis_chars")).cast(pl.Int64).alias("thinking_chars"),
        pl.when(logged).then(pl.col("final_chars")).cast(pl.Int64).alias("answer_chars"),
        pl.when(logged).then(pl.col("reached_final_channel")).cast(pl.Boolean).alias("thinking_closed"),
        pl.when(logged).then(pl.lit("logged")).alias("chars_source").cast(pl.String),
    )
    disagreements: list[str] = []
    causes: list[tuple[str, str, str]] = []
    positions = table.select(pl.arg_where(pl.col("text").is_not_null())).to_series()
    if positions.len():
        rows = {k: [] for k in ("channel_format", "thinking_chars", "answer_chars", "thinking_closed")}
        texts = table[positions].select("text", "target", "analysis_chars", "final_chars", "reached_final_channel", "source")
        for r in texts.iter_rows(named=True):
            s = split_channels(r["text"], r["target"])
            rows["channel_format"].append(s.format)
            rows["thinking_chars"].append(s.thinking_chars)
            rows["answer_chars"].append(s.answer_chars)
            rows["thinking_closed"].append(s.thinking_closed)
            msg = check_logged_counts(s, r["analysis_chars"], r["final_chars"], r["reached_final_channel"])
            if msg:
                disagreements.append(f"{r['source']}: {msg}")
                causes.append((r["target"], disagreement_cause(s, r["analysis_chars"], r["final_chars"], msg), r["source"]))
        rows["chars_source"] = ["text"] * positions.len()
        extra = extra.with_columns(
            extra[k].scatter(positions, pl.Series(k, v, dtype=extra.schema[k])) for k, v in rows.items())
    return pl.concat([table, extra], how="horizontal"), disagreements, causes


#: Known causes of logged channel counts that disagree with the text, as the note explains them.
DISAGREEMENT_CAUSES = {
    "harmony_counter": ("the generator counts GPT-OSS harmony channels, which this model's text (<think> tags) does not "
                        "have, so it logs the whole text as analysis_chars and no final_chars"),
    "no_final_header": ("the generator found no well-formed '<|channel|>final<|message|>' header and logged the whole "
                        "text's length as final_chars"),
    "other": "counts that the text cannot explain",
}


def disagreement_cause(split, analysis_chars: int | None, final_chars: int | None, msg: str) -> str:
    """Which known cause (:data:`DISAGREEMENT_CAUSES`) explains one run's disagreeing logged counts."""
    if split.format != "harmony" and analysis_chars == split.text_chars and not final_chars:
        return "harmony_counter"
    if "whole text's length" in msg:
        return "no_final_header"
    return "other"


def disagreement_notes(causes: list[tuple[str, str, str]]) -> list[str]:
    """One line per model (and cause): how many runs' logged channel counts disagree, why, and one example."""
    groups: dict[tuple[str, str], list[str]] = {}
    for target, cause, source in causes:
        groups.setdefault((str(target), cause), []).append(source)
    return [f"{target}: {len(srcs)} runs' logged channel counts disagree with their text (the text is used): "
            f"{DISAGREEMENT_CAUSES[cause]}; e.g. {sorted(srcs)[0]}"
            for (target, cause), srcs in sorted(groups.items())]


@dataclass(frozen=True)
class Attribution:
    """Per-cell attribution of extra length to the thinking channel, a summary, and count audits."""

    cells: pd.DataFrame
    summary: pd.DataFrame
    logged_disagreements: tuple[str, ...]
    #: The disagreements as one line per model with their known cause (what the report shows).
    disagreement_notes: tuple[str, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        return self.cells

    def _repr_html_(self) -> str:
        return frame_html(self.summary, "Thinking attribution: summary") + frame_html(
            self.cells[["dataset", "method", "params", "n_items", "extra_chars", "extra_chars_thinking", "thinking_share",
                        "thinking_share_lo", "thinking_share_hi"]], "Per cell")


def channel_units(runs: RunSet) -> tuple[pl.DataFrame, list[str], list[tuple[str, str, str]]]:
    """The cell units (:func:`~lengthlens.data.pairing.cell_units`) with each side's channel counts, and the
    count audits of :func:`run_channels_audited`. A report pairs the runs once, here, for every analysis
    (the channel columns are extra columns the others ignore)."""
    paired, disagreements, causes = run_channels_audited(runs.paired)
    return cell_units(paired), disagreements, causes


def attribution(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
                confidence_level: float = DEFAULT_CONFIDENCE, draws: DrawCache | None = None,
                table3_cells: pd.DataFrame | None = None,
                channels: tuple[pl.DataFrame, list[str], list[tuple[str, str, str]]] | None = None,
                workers: int | None = None) -> Attribution:
    """Share of each cell's extra characters that is thinking, with intervals from the cell table's draws.

    ``table3_cells`` (keys of the cells Table 3 uses) adds summary rows on those cells beside all cells.
    ``channels``: :func:`channel_units` when the caller has it already. ``workers``: groups computed at
    once (:mod:`lengthlens.stats.parallel`; the numbers do not depend on it).
    """
    channels = channel_units(runs) if channels is None else channels
    draws = draws if draws is not None else DrawCache(seed, n_resamples, keep=False)
    rows = map_groups(runs, attribution_units(channels[0]),
                      lambda df, group, items: attribution_group(df, group, len(items), draws, confidence_level), workers)
    return attribution_result([r for part in rows for r in part], channels, table3_cells)


def attribution_units(units: pl.DataFrame) -> pl.DataFrame:
    """The cell units whose channels are known on both sides, with the character sums attribution resamples."""
    units = units.filter(pl.col("thinking_chars").is_not_null() & pl.col("thinking_chars_star").is_not_null())
    return units.with_columns(
        (pl.col("thinking_chars") + pl.col("answer_chars")).cast(pl.Float64).alias("chars"),
        (pl.col("thinking_chars_star") + pl.col("answer_chars_star")).cast(pl.Float64).alias("chars_star"),
        pl.lit(1.0).alias("one"),
    ).with_columns(
        (pl.col("chars") - pl.col("chars_star")).alias("extra"),
        (pl.col("thinking_chars") - pl.col("thinking_chars_star")).cast(pl.Float64).alias("extra_thinking"),
    )


_SUMMED = ["chars", "chars_star", "extra", "extra_thinking", "one"]
_COLUMNS = [*CELL_KEY, "n_items", "n_runs", "chars_mean", "chars_mean_star", "extra_chars", "extra_chars_thinking",
            "extra_chars_answer", "extra_chars_mean", "extra_chars_mean_lo", "extra_chars_mean_hi", "thinking_share",
            "thinking_share_lo", "thinking_share_hi", "thinking_share_reason", "item_share_median", "item_share_q25",
            "item_share_q75", "n_runs_share_defined"]


def attribution_group(group_df: pl.DataFrame, group: tuple, n_group: int, draws: DrawCache, level: float) -> list[dict]:
    """The attribution rows of one group's cells (``group_df``: that group's :func:`attribution_units`)."""
    return plan_attribution_group(group_df, n_group, GroupProducts(draws, group), level)()


def plan_attribution_group(group_df: pl.DataFrame, n_group: int, products: GroupProducts,
                           level: float) -> Callable[[], list[dict]]:
    """:func:`attribution_group` in two steps: the cells' sums are added to ``products`` now; the returned
    function, called once every analysis of the group has added its own, makes the rows."""
    cell_frames = group_df.partition_by(list(CELL_KEY), maintain_order=True)
    sums = plan_group_bootstrap_sums(cell_frames, n_group, _SUMMED, products)

    def finish() -> list[dict]:
        out = []
        for cell_units_df, (key, point, boot, n_items) in zip(cell_frames, sums()):
            item_share = cell_units_df.filter(pl.col("extra") != 0).select((pl.col("extra_thinking") / pl.col("extra")).alias("s"))["s"]
            n = cell_units_df.height
            out.append({
                **key, "n_items": n_items, "n_runs": n,
                "chars_mean": point[0] / n, "chars_mean_star": point[1] / n,
                "extra_chars": point[2], "extra_chars_thinking": point[3], "extra_chars_answer": point[2] - point[3],
                **share_with_interval(point, boot, level),
                "item_share_median": float(item_share.median()) if item_share.len() else np.nan,
                "item_share_q25": float(item_share.quantile(0.25, "linear")) if item_share.len() else np.nan,
                "item_share_q75": float(item_share.quantile(0.75, "linear")) if item_share.len() else np.nan,
                "n_runs_share_defined": item_share.len(),
            })
        return out

    return finish


def attribution_result(rows: list[dict], channels: tuple[pl.DataFrame, list[str], list[tuple[str, str, str]]],
                       table3_cells: pd.DataFrame | None = None) -> Attribution:
    """The Attribution of every group's :func:`attribution_group` rows (in group order) and the channel audits."""
    import pandas as pd
    _units, disagreements, causes = channels
    cells_df = pd.DataFrame(rows, columns=_COLUMNS)
    return Attribution(cells=cells_df, summary=summarize(cells_df, table3_cells), logged_disagreements=tuple(disagreements),
                       disagreement_notes=tuple(disagreement_notes(causes)))


def share_with_interval(point: np.ndarray, boot: np.ndarray, confidence_level: float) -> dict:
    """The thinking share of the extra length with its interval, left undefined (with the reason) when the
    interval of the mean extra length per run includes 0: a share of a difference that may be nothing is noise.

    ``point``/``boot`` hold sums of (chars, chars*, extra, extra_thinking, runs), point and per resample.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        extra_b = np.where(boot[:, 4] > 0, boot[:, 2] / np.where(boot[:, 4] > 0, boot[:, 4], 1), np.nan)
        share_b = np.where(boot[:, 2] != 0, boot[:, 3] / np.where(boot[:, 2] != 0, boot[:, 2], 1), np.nan)
    (e_lo, s_lo), (e_hi, s_hi), _ = percentile_interval(np.stack([extra_b, share_b], axis=1), confidence_level)
    out = {"extra_chars_mean": point[2] / point[4] if point[4] else np.nan,
           "extra_chars_mean_lo": float(e_lo), "extra_chars_mean_hi": float(e_hi),
           "thinking_share": np.nan, "thinking_share_lo": np.nan, "thinking_share_hi": np.nan, "thinking_share_reason": ""}
    if point[2] == 0:
        out["thinking_share_reason"] = "no extra length"
    elif not (np.isfinite(e_lo) and np.isfinite(e_hi)) or e_lo <= 0 <= e_hi:
        out["thinking_share_reason"] = "the interval of the extra length includes 0"
    else:
        out.update(thinking_share=point[3] / point[2], thinking_share_lo=float(s_lo), thinking_share_hi=float(s_hi))
    return out


def summarize(cells_df: pd.DataFrame, table3_cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per method and overall, on all cells (``scope`` all) and on Table 3's cells (``scope`` table3, when given).

    Counts among cells with longer outputs (extra_chars > 0): how many have a defined share (the
    interval of the extra length excludes 0), and how many put >= 90 % / >= 92 % of it into thinking
    by the share's lower limit (``n_share_lo_ge_*``) and, for comparison, by its point estimate
    (``n_share_point_ge_*``).
    """
    import pandas as pd
    scopes = [("all", cells_df)]
    if table3_cells is not None:
        keys = table3_cells[list(CELL_KEY)].drop_duplicates()
        scopes.append(("table3", cells_df.merge(keys, on=list(CELL_KEY), how="inner")))
    rows = []
    for scope, df in scopes:
        rows += [{"scope": scope, **_summary_row(d, str(m))} for m, d in df.groupby("method", sort=True)]
        rows.append({"scope": scope, **_summary_row(df, "all")})
    return pd.DataFrame(rows)


def _summary_row(d: pd.DataFrame, label: str) -> dict:
    longer = d[d["extra_chars"] > 0]
    defined = longer[longer["thinking_share"].notna()]
    r = {"method": label, "n_cells": len(d), "n_cells_longer": len(longer), "n_share_defined": len(defined),
         "n_share_undefined": len(longer) - len(defined),
         "thinking_share_median": float(defined["thinking_share"].median()) if len(defined) else np.nan,
         "thinking_share_pooled": float(longer["extra_chars_thinking"].sum() / longer["extra_chars"].sum()) if len(longer) else np.nan}
    for t in SHARE_THRESHOLDS:
        r[f"n_share_lo_ge_{int(round(t * 100))}"] = int((defined["thinking_share_lo"] >= t).sum())
    for t in SHARE_THRESHOLDS:
        r[f"n_share_point_ge_{int(round(t * 100))}"] = int((defined["thinking_share"] >= t).sum())
    return r
