"""The cell table: every registry metric of every cell with its interval, the accuracy test and the drop flags.

A cell is a relaxed arm paired with its strict baseline on the (item, seed, turn) units where both
runs are ok; the item is the resampling unit. :class:`CellsAnalysis` is the analysis on the engine
(:mod:`lengthlens.analyses.engine`); :func:`cells` runs it on loaded runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lengthlens.data.coverage import COMPLETE_SHARE
from lengthlens.analyses.engine import CellResult, CellRuns, Plan, Settings, run_on
from lengthlens.analyses.outputs import Column, Context, Figure, Outputs, ReportAnalysis, Section, Table
from lengthlens.results import AccuracyChange, ConfidenceInterval, Estimate, TestResult, frame, frame_html
from lengthlens.stats import metrics
from lengthlens.stats.influence import INFLUENTIAL_SHARE, RatioInfluence, ratio_influence
from lengthlens.stats.metrics import ACCURACY_DROP_PP, drop_2pp_point
from lengthlens.stats.multiplicity import benjamini_hochberg, holm
from lengthlens.stats.paired import (ALPHA_ONE_SIDED, accuracy_loss_test, accuracy_mdd_pp,
                                     smallest_attainable_p)
from lengthlens.stats.signflip import paired_accuracy_test
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED

if TYPE_CHECKING:
    import pandas as pd

    from lengthlens.data.runset import RunSet

__all__ = ["AccuracyFamily", "Cell", "CellTable", "CellsAnalysis", "SMALL_N_ITEMS", "accuracy_family", "cells",
           "family_can_reject", "is_partly_graded"]

#: Cells with fewer items than this are flagged ``small_n``: their intervals are unreliable (left out of
#: Table 3, the headline and the figures' interval bars unless asked for).
SMALL_N_ITEMS = 10

#: Old names of cells.csv columns, written beside the new ones for one release (mcnemar_p held the exact p).
DEPRECATED_COLUMNS = {"mcnemar_p": "accuracy_p_exact", "mcnemar_p_holm": "accuracy_p_holm", "mcnemar_q_bh": "accuracy_q_bh"}

#: The family-wise level the multiplicity columns are read at.
SIGNIFICANCE = 0.05

_LOSS = (f"loss of more than {ACCURACY_DROP_PP:g} points: one-sided test at {ALPHA_ONE_SIDED:.1%} of H0 "
         f"change ≥ −{ACCURACY_DROP_PP:g} points")

def _influence_columns(reg: metrics.Registry) -> dict[str, str]:
    """cells.csv's influence columns of the registry's metrics marked ``influence`` (and the flag they set), described."""
    inf = reg.influence_metrics
    labels = {m: reg.metric(m).label for m in inf}
    out = {}
    for m, (x, y) in inf.items():
        out.update({f"{m}_item_min": f"{labels[m]}: smallest item ratio (an item's seeds added up)",
                    f"{m}_item_max": f"{labels[m]}: largest item ratio; no resample, and no default interval, leaves this range",
                    f"{m}_loo_lo": f"{labels[m]}: smallest value with one item left out",
                    f"{m}_loo_hi": f"{labels[m]}: largest value with one item left out"})
        if m != "lambda":
            out[f"{m}_top_share"] = f"the largest share one item has of either sum of {labels[m]} ({x} or {y})"
    names = ", ".join(labels.values())
    out["influential"] = (f"one item carries more than {INFLUENTIAL_SHARE:.0%} of either sum of {names}, or one of them has "
                          "an interval excluding 1 while leaving one item out puts it on the other side of 1")
    return out


#: What each of cells.csv's columns beside the metrics holds (the metrics' own come from the registry).
CELL_COLUMNS: dict[str, str] = {
    "target": "the target model", "draft": "the draft model (empty for plain autoregressive decoding)",
    "dataset": "the dataset (benchmark folder)", "method": "the relaxed rule or speculative method",
    "params": "its parameters as logged (e.g. alpha0.35)",
    "serving": "the serving condition the arm and its baseline ran under (c=8: concurrency, rate=4/s, bs=16: batch "
               "size, gpu=…), empty when none is logged",
    "alpha": "the rule's alpha, parsed from params",
    "n_items": "items the cell covers (the resampling units)", "n_runs": "paired runs (item, seed, turn units)",
    "n_graded": "paired runs graded on both sides: the only ones accuracy uses",
    "drop_2pp": f"{_LOSS} (Tango's score statistic, exact unconditional p: Lloyd's E+M up to 60 pairs, the largest "
                "tail over the nuisance beyond; with several seeds a t test over "
                "items); empty when ungraded or graded on fewer than half its items",
    "drop_2pp_p": "the p-value of that one-sided test (drop_2pp is drop_2pp_p < 0.025)",
    "drop_2pp_point": f"the study's point rule: the accuracy change itself is at most −{ACCURACY_DROP_PP:g} points "
                      "(fires on noise in about a third of unchanged 12–30-item cells)",
    "accuracy_mdd_pp": "minimum detectable drop: the smallest true accuracy loss (points) drop_2pp detects with 80 % "
                       "power at the cell's graded pairs and background discordance 2·min(b, c)/n (exact; inf: none it can); with "
                       "several seeds, the item-level t test's at the cell's observed item-level standard error",
    "wrong_to_right": "graded pairs wrong on the baseline and right on the relaxed arm",
    "right_to_wrong": "graded pairs right on the baseline and wrong on the relaxed arm",
    "accuracy_p": "the paired accuracy test's two-sided mid-p value (accuracy_test names the test)",
    "accuracy_test": "mcnemar_midp (one graded pair per item), or sign_flip_midp_exact / sign_flip_midp_monte_carlo "
                     "(the item-level sign-flip test, with several seeds)",
    "accuracy_p_exact": "the same test's exact p-value (exact McNemar or sign-flip; conservative at 12–30 items)",
    "accuracy_p_smallest": "the smallest accuracy_p the cell's test could give at its size (every unit flipped one way)",
    "in_accuracy_family": "counts in the family the multiplicity columns adjust over: graded, not partly graded, "
                          f"at least {SMALL_N_ITEMS} items",
    "budget": "the relaxed runs' token budget (max_new_tokens)", "n_items_baseline": "items of the group's baseline",
    "coverage": "n_items / n_items_baseline: the share of its baseline's items the cell covers",
    "complete": f"coverage of at least {COMPLETE_SHARE:.0%}; an incomplete arm (say an answer file cut short) is marked "
                "in Table 3, the figures and the report's warnings",
    "unavailable": "metrics left empty and why (inputs not logged); empty when every metric is computed",
    "small_n": f"fewer than {SMALL_N_ITEMS} items: left out of Table 3, the headline and the figures' intervals",
    "undefined_resamples": "most resamples left out of any of the cell's intervals (an undefined value)",
    "interval_fallback": "metrics whose default interval was replaced, each with the reason (e.g. 'lambda: outside "
                         "item-ratio range: percentile interval'; the bootstrap-t unbounded, or past the item ratios)",
    "unbounded": "metrics whose interval is still unbounded or undefined at a defined estimate, each with the reason",
    "percentile_fallback": "old form of interval_fallback: the metrics' names only (kept for one release)",
    "influence_top_share": "the largest share one item has of either sum of λ (output tokens, relaxed or baseline)",
    **_influence_columns(metrics.REGISTRY),
    "n_graded_items": "items with at least one pair graded on both sides",
    "graded_partial": "graded on fewer than half its items: accuracy shown, kept out of the accuracy counts",
    "accuracy_p_holm": "accuracy_p adjusted by Holm over the cells in_accuracy_family (family-wise); empty outside it",
    "accuracy_q_bh": "accuracy_p adjusted by Benjamini–Hochberg over the cells in_accuracy_family (false discovery rate)",
    "verdict_rounds": "faster / slower / can't tell: R/R*'s interval wholly below 1, wholly above 1, or holding 1 "
                      f"(not computed: no interval; probe, no verdict: fewer than {SMALL_N_ITEMS} items, small_n)",
    "verdict_time": "the same verdict from T/T*'s interval",
    "verdict_accuracy": "worse (the loss flag drop_2pp fires) / no detectable change (see accuracy_mdd_pp) / ungraded / "
                        "partly graded / probe, no verdict",
    "mcnemar_p": "old name of accuracy_p_exact (kept for one release)",
    "mcnemar_p_holm": "old name of accuracy_p_holm (kept for one release)",
    "mcnemar_q_bh": "old name of accuracy_q_bh (kept for one release)",
}

_NAN = float("nan")

#: A graded cell's per-item accuracy sums (graded pairs, correct relaxed, correct baseline), kept for pooling across cells.
ACCURACY_ITEM_SUMS = ("n_graded", "c", "c_star")


def is_partly_graded(n_graded_items: int, n_items: int) -> bool:
    """Graded on fewer than half its items: the accuracy is shown, marked, and kept out of accuracy counts.

    This is what a grader that can only judge some runs produces (e.g. code datasets without their
    tests, where only runs cut at the budget get a verdict): an accuracy change on a biased few items.
    """
    return 0 < n_graded_items and 2 * n_graded_items < n_items


@dataclass(frozen=True)
class Cell:
    """One relaxed arm paired with its strict baseline on the items where both runs are ok.

    ``estimates`` maps each registry metric to its :class:`~lengthlens.results.Estimate` (NaN where its
    inputs are not logged: ``unavailable`` says why), with the interval its registry row declares (the
    accuracy change's: Tango's score interval, one graded pair per item, or a t interval over items with
    several seeds). ``accuracy`` (:class:`~lengthlens.results.AccuracyChange`) holds the paired accuracy
    test, mid-p and exact, the loss flag ``drop_2pp`` and its test, the point rule, the minimum
    detectable drop and the p-values adjusted over the cells ``in_accuracy_family``; the read-only
    properties of the same names as cells.csv's columns (``accuracy_p``, ``drop_2pp``, ...) read it.
    """

    target: str
    draft: str
    dataset: str
    method: str
    params: str
    alpha: float | None
    n_items: int
    n_runs: int
    n_graded: int
    n_graded_items: int
    n_items_baseline: int
    budget: int | None
    estimates: Mapping[str, Estimate]
    unavailable: Mapping[str, str] = field(default_factory=dict)
    #: The accuracy test, the loss flag and their counts (empty tests when nothing is graded).
    accuracy: AccuracyChange = field(default_factory=AccuracyChange)
    #: The registry's metrics marked ``influence`` (λ, R/R*, T/T*): single items' weight in them (absent where the
    #: metric is unavailable).
    influence: Mapping[str, RatioInfluence] = field(default_factory=dict)
    #: The cell's items and their totals (seeds added up) of the sums of those metrics, for :meth:`items_frame`,
    #: and of :data:`ACCURACY_ITEM_SUMS` when graded (what :func:`lengthlens.stats.meta.accuracy_change_variance` reads).
    items: tuple[str, ...] = field(default=(), repr=False, compare=False)
    item_totals: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    #: The serving condition (:mod:`lengthlens.data.serving`), "" when none is logged.
    serving: str = ""

    def __getitem__(self, metric: str) -> Estimate:
        return self.estimates[metric]

    @property
    def rounds_ratio_median_item(self) -> float:
        """The median over items of the item's mean per-run R/R* (a registry metric over items)."""
        e = self.estimates.get("rounds_ratio_median_item")
        return _NAN if e is None else e.point

    @property
    def time_ratio_median_item(self) -> float:
        """The median over items of the item's mean per-run T/T* (a registry metric over items)."""
        e = self.estimates.get("time_ratio_median_item")
        return _NAN if e is None else e.point

    @property
    def key(self) -> dict[str, Any]:
        return {"target": self.target, "draft": self.draft, "dataset": self.dataset, "method": self.method,
                "params": self.params, "serving": self.serving}

    @property
    def small_n(self) -> bool:
        return self.n_items < SMALL_N_ITEMS

    @property
    def coverage(self) -> float:
        """The share of its baseline's items the cell covers (NaN without a baseline count)."""
        return self.n_items / self.n_items_baseline if self.n_items_baseline else _NAN

    @property
    def complete(self) -> bool:
        """Whether the arm covers at least COMPLETE_SHARE of its baseline's items (an incomplete arm is flagged everywhere)."""
        return not self.coverage < COMPLETE_SHARE

    @property
    def graded_partial(self) -> bool:
        return bool(self.n_graded) and is_partly_graded(self.n_graded_items, self.n_items)

    # cells.csv's accuracy columns, read from :attr:`accuracy`.
    @property
    def accuracy_test(self) -> TestResult | None:
        return self.accuracy.test

    @property
    def accuracy_test_exact(self) -> TestResult | None:
        return self.accuracy.test_exact

    @property
    def drop_2pp_test(self) -> TestResult | None:
        return self.accuracy.loss_test

    @property
    def accuracy_p(self) -> float | None:
        return self.accuracy.p

    @property
    def accuracy_p_exact(self) -> float | None:
        return self.accuracy.p_exact

    @property
    def drop_2pp_p(self) -> float | None:
        return self.accuracy.drop_2pp_p

    @property
    def drop_2pp(self) -> bool | None:
        return self.accuracy.drop_2pp

    @property
    def drop_2pp_point(self) -> bool | None:
        return self.accuracy.drop_2pp_point

    @property
    def accuracy_mdd_pp(self) -> float:
        return self.accuracy.mdd_pp

    @property
    def wrong_to_right(self) -> int | None:
        return self.accuracy.wrong_to_right

    @property
    def right_to_wrong(self) -> int | None:
        return self.accuracy.right_to_wrong

    @property
    def accuracy_p_holm(self) -> float | None:
        return self.accuracy.p_holm

    @property
    def accuracy_q_bh(self) -> float | None:
        return self.accuracy.q_bh

    @property
    def in_accuracy_family(self) -> bool:
        """In the family the headline's accuracy counts speak of: graded, not partly graded, not ``small_n``."""
        return self.accuracy_test is not None and not self.graded_partial and not self.small_n

    @property
    def accuracy_p_smallest(self) -> float | None:
        """The smallest p-value the cell's accuracy test could reach at its size (every unit changed one way)."""
        if self.accuracy_test is None:
            return None
        units = self.n_graded if self.accuracy_test.method.startswith("mcnemar") else self.n_graded_items
        return smallest_attainable_p(units, self.accuracy_test.method)

    @property
    def undefined_resamples(self) -> int:
        """Most resamples left out of any interval whose point estimate exists (an ungraded cell's accuracy change,
        undefined in every resample, does not count)."""
        return max((e.undefined_resamples for e in self.estimates.values()
                    if e.confidence_interval is not None and np.isfinite(e.point)), default=0)

    def _defined(self) -> Iterator[tuple[str, Estimate]]:
        """The metrics with an interval and a defined estimate (an ungraded cell's accuracy change is not)."""
        return ((n, e) for n, e in self.estimates.items()
                if e.confidence_interval is not None and n not in self.unavailable and np.isfinite(e.point))

    @property
    def interval_fallback(self) -> tuple[str, ...]:
        """``"metric: reason"`` for each metric whose default interval was replaced (its note says by what)."""
        return tuple(f"{n}: {e.note}" for n, e in self._defined() if e.note and np.isfinite(e.low) and np.isfinite(e.high))

    @property
    def unbounded(self) -> tuple[str, ...]:
        """``"metric: reason"`` for each metric whose interval has no finite limit (a ratio's no positive one) at a
        defined estimate."""
        reg = metrics.registry()
        out = []
        for n, e in self._defined():
            ratio = n in reg.names and reg.metric(n).interval == "ratio"
            if np.isfinite(e.low) and np.isfinite(e.high) and not (ratio and e.low <= 0):
                continue
            why = e.note or (f"{e.undefined_resamples} resamples undefined" if e.undefined_resamples else "no finite limit")
            out.append(f"{n}: {why}")
        return tuple(out)

    @property
    def percentile_fallback(self) -> tuple[str, ...]:
        """Old form of :attr:`interval_fallback`: the metrics' names only."""
        return tuple(f.split(":", 1)[0] for f in self.interval_fallback)

    @property
    def influence_top_share(self) -> float:
        """The largest share one item has of the cell's output-token sum, relaxed or baseline."""
        inf = self.influence.get("lambda")
        return _NAN if inf is None else inf.top_share

    @property
    def influential(self) -> bool:
        """One item carries most of a sum of λ, R/R* or T/T*, or one of them has an interval excluding 1 that
        leaving out a single item would put on the other side of 1 (the conclusion rests on that item)."""
        def excludes_one(m: str) -> bool:
            e = self.estimates.get(m)
            return e is not None and bool(e.low > 1.0 or e.high < 1.0)

        return any(inf.dominated or (inf.loo_crosses_one and excludes_one(m)) for m, inf in self.influence.items())

    def to_row(self) -> dict[str, Any]:
        """Flat columns as in cells.csv: metric, metric_lo, metric_hi (interval stems from the registry)."""
        reg = metrics.registry()
        row: dict[str, Any] = {**self.key, "alpha": self.alpha, "n_items": self.n_items, "n_runs": self.n_runs,
                               "n_graded": self.n_graded}
        for m in reg.metrics:
            est = self.estimates.get(m.name)
            if est is None:
                continue
            row[m.name] = est.point
            if m.interval is not None:
                row[f"{m.stem}_lo"], row[f"{m.stem}_hi"] = est.low, est.high
        acc = self.accuracy.columns()
        row.update({
            **{k: acc[k] for k in ("drop_2pp", "drop_2pp_p", "drop_2pp_point", "accuracy_mdd_pp", "wrong_to_right",
                                   "right_to_wrong", "accuracy_p", "accuracy_test", "accuracy_p_exact")},
            "accuracy_p_smallest": self.accuracy_p_smallest,
            "in_accuracy_family": self.in_accuracy_family,
            "budget": self.budget, "n_items_baseline": self.n_items_baseline,
            "coverage": self.coverage, "complete": self.complete,
            "unavailable": _unavailable_note(self.unavailable) or None, "small_n": self.small_n,
            "undefined_resamples": self.undefined_resamples,
            "interval_fallback": "; ".join(self.interval_fallback) or None,
            "unbounded": "; ".join(self.unbounded) or None,
            "percentile_fallback": ",".join(self.percentile_fallback) or None,
            "influence_top_share": self.influence_top_share,
            "n_graded_items": self.n_graded_items, "graded_partial": self.graded_partial,
            "accuracy_p_holm": acc["accuracy_p_holm"], "accuracy_q_bh": acc["accuracy_q_bh"],
        })
        for m in reg.influence_metrics:
            inf = self.influence.get(m)
            for part in ("item_min", "item_max", "loo_lo", "loo_hi"):
                row[f"{m}_{part}"] = _NAN if inf is None else getattr(inf, part)
            if m != "lambda":
                row[f"{m}_top_share"] = _NAN if inf is None else inf.top_share
        row["influential"] = self.influential
        for old, new in DEPRECATED_COLUMNS.items():
            row[old] = row[new]
        return row

    def items_frame(self) -> pd.DataFrame:
        """The per-item view: one row per item with its totals, and for λ, R/R* and T/T* its ratio, its share of
        each sum and the cell's ratio without it (largest share first)."""
        rows: dict[str, Any] = {"item_id": list(self.items)}
        first = None
        for m, (x, y) in metrics.registry().influence_metrics.items():
            if m not in self.influence or x not in self.item_totals:
                continue
            a, b = self.item_totals[x], self.item_totals[y]
            with np.errstate(all="ignore"):
                rows.update({x: a, y: b, f"{m}_item": a / b, f"{x}_share": a / a.sum(), f"{y}_share": b / b.sum(),
                             f"{m}_without": (a.sum() - a) / (b.sum() - b)})
            first = first or x
        df = frame(rows)
        if first is not None:
            df = df.sort_values(f"{first}_share", ascending=False, kind="stable").reset_index(drop=True)
        return df

    def to_frame(self) -> pd.DataFrame:
        """One row per metric: the cell's key (target and draft first), estimate, low, high, standard error, interval method."""
        key = self.key
        return frame([{**key, "metric": k, "estimate": e.point, "low": e.low, "high": e.high,
                       "standard_error": e.standard_error, "interval_method": e.method} for k, e in self.estimates.items()])

    def _repr_html_(self) -> str:
        title = (f"target {self.target} ← draft {self.draft or '(none)'} / {self.dataset}: {self.method} {self.params} "
                 f"(n = {self.n_items} items, {self.n_runs} runs)")
        return frame_html(self.to_frame().drop(columns=list(self.key)), title)


