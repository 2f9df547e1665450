"""Tables over arms and cells: arms.csv (per-arm means, as the study's campaign/results) and Table 3."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import polars as pl

from lengthlens.data.loading import RunSet
from lengthlens.data.pairing import with_derived
from lengthlens.data.schema import ARM_KEY, GROUP_KEY
from lengthlens.stats.results import CellTable
from lengthlens.stats.survival import kaplan_meier


def arms(runs: RunSet) -> pd.DataFrame:
    """One row per arm: runs found and ok, means over its ok runs (the study's per-arm aggregates, no pairing),
    and Kaplan–Meier quartiles of completion length with their intervals (NaN where not identified)."""
    t = with_derived(runs.table)
    ok = pl.col("status") == "ok"
    df = (
        t.group_by(ARM_KEY, maintain_order=True)
        .agg(
            pl.col("alpha").first(),
            pl.len().alias("n_runs"),
            ok.sum().alias("n_ok"),
            pl.col("item_id").filter(ok).n_unique().alias("n_items"),
            pl.col("l_bar").filter(ok).mean().alias("mean_l_bar"),
            pl.col("output_tokens").filter(ok).cast(pl.Float64).mean().alias("mean_completion_length"),
            pl.col("draft_rounds").filter(ok).cast(pl.Float64).mean().alias("mean_draft_rounds"),
            pl.col("wall_time_s").filter(ok).mean().alias("mean_wall_time_s"),
            pl.col("correct").filter(ok).cast(pl.Float64).mean().alias("accuracy"),
            pl.col("correct").filter(ok).is_not_null().sum().alias("n_graded"),
            pl.col("censored").filter(ok).cast(pl.Float64).mean().alias("censored_frac"),
            pl.col("max_new_tokens").filter(ok).max().alias("budget"),
        )
        .sort(ARM_KEY)
    )
    out = df.to_pandas()
    # Kaplan–Meier quartiles of completion length per arm (censored runs: hit the budget).
    km_cols: dict[str, list] = {f"km_{q}{s}": [] for q in ("q25", "median", "q75") for s in ("", "_lo", "_hi")}
    ok_runs = t.filter(ok).select(*ARM_KEY, "output_tokens", "censored").partition_by(list(ARM_KEY), as_dict=True)
    for key in zip(*(out[k] for k in ARM_KEY)):
        part = ok_runs.get(tuple(key))
        km = kaplan_meier(part["output_tokens"].to_numpy(), part["censored"].to_numpy()) if part is not None else None
        for q in ("q25", "median", "q75"):
            est = getattr(km, q) if km is not None else None
            km_cols[f"km_{q}"].append(np.nan if est is None or est.value is None else est.value)
            km_cols[f"km_{q}_lo"].append(np.nan if est is None or est.ci_low is None else est.ci_low)
            km_cols[f"km_{q}_hi"].append(np.nan if est is None or est.ci_high is None else est.ci_high)
    for name, values in km_cols.items():
        out[name] = values
    return out


def select_alphas(cells_df: pd.DataFrame, alphas: Literal["loosest", "all"] = "loosest") -> pd.DataFrame:
    """Cells entering Table 3: all, or per (target, draft, dataset, method) the loosest alpha among complete arms.

    "Loosest" is the largest alpha (every rule relaxes as alpha grows). Arms run on fewer items than
    the baseline (e.g. the study's 3-item calibration probes) are passed over when a complete arm
    exists, since their cells are not comparable; the choice is recorded in ``alpha_selected``.
    """
    if alphas == "all" or cells_df.empty:
        return cells_df.copy()
    if alphas != "loosest":
        raise ValueError(f"alphas must be 'loosest' or 'all', not {alphas!r}")
    df = cells_df.copy()
    keys = [*GROUP_KEY, "method"]
    full = df.groupby(list(GROUP_KEY))["n_items"].transform("max")
    df["_complete"] = df["n_items"] >= full
    df["_alpha"] = df["alpha"].astype(float).fillna(-np.inf)
    df = df.sort_values([*keys, "_complete", "_alpha"], ascending=[True] * len(keys) + [False, False], kind="mergesort")
    picked = df.groupby(keys, sort=False).head(1).drop(columns=["_complete", "_alpha"])
    return picked.sort_values([*GROUP_KEY, "method"], kind="mergesort").reset_index(drop=True)


def table3(cells: CellTable | pd.DataFrame, alphas: Literal["loosest", "all"] = "loosest") -> pd.DataFrame:
    """The study's Table 3: per method and over all cells, central values and how many cells lose.

    Columns: n_cells, mean/median of gain, lambda, rounds_ratio, time_ratio; counts of cells with
    lambda > 1, lambda_lo > 1 (inflation beyond the interval), rounds_ratio > 1, time_ratio > 1,
    drop_2pp out of graded cells, and cells where the predicted rounds win (lambda/gain < 1) or the
    measured rounds win (rounds_ratio < 1) while time loses (time_ratio >= 1). Intervention arms
    (``<rule>_force_commit``) are left out: Table 4 reports them.
    """
    df = cells.to_frame() if isinstance(cells, CellTable) else cells
    # Interventions (``<rule>_force_commit``) rerun a rule's arm; they are Table 4's, not rules of their own.
    if not df.empty:
        df = df[~df["method"].astype(str).str.endswith("_force_commit")]
    df = select_alphas(df, alphas)

    def summarize(d: pd.DataFrame, label: str) -> dict:
        graded = d["drop_2pp"].notna()
        row = {"method": label, "n_cells": len(d)}
        for m in ("gain", "lambda", "rounds_ratio", "time_ratio"):
            row[f"{m}_mean"] = float(d[m].mean()) if len(d) else np.nan
            row[f"{m}_median"] = float(d[m].median()) if len(d) else np.nan
        row.update({
            "n_lambda_gt_1": int((d["lambda"] > 1).sum()),
            "n_lambda_lo_gt_1": int((d["lambda_lo"] > 1).sum()),
            "n_rounds_ratio_gt_1": int((d["rounds_ratio"] > 1).sum()),
            "n_time_ratio_gt_1": int((d["time_ratio"] > 1).sum()),
            "n_graded": int(graded.sum()),
            "n_drop_2pp": int(d.loc[graded, "drop_2pp"].astype(bool).sum()),
            "n_predicted_win_time_loses": int(((d["rounds_ratio_predicted"] < 1) & (d["time_ratio"] >= 1)).sum()),
            "n_measured_win_time_loses": int(((d["rounds_ratio"] < 1) & (d["time_ratio"] >= 1)).sum()),
        })
        return row

    rows = [summarize(d, str(m)) for m, d in df.groupby("method", sort=True)]
    rows.append(summarize(df, "all"))
    return pd.DataFrame(rows)
