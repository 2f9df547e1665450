"""The vLLM plugin's tensor code, pure torch (testable on a CPU): the rules on vLLM's batch layouts.

Two layouts, as read from vLLM's source (0.26.0 and 0.33.0 agree on both):

* V1 (``vllm/v1/sample/rejection_sampler.py``, function ``rejection_sample``): flattened draft
  tokens ``[T]`` with ``cu_num_draft_tokens[b]`` = end index of request b's drafts, draft
  probabilities and target probabilities ``[T, V]`` (the plugin takes the softmax of the
  processed target logits vLLM passes, as vLLM does), bonus tokens ``[B, 1]``; returns
  ``[B, max_spec_len + 1]`` int32 with ``-1`` after the emitted tokens.
* model-runner V2 (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``,
  ``rejection_sample``): processed target logits ``[L, V]`` with ``cu_num_logits[r]..cu_num_logits[r+1]``
  the rows of request r (its drafts plus the bonus position), the token verified at row i is
  ``draft_sampled[i + 1]``, draft logits ``[max_num_reqs, K, V]`` indexed by the request's state
  slot and draft step; returns ``(sampled [R, K + 1] int64, num_sampled [R] int32)``.

In both, a draft id of ``-1`` marks a padded draft that must be rejected (vLLM's convention);
its replacement is drawn from the lossless residual norm(max(0, p - q)), as vLLM does.

Randomness is passed in (uniforms and exponential noise), so the functions are deterministic and
the plugin decides where it comes from. The rejected position is resampled with the
exponential race ``argmax(r / E)``, E ~ Exp(1), which draws from norm(r) (vLLM does the same).
"""

from __future__ import annotations

import torch

from lengthlens.generate.rules import normalize_residual, verify

PLACEHOLDER_TOKEN_ID = -1