def _unavailable_note(reasons: Mapping[str, str]) -> str:
    """One line for cells.csv: the empty metrics grouped by their reason ("" when all are computed)."""
    by_reason: dict[str, list[str]] = {}
    for metric, why in reasons.items():
        by_reason.setdefault(why, []).append(metric)
    return " | ".join(f"{', '.join(ms)}: {why}" for why, ms in by_reason.items())


@dataclass(frozen=True)
class CellTable:
    """All cells of a run set with the settings that produced their intervals.

    ``replicates`` keeps, per metric named in :attr:`CellsAnalysis.keep`, its bootstrap replicates
    (n_resamples, n_cells), columns in cell order, for summaries over cells (Table 3's mean
    accuracy change, whose interval resamples items within each cell's group).
    """

    cells: tuple[Cell, ...]
    settings: Settings
    replicates: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_resamples(self) -> int:
        return self.settings.n_resamples

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def ci_method(self) -> str:
        return self.settings.ci

    @property
    def confidence_level(self) -> float:
        return self.settings.confidence_level

    def __len__(self) -> int:
        return len(self.cells)

    def __iter__(self) -> Iterator[Cell]:
        return iter(self.cells)

    def get(self, **keys: Any) -> Cell:
        """The single cell matching the given key fields, e.g. ``get(dataset='gsm8k', method='cactus', params='alpha0.35')``."""
        hits = [c for c in self.cells if all(getattr(c, k) == v for k, v in keys.items())]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} cells match {keys}")
        return hits[0]

    def to_frame(self) -> pd.DataFrame:
        """One row per cell, the columns of cells.csv (with the verdicts of :mod:`lengthlens.analyses.verdicts`)."""
        from lengthlens.analyses.verdicts import with_verdicts

        # The cells do not change: the frame is made once per registry in use (its metrics are the columns), and each
        # caller gets a copy of its own to change.
        reg = metrics.registry()
        made = self.__dict__.get("_frame")
        if made is None or made[0] is not reg:
            rows = [c.to_row() for c in self.cells] if self.cells else []
            made = (reg, with_verdicts(frame(rows, columns=None if rows else list(_empty_cell().to_row()))))
            object.__setattr__(self, "_frame", made)
        return made[1].copy()

    def _repr_html_(self) -> str:
        df = self.to_frame()
        cols = [c for c in ("target", "draft", "dataset", "method", "params", "n_items", "gain", "lambda", "lambda_lo",
                            "lambda_hi", "rounds_ratio", "time_ratio", "accuracy_delta_pp", "verdict_rounds", "verdict_time",
                            "verdict_accuracy") if c in df.columns]
        title = (f"{len(self)} cells; {self.ci_method} {self.confidence_level:.0%} intervals from "
                 f"{self.n_resamples} paired item resamples (seed {self.seed})")
        return frame_html(df[cols], title)


