"""Censoring per cell: censored shares, Kaplan–Meier quantiles and censoring-aware length ratios.

Relaxed verification rules hit the token budget more often than the lossless baseline, so the
plain ratio λ = mean(L) / mean(L*) (censored runs counted at the budget) *understates* length
inflation. Per cell (a relaxed arm paired with its baseline on the same items) this gives the
censored share of both sides, Kaplan–Meier quantiles (:mod:`lengthlens.stats.survival`), the
restricted mean up to a common horizon, λ on the pairs where neither side is censored, and the AFT
geometric-mean (time) ratio (:mod:`lengthlens.stats.aft`: a ratio of geometric means, not λ, a ratio of means). Every
interval that resamples comes from the engine's draws and interval code, as the cell table's do, and honours ``ci=``:
the ratios of sums, and the statistics of the items themselves (the Kaplan–Meier quartiles, the restricted-mean
ratio where censoring comes before the horizon, the AFT bootstrap refits), each declared with its default interval;
:class:`CensoringAnalysis` is the analysis, :func:`survival_curves` what the survival figure draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl

from lengthlens.analyses.engine import CellResult, CellRuns, Plan, Settings, resample_plan
from lengthlens.analyses.outputs import Column, Context, Figure, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.results import ConfidenceInterval, Estimate, frame, frame_html
from lengthlens.stats.aft import DEFAULT_AFT_RESAMPLES, DISTS, AFTBootstrap, AFTFit, aft_sandwich, fit_aft, fit_aft_bootstrap, fit_aft_many
from lengthlens.stats.intervals import Ratio, Statistic, Weighted
from lengthlens.stats.survival import (KaplanMeier, kaplan_meier, km_quantiles_weighted, restricted_means_many,
                                       with_item_intervals)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["AFT_CI_METHODS", "DEFAULT_AFT_DISTS", "KM_RESAMPLES", "CensoringAnalysis", "CensoringCell", "SurvivalCurve", "censoring_cell", "survival_curves"]

AFT_CI_METHODS = ("sandwich", "bootstrap")
_NAN = float("nan")

#: The AFT laws fitted by default. The Weibull fit's sandwich interval under-covers (docs/concepts.md), so it is
#: fitted only when asked for (``CensoringAnalysis(aft_dists=DISTS)``).
DEFAULT_AFT_DISTS: tuple[str, ...] = ("lognormal",)

#: Resamples (the first of the cell's draws) for the Kaplan–Meier quantiles' item-level intervals: each is a
#: weighted KM curve over every run, so fewer than the ratios' sums get (declared with the statistic).
KM_RESAMPLES = 1000

#: The note of a restricted-mean ratio whose censoring comes before the horizon (no function of sums then).
RMST_WEIGHTED_NOTE = "restricted means of weighted Kaplan–Meier curves"


# ------------------------------------------------------------------------------------------------
# The statistics of a cell's resampled sums (module level: the engine caches what they depend on)
# ------------------------------------------------------------------------------------------------

def _lambda_plain(s):
    return s.L / s.Ls


def _lambda_uncensored(s):
    return s.L_keep / s.Ls_keep


def _rmst_ratio(s):
    return (s.L_tau / s.one) / (s.Ls_tau / s.one)


STATISTICS = {"lambda_plain": Ratio(_lambda_plain), "lambda_uncensored_pairs": Ratio(_lambda_uncensored),
              "rmst_ratio": Ratio(_rmst_ratio)}


def _rmst_ratio_weighted(L, event, Ls, event_s, item, tau, W):
    """The restricted-mean ratio of the weighted KM curves of both arms, per row of item weights ``W``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return restricted_means_many(L, event, W, tau, item=item) / restricted_means_many(Ls, event_s, W, tau, item=item)


def _aft_time_ratios(lengths, censored, relaxed, item, dist, fit, W):
    """The AFT time ratio exp(β) refitted at every row of item weights ``W`` (warm-started at the point fit)."""
    with np.errstate(over="ignore"):
        return np.exp(fit_aft_bootstrap(lengths, censored, relaxed, np.asarray(W)[:, item], dist, start=fit).beta)


