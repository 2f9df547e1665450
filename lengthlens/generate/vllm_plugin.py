"""vLLM general plugin: swap the chosen verification rule in at vLLM's rejection sampler.

Registered through the ``vllm.general_plugins`` entry point ``lengthlens_rules`` (pyproject), so
vLLM's plugin loader (``vllm.plugins.load_general_plugins``) calls :func:`register` in every
process it starts (API server, engine core, workers). The rule comes from the environment, which
those processes inherit:

* ``LENGTHLENS_RULE``: ``lossless``, ``mentored_dec``, ``cactus``, ``spec_casc_opt``,
  ``spec_casc_tok`` or ``r_fuzzy``; unset or empty leaves vLLM untouched.
* ``LENGTHLENS_ALPHA``: the rule's alpha (a float; ``-inf`` allowed where the rule allows it).
* ``LENGTHLENS_PLUGIN_TRACE`` (optional): a file to which each process appends one line when it
  patches and one on its first patched call, so a check can prove the rule ran inside vLLM.

Supported vLLM versions: those whose rejection functions have one of the signatures in
:data:`V1_SIGNATURES` / :data:`V2_SIGNATURES` (read from vLLM 0.26.0, the study's, and 0.33.0,
the current release; the versions between are accepted when their signatures match one of
these). Any other signature is refused with the vLLM version and the function named, and the
engine does not start. Two entry points are patched, in the module whose global name the caller
looks up:

* V1 ``vllm.v1.sample.rejection_sampler.rejection_sample``, called by ``RejectionSampler.forward``
  with the target logits after temperature / top-k / top-p and the drafter's probabilities. The
  V1 model runner is the one that runs ``draft_model`` in 0.26.0.
* model-runner V2 ``rejection_sample``, defined in ``vllm.v1.worker.gpu.spec_decode.
  rejection_sampler_utils`` and called from ``...spec_decode.rejection_sampler`` (patched in both),
  with processed target logits and the drafter's logits. V2 is the default runner in 0.33.

Both need the draft distribution q: run the drafter with ``draft_sample_method:
"probabilistic"``. A relaxed rule refuses to run without q (n-gram drafters, greedy drafting),
with another rejection method (``synthetic``, ``block``, ``fly``) or with watermarking: each
raises, so a relaxed arm never silently runs the stock sampler. Greedy (temperature 0) requests
keep the stock verification. :func:`register` fails when a function it must patch is missing or
unknown, and each runner's ``RejectionSampler`` checks at construction (engine start) that the
function it calls is patched and that the speculative config suits the rule.

The tensor math is :mod:`lengthlens.generate.vllm_tensors` on top of
:mod:`lengthlens.generate.rules`; this module is only glue, imported by vLLM, never by lengthlens
itself. Randomness: V1 draws its uniforms and exponentials with vLLM's own per-request generators
(as the stock sampler does); V2 seeds a generator per request from its seed and position. Seeded
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

# Re-exported: the plugin's public names.
from lengthlens.generate.vllm_versions import SUPPORTED_VERSIONS, V1_SIGNATURES, V2_SIGNATURES  # noqa: F401
from lengthlens.generate.vllm_versions import UnsupportedVLLM, signature_params, check_signature, vllm_version  # noqa: F401

log = logging.getLogger("lengthlens.vllm_plugin")

ENV_RULE = "LENGTHLENS_RULE"
ENV_ALPHA = "LENGTHLENS_ALPHA"
ENV_TRACE = "LENGTHLENS_PLUGIN_TRACE"

V1_MODULE = "vllm.v1.sample.rejection_sampler"
V2_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"
V2_UTILS_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"

_PATCHED: dict[str, Callable[..., Any]] = {}
_GUARDS: dict[str, Callable[..., Any]] = {}
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


def _uniform_open(u, dtype):
    """u in [0, 1) -> (0, 1) in ``dtype``: u = 0 would accept a token with p(x) = 0 under ``u <= p/q``."""
    import torch

    return u.to(dtype).clamp_min(torch.finfo(dtype).tiny)


def _no_draft_distribution(rule: str, where: str) -> RuntimeError:
    return RuntimeError(
        f"lengthlens rules plugin: rule {rule} needs the draft distribution q, but vLLM's {where} got none; "
        "run the drafter with speculative_config draft_sample_method='probabilistic' and a method that has "
        "draft probabilities (draft_model, eagle, ...; not ngram)")


def _unsupported_mode(rule: str, what: str) -> RuntimeError:
    return RuntimeError(f"lengthlens rules plugin: rule {rule} cannot run together with {what}")


def make_v1_wrapper(original: Callable[..., Any], rule: str, alpha: float, module: Any) -> Callable[..., Any]:
    """A drop-in for V1 ``rejection_sample`` applying ``rule`` to random (non-greedy) requests.

    ``original`` must have a signature from :data:`V1_SIGNATURES` (checked by :func:`apply`).
    """
    import torch

    from lengthlens.generate.vllm_tensors import v1_rejection_sample

    sig = inspect.signature(original)

    def rejection_sample(*args: Any, **kwargs: Any):
        b = sig.bind(*args, **kwargs)
        b.apply_defaults()
        a = b.arguments
        if a.get("synthetic_mode"):
            raise _unsupported_mode(rule, "rejection_sample_method='synthetic'")
        if a.get("fly_window_size") is not None:
            raise _unsupported_mode(rule, "FLy verification (rejection_sample_method='fly')")
        md = a["sampling_metadata"]
        draft_probs = a["draft_probs"]
        if md.all_greedy:
            return original(*args, **kwargs)
        if draft_probs is None:
            if rule == "lossless":
                return original(*args, **kwargs)
            raise _no_draft_distribution(rule, "V1 rejection_sample")
        _trace(f"call v1 {rule} {alpha}", once="v1")
        draft_token_ids = a["draft_token_ids"]
        num_draft_tokens = list(a["num_draft_tokens"])
        target_logits = a["target_logits"]
        device = target_logits.device
        # As the stock code: probabilities in float32 from the processed logits.
        target_probs = target_logits.softmax(dim=-1, dtype=torch.float32)
        u = module.generate_uniform_probs(draft_token_ids.shape[0], num_draft_tokens, md.generators, device)
        noise_dtype = torch.float64 if a.get("use_fp64_gumbel") else torch.float32
        noise = torch.empty((len(num_draft_tokens), target_probs.shape[-1]), dtype=noise_dtype, device=device)
        noise.exponential_()
        for i, g in md.generators.items():
            if num_draft_tokens[i] > 0:
                noise[i].exponential_(generator=g)
        ours = v1_rejection_sample(rule, alpha, draft_token_ids, num_draft_tokens, a["max_spec_len"],
                                   draft_probs.to(torch.float32), target_probs, a["bonus_token_ids"],
                                   _uniform_open(u, torch.float32), noise)
        if md.all_random:
            return ours
        # Mixed batch: greedy requests keep the stock greedy verification.
        stock = original(*args, **kwargs)
        greedy = md.temperature == getattr(module, "GREEDY_TEMPERATURE", 0)
        return torch.where(greedy.unsqueeze(-1), stock, ours)

    rejection_sample.__lengthlens_rule__ = (rule, alpha)  # type: ignore[attr-defined]
    rejection_sample.__wrapped__ = original  # type: ignore[attr-defined]
    return rejection_sample


def _refuse_v2_modes(rule: str, a: dict[str, Any]) -> None:
    """Raise for V2 verification modes the rules do not define (they would silently bypass the rule)."""
    if a.get("synthetic_conditional_rates") is not None:
        raise _unsupported_mode(rule, "rejection_sample_method='synthetic'")
    if a.get("use_block_verification"):
        raise _unsupported_mode(rule, "block verification (rejection_sample_method='block')")
    if a.get("watermarking") is not None or a.get("contexts") is not None:
        raise _unsupported_mode(rule, "watermarking")
    if a.get("fly_window_size"):
        raise _unsupported_mode(rule, "FLy verification (rejection_sample_method='fly')")


def _v2_draws(cu, pos, seeds, r: int, logits_shape, device, noise_dtype):
    """Per request: uniforms for its drafts and exponential noise for its recovered token, seeded by (seed, position)."""
    import torch

    u = torch.ones(logits_shape[0], dtype=torch.float64, device=device)
    noise = torch.empty((r, logits_shape[-1]), dtype=noise_dtype, device=device)
    starts, ends = cu[:-1].tolist(), cu[1:].tolist()
    pos_l, seeds_l = pos.tolist(), seeds.tolist()
    for j in range(r):
        first_pos = pos_l[starts[j]] if ends[j] > starts[j] else 0
        # Seeded by (request seed, position): reproducible, independent across steps.
        g = torch.Generator(device=device).manual_seed((seeds_l[j] * 1_000_003 + first_pos) & 0x7FFFFFFFFFFFFFFF)
        u[starts[j]:ends[j]] = torch.rand(ends[j] - starts[j], generator=g, dtype=torch.float64, device=device)
        noise[j].exponential_(generator=g)
    return u, noise


def make_v2_wrapper(original: Callable[..., Any], rule: str, alpha: float) -> Callable[..., Any]:
    """A drop-in for model-runner V2's ``rejection_sample`` applying ``rule`` to random requests.

    Returns what vLLM's returns: ``(sampled [R, K + 1] int64, num_sampled [R] int32)``.
    """
    import torch

    from lengthlens.generate.vllm_tensors import v2_rejection_sample

    sig = inspect.signature(original)

    def rejection_sample(*args: Any, **kwargs: Any):
        b = sig.bind(*args, **kwargs)
        b.apply_defaults()
        a = b.arguments
        _refuse_v2_modes(rule, a)
        temp = a["temperature"]
        idx = a["idx_mapping"].long()
        req_temp = temp[idx]
        if bool((req_temp == 0).all()):
            return original(*args, **kwargs)
        draft_logits = a["draft_logits"]
        if draft_logits is None:
            if rule == "lossless":
                return original(*args, **kwargs)
            raise _no_draft_distribution(rule, "model-runner V2 rejection_sample")
        _trace(f"call v2 {rule} {alpha}", once="v2")
        logits = a["target_logits"]
        cu = a["cu_num_logits"].long()
        pos = a["pos"].long()
        seeds = a["seed"][idx].long()
        r = cu.shape[0] - 1
        device = logits.device
        u, noise = _v2_draws(cu, pos, seeds, r, logits.shape, device,
                             torch.float64 if a.get("use_fp64") else torch.float32)
        sampled, num_sampled = v2_rejection_sample(rule, alpha, logits, draft_logits, a["draft_sampled"], cu, idx,
                                                   int(a["num_speculative_steps"]), _uniform_open(u, torch.float32),
                                                   noise)
        if bool((req_temp > 0).all()):
            return sampled, num_sampled
        stock_sampled, stock_num = original(*args, **kwargs)
        greedy = req_temp == 0
        return (torch.where(greedy.unsqueeze(-1), stock_sampled.to(sampled.dtype), sampled),
                torch.where(greedy, stock_num.to(num_sampled.dtype), num_sampled))

    rejection_sample.__lengthlens_rule__ = (rule, alpha)  # type: ignore[attr-defined]
    rejection_sample.__wrapped__ = original  # type: ignore[attr-defined]
    return rejection_sample


def _stock(module: Any, attr: str) -> Callable[..., Any] | None:
    key = f"{module.__name__}.{attr}"
    if key in _PATCHED:
        return _PATCHED[key]
    fn = getattr(module, attr, None)
    # A wrapper left by another copy of this module: unwrap to the stock function.
    while fn is not None and getattr(fn, "__lengthlens_rule__", None) is not None:
        fn = getattr(fn, "__wrapped__", None)
    return fn


def _set(module: Any, attr: str, original: Callable[..., Any], wrapped: Callable[..., Any]) -> None:
    _PATCHED.setdefault(f"{module.__name__}.{attr}", original)
    setattr(module, attr, wrapped)


def _import(name: str) -> Any | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def apply(rule: str, alpha: float) -> list[str]:
    """Patch V1's and model-runner V2's rejection functions with ``rule``; return the patched names.

    Raises :class:`UnsupportedVLLM` when a function is missing or its signature is not one of
    the known ones (the vLLM version and the function are named).
    """
    from lengthlens.generate.rules import check_alpha

    check_alpha(rule, alpha)
    patched: list[str] = []
    m1 = _import(V1_MODULE)
    if m1 is None or _stock(m1, "rejection_sample") is None:
        raise UnsupportedVLLM(f"lengthlens rules plugin: vLLM {vllm_version()} has no {V1_MODULE}.rejection_sample "
                              f"(supported: vLLM {SUPPORTED_VERSIONS})")
    orig1 = _stock(m1, "rejection_sample")
    check_signature(orig1, V1_SIGNATURES, f"{V1_MODULE}.rejection_sample")
    _set(m1, "rejection_sample", orig1, make_v1_wrapper(orig1, rule, alpha, m1))
    patched.append(f"{V1_MODULE}.rejection_sample")
    _guard(m1, "RejectionSampler", "V1")

    mu, m2 = _import(V2_UTILS_MODULE), _import(V2_MODULE)
    if mu is None or m2 is None:
        raise UnsupportedVLLM(f"lengthlens rules plugin: vLLM {vllm_version()} has no model-runner V2 module "
                              f"{V2_MODULE if m2 is None else V2_UTILS_MODULE} (supported: vLLM {SUPPORTED_VERSIONS})")
    orig2 = _stock(mu, "rejection_sample")
    caller2 = _stock(m2, "rejection_sample")
    if orig2 is None or caller2 is not orig2:
        raise UnsupportedVLLM(f"lengthlens rules plugin: vLLM {vllm_version()}: {V2_MODULE} does not call "
                              f"{V2_UTILS_MODULE}.rejection_sample (supported: vLLM {SUPPORTED_VERSIONS})")
    check_signature(orig2, V2_SIGNATURES, f"{V2_UTILS_MODULE}.rejection_sample")
    w2 = make_v2_wrapper(orig2, rule, alpha)
    _set(mu, "rejection_sample", orig2, w2)
    _set(m2, "rejection_sample", orig2, w2)
    patched += [f"{V2_UTILS_MODULE}.rejection_sample", f"{V2_MODULE}.rejection_sample"]
    _guard(m2, "RejectionSampler", "V2")
    return patched


def check_runner(which: str, module: Any, spec_config: Any) -> None:
    """Engine-start check of one runner's rejection sampler under the rule in force.

    Raises when the function that runner calls is not the patched one, or when the speculative
    config cannot run the rule (another rejection method; no draft probabilities for a relaxed rule).
    """
    req = _active_rule()
    if req is None:
        return
    rule, alpha = req
    fn = getattr(module, "rejection_sample", None)
    if getattr(fn, "__lengthlens_rule__", None) != (rule, alpha):
        raise RuntimeError(f"lengthlens rules plugin: the {which} model runner of vLLM {vllm_version()} would call "
                           f"an unpatched {module.__name__}.rejection_sample under rule {rule}; refusing to start")
    if spec_config is None:
        return
    method = getattr(spec_config, "rejection_sample_method", "standard")
    if method not in (None, "standard"):
        raise _unsupported_mode(rule, f"rejection_sample_method={method!r}")
    if rule != "lossless" and getattr(spec_config, "draft_sample_method", "probabilistic") != "probabilistic":
        raise RuntimeError(f"lengthlens rules plugin: rule {rule} needs speculative_config "
                           f"draft_sample_method='probabilistic', got {spec_config.draft_sample_method!r}")
    if rule != "lossless" and getattr(spec_config, "method", None) in ("ngram", "ngram_gpu", "suffix"):
        raise _no_draft_distribution(rule, f"{which} runner (speculative method {spec_config.method})")
    _trace(f"check {which} {rule} {alpha} method={getattr(spec_config, 'method', None)}")


def _guard(module: Any, cls_name: str, which: str) -> None:
    """Wrap ``cls.__init__`` so constructing the runner's sampler runs :func:`check_runner`."""
    cls = getattr(module, cls_name, None)
    key = f"{module.__name__}.{cls_name}.__init__"
    if cls is None or key in _GUARDS:
        return
    init = cls.__init__
    init_params = inspect.signature(init).parameters

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        spec = kwargs.get("spec_config")
        if spec is None and "spec_config" in init_params:
            pos = list(init_params).index("spec_config") - 1  # minus self
            if 0 <= pos < len(args):
                spec = args[pos]
        check_runner(which, module, spec)

    __init__.__wrapped__ = init  # type: ignore[attr-defined]
    _GUARDS[key] = init
    cls.__init__ = __init__


