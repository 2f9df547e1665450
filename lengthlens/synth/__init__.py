"""Synthetic run logs with planted, known effects, in the study's raw layout or as a flat record table.

Used by the embedded example (``lengthlens report --example``), by tests that need known truth,
and by paper-scale benchmarks. Nothing here is real data: every config.json says so in its
``synthetic`` field.

Generative model (per target-draft pair, dataset and arm; all draws from numpy ``Generator``\\ s
seeded by ``SeedSequence`` keyed on names, so the same spec and seed give the same bytes):

* item i has a log-length mean ``mu_i = m + tau * z_i`` (z_i standard normal, shared by all arms
  and pairs: the same prompts), with ``m = log(mean_len) - log_sd**2 / 2``,
  ``tau**2 = item_share * log_sd**2``, ``sigma**2 = (1 - item_share) * log_sd**2``;
* each run draws its uncensored length ``L = lambda_ * exp(mu_i + sigma * eps)`` independently
  per arm (strict has ``lambda_ = 1``), so the population ratio of mean lengths is exactly
  ``lambda_``; ``L`` is rounded to whole tokens (at least 4);
* a run with ``L >= budget`` is censored: ``output_tokens = budget``, ``finish_reason = "length"``,
  all of it thinking, no answer (graded as ``no_answer``, i.e. incorrect);
* an uncensored run puts ``F = round(L * phi)`` tokens in its answer and the rest in its thinking,
  with ``phi = final_frac`` for strict and ``(final_frac + (1 - think_share) * (lambda_ - 1)) /
  lambda_`` for a relaxed arm, so a ``think_share`` of the extra length lands in thinking;
* rounds ``R = round(L_obs / (l_bar + 1) * w)`` with ``w = 1 + rounds_sd * sqrt(3) * U(-1, 1)``
  (mean 1, bounded, so ``sum(L) / sum(R) -> l_bar + 1`` exactly and no clipping is needed);
  ``accepted = L_obs - R`` (accepted + rounds = output_tokens exactly), ``draft_tokens = k * R``;
* ``wall_time = R * time_per_round * exp(time_sd * N - time_sd**2 / 2)``;
* an answered run is correct when ``rho * a_i + sqrt(1 - rho**2) * N < Phi^-1(accuracy)`` (a_i an
  item difficulty shared by all arms), so P(correct | answered) is exactly the planted accuracy
  and correctness is paired across arms through the items.

Force-commit arms (the study's Table 4 intervention) rerun a relaxed base arm on the same items
and seeds: where the base run's thinking reached ``threshold`` tokens (censored runs always did),
the intervention run closes its thinking at the threshold and answers (correct with probability
``accuracy_after``); elsewhere it is the base run, byte for byte. Their run.json carries
``force_commit_fired`` (the record's field of that name).

Layout written by :func:`write_raw`: one tree per target-draft pair, because the study's folders
do not name the pair::

    <root>/<pair_slug>/runs/<dataset>/<method>/<params>/case_NNN/seed_K/{run.json, config.json, output.txt[, proposals.jsonl]}
    <root>/<pair_slug>/campaign/grades/<dataset>.json      (graded datasets)
    <root>/<pair_slug>/.lengthlens-synth                     (marker: a rewrite may replace the tree)

Counting conventions follow the study's logs: ``analysis_chars`` of harmony text is everything
before the final header, markup included (``final_chars`` the final message); for ``<think>`` text
they are the thinking and answer content lengths. proposals.jsonl has one row per emitted token
(accepted drafts, then a recovered or bonus token per round), as the study logs it.

``lengthlens.load(root)`` reads all pairs (the pair comes from config.json); :func:`raw_roots`
lists the per-pair ``runs`` folders for readers that want them one by one.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Collection, Iterator, Literal

import numpy as np
import polars as pl
from scipy.special import ndtr, ndtri

from lengthlens.data.schema import POLARS_SCHEMA, STRICT

# --------------------------------------------------------------------------------------------
# Spec
# --------------------------------------------------------------------------------------------

Style = Literal["harmony", "qwen"]
Kind = Literal["gsm8k", "boxed", "choice", "code", "chat"]

#: A fixed timestamp: real configs carry one, synthetic ones must not vary between writes.
FIXED_TIMESTAMP = "2026-01-01T00:00:00+00:00"
ENGINE_VERSION = "0.26.0"
#: File in each pair tree saying write_raw made it (so a rewrite may replace it).
SYNTH_MARKER = ".lengthlens-synth"
#: Shortest completion drawn, in tokens (keeps accepted_tokens > 0 and rounds >= 1).
MIN_LEN = 4


@dataclass(frozen=True)
class Pair:
    """A target-draft pair: names as config.json has them, drafts per round, text style, time per round."""

    target: str
    draft: str
    k: int = 6  # draft tokens proposed per verifier round
    style: Style = "harmony"  # output.txt format: GPT-OSS harmony channels or <think> tags

    @property
    def slug(self) -> str:
        """Folder name of this pair's tree: ``<target>__<draft>`` with unsafe characters replaced."""
        clean = lambda s: re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-")  # noqa: E731
        return f"{clean(self.target)}__{clean(self.draft)}"


@dataclass(frozen=True)
class Dataset:
    """A dataset: size, token budget, answer style and the strict arm's length distribution."""

    name: str
    n_items: int
    budget: int  # max_new_tokens
    kind: Kind = "gsm8k"  # answer style; "chat" is ungraded
    mean_len: float = 300.0  # strict mean completion tokens, before censoring
    log_sd: float = 0.7  # sd of log length (items + runs)
    item_share: float = 0.6  # share of the log-length variance that is between items
    final_frac: float = 0.02  # share of a strict completion that is answer (final channel)
    chars_per_token: float = 3.6
    prompt_tokens: int = 150
    source: str = "synthetic:{i}"  # prompt_source_id pattern, {i} = 0-based item index

    @property
    def graded(self) -> bool:
        """Whether runs get a correctness verdict (every kind but chat)."""
        return self.kind != "chat"


@dataclass(frozen=True)
class Effect:
    """Planted truth of one arm in one cell."""

    lambda_: float = 1.0  # true ratio of mean completion lengths vs strict, before censoring
    l_bar: float = 2.5  # accepted draft tokens per round (bonus excluded)
    accuracy: float = 0.8  # P(correct | the run answered)
    think_share: float = 0.9  # share of the extra length (vs strict) that is thinking
    time_per_round: float = 0.025  # seconds per verifier round


@dataclass(frozen=True)
class Arm:
    """A relaxed arm: method, alpha and its default planted effect."""

    method: str
    alpha: float
    effect: Effect

    @property
    def params(self) -> str:
        """The params folder name (``alpha0.35``, ``alphaneg0.3``)."""
        return alpha_params(self.alpha)


@dataclass(frozen=True)
class ForceCommit:
    """A force-commit intervention arm rerunning relaxed arm (method, alpha) with a thinking threshold."""

    method: str
    alpha: float
    threshold_frac: float = 0.85  # threshold = this share of the budget, rounded down to 100s
    threshold: int | None = None  # absolute threshold in tokens (overrides threshold_frac)
    accuracy_after: float = 0.3  # P(correct) of an answer forced at the threshold
    datasets: tuple[str, ...] | None = None  # None: every dataset

    def threshold_for(self, budget: int) -> int:
        """Thinking tokens at which the intervention closes the thinking, for a budget."""
        t = self.threshold if self.threshold is not None else int(self.threshold_frac * budget) // 100 * 100
        return max(1, min(t, budget - 2))

    @property
    def arm_method(self) -> str:
        """Method folder of the intervention arm."""
        return f"{self.method}_force_commit"

    def params_for(self, budget: int) -> str:
        """Params folder of the intervention arm (``alpha0.35_t28000``)."""
        return f"{alpha_params(self.alpha)}_t{self.threshold_for(budget)}"


@dataclass(frozen=True)
class CellEffect:
    """An effect for one (target, draft, dataset, method, params) cell, overriding the arm's default."""

    target: str
    draft: str
    dataset: str
    method: str  # "strict" for the baseline
    params: str
    effect: Effect