def _empty_cell() -> Cell:
    reg = metrics.registry()
    ests = {m.name: Estimate(_NAN, ConfidenceInterval(_NAN, _NAN) if m.interval else None) for m in reg.metrics}
    return Cell("", "", "", "", "", None, 0, 0, 0, 0, 0, None, ests)


# ------------------------------------------------------------------------------------------------
# The analysis on the engine
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _CellData:
    """What :meth:`CellsAnalysis.finish` needs of a cell besides its resampled sums."""

    item_sums: dict[str, np.ndarray]
    missing: dict[str, int]
    budget: float


@dataclass(frozen=True)
class CellsAnalysis:
    """Every metric of the registry per cell, with the paired accuracy test and the drop flags.

    ``keep``: metrics whose replicates the cell table keeps for summaries over cells.
    """

    keep: tuple[str, ...] = ("accuracy_delta_pp",)

    @property
    def fields(self) -> tuple[str, ...]:
        return (*metrics.registry().fields_read(), "max_new_tokens")

    def plan(self, cell: CellRuns, settings: Settings) -> Plan:
        reg = metrics.registry()
        per_run = reg.quantities_of(cell.fields, cell.n_runs)
        item_sums = {q: cell.by_item(v) for q, v in per_run.items()}
        interval = {m.name: m for m in reg.metrics if m.interval is not None}
        resampled = tuple(dict.fromkeys(q for name in interval for q in reg.sums_of(name)))
        missing = {f: int(np.sum(_missing(cell, f))) for f in reg.inputs}
        budget = cell.fields.get("max_new_tokens")
        known = budget[~np.isnan(budget)] if budget is not None else np.empty(0)
        data = _CellData(item_sums, missing, float(known.max()) if known.size else _NAN)
        return Plan(cell, {q: item_sums[q] for q in resampled}, interval, data)

    def finish(self, results: list[CellResult], settings: Settings) -> list[tuple[Cell, dict[str, np.ndarray]]]:
        return [(self._cell(r, settings), {m: np.asarray(r.replicates[m]) for m in self.keep}) for r in results]

    def collect(self, rows: list[tuple[Cell, dict[str, np.ndarray]]], settings: Settings) -> CellTable:
        cells_ = _adjust_across_cells([c for c, _ in rows])
        reps = {m: (np.stack([r[m] for _, r in rows], axis=1) if rows else np.empty((settings.n_resamples, 0)))
                for m in self.keep}
        return CellTable(cells=cells_, settings=settings, replicates=reps)

    def _cell(self, r: CellResult, settings: Settings) -> Cell:
        reg = metrics.registry()
        cell, data = r.cell, r.plan.data
        why = reg.unavailable(data.missing, cell.n_runs)
        point = reg.evaluate({q: v.sum() for q, v in data.item_sums.items()})
        point.update(reg.evaluate_items(data.item_sums, [m for m in reg.item_metrics if m not in why]))
        ests: dict[str, Estimate] = {}
        for m in reg.metrics:
            if m.name in why:
                ests[m.name] = Estimate(_NAN, ConfidenceInterval(_NAN, _NAN) if m.interval else None, note=why[m.name])
            elif m.interval is not None:
                ests[m.name] = r.estimates[m.name]
            else:
                ests[m.name] = Estimate(float(point[m.name]))
        s = data.item_sums
        n_graded = int(s["n_graded"].sum())
        n_graded_items = int(np.sum(s["n_graded"] > 0))
        graded = bool(n_graded)
        partial = graded and is_partly_graded(n_graded_items, cell.n_items)
        delta = ests["accuracy_delta_pp"]
        test = paired_accuracy_test(s["n_graded"], s["c"], s["c_star"]) if graded else None
        exact = paired_accuracy_test(s["n_graded"], s["c"], s["c_star"], mid_p=False) if graded else None
        flagged = graded and not partial
        loss = accuracy_loss_test(s["n_graded"], s["c"], s["c_star"]) if flagged else None
        key = cell.key
        budget = None if not np.isfinite(data.budget) else int(data.budget)
        return Cell(
            target=key["target"], draft=key["draft"], dataset=key["dataset"], method=key["method"], params=key["params"],
            alpha=key["alpha"], n_items=cell.n_items, n_runs=cell.n_runs, n_graded=n_graded,
            n_graded_items=n_graded_items, n_items_baseline=cell.n_items_group, budget=budget, estimates=ests,
            unavailable=why,
            accuracy=AccuracyChange(
                test=test, test_exact=exact, loss_test=loss,
                mdd_pp=accuracy_mdd_pp(s["n_graded"], s["c"], s["c_star"]) if graded else _NAN,
                wrong_to_right=int(s["w2r"].sum()) if graded else None,
                right_to_wrong=int(s["r2w"].sum()) if graded else None,
                drop_2pp=bool(loss.pvalue < ALPHA_ONE_SIDED) if loss is not None else None,
                drop_2pp_point=drop_2pp_point(delta.point) if flagged else None),
            influence={m: ratio_influence(s[x], s[y]) for m, (x, y) in reg.influence_metrics.items() if m not in why},
            items=cell.items, item_totals={**{q: s[q] for m, pair in reg.influence_metrics.items() if m not in why
                                              for q in pair},
                                           **({q: s[q] for q in ACCURACY_ITEM_SUMS} if graded else {})},
            serving=key.get("serving") or "",
        )


