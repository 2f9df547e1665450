"""Write the generated parts of docs/ from the code: outputs.md and the field table from the metric registry, api.md
from the public functions' docstrings.

    python docs/make_docs.py            # rewrite them
    python docs/make_docs.py --check    # exit 1 when a generated file is out of date (tests/test_docs.py runs this)
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

#: The columns of the outputs other than cells.csv, one line each (cells.csv's come from the registry and cells.py).
OTHER_OUTPUTS: dict[str, tuple[str, str]] = {
    "arms.csv": ("arm whose runs enter a cell", "target, draft, dataset, method, params, alpha, n_runs (loaded), n_ok "
                        "(ok runs the cells use: the means are over these), n_items, mean_l_bar, "
                        "mean_completion_length, mean_draft_rounds, mean_wall_time_s, accuracy, n_graded, censored_frac, "
                        "budget; Kaplan–Meier `km_q25`, `km_median`, `km_q75` of completion length with `_lo`/`_hi` "
                        "(NaN where not identified); where lengthlens' graders judged runs, `accuracy_<other policy>` "
                        "(the same runs graded under the other policy) and n_policy_disagree"),
    "arms_excluded.csv": ("(arm, reason) with ok runs that enter no cell", "target, draft, dataset, method, params, reason, "
                          "n_runs, n_items, budget, mean_completion_length, accuracy"),
    "verdicts.csv": ("scope (table3, all) × pair (or `all`) × rule", "scope, target, draft, method, n_cells, "
                     "n_rounds_/n_time_ faster, slower, cant_tell (from the intervals of R/R* and T/T*), n_graded, "
                     "n_accuracy_worse (loss flag), n_accuracy_no_change, accuracy_mdd_pp_median, n_small_excluded"),
    "table3_pairs.csv": ("(target–draft pair) × rule, and `all`", "target, draft, then table3.csv's columns on the "
                         "pair's cells alone (written with several pairs)"),
    "drilldown.csv": ("(cell, item) among the items driving it", "keys, item_id, n_runs, L, L_star, lambda_item, "
                      "lambda_without (the cell's λ without the item), lambda_shift, correct_change, driver"),
    "time_model.csv": ("cell", "keys, n_runs, seconds_per_round, seconds_fixed (least-squares T = a + b·R over the relaxed "
                       "runs), the same _star for the baseline runs, rounds_ratio, time_ratio, time_ratio_predicted "
                       "(the arm's rounds at the baseline's fitted cost)"),
    "table3.csv": ("rule, and `all`", "method, n_cells, gain/lambda/rounds_ratio/time_ratio/time_per_round_ratio "
                                     "_mean and _median, n_lambda_gt_1, n_lambda_lo_gt_1, n_rounds_ratio_gt_1, "
                                     "n_time_ratio_gt_1, n_graded, n_graded_partial, n_drop_2pp (one-sided loss test), "
                                     "n_drop_2pp_point (point rule), n_drop_holm, n_drop_bh, accuracy_mdd_pp_median, "
                                     "accuracy_delta_pp_mean "
                                     "(+_lo/_hi), n_predicted_win_time_loses, n_measured_win_time_loses, n_small_excluded"),
    "alpha_selected.csv": ("(target, draft, dataset, rule)", "alpha_selected, params_selected, n_items, n_items_baseline, "
                                                            "complete, alphas_complete, alphas_incomplete"),
    "skipped.csv": ("run not loaded or not paired", "path, reason, stage (read, validate, pairing)"),
    "censoring.csv": ("cell", "keys, n_items, n_runs(_star), budget(_star), budgets_differ, censored_frac(_star); "
                              "Kaplan–Meier `km_{q25,median,q75}[_star]` with `_lo`, `_hi`, `_reason`; restricted mean "
                              "`rmst(_star)` up to `rmst_tau`, `rmst_ratio` (+_lo/_hi); `lambda_plain` (the cell's λ), "
                              "`lambda_uncensored_pairs` (+_lo/_hi, n_uncensored_pairs); `gm_ratio_aft_lognormal` (and "
                              "`gm_ratio_aft_weibull` when asked for; geometric-mean time ratios, not λ; old names "
                              "`lambda_aft_*` kept for one release) with `_lo`, `_hi`, `_sigma`, "
                              "`_converged`, `_boot_infinite`, `_boot_failed`, `_reason`; n_resamples, n_resamples_aft, aft_ci"),
    "attribution.csv": ("cell", "keys, n_items, n_runs, chars_mean(_star), extra_chars = Σ(chars − chars*), "
                                "extra_chars_thinking, extra_chars_answer, extra_chars_mean (+_lo/_hi), thinking_share = "
                                "Σ(think − think*)/Σ(chars − chars*) (+_lo/_hi; NaN with thinking_share_reason when "
                                "undefined), item_share_median/_q25/_q75, n_runs_share_defined"),
    "attribution_summary.csv": ("scope (all, table3) × pair (`all`: pooled; per pair with several) × rule, and `all`",
                                "scope, target, draft, n_cells, n_cells_longer, n_share_defined, n_share_undefined, thinking_share_median, "
                                "thinking_share_pooled, n_share_lo_ge_90, n_share_lo_ge_92, n_share_point_ge_90, "
                                "n_share_point_ge_92"),
    "table4.csv": ("intervention arm, and `all`", "target, draft, dataset, method, params, threshold, fired, n_graded, "
                                                 "correct_before, correct_after, wrong_to_right, right_to_wrong, "
                                                 "still_capped, accuracy_p (mid-p), accuracy_test, accuracy_p_exact "
                                                 "(mcnemar_p: its old name), "
                                                 "length_ratio, rounds_ratio, time_ratio (Σ forced / Σ base, fired pairs)"),
    "extra_tokens.csv": ("cell (runs with proposals.jsonl)", "keys, n_runs, n_runs_with_proposals, n_rows, n_proposed, "
                                                             "n_accepted, n_strict_accepted, n_lossy_only, "
                                                             "n_strict_only_rejected, lossy_only_per_proposed, "
                                                             "lossy_only_per_accepted, p/rank _lossy_only_ and "
                                                             "_strict_accepted_ median and mean"),
    "lossless.csv": ("cell of a lossless speculative method", "keys, n_runs, n_outputs_differ, n_lengths_differ, lambda "
                                                              "(+_lo/_hi), accuracy_delta_pp, verdict (in words)"),
    "methods.csv": ("pair of speculative methods of one target and dataset", "target, dataset, x_/y_ method, params, "
                    "draft, n_items, n_runs, lambda, rounds_ratio, time_ratio, gain, accuracy_delta_pp (each +_lo/_hi; "
                    "ratios are x over y), accuracy_p (mid-p; mcnemar_p: the exact p), unavailable"),
    "serving.csv": ("arm × serving condition (only with several conditions)",
                    "target, draft, dataset, method, params, series (the condition without its load part), serving, "
                    "load_axis, load, n_items, small_n, rounds_ratio, time_ratio, throughput_ratio (each +_lo/_hi), "
                    "advantage_lost_at"),
    "report.html, report.pdf": ("", "the report; `--latex` adds table3.tex, table4.tex, attribution.tex"),
}


def outputs_md() -> str:
    from lengthlens.analyses.cells import CELL_COLUMNS, DEPRECATED_COLUMNS
    from lengthlens.stats.metrics import REGISTRY

    lines = ["# Outputs", "", "<!-- generated by docs/make_docs.py from lengthlens.stats.metrics and lengthlens.analyses.cells:"
             " edit those, then run it -->", "",
             "`lengthlens report RUNS --out OUT` writes these files (the CSVs are what the report shows, every row).", "",
             "## cells.csv: one row per cell", "",
             "### Metrics", "",
             "Each metric is one row of the registry (`lengthlens/stats/metrics.py`): a function of sums over the cell's "
             "paired runs. Metrics with an interval have `<stem>_lo` and `<stem>_hi` columns.", "",
             "| column | label | definition | meaning | interval | needs |", "|---|---|---|---|---|---|"]
    for m in REGISTRY.metrics:
        interval = "none" if m.interval is None else f"`{m.stem}_lo`, `{m.stem}_hi` ({m.interval_method})"
        needs = ", ".join(f"`{f}`" for f in REGISTRY.inputs_of(m.name)) or "verdicts (`correct`)"
        lines.append(f"| `{m.name}` | {m.label} | {m.formula} | {m.description} | {interval} | {needs} |")
    lines += ["", "### Other columns", "", "| column | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {text} |" for name, text in CELL_COLUMNS.items()]
    lines += ["", f"Old column names kept for one release: {', '.join(f'`{o}` (= `{n}`)' for o, n in DEPRECATED_COLUMNS.items())}.",
              "", "## The other files", "", "| file | one row per | columns |", "|---|---|---|"]
    lines += [f"| `{name}` | {per} | {cols} |" for name, (per, cols) in OTHER_OUTPUTS.items()]
    lines += ["", "The per-run quantities the metrics sum:", "", "| quantity | per paired run | needs |", "|---|---|---|"]
    lines += [f"| `{q.name}` | {q.description} | {', '.join(f'`{f}`' for f in q.inputs) or '–'} |" for q in REGISTRY.quantities]
    return "\n".join(lines) + "\n"


def field_table() -> str:
    """Which run fields enable which metrics (the registry's inputs), and what the other analyses read."""
    from lengthlens.stats.metrics import REGISTRY

    by_inputs: dict[tuple[str, ...], list[str]] = {}
    for m in REGISTRY.metrics:
        by_inputs.setdefault(tuple(sorted(REGISTRY.inputs_of(m.name))), []).append(m.name)
    words = {"censored": "`finish_reason` or `max_new_tokens` (with `output_tokens`)"}
    rows = ["| field(s), on both sides of a pair | enables |", "|---|---|"]
    for inputs, names in sorted(by_inputs.items(), key=lambda kv: (len(kv[0]), kv[0])):
        fields = " and ".join(words.get(f, f"`{f}`") for f in inputs) or "`correct` (or `text` and a grader, or a grade file)"
        rows.append(f"| {fields} | {', '.join(f'`{n}`' for n in names)} |")
    rows += ["| `output_tokens` and `finish_reason` or `max_new_tokens` | `censoring.csv` |",
             "| `text` (or logged `analysis_chars`/`final_chars`) | `attribution.csv`, grading |",
             "| `proposals.jsonl` beside a raw run | `extra_tokens.csv` |"]
    return "\n".join(rows) + "\n"


def _signature(obj) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    return re.sub(r"<([^<>]*) at 0x[0-9a-f]+>", r"\1", sig)


def api_md() -> str:
    import lengthlens

    lines = ["# API reference", "", "<!-- generated by docs/make_docs.py from the docstrings: edit those, then run it -->", "",
             "`import lengthlens as ll`: every name below is `ll.<name>`.", ""]
    for name in sorted(n for n in lengthlens.__all__ if n != "__version__"):
        obj = getattr(lengthlens, name)
        kind = "class" if inspect.isclass(obj) else "function"
        lines += [f"## `{name}{_signature(obj)}`" if kind == "function" else f"## class `{name}`", "",
                  f"*{obj.__module__}*", "", inspect.cleandoc(obj.__doc__ or "(no docstring)"), ""]
    return "\n".join(lines)


GENERATED = {"outputs.md": outputs_md, "api.md": api_md}
#: Generated sections inside hand-written files: (file, marker) -> text.
SECTIONS = {("inputs.md", "fields"): field_table}


def _with_section(text: str, marker: str, body: str) -> str:
    start, end = f"<!-- generated:{marker} -->", f"<!-- /generated:{marker} -->"
    if start not in text or end not in text:
        raise SystemExit(f"marker {start} ... {end} missing")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{body}{end}{rest.split(end, 1)[1]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a generated file is out of date")
    args = ap.parse_args()
    stale = []
    wanted = {DOCS / name: make() for name, make in GENERATED.items()}
    for (name, marker), make in SECTIONS.items():
        path = DOCS / name
        wanted[path] = _with_section(wanted.get(path, path.read_text(encoding="utf-8")), marker, make())
    for path, text in wanted.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python docs/make_docs.py)")
        return 1
    print("docs up to date" if not stale else f"wrote {', '.join(stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
