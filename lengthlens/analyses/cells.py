"""The cell table: every registry metric of every cell with its interval, the accuracy test and the drop flags.

A cell is a relaxed arm paired with its strict baseline on the (item, seed, turn) units where both
runs are ok; the item is the resampling unit. :class:`CellsAnalysis` is the analysis on the engine
(:mod:`lengthlens.analyses.engine`); :func:`cells` runs it on loaded runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lengthlens.analyses.engine import CellResult, CellRuns, Plan, Settings, run_on
from lengthlens.results import ConfidenceInterval, Estimate, TestResult, frame, frame_html
from lengthlens.stats import metrics
from lengthlens.stats.metrics import ACCURACY_DROP_PP, drop_2pp, drop_2pp_point
from lengthlens.stats.multiplicity import benjamini_hochberg, holm
from lengthlens.stats.paired_test import paired_accuracy_test
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED

if TYPE_CHECKING:
    import pandas as pd

    from lengthlens.data.runset import RunSet

__all__ = ["Cell", "CellTable", "CellsAnalysis", "SMALL_N_ITEMS", "cells", "is_partly_graded"]

#: Cells with fewer items than this are flagged ``small_n``: their intervals are unreliable (left out of
#: Table 3, the headline and the figures' interval bars unless asked for).
SMALL_N_ITEMS = 10

#: Old names of cells.csv columns, written beside the new ones for one release.
DEPRECATED_COLUMNS = {"mcnemar_p": "accuracy_p", "mcnemar_p_holm": "accuracy_p_holm", "mcnemar_q_bh": "accuracy_q_bh"}

#: What each of cells.csv's columns beside the metrics holds (the metrics' own come from the registry).
CELL_COLUMNS: dict[str, str] = {
    "target": "the target model", "draft": "the draft model (empty for plain autoregressive decoding)",
    "dataset": "the dataset (benchmark folder)", "method": "the relaxed rule or speculative method",
    "params": "its parameters as logged (e.g. alpha0.35)", "alpha": "the rule's alpha, parsed from params",
    "n_items": "items the cell covers (the resampling units)", "n_runs": "paired runs (item, seed, turn units)",
    "n_graded": "paired runs graded on both sides: the only ones accuracy uses",
    "drop_2pp": f"interval rule: the upper limit of the accuracy change is at most −{ACCURACY_DROP_PP:g} points "
                "(empty when ungraded or graded on fewer than half its items)",
    "drop_2pp_point": f"the study's point rule: the accuracy change itself is at most −{ACCURACY_DROP_PP:g} points",
    "wrong_to_right": "graded pairs wrong on the baseline and right on the relaxed arm",
    "right_to_wrong": "graded pairs right on the baseline and wrong on the relaxed arm",
    "accuracy_p": "the paired accuracy test's p-value (accuracy_test names the test)",
    "accuracy_test": "mcnemar_exact (one graded pair per item), or sign_flip_exact / sign_flip_monte_carlo "
                     "(the item-level sign-flip test, with several seeds)",
    "rounds_ratio_median_item": "median over items of the item's mean per-run R/R*",
    "time_ratio_median_item": "median over items of the item's mean per-run T/T*",
    "budget": "the relaxed runs' token budget (max_new_tokens)", "n_items_baseline": "items of the group's baseline",
    "unavailable": "metrics left empty and why (inputs not logged); empty when every metric is computed",
    "small_n": f"fewer than {SMALL_N_ITEMS} items: left out of Table 3, the headline and the figures' intervals",
    "undefined_resamples": "most resamples left out of any of the cell's intervals (an undefined value)",
    "percentile_fallback": "metrics whose studentized interval was unbounded and got the percentile interval",
    "n_graded_items": "items with at least one pair graded on both sides",
    "graded_partial": "graded on fewer than half its items: accuracy shown, kept out of the accuracy counts",
    "accuracy_p_holm": "accuracy_p adjusted by Holm over every graded cell of the report (family-wise)",
    "accuracy_q_bh": "accuracy_p adjusted by Benjamini–Hochberg over every graded cell (false discovery rate)",
    "verdict_rounds": "faster / slower / can't tell: R/R*'s interval wholly below 1, wholly above 1, or holding 1 "
                      "(not computed: no interval)",
    "verdict_time": "the same verdict from T/T*'s interval",
    "verdict_accuracy": "worse (the loss flag drop_2pp fires) / no detectable change (see accuracy_mdd_pp) / ungraded / "
                        "partly graded",
    "mcnemar_p": "old name of accuracy_p (kept for one release)",
    "mcnemar_p_holm": "old name of accuracy_p_holm (kept for one release)",
    "mcnemar_q_bh": "old name of accuracy_q_bh (kept for one release)",
}

_NAN = float("nan")


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
    inputs are not logged: ``unavailable`` says why). ``accuracy_test`` is the paired accuracy test
    (exact McNemar with one run per item, the item-level sign-flip test with several seeds), None
    when nothing is graded; ``accuracy_p_holm``/``accuracy_q_bh`` adjust its p-value over the report's
    graded cells. ``drop_2pp``: the interval rule (upper limit ≤ −2 points); ``drop_2pp_point``: the
    study's point rule; both None when the cell is ungraded or graded on fewer than half its items.
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
    accuracy_test: TestResult | None = None
    wrong_to_right: int | None = None
    right_to_wrong: int | None = None
    drop_2pp: bool | None = None
    drop_2pp_point: bool | None = None
    accuracy_p_holm: float | None = None
    accuracy_q_bh: float | None = None
    rounds_ratio_median_item: float = _NAN
    time_ratio_median_item: float = _NAN

    def __getitem__(self, metric: str) -> Estimate:
        return self.estimates[metric]

    @property
    def key(self) -> dict[str, Any]:
        return {"target": self.target, "draft": self.draft, "dataset": self.dataset, "method": self.method,
                "params": self.params}

    @property
    def small_n(self) -> bool:
        return self.n_items < SMALL_N_ITEMS

    @property
    def graded_partial(self) -> bool:
        return bool(self.n_graded) and is_partly_graded(self.n_graded_items, self.n_items)

    @property
    def accuracy_p(self) -> float | None:
        return None if self.accuracy_test is None else self.accuracy_test.pvalue

    @property
    def undefined_resamples(self) -> int:
        """Most resamples left out of any interval whose point estimate exists (an ungraded cell's accuracy change,
        undefined in every resample, does not count)."""
        return max((e.undefined_resamples for e in self.estimates.values()
                    if e.confidence_interval is not None and np.isfinite(e.point)), default=0)

    @property
    def percentile_fallback(self) -> tuple[str, ...]:
        """Metrics whose studentized interval was unbounded and got the percentile interval instead."""
        return tuple(n for n, e in self.estimates.items() if e.note and e.method == "percentile" and n not in self.unavailable)

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
        test = self.accuracy_test
        row.update({
            "drop_2pp": self.drop_2pp, "drop_2pp_point": self.drop_2pp_point,
            "wrong_to_right": self.wrong_to_right, "right_to_wrong": self.right_to_wrong,
            "accuracy_p": self.accuracy_p, "accuracy_test": None if test is None else test.method,
            "rounds_ratio_median_item": self.rounds_ratio_median_item, "time_ratio_median_item": self.time_ratio_median_item,
            "budget": self.budget, "n_items_baseline": self.n_items_baseline,
            "unavailable": _unavailable_note(self.unavailable) or None, "small_n": self.small_n,
            "undefined_resamples": self.undefined_resamples,
            "percentile_fallback": ",".join(self.percentile_fallback) or None,
            "n_graded_items": self.n_graded_items, "graded_partial": self.graded_partial,
            "accuracy_p_holm": self.accuracy_p_holm, "accuracy_q_bh": self.accuracy_q_bh,
        })
        for old, new in DEPRECATED_COLUMNS.items():
            row[old] = row[new]
        return row

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

        rows = [c.to_row() for c in self.cells] if self.cells else []
        return with_verdicts(frame(rows, columns=None if rows else list(_empty_cell().to_row())))

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
    ratios: dict[str, np.ndarray]


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
        ratios = {"rounds_ratio": _item_means(cell, cell.fields["draft_rounds"] / cell.fields["draft_rounds_star"]),
                  "time_ratio": _item_means(cell, cell.fields["wall_time_s"] / cell.fields["wall_time_s_star"])}
        known = budget[~np.isnan(budget)] if budget is not None else np.empty(0)
        data = _CellData(item_sums, missing, float(known.max()) if known.size else _NAN, ratios)
        return Plan(cell, {q: item_sums[q] for q in resampled}, interval, data)

    def finish(self, results: list[CellResult], settings: Settings) -> list[tuple[Cell, dict[str, np.ndarray]]]:
        return [(self._cell(r), {m: np.asarray(r.replicates[m]) for m in self.keep}) for r in results]

    def collect(self, rows: list[tuple[Cell, dict[str, np.ndarray]]], settings: Settings) -> CellTable:
        cells_ = _adjust_across_cells([c for c, _ in rows])
        reps = {m: (np.stack([r[m] for _, r in rows], axis=1) if rows else np.empty((settings.n_resamples, 0)))
                for m in self.keep}
        return CellTable(cells=cells_, settings=settings, replicates=reps)

    def _cell(self, r: CellResult) -> Cell:
        reg = metrics.registry()
        cell, data = r.cell, r.plan.data
        why = reg.unavailable(data.missing, cell.n_runs)
        point = reg.evaluate({q: v.sum() for q, v in data.item_sums.items()})
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
        key = cell.key
        budget = None if not np.isfinite(data.budget) else int(data.budget)
        return Cell(
            target=key["target"], draft=key["draft"], dataset=key["dataset"], method=key["method"], params=key["params"],
            alpha=key["alpha"], n_items=cell.n_items, n_runs=cell.n_runs, n_graded=n_graded,
            n_graded_items=n_graded_items, n_items_baseline=cell.n_items_group, budget=budget, estimates=ests,
            unavailable=why, accuracy_test=test,
            wrong_to_right=int(s["w2r"].sum()) if graded else None, right_to_wrong=int(s["r2w"].sum()) if graded else None,
            drop_2pp=drop_2pp(delta.high) if graded and not partial else None,
            drop_2pp_point=drop_2pp_point(delta.point) if graded and not partial else None,
            rounds_ratio_median_item=_NAN if "rounds_ratio" in why else data.ratios["rounds_ratio"],
            time_ratio_median_item=_NAN if "time_ratio" in why else data.ratios["time_ratio"],
        )


def _missing(cell: CellRuns, f: str) -> np.ndarray:
    """Runs where field ``f`` is not logged on either side (a field the runs never have counts as missing)."""
    a, b = cell.fields.get(f), cell.fields.get(f"{f}_star")
    if a is None or b is None:
        return np.ones(cell.n_runs, dtype=bool)
    return np.isnan(a) | np.isnan(b)


def _item_means(cell: CellRuns, per_run: np.ndarray) -> float:
    """The median over items of the mean of a per-run quantity over the item's runs (seeds): items count once each."""
    with np.errstate(all="ignore"):
        known = ~np.isnan(per_run)
        n = np.bincount(cell.item[known], minlength=cell.n_items)
        total = np.bincount(cell.item[known], weights=per_run[known], minlength=cell.n_items)
        means = total[n > 0] / n[n > 0]
    return float(np.median(means)) if means.size else _NAN