def _missing(cell: CellRuns, f: str) -> np.ndarray:
    """Runs where field ``f`` is not logged on either side (a field the runs never have counts as missing)."""
    a, b = cell.fields.get(f), cell.fields.get(f"{f}_star")
    if a is None or b is None:
        return np.ones(cell.n_runs, dtype=bool)
    return np.isnan(a) | np.isnan(b)


def _adjust_across_cells(cells_: list[Cell]) -> tuple[Cell, ...]:
    """Holm (family-wise) and Benjamini–Hochberg (false discovery rate) adjusted mid-p values over the accuracy family."""
    p = np.array([c.accuracy_p if c.in_accuracy_family and c.accuracy_p is not None else _NAN for c in cells_], dtype=float)
    p_holm, q_bh = holm(p), benjamini_hochberg(p)
    return tuple(replace(c, accuracy=replace(c.accuracy, p_holm=None if np.isnan(p_holm[i]) else float(p_holm[i]),
                                             q_bh=None if np.isnan(q_bh[i]) else float(q_bh[i])))
                 for i, c in enumerate(cells_))


@dataclass(frozen=True)
class AccuracyFamily:
    """The family the accuracy tests are adjusted over, and whether any of its cells could reach significance.

    ``n_cells``: cells in the family (graded, not partly graded, ≥ 10 items). ``smallest_adjusted_p``: the
    smallest Holm- (and Benjamini–Hochberg-) adjusted p any cell could get, m · min(smallest attainable p):
    with few items per cell and many cells it can stay above ``SIGNIFICANCE``, and then "none significant"
    says nothing about the rules. ``n_significant``: cells with Holm p < ``SIGNIFICANCE``.
    """

    n_cells: int
    smallest_adjusted_p: float
    n_significant: int

    @property
    def can_reject(self) -> bool:
        return bool(self.n_cells) and self.smallest_adjusted_p < SIGNIFICANCE


