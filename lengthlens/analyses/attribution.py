"""Thinking-channel attribution: how much of a relaxed rule's extra length lands in the thinking trace.

Each output is split into thinking and answer by :mod:`lengthlens.data.channels` (GPT-OSS harmony
channels, ``<think>`` tags, or none). Counts are characters of message content, markers and tags
excluded. Per cell over paired runs: extra_chars = sum(chars - chars*), and the share of the extra
in the thinking part = sum(think - think*) / sum(chars - chars*), with a paired bootstrap interval
from the same draws as the cell table; plus the per-item distribution of that share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import polars as pl

from lengthlens.data.channels import check_logged_counts, split_channels
from lengthlens.data.loading import RunSet
from lengthlens.data.pairing import CELL_KEY, cell_units
from lengthlens.stats.estimate import cell_bootstrap_sums
from lengthlens.stats.resample import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
    DrawCache,
    percentile_interval,
)
from lengthlens.stats.results import frame_html

#: Cells putting at least these shares of their extra length into thinking are counted in the summary.
SHARE_THRESHOLDS = (0.90, 0.92)


def run_channels(table: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Add per-run ``thinking_chars``, ``answer_chars``, ``thinking_closed``, ``channel_format`` from the text.

    Runs without text fall back to the generator's logged counts (``chars_source`` says which).
    Logged counts that the text cannot explain are returned as messages, never trusted blindly.
    """
    rows = {k: [] for k in ("channel_format", "thinking_chars", "answer_chars", "thinking_closed", "chars_source")}
    disagreements: list[str] = []
    for r in table.select("text", "target", "analysis_chars", "final_chars", "reached_final_channel", "source").iter_rows(named=True):
        if isinstance(r["text"], str):
            s = split_channels(r["text"], r["target"])
            rows["channel_format"].append(s.format)
            rows["thinking_chars"].append(s.thinking_chars)
            rows["answer_chars"].append(s.answer_chars)
            rows["thinking_closed"].append(s.thinking_closed)
            rows["chars_source"].append("text")
            msg = check_logged_counts(s, r["analysis_chars"], r["final_chars"], r["reached_final_channel"])
            if msg:
                disagreements.append(f"{r['source']}: {msg}")
        elif r["analysis_chars"] is not None and r["final_chars"] is not None:
            rows["channel_format"].append(None)
            rows["thinking_chars"].append(r["analysis_chars"])
            rows["answer_chars"].append(r["final_chars"])
            rows["thinking_closed"].append(r["reached_final_channel"])
            rows["chars_source"].append("logged")
        else:
            for k in rows:
                rows[k].append(None)
    extra = pl.DataFrame(rows, schema={"channel_format": pl.String, "thinking_chars": pl.Int64, "answer_chars": pl.Int64,
                                       "thinking_closed": pl.Boolean, "chars_source": pl.String})
    return pl.concat([table, extra], how="horizontal"), disagreements


@dataclass(frozen=True)
class Attribution:
    """Per-cell attribution of extra length to the thinking channel, a summary, and count audits."""

    cells: pd.DataFrame
    summary: pd.DataFrame
    logged_disagreements: tuple[str, ...]

    def to_frame(self) -> pd.DataFrame:
        return self.cells

    def _repr_html_(self) -> str:
        return frame_html(self.summary, "Thinking attribution: summary") + frame_html(
            self.cells[["dataset", "method", "params", "n_items", "extra_chars", "extra_chars_thinking", "thinking_share",
                        "thinking_share_lo", "thinking_share_hi"]], "Per cell")


def attribution(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
                confidence_level: float = DEFAULT_CONFIDENCE, draws: DrawCache | None = None) -> Attribution:
    """Share of each cell's extra characters that is thinking, with intervals from the cell table's draws."""
    paired, disagreements = run_channels(runs.paired)
    units = cell_units(paired).filter(pl.col("thinking_chars").is_not_null() & pl.col("thinking_chars_star").is_not_null())
    units = units.with_columns(
        (pl.col("thinking_chars") + pl.col("answer_chars")).cast(pl.Float64).alias("chars"),
        (pl.col("thinking_chars_star") + pl.col("answer_chars_star")).cast(pl.Float64).alias("chars_star"),
    ).with_columns(
        (pl.col("chars") - pl.col("chars_star")).alias("extra"),
        (pl.col("thinking_chars") - pl.col("thinking_chars_star")).cast(pl.Float64).alias("extra_thinking"),
    )
    cols = ["chars", "chars_star", "extra", "extra_thinking"]
    out = []
    for key, point, boot, n_items in cell_bootstrap_sums(runs, units, cols, n_resamples=n_resamples, seed=seed, draws=draws):
        cell_units_df = units.filter(*[pl.col(k).eq_missing(v) for k, v in key.items()])
        with np.errstate(divide="ignore", invalid="ignore"):
            share = point[3] / point[2] if point[2] != 0 else np.nan
            share_b = np.where(boot[:, 2] != 0, boot[:, 3] / np.where(boot[:, 2] != 0, boot[:, 2], 1), np.nan)
        lo, hi, undefined = percentile_interval(share_b[:, None], confidence_level)
        item_share = cell_units_df.filter(pl.col("extra") != 0).select((pl.col("extra_thinking") / pl.col("extra")).alias("s"))["s"]
        n = cell_units_df.height
        out.append({
            **key, "n_items": n_items, "n_runs": n,
            "chars_mean": point[0] / n, "chars_mean_star": point[1] / n,
            "extra_chars": point[2], "extra_chars_thinking": point[3], "extra_chars_answer": point[2] - point[3],
            "thinking_share": share, "thinking_share_lo": float(lo[0]), "thinking_share_hi": float(hi[0]),
            "item_share_median": float(item_share.median()) if item_share.len() else np.nan,
            "item_share_q25": float(item_share.quantile(0.25, "linear")) if item_share.len() else np.nan,
            "item_share_q75": float(item_share.quantile(0.75, "linear")) if item_share.len() else np.nan,
            "n_runs_share_defined": item_share.len(),
        })
    cells_df = pd.DataFrame(out, columns=[*CELL_KEY, "n_items", "n_runs", "chars_mean", "chars_mean_star", "extra_chars",
                                          "extra_chars_thinking", "extra_chars_answer", "thinking_share", "thinking_share_lo",
                                          "thinking_share_hi", "item_share_median", "item_share_q25", "item_share_q75",
                                          "n_runs_share_defined"])
    return Attribution(cells=cells_df, summary=summarize(cells_df), logged_disagreements=tuple(disagreements))


def summarize(cells_df: pd.DataFrame) -> pd.DataFrame:
    """Per method and overall: cells with extra length, and how many put >= 90 % / >= 92 % of it into thinking."""
    def row(d: pd.DataFrame, label: str) -> dict:
        longer = d[d["extra_chars"] > 0]
        r = {"method": label, "n_cells": len(d), "n_cells_longer": len(longer),
             "thinking_share_median": float(longer["thinking_share"].median()) if len(longer) else np.nan,
             "thinking_share_pooled": float(longer["extra_chars_thinking"].sum() / longer["extra_chars"].sum()) if len(longer) else np.nan}
        for t in SHARE_THRESHOLDS:
            r[f"n_share_ge_{int(round(t * 100))}"] = int((longer["thinking_share"] >= t).sum())
        return r

    rows = [row(d, str(m)) for m, d in cells_df.groupby("method", sort=True)] + [row(cells_df, "all")]
    return pd.DataFrame(rows)