def _active_rule() -> tuple[str, float] | None:
    for fn in _PATCHED:
        mod, _, attr = fn.rpartition(".")
        cur = getattr(importlib.import_module(mod), attr, None)
        rule = getattr(cur, "__lengthlens_rule__", None)
        if rule is not None:
            return rule
    return rule_from_env()


def restore() -> None:
    """Undo :func:`apply` (tests and interactive use)."""
    for key, fn in list(_PATCHED.items()):
        mod, _, attr = key.rpartition(".")
        setattr(importlib.import_module(mod), attr, fn)
        del _PATCHED[key]
    for key, init in list(_GUARDS.items()):
        mod, _, rest = key.rpartition(".")[0].rpartition(".")
        setattr(getattr(importlib.import_module(mod), rest), "__init__", init)
        del _GUARDS[key]


def register() -> None:
    """vLLM entry point: patch in the rule named by the environment, if any; raise if that is impossible."""
    req = rule_from_env()
    if req is None:
        return
    rule, alpha = req
    version = vllm_version()
    names = apply(rule, alpha)
    _trace(f"register vllm={version} {rule} {alpha} {','.join(names)}")
    log.warning("lengthlens rules plugin: %s alpha=%s in pid %d (vLLM %s: %s)", rule,
                "-inf" if alpha == -math.inf else alpha, os.getpid(), version, ", ".join(names))
