"""Accuracy under both grading policies: the runs lengthlens' graders judged, graded again under the other policy.

Verdicts from the records or from grade files do not depend on the policy; those from lengthlens'
graders (``grade_source`` ``grader:<name>``) do: the default policy reads only the answer part and
counts a run cut inside its thinking as incorrect, the study's reads the text after the last
final-channel marker, else the whole text (:mod:`lengthlens.data.grading.policy`). Code is never
executed here: code datasets keep one policy's verdicts and are left out of the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from lengthlens.data.runset import RunSet
from lengthlens.data.schema import ARM_KEY

__all__ = ["GRADING_DISAGREEMENT_SHARE", "PolicyComparison", "other_policy", "policy_comparison"]

#: Above this share of regraded runs whose verdict the policy changes, the report warns.
GRADING_DISAGREEMENT_SHARE = 0.03


def other_policy(policy: str) -> str:
    """The policy the report did not use (``default`` <-> ``study``)."""
    return "study" if policy == "default" else "default"


@dataclass(frozen=True)
class PolicyComparison:
    """Per arm, the accuracy of the runs the cells use under the report's policy and under the other one.

    ``arms``: ARM_KEY, ``n_regraded`` (runs graded by lengthlens' graders and graded again),
    ``n_policy_disagree`` (of those, verdicts that differ), ``accuracy_<other>`` (the arm's accuracy
    with those runs' verdicts under the other policy; records and grade files unchanged).
    """

    policy: str
    other: str
    arms: pl.DataFrame
    n_regraded: int
    n_disagree: int

    @property
    def disagree_share(self) -> float:
        return self.n_disagree / self.n_regraded if self.n_regraded else 0.0

    @property
    def warns(self) -> bool:
        """Whether the policies disagree on more than :data:`GRADING_DISAGREEMENT_SHARE` of the regraded runs."""
        return self.disagree_share > GRADING_DISAGREEMENT_SHARE


def policy_comparison(runs: RunSet) -> PolicyComparison | None:
    """Grade again, under the other policy, every run the cells use that lengthlens' graders judged.

    Parameters
    ----------
    runs : loaded runs (with their texts).

    Returns
    -------
    PolicyComparison or None
        None when no run the cells use was graded by lengthlens' graders (records or grade files only).

    Examples
    --------
    >>> import lengthlens as ll                                       # doctest: +SKIP
    >>> policy_comparison(ll.load("runs/")).disagree_share            # doctest: +SKIP
    """
    from lengthlens.data.grading import grade_frame

    t = runs.table
    if "grade_source" not in t.columns or "text" not in t.columns or not t.height:
        return None
    used = t.filter(pl.col("paired"))
    if "shared_baseline" in used.columns:
        used = used.filter(~pl.col("shared_baseline"))
    by_grader = pl.col("grade_source").str.starts_with("grader:").fill_null(False) & pl.col("text").is_not_null()
    todo = used.filter(by_grader)
    if not todo.height:
        return None
    other = other_policy(runs.grading)
    regraded = grade_frame(todo.drop("correct"), policy=other, execute_code=False).get_column("correct")
    todo = todo.select(*ARM_KEY, pl.col("correct").alias("_c")).with_columns(regraded.alias("_o"))
    both = pl.col("_c").is_not_null() & pl.col("_o").is_not_null()
    per_arm = todo.group_by(ARM_KEY).agg(both.sum().alias("n_regraded"),
                                         (both & (pl.col("_c") != pl.col("_o"))).sum().alias("n_policy_disagree"),
                                         # the change in the count of correct runs when those verdicts switch policy
                                         pl.when(both).then(pl.col("_o").cast(pl.Int64) - pl.col("_c").cast(pl.Int64))
                                         .otherwise(0).sum().alias("_shift"))
    graded = used.group_by(ARM_KEY).agg(pl.col("correct").cast(pl.Int64).sum().alias("_correct"),
                                        pl.col("correct").is_not_null().sum().alias("_graded"))
    arms = (graded.join(per_arm, on=list(ARM_KEY), how="left")
            .with_columns(pl.col("n_regraded").fill_null(0), pl.col("n_policy_disagree").fill_null(0), pl.col("_shift").fill_null(0))
            .with_columns(((pl.col("_correct") + pl.col("_shift")) / pl.col("_graded")).alias(f"accuracy_{other}"))
            .drop("_correct", "_graded", "_shift").sort(list(ARM_KEY)))
    return PolicyComparison(runs.grading, other, arms, int(arms["n_regraded"].sum()), int(arms["n_policy_disagree"].sum()))
