"""The ``lengthlens generate`` campaign file (YAML or TOML): models, datasets, arms, seeds, budget.

Example (YAML)::

    backend: reference            # or vllm
    target: {name: my-target, path: /models/target}          # a local model folder / HF id
    draft:  {name: my-draft,  path: /models/draft}
    tokenizer: null               # defaults to the target's
    speculative: {num_draft_tokens: 4}
    sampling: {temperature: 1.0, top_p: 1.0, max_new_tokens: 2048}
    seeds: [0]
    datasets: {gsm8k: data/gsm8k.jsonl}   # JSONL rows {id, prompt, reference}; paths relative to this file
    thinking: {format: think, opened_in_prompt: false}   # or harmony (GPT-OSS channels)
    prompt: {template: "{prompt}", add_special_tokens: true}
    arms:
      - strict
      - {rule: cactus, alpha: [0.03, 0.08]}
      - {rule: spec_casc_tok, alpha: 0.35, force_commit: [1024]}
      - {rule: fly, alpha: 0.3, window: 6}   # vLLM's own FLy (vllm backends only; alpha = entropy threshold)
    vllm: {engine_per: run, llm_kwargs: {gpu_memory_utilization: 0.8}}
    order: interleaved            # serial runs: each item's arms one after another (default), or by_arm

``backend: vllm-batched`` runs each arm's items of a shard in one ``generate`` call on one engine
(``vllm: {max_num_seqs: 64, requests_per_call: 256}``), the serving load recorded in each run.

The reference backend also accepts tiny models built from a config instead of a path
(``target: {name: tiny-target, tiny: {hidden: 64, layers: 2, seed: 0}}``, ``draft: {tiny: {copy_of:
target, noise: 0.3, seed: 1}}``) and ``tokenizer: tiny`` for the built-in character tokenizer.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lengthlens.generate.layout import CLOSE_MARKERS, arm_names, case_name, iter_jsonl

_RULES = ("lossless", "mentored_dec", "cactus", "spec_casc_opt", "spec_casc_tok", "r_fuzzy")
#: Rules the engine itself runs (lengthlens.generate.engine_rules): vLLM backends only.
ENGINE_RULES = ("fly",)
BACKENDS = ("reference", "vllm", "vllm-batched")
ORDERS = ("interleaved", "by_arm")


@dataclass(frozen=True)
class Arm:
    """One verification setting: a rule, its alpha, and optionally a force-commit threshold."""

    rule: str
    alpha: float | None = None
    force_commit: int | None = None
    window: int | None = None  # vLLM FLy's fly_window_size

    @property
    def method(self) -> str:
        return arm_names(self.rule, self.alpha, self.force_commit, self.window)[0]

    @property
    def params(self) -> str:
        return arm_names(self.rule, self.alpha, self.force_commit, self.window)[1]

    @property
    def rule_alpha(self) -> float:
        """The alpha handed to the rule code (0 for lossless)."""
        return 0.0 if self.alpha is None else float(self.alpha)


@dataclass(frozen=True)
class ModelSpec:
    """A model: its logged name plus where it comes from (a path / HF id, or a tiny built-in config)."""

    name: str
    path: str | None = None
    tiny: dict[str, Any] | None = None


@dataclass(frozen=True)
class Item:
    """One prompt of a dataset; ``case`` is its folder name (``case_NNN`` by position in the file)."""

    id: str
    prompt: str
    reference: str | None
    case: str


@dataclass
class GenerateConfig:
    """A parsed campaign file."""

    target: ModelSpec
    draft: ModelSpec
    datasets: dict[str, Path]
    arms: list[Arm]
    backend: str = "reference"
    tokenizer: str | None = None
    num_draft_tokens: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 2048
    seeds: list[int] = field(default_factory=lambda: [0])
    thinking_format: str = "think"
    opened_in_prompt: bool = False
    log_proposals: bool = True
    max_items: int | None = None
    prompt_template: str = "{prompt}"
    add_special_tokens: bool = True
    vllm: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None
    order: str | None = None  # None: interleaved, by_arm where an engine serves one arm at a time

    def items(self, dataset: str) -> list[Item]:
        """The dataset's items in file order (``max_items`` first ones when set)."""
        out = []
        for i, row in enumerate(iter_jsonl(self.datasets[dataset]), 1):
            for key in ("id", "prompt"):
                if key not in row:
                    raise ValueError(f"{self.datasets[dataset]}: item {i} has no {key!r}")
            ref = row.get("reference")
            out.append(Item(str(row["id"]), str(row["prompt"]), None if ref is None else str(ref), case_name(i)))
            if self.max_items is not None and len(out) >= self.max_items:
                break
        return out


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def parse_arms(raw: Any) -> list[Arm]:
    """Arms from the config's list: ``strict`` or ``{rule, alpha: x | [x...], force_commit: t | [t...]}``."""
    if not isinstance(raw, list) or not raw:
        raise ValueError("'arms' must be a non-empty list")
    arms: list[Arm] = []
    for i, a in enumerate(raw):
        if a in ("strict", "lossless"):
            arms.append(Arm("lossless"))
            continue
        if not isinstance(a, dict) or "rule" not in a:
            raise ValueError(f"arms[{i}]: expected 'strict' or a mapping with 'rule'")
        rule = "lossless" if a["rule"] == "strict" else a["rule"]
        if rule not in _RULES + ENGINE_RULES:
            raise ValueError(f"arms[{i}]: unknown rule {a['rule']!r}; expected one of {', '.join(_RULES + ENGINE_RULES)}")
        window = a.get("window")
        if window is not None and (rule != "fly" or isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"arms[{i}]: 'window' is FLy's (rule fly) and must be a positive integer")
        alphas = _as_list(a.get("alpha", 0.0 if rule == "lossless" else None))
        if alphas == [None]:
            raise ValueError(f"arms[{i}]: rule {rule} needs 'alpha'")
        fcs = _as_list(a.get("force_commit", None))
        for al in alphas:
            al = float(al)
            if not math.isfinite(al):
                raise ValueError(f"arms[{i}]: alpha must be finite (use 'strict' for the lossless limit)")
            for fc in fcs:
                if fc is not None and (int(fc) != fc or fc <= 0):
                    raise ValueError(f"arms[{i}]: force_commit must be a positive integer")
                alpha = None if (rule == "lossless" and fc is None) else al
                arms.append(Arm(rule, alpha, None if fc is None else int(fc), window))
    seen: set[tuple[str, str]] = set()
    for arm in arms:
        key = (arm.method, arm.params)
        if key in seen:
            raise ValueError(f"arm {arm.method}/{arm.params} listed twice")
        seen.add(key)
    return arms


