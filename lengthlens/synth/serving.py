"""Synthetic runs under several serving conditions, with planted truth: per-round time ratios that rise with load.

Under batching a verifier round costs more the more requests share the GPU, and a relaxed rule's
longer accepted runs and longer completions cost more of it: the time-per-round ratio of a relaxed
arm over its baseline rises with concurrency. :func:`loads` plants it as ``1 + per_doubling *
log2(c)`` (and every round slows by ``1 + slowdown * log2(c)``, which leaves ratios alone), so a
rule's T/T* = λ / gain × tpr_ratio crosses 1 at a known concurrency while R/R* stays put. Each
serving condition is the spec drawn with its own seed and the condition's ``concurrency`` logged.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from lengthlens.data.schema import POLARS_SCHEMA, STRICT
from lengthlens.data.serving import serving_label
from lengthlens.synth.flat import simulate
from lengthlens.synth.spec import Arm, Dataset, Effect, Pair, SynthSpec
from lengthlens.synth.truth import truth

__all__ = ["Load", "at_load", "loads", "serving_example", "serving_truth", "simulate_serving", "write_serving"]


@dataclass(frozen=True)
class Load:
    """One serving condition: its concurrency, how much slower every round is, and the relaxed arms' extra per-round cost."""

    concurrency: int
    slowdown: float = 1.0  # every round's time at this load over its time alone (baseline and relaxed alike)
    tpr_ratio: float = 1.0  # multiplies each relaxed arm's time per round relative to the baseline's

    @property
    def serving(self) -> str:
        return serving_label(concurrency=self.concurrency)


def loads(concurrency: tuple[int, ...] = (1, 4, 16, 64), *, per_doubling: float = 0.06,
          slowdown: float = 0.3) -> tuple[Load, ...]:
    """Serving conditions whose time-per-round ratio grows by ``per_doubling`` per doubling of concurrency.

    Examples
    --------
    >>> [round(ld.tpr_ratio, 2) for ld in loads((1, 4, 64))]
    [1.0, 1.12, 1.36]
    """
    return tuple(Load(c, 1 + slowdown * math.log2(c), 1 + per_doubling * math.log2(c)) for c in concurrency)


def _scaled(e: Effect, factor: float) -> Effect:
    return replace(e, time_per_round=e.time_per_round * factor)


def at_load(spec: SynthSpec, load: Load) -> SynthSpec:
    """``spec`` as served under ``load``: every time per round scaled, the relaxed arms' by ``tpr_ratio`` more."""
    relaxed = load.slowdown * load.tpr_ratio
    return replace(spec, strict=_scaled(spec.strict, load.slowdown),
                   arms=tuple(replace(a, effect=_scaled(a.effect, relaxed)) for a in spec.arms),
                   cells=tuple(replace(c, effect=_scaled(c.effect, load.slowdown if c.method == STRICT else relaxed))
                               for c in spec.cells))


def simulate_serving(spec: SynthSpec, served: tuple[Load, ...], *, seed: int = 0, text: bool = False) -> pl.DataFrame:
    """Every run of ``spec`` under every serving condition (condition k drawn with seed ``seed + k``), concurrency logged."""
    frames = [simulate(at_load(spec, ld), seed=seed + k, text=text).with_columns(
        pl.lit(ld.concurrency, dtype=pl.Int64).alias("concurrency")) for k, ld in enumerate(served)]
    return pl.concat(frames)


def serving_truth(spec: SynthSpec, served: tuple[Load, ...]) -> pl.DataFrame:
    """:func:`~lengthlens.synth.truth.truth` per serving condition, with ``concurrency``, ``serving`` and ``throughput_ratio``.

    ``throughput_ratio`` (output tokens per second, relaxed over strict) is λ / (T/T*) = gain / tpr_ratio;
    like λ it ignores censoring (give the datasets budgets far above their lengths).
    """
    return pl.concat([truth(at_load(spec, ld)).with_columns(
        pl.lit(ld.concurrency, dtype=pl.Int64).alias("concurrency"), pl.lit(ld.serving).alias("serving"),
        (pl.col("lambda_") / pl.col("time_ratio")).alias("throughput_ratio")) for ld in served])


def serving_example(n_items: int = 150) -> SynthSpec:
    """One pair, one dataset, two rules: T/T* of ``cactus`` (0.86 alone) crosses 1 near c = 6, of ``r_fuzzy`` (0.75) near c = 50.

    The budget is far above the lengths, so censoring does not bias λ.
    """
    s = Effect(lambda_=1.0, l_bar=2.5, accuracy=0.85, time_per_round=0.025)
    arms = (Arm("cactus", 0.18, replace(s, lambda_=1.20, l_bar=3.9, accuracy=0.80)),
            Arm("r_fuzzy", 0.15, replace(s, lambda_=1.05, l_bar=3.9, accuracy=0.83)))
    ds = (Dataset("gsm8k", n_items, 16384, "gsm8k", 300, 0.6, 0.6, 0.01, 3.6, 148, "openai/gsm8k:test:{i}"),)
    return SynthSpec(pairs=(Pair("Qwen3-8B", "Qwen3-0.6B", k=6, style="qwen"),), datasets=ds, arms=arms, strict=s,
                     seeds=(0, 1))


def write_serving(path: str | os.PathLike[str], spec: SynthSpec | None = None, served: tuple[Load, ...] | None = None,
                  *, seed: int = 0) -> Path:
    """Write :func:`simulate_serving` of the serving example (or ``spec``) as flat records (JSONL or Parquet by extension).

    Examples
    --------
    >>> import lengthlens as ll                                                     # doctest: +SKIP
    >>> from lengthlens.synth.serving import write_serving                          # doctest: +SKIP
    >>> p = write_serving("serving/runs.jsonl")                                     # doctest: +SKIP
    >>> ll.analyse(ll.load(p))["serving"]                                           # doctest: +SKIP
    """
    path = Path(path)
    df = simulate_serving(spec or serving_example(), served or loads(), seed=seed).select(POLARS_SCHEMA.names())
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in (".parquet", ".pq"):
        df.write_parquet(path, statistics=False)
    else:
        df.write_ndjson(path)
    return path
