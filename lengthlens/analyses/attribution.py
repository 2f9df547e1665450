"""Thinking-channel attribution: how much of a relaxed rule's extra length lands in the thinking trace.

Each output is split into thinking and answer by :mod:`lengthlens.data.channels` (GPT-OSS harmony
channels, ``<think>`` tags, or none). Counts are characters of message content, markers and tags
excluded. Per cell over paired runs: extra_chars = sum(chars - chars*), and the share of the extra
in the thinking part = sum(think - think*) / sum(chars - chars*), with a paired bootstrap interval
from the same draws as the cell table; plus the per-item distribution of that share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from lengthlens.analyses.engine import CellResult, CellRuns, Plan, Settings
from lengthlens.analyses.outputs import Column, Context, Figure, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.channel_counts import disagreement_notes
from lengthlens.data.pairing import CELL_KEY
from lengthlens.data.schema import ARM_KEY
from lengthlens.results import Estimate, frame, frame_html
from lengthlens.stats.intervals import Ratio

if TYPE_CHECKING:
    import pandas as pd

#: Cells putting at least these shares of their extra length into thinking (by the share's lower limit) are counted.
SHARE_THRESHOLDS = (0.90, 0.92)


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


def _extra_mean(s):
    return s.extra / s.one


def _share(s):
    return s.extra_thinking / s.extra


#: The statistics of a cell's resampled character sums: the mean extra length per paired run and the
#: thinking share of the extra (differences of lengths, so on their own scale).
STATISTICS = {"extra_chars_mean": Ratio(_extra_mean, "difference"), "thinking_share": Ratio(_share, "difference")}
_COLUMNS = [*CELL_KEY, "n_items", "n_runs", "chars_mean", "chars_mean_star", "extra_chars", "extra_chars_thinking",
            "extra_chars_answer", "extra_chars_mean", "extra_chars_mean_lo", "extra_chars_mean_hi", "thinking_share",
            "thinking_share_lo", "thinking_share_hi", "thinking_share_reason", "item_share_median", "item_share_q25",
            "item_share_q75", "n_runs_share_defined"]


@dataclass(frozen=True)
class AttributionAnalysis:
    """attribution.csv on the engine: per cell, where the extra characters go, with the share's interval.

    Uses the cell's runs whose channels are known on both sides (a cell without texts has no row).
    """

    fields = ("thinking_chars", "answer_chars", "thinking_chars_star", "answer_chars_star")

    def plan(self, cell: CellRuns, settings: Settings) -> Plan | None:
        f = cell.fields
        if "thinking_chars" not in f or "thinking_chars_star" not in f:  # the runs were not split into channels
            return None
        known = ~np.isnan(f["thinking_chars"]) & ~np.isnan(f["thinking_chars_star"])
        if not known.any():
            return None
        part = cell.subset(known) if not known.all() else cell
        g = part.fields
        chars, chars_star = g["thinking_chars"] + g["answer_chars"], g["thinking_chars_star"] + g["answer_chars_star"]
        extra, extra_thinking = chars - chars_star, g["thinking_chars"] - g["thinking_chars_star"]
        columns = {"chars": part.by_item(chars), "chars_star": part.by_item(chars_star), "extra": part.by_item(extra),
                   "extra_thinking": part.by_item(extra_thinking), "one": part.runs_per_item()}
        with np.errstate(all="ignore"):
            share = (extra_thinking / extra)[extra != 0]
        return Plan(part, columns, STATISTICS, share)

    def finish(self, results: list[CellResult], settings: Settings) -> list[dict[str, Any]]:
        rows = []
        for r in results:
            point, share = r.sums.point(), r.plan.data
            n = int(point["one"])
            rows.append({
                **r.cell.key, "n_items": r.cell.n_items, "n_runs": n,
                "chars_mean": point["chars"] / n, "chars_mean_star": point["chars_star"] / n,
                "extra_chars": point["extra"], "extra_chars_thinking": point["extra_thinking"],
                "extra_chars_answer": point["extra"] - point["extra_thinking"],
                **share_with_interval(r.estimates["extra_chars_mean"], r.estimates["thinking_share"], point["extra"]),
                "item_share_median": float(np.quantile(share, 0.5)) if share.size else np.nan,
                "item_share_q25": float(np.quantile(share, 0.25)) if share.size else np.nan,
                "item_share_q75": float(np.quantile(share, 0.75)) if share.size else np.nan,
                "n_runs_share_defined": int(share.size),
            })
        return rows

    def collect(self, rows: list[dict[str, Any]], settings: Settings) -> pd.DataFrame:
        return frame(rows, columns=_COLUMNS)


def share_with_interval(extra_mean: Estimate, share: Estimate, extra: float) -> dict[str, Any]:
    """The thinking share of the extra length with its interval, left undefined (with the reason) when the
    interval of the mean extra length per run includes 0: a share of a difference that may be nothing is noise."""
    out = {"extra_chars_mean": extra_mean.point, "extra_chars_mean_lo": extra_mean.low,
           "extra_chars_mean_hi": extra_mean.high, "thinking_share": np.nan, "thinking_share_lo": np.nan,
           "thinking_share_hi": np.nan, "thinking_share_reason": ""}
    e_lo, e_hi = extra_mean.low, extra_mean.high
    if extra == 0:
        out["thinking_share_reason"] = "no extra length"
    elif not (np.isfinite(e_lo) and np.isfinite(e_hi)) or e_lo <= 0 <= e_hi:
        out["thinking_share_reason"] = "the interval of the extra length includes 0"
    else:
        out.update(thinking_share=share.point, thinking_share_lo=share.low, thinking_share_hi=share.high)
    return out


def attribution_result(cells_df: pd.DataFrame, disagreements: Sequence[str], causes: Sequence[tuple[str, str, str]],
                       table3_cells: pd.DataFrame | None = None) -> Attribution:
    """The Attribution from the per-cell rows, the channel audits and (for the summary's second scope) Table 3's cells."""
    return Attribution(cells=cells_df, summary=summarize(cells_df, table3_cells), logged_disagreements=tuple(disagreements),
                       disagreement_notes=tuple(disagreement_notes(causes)))


def summarize(cells_df: pd.DataFrame, table3_cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per method and overall, on all cells (``scope`` all) and on Table 3's cells (``scope`` table3, when given),
    pooled over target–draft pairs (``target`` and ``draft`` ``all``) and per pair; per serving condition
    (``serving``) where the cells come under several.

    Counts among cells with longer outputs (extra_chars > 0): how many have a defined share (the
    interval of the extra length excludes 0), and how many put >= 90 % / >= 92 % of it into thinking
    by the share's lower limit (``n_share_lo_ge_*``) and, for comparison, by its point estimate
    (``n_share_point_ge_*``).
    """
    import pandas as pd
    scopes = [("all", cells_df)]
    if table3_cells is not None:
        keys = table3_cells[list(ARM_KEY)].drop_duplicates()  # an arm is a cell: alpha (maybe all empty) adds nothing
        scopes.append(("table3", cells_df.merge(keys, on=list(ARM_KEY), how="inner")))
    from lengthlens.data.serving import serving_conditions

    # Cells under different serving conditions are summarised apart (a ``serving`` column where there are several).
    loads = serving_conditions(cells_df["serving"].fillna("")) if "serving" in cells_df and len(cells_df) else [""]
    rows = []
    for scope, scoped in scopes:
        for load in loads if len(loads) > 1 else [""]:
            df = scoped[scoped["serving"].fillna("") == load] if load else scoped
            at = {"serving": load} if load else {}
            pooled = {"scope": scope, **at, "target": "all", "draft": "all"}
            rows += [{**pooled, **_summary_row(d, str(m))} for m, d in df.groupby("method", sort=True)]
            rows.append({**pooled, **_summary_row(df, "all")})
            if df[["target", "draft"]].drop_duplicates().shape[0] > 1 if len(df) else False:
                for (tg, dr), p in df.groupby(["target", "draft"], sort=True):
                    pair = {"scope": scope, **at, "target": str(tg), "draft": str(dr)}
                    rows += [{**pair, **_summary_row(d, str(m))} for m, d in p.groupby("method", sort=True)]
                    rows.append({**pair, **_summary_row(p, "all")})
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


# ------------------------------------------------------------------------------------------------
# The report's attribution section (declared outputs, :mod:`lengthlens.analyses.outputs`)
# ------------------------------------------------------------------------------------------------

def _summary_count(name: str, words: str, label: str | None = None) -> Column:
    return Column(name, words, label=label, fmt="int")


class AttributionReport(ReportAnalysis):
    """attribution.csv (:class:`AttributionAnalysis` in the report's resampling pass) and its summary over cells."""

    name = "attribution"
    stage = "arms and Table 3"
    outputs = Outputs(
        tables=(
            Table("attribution", "cell with texts (or logged channel counts)", (
                *keys("dataset", "method", "params"),
                Column("n_items", "items", label="items", fmt="int"),
                Column("chars_mean", "mean characters per relaxed run (message content, markers excluded)", label="chars",
                       fmt="int"),
                Column("chars_mean_star", "the same for the baseline runs", label="chars*", fmt="int"),
                Column("extra_chars", "Σ(chars − chars*) over the paired runs", label="extra chars", fmt="int"),
                Column("extra_chars_thinking", "the part of it in the thinking channel", label="in thinking", fmt="int"),
                Column("extra_chars_answer", "the part of it in the answer", label="in answer", fmt="int"),
                Column("thinking_share", "Σ(think − think*)/Σ(chars − chars*): the share of the extra length in thinking "
                       "(NaN with thinking_share_reason when undefined)", label="thinking share", fmt="f2", interval=True),
                Column("thinking_share_reason", "why the share is undefined (the interval of the extra length includes 0)",
                       label="share undefined because", fmt="text"),
                Column("item_share_q25", "per-item share of the extra length in thinking, lower quartile",
                       label="item share q25", fmt="f2"),
                Column("item_share_median", "per-item share, median", label="item share median", fmt="f2"),
                Column("item_share_q75", "per-item share, upper quartile", label="item share q75", fmt="f2"),
                Column("n_runs", "paired runs with channels known on both sides"),
                Column("extra_chars_mean", "mean extra characters per paired run", interval=True),
                Column("n_runs_share_defined", "runs whose own share is defined (extra length not 0)")),
                written="when runs have texts or logged channel counts"),
            Table("attribution_summary", "scope (all, table3) × serving condition (where several) × pair (`all`: pooled; per "
                  "pair with several) × rule, "
                  "and `all`", (
                      Column("scope", "all (every cell) or table3 (the cells Table 3 uses)", label="cells", fmt="text"),
                      *keys("method", also=("serving", "target", "draft")),
                      _summary_count("n_cells", "cells", "cells"),
                      _summary_count("n_cells_longer", "cells whose relaxed runs are longer (extra_chars > 0)",
                                     "cells longer"),
                      _summary_count("n_share_undefined", "longer cells whose share is undefined (the interval of the "
                                     "extra length includes 0)", "share undefined"),
                      Column("thinking_share_median", "median share over the cells where it is defined",
                             label="thinking share median", fmt="f2"),
                      Column("thinking_share_pooled", "Σ extra thinking / Σ extra over the longer cells", label="pooled",
                             fmt="f2"),
                      _summary_count("n_share_lo_ge_90", "cells whose share's lower limit is at least 0.90",
                                     "share lo ≥ 0.90"),
                      _summary_count("n_share_lo_ge_92", "cells whose share's lower limit is at least 0.92",
                                     "share lo ≥ 0.92"),
                      _summary_count("n_share_point_ge_90", "cells whose share is at least 0.90 (point estimate)",
                                     "share ≥ 0.90 (point)"),
                      _summary_count("n_share_point_ge_92", "cells whose share is at least 0.92 (point estimate)"),
                      _summary_count("n_share_defined", "longer cells whose share is defined")),
                  written="with attribution.csv")),
        sections=(Section("attribution", "Thinking attribution", (
            "Where the extra characters of relaxed runs go: into the thinking part or into the answer, per cell, "
            "from the completion texts split into channels. The share is left undefined when the interval "
            "of the extra length includes 0; the summary counts cells by the share's lower limit (the point-"
            "estimate counts beside them), on all cells and on Table 3's cells."), order=56,
            tables=("attribution_summary", "attribution")),),
        figures=(Figure("attribution", section="attribution", cost=4),))

    def resampled(self, ctx: Context) -> tuple[AttributionAnalysis]:
        return (AttributionAnalysis(),)

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        if ctx.tables["cells"].empty:
            return {}
        (rows,) = ctx.resampled[self.name]
        _, disagreements, causes = ctx.derived.split
        attr = attribution_result(rows, disagreements, causes, ctx.results.get("table3_cells_used"))
        ctx.notes.extend(attr.disagreement_notes)
        return {"attribution": attr.cells, "attribution_summary": attr.summary}