@dataclass(frozen=True, eq=False)  # holds arrays: compare fields, not objects
class CensoringCell:
    """Censoring diagnostics and censoring-aware length ratios of one relaxed arm against its baseline.

    Ratios are relaxed / baseline. ``lambda_plain`` counts censored runs at their budget (a lower
    bound on the truth; the cell table's λ); ``lambda_uncensored_pairs`` keeps only pairs where
    neither side is censored (biased too: it drops the longest relaxed completions; shown for
    contrast); ``rmst_ratio`` compares restricted means up to ``rmst_tau`` (equal to plain λ when both
    arms share one budget); ``aft[dist]`` is the AFT fit and ``gm_ratio_aft[dist]`` its time ratio, a
    ratio of geometric means (not λ; log-normal by default, Weibull when asked for) (see :mod:`lengthlens.stats.aft`), with a cluster-robust sandwich
    interval or bootstrap refits.
    """

    n_items: int
    n_runs: int
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
    rmst_ratio: Estimate
    lambda_plain: Estimate
    lambda_uncensored_pairs: Estimate
    n_uncensored_pairs: int
    aft: Mapping[str, AFTFit]
    gm_ratio_aft: Mapping[str, Estimate]
    aft_boot: Mapping[str, AFTBootstrap | None]
    n_resamples: int
    n_resamples_aft: int
    confidence_level: float
    aft_ci_method: str = "sandwich"

    @property
    def lambda_aft(self) -> Mapping[str, Estimate]:
        """Old name of :attr:`gm_ratio_aft` (kept for one release): the AFT estimand is no λ."""
        return self.gm_ratio_aft

    def to_row(self) -> dict[str, Any]:
        """Flat columns for OUT/censoring.csv (NaN where not identified)."""
        row: dict[str, Any] = {
            "n_items": self.n_items, "n_runs": self.n_runs, "n_runs_star": self.n_runs, "budget": self.budget,
            "budget_star": self.budget_star, "budgets_differ": self.budgets_differ, "censored_frac": self.censored_frac,
            "censored_frac_star": self.censored_frac_star,
        }
        for side, km in (("", self.km), ("_star", self.km_star)):
            for name, q in (("q25", km.q25), ("median", km.median), ("q75", km.q75)):
                row[f"km_{name}{side}"] = q.point
                row[f"km_{name}{side}_lo"] = q.low
                row[f"km_{name}{side}_hi"] = q.high
                row[f"km_{name}{side}_reason"] = q.note
        row.update(rmst_tau=self.rmst_tau, rmst=self.rmst, rmst_star=self.rmst_star)
        for name in ("rmst_ratio", "lambda_plain", "lambda_uncensored_pairs"):
            est = getattr(self, name)
            row.update({name: est.point, f"{name}_lo": est.low, f"{name}_hi": est.high})
            if name == "lambda_uncensored_pairs":
                row["n_uncensored_pairs"] = self.n_uncensored_pairs
        for dist in self.aft:
            fit, est, boot = self.aft[dist], self.gm_ratio_aft[dist], self.aft_boot[dist]
            p = f"gm_ratio_aft_{dist}"
            row[p] = fit.lambda_aft
            row[f"{p}_lo"], row[f"{p}_hi"] = est.low, est.high
            row[f"{p}_sigma"] = fit.sigma
            row[f"{p}_converged"] = fit.converged
            row[f"{p}_boot_infinite"] = boot.n_infinite if boot is not None else None
            row[f"{p}_boot_failed"] = boot.n_failed if boot is not None else None
            row[f"{p}_reason"] = fit.reason
        for new in [k for k in row if k.startswith("gm_ratio_aft_")]:  # the old names, for one release
            row[deprecated_aft_column(new)] = row[new]
        row.update(n_resamples=self.n_resamples, n_resamples_aft=self.n_resamples_aft, aft_ci=self.aft_ci_method,
                   confidence_level=self.confidence_level)
        return row

    def to_frame(self) -> pd.DataFrame:
        """The ratios side by side: plain, uncensored pairs, restricted mean, AFT log-normal and Weibull."""
        rows = [("plain (censored at budget)", self.lambda_plain),
                (f"uncensored pairs (n={self.n_uncensored_pairs})", self.lambda_uncensored_pairs),
                (f"restricted mean ratio (tau={self.rmst_tau:g})", self.rmst_ratio)]
        rows += [(f"AFT {d} geometric-mean ratio (not λ)", self.gm_ratio_aft[d]) for d in self.aft]
        return frame([{"estimate": name, "lambda": e.point, "lo": e.low, "hi": e.high, "interval": e.method}
                      for name, e in rows])

    def _repr_html_(self) -> str:
        note = (f"{self.n_items} items; censored {self.censored_frac:.0%} (relaxed) vs {self.censored_frac_star:.0%} "
                f"(baseline); {self.confidence_level:.0%} intervals from {self.n_resamples} paired item resamples; AFT: "
                + (f"bootstrap ({self.n_resamples_aft} refits)." if self.aft_ci_method == "bootstrap"
                   else "cluster-robust sandwich by item, t(G-1)."))
        return frame_html(self.to_frame(), "Length ratio with censoring") + f"<p><small>{note}</small></p>"


