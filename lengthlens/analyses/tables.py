"""Tables over arms and cells: arms.csv (per-arm means, as the study's campaign/results) and Table 3."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import polars as pl

from lengthlens.analyses.cells import SMALL_N_ITEMS, CellTable
from lengthlens.analyses.outputs import Column, Context, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.coverage import COMPLETE_SHARE
from lengthlens.data.runset import RunSet
from lengthlens.data.schema import ARM_KEY, GROUP_KEY
from lengthlens.data.serving import serving_conditions
from lengthlens.results import frame
from lengthlens.stats.intervals import percentile_interval
from lengthlens.stats.survival import kaplan_meier


def arms(runs: RunSet) -> pd.DataFrame:
    """arms.csv: one row per arm, means over the runs its cells use (the study's per-arm aggregates, no pairing).

    Only the ok runs that enter cells count (``paired``): runs left out of every cell, e.g. for a token
    budget that differs from the baseline's, are listed apart by :func:`arms_excluded`, so that the
    appendix describes the runs behind the cells' numbers.

    Parameters
    ----------
    runs : loaded runs.

    Returns
    -------
    pandas.DataFrame
        Per arm: runs loaded (``n_runs``), ok and used by cells (``n_ok``), items, mean ℓ̄, length, rounds and
        wall time, accuracy, censored share, budget, and Kaplan–Meier quartiles of completion length with
        their intervals (NaN where not identified). Arms none of whose runs enter a cell are left out.

    Examples
    --------
    >>> import lengthlens as ll                     # doctest: +SKIP
    >>> ll.arms(ll.load("runs/"))                   # doctest: +SKIP
    """
    t = runs.derived.runs
    if "shared_baseline" in t.columns:  # an autoregressive baseline shared by several drafts is one arm
        t = t.filter(~pl.col("shared_baseline"))
    ok = (pl.col("status") == "ok") & pl.col("paired")
    used_arms = t.filter(ok).select(ARM_KEY).unique()
    t = t.join(used_arms, on=list(ARM_KEY), how="semi", nulls_equal=True)
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


def arms_excluded(runs: RunSet) -> pd.DataFrame:
    """arms_excluded.csv: ok runs that enter no cell, per arm and reason (e.g. a token budget unlike the baseline's).

    Parameters
    ----------
    runs : loaded runs.

    Returns
    -------
    pandas.DataFrame
        ARM_KEY, ``reason``, ``n_runs``, ``n_items``, ``budget``, ``mean_completion_length`` and ``accuracy`` of those runs.

    Examples
    --------
    >>> import lengthlens as ll                     # doctest: +SKIP
    >>> ll.arms_excluded(ll.load("runs/"))          # doctest: +SKIP
    """
    cols = [*ARM_KEY, "reason", "n_runs", "n_items", "budget", "mean_completion_length", "accuracy"]
    t = runs.table
    if "shared_baseline" in t.columns:
        t = t.filter(~pl.col("shared_baseline"))
    out = t.filter((pl.col("status") == "ok") & ~pl.col("paired"))
    if not out.height:
        return pd.DataFrame(columns=cols)
    sk = runs.skipped.filter(pl.col("stage") == "pairing").select(pl.col("path").alias("source"), "reason").unique("source")
    out = out.join(sk, on="source", how="left").with_columns(pl.col("reason").fill_null("not paired with a baseline run"))
    df = (out.group_by([*ARM_KEY, "reason"]).agg(pl.len().alias("n_runs"), pl.col("item_id").n_unique().alias("n_items"),
                                                  pl.col("max_new_tokens").max().alias("budget"),
                                                  pl.col("output_tokens").cast(pl.Float64).mean().alias("mean_completion_length"),
                                                  pl.col("correct").cast(pl.Float64).mean().alias("accuracy"))
          .sort([*ARM_KEY, "reason"]))
    return df.to_pandas()[cols]


#: Adjusted p-values below this count a cell as a significant accuracy drop in Table 3.
SIGNIFICANCE = 0.05


def _with_serving(df: pd.DataFrame) -> pd.DataFrame:
    """A cells frame with its ``serving`` column (a frame from before serving conditions has none: "")."""
    return df if "serving" in df.columns else df.assign(serving="")


def _complete(df: pd.DataFrame) -> pd.Series:
    """Whether each cell covers >= COMPLETE_SHARE of its baseline's items (the group's largest cell when that is unknown)."""
    full = df.groupby(list(GROUP_KEY))["n_items"].transform("max")
    if "n_items_baseline" in df.columns:
        full = df["n_items_baseline"].fillna(full)
    return df["n_items"] >= COMPLETE_SHARE * full


def _ranked(cells_df: pd.DataFrame) -> pd.DataFrame:
    """Cells sorted per (group, rule) complete first, then by alpha, largest first: the head of each is the pick."""
    df = _with_serving(cells_df).copy()
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
    cells_df = _with_serving(cells_df)
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
    df = _relaxed_rules(_with_serving(cells_df))
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
        ci = percentile_interval(reps[:, None])
        out["accuracy_delta_pp_mean_lo"], out["accuracy_delta_pp_mean_hi"] = float(ci.low[0]), float(ci.high[0])
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

    Columns: n_cells (with ``serving`` first where more than one serving condition is logged: one row per
    condition and rule, each condition's rules summarised within it); mean/median of gain, lambda, rounds_ratio (R/R*, the primary cost measure),
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
    return _table3_rows(df, n_small, replicates)


def table3_by_pair(cells: CellTable | pd.DataFrame, alphas: Literal["loosest", "all"] = "loosest", *,
                   include_small: bool = False) -> pd.DataFrame:
    """Table 3 per target–draft pair: :func:`table3`'s rows for each pair's cells, with ``target`` and ``draft`` first.

    Parameters
    ----------
    cells, alphas, include_small : as for :func:`table3`.

    Returns
    -------
    pandas.DataFrame
        Per pair, one row per rule and an ``all`` row (table3_pairs.csv).

    Examples
    --------
    >>> import lengthlens as ll                                # doctest: +SKIP
    >>> ll.table3_by_pair(ll.cells(ll.load("runs/")))          # doctest: +SKIP
    """
    replicates = cells.replicates.get("accuracy_delta_pp") if isinstance(cells, CellTable) else None
    chosen = table3_cells(cells, alphas, include_small=True)
    parts = []
    for (tg, dr), d in chosen.groupby(["target", "draft"], sort=True):
        kept, n_small = _drop_small(d, include_small)
        t = _table3_rows(kept, n_small, replicates)
        t.insert(0, "draft", dr)
        t.insert(0, "target", tg)
        parts.append(t)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["target", "draft", "method"])


def _table3_rows(df: pd.DataFrame, n_small: dict[str, int], replicates: np.ndarray | None) -> pd.DataFrame:
    """Table 3's rows (one per rule and ``all``) from the chosen cells and the count of small cells left out per rule."""

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
            # Arms covering fewer than 95 % of their baseline's items that entered (no complete alpha of the rule).
            "n_incomplete": int((~_complete(d)).sum()) if len(d) else 0,
            **_accuracy_counts(d, graded),
            "n_graded_partial": int(partial.sum()),
            **_mean_delta(d, graded, replicates),
            "n_predicted_win_time_loses": int(((d["rounds_ratio_predicted"] < 1) & (d["time_ratio"] >= 1)).sum()),
            "n_measured_win_time_loses": int(((d["rounds_ratio"] < 1) & (d["time_ratio"] >= 1)).sum()),
        })
        return row

    methods = sorted(set(df["method"].astype(str)) | {m for _, m in n_small}) if not df.empty or n_small else []
    conditions = serving_conditions(df["serving"]) if "serving" in df and not df.empty else [""]
    by_condition = len(conditions) > 1
    rows, small = [], []
    for s in conditions:
        d = df[df["serving"] == s] if by_condition else df
        for m in methods:
            if by_condition and not ((d["method"].astype(str) == m).any() or (s, m) in n_small):
                continue
            # A rule whose cells were all small keeps its row.
            rows.append(({"serving": s} if by_condition else {}) | summarize(d[d["method"].astype(str) == m], m))
            small.append(sum(v for (sv, mv), v in n_small.items() if mv == m and (sv == s or not by_condition)))
    rows.append(({"serving": "all"} if by_condition else {}) | summarize(df, "all"))
    small.append(int(sum(n_small.values())))
    out = pd.DataFrame(rows)
    out["n_small_excluded"] = small
    return out


