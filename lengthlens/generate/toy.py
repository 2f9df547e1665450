"""A toy arithmetic task with thinking, and tiny models trained on it in seconds on a CPU.

Used by ``lengthlens generate --example``: a target trained for a few hundred steps and a draft
snapshot of the same run taken earlier give a realistic target-draft pair (acceptance well
below one, l_bar around 1.5-2.5 with four drafts) whose completions have a ``<think>...</think>``
part and a gradable answer, all deterministic in the seed and with no downloads.
"""

from __future__ import annotations

import copy
import random

#: How a toy prompt is fed: the thinking is opened by the prompt, as in chat templates of reasoning models.
TOY_TEMPLATE = "<bos>{prompt}\n<think>"


def toy_item(rng: random.Random) -> tuple[str, str, str]:
    """(prompt, completion, reference answer) of one toy arithmetic problem."""
    a, b = rng.randint(2, 49), rng.randint(2, 49)
    op = rng.choice("+-")
    r = a + b if op == "+" else a - b
    inv = "-" if op == "+" else "+"
    steps = [f"{a}{op}{b} is {r}.", f"check: {r}{inv}{b}={a}."]
    if rng.random() < 0.5:
        steps.append(f"so {r}.")
    return f"q: {a}{op}{b}=?", " ".join(steps) + f"</think>answer: {r}", str(r)


def toy_items(n: int, seed: int = 0) -> list[dict[str, str]]:
    """n dataset rows {id, prompt, reference} drawn with a seed disjoint from the training stream."""
    rng = random.Random(10_000 + seed)
    rows = []
    for i in range(n):
        p, _, ref = toy_item(rng)
        rows.append({"id": f"toy:{seed}:{i}", "prompt": p, "reference": ref})
    return rows


def train_toy_lm(tokenizer, *, steps: int = 150, snapshots: tuple[int, ...] = (), seed: int = 0,
                 hidden: int = 64, layers: int = 2, heads: int = 4, batch: int = 24, lr: float = 3e-3):
    """Train a tiny Llama on the toy task; return {step: model} for ``steps`` and each snapshot step."""
    import torch

    from lengthlens.generate.tiny import build_tiny_model

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = build_tiny_model(len(tokenizer), hidden=hidden, layers=layers, heads=heads, seed=seed, logit_scale=1.0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    out = {}
    for step in range(1, steps + 1):
        seqs = []
        for _ in range(batch):
            p, c, _ = toy_item(rng)
            seqs.append([bos] + tokenizer.encode(f"{p}\n<think>{c}", add_special_tokens=False) + [eos])
        width = max(map(len, seqs))
        x = torch.zeros(len(seqs), width, dtype=torch.long)
        m = torch.zeros(len(seqs), width)
        for i, s in enumerate(seqs):
            x[i, : len(s)] = torch.tensor(s)
            m[i, : len(s)] = 1
        logits = model(input_ids=x, attention_mask=m.long()).logits
        lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, x[:, 1:, None])[..., 0]
        loss = -(lp * m[:, 1:]).sum() / m[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in snapshots:
            out[step] = copy.deepcopy(model).eval()
    out[steps] = model.eval()
    return out
