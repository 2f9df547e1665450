"""Relaxed verification rules that engines ship themselves, recognised by name (none of them is lossless).

A log whose arm runs one of these is a relaxed arm, analysed as such (its name is not among the
lossless speculative methods), and a campaign may run vLLM's FLy as an arm (``{rule: fly, alpha:
<entropy threshold>, window: <W>}``, vLLM backends only). Read from the engines' sources:

- ``fly``: vLLM's ``rejection_sample_method="fly"`` (``vllm/config/speculative.py`` of 0.33.0, not in
  0.29.0): FLy's entropy-gated loose acceptance, ``fly_entropy_threshold`` (0.3), ``fly_window_size``
  (``min(6, num_speculative_tokens - 1)``), ``fly_entropy_top_k`` (3); vLLM itself warns that it "is a
  lossy speculative decoding method and may degrade model outputs";
- ``synthetic``: vLLM's ``rejection_sample_method="synthetic"`` (0.33.0): drafts accepted with a
  decaying probability set by ``synthetic_acceptance_rate(s)``, a benchmarking aid whose output is not
  the target's;
- ``assistant_ensemble``: transformers' ``GenerationConfig.assistant_ensemble_weight`` (5.24.0): the
  verifier accepts against ``w * p_target + (1 - w) * q_draft``, "trading a controlled distributional
  bias for a higher acceptance rate";
- ``medusa_typical`` / ``hydra_typical``: Medusa's and Hydra's typical acceptance (``posterior_threshold``,
  ``posterior_alpha``), which their ``evaluate_posterior`` uses at any temperature above 0
  (:mod:`lengthlens.data.readers.specbench_ids` names Spec-Bench arms so).

vLLM's ``block`` verification (Sun et al.) is lossless and is not listed.
"""

from __future__ import annotations

from typing import Any

#: Method name -> (engine, the setting that selects it).
ENGINE_RELAXED_METHODS: dict[str, tuple[str, str]] = {
    "fly": ("vLLM >= 0.33", "speculative_config.rejection_sample_method='fly'"),
    "synthetic": ("vLLM >= 0.33", "speculative_config.rejection_sample_method='synthetic'"),
    "assistant_ensemble": ("transformers >= 5.24", "GenerationConfig.assistant_ensemble_weight in (0, 1)"),
    "medusa_typical": ("Medusa, Spec-Bench", "typical acceptance (posterior_threshold, posterior_alpha) above temperature 0"),
    "hydra_typical": ("Hydra, Spec-Bench", "typical acceptance (posterior_threshold, posterior_alpha) above temperature 0"),
}
#: vLLM's rejection_sample_method values that are not lossless.
VLLM_RELAXED_SAMPLE_METHODS = frozenset({"fly", "synthetic"})


def is_engine_relaxed(method: str) -> bool:
    """Whether ``method`` names a relaxed rule an engine ships (:data:`ENGINE_RELAXED_METHODS`)."""
    return method in ENGINE_RELAXED_METHODS


def check_campaign_speculative_config(spec: dict[str, Any]) -> None:
    """Refuse a campaign-wide vLLM setting that would make every arm, the strict one included, relaxed.

    ``vllm.speculative_config`` applies to every arm; with vLLM's own relaxed verification there the
    strict arm would be logged as lossless while it is not. Such a rule is an arm of its own.
    """
    method = (spec or {}).get("rejection_sample_method")
    if method in VLLM_RELAXED_SAMPLE_METHODS:
        raise ValueError(f"vllm.speculative_config.rejection_sample_method={method!r} is vLLM's own relaxed verification "
                         f"and would apply to every arm, the strict one included; run it as an arm of its own"
                         + (" ({rule: fly, alpha: <entropy threshold>, window: <W>})" if method == "fly" else ""))


def fly_speculative_config(alpha: float, window: int | None) -> dict[str, Any]:
    """vLLM speculative-config keys of a FLy arm: entropy threshold ``alpha`` and window ``window``."""
    out: dict[str, Any] = {"rejection_sample_method": "fly", "fly_entropy_threshold": float(alpha)}
    if window is not None:
        out["fly_window_size"] = int(window)
    return out