def table3_by_load(cells: CellTable | pd.DataFrame, alphas: Literal["loosest", "all"] = "loosest", *,
                   include_small: bool = False) -> dict[str, pd.Series]:
    """Table 3's ``all`` row within each serving condition, lightest load first: the headline's line per load.

    Empty when the cells come under one serving condition (or none): Table 3's own ``all`` row says it all then.

    Parameters
    ----------
    cells, alphas, include_small : as for :func:`table3`.

    Returns
    -------
    dict
        serving condition → the ``all`` row of Table 3 computed on that condition's cells alone.
    """
    replicates = cells.replicates.get("accuracy_delta_pp") if isinstance(cells, CellTable) else None
    df, n_small = _drop_small(table3_cells(cells, alphas, include_small=True), include_small)
    conditions = serving_conditions(df["serving"]) if "serving" in df and not df.empty else []
    if len(conditions) < 2:
        return {}
    return {c: _table3_rows(df[df["serving"] == c], {k: v for k, v in n_small.items() if k[0] == c}, replicates).iloc[-1]
            for c in conditions}


def _drop_small(df: pd.DataFrame, include_small: bool) -> tuple[pd.DataFrame, dict[tuple[str, str], int]]:
    """Cells with fewer than 10 items (``small_n``) out, unless asked; how many per (serving, method) were left out."""
    if include_small or df.empty or "small_n" not in df:
        return df, {}
    small = df["small_n"].astype(bool)
    counts = df.loc[small].groupby([df.loc[small, "serving"].astype(str), df.loc[small, "method"].astype(str)]).size()
    return df[~small], {(str(s), str(m)): int(v) for (s, m), v in counts.items()}