@dataclass(frozen=True)
class SynthSpec:
    """Everything a synthetic study is drawn from: pairs, datasets, arms, seeds and planted effects."""

    pairs: tuple[Pair, ...]
    datasets: tuple[Dataset, ...]
    arms: tuple[Arm, ...]
    strict: Effect = Effect()
    seeds: tuple[int, ...] = (0,)
    force_commit: tuple[ForceCommit, ...] = ()
    cells: tuple[CellEffect, ...] = ()  # per-cell overrides (paper_scale uses one per cell)
    rounds_sd: float = 0.05  # sd of the per-run rounds multiplier w (bounded uniform)
    time_sd: float = 0.10  # sd of log wall-time noise per run
    item_corr: float = 0.5  # rho: how strongly an item's difficulty drives correctness in all arms

    def __post_init__(self) -> None:
        names = [p.slug for p in self.pairs]
        if len(set(names)) != len(names):
            raise ValueError("pairs must be distinct")
        if len({d.name for d in self.datasets}) != len(self.datasets):
            raise ValueError("dataset names must be distinct")
        keys = [(a.method, a.params) for a in self.arms]
        if len(set(keys)) != len(keys) or any(a.method == STRICT for a in self.arms):
            raise ValueError("arms must be distinct relaxed (method, alpha) pairs; strict is implicit")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError("seeds must be distinct non-negative ints")
        for fc in self.force_commit:
            if (fc.method, alpha_params(fc.alpha)) not in keys:
                raise ValueError(f"force-commit arm {fc.method}/{alpha_params(fc.alpha)} has no base arm")
        if not 0 <= self.item_corr < 1:
            raise ValueError("item_corr must be in [0, 1)")
        w_max = 1 + self.rounds_sd * math.sqrt(3)
        for p in self.pairs:
            for d in self.datasets:
                for method, params, e in self._cell_effects(p, d):
                    where = f"{p.target} / {d.name} / {method} / {params}"
                    if not (e.lambda_ > 0 and e.l_bar >= 0 and 0 <= e.accuracy <= 1 and e.time_per_round > 0):
                        raise ValueError(f"{where}: effect out of range: {e}")
                    # Rounds are never clipped, so the planted l_bar is exact: (l+1)*w_max <= k+1.
                    if (e.l_bar + 1) * w_max > p.k + 1:
                        raise ValueError(f"{where}: l_bar {e.l_bar} too close to k={p.k} for rounds_sd {self.rounds_sd}")

    def _cell_effects(self, pair: Pair, ds: Dataset) -> list[tuple[str, str, Effect]]:
        out = [(STRICT, STRICT, self.effect(pair, ds, STRICT, STRICT))]
        out += [(a.method, a.params, self.effect(pair, ds, a.method, a.params)) for a in self.arms]
        return out

    def effect(self, pair: Pair, ds: Dataset, method: str, params: str) -> Effect:
        """The planted effect of a cell: its override if any, else the arm's (strict: lambda_ is 1)."""
        hit = _cell_index(self.cells).get((pair.target, pair.draft, ds.name, method, params))
        if hit is None:
            if method == STRICT:
                hit = self.strict
            else:
                hit = next(a.effect for a in self.arms if (a.method, a.params) == (method, params))
        return replace(hit, lambda_=1.0) if method == STRICT else hit

    @property
    def n_runs(self) -> int:
        """Runs the spec describes (all pairs, datasets, arms, items and seeds)."""
        per_item = sum(len(self._arms(d)) * d.n_items for d in self.datasets)
        return len(self.pairs) * len(self.seeds) * per_item

    def _arms(self, ds: Dataset) -> list[_ArmDef]:
        out = [_ArmDef(STRICT, STRICT, None, None, None)]
        out += [_ArmDef(a.method, a.params, a.alpha, None, None) for a in self.arms]
        for fc in self.force_commit:
            if fc.datasets is None or ds.name in fc.datasets:
                base = 1 + next(i for i, a in enumerate(self.arms) if (a.method, a.params) == (fc.method, alpha_params(fc.alpha)))
                out.append(_ArmDef(fc.arm_method, fc.params_for(ds.budget), fc.alpha, base, fc))
        return out


@dataclass(frozen=True)
class _ArmDef:
    method: str
    params: str
    alpha: float | None
    base: int | None  # index of the base arm (force-commit arms only)
    fc: ForceCommit | None


@lru_cache(maxsize=8)
def _cell_index(cells: tuple[CellEffect, ...]) -> dict[tuple[str, str, str, str, str], Effect]:
    return {(c.target, c.draft, c.dataset, c.method, c.params): c.effect for c in cells}


def alpha_params(alpha: float) -> str:
    """Params folder of an alpha as the study names it: 0.35 -> ``alpha0.35``, -0.3 -> ``alphaneg0.3``."""
    return ("alphaneg" if alpha < 0 else "alpha") + repr(abs(float(alpha)))


# --------------------------------------------------------------------------------------------
# Ready-made specs
# --------------------------------------------------------------------------------------------

#: The study's five relaxed rules.
METHODS = ("mentored_dec", "cactus", "spec_casc_opt", "spec_casc_tok", "r_fuzzy")

_SOURCES = {
    "gsm8k": "openai/gsm8k:test:{i}",
    "aime24": "HuggingFaceH4/aime_2024:train:{i}",
    "humaneval": "openai/openai_humaneval:test:HumanEval/{i}",
    "livecodebench": "livecodebench/code_generation_lite:test.jsonl:{i}",
    "mtbench": "HuggingFaceH4/mt_bench_prompts:train:{i}",
    "longbench_v2": "zai-org/LongBench-v2:train:{i}",
}


def _paper_datasets(n_items: dict[str, int] | None = None) -> tuple[Dataset, ...]:
    """The study's six datasets; lengths, budgets and answer shares calibrated on its strict runs."""
    n = {"gsm8k": 1319, "aime24": 30, "humaneval": 164, "livecodebench": 400, "mtbench": 80, "longbench_v2": 503}
    n.update(n_items or {})
    return (
        Dataset("gsm8k", n["gsm8k"], 2048, "gsm8k", 275, 0.70, 0.6, 0.01, 3.6, 148, _SOURCES["gsm8k"]),
        Dataset("aime24", n["aime24"], 32768, "boxed", 9000, 1.00, 0.6, 0.15, 2.85, 172, _SOURCES["aime24"]),
        Dataset("humaneval", n["humaneval"], 9000, "code", 675, 0.50, 0.6, 0.35, 4.2, 219, _SOURCES["humaneval"]),
        Dataset("livecodebench", n["livecodebench"], 12000, "code", 3750, 0.60, 0.6, 0.50, 3.8, 493, _SOURCES["livecodebench"]),
        Dataset("mtbench", n["mtbench"], 4096, "chat", 1690, 0.90, 0.6, 0.55, 3.9, 117, _SOURCES["mtbench"]),
        Dataset("longbench_v2", n["longbench_v2"], 8192, "choice", 1470, 0.76, 0.6, 0.02, 4.6, 28000, _SOURCES["longbench_v2"]),
    )