def accuracy_family(cells_: CellTable | Iterable[Cell] | pd.DataFrame) -> AccuracyFamily:
    """The accuracy family of a cell table (or of cells.csv's frame): its size, the smallest adjusted p it allows.

    Examples
    --------
    >>> accuracy_family([]).can_reject
    False
    """
    if hasattr(cells_, "columns"):  # a DataFrame with cells.csv's columns
        df = cells_
        fam = df[df["in_accuracy_family"].fillna(False).astype(bool)] if len(df) else df
        smallest = fam["accuracy_p_smallest"].astype(float).to_numpy() if len(fam) else np.empty(0)
        holm_p = fam["accuracy_p_holm"].astype(float).to_numpy() if len(fam) else np.empty(0)
    else:
        fam_cells = [c for c in cells_ if c.in_accuracy_family]
        smallest = np.array([c.accuracy_p_smallest for c in fam_cells], dtype=float)
        holm_p = np.array([_NAN if c.accuracy_p_holm is None else c.accuracy_p_holm for c in fam_cells], dtype=float)
    m = int(smallest.size)
    return AccuracyFamily(m, float(min(1.0, m * smallest.min())) if m else _NAN,
                          int(np.sum(holm_p < SIGNIFICANCE)))


def family_can_reject(cells_: CellTable | Iterable[Cell] | pd.DataFrame) -> bool:
    """Whether any cell of the accuracy family could reach Holm p < 0.05 at its size (see :class:`AccuracyFamily`)."""
    return accuracy_family(cells_).can_reject


