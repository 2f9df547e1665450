"""Tokens accepted only because of the relaxation: counts, rates, target probability and rank per arm or cell.

Input is the study's per-token trace ``<run folder>/proposals.jsonl`` (runs/gsm8k only in the study).
What the trace holds, established on the 198 gsm8k runs (tests/test_extra_tokens.py pins each fact):

* One row per *emitted* token, not per drafted token. A round logs its accepted draft tokens
  (``emission_source == "accepted_draft"``), then either the first rejected draft position
  (``"recovered"``: the draft token with its p, q, u and flags, plus the resampled token that was
  emitted) or, when all k = 6 drafts were accepted, the ``"bonus"`` token at ``pos_in_round == k``.
  Draft tokens after the first rejection of a round are never logged, so run.json's
  ``draft_tokens`` (= 6 * draft_rounds) is larger than the number of judged rows.
* Bonus rows omit every draft-side field (p, q, u, the four flags, target_rank, ...: absent keys,
  read as null); all other rows have them set. ``actually_accepted == lossy_would_accept`` and
  ``lossy_only_accepted == lossy_would_accept & ~strict_would_accept`` on every judged row.
* The strict arm's trace (``relaxation_method`` says ``mentored_dec`` with parameter 1.0) never has
  ``lossy_only_accepted``; ``spec_casc_tok`` has rows the strict test would accept but the relaxed
  rule rejected (``strict_would_accept & ~lossy_would_accept``), so relaxations are not supersets.
* ``target_rank`` is 0-based (0 = the target's most likely token).
* The trace runs past the completion: rows with ``output_position >= output_tokens`` (1 to 11 per
  EOS-stopped run; tokens computed in the final round after the stop) are logged; ``within_output``
  drops them.
* run.json's ``accepted_tokens`` equals the accepted rows of the first ``draft_rounds`` rounds: the
  vLLM metrics miss the final round on 196 of 198 runs (the trace has ``draft_rounds + 1`` rounds).

The aggregation streams: one lazy scan of all the files, with an explicit schema of the few
columns used, feeds polars' streaming engine; counts aggregate on the fly and only (run id, class,
p, rank) of the two compared token classes are kept (~17 MB per GB of JSON) for exact medians.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import polars as pl

from lengthlens.analyses.outputs import Column, Context, Outputs, ReportAnalysis, Section, Table, keys
from lengthlens.data.readers.raw import unreadable_traces
from lengthlens.data.schema import ARM_KEY
from lengthlens.data.serving import with_serving

if TYPE_CHECKING:
    from lengthlens.data.runset import RunSet

#: Token traces exist for single-turn raw runs only: a run is (arm, item, seed) here.
UNIT_KEY = ("item_id", "seed")

PROPOSALS_FILE = "proposals.jsonl"

#: The trace columns read (10 of the 34 keys a judged row holds; the rest are never parsed). Explicit so that polars does not
#: infer a schema by reading ahead in ~1 GB of JSON.
PROPOSAL_SCHEMA = pl.Schema({
    "round": pl.Int64,
    "pos_in_round": pl.Int64,
    "output_position": pl.Int64,
    "p": pl.Float64,
    "target_rank": pl.Int64,
    "strict_would_accept": pl.Boolean,
    "lossy_would_accept": pl.Boolean,
    "actually_accepted": pl.Boolean,
    "lossy_only_accepted": pl.Boolean,
    "emission_source": pl.String,
})

#: Column that carries each row's file path (and joins it back to its run).
PATH_COL = "_proposals_path"

#: Output columns, in order, after the arm keys (and alpha when the runs table has it).
STAT_COLUMNS = (
    "n_runs", "n_runs_with_proposals", "n_rows", "n_proposed", "n_accepted", "n_strict_accepted",
    "n_lossy_only", "n_strict_only_rejected", "lossy_only_per_proposed", "lossy_only_per_accepted",
    "p_lossy_only_median", "p_lossy_only_mean", "rank_lossy_only_median", "rank_lossy_only_mean",
    "p_strict_accepted_median", "p_strict_accepted_mean", "rank_strict_accepted_median",
    "rank_strict_accepted_mean",
)


def _ok_runs(runs: pl.DataFrame, units: pl.DataFrame | None) -> pl.DataFrame:
    """Finished runs, restricted to the given (arm, item_id, seed) units when there are any."""
    runs = with_serving(runs)  # a table built by hand has no serving condition: ""
    if "status" in runs.columns:
        runs = runs.filter(pl.col("status") == "ok")
    if units is not None:
        units = with_serving(units)
        keys = [*ARM_KEY, *UNIT_KEY]
        missing = [k for k in keys if k not in units.columns]
        if missing:
            raise ValueError(f"units lacks columns {missing}; it needs {keys}")
        # Match dtypes to the runs table so that e.g. a seed typed Int32 still joins.
        u = units.select(keys).unique().cast({k: runs.schema[k] for k in keys})
        runs = runs.join(u, on=keys, how="semi")
    return runs


def proposal_files(runs: pl.DataFrame) -> pl.DataFrame:
    """The runs with a `has_proposals` flag and the trace path (`<source>/proposals.jsonl`), checked on disk."""
    if "source" not in runs.columns:
        raise ValueError("runs needs a `source` column (the run folder) to find proposals.jsonl")
    runs = with_serving(runs)
    paths = [None if s is None else str(Path(s) / PROPOSALS_FILE) for s in runs["source"].to_list()]
    has = [p is not None and Path(p).is_file() for p in paths]
    # A trace that cannot be read is left out with a warning naming it, not an abort of the whole report.
    bad = unreadable_traces(list(dict.fromkeys(p for p, h in zip(paths, has) if h)), PROPOSAL_SCHEMA)
    for p, why in bad.items():
        warnings.warn(f"{p}: {why}; this run's extra-token rows are left out", UserWarning, stacklevel=2)
    has = [h and p not in bad for p, h in zip(paths, has)]
    return runs.with_columns(
        pl.Series(PATH_COL, paths, dtype=pl.String), pl.Series("has_proposals", has, dtype=pl.Boolean)
    )


def _scan(files: pl.DataFrame, extra: list[str]) -> pl.LazyFrame:
    """One lazy multi-file NDJSON scan joined to its runs' keys on the file path."""
    paths = files[PATH_COL].to_list()
    if not paths:
        # An empty scan list is an error in polars; an empty frame with the right schema is not.
        schema = {**PROPOSAL_SCHEMA, PATH_COL: pl.String,
                  **{c: files.schema[c] for c in [*ARM_KEY, *UNIT_KEY, *extra]}}
        return pl.LazyFrame(schema=schema)
    # One scan over the file list rather than one scan per file concatenated: the latter is 2.5x
    # slower on the gsm8k traces and 5x on 1 GB (benchmarks/bench_extra_tokens.py --compare).
    lf = pl.scan_ndjson(paths, schema=PROPOSAL_SCHEMA, include_file_paths=PATH_COL)
    keys = files.select(PATH_COL, *ARM_KEY, *UNIT_KEY, *extra).lazy()
    return lf.join(keys, on=PATH_COL, how="inner")


