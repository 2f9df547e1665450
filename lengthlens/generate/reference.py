"""CPU reference speculative sampler: target and draft causal LMs with KV caches, pure PyTorch.

Each round the draft proposes ``num_draft`` tokens by sampling its own distribution q
("probabilistic" drafting, so q exists), the target scores all of them in one forward pass, the
rule in :mod:`lengthlens.generate.rules` accepts a prefix, and the first rejected position is
resampled from the rule's residual (or, when all are accepted, a bonus token is drawn from p).
Counters follow vLLM's metrics: ``draft_rounds`` = verifier rounds, ``accepted_tokens`` = drafts the
rule accepted (bonus excluded, counted before EOS/budget truncation), ``draft_tokens`` =
``num_draft * draft_rounds``. Hence ``output_tokens = accepted_tokens + draft_rounds + forced
- truncated``, where only the final round can be truncated (EOS or budget) and ``forced`` counts
the tokens of a force-commit marker. The EOS token, when emitted, counts as an output token.

Also here: a plain greedy decoder and a plain target sampler used as test oracles. The tiny
character tokenizer and models built from configs are in :mod:`lengthlens.generate.tiny`.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lengthlens.generate import rules as R
from lengthlens.generate.sampling import probs_from_logits, sample, uniform_open_closed
from lengthlens.generate.tiny import (
    build_tiny_model,
    build_tiny_tokenizer,
    perturbed_copy,
)


def load_models(target_spec, draft_spec, tokenizer_spec: str | None):
    """(tokenizer, target, draft) for a campaign: local model folders, or tiny models from configs."""
    if tokenizer_spec == "tiny" or (tokenizer_spec is None and target_spec.tiny is not None):
        tokenizer = build_tiny_tokenizer()
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_spec or target_spec.path, local_files_only=True)

    def one(spec, target=None):
        if spec.tiny is not None:
            t = dict(spec.tiny)
            if t.pop("copy_of", None) == "target":
                if target is None:
                    raise ValueError("tiny draft 'copy_of: target' needs a target")
                return perturbed_copy(target, noise=float(t.get("noise", 0.3)), seed=int(t.get("seed", 1)))
            bias = {tokenizer.convert_tokens_to_ids(k): float(v) for k, v in (t.pop("token_bias", None) or {}).items()}
            return build_tiny_model(len(tokenizer), token_bias=bias or None, **t)
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(spec.path, local_files_only=True, torch_dtype=torch.float32).eval()

    tt = dict(target_spec.tiny or {})
    if target_spec.tiny is not None and "train_steps" in tt:
        # Trained toy target; a draft may be an earlier snapshot of the same training run.
        from lengthlens.generate.toy import train_toy_lm

        dt = dict(draft_spec.tiny or {})
        snap = int(dt["steps"]) if dt.get("snapshot_of") == "target" else None
        steps = int(tt.pop("train_steps"))
        models = train_toy_lm(tokenizer, steps=steps, snapshots=(snap,) if snap else (), **tt)
        target = models[steps]
        draft = models[snap] if snap else one(draft_spec, target)
    else:
        target = one(target_spec)
        draft = one(draft_spec, target)
    return tokenizer, target, draft


# --------------------------------------------------------------------------------------------
# A causal LM with a KV cache that can be rolled back
# --------------------------------------------------------------------------------------------


class CachedLM:
    """Feeds tokens through a causal LM keeping its KV cache; ``crop`` rolls rejected tokens back."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        params = inspect.signature(model.forward).parameters
        # transformers renamed past_key_values to cache (5.x); support both spellings.
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        try:
            self.cache = DynamicCache(config=model.config)
        except TypeError:
            self.cache = DynamicCache()
        self.length = 0
        self.forwards = 0

    @torch.no_grad()
    def feed(self, ids: Sequence[int]) -> torch.Tensor:
        """Logits [len(ids), V] for the positions of ``ids`` appended after the cached prefix."""
        if not ids:
            raise ValueError("feed needs at least one token")
        inp = torch.tensor([list(ids)], dtype=torch.long)
        out = self.model(input_ids=inp, use_cache=True, **{self._cache_kw: self.cache})
        self.forwards += 1
        self.length += len(ids)
        return out.logits[0].to(torch.float64)

    def crop(self, keep: int) -> None:
        """Drop cached positions beyond ``keep``."""
        if keep < self.length:
            # A negative argument removes that many positions in every transformers version.
            self.cache.crop(keep - self.length)
            self.length = keep


# --------------------------------------------------------------------------------------------
# The speculative sampler
# --------------------------------------------------------------------------------------------


@dataclass
class ForceCommit:
    """Force-commit intervention: at ``threshold`` output tokens with thinking open, append ``marker_ids``."""

    threshold: int
    marker_ids: list[int]
    is_open: Callable[[list[int]], bool]  # called with the output token ids so far


@dataclass
class Generation:
    """What one speculative run produced."""

    tokens: list[int]
    finish_reason: str
    draft_rounds: int
    accepted_tokens: int
    draft_tokens: int
    forced_tokens: int
    truncated_tokens: int
    target_forwards: int
    wall_time_seconds: float
    proposals: list[dict[str, Any]] = field(default_factory=list)
    forced_at: int | None = None