def cells(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
          ci: Literal["studentized", "percentile", "bca"] = "studentized",
          confidence_level: float = DEFAULT_CONFIDENCE, workers: int = 1, keep_replicates: bool = False) -> CellTable:
    """Every cell (relaxed arm × its baseline on shared items) with item-level paired bootstrap intervals.

    Parameters
    ----------
    runs : loaded runs (:func:`lengthlens.load`).
    n_resamples : bootstrap resamples per group (the same draws serve every arm of the group).
    seed : with the group's names, fixes the draws: same seed, same numbers, bit for bit.
    ci : ``studentized`` (default: each metric's declared interval, as docs/outputs.md lists them:
        bootstrap-t on the log scale with the delta-method SE for the ratios, Tango's score interval for
        the accuracy change, a t interval over items where an item has several graded seeds),
        ``percentile``, or ``bca`` (bias-corrected and accelerated, jackknife over items), for every metric.
    confidence_level : the intervals' level.
    workers : worker processes for large inputs (the numbers do not depend on it).
    keep_replicates : keep each interval's bootstrap distribution (:attr:`Estimate.replicates`, n_resamples values).

    Returns
    -------
    CellTable
        One :class:`Cell` per relaxed arm; ``.to_frame()`` gives cells.csv.

    Examples
    --------
    >>> import lengthlens as ll
    >>> runs = ll.load(ll.synth.example_path())                 # doctest: +SKIP
    >>> ll.cells(runs).get(dataset="gsm8k", method="cactus", params="alpha0.35")["lambda"]   # doctest: +SKIP
    """
    settings = Settings(n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level,
                        keep_replicates=keep_replicates)
    (table,) = run_on(runs, [CellsAnalysis()], settings, workers=workers)
    return table


