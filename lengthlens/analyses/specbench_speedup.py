"""The speed-up table in Spec-Bench's own form, beside lengthlens' ℓ̄: per method and task, no resampling.

Spec-Bench's ``evaluation/speed.py`` (hemingkx/Spec-Bench, commit fd2c1cd) reports per task
(``mt_bench``, ``translation``, ``summarization``, ``qa``, ``math_reasoning``, ``rag``, ``overall``):

- tokens/s: per question, its tokens over its wall time, both summed over the question's turns;
  the mean over the task's questions; the baseline's likewise (speed.py re-tokenizes the baseline's
  texts, ``len(tokenizer(turn).input_ids) - 1`` per turn; here the baseline's logged ``new_tokens``);
- the speed-up ratio: the method's mean tokens/s over the baseline's, each over its own file's
  questions (``paired=True`` keeps only questions and seeds both sides have); with repeat runs
  (``model_answer_temp0_run_N``, seeds here) ``get_mean_speedup`` averages the per-run ratios and
  reports their standard deviation (ddof 1);
- ``#Mean accepted tokens``: the mean of every verification step's emitted tokens, **bonus token
  included**, pooled over the task's steps: (accepted + rounds) / rounds.

Beside them, lengthlens' ℓ̄ (accepted drafts per round, **bonus excluded**: the mean of per-run
accepted / rounds) and its pooled form, the registry's ``l_bar`` and ``l_bar_pooled`` rows as in the cells, and the arm's coverage of its baseline's
questions (an arm under 95 % is flagged, :mod:`lengthlens.data.coverage`). ERROR turns are not ok
runs and are left out (speed.py counts them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from lengthlens.data.coverage import COMPLETE_SHARE
from lengthlens.data.schema import STRICT
from lengthlens.stats import metrics

if TYPE_CHECKING:
    import pandas as pd

_ARM = ("target", "draft", "dataset", "method", "params")
COLUMNS = ("target", "draft", "method", "params", "dataset", "n_items", "n_items_baseline", "coverage", "complete",
           "n_seeds", "tokens_per_s", "tokens_per_s_baseline", "speedup", "speedup_std", "mean_accepted_tokens",
           "l_bar", "l_bar_pooled")


#: The registry's metrics shown beside Spec-Bench's figures (their definitions are the cells').
L_BAR_METRICS = ("l_bar", "l_bar_pooled")


def _questions(runs) -> pl.DataFrame:
    """Per (arm, seed, question): tokens and wall time summed over turns, and the sums of the quantities the registry's
    ℓ̄ metrics add up (per run, as in the cells), with ``_unknown`` counting runs that lack one of their inputs."""
    t = runs.table if hasattr(runs, "table") else runs
    if "shared_baseline" in t.columns:
        t = t.filter(~pl.col("shared_baseline"))
    t = t.filter((pl.col("status") == "ok") & pl.col("wall_time_s").is_not_null() & pl.col("output_tokens").is_not_null())
    reg = metrics.registry()
    sums = tuple(dict.fromkeys(q for m in L_BAR_METRICS for q in reg.sums_of(m)))
    inputs = tuple(dict.fromkeys(f for m in L_BAR_METRICS for f in reg.inputs_of(m)))
    fields = {f: t.get_column(f).cast(pl.Float64).fill_null(np.nan).to_numpy() for f in inputs if f in t.columns}
    per_run = reg.quantities_of(fields, t.height, sums)
    unknown = (pl.any_horizontal([pl.col(f).is_null() for f in inputs if f in t.columns])
               if all(f in t.columns for f in inputs) else pl.lit(True))
    t = t.with_columns(*[pl.Series(f"_q_{q}", v) for q, v in per_run.items()], unknown.alias("_unknown"))
    return t.group_by(*_ARM, "seed", "item_id").agg(
        pl.col("output_tokens").sum().alias("tokens"), pl.col("wall_time_s").sum().alias("time"),
        pl.col("accepted_tokens").sum().alias("A"), pl.col("draft_rounds").sum().alias("R"),
        *[pl.col(f"_q_{q}").sum() for q in sums], pl.col("_unknown").sum())


def _l_bars(q: pl.DataFrame) -> dict[str, float]:
    """The registry's ℓ̄ metrics over the questions ``q`` (NaN where a run lacks one of their inputs)."""
    if q.is_empty() or q.get_column("_unknown").sum():
        return dict.fromkeys(L_BAR_METRICS, float("nan"))
    sums = {c.removeprefix("_q_"): q.get_column(c).sum() for c in q.columns if c.startswith("_q_")}
    return {m: float(v) for m, v in metrics.registry().evaluate(sums, L_BAR_METRICS).items()}


