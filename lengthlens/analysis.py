"""Everything a report shows, computed once from a RunSet: cells, arms, Table 3 and the further analyses."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from lengthlens.estimate import cells as compute_cells
from lengthlens.loading import RunSet
from lengthlens.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED
from lengthlens.results import CellTable, frame_html
from lengthlens.tables import arms as compute_arms
from lengthlens.tables import table3 as compute_table3


@dataclass(frozen=True)
class Analysis:
    """The results behind one report; ``tables`` maps an output name (``cells``, ``arms``, ...) to its DataFrame."""

    runs: RunSet
    cells: CellTable
    tables: dict[str, pd.DataFrame]
    settings: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def headline(self) -> str:
        """One sentence: what acceptance length promised against what happened."""
        t3 = self.tables["table3"]
        if t3.empty:
            return "No cells: no relaxed arm could be paired with a strict baseline."
        a = t3[t3["method"] == "all"].iloc[0]
        graded = int(a["n_graded"])
        acc = f"; {int(a['n_drop_2pp'])} of {graded} graded cells lost >= 2 accuracy points" if graded else ""
        return (
            f"Across {int(a['n_cells'])} cells the mean per-round gain was {a['gain_mean']:.2f}, but completions grew "
            f"by a mean length ratio of {a['lambda_mean']:.2f}, so measured verifier rounds changed by "
            f"{a['rounds_ratio_mean']:.2f}x (median {a['rounds_ratio_median']:.2f}) and wall time by "
            f"{a['time_ratio_mean']:.2f}x (median {a['time_ratio_median']:.2f}){acc}."
        )

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(self.headline())}</p>" + frame_html(self.tables["table3"], "Table 3")


def analyse(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
            ci: Literal["percentile", "bca"] = "percentile", confidence_level: float = DEFAULT_CONFIDENCE,
            alphas: Literal["loosest", "all"] = "loosest") -> Analysis:
    """Compute every table of the report from loaded runs (nothing is written or printed)."""
    cell_table = compute_cells(runs, n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level)
    cells_df = cell_table.to_frame()
    tables = {
        "cells": cells_df,
        "arms": compute_arms(runs),
        "table3": compute_table3(cells_df, alphas=alphas) if not cells_df.empty else pd.DataFrame(),
        "skipped": runs.skipped.to_pandas(),
    }
    settings = {"n_resamples": n_resamples, "seed": seed, "ci": ci, "confidence_level": confidence_level, "alphas": alphas}
    return Analysis(runs=runs, cells=cell_table, tables=tables, settings=settings)
