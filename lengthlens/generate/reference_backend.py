"""The reference backend: the CPU speculative sampler behind the runner's Backend interface."""

from __future__ import annotations

from lengthlens.generate.config import ENGINE_RULES, Arm, GenerateConfig
from lengthlens.generate.layout import CLOSE_MARKERS, RunResult, thinking_open


class ReferenceBackend:
    """Loads the target, draft and tokenizer once; every run starts from fresh caches and a fresh generator."""

    name = "reference"

    def __init__(self, cfg: GenerateConfig):
        import torch
        import transformers

        from lengthlens.generate.reference import load_models

        self.cfg = cfg
        engine = sorted({a.rule for a in cfg.arms} & set(ENGINE_RULES))
        if engine:
            raise ValueError(f"rule {', '.join(engine)} is vLLM's own: run it on the vllm or vllm-batched backend")
        if cfg.target.tiny is not None and cfg.draft.tiny is not None:
            # Tiny matrices gain nothing from threads, and spinning threads on a busy 2-core
            # machine made single runs 30x slower in practice.
            torch.set_num_threads(1)
        self.tokenizer, self.target, self.draft = load_models(cfg.target, cfg.draft, cfg.tokenizer)
        self.engine_version = f"lengthlens-reference (torch {torch.__version__}, transformers {transformers.__version__})"
        tv, dv = self.target.config.vocab_size, self.draft.config.vocab_size
        if tv != dv:
            raise ValueError(f"target and draft vocabularies differ ({tv} vs {dv}); the rules need one vocabulary")
        self.marker_ids = self.tokenizer.encode(CLOSE_MARKERS[cfg.thinking_format], add_special_tokens=False)
        # The tokenizer's EOS plus the generation config's (chat models often stop on several ids).
        eos: set[int] = set()
        for e in (self.tokenizer.eos_token_id, getattr(getattr(self.target, "generation_config", None), "eos_token_id", None)):
            if isinstance(e, int):
                eos.add(e)
            elif isinstance(e, (list, tuple)):
                eos.update(int(x) for x in e)
        self.eos_ids = frozenset(eos)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def run(self, prompt: str, arm: Arm, seed: int) -> RunResult:
        """Generate one completion of ``prompt`` under ``arm`` with ``seed``."""
        from lengthlens.generate.reference import ForceCommit, speculative_generate

        cfg = self.cfg
        ids = self.tokenizer.encode(prompt, add_special_tokens=cfg.add_special_tokens)
        fc = None
        if arm.force_commit is not None:
            fc = ForceCommit(arm.force_commit, list(self.marker_ids),
                             lambda out: thinking_open(self._decode(out), cfg.thinking_format, cfg.opened_in_prompt))
        g = speculative_generate(
            self.target, self.draft, ids, rule=arm.rule, alpha=arm.rule_alpha,
            num_draft=cfg.num_draft_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens, seed=seed, eos_id=self.eos_ids,
            force_commit=fc, decode=self._decode if cfg.log_proposals else None, log_proposals=cfg.log_proposals,
        )
        extra = {"forced_tokens": g.forced_tokens, "truncated_tokens": g.truncated_tokens,
                 "target_forwards": g.target_forwards, "num_speculative_tokens": cfg.num_draft_tokens,
                 "concurrency": 1, "batch_size": 1}  # one sequence at a time: the serving condition
        if fc is not None:
            extra.update(force_commit_fired=g.forced_at is not None, force_commit_at=g.forced_at)
        return RunResult(
            text=self._decode(g.tokens), output_tokens=len(g.tokens), finish_reason=g.finish_reason,
            draft_rounds=g.draft_rounds, accepted_tokens=g.accepted_tokens, draft_tokens=g.draft_tokens,
            wall_time_seconds=g.wall_time_seconds, input_tokens=len(ids),
            proposals=g.proposals if cfg.log_proposals else None, extra=extra,
        )

    def close(self) -> None:
        """Nothing to release on the CPU."""
