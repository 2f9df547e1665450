"""What the report and the terminal say in words: the headline and the summary lines, from an AnalysisResult.

Every number here comes from the analysis' tables, and every threshold a sentence states is read
from the constant that defines it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from lengthlens.analyses.attribution import SHARE_THRESHOLDS
from lengthlens.analyses.cells import SMALL_N_ITEMS, AccuracyFamily, accuracy_family
from lengthlens.analyses.methods import LOSSLESS_METHODS
from lengthlens.analyses.plan import MAX_DATASETS, MAX_ITEMS
from lengthlens.data.coverage import COMPLETE_SHARE
from lengthlens.stats.metrics import ACCURACY_DROP_PP
from lengthlens.stats.paired import ALPHA_ONE_SIDED
from lengthlens.stats.signflip import accuracy_test_label

if TYPE_CHECKING:
    import pandas as pd

    from lengthlens.analyses.analyse import AnalysisResult

__all__ = ["EXCLUDED_NOTE", "TABLE3_PAIRS_NOTE", "accuracy_verdict_text", "arms_note", "attribution_claim", "cards",
           "cells_note", "colour_legend",
           "decision_note", "grading_name", "grading_warning", "headline", "incomplete_warning", "methods",
           "plan_lines", "rule_verdict_line", "rule_verdict_lines", "serving_sentence", "ungraded_warning",
           "summary_lines", "table3_note",
           "time_caveats", "verdict_sentence", "verdict_sentences"]

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


#: What each grading policy is called in the headline and Table 3's caption.
GRADING_NAMES = {"default": "the default grading policy of lengthlens (answer part only; a run cut in its thinking is wrong)",
                 "study": "the grading policy of the study (--grading study: text after the last final marker, else all of it)"}


def grading_name(analysis: Any) -> str:
    """The grading policy the accuracies use, in words."""
    policy = getattr(analysis.runs, "grading", "default")
    return GRADING_NAMES.get(policy, f"grading policy {policy}")


def incomplete_warning(analysis: Any, most: int = 8) -> str | None:
    """A warning naming the cells whose arm covers fewer than 95 % of its baseline's items (not the method's full result)."""
    never = _not_run_sentence(analysis)
    cells = analysis.tables.get("cells")
    if cells is None or cells.empty or "complete" not in cells:
        return never
    bad = cells[~cells["complete"].astype(bool)]
    if bad.empty:
        return never
    # Cells large enough for Table 3 first: a probe of a few items is left out of it anyway.
    small = bad["small_n"].astype(bool) if "small_n" in bad else pd.Series(False, index=bad.index)
    big = bad[~small]
    named = [f"{r.method} {r.params} ({r.target} / {r.dataset}: {r.n_items} of {r.n_items_baseline} items)"
             for r in big.head(most).itertuples()]
    more = f"; and {len(big) - most} more" if len(big) > most else ""
    probes = (f"{int(small.sum())} of them have fewer than {SMALL_N_ITEMS} items (probes such as the study's calibration "
              "runs; left out of Table 3 and the headline)" if small.any() else "")
    listed = ("; ".join(named) + more) if named else ""
    return (f"{len(bad)} of {len(cells)} cells cover fewer than {COMPLETE_SHARE:.0%} of their baseline's items, so their "
            "numbers are not the method's on the whole benchmark" + (f": {listed}" if listed else "")
            + (f". {probes[0].upper() + probes[1:]}" if probes else "") + ". They are marked in cells.csv (complete), "
            "Table 3 (n_incomplete), the λ forest plots and the survival curves." + (f" {never}" if never else ""))


def _not_run_sentence(analysis: Any) -> str | None:
    """The datasets each method never reached though its target had a baseline there (no cell, coverage 0)."""
    runs = getattr(analysis, "runs", None)
    if runs is None:
        return None
    from lengthlens.data.coverage import not_run

    missing = not_run(runs)
    if not missing.height:
        return None
    parts = [f"{method} on {', '.join(part['dataset'].to_list())}"
             for (method,), part in missing.partition_by(["method"], as_dict=True, maintain_order=True).items()]
    return (f"Never run (no cell, coverage 0): {'; '.join(parts)}; the other cells of these methods are not their "
            "result on the whole benchmark.")


def grading_warning(analysis: Any) -> str | None:
    """A warning when the two grading policies disagree on more than a few percent of the runs graded under both."""
    from lengthlens.analyses.grading_policies import GRADING_DISAGREEMENT_SHARE

    g = getattr(analysis, "grading", None)
    if g is None or not g.warns:
        return None
    arms = g.arms.filter(g.arms["n_policy_disagree"] > 0)
    return (f"The grading policy moves accuracy: the {g.other} policy gives another verdict on {g.n_disagree:,} of the "
            f"{g.n_regraded:,} runs lengthlens' graders judged ({g.disagree_share:.0%}, above the "
            f"{GRADING_DISAGREEMENT_SHARE:.0%} this report tolerates silently), in {arms.height} arms; the arms appendix shows "
            f"each arm's accuracy under both ({g.policy} used here; --grading {g.other} for the other).")


def ungraded_warning(analysis: Any) -> str | None:
    """How many ok runs of benchmarks lengthlens grades were left ungraded, why, and the flag that grades them; None
    when every such run has a verdict (the report's box and the terminal's line say this exactly then).

    Parameters
    ----------
    analysis : what :func:`lengthlens.analyse` computed (its runs and their load warnings).

    Returns
    -------
    str or None

    Examples
    --------
    >>> import lengthlens as ll                                                      # doctest: +SKIP
    >>> ungraded_warning(ll.analyse(ll.load("runs/")))                               # doctest: +SKIP
    '23 runs of graded benchmarks (humaneval 23) were left ungraded and are kept out of accuracy: …'
    """
    import polars as pl

    from lengthlens.data.grading import grader_name
    from lengthlens.data.grading.correctness import not_executed_counts

    runs = getattr(analysis, "runs", None)
    t = getattr(runs, "table", None)
    if t is None or not t.height or not {"correct", "status", "dataset"} <= set(t.columns):
        return None
    if "shared_baseline" in t.columns:  # a shared baseline's copies are not runs of their own
        t = t.filter(~pl.col("shared_baseline"))
    graded = [d for d in t.get_column("dataset").unique().to_list() if grader_name(str(d)) not in (None, "mtbench")]
    u = t.filter((pl.col("status") == "ok") & pl.col("correct").is_null() & pl.col("dataset").is_in(graded))
    if not u.height:
        return None
    per = ", ".join(f"{d} {n:,}" for d, n in sorted(u.group_by("dataset").len().iter_rows()))
    why = []
    not_run = min(u.height, sum(not_executed_counts(runs.warnings).values()))
    if not_run:
        why.append(f"{not_run:,} because their code was not executed (pass --execute-code to run it in a sandbox; "
                   "docs/execution.md)")
    rest = u.height - not_run
    if rest:
        why.append(f"{rest:,} because the grader could not decide them (tests or problems unavailable: pass --problems "
                   "FILE; no text logged: pass a grades file with --grades FILE; the load warnings under Provenance "
                   "name the cause)")
    return (f"{u.height:,} runs of graded benchmarks ({per}) were left ungraded and are kept out of accuracy: "
            f"{'; '.join(why)}. Cells with those runs count fewer graded pairs, or none.")


def _n(k: int, one: str, many: str | None = None) -> str:
    return f"{k} {one if k == 1 else (many or one + 's')}"


def _pp(x: float, sign: bool = True) -> str:
    """Accuracy points with one decimal as prose sets them: a minus sign (−), not a hyphen; ``+`` too with ``sign``."""
    return format(x, "+.1f" if sign else ".1f").replace("-", "−")


def _detectable_drop(mdd: float) -> float:
    """A minimum detectable drop in points as the headline and the rule lines read it: inf (no drop detectable) past
    100 points, the largest drop there is."""
    return np.inf if mdd > 100 else mdd


def verdict_sentence(r: Any, tasks: Sequence[str] = ()) -> str:
    """A rule's verdicts in one sentence a reader can quote (a row of verdicts.csv; ``tasks``: the datasets of its
    cells, named when there are a few)."""
    pair = "" if r["target"] == "all" else f" on {r['target']} ← {r['draft'] or '(no draft)'}"
    pair += f" at {r['serving']}" if str(r.get("serving", "") or "") not in ("", "nan") else ""
    if r["method"] in LOSSLESS_METHODS:  # no α to choose
        where = "in Table 3" if r["scope"] == "table3" else "in all"
    else:
        where = "at its most aggressive complete α per dataset" if r["scope"] == "table3" else "over every α"
    n, small = int(r["n_cells"]), int(r["n_small_excluded"])
    named = f" ({', '.join(tasks)})" if 0 < len(tasks) <= 6 else ""
    if not n:
        if small:
            return f"{r['method']}{pair}: all {_n(small, 'cell')}{named} {where} have fewer than {SMALL_N_ITEMS} items: no verdict."
        return f"{r['method']}{pair}: no cell {where} (no baseline to pair with, or no complete arm)."
    head = (f"{r['method']}{pair}, {_n(n, 'cell')}{named} {where}"
            + (f" ({small} with fewer than {SMALL_N_ITEMS} items left out)" if small else "") + ": ")
    speed = []
    for key, name in (("rounds", "verifier rounds (R/R*)"), ("time", "wall time (T/T*)")):
        f, sl, ct = int(r[f"n_{key}_faster"]), int(r[f"n_{key}_slower"]), int(r[f"n_{key}_cant_tell"])
        speed.append(f"{name} faster in {f}, slower in {sl}, can't tell in {ct}" if f + sl + ct else f"{name} not computed")
    g = int(r["n_graded"])
    if not g:
        acc = "accuracy not judged (no graded cell)"
    else:
        mdd = r.get("accuracy_mdd_pp_median", np.nan)
        mdd = np.nan if mdd is None else float(mdd)
        unseen = (f" (median minimum detectable drop {mdd:.1f} points: a smaller loss would likely go unseen)"
                  if np.isfinite(mdd) else " (too few graded pairs to detect any drop)" if mdd == np.inf else "")
        acc = (f"accuracy worse in {int(r['n_accuracy_worse'])} of {_n(g, 'graded cell')}, no detectable change in "
               f"{int(r['n_accuracy_no_change'])}{unseen}")
    return head + "; ".join(speed) + "; " + acc + "."


def accuracy_verdict_text(verdict: str, mdd_pp: float | None) -> str:
    """A cell's accuracy verdict as the cell table shows it: "no detectable change" carries its minimum detectable drop."""
    if verdict != "no detectable change" or mdd_pp is None or np.isnan(mdd_pp):
        return verdict
    return f"{verdict} (detects ≥ {mdd_pp:.0f} pp)" if np.isfinite(mdd_pp) else f"{verdict} (too few pairs to detect a drop)"