def example() -> SynthSpec:
    """A small study for ``report --example`` and quick tests: 2 pairs, 3 datasets, 5 rules, force-commit arms."""
    pairs = (
        Pair("gpt-oss-20b", "nebius/EAGLE3-gpt-oss-20b", k=6, style="harmony"),
        Pair("Qwen3-8B", "Qwen3-0.6B", k=5, style="qwen"),
    )
    datasets = (
        Dataset("gsm8k", 16, 2048, "gsm8k", 300, 0.7, 0.6, 0.01, 3.6, 148, _SOURCES["gsm8k"]),
        # A smaller budget than the study's 32768 so that the example shows censoring at small size.
        Dataset("aime24", 12, 16384, "boxed", 7000, 0.9, 0.6, 0.15, 2.85, 172, _SOURCES["aime24"]),
        Dataset("longbench_v2", 12, 8192, "choice", 1500, 0.76, 0.6, 0.02, 4.6, 28000, _SOURCES["longbench_v2"]),
    )
    s = Effect(lambda_=1.0, l_bar=2.5, accuracy=0.85, time_per_round=0.025)
    arms = (
        Arm("mentored_dec", 0.55, replace(s, lambda_=1.35, l_bar=3.2, accuracy=0.83, time_per_round=0.026)),
        Arm("cactus", 0.18, replace(s, lambda_=1.70, l_bar=3.9, accuracy=0.78, time_per_round=0.026)),
        Arm("spec_casc_opt", -0.1, replace(s, lambda_=1.20, l_bar=3.0, accuracy=0.84, time_per_round=0.026)),
        Arm("spec_casc_tok", 0.55, replace(s, lambda_=1.60, l_bar=3.7, accuracy=0.80, time_per_round=0.026)),
        Arm("r_fuzzy", 0.15, replace(s, lambda_=1.50, l_bar=3.5, accuracy=0.81, time_per_round=0.026)),
    )
    # Threshold near the budget, as the study's 28000 of 32768; a forced answer is right ~45 % of
    # the time (the study: 439 of 1,132), against ~0 for runs left to hit the budget.
    fc = (ForceCommit("spec_casc_tok", 0.55, threshold_frac=0.85, accuracy_after=0.45),
          ForceCommit("cactus", 0.18, threshold_frac=0.85, accuracy_after=0.45))
    return SynthSpec(pairs=pairs, datasets=datasets, arms=arms, strict=s, seeds=(0,), force_commit=fc)


def paper_scale(*, force_commit: bool = False, seeds: tuple[int, ...] = (0,),
                n_items: dict[str, int] | None = None) -> SynthSpec:
    """The study at full size: 12 pairs x 6 datasets x (strict + 5 rules), ~180k runs; mean gain 1.34, mean lambda 1.54.

    Per-cell effects vary around each rule's value by dataset and pair through multipliers whose
    means are 1 over the full grid, so the grid means are exactly the rules' means.
    """
    # (target, draft, k, style, strict l_bar, seconds per round)
    pair_rows = [
        ("gpt-oss-20b", "nebius/EAGLE3-gpt-oss-20b", 6, "harmony", 2.6, 0.022),
        ("gpt-oss-120b", "nvidia/gpt-oss-120b-Eagle3", 6, "harmony", 2.7, 0.034),
        ("Qwen3-8B", "Qwen3-0.6B", 5, "qwen", 2.1, 0.030),
        ("Qwen3-8B", "AngelSlim/Qwen3-8B_eagle3", 6, "qwen", 2.5, 0.024),
        ("Qwen3-14B", "Qwen3-0.6B", 5, "qwen", 2.0, 0.041),
        ("Qwen3-14B", "Qwen3-1.7B", 5, "qwen", 2.2, 0.047),
        ("Qwen3-32B", "Qwen3-0.6B", 5, "qwen", 1.9, 0.066),
        ("Qwen3-32B", "Qwen3-1.7B", 5, "qwen", 2.1, 0.071),
        ("Qwen3-30B-A3B", "Qwen3-0.6B", 5, "qwen", 1.9, 0.028),
        ("DeepSeek-R1-Distill-Qwen-14B", "DeepSeek-R1-Distill-Qwen-1.5B", 5, "qwen", 2.0, 0.043),
        ("DeepSeek-R1-Distill-Llama-8B", "yuhuili/EAGLE3-DeepSeek-R1-Distill-LLaMA-8B", 6, "qwen", 2.6, 0.026),
        ("QwQ-32B", "Qwen2.5-0.5B-Instruct", 5, "qwen", 1.8, 0.068),
    ]
    pairs = tuple(Pair(t, d, k, st) for t, d, k, st, _, _ in pair_rows)
    datasets = _paper_datasets(n_items)
    # Rule -> (alpha, gain, lambda_, accuracy drop per unit of dataset difficulty).
    rules = {
        "mentored_dec": (0.55, 1.30, 1.45, 0.010),
        "cactus": (0.18, 1.42, 1.70, 0.040),
        "spec_casc_opt": (-0.1, 1.25, 1.35, 0.005),
        "spec_casc_tok": (0.55, 1.38, 1.62, 0.030),
        "r_fuzzy": (0.15, 1.35, 1.58, 0.020),
    }
    # Dataset multipliers (each averages 1 over the six datasets): lambda-1, gain-1, strict l_bar.
    ds_lam = {"gsm8k": 1.1, "aime24": 1.3, "humaneval": 0.8, "livecodebench": 1.0, "mtbench": 0.7, "longbench_v2": 1.1}
    ds_gain = {"gsm8k": 1.15, "aime24": 0.95, "humaneval": 1.05, "livecodebench": 0.95, "mtbench": 0.9, "longbench_v2": 1.0}
    ds_lbar = {"gsm8k": 1.05, "aime24": 0.95, "humaneval": 1.05, "livecodebench": 0.95, "mtbench": 0.95, "longbench_v2": 0.9}
    ds_acc = {"gsm8k": 0.95, "aime24": 0.60, "humaneval": 0.92, "livecodebench": 0.45, "mtbench": 0.9, "longbench_v2": 0.50}
    ds_drop = {"gsm8k": 0.5, "aime24": 2.0, "humaneval": 1.0, "livecodebench": 1.5, "mtbench": 0.0, "longbench_v2": 1.2}
    ds_think = {"mtbench": 0.6, "longbench_v2": 0.85}
    ds_tpr = {"longbench_v2": 8.5, "livecodebench": 1.05}  # long prompts make every round slower
    # Pair multipliers, mean exactly 1, in fixed shuffled orders so pairs differ in both.
    lam_p = np.linspace(0.8, 1.2, 12)[[5, 0, 9, 3, 11, 7, 1, 10, 2, 8, 4, 6]]
    gain_p = np.linspace(0.85, 1.15, 12)[[2, 7, 0, 10, 4, 9, 6, 1, 11, 3, 8, 5]]
    acc_p = np.linspace(-0.06, 0.06, 12)[[8, 3, 6, 0, 10, 5, 11, 2, 7, 1, 9, 4]]
    strict_default = Effect()
    arms = tuple(Arm(m, a, Effect(lambda_=lam, l_bar=(strict_default.l_bar + 1) * g - 1))
                 for m, (a, g, lam, _) in rules.items())
    cells: list[CellEffect] = []
    for pi, (t, d, _k, _st, lbar, tpr) in enumerate(pair_rows):
        for ds in datasets:
            l0 = round(lbar * ds_lbar[ds.name], 4)
            acc0 = float(np.clip(ds_acc[ds.name] + acc_p[pi], 0.02, 0.99))
            tpr0 = tpr * ds_tpr.get(ds.name, 1.0)
            think = ds_think.get(ds.name, 0.9)
            cells.append(CellEffect(t, d, ds.name, STRICT, STRICT, Effect(1.0, l0, acc0, think, round(tpr0, 6))))
            for m, (a, g, lam, drop) in rules.items():
                gain = 1 + (g - 1) * ds_gain[ds.name] * gain_p[pi]
                eff = Effect(
                    lambda_=round(float(1 + (lam - 1) * ds_lam[ds.name] * lam_p[pi]), 6),
                    l_bar=round(float(gain * (l0 + 1) - 1), 6),
                    accuracy=float(np.clip(acc0 - drop * ds_drop[ds.name], 0.02, 0.99)),
                    think_share=think,
                    time_per_round=round(tpr0 * 1.03, 6),  # relaxed rules cost a little per round
                )
                cells.append(CellEffect(t, d, ds.name, m, alpha_params(a), eff))
    fcs = tuple(ForceCommit(m, rules[m][0], threshold_frac=0.85, accuracy_after=0.3,
                            datasets=("aime24", "livecodebench", "gsm8k"))
                for m in ("spec_casc_tok", "cactus")) if force_commit else ()
    return SynthSpec(pairs=pairs, datasets=datasets, arms=arms, strict=strict_default, seeds=seeds,
                     force_commit=fcs, cells=tuple(cells))


# --------------------------------------------------------------------------------------------
# Drawing the runs
# --------------------------------------------------------------------------------------------

def _key(*names: str) -> list[int]:
    """Stable 32-bit keys from names (crc32, not hash(): no per-process randomisation)."""
    return [zlib.crc32(n.encode("utf-8")) for n in names]


