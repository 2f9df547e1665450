"""What the report template shows, computed from an Analysis: headline numbers, provenance, methods, limitations."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
from typing import Any

import numpy as np
import pandas as pd
import polars as pl

from lengthlens._version import __version__
from lengthlens.analyses.methods import LOSSLESS_METHODS
from lengthlens.data.runset import benchmark_of, benchmarks_of  # noqa: F401 (benchmark_of: public here too)
from lengthlens.report import wording
from lengthlens.stats.metrics import ACCURACY_DROP_PP, registry

_SKIP_NORMALIZE = [
    (r"duplicate of .*", "duplicate of another run"),
    (r"^field 'output_tokens'.*", "output_tokens exceeds the budget"),
    (r"setting differs from the baseline: .*", "setting differs from the baseline"),
]


def _uniq(t: pl.DataFrame, col: str) -> list[Any]:
    if col not in t.columns:
        return []
    return sorted(t[col].drop_nulls().unique().to_list())


def headline_numbers(analysis: Any) -> dict[str, Any] | None:
    """Mean gain, mean lambda, mean measured rounds and time ratios over the Table 3 cells, with cell counts."""
    t3 = analysis.tables.get("table3")
    if t3 is None or t3.empty:
        return None
    a = t3[t3["method"] == "all"].iloc[0]
    return {
        "gain": float(a["gain_mean"]), "lambda": float(a["lambda_mean"]),
        "rounds": float(a["rounds_ratio_mean"]), "time": float(a["time_ratio_mean"]),
        "n_cells": int(a["n_cells"]), "n_graded": int(a["n_graded"]), "n_drop": int(a["n_drop_2pp"]),
        "n_drop_point": int(a["n_drop_2pp_point"]), "n_drop_holm": int(a["n_drop_holm"]),
        "time_per_round": float(a["time_per_round_ratio_mean"]),
        "n_rounds_lose": int(a["n_rounds_ratio_gt_1"]), "n_time_lose": int(a["n_time_ratio_gt_1"]),
        "n_all_cells": len(analysis.tables["cells"]),
    }


def provenance(analysis: Any, generated: str | None = None) -> dict[str, Any]:
    """Where the numbers come from: roots, runs found/loaded/skipped, the design, settings, versions."""
    runs = analysis.runs
    t = runs.table
    if "shared_baseline" in t.columns:  # an autoregressive baseline shared by several drafts, as logged
        t = t.filter(~pl.col("shared_baseline"))
    skipped = analysis.tables.get("skipped", pd.DataFrame())
    reasons: list[dict[str, Any]] = []
    if not skipped.empty and "reason" in skipped:
        r = skipped["reason"].astype(str)
        for pat, rep in _SKIP_NORMALIZE:
            r = r.str.replace(pat, rep, regex=True)
        reasons = r.value_counts().rename_axis("reason").reset_index(name="n").to_dict("records")
    arms = (t.filter(pl.col("method") != "strict").group_by("method").agg(pl.col("params").unique().sort())
            .sort("method").to_dicts()) if t.height else []
    budgets = (t.group_by("dataset").agg(pl.col("max_new_tokens").drop_nulls().unique().sort()).sort("dataset").to_dicts()
               if t.height else [])
    hardware = []
    for col in ("hardware", "gpu", "device", "gpu_name"):
        hardware += [str(v) for v in _uniq(t, col)]
    pairs = t.select("target", "draft").unique().sort(["target", "draft"]).rows() if t.height else []
    seeds = _uniq(t, "seed")
    return {
        "sources": list(runs.sources),
        "runs_found": runs.n_found, "runs_loaded": t.height, "runs_paired": t.filter(pl.col("paired")).height,
        "runs_skipped": runs.skipped.height, "skipped_reasons": reasons,
        "pairs": [f"{a} ← {b or '(no draft: autoregressive)'}" for a, b in pairs],
        "targets": _uniq(t, "target"), "drafts": _uniq(t, "draft"), "datasets": _uniq(t, "dataset"),
        "methods": [{"method": a["method"], "params": ", ".join(a["params"])} for a in arms],
        "budgets": [{"dataset": b["dataset"], "budgets": ", ".join(f"{int(x):,}" for x in b["max_new_tokens"])} for b in budgets],
        "temperatures": [f"{x:g}" for x in _uniq(t, "temperature")],
        "top_p": [f"{x:g}" for x in _uniq(t, "top_p")],
        "seeds": seeds,
        "backends": _uniq(t, "backend"),
        "engine_versions": _uniq(t, "engine_version"),
        "hardware": hardware,
        "version": __version__,
        "python": platform.python_version(),
        "generated": generated or generated_now(),
        "warnings": list(runs.warnings) + list(getattr(analysis, "notes", ())),
        "grading": grading_provenance(runs),
        "benchmarks": benchmarks(t),
    }


def provenance_terms(prov: dict[str, Any], settings: dict[str, Any]) -> list[tuple[str, str]]:
    """The provenance list as (term, text), from :func:`provenance` and the analysis' settings: what the HTML and
    the PDF list under Provenance."""
    from lengthlens.analyses.cells import SMALL_N_ITEMS
    from lengthlens.analyses.tables import COMPLETE_SHARE

    def n(x: Any) -> str:
        return f"{int(x or 0):,}"

    conf = round(100 * (settings.get("confidence_level") or 0.95))
    aft = (f"from refits on the first {n(settings.get('n_resamples_aft'))} resamples"
           if settings.get("aft_ci") == "bootstrap" else "cluster-robust (by item) sandwich, t(G−1)")
    datasets = ", ".join(b["name"] + (f" (as {', '.join(b['folders'])})" if len(b["folders"]) > 1 or b["folders"][0] != b["name"]
                                      else "") for b in prov["benchmarks"])
    small = (f", cells with fewer than {SMALL_N_ITEMS} items included" if settings.get("include_small") else
             f"; cells with fewer than {SMALL_N_ITEMS} items (small_n) left out")
    t3 = (f"the loosest (most aggressive) α per rule and dataset among complete arms (≥ {100 * COMPLETE_SHARE:.0f} % of "
          "the baseline's items)" if settings.get("alphas") == "loosest" else "every α") + small
    return [
        ("roots read", ", ".join(str(s) for s in prov["sources"])),
        ("runs", f"{n(prov['runs_found'])} found, {n(prov['runs_loaded'])} loaded, {n(prov['runs_paired'])} paired into "
                 f"cells, {n(prov['runs_skipped'])} skipped or unpaired" + (" (reasons below)" if prov["skipped_reasons"] else "")),
        ("target ← draft", "; ".join(prov["pairs"])),
        ("datasets", datasets),
        ("rules and params", "; ".join(f"{m['method']}: {m['params']}" for m in prov["methods"])),
        ("token budgets", "; ".join(f"{b['dataset']} {b['budgets']}" for b in prov["budgets"])),
        ("sampling", f"temperature {', '.join(prov['temperatures']) or 'not logged'}; top-p "
                     f"{', '.join(prov['top_p']) or 'not logged'}; seeds {', '.join(str(s) for s in prov['seeds'])}"),
        ("engine", f"{', '.join(prov['backends']) or 'backend not logged'} "
                   f"{', '.join(prov['engine_versions']) or '(version not logged)'}"),
        ("hardware", ", ".join(prov["hardware"]) or "not in the logs"),
        ("bootstrap", f"paired item bootstrap, {settings.get('ci')} {conf}% intervals, {n(settings.get('n_resamples'))} "
                      f"resamples, seed {settings.get('seed')}; AFT intervals {aft}"),
        ("grading", prov["grading"]),
        ("Table 3 cells", t3),
        ("software", f"lengthlens {prov['version']}, Python {prov['python']}; generated {prov['generated']}"),
        ("tables", "every table as CSV next to this file (cells.csv, table3.csv, …)"),
    ]


def benchmarks(t: pl.DataFrame) -> list[dict[str, Any]]:
    """Distinct benchmarks with the dataset folders that hold them (one benchmark on two targets counts once)."""
    return [{"name": b, "folders": f} for b, f in benchmarks_of(t).items()]


#: How each grading policy reads a completion, for the provenance line.
GRADING_POLICIES = {
    "default": ("lengthlens' default policy: only the answer part of the channel split is read, and a run cut at the "
                "budget with its thinking open is incorrect"),
    "study": ("the study's own policy (--grading study): the text after the last final-channel marker or after "
              "</think>, else the whole text; for multiple choice the last \\boxed{X} or else the last bare A–D"),
}


def grading_provenance(runs: Any) -> str:
    """Which grading policy was used and where the verdicts of the ok runs came from."""
    policy = getattr(runs, "grading", "default")
    t = runs.table
    text = GRADING_POLICIES.get(policy, policy)
    if not t.height or "grade_source" not in t.columns:
        return text
    if "shared_baseline" in t.columns:  # a shared autoregressive baseline's copies are not runs of their own
        t = t.filter(~pl.col("shared_baseline"))
    src = t.filter(pl.col("status") == "ok").get_column("grade_source")
    kinds = {"record": 0, "grade file": 0, "grader": 0}
    for v, n in src.value_counts().iter_rows():
        if v is None:
            continue
        key = "grade file" if v == "grade_file" else ("grader" if str(v).startswith("grader:") else "record")
        kinds[key] += n
    parts = [f"{n:,} from {k}s" for k, n in kinds.items() if n]
    parts.append(f"{int(src.is_null().sum()):,} ungraded")
    return f"{text}. Verdicts of the ok runs: {', '.join(parts)}"


def generated_now() -> str:
    """Now in UTC, or SOURCE_DATE_EPOCH when set (reproducible builds: the committed example report does not churn)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (_dt.datetime.fromtimestamp(int(epoch), _dt.UTC) if epoch and epoch.isdigit()
            else _dt.datetime.now(_dt.UTC))
    return when.strftime("%Y-%m-%d %H:%M UTC")


