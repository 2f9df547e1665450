"""Table 4: forcing the thinking closed near the budget.

An intervention arm ``<method>_force_commit`` with params ``alpha<a>_t<threshold>`` reruns its base
arm (``<method>``, ``alpha<a>``) with the thinking trace forced closed once it reaches
``threshold`` tokens. Each intervention run is paired with the base run of the same item and seed.
"""

from __future__ import annotations

import re

import pandas as pd
import polars as pl

from lengthlens.analyses.outputs import Column, Context, Figure, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.pairing import pair
from lengthlens.data.runset import RunSet
from lengthlens.data.schema import ARM_KEY, GROUP_KEY, UNIT_KEY
from lengthlens.stats.signflip import paired_accuracy_test

FORCE_COMMIT_SUFFIX = "_force_commit"
_THRESHOLD = re.compile(r"_t(\d+)(?=_|$)")


def base_arm_of(method: str, params: str) -> tuple[str, str, int] | None:
    """(base method, base params, threshold) of an intervention arm, or None for an ordinary arm."""
    if not method.endswith(FORCE_COMMIT_SUFFIX):
        return None
    m = _THRESHOLD.search(params)
    if not m:
        return None
    return method[: -len(FORCE_COMMIT_SUFFIX)], params[: m.start()] + params[m.end():], int(m.group(1))


def force_commit_pairs(runs: RunSet) -> pl.DataFrame:
    """Every intervention run with its base run (``_base`` columns) and whether the intervention fired.

    Fired: the intervention run's own ``force_commit_fired`` when logged; otherwise inferred from the
    base run, which must have reached the threshold with its thinking open: its thinking never
    closed and it reached the threshold, or its thinking-token estimate (output tokens times the
    thinking share of content characters) reached the threshold. The inference is approximate where
    the base run closed its thinking late; the generator's flag is exact.
    """
    arms = runs.derived.runs.filter(pl.col("status") == "ok").select(ARM_KEY).unique()
    specs = []
    for r in arms.iter_rows(named=True):
        b = base_arm_of(r["method"], r["params"])
        if b:
            specs.append({**r, "base_method": b[0], "base_params": b[1], "threshold": b[2]})
    if not specs:
        return pl.DataFrame()
    t = runs.derived.ok  # every ok run with its derived columns, split into channels
    spec = pl.DataFrame(specs)
    inter = t.join(spec, on=list(ARM_KEY))
    base = t.rename({"method": "base_method", "params": "base_params"})
    paired = pair(inter, base, on=(*GROUP_KEY, *UNIT_KEY, "base_method", "base_params"), suffix="_base")
    think_tokens = pl.when(pl.col("thinking_closed_base").fill_null(False).not_()).then(pl.col("output_tokens_base")).otherwise(
        pl.col("output_tokens_base") * pl.col("thinking_chars_base")
        / (pl.col("thinking_chars_base") + pl.col("answer_chars_base")).clip(lower_bound=1))
    inferred = (pl.col("output_tokens_base") >= pl.col("threshold")) & (think_tokens >= pl.col("threshold"))
    return paired.with_columns(
        pl.coalesce(pl.col("force_commit_fired"), inferred).alias("fired"),
        pl.col("force_commit_fired").is_not_null().alias("fired_logged"),
    )


#: Table 4's costs over fired pairs: forced runs against their base runs, ratios of sums.
COST_COLUMNS = ("length_ratio", "rounds_ratio", "time_ratio")
#: Table 4 over every run of the arm, fired or not (the accuracy a user of the intervention gets): paired runs,
#: graded pairs, correct base and forced runs among them and their accuracies.
ALL_RUNS_COLUMNS = ("runs", "n_graded_all", "correct_before_all", "correct_after_all", "accuracy_before_all",
                    "accuracy_after_all")