# ------------------------------------------------------------------------------------------------
# The report's cell table (declared outputs, :mod:`lengthlens.analyses.outputs`)
# ------------------------------------------------------------------------------------------------

def _cell_columns() -> tuple[Column, ...]:
    """cells.csv's columns: every metric of the registry in use, then the columns of :data:`CELL_COLUMNS`."""
    return (*(Column(m.name, m.description, label=m.label if m.table else None, fmt=m.fmt, interval=m.interval is not None,
                     stem=m.stem, better=m.better, reference=m.reference) for m in metrics.registry().metrics),
            *(Column(name, text) for name, text in CELL_COLUMNS.items()))


def unavailable_notes(cells_df: pd.DataFrame) -> list[str]:
    """One note per distinct reason why metrics were left empty, with how many cells it concerns."""
    if cells_df.empty or "unavailable" not in cells_df.columns:
        return []
    reasons = cells_df["unavailable"].fillna("")
    reasons = reasons[reasons != ""].str.replace(r" on \d+ of \d+ paired runs", "", regex=True)
    return [f"not computed in {n} of {len(cells_df)} cells (inputs missing from the logs): {why}"
            for why, n in reasons.value_counts(sort=False).items()]


def _graded(tables: Mapping[str, pd.DataFrame]) -> bool:
    """Whether any cell is graded (the accuracy figures have something to draw)."""
    cells_df = tables.get("cells")
    return cells_df is not None and not cells_df.empty and bool((cells_df["n_graded"] > 0).any())


