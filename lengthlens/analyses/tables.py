"""Tables over arms and cells: arms.csv (per-arm means, as the study's campaign/results) and Table 3."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import polars as pl

from lengthlens.analyses.cells import CellTable
from lengthlens.data.pairing import with_derived
from lengthlens.data.runset import RunSet
from lengthlens.data.schema import ARM_KEY, GROUP_KEY
from lengthlens.stats.intervals import percentile_interval
from lengthlens.stats.survival import kaplan_meier


def arms(runs: RunSet) -> pd.DataFrame:
    """arms.csv: one row per arm, means over its ok runs (the study's per-arm aggregates, no pairing).

    Parameters
    ----------
    runs : loaded runs.

    Returns
    -------
    pandas.DataFrame
        Per arm: runs found and ok, items, mean ℓ̄, length, rounds and wall time, accuracy, censored share,
        budget, and Kaplan–Meier quartiles of completion length with their intervals (NaN where not identified).

    Examples
    --------
    >>> import lengthlens as ll                     # doctest: +SKIP
    >>> ll.arms(ll.load("runs/"))                   # doctest: +SKIP
    """
    t = with_derived(runs.table)
    if "shared_baseline" in t.columns:  # an autoregressive baseline shared by several drafts is one arm
        t = t.filter(~pl.col("shared_baseline"))
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
            km_cols[f"km_{q}"].append(np.nan if est is None else est.point)
            km_cols[f"km_{q}_lo"].append(np.nan if est is None else est.low)
            km_cols[f"km_{q}_hi"].append(np.nan if est is None else est.high)
    for name, values in km_cols.items():
        out[name] = values
    return out


#: An arm is complete when its cell covers at least this share of the baseline's items (one failed run does not
#: demote an arm; the study's 3-of-12 calibration probes stay incomplete).
COMPLETE_SHARE = 0.95
#: Adjusted p-values below this count a cell as a significant accuracy drop in Table 3.
SIGNIFICANCE = 0.05


def _complete(df: pd.DataFrame) -> pd.Series:
    """Whether each cell covers >= COMPLETE_SHARE of its baseline's items (the group's largest cell when that is unknown)."""
    full = df.groupby(list(GROUP_KEY))["n_items"].transform("max")
    if "n_items_baseline" in df.columns:
        full = df["n_items_baseline"].fillna(full)
    return df["n_items"] >= COMPLETE_SHARE * full


def _ranked(cells_df: pd.DataFrame) -> pd.DataFrame:
    """Cells sorted per (group, rule) complete first, then by alpha, largest first: the head of each is the pick."""
    df = cells_df.copy()
    keys = [*GROUP_KEY, "method"]
    df["_complete"] = _complete(df)
    df["_alpha"] = df["alpha"].astype(float).fillna(-np.inf)
    return df.sort_values([*keys, "_complete", "_alpha"], ascending=[True] * len(keys) + [False, False], kind="mergesort")


def select_alphas(cells_df: pd.DataFrame, alphas: Literal["loosest", "all"] = "loosest") -> pd.DataFrame:
    """Cells entering Table 3: all, or per (target, draft, dataset, method) the loosest alpha among complete arms.

    "Loosest" is the largest alpha (every rule relaxes as alpha grows): Table 3 describes each
    rule at its most aggressive setting. An arm is complete when its cell covers at least 95 % of
    the baseline's items; incomplete arms (e.g. the study's 3-item calibration probes) are passed
    over when a complete arm exists. :func:`alpha_selected` lists the choice per rule and dataset.
    """
    if alphas == "all" or cells_df.empty:
        return cells_df.copy()
    if alphas != "loosest":
        raise ValueError(f"alphas must be 'loosest' or 'all', not {alphas!r}")
    keys = [*GROUP_KEY, "method"]
    picked = _ranked(cells_df).groupby(keys, sort=False).head(1).drop(columns=["_complete", "_alpha"])
    return picked.sort_values([*GROUP_KEY, "method"], kind="mergesort").reset_index(drop=True)


def alpha_selected(cells_df: pd.DataFrame) -> pd.DataFrame:
    """alpha_selected.csv: per (target, draft, dataset, rule) the alpha Table 3 uses and why.

    Parameters
    ----------
    cells_df : the cell table as a frame (``CellTable.to_frame()``).

    Returns
    -------
    pandas.DataFrame
        alpha_selected, params_selected, n_items (of that cell), n_items_baseline, complete, alphas_complete and
        alphas_incomplete (every alpha run, ';'-separated, largest first).

    Examples
    --------
    >>> import lengthlens as ll                                        # doctest: +SKIP
    >>> ll.alpha_selected(ll.cells(ll.load("runs/")).to_frame())       # doctest: +SKIP
    """
    cols = [*GROUP_KEY, "method", "alpha_selected", "params_selected", "n_items", "n_items_baseline", "complete",
            "alphas_complete", "alphas_incomplete"]
    df = _relaxed_rules(cells_df)
    if df.empty:
        return pd.DataFrame(columns=cols)
    ranked = _ranked(df)
    # One pass over the ranked cells with each group's row positions (pandas' per-group frames cost ~1.5 ms a group).
    alpha = ranked["alpha"].to_numpy()
    alpha_num = ranked["alpha"].astype(float).to_numpy()
    complete = ranked["_complete"].to_numpy(dtype=bool)
    params, n_items = ranked["params"].to_numpy(), ranked["n_items"].to_numpy()
    base = ranked["n_items_baseline"].to_numpy() if "n_items_baseline" in ranked.columns else None
    keys = [*GROUP_KEY, "method"]
    key_values = [ranked[k].to_numpy() for k in keys]

    def fmt(values: np.ndarray) -> str:
        return ";".join(f"{a:g}" for a in values[~np.isnan(values)])

    rows = []
    for pos in ranked.groupby(keys, sort=True).indices.values():
        top = pos[0]
        rows.append({**{k: v[top] for k, v in zip(keys, key_values)}, "alpha_selected": alpha[top],
                     "params_selected": params[top], "n_items": int(n_items[top]),
                     "n_items_baseline": int(base[top]) if base is not None else np.nan,
                     "complete": bool(complete[top]), "alphas_complete": fmt(alpha_num[pos][complete[pos]]),
                     "alphas_incomplete": fmt(alpha_num[pos][~complete[pos]])})
    return pd.DataFrame(rows, columns=cols)


def _relaxed_rules(df: pd.DataFrame) -> pd.DataFrame:
    """Interventions (``<rule>_force_commit``) rerun a rule's arm; they are Table 4's, not rules of their own."""
    if df.empty:
        return df
    return df[~df["method"].astype(str).str.endswith("_force_commit")]


def table3_cells(cells: CellTable | pd.DataFrame, alphas: Literal["loosest", "all"] = "loosest", *,
                 include_small: bool = False) -> pd.DataFrame:
    """The cells Table 3 summarises (one place, so filters on which cells enter apply everywhere).

    ``_rep`` is each cell's column in the CellTable's kept bootstrap replicates (absent for a DataFrame).
    Cells with fewer than 10 items (``small_n``) among those chosen are left out unless ``include_small``.
    """
    if isinstance(cells, CellTable):
        df = cells.to_frame()
        df["_rep"] = np.arange(len(df))
    else:
        df = cells
    picked = select_alphas(_relaxed_rules(df), alphas)
    return picked if include_small else _drop_small(picked, False)[0]


def _mean_delta(d: pd.DataFrame, graded: pd.Series, replicates: np.ndarray | None) -> dict:
    """Mean accuracy change over graded cells and its interval: per resample, the mean of the cells' replicates."""
    g = d.loc[graded]
    out = {"accuracy_delta_pp_mean": float(g["accuracy_delta_pp"].mean()) if len(g) else np.nan,
           "accuracy_delta_pp_mean_lo": np.nan, "accuracy_delta_pp_mean_hi": np.nan}
    if len(g) and replicates is not None and replicates.size and "_rep" in g:
        reps = replicates[:, g["_rep"].to_numpy(dtype=int)].mean(axis=1)
        lo, hi, _ = percentile_interval(reps[:, None])
        out["accuracy_delta_pp_mean_lo"], out["accuracy_delta_pp_mean_hi"] = float(lo[0]), float(hi[0])
    return out