def _costs(d: pl.DataFrame) -> dict[str, float]:
    """Σ forced / Σ base of output tokens, verifier rounds and wall time over the fired pairs (NaN where not logged)."""
    out = {}
    for name, col in zip(COST_COLUMNS, ("output_tokens", "draft_rounds", "wall_time_s")):
        if col not in d.columns or f"{col}_base" not in d.columns or not d.height:
            out[name] = float("nan")
            continue
        both = d.filter(pl.col(col).is_not_null() & pl.col(f"{col}_base").is_not_null())
        den = float(both[f"{col}_base"].cast(pl.Float64).sum()) if both.height else 0.0
        out[name] = float(both[col].cast(pl.Float64).sum()) / den if den > 0 else float("nan")
    return out


def table4(runs: RunSet) -> pd.DataFrame:
    """The study's Table 4: over fired runs, correct before -> after, flips, still capped, the paired accuracy test.

    One row per intervention arm and a total row. ``correct_before``/``correct_after`` count graded
    fired pairs (``n_graded``); ``still_capped`` counts fired runs that hit the budget even so;
    ``accuracy_p`` is the mid-p McNemar test, or the item-level sign-flip test's mid-p with several seeds
    (``accuracy_test`` names it); ``accuracy_p_exact`` the same test's exact p (``mcnemar_p`` is its old
    name, kept for one release); ``length_ratio``, ``rounds_ratio``, ``time_ratio``:
    what forcing cost, Σ forced / Σ base over the fired pairs. Over every run of the arm, fired or not:
    ``runs`` (paired with a base run), ``n_graded_all``, ``correct_before_all``/``correct_after_all`` and
    ``accuracy_before_all``/``accuracy_after_all`` (the base arm's and the intervention arm's accuracy on those pairs).

    Parameters
    ----------
    runs : loaded runs with ``<rule>_force_commit`` arms (params ``alpha<a>_t<threshold>``) and their base arms.

    Returns
    -------
    pandas.DataFrame
        One row per intervention arm and a total row (empty without intervention arms).

    Examples
    --------
    >>> import lengthlens as ll                     # doctest: +SKIP
    >>> ll.table4(ll.load("runs/"))                 # doctest: +SKIP
    """
    pairs = force_commit_pairs(runs)
    cols = [*ARM_KEY, "threshold", "fired", "n_graded", "correct_before", "correct_after", "wrong_to_right",
            "right_to_wrong", "still_capped", "accuracy_p", "accuracy_test", "accuracy_p_exact", "mcnemar_p", *COST_COLUMNS,
            *ALL_RUNS_COLUMNS]
    if pairs.is_empty():
        return pd.DataFrame(columns=cols)
    fired = pairs.filter(pl.col("fired"))

    def graded(d: pl.DataFrame) -> pl.DataFrame:
        return d.filter(pl.col("correct").is_not_null() & pl.col("correct_base").is_not_null())

    def over_all(d: pl.DataFrame) -> dict:
        """Accuracy of every run of the arm (fired or not) and of its base runs, on the pairs graded on both sides."""
        g = graded(d)
        n, before, after = g.height, int(g["correct_base"].sum()), int(g["correct"].sum())
        return {"runs": d.height, "n_graded_all": n, "correct_before_all": before, "correct_after_all": after,
                "accuracy_before_all": before / n if n else float("nan"),
                "accuracy_after_all": after / n if n else float("nan")}

    def row(d: pl.DataFrame, key: dict) -> dict:
        g = graded(d)
        w2r = g.filter(pl.col("correct") & ~pl.col("correct_base")).height
        r2w = g.filter(~pl.col("correct") & pl.col("correct_base")).height
        # The unit is the (arm, item): with several seeds per item, the item-level test (runs are not independent).
        per_item = g.group_by([*ARM_KEY, "item_id"]).agg(pl.len().alias("n"), pl.col("correct").cast(pl.Int64).sum().alias("c"),
                                                          pl.col("correct_base").cast(pl.Int64).sum().alias("c_base"))
        sums = (per_item["n"].to_numpy(), per_item["c"].to_numpy(), per_item["c_base"].to_numpy())
        test, exact = paired_accuracy_test(*sums), paired_accuracy_test(*sums, mid_p=False)
        return {**key, **_costs(d), "fired": d.height, "n_graded": g.height,
                "correct_before": int(g["correct_base"].sum()), "correct_after": int(g["correct"].sum()),
                "wrong_to_right": w2r, "right_to_wrong": r2w, "still_capped": int(d["censored"].sum()),
                "accuracy_p": test.pvalue, "accuracy_test": test.method, "accuracy_p_exact": exact.pvalue,
                "mcnemar_p": exact.pvalue}

    rows = []
    for arm in pairs.select(*ARM_KEY, "threshold").unique().sort(list(ARM_KEY)).iter_rows(named=True):
        mine = [pl.col(k) == v for k, v in arm.items()]
        rows.append({**row(fired.filter(*mine), arm), **over_all(pairs.filter(*mine))})
    rows.append({**row(fired, {**{k: "all" for k in ARM_KEY}, "threshold": None}), **over_all(pairs)})
    return pd.DataFrame(rows, columns=cols)


