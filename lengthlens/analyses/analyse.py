"""Everything a report shows, computed once from a RunSet: cells, arms, Table 3 and the further analyses."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
import polars as pl

from lengthlens.analyses.attribution import attribution
from lengthlens.analyses.censoring import DEFAULT_AFT_RESAMPLES, censoring_cell
from lengthlens.analyses.intervention import table4
from lengthlens.analyses.tables import alpha_selected, table3_cells
from lengthlens.analyses.tables import arms as compute_arms
from lengthlens.analyses.tables import table3 as compute_table3
from lengthlens.data.loading import RunSet
from lengthlens.data.pairing import CELL_KEY, cell_units
from lengthlens.data.schema import ARM_KEY, GROUP_KEY, UNIT_KEY
from lengthlens.stats.estimate import all_group_items, item_positions
from lengthlens.stats.estimate import cells as compute_cells
from lengthlens.stats.resample import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
    DrawCache,
    counts_for_group,
)
from lengthlens.stats.results import CellTable, frame_html


@dataclass(frozen=True)
class Analysis:
    """The results behind one report; ``tables`` maps an output name (``cells``, ``arms``, ...) to its DataFrame."""

    runs: RunSet
    cells: CellTable
    tables: dict[str, pd.DataFrame]
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def headline(self) -> str:
        """One sentence: what acceptance length promised against what happened (Table 3's cells)."""
        t3 = self.tables["table3"]
        if t3.empty:
            return "No cells: no relaxed arm could be paired with a strict baseline."
        a = t3[t3["method"] == "all"].iloc[0]
        which = ("each rule at its most aggressive alpha per dataset, the largest run on ≥ 95 % of the baseline items"
                 if self.settings.get("alphas", "loosest") == "loosest" else "every alpha")
        return (
            f"Across {int(a['n_cells'])} cells ({which}) the mean per-round gain was {a['gain_mean']:.2f}, but completions "
            f"grew by a mean length ratio of {a['lambda_mean']:.2f}, so measured verifier rounds R/R* (the primary cost "
            f"measure) changed by {a['rounds_ratio_mean']:.2f}x (median {a['rounds_ratio_median']:.2f}); wall time T/T* by "
            f"{a['time_ratio_mean']:.2f}x (median {a['time_ratio_median']:.2f}; per round "
            f"{a['time_per_round_ratio_mean']:.2f}x){self._accuracy_clause(a)}."
        )

    @staticmethod
    def _accuracy_clause(a: pd.Series) -> str:
        graded = int(a["n_graded"])
        if not graded:
            return ""
        ci = (f" [{a['accuracy_delta_pp_mean_lo']:.1f}, {a['accuracy_delta_pp_mean_hi']:.1f}]"
              if np.isfinite(a.get("accuracy_delta_pp_mean_lo", np.nan)) else "")
        return (f"; accuracy changed by {a['accuracy_delta_pp_mean']:.1f} points on average{ci}: "
                f"{int(a['n_drop_2pp'])} of {graded} graded cells lost ≥ 2 points by the interval rule (upper limit ≤ −2), "
                f"{int(a['n_drop_2pp_point'])} by the point rule of the study, {int(a['n_drop_holm'])} significant "
                f"after a Holm correction")

    def summary_lines(self) -> list[str]:
        """Terminal lines for the analyses beyond Table 3: censoring, attribution, Table 4, extra tokens."""
        lines: list[str] = []
        cz = self.tables.get("censoring")
        if cz is not None and not cz.empty:
            more = (cz["censored_frac"] > cz["censored_frac_star"]).sum()
            aft = cz["lambda_aft_lognormal"]
            lines.append(f"censoring: {int((cz['censored_frac'] > 0).sum())} of {len(cz)} cells have relaxed runs cut at the budget "
                         f"({int(more)} more often than strict); median lambda {cz['lambda_plain'].median():.2f} plain vs "
                         f"{aft.median():.2f} log-normal AFT (censoring-aware)")
        at = self.tables.get("attribution_summary")
        if at is not None and not at.empty:
            for scope, label in (("all", "all cells"), ("table3", "Table 3's cells")):
                rows = at[(at["scope"] == scope) & (at["method"] == "all")]
                if rows.empty:
                    continue
                a = rows.iloc[0]
                lines.append(f"attribution ({label}): of {int(a['n_cells_longer'])} cells with longer outputs, "
                             f"{int(a['n_share_undefined'])} have an extra length whose interval includes 0 (share undefined); "
                             f"{int(a['n_share_lo_ge_90'])} put >= 90 % of the extra characters into thinking by the lower "
                             f"limit ({int(a['n_share_point_ge_90'])} by the point estimate; pooled share "
                             f"{a['thinking_share_pooled']:.2f})")
        t4 = self.tables.get("table4")
        if t4 is not None and not t4.empty:
            r = t4.iloc[-1]
            lines.append(f"table 4: forcing the thinking closed fired on {int(r['fired'])} runs; correct {int(r['correct_before'])} -> "
                         f"{int(r['correct_after'])} of {int(r['n_graded'])} graded ({int(r['wrong_to_right'])} wrong->right, "
                         f"{int(r['right_to_wrong'])} right->wrong, {int(r['still_capped'])} still capped; McNemar p = {r['mcnemar_p']:.3g})")
        ex = self.tables.get("extra_tokens")
        if ex is not None and not ex.empty:
            withp = ex[ex["n_runs_with_proposals"] > 0]
            if len(withp):
                lines.append(f"extra tokens: in {len(withp)} cells with proposals, {withp['n_lossy_only'].sum():,} tokens were accepted only "
                             f"because of the relaxation ({withp['n_lossy_only'].sum() / max(1, withp['n_accepted'].sum()):.1%} of accepted); "
                             f"median target p {withp['p_lossy_only_median'].median():.3f} vs {withp['p_strict_accepted_median'].median():.3f} "
                             f"for tokens the lossless test accepts too")
        for n in self.notes:
            lines.append(f"note: {n}")
        return lines

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(self.headline())}</p>" + frame_html(self.tables["table3"], "Table 3")


