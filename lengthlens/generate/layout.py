"""Writing the raw run-log layout that lengthlens reads (``data_schema/raw_layout.md``); no torch here.

``<out>/runs/<dataset>/<method>/<params>/case_NNN/seed_K/{config.json, output.txt, proposals.jsonl, run.json}``.
run.json is written last and atomically, so a folder with a run.json whose status is ``ok`` is a
finished run; a resumed campaign skips those and never rewrites them.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STRICT = "strict"
FORCE_COMMIT_SUFFIX = "_force_commit"

#: Closing markers appended by the force-commit intervention, per thinking format.
CLOSE_MARKERS = {
    "think": "</think>",
    # GPT-OSS harmony: end the analysis message and open the final channel.
    "harmony": "<|end|><|start|>assistant<|channel|>final<|message|>",
}


def format_alpha(alpha: float) -> str:
    """Folder spelling of an alpha: ``0.35`` -> ``0.35``, ``-0.3`` -> ``neg0.3`` (as the study wrote it)."""
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite to name a folder, got {alpha}")
    a = float(alpha)
    if a == 0:
        a = 0.0  # -0.0 would spell 'neg0.0'
    body = repr(abs(a))
    return ("neg" if a < 0 else "") + body


def arm_names(rule: str, alpha: float | None, force_commit: int | None = None,
              window: int | None = None) -> tuple[str, str]:
    """(method folder, params folder) of an arm: strict/strict, cactus/alpha0.03, r_fuzzy_force_commit/alpha0.1_t96.

    ``window``: vLLM's FLy window (``fly/alpha0.3_w6``).
    """
    if rule in (STRICT, "lossless") and force_commit is None:
        return STRICT, STRICT
    method = STRICT if rule == "lossless" else rule
    a = 0.0 if alpha is None else alpha
    params = f"alpha{format_alpha(a)}" + ("" if window is None else f"_w{int(window)}")
    if force_commit is not None:
        method += FORCE_COMMIT_SUFFIX
        params += f"_t{int(force_commit)}"
    return method, params


def case_name(index: int) -> str:
    """``case_001`` for the first item (1-based, three digits at least)."""
    return f"case_{index:03d}"


def run_dir(out: str | os.PathLike[str], dataset: str, method: str, params: str, case: str, seed: int) -> Path:
    """Folder of one run under an output root."""
    for part in (dataset, method, params, case):
        if not part or "/" in part or part.startswith("."):
            raise ValueError(f"bad folder name {part!r}")
    return Path(out) / "runs" / dataset / method / params / case / f"seed_{int(seed)}"


def is_finished(path: str | os.PathLike[str]) -> bool:
    """A run is finished when its run.json exists, parses and says status ``ok``."""
    try:
        with open(Path(path) / "run.json", encoding="utf-8") as fh:
            return json.load(fh).get("status") == "ok"
    except (OSError, ValueError, AttributeError):
        return False


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _json(obj: Any) -> str:
    # The study's files carry -Infinity for neutral alphas; keep Python's JSON spelling of it.
    return json.dumps(obj, indent=2, allow_nan=True) + "\n"


@dataclass
class ThinkingSplit:
    """Characters of a completion in the thinking (analysis) and answer (final) parts."""

    analysis_chars: int
    final_chars: int
    reached_final_channel: bool


_HARMONY_FINAL = re.compile(r"<\|channel\|>final")


def thinking_split(text: str, fmt: str = "think", opened_in_prompt: bool = False) -> ThinkingSplit:
    """Thinking/answer character counts of a completion, computed by :mod:`lengthlens.data.channels`.

    Using the analysis side's own splitter means the counts written to run.json are exactly the
    ones the reader's audit expects. ``harmony``: the study generator's convention
    (:func:`lengthlens.data.channels.logged_convention`). ``think``: content characters inside and
    outside ``<think>...</think>``; with ``opened_in_prompt`` a completion without any tag is
    unclosed thinking (the prompt ended with ``<think>``).
    """
    from lengthlens.data.channels import logged_convention, split_channels

    if fmt == "harmony":
        sp = split_channels(text)
        if sp.format != "harmony":
            return ThinkingSplit(len(text), 0, False)
        a, f, reached = logged_convention(sp)
        return ThinkingSplit(a, f, reached)
    if fmt != "think":
        raise ValueError(f"unknown thinking format {fmt!r}")
    no_tags = "<think>" not in text and "</think>" not in text
    sp = split_channels("<think>" + text if (opened_in_prompt and no_tags) else text)
    return ThinkingSplit(sp.thinking_chars, sp.answer_chars, sp.reached_answer)


def thinking_open(text: str, fmt: str = "think", opened_in_prompt: bool = False) -> bool:
    """Whether the thinking part of ``text`` (a completion so far) is open, i.e. not yet committed."""
    if fmt == "harmony":
        return _HARMONY_FINAL.search(text) is None
    last_open = text.rfind("<think>")
    last_close = text.rfind("</think>")
    if last_open > last_close:
        return True
    if last_close >= 0:
        return False
    return opened_in_prompt


@dataclass
class RunResult:
    """Everything one generation run produced, independent of the backend."""

    text: str
    output_tokens: int
    finish_reason: str  # "stop" or "length"
    # None where the engine gave no per-request counter (a batched run on a vLLM without per-request metrics)
    draft_rounds: int | None
    accepted_tokens: int | None
    draft_tokens: int | None
    wall_time_seconds: float | None
    input_tokens: int
    proposals: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def run_json(result: RunResult, backend: str, split: ThinkingSplit, max_new_tokens: int) -> dict[str, Any]:
    """run.json content with the study's field names and types (counters as floats, like vLLM's metrics)."""
    rounds = None if result.draft_rounds is None else float(result.draft_rounds)
    acc = None if result.accepted_tokens is None else float(result.accepted_tokens)
    drafts = None if result.draft_tokens is None else float(result.draft_tokens)
    out: dict[str, Any] = {
        "status": "ok",
        "backend": backend,
        "wall_time_seconds": None if result.wall_time_seconds is None else float(result.wall_time_seconds),
        "input_tokens": int(result.input_tokens),
        "output_tokens": int(result.output_tokens),
        "finish_reason": result.finish_reason,
        "eos_reached": result.finish_reason == "stop",
        "reached_max_new_tokens": result.output_tokens >= max_new_tokens,
        "analysis_chars": split.analysis_chars,
        "final_chars": split.final_chars,
        "reached_final_channel": split.reached_final_channel,
        "draft_tokens": drafts,
        "accepted_tokens": acc,
        "draft_rounds": rounds,
        "draft_acceptance_rate": acc / drafts if drafts and acc is not None else None,
        "l_bar": acc / rounds if rounds and acc is not None else None,
        "mean_accept_length": (acc / rounds + 1.0) if rounds and acc is not None else None,
        "L_over_l_bar": (result.output_tokens / (acc / rounds)) if rounds and acc else None,
    }
    out.update(result.extra)
    return out


def write_run(path: str | os.PathLike[str], config: dict[str, Any], result: RunResult, backend: str,
              thinking_format: str = "think", opened_in_prompt: bool = False) -> Path:
    """Write one run folder; run.json goes last (atomically), so a crash leaves an unfinished run."""
    d = Path(path)
    if is_finished(d):
        raise FileExistsError(f"{d} holds a finished run; refusing to overwrite it")
    d.mkdir(parents=True, exist_ok=True)
    stale = d / "run.json"
    if stale.exists():
        stale.unlink()  # an unfinished (error) run being retried
    _atomic_write(d / "config.json", _json(config))
    _atomic_write(d / "output.txt", result.text)
    if result.proposals is not None:
        _atomic_write(d / "proposals.jsonl", "".join(json.dumps(r, allow_nan=True) + "\n" for r in result.proposals))
    split = thinking_split(result.text, thinking_format, opened_in_prompt)
    _atomic_write(d / "run.json", _json(run_json(result, backend, split, int(config["max_new_tokens"]))))
    return d


def write_error(path: str | os.PathLike[str], config: dict[str, Any], backend: str, message: str) -> Path:
    """Record a failed run (status ``error``) so the failure is visible; a resume retries it."""
    d = Path(path)
    if is_finished(d):
        raise FileExistsError(f"{d} holds a finished run; refusing to overwrite it")
    d.mkdir(parents=True, exist_ok=True)
    _atomic_write(d / "config.json", _json(config))
    _atomic_write(d / "run.json", _json({"status": "error", "backend": backend, "error": message}))
    return d


def iter_jsonl(path: str | os.PathLike[str]) -> Iterable[dict[str, Any]]:
    """Rows of a JSONL file, skipping blank lines; errors name the line."""
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{i}: invalid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{i}: expected a JSON object")  # noqa: TRY004 - bad file content
            yield row