def scan_proposals(runs: pl.DataFrame, *, with_output_tokens: bool = False) -> pl.LazyFrame:
    """Lazy scan of every run's proposals.jsonl with the run's arm keys, item_id and seed attached.

    Runs whose file is missing are skipped; :func:`proposal_files` (or ``ExtraTokens.missing``)
    says which. Columns: :data:`PROPOSAL_SCHEMA`, the file path, the arm keys, item_id and seed;
    plus ``output_tokens`` when ``with_output_tokens``.
    """
    files = proposal_files(runs).filter("has_proposals")
    return _scan(files, ["output_tokens"] if with_output_tokens else [])


#: Per-run and per-arm token counts, in output order.
COUNT_COLUMNS = ("n_rows", "n_proposed", "n_accepted", "n_strict_accepted", "n_lossy_only", "n_strict_only_rejected")


def _classes() -> dict[str, pl.Expr]:
    """The token classes, from the logged flags (bonus rows have null flags and belong to none)."""
    acc = pl.col("actually_accepted").fill_null(False)
    lossy_only = pl.col("lossy_only_accepted").fill_null(False)
    strict = pl.col("strict_would_accept").fill_null(False)
    return {
        "judged": pl.col("actually_accepted").is_not_null(),
        "accepted": acc,
        "lossy_only": lossy_only,
        # The comparison class: accepted tokens the lossless test would also accept (disjoint from
        # lossy-only by construction; the `& ~lossy_only` only matters for inconsistent logs).
        "strict_accepted": acc & strict & ~lossy_only,
        # Tokens the strict test would accept but the relaxed rule rejected (spec_casc_tok does this).
        "strict_only_rejected": strict & ~pl.col("lossy_would_accept").fill_null(True),
    }