def _accuracy_counts(d: pd.DataFrame, graded: pd.Series) -> dict:
    g = d.loc[graded]
    worse = g["accuracy_delta_pp"] < 0
    col = lambda name: g[name] if name in g else pd.Series(np.nan, index=g.index)  # noqa: E731
    return {
        "n_graded": int(graded.sum()),
        "n_drop_2pp": int(g["drop_2pp"].astype(bool).sum()),
        "n_drop_2pp_point": int(g["drop_2pp_point"].astype(bool).sum()) if "drop_2pp_point" in g else np.nan,
        "n_drop_holm": int((worse & (col("accuracy_p_holm").astype(float) < SIGNIFICANCE)).sum()),
        "n_drop_bh": int((worse & (col("accuracy_q_bh").astype(float) < SIGNIFICANCE)).sum()),
        # The median (not the mean) over cells: a cell whose discordance allows no detectable drop has inf.
        "accuracy_mdd_pp_median": float(col("accuracy_mdd_pp").astype(float).median()) if len(g) else np.nan,
    }


def table3(cells: CellTable | pd.DataFrame, alphas: Literal["loosest", "all"] = "loosest", *,
           include_small: bool = False) -> pd.DataFrame:
    """The study's Table 3: per method and over all cells, central values and how many cells lose.

    Columns: n_cells; mean/median of gain, lambda, rounds_ratio (R/R*, the primary cost measure),
    time_ratio (T/T*) and time_per_round_ratio; counts of cells with lambda > 1, lambda_lo > 1
    (inflation beyond the interval), rounds_ratio > 1, time_ratio > 1; accuracy over graded cells:
    n_drop_2pp (a loss of more than 2 points by the one-sided test at 2.5 %, drop_2pp), n_drop_2pp_point
    (the study's point rule), accuracy_mdd_pp_median (the median over the graded cells of the smallest
    drop that test detects with 80 % power), n_drop_holm / n_drop_bh (lower accuracy with Holm p / BH q
    < 0.05 over the report's accuracy family), accuracy_delta_pp_mean with a bootstrap interval (needs a CellTable: per resample, the
    mean over the cells' replicates, each from its group's item draws); cells where the predicted
    rounds win (lambda/gain_pooled < 1) or the measured rounds win (rounds_ratio < 1) while time
    loses (time_ratio >= 1). Intervention arms are left out: Table 4 reports them. Cells with
    fewer than 10 items (``small_n``) among those chosen are left out too unless ``include_small``;
    ``n_small_excluded`` counts them.

    Parameters
    ----------
    cells : the cell table (:func:`lengthlens.cells`; a CellTable gives the mean Δacc its interval) or its frame.
    alphas : ``loosest`` (each rule at its most aggressive complete alpha per dataset) or ``all``.
    include_small : keep the cells with fewer than 10 items.

    Returns
    -------
    pandas.DataFrame
        One row per rule and an ``all`` row.

    Examples
    --------
    >>> import lengthlens as ll                        # doctest: +SKIP
    >>> ll.table3(ll.cells(ll.load("runs/")))          # doctest: +SKIP
    """
    replicates = cells.replicates.get("accuracy_delta_pp") if isinstance(cells, CellTable) else None
    # After the choice of alpha: the small cells that would have entered.
    df, n_small = _drop_small(table3_cells(cells, alphas, include_small=True), include_small)

    def summarize(d: pd.DataFrame, label: str) -> dict:
        graded = d["drop_2pp"].notna()
        partial = d["graded_partial"].fillna(False).astype(bool) if "graded_partial" in d else pd.Series(False, index=d.index)
        graded &= ~partial  # graded on fewer than half the items: left out of the accuracy counts
        row = {"method": label, "n_cells": len(d)}
        for m in ("gain", "lambda", "rounds_ratio", "time_ratio", "time_per_round_ratio"):
            known = bool(len(d)) and m in d and bool(d[m].notna().any())  # a metric not computed has no mean
            row[f"{m}_mean"] = float(d[m].mean()) if known else np.nan
            row[f"{m}_median"] = float(d[m].median()) if known else np.nan
        row.update({
            "n_lambda_gt_1": int((d["lambda"] > 1).sum()),
            "n_lambda_lo_gt_1": int((d["lambda_lo"] > 1).sum()),
            "n_rounds_ratio_gt_1": int((d["rounds_ratio"] > 1).sum()),
            "n_time_ratio_gt_1": int((d["time_ratio"] > 1).sum()),
            **_accuracy_counts(d, graded),
            "n_graded_partial": int(partial.sum()),
            **_mean_delta(d, graded, replicates),
            "n_predicted_win_time_loses": int(((d["rounds_ratio_predicted"] < 1) & (d["time_ratio"] >= 1)).sum()),
            "n_measured_win_time_loses": int(((d["rounds_ratio"] < 1) & (d["time_ratio"] >= 1)).sum()),
        })
        return row

    methods = sorted(set(df["method"].astype(str)) | set(n_small)) if not df.empty or n_small else []
    rows = [summarize(df[df["method"].astype(str) == m], m) for m in methods]  # a rule whose cells were all small keeps its row
    rows.append(summarize(df, "all"))
    out = pd.DataFrame(rows)
    out["n_small_excluded"] = [int(n_small.get(r, 0)) for r in out["method"]]
    out.loc[out["method"] == "all", "n_small_excluded"] = int(sum(n_small.values()))
    return out


def _drop_small(df: pd.DataFrame, include_small: bool) -> tuple[pd.DataFrame, dict[str, int]]:
    """Cells with fewer than 10 items (``small_n``) out, unless asked; how many per method were left out."""
    if include_small or df.empty or "small_n" not in df:
        return df, {}
    small = df["small_n"].astype(bool)
    return df[~small], {str(k): int(v) for k, v in df.loc[small, "method"].value_counts().items()}
