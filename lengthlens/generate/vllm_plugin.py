"""vLLM general plugin: swap the chosen verification rule in at vLLM's rejection sampler.

Registered through the ``vllm.general_plugins`` entry point ``lengthlens_rules`` (pyproject), so
vLLM calls :func:`register` in every process it starts (API server, engine core, workers). The
rule comes from the environment, which those processes inherit:

* ``LENGTHLENS_RULE``: ``lossless``, ``mentored_dec``, ``cactus``, ``spec_casc_opt``,
  ``spec_casc_tok`` or ``r_fuzzy``; unset or empty leaves vLLM untouched.
* ``LENGTHLENS_ALPHA``: the rule's alpha (a float; ``-inf`` allowed where the rule allows it).
* ``LENGTHLENS_PLUGIN_TRACE`` (optional): a file to which each process appends one line when it
  patches and one on its first patched call, so a check can prove the rule ran inside vLLM.

Pinned to vLLM 0.26.0 (the study's). Two paths are patched when present:

* V1 ``vllm.v1.sample.rejection_sampler.rejection_sample`` (called by ``RejectionSampler.forward``
  with target/draft probabilities after temperature and top-p);
* model-runner V2 ``probabilistic_rejection_sample`` / ``rejection_sample`` in
  ``vllm.v1.worker.gpu.spec_decode`` (called with processed target logits and the drafter's logits).

Both need the draft distribution q, so run the drafter with ``draft_sample_method:
"probabilistic"``; without draft probabilities (n-gram drafters, greedy drafting) and for greedy
(temperature 0) requests the stock sampler runs. The tensor math is
:mod:`lengthlens.generate.vllm_tensors` on top of :mod:`lengthlens.generate.rules`; this module is
only glue, imported by vLLM, never by lengthlens itself.

Randomness: V1 draws its uniforms and exponentials with vLLM's own per-request generators (as
the stock sampler does); V2 seeds a generator per request from its seed and position. Seeded
runs are reproducible under the plugin, but not bit-identical to the stock sampler's stream.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger("lengthlens.vllm_plugin")

PINNED_VLLM = "0.26.0"
ENV_RULE = "LENGTHLENS_RULE"
ENV_ALPHA = "LENGTHLENS_ALPHA"
ENV_TRACE = "LENGTHLENS_PLUGIN_TRACE"

V1_MODULE = "vllm.v1.sample.rejection_sampler"
V2_MODULES = (
    "vllm.v1.worker.gpu.spec_decode.rejection_sampler",
    "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils",
    "vllm.v1.worker.gpu.spec_decode.probabilistic_rejection_sampler_utils",
)
V2_FUNCTIONS = ("probabilistic_rejection_sample", "rejection_sample")
#: Leading parameters shared by V2's rejection functions (read from vLLM's source), in order.
V2_PARAMS = ("target_logits", "draft_logits", "draft_sampled", "cu_num_logits", "pos", "idx_mapping",
             "expanded_idx_mapping", "expanded_local_pos", "temperature", "seed", "num_speculative_steps")

_PATCHED: dict[str, Callable[..., Any]] = {}
_TRACED: set[str] = set()


def _trace(msg: str, once: str | None = None) -> None:
    path = os.environ.get(ENV_TRACE)
    if not path or (once is not None and once in _TRACED):
        return
    if once is not None:
        _TRACED.add(once)
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {msg}\n")
    except OSError:
        pass


def rule_from_env(env: dict[str, str] | None = None) -> tuple[str, float] | None:
    """(rule, alpha) from the environment, or None when no rule is requested; bad values raise."""
    from lengthlens.generate.rules import check_alpha

    env = os.environ if env is None else env
    rule = (env.get(ENV_RULE) or "").strip()
    if not rule:
        return None
    raw = (env.get(ENV_ALPHA) or "0").strip()
    alpha = float(raw)
    check_alpha(rule, alpha)
    return rule, alpha


def _uniform_open(u):
    # vLLM draws u in [0, 1); u = 0 would accept a token with p(x) = 0 under `u <= p/q`.
    import torch

    return u.clamp_min(torch.finfo(u.dtype).tiny)


def make_v1_wrapper(original: Callable[..., Any], rule: str, alpha: float, module: Any) -> Callable[..., Any]:
    """A drop-in for V1 ``rejection_sample`` applying ``rule`` to random (non-greedy) requests."""
    import torch

    from lengthlens.generate.vllm_tensors import v1_rejection_sample

    sig = inspect.signature(original)
    needed = {"draft_token_ids", "num_draft_tokens", "max_spec_len", "draft_probs", "target_probs",
              "bonus_token_ids", "sampling_metadata"}
    missing = needed - set(sig.parameters)
    if missing:
        # A vLLM whose V1 function differs from the one this was written against: leave it alone.
        log.warning("lengthlens: V1 rejection_sample lacks %s; not patching it", ", ".join(sorted(missing)))
        return original

    def rejection_sample(*args: Any, **kwargs: Any):
        b = sig.bind(*args, **kwargs)
        a = b.arguments
        draft_probs = a.get("draft_probs")
        md = a["sampling_metadata"]
        if draft_probs is None or md.all_greedy:
            return original(*args, **kwargs)
        _trace(f"call v1 {rule} {alpha}", once="v1")
        draft_token_ids = a["draft_token_ids"]
        num_draft_tokens = list(a["num_draft_tokens"])
        target_probs = a["target_probs"]
        device = target_probs.device
        gen = getattr(module, "generate_uniform_probs", None)
        if gen is not None:
            u = gen(draft_token_ids.shape[0], num_draft_tokens, md.generators, device)
        else:
            u = torch.rand(draft_token_ids.shape[0], dtype=torch.float32, device=device)
        noise = torch.empty((len(num_draft_tokens), target_probs.shape[-1]), dtype=torch.float32, device=device)
        noise.exponential_()
        for i, g in md.generators.items():
            if num_draft_tokens[i] > 0:
                noise[i].exponential_(generator=g)
        ours = v1_rejection_sample(rule, alpha, draft_token_ids, num_draft_tokens, a["max_spec_len"],
                                   draft_probs, target_probs, a["bonus_token_ids"], _uniform_open(u), noise)
        if md.all_random:
            return ours
        # Mixed batch: greedy requests keep the stock greedy verification.
        stock = original(*args, **kwargs)
        greedy = md.temperature == getattr(module, "GREEDY_TEMPERATURE", 0)
        return torch.where(greedy.unsqueeze(-1), stock, ours)

    rejection_sample.__lengthlens_rule__ = (rule, alpha)  # type: ignore[attr-defined]
    return rejection_sample


def make_v2_wrapper(original: Callable[..., Any], rule: str, alpha: float) -> Callable[..., Any]:
    """A drop-in for V2's rejection functions applying ``rule`` to random (non-greedy) requests."""
    import torch

    from lengthlens.generate.vllm_tensors import v2_rejection_sample

    names = list(inspect.signature(original).parameters)
    if len(names) < len(V2_PARAMS) or names[1] != "draft_logits":
        log.warning("lengthlens: %s has an unexpected signature %s; not patching it", original.__name__, names)
        return original

    def patched(*args: Any, **kwargs: Any):
        vals: dict[str, Any] = {}
        for i, key in enumerate(V2_PARAMS):
            if i < len(args):
                vals[key] = args[i]
            elif key in kwargs:
                vals[key] = kwargs[key]
            elif i < len(names) and names[i] in kwargs:
                vals[key] = kwargs[names[i]]
        if vals.get("draft_logits") is None or len(vals) < len(V2_PARAMS):
            return original(*args, **kwargs)
        temp = vals["temperature"]
        idx = vals["idx_mapping"].long()
        req_temp = temp[idx]
        if bool((req_temp == 0).all()):
            return original(*args, **kwargs)
        _trace(f"call v2 {rule} {alpha}", once="v2")
        logits = vals["target_logits"]
        cu = vals["cu_num_logits"].long()
        pos = vals["pos"].long()
        seeds = vals["seed"][idx].long()
        r = cu.shape[0] - 1
        device = logits.device
        u = torch.empty(logits.shape[0], dtype=torch.float32, device=device)
        noise = torch.empty((r, logits.shape[-1]), dtype=torch.float32, device=device)
        starts = cu[:-1].tolist()
        ends = cu[1:].tolist()
        first_pos = pos[cu[:-1].clamp(max=max(logits.shape[0] - 1, 0))].tolist() if logits.shape[0] else [0] * r
        seeds_l = seeds.tolist()
        for j in range(r):
            # Seeded by (request seed, position): reproducible, independent across steps.
            g = torch.Generator(device=device).manual_seed((seeds_l[j] * 1_000_003 + first_pos[j]) & 0x7FFFFFFFFFFFFFFF)
            u[starts[j]:ends[j]] = torch.rand(ends[j] - starts[j], generator=g, device=device)
            noise[j].exponential_(generator=g)
        sampled, num_sampled = v2_rejection_sample(rule, alpha, logits, vals["draft_logits"], vals["draft_sampled"],
                                                   cu, idx, int(vals["num_speculative_steps"]),
                                                   _uniform_open(u), noise)
        if bool((req_temp > 0).all()):
            return sampled, num_sampled
        stock_sampled, stock_num = original(*args, **kwargs)
        greedy = req_temp == 0
        return (torch.where(greedy.unsqueeze(-1), stock_sampled.to(sampled.dtype), sampled),
                torch.where(greedy, stock_num.to(num_sampled.dtype), num_sampled))

    patched.__lengthlens_rule__ = (rule, alpha)  # type: ignore[attr-defined]
    return patched