def _stream(
    paths: list[str], output_tokens: list[int | None] | None, engine: str, per_file: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One pass over the files: per-run counts, and (run, class, p, rank) of the two compared classes.

    Runs are numbered by their position in ``paths`` (an Enum of the path, not the path string, so
    that the kept values cost 4 bytes of run id per token). The counts aggregate while streaming; the
    values are what exact medians need, a ~17 MB frame per GB of JSON, so the medians are computed
    from them in memory. (A streaming ``group_by(...).agg(median)`` holds every projected column of
    the whole input, path strings included: 700 MB peak on 1 GB against ~300 MB this way.)
    """
    c = _classes()
    if per_file:  # the alternative, kept for benchmarks/bench_extra_tokens.py --compare
        lf = pl.concat([pl.scan_ndjson(path, schema=PROPOSAL_SCHEMA).with_columns(pl.lit(i, pl.UInt32).alias("run"))
                        for i, path in enumerate(paths)])
    else:
        lf = (pl.scan_ndjson(paths, schema=PROPOSAL_SCHEMA, include_file_paths=PATH_COL)
              .with_columns(pl.col(PATH_COL).cast(pl.Enum(paths)).to_physical().alias("run"))
              .drop(PATH_COL))
    if output_tokens is not None:
        limits = pl.LazyFrame({"run": pl.Series(range(len(paths)), dtype=pl.UInt32),
                               "output_tokens": pl.Series(output_tokens, dtype=pl.Int64)})
        # Runs without an output_tokens count are kept whole.
        lf = lf.join(limits, on="run").filter(
            pl.col("output_tokens").is_null() | (pl.col("output_position") < pl.col("output_tokens")))
    per_run = lf.group_by("run").agg(
        pl.len().alias("n_rows"),
        c["judged"].sum().alias("n_proposed"),
        c["accepted"].sum().alias("n_accepted"),
        c["strict_accepted"].sum().alias("n_strict_accepted"),
        c["lossy_only"].sum().alias("n_lossy_only"),
        c["strict_only_rejected"].sum().alias("n_strict_only_rejected"),
    )
    values = lf.filter(c["lossy_only"] | c["strict_accepted"]).select(
        "run", c["lossy_only"].alias("lossy_only"), "p", "target_rank")
    # collect_all runs both queries over one shared scan (measured: one pass, not two).
    per_run, values = pl.collect_all([per_run, values], engine=engine)
    return per_run, values


def _compute(
    runs: pl.DataFrame, units: pl.DataFrame | None, within_output: bool, engine: str, per_file: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Per-arm stats, per-run counts and the runs' file table (with has_proposals)."""
    sel = _ok_runs(runs, units)
    files = proposal_files(sel)
    arm_keys = list(ARM_KEY)
    arms = files.group_by(arm_keys, maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("n_runs"),
        pl.col("has_proposals").sum().cast(pl.Int64).alias("n_runs_with_proposals"),
    ).with_row_index("arm")
    present = (files.filter("has_proposals").unique(PATH_COL, keep="first", maintain_order=True)
               .join(arms.select("arm", *arm_keys), on=arm_keys).with_row_index("run"))
    count_schema = {k: pl.Int64 for k in COUNT_COLUMNS}
    if present.height:
        per_run, values = _stream(present[PATH_COL].to_list(),
                                  present["output_tokens"].to_list() if within_output else None, engine, per_file)
    else:
        per_run = pl.DataFrame(schema={"run": pl.UInt32, **count_schema})
        values = pl.DataFrame(schema={"run": pl.UInt32, "lossy_only": pl.Boolean, "p": pl.Float64,
                                      "target_rank": pl.Int64})
    per_run = present.select("run", "arm", *arm_keys, *UNIT_KEY, "source").join(
        per_run.cast(count_schema), on="run", how="left").with_columns(pl.col(COUNT_COLUMNS).fill_null(0))

    counts = per_run.group_by("arm").agg(pl.col(COUNT_COLUMNS).sum())
    # Run id -> arm id by position (runs are numbered 0..n-1): a gather, not a join that copies the values.
    run_arm = present["arm"].cast(pl.UInt32)
    summaries = values.select(pl.lit(run_arm).gather(pl.col("run")).alias("arm"), "lossy_only", "p", "target_rank")
    summaries = summaries.group_by("arm", "lossy_only").agg(
        pl.col("p").median().alias("p_median"), pl.col("p").mean().alias("p_mean"),
        pl.col("target_rank").median().alias("rank_median"), pl.col("target_rank").mean().alias("rank_mean"),
    )
    out = arms.join(counts, on="arm", how="left")
    for flag, name in ((True, "lossy_only"), (False, "strict_accepted")):
        part = summaries.filter(pl.col("lossy_only") == flag).select(
            "arm", *(pl.col(f"{v}_{s}").alias(f"{v}_{name}_{s}")
                     for v in ("p", "rank") for s in ("median", "mean")))
        out = out.join(part, on="arm", how="left")
    out = out.with_columns(pl.col(COUNT_COLUMNS).fill_null(0).cast(pl.Int64)).with_columns(
        # Null rather than NaN when nothing was proposed/accepted: a rate of 0/0 is undefined.
        pl.when(pl.col("n_proposed") > 0).then(pl.col("n_lossy_only") / pl.col("n_proposed"))
        .alias("lossy_only_per_proposed"),
        pl.when(pl.col("n_accepted") > 0).then(pl.col("n_lossy_only") / pl.col("n_accepted"))
        .alias("lossy_only_per_accepted"),
    )
    if "alpha" in sel.columns:
        out = out.join(sel.select(*arm_keys, "alpha").unique(arm_keys), on=arm_keys, how="left")
    lead = [*arm_keys, *(["alpha"] if "alpha" in out.columns else [])]
    stats = out.select(*lead, *STAT_COLUMNS).sort(arm_keys)
    return stats, per_run.drop("run", "arm").sort(arm_keys + list(UNIT_KEY)), files


def extra_token_stats(
    runs: pl.DataFrame,
    units: pl.DataFrame | None = None,
    *,
    within_output: bool = False,
    engine: str = "streaming",
) -> pl.DataFrame:
    """One row per arm (per cell when ``units`` restricts each arm to its paired units) of lossy-only token stats.

    ``units``: columns ARM_KEY + item_id + seed, the (arm, unit) pairs to keep (a cell's relaxed
    arm on the units where it and its baseline are both ok). Only ``status == "ok"`` runs count.
    ``within_output`` drops trace rows at ``output_position >= output_tokens`` (computed after the
    completion ended). Rates: ``lossy_only_per_proposed`` = n_lossy_only / n_proposed, a proposed
    token being a judged draft row (accepted, or the round's first rejection; bonus rows are not
    draft tokens), and ``lossy_only_per_accepted`` = n_lossy_only / n_accepted. Medians are exact.
    Rows are keyed by the arm keys only: a baseline arm shared by cells with different unit sets
    needs one call per cell (``units`` holding that cell's baseline units).
    """
    return _compute(runs, units, within_output, engine)[0]


@dataclass(frozen=True)
class ExtraTokens:
    """Lossy-only token stats per arm or cell, per-run counts, and the runs that had no trace."""

    stats: pl.DataFrame
    #: Token counts (COUNT_COLUMNS) per run with a trace: arm keys, item_id, seed, source.
    per_run: pl.DataFrame = field(repr=False)
    #: Selected ok runs without a proposals.jsonl: arm keys, item_id, seed, source.
    missing: pl.DataFrame = field(repr=False)
    per_cell: bool = False
    within_output: bool = False

    def to_frame(self) -> pd.DataFrame:
        """The stats as a pandas DataFrame (one row per arm or cell)."""
        return self.stats.to_pandas()

    def write_csv(self, out_dir: str | Path) -> Path:
        """Write ``<out_dir>/extra_tokens.csv`` and return its path."""
        path = Path(out_dir) / "extra_tokens.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.stats.write_csv(path)
        return path

    def _repr_html_(self) -> str:
        unit = "cell (paired units)" if self.per_cell else "arm"
        note = (f"<p>Tokens accepted only because of the relaxation, per {unit}"
                f"{', within the completion' if self.within_output else ''}; "
                f"{self.missing.height} run(s) without proposals.jsonl skipped.</p>")
        return note + self.to_frame().to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="")

    def __str__(self) -> str:
        return f"ExtraTokens({self.stats.height} rows, {self.missing.height} runs without proposals)\n{self.stats}"


