"""Rule-level estimates: each rule's cells pooled across datasets (and target–draft pairs), with a verdict per rule.

The question a reader brings is *is this rule faster, and as accurate, across my datasets and models?*
A 12-item cell rarely answers it; the rule's cells together can. Per rule (and per rule × target–draft
pair, and per serving condition where several are logged: loads are never pooled), the cells Table 3
uses (each rule at its most aggressive complete α per dataset) are pooled by random-effects
meta-analysis (:func:`lengthlens.stats.meta.random_effects`): R/R*, T/T*, λ and gain on the log scale,
the accuracy change in points. Probe cells (fewer than :data:`~lengthlens.analyses.cells.SMALL_N_ITEMS`
items) never enter a pool; partly graded cells never enter the accuracy pool.

Verdicts, with Holm's adjustment over the rules of one table (not over cells):

- speed (R/R*, then T/T*): *faster* when the Holm-adjusted two-sided p of "no change" is below 0.05 and
  the pooled ratio is below 1 (its interval then lies below 1), *slower* likewise above 1, else *can't tell*;
- accuracy: *worse* when the one-sided p of a loss is below 0.025 after Holm (the interval lies below 0);
  *non-inferior* when the one-sided p against a loss of ``margin`` points is below 0.025 after Holm (the
  lower limit lies above −margin); both at once: *worse, within the margin*; neither: *can't tell*.

With each verdict: the interval, the prediction interval for a new dataset, the smallest rule-level
loss the data could detect (80 % power at Holm's first step, α/m, the level a single real loss meets),
and the cells and items behind it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from lengthlens.analyses.cells import Cell, CellTable
from lengthlens.analyses.outputs import Column, Context, Outputs, ReportAnalysis, Section, Table
from lengthlens.results import ConfidenceInterval, Estimate, frame, frame_html
from lengthlens.stats.meta import (MetaAnalysis, accuracy_change_variance, detectable_effect, log_ratio_variance,
                                   random_effects)
from lengthlens.stats.multiplicity import holm

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CANT_TELL", "FASTER", "NONINFERIOR", "NOT_COMPUTED", "POOLED_METRICS", "RULE_COLUMNS", "RuleEstimate",
           "CellInput", "RuleTable", "RulesReport", "SLOWER", "UNGRADED", "WORSE", "WORSE_WITHIN_MARGIN", "cell_inputs", "rules"]

FASTER, SLOWER, CANT_TELL, NOT_COMPUTED = "faster", "slower", "can't tell", "not computed"
WORSE, NONINFERIOR, WORSE_WITHIN_MARGIN, UNGRADED = "worse", "non-inferior", "worse, within the margin", "ungraded"

#: The metrics pooled, with their scale: ratios on the log scale, the accuracy change in points.
POOLED_METRICS: dict[str, str] = {"rounds_ratio": "log", "time_ratio": "log", "lambda": "log", "gain": "log",
                                  "accuracy_delta_pp": "points"}

#: The default non-inferiority margin (points): the study's 2-point loss.
DEFAULT_MARGIN_PP = 2.0
#: Family-wise level of the verdicts (two-sided; the accuracy tests are one-sided at half of it).
SIGNIFICANCE = 0.05
#: Power at which the detectable loss is quoted.
POWER = 0.8

_NAN = float("nan")

#: rules.csv's columns and what each holds (``{m}``: each pooled metric).
RULE_COLUMNS: dict[str, str] = {
    "serving": "the serving condition (empty when none is logged); conditions are never pooled",
    "target": "the target model, or `all`: every target–draft pair pooled", "draft": "the draft model, or `all`",
    "method": "the relaxed rule",
    "n_cells": "cells pooled for R/R* (Table 3's cells of at least 10 items)",
    "n_items": "items behind those cells",
    "n_cells_accuracy": "cells pooled for the accuracy change (graded, not partly graded, at least 10 items)",
    "n_items_accuracy": "graded items behind those cells",
    "n_probes_excluded": "cells of Table 3's choice left out for having fewer than 10 items (probes)",
    "verdict_rounds": "faster / slower / can't tell from the pooled R/R* (Holm over the rules at 5 %); not computed "
                      "without cells",
    "verdict_time": "the same from the pooled T/T*",
    "verdict_accuracy": "worse (interval below 0) / non-inferior (lower limit above −margin) / worse, within the "
                        "margin (both) / can't tell / ungraded; Holm over the rules, one-sided at 2.5 %",
    "{m}": "the random-effects mean across the cells (ratios: exp of the pooled log ratio)",
    "{m}_lo": "lower limit of its 95 % HKSJ interval (t with K − 1 degrees of freedom)", "{m}_hi": "upper limit",
    "{m}_pi_lo": "lower limit of the 95 % prediction interval for a new dataset (t with K − 2 degrees of freedom)",
    "{m}_pi_hi": "upper limit of the prediction interval",
    "{m}_tau": "τ̂, the between-cell standard deviation (Paule–Mandel; log scale for ratios)",
    "{m}_k": "K, the cells pooled",
    "{m}_fixed": "the fixed-effect (inverse-variance) average of these cells, a statement about these datasets only "
                 "(no interval: treating the cells' standard errors as exact, its interval covered these datasets' "
                 "mean in only 77–98 % of simulated studies, docs/validation.md)",
    "rounds_ratio_p_holm": "Holm-adjusted two-sided p of no change in R/R* (over the rules)",
    "time_ratio_p_holm": "the same for T/T*",
    "accuracy_worse_p_holm": "Holm-adjusted one-sided p of an accuracy loss (H0: change ≥ 0)",
    "accuracy_noninferior_p_holm": "Holm-adjusted one-sided p of non-inferiority (H0: change ≤ −margin)",
    "accuracy_mdd_pp": "the smallest rule-level accuracy loss (points) the pooled test detects with 80 % power at "
                       "Holm's first step (one-sided 2.5 % / rules)",
    "margin_pp": "the non-inferiority margin (points)",
}


@dataclass(frozen=True)
class RuleEstimate:
    """One rule's pooled estimates (per serving condition and target–draft pair, or ``all`` pairs) and its verdicts.

    ``pooled`` maps each metric of :data:`POOLED_METRICS` to its :class:`~lengthlens.stats.meta.MetaAnalysis` on the
    pooling scale (log ratios; points); :meth:`estimate` gives it back on the metric's own scale.
    """

    serving: str
    target: str
    draft: str
    method: str
    n_cells: int
    n_items: int
    n_cells_accuracy: int
    n_items_accuracy: int
    n_probes_excluded: int
    pooled: Mapping[str, MetaAnalysis | None]
    verdict_rounds: str
    verdict_time: str
    verdict_accuracy: str
    rounds_ratio_p_holm: float
    time_ratio_p_holm: float
    accuracy_worse_p_holm: float
    accuracy_noninferior_p_holm: float
    accuracy_mdd_pp: float
    margin_pp: float
    #: The cells pooled (dataset names, with the pair where pairs are pooled), for the reader.
    datasets: tuple[str, ...] = field(default=(), compare=False)

    def estimate(self, metric: str) -> Estimate:
        """The pooled ``metric`` on its own scale (ratios exponentiated) with its HKSJ interval; NaN where not pooled."""
        m = self.pooled.get(metric)
        if m is None:
            return Estimate(_NAN, ConfidenceInterval(_NAN, _NAN), note="no cell to pool")
        f = math.exp if POOLED_METRICS[metric] == "log" else (lambda x: x)
        se = m.standard_error * (f(m.estimate) if POOLED_METRICS[metric] == "log" else 1.0)
        note = "one cell: no interval across datasets" if m.k < 2 else ("floored at the fixed-effect width" if m.floored else "")
        return Estimate(f(m.estimate), ConfidenceInterval(f(m.low), f(m.high)), standard_error=se, method=m.method,
                        confidence_level=m.confidence_level, note=note)

    def to_row(self) -> dict:
        row: dict = {"serving": self.serving, "target": self.target, "draft": self.draft, "method": self.method,
                     "n_cells": self.n_cells, "n_items": self.n_items, "n_cells_accuracy": self.n_cells_accuracy,
                     "n_items_accuracy": self.n_items_accuracy, "n_probes_excluded": self.n_probes_excluded,
                     "verdict_rounds": self.verdict_rounds, "verdict_time": self.verdict_time,
                     "verdict_accuracy": self.verdict_accuracy}
        for name, scale in POOLED_METRICS.items():
            m = self.pooled.get(name)
            f = np.exp if scale == "log" else (lambda x: x)
            if m is None:
                vals = dict.fromkeys(("", "_lo", "_hi", "_pi_lo", "_pi_hi", "_tau", "_fixed"), _NAN)
                vals["_k"] = 0
            else:
                vals = {"": f(m.estimate), "_lo": f(m.low), "_hi": f(m.high), "_pi_lo": f(m.prediction_interval.low),
                        "_pi_hi": f(m.prediction_interval.high), "_tau": m.tau, "_k": m.k, "_fixed": f(m.fixed_effect)}
            row.update({f"{name}{k}": float(v) if k != "_k" else int(v) for k, v in vals.items()})
        row.update({"rounds_ratio_p_holm": self.rounds_ratio_p_holm, "time_ratio_p_holm": self.time_ratio_p_holm,
                    "accuracy_worse_p_holm": self.accuracy_worse_p_holm,
                    "accuracy_noninferior_p_holm": self.accuracy_noninferior_p_holm,
                    "accuracy_mdd_pp": self.accuracy_mdd_pp, "margin_pp": self.margin_pp})
        return row


def rule_columns() -> list[str]:
    """rules.csv's columns in order, the ``{m}`` entries of :data:`RULE_COLUMNS` expanded per pooled metric."""
    out: list[str] = []
    templated = [c for c in RULE_COLUMNS if "{m}" in c]
    for c in RULE_COLUMNS:
        if "{m}" not in c:
            out.append(c)
        elif c == templated[0]:
            out.extend(t.format(m=m) for m in POOLED_METRICS for t in templated)
    return out


