"""Write tiny raw-layout trees and flat files by hand for loader and estimator tests (no synth involved)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_run(root: Path, dataset: str, method: str, params: str, case: str, seed: int, *,
              output_tokens: int = 100, rounds: int = 40, accepted: int = 60, budget: int = 1000,
              wall: float = 1.0, status: str = "ok", finish_reason: str | None = None,
              target: str = "tgt", draft: str = "drf", temperature: float = 1.0, text: str = "hello",
              alpha: float | None = None, run_extra: dict[str, Any] | None = None) -> Path:
    d = root / dataset / method / params / case / f"seed_{seed}"
    d.mkdir(parents=True, exist_ok=True)
    if finish_reason is None:
        finish_reason = "length" if output_tokens >= budget else "stop"
    run = {"status": status, "wall_time_seconds": wall, "output_tokens": output_tokens, "finish_reason": finish_reason,
           "draft_rounds": float(rounds), "accepted_tokens": float(accepted), "draft_tokens": float(rounds * 4),
           "l_bar": accepted / rounds if rounds else None}
    run.update(run_extra or {})
    cfg = {"model": target, "draft_model": draft, "mode": "strict" if method == "strict" else "lossy",
           "lossy_method": None if method == "strict" else method,
           "lossy_parameters": {} if alpha is None else {"alpha": alpha},
           "max_new_tokens": budget, "temperature": temperature, "top_p": 1.0, "seed": seed}
    (d / "run.json").write_text(json.dumps(run))
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "output.txt").write_text(text)
    return d