def _model(raw: Any, what: str) -> ModelSpec:
    if isinstance(raw, str):
        return ModelSpec(name=raw, path=raw)
    if not isinstance(raw, dict):
        raise ValueError(f"'{what}' must be a path or a mapping")  # noqa: TRY004 - bad file content
    if raw.get("path") is None and raw.get("tiny") is None:
        raise ValueError(f"'{what}' needs 'path' (or 'tiny' for the reference backend)")
    name = raw.get("name") or raw.get("path") or f"tiny-{what}"
    return ModelSpec(name=str(name), path=raw.get("path"), tiny=raw.get("tiny"))


def config_from_dict(d: dict[str, Any], base: Path | None = None) -> GenerateConfig:
    """Validate a campaign mapping; relative dataset paths resolve against ``base``."""
    known = {"backend", "target", "draft", "tokenizer", "speculative", "sampling", "seeds", "datasets",
             "thinking", "arms", "vllm", "log_proposals", "max_items", "prompt", "order"}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown config keys: {', '.join(sorted(unknown))}")
    for key in ("target", "draft", "datasets", "arms"):
        if key not in d:
            raise ValueError(f"config needs '{key}'")
    base = base or Path.cwd()
    if not isinstance(d["datasets"], dict) or not d["datasets"]:
        raise ValueError("'datasets' must map dataset names to JSONL files")
    datasets = {}
    for name, p in d["datasets"].items():
        path = Path(p)
        datasets[str(name)] = path if path.is_absolute() else base / path
    spec = d.get("speculative") or {}
    samp = d.get("sampling") or {}
    think = d.get("thinking") or {}
    prompt = d.get("prompt") or {}
    cfg = GenerateConfig(
        target=_model(d["target"], "target"),
        draft=_model(d["draft"], "draft"),
        datasets=datasets,
        arms=parse_arms(d["arms"]),
        backend=str(d.get("backend", "reference")),
        tokenizer=d.get("tokenizer"),
        num_draft_tokens=int(spec.get("num_draft_tokens", 4)),
        temperature=float(samp.get("temperature", 1.0)),
        top_p=float(samp.get("top_p", 1.0)),
        max_new_tokens=int(samp.get("max_new_tokens", 2048)),
        seeds=[int(s) for s in _as_list(d.get("seeds", [0]))],
        thinking_format=str(think.get("format", "think")),
        opened_in_prompt=bool(think.get("opened_in_prompt", False)),
        log_proposals=bool(d.get("log_proposals", True)),
        max_items=d.get("max_items"),
        vllm=dict(d.get("vllm") or {}),
        prompt_template=str(prompt.get("template", "{prompt}")),
        add_special_tokens=bool(prompt.get("add_special_tokens", True)),
        source=None,
        order=d.get("order"),
    )
    _check(cfg)
    return cfg


def _check(cfg: GenerateConfig) -> None:
    """Raise ValueError for a setting outside its domain."""
    if cfg.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {cfg.backend!r}")
    if cfg.order is not None and cfg.order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {cfg.order!r}")
    if cfg.num_draft_tokens < 1:
        raise ValueError("speculative.num_draft_tokens must be >= 1")
    if cfg.max_new_tokens < 1:
        raise ValueError("sampling.max_new_tokens must be >= 1")
    if cfg.temperature < 0 or not (0 < cfg.top_p <= 1):
        raise ValueError("sampling: temperature must be >= 0 and top_p in (0, 1]")
    if cfg.thinking_format not in CLOSE_MARKERS:
        raise ValueError(f"thinking.format must be one of {', '.join(CLOSE_MARKERS)}")
    if "{prompt}" not in cfg.prompt_template:
        raise ValueError("prompt.template must contain '{prompt}'")
    if any(s < 0 for s in cfg.seeds):
        raise ValueError("seeds must be >= 0")
    for name in cfg.datasets:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad dataset name {name!r}")


def load_config(path: str | Path) -> GenerateConfig:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) campaign file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".toml":
        data = tomllib.loads(text)
    else:
        data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")  # noqa: TRY004 - bad file content
    cfg = config_from_dict(data, base=path.parent.resolve())
    cfg.source = path.resolve()
    return cfg