@dataclass(frozen=True, eq=False)
class _Prepared:
    """A cell's censoring data before its resampled sums: the runs, Kaplan–Meier and the horizon."""

    L: np.ndarray
    c: np.ndarray
    Ls: np.ndarray
    cs: np.ndarray
    item: np.ndarray
    km: KaplanMeier
    km_s: KaplanMeier
    tau: float
    budget: float | None
    budget_star: float | None
    budgets_differ: bool | None
    n_pairs: int
    #: With ``aft_ci="bootstrap"``: each law's point fit (the refits start there), else empty.
    aft_fits: Mapping[str, AFTFit] = field(default_factory=dict)

    @property
    def censored_before_tau(self) -> bool:
        """Some run is censored before the horizon: KM is not the empirical law below it, nor the restricted mean a
        mean of min(L, tau), so the restricted-mean ratio is no function of sums."""
        return bool(np.any(self.c & (self.L < self.tau)) or np.any(self.cs & (self.Ls < self.tau)))


def _max_or_none(values: np.ndarray | None) -> float | None:
    if values is None:
        return None
    known = values[~np.isnan(values)]
    return float(known.max()) if known.size else None


def prepare(L: np.ndarray, censored: np.ndarray, budget: np.ndarray | None, L_star: np.ndarray,
            censored_star: np.ndarray, budget_star: np.ndarray | None, item: np.ndarray, n_items: int,
            confidence_level: float) -> tuple[_Prepared, dict[str, np.ndarray]]:
    """A cell's Kaplan–Meier, horizon and the per-item columns whose resampled sums give its ratios.

    The arrays are the cell's paired runs (aligned: run k of each side is one pair); ``item`` each
    run's item. ``budget``/``budget_star`` per run (NaN or None where unknown).
    """
    L, Ls = np.asarray(L, dtype=float), np.asarray(L_star, dtype=float)
    c, cs = np.asarray(censored, dtype=bool), np.asarray(censored_star, dtype=bool)
    km = kaplan_meier(L, c, confidence_level=confidence_level)
    km_s = kaplan_meier(Ls, cs, confidence_level=confidence_level)
    b_max, bs_max = _max_or_none(budget), _max_or_none(budget_star)
    tau = min([km.horizon, km_s.horizon] + [b for b in (b_max, bs_max) if b is not None])
    if not math.isfinite(tau):
        tau = max(km.max_time, km_s.max_time)
    keep = ~c & ~cs
    known = [b[~np.isnan(b)] for b in (budget, budget_star) if b is not None]
    budgets_differ = None if len(known) < 2 else bool(np.unique(np.concatenate(known)).size > 1)

    def by_item(v: np.ndarray) -> np.ndarray:
        return np.bincount(item, weights=v.astype(float), minlength=n_items)

    columns = {"L": by_item(L), "Ls": by_item(Ls), "one": by_item(np.ones(len(L))),
               "L_keep": by_item(L * keep), "Ls_keep": by_item(Ls * keep),
               "L_tau": by_item(np.minimum(L, tau)), "Ls_tau": by_item(np.minimum(Ls, tau))}
    prepared = _Prepared(L, c, Ls, cs, item, km, km_s, float(tau), b_max, bs_max, budgets_differ, int(keep.sum()))
    return prepared, columns


