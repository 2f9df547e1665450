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
    ``coverage`` (n_items / n_items_baseline) and ``complete`` (coverage >= threshold; null without a
    baseline), sorted by arm. Baseline arms are listed with coverage 1.

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
    return (out.with_columns((pl.col("coverage") >= threshold).alias("complete"))
            .select(*ARM_KEY, "n_items", "n_items_baseline", "coverage", "complete").sort(ARM_KEY))


def incomplete_lines(runs, *, threshold: float = COMPLETE_SHARE) -> list[str]:
    """One line per arm covering fewer than ``threshold`` of its baseline's items (for summaries)."""
    cov = arm_coverage(runs, threshold=threshold).filter(~pl.col("complete").fill_null(True))
    return [f"incomplete arm {r['target']} / {r['draft']} / {r['dataset']} / {r['method']} / {r['params']}"
            f"{' / ' + r['serving'] if r['serving'] else ''}: "
            f"{r['n_items']} of the baseline's {r['n_items_baseline']} items ({100 * r['coverage']:.0f}%)"
            for r in cov.iter_rows(named=True)]
