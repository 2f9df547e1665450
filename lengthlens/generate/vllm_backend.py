"""The vLLM backend (GPU): one request at a time (batch 1), counters from vLLM's speculative-decoding metrics.

The batched backend (:mod:`lengthlens.generate.vllm_batched`) measures under load instead.

Per measurement: the rule is put in force through :mod:`lengthlens.generate.vllm_plugin` (by
environment for vLLM's engine processes, and by patching this process for in-process engines),
the engine is fresh (``vllm.engine_per: run``, the study's practice) or fresh per arm
(``engine_per: arm``, faster), prefix caching is off, and ``draft_rounds`` / ``draft_tokens`` /
``accepted_tokens`` are the deltas of ``vllm:spec_decode_num_drafts`` /
``..._num_draft_tokens`` / ``..._num_accepted_tokens`` around the request, as the study took them
(so, as there, ``draft_rounds`` can be one short on runs that stop at EOS). Wall time is the
request's ``generate`` call.

Campaign keys under ``vllm:``: ``engine_per`` (run|arm), ``speculative_method`` (default
``draft_model``; e.g. ``eagle3`` with an EAGLE head as the draft path), ``speculative_config``
(extra keys merged into it), ``tensor_parallel_size`` / ``pipeline_parallel_size`` /
``distributed_executor_backend`` (passed to ``vllm.LLM`` for targets that need several GPUs;
``draft_tensor_parallel_size`` goes into the speculative config), ``llm_kwargs`` (passed to
``vllm.LLM``), ``patch_strict`` (run the strict arm through the plugin's lossless rule too, for
timing on equal code paths; default off, i.e. vLLM's own sampler, as in the study).

Prompts go to vLLM as token ids, tokenized here with the engine's tokenizer and the campaign's
``prompt.add_special_tokens`` (so a template that already holds the BOS does not get a second
one). Force-commit arms run in two requests: up to the threshold, then, if the thinking is still
open and the budget not spent, the prompt's ids, the completion's ids and the closing marker's ids
as a new prompt for the rest of the budget; counters and wall time are summed over both.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

from lengthlens.generate.config import ENGINE_RULES, Arm, GenerateConfig
from lengthlens.generate.engine_rules import check_campaign_speculative_config, fly_speculative_config
from lengthlens.generate.layout import CLOSE_MARKERS, RunResult, thinking_open
from lengthlens.generate.vllm_plugin import ENV_ALPHA, ENV_RULE

log = logging.getLogger("lengthlens.vllm_backend")

RAY_COPY_PREFIXES = "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"

SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "draft_rounds",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
}


def spec_counters(metrics: Any) -> dict[str, float]:
    """Sum the speculative-decoding counters in ``LLM.get_metrics()`` output (``_total`` suffix tolerated)."""
    out = dict.fromkeys(SPEC_METRICS.values(), 0.0)
    for m in metrics:
        name = getattr(m, "name", "")
        name = name.removesuffix("_total")
        key = SPEC_METRICS.get(name)
        if key is not None and isinstance(getattr(m, "value", None), (int, float)):
            out[key] += float(m.value)
    return out


def gpu_name() -> str | None:
    """The first CUDA device's name (``NVIDIA H200``), None without one: the serving condition's ``gpu``."""
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except (ImportError, RuntimeError):
        return None


def parallel_kwargs(v: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``vllm.LLM`` kwargs, speculative-config keys) for the campaign's parallel settings; bad values raise."""
    llm: dict[str, Any] = {}
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        if key in v:
            n = v[key]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"vllm.{key} must be a positive integer, got {n!r}")
            llm[key] = n
    if "distributed_executor_backend" in v:
        llm["distributed_executor_backend"] = str(v["distributed_executor_backend"])
    spec: dict[str, Any] = {}
    if "draft_tensor_parallel_size" in v:
        n = v["draft_tensor_parallel_size"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"vllm.draft_tensor_parallel_size must be a positive integer, got {n!r}")
        spec["draft_tensor_parallel_size"] = n
    return llm, spec