def _side(q: pl.DataFrame) -> dict[int, float]:
    """Mean tokens/s over questions, per seed (Spec-Bench's ``np.array(speeds).mean()``)."""
    q = q.filter(pl.col("time") > 0).with_columns((pl.col("tokens") / pl.col("time")).alias("speed"))
    return dict(q.group_by("seed").agg(pl.col("speed").mean()).iter_rows())


def _n_items(q: pl.DataFrame) -> int:
    return q.select("dataset", "item_id").unique().height  # question ids may repeat across tasks' folders


def _row(arm: dict, q: pl.DataFrame, base: pl.DataFrame, paired: bool) -> dict:
    if paired:
        on = ["dataset", "seed", "item_id"]
        keys = q.select(on).unique().join(base.select(on).unique(), on=on)
        q, base = q.join(keys, on=on), base.join(keys, on=on)
    tps, tps0 = _side(q), _side(base)
    seeds = sorted(set(tps) & set(tps0))
    ratios = np.array([tps[s] / tps0[s] for s in seeds])
    a, r = q["A"].sum(), q["R"].sum()
    n_base = _n_items(base)
    cov = _n_items(q) / n_base if n_base else float("nan")
    return {**arm, "n_items": _n_items(q), "n_items_baseline": n_base, "coverage": cov,
            "complete": bool(cov >= COMPLETE_SHARE) if n_base else None, "n_seeds": len(seeds),
            "tokens_per_s": float(np.mean([tps[s] for s in seeds])) if seeds else float("nan"),
            "tokens_per_s_baseline": float(np.mean([tps0[s] for s in seeds])) if seeds else float("nan"),
            "speedup": float(ratios.mean()) if seeds else float("nan"),
            "speedup_std": float(ratios.std(ddof=1)) if len(seeds) > 1 else float("nan"),
            "mean_accepted_tokens": (a + r) / r if r else float("nan"), **_l_bars(q)}


def _baseline(q: pl.DataFrame, target: str, draft: str) -> pl.DataFrame:
    """The strict questions serving ``draft``: its own strict arm, else the autoregressive (draftless) one."""
    strict = q.filter((pl.col("method") == STRICT) & (pl.col("target") == target))
    own = strict.filter(pl.col("draft") == draft)
    return own if own.height else strict.filter(pl.col("draft") == "")


def speedup_table(runs, *, paired: bool = False, overall: bool = True) -> pd.DataFrame:
    """Spec-Bench's speed-up table per method and task, with lengthlens' ℓ̄ and the arm's coverage beside it.

    Parameters
    ----------
    runs : a :class:`~lengthlens.data.runset.RunSet` (e.g. ``ll.load(folder, format="specbench")``) or its table.
    paired : only questions and seeds both the method and the baseline have (Spec-Bench: each its own file's).
    overall : add a row ``dataset == "overall"`` per method over all its tasks (speed.py's ``overall``).

    Returns
    -------
    pandas.DataFrame with :data:`COLUMNS`, one row per speculative arm and task: ``speedup`` (Spec-Bench's
    ratio of mean tokens/s), ``speedup_std`` (over seeds, ddof 1), ``mean_accepted_tokens`` (bonus included,
    Spec-Bench's ``#Mean accepted tokens``), ``l_bar`` and ``l_bar_pooled`` (bonus excluded), ``coverage``
    of the baseline's questions and ``complete`` (>= 95 %).

    Examples
    --------
    >>> t = pl.DataFrame({"target": ["m"] * 4, "draft": ["", "", "sps", "sps"], "dataset": ["qa"] * 4,
    ...                   "method": ["strict", "strict", "sps", "sps"], "params": ["strict", "strict", "p", "p"],
    ...                   "seed": [0] * 4, "item_id": ["1", "2", "1", "2"], "status": ["ok"] * 4,
    ...                   "output_tokens": [100, 50, 100, 50], "wall_time_s": [2.0, 1.0, 1.0, 0.5],
    ...                   "accepted_tokens": [0, 0, 60, 30], "draft_rounds": [100, 50, 40, 20]})
    >>> row = speedup_table(t, overall=False).iloc[0]
    >>> float(row.speedup), float(row.mean_accepted_tokens), float(row.l_bar)
    (2.0, 2.5, 1.5)
    """
    import pandas as pd

    q = _questions(runs)
    rows = []
    arms = q.filter(pl.col("method") != STRICT).select(_ARM).unique().sort(_ARM)
    # Every task the method's baseline ran gets a row: one the method never reached reads coverage 0.
    methods = arms.drop("dataset").unique()
    for m in methods.iter_rows(named=True):
        tasks = _baseline(q, m["target"], m["draft"]).get_column("dataset").unique()
        have = arms.filter(pl.all_horizontal([pl.col(k) == v for k, v in m.items()])).get_column("dataset")
        missing = [t for t in tasks.to_list() if t not in set(have.to_list())]
        if missing:
            arms = pl.concat([arms, pl.DataFrame([{**m, "dataset": t} for t in missing], schema=arms.schema)])
    for arm in arms.sort(_ARM).iter_rows(named=True):
        mine = q.filter(pl.all_horizontal([pl.col(k) == v for k, v in arm.items() if k != "dataset"]))
        base = _baseline(q, arm["target"], arm["draft"])
        rows.append(_row(arm, mine.filter(pl.col("dataset") == arm["dataset"]),
                         base.filter(pl.col("dataset") == arm["dataset"]), paired))
    if overall:
        for arm in arms.drop("dataset").unique().sort(["target", "draft", "method", "params"]).iter_rows(named=True):
            mine = q.filter(pl.all_horizontal([pl.col(k) == v for k, v in arm.items()]))
            rows.append(_row({**arm, "dataset": "overall"}, mine, _baseline(q, arm["target"], arm["draft"]), paired))
    return pd.DataFrame(rows, columns=list(COLUMNS))