def _eos_set(eos_id: int | Collection[int] | None) -> frozenset[int]:
    """Stop tokens as a set: models such as Qwen3 stop on several ids."""
    if eos_id is None:
        return frozenset()
    return frozenset([int(eos_id)]) if isinstance(eos_id, int) else frozenset(int(e) for e in eos_id)


def _entropy(p: torch.Tensor) -> float:
    pos = p > 0
    return float(-(p[pos] * p[pos].log()).sum())


def _check_args(rule: str, alpha: float, num_draft: int, max_new_tokens: int, prompt_ids: Sequence[int]) -> None:
    R.check_alpha(rule, alpha)
    if num_draft < 1 or max_new_tokens < 1:
        raise ValueError("num_draft and max_new_tokens must be >= 1")
    if not prompt_ids:
        raise ValueError("prompt must have at least one token")


def _draft_phase(dlm: CachedLM, seq: list[int], k: int, temperature: float, top_p: float, g: torch.Generator):
    """Catch the draft's cache up with the sequence, then sample ``k`` tokens from it; their q rows too."""
    d_logits = dlm.feed(seq[dlm.length:])[-1]
    drafts: list[int] = []
    qs = []
    for i in range(k):
        q = probs_from_logits(d_logits, temperature, top_p)
        x = int(sample(q, g))
        drafts.append(x)
        qs.append(q)
        if i < k - 1:
            d_logits = dlm.feed([x])[-1]
    return drafts, qs


def _verify_phase(tlm: CachedLM, seq: list[int], drafts: list[int], qs: list, rule: str, alpha: float,
                  temperature: float, top_p: float, g: torch.Generator):
    """One target forward over the uncached suffix plus all drafts; the rule's verdicts and the round's last token."""
    k = len(drafts)
    t_logits = tlm.feed(seq[tlm.length:] + drafts)[-(k + 1):]
    ps = probs_from_logits(t_logits, temperature, top_p)
    qmat = torch.stack(qs)
    u = uniform_open_closed(k, g)
    v = R.verify(rule, alpha, ps[:k], qmat, torch.tensor(drafts), u)
    acc = v.accept.tolist()
    n_acc = acc.index(False) if False in acc else k
    # The first rejection is resampled from the residual; all accepted: the bonus token, from p.
    y = int(sample(v.residual[n_acc], g)) if n_acc < k else int(sample(ps[k], g))
    return ps, qmat, u, v, acc, n_acc, y


def _append_tokens(out: list[int], emitted: list[int], eos: set[int], max_new_tokens: int) -> tuple[int, str | None]:
    """Append a round's tokens up to EOS or the budget; (how many were appended, finish reason or None)."""
    appended = 0
    for tok in emitted:
        out.append(tok)
        appended += 1
        if tok in eos:
            return appended, "stop"
        if len(out) >= max_new_tokens:
            return appended, "length"
    return appended, None


def _force_close(out: list[int], marker_ids: Sequence[int], max_new_tokens: int, log: _ProposalLog | None,
                 rnd: int) -> tuple[int, str | None]:
    """Append the thinking's closing marker (budget permitting); (tokens forced, finish reason or None)."""
    forced = 0
    for tok in marker_ids:
        if log is not None:
            log.forced(rnd, len(out), tok)
        out.append(tok)
        forced += 1
        if len(out) >= max_new_tokens:
            return forced, "length"
    return forced, None


class _ProposalLog:
    """proposals.jsonl rows as the study logs them: one per emitted token, with p, q, u and both rules' verdicts."""

    def __init__(self, rule: str, alpha: float, decode: Callable[[list[int]], str] | None):
        self.rule, self.alpha = rule, float(alpha)
        self.text = (lambda ids: decode(ids)) if decode is not None else (lambda ids: None)
        self.rows: list[dict[str, Any]] = []
        self.run_len = 0  # consecutive accepted drafts, as the study logged it

    def round(self, rnd: int, start_pos: int, drafts: list[int], ps, qmat, u, acc: list[bool], strict_accept,
              n_acc: int, y: int, appended: int) -> None:
        k = len(drafts)
        for i in range(min(n_acc + 1, k)):
            self.rows.append(self._draft_row(rnd, start_pos, i, drafts[i], ps[i], qmat[i], float(u[i]), bool(acc[i]),
                                             bool(strict_accept[i]), y, appended))
        if n_acc == k:
            self.run_len = 0
            self.rows.append({
                "round": rnd, "batch": 0, "pos_in_round": k, "output_position": start_pos + k,
                "draft_token_id": None, "emitted_token_id": y, "draft_token_text": None,
                "emitted_token_text": self.text([y]), "relaxation_param": self.alpha,
                "relaxation_method": self.rule, "emission_source": "bonus",
                "consecutive_accepted_length": 0, "in_output": k < appended,
            })

    def _draft_row(self, rnd, start_pos, i, x, p_i, q_i, u_i, ok, strict, y, appended) -> dict[str, Any]:
        px, qx = float(p_i[x]), float(q_i[x])
        self.run_len = self.run_len + 1 if ok else 0
        emit = x if ok else y
        return {
            "round": rnd, "batch": 0, "pos_in_round": i, "output_position": start_pos + i,
            "draft_token_id": x, "emitted_token_id": emit,
            "draft_token_text": self.text([x]), "emitted_token_text": self.text([emit]),
            "p": px, "q": qx, "p_over_q": (px / qx) if qx > 0 else None, "u": u_i,
            "relaxation_param": self.alpha, "relaxation_method": self.rule,
            "strict_would_accept": strict, "lossy_would_accept": ok, "actually_accepted": ok,
            "lossy_only_accepted": ok and not strict,
            "emission_source": "accepted_draft" if ok else "recovered",
            "target_rank": int((p_i > p_i[x]).sum()), "target_top1_prob": float(p_i.max()),
            "target_entropy": _entropy(p_i), "draft_entropy": _entropy(q_i),
            "tv_distance": float(R.total_variation(p_i, q_i)),
            "consecutive_accepted_length": self.run_len,
            "in_output": i < appended,
        }

    def forced(self, rnd: int, position: int, tok: int) -> None:
        self.rows.append({"round": rnd, "batch": 0, "pos_in_round": None, "output_position": position,
                          "draft_token_id": None, "emitted_token_id": tok, "emitted_token_text": self.text([tok]),
                          "relaxation_param": self.alpha, "relaxation_method": self.rule,
                          "emission_source": "forced", "in_output": True})


