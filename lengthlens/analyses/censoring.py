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
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lengthlens.analyses.censoring_aft import _aft_estimates, _percentile_pair
from lengthlens.stats.aft import _DISTS, DEFAULT_AFT_RESAMPLES, AFTFit
from lengthlens.stats.aft_bootstrap import AFTBootstrap
from lengthlens.stats.survival import (
    KaplanMeier,
    _html,
    kaplan_meier,
    restricted_means_many,
)

if TYPE_CHECKING:  # pandas is imported where a frame is built: worker processes need none
    import pandas as pd

__all__ = ["CensoringCell", "PreparedCell", "censoring_cell", "prepare_cell", "DEFAULT_AFT_RESAMPLES"]


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
    for what it estimates). Intervals: paired percentile bootstrap over the cell's items from
    ``counts`` for the ratios; for AFT the cluster-robust sandwich (``aft_ci_method="sandwich"``)
    or refits on the first ``n_resamples_aft`` rows (``"bootstrap"``).
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
    aft_boot: dict[str, AFTBootstrap | None] = field(repr=False)
    n_resamples: int
    n_resamples_aft: int
    confidence_level: float
    aft_ci_method: str = "sandwich"

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
            row[f"{p}_boot_infinite"] = boot.n_infinite if boot is not None else None
            row[f"{p}_boot_failed"] = boot.n_failed if boot is not None else None
            row[f"{p}_reason"] = fit.reason
        row["n_resamples"] = self.n_resamples
        row["n_resamples_aft"] = self.n_resamples_aft
        row["aft_ci"] = self.aft_ci_method
        row["confidence_level"] = self.confidence_level
        return row

    def to_frame(self) -> pd.DataFrame:
        """The ratios side by side: plain, uncensored pairs, restricted mean, AFT log-normal and Weibull."""
        import pandas as pd
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
            f"bootstrap ({self.n_resamples} resamples); AFT: "
            + (f"bootstrap ({self.n_resamples_aft} refits)." if self.aft_ci_method == "bootstrap"
               else "cluster-robust sandwich by item, t(G-1).")
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
    return _percentile_pair(r, level)


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
    aft_ci: Literal["sandwich", "bootstrap"] = "sandwich",
) -> CensoringCell:
    """All censoring-aware length summaries of one cell, with intervals from the shared ``counts``.

    ``L``/``censored``/``budget`` describe the relaxed arm's runs, the ``_star`` arguments the
    lossless baseline's; ``budget`` is a scalar or one value per run (None if unknown; it is then
    only missing from the report). ``counts`` (B, n_items) is the cell's item bootstrap matrix
    (float64 avoids a copy). With one run per item (``item_index=None``) arrays are aligned by item.
    With several runs per item pass ``item_index`` (run -> counts column); ``item_index_star``
    defaults to it, meaning both arms' arrays are aligned run by run (same item and seed), so
    "pairs" are runs. If the arms' runs are not aligned, pass ``item_index_star`` and pairs become
    items: an item counts as an uncensored pair when none of its runs on either side is censored.
    ``aft_ci``: ``sandwich`` (default; cluster-robust by item, t(G-1), one fit) or ``bootstrap``
    (refits on the first ``n_resamples_aft`` rows of ``counts``, percentile interval).
    """
    prepared = prepare_cell(L, censored, budget, L_star, censored_star, budget_star, counts, item_index=item_index,
                            item_index_star=item_index_star, confidence_level=confidence_level)
    return prepared.finish(prepared.d.counts @ prepared.X, n_resamples_aft=n_resamples_aft, aft_ci=aft_ci)


