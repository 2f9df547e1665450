"""Censoring per cell: censored shares, Kaplan–Meier quantiles and censoring-aware length ratios.

Relaxed verification rules hit the token budget more often than the lossless baseline, so the
plain ratio ``lambda = mean(L) / mean(L*)`` (censored runs counted at the budget) *understates*
length inflation. Per cell (a relaxed arm paired with its baseline on the same items) this gives
the censored fraction of both sides, KM quantiles (:mod:`lengthlens.stats.survival`), the
restricted mean up to a common horizon, plain λ on the pairs where neither side is censored, and
the AFT time ratio (:mod:`lengthlens.stats.aft`), with paired item-level bootstrap intervals that
reuse the group's count matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from lengthlens.stats.aft import _DISTS, DEFAULT_AFT_RESAMPLES, AFTFit, fit_aft
from lengthlens.stats.aft_bootstrap import AFTBootstrap, _percentile, fit_aft_bootstrap
from lengthlens.stats.survival import (
    KaplanMeier,
    _html,
    kaplan_meier,
    restricted_means_many,
)

__all__ = ["CensoringCell", "censoring_cell", "DEFAULT_AFT_RESAMPLES"]


# ---------------------------------------------------------------------------------------------
# One cell
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # holds arrays: compare fields, not objects
class CensoringCell:
    """Censoring diagnostics and censoring-aware length ratios of one relaxed arm vs its baseline.

    Ratios are relaxed / baseline. ``lambda_plain`` counts censored runs at their budget (a lower
    bound on the truth); ``lambda_uncensored_pairs`` keeps only pairs where neither side is
    censored (biased too — it drops the longest relaxed completions — shown for contrast);
    ``rmst_ratio`` compares restricted means up to ``rmst_tau`` (equal to plain lambda when both
    arms share one budget); ``lambda_aft[dist]`` is the AFT time ratio (see the module docstring
    for what it estimates). Intervals: paired percentile bootstrap over items from the lead's
    ``counts`` (all rows for the cheap ratios, the first ``n_resamples_aft`` rows for AFT).
    """

    n_items: int
    n_runs: int
    n_runs_star: int
    budget: float | None
    budget_star: float | None
    #: True when runs had different budgets (within or across arms): only then do KM and the
    #: restricted mean say more than the plain means.
    budgets_differ: bool | None
    censored_frac: float
    censored_frac_star: float
    km: KaplanMeier
    km_star: KaplanMeier
    rmst_tau: float
    rmst: float
    rmst_star: float
    rmst_ratio: float
    rmst_ratio_ci: tuple[float, float]
    lambda_plain: float
    lambda_plain_ci: tuple[float, float]
    lambda_uncensored_pairs: float
    lambda_uncensored_pairs_ci: tuple[float, float]
    n_uncensored_pairs: int
    aft: dict[str, AFTFit]
    aft_ci: dict[str, tuple[float, float]]
    aft_boot: dict[str, AFTBootstrap] = field(repr=False)
    n_resamples: int
    n_resamples_aft: int
    confidence_level: float

    def to_row(self) -> dict[str, Any]:
        """Flat columns for OUT/censoring.csv (None/NaN where not identified)."""
        row: dict[str, Any] = {
            "n_items": self.n_items,
            "n_runs": self.n_runs,
            "n_runs_star": self.n_runs_star,
            "budget": self.budget,
            "budget_star": self.budget_star,
            "budgets_differ": self.budgets_differ,
            "censored_frac": self.censored_frac,
            "censored_frac_star": self.censored_frac_star,
        }
        for side, km in (("", self.km), ("_star", self.km_star)):
            for name, q in (("q25", km.q25), ("median", km.median), ("q75", km.q75)):
                row[f"km_{name}{side}"] = q.value
                row[f"km_{name}{side}_lo"] = q.ci_low
                row[f"km_{name}{side}_hi"] = q.ci_high
                row[f"km_{name}{side}_reason"] = q.reason
        row.update(
            rmst_tau=self.rmst_tau,
            rmst=self.rmst,
            rmst_star=self.rmst_star,
            rmst_ratio=self.rmst_ratio,
            rmst_ratio_lo=self.rmst_ratio_ci[0],
            rmst_ratio_hi=self.rmst_ratio_ci[1],
            lambda_plain=self.lambda_plain,
            lambda_plain_lo=self.lambda_plain_ci[0],
            lambda_plain_hi=self.lambda_plain_ci[1],
            lambda_uncensored_pairs=self.lambda_uncensored_pairs,
            lambda_uncensored_pairs_lo=self.lambda_uncensored_pairs_ci[0],
            lambda_uncensored_pairs_hi=self.lambda_uncensored_pairs_ci[1],
            n_uncensored_pairs=self.n_uncensored_pairs,
        )
        for dist in _DISTS:
            fit, ci, boot = self.aft[dist], self.aft_ci[dist], self.aft_boot[dist]
            p = f"lambda_aft_{dist}"
            row[p] = fit.lambda_aft
            row[f"{p}_lo"], row[f"{p}_hi"] = ci
            row[f"{p}_sigma"] = fit.sigma
            row[f"{p}_converged"] = fit.converged
            row[f"{p}_boot_infinite"] = boot.n_infinite
            row[f"{p}_boot_failed"] = boot.n_failed
            row[f"{p}_reason"] = fit.reason
        row["n_resamples"] = self.n_resamples
        row["n_resamples_aft"] = self.n_resamples_aft
        row["confidence_level"] = self.confidence_level
        return row

    def to_frame(self) -> pd.DataFrame:
        """The ratios side by side: plain, uncensored pairs, restricted mean, AFT log-normal and Weibull."""
        rows = [
            ("plain (censored at budget)", self.lambda_plain, *self.lambda_plain_ci),
            (f"uncensored pairs (n={self.n_uncensored_pairs})", self.lambda_uncensored_pairs,
             *self.lambda_uncensored_pairs_ci),
            (f"restricted mean ratio (tau={self.rmst_tau:g})", self.rmst_ratio, *self.rmst_ratio_ci),
        ]
        rows += [(f"AFT {d} time ratio", self.aft[d].lambda_aft, *self.aft_ci[d]) for d in _DISTS]
        return pd.DataFrame(rows, columns=["estimate", "lambda", "lo", "hi"])

    def _repr_html_(self) -> str:
        note = (
            f"{self.n_items} items; censored {self.censored_frac:.0%} (relaxed) vs "
            f"{self.censored_frac_star:.0%} (baseline); {self.confidence_level:.0%} paired percentile "
            f"bootstrap ({self.n_resamples} resamples, {self.n_resamples_aft} for AFT)."
        )
        return _html("Length ratio with censoring", self.to_frame(), note)


def _budget_summary(budget, n: int) -> tuple[np.ndarray | None, float | None]:
    if budget is None:
        return None, None
    b = np.broadcast_to(np.asarray(budget, dtype=float), (n,))
    return b, float(b.max())


def _ratio_ci(num: np.ndarray, den: np.ndarray, level: float) -> tuple[float, float]:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = num / den
    return _percentile(r, (1 - level) / 2), _percentile(r, 1 - (1 - level) / 2)


def censoring_cell(
    L: np.ndarray,
    censored: np.ndarray,
    budget: float | np.ndarray | None,
    L_star: np.ndarray,
    censored_star: np.ndarray,
    budget_star: float | np.ndarray | None,
    counts: np.ndarray,
    *,
    item_index: np.ndarray | None = None,
    item_index_star: np.ndarray | None = None,
    n_resamples_aft: int = DEFAULT_AFT_RESAMPLES,
    confidence_level: float = 0.95,
) -> CensoringCell:
    """All censoring-aware length summaries of one cell, with intervals from the shared ``counts``.

    ``L``/``censored``/``budget`` describe the relaxed arm's runs, the ``_star`` arguments the
    lossless baseline's; ``budget`` is a scalar or one value per run (None if unknown; it is then
    only missing from the report). ``counts`` (B, n_items) is the lead's item bootstrap matrix.
    With one run per item (``item_index=None``) arrays are aligned by item. With several runs per
    item pass ``item_index`` (run -> counts column); ``item_index_star`` defaults to it, meaning
    both arms' arrays are aligned run by run (same item and seed), so "pairs" are runs. If the
    arms' runs are not aligned, pass ``item_index_star`` and pairs become items: an item counts as
    an uncensored pair when none of its runs on either side is censored.
    """
    L = np.asarray(L, dtype=float)
    Ls = np.asarray(L_star, dtype=float)
    c = np.asarray(censored, dtype=bool)
    cs = np.asarray(censored_star, dtype=bool)
    counts = np.asarray(counts)
    if counts.ndim != 2:
        raise ValueError("counts must be (B, n_items)")
    B, n_items = counts.shape
    aligned = item_index_star is None
    if item_index is None:
        if item_index_star is not None:
            raise ValueError("item_index_star needs item_index")
        if not (len(L) == len(Ls) == n_items):
            raise ValueError("with item_index=None both arms need one run per item (= counts columns)")
        idx = np.arange(n_items)
        idx_s = idx
    else:
        idx = np.asarray(item_index, dtype=int)
        idx_s = idx if aligned else np.asarray(item_index_star, dtype=int)
    if not (L.shape == c.shape == idx.shape and Ls.shape == cs.shape == idx_s.shape):
        raise ValueError("lengths, censored flags and item indices must align within each arm")
    if aligned and len(L) != len(Ls):
        raise ValueError("aligned arms (no item_index_star) need the same number of runs")
    if idx.min() < 0 or max(idx.max(), idx_s.max()) >= n_items:
        raise ValueError("item_index out of range of counts columns")
    b_run, b_max = _budget_summary(budget, len(L))
    bs_run, bs_max = _budget_summary(budget_star, len(Ls))
    Cf = counts.astype(float)

    # Kaplan–Meier per side and restricted means up to a horizon both sides identify.
    km = kaplan_meier(L, c, confidence_level=confidence_level)
    km_s = kaplan_meier(Ls, cs, confidence_level=confidence_level)
    tau_candidates = [km.horizon, km_s.horizon]
    if b_max is not None:
        tau_candidates.append(b_max)
    if bs_max is not None:
        tau_candidates.append(bs_max)
    tau = min(tau_candidates)
    if not math.isfinite(tau):
        tau = max(km.max_time, km_s.max_time)
    rmst, rmst_s = km.restricted_mean(tau), km_s.restricted_mean(tau)
    def item_sums(values: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Per-resample weighted sums of per-run values, via per-item totals (no (B, runs) gather)."""
        return Cf @ np.bincount(index, weights=values, minlength=n_items)

    def resampled_rmst(lengths: np.ndarray, cens: np.ndarray, index: np.ndarray) -> np.ndarray:
        # Censoring only at or beyond tau: KM up to tau is the empirical law, so the restricted
        # mean is a weighted mean of min(L, tau) for every resample (a matrix product).
        if not np.any(cens & (lengths < tau)):
            return item_sums(np.minimum(lengths, tau), index) / item_sums(np.ones(len(lengths)), index)
        return restricted_means_many(lengths, (~cens).astype(float), Cf[:, index], tau)

    rm_b = resampled_rmst(L, c, idx)
    rms_b = resampled_rmst(Ls, cs, idx_s)
    rmst_ci = _ratio_ci(rm_b, rms_b, confidence_level)

    # Plain lambda (ratio of per-run means; censored runs at their budget) and its bootstrap.
    lam = float(L.mean() / Ls.mean())
    ones, ones_s = np.ones(len(L)), np.ones(len(Ls))
    lam_ci = _ratio_ci(
        item_sums(L, idx) / item_sums(ones, idx), item_sums(Ls, idx_s) / item_sums(ones_s, idx_s), confidence_level
    )

    # Plain lambda on pairs where neither side is censored.
    if aligned:
        keep = ~c & ~cs
        keep_s = keep
        n_pairs = int(keep.sum())
    else:
        bad_item = np.zeros(n_items, dtype=bool)
        bad_item[idx[c]] = True
        bad_item[idx_s[cs]] = True
        has = np.zeros(n_items, dtype=bool)
        has[idx] = True
        has_s = np.zeros(n_items, dtype=bool)
        has_s[idx_s] = True
        keep, keep_s = ~bad_item[idx], ~bad_item[idx_s]
        n_pairs = int(np.sum(~bad_item & has & has_s))
    if n_pairs:
        lam_u = float(L[keep].mean() / Ls[keep_s].mean())
        with np.errstate(divide="ignore", invalid="ignore"):
            lam_u_ci = _ratio_ci(
                item_sums(L * keep, idx) / item_sums(ones * keep, idx),
                item_sums(Ls * keep_s, idx_s) / item_sums(ones_s * keep_s, idx_s),
                confidence_level,
            )
    else:
        lam_u, lam_u_ci = math.nan, (math.nan, math.nan)

    # AFT fits on both arms pooled; a resample weights each run by its item's count.
    lengths = np.concatenate([L, Ls])
    cens_all = np.concatenate([c, cs])
    x = np.concatenate([np.ones(len(L)), np.zeros(len(Ls))])
    items_all = np.concatenate([idx, idx_s])
    n_aft = min(n_resamples_aft, B)
    Waft = Cf[:n_aft][:, items_all]
    fits: dict[str, AFTFit] = {}
    cis: dict[str, tuple[float, float]] = {}
    boots: dict[str, AFTBootstrap] = {}
    lo_q, hi_q = (1 - confidence_level) / 2, 1 - (1 - confidence_level) / 2
    positive = bool(np.all(lengths > 0))
    for dist in _DISTS:
        if not positive:
            reason = "AFT not fitted: a completion of length 0 (log-length undefined)"
            fits[dist] = AFTFit(dist, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan,
                                float(len(lengths)), float((~cens_all).sum()), False, 0, reason)
            boots[dist] = AFTBootstrap(dist, np.full(n_aft, np.nan), np.zeros(n_aft, bool), 0, n_aft)
            cis[dist] = (math.nan, math.nan)
            continue
        fit = fit_aft(lengths, cens_all, x, None, dist)
        boot = fit_aft_bootstrap(lengths, cens_all, x, Waft, dist, start=fit)
        lam_b = np.exp(boot.beta)
        fits[dist], boots[dist] = fit, boot
        cis[dist] = (_percentile(lam_b, lo_q), _percentile(lam_b, hi_q))

    return CensoringCell(
        n_items=n_items,
        n_runs=len(L),
        n_runs_star=len(Ls),
        budget=b_max,
        budget_star=bs_max,
        budgets_differ=None if b_run is None or bs_run is None
        else bool(np.unique(np.concatenate([b_run, bs_run])).size > 1),
        censored_frac=float(c.mean()),
        censored_frac_star=float(cs.mean()),
        km=km,
        km_star=km_s,
        rmst_tau=float(tau),
        rmst=rmst,
        rmst_star=rmst_s,
        rmst_ratio=rmst / rmst_s,
        rmst_ratio_ci=rmst_ci,
        lambda_plain=lam,
        lambda_plain_ci=lam_ci,
        lambda_uncensored_pairs=lam_u,
        lambda_uncensored_pairs_ci=lam_u_ci,
        n_uncensored_pairs=n_pairs,
        aft=fits,
        aft_ci=cis,
        aft_boot=boots,
        n_resamples=B,
        n_resamples_aft=n_aft,
        confidence_level=confidence_level,
    )