class CellsReport(ReportAnalysis):
    """cells.csv: :class:`CellsAnalysis` in the report's one resampling pass, its table and its notes."""

    name = "cells"
    stage = "arms and Table 3"
    reads = ("correct",)
    outputs = Outputs(
        tables=(Table("cells", "cell: a relaxed arm against its baseline on their shared (item, seed, turn) units",
                      _cell_columns),),
        sections=(Section("illusion", "The length illusion at a glance", order=30, tables=(), landscape=False),
                  Section("cells", "Cells", order=40)),
        figures=(Figure("gain_vs_lambda", section="illusion", needs=("gain", "lambda"), cost=1.5),
                 Figure("lambda_forest", per="dataset", cost=0.25),
                 Figure("rounds_vs_time", needs=("rounds_ratio", "time_ratio")),
                 Figure("accuracy_vs_gain", needs=("gain", "accuracy_delta_pp"), when=_graded),
                 Figure("tradeoff", needs=("rounds_ratio", "time_ratio", "accuracy_delta_pp"), when=_graded, wide=True, cost=2),
                 Figure("alpha_sweep", needs=("lambda", "alpha"), wide=True, cost=4)))

    def resampled(self, ctx: Context) -> tuple[CellsAnalysis]:
        return (CellsAnalysis(),)

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        (table,) = ctx.resampled[self.name]
        ctx.results["cells"] = table
        df = table.to_frame()
        ctx.notes.extend(unavailable_notes(df))
        return {"cells": df}