def statistics(p: _Prepared, *, aft_ci: str = "sandwich", n_resamples_aft: int = DEFAULT_AFT_RESAMPLES,
               aft_dists: Sequence[str] = DEFAULT_AFT_DISTS) -> dict[str, Statistic | Weighted]:
    """The resampled statistics of one cell, each with its declared interval: the ratios of sums (λ plain, λ on
    uncensored pairs, the restricted-mean ratio; studentized by default), the Kaplan–Meier quartiles of both arms
    over the first :data:`KM_RESAMPLES` draws (expanded percentile), the restricted-mean ratio of weighted KM curves
    where censoring comes before the horizon (expanded percentile), and with ``aft_ci="bootstrap"`` the AFT time
    ratios refitted on the first ``n_resamples_aft`` draws (percentile)."""
    out: dict[str, Statistic | Weighted] = dict(STATISTICS)
    out["km"] = km_quantiles_weighted(p.km, p.L, ~p.c, p.item, KM_RESAMPLES, "km_{}")
    out["km_star"] = km_quantiles_weighted(p.km_s, p.Ls, ~p.cs, p.item, KM_RESAMPLES, "km_{}_star")
    if p.censored_before_tau:
        # a restricted mean of a weighted KM per resample: not a function of sums, so no bootstrap-t; the plain
        # percentile interval is too narrow at a dozen items, the expanded one widens it as a t interval would
        out["rmst_ratio"] = Weighted(partial(_rmst_ratio_weighted, p.L, (~p.c).astype(float), p.Ls, (~p.cs).astype(float),
                                             p.item, p.tau), "expanded_percentile",
                                     point=p.km.restricted_mean(p.tau) / p.km_s.restricted_mean(p.tau))
    if aft_ci == "bootstrap":
        lengths, cens, x, items = _aft_inputs(p)
        for dist, fit in p.aft_fits.items():
            out[f"gm_ratio_aft_{dist}"] = Weighted(partial(_aft_time_ratios, lengths, cens, x, items, dist, fit),
                                                   "percentile", n_resamples_aft, point=fit.lambda_aft)
    return out


def _ratio_cell(p: _Prepared, est: Mapping[str, Estimate]) -> dict[str, Any]:
    """Plain λ, λ on uncensored pairs and the restricted-mean ratio, each with its interval."""
    out: dict[str, Any] = {"lambda_plain": est["lambda_plain"], "n_uncensored_pairs": p.n_pairs}
    out["lambda_uncensored_pairs"] = (est["lambda_uncensored_pairs"] if p.n_pairs
                                      else Estimate(_NAN, ConfidenceInterval(_NAN, _NAN), note="no uncensored pair"))
    rmst, rmst_s = p.km.restricted_mean(p.tau), p.km_s.restricted_mean(p.tau)
    out["rmst_ratio"] = (replace(est["rmst_ratio"], note=RMST_WEIGHTED_NOTE) if p.censored_before_tau
                         else est["rmst_ratio"])
    out.update(rmst=rmst, rmst_star=rmst_s)
    return out


def _aft_inputs(p: _Prepared) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both arms pooled for the AFT fits: lengths, censored flags, relaxed indicator and item (cluster) per run."""
    return (np.concatenate([p.L, p.Ls]), np.concatenate([p.c, p.cs]),
            np.concatenate([np.ones(len(p.L)), np.zeros(len(p.Ls))]), np.concatenate([p.item, p.item]))


def _not_fitted(dist: str, lengths: np.ndarray, cens: np.ndarray) -> AFTFit:
    return AFTFit(dist, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, float(len(lengths)), float((~cens).sum()), False, 0,
                  "AFT not fitted: a completion of length 0 (log-length undefined)")


def deprecated_aft_column(name: str) -> str:
    """The old censoring.csv name of an AFT column (``gm_ratio_aft_lognormal_lo`` was ``lambda_aft_lognormal_lo``)."""
    return "lambda_aft_" + name.removeprefix("gm_ratio_aft_")


def _aft_fits(p: _Prepared, dists: Sequence[str]) -> dict[str, AFTFit]:
    """Each law's point fit of one cell (the laws whose log-lengths are all defined), for the bootstrap refits."""
    lengths, cens, x, _ = _aft_inputs(p)
    return {dist: fit_aft(lengths, cens, x, None, dist) for dist in dists if bool(np.all(lengths > 0))}


