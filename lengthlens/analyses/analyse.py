"""Everything a report shows, computed once from a RunSet: cells, arms, Table 3 and the further analyses."""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl

from lengthlens.analyses.attribution import channel_units
from lengthlens.analyses.censoring import DEFAULT_AFT_RESAMPLES
from lengthlens.analyses.censoring_table import censoring_table  # noqa: F401 (re-exported: its home before the split)
from lengthlens.analyses.group_pass import GroupPass, group_pass
from lengthlens.data.runset import RunSet
from lengthlens.data.pairing import cell_units
from lengthlens.data.schema import ARM_KEY, UNIT_KEY
from lengthlens.stats.paired_test import accuracy_test_label
from lengthlens.stats.resample import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, DEFAULT_SEED
from lengthlens.stats.results import CellTable, frame_html

if TYPE_CHECKING:
    import pandas as pd

#: What :func:`analyse` needs after its pass over the groups (pandas and the tables' modules, ~0.5 s to import):
#: imported while the pass's workers compute, not before it starts.
_AFTER_PASS = ("pandas", "lengthlens.analyses.tables", "lengthlens.analyses.methods", "lengthlens.analyses.intervention")


def _lossless_headline(a: Any) -> str:
    """The headline for lossless speculative methods against their baseline."""
    def f(name: str, spec: str = ".2f") -> str:
        return format(a[name], spec) if np.isfinite(a[name]) else "not computed"

    return (f"Across {int(a['n_cells'])} cells of lossless speculative methods the mean per-round gain was "
            f"{f('gain_mean')}, verifier rounds changed by {f('rounds_ratio_mean')}x and wall time by "
            f"{f('time_ratio_mean')}x; the mean length ratio was {f('lambda_mean', '.3f')}, where exactly 1 is what "
            f"losslessness promises (see 'Lossless methods: a check')")


def _headline_sentence(a: Any, which: str) -> str:
    """The headline from Table 3's "all" row, in words that fit the numbers (metrics not computed are named)."""
    def ok(name: str) -> bool:
        return bool(np.isfinite(a.get(name, np.nan)))

    lam, n = a["lambda_mean"], int(a["n_cells"])
    if n == 0:
        return f"No cell enters Table 3 ({which})"
    if ok("gain_mean") and ok("lambda_mean"):
        head = f"Across {n} cells ({which}) the mean per-round gain was {a['gain_mean']:.2f}, "
        head += (f"but completions grew by a mean length ratio of {lam:.2f}" if lam > 1
                 else f"and the mean length ratio was {lam:.2f}")
    elif ok("lambda_mean"):
        head = f"Across {n} cells ({which}) the mean length ratio was {lam:.2f} (no draft counters logged: gain not computed)"
    else:
        return f"Across {n} cells ({which}) no length ratio could be computed (output_tokens not logged)"
    if ok("rounds_ratio_mean"):
        head += (f", so measured verifier rounds R/R* (the primary cost measure) changed by {a['rounds_ratio_mean']:.2f}x "
                 f"(median {a['rounds_ratio_median']:.2f})")
    if ok("time_ratio_mean"):
        per_round = (f"; per round {a['time_per_round_ratio_mean']:.2f}x" if ok("time_per_round_ratio_mean") else "")
        head += (f"; wall time T/T* by {a['time_ratio_mean']:.2f}x (median {a['time_ratio_median']:.2f}"
                 f"{per_round})")
    return head