@dataclass(frozen=True)
class RuleTable:
    """Every rule's pooled estimates and verdicts; ``to_frame()`` is rules.csv (the ``all``-pairs rows first)."""

    rules: tuple[RuleEstimate, ...]
    margin_pp: float = DEFAULT_MARGIN_PP
    confidence_level: float = 0.95

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self) -> Iterator[RuleEstimate]:
        return iter(self.rules)

    def get(self, method: str, target: str = "all", draft: str = "all", serving: str | None = None) -> RuleEstimate:
        """The row of ``method`` (every pair pooled unless ``target``/``draft`` name one; the only serving condition
        unless ``serving`` names one)."""
        hits = [r for r in self.rules if r.method == method and r.target == target and r.draft == draft
                and (serving is None or r.serving == serving)]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} rule rows match method={method!r}, target={target!r}, draft={draft!r}, "
                           f"serving={serving!r}")
        return hits[0]

    def to_frame(self) -> pd.DataFrame:
        """One row per (serving, pair or ``all``, rule): rules.csv."""
        return frame([r.to_row() for r in self.rules], columns=rule_columns())

    def _repr_html_(self) -> str:
        cols = ["serving", "target", "draft", "method", "n_cells", "verdict_rounds", "rounds_ratio", "rounds_ratio_lo",
                "rounds_ratio_hi", "verdict_time", "verdict_accuracy", "accuracy_delta_pp", "accuracy_delta_pp_lo",
                "accuracy_delta_pp_hi", "accuracy_mdd_pp"]
        return frame_html(self.to_frame()[cols], f"Rule verdicts pooled across datasets (margin {self.margin_pp:g} points)")