def _aft_estimates(results: Sequence[CellResult], level: float, aft_ci: str,
                   dists: Sequence[str] = DEFAULT_AFT_DISTS) -> list[tuple[dict, dict, dict]]:
    """Per cell and law: the AFT fit, its time ratio with its interval, and the bootstrap refits (None with the sandwich).

    With the sandwich interval each law is fitted to all of a group's cells at once (one Newton over
    one weight row per cell: the same fits, their sums in another order); the bootstrap's refits are
    the engine's (the statistics of :func:`statistics`).
    """
    prepared: list[_Prepared] = [r.plan.data for r in results]
    inputs = [_aft_inputs(p) for p in prepared]
    out: list[tuple[dict, dict, dict]] = [({}, {}, {}) for _ in prepared]
    for dist in dists:
        fitted = [j for j, (lengths, *_) in enumerate(inputs) if bool(np.all(lengths > 0))]
        for j in sorted(set(range(len(inputs))) - set(fitted)):
            fits, ests, boots = out[j]
            fits[dist], boots[dist] = _not_fitted(dist, *inputs[j][:2]), None
            ests[dist] = Estimate(_NAN, ConfidenceInterval(_NAN, _NAN), note=fits[dist].reason)
        if aft_ci == "sandwich":
            many = fit_aft_many([inputs[j][:3] for j in fitted], dist, with_hessians=True)
            for j, (fit, hessian) in zip(fitted, many):
                fits, ests, boots = out[j]
                sw = aft_sandwich(fit, *inputs[j], level, hessian=hessian)
                fits[dist], boots[dist] = fit, None
                ests[dist] = Estimate(fit.lambda_aft, sw.ci, standard_error=sw.beta_se, method="sandwich",
                                      confidence_level=level, note=sw.reason)
            continue
        for j in fitted:
            fits, ests, boots = out[j]
            name = f"gm_ratio_aft_{dist}"
            fits[dist], ests[dist] = prepared[j].aft_fits[dist], results[j].estimates[name]
            with np.errstate(divide="ignore"):
                beta = np.log(results[j].replicates[name])
            boots[dist] = AFTBootstrap(dist=dist, beta=beta, converged=np.isfinite(beta),
                                       n_infinite=int(np.sum(np.isinf(beta))), n_failed=int(np.sum(np.isnan(beta))))
    return out


@dataclass(frozen=True)
class CensoringAnalysis:
    """censoring.csv on the engine: per cell, censored shares, KM quantiles and censoring-aware length ratios.

    ``aft_ci``: ``sandwich`` (cluster-robust by item, one fit) or ``bootstrap`` (refits on the first
    ``n_resamples_aft`` draws). Cells whose lengths or censoring are not known on every run have no row
    (cells.csv's ``unavailable`` says which).
    """

    aft_ci: Literal["sandwich", "bootstrap"] = "sandwich"
    n_resamples_aft: int = DEFAULT_AFT_RESAMPLES
    aft_dists: tuple[str, ...] = DEFAULT_AFT_DISTS

    fields = ("output_tokens", "output_tokens_star", "censored", "censored_star", "max_new_tokens", "max_new_tokens_star")

    def __post_init__(self) -> None:
        if self.aft_ci not in AFT_CI_METHODS:
            raise ValueError(f"aft_ci must be one of {AFT_CI_METHODS}, not {self.aft_ci!r}")
        if not set(self.aft_dists) <= set(DISTS):
            raise ValueError(f"aft_dists must be among {DISTS}, not {self.aft_dists!r}")

    def plan(self, cell: CellRuns, settings: Settings) -> Plan | None:
        f = cell.fields
        if any(np.isnan(f[c]).any() for c in ("output_tokens", "output_tokens_star", "censored", "censored_star")):
            return None
        prepared, columns = prepare(f["output_tokens"], f["censored"] > 0, f.get("max_new_tokens"), f["output_tokens_star"],
                                    f["censored_star"] > 0, f.get("max_new_tokens_star"), cell.item, cell.n_items,
                                    settings.confidence_level)
        return self._plan(cell, prepared, columns)

    def _plan(self, cell: CellRuns, prepared: _Prepared, columns: Mapping[str, np.ndarray]) -> Plan:
        if self.aft_ci == "bootstrap":
            prepared = replace(prepared, aft_fits=_aft_fits(prepared, self.aft_dists))
        return Plan(cell, columns, statistics(prepared, aft_ci=self.aft_ci, n_resamples_aft=self.n_resamples_aft,
                                              aft_dists=self.aft_dists), prepared)

    def finish(self, results: list[CellResult], settings: Settings) -> list[dict[str, Any]]:
        return [{**r.cell.key, **cell.to_row()} for r, cell in zip(results, self.cells(results, settings))]

    def cells(self, results: list[CellResult], settings: Settings) -> list[CensoringCell]:
        """The :class:`CensoringCell` of each result (one group's cells: the sandwich fits them at once)."""
        level = settings.confidence_level
        n_aft = min(self.n_resamples_aft, settings.n_resamples) if self.aft_ci == "bootstrap" else 0
        aft = _aft_estimates(results, level, self.aft_ci, self.aft_dists)
        out = []
        for r, (fits, ests, boots) in zip(results, aft):
            p: _Prepared = r.plan.data
            km, km_s = (with_item_intervals(k, {q: r.estimates[f"km_{q}{side}"] for q in ("q25", "median", "q75")})
                        for k, side in ((p.km, ""), (p.km_s, "_star")))
            out.append(CensoringCell(
                n_items=r.cell.n_items, n_runs=len(p.L), budget=p.budget, budget_star=p.budget_star,
                budgets_differ=p.budgets_differ, censored_frac=float(p.c.mean()), censored_frac_star=float(p.cs.mean()),
                km=km, km_star=km_s, rmst_tau=p.tau, **_ratio_cell(p, r.estimates), aft=fits, gm_ratio_aft=ests,
                aft_boot=boots, n_resamples=settings.n_resamples, n_resamples_aft=n_aft, confidence_level=level,
                aft_ci_method=self.aft_ci))
        return out

    def collect(self, rows: list[dict[str, Any]], settings: Settings) -> pd.DataFrame:
        return frame(rows)