def speculative_generate(
    target, draft, prompt_ids: Sequence[int], *, rule: str = "lossless", alpha: float = 0.0, num_draft: int = 4,
    temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 128, seed: int = 0,
    eos_id: int | Collection[int] | None = None, force_commit: ForceCommit | None = None,
    decode: Callable[[list[int]], str] | None = None, log_proposals: bool = True,
) -> Generation:
    """Run one speculative generation; same arguments and seed give the same tokens bit for bit."""
    _check_args(rule, alpha, num_draft, max_new_tokens, prompt_ids)
    eos = _eos_set(eos_id)
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(int(seed))
    tlm, dlm = CachedLM(target), CachedLM(draft)
    seq = list(prompt_ids)
    out: list[int] = []
    rounds = accepted = drafted = forced = truncated = 0
    finish: str | None = None
    forced_at: int | None = None
    fc_checked = force_commit is None
    log = _ProposalLog(rule, alpha, decode) if log_proposals else None

    while finish is None:
        k = num_draft
        drafts, qs = _draft_phase(dlm, seq, k, temperature, top_p, g)
        base = len(seq)
        ps, qmat, u, v, acc, n_acc, y = _verify_phase(tlm, seq, drafts, qs, rule, alpha, temperature, top_p, g)
        emitted = drafts[:n_acc] + [y]
        rounds += 1
        accepted += n_acc
        drafted += k
        start_pos = len(out)
        appended, finish = _append_tokens(out, emitted, eos, max_new_tokens)
        truncated += len(emitted) - appended
        seq = list(prompt_ids) + out
        if log is not None:
            log.round(rounds - 1, start_pos, drafts, ps, qmat, u, acc, v.strict_accept, n_acc, y, appended)
        # Roll both caches back to the accepted prefix (the emitted y is fed next round).
        tlm.crop(base + n_acc)
        dlm.crop(min(dlm.length, base + n_acc))

        if finish is None and not fc_checked and len(out) >= force_commit.threshold:
            fc_checked = True
            if force_commit.is_open(out):
                forced_at = len(out)
                n_forced, finish = _force_close(out, force_commit.marker_ids, max_new_tokens, log, rounds - 1)
                forced += n_forced
                seq = list(prompt_ids) + out

    return Generation(tokens=out, finish_reason=finish, draft_rounds=rounds, accepted_tokens=accepted,
                      draft_tokens=drafted, forced_tokens=forced, truncated_tokens=truncated,
                      target_forwards=tlm.forwards, wall_time_seconds=time.perf_counter() - t0,
                      proposals=log.rows if log is not None else [], forced_at=forced_at)


# --------------------------------------------------------------------------------------------
# Oracles: plain greedy decoding and plain target sampling
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def greedy_generate(model, prompt_ids: Sequence[int], max_new_tokens: int,
                    eos_id: int | Collection[int] | None = None) -> list[int]:
    """Plain greedy decoding, recomputing the full sequence each step (no cache: an independent oracle)."""
    seq = list(prompt_ids)
    out: list[int] = []
    while len(out) < max_new_tokens:
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        tok = int(logits.to(torch.float64).argmax())
        out.append(tok)
        seq.append(tok)
        if tok in _eos_set(eos_id):
            break
    return out


@torch.no_grad()
def next_token_probs(model, prefixes: Sequence[Sequence[int]], temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """Target next-token distributions [len(prefixes), V] for equal-length prefixes (one batched forward)."""
    logits = model(input_ids=torch.tensor([list(p) for p in prefixes])).logits[:, -1]
    return probs_from_logits(logits, temperature, top_p)