# ------------------------------------------------------------------------------------------------
# Pooling
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CellInput:
    """What pooling needs of one cell: per metric (estimate, variance) on the pooling scale, and its item counts."""

    cell: Cell
    values: dict[str, tuple[float, float]]
    n_items: int
    n_graded_items: int


def cell_inputs(cell: Cell) -> CellInput:
    """What pooling reads of one cell: each metric's estimate and variance on the pooling scale, and its item counts."""
    values: dict[str, tuple[float, float]] = {}
    for name, scale in POOLED_METRICS.items():
        if scale != "log" or name in cell.unavailable:
            continue
        e = cell.estimates.get(name)
        if e is None or not (np.isfinite(e.point) and e.point > 0):
            continue
        var = log_ratio_variance(e.point, e.standard_error, cell.n_items)
        if np.isfinite(var):
            values[name] = (math.log(e.point), var)
    totals = cell.item_totals
    if cell.n_graded and not cell.graded_partial and all(k in totals for k in ("n_graded", "c", "c_star")):
        d, var = accuracy_change_variance(totals["n_graded"], totals["c"], totals["c_star"])
        if np.isfinite(d) and np.isfinite(var):
            values["accuracy_delta_pp"] = (100.0 * d, 1e4 * var)
    return CellInput(cell, values, cell.n_items, cell.n_graded_items)