def _first_rejection(accept: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Per request, the number of leading accepted drafts; ``accept`` is padded [B, K] (padding True)."""
    lead = torch.cumprod(accept.to(torch.int64), dim=1).sum(1)
    return torch.minimum(lead, counts)


def race_sample(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """argmax(probs / noise) row-wise: a draw from norm(probs) given i.i.d. Exp(1) noise."""
    return (probs.to(noise.dtype) / noise).argmax(-1)


def _verify_valid(rule: str, alpha: float, p: torch.Tensor, q: torch.Tensor, x: torch.Tensor,
                  u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(accept, residual) of ``rule``; drafts with id < 0 (vLLM's padding) are rejected with the lossless residual."""
    valid = x >= 0
    xs = torch.where(valid, x.long(), torch.zeros_like(x, dtype=torch.long))
    v = verify(rule, alpha, p, q, xs, u)
    if bool(valid.all()):
        return v.accept, v.residual
    lossless = normalize_residual(p - q, p)
    return v.accept & valid, torch.where(valid.unsqueeze(-1), v.residual, lossless.to(v.residual.dtype))


def v1_rejection_sample(
    rule: str,
    alpha: float,
    draft_token_ids: torch.Tensor,  # [T]
    num_draft_tokens: list[int],  # [B]
    max_spec_len: int,
    draft_probs: torch.Tensor,  # [T, V]
    target_probs: torch.Tensor,  # [T, V]
    bonus_token_ids: torch.Tensor,  # [B, 1]
    uniform: torch.Tensor,  # [T] in (0, 1]
    noise: torch.Tensor,  # [B, V] Exp(1), one row per request (only one resample per request is used)
) -> torch.Tensor:
    """V1 layout: accept a prefix of each request's drafts under ``rule``, resample or add the bonus."""
    b = len(num_draft_tokens)
    device = target_probs.device
    out = torch.full((b, max_spec_len + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device)
    if b == 0:
        return out
    counts = torch.tensor(num_draft_tokens, dtype=torch.int64, device=device)
    req = torch.repeat_interleave(torch.arange(b, device=device), counts)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(draft_token_ids.shape[0], device=device) - starts[req]
    accept, residual = _verify_valid(rule, alpha, target_probs, draft_probs, draft_token_ids, uniform)
    acc = torch.ones((b, max(max_spec_len, 1)), dtype=torch.bool, device=device)
    acc[req, pos] = accept
    n_acc = _first_rejection(acc, counts)  # [B]
    drafts = torch.full((b, max(max_spec_len, 1)), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=device)
    drafts[req, pos] = draft_token_ids.long()
    # Residual of the first rejected position of each request (any row for all-accepted requests).
    rej_row = torch.clamp(starts + n_acc, max=max(draft_token_ids.shape[0] - 1, 0))
    recovered = race_sample(residual[rej_row], noise) if draft_token_ids.numel() else bonus_token_ids[:, 0]
    last = torch.where(n_acc < counts, recovered.long(), bonus_token_ids[:, 0].long())
    cols = torch.arange(max_spec_len + 1, device=device)
    keep = cols.unsqueeze(0) < n_acc.unsqueeze(1)
    body = torch.where(keep[:, :max_spec_len], drafts[:, :max_spec_len], torch.full_like(drafts[:, :max_spec_len], PLACEHOLDER_TOKEN_ID))
    out[:, :max_spec_len] = body.to(torch.int32)
    out[torch.arange(b, device=device), n_acc] = last.to(torch.int32)
    return out


def v2_rejection_sample(
    rule: str,
    alpha: float,
    target_logits: torch.Tensor,  # [L, V] processed (temperature, top-k/p applied)
    draft_logits: torch.Tensor,  # [max_num_reqs, K, V]
    draft_sampled: torch.Tensor,  # [L]
    cu_num_logits: torch.Tensor,  # [R + 1]
    idx_mapping: torch.Tensor,  # [R] request -> state slot
    num_speculative_steps: int,
    uniform: torch.Tensor,  # [L] in (0, 1]; the entry of each request's last row is unused
    noise: torch.Tensor,  # [R, V] Exp(1)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Model-runner-V2 layout: (sampled [R, K+1] int64, num_sampled [R] int32) under ``rule``, as vLLM returns them."""
    device = target_logits.device
    cu = cu_num_logits.long()
    r = cu.shape[0] - 1
    k = num_speculative_steps
    sampled = torch.zeros((r, k + 1), dtype=torch.int64, device=device)
    if r == 0:
        return sampled, torch.zeros(0, dtype=torch.int32, device=device)
    n_rows = cu[1:] - cu[:-1]  # drafts + 1 per request
    counts = n_rows - 1
    p_all = torch.softmax(target_logits.float() if target_logits.dtype in (torch.float16, torch.bfloat16) else target_logits, dim=-1)
    # Rows holding a drafted token's verification (every row but each request's last).
    req_of_row = torch.repeat_interleave(torch.arange(r, device=device), n_rows)
    step = torch.arange(target_logits.shape[0], device=device) - cu[:-1][req_of_row]
    is_draft = step < counts[req_of_row]
    rows = torch.nonzero(is_draft).squeeze(-1)
    acc = torch.ones((r, max(k, 1)), dtype=torch.bool, device=device)
    if rows.numel():
        rq, st = req_of_row[rows], step[rows]
        x = draft_sampled[rows + 1].long()
        q = torch.softmax(draft_logits[idx_mapping.long()[rq], st].to(p_all.dtype), dim=-1)
        accept, residual = _verify_valid(rule, alpha, p_all[rows], q, x, uniform[rows])
        acc[rq, st] = accept
        sampled[rq, st] = x.clamp_min(0)
        residual_rows = torch.zeros_like(p_all)
        residual_rows[rows] = residual.to(p_all.dtype)
    else:
        residual_rows = torch.zeros_like(p_all)
    n_acc = _first_rejection(acc, counts)
    end_row = cu[:-1] + n_acc  # the first rejected row, or the bonus row when all were accepted
    dist = torch.where((n_acc < counts).unsqueeze(-1), residual_rows[end_row], p_all[end_row])
    last = race_sample(dist, noise)
    sampled[torch.arange(r, device=device), n_acc] = last
    return sampled, (n_acc + 1).to(torch.int32)
