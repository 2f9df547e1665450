"""Cross-record rules on the normalized table: what single-record validation cannot see.

Each rule returns the rows it removes with the reason (they go to the skipped list) or warnings;
nothing is dropped silently.
"""

from __future__ import annotations

import polars as pl

from lengthlens.data.serving import serving_conditions, with_serving
from lengthlens.data.schema import (
    ARM_KEY,
    GROUP_KEY,
    LENGTH_FINISH_REASONS,
    STRICT,
    UNIT_KEY,
)

#: Settings that must agree between an arm and its baseline for lengths to be comparable: the sampling
#: settings across the group, the budget unit by unit (tools such as AIPerf give each request its own).
PAIRING_SETTINGS = ("max_new_tokens", "temperature", "top_p")
GROUP_SETTINGS = ("temperature", "top_p")
UNIT_SETTINGS = ("max_new_tokens",)


def _skips(df: pl.DataFrame, reason: pl.Expr, stage: str) -> pl.DataFrame:
    return df.select(pl.col("source").fill_null("(unknown)").alias("path"), reason.alias("reason"), pl.lit(stage).alias("stage"))


def drop_duplicates(table: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Keep the first run of each (arm, item, seed) in input order; later copies are skipped, naming the kept one.

    The arm includes its serving condition: the same item served at two concurrencies is two runs.
    """
    table = with_serving(table)
    key = [*ARM_KEY, *UNIT_KEY]
    first = table.select(pl.struct(key).is_first_distinct().alias("_first")).to_series()
    if first.all():  # the usual case: a mask, no copy of the table
        return table, _skips(table.head(0), pl.lit(""), "validate")
    keep, dup = table.filter(first), table.filter(~first)
    kept = keep.select(*key, pl.col("source").alias("_first_source"))
    dup = dup.join(kept, on=key, how="left", nulls_equal=True, maintain_order="left")
    skipped = _skips(dup, pl.format("duplicate of {} (same arm, item and seed)", pl.col("_first_source").fill_null("(unknown)")), "validate")
    return keep, skipped


def missing_length_warnings(table: pl.DataFrame) -> list[str]:
    """One line naming the ok runs without ``output_tokens`` (kept: their cells' λ and censoring are empty)."""
    bad = table.filter((pl.col("status") == "ok") & pl.col("output_tokens").is_null())
    if bad.height == 0:
        return []
    shown = ", ".join(str(s) for s in bad.get_column("source").head(3).to_list())
    return [f"{bad.height} ok run(s) have no output_tokens (e.g. {shown}): λ and censoring are empty "
            f"for the cells they are in"]


def finish_reason_warnings(table: pl.DataFrame, limit: int = 20) -> list[str]:
    """Runs whose finish_reason and length disagree about reaching the budget (kept; both signals mean censored)."""
    # Without a finish_reason (or a budget) there is nothing to disagree with.
    ok = table.filter((pl.col("status") == "ok") & pl.col("finish_reason").is_not_null() & pl.col("max_new_tokens").is_not_null())
    says_length = pl.col("finish_reason").is_in(list(LENGTH_FINISH_REASONS)).fill_null(False)
    at_budget = (pl.col("output_tokens") >= pl.col("max_new_tokens")).fill_null(False)
    bad = ok.filter(says_length != at_budget)
    out = [
        f"{r['source']}: finish_reason {r['finish_reason']!r} but output_tokens {r['output_tokens']} vs budget {r['max_new_tokens']}"
        for r in bad.head(limit).iter_rows(named=True)
    ]
    if bad.height > limit:
        out.append(f"... and {bad.height - limit} more runs whose finish_reason and length disagree")
    return out


def l_bar_warnings(table: pl.DataFrame, limit: int = 20) -> list[str]:
    """Runs whose logged l_bar differs from accepted_tokens / draft_rounds (the recomputed value is used)."""
    t = table.filter((pl.col("status") == "ok") & pl.col("l_bar_logged").is_not_null() & (pl.col("draft_rounds") > 0))
    rel = ((pl.col("l_bar_logged") - pl.col("accepted_tokens") / pl.col("draft_rounds")).abs()
           / (pl.col("accepted_tokens") / pl.col("draft_rounds")).abs().clip(lower_bound=1e-12))
    bad = t.filter(rel > 1e-9)
    out = [f"{r['source']}: logged l_bar {r['l_bar_logged']} != accepted/rounds {r['accepted_tokens']}/{r['draft_rounds']}"
           for r in bad.head(limit).iter_rows(named=True)]
    if bad.height > limit:
        out.append(f"... and {bad.height - limit} more runs with a logged l_bar that disagrees")
    return out


def _baseline_conditions(base: pl.DataFrame) -> pl.DataFrame:
    """Per (target, draft, dataset), the serving conditions its baseline ran under, lightest load first."""
    schema = {"target": pl.String, "draft": pl.String, "dataset": pl.String, "_base_serving": pl.String}
    logged = base.filter(pl.col("serving") != "").select("target", "draft", "dataset", "serving").unique()
    if logged.height == 0:
        return pl.DataFrame(schema=schema)
    rows = [(*key, "; ".join(serving_conditions(part.get_column("serving"))))
            for key, part in logged.partition_by(["target", "draft", "dataset"], as_dict=True).items()]
    return pl.DataFrame(rows, schema=schema, orient="row")


def pairing_checks(table: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """Mark which ok runs can be paired with their baseline; return (table with `paired`, skipped, warnings).

    A relaxed run is paired when its (target, draft, dataset, serving condition) has a strict baseline, its
    temperature and top_p equal the baseline's, the baseline has an ok run of the same (item, seed, turn), and
    that run had the same budget (budgets may differ from item to item; the skip and the arm's warning name
    the items where the two runs' budgets differ). Baseline runs are paired when they are ok, share the
    group's temperature and top_p, and have their item's budget (the most common over the item's baseline
    runs, ties to the largest: a probe at another budget is reported, run by run).
    """
    full = with_serving(table)
    # The checks join and sort on the columns they read only: at scale a join of the whole table holds a copy of it.
    read = [*ARM_KEY, *UNIT_KEY, "status", *GROUP_SETTINGS, *UNIT_SETTINGS, "shared_baseline"]
    table = full.select([c for c in dict.fromkeys(read) if c in full.columns])
    # The unit joins match on each key string's code (one small integer a run): a join on the strings of seven
    # keys encodes them whole for both sides. Codes are equal exactly where the strings are (nulls included).
    coded = {c: f"_c_{c}" for c in (*GROUP_KEY, "item_id")}
    table = table.with_columns(pl.col(c).cast(pl.String).cast(pl.Categorical).to_physical().alias(k) for c, k in coded.items())
    gkey = [coded[c] for c in GROUP_KEY]
    ukey = [coded[c] if c in coded else c for c in UNIT_KEY]
    ok = pl.col("status") == "ok"
    is_base = pl.col("method") == STRICT
    warnings: list[str] = []
    base = table.filter(ok & is_base)
    # Where the group has a baseline, but under other serving conditions only: say which it has.
    elsewhere = _baseline_conditions(base)

    # The baseline's settings per group: the most common combination (a baseline that mixes
    # settings is itself reported, run by run).
    settings = (
        base.group_by([*GROUP_KEY, *GROUP_SETTINGS]).len()
        .sort([*GROUP_KEY, "len", *GROUP_SETTINGS], descending=[*(False for _ in GROUP_KEY), True, *(False for _ in GROUP_SETTINGS)],
              nulls_last=True)
        .group_by(GROUP_KEY, maintain_order=True).first().drop("len")
        .rename({s: f"_base_{s}" for s in GROUP_SETTINGS})
    )
    settings = settings.with_columns(pl.lit(True).alias("_has_base"))
    t = (table.with_row_index("_row").join(settings, on=list(GROUP_KEY), how="left", nulls_equal=True)
         .join(elsewhere, on=["target", "draft", "dataset"], how="left", nulls_equal=True))
    has_base = pl.col("_has_base").fill_null(False)
    # Each item's budget as its baseline ran it: the most common over its seeds and turns (ties: the largest), so
    # budgets may differ from item to item while a baseline's odd runs of an item (probes) are still reported.
    item = [*gkey, coded["item_id"]]
    item_budget = (
        base.group_by([*item, *UNIT_SETTINGS]).len()
        .sort([*item, "len", *UNIT_SETTINGS], descending=[*(False for _ in item), True, *(True for _ in UNIT_SETTINGS)],
              nulls_last=True)
        .group_by(item, maintain_order=True).first().drop("len")
        .rename({s: f"_item_{s}" for s in UNIT_SETTINGS})
    )
    t = t.join(item_budget, on=item, how="left", nulls_equal=True)
    base_odd = pl.when(is_base).then(_mismatch(UNIT_SETTINGS, "_item_")).otherwise(None)
    t = t.with_columns(pl.concat_str([_mismatch(GROUP_SETTINGS, "_base_"), base_odd], separator="; ", ignore_nulls=True)
                       .alias("_mismatch"))
    t = t.with_columns(pl.when(pl.col("_mismatch") == "").then(None).otherwise(pl.col("_mismatch")).alias("_mismatch"))

    # The baseline run of each unit, with its own budget: a relaxed run is compared with the run it pairs with.
    base_units = (
        t.filter(ok & is_base & pl.col("_mismatch").is_null())
        .select(*gkey, *ukey, *[pl.col(s).alias(f"_unit_{s}") for s in UNIT_SETTINGS])
        .unique(subset=[*gkey, *ukey], keep="first", maintain_order=True)
        .with_columns(pl.lit(True).alias("_unit_in_base"))
    )
    t = t.join(base_units, on=[*gkey, *ukey], how="left", nulls_equal=True).with_columns(pl.col("_unit_in_base").fill_null(False))
    unit_mismatch = pl.when(~is_base & pl.col("_unit_in_base")).then(_mismatch(UNIT_SETTINGS, "_unit_")).otherwise(None)
    t = t.with_columns(pl.concat_str([pl.col("_mismatch"), unit_mismatch], separator="; ", ignore_nulls=True).alias("_mismatch"))
    t = t.with_columns(pl.when(pl.col("_mismatch") == "").then(None).otherwise(pl.col("_mismatch")).alias("_mismatch"))

    reason = (
        pl.when(~ok).then(pl.format("status is '{}', not 'ok'", pl.col("status").fill_null("null")))
        .when(~has_base & pl.col("_base_serving").is_not_null())
        .then(pl.format("no ok strict baseline at serving condition '{}' for this target, draft and dataset "
                        "(its baseline was served at: {})", pl.col("serving"), pl.col("_base_serving")))
        .when(~has_base).then(pl.lit("no ok strict baseline for this target, draft and dataset"))
        .when(pl.col("_mismatch").is_not_null()).then(pl.format("setting differs from the baseline: {}", pl.col("_mismatch")))
        .when(~is_base & ~pl.col("_unit_in_base")).then(pl.lit("item/seed missing (or not ok) in the baseline"))
        .otherwise(None)
    )
    t = t.with_columns(reason.alias("_reason")).sort("_row")
    # Copies of a shared autoregressive baseline are not listed: the runs as logged are.
    logged = ~pl.col("shared_baseline") if "shared_baseline" in t.columns else pl.lit(True)
    unpaired = t.filter(pl.col("_reason").is_not_null() & logged)
    # The places of the unpaired runs only: the checks above never needed every run's.
    unpaired = unpaired.with_columns(full.get_column("source").gather(unpaired.get_column("_row")))
    skipped = _skips(unpaired, pl.col("_reason"), "pairing")
    # Arms whose settings conflict are named once, beyond the per-run lines in skipped.
    conflicts = (t.filter(ok & pl.col("_mismatch").is_not_null() & logged)
                 .group_by([*ARM_KEY, "_mismatch"], maintain_order=True)
                 .agg(pl.len(), pl.col("item_id").unique(maintain_order=True).alias("_items"))
                 .sort(list(ARM_KEY), maintain_order=True))
    for arm, part in conflicts.partition_by(list(ARM_KEY), as_dict=True, maintain_order=True).items():
        n = int(part["len"].sum())
        kinds = [f"{r['_mismatch']}{_on_items(r['_items'])}" for r in part.head(_WARN_KINDS).iter_rows(named=True)]
        more = f"; ... and {part.height - _WARN_KINDS} more differences" if part.height > _WARN_KINDS else ""
        warnings.append(f"arm {' / '.join(str(x) for x in arm[:5])}: {n} runs not paired, " + "; ".join(kinds) + more)
    out = full.with_columns(t.get_column("_reason").is_null().alias("paired"))  # t is in the table's row order
    return out, skipped, warnings


#: How many distinct setting differences one arm's warning spells out (every run is in the skipped list).
_WARN_KINDS = 5


def _mismatch(settings: tuple[str, ...], prefix: str) -> pl.Expr:
    """``max_new_tokens 27 != baseline 21; ...`` for the settings that differ from the baseline's (columns ``prefix + setting``), else null."""
    parts = [pl.when(~pl.col(s).eq_missing(pl.col(f"{prefix}{s}")))
             .then(pl.format(f"{s} {{}} != baseline {{}}", pl.col(s), pl.col(f"{prefix}{s}"))).otherwise(None)
             for s in settings]
    joined = pl.concat_str(parts, separator="; ", ignore_nulls=True)
    return pl.when(joined == "").then(None).otherwise(joined)


def _on_items(items: list[str]) -> str:
    """`` (items q1, q2, ...)`` naming where a setting differs, at most five of them."""
    shown = ", ".join(str(x) for x in items[:5])
    return f" (item{'s' if len(items) > 1 else ''} {shown}{f', ... {len(items) - 5} more' if len(items) > 5 else ''})"


#: A draftless baseline serves the drafts of its target and dataset under its own serving condition.
_SHARED = ("target", "dataset", "serving")


def share_draftless_baselines(table: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """A baseline without a draft (plain autoregressive decoding) serves every draft of its target and dataset.

    Its ok runs are copied once per draft of the speculative arms of the same (target, dataset), so
    that every arm is paired with it; the copies carry ``shared_baseline = True`` and the runs as
    logged (draft empty) stay, with False, so counts of runs and arms and method-against-method
    comparisons leave the copies out. Added column: ``shared_baseline``.
    """
    t = with_serving(table).with_columns(pl.lit(False).alias("shared_baseline"))
    free = (pl.col("method") == STRICT) & (pl.col("draft") == "") & (pl.col("status") == "ok")
    if not t.select(free.any()).item():
        return t, []
    # Drafts with a baseline of their own keep it (pairing needs one baseline run per unit).
    own = t.filter((pl.col("method") == STRICT) & (pl.col("draft") != "")).select(*_SHARED, "draft").unique()
    drafts = (t.filter(pl.col("method") != STRICT).select(*_SHARED, "draft").unique()
              .join(own, on=[*_SHARED, "draft"], how="anti").sort(*_SHARED, "draft"))
    base = t.filter(free).with_row_index("_brow")
    served = base.join(drafts.rename({"draft": "_to"}), on=list(_SHARED), how="inner")
    if served.height == 0:
        return t, []
    served = (served.with_columns(pl.lit(True).alias("shared_baseline"), pl.col("_to").alias("draft"))
              .sort("_brow", "draft").drop("_brow", "_to"))
    out = pl.concat([t, served], how="vertical_relaxed")
    notes = [
        f"autoregressive baseline of {r['target']} / {r['dataset']}{f' ({s})' if (s := r['serving']) else ''} serves "
        f"{r['n']} draft(s): {', '.join(r['d'])}"
        for r in drafts.group_by(*_SHARED, maintain_order=True)
        .agg(pl.col("draft").alias("d"), pl.len().alias("n"))
        .join(base.select(*_SHARED).unique(), on=list(_SHARED), nulls_equal=True).iter_rows(named=True)
    ]
    return out, notes


def drop_mixed_alphas(table: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """An arm (same target, draft, dataset, method, params) whose relaxed runs give different alphas is skipped whole.

    Its cells would carry one name for two settings. With params like ``alpha0.3`` every run has the
    name's alpha (:func:`~lengthlens.data.schema.check_params`); this catches params that are labels
    (a missing alpha counts as a value of its own).
    """
    # Lazy, so that only the key columns and alpha of the relaxed runs are gathered, not a copy of the table.
    relaxed = table.lazy().filter(pl.col("method") != STRICT)
    # An arm's alphas are among those of its method and params: only the runs of a (method, params) with
    # several are grouped by the whole arm key, which at scale encodes every run's key strings.
    several = (relaxed.group_by("method", "params").agg(pl.col("alpha").n_unique().alias("_n"))
               .filter(pl.col("_n") > 1).drop("_n").collect())
    if several.height == 0:
        return table, _skips(table.head(0), pl.lit(""), "validate")
    per_arm = (relaxed.join(several.lazy(), on=["method", "params"], how="semi", nulls_equal=True).group_by(ARM_KEY)
               .agg(pl.col("alpha").n_unique().alias("_n"),
                    pl.col("alpha").unique().sort().cast(pl.String).fill_null("none").str.join(", ").alias("_alphas"))
               .collect())
    bad = per_arm.filter(pl.col("_n") > 1).drop("_n")
    if bad.height == 0:
        return table, _skips(table.head(0), pl.lit(""), "validate")
    t = table.with_row_index("_row").join(bad, on=list(ARM_KEY), how="left", nulls_equal=True).sort("_row")
    hit = pl.col("_alphas").is_not_null()
    reason = pl.format("field 'alpha': the runs of this arm ({} / {}) give different alphas ({}): one arm must have one alpha",
                       pl.col("method"), pl.col("params"), pl.col("_alphas"))
    return t.filter(~hit).drop("_row", "_alphas"), _skips(t.filter(hit), reason, "validate")