def _pool(inputs: list[CellInput], metric: str, level: float, floor: bool) -> MetaAnalysis | None:
    got = [c.values[metric] for c in inputs if metric in c.values]
    if not got:
        return None
    y, v = zip(*got)
    return random_effects(np.array(y), np.array(v), confidence_level=level, floor=floor)


def _speed_verdict(m: MetaAnalysis | None, p_holm: float) -> str:
    if m is None:
        return NOT_COMPUTED
    if np.isfinite(p_holm) and p_holm < SIGNIFICANCE:
        return FASTER if m.estimate < 0 else SLOWER
    return CANT_TELL


def _accuracy_verdict(m: MetaAnalysis | None, p_worse: float, p_ni: float) -> str:
    if m is None:
        return UNGRADED
    worse = np.isfinite(p_worse) and p_worse < SIGNIFICANCE / 2
    ni = np.isfinite(p_ni) and p_ni < SIGNIFICANCE / 2
    if worse and ni:
        return WORSE_WITHIN_MARGIN
    return WORSE if worse else NONINFERIOR if ni else CANT_TELL


def _p(m: MetaAnalysis | None, null: float = 0.0, alternative: Literal["two-sided", "less", "greater"] = "two-sided") -> float:
    return _NAN if m is None else m.pvalue(null, alternative)


