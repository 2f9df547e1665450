"""Run a campaign: every (dataset, arm, item, seed) once, written to the raw layout, resumably.

A run whose folder already holds a finished run.json is skipped and never rewritten; a failed
run is recorded with status ``error`` and retried on the next invocation. Backends are chosen by
name; the reference backend needs the ``reference`` extra, the vLLM backends the ``vllm`` extra.

Serial backends run one request at a time, and the runs are interleaved: each (dataset, item, seed)
runs all its arms one after another, the arms' order rotated from one item to the next, so that a
drift during the session (a warming GPU, a neighbour's load) falls on every arm alike instead of
becoming a difference between arms. Where an engine serves one arm at a time (``vllm-batched``, or
``vllm: {engine_per: arm}``) the runs go arm by arm (``order: by_arm``), as they must. A batched
backend (one with ``run_batch``) gets each arm's pending runs in one call (or in calls of
``vllm.requests_per_call``).
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
    "fly": "vLLM's FLy (rejection_sample_method='fly'): entropy-gated loose acceptance, alpha = fly_entropy_threshold",
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


def default_order(cfg: GenerateConfig) -> str:
    """``by_arm`` where an engine serves one arm at a time (batched, or vLLM's ``engine_per: arm``), else ``interleaved``."""
    if cfg.order is not None:
        return cfg.order
    one_arm = cfg.backend == "vllm-batched" or (cfg.backend == "vllm" and cfg.vllm.get("engine_per") == "arm")
    return "by_arm" if one_arm else "interleaved"


def plan(cfg: GenerateConfig, out: str | Path, shard: tuple[int, int] | None = None,
         order: str | None = None) -> list[PlannedRun]:
    """Every run of the campaign (or of one shard), in the order they run.

    ``order``: ``interleaved`` (every arm of an item and seed, then the next; the arms' order rotated by
    one per unit) or ``by_arm`` (arms outermost, so an engine serves one arm's runs); default
    :func:`default_order`. ``shard=(K, N)``: the campaign's (dataset, item, seed) units, in file
    order, are dealt round-robin to N shards and shard K (1-based) keeps every arm of its units.
    Shards are disjoint and together are the whole campaign; an item keeps all its arms on one
    machine, so a lost shard loses whole items (every arm), never one arm of a pair. The deal
    depends on the datasets, items and seeds only, not on the arms, so every machine must use the
    same campaign file.
    """
    order = order or default_order(cfg)
    if order not in ("interleaved", "by_arm"):
        raise ValueError(f"order must be 'interleaved' or 'by_arm', not {order!r}")
    if shard is not None:
        k, n = shard
        if not (n >= 1 and 1 <= k <= n):
            raise ValueError(f"shard K/N needs 1 <= K <= N, got {k}/{n}")
    units = [(ds, item, seed) for ds in cfg.datasets for item in cfg.items(ds) for seed in cfg.seeds]
    if shard is not None:
        units = [u for i, u in enumerate(units) if i % shard[1] == shard[0] - 1]
    arms = list(cfg.arms)
    if order == "by_arm":
        pairs = [(u, arm) for ds in cfg.datasets for arm in arms for u in units if u[0] == ds]
    else:
        pairs = [(u, arm) for i, u in enumerate(units) for arm in arms[i % len(arms):] + arms[:i % len(arms)]]
    return [PlannedRun(ds, item, arm, seed, run_dir(out, ds, arm.method, arm.params, item.case, seed))
            for (ds, item, seed), arm in pairs]


def prompt_text(cfg: GenerateConfig, item: Item) -> str:
    """The text fed to the engine: the item's prompt placed into the campaign's template."""
    return cfg.prompt_template.replace("{prompt}", item.prompt)


def run_config_json(cfg: GenerateConfig, r: PlannedRun, backend: Backend, input_tokens: int | None = None) -> dict[str, Any]:
    """config.json of one run, with the study's field names (model, draft_model, mode, lossy_* ...)."""
    arm = r.arm
    lossy = arm.rule != "lossless"
    params: dict[str, Any] = {} if arm.alpha is None else {"alpha": float(arm.alpha)}
    if arm.window is not None:
        params["window"] = arm.window
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
    if name == "vllm-batched":
        from lengthlens.generate.vllm_batched import VLLMBatchedBackend

        return VLLMBatchedBackend(cfg)
    raise ValueError(f"unknown backend {name!r}")


def _record(cfg: GenerateConfig, r: PlannedRun, be: Backend, res: RunResult, s: Summary, where: str,
            log: Callable[[str], None]) -> None:
    write_run(r.path, run_config_json(cfg, r, be, res.input_tokens), res, be.name, cfg.thinking_format, cfg.opened_in_prompt)
    s.written += 1
    l_bar = res.accepted_tokens / res.draft_rounds if res.draft_rounds and res.accepted_tokens is not None else float("nan")
    wall = "?" if res.wall_time_seconds is None else f"{res.wall_time_seconds:.2f}"
    log(f"{where} {r.dataset}/{r.arm.method}/{r.arm.params}/{r.item.case}/seed_{r.seed}: "
        f"{res.output_tokens} tokens ({res.finish_reason}), l_bar {l_bar:.2f}, {wall}s")


def _failed(cfg: GenerateConfig, r: PlannedRun, be: Backend, exc: Exception, s: Summary, where: str,
            log: Callable[[str], None]) -> None:
    s.failed += 1
    msg = f"{type(exc).__name__}: {exc}"
    write_error(r.path, run_config_json(cfg, r, be), be.name, msg + "\n" + traceback.format_exc())
    log(f"{where} FAILED {r.path}: {msg}")


def _batches(todo: list[PlannedRun], size: int | None) -> list[list[PlannedRun]]:
    """The pending runs grouped by arm (in plan order), each group cut into calls of at most ``size``."""
    groups: dict[Arm, list[PlannedRun]] = {}
    for r in todo:
        groups.setdefault(r.arm, []).append(r)
    step = size or max(len(g) for g in groups.values())
    return [g[i:i + step] for g in groups.values() for i in range(0, len(g), step)]


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
        if hasattr(be, "run_batch"):
            done = 0
            for batch in _batches(todo, cfg.vllm.get("requests_per_call")):
                where = f"[{done + 1}-{done + len(batch)}/{len(todo)}]"
                done += len(batch)
                try:
                    results = be.run_batch([(prompt_text(cfg, r.item), r.seed) for r in batch], batch[0].arm)
                except Exception as exc:  # one failed call must not lose the campaign
                    if fail_fast:
                        raise
                    for r in batch:
                        _failed(cfg, r, be, exc, s, where, log)
                    continue
                for r, res in zip(batch, results):
                    _record(cfg, r, be, res, s, where, log)
            return s
        for i, r in enumerate(todo, 1):
            try:
                res = be.run(prompt_text(cfg, r.item), r.arm, r.seed)
            except Exception as exc:  # one failed measurement must not lose the campaign
                if fail_fast:
                    raise
                _failed(cfg, r, be, exc, s, f"[{i}/{len(todo)}]", log)
                continue
            _record(cfg, r, be, res, s, f"[{i}/{len(todo)}]", log)
    finally:
        be.close()
    return s