def censoring_cell(L, censored, budget, L_star, censored_star, budget_star, counts, *, item_index=None,
                   n_resamples_aft: int = DEFAULT_AFT_RESAMPLES, confidence_level: float = 0.95,
                   ci: str = "studentized", aft_ci: Literal["sandwich", "bootstrap"] = "sandwich",
                   aft_dists: Sequence[str] = DEFAULT_AFT_DISTS) -> CensoringCell:
    """Every censoring-aware length summary of one cell from its runs as arrays and its draws, as the report computes it.

    Parameters
    ----------
    L, censored, budget : the relaxed runs' lengths, whether each hit its budget, and the budget (a number, one per
        run, or None when unknown).
    L_star, censored_star, budget_star : the same for the baseline runs, aligned with the relaxed ones (run k of
        each side is one pair).
    counts : the draws (B, n_items).
    item_index : each pair's item (a column of ``counts``); default: one pair per item, in order.
    n_resamples_aft, confidence_level, ci, aft_ci : as for :func:`lengthlens.censoring_table`.
    aft_dists : the AFT laws to fit (default log-normal only; ``DISTS`` adds the Weibull fit).

    Returns
    -------
    CensoringCell

    Examples
    --------
    >>> import numpy as np
    >>> from lengthlens.stats.resample import item_counts
    >>> L, Ls = np.array([120., 300, 512, 80]), np.array([100., 250, 400, 90])
    >>> cut = L >= 512
    >>> cell = censoring_cell(L, cut, 512, Ls, Ls >= 512, 512, item_counts(4, 200, np.random.default_rng(0)))
    >>> round(cell.lambda_plain.point, 3)
    1.205
    """
    L = np.asarray(L, dtype=float)
    counts = np.asarray(counts)
    if not np.issubdtype(counts.dtype, np.number) or counts.ndim != 2:
        raise ValueError("counts must be (B, n_items)")
    n_items = counts.shape[1]
    item = np.arange(len(L)) if item_index is None else np.asarray(item_index, dtype=np.int64)
    if item_index is None and len(L) != n_items:
        raise ValueError("with item_index=None both arms need one run per item (= counts columns)")
    if not (len(L) == len(np.asarray(L_star)) == len(np.asarray(censored)) == len(np.asarray(censored_star)) == len(item)):
        raise ValueError("lengths, censored flags and item indices must align, one per pair")
    if item.size and (item.min() < 0 or item.max() >= n_items):
        raise ValueError("item_index out of range of counts columns")

    def per_run(b):
        return None if b is None else np.broadcast_to(np.asarray(b, dtype=float), L.shape).copy()

    prepared, columns = prepare(L, censored, per_run(budget), L_star, censored_star, per_run(budget_star), item, n_items,
                                confidence_level)
    cell = CellRuns(key={}, group=(), n_items_group=n_items, items=tuple(map(str, range(n_items))), item=item, fields={})
    settings = Settings(n_resamples=counts.shape[0], ci=ci, confidence_level=confidence_level)
    analysis = CensoringAnalysis(aft_ci, n_resamples_aft, tuple(aft_dists))
    result = resample_plan(analysis._plan(cell, prepared, columns), counts, settings)
    return analysis.cells([result], settings)[0]


# ------------------------------------------------------------------------------------------------
# Survival curves for the figure
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class SurvivalCurve:
    """Kaplan–Meier survival P(L > x) of one arm's completion lengths: the step function and its censoring marks."""

    times: np.ndarray
    survival: np.ndarray
    censored_times: np.ndarray
    censored_survival: np.ndarray
    n_runs: int
    n_censored: int