def _family(groups: list[tuple[str, str, str, str, list[CellInput], int]], margin_pp: float, level: float,
            floor_accuracy: bool) -> list[RuleEstimate]:
    """The rule rows of one table (one serving condition, one pair or all pairs), Holm over its rules."""
    pooled = [{m: _pool(inputs, m, level, floor=(floor_accuracy if m == "accuracy_delta_pp" else True))
               for m in POOLED_METRICS} for *_, inputs, _ in groups]
    p_rounds = holm([_p(p["rounds_ratio"]) for p in pooled])
    p_time = holm([_p(p["time_ratio"]) for p in pooled])
    p_worse = holm([_p(p["accuracy_delta_pp"], 0.0, "less") for p in pooled])
    p_ni = holm([_p(p["accuracy_delta_pp"], -margin_pp, "greater") for p in pooled])
    graded_rules = sum(p["accuracy_delta_pp"] is not None and p["accuracy_delta_pp"].k >= 2 for p in pooled)
    rows = []
    for i, (serving, target, draft, method, inputs, n_probes) in enumerate(groups):
        acc = pooled[i]["accuracy_delta_pp"]
        rounds = [c for c in inputs if "rounds_ratio" in c.values]
        graded = [c for c in inputs if "accuracy_delta_pp" in c.values]
        mdd = (detectable_effect(acc.standard_error, acc.df, SIGNIFICANCE / 2 / max(graded_rules, 1), POWER)
               if acc is not None and acc.k >= 2 else _NAN)
        names = tuple(c.cell.dataset if target != "all" else f"{c.cell.target}/{c.cell.dataset}" for c in inputs)
        rows.append(RuleEstimate(
            serving=serving, target=target, draft=draft, method=method, n_cells=len(rounds),
            n_items=int(sum(c.n_items for c in rounds)), n_cells_accuracy=len(graded),
            n_items_accuracy=int(sum(c.n_graded_items for c in graded)), n_probes_excluded=n_probes, pooled=pooled[i],
            verdict_rounds=_speed_verdict(pooled[i]["rounds_ratio"], p_rounds[i]),
            verdict_time=_speed_verdict(pooled[i]["time_ratio"], p_time[i]),
            verdict_accuracy=_accuracy_verdict(acc, p_worse[i], p_ni[i]),
            rounds_ratio_p_holm=float(p_rounds[i]), time_ratio_p_holm=float(p_time[i]),
            accuracy_worse_p_holm=float(p_worse[i]), accuracy_noninferior_p_holm=float(p_ni[i]),
            accuracy_mdd_pp=float(mdd), margin_pp=margin_pp, datasets=names))
    return rows


def rules(cells: CellTable, *, margin_pp: float = DEFAULT_MARGIN_PP, alphas: Literal["loosest", "all"] = "loosest",
          floor_accuracy: bool = True) -> RuleTable:
    """Each rule's cells pooled across datasets by random-effects meta-analysis, with a verdict per rule.

    Parameters
    ----------
    cells : the cell table (:func:`lengthlens.cells`): its cells' standard errors and per-item accuracy sums.
    margin_pp : the non-inferiority margin (points): *non-inferior* when the pooled accuracy change's lower
        limit lies above −margin.
    alphas : the cells pooled: Table 3's (each rule at its most aggressive complete α per dataset, the
        default) or ``all`` (every α: cells of one dataset are then not independent, so use with care).
    floor_accuracy : floor the accuracy change's HKSJ interval at the fixed-effect width, as the ratios' are.

    Returns
    -------
    RuleTable
        Per serving condition, the ``all``-pairs row of each rule, then (with several target–draft pairs)
        each pair's; ``to_frame()`` is rules.csv.

    Examples
    --------
    >>> import lengthlens as ll
    >>> runs = ll.load(ll.synth.example_path())                                  # doctest: +SKIP
    >>> ll.rules(ll.cells(runs)).get("cactus").estimate("rounds_ratio")          # doctest: +SKIP
    """
    from lengthlens.analyses.tables import table3_cells
    from lengthlens.data.serving import serving_conditions

    if not len(cells):
        return RuleTable((), margin_pp)
    chosen = table3_cells(cells, alphas, include_small=True)
    chosen = chosen[~chosen["method"].astype(str).str.endswith("_force_commit")]
    picked = [cells.cells[int(i)] for i in chosen["_rep"]]
    conditions = serving_conditions(c.serving for c in picked)
    pairs = sorted({(c.target, c.draft) for c in picked})
    out: list[RuleEstimate] = []
    for serving in conditions:
        at = [c for c in picked if c.serving == serving]
        scopes = [("all", "all", at)] + ([(t, d, [c for c in at if (c.target, c.draft) == (t, d)]) for t, d in pairs]
                                         if len(pairs) > 1 else [])
        for target, draft, scope_cells in scopes:
            groups = []
            for method in sorted({c.method for c in scope_cells}):
                mine = [c for c in scope_cells if c.method == method]
                inputs = [cell_inputs(c) for c in mine if not c.small_n]
                groups.append((serving, target, draft, method, inputs, sum(c.small_n for c in mine)))
            out.extend(_family(groups, margin_pp, cells.confidence_level, floor_accuracy))
    return RuleTable(tuple(out), margin_pp, cells.confidence_level)


