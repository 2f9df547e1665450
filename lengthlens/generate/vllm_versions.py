"""The vLLM releases the rules plugin was written against: their rejection functions' parameter lists.

A function whose parameters match none of these is refused with the installed version and the
function named, so a relaxed arm never runs vLLM's stock (lossless) sampler under its name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_V1_026 = ("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens", "draft_probs",
           "target_logits", "bonus_token_ids", "sampling_metadata", "synthetic_mode",
           "synthetic_conditional_rates", "use_fp64_gumbel")
_V2_026 = ("target_logits", "draft_logits", "draft_sampled", "cu_num_logits", "pos", "idx_mapping",
           "expanded_idx_mapping", "expanded_local_pos", "temperature", "seed", "num_speculative_steps",
           "synthetic_conditional_rates", "use_fp64", "use_block_verification")
_FLY = ("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k")
#: Parameter lists of V1 ``rejection_sample`` this plugin knows, and the vLLM release they were read from.
V1_SIGNATURES: dict[tuple[str, ...], str] = {_V1_026: "0.26.0", _V1_026 + _FLY: "0.33.0"}
#: The same for model-runner V2's ``rejection_sample``.
V2_SIGNATURES: dict[tuple[str, ...], str] = {
    _V2_026: "0.26.0",
    _V2_026 + ("contexts", "watermarking", "watermarking_skip_mask", "watermark_key") + _FLY: "0.33.0",
}
SUPPORTED_VERSIONS = "0.26.0 and 0.33.x"


class UnsupportedVLLM(RuntimeError):
    """The installed vLLM's rejection functions are not ones this plugin was written against."""


def vllm_version() -> str:
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except ImportError:
        return "not installed"


def signature_params(fn: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


def check_signature(fn: Callable[..., Any], known: dict[tuple[str, ...], str], qualname: str) -> str:
    """The release a function's parameter list was read from; UnsupportedVLLM when it is not known."""
    params = signature_params(fn)
    if params in known:
        return known[params]
    raise UnsupportedVLLM(
        f"lengthlens rules plugin: vLLM {vllm_version()} is not supported: {qualname}{inspect.signature(fn)} "
        f"does not match a signature the plugin was written against (vLLM {SUPPORTED_VERSIONS}); "
        "refusing to start rather than run the stock sampler under a relaxed arm's name")
