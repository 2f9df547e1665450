"""The verification rules of the study, written once as batched torch functions of (p, q, x, u).

Every rule is expressed as a *threshold* t(x) and a *residual* r: the drafted token x is accepted
iff ``u <= t(x)`` with u ~ U(0, 1] (u > 0, so a token the target gives zero probability is never
accepted by a ``u <= p/q`` test), and on rejection the replacement is drawn from ``norm(r)``.
A rule that accepts without a coin flip (spec_casc_opt not deferring, r_fuzzy under its JSD
threshold) has ``t = +inf``. The same functions serve the CPU reference sampler, the vLLM plugin
and the tests' acceptance-probability checks, so there is one place where each rule is defined.

Conventions (the study's):
  * p and q are the target and draft distributions after temperature / top-p, rows summing to 1.
  * ``p(x)/q(x)`` with ``q(x) = 0`` is ``+inf`` when ``p(x) > 0`` and 0 when ``p(x) = 0`` (the draft
    cannot sample such a token; the convention only keeps edge cases finite and lossless-safe).
  * A residual with no mass (at most 8 machine epsilons: rounding noise of a zero residual, as when
    every token is in spec_casc_tok's set A) falls back to p. Its mass is the rule's rejection
    probability, so the fallback is used with probability ~0; it only keeps the output valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: The relaxed rules of the study, in its order.
LOSSY_RULES = ("mentored_dec", "cactus", "spec_casc_opt", "spec_casc_tok", "r_fuzzy")
#: Every rule this module knows; ``lossless`` is the strict baseline.
RULES = ("lossless", *LOSSY_RULES)

#: The alpha at which each rule is exactly lossless (the study's "neutral" values).
STRICT_ALPHA: dict[str, float] = {
    "lossless": 0.0,
    "mentored_dec": 0.0,
    "cactus": 0.0,
    "spec_casc_opt": -math.inf,
    "spec_casc_tok": -math.inf,
    "r_fuzzy": -math.inf,
}


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying a batch of drafted tokens: decisions, thresholds and residuals."""

    accept: torch.Tensor  # [N] bool: the rule accepts x
    strict_accept: torch.Tensor  # [N] bool: the lossless test with the same u would accept x
    threshold: torch.Tensor  # [N] accept iff u <= threshold (+inf: accept without a coin flip)
    residual: torch.Tensor  # [N, V] normalized distribution to resample from on rejection


def check_alpha(rule: str, alpha: float) -> None:
    """Raise ValueError for an unknown rule or an alpha outside the rule's domain."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {', '.join(RULES)}")
    if math.isnan(alpha):
        raise ValueError(f"{rule}: alpha is NaN")
    if rule == "mentored_dec" and not (0.0 <= alpha < 1.0):
        raise ValueError(f"mentored_dec needs alpha in [0, 1), got {alpha}")
    if rule == "cactus" and not (0.0 <= alpha < math.inf):
        raise ValueError(f"cactus needs a finite alpha >= 0, got {alpha}")
    if rule in ("spec_casc_opt", "spec_casc_tok", "r_fuzzy") and alpha == math.inf:
        raise ValueError(f"{rule}: alpha = +inf is not a rule")


def _gather(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return t.gather(-1, x.long().unsqueeze(-1)).squeeze(-1)


def _ratio(px: torch.Tensor, qx: torch.Tensor) -> torch.Tensor:
    """p(x)/q(x) with the q(x) = 0 convention of the module docstring."""
    safe = torch.where(qx > 0, qx, torch.ones_like(qx))
    r = px / safe
    inf = torch.full_like(px, math.inf)
    return torch.where(qx > 0, r, torch.where(px > 0, inf, torch.zeros_like(px)))


def normalize_residual(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """norm(max(0, r)) row-wise; rows with no mass beyond rounding noise fall back to ``fallback``."""
    r = r.clamp_min(0)
    s = r.sum(-1, keepdim=True)
    ok = s > 8 * torch.finfo(r.dtype).eps
    return torch.where(ok, r / torch.where(ok, s, torch.ones_like(s)), fallback)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """TV(p, q) = sum max(0, p - q), row-wise."""
    return (p - q).clamp_min(0).sum(-1)


def jsd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in nats, row-wise, with 0 log 0 = 0."""
    m = 0.5 * (p + q)

    def kl(a: torch.Tensor) -> torch.Tensor:
        pos = a > 0
        ratio = torch.where(pos, a / torch.where(pos, m, torch.ones_like(m)), torch.ones_like(a))
        return torch.where(pos, a * torch.log(ratio), torch.zeros_like(a)).sum(-1)

    return (0.5 * kl(p) + 0.5 * kl(q)).clamp_min(0)