def _rng(seed: int, *names: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), *_key(*names)])))


@dataclass
class _Items:
    """Per-item quantities shared by every arm and pair of a dataset."""

    mu: np.ndarray  # log-length mean
    sigma: float
    diff: np.ndarray  # item difficulty (standard normal)
    ref: list[str | None]  # reference answer
    ref_num: np.ndarray  # numeric/letter index of the reference
    prompt_tokens: np.ndarray


def _items(ds: Dataset, seed: int) -> _Items:
    rng = _rng(seed, "items", ds.name)
    n = ds.n_items
    z = rng.standard_normal(n)
    diff = rng.standard_normal(n)
    tau = math.sqrt(ds.item_share) * ds.log_sd
    sigma = math.sqrt(1 - ds.item_share) * ds.log_sd
    mu = math.log(ds.mean_len) - ds.log_sd ** 2 / 2 + tau * z
    prompt = np.maximum(1, np.rint(ds.prompt_tokens * np.exp(0.25 * rng.standard_normal(n) - 0.25 ** 2 / 2))).astype(np.int64)
    if ds.kind == "gsm8k":
        num = rng.integers(2, 1000, n)
        ref: list[str | None] = [str(v) for v in num.tolist()]
    elif ds.kind == "boxed":
        num = rng.integers(0, 1000, n)
        ref = [str(v) for v in num.tolist()]
    elif ds.kind == "choice":
        num = rng.integers(0, 4, n)
        ref = ["ABCD"[v] for v in num.tolist()]
    else:
        num = np.zeros(n, dtype=np.int64)
        ref = [None] * n
    return _Items(mu, sigma, diff, ref, num, prompt)


def _phi(ds: Dataset, e: Effect) -> float:
    """Share of an uncensored completion that is answer, so that think_share of the extra length is thinking."""
    return float(np.clip((ds.final_frac + (1 - e.think_share) * (e.lambda_ - 1)) / e.lambda_, 0.0, 0.95))


