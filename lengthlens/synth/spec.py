"""Synthetic study specifications: pairs, datasets, planted effects, arms, and the ready-made example and paper-scale specs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

import numpy as np

from lengthlens.data.schema import STRICT

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
        per_item = sum(len(self.arms_of(d)) * d.n_items for d in self.datasets)
        return len(self.pairs) * len(self.seeds) * per_item

    def arms_of(self, ds: Dataset) -> list[ArmDef]:
        out = [ArmDef(STRICT, STRICT, None, None, None)]
        out += [ArmDef(a.method, a.params, a.alpha, None, None) for a in self.arms]
        for fc in self.force_commit:
            if fc.datasets is None or ds.name in fc.datasets:
                base = 1 + next(i for i, a in enumerate(self.arms) if (a.method, a.params) == (fc.method, alpha_params(fc.alpha)))
                out.append(ArmDef(fc.arm_method, fc.params_for(ds.budget), fc.alpha, base, fc))
        return out


@dataclass(frozen=True)
class ArmDef:
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



#: The study's five relaxed _PAPER_RULES.
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


# (target, draft, k, style, strict l_bar, seconds per round)
_PAPER_PAIRS = [
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

# Rule -> (alpha, gain, lambda_, accuracy drop per unit of dataset difficulty).
_PAPER_RULES = {
    "mentored_dec": (0.55, 1.30, 1.45, 0.010),
    "cactus": (0.18, 1.42, 1.70, 0.040),
    "spec_casc_opt": (-0.1, 1.25, 1.35, 0.005),
    "spec_casc_tok": (0.55, 1.38, 1.62, 0.030),
    "r_fuzzy": (0.15, 1.35, 1.58, 0.020),
}
# Dataset multipliers (each averages 1 over the six datasets): lambda-1, gain-1, strict l_bar.
_DS_LAM = {"gsm8k": 1.1, "aime24": 1.3, "humaneval": 0.8, "livecodebench": 1.0, "mtbench": 0.7, "longbench_v2": 1.1}
_DS_GAIN = {"gsm8k": 1.15, "aime24": 0.95, "humaneval": 1.05, "livecodebench": 0.95, "mtbench": 0.9, "longbench_v2": 1.0}
_DS_LBAR = {"gsm8k": 1.05, "aime24": 0.95, "humaneval": 1.05, "livecodebench": 0.95, "mtbench": 0.95, "longbench_v2": 0.9}
_DS_ACC = {"gsm8k": 0.95, "aime24": 0.60, "humaneval": 0.92, "livecodebench": 0.45, "mtbench": 0.9, "longbench_v2": 0.50}
_DS_DROP = {"gsm8k": 0.5, "aime24": 2.0, "humaneval": 1.0, "livecodebench": 1.5, "mtbench": 0.0, "longbench_v2": 1.2}
_DS_THINK = {"mtbench": 0.6, "longbench_v2": 0.85}
_DS_TPR = {"longbench_v2": 8.5, "livecodebench": 1.05}  # long prompts make every round slower
# Pair multipliers, mean exactly 1, in fixed shuffled orders so pairs differ in both.
_LAM_P = np.linspace(0.8, 1.2, 12)[[5, 0, 9, 3, 11, 7, 1, 10, 2, 8, 4, 6]]
_GAIN_P = np.linspace(0.85, 1.15, 12)[[2, 7, 0, 10, 4, 9, 6, 1, 11, 3, 8, 5]]
_ACC_P = np.linspace(-0.06, 0.06, 12)[[8, 3, 6, 0, 10, 5, 11, 2, 7, 1, 9, 4]]


def paper_scale(*, force_commit: bool = False, seeds: tuple[int, ...] = (0,),
                n_items: dict[str, int] | None = None) -> SynthSpec:
    """The study at full size: 12 pairs x 6 datasets x (strict + 5 rules), ~180k runs; mean gain 1.34, mean lambda 1.54.

    Per-cell effects vary around each rule's value by dataset and pair through multipliers whose
    means are 1 over the full grid, so the grid means are exactly the rules' means.
    """
    pairs = tuple(Pair(t, d, k, st) for t, d, k, st, _, _ in _PAPER_PAIRS)
    datasets = _paper_datasets(n_items)
    strict_default = Effect()
    arms = tuple(Arm(m, a, Effect(lambda_=lam, l_bar=(strict_default.l_bar + 1) * g - 1))
                 for m, (a, g, lam, _) in _PAPER_RULES.items())
    cells: list[CellEffect] = []
    for pi, (t, d, _k, _st, lbar, tpr) in enumerate(_PAPER_PAIRS):
        for ds in datasets:
            l0 = round(lbar * _DS_LBAR[ds.name], 4)
            acc0 = float(np.clip(_DS_ACC[ds.name] + _ACC_P[pi], 0.02, 0.99))
            tpr0 = tpr * _DS_TPR.get(ds.name, 1.0)
            think = _DS_THINK.get(ds.name, 0.9)
            cells.append(CellEffect(t, d, ds.name, STRICT, STRICT, Effect(1.0, l0, acc0, think, round(tpr0, 6))))
            for m, (a, g, lam, drop) in _PAPER_RULES.items():
                gain = 1 + (g - 1) * _DS_GAIN[ds.name] * _GAIN_P[pi]
                eff = Effect(
                    lambda_=round(float(1 + (lam - 1) * _DS_LAM[ds.name] * _LAM_P[pi]), 6),
                    l_bar=round(float(gain * (l0 + 1) - 1), 6),
                    accuracy=float(np.clip(acc0 - drop * _DS_DROP[ds.name], 0.02, 0.99)),
                    think_share=think,
                    time_per_round=round(tpr0 * 1.03, 6),  # relaxed rules cost a little per round
                )
                cells.append(CellEffect(t, d, ds.name, m, alpha_params(a), eff))
    fcs = tuple(ForceCommit(m, _PAPER_RULES[m][0], threshold_frac=0.85, accuracy_after=0.3,
                            datasets=("aime24", "livecodebench", "gsm8k"))
                for m in ("spec_casc_tok", "cactus")) if force_commit else ()
    return SynthSpec(pairs=pairs, datasets=datasets, arms=arms, strict=strict_default, seeds=seeds,
                     force_commit=fcs, cells=tuple(cells))