def definitions() -> list[dict[str, str]]:
    """Every cell metric with its formula and meaning, in the registry's order, plus derived flags."""
    rows = [{"name": m.name, "formula": m.formula, "description": m.description,
             "interval": "yes" if m.interval else "no"} for m in registry().metrics]
    rows.append({"name": "drop_2pp", "formula": f"one-sided test of H0 Δacc ≥ −{ACCURACY_DROP_PP:g} points, p < 2.5 % "
                 "(Tango's score statistic, exact unconditional p: Lloyd's E+M up to 60 pairs; a t test over items with seeds)",
                 "description": f"a loss of more than {ACCURACY_DROP_PP:g} points (graded cells only; drop_2pp_p its "
                 "p-value, accuracy_mdd_pp the smallest drop it detects with 80 % power at the cell's size)",
                 "interval": "no"})
    rows.append({"name": "drop_2pp_point", "formula": f"accuracy_delta_pp ≤ −{ACCURACY_DROP_PP:g}",
                 "description": "the study's point rule (fires on noise in ~1/3 of unchanged 12–30-item cells)", "interval": "no"})
    rows.append({"name": "accuracy_p", "formula": "mid-p McNemar on runs; mid-p sign-flip test on per-item mean "
                 "differences when an item has several seeds (accuracy_test); accuracy_p_exact: the exact p",
                 "description": "paired accuracy test; accuracy_p_holm / accuracy_q_bh adjust it over the accuracy family "
                 "(graded, not partly graded, ≥ 10 items: in_accuracy_family); mcnemar_p is accuracy_p_exact's old name",
                 "interval": "no"})
    rows.append({"name": "n_graded", "formula": "Σᵢ 1[run i and its baseline run both graded]",
                 "description": "units graded on both sides: the only ones accuracy uses", "interval": "no"})
    rows.append({"name": "graded_partial", "formula": "2 · n_graded_items < n_items",
                 "description": "graded on fewer than half its items: accuracy shown in grey, left out of the counts",
                 "interval": "no"})
    return rows


