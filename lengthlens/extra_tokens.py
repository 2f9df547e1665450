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

The aggregation streams: the files are scanned lazily with an explicit schema of the few columns
used and aggregated by polars' streaming engine; only the p/rank values of the two token classes
are held per group, for exact medians.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import polars as pl

from lengthlens.schema import ARM_KEY, UNIT_KEY

PROPOSALS_FILE = "proposals.jsonl"

#: The trace columns read; the files hold ~35 more, never parsed. Explicit so that polars does not
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
    if "status" in runs.columns:
        runs = runs.filter(pl.col("status") == "ok")
    if units is not None:
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
    paths = [None if s is None else str(Path(s) / PROPOSALS_FILE) for s in runs["source"].to_list()]
    has = [p is not None and Path(p).is_file() for p in paths]
    return runs.with_columns(
        pl.Series(PATH_COL, paths, dtype=pl.String), pl.Series("has_proposals", has, dtype=pl.Boolean)
    )


def _scan(files: pl.DataFrame, extra: list[str]) -> pl.LazyFrame:
    """One lazy multi-file NDJSON scan joined to its runs' keys on the file path."""
    paths = files[PATH_COL].to_list()
    if not paths:
        # An empty scan list is an error in polars; an empty frame with the right schema is not.
        schema = {**PROPOSAL_SCHEMA, **{c: files.schema[c] for c in [*ARM_KEY, *UNIT_KEY, *extra]}}
        return pl.LazyFrame(schema=schema)
    # A single scan over the file list streams batches from all files and is ~5x faster than
    # concatenating one scan per file (measured on the gsm8k traces, benchmarks/bench_extra_tokens.py).
    lf = pl.scan_ndjson(paths, schema=PROPOSAL_SCHEMA, include_file_paths=PATH_COL)
    keys = files.select(PATH_COL, *ARM_KEY, *UNIT_KEY, *extra).lazy()
    return lf.join(keys, on=PATH_COL, how="inner")


def scan_proposals(runs: pl.DataFrame, *, with_output_tokens: bool = False) -> pl.LazyFrame:
    """Lazy scan of every run's proposals.jsonl with the run's arm keys, item_id and seed attached.

    Runs whose file is missing are skipped; :func:`proposal_files` (or ``ExtraTokens.missing``)
    says which. Columns: :data:`PROPOSAL_SCHEMA`, the arm keys, item_id, seed and the file path;
    plus ``output_tokens`` when ``with_output_tokens``.
    """
    files = proposal_files(runs).filter("has_proposals")
    return _scan(files, ["output_tokens"] if with_output_tokens else [])


def _aggregations() -> list[pl.Expr]:
    """The per-group aggregations; token classes are defined from the logged flags."""
    judged = pl.col("actually_accepted").is_not_null()  # bonus rows have null flags
    acc = pl.col("actually_accepted").fill_null(False)
    lossy_only = pl.col("lossy_only_accepted").fill_null(False)
    # Accepted tokens the lossless test would also have accepted: the comparison class.
    strict_acc = acc & pl.col("strict_would_accept").fill_null(False)
    strict_only_rej = pl.col("strict_would_accept").fill_null(False) & ~pl.col("lossy_would_accept").fill_null(True)
    return [
        pl.len().alias("n_rows"),
        judged.sum().alias("n_proposed"),
        acc.sum().alias("n_accepted"),
        strict_acc.sum().alias("n_strict_accepted"),
        lossy_only.sum().alias("n_lossy_only"),
        strict_only_rej.sum().alias("n_strict_only_rejected"),
        pl.col("p").filter(lossy_only).median().alias("p_lossy_only_median"),
        pl.col("p").filter(lossy_only).mean().alias("p_lossy_only_mean"),
        pl.col("target_rank").filter(lossy_only).median().alias("rank_lossy_only_median"),
        pl.col("target_rank").filter(lossy_only).mean().alias("rank_lossy_only_mean"),
        pl.col("p").filter(strict_acc).median().alias("p_strict_accepted_median"),
        pl.col("p").filter(strict_acc).mean().alias("p_strict_accepted_mean"),
        pl.col("target_rank").filter(strict_acc).median().alias("rank_strict_accepted_median"),
        pl.col("target_rank").filter(strict_acc).mean().alias("rank_strict_accepted_mean"),
    ]