def _adjust_across_cells(cells_: list[Cell]) -> tuple[Cell, ...]:
    """Holm (family-wise) and Benjamini–Hochberg (false discovery rate) adjusted accuracy-test p-values over every graded cell."""
    p = np.array([_NAN if c.accuracy_p is None else c.accuracy_p for c in cells_], dtype=float)
    p_holm, q_bh = holm(p), benjamini_hochberg(p)
    return tuple(replace(c, accuracy_p_holm=None if np.isnan(p_holm[i]) else float(p_holm[i]),
                         accuracy_q_bh=None if np.isnan(q_bh[i]) else float(q_bh[i])) for i, c in enumerate(cells_))


def cells(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
          ci: Literal["studentized", "percentile", "bca"] = "studentized",
          confidence_level: float = DEFAULT_CONFIDENCE, workers: int = 1) -> CellTable:
    """Every cell (relaxed arm × its baseline on shared items) with item-level paired bootstrap intervals.

    Parameters
    ----------
    runs : loaded runs (:func:`lengthlens.load`).
    n_resamples : bootstrap resamples per group (the same draws serve every arm of the group).
    seed : with the group's names, fixes the draws: same seed, same numbers, bit for bit.
    ci : ``studentized`` (default: bootstrap-t on the log scale with the delta-method SE for ratio
        metrics; percentile for the accuracy change), ``percentile``, or ``bca`` (bias-corrected
        and accelerated, jackknife over items).
    confidence_level : the intervals' level.
    workers : worker processes for large inputs (the numbers do not depend on it).

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
    settings = Settings(n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level)
    (table,) = run_on(runs, [CellsAnalysis()], settings, workers=workers)
    return table