@dataclass(frozen=True, eq=False)
class DatasetSurvival:
    """One dataset's survival curves, strict first, with its budgets."""

    curves: Mapping[str, SurvivalCurve]
    budgets: tuple[int, ...]
    n_runs: int
    n_censored: int
    #: Rules whose curve includes an arm covering fewer than 95 % of its baseline's items.
    incomplete: tuple[str, ...] = ()
    #: The serving condition of these runs where runs come under several ("" otherwise).
    serving: str = ""


def survival_curve(lengths: np.ndarray, censored: np.ndarray) -> SurvivalCurve:
    """The Kaplan–Meier step function starting at (0, 1), and the height of the curve at each distinct censoring length."""
    L, c = np.asarray(lengths, dtype=float), np.asarray(censored, dtype=bool)
    km = kaplan_meier(L, c) if (~c).any() else None
    times = np.concatenate([[0.0], km.times]) if km is not None else np.array([0.0])
    surv = np.concatenate([[1.0], km.survival]) if km is not None else np.array([1.0])
    if L.size and L.max() > times[-1]:  # the curve runs on, flat, to the longest run (a censored one)
        times, surv = np.append(times, L.max()), np.append(surv, surv[-1])
    ct = np.unique(L[c])
    cs = surv[np.clip(np.searchsorted(times, ct, side="right") - 1, 0, len(surv) - 1)]
    return SurvivalCurve(times, surv, ct, cs, int(L.size), int(c.sum()))


def survival_curves(paired: pl.DataFrame, arms: pl.DataFrame) -> dict[str, DatasetSurvival]:
    """Per dataset (and serving condition, where runs come under several), the survival curves of the strict baseline
    and of each rule's arms in ``arms`` (pairs pooled).

    ``paired``: the paired runs (one row per run, with ``censored``); ``arms``: the (target, draft,
    dataset, method, params) the figure shows (Table 3's choice), with ``complete`` where known (an incomplete
    arm's rule is listed in ``incomplete`` and labelled in the figure). The strict curve pools every strict
    run of the dataset, each rule's curve its chosen arms' runs. Keys are dataset names, or ``"<dataset>, <load>"``
    per serving condition (lightest load first) when there are several: loads are not pooled.
    """
    from lengthlens.data.serving import serving_conditions

    keys = ["target", "draft", "dataset", "method", "params"]
    if paired.is_empty() or arms.is_empty():
        return {}
    with_load = "serving" in paired.columns and "serving" in arms.columns
    if with_load:
        keys.append("serving")
    strict = paired.filter(pl.col("method") == "strict")
    relaxed = paired.join(arms.select(keys).unique(), on=keys, how="semi")
    data = pl.concat([strict, relaxed]).select("dataset", "method", "output_tokens", "censored", "max_new_tokens",
                                               pl.col("serving").fill_null("") if with_load else pl.lit("").alias("serving"))
    data = data.drop_nulls(["output_tokens", "censored"])
    loads = serving_conditions(data.get_column("serving").unique().to_list())
    out = {}
    for ds in sorted(data.get_column("dataset").unique().to_list()):
        for load in loads if len(loads) > 1 else [None]:
            d = data.filter((pl.col("dataset") == ds) & ((pl.col("serving") == load) if load is not None else True))
            if d.is_empty():
                continue
            methods = ["strict", *sorted(m for m in d.get_column("method").unique().to_list() if m != "strict")]
            curves = {}
            for m in methods:
                g = d.filter(pl.col("method") == m)
                if g.height:
                    curves[m] = survival_curve(g.get_column("output_tokens").to_numpy(), g.get_column("censored").to_numpy())
            budgets = tuple(sorted(int(b) for b in d.get_column("max_new_tokens").drop_nulls().unique().to_list()))
            mine = (pl.col("dataset") == ds) & ((pl.col("serving") == load) if load is not None else True)
            short = (arms.filter(mine & ~pl.col("complete")).get_column("method").unique().sort().to_list()
                     if "complete" in arms.columns else [])
            out[ds if load is None else f"{ds}, {load}"] = DatasetSurvival(
                curves, budgets, d.height, int(d.get_column("censored").sum()), tuple(short), load or "")
    return out


# ------------------------------------------------------------------------------------------------
# The report's censoring section (declared outputs, :mod:`lengthlens.analyses.outputs`)
# ------------------------------------------------------------------------------------------------

