"""How much of its baseline's items each arm covers, so an incomplete arm is never presented as complete."""

from __future__ import annotations

import polars as pl

from lengthlens.data.schema import ARM_KEY, GROUP_KEY, STRICT
from lengthlens.data.serving import with_serving

#: An arm covering fewer than this share of its baseline's items is flagged incomplete (one failed run does not
#: demote an arm; the study's 3-of-12 calibration probes stay incomplete).
COMPLETE_SHARE = 0.95


def arm_coverage(runs, *, threshold: float = COMPLETE_SHARE) -> pl.DataFrame:
    """Per arm: items with an ok run, items of its baseline, the share covered, and whether that is complete.

    An EAGLE answer file cut at 164 of Spec-Bench's 480 questions gives a cell over those 164 items
    only; its numbers are not the method's on the benchmark. The baseline of an arm is the strict arm
    of its (target, draft, dataset), a shared autoregressive baseline included.

    Parameters
    ----------
    runs : a :class:`~lengthlens.data.runset.RunSet` or its table.
    threshold : the share of the baseline's items below which an arm is incomplete (0.95).

    Returns
    -------
    polars.DataFrame with the arm key, ``n_items``, ``n_items_baseline`` (null without a baseline),
    ``coverage`` (n_items / n_items_baseline), ``complete`` (coverage >= threshold; null without a
    baseline) and ``not_run`` (a row of :func:`not_run`: a dataset the method never reached, coverage 0),
    sorted by arm. Baseline arms are listed with coverage 1.

    Examples
    --------
    >>> t = pl.DataFrame({"target": ["t"] * 5, "draft": ["d"] * 5, "dataset": ["x"] * 5,
    ...                   "method": ["strict"] * 4 + ["eagle"], "params": ["strict"] * 4 + ["p"],
    ...                   "item_id": ["1", "2", "3", "4", "1"], "status": ["ok"] * 5})
    >>> arm_coverage(t).filter(pl.col("method") == "eagle")["coverage"].to_list()
    [0.25]
    """
    t = with_serving(runs.table if hasattr(runs, "table") else runs)
    ok = t.filter(pl.col("status") == "ok")
    items = ok.group_by(ARM_KEY).agg(pl.col("item_id").n_unique().alias("n_items"))
    base = (ok.filter(pl.col("method") == STRICT).group_by(GROUP_KEY)
            .agg(pl.col("item_id").n_unique().alias("n_items_baseline")))
    logged = ~pl.col("shared_baseline") if "shared_baseline" in t.columns else pl.lit(True)
    arms = t.filter(logged).select(ARM_KEY).unique()
    # A shared baseline's copies make it each draft's baseline; the arm itself is listed as logged (draft "").
    out = (arms.join(items, on=list(ARM_KEY), how="left")
           .join(base, on=list(GROUP_KEY), how="left", nulls_equal=True)
           .with_columns(pl.col("n_items").fill_null(0).cast(pl.Int64))
           .with_columns((pl.col("n_items") / pl.col("n_items_baseline")).alias("coverage")))
    out = (out.with_columns((pl.col("coverage") >= threshold).alias("complete"), pl.lit(False).alias("not_run"))
           .select(*ARM_KEY, "n_items", "n_items_baseline", "coverage", "complete", "not_run"))
    return pl.concat([out, not_run(t)], how="vertical_relaxed").sort(ARM_KEY)