# ------------------------------------------------------------------------------------------------
# The report's section: Spec-Bench's own table, when Spec-Bench answer files are analysed
# ------------------------------------------------------------------------------------------------

from lengthlens.analyses.outputs import Column, Context, Outputs, ReportAnalysis, Section, Table, keys  # noqa: E402


def from_specbench(runs) -> bool:
    """Whether ``runs`` were read from Spec-Bench answer files (``<task>/model_answer*/<model-id>.jsonl``)."""
    t = runs.table if hasattr(runs, "table") else runs
    if "source" not in t.columns or not t.height:
        return False
    return bool(t.select(pl.col("source").fill_null("").str.contains("/model_answer").any()).item())


class SpecBenchSpeedupReport(ReportAnalysis):
    """specbench_speedup.csv: :func:`speedup_table` in the report, the table Spec-Bench users read, beside ℓ̄."""

    name = "Spec-Bench speed-up"
    stage = "lossless check, method pairs"
    reads = ("output_tokens", "wall_time_s", "accepted_tokens", "draft_rounds")
    outputs = Outputs(
        tables=(Table("specbench_speedup", "speculative arm × task, and `overall` per arm", (
            *keys("method", "dataset", "params", also=("target", "draft")),
            Column("n_items", "questions the arm answered", label="questions", fmt="int"),
            Column("n_items_baseline", "questions its baseline answered", label="baseline questions", fmt="int"),
            Column("coverage", "n_items / n_items_baseline (0: the method never ran the task)", label="coverage",
                   fmt="pct"),
            Column("complete", "coverage ≥ 95 %"),
            Column("n_seeds", "runs (seeds) averaged"),
            Column("speedup", "Spec-Bench's speed-up: mean tokens/s over the baseline's (speed.py)", label="speed-up ×",
                   fmt="f2"),
            Column("speedup_std", "its standard deviation over seeds (ddof 1)"),
            Column("mean_accepted_tokens", "Spec-Bench's #Mean accepted tokens per step, bonus token included",
                   label="mean accepted tokens", fmt="f2"),
            Column("tokens_per_s", "mean over questions of tokens over wall time", label="tokens/s", fmt="f1"),
            Column("tokens_per_s_baseline", "the same for the baseline", label="tokens/s*", fmt="f1"),
            Column("l_bar", "lengthlens' ℓ̄: accepted drafts per round, bonus excluded (mean of per-run ratios)",
                   label="ℓ̄", fmt="f2"),
            Column("l_bar_pooled", "Σ accepted / Σ rounds")),
            written="when Spec-Bench answer files are analysed"),),
        sections=(Section("specbench_speedup", "Spec-Bench's speed-up table", (
            "The table Spec-Bench's evaluation/speed.py prints, computed the same way from the same answer files: per "
            "method and task, the speed-up (mean tokens/s over the baseline's), the mean accepted tokens per step "
            "(bonus token included) and tokens/s, with an overall row per method; ℓ̄ (bonus excluded) beside it. A "
            "task a method never ran is a row of coverage 0 with no speed-up (Provenance names it too). No resampling: the cells above carry the "
            "intervals."), order=52, landscape=False),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        if not from_specbench(ctx.runs):
            return {}
        df = speedup_table(ctx.runs)
        return {} if df.empty else {"specbench_speedup": df}