@dataclass(frozen=True)
class Analysis:
    """The results behind one report; ``tables`` maps an output name (``cells``, ``arms``, ...) to its DataFrame."""

    runs: RunSet
    cells: CellTable
    tables: dict[str, pd.DataFrame]
    settings: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: Seconds per stage of :func:`analyse` (cells, arms and Table 3, censoring, attribution, Table 4, extra tokens).
    timings: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def headline(self) -> str:
        """One sentence: what acceptance length promised against what happened (Table 3's cells)."""
        t3 = self.tables["table3"]
        if t3.empty:
            return "No cells: no relaxed arm could be paired with a strict baseline."
        a = t3[t3["method"] == "all"].iloc[0]
        which = ("each rule at its most aggressive alpha per dataset, the largest run on ≥ 95 % of the baseline items"
                 if self.settings.get("alphas", "loosest") == "loosest" else "every alpha")
        n_small = int(a.get("n_small_excluded", 0) or 0)
        which += (f"; {n_small} cell{'s' if n_small != 1 else ''} with fewer than 10 items left out" if n_small else "")
        from lengthlens.analyses.methods import LOSSLESS_METHODS

        methods = set(t3["method"]) - {"all"}
        if methods and methods <= LOSSLESS_METHODS:
            # Lossless methods: a length ratio away from 1 is a failed check, not inflation.
            return _lossless_headline(a) + self._accuracy_clause(a) + "."
        return _headline_sentence(a, which) + self._accuracy_clause(a) + "."

    @staticmethod
    def _accuracy_clause(a: pd.Series) -> str:
        graded = int(a["n_graded"])
        if not graded:
            return ""
        ci = (f" [{a['accuracy_delta_pp_mean_lo']:.1f}, {a['accuracy_delta_pp_mean_hi']:.1f}]"
              if np.isfinite(a.get("accuracy_delta_pp_mean_lo", np.nan)) else "")
        return (f"; accuracy changed by {a['accuracy_delta_pp_mean']:.1f} points on average{ci}: "
                f"{int(a['n_drop_2pp'])} of {graded} graded cells lost ≥ 2 points by the interval rule (upper limit ≤ −2), "
                f"{int(a['n_drop_2pp_point'])} by the point rule of the study, {int(a['n_drop_holm'])} significant "
                f"after a Holm correction")

    def summary_lines(self) -> list[str]:
        """Terminal lines for the analyses beyond Table 3: censoring, attribution, Table 4, extra tokens."""
        lines: list[str] = []
        cz = self.tables.get("censoring")
        if cz is not None and not cz.empty:
            more = (cz["censored_frac"] > cz["censored_frac_star"]).sum()
            aft = cz["lambda_aft_lognormal"]
            lines.append(f"censoring: {int((cz['censored_frac'] > 0).sum())} of {len(cz)} cells have relaxed runs cut at the budget "
                         f"({int(more)} more often than strict); median lambda {cz['lambda_plain'].median():.2f} plain vs "
                         f"{aft.median():.2f} log-normal AFT (censoring-aware)")
        at = self.tables.get("attribution_summary")
        if at is not None and not at.empty:
            for scope, label in (("all", "all cells"), ("table3", "Table 3's cells")):
                rows = at[(at["scope"] == scope) & (at["method"] == "all")]
                if rows.empty:
                    continue
                a = rows.iloc[0]
                lines.append(f"attribution ({label}): of {int(a['n_cells_longer'])} cells with longer outputs, "
                             f"{int(a['n_share_undefined'])} have an extra length whose interval includes 0 (share undefined); "
                             f"{int(a['n_share_lo_ge_90'])} put ≥ 90 % of the extra characters into thinking by the lower "
                             f"limit ({int(a['n_share_point_ge_90'])} by the point estimate; pooled share "
                             f"{a['thinking_share_pooled']:.2f})")
        t4 = self.tables.get("table4")
        if t4 is not None and not t4.empty:
            r = t4.iloc[-1]
            lines.append(f"table 4: forcing the thinking closed fired on {int(r['fired'])} runs; correct {int(r['correct_before'])} -> "
                         f"{int(r['correct_after'])} of {int(r['n_graded'])} graded ({int(r['wrong_to_right'])} wrong->right, "
                         f"{int(r['right_to_wrong'])} right->wrong, {int(r['still_capped'])} still capped; "
                         f"{accuracy_test_label(r.get('accuracy_test', 'mcnemar_exact'))} p = "
                         f"{r['mcnemar_p']:.3g})")
        ex = self.tables.get("extra_tokens")
        if ex is not None and not ex.empty:
            withp = ex[ex["n_runs_with_proposals"] > 0]
            if len(withp):
                lines.append(f"extra tokens: in {len(withp)} cells with proposals, {withp['n_lossy_only'].sum():,} tokens were accepted only "
                             f"because of the relaxation ({withp['n_lossy_only'].sum() / max(1, withp['n_accepted'].sum()):.1%} of accepted); "
                             f"median target p {withp['p_lossy_only_median'].median():.3f} vs {withp['p_strict_accepted_median'].median():.3f} "
                             f"for tokens the lossless test accepts too")
        lo = self.tables.get("lossless")
        if lo is not None and not lo.empty:
            out = int(((lo["lambda_lo"] > 1) | (lo["lambda_hi"] < 1)).sum())
            lines.append(f"lossless check: outputs differ from the baseline on {int(lo['n_outputs_differ'].sum())} of "
                         f"{int(lo['n_runs'].sum())} paired runs of lossless methods; λ's interval excludes 1 in {out} of "
                         f"{len(lo)} cells (lossless.csv)")
        for n in self.notes:
            lines.append(f"note: {n}")
        return lines

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(self.headline())}</p>" + frame_html(self.tables["table3"], "Table 3")