def not_run(runs) -> pl.DataFrame:
    """A row (coverage 0, ``not_run``) for every dataset a method never reached though its target had a baseline there.

    A method run on some of a benchmark's tasks (EAGLE on mt_bench and translation only) has no arm, and so no
    cell, on the others; without a row it would look as if those tasks did not exist. A method counts as run on
    a dataset when any of its runs is there (whatever their status); the baseline is the strict arm of the same
    target and serving condition with the method's draft or no draft (a shared autoregressive baseline).

    Parameters
    ----------
    runs : a :class:`~lengthlens.data.runset.RunSet` or its table.

    Returns
    -------
    polars.DataFrame with :func:`arm_coverage`'s columns: ``params`` empty, ``n_items`` 0, ``coverage`` 0,
    ``complete`` False and ``not_run`` True.

    Examples
    --------
    >>> t = pl.DataFrame({"target": ["t"] * 4, "draft": ["", "", "d", "d"], "dataset": ["a", "b", "a", "a"],
    ...                   "method": ["strict", "strict", "eagle", "eagle"], "params": ["strict", "strict", "p", "p"],
    ...                   "item_id": ["1", "1", "1", "2"], "status": ["ok"] * 4})
    >>> not_run(t).select("dataset", "method", "coverage", "not_run").rows()
    [('b', 'eagle', 0.0, True)]
    """
    t = with_serving(runs.table if hasattr(runs, "table") else runs)
    if "shared_baseline" in t.columns:
        t = t.filter(~pl.col("shared_baseline"))
    schema = {**{k: pl.String for k in ARM_KEY}, "n_items": pl.Int64, "n_items_baseline": pl.Int64,
              "coverage": pl.Float64, "complete": pl.Boolean, "not_run": pl.Boolean}
    methods = t.filter(pl.col("method") != STRICT).select("target", "draft", "serving", "method").unique()
    base = (t.filter((pl.col("method") == STRICT) & (pl.col("status") == "ok"))
            .group_by("target", "draft", "dataset", "serving").agg(pl.col("item_id").n_unique().alias("n_items_baseline")))
    if methods.height == 0 or base.height == 0:
        return pl.DataFrame(schema=schema)
    own = methods.join(base, on=["target", "draft", "serving"], how="inner")
    shared = methods.join(base.filter(pl.col("draft") == "").drop("draft"), on=["target", "serving"], how="inner")
    cand = (pl.concat([own, shared.select(own.columns)]).sort("n_items_baseline", descending=True)
            .unique(subset=["target", "draft", "dataset", "serving", "method"], keep="first"))
    ran = t.select("target", "draft", "dataset", "serving", "method").unique()
    missing = cand.join(ran, on=["target", "draft", "dataset", "serving", "method"], how="anti")
    return (missing.with_columns(pl.lit("").alias("params"), pl.lit(0, dtype=pl.Int64).alias("n_items"),
                                 pl.lit(0.0).alias("coverage"), pl.lit(False).alias("complete"), pl.lit(True).alias("not_run"))
            .select(*ARM_KEY, "n_items", pl.col("n_items_baseline").cast(pl.Int64), "coverage", "complete", "not_run")
            .cast(schema).sort(ARM_KEY))


def incomplete_lines(runs, *, threshold: float = COMPLETE_SHARE) -> list[str]:
    """One line per arm covering fewer than ``threshold`` of its baseline's items (for summaries)."""
    cov = arm_coverage(runs, threshold=threshold).filter(~pl.col("complete").fill_null(True))
    lines = [f"incomplete arm {r['target']} / {r['draft']} / {r['dataset']} / {r['method']} / {r['params']}"
             f"{' / ' + r['serving'] if r['serving'] else ''}: "
             f"{r['n_items']} of the baseline's {r['n_items_baseline']} items ({100 * r['coverage']:.0f}%)"
             for r in cov.filter(~pl.col("not_run")).iter_rows(named=True)]
    missing = cov.filter(pl.col("not_run"))
    for key, part in missing.partition_by(["target", "draft", "serving", "method"], as_dict=True, maintain_order=True).items():
        tgt, drf, serving, method = key
        lines.append(f"not run: {method} ({tgt} / {drf}{' / ' + serving if serving else ''}) never ran on "
                     f"{', '.join(part['dataset'].to_list())} (the baseline has {', '.join(str(n) for n in part['n_items_baseline'])} "
                     f"items there): coverage 0, no cell")
    return lines