def verdict_sentences(analysis: Any, scope: str = "table3") -> list[tuple[str, str, str, str]]:
    """Per rule (pooled over pairs, then per pair when there are several), a line per serving condition where there
    are several (loads are never pooled): (target, draft, rule, sentence)."""
    v = analysis.tables.get("verdicts")
    if v is None or v.empty:
        return []
    d = v[v["scope"] == scope]
    if "serving" in d:  # the loads in numeric order, each rule's lines together
        from lengthlens.data.serving import serving_conditions

        order = {c: i for i, c in enumerate(serving_conditions(d["serving"].fillna("")))}
        d = d.assign(_load=d["serving"].fillna("").map(order)).sort_values(["method", "_load"], kind="mergesort")
    pooled = d[d["target"] == "all"]
    pairs = d[d["target"] != "all"]
    several = pairs[["target", "draft"]].drop_duplicates().shape[0] > 1
    rows = [pooled] + ([pairs.sort_values(["target", "draft", "method"], kind="mergesort")] if several else [])
    tasks = {m: _tasks(analysis, m) for m in set(d["method"].astype(str))} if scope == "table3" else {}
    return [(str(r["target"]), str(r["draft"]), str(r["method"]), verdict_sentence(r, tasks.get(str(r["method"]), [])))
            for part in rows for _, r in part.iterrows()]


