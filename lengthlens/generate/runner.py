"""Run a campaign: every (dataset, arm, item, seed) once, written to the raw layout, resumably.

A run whose folder already holds a finished run.json is skipped and never rewritten; a failed
run is recorded with status ``error`` and retried on the next invocation. Backends are chosen by
name; the reference backend needs the ``reference`` extra, the vLLM backend the ``vllm`` extra.
"""

from __future__ import annotations

import datetime as _dt
import platform
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lengthlens._version import __version__
from lengthlens.generate.config import Arm, GenerateConfig, Item
from lengthlens.generate.layout import (
    CLOSE_MARKERS,
    RunResult,
    is_finished,
    run_dir,
    write_error,
    write_run,
)

#: The rule text the study wrote into config.json, per rule.
ACCEPTANCE_RULE_TEXT = {
    "lossless": "accept iff u <= min(1, p(x)/q(x)); residual norm(max(0, p - q))",
    "mentored_dec": "accept iff p(x) / ((1 - alpha) q(x)) >= u; residual norm(max(0, p - q))",
    "cactus": "accept iff u <= min(1, gamma/q(x)), gamma = min(p(x) + sqrt(2 alpha p(x)(1 - p(x))), 1); residual norm(max(0, H - q))",
    "spec_casc_opt": "defer iff max q < max p - alpha TV(p, q); deferred: lossless test and residual; else accept",
    "spec_casc_tok": "accept iff u <= pi(x)/q(x), pi = q 1[A] + (1 - q(A)) p, A = {v: p(v) >= (1 - alpha) max p}; residual norm(max(0, pi - q))",
    "r_fuzzy": "accept iff JSD(p, q) < alpha (nats); else lossless test and residual",
}


@dataclass(frozen=True)
class PlannedRun:
    """One measurement of a campaign and the folder it goes to."""

    dataset: str
    item: Item
    arm: Arm
    seed: int
    path: Path


class Backend(Protocol):
    """What the runner needs from a generation engine."""

    name: str
    engine_version: str

    def run(self, prompt: str, arm: Arm, seed: int) -> RunResult: ...

    def close(self) -> None: ...


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 1 <= K <= N; ValueError otherwise."""
    try:
        k_s, n_s = text.split("/")
        k, n = int(k_s), int(n_s)
    except ValueError:
        raise ValueError(f"shard must be K/N (e.g. 2/4), got {text!r}") from None
    if not (n >= 1 and 1 <= k <= n):
        raise ValueError(f"shard K/N needs 1 <= K <= N, got {text!r}")
    return k, n


def plan(cfg: GenerateConfig, out: str | Path, shard: tuple[int, int] | None = None) -> list[PlannedRun]:
    """Every run of the campaign (or of one shard), arms outermost so an engine can be reused within an arm.

    ``shard=(K, N)``: the campaign's (dataset, item, seed) units, in file order, are dealt round-robin
    to N shards and shard K (1-based) keeps every arm of its units. Shards are disjoint and together
    are the whole campaign; an item keeps all its arms on one machine, so a lost shard loses whole
    items (every arm), never one arm of a pair. The deal depends on the datasets, items and seeds
    only, not on the arms, so every machine must use the same campaign file.
    """
    keep: set[tuple[str, str, int]] | None = None
    if shard is not None:
        k, n = shard
        if not (n >= 1 and 1 <= k <= n):
            raise ValueError(f"shard K/N needs 1 <= K <= N, got {k}/{n}")
        units = [(ds, item.case, seed) for ds in cfg.datasets for item in cfg.items(ds) for seed in cfg.seeds]
        keep = {u for i, u in enumerate(units) if i % n == k - 1}
    runs = []
    for ds in cfg.datasets:
        items = cfg.items(ds)
        for arm in cfg.arms:
            for item in items:
                for seed in cfg.seeds:
                    if keep is not None and (ds, item.case, seed) not in keep:
                        continue
                    runs.append(PlannedRun(ds, item, arm, seed, run_dir(out, ds, arm.method, arm.params, item.case, seed)))
    return runs


def prompt_text(cfg: GenerateConfig, item: Item) -> str:
    """The text fed to the engine: the item's prompt placed into the campaign's template."""
    return cfg.prompt_template.replace("{prompt}", item.prompt)


def run_config_json(cfg: GenerateConfig, r: PlannedRun, backend: Backend, input_tokens: int | None = None) -> dict[str, Any]:
    """config.json of one run, with the study's field names (model, draft_model, mode, lossy_* ...)."""
    arm = r.arm
    lossy = arm.rule != "lossless"
    params: dict[str, Any] = {} if arm.alpha is None else {"alpha": float(arm.alpha)}
    if arm.force_commit is not None:
        params["force_commit_threshold"] = arm.force_commit
    d: dict[str, Any] = {
        "timestamp_utc": _dt.datetime.now(_dt.UTC).isoformat(),
        "backend": backend.name,
        "tag": "strict" if not lossy and arm.force_commit is None else f"{arm.method}{'' if arm.alpha is None else arm.alpha}",
        "mode": "lossy" if lossy else "strict",
        "lossy_method": arm.rule if lossy else None,
        "lossy_parameters": params,
        "acceptance_rule": ACCEPTANCE_RULE_TEXT[arm.rule],
        "model": cfg.target.name,
        "draft_model": cfg.draft.name,
        "model_path": cfg.target.path,
        "draft_model_path": cfg.draft.path,
        "seed": r.seed,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max_new_tokens": cfg.max_new_tokens,
        "num_speculative_tokens": cfg.num_draft_tokens,
        "draft_sample_method": "probabilistic",
        "dataset": r.dataset,
        "prompt_case": r.item.case,
        "prompt_source_id": r.item.id,
        "reference_answer": r.item.reference,
        "prompt": prompt_text(cfg, r.item),
        "thinking_format": cfg.thinking_format,
        "thinking_opened_in_prompt": cfg.opened_in_prompt,
        "engine_version": backend.engine_version,
        "lengthlens_version": __version__,
        "python": platform.python_version(),
    }
    if input_tokens is not None:
        d["input_tokens_archived"] = input_tokens
    if arm.force_commit is not None:
        d["force_commit"] = {"threshold": arm.force_commit, "marker": CLOSE_MARKERS[cfg.thinking_format]}
    if cfg.source is not None:
        d["campaign_file"] = str(cfg.source)
    return d