def prepare_cell(L, censored, budget, L_star, censored_star, budget_star, counts, *, item_index=None,
                 item_index_star=None, confidence_level: float = 0.95) -> "PreparedCell":
    """Everything of :func:`censoring_cell` before its one matrix product: validation, Kaplan–Meier, tau and
    the per-item columns whose resampled sums give the ratio intervals (``PreparedCell.X``).

    The censoring table stacks the columns of every cell that shares an item set and multiplies
    the counts once per item set, not once per cell.
    """
    d = _CellData.build(L, censored, L_star, censored_star, counts, item_index, item_index_star)
    km = kaplan_meier(d.L, d.c, confidence_level=confidence_level)
    km_s = kaplan_meier(d.Ls, d.cs, confidence_level=confidence_level)
    b_run, b_max = _budget_summary(budget, len(d.L))
    bs_run, bs_max = _budget_summary(budget_star, len(d.Ls))
    tau = min([km.horizon, km_s.horizon] + [b for b in (b_max, bs_max) if b is not None])
    if not math.isfinite(tau):
        tau = max(km.max_time, km_s.max_time)
    keep, keep_s, n_pairs = d.uncensored_pairs()
    one, one_s = np.ones(len(d.L)), np.ones(len(d.Ls))
    cols = [(d.L, d.idx), (one, d.idx), (d.Ls, d.idx_s), (one_s, d.idx_s),
            (d.L * keep, d.idx), (one * keep, d.idx), (d.Ls * keep_s, d.idx_s), (one_s * keep_s, d.idx_s),
            (np.minimum(d.L, tau), d.idx), (np.minimum(d.Ls, tau), d.idx_s)]
    n = d.counts.shape[1]
    X = np.stack([np.bincount(index, weights=values, minlength=n) for values, index in cols], axis=1)
    budgets_differ = (None if b_run is None or bs_run is None
                      else bool(np.unique(np.concatenate([b_run, bs_run])).size > 1))
    return PreparedCell(d, km, km_s, float(tau), b_max, bs_max, budgets_differ, keep, keep_s, n_pairs, X,
                        confidence_level)


@dataclass(frozen=True, eq=False)
class PreparedCell:
    """A cell ready for its resampled sums ``counts @ X`` (see :func:`prepare_cell`)."""

    d: "_CellData"
    km: KaplanMeier
    km_s: KaplanMeier
    tau: float
    budget: float | None
    budget_star: float | None
    budgets_differ: bool | None
    keep: np.ndarray
    keep_s: np.ndarray
    n_pairs: int
    X: np.ndarray
    level: float

    def finish(self, S: np.ndarray, *, n_resamples_aft: int = DEFAULT_AFT_RESAMPLES,
               aft_ci: Literal["sandwich", "bootstrap"] = "sandwich", aft: tuple | None = None) -> CensoringCell:
        """The CensoringCell from the resampled sums ``S = counts @ X`` (B, 10).

        ``aft``: the cell's sandwich AFT estimates when the caller fitted several cells at once
        (:func:`lengthlens.analyses.censoring_aft.aft_estimates_many`); otherwise they are computed here.
        """
        if aft_ci not in ("sandwich", "bootstrap"):
            raise ValueError(f"aft_ci must be 'sandwich' or 'bootstrap', not {aft_ci!r}")
        d = self.d
        rmst, rmst_s = self.km.restricted_mean(self.tau), self.km_s.restricted_mean(self.tau)
        n_aft = min(n_resamples_aft, d.counts.shape[0]) if aft_ci == "bootstrap" else 0
        if aft is not None and n_aft:
            raise ValueError("precomputed AFT estimates are sandwich ones: aft_ci='bootstrap' refits here")
        fits, cis, boots = aft if aft is not None else _aft_estimates(d, n_aft, self.level)
        return CensoringCell(
            n_items=d.counts.shape[1], n_runs=len(d.L), n_runs_star=len(d.Ls), budget=self.budget,
            budget_star=self.budget_star, budgets_differ=self.budgets_differ, censored_frac=float(d.c.mean()),
            censored_frac_star=float(d.cs.mean()), km=self.km, km_star=self.km_s, rmst_tau=self.tau, rmst=rmst,
            rmst_star=rmst_s, rmst_ratio=rmst / rmst_s, **_ratio_estimates(self, S),
            aft=fits, aft_ci=cis, aft_boot=boots, n_resamples=d.counts.shape[0], n_resamples_aft=n_aft,
            confidence_level=self.level, aft_ci_method=aft_ci,
        )