def extra_tokens(
    runs: pl.DataFrame, units: pl.DataFrame | None = None, *, within_output: bool = False
) -> ExtraTokens:
    """:func:`extra_token_stats` with per-run counts and the (ok, selected) runs that lacked a proposals.jsonl."""
    stats, per_run, files = _compute(runs, units, within_output, "streaming")
    missing = files.filter(~pl.col("has_proposals")).select(*ARM_KEY, *UNIT_KEY, "source")
    return ExtraTokens(stats=stats, per_run=per_run, missing=missing, per_cell=units is not None,
                       within_output=within_output)


__all__ = [
    "COUNT_COLUMNS", "PROPOSALS_FILE", "PROPOSAL_SCHEMA", "STAT_COLUMNS", "ExtraTokens", "extra_token_stats",
    "extra_tokens", "proposal_files", "scan_proposals",
]


def extra_tokens_table(runs: "RunSet", units: pl.DataFrame) -> pd.DataFrame | None:
    """OUT/extra_tokens.csv: per cell, tokens accepted only because of the relaxation (None without proposals).

    ``units``: the report's paired runs (arm keys, unit keys and both sides' ``source``); token traces
    live in raw run folders, so runs from flat records ("file:line" sources) are left out.
    """
    def raw(col: str) -> pl.Expr:
        return ~pl.col(col).str.contains(r":\d+$").fill_null(True)

    paired = runs.table.filter(pl.col("paired") & raw("source"))
    if paired.is_empty():
        return None
    units = units.filter(raw("source") & raw("source_star"))
    stats = extra_token_stats(paired, units=units.select(*ARM_KEY, "item_id", "seed", "turn"))
    if stats is None or stats.is_empty() or stats["n_runs_with_proposals"].sum() == 0:
        return None
    return stats.to_pandas()