@dataclass
class Summary:
    """Counts of what a campaign invocation did."""

    planned: int = 0
    written: int = 0
    skipped: int = 0
    failed: int = 0


def make_backend(cfg: GenerateConfig, name: str | None = None) -> Backend:
    """Instantiate the named backend (default: the config's)."""
    name = name or cfg.backend
    if name == "reference":
        from lengthlens.generate.reference_backend import ReferenceBackend

        return ReferenceBackend(cfg)
    if name == "vllm":
        from lengthlens.generate.vllm_backend import VLLMBackend

        return VLLMBackend(cfg)
    raise ValueError(f"unknown backend {name!r}")


def run_campaign(cfg: GenerateConfig, out: str | Path, *, backend: str | Backend | None = None,
                 log: Callable[[str], None] | None = None, fail_fast: bool = False,
                 shard: tuple[int, int] | None = None) -> Summary:
    """Run every planned measurement (of ``shard`` K/N, when given) not already finished under ``out``."""
    log = log or (lambda s: print(s, file=sys.stderr))
    runs = plan(cfg, out, shard)
    s = Summary(planned=len(runs))
    todo = [r for r in runs if not is_finished(r.path)]
    s.skipped = len(runs) - len(todo)
    if s.skipped:
        log(f"skipping {s.skipped} finished run(s) already under {out}")
    if not todo:
        return s
    be = backend if (backend is not None and not isinstance(backend, str)) else make_backend(cfg, backend)
    try:
        for i, r in enumerate(todo, 1):
            prompt = prompt_text(cfg, r.item)
            try:
                res = be.run(prompt, r.arm, r.seed)
            except Exception as exc:  # one failed measurement must not lose the campaign
                if fail_fast:
                    raise
                s.failed += 1
                msg = f"{type(exc).__name__}: {exc}"
                write_error(r.path, run_config_json(cfg, r, be), be.name, msg + "\n" + traceback.format_exc())
                log(f"[{i}/{len(todo)}] FAILED {r.path}: {msg}")
                continue
            write_run(r.path, run_config_json(cfg, r, be, res.input_tokens), res, be.name,
                      cfg.thinking_format, cfg.opened_in_prompt)
            s.written += 1
            l_bar = res.accepted_tokens / res.draft_rounds if res.draft_rounds else float("nan")
            log(f"[{i}/{len(todo)}] {r.dataset}/{r.arm.method}/{r.arm.params}/{r.item.case}/seed_{r.seed}: "
                f"{res.output_tokens} tokens ({res.finish_reason}), l_bar {l_bar:.2f}, {res.wall_time_seconds:.2f}s")
    finally:
        be.close()
    return s