def limitations(analysis: Any) -> list[str]:
    """Caveats computed from the data: small cells, censoring, seeds, grading, skipped runs."""
    out: list[str] = []
    cells = analysis.tables["cells"]
    runs = analysis.runs
    t = runs.table
    if cells.empty:
        return ["No cells could be formed: no arm shares items with a baseline."]
    n = cells["n_items"]
    small = int((n < 30).sum())
    out.append(f"Items per cell: median {int(n.median())}, range {int(n.min())}–{int(n.max())}; {small} of {len(cells)} "
               f"cells have fewer than 30 items, so their intervals are wide and percentile intervals may under-cover.")
    if "seed" in t.columns and t.height:
        per_item = t.filter(pl.col("paired")).group_by(["dataset", "method", "params", "item_id"]).agg(pl.col("seed").n_unique())
        seeds = int(per_item["seed"].max()) if per_item.height else 0
        if seeds <= 1:
            out.append("Each item was run with a single seed: the intervals cover item sampling only, not the "
                       "run-to-run variation of one item (sampling temperature > 0 makes that variation real).")
        else:
            out.append(f"Items were run with up to {seeds} seeds; seeds of one item are resampled together (the item is the unit).")
    out.extend(wording.time_caveats(cells))
    cf, cfs = cells["censored_frac"].mean(), cells["censored_frac_star"].mean()
    heavy = int((cells["censored_frac"] > 0.1).sum())
    # The study's rules are "relaxed"; lossless speculative methods (Spec-Bench) are not.
    arm, base = ("relaxed", "strict") if not cells["method"].isin(list(LOSSLESS_METHODS)).all() else ("speculative", "baseline")
    if np.isnan(cf):
        out.append("Censoring is unknown: the logs have neither a token budget nor a finish reason.")
    else:
        out.append(f"Censoring: on average {100 * cf:.1f}% of {arm} runs and {100 * cfs:.1f}% of {base} runs stopped at "
                   f"the token budget; {heavy} cells have more than 10% of {arm} runs censored. Their λ counts a cut run "
                   f"at the budget and so understates inflation (see the censoring table for censoring-aware ratios).")
    graded = int((cells["n_graded"] > 0).sum())
    if graded < len(cells):
        out.append(f"{len(cells) - graded} of {len(cells)} cells have no grades (e.g. judge-scored datasets), so accuracy "
                   f"statements cover {graded} cells.")
    if "graded_partial" in cells and cells["graded_partial"].fillna(False).astype(bool).any():
        part = cells[cells["graded_partial"].fillna(False).astype(bool)]
        eg = ", ".join(sorted(part["dataset"].astype(str).unique())[:4])
        out.append(f"{len(part)} cells are graded on fewer than half their items ({eg}; e.g. code datasets whose tests "
                   f"were not at hand, where only runs without code get a verdict): their accuracy change is shown in "
                   f"grey italics and they are left out of the accuracy counts.")
    if runs.skipped.height:
        out.append(f"{runs.skipped.height} runs were skipped or left unpaired (reasons under Provenance); cells use "
                   f"only items where both the {arm} and the {base} run finished.")
    if "wall_time_s" in t.columns and t.get_column("wall_time_s").null_count() < t.height:
        out.append("Wall time is as logged by the generator; it depends on hardware, batch size and server load, which "
                   "the logs describe only partly. Rounds ratios do not.")
    return out


