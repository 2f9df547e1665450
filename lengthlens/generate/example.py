"""``lengthlens generate --example OUT``: a small raw tree from tiny toy models, on a CPU, in seconds.

Writes OUT/example/{campaign.yaml, gsm8k_toy.jsonl} (so the run can be inspected and re-run) and
OUT/runs/gsm8k_toy/... with strict plus one alpha of each of the five relaxed rules. The dataset is
toy arithmetic, not GSM8K; it is named ``gsm8k_*`` because its answers have GSM8K's form (a final
number), so lengthlens' GSM8K grader grades it and the report's accuracy columns are filled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from lengthlens.generate.toy import TOY_TEMPLATE, toy_items

#: One alpha per rule, chosen so each rule is visibly relaxed on the toy pair.
EXAMPLE_ARMS: list[Any] = [
    "strict",
    {"rule": "mentored_dec", "alpha": 0.5},
    {"rule": "cactus", "alpha": 0.3},
    {"rule": "spec_casc_opt", "alpha": 0.05},
    {"rule": "spec_casc_tok", "alpha": 0.5},
    {"rule": "r_fuzzy", "alpha": 0.15},
]


def example_campaign(n_items: int = 4, seeds: tuple[int, ...] = (0,), max_new_tokens: int = 96,
                     force_commit: int | None = None) -> dict[str, Any]:
    """The example campaign mapping (datasets path relative to the campaign file)."""
    arms = list(EXAMPLE_ARMS)
    if force_commit is not None:
        arms.append({"rule": "spec_casc_tok", "alpha": 0.5, "force_commit": force_commit})
    return {
        "backend": "reference",
        "target": {"name": "toy-llama-h64-l2-s150", "tiny": {"train_steps": 150, "seed": 0}},
        "draft": {"name": "toy-llama-h64-l2-s50", "tiny": {"snapshot_of": "target", "steps": 50}},
        "tokenizer": "tiny",
        "speculative": {"num_draft_tokens": 4},
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": max_new_tokens},
        "seeds": list(seeds),
        "datasets": {"gsm8k_toy": "gsm8k_toy.jsonl"},
        "thinking": {"format": "think", "opened_in_prompt": True},
        "prompt": {"template": TOY_TEMPLATE, "add_special_tokens": False},
        "arms": arms,
        "max_items": n_items,
    }


def write_example_campaign(out: str | Path, **kw: Any) -> Path:
    """Write the example's campaign file and dataset under OUT/example/; return the campaign path."""
    d = Path(out) / "example"
    d.mkdir(parents=True, exist_ok=True)
    camp = example_campaign(**kw)
    (d / "gsm8k_toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in toy_items(camp["max_items"])), encoding="utf-8")
    path = d / "campaign.yaml"
    path.write_text(yaml.safe_dump(camp, sort_keys=False), encoding="utf-8")
    return path