class ExtraTokensReport(ReportAnalysis):
    """extra_tokens.csv: per cell, the tokens the relaxation accepted that the strict test would have rejected."""

    name = "extra tokens"
    reads = ("source",)
    outputs = Outputs(
        tables=(Table("extra_tokens", "cell (runs with proposals.jsonl)", (
            *keys("dataset", "method", "params"),
            Column("n_runs_with_proposals", "paired runs with a token trace", label="runs", fmt="int"),
            Column("n_accepted", "draft tokens accepted", label="accepted", fmt="int"),
            Column("n_lossy_only", "accepted only because of the relaxation (the strict test would have rejected them)",
                   label="lossy-only", fmt="int"),
            Column("lossy_only_per_accepted", "n_lossy_only / n_accepted", label="lossy-only / accepted", fmt="f3"),
            Column("p_lossy_only_median", "the target's probability of the lossy-only tokens, median",
                   label="p lossy-only med.", fmt="f3"),
            Column("p_strict_accepted_median", "the same of the strict-accepted tokens", label="p strict-acc. med.",
                   fmt="f3"),
            Column("rank_lossy_only_median", "the target's rank of the lossy-only tokens (0-based: 0 is its most likely "
                   "token), median", label="rank lossy-only med. (0\u00a0=\u00a0top)", fmt="rank"),
            Column("rank_strict_accepted_median", "the same of the strict-accepted tokens",
                   label="rank strict-acc. med. (0\u00a0=\u00a0top)", fmt="rank"),
            Column("p_lossy_only_mean", "mean probability of the lossy-only tokens", label="p lossy-only mean", fmt="f3"),
            Column("p_strict_accepted_mean", "mean probability of the strict-accepted tokens", label="p strict-acc. mean",
                   fmt="f3"),
            Column("n_runs", "paired runs of the cell"), Column("n_rows", "trace rows read"),
            Column("n_proposed", "draft tokens judged"), Column("n_strict_accepted", "tokens the strict test accepts"),
            Column("n_strict_only_rejected", "tokens the strict test accepts and the relaxed rule rejected"),
            Column("lossy_only_per_proposed", "n_lossy_only / n_proposed"),
            Column("rank_{lossy_only,strict_accepted}_mean", "mean rank of those tokens")),
            written="with proposals.jsonl beside raw runs"),),
        sections=(Section("extra_tokens", "Tokens accepted only because of the relaxation", (
            "From the proposal logs: draft tokens that the relaxed rule accepted but the strict test would have "
            "rejected, with the target's probability and rank of those tokens against strict-accepted ones. Ranks are "
            "0-based: 0 is the target's most likely token."), order=62),))

    def run(self, ctx: Context) -> dict[str, pd.DataFrame]:
        if not ctx.options["proposals"]:
            return {}
        extra = extra_tokens_table(ctx.runs, ctx.units.select(*ARM_KEY, "item_id", "seed", "turn", "source", "source_star"))
        return {} if extra is None else {"extra_tokens": extra}
