"""What the report and the terminal say in words: the headline and the summary lines, from an Analysis.

Every number here comes from the analysis' tables, and every threshold a sentence states is read
from the constant that defines it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lengthlens.analyses.attribution import SHARE_THRESHOLDS
from lengthlens.analyses.cells import SMALL_N_ITEMS, AccuracyFamily, accuracy_family
from lengthlens.analyses.methods import LOSSLESS_METHODS
from lengthlens.analyses.tables import COMPLETE_SHARE
from lengthlens.stats.metrics import ACCURACY_DROP_PP
from lengthlens.stats.paired import ALPHA_ONE_SIDED
from lengthlens.stats.paired_test import accuracy_test_label

if TYPE_CHECKING:
    import pandas as pd

    from lengthlens.analyses.analyse import Analysis

__all__ = ["headline", "summary_lines", "time_caveats"]

#: Wall-time intervals resample items within the runs that were logged, on the machine as it was that day.
TIME_CONDITIONAL = ("Wall-time intervals (T/T*, time per round) are conditional on the session: they resample items "
                    "within the logged runs and leave out what differs between sessions or arms run at different times "
                    "(machine load, batching), which can move a ratio by more than its interval.")

#: Why time per round under-covers where per-round cost grows with the context (benchmarks/ratio_range.py).
TIME_PER_ROUND_BIAS = ("Time per round is a length-weighted mean of per-round cost; where that cost grows with the "
                       "context and lengths are heavy-tailed, a few dozen items rarely hold the long tail that sets it, "
                       "so its narrow interval lies below the truth more often than 2.5% of the time (one-sided; 58–87% "
                       "coverage in simulation at 12–120 items, whatever the bootstrap interval): read it as "
                       "descriptive of these items.")


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


def headline(analysis: Analysis) -> str:
    """One sentence: what acceptance length promised against what happened (Table 3's cells)."""
    t3 = analysis.tables["table3"]
    if t3.empty:
        return "No cells: no relaxed arm could be paired with a strict baseline."
    a = t3[t3["method"] == "all"].iloc[0]
    which = (f"each rule at its most aggressive alpha per dataset, the largest run on ≥ {COMPLETE_SHARE:.0%} of the "
             "baseline items" if analysis.settings.get("alphas", "loosest") == "loosest" else "every alpha")
    n_small = int(a.get("n_small_excluded", 0) or 0)
    which += (f"; {n_small} cell{'s' if n_small != 1 else ''} with fewer than {SMALL_N_ITEMS} items left out"
              if n_small else "")
    methods = set(t3["method"]) - {"all"}
    if methods and methods <= LOSSLESS_METHODS:
        # Lossless methods: a length ratio away from 1 is a failed check, not inflation.
        return _lossless_headline(a) + _accuracy_clause(a, accuracy_family(analysis.cells)) + "."
    return _headline_sentence(a, which) + _accuracy_clause(a, accuracy_family(analysis.cells)) + "."


def _accuracy_clause(a: pd.Series, family: AccuracyFamily | None = None) -> str:
    graded = int(a["n_graded"])
    if not graded:
        return ""
    ci = (f" [{a['accuracy_delta_pp_mean_lo']:.1f}, {a['accuracy_delta_pp_mean_hi']:.1f}]"
          if np.isfinite(a.get("accuracy_delta_pp_mean_lo", np.nan)) else "")
    mdd = float(a.get("accuracy_mdd_pp_median", np.nan))
    power = (f"; at the median cell it detects a true drop of {mdd:.0f} points with 80 % power" if np.isfinite(mdd)
             else "; at the median cell no drop is detected with 80 % power" if mdd == np.inf else "")
    return (f"; accuracy changed by {a['accuracy_delta_pp_mean']:.1f} points on average{ci}: "
            f"{int(a['n_drop_2pp'])} of {graded} graded cells lost more than {ACCURACY_DROP_PP:g} points by a one-sided "
            f"test at {ALPHA_ONE_SIDED:.1%}{power}, "
            f"{int(a['n_drop_2pp_point'])} by the point rule of the study; " + _family_clause(a, family))


def _family_clause(a: pd.Series, family: AccuracyFamily | None) -> str:
    """Holm's count, or that no cell of the family could reach significance at its size (then a count of 0 says nothing)."""
    if family is None:
        return f"{int(a['n_drop_holm'])} significant after a Holm correction"
    if not family.can_reject:
        return (f"none of the {family.n_cells} cells of the accuracy family could reach significance after a Holm "
                "correction at these sizes")
    return f"{int(a['n_drop_holm'])} significant after a Holm correction over {family.n_cells} cells"


def time_caveats(cells: pd.DataFrame) -> list[str]:
    """The report's sentences on what the wall-time intervals cover (none when no cell has wall times)."""
    if "time_ratio" not in cells or not np.isfinite(cells["time_ratio"].astype(float)).any():
        return []
    return [TIME_CONDITIONAL, TIME_PER_ROUND_BIAS]


def summary_lines(analysis: Analysis) -> list[str]:
    """Terminal lines for the analyses beyond Table 3: censoring, attribution, Table 4, extra tokens."""
    lines: list[str] = []
    cz = analysis.tables.get("censoring")
    if cz is not None and not cz.empty:
        more = (cz["censored_frac"] > cz["censored_frac_star"]).sum()
        aft = cz["gm_ratio_aft_lognormal"]
        lines.append(f"censoring: {int((cz['censored_frac'] > 0).sum())} of {len(cz)} cells have relaxed runs cut at the budget "
                     f"({int(more)} more often than strict); median lambda {cz['lambda_plain'].median():.2f} plain vs "
                     f"{aft.median():.2f} geometric-mean ratio of the log-normal AFT (censoring-aware; not a ratio of means)")
    at = analysis.tables.get("attribution_summary")
    if at is not None and not at.empty:
        for scope, label in (("all", "all cells"), ("table3", "Table 3's cells")):
            rows = at[(at["scope"] == scope) & (at["method"] == "all")]
            if rows.empty:
                continue
            a = rows.iloc[0]
            low = SHARE_THRESHOLDS[0]
            lo_col, point_col = f"n_share_lo_ge_{round(100 * low)}", f"n_share_point_ge_{round(100 * low)}"
            lines.append(f"attribution ({label}): of {int(a['n_cells_longer'])} cells with longer outputs, "
                         f"{int(a['n_share_undefined'])} have an extra length whose interval includes 0 (share undefined); "
                         f"{int(a[lo_col])} put ≥ {low:.0%} of the extra characters into thinking by the lower "
                         f"limit ({int(a[point_col])} by the point estimate; pooled share "
                         f"{a['thinking_share_pooled']:.2f})")
    t4 = analysis.tables.get("table4")
    if t4 is not None and not t4.empty:
        r = t4.iloc[-1]
        lines.append(f"table 4: forcing the thinking closed fired on {int(r['fired'])} runs; correct {int(r['correct_before'])} -> "
                     f"{int(r['correct_after'])} of {int(r['n_graded'])} graded ({int(r['wrong_to_right'])} wrong->right, "
                     f"{int(r['right_to_wrong'])} right->wrong, {int(r['still_capped'])} still capped; "
                     f"{accuracy_test_label(r.get('accuracy_test', 'mcnemar_exact'))} p = "
                     f"{r['accuracy_p']:.3g})")
    ex = analysis.tables.get("extra_tokens")
    if ex is not None and not ex.empty:
        withp = ex[ex["n_runs_with_proposals"] > 0]
        if len(withp):
            lines.append(f"extra tokens: in {len(withp)} cells with proposals, {withp['n_lossy_only'].sum():,} tokens were accepted only "
                         f"because of the relaxation ({withp['n_lossy_only'].sum() / max(1, withp['n_accepted'].sum()):.1%} of accepted); "
                         f"median target p {withp['p_lossy_only_median'].median():.3f} vs {withp['p_strict_accepted_median'].median():.3f} "
                         f"for tokens the lossless test accepts too")
    lo = analysis.tables.get("lossless")
    if lo is not None and not lo.empty:
        out = int(((lo["lambda_lo"] > 1) | (lo["lambda_hi"] < 1)).sum())
        lines.append(f"lossless check: outputs differ from the baseline on {int(lo['n_outputs_differ'].sum())} of "
                     f"{int(lo['n_runs'].sum())} paired runs of lossless methods; λ's interval excludes 1 in {out} of "
                     f"{len(lo)} cells (lossless.csv)")
    for n in analysis.notes:
        lines.append(f"note: {n}")
    return lines