def extra_token_stats(
    runs: pl.DataFrame,
    units: pl.DataFrame | None = None,
    *,
    within_output: bool = False,
    engine: str = "streaming",
) -> pl.DataFrame:
    """One row per arm (per cell when ``units`` restricts each arm to its paired units) of lossy-only token stats.

    ``units``: columns ARM_KEY + item_id + seed, the (arm, unit) pairs to keep (a cell's relaxed
    arm on the units where it and its baseline are both ok). ``within_output`` drops trace rows
    at ``output_position >= output_tokens`` (computed after the completion ended).
    Rates: ``lossy_only_per_proposed`` = n_lossy_only / n_proposed, where a proposed token is a
    judged draft row (accepted, or the round's first rejection; bonus rows excluded), and
    ``lossy_only_per_accepted`` = n_lossy_only / n_accepted.
    """
    sel = _ok_runs(runs, units)
    files = proposal_files(sel)
    extra = ["output_tokens"] if within_output else []
    lf = _scan(files.filter("has_proposals"), extra)
    if within_output:
        lf = lf.filter(pl.col("output_position") < pl.col("output_tokens"))
    agg = lf.group_by(list(ARM_KEY)).agg(_aggregations()).collect(engine=engine)

    arms = files.group_by(list(ARM_KEY)).agg(
        pl.len().cast(pl.Int64).alias("n_runs"),
        pl.col("has_proposals").sum().cast(pl.Int64).alias("n_runs_with_proposals"),
    )
    if "alpha" in sel.columns:
        arms = arms.join(sel.select(*ARM_KEY, "alpha").unique(list(ARM_KEY)), on=list(ARM_KEY), how="left")
    out = arms.join(agg, on=list(ARM_KEY), how="left")
    counts = ["n_rows", "n_proposed", "n_accepted", "n_strict_accepted", "n_lossy_only", "n_strict_only_rejected"]
    out = out.with_columns(pl.col(counts).fill_null(0).cast(pl.Int64)).with_columns(
        # Null rather than NaN when nothing was proposed/accepted: a rate of 0/0 is undefined.
        pl.when(pl.col("n_proposed") > 0).then(pl.col("n_lossy_only") / pl.col("n_proposed"))
        .alias("lossy_only_per_proposed"),
        pl.when(pl.col("n_accepted") > 0).then(pl.col("n_lossy_only") / pl.col("n_accepted"))
        .alias("lossy_only_per_accepted"),
    )
    lead = [*ARM_KEY, *(["alpha"] if "alpha" in out.columns else [])]
    return out.select(*lead, *STAT_COLUMNS).sort(list(ARM_KEY))


@dataclass(frozen=True)
class ExtraTokens:
    """Lossy-only token stats plus the runs that had no trace, for the report and OUT/extra_tokens.csv."""

    stats: pl.DataFrame
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
    """Compute :func:`extra_token_stats` and list the (ok, selected) runs that lacked a proposals.jsonl."""
    stats = extra_token_stats(runs, units, within_output=within_output)
    files = proposal_files(_ok_runs(runs, units))
    missing = files.filter(~pl.col("has_proposals")).select(*ARM_KEY, *UNIT_KEY, "source")
    return ExtraTokens(stats=stats, missing=missing, per_cell=units is not None, within_output=within_output)


__all__ = [
    "PROPOSALS_FILE", "PROPOSAL_SCHEMA", "STAT_COLUMNS", "ExtraTokens", "extra_token_stats",
    "extra_tokens", "proposal_files", "scan_proposals",
]
