"""Read Spec-Bench answer files (``<task>/model_answer/<model-id>.jsonl``) as they are.

Spec-Bench (Xia et al., 2024) writes one JSON line per question with, per turn, ``new_tokens``,
``wall_time`` and ``decoding_steps``, and one flat ``accept_lengths`` list over all turns (tokens
emitted per verification step, the bonus token included). The mapping to run records:

- ``target``, ``method``, ``draft``: from the model id ``<model>-<method>[-<extra>]-<dtype>-temp(erature)-<T>``;
  the draft is ``<method>[-<extra>]`` (``sps-68m``, ``eagle``), empty for ``vanilla`` (plain
  autoregressive decoding: the baseline, which serves every draft of its model and task);
  ``params`` is ``<dtype>-temp<T>``, ``temperature`` is T; ``dataset`` is the task folder;
- one record per turn (``turn`` 1, 2, ... when a question has several; the question is the
  resampling unit); ``output_tokens`` = new_tokens, ``wall_time_s`` = wall_time;
- ``draft_rounds`` = the turn's verification steps, ``accepted_tokens`` = the tokens those steps
  emitted minus one bonus token per step (``accept_lengths`` split by ``decoding_steps``);
- a turn whose text is ``ERROR`` has status ``error``;
- Spec-Bench logs no budget: ``max_new_tokens`` is the run's setting (``--max-new-tokens``, 1024 by
  default in Spec-Bench); a turn at or over it has finish_reason ``length`` (tree methods emit
  several tokens per step and can pass the budget by a few);
- ``reference_answer`` from ``question.jsonl`` (next to ``model_answer/`` or given) when it has one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lengthlens.data.readers import ReadResult, Record

#: Spec-Bench's default budget (evaluation/eval.py, ``--max-new-tokens``).
DEFAULT_MAX_NEW_TOKENS = 1024

#: Method names that Spec-Bench's inference scripts put in the model id.
KNOWN_METHODS = frozenset({"vanilla", "sps", "eagle", "eagle2", "eagle3", "hydra", "medusa", "pld", "lade", "lookahead",
                           "rest", "space", "recycling", "samd", "baseline"})
_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "fp16", "bf16"})
_AUTOREGRESSIVE = frozenset({"vanilla", "baseline"})


def parse_model_id(model_id: str) -> dict[str, Any]:
    """target, method, draft, params and temperature from a Spec-Bench model id (ValueError if unreadable)."""
    tokens = model_id.split("-")
    di = next((i for i, t in enumerate(tokens) if t in _DTYPES), None)
    mi = next((i for i, t in enumerate(tokens[:di]) if i > 0 and t in KNOWN_METHODS), None)
    if di is None or mi is None:
        raise ValueError(f"cannot read {model_id!r} as <model>-<method>[-<extra>]-<dtype>[-temp-<T>] "
                         f"(methods known: {', '.join(sorted(KNOWN_METHODS))}; dtypes: {', '.join(sorted(_DTYPES))})")
    rest = tokens[di + 1:]
    temperature = None
    if len(rest) >= 2 and rest[0] in ("temp", "temperature"):
        temperature = float(rest[1])
    method = tokens[mi]
    auto = method in _AUTOREGRESSIVE
    return {
        "target": "-".join(tokens[:mi]),
        "method": "autoregressive" if auto else method,
        "draft": "" if auto else "-".join(tokens[mi:di]),
        "params": tokens[di] + (f"-temp{rest[1]}" if temperature is not None else ""),
        "temperature": temperature,
    }


def answer_files(path: Path) -> list[Path]:
    """The answer files under ``path`` (a Spec-Bench data folder, a task folder, ``model_answer/`` or one file)."""
    if path.is_file():
        return [path]
    if path.name == "model_answer":
        return sorted(path.glob("*.jsonl"))
    return sorted(path.rglob("model_answer/*.jsonl"))


def read_questions(path: Path) -> dict[str, dict[str, Any]]:
    """question_id -> question line of a ``question.jsonl``."""
    out: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    q = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
                out[str(q.get("question_id"))] = q
    return out


def _reference(q: dict[str, Any] | None, turn: int) -> str | None:
    ref = (q or {}).get("reference")
    if isinstance(ref, list):
        ref = ref[turn] if turn < len(ref) else None
    return None if ref is None else str(ref)


def _split_steps(choice: dict[str, Any], n_turns: int) -> list[list[int]] | None:
    """accept_lengths cut into turns by decoding_steps; None when they do not add up."""
    acc, steps = choice.get("accept_lengths"), choice.get("decoding_steps")
    if not isinstance(acc, list) or not isinstance(steps, list) or len(steps) != n_turns:
        return None
    if acc and isinstance(acc[0], list):  # one list per turn already
        return acc if len(acc) == n_turns else None
    if sum(steps) != len(acc):
        return None
    out, i = [], 0
    for k in steps:
        out.append(acc[i:i + k])
        i += k
    return out


def _turn_record(base: dict[str, Any], choice: dict[str, Any], t: int, steps: list[list[int]] | None,
                 budget: int) -> tuple[dict[str, Any], str | None]:
    """The record of turn ``t`` and a warning when its counters disagree."""
    text = choice["turns"][t]
    rec = {**base, "text": text}
    if text == "ERROR":
        return {**rec, "status": "error"}, None
    new = int(choice["new_tokens"][t])
    wall = choice.get("wall_time", [None] * (t + 1))[t]
    rec.update(status="ok", output_tokens=new, max_new_tokens=budget, finish_reason="length" if new >= budget else None,
               wall_time_s=None if wall is None or (isinstance(wall, float) and math.isnan(wall)) else float(wall))
    warning = None
    if steps is not None:
        emitted = sum(steps[t])
        rec.update(draft_rounds=len(steps[t]), accepted_tokens=emitted - len(steps[t]))
        if emitted != new:
            warning = f"accept_lengths add up to {emitted} tokens but new_tokens is {new}"
    elif isinstance(choice.get("decoding_steps"), list):
        k = int(choice["decoding_steps"][t])
        rec.update(draft_rounds=k, accepted_tokens=new - k)
    return rec, warning


def _file_records(path: Path, questions: dict[str, dict[str, Any]], dataset: str,
                  budget: int) -> tuple[list[Record], list[dict[str, str]], list[str], int]:
    ident = parse_model_id(path.stem)
    records: list[Record] = []
    failures: list[dict[str, str]] = []
    warnings: list[str] = []
    n = 0
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                choice = row["choices"][0]
                n_turns = len(choice["turns"])
                qid = str(row["question_id"])
            except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
                n += 1
                failures.append({"path": f"{path}:{lineno}", "reason": f"not a Spec-Bench answer line ({exc!r})", "stage": "read"})
                continue
            steps = _split_steps(choice, n_turns)
            if steps is None and choice.get("accept_lengths") is not None:
                warnings.append(f"{path}:{lineno}: accept_lengths do not split by decoding_steps; rounds from decoding_steps")
            for t in range(n_turns):
                n += 1
                base = {**ident, "dataset": dataset, "item_id": qid, "seed": 0, "turn": t + 1 if n_turns > 1 else None,
                        "reference_answer": _reference(questions.get(qid), t),
                        "source": f"{path}:{lineno}" + (f"#turn{t + 1}" if n_turns > 1 else "")}
                try:
                    rec, warn = _turn_record(base, choice, t, steps, budget)
                except (KeyError, IndexError, TypeError, ValueError) as exc:
                    failures.append({"path": base["source"], "reason": f"turn {t + 1}: missing or bad counter ({exc!r})",
                                     "stage": "read"})
                    continue
                if warn:
                    warnings.append(f"{base['source']}: {warn}")
                records.append((str(path), lineno, rec))
    return records, failures, warnings, n


def read(path: Path, *, questions: str | Path | None = None, max_new_tokens: int | None = None) -> ReadResult:
    """Every turn of every Spec-Bench answer file under ``path`` as run-record mappings.

    ``questions``: a ``question.jsonl`` for all files (default: the one beside each ``model_answer/``).
    ``max_new_tokens``: the budget the runs were generated with (Spec-Bench does not log it).
    """
    path = Path(path)
    files = answer_files(path)
    if not files:
        raise ValueError(f"{path}: no Spec-Bench answer files (expected <task>/model_answer/<model-id>.jsonl)")
    budget = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    out = ReadResult(records=[], warnings=[] if max_new_tokens else [
        f"{path}: Spec-Bench logs no token budget; max_new_tokens = {budget} (Spec-Bench's default) assumed for censoring"])
    n_found = 0
    shared_q = read_questions(Path(questions)) if questions else None
    for f in files:
        task_dir = f.parent.parent if f.parent.name == "model_answer" else f.parent
        qfile = task_dir / "question.jsonl"
        qs = shared_q if shared_q is not None else (read_questions(qfile) if qfile.exists() else {})
        try:
            recs, fails, warns, n = _file_records(f, qs, task_dir.name, budget)
        except ValueError as exc:
            out.failures.append({"path": str(f), "reason": str(exc), "stage": "read"})
            continue
        out.records.extend(recs)
        out.failures.extend(fails)
        out.warnings.extend(warns[:20] + ([f"{f}: ... and {len(warns) - 20} more"] if len(warns) > 20 else []))
        n_found += n
    return ReadResult(out.records, out.failures, out.warnings, n_found)