class VLLMBackend:
    """Runs campaign measurements on vLLM (0.26.0 or 0.33.x) with the lengthlens rules plugin."""

    name = "vllm"

    def __init__(self, cfg: GenerateConfig):
        import vllm

        if cfg.target.path is None or cfg.draft.path is None:
            raise ValueError("the vllm backend needs 'path' for target and draft (tiny models are CPU-only)")
        self.cfg = cfg
        self.vllm = vllm
        self.engine_version = str(getattr(vllm, "__version__", "unknown"))
        v = cfg.vllm
        self.engine_per = str(v.get("engine_per", "run"))
        if self.engine_per not in ("run", "arm"):
            raise ValueError("vllm.engine_per must be 'run' or 'arm'")
        self.patch_strict = bool(v.get("patch_strict", False))
        self.parallel, self.spec_parallel = parallel_kwargs(v)
        check_campaign_speculative_config(v.get("speculative_config") or {})
        self.gpu = gpu_name()
        self._llm: Any = None
        self._arm: Arm | None = None
        # Fail before the first engine start when the installed vLLM cannot take the rules.
        from lengthlens.generate import vllm_plugin

        for arm in cfg.arms:
            req = self._rule_env(arm)
            if req is not None:
                try:
                    vllm_plugin.apply(*req)
                finally:
                    vllm_plugin.restore()
                break

    # -- engine lifecycle -------------------------------------------------------------------

    def _rule_env(self, arm: Arm) -> tuple[str, float] | None:
        if (arm.rule == "lossless" and not self.patch_strict) or arm.rule in ENGINE_RULES:
            return None  # vLLM's own sampler (and its own relaxed rule for engine rules)
        return arm.rule, arm.rule_alpha

    def engine_kwargs(self) -> dict[str, Any]:
        """``vllm.LLM`` keyword arguments besides the model and the speculative config."""
        kwargs: dict[str, Any] = {"enable_prefix_caching": False, "disable_log_stats": False, "seed": 0}
        kwargs.update(self.parallel)
        kwargs.update(self.cfg.vllm.get("llm_kwargs") or {})
        if self.cfg.tokenizer:
            kwargs.setdefault("tokenizer", self.cfg.tokenizer)
        return kwargs

    def speculative_config(self, arm: Arm) -> dict[str, Any]:
        """The arm's speculative config: the campaign's, plus vLLM's FLy settings for a ``fly`` arm."""
        cfg, v = self.cfg, self.cfg.vllm
        spec = {"method": v.get("speculative_method", "draft_model"), "model": cfg.draft.path,
                "num_speculative_tokens": cfg.num_draft_tokens, "draft_sample_method": "probabilistic"}
        spec.update(self.spec_parallel)
        spec.update(v.get("speculative_config") or {})
        if arm.rule == "fly":
            spec.update(fly_speculative_config(arm.rule_alpha, arm.window))
        return spec

    def serving(self, in_flight: int) -> dict[str, Any]:
        """The serving condition of a measurement: requests in flight, the engine's batch bound, the GPU."""
        bound = (self.cfg.vllm.get("llm_kwargs") or {}).get("max_num_seqs", self.cfg.vllm.get("max_num_seqs"))
        out = {"concurrency": in_flight, "batch_size": bound, "gpu": self.gpu}
        return {k: v for k, v in out.items() if v is not None}

    def _start(self, arm: Arm) -> Any:
        from lengthlens.generate import vllm_plugin

        req = self._rule_env(arm)
        vllm_plugin.restore()
        if req is None:
            os.environ.pop(ENV_RULE, None)
            os.environ.pop(ENV_ALPHA, None)
        else:
            os.environ[ENV_RULE], os.environ[ENV_ALPHA] = req[0], repr(req[1])
            # Ray workers (multi-node) get only the variables vLLM copies: add the rule's prefix.
            prefixes = [x for x in os.environ.get(RAY_COPY_PREFIXES, "").split(",") if x]
            if "LENGTHLENS_" not in prefixes:
                os.environ[RAY_COPY_PREFIXES] = ",".join([*prefixes, "LENGTHLENS_"])
            vllm_plugin.apply(*req)  # for engines running in this process
        self._llm = self.vllm.LLM(model=self.cfg.target.path, speculative_config=self.speculative_config(arm),
                                  **self.engine_kwargs())
        self._arm = arm
        return self._llm

    def _stop(self) -> None:
        if self._llm is None:
            return
        eng = getattr(self._llm, "llm_engine", None)
        core = getattr(eng, "engine_core", None)
        for obj in (core, eng):
            fn = getattr(obj, "shutdown", None)
            if callable(fn):
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - best effort: the next engine must still start
                    log.warning("engine shutdown failed: %s", exc)
        self._llm = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass

    def _engine(self, arm: Arm) -> Any:
        if self._llm is not None and (self.engine_per == "run" or arm != self._arm):
            self._stop()
        return self._llm if self._llm is not None else self._start(arm)

    # -- one measurement --------------------------------------------------------------------

    def prompt_ids(self, llm: Any, prompt: str) -> list[int]:
        """The prompt's token ids under the campaign's ``add_special_tokens`` (engine's tokenizer)."""
        return list(llm.get_tokenizer().encode(prompt, add_special_tokens=self.cfg.add_special_tokens))

    def _generate(self, llm: Any, ids: list[int], max_tokens: int, seed: int) -> tuple[Any, dict[str, float], float]:
        sp = self.vllm.SamplingParams(temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                                      max_tokens=max_tokens, seed=seed)
        before = spec_counters(llm.get_metrics())
        t0 = time.perf_counter()
        # A TokensPrompt (vllm.inputs): vLLM tokenizes nothing, so add_special_tokens is the campaign's.
        out = llm.generate([{"prompt_token_ids": ids}], sp, use_tqdm=False)[0]
        wall = time.perf_counter() - t0
        after = spec_counters(llm.get_metrics())
        return out, {k: after[k] - before[k] for k in after}, wall

    def run(self, prompt: str, arm: Arm, seed: int) -> RunResult:
        """Generate one completion; counters are metric deltas around the request."""
        cfg = self.cfg
        llm = self._engine(arm)
        budget = cfg.max_new_tokens
        first = budget if arm.force_commit is None else min(arm.force_commit, budget)
        ids = self.prompt_ids(llm, prompt)
        out, ctr, wall = self._generate(llm, ids, first, seed)
        comp = out.outputs[0]
        text, n_out, finish = comp.text, len(comp.token_ids), comp.finish_reason
        extra: dict[str, Any] = {"num_speculative_tokens": cfg.num_draft_tokens,
                                 "vllm_finish_reason": comp.finish_reason, **self.parallel, **self.serving(1)}
        if arm.force_commit is not None:
            fired = (finish == "length" and n_out < budget
                     and thinking_open(text, cfg.thinking_format, cfg.opened_in_prompt))
            extra.update(force_commit_fired=fired, force_commit_at=n_out if fired else None)
            if fired:
                marker = CLOSE_MARKERS[cfg.thinking_format]
                marker_ids = list(llm.get_tokenizer().encode(marker, add_special_tokens=False))
                n_marker = len(marker_ids)
                text += marker
                n_out += n_marker
                rest = budget - n_out
                if rest > 0:
                    out2, ctr2, wall2 = self._generate(llm, ids + list(comp.token_ids) + marker_ids, rest, seed)
                    c2 = out2.outputs[0]
                    text += c2.text
                    n_out += len(c2.token_ids)
                    finish = c2.finish_reason
                    ctr = {k: ctr[k] + ctr2[k] for k in ctr}
                    wall += wall2
                else:
                    finish = "length"
                extra["forced_tokens"] = n_marker
        return RunResult(
            text=text, output_tokens=n_out, finish_reason="length" if finish == "length" else "stop",
            draft_rounds=int(ctr["draft_rounds"]), accepted_tokens=int(ctr["accepted_tokens"]),
            draft_tokens=int(ctr["draft_tokens"]), wall_time_seconds=wall,
            input_tokens=len(out.prompt_token_ids or []), proposals=None, extra=extra,
        )

    def close(self) -> None:
        """Shut the engine down, lift the patches and clear the rule from the environment."""
        from lengthlens.generate import vllm_plugin

        self._stop()
        vllm_plugin.restore()
        os.environ.pop(ENV_RULE, None)
        os.environ.pop(ENV_ALPHA, None)