# ------------------------------------------------------------------------------------------------
# The report's analyses: skipped.csv, arms.csv (and arms_excluded.csv), Table 3
# ------------------------------------------------------------------------------------------------

_KM = Column("km_{q25,median,q75}", "Kaplan–Meier quartiles of the arm's completion length over its used runs (runs at "
             "the budget censored), NaN where not identified", interval=True)


class SkippedReport(ReportAnalysis):
    """skipped.csv: every run found that no cell uses, with its reason (the report lists the reasons under Provenance)."""

    name = "skipped runs"
    stage = "arms and Table 3"
    outputs = Outputs(tables=(Table("skipped", "run not loaded or not paired", (
        Column("path", "where the run is (file, or file:line for flat records)"),
        Column("reason", "why it was left out"),
        Column("stage", "where: read, validate or pairing"))),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        return {"skipped": ctx.runs.skipped.to_pandas()}


class ArmsReport(ReportAnalysis):
    """arms.csv (per-arm means, with the accuracy under the other grading policy) and arms_excluded.csv."""

    name = "arms"
    stage = "arms and Table 3"
    outputs = Outputs(
        tables=(
            Table("arms", "arm whose runs enter a cell", (
                *keys("target", "dataset", "method", "params"),
                Column("n_runs", "runs loaded", label="runs", fmt="int"),
                Column("n_ok", "ok runs the cells use: the means are over these", label="used", fmt="int"),
                Column("mean_l_bar", "mean acceptance length ℓ̄ per run", label="mean ℓ̄", fmt="f2"),
                Column("mean_completion_length", "mean output tokens", label="mean length", fmt="f1"),
                Column("mean_draft_rounds", "mean verifier rounds", label="mean rounds", fmt="f1"),
                Column("mean_wall_time_s", "mean wall time (s)", label="mean time s", fmt="f2"),
                Column("accuracy", "share of graded runs that are correct", label="accuracy", fmt="f3"),
                *(Column(f"accuracy_{p}", f"the same runs graded by lengthlens' graders under the {p} policy (written "
                         "when lengthlens' graders judged runs and the report used the other policy)",
                         label=f"accuracy, {p} policy", fmt="f3") for p in ("default", "study")),
                Column("n_policy_disagree", "runs whose verdict the other grading policy changes",
                       label="verdicts the policy changes", fmt="int", tone="loss_if_positive"),
                Column("censored_frac", "share of used runs cut at the token budget", label="censored", fmt="f2"),
                Column("n_items", "items of the used runs"), Column("n_graded", "graded used runs"),
                Column("budget", "the token budget (max_new_tokens)"), _KM)),
            Table("arms_excluded", "(arm, reason) with ok runs that enter no cell", (
                *keys("target", "dataset", "method", "params"),
                Column("reason", "why they enter no cell", label="why left out", fmt="text"),
                Column("n_runs", "runs", label="runs", fmt="int"), Column("n_items", "items", label="items", fmt="int"),
                Column("budget", "their token budget", label="budget", fmt="int"),
                Column("mean_completion_length", "mean output tokens", label="mean length", fmt="f1"),
                Column("accuracy", "share of graded runs that are correct", label="accuracy", fmt="f3")),
                written="when ok runs enter no cell")),
        sections=(Section("arms", "Appendix: arms", order=100),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        from lengthlens.analyses.grading_policies import policy_comparison

        ctx.results["grading"] = graded = policy_comparison(ctx.runs)
        out = {"arms": _with_policy(arms(ctx.runs), graded)}
        excluded = arms_excluded(ctx.runs)
        if not excluded.empty:
            out["arms_excluded"] = excluded
        return out


def _with_policy(arms_df: pd.DataFrame, comparison) -> pd.DataFrame:
    """arms.csv with each arm's accuracy under the other grading policy and the runs whose verdict it changes."""
    if comparison is None or arms_df.empty:
        return arms_df
    extra = comparison.arms.drop("n_regraded").to_pandas()
    return arms_df.merge(extra, on=list(ARM_KEY), how="left")


def _table3_columns() -> tuple[Column, ...]:
    """Table 3's columns (table3.csv and, per pair, table3_pairs.csv)."""
    def stat(m: str, words: str, label: str) -> tuple[Column, ...]:
        return (Column(f"{m}_mean", f"mean of the cells' {words}", label=f"{label} mean", fmt="f3"),
                Column(f"{m}_median", f"median of the cells' {words}", label=f"{label} median", fmt="f3"))

    return (
        *keys("method", also=("serving", "target", "draft")),
        Column("n_cells", "cells summarised", label="cells", fmt="int"),
        *stat("gain", "per-round gain", "gain"), *stat("lambda", "length ratio λ", "λ"),
        *stat("rounds_ratio", "measured verifier rounds R/R* (the primary cost measure)", "R/R*"),
        *stat("time_ratio", "wall time T/T*", "T/T*"),
        Column("time_per_round_ratio_median", "median of the cells' time per round (T/T*)/(R/R*)",
               label="time/round median", fmt="f3"),
        Column("time_per_round_ratio_mean", "mean of the cells' time per round (T/T*)/(R/R*)"),
        Column("n_lambda_gt_1", "cells with λ > 1", label="λ>1", fmt="int"),
        Column("n_lambda_lo_gt_1", "cells whose λ interval lies entirely above 1", label="λ_lo>1", fmt="int"),
        Column("n_rounds_ratio_gt_1", "cells with R/R* > 1", label="R/R*>1", fmt="int"),
        Column("n_time_ratio_gt_1", "cells with T/T* > 1", label="T/T*>1", fmt="int"),
        Column("n_graded", "cells graded (on at least half their items)", label="graded", fmt="int"),
        Column("n_graded_partial", "cells graded on fewer than half their items: left out of the accuracy counts",
               label="partly graded", fmt="int"),
        Column("n_drop_2pp", "cells losing more than 2 points by the one-sided test at 2.5 % (drop_2pp)",
               label="drop >2pp (test)", fmt="int"),
        Column("n_drop_2pp_point", "the study's point rule: cells whose accuracy change is at most −2 points",
               label="drop ≥2pp (point)", fmt="int"),
        Column("accuracy_mdd_pp_median", "median over graded cells of the smallest true drop drop_2pp detects with 80 % "
               "power", label="detectable drop pp", fmt="f0"),
        Column("n_drop_holm", "cells with lower accuracy and Holm-adjusted mid-p < 0.05 over the accuracy family",
               label="drop, Holm p<0.05", fmt="int"),
        Column("accuracy_delta_pp_mean", "mean accuracy change (points) over graded cells; its interval: per resample "
               "the mean of the cells' replicates", label="Δacc mean pp", fmt="f1", interval=True),
        Column("n_predicted_win_time_loses", "cells where λ/gain < 1 (predicted rounds win) while T/T* ≥ 1",
               label="λ/gain<1, T/T*≥1", fmt="int"),
        Column("n_measured_win_time_loses", "cells where R/R* < 1 (measured rounds win) while T/T* ≥ 1",
               label="R/R*<1, T/T*≥1", fmt="int"),
        Column("n_drop_bh", "cells with lower accuracy and Benjamini–Hochberg q < 0.05 over the accuracy family"),
        Column("n_incomplete", "arms covering fewer than 95 % of their baseline's items that entered (no complete alpha "
               "of the rule)"),
        Column("n_small_excluded", f"cells with fewer than {SMALL_N_ITEMS} items left out (small_n)"),
    )


class Table3Report(ReportAnalysis):
    """Table 3 (per rule, and per target–draft pair with several) and the alpha each rule's row uses per dataset."""

    name = "Table 3"
    stage = "arms and Table 3"
    outputs = Outputs(
        tables=(
            Table("table3", "rule, and `all` (with `serving` first where several serving conditions are logged: one row "
                  "per condition and rule)", _table3_columns(), caption="Table 3: acceptance length against what happened"),
            Table("table3_pairs", "(target–draft pair) × rule, and `all`: table3.csv's columns on the pair's cells alone",
                  _table3_columns(), written="with several target–draft pairs"),
            Table("alpha_selected", "(target, draft, dataset, rule)", (
                *keys(also=("target", "draft", "dataset", "serving", "method")),
                Column("alpha_selected", "the alpha Table 3 uses"), Column("params_selected", "its params"),
                Column("n_items", "items of that cell"), Column("n_items_baseline", "items of its baseline"),
                Column("complete", f"the cell covers at least {COMPLETE_SHARE:.0%} of its baseline's items"),
                Column("alphas_complete", "every alpha run on complete arms, ';'-separated, largest first"),
                Column("alphas_incomplete", "every alpha run on incomplete arms, ';'-separated, largest first")))),
        sections=(Section("table3", "Table 3: acceptance length against what happened", order=20,
                          tables=("table3", "table3_pairs")),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        cell_table: CellTable = ctx.results["cells"]
        cells_df = ctx.tables["cells"]
        alphas, small = ctx.options["alphas"], ctx.options["include_small"]
        out = {"table3": table3(cell_table, alphas=alphas, include_small=small) if len(cell_table) else frame([]),
               "alpha_selected": alpha_selected(cells_df)}
        # Table 3's choice of cells, small ones kept: what the verdicts and the survival curves speak of.
        ctx.results["table3_cells"] = table3_cells(cells_df, alphas, include_small=True) if not cells_df.empty else None
        # Per serving condition, the headline's line for each load (none under one condition).
        ctx.results["table3_by_load"] = (table3_by_load(cell_table, alphas=alphas, include_small=small)
                                         if len(cell_table) else {})
        ctx.results["table3_cells_used"] = (table3_cells(cells_df, alphas, include_small=small) if not cells_df.empty
                                            else None)
        if not cells_df.empty and cells_df[["target", "draft"]].drop_duplicates().shape[0] > 1:
            out["table3_pairs"] = table3_by_pair(cell_table, alphas=alphas, include_small=small)
        return out