def _patch_attr(module: Any, attr: str, wrapper_factory: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        return False
    key = f"{module.__name__}.{attr}"
    original = _PATCHED.get(key, fn)
    if getattr(fn, "__lengthlens_rule__", None) is not None and key not in _PATCHED:
        return False  # patched by someone else's copy of this module; leave it
    wrapped = wrapper_factory(original)
    if wrapped is original:
        return False
    _PATCHED[key] = original
    setattr(module, attr, wrapped)
    return True


def apply(rule: str, alpha: float) -> list[str]:
    """Patch every rejection-sampling entry point vLLM has; return the patched names."""
    patched: list[str] = []
    try:
        m1 = importlib.import_module(V1_MODULE)
    except ImportError:
        m1 = None
    if m1 is not None and _patch_attr(m1, "rejection_sample", lambda o: make_v1_wrapper(o, rule, alpha, m1)):
        patched.append(f"{V1_MODULE}.rejection_sample")
    for name in V2_MODULES:
        try:
            m = importlib.import_module(name)
        except ImportError:
            continue
        for attr in V2_FUNCTIONS:
            if _patch_attr(m, attr, lambda o: make_v2_wrapper(o, rule, alpha)):
                patched.append(f"{name}.{attr}")
    return patched


def restore() -> None:
    """Undo :func:`apply` (tests and interactive use)."""
    for key, fn in list(_PATCHED.items()):
        mod, _, attr = key.rpartition(".")
        setattr(importlib.import_module(mod), attr, fn)
        del _PATCHED[key]


def register() -> None:
    """vLLM entry point: patch in the rule named by the environment, if any."""
    req = rule_from_env()
    if req is None:
        return
    rule, alpha = req
    try:
        import vllm

        version = getattr(vllm, "__version__", "unknown")
    except ImportError:  # pragma: no cover - only vLLM calls register
        return
    if version != PINNED_VLLM:
        log.warning("lengthlens rules plugin is pinned to vLLM %s, found %s; patching anyway", PINNED_VLLM, version)
    names = apply(rule, alpha)
    _trace(f"register vllm={version} {rule} {alpha} {','.join(names)}")
    if not names:
        raise RuntimeError(f"lengthlens: no rejection sampler found to patch in vLLM {version}")
    log.warning("lengthlens rules plugin: %s alpha=%s in pid %d (%s)", rule,
                "-inf" if alpha == -math.inf else alpha, os.getpid(), ", ".join(names))