def analyse(runs: RunSet, *, n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED,
            ci: Literal["studentized", "percentile", "bca"] = "studentized", confidence_level: float = DEFAULT_CONFIDENCE,
            alphas: Literal["loosest", "all"] = "loosest", n_resamples_aft: int = DEFAULT_AFT_RESAMPLES,
            proposals: bool = True, aft_ci: Literal["sandwich", "bootstrap"] = "sandwich",
            include_small: bool = False, progress: Callable[[str], None] | None = None,
            workers: int | None = None, processes: bool = False, meanwhile: Callable[[], None] | None = None) -> Analysis:
    """Compute every table of the report from loaded runs (nothing is written or printed).

    Parameters
    ----------
    ci : cell intervals: ``studentized`` (default), ``percentile`` or ``bca`` (see :func:`lengthlens.cells`).
    aft_ci : AFT intervals: ``sandwich`` (cluster-robust by item, default) or ``bootstrap`` (refits).
    n_resamples_aft : resamples for the AFT bootstrap intervals (each one a likelihood fit; only with ``aft_ci="bootstrap"``).
    include_small : keep cells with fewer than 10 items (``small_n``) in Table 3 and the headline.
    proposals : aggregate proposals.jsonl (tokens accepted only because of the relaxation) where present.
    progress : called with each stage's name as it starts (the command line prints them); ``Analysis.timings`` keeps their seconds.
    workers : groups computed at once (default: the cores available; ``LENGTHLENS_WORKERS`` sets it), on threads,
        or in worker processes with ``processes`` (faster on several cores; what the command line uses; a script
        calling it must be importable without side effects, as for any multiprocessing). The numbers do not depend on either.
    meanwhile : called once in this thread while the cells, censoring and attribution are computed (other work that can
        overlap them, e.g. the command line imports what writing the report needs).
    """
    stage = _Stages(progress)
    stage("cells, censoring, attribution")
    channels = channel_units(runs)  # the runs paired once, for every analysis below
    early: dict[str, Any] = {}
    done = group_pass(runs, channels, n_resamples=n_resamples, seed=seed, ci=ci, confidence_level=confidence_level,
                      n_resamples_aft=n_resamples_aft, aft_ci=aft_ci, workers=workers, processes=processes,
                      meanwhile=_while_the_pass_runs(runs, early, meanwhile))
    tables, notes = _tables(runs, done, stage, alphas=alphas, include_small=include_small, arms_df=early["arms"])
    _further_tables(runs, tables["cells"], channels[0], tables, stage, proposals=proposals, n_resamples=n_resamples,
                    seed=seed, confidence_level=confidence_level)
    settings = {"n_resamples": n_resamples, "seed": seed, "ci": ci, "confidence_level": confidence_level, "alphas": alphas,
                "aft_ci": aft_ci, "n_resamples_aft": min(n_resamples_aft, n_resamples) if aft_ci == "bootstrap" else 0,
                "include_small": include_small}
    stage.stop()
    return Analysis(runs=runs, cells=done.cells, tables=tables, settings=settings, notes=tuple(notes), timings=stage.times)


def _while_the_pass_runs(runs: RunSet, early: dict[str, Any], meanwhile: Callable[[], None] | None) -> Callable[[], None]:
    """The pass's ``meanwhile``: import what the tables after the pass need (:data:`_AFTER_PASS`), compute arms.csv
    (which needs no resampling) into ``early["arms"]``, then the caller's ``meanwhile``."""
    def run() -> None:
        import importlib

        for name in _AFTER_PASS:
            importlib.import_module(name)
        from lengthlens.analyses.tables import arms

        early["arms"] = arms(runs)
        if meanwhile is not None:
            meanwhile()

    return run


