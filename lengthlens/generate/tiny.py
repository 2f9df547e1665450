"""Tiny tokenizer and models built locally from configs (never downloaded): a character-level
fast tokenizer and randomly initialised Llama-style causal LMs, plus a perturbed copy for drafts.

Shared by the reference sampler (:mod:`lengthlens.generate.reference`), the toy task
(:mod:`lengthlens.generate.toy`) and the tests; it imports neither of them.
"""

from __future__ import annotations

import math

import torch

TINY_SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
TINY_MARKERS = ("<think>", "</think>")
TINY_CHARS = " \n0123456789abcdefghijklmnopqrstuvwxyz.,:;!?+-*/=()#$'\""


def build_tiny_tokenizer():
    """A character-level fast tokenizer with ``<think>``/``</think>`` as single tokens (vocab 66)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
    )
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate((*TINY_SPECIALS, *TINY_MARKERS, *TINY_CHARS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TINY_SPECIALS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TINY_MARKERS])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def build_tiny_model(vocab_size: int, *, hidden: int = 64, layers: int = 2, heads: int = 4,
                     seed: int = 0, logit_scale: float = 8.0, max_positions: int = 1024,
                     token_bias: dict[int, float] | None = None):
    """A randomly initialised Llama-style causal LM from a config (deterministic in ``seed``).

    ``logit_scale`` multiplies the output head so the next-token distribution is peaked like a
    trained model's rather than near uniform; ``token_bias`` adds a constant direction to chosen
    output rows (e.g. to make EOS or ``</think>`` plausible) through an always-on hidden unit.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=max(1, heads // 2), max_position_embeddings=max_positions,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    g = torch.Generator().manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for _, prm in sorted(model.named_parameters()):
            if prm.ndim >= 2:
                prm.copy_(torch.randn(prm.shape, generator=g) * 0.5 / math.sqrt(prm.shape[-1]))
        w = model.lm_head.weight
        w.mul_(logit_scale)
        if token_bias:
            # The final RMSNorm output has a roughly constant mean component; align chosen rows with
            # it so those tokens get a steady logit offset.
            for tok, b in token_bias.items():
                w[tok] += b / math.sqrt(hidden) * torch.sign(model.model.norm.weight)
    return model.eval()


def perturbed_copy(model, *, noise: float, seed: int):
    """A draft model: the target with Gaussian noise (relative std ``noise``) added to every matrix."""
    import copy

    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, prm in sorted(draft.named_parameters()):
            if prm.ndim >= 2:
                prm.add_(torch.randn(prm.shape, generator=g) * noise * prm.std())
    return draft.eval()