# ------------------------------------------------------------------------------------------------
# In the report: rules.csv and the section that opens the report
# ------------------------------------------------------------------------------------------------

#: The report's labels of rules.csv's shown columns, in the order the table shows them.
_SHOWN: dict[str, tuple[str, str]] = {
    "method": ("rule", "text"), "n_cells": ("cells", "int"), "n_items": ("items", "int"),
    "rounds_ratio": ("R/R*", "f2"), "verdict_rounds": ("R/R* verdict", "text"),
    "time_ratio": ("T/T*", "f2"), "verdict_time": ("T/T* verdict", "text"),
    "n_cells_accuracy": ("graded cells", "int"), "accuracy_delta_pp": ("Δacc pp", "f1"),
    "verdict_accuracy": ("accuracy verdict", "text"), "accuracy_mdd_pp": ("detectable loss pp", "f1"),
}


def _declared_columns() -> tuple[Column, ...]:
    """rules.csv's columns as declared: RULE_COLUMNS' descriptions; the shown ones labelled, the verdicts coloured by
    themselves (not by an interval: a verdict is Holm's over the rules)."""
    family = "{" + ",".join(m for m in POOLED_METRICS if m not in _SHOWN) + "}"
    out: list[Column] = []
    for name, what in RULE_COLUMNS.items():
        if name == "{m}":
            for m in POOLED_METRICS:
                if m in _SHOWN:
                    out.append(Column(m, f"{what}, with its 95 % HKSJ interval ({m}_lo, {m}_hi)",
                                      label=_SHOWN[m][0], fmt=_SHOWN[m][1], interval=True))
            out.append(Column(family, f"{what}, with its 95 % HKSJ interval", interval=True))
        elif name in ("{m}_lo", "{m}_hi"):
            continue  # with each metric's interval above
        elif "{m}" in name:
            out.append(Column(name.replace("{m}", "{" + ",".join(POOLED_METRICS) + "}"), what))
        elif name in _SHOWN:
            label, fmt = _SHOWN[name]
            out.append(Column(name, what, label=label, fmt=fmt, tone="verdict" if name.startswith("verdict_") else None))
        else:
            out.append(Column(name, what))
    order = list(_SHOWN)  # the table's order; the rest keep rules.csv's
    shown = sorted((c for c in out if c.label), key=lambda c: order.index(c.name))
    return (*shown, *(c for c in out if not c.label))


class RulesReport(ReportAnalysis):
    """rules.csv and the report's first section: each rule's Table 3 cells pooled across datasets, a verdict per rule."""

    name = "rule verdicts"
    stage = "arms and Table 3"
    outputs = Outputs(
        tables=(Table("rules", "serving condition × pair (`all`: every pair pooled; each pair with several) × rule",
                      _declared_columns(), written="when there are cells",
                      caption="Rule verdicts: each rule's cells pooled across datasets"),),
        sections=(Section("rules", "Faster, and as accurate? Each rule across datasets",
                          "Each rule's cells of Table 3 (probes of fewer than 10 items left out, partly graded cells "
                          "left out of accuracy) pooled by random-effects meta-analysis: Paule–Mandel between-dataset "
                          "spread, Hartung–Knapp–Sidik–Jonkman 95 % intervals, Holm over the rules. The cell-level "
                          "verdicts follow in the sections below.",
                          order=-10, landscape=False, new_page=False),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        cell_table: CellTable = ctx.results["cells"]
        if not len(cell_table):
            return {}
        ctx.results["rules"] = table = rules(cell_table, margin_pp=ctx.options.get("margin_pp", DEFAULT_MARGIN_PP),
                                             alphas=ctx.options["alphas"])
        return {"rules": table.to_frame()} if len(table) else {}