def _tables(runs: RunSet, done: GroupPass, stage: _Stages, *, alphas: str, include_small: bool,
            arms_df: pd.DataFrame) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The cell table's frame, arms (``arms_df``, computed while the pass ran), Table 3 and its alpha choice, skipped
    runs, censoring and attribution from the pass ``done``, and the notes they raise."""
    import pandas as pd

    from lengthlens.analyses.tables import alpha_selected, table3_cells
    from lengthlens.analyses.tables import table3 as compute_table3

    cells_df = done.cells.to_frame()
    stage("arms and Table 3")
    tables = {
        "cells": cells_df,
        "arms": arms_df,
        "table3": (compute_table3(done.cells, alphas=alphas, include_small=include_small) if not cells_df.empty
                   else pd.DataFrame()),
        "alpha_selected": alpha_selected(cells_df),
        "skipped": runs.skipped.to_pandas(),
    }
    notes: list[str] = _unavailable_notes(cells_df)
    if not cells_df.empty:
        tables["censoring"] = done.censoring(cells_df)
        attr = done.attribution(table3_cells(cells_df, alphas, include_small=include_small))
        tables["attribution"] = attr.cells
        tables["attribution_summary"] = attr.summary
        notes.extend(attr.disagreement_notes)  # one line per model, with the known cause
    return tables, notes


def _further_tables(runs: RunSet, cells_df: pd.DataFrame, units: pl.DataFrame, tables: dict[str, pd.DataFrame],
                    stage: _Stages, *, proposals: bool, n_resamples: int, seed: int, confidence_level: float) -> None:
    """The lossless check, method pairs, Table 4 and extra tokens, added to ``tables`` where they have rows."""
    from lengthlens.analyses.intervention import table4
    from lengthlens.analyses.methods import lossless_check, method_pairs

    stage("lossless check, method pairs")
    for name, df in (("lossless", lossless_check(runs, cells_df)),
                     ("methods", method_pairs(runs, n_resamples=n_resamples, seed=seed, confidence_level=confidence_level))):
        if not df.empty:
            tables[name] = df
    stage("Table 4")
    t4 = table4(runs)
    if not t4.empty:
        tables["table4"] = t4
    if proposals:
        stage("extra tokens")
        extra = extra_tokens_table(runs, units)
        if extra is not None:
            tables["extra_tokens"] = extra


class _Stages:
    """Names each stage of :func:`analyse` to ``progress`` as it starts and keeps its seconds."""

    def __init__(self, progress: Callable[[str], None] | None):
        self.say = progress or (lambda _stage: None)
        self.times: dict[str, float] = {}
        self._name: str | None = None
        self._t0 = 0.0

    def __call__(self, name: str) -> None:
        self.stop()
        self.say(name)
        self._name, self._t0 = name, time.perf_counter()

    def stop(self) -> None:
        if self._name is not None:
            self.times[self._name] = time.perf_counter() - self._t0
            self._name = None


def _unavailable_notes(cells_df: pd.DataFrame) -> list[str]:
    """One note per distinct reason why metrics were left empty, with how many cells it concerns."""
    if cells_df.empty or "unavailable" not in cells_df.columns:
        return []
    reasons = cells_df["unavailable"].fillna("")
    reasons = reasons[reasons != ""].str.replace(r" on \d+ of \d+ paired runs", "", regex=True)
    return [f"not computed in {n} of {len(cells_df)} cells (inputs missing from the logs): {why}"
            for why, n in reasons.value_counts(sort=False).items()]


def extra_tokens_table(runs: RunSet, units: pl.DataFrame | None = None) -> pd.DataFrame | None:
    """OUT/extra_tokens.csv: per cell, tokens accepted only because of the relaxation (None without proposals).

    ``units``: ``cell_units(runs.paired)`` when the caller has it already.
    """
    from lengthlens.analyses.extra_tokens import extra_token_stats

    # Token traces live in raw run folders; flat records ("file:line" sources) have none.
    def raw(col: str) -> pl.Expr:
        return ~pl.col(col).str.contains(r":\d+$").fill_null(True)

    paired = runs.paired.filter(raw("source"))
    if paired.is_empty():
        return None
    units = cell_units(paired) if units is None else units.filter(raw("source") & raw("source_star"))
    stats = extra_token_stats(paired, units=units.select(*ARM_KEY, *UNIT_KEY))
    if stats is None or stats.is_empty() or stats["n_runs_with_proposals"].sum() == 0:
        return None
    return stats.to_pandas()
