"""Per-run thinking and answer lengths from the texts (or the generator's logged counts), with an audit of the counts.

Each output is split by :mod:`lengthlens.data.channels` (GPT-OSS harmony channels, ``<think>`` tags,
or none); counts are characters of message content, markers excluded. Runs without text fall back
to the generator's logged counts (``chars_source`` says which); logged counts that the text cannot
explain are reported, never trusted blindly.
"""

from __future__ import annotations

import polars as pl

from lengthlens.data.channels import check_logged_counts, split_channels

__all__ = ["DISAGREEMENT_CAUSES", "disagreement_notes", "run_channels", "run_channels_audited"]


def run_channels(table: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Add per-run ``thinking_chars``, ``answer_chars``, ``thinking_closed``, ``channel_format`` from the text; see
    :func:`run_channels_audited`, which also returns each disagreement's (target, cause, source)."""
    out, disagreements, _causes = run_channels_audited(table)
    return out, disagreements


def run_channels_audited(table: pl.DataFrame) -> tuple[pl.DataFrame, list[str], list[tuple[str, str, str]]]:
    """Add per-run ``thinking_chars``, ``answer_chars``, ``thinking_closed``, ``channel_format`` from the text.

    Runs without text fall back to the generator's logged counts (``chars_source`` says which).
    Logged counts that the text cannot explain are returned as messages, never trusted blindly.
    """
    # Runs without text take their logged counts as columns; only runs with text are split, one by one (a flat
    # file of counts has no text: 180k runs went through a Python loop for nothing).
    logged = pl.col("text").is_null() & pl.col("analysis_chars").is_not_null() & pl.col("final_chars").is_not_null()
    extra = table.select(
        pl.lit(None, dtype=pl.String).alias("channel_format"),
        pl.when(logged).then(pl.col("analysis_chars")).cast(pl.Int64).alias("thinking_chars"),
        pl.when(logged).then(pl.col("final_chars")).cast(pl.Int64).alias("answer_chars"),
        pl.when(logged).then(pl.col("reached_final_channel")).cast(pl.Boolean).alias("thinking_closed"),
        pl.when(logged).then(pl.lit("logged")).alias("chars_source").cast(pl.String),
    )
    disagreements: list[str] = []
    causes: list[tuple[str, str, str]] = []
    positions = table.select(pl.arg_where(pl.col("text").is_not_null())).to_series()
    if positions.len():
        rows = {k: [] for k in ("channel_format", "thinking_chars", "answer_chars", "thinking_closed")}
        texts = table[positions].select("text", "target", "analysis_chars", "final_chars", "reached_final_channel", "source")
        for r in texts.iter_rows(named=True):
            s = split_channels(r["text"], r["target"])
            rows["channel_format"].append(s.format)
            rows["thinking_chars"].append(s.thinking_chars)
            rows["answer_chars"].append(s.answer_chars)
            rows["thinking_closed"].append(s.thinking_closed)
            msg = check_logged_counts(s, r["analysis_chars"], r["final_chars"], r["reached_final_channel"])
            if msg:
                disagreements.append(f"{r['source']}: {msg}")
                causes.append((r["target"], disagreement_cause(s, r["analysis_chars"], r["final_chars"], msg), r["source"]))
        rows["chars_source"] = ["text"] * positions.len()
        extra = extra.with_columns(
            extra[k].scatter(positions, pl.Series(k, v, dtype=extra.schema[k])) for k, v in rows.items())
    return pl.concat([table, extra], how="horizontal"), disagreements, causes


#: Known causes of logged channel counts that disagree with the text, as the note explains them.
DISAGREEMENT_CAUSES = {
    "harmony_counter": ("the generator counts GPT-OSS harmony channels, which this model's text (<think> tags) does not "
                        "have, so it logs the whole text as analysis_chars and no final_chars"),
    "no_final_header": ("the generator found no well-formed '<|channel|>final<|message|>' header and logged the whole "
                        "text's length as final_chars"),
    "other": "counts that the text cannot explain",
}


def disagreement_cause(split, analysis_chars: int | None, final_chars: int | None, msg: str) -> str:
    """Which known cause (:data:`DISAGREEMENT_CAUSES`) explains one run's disagreeing logged counts."""
    if split.format != "harmony" and analysis_chars == split.text_chars and not final_chars:
        return "harmony_counter"
    if "whole text's length" in msg:
        return "no_final_header"
    return "other"


def disagreement_notes(causes: list[tuple[str, str, str]]) -> list[str]:
    """One line per model (and cause): how many runs' logged channel counts disagree, why, and one example."""
    groups: dict[tuple[str, str], list[str]] = {}
    for target, cause, source in causes:
        groups.setdefault((str(target), cause), []).append(source)
    return [f"{target}: {len(srcs)} runs' logged channel counts disagree with their text (the text is used): "
            f"{DISAGREEMENT_CAUSES[cause]}; e.g. {sorted(srcs)[0]}"
            for (target, cause), srcs in sorted(groups.items())]