def _fired(tables) -> bool:
    t4 = tables.get("table4")
    return t4 is not None and not t4.empty and bool((t4["fired"] > 0).any())


class Table4Report(ReportAnalysis):
    """table4.csv: forcing the thinking closed near the budget, per intervention arm."""

    name = "Table 4"
    outputs = Outputs(
        tables=(Table("table4", "intervention arm, and `all`", (
            *keys("dataset", "method", "params", also=("target", "draft", "dataset", "method", "params", "serving")),
            Column("threshold", "thinking tokens at which the intervention forces the thinking closed", fmt="int"),
            Column("fired", "runs where it fired", label="fired", fmt="int"),
            Column("n_graded", "fired pairs graded on both sides", label="graded", fmt="int"),
            Column("correct_before", "of those, correct in the base run", label="correct before", fmt="int"),
            Column("correct_after", "correct in the forced run", label="correct after", fmt="int"),
            Column("wrong_to_right", "wrong before, right after", label="wrong → right", fmt="int"),
            Column("right_to_wrong", "right before, wrong after", label="right → wrong", fmt="int"),
            Column("still_capped", "fired runs that hit the budget even so", label="still capped", fmt="int"),
            Column("accuracy_p", "mid-p McNemar; the item-level sign-flip test's mid-p when items have several seeds",
                   label="paired p", fmt="p"),
            Column("accuracy_test", "which test accuracy_p is"),
            Column("accuracy_p_exact", "the same test's exact p"),
            Column("mcnemar_p", "old name of accuracy_p_exact (kept for one release)"),
            Column("length_ratio", "Σ forced / Σ base output tokens over the fired pairs"),
            Column("rounds_ratio", "the same for verifier rounds"), Column("time_ratio", "the same for wall time"),
            Column("runs", "every run of the arm paired with its base run, fired or not"),
            Column("n_graded_all", "of those, pairs graded on both sides"),
            Column("correct_{before,after}_all", "correct base runs and correct forced runs among those graded pairs"),
            Column("accuracy_before_all", "the base arm's accuracy over every graded pair", label="acc. all runs: base",
                   fmt="pct"),
            Column("accuracy_after_all", "the intervention arm's accuracy over every graded pair, fired or not",
                   label="forced", fmt="pct")),
            written="with force-commit arms (`<rule>_force_commit`, params `alpha<a>_t<threshold>`)",
            caption="Table 4: force-commit interventions"),),
        sections=(Section("table4", "Table 4: force-commit interventions", (
            "Runs where the intervention fired and what happened to their correctness: McNemar's exact test on the "
            "discordant pairs (wrong→right against right→wrong; the item-level sign-flip test when items have several "
            "seeds, see accuracy_test in table4.csv); 'still capped' runs hit the budget anyway."), order=54,
            landscape=False, always=True),),
        figures=(Figure("table4_costs", when=_fired),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        t4 = table4(ctx.runs)
        return {} if t4.empty else {"table4": t4}