def censoring_table(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
                    n_resamples_aft: int = DEFAULT_AFT_RESAMPLES, confidence_level: float = DEFAULT_CONFIDENCE,
                    draws: DrawCache | None = None) -> pd.DataFrame:
    """OUT/censoring.csv: per cell, censored shares, Kaplan–Meier quantiles, and censoring-aware length ratios.

    Uses the cell table's draws (same seed, group and items); the AFT fits use the first
    ``n_resamples_aft`` of them, since each resample is a maximum-likelihood fit.
    """
    units = cell_units(runs.paired)
    every_group_items = all_group_items(runs)
    rows = []
    for group_df in units.partition_by(list(GROUP_KEY), maintain_order=True):
        group = tuple(group_df.row(0, named=True)[k] for k in GROUP_KEY)
        items = every_group_items[group]
        index = {it: i for i, it in enumerate(items)}
        counts = draws.counts(group, len(items)) if draws is not None else counts_for_group(seed, group, len(items), n_resamples)
        for af in group_df.partition_by(list(CELL_KEY), maintain_order=True):
            arrays = (af[c].to_numpy() for c in ("output_tokens", "censored", "max_new_tokens", "output_tokens_star",
                                                  "censored_star", "max_new_tokens_star"))
            with np.errstate(divide="ignore", invalid="ignore"):  # undefined resamples are counted, not warned about
                cell = censoring_cell(*arrays, counts, item_index=item_positions(af, index),
                                      n_resamples_aft=min(n_resamples_aft, n_resamples), confidence_level=confidence_level)
            rows.append({**{k: af.row(0, named=True)[k] for k in CELL_KEY}, **cell.to_row()})
    return pd.DataFrame(rows)


def analyse(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
            ci: Literal["percentile", "bca"] = "percentile", confidence_level: float = DEFAULT_CONFIDENCE,
            alphas: Literal["loosest", "all"] = "loosest", n_resamples_aft: int = DEFAULT_AFT_RESAMPLES,
            proposals: bool = True) -> Analysis:
    """Compute every table of the report from loaded runs (nothing is written or printed).

    Parameters
    ----------
    n_resamples_aft : resamples for the censoring-aware AFT intervals (each one a likelihood fit).
    proposals : aggregate proposals.jsonl (tokens accepted only because of the relaxation) where present.
    """
    draws = DrawCache(seed, n_resamples)
    cell_table = compute_cells(runs, n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level, draws=draws)
    cells_df = cell_table.to_frame()
    tables = {
        "cells": cells_df,
        "arms": compute_arms(runs),
        "table3": compute_table3(cell_table, alphas=alphas) if not cells_df.empty else pd.DataFrame(),
        "alpha_selected": alpha_selected(cells_df),
        "skipped": runs.skipped.to_pandas(),
    }
    notes: list[str] = []
    if not cells_df.empty:
        tables["censoring"] = censoring_table(runs, n_resamples=n_resamples, seed=seed, n_resamples_aft=n_resamples_aft,
                                              confidence_level=confidence_level, draws=draws)
        attr = attribution(runs, n_resamples=n_resamples, seed=seed, confidence_level=confidence_level, draws=draws,
                           table3_cells=table3_cells(cells_df, alphas))
        tables["attribution"] = attr.cells
        tables["attribution_summary"] = attr.summary
        if attr.logged_disagreements:
            notes.append(f"{len(attr.logged_disagreements)} runs' logged channel counts disagree with their text "
                         f"(the text is used), e.g. {attr.logged_disagreements[0]}")
    t4 = table4(runs)
    if not t4.empty:
        tables["table4"] = t4
    if proposals:
        extra = extra_tokens_table(runs)
        if extra is not None:
            tables["extra_tokens"] = extra
    settings = {"n_resamples": n_resamples, "seed": seed, "ci": ci, "confidence_level": confidence_level, "alphas": alphas,
                "n_resamples_aft": min(n_resamples_aft, n_resamples)}
    return Analysis(runs=runs, cells=cell_table, tables=tables, settings=settings, notes=tuple(notes))


def extra_tokens_table(runs: RunSet) -> pd.DataFrame | None:
    """OUT/extra_tokens.csv: per cell, tokens accepted only because of the relaxation (None without proposals)."""
    from lengthlens.analyses.extra_tokens import extra_token_stats

    # Token traces live in raw run folders; flat records ("file:line" sources) have none.
    paired = runs.paired.filter(~pl.col("source").str.contains(r":\d+$").fill_null(True))
    if paired.is_empty():
        return None
    units = cell_units(paired).select(*ARM_KEY, *UNIT_KEY)
    stats = extra_token_stats(paired, units=units)
    if stats is None or stats.is_empty() or stats["n_runs_with_proposals"].sum() == 0:
        return None
    return stats.to_pandas()