def group_note(cells: pd.DataFrame) -> str:
    """A one-line description of the grouping of the per-cell table."""
    if cells.empty:
        return ""
    n_pairs = cells[["target", "draft"]].drop_duplicates().shape[0]
    n_ds = len(benchmarks(pl.from_pandas(cells[["dataset", "target"]].astype(str))))
    return f"{len(cells)} cells in {n_pairs} target–draft pair(s) × {n_ds} dataset(s)"


def slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def fmt_ratio(x: float) -> str:
    return "–" if x is None or np.isnan(x) else f"{x:.2f}"


#: What the thinking part of each output format is called in the report.
THINKING_NAMES = {"harmony": "the analysis channel (GPT-OSS harmony)", "think_tags": "the <think> block",
                  "none": "no thinking markers (all answer)"}


def thinking_names(analysis: Any) -> dict[str, str]:
    """Per target model, what its thinking part is (from the first text of its runs): GPT-OSS's analysis channel,
    a <think> block (Qwen3, DeepSeek-R1), or none."""
    from lengthlens.data.channels import detect_format

    t = analysis.runs.table
    if not t.height or "text" not in t.columns:
        return {}
    # Row positions first, then one text per target: the texts are most of the table's bytes.
    firsts = (t.select("target", pl.col("text").is_not_null().alias("_has")).with_row_index("_i").filter(pl.col("_has"))
              .group_by("target").agg(pl.col("_i").first()).sort("target"))
    texts = t.get_column("text").gather(firsts.get_column("_i"))
    return {str(target): THINKING_NAMES[detect_format(text, target)]
            for target, text in zip(firsts.get_column("target").to_list(), texts.to_list())}


def thinking_sentence(analysis: Any) -> str:
    """What the thinking part of each model's output is, for the attribution section's opening."""
    names = thinking_names(analysis)
    which = "; ".join(f"{t}: {n}" for t, n in names.items()) or "as split from the texts"
    return f"Thinking is {which}."