def _censoring_columns() -> tuple[Column, ...]:
    aft = "gm_ratio_aft_{lognormal,weibull}"
    return (
        *keys("dataset", "method", "params"),
        Column("n_items", "items", label="items", fmt="int"),
        Column("censored_frac", "share of the relaxed runs cut at the token budget", label="cens", fmt="f2"),
        Column("censored_frac_star", "the same for the baseline runs", label="cens*", fmt="f2"),
        Column("km_median", "Kaplan–Meier median completion length of the relaxed runs", label="KM median", fmt="int",
               interval=True, open_at="budget"),
        Column("km_median_star", "the same for the baseline runs", label="KM median*", fmt="int", interval=True,
               open_at="budget_star"),
        Column("lambda_plain", "the cell's λ (censored runs counted at the budget)", label="λ plain", fmt="f2", interval=True),
        Column("lambda_uncensored_pairs", "λ on the pairs where neither run is censored", label="λ uncensored pairs",
               fmt="f2", interval=True),
        Column("gm_ratio_aft_lognormal", "geometric-mean (time) ratio of the log-normal AFT fit, censored runs treated as "
               "censored: a typical completion stretched by, not λ", label="GM ratio AFT log-normal", fmt="f2",
               interval=True, better="lower"),
        Column("gm_ratio_aft_weibull", "the same from the Weibull fit (when asked for; its sandwich interval "
               "under-covers)", label="GM ratio AFT Weibull", fmt="f2", interval=True, better="lower"),
        Column("n_runs{,_star}", "paired runs (relaxed, baseline)"),
        Column("budget{,_star}", "token budgets (relaxed, baseline)"),
        Column("budgets_differ", "the two sides ran under different budgets"),
        Column("km_{q25,median,q75}{,_star}", "Kaplan–Meier quartiles of completion length (relaxed, baseline) with "
               "item-level intervals; NaN where not identified (a missing upper limit, or quartile, above a known lower limit "
               "lies beyond the budget: the report writes > budget)", interval=True),
        Column("km_{q25,median,q75}{,_star}_reason", "why a quartile or its limit is not identified"),
        Column("rmst_tau", "the horizon of the restricted means (the smaller budget)"),
        Column("rmst{,_star}", "restricted mean completion length up to rmst_tau (relaxed, baseline)"),
        Column("rmst_ratio", "rmst / rmst_star", interval=True),
        Column("n_uncensored_pairs", "pairs where neither run is censored"),
        Column(f"{aft}_{{sigma,converged,boot_infinite,boot_failed,reason}}", "the AFT fit's scale, whether it converged, "
               "bootstrap refits that gave an infinite ratio or failed, and why it is missing"),
        Column("lambda_aft_{lognormal,weibull}{,_lo,_hi,_sigma,_converged,_boot_infinite,_boot_failed,_reason}",
               "old names of the gm_ratio_aft_ columns (kept for one release)"),
        Column("n_resamples", "item resamples of the intervals"),
        Column("n_resamples_aft", "bootstrap refits of the AFT intervals (0: the sandwich)"),
        Column("aft_ci", "how the AFT intervals were made: sandwich or bootstrap"),
        Column("confidence_level", "the intervals' level"),
    )


class CensoringReport(ReportAnalysis):
    """censoring.csv (:class:`CensoringAnalysis` in the report's resampling pass) and the survival curves' figure."""

    name = "censoring"
    stage = "arms and Table 3"
    outputs = Outputs(
        tables=(Table("censoring", "cell whose lengths and censoring are known on every run", _censoring_columns(),
                      written="when there are cells"),),
        sections=(Section("censoring", "Censoring", (
            "Runs that stop at the token budget are right-censored: their true length is longer. Beside plain λ, "
            "λ on the pairs where neither run is censored and accelerated-failure-time (AFT) length ratios that "
            "treat censored runs as censored; Kaplan–Meier medians per side."), order=58),),
        figures=(Figure("survival", section="censoring", wide=True),))

    def resampled(self, ctx: Context) -> tuple[CensoringAnalysis]:
        return (CensoringAnalysis(ctx.options["aft_ci"], ctx.options["n_resamples_aft"]),)

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        chosen = ctx.results.get("table3_cells")
        if chosen is None:  # no cells
            return {}
        # The survival figure's curves: the baseline and the arms of Table 3's choice (small cells kept).
        ctx.results["survival"] = survival_curves(ctx.derived.paired,
                                                  pl.from_pandas(chosen[["target", "draft", "dataset", "method", "params",
                                                                         "serving", "complete"]]))
        (table,) = ctx.resampled[self.name]
        return {"censoring": table}