@dataclass(frozen=True, eq=False)
class _CellData:
    """One cell's runs, validated: lengths, censored flags and counts columns per arm."""

    L: np.ndarray
    c: np.ndarray
    Ls: np.ndarray
    cs: np.ndarray
    idx: np.ndarray
    idx_s: np.ndarray
    aligned: bool
    counts: np.ndarray

    @classmethod
    def build(cls, L, censored, L_star, censored_star, counts, item_index, item_index_star) -> "_CellData":
        L, Ls = np.asarray(L, dtype=float), np.asarray(L_star, dtype=float)
        c, cs = np.asarray(censored, dtype=bool), np.asarray(censored_star, dtype=bool)
        counts = np.asarray(counts, dtype=float)  # no copy when the caller passes float64
        if counts.ndim != 2:
            raise ValueError("counts must be (B, n_items)")
        n_items = counts.shape[1]
        aligned = item_index_star is None
        if item_index is None:
            if item_index_star is not None:
                raise ValueError("item_index_star needs item_index")
            if not (len(L) == len(Ls) == n_items):
                raise ValueError("with item_index=None both arms need one run per item (= counts columns)")
            idx = idx_s = np.arange(n_items)
        else:
            idx = np.asarray(item_index, dtype=int)
            idx_s = idx if aligned else np.asarray(item_index_star, dtype=int)
        if not (L.shape == c.shape == idx.shape and Ls.shape == cs.shape == idx_s.shape):
            raise ValueError("lengths, censored flags and item indices must align within each arm")
        if aligned and len(L) != len(Ls):
            raise ValueError("aligned arms (no item_index_star) need the same number of runs")
        if idx.min() < 0 or max(idx.max(), idx_s.max()) >= n_items:
            raise ValueError("item_index out of range of counts columns")
        return cls(L, c, Ls, cs, idx, idx_s, aligned, counts)

    def uncensored_pairs(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Runs kept on each side for lambda on uncensored pairs, and the number of pairs."""
        if self.aligned:
            keep = ~self.c & ~self.cs
            return keep, keep, int(keep.sum())
        n = self.counts.shape[1]
        bad = np.zeros(n, dtype=bool)
        bad[self.idx[self.c]] = True
        bad[self.idx_s[self.cs]] = True
        has, has_s = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        has[self.idx], has_s[self.idx_s] = True, True
        return ~bad[self.idx], ~bad[self.idx_s], int(np.sum(~bad & has & has_s))


def _ratio_estimates(p: PreparedCell, S: np.ndarray) -> dict[str, Any]:
    """Plain lambda, lambda on uncensored pairs and the restricted-mean ratio's interval from ``S = counts @ X``."""
    d, tau, level = p.d, p.tau, p.level
    # Censoring only at or beyond tau: KM up to tau is the empirical law, so the restricted mean is
    # a weighted mean of min(L, tau) for every resample (columns 8 and 9 of S).
    with np.errstate(divide="ignore", invalid="ignore"):
        rm_b = (S[:, 8] / S[:, 1] if not np.any(d.c & (d.L < tau))
                else restricted_means_many(d.L, (~d.c).astype(float), d.counts[:, d.idx], tau))
        rms_b = (S[:, 9] / S[:, 3] if not np.any(d.cs & (d.Ls < tau))
                 else restricted_means_many(d.Ls, (~d.cs).astype(float), d.counts[:, d.idx_s], tau))
        out: dict[str, Any] = {
            "rmst_ratio_ci": _ratio_ci(rm_b, rms_b, level),
            "lambda_plain": float(d.L.mean() / d.Ls.mean()),
            "lambda_plain_ci": _ratio_ci(S[:, 0] / S[:, 1], S[:, 2] / S[:, 3], level),
            "n_uncensored_pairs": p.n_pairs,
        }
        if p.n_pairs:
            out["lambda_uncensored_pairs"] = float(d.L[p.keep].mean() / d.Ls[p.keep_s].mean())
            out["lambda_uncensored_pairs_ci"] = _ratio_ci(S[:, 4] / S[:, 5], S[:, 6] / S[:, 7], level)
        else:
            out["lambda_uncensored_pairs"], out["lambda_uncensored_pairs_ci"] = math.nan, (math.nan, math.nan)
    return out
