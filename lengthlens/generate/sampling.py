"""Logits -> sampling distributions (temperature, top-p) and seeded draws, shared by both samplers."""

from __future__ import annotations

import torch


def probs_from_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Distribution after temperature and nucleus truncation; temperature 0 gives the argmax one-hot.

    Computed in float64 so the verification rules see the same numbers on every platform.
    """
    logits = logits.to(torch.float64)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not (0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if temperature == 0:
        # Greedy: first maximal index, as torch.argmax (and plain greedy decoding) picks it.
        out = torch.zeros_like(logits)
        return out.scatter(-1, logits.argmax(-1, keepdim=True), 1.0)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, idx = probs.sort(-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
        keep_sorted = before < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def uniform_open_closed(n: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """n draws from U(0, 1]: never 0, so ``u <= p(x)/q(x)`` never accepts a token with p(x) = 0."""
    return 1.0 - torch.rand(n, generator=generator, dtype=dtype)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``probs`` ([N, V] or [V]), drawn with ``generator``."""
    squeeze = probs.ndim == 1
    p = probs.unsqueeze(0) if squeeze else probs
    out = torch.multinomial(p.to(torch.float64), 1, generator=generator).squeeze(-1)
    return out[0] if squeeze else out