def _lossless_headline(a: Any, tasks: str = "") -> str:
    """The headline for lossless speculative methods against their baseline (``tasks``: which method ran on what)."""
    def f(name: str, spec: str = ".2f") -> str:
        return format(a[name], spec) if np.isfinite(a[name]) else "not computed"

    return (f"Across {int(a['n_cells'])} cells of lossless speculative methods{f' ({tasks})' if tasks else ''} the mean per-round gain was "
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


def headline(analysis: AnalysisResult) -> str:
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
    graded = f" Accuracy is graded by {grading_name(analysis)}." if int(a["n_graded"]) else ""
    family = accuracy_family(analysis.cells)
    # Loads are never pooled: under several serving conditions, a line per load (Table 3's cells under it alone).
    by_load = (analysis.results or {}).get("table3_by_load") or {}
    said = graded_clause(analysis)
    if by_load:
        lines = [f"Across {int(a['n_cells'])} cells under {len(by_load)} serving conditions ({which}), load by load:"]
        lines += [_load_line(load, r) for load, r in by_load.items()]
        tail = (graded + (" " + said if said else "")).strip()
        return "\n".join(lines + ([tail] if tail else []))
    rows = [("", a)]
    if methods and methods <= LOSSLESS_METHODS:
        # Lossless methods: a length ratio away from 1 is a failed check, not inflation. The tasks are named: a
        # method that never reached some of them is not summarised over them.
        tasks = "; ".join(f"{m} on {', '.join(t)}" for m in sorted(methods) if (t := _tasks(analysis, m)))
        lines = [lead + _lossless_headline(r, tasks) + _accuracy_clause(r, family) + "." for lead, r in rows]
    else:
        lines = [lead + _headline_sentence(r, which) + _accuracy_clause(r, family) + "." for lead, r in rows]
    return "\n".join(lines) + graded + (" " + said if said else "")


def _load_line(load: str, r: pd.Series) -> str:
    """One serving condition's line of the headline: Table 3's ``all`` row on its cells alone, in short."""
    def x(name: str, label: str, spec: str = ".2f", unit: str = "") -> str:
        v = r.get(name, np.nan)
        return f"{label} {format(v, spec)}{unit}" if v is not None and np.isfinite(v) else f"{label} not computed"

    parts = [x("gain_mean", "mean gain"), x("lambda_mean", "λ"), x("rounds_ratio_mean", "R/R*", unit="x"),
             x("time_ratio_mean", "T/T*", unit="x")]
    g = int(r.get("n_graded", 0) or 0)
    if g:
        ci = (f" [{_pp(r['accuracy_delta_pp_mean_lo'], False)}, {_pp(r['accuracy_delta_pp_mean_hi'], False)}]"
              if np.isfinite(r.get("accuracy_delta_pp_mean_lo", np.nan)) else "")
        parts.append(f"accuracy {_pp(r['accuracy_delta_pp_mean'])} points{ci}, {int(r['n_drop_2pp'])} of {g} graded cells "
                     f"lost more than {ACCURACY_DROP_PP:g} points by the one-sided test")
    return f"{load}: {int(r['n_cells'])} cells, " + ", ".join(parts) + "."


def _tasks(analysis: Any, method: str | None = None) -> list[str]:
    """The datasets (tasks) of Table 3's cells, of one rule or of all, in name order."""
    used = (getattr(analysis, "results", None) or {}).get("table3_cells_used")
    if used is None or used.empty:
        return []
    d = used if method is None else used[used["method"].astype(str) == method]
    return sorted({str(x) for x in d["dataset"]})


def graded_clause(analysis: Any) -> str:
    """How many of Table 3's cells are graded, and why the others are not: the headline's last sentence.

    Parameters
    ----------
    analysis : the AnalysisResult (Table 3's cells, its runs' datasets).

    Returns
    -------
    str
        "" without cells; else e.g. "12 of 30 cells are graded; 18 are not: their benchmarks (test_bench) have no
        grader in lengthlens (pass --grades FILE)."
    """
    from lengthlens.data.grading import grader_name

    used = (getattr(analysis, "results", None) or {}).get("table3_cells_used")
    if used is None or used.empty:
        return ""
    used = used[~used["method"].astype(str).str.endswith("_force_commit")]
    n = len(used)
    graded = used["drop_2pp"].notna() if "drop_2pp" in used else pd.Series(False, index=used.index)
    partial = (used["graded_partial"].fillna(False).astype(bool) if "graded_partial" in used
               else pd.Series(False, index=used.index))
    full = graded & ~partial
    if full.all():
        return f"All {n} cells are graded."
    why = []
    if (k := int((graded & partial).sum())):
        why.append(f"{k} graded on fewer than half their items (kept out of the accuracy counts)")
    rest = used[~graded]
    no_grader = rest["dataset"].astype(str).map(lambda d: grader_name(d) in (None, "mtbench"))
    if (k := int(no_grader.sum())):
        names = ", ".join(sorted(set(rest.loc[no_grader, "dataset"].astype(str))))
        why.append(f"{k} because their benchmarks ({names}) have no automatic grader in lengthlens and the logs carry no "
                   "correctness (pass --grades FILE)")
    if (k := int((~no_grader).sum())):
        names = ", ".join(sorted(set(rest.loc[~no_grader, "dataset"].astype(str))))
        why.append(f"{k} ({names}) because their runs were left ungraded (the box above says why and which flag grades "
                   "them)")
    head = f"None of the {n} cells is graded: " if not full.any() else f"{int(full.sum())} of {n} cells are graded; the others are not: "
    return head + "; ".join(why) + "."


def _accuracy_clause(a: pd.Series, family: AccuracyFamily | None = None) -> str:
    graded = int(a["n_graded"])
    if not graded:
        return ""
    ci = (f" [{_pp(a['accuracy_delta_pp_mean_lo'], False)}, {_pp(a['accuracy_delta_pp_mean_hi'], False)}]"
          if np.isfinite(a.get("accuracy_delta_pp_mean_lo", np.nan)) else "")
    mdd = _detectable_drop(float(a.get("accuracy_mdd_pp_median", np.nan)))
    power = (f"; at the median cell that test detects a true drop of {mdd:.0f} points with 80 % power"
             if np.isfinite(mdd) else
             "; at the median cell that test detects no drop with 80 % power" if mdd == np.inf else "")
    return (f"; accuracy changed by {_pp(a['accuracy_delta_pp_mean'], False)} points on average{ci}: "
            f"{int(a['n_drop_2pp'])} of {graded} graded cells lost more than {ACCURACY_DROP_PP:g} points by a one-sided "
            f"test at {ALPHA_ONE_SIDED:.1%} ({int(a['n_drop_2pp_point'])} by the point rule of the study){power}; "
            + _family_clause(a, family))


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


def serving_sentence(analysis: AnalysisResult, most: int = 6) -> str:
    """Where each rule's wall-time advantage disappears as the load grows ("" without several serving conditions)."""
    sv = analysis.tables.get("serving")
    if sv is None or sv.empty:
        return ""
    arms = sv.drop_duplicates(["target", "draft", "dataset", "method", "params", "series"])
    wins = sv[sv["time_ratio_hi"] < 1].drop_duplicates(["target", "draft", "dataset", "method", "params", "series"])
    lost = arms[arms["advantage_lost_at"].fillna("") != ""]
    conditions = ", ".join(dict.fromkeys(sv.sort_values("load", kind="mergesort")["serving"]))
    head = (f"Over the serving conditions logged ({conditions}), {len(wins)} of {len(arms)} arms are faster than their "
            f"baseline (T/T* interval below 1) at some load")
    if lost.empty:
        return head + ", and none of them loses that advantage at a heavier load."
    named = [f"{r.method} {r.params} ({r.dataset}{', ' + r.series if r.series else ''}) at {r.advantage_lost_at}"
             for r in lost.head(most).itertuples()]
    more = f", and {len(lost) - most} more (serving.csv)" if len(lost) > most else ""
    return head + f"; {len(lost)} lose it as the load grows: " + "; ".join(named) + more + "."


def summary_lines(analysis: AnalysisResult) -> list[str]:
    """Terminal lines for the analyses beyond Table 3: censoring, attribution, Table 4, extra tokens."""
    lines: list[str] = [f"verdict: {sentence}" for tg, _d, _m, sentence in verdict_sentences(analysis) if tg == "all"]
    cz = analysis.tables.get("censoring")
    if cz is not None and not cz.empty:
        more = (cz["censored_frac"] > cz["censored_frac_star"]).sum()
        aft = cz["gm_ratio_aft_lognormal"]
        lines.append(f"censoring: {int((cz['censored_frac'] > 0).sum())} of {len(cz)} cells have relaxed runs cut at the budget "
                     f"({int(more)} more often than strict); median lambda {cz['lambda_plain'].median():.2f} plain vs "
                     f"{aft.median():.2f} geometric-mean ratio of the log-normal AFT (censoring-aware; not a ratio of means)")
    for scope in ("table3", "all"):
        lines += [f"attribution: {line}" for line in attribution_claim(analysis, scope).splitlines()]
    if (claim := table4_claim(analysis)):
        lines.append(f"table 4: {claim}")
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
    if (said := serving_sentence(analysis)):
        lines.append(f"serving: {said}")
    if (ungraded := ungraded_warning(analysis)):
        lines.append(f"ungraded: {ungraded}")
    for warn in (grading_warning(analysis), incomplete_warning(analysis)):
        if warn:
            lines.append(f"warning: {warn}")
    for n in analysis.notes:
        lines.append(f"note: {n}")
    return lines



def _confidence(settings: dict[str, Any]) -> str:
    return f"{round(100 * (settings.get('confidence_level') or 0.95))}%"


def cards(numbers: dict[str, Any] | None) -> list[dict[str, str]]:
    """The four numbers under the headline (:func:`lengthlens.report.context.headline_numbers`) as value, tone
    ("loss" or "") and what the value is."""
    if numbers is None:
        return []
    n = numbers
    out = [
        {"value": f"{n['gain']:.2f}×", "tone": "", "text": "what acceptance length promised: mean per-round gain "
         f"(ℓ̄+1)/(ℓ̄*+1) over Table 3's {n['n_cells']} cells (each rule's most aggressive α)"},
        {"value": f"{n['lambda']:.2f}×", "tone": "", "text": "what it cost: mean length ratio λ, completions this much "
         "longer than strict (above 1 is longer)"},
        {"value": f"{n['rounds']:.2f}×", "tone": "", "text": "what happened: measured verifier rounds R/R* against strict, "
         f"the primary cost measure (mean; below 1 is fewer); wall time T/T* beside it: {n['time']:.2f}× "
         f"({n['time_per_round']:.2f}× per round)"},
    ]
    if n["n_graded"]:
        out.append({"value": f"{n['n_drop']} of {n['n_graded']}", "tone": "loss" if n["n_drop"] else "",
                    "text": f"graded cells of Table 3 that lost more than {ACCURACY_DROP_PP:g} accuracy points by a "
                            f"one-sided test at 2.5 %; {n['n_drop_point']} by the study's point rule, {n['n_drop_holm']} "
                            f"significantly after Holm ({n['n_all_cells']} cells in all; accuracy on units graded on "
                            "both sides)"})
    else:
        out.append({"value": "not graded", "tone": "", "text": "no cell of Table 3 has runs graded on both sides: the "
                    "report says nothing about accuracy"})
    return out


def decision_note(grading: str) -> str:
    """How the verdicts are read from the intervals (the note of the decision section); ``grading``: :func:`grading_name`."""
    return ("Per cell, from its intervals only: verifier rounds and wall time are faster when the whole 95% interval of "
            "R/R* (or T/T*) lies below 1, slower when it lies above 1, and can't tell when it holds 1; accuracy is worse "
            f"when the cell's one-sided loss test (a loss of more than {ACCURACY_DROP_PP:g} points, at 2.5 %; drop_2pp) "
            "fires, else no detectable change, with the minimum detectable drop: the smallest true loss the test detects "
            "with 80 % power, so a smaller loss may well have gone unseen. In the tables faster is green, slower and "
            "worse are red. Counted over Table 3's cells (each rule at its most aggressive complete α per dataset; cells "
            f"with fewer than {SMALL_N_ITEMS} items left out and counted); verdicts.csv has every α too, and cells.csv "
            f"each cell's verdict. Accuracy graded by {grading}.")


def table3_note(settings: dict[str, Any], grading: str) -> str:
    """What Table 3's rows and columns are (the note under the table); ``grading``: :func:`grading_name`."""
    which = (f"each rule at its most aggressive α per dataset: the largest α run on ≥ {COMPLETE_SHARE:.0%} of the "
             "baseline's items; alpha_selected.csv lists the choice" if settings.get("alphas", "loosest") == "loosest"
             else "all α")
    return (f"Accuracy graded by {grading}. Per rule and over all cells ({which}). gain = (ℓ̄+1)/(ℓ̄*+1), the per-round "
            "gain acceptance length promises; λ = mean length ratio; R/R* = measured verifier-rounds ratio, the primary "
            "cost measure; T/T* = wall-time ratio beside it, and time/round = (T/T*)/(R/R*), the part of T/T* that is "
            "per-round cost and session noise (below 1 is better than strict). Counts are cells: λ_lo>1 = the whole "
            "interval of λ above 1; out of graded cells (a cell graded on fewer than half its items is left out, and "
            f"counted as partly graded), drop >{ACCURACY_DROP_PP:g}pp (test) = a loss of more than {ACCURACY_DROP_PP:g} "
            "points by the one-sided exact test at 2.5 % (drop_2pp), detectable drop = the median over the graded cells "
            "of the smallest true drop that test detects with 80 % power (∞ where the cells' discordance allows none), "
            f"drop >{ACCURACY_DROP_PP:g}pp (point) = the study's rule on the point estimate (it fires on noise in about a "
            "third of unchanged 12–30-item cells), drop Holm = lower accuracy with a Holm-adjusted mid-p paired test "
            "p < 0.05 over the report's accuracy family (graded cells of 10 or more items, fully graded); Δacc mean "
            "with an interval for the across-dataset mean (the cells' spread, t with K − 1 degrees of freedom, never "
            "narrower than the item bootstrap's; none from one cell); the last two count cells where rounds (predicted λ/gain_pooled, or "
            "measured) win but wall time loses.")


#: Under Table 3 per target–draft pair.
TABLE3_PAIRS_NOTE = "The same summary on each pair's cells alone (table3_pairs.csv): the rows above pool the pairs."


def cells_note(settings: dict[str, Any], rules: Sequence[tuple[str, str, str]]) -> str:
    """What a row of the Cells table is and how it is coloured (the note above the table); ``rules``: the colouring
    rules in force (:func:`lengthlens.report.columns.colour_rules`), stated once by :func:`colour_legend`."""
    return ("A cell is one relaxed arm (or speculative method) against its baseline (strict, or plain autoregressive "
            "decoding) on the items where both runs finished; grouped by target–draft pair and dataset; “graded” "
            "counts the units graded on both sides, the only ones accuracy uses (grey italics: fewer than half the "
            f"cell's items graded, so left out of the accuracy counts). Intervals: paired item bootstrap, "
            f"{settings.get('ci', 'percentile')} {_confidence(settings)} for the ratios (cut to the range of the item "
            "ratios), Tango's score interval for Δacc (a t interval over items with several seeds). " + colour_legend(rules)
            + " The rounds, time and accuracy columns are the cell's verdicts "
            "(see “Faster, and as accurate?”). R/R* is the primary cost measure; T/T* stands beside it with time/round "
            "= (T/T*)/(R/R*). λ/gain is the rounds ratio the length-correction identity predicts, λ/gain_pooled. "
            "p Holm: the paired accuracy test (mid-p McNemar; the item-level sign-flip test when items have several "
            "seeds) adjusted by Holm over the report's accuracy family (graded cells of 10 or more items, fully "
            "graded); empty outside it.")


def attribution_claim(analysis: AnalysisResult, scope: str = "table3") -> str:
    """The attribution as the paper's claim with its counts: in how many cells ≥ 90 % of the extra length is thinking.

    Parameters
    ----------
    analysis : the AnalysisResult (its ``attribution_summary`` table).
    scope : ``table3`` (Table 3's cells, the default) or ``all`` (every cell).

    Returns
    -------
    str
        One sentence ("" without an attribution summary): cells whose completions grew, those whose share of the extra
        length in thinking is ≥ 90 % by the interval's lower limit and by the point estimate, those where the share is
        undefined (the extra length's interval holds 0), the pooled share, and the count per rule.

    Examples
    --------
    >>> import lengthlens as ll                                                       # doctest: +SKIP
    >>> attribution_claim(ll.analyse(ll.load("runs/")))                              # doctest: +SKIP
    '≥ 90% of the extra length is in the thinking in 6 of Table 3's 24 cells whose completions grew ...'
    """
    at = analysis.tables.get("attribution_summary")
    if at is None or at.empty:
        return ""
    if "serving" in at.columns:  # loads are never pooled: a sentence per serving condition, on its own line
        from lengthlens.data.serving import serving_conditions

        loads = serving_conditions(at["serving"].fillna(""))
        said = [_attribution_sentence(at[at["serving"].fillna("") == load], scope) for load in loads]
        return "\n".join(f"At {load}: {s}" for load, s in zip(loads, said) if s)
    return _attribution_sentence(at, scope)


def _attribution_sentence(at: pd.DataFrame, scope: str) -> str:
    """:func:`attribution_claim` on one serving condition's rows of the summary."""
    pooled = at["target"] == "all" if "target" in at.columns else True
    rows = at[(at["scope"] == scope) & pooled]
    total = rows[rows["method"] == "all"]
    if total.empty:
        return ""
    a = total.iloc[0]
    low = SHARE_THRESHOLDS[0]
    lo_col, point_col = f"n_share_lo_ge_{round(100 * low)}", f"n_share_point_ge_{round(100 * low)}"
    where = "Table 3's" if scope == "table3" else "all"
    per_rule = "; ".join(f"{r.method} {int(getattr(r, lo_col))} of {int(r.n_cells_longer)}"
                         for r in rows[rows["method"] != "all"].itertuples())
    return (f"≥ {low:.0%} of the extra length is in the thinking in {int(a[lo_col])} of {where} {int(a['n_cells_longer'])} "
            f"cells whose completions grew (of {int(a['n_cells'])}), by the lower limit of the share's 95% interval "
            f"({int(a[point_col])} by the point estimate); in {int(a['n_share_undefined'])} the extra length's interval "
            f"holds 0, so its share is undefined; pooled over the cells that grew, {a['thinking_share_pooled']:.0%} of the extra "
            f"characters are thinking." + (f" By rule: {per_rule}." if per_rule else ""))


def table4_claim(analysis: AnalysisResult) -> str:
    """Table 4 as the paper's claim with its counts: what forcing the thinking closed did to the runs it fired on, and
    to every run of the arms.

    Returns
    -------
    str
        One or two sentences ("" without intervention arms): fired runs, correct before and after with the flips and
        the paired test, what it cost (length, rounds, time of the fired runs), and accuracy over every graded run of
        the arms against their base arms.

    Examples
    --------
    >>> import lengthlens as ll                                                       # doctest: +SKIP
    >>> table4_claim(ll.analyse(ll.load("runs/")))                                   # doctest: +SKIP
    'Forcing the thinking closed fired on 13 of 160 runs; on the 13 graded ones correct answers went from 1 to 5 ...'
    """
    t4 = analysis.tables.get("table4")
    if t4 is None or t4.empty:
        return ""
    r = t4[t4["method"] == "all"].iloc[-1] if (t4["method"] == "all").any() else t4.iloc[-1]
    fired, runs = int(r["fired"]), int(r["runs"]) if "runs" in r and r["runs"] == r["runs"] else None
    out = f"Forcing the thinking closed fired on {fired:,}" + (f" of {runs:,} runs" if runs is not None else " runs")
    if not fired:
        return out + ": it never changed a run."
    out += (f"; on the {int(r['n_graded']):,} graded ones correct answers went from {int(r['correct_before']):,} to "
            f"{int(r['correct_after']):,} ({int(r['wrong_to_right']):,} wrong → right, {int(r['right_to_wrong']):,} "
            f"right → wrong; {accuracy_test_label(r.get('accuracy_test', 'mcnemar_exact'))}: p = {r['accuracy_p']:.3g}), "
            f"{int(r['still_capped']):,} still hit the budget")
    costs = [f"{name} ×{r[col]:.2f}" for col, name in (("length_ratio", "length"), ("rounds_ratio", "verifier rounds"),
                                                      ("time_ratio", "wall time")) if col in r and r[col] == r[col]]
    out += (f", at {', '.join(costs)} of their base runs." if costs else ".")
    if "accuracy_after_all" in r and r["n_graded_all"] == r["n_graded_all"] and r["n_graded_all"]:
        out += (f" Over every graded run of the intervention arms ({int(r['n_graded_all']):,}), fired or not, accuracy "
                f"{r['accuracy_before_all']:.1%} without the intervention and {r['accuracy_after_all']:.1%} with it.")
    return out


def colour_legend(rules: Sequence[tuple[str, str, str]]) -> str:
    """Every colouring rule of the cell table, once: the interval rule with each estimate's reference (ℓ̄ against ℓ̄*,
    the ratios against 1), the accuracy change's, the verdicts' and the grey of partly graded cells.

    Parameters
    ----------
    rules : (label, better side, reference) per coloured estimate, as :func:`lengthlens.report.columns.colour_rules`
        gives them (the rules the colours follow; passed in, since the columns' module words its notes from here).

    Returns
    -------
    str
        One paragraph.

    Examples
    --------
    >>> "ℓ̄ against ℓ̄*" in colour_legend([("ℓ̄", "higher", "ℓ̄*"), ("λ", "lower", "1")])
    True
    """
    higher = [f"{lab} against {ref}" for lab, better, ref in rules if better == "higher"]
    lower = [f"{lab} against {ref}" for lab, better, ref in rules if better == "lower"]
    return ("Colours, one rule for every estimate, from its interval: red when the whole interval lies on the worse side "
            "of its reference, green when it lies wholly on the better side, none when it holds the reference. Higher is "
            f"better for {', '.join(higher)}; lower is better for {', '.join(lower)}. The accuracy change is red when "
            "the cell's loss flag (drop_2pp) fires and green when its interval lies above 0. Verdicts: slower or worse "
            "in red, faster in green. Grey italics: graded on fewer than half the cell's items (the accuracy change then reads "
            f"“k of n items graded”). A probe (fewer than {SMALL_N_ITEMS} items) is never coloured and shows its point "
            "without an interval: “probe, no verdict”.")


def arms_note(grading: str, policy: Any = None) -> str:
    """What the arms appendix averages, and the other grading policy's verdicts beside them when they were computed."""
    out = ("Means over the runs the cells use (ok and paired with a baseline run), without pairing; “runs” counts every "
           "loaded run of the arm.")
    if policy:
        out += (f" Accuracy is graded by {grading}; beside it, the same runs with lengthlens' graders under the "
                f"{policy.other} policy ({policy.n_disagree:,} of {policy.n_regraded:,} regraded runs get another "
                "verdict; records and grade files do not depend on the policy; code is not run for it).")
    return out


#: Over the runs left out of every cell.
EXCLUDED_NOTE = "Ok runs that enter no cell, with the reason (arms_excluded.csv): they are not in the means above."


def methods(settings: dict[str, Any], grading: str) -> list[tuple[str, list[str]]]:
    """The Methods section as (heading, paragraphs); `backticks` mark code, ``{definitions}`` where the table goes."""
    n, seed, ci = f"{settings.get('n_resamples') or 0:,}", settings.get("seed"), settings.get("ci", "percentile")
    student = (" (bootstrap-t: for the ratios, quantiles of (log θ_b − log θ̂)/se_b with the delta-method standard "
               "error of each resample, computed from the same resampled sums; the accuracy change keeps the "
               "percentile interval)" if ci == "studentized" else "")
    small = "" if settings.get("include_small") else " and they are left out of Table 3 and the headline"
    return [
        ("Pairing", ["Runs are grouped into arms (target, draft, dataset, rule, params). A cell pairs one relaxed arm "
                     "with the lossless `strict` arm of the same target, draft and dataset on the same (item, seed): only "
                     "units where both runs finished with status `ok` enter, so every cell compares like with like. "
                     "Several seeds of one item are summed and the item is the unit. Ratios are ratios of means over the "
                     "cell's units (e.g. λ = Σ L / Σ L*), not means of per-item ratios."]),
        ("Definitions", ["Per run i: A = accepted draft tokens (bonus token excluded), R = verifier rounds (target "
                         "forward passes), L = completion tokens, T = wall time, c = correct (1/0); a star marks the "
                         "strict run of the same item and seed; n = units in the cell.", "{definitions}",
                         "Since R = L / (ℓ̄ + 1) per run up to the last round, R/R* ≈ λ / gain: a rule only saves "
                         "verifier rounds when its per-round gain exceeds the growth in completion length."]),
        ("Bootstrap", [f"Intervals are paired item-level bootstrap intervals: each of the {n} resamples draws the "
                       f"group's items with replacement (seed {seed}, the same draws for every cell of a "
                       "target–draft–dataset group), recomputes every metric from the resampled sums, and takes the "
                       f"{ci} {_confidence(settings)} interval{student}. A cell on only some of its group's items draws "
                       "its own items. Resamples where a metric is undefined (a zero denominator) are left out and "
                       "counted (`undefined_resamples`). Relaxed and strict runs of an item are always drawn together, "
                       f"which keeps the pairing. Cells with fewer than {SMALL_N_ITEMS} items are flagged `small_n`: "
                       f"their intervals are not drawn in the figures{small}."]),
        ("Censoring", ["A run that stopped at its token budget (finish reason `length`, or output tokens ≥ budget) is "
                       "right-censored: its completion would have been longer. Plain λ counts it at the budget, which "
                       "understates inflation when relaxed runs hit the budget more often. The censoring analysis adds "
                       "Kaplan–Meier survival of completion length (median with intervals from resampling items, so that "
                       "an item's seeds move together), λ on pairs where neither side is censored, the ratio of "
                       "restricted means up to a common horizon, and a paired accelerated-failure-time model, log T = a + "
                       "β·relaxed + σε with log-normal ε fitted by maximum likelihood with right-censoring, whose time "
                       "ratio exp(β) is a censoring-aware geometric-mean ratio (a sensitivity analysis: it reads as \"a "
                       "typical completion stretched by\", not as λ, a mean-token ratio; it differs from λ when the effect "
                       "varies by item). Where budgets differ, the restricted-mean ratio's interval is the expanded percentile "
                       "interval of weighted Kaplan–Meier curves (the plain one is too narrow at a dozen items)."]),
        ("Grading", ["Correctness comes from the study's grade files or from lengthlens' graders, which read only a "
                     "completion's answer part: a run cut at the budget inside its thinking is incorrect, nothing is "
                     "extracted from thinking. GSM8K and AIME compare the final number, LongBench v2 the chosen letter, "
                     "HumanEval and LiveCodeBench execute the code against the tests, MT-Bench is judge-scored and left "
                     "ungraded (kept out of accuracy). Accuracy deltas use only pairs graded on both sides; a cell graded "
                     "on fewer than half its items is shown in grey italics and left out of the accuracy counts. Used "
                     f"for this report — {grading}."]),
    ]


# ------------------------------------------------------------------------------------------------
# Rule verdicts pooled across datasets (rules.csv): the first lines of the report
# ------------------------------------------------------------------------------------------------

def _ratio_clause(r: Any, stem: str, label: str, verdict: str) -> str:
    if r[f"{stem}_k"] == 0 or not np.isfinite(r[stem]):
        return f"{label} not computed"
    if not np.isfinite(r[f"{stem}_lo"]):
        return f"{label} {r[stem]:.2f} from one cell: can't tell"
    lo, hi = r[f"{stem}_lo"], r[f"{stem}_hi"]
    # An interval that excludes 1 while Holm over the rules does not reject: say why the verdict is still open.
    holm = f" (Holm p {r[f'{stem}_p_holm']:.2f})" if verdict == "can't tell" and (hi < 1 or lo > 1) else ""
    return f"{label} {r[stem]:.2f} [{lo:.2f}, {hi:.2f}] {verdict}{holm}"


def rule_verdict_line(r: Any) -> str:
    """One quotable line for a rule (a row of rules.csv): its pooled R/R*, T/T* and Δacc with intervals and verdicts,
    the smallest loss the data could detect, and the cells and items behind it."""
    where = "" if r["target"] == "all" else f" ({r['target']} ← {r['draft'] or '(none)'})"
    serving = r.get("serving")
    load = f"[{serving}] " if isinstance(serving, str) and serving else ""  # rules.csv read back: empty is NaN
    speed = "; ".join((_ratio_clause(r, "rounds_ratio", "R/R*", r["verdict_rounds"]),
                       _ratio_clause(r, "time_ratio", "T/T*", r["verdict_time"])))
    d = "accuracy_delta_pp"
    if r["verdict_accuracy"] == "ungraded" or r[f"{d}_k"] == 0:
        acc = "accuracy ungraded"
    elif not np.isfinite(r[f"{d}_lo"]):
        acc = f"Δacc {_pp(r[d])} pp from one cell: can't tell"
    else:
        mdd = _detectable_drop(r["accuracy_mdd_pp"])
        acc = (f"Δacc {_pp(r[d])} pp [{_pp(r[f'{d}_lo'])}, {_pp(r[f'{d}_hi'])}] {r['verdict_accuracy']}"
               + (f" (a loss of {mdd:.0f} pp would be seen 80 % of the time)" if np.isfinite(mdd) else
                  " (not even a loss of 100 pp would be seen 80 % of the time)" if mdd == np.inf else ""))
    behind = f"{_n(int(r['n_cells']), 'cell')}, {int(r['n_items'])} items"
    if int(r["n_cells_accuracy"]) and int(r["n_cells_accuracy"]) != int(r["n_cells"]):
        behind += f"; accuracy {_n(int(r['n_cells_accuracy']), 'cell')}, {int(r['n_items_accuracy'])} graded items"
    probes = f"; {_n(int(r['n_probes_excluded']), 'probe cell')} left out" if int(r["n_probes_excluded"]) else ""
    return f"{load}{r['method']}{where}: {speed}; {acc} ({behind}{probes})"


def rule_verdict_lines(rules_df: pd.DataFrame, pairs: bool = False) -> list[str]:
    """The rule verdicts as the report opens with them: a heading line, then one line per rule (every pair pooled;
    each pair's rows too with ``pairs``)."""
    if rules_df is None or rules_df.empty:
        return []
    rows = rules_df if pairs else rules_df[rules_df["target"] == "all"]
    n_rules = rows["method"].nunique()
    margin = float(rows["margin_pp"].iloc[0])
    head = (f"Rule verdicts, each rule's cells pooled across datasets (random effects, 95 % intervals; Holm over the "
            f"{_n(n_rules, 'rule')}; non-inferior: the accuracy change's lower limit above −{margin:g} points):")
    return [head, *("  " + rule_verdict_line(r) for _, r in rows.iterrows())]


def plan_lines(result: Any) -> list[str]:
    """What ``lengthlens plan`` prints: the pilot's spread, what its sizes detect, and per target the design proposed
    (with its power in simulation), or why none is."""
    p = result.pilot
    level = f"one-sided at {100 * result.alpha:.2g} %: 2.5 % over {_n(p.n_rules, 'rule')}, Holm's first step"
    out = [f"Pilot: {_n(p.k, 'dataset')} × {p.n_items} items × {_n(p.n_seeds, 'seed')} per rule (median), "
           f"{_n(p.n_rules, 'rule')}; discordant pairs {100 * p.discordance:.0f} %; between-dataset SD "
           f"{np.sqrt(p.accuracy_tau2):.1f} points of accuracy and {np.sqrt(p.rounds_tau2):.2f} of log R/R*; "
           f"an item's seeds alike with correlation {p.seed_correlation:g}, {p.seed_correlation_source}.",
           f"At these sizes the pooled verdict ({level}) detects with {result.power:.0%} power an accuracy loss of "
           f"{result.detectable_accuracy_pp:.1f} points and an R/R* change of {100 * result.detectable_rounds_change:.0f} %."]
    proposed = {d.target: d for d in result.proposed}
    for t in result.targets:
        d = proposed.get(t)
        if d is None:
            out.append(f"{t[0].upper()}{t[1:]}: out of reach within {MAX_DATASETS:,} datasets of up to {MAX_ITEMS:,} items each "
                       "(the between-dataset spread alone is too wide).")
            continue
        sim = (f"; {d.simulated_power:.0%} in {d.n_simulations} simulated studies" if d.n_simulations else "")
        out.append(f"To detect an {t} with {result.power:.0%} power: {_n(d.k, 'dataset')} × {d.n_items} items × "
                   f"{_n(d.n_seeds, 'seed')} ({d.runs_per_arm:,} runs per arm; power {d.power:.0%} by the formula{sim}).")
    return out