def _rounds(rng: np.random.Generator, L: np.ndarray, e: Effect, k: int, spec: SynthSpec):
    w = 1 + spec.rounds_sd * math.sqrt(3) * rng.uniform(-1.0, 1.0, L.shape)
    R = np.rint(L / (e.l_bar + 1) * w).astype(np.int64)
    # Only the extremes of tiny runs can leave these bounds (the spec rules out clipping otherwise).
    R = np.clip(R, -(-L // (k + 1)), np.maximum(L - 1, 1))
    wall = R * e.time_per_round * np.exp(spec.time_sd * rng.standard_normal(L.shape) - spec.time_sd ** 2 / 2)
    return R, wall


def _group(spec: SynthSpec, pair: Pair, ds: Dataset, seed: int) -> dict[str, Any]:
    """All runs of one (pair, dataset), arm after arm, item-major, as columns of numpy arrays."""
    it = _items(ds, seed)
    n, S = ds.n_items, len(spec.seeds)
    B = ds.budget
    rho = spec.item_corr
    strict_e = spec.effect(pair, ds, STRICT, STRICT)
    final_fc = max(1, int(round(ds.final_frac * ds.mean_len)))
    cols: dict[str, list[np.ndarray]] = {}
    arm_rows: list[_ArmDef] = spec._arms(ds)
    drawn: list[dict[str, np.ndarray]] = []
    for ai, arm in enumerate(arm_rows):
        rng = _rng(seed, pair.target, pair.draft, ds.name, arm.method, arm.params)
        if arm.fc is None:
            e = spec.effect(pair, ds, arm.method, arm.params)
            x = e.lambda_ * np.exp(it.mu[:, None] + it.sigma * rng.standard_normal((n, S)))
            L_true = np.maximum(np.rint(x), MIN_LEN).astype(np.int64)
            cens = L_true >= B
            L = np.minimum(L_true, B)
            F = np.where(cens, 0, np.clip(np.rint(L * _phi(ds, e)), 1, L - 1)).astype(np.int64)
            lat = rho * it.diff[:, None] + math.sqrt(1 - rho ** 2) * rng.standard_normal((n, S))
            hit = lat < ndtri(e.accuracy)
            R, wall = _rounds(rng, L, e, pair.k, spec)
            aux = rng.integers(0, 2 ** 31 - 1, (n, S, 2))
            jit = np.exp(0.04 * rng.standard_normal((n, S)))
            d = dict(L_true=L_true, cens=cens, L=L, F=F, hit=hit, R=R, wall=wall, aux0=aux[..., 0], aux1=aux[..., 1],
                     jit=jit, fired=np.zeros((n, S), bool))
        else:
            base = drawn[arm.base]
            be = spec.effect(pair, ds, arm_rows[arm.base].method, arm_rows[arm.base].params)
            t = arm.fc.threshold_for(B)
            fired = (base["L"] - base["F"]) >= t
            Ff = min(final_fc, B - t - 1)
            Lf = np.full((n, S), t + Ff, dtype=np.int64)
            lat = rho * it.diff[:, None] + math.sqrt(1 - rho ** 2) * rng.standard_normal((n, S))
            hitf = lat < ndtri(arm.fc.accuracy_after)
            Rf, wallf = _rounds(rng, Lf, be, pair.k, spec)
            d = {}
            for name, v in base.items():
                d[name] = v.copy()
            d["L_true"] = np.where(fired, Lf, base["L_true"])
            d["cens"] = np.where(fired, False, base["cens"])
            d["L"] = np.where(fired, Lf, base["L"])
            d["F"] = np.where(fired, Ff, base["F"])
            d["hit"] = np.where(fired, hitf, base["hit"])
            d["R"] = np.where(fired, Rf, base["R"])
            d["wall"] = np.where(fired, wallf, base["wall"])
            d["fired"] = fired
        drawn.append(d)
        for name, v in d.items():
            cols.setdefault(name, []).append(v.reshape(-1))
        cols.setdefault("arm", []).append(np.full(n * S, ai, dtype=np.int64))
        cols.setdefault("item", []).append(np.repeat(np.arange(n), S))
        cols.setdefault("seed", []).append(np.tile(np.asarray(spec.seeds, dtype=np.int64), n))
    g = {k: np.concatenate(v) for k, v in cols.items()}
    g["T"] = g["L"] - g["F"]
    g["A"] = g["L"] - g["R"]
    g["D"] = pair.k * g["R"]
    g["answered"] = ~g["cens"]
    g["correct_if"] = g["hit"] & g["answered"]
    g["arms"] = arm_rows
    g["items"] = it
    g["strict_e"] = strict_e
    return g


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------

_THINK_PHRASES = (
    "we need to check the next step carefully", "let me verify the intermediate result again",
    "compare it with the condition in the statement", "so the value stays consistent",
    "wait, reconsider the case where the assumption fails", "recompute the total from the parts",
    "hmm, that matches the earlier estimate", "double check the edge case before moving on",
    "alternatively, look at it from the other side", "the constraint still holds here",
    "but the previous step might have dropped a term", "write the relation once more",
    "then simplify both sides", "that seems off, so go back one step", "the pieces fit together now",
)
_ANSWER_PHRASES = (
    "the result follows from the steps above", "the check confirms it", "here is a short summary",
    "each part of the reasoning is stated once", "the final answer is given below",
    "the approach handles the edge cases", "nothing else needs to change",
)
_BASE_CHARS = 1 << 18  # one copy of the filler; longer texts repeat it


@lru_cache(maxsize=4)
def _filler(phrases: tuple[str, ...], salt: int) -> tuple[str, np.ndarray]:
    """A fixed pseudo-text of plain sentences (no digits, no markup) and the offsets where its words start."""
    rng = np.random.Generator(np.random.PCG64(salt))
    # Drawn in bulk: sentences of 1-3 phrases; enough of them for _BASE_CHARS (phrases are >= 20 chars).
    n_sent = _BASE_CHARS // 20
    sizes = rng.integers(1, 4, n_sent).tolist()
    picks = rng.integers(0, len(phrases), 3 * n_sent).tolist()
    out: list[str] = []
    pos = 0
    for n in sizes:
        sentence = ", ".join(phrases[i] for i in picks[pos:pos + n])
        pos += n
        out.append(sentence[0].upper() + sentence[1:] + ".")
    text = " ".join(out)[:_BASE_CHARS]
    starts = np.flatnonzero(np.frombuffer(text.encode("ascii"), dtype=np.uint8)[:-1] == 32) + 1
    return text, starts[starts < _BASE_CHARS // 2]


def _words(kind: str, aux: int, n: int) -> str:
    """``n`` characters of filler starting at a word boundary chosen by ``aux``; never ends in a space."""
    if n <= 0:
        return ""
    text, starts = _filler(_THINK_PHRASES if kind == "think" else _ANSWER_PHRASES, 7 if kind == "think" else 11)
    off = int(starts[aux % len(starts)])
    if off + n > len(text):
        text = text * (1 + (off + n) // len(text))
    s = text[off:off + n]
    return s[:-1] + "." if s[-1] == " " else s


def _answer_core(ds: Dataset, item: int, ref_num: int, correct: bool, aux: int) -> tuple[str, str | None]:
    """The graded part of an answer in the dataset's style, and the answer string a grader extracts."""
    if ds.kind == "gsm8k":
        ans = ref_num if correct else ref_num + 1 + aux % 50
        return f"#### {ans}", str(ans)
    if ds.kind == "boxed":
        ans = ref_num if correct else (ref_num + 1 + aux % 999) % 1000
        return f"\\[\n\\boxed{{{ans}}}\n\\]", str(ans)
    if ds.kind == "choice":
        ans = "ABCD"[ref_num if correct else (ref_num + 1 + aux % 3) % 4]
        return f"The correct answer is ({ans})", ans
    if ds.kind == "code":
        body = f"    return _reference_{item + 1:03d}(*args)" if correct else "    return None  # incomplete"
        return f"```python\ndef {_entry_point(item)}(*args):\n{body}\n```", None
    return "", None


def _entry_point(item: int) -> str:
    return f"task_{item + 1:03d}"


_H_OPEN = "<|channel|>analysis<|message|>"
_H_CLOSE = "<|end|><|start|>assistant"
_H_FINAL = "<|channel|>final<|message|>"


def _compose(style: Style, thinking: str, answer: str | None) -> tuple[str, int, int]:
    """output.txt text and its logged (analysis_chars, final_chars), the study's counting convention.

    Harmony: analysis_chars is everything before the final header, markup included; final_chars
    the final message's content. Think tags: content lengths of thinking and answer (no
    surrounding whitespace is written, so stripping changes nothing). ``answer=None``: censored.
    """
    if style == "harmony":
        if answer is None:
            text = _H_OPEN + thinking
            return text, len(text), 0
        head = _H_OPEN + thinking + _H_CLOSE
        return head + _H_FINAL + answer, len(head), len(answer)
    if answer is None:
        return "<think>" + thinking, len(thinking), 0
    return "<think>" + thinking + "</think>" + answer, len(thinking), len(answer)


# --------------------------------------------------------------------------------------------
# Records (flat) — one row per run, the schema's fields, plus planted extras for tests
# --------------------------------------------------------------------------------------------

def _run_rows(spec: SynthSpec, pair: Pair, ds: Dataset, seed: int, *, text: bool) -> Iterator[dict[str, Any]]:
    """One dict per run of a (pair, dataset): record fields plus the pieces the writers need."""
    g = _group(spec, pair, ds, seed)
    it: _Items = g["items"]
    arms: list[_ArmDef] = g["arms"]
    cols = {k: v.tolist() for k, v in g.items() if isinstance(v, np.ndarray)}
    cpt = ds.chars_per_token
    for j in range(len(cols["L"])):
        arm = arms[cols["arm"][j]]
        i = cols["item"][j]
        L, F, T, R, A = cols["L"][j], cols["F"][j], cols["T"][j], cols["R"][j], cols["A"][j]
        cens = cols["cens"][j]
        jit, aux0, aux1 = cols["jit"][j], cols["aux0"][j], cols["aux1"][j]
        correct = bool(cols["correct_if"][j])
        n_think = max(1, int(round(T * cpt * jit)))
        if cens:
            core, extracted, answer = "", None, None
        else:
            core, extracted = _answer_core(ds, i, int(it.ref_num[i]), correct, aux1)
            n_final = int(round(F * cpt * jit))
            n_pre = n_final - len(core) - (2 if core else 0)
            pre = _words("answer", aux1, n_pre) if n_pre > 0 else ""  # short: always built
            answer = pre + "\n\n" + core if (pre and core) else (pre or core or ".")
        if text:
            out_text, a_chars, f_chars = _compose(pair.style, _words("think", aux0, n_think), answer)
        else:
            # Same counts as _compose, without building the strings (flat tables without text).
            out_text, f_chars = None, 0 if answer is None else len(answer)
            if pair.style == "harmony":
                a_chars = len(_H_OPEN) + n_think + (0 if answer is None else len(_H_CLOSE))
            else:
                a_chars = n_think
        yield {
            "arm": arm, "item": i, "L_true": cols["L_true"][j], "fired": cols["fired"][j],
            "thinking_tokens": T, "answer_tokens": F, "extracted": extracted, "text_value": out_text,
            "target": pair.target, "draft": pair.draft, "dataset": ds.name, "method": arm.method,
            "params": arm.params, "alpha": arm.alpha, "item_id": _case(i), "seed": cols["seed"][j],
            "status": "ok", "output_tokens": L, "finish_reason": "length" if cens else "stop",
            "max_new_tokens": ds.budget, "draft_rounds": R, "accepted_tokens": A, "draft_tokens": cols["D"][j],
            "wall_time_s": cols["wall"][j], "correct": correct if ds.graded else None,
            "temperature": 1.0, "top_p": 1.0, "input_tokens": int(it.prompt_tokens[i]), "l_bar_logged": A / R,
            "analysis_chars": a_chars, "final_chars": f_chars, "reached_final_channel": not cens,
            "reference_answer": it.ref[i], "prompt_source_id": ds.source.format(i=i), "backend": "vllm",
            "engine_version": ENGINE_VERSION, "force_commit_fired": bool(cols["fired"][j]) if arm.fc else None,
            "text": out_text, "source": None,
        }


def _case(i: int) -> str:
    return f"case_{i + 1:03d}"


_EXTRA_COLS = {"pair": pl.String, "L_true": pl.Int64, "censored": pl.Boolean, "fired": pl.Boolean,
               "thinking_tokens": pl.Int64, "answer_tokens": pl.Int64}


def simulate(spec: SynthSpec, *, seed: int = 0, text: bool = False) -> pl.DataFrame:
    """Every run as a normalized record (POLARS_SCHEMA columns) plus planted extras.

    Extras: ``pair`` (slug), ``L_true`` (length before censoring), ``censored``, ``fired``
    (force-commit intervention fired), ``thinking_tokens``, ``answer_tokens``.
    """
    frames = []
    names = list(POLARS_SCHEMA.names())
    for pair in spec.pairs:
        for ds in spec.datasets:
            rows = list(_run_rows(spec, pair, ds, seed, text=text))
            # .get: a field the schema gains later is null here until the generator learns it.
            data = {c: [r.get(c) for r in rows] for c in names}
            data["pair"] = [pair.slug] * len(rows)
            data["L_true"] = [r["L_true"] for r in rows]
            data["censored"] = [r["finish_reason"] == "length" for r in rows]
            data["fired"] = [r["fired"] for r in rows]
            data["thinking_tokens"] = [r["thinking_tokens"] for r in rows]
            data["answer_tokens"] = [r["answer_tokens"] for r in rows]
            frames.append(pl.DataFrame(data, schema={**dict(POLARS_SCHEMA), **_EXTRA_COLS}))
    return pl.concat(frames) if frames else pl.DataFrame(schema={**dict(POLARS_SCHEMA), **_EXTRA_COLS})


def write_flat(spec: SynthSpec, path: str | os.PathLike[str], *, seed: int = 0, text: bool = False) -> Path:
    """Write every run as one normalized record to JSONL, CSV or Parquet (by extension); return the path."""
    path = Path(path)
    df = simulate(spec, seed=seed, text=text).select(POLARS_SCHEMA.names())
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        df.write_ndjson(path)
    elif suffix == ".csv":
        df.write_csv(path)
    elif suffix in (".parquet", ".pq"):
        df.write_parquet(path, statistics=False)
    else:
        raise ValueError(f"{path}: unknown extension (use .jsonl, .csv or .parquet)")
    return path


# --------------------------------------------------------------------------------------------
# Raw layout
# --------------------------------------------------------------------------------------------

_ACCEPTANCE_RULE = {
    STRICT: "accept iff p(x) / q(x) >= u",
    "mentored_dec": "accept iff p(x) / ((1-alpha) * q(x)) >= u  (alpha = {a})",
    "cactus": "accept iff gamma_x / q(x) >= u, gamma_x = min(p(x) + sqrt(2*{a}*p(x)*(1-p(x))), 1)",
    "spec_casc_opt": "defer to strict p/q test iff max_u q(u) < max_u p(u) - {a}*TV(p,q), else accept unconditionally",
    "spec_casc_tok": "pi_rej(v) = q(v)+eta*p(v) for v with p(v) >= (1-{a})*max(p), else eta*p(v)",
    "r_fuzzy": "accept iff JSD(p,q) < {a} (then unconditional accept), else strict p/q test",
}


def _tag(method: str, params: str, alpha: float | None) -> str:
    """The study's config `tag`: ``strict``, ``cactus0.35``, ``specCascOptneg0.3`` (camel-cased method)."""
    if method == STRICT:
        return STRICT
    parts = method.split("_")
    camel = parts[0] + "".join(p.capitalize() for p in parts[1:])
    return camel + params[len("alpha"):]


class _Template:
    """JSON text with placeholders, rendered by interleaving: json.dumps(indent=2) once per arm, not per run."""

    _MARK = re.compile(r'"?@@(\w+)@@"?')

    def __init__(self, obj: Any) -> None:
        text = json.dumps(obj, indent=2)
        pieces = self._MARK.split(text)
        self.parts = pieces[0::2]
        self.keys = pieces[1::2]

    def render(self, values: dict[str, str]) -> str:
        out = [self.parts[0]]
        for key, part in zip(self.keys, self.parts[1:]):
            out.append(values[key])
            out.append(part)
        return "".join(out)


def _j(v: Any) -> str:
    """One JSON scalar as json.dumps writes it."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, float):
        return float.__repr__(v)
    if isinstance(v, int):
        return int.__repr__(v)
    return json.dumps(v)


_RUN_KEYS = ("status", "backend", "wall_time_seconds", "server_request_ordinal", "input_tokens", "output_tokens",
             "finish_reason", "eos_reached", "reached_max_new_tokens", "usage", "analysis_chars", "final_chars",
             "reached_final_channel", "draft_tokens", "accepted_tokens", "draft_rounds", "draft_acceptance_rate",
             "l_bar", "mean_accept_length", "L_over_l_bar")


@lru_cache(maxsize=2)
def _run_template(force_commit: bool = False) -> _Template:
    keys = _RUN_KEYS + (("force_commit_fired",) if force_commit else ())
    obj: dict[str, Any] = {k: f"@@{k}@@" for k in keys}
    obj["status"], obj["backend"], obj["server_request_ordinal"] = "ok", "vllm", 1
    obj["usage"] = {"prompt_tokens": "@@prompt_tokens@@", "total_tokens": "@@total_tokens@@",
                    "completion_tokens": "@@completion_tokens@@", "prompt_tokens_details": None}
    return _Template(obj)


def _config_template(spec: SynthSpec, pair: Pair, ds: Dataset, arm: _ArmDef, seed: int) -> _Template:
    lossy = arm.method != STRICT
    base_method = arm.fc.method if arm.fc is not None else arm.method
    rule = _ACCEPTANCE_RULE.get(base_method, "accept iff the {m} rule accepts (alpha = {a})")
    params: dict[str, Any] = {} if not lossy else {"alpha": arm.alpha}
    if arm.fc is not None:
        rule += f"; force-commit: close the thinking at {arm.fc.threshold_for(ds.budget)} tokens and answer"
        params["threshold"] = arm.fc.threshold_for(ds.budget)
    obj = {
        "timestamp_utc": FIXED_TIMESTAMP,
        "backend": "vllm",
        "tag": _tag(arm.method, arm.params, arm.alpha),
        "mode": "lossy" if lossy else "strict",
        "lossy_method": arm.method if lossy else None,
        "lossy_parameters": params,
        "acceptance_rule": rule.format(a=arm.alpha, m=base_method),
        "model": pair.target,
        "draft_model": pair.draft,
        "seed": "@@seed@@",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": ds.budget,
        "input_tokens_archived": "@@input_tokens@@",
        "prompt_case": "@@case@@",
        "prompt_source_id": "@@source_id@@",
        "reference_answer": "@@reference@@",
        "server_request_ordinal": 1,
        "vllm": {"version": ENGINE_VERSION, "commit_id": "synthetic"},
        "synthetic": {"generator": "lengthlens.synth", "seed": int(seed), "speculative_tokens": pair.k},
    }
    return _Template(obj)


_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def _write(path: str, text: str) -> int:
    """Plain write with the fewest system calls (paper scale writes ~540k files)."""
    data = text.encode("utf-8")
    fd = os.open(path, _O_NEW, 0o644)
    try:
        view, n = memoryview(data), 0
        while n < len(data):
            n += os.write(fd, view[n:])
    finally:
        os.close(fd)
    return len(data)


def _grade_entry(ds: Dataset, r: dict[str, Any], tag: str) -> dict[str, Any]:
    arm: _ArmDef = r["arm"]
    cens = r["finish_reason"] == "length"
    e: dict[str, Any] = {"case": r["item_id"], "seed": r["seed"], "tag": tag, "method": arm.method,
                         "params": arm.params, "mode": "strict" if arm.method == STRICT else "lossy",
                         "lossy_method": None if arm.method == STRICT else arm.method}
    if ds.kind == "code":
        key = "entry_point" if "humaneval" in ds.name else "question_id"
        e[key] = _entry_point(r["item"])
        e["extracted_by"] = "no_final_channel" if cens else "fenced_block"
        e["verdict"] = "no_answer" if cens else ("passed" if r["correct"] else "failed")
        e["detail"] = "" if cens or r["correct"] else "AssertionError"
    else:
        e["alpha"] = arm.alpha
        e["reference"] = r["reference_answer"]
        e["answer"] = r["extracted"]
        e["extracted_by"] = "no_final_channel" if cens else {"gsm8k": "hash_marker", "boxed": "boxed", "choice": "answer_phrase"}[ds.kind]
        e["verdict"] = "no_answer" if cens else ("correct" if r["correct"] else "wrong")
    e.update(output_tokens=r["output_tokens"], finish_reason=r["finish_reason"], hit_cap=cens,
             l_bar=r["l_bar_logged"])
    return e


def _write_group(args: tuple[SynthSpec, int, int, str, int, bool]) -> tuple[int, int]:
    """Write one (pair, dataset) subtree and its grade file; return (files, bytes)."""
    spec, pi, di, root, seed, proposals = args
    pair, ds = spec.pairs[pi], spec.datasets[di]
    tree = os.path.join(root, pair.slug)
    ds_dir = os.path.join(tree, "runs", ds.name)
    cfg_t: dict[int, _Template] = {}
    made: set[str] = set()
    grades: list[dict[str, Any]] = []
    n_files = n_bytes = 0
    # proposals: True for every dataset, or a collection of dataset names (the study traced gsm8k only).
    if proposals is not True and proposals:
        proposals = ds.name in proposals
    prop_rng = _rng(seed, "proposals", pair.target, pair.draft, ds.name) if proposals else None
    for r in _run_rows(spec, pair, ds, seed, text=True):
        arm: _ArmDef = r["arm"]
        key = id(arm)
        if key not in cfg_t:
            cfg_t[key] = _config_template(spec, pair, ds, arm, seed)
        arm_dir = os.path.join(ds_dir, arm.method, arm.params)
        if arm_dir not in made:
            os.makedirs(arm_dir, exist_ok=True)
            made.add(arm_dir)
        case_dir = os.path.join(arm_dir, r["item_id"])
        if case_dir not in made:
            os.mkdir(case_dir)  # the tree is new (write_raw refuses existing trees)
            made.add(case_dir)
        run_dir = os.path.join(case_dir, f"seed_{r['seed']}")
        os.mkdir(run_dir)
        L, A, R, D = r["output_tokens"], r["accepted_tokens"], r["draft_rounds"], r["draft_tokens"]
        cens = r["finish_reason"] == "length"
        lbar = A / R
        run_json = _run_template(arm.fc is not None).render({
            "wall_time_seconds": _j(r["wall_time_s"]), "input_tokens": _j(r["input_tokens"]),
            "output_tokens": _j(L), "finish_reason": _j(r["finish_reason"]), "eos_reached": _j(not cens),
            "reached_max_new_tokens": _j(cens), "prompt_tokens": _j(r["input_tokens"]),
            "total_tokens": _j(r["input_tokens"] + L), "completion_tokens": _j(L),
            "analysis_chars": _j(r["analysis_chars"]), "final_chars": _j(r["final_chars"]),
            "reached_final_channel": _j(not cens), "draft_tokens": _j(float(D)), "accepted_tokens": _j(float(A)),
            "draft_rounds": _j(float(R)), "draft_acceptance_rate": _j(A / D), "l_bar": _j(lbar),
            "mean_accept_length": _j(lbar + 1), "L_over_l_bar": _j(L / lbar if A else None),
            "force_commit_fired": _j(r["force_commit_fired"]),
        })
        cfg_json = cfg_t[key].render({
            "seed": _j(r["seed"]), "input_tokens": _j(r["input_tokens"]), "case": _j(r["item_id"]),
            "source_id": _j(r["prompt_source_id"]), "reference": _j(r["reference_answer"]),
        })
        n_bytes += _write(os.path.join(run_dir, "run.json"), run_json)
        n_bytes += _write(os.path.join(run_dir, "config.json"), cfg_json)
        n_bytes += _write(os.path.join(run_dir, "output.txt"), r["text_value"])
        n_files += 3
        if prop_rng is not None:
            n_bytes += _write(os.path.join(run_dir, "proposals.jsonl"), _proposals(prop_rng, r, pair.k))
            n_files += 1
        if ds.graded:
            grades.append(_grade_entry(ds, r, f"{arm.method}/{arm.params}"))
    if ds.graded:
        grades.sort(key=lambda e: (e["case"], e["seed"], e["tag"]))
        gdir = os.path.join(tree, "campaign", "grades")
        os.makedirs(gdir, exist_ok=True)
        n_bytes += _write(os.path.join(gdir, f"{ds.name}.json"), json.dumps({"runs": grades}, indent=2) + "\n")
        n_files += 1
    return n_files, n_bytes


def _proposals(rng: np.random.Generator, r: dict[str, Any], k: int) -> str:
    """proposals.jsonl as the study logs it: one row per emitted token (accepted drafts, then a recovered or bonus token).

    Per round the first a_r drafts are accepted (sum a_r = accepted_tokens, a_r <= k); the round
    then emits a recovered token (the first rejected draft, with its p, q, u) or, when all k were
    accepted, a bonus token. Lossy arms mark a planted share of accepted drafts as lossy-only.
    """
    R, A = r["draft_rounds"], r["accepted_tokens"]
    # Spread A over R rounds, each <= k: a random composition via sorted cut points, then capped and rebalanced.
    a = np.full(R, A // R, dtype=np.int64)
    extra = A - int(a.sum())
    if extra:
        a[rng.choice(R, extra, replace=False)] += 1
    # Move tokens between random rounds to add spread while keeping the sum and the cap.
    src, dst = rng.integers(0, R, R), rng.integers(0, R, R)
    for s_, d_ in zip(src.tolist(), dst.tolist()):
        if a[s_] > 0 and a[d_] < k:
            a[s_] -= 1
            a[d_] += 1
    arm: _ArmDef = r["arm"]
    lossy = arm.method != STRICT
    method, param = (arm.method, arm.alpha) if lossy else (STRICT, None)
    lossy_share = 0.25 if lossy else 0.0
    lines: list[str] = []
    pos = 0
    m_j, p_j = json.dumps(method), _j(param)
    n_acc = int(a.sum())
    p = np.round(rng.uniform(0.05, 1.0, n_acc + R), 8)
    q = np.round(np.clip(p * np.exp(0.3 * rng.standard_normal(n_acc + R)), 1e-6, 1.0), 8)
    u_draw = rng.uniform(0.0, 1.0, n_acc + R)
    lossy_only = (rng.uniform(0, 1, n_acc) < lossy_share).tolist()
    rank = np.minimum(rng.geometric(0.7, n_acc + R) - 1, 50)
    # Tokens accepted only because of the relaxation are ones the target finds unlikely (the study:
    # median p ~0.15, rank >= 1), with q above p so the lossless test would likely reject them.
    lo_mask = np.zeros(n_acc + R, dtype=bool)
    lo_mask[:n_acc] = lossy_only
    n_lo = int(lo_mask.sum())
    if n_lo:
        p[lo_mask] = np.round(0.001 + 0.6 * rng.beta(1.2, 5.0, n_lo), 8)
        q[lo_mask] = np.round(np.minimum(1.0, p[lo_mask] * rng.uniform(1.5, 6.0, n_lo)), 8)
        rank[lo_mask] = np.minimum(rng.geometric(0.35, n_lo), 50)
    rank = rank.tolist()
    idx = 0
    for rnd, ar in enumerate(a.tolist()):
        for pr in range(ar):
            pi, qi = float(p[idx]), float(q[idx])
            ratio = pi / qi
            lo = lossy_only[idx]
            # Strict accepts iff u <= p/q; a lossy-only acceptance has u above p/q.
            u = min(ratio, 1.0) * u_draw[idx] if not lo else min(ratio, 1.0) + (1 - min(ratio, 1.0)) * u_draw[idx]
            strict_ok = not lo or ratio >= 1.0
            lines.append(f'{{"round":{rnd},"batch":0,"pos_in_round":{pr},"output_position":{pos},"p":{_j(pi)},'
                         f'"q":{_j(qi)},"p_over_q":{_j(round(ratio, 6))},"u":{_j(round(float(u), 8))},'
                         f'"relaxation_param":{p_j},"relaxation_method":{m_j},"strict_would_accept":{_j(strict_ok)},'
                         f'"lossy_would_accept":true,"actually_accepted":true,"lossy_only_accepted":{_j(not strict_ok)},'
                         f'"emission_source":"accepted_draft","target_rank":{rank[idx]},"consecutive_accepted_length":{pr + 1}}}')
            pos += 1
            idx += 1
        if ar < k:
            # The first rejected draft: both rules reject it (u above p/q), the target's token is emitted.
            j = n_acc + rnd
            pi = float(p[j])
            qi = float(max(q[j], min(1.0, pi * 1.5)))
            ratio = pi / qi
            u = ratio + (1 - ratio) * float(u_draw[j]) if ratio < 1 else 1.0
            lines.append(f'{{"round":{rnd},"batch":0,"pos_in_round":{ar},"output_position":{pos},"p":{_j(pi)},'
                         f'"q":{_j(qi)},"p_over_q":{_j(round(ratio, 6))},"u":{_j(round(u, 8))},'
                         f'"relaxation_param":{p_j},"relaxation_method":{m_j},"strict_would_accept":false,'
                         f'"lossy_would_accept":false,"actually_accepted":false,"lossy_only_accepted":false,'
                         f'"emission_source":"recovered","target_rank":{rank[j]},"consecutive_accepted_length":{ar}}}')
        else:
            lines.append(f'{{"round":{rnd},"batch":0,"pos_in_round":{ar},"output_position":{pos},'
                         f'"emission_source":"bonus","consecutive_accepted_length":{ar},'
                         f'"relaxation_param":{p_j},"relaxation_method":{m_j}}}')
        pos += 1
    return "\n".join(lines) + "\n"


def raw_roots(spec: SynthSpec, root: str | os.PathLike[str]) -> list[Path]:
    """The per-pair ``runs`` folders :func:`write_raw` writes under ``root``."""
    return [Path(root) / p.slug / "runs" for p in spec.pairs]


def write_raw(spec: SynthSpec, root: str | os.PathLike[str], *, seed: int = 0, proposals: bool | Collection[str] = False,
              workers: int = 1, overwrite: bool = False) -> Path:
    """Write the study's raw layout, one tree per pair (``<root>/<pair_slug>/runs/...``); return ``root``.

    Existing pair trees are replaced when an earlier ``write_raw`` made them (they hold its
    ``.lengthlens-synth`` marker), so stale runs never mix with new ones; any other existing folder
    of that name is an error unless ``overwrite``. ``proposals`` writes proposals.jsonl for every
    dataset (True) or for the named ones (the study traced gsm8k only). ``workers`` > 1 writes (pair, dataset) groups in
    parallel processes; the bytes do not depend on it.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for p in spec.pairs:
        tree = root / p.slug
        if tree.exists():
            if not (overwrite or (tree / SYNTH_MARKER).is_file()):
                raise FileExistsError(f"{tree} exists and was not written by lengthlens.synth; pass overwrite=True to replace it")
            shutil.rmtree(tree)
        tree.mkdir()
        _write(str(tree / SYNTH_MARKER), json.dumps({"generator": "lengthlens.synth", "seed": int(seed),
                                                      "target": p.target, "draft": p.draft}) + "\n")
    jobs = [(spec, pi, di, str(root), seed, proposals) for pi in range(len(spec.pairs)) for di in range(len(spec.datasets))]
    # Biggest groups first so parallel workers finish together.
    jobs.sort(key=lambda j: -_group_cost(spec.datasets[j[2]], spec))
    if workers <= 1 or len(jobs) == 1:
        for j in jobs:
            _write_group(j)
    else:
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
            list(pool.map(_write_group, jobs))
    return root


def _group_cost(ds: Dataset, spec: SynthSpec) -> float:
    # Files dominate small runs, characters dominate long ones.
    return ds.n_items * len(spec._arms(ds)) * (1.0 + ds.mean_len * ds.chars_per_token / 20000)


# --------------------------------------------------------------------------------------------
# Truth
# --------------------------------------------------------------------------------------------

def _partial_mean(mu: float, s: float, c: float) -> float:
    """E[X; X < c] for log X ~ N(mu, s)."""
    return math.exp(mu + s * s / 2) * float(ndtr((math.log(c) - mu - s * s) / s))


def _expected_min(mu: float, s: float, c: float) -> float:
    """E[min(X, c)] for log X ~ N(mu, s)."""
    return _partial_mean(mu, s, c) + c * (1 - float(ndtr((math.log(c) - mu) / s)))


def truth(spec: SynthSpec) -> pl.DataFrame:
    """Planted values per cell (pair, dataset, arm): lambda, gain, accuracy, and what censoring does to them.

    Columns: target, draft, pair, dataset, method, params, alpha, budget, k, n_items, n_seeds,
    lambda_ (true ratio of mean lengths before censoring), l_bar, l_bar_strict, gain,
    rounds_ratio (= lambda_ / gain), time_ratio (rounds_ratio x time-per-round ratio), speedup
    (1 / time_ratio), think_share, accuracy (P(correct | answered)), accuracy_strict,
    accuracy_expected and accuracy_strict_expected (counting censored runs as wrong),
    censored_rate, censored_rate_strict, lambda_censored (the limit of the plain ratio of mean
    *observed* lengths, biased low by censoring), fire_rate, accuracy_after, threshold
    (force-commit arms; null elsewhere). Ungraded datasets have null accuracies. Length
    expectations ignore rounding to whole tokens.
    """
    rows = []
    for pair in spec.pairs:
        for ds in spec.datasets:
            s = ds.log_sd
            m = math.log(ds.mean_len) - s * s / 2
            B = ds.budget
            se = spec.effect(pair, ds, STRICT, STRICT)
            p_cens_s = 1 - float(ndtr((math.log(B - 0.5) - m) / s))
            emin_s = _expected_min(m, s, B)
            mean_s = math.exp(m + s * s / 2)
            for arm in spec._arms(ds):
                base = arm if arm.fc is None else spec._arms(ds)[arm.base]
                e = spec.effect(pair, ds, base.method, base.params)
                mu = m + math.log(e.lambda_)
                p_cens = 1 - float(ndtr((math.log(B - 0.5) - mu) / s))
                row = dict(target=pair.target, draft=pair.draft, pair=pair.slug, dataset=ds.name, method=arm.method,
                           params=arm.params, alpha=arm.alpha, budget=B, k=pair.k, n_items=ds.n_items,
                           n_seeds=len(spec.seeds), lambda_=e.lambda_, l_bar=e.l_bar, l_bar_strict=se.l_bar,
                           gain=(e.l_bar + 1) / (se.l_bar + 1), think_share=e.think_share,
                           accuracy=e.accuracy, accuracy_strict=se.accuracy,
                           accuracy_expected=e.accuracy * (1 - p_cens), accuracy_strict_expected=se.accuracy * (1 - p_cens_s),
                           censored_rate=p_cens, censored_rate_strict=p_cens_s,
                           lambda_censored=_expected_min(mu, s, B) / emin_s,
                           fire_rate=None, accuracy_after=None, threshold=None,
                           tpr_ratio=e.time_per_round / se.time_per_round)
                if arm.fc is not None:
                    t = arm.fc.threshold_for(B)
                    phi = _phi(ds, e)
                    c = min(t / (1 - phi), B - 0.5)
                    fire = 1 - float(ndtr((math.log(c) - mu) / s))
                    ff = min(max(1, int(round(ds.final_frac * ds.mean_len))), B - t - 1)
                    mean_fc = _partial_mean(mu, s, c) + fire * (t + ff)
                    acc_e = fire * arm.fc.accuracy_after + (1 - fire) * e.accuracy
                    row.update(lambda_=mean_fc / mean_s, lambda_censored=mean_fc / emin_s, censored_rate=0.0,
                               fire_rate=fire, accuracy_after=arm.fc.accuracy_after, threshold=t,
                               accuracy=None, accuracy_expected=acc_e)
                if arm.method == STRICT:
                    row.update(accuracy=se.accuracy)
                if not ds.graded:
                    row.update(accuracy=None, accuracy_strict=None, accuracy_expected=None,
                               accuracy_strict_expected=None, accuracy_after=None)
                rows.append(row)
    df = pl.DataFrame(rows, schema={
        "target": pl.String, "draft": pl.String, "pair": pl.String, "dataset": pl.String, "method": pl.String,
        "params": pl.String, "alpha": pl.Float64, "budget": pl.Int64, "k": pl.Int64, "n_items": pl.Int64,
        "n_seeds": pl.Int64, "lambda_": pl.Float64, "l_bar": pl.Float64, "l_bar_strict": pl.Float64,
        "gain": pl.Float64, "think_share": pl.Float64, "accuracy": pl.Float64, "accuracy_strict": pl.Float64,
        "accuracy_expected": pl.Float64, "accuracy_strict_expected": pl.Float64, "censored_rate": pl.Float64,
        "censored_rate_strict": pl.Float64, "lambda_censored": pl.Float64, "fire_rate": pl.Float64,
        "accuracy_after": pl.Float64, "threshold": pl.Int64, "tpr_ratio": pl.Float64,
    })
    return df.with_columns(
        (pl.col("lambda_") / pl.col("gain")).alias("rounds_ratio"),
        (pl.col("lambda_") / pl.col("gain") * pl.col("tpr_ratio")).alias("time_ratio"),
    ).with_columns((1 / pl.col("time_ratio")).alias("speedup")).drop("tpr_ratio")


__all__ = [
    "Pair", "Dataset", "Effect", "Arm", "ForceCommit", "CellEffect", "SynthSpec", "METHODS",
    "example", "paper_scale", "simulate", "write_raw", "write_flat", "raw_roots", "truth", "alpha_params",
]
