"""Booktabs LaTeX tables for papers: table3.tex, table4.tex, attribution.tex (``\\input`` them; needs booktabs)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lengthlens.report.columns import fmt

_ESC = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def tex_escape(s: str) -> str:
    """Escape LaTeX's special characters in plain text."""
    return "".join(_ESC.get(ch, ch) for ch in str(s))


def _num(v: Any, kind: str) -> str:
    s = fmt(v, kind)
    if s == "–":
        return "--"
    s = s.replace("−", "-")
    if s.startswith("<"):
        return "$<$" + tex_escape(s[1:])
    return tex_escape(s)


def booktabs(df: pd.DataFrame, columns: Sequence[tuple[str, str, str]], *, caption: str, label: str,
             total_row: str | None = None, group: str | None = None) -> str:
    """A table environment with booktabs rules; ``columns`` = (column, header (LaTeX), format kind); a midrule before the total row."""
    align = "".join("l" if k == "text" else "r" for _, _, k in columns)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", f"\\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(h for _, h, _ in columns) + r" \\", r"\midrule"]
    prev = None
    for r in df.to_dict("records"):
        first = str(r.get(columns[0][0], ""))
        if total_row is not None and first == total_row:
            lines.append(r"\midrule")
        if group is not None and prev is not None and r.get(group) != prev:
            lines.append(r"\addlinespace")
        prev = r.get(group) if group else None
        cells = [tex_escape(str(r.get(c))) if k == "text" else _num(r.get(c), k) for c, _, k in columns]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", f"\\caption{{{caption}}}", f"\\label{{{label}}}", r"\end{table}", ""]
    return "\n".join(lines)


TABLE3_TEX = [
    ("method", "Rule", "text"), ("n_cells", "Cells", "int"),
    ("gain_mean", r"gain", "f2"), ("lambda_mean", r"$\lambda$", "f2"),
    ("rounds_ratio_mean", r"$R/R^*$", "f2"), ("rounds_ratio_median", r"$R/R^*$ med.", "f2"),
    ("time_ratio_mean", r"$T/T^*$", "f2"), ("time_ratio_median", r"$T/T^*$ med.", "f2"),
    ("n_lambda_lo_gt_1", r"$\lambda_{lo}>1$", "int"), ("n_rounds_ratio_gt_1", r"$R/R^*>1$", "int"),
    ("n_time_ratio_gt_1", r"$T/T^*>1$", "int"), ("n_graded", "graded", "int"),
    ("n_drop_2pp", r"drop${>}2$pp (test)", "int"), ("n_drop_2pp_point", r"drop${\geq}2$pp (pt.)", "int"),
    ("accuracy_delta_pp_mean", r"$\Delta$acc", "f1"),
]


def _pick(df: pd.DataFrame, names: Sequence[str]) -> str | None:
    return next((n for n in names if n in df.columns), None)


def table4_tex(t4: pd.DataFrame) -> str:
    """Table 4: one row per force-commit arm and a total row."""
    label_col = _pick(t4, ("arm", "method", "label", "name")) or t4.columns[0]
    cols: list[tuple[str, str, str]] = [(label_col, "Arm", "text")]
    for c in ("dataset", "params"):
        if c in t4.columns and c != label_col:
            cols.append((c, c.capitalize(), "text"))
    for c, h in (("fired", "Fired"), ("correct_before", "Correct before"), ("correct_after", "Correct after"),
                 ("wrong_to_right", r"W$\to$R"), ("right_to_wrong", r"R$\to$W"), ("still_capped", "Still capped")):
        if c in t4.columns:
            cols.append((c, h, "int"))
    if "accuracy_p" in t4.columns:
        cols.append(("accuracy_p", "Paired $p$", "p"))
    total = next((str(v) for v in t4[label_col].astype(str) if v.lower() in ("total", "all")), None)
    return booktabs(t4, cols, caption="Force-commit interventions: runs where the intervention fired, correctness before "
                    "and after, and the paired test on the discordant runs (McNemar's exact test; the item-level sign-flip "
                    "test when items have several seeds).", label="tab:force-commit", total_row=total)


def attribution_tex(attr: pd.DataFrame) -> str:
    """Attribution per dataset and rule: extra characters per run (mean over pairs) and the thinking share of the pooled extra."""
    per = attr["n_runs"].where(attr["n_runs"] > 0) if "n_runs" in attr.columns else 1.0
    d = attr.assign(extra=attr["extra_chars"] / per, thinking=attr["extra_chars_thinking"] / per)
    g = d.groupby(["dataset", "method"], sort=True)
    agg = g.agg(cells=("extra", "size"), extra=("extra", "mean"), thinking=("thinking", "mean")).reset_index()
    sums = g[["extra_chars", "extra_chars_thinking"]].sum().reset_index()
    agg["share"] = [t / e if e and not math.isnan(e) else float("nan")
                    for t, e in zip(sums["extra_chars_thinking"], sums["extra_chars"])]
    cols = [("dataset", "Dataset", "text"), ("method", "Rule", "text"), ("cells", "Cells", "int"),
            ("extra", "Extra chars/run", "f0"), ("thinking", "in thinking", "f0"), ("share", "Thinking share", "f2")]
    return booktabs(agg, cols, caption="Where the extra characters go: extra characters per run (relaxed minus strict, "
                    "mean over target--draft pairs) and the part in the thinking (GPT-OSS's analysis channel, or a \\texttt{think} block); share = pooled thinking / "
                    "pooled extra characters.", label="tab:attribution", group="dataset")


def write_latex(analysis: Any, out: Path) -> list[Path]:
    """Write table3.tex (always, when there are cells), table4.tex and attribution.tex (when the analysis has them)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    t3 = analysis.tables.get("table3")
    if t3 is not None and not t3.empty:
        cols = [c for c in TABLE3_TEX if c[0] in t3.columns]
        by_serving = "serving" in t3.columns  # one block of rules per serving condition; its `all` row is "all" too
        cols = [("serving", "Serving", "text"), *cols] if by_serving else cols
        p = out / "table3.tex"
        p.write_text(booktabs(t3, cols, caption="Per-round gain against measured cost per rule: means over cells (the "
                              f"{analysis.settings.get('alphas', 'loosest')} $\\alpha$ per rule and dataset), medians, and "
                              "how many cells lose. drop${\\geq}2$pp (int.): upper interval limit of the accuracy change $\\leq -2$ points; "
                              "(pt.): the study's point rule.", label="tab:length-illusion", total_row="all",
                              group="serving" if by_serving else None), encoding="utf-8")
        written.append(p)
    t4 = analysis.tables.get("table4")
    if t4 is not None and not t4.empty:
        p = out / "table4.tex"
        p.write_text(table4_tex(t4), encoding="utf-8")
        written.append(p)
    attr = analysis.tables.get("attribution")
    if attr is not None and not attr.empty and {"extra_chars", "extra_chars_thinking"} <= set(attr.columns):
        p = out / "attribution.tex"
        p.write_text(attribution_tex(attr), encoding="utf-8")
        written.append(p)
    return written