def _as_alpha(alpha: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    a = torch.as_tensor(alpha, dtype=like.dtype, device=like.device)
    return a.expand(like.shape[:-1]) if a.ndim == 0 else a


def thresholds_and_residuals(
    rule: str, alpha: float, p: torch.Tensor, q: torch.Tensor, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(threshold t(x), residual distribution, lossless threshold) of ``rule`` for a batch.

    p, q: [N, V]; x: [N] drafted token ids. Accept iff u <= t(x); the lossless threshold is
    min(1, p(x)/q(x)), returned so callers can log what the strict rule would have done.
    """
    check_alpha(rule, float(alpha))
    px, qx = _gather(p, x), _gather(q, x)
    ratio = _ratio(px, qx)
    strict_t = ratio.clamp(max=1.0)
    lossless_res = normalize_residual(p - q, p)
    a = _as_alpha(alpha, p)
    inf = torch.full_like(px, math.inf)

    if rule == "lossless":
        return strict_t, lossless_res, strict_t
    if rule == "mentored_dec":
        # Written as ratio / (1 - alpha) so alpha = 0 is bit-identical to the lossless test.
        return ratio / (1.0 - a), lossless_res, strict_t
    if rule == "cactus":
        gamma = (px + torch.sqrt(2.0 * a * px * (1.0 - px))).clamp(max=1.0)
        one_minus_px = 1.0 - px
        # p(x) = 1 leaves no mass off x: H is the point mass at x (p(y) = 0 there anyway).
        scale = torch.where(one_minus_px > 0, (1.0 - gamma) / torch.where(one_minus_px > 0, one_minus_px, torch.ones_like(px)), torch.zeros_like(px))
        h = p * scale.unsqueeze(-1)
        h = h.scatter(-1, x.long().unsqueeze(-1), gamma.unsqueeze(-1))
        t = _ratio(gamma, qx).clamp(max=1.0)
        return t, normalize_residual(h - q, p), strict_t
    if rule == "spec_casc_opt":
        tv = total_variation(p, q)
        # alpha * TV with TV = 0 is 0 even for alpha = -inf (p = q: nothing to defer about).
        shift = torch.where(tv > 0, a * tv, torch.zeros_like(tv))
        defer = q.max(-1).values < p.max(-1).values - shift
        return torch.where(defer, strict_t, inf), lossless_res, strict_t
    if rule == "spec_casc_tok":
        pmax = p.max(-1, keepdim=True).values
        in_a = p >= (1.0 - a).unsqueeze(-1) * pmax
        qa = torch.where(in_a, q, torch.zeros_like(q))
        eta = 1.0 - qa.sum(-1, keepdim=True)
        pi = qa + eta * p
        t = _ratio(_gather(pi, x), qx)
        return t, normalize_residual(pi - q, p), strict_t
    if rule == "r_fuzzy":
        close = jsd(p, q) < a
        return torch.where(close, inf, strict_t), lossless_res, strict_t
    raise AssertionError(rule)  # check_alpha rejected it already


def verify(
    rule: str,
    alpha: float,
    p: torch.Tensor,
    q: torch.Tensor,
    x: torch.Tensor,
    u: torch.Tensor,
) -> Verdict:
    """Accept/reject each drafted token x under ``rule`` with uniforms u in (0, 1]; residuals for rejections."""
    t, residual, strict_t = thresholds_and_residuals(rule, alpha, p, q, x)
    u = u.to(p.dtype)
    return Verdict(accept=u <= t, strict_accept=u <= strict_t, threshold=t, residual=residual)


def acceptance_probability(
    rule: str, alpha: float, p: torch.Tensor, q: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """P(accept | x) = P(u <= t(x)) = clamp(t(x), 0, 1) for u ~ U(0, 1]."""
    t, _, _ = thresholds_and_residuals(rule, alpha, p, q, x)
    return t.clamp(0.0, 1.0)


def output_distribution(rule: str, alpha: float, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Exact distribution of the token emitted at one position, by enumerating the draft token.

    p, q: [V] (one position). Returns sum_x q(x) [a(x) 1{y = x} + (1 - a(x)) r_x(y)].
    """
    v = p.shape[-1]
    xs = torch.arange(v, device=p.device)
    pp, qq = p.expand(v, v), q.expand(v, v)
    t, residual, _ = thresholds_and_residuals(rule, alpha, pp, qq, xs)
    acc = t.clamp(0.0, 1.0)
    emit = torch.diag(acc) + (1.0 - acc).unsqueeze(-1) * residual
    return (q.unsqueeze(-1) * emit).sum(0)
