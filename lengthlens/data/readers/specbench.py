"""Read Spec-Bench answer files (``<bench>/model_answer*/<model-id>.jsonl``) as Spec-Bench users have them.

Spec-Bench (Xia et al., 2024; ``evaluation/eval.py`` of hemingkx/Spec-Bench, commit fd2c1cd) writes
one JSON line per question: ``question_id``, ``category``, and ``choices``, one per
``--num-choices`` (choice ``i`` sampled after ``torch.manual_seed(i)``), each with per-turn
``turns`` (texts), ``new_tokens``, ``wall_time``, ``decoding_steps`` and one flat ``accept_lengths``
list over all turns (tokens emitted per verification step, the bonus token included). EAGLE's,
Medusa's and Hydra's own scripts write ``idxs`` (the 0-based index of the last verification loop)
instead of ``decoding_steps`` and no ``accept_lengths``. The mapping to run records:

- the arm (target, method, draft, params, temperature) from the model id
  (:mod:`lengthlens.data.readers.specbench_ids`; ``method_map`` for ids it cannot read); ``vanilla`` is
  plain autoregressive decoding, the baseline of every draft of its model and task;
- **the task is the dataset**: on Spec-Bench's main set (the bench folder ``spec_bench``, or
  questions spanning several of its tasks) the question's category gives the task, MT-Bench's eight
  categories forming one, ``mt_bench`` (Spec-Bench's ``evaluation/speed.py``); the category is kept
  in the field ``category`` for a finer grouping. Elsewhere the dataset is the bench folder;
- one record per choice and turn: ``seed`` = the choice's index; in repeat folders
  ``model_answer_temp<T>_run_<N>`` (speed.py's ``get_mean_speedup``) ``seed`` = (N - 1) × 1000 +
  index, and Medusa's repeated runs (``medusa-<model>-<N>-...``) likewise; ``turn`` 1, 2, ... when a
  question has several (the question is the resampling unit);
- ``output_tokens`` = new_tokens, ``wall_time_s`` = wall_time; ``draft_rounds`` = the turn's
  verification steps (``decoding_steps``, or ``idxs`` + 1), ``accepted_tokens`` = the tokens those
  steps emitted minus one bonus token per step (``accept_lengths`` split by ``decoding_steps``, else
  new_tokens - steps);
- a turn whose text is ``ERROR`` has status ``error``; a count that is not a whole number, a
  ``turns`` that is not a list, a line that is not UTF-8 or not JSON are skips naming file, line
  and field, the file's other lines loaded;
- Spec-Bench logs no budget: ``max_new_tokens`` is the run's setting (``--max-new-tokens``, 1024 by
  default in Spec-Bench); a turn at or over it has finish_reason ``length`` (tree methods emit
  several tokens per step and can pass the budget by a few);
- ``reference_answer`` (and the category, where the answer line lacks it) from ``question.jsonl``
  beside ``model_answer*/`` (or given).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lengthlens.data.readers.common import cap_warnings, json_lines, where_in, whole
from lengthlens.data.readers import ReadResult, Record
from lengthlens.data.readers.specbench_ids import (  # noqa: F401  (parse_model_id, KNOWN_METHODS: public here)
    KNOWN_METHODS,
    check_method_map,
    parse_method_map,
    parse_model_id,
    resolve_id,
)

#: Spec-Bench's default budget (evaluation/eval.py, ``--max-new-tokens``).
DEFAULT_MAX_NEW_TOKENS = 1024
#: MT-Bench's eight categories, one Spec-Bench task (evaluation/speed.py's ``mt_bench_list``).
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
#: Spec-Bench's six tasks, in speed.py's order.
TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
#: Seeds of repeat folder N start at (N - 1) * SEED_STRIDE.
SEED_STRIDE = 1000
_RUN = re.compile(r"_run_?(\d+)$")


def task_of(category: str | None) -> str | None:
    """Spec-Bench's task of a question category (``writing`` -> ``mt_bench``), None for others."""
    if category in MT_BENCH_CATEGORIES:
        return "mt_bench"
    return category if category in TASKS else None


def answer_files(path: Path) -> list[Path]:
    """The answer files under ``path``: a bench folder, ``model_answer*/`` folders, one file, or a folder of files."""
    if path.is_file():
        return [path]
    if path.name.startswith("model_answer"):
        return sorted(path.glob("*.jsonl"))
    found = sorted(p for p in path.rglob("*.jsonl") if p.parent.name.startswith("model_answer"))
    if not found:  # EAGLE's own layout: <bench>/<model-id>.jsonl
        found = sorted(p for p in path.glob("*.jsonl") if p.name != "question.jsonl")
    return found


def read_questions(path: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """question_id -> question line of a ``question.jsonl``, and warnings for lines that cannot be read."""
    out: dict[str, dict[str, Any]] = {}
    warns = []
    for lineno, q, bad in json_lines(path):
        if bad or not isinstance(q, dict):
            warns.append(f"{where_in(path, lineno)}: question not read ({bad or 'not a JSON object'})")
            continue
        out[str(q.get("question_id"))] = q
    return out, warns


def _reference(q: dict[str, Any] | None, turn: int) -> str | None:
    ref = (q or {}).get("reference")
    if isinstance(ref, list):
        ref = ref[turn] if turn < len(ref) else None
    return None if ref is None else str(ref)


def _per_turn(choice: dict[str, Any], key: str, n_turns: int, required: bool = True) -> list[Any] | None:
    v = choice.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, list) or len(v) != n_turns:
        raise ValueError(f"field '{key}': expected a list of {n_turns} per-turn values, got {v!r:.60}")
    return v


def _steps(choice: dict[str, Any], n_turns: int) -> list[int] | None:
    """Verification steps per turn: ``decoding_steps``, or EAGLE/Medusa/Hydra's 0-based ``idxs`` + 1."""
    if choice.get("decoding_steps") is not None:
        return [whole(k, "decoding_steps") for k in _per_turn(choice, "decoding_steps", n_turns)]
    if choice.get("idxs") is not None:
        return [whole(k, "idxs") + 1 for k in _per_turn(choice, "idxs", n_turns)]
    return None


def _emitted(choice: dict[str, Any], steps: list[int] | None, n_turns: int) -> list[int] | None:
    """Tokens emitted per turn from accept_lengths split by the steps; None when they do not split."""
    acc = choice.get("accept_lengths")
    if not isinstance(acc, list) or steps is None:
        return None
    if acc and isinstance(acc[0], list):  # one list per turn already
        return [sum(a) for a in acc] if len(acc) == n_turns else None
    if sum(steps) != len(acc):
        return None
    out, i = [], 0
    for k in steps:
        out.append(sum(acc[i:i + k]))
        i += k
    return out


def _choice_records(choice: dict[str, Any], base: dict[str, Any], budget: int,
                    where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of one choice (one per turn) and its warnings; ValueError names the bad field."""
    turns = choice.get("turns")
    if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise ValueError(f"field 'turns': expected a list of texts, got {type(turns).__name__}")
    n = len(turns)
    new = [whole(x, "new_tokens") for x in _per_turn(choice, "new_tokens", n)]
    walls = _per_turn(choice, "wall_time", n, required=False) or [None] * n
    steps = _steps(choice, n)
    emitted = _emitted(choice, steps, n)
    warns = []
    if steps is not None and emitted is None and choice.get("accept_lengths") is not None:
        warns.append(f"{where}: accept_lengths do not split by decoding_steps; rounds from decoding_steps")
    out = []
    for t, text in enumerate(turns):
        rec = {**base, "turn": t + 1 if n > 1 else None, "text": text,
               "source": where + (f"#turn{t + 1}" if n > 1 else "")}
        if text == "ERROR":
            out.append({**rec, "status": "error"})
            continue
        wall = walls[t]
        if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float))):
            raise ValueError(f"field 'wall_time': turn {t + 1} is {wall!r}, not a number of seconds")
        rec.update(status="ok", output_tokens=new[t], max_new_tokens=budget, wall_time_s=wall,
                   finish_reason="length" if new[t] >= budget else None)
        if steps is not None:
            tokens = emitted[t] if emitted is not None else new[t]
            rec.update(draft_rounds=steps[t], accepted_tokens=tokens - steps[t])
            if emitted is not None and emitted[t] != new[t]:
                warns.append(f"{rec['source']}: accept_lengths add up to {emitted[t]} tokens but new_tokens is {new[t]}")
        out.append(rec)
    return out, warns


def _line_records(row: Any, ident: dict[str, Any], ctx: dict[str, Any], where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every choice and turn of one answer line."""
    if not isinstance(row, dict) or not isinstance(row.get("choices"), list) or not row["choices"]:
        raise ValueError("not a Spec-Bench answer line (no 'choices' list)")
    qid = row.get("question_id")
    if qid is None or isinstance(qid, (dict, list, bool)):
        raise ValueError(f"field 'question_id': {qid!r}")
    q = ctx["questions"].get(str(qid))
    category = row.get("category", (q or {}).get("category"))
    dataset = (task_of(category) or str(category)) if ctx["split"] and category is not None else ctx["bench"]
    out, warns = [], []
    for i, choice in enumerate(row["choices"]):
        if not isinstance(choice, dict):
            raise ValueError(f"choices[{i}] is not an object")
        seed = ctx["seed0"] + whole(choice.get("index", i), "choices.index")
        base = {**ident, "dataset": dataset, "category": category, "item_id": str(qid), "seed": seed}
        cw = where + (f"#choice{i}" if len(row["choices"]) > 1 else "")
        recs, w = _choice_records(choice, base, ctx["budget"], cw)
        for t, rec in enumerate(recs):
            rec["reference_answer"] = _reference(q, t)
        out += recs
        warns += w
    return out, warns


def _file_records(path: Path, ident: dict[str, Any], ctx: dict[str, Any]) -> tuple[list[Record], list[dict[str, str]], list[str], int]:
    records: list[Record] = []
    failures: list[dict[str, str]] = []
    warnings: list[str] = []
    n = 0
    for lineno, row, bad in json_lines(path):
        where = where_in(path, lineno)
        try:
            if bad:
                raise ValueError(bad)
            recs, warns = _line_records(row, ident, ctx, where)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:  # a malformed line: skipped, named
            n += 1
            failures.append({"path": where, "reason": f"not read: {exc}", "stage": "read"})
            continue
        n += len(recs)
        warnings += warns
        records += [(str(path), lineno, r) for r in recs]
    return records, failures, warnings, n


def _bench_context(folder: Path, files: list[Path], shared_q: dict | None, split: bool | None) -> tuple[dict, list[str]]:
    """Questions of a bench folder and whether its tasks split it (by name, or questions spanning several tasks)."""
    warns: list[str] = []
    qfile = folder / "question.jsonl"
    if shared_q is not None:
        qs = shared_q
    elif qfile.is_file():
        qs, warns = read_questions(qfile)
    else:
        qs = {}
    if split is None:
        cats = {q.get("category") for q in qs.values()}
        if not qs:
            cats = {row.get("category") for f in files for _, row, _ in json_lines(f) if isinstance(row, dict)}
        split = folder.name == "spec_bench" or len({task_of(c) for c in cats} - {None}) > 1
    return {"questions": qs, "split": split, "bench": folder.name}, warns


def read(path: Path, *, questions: str | Path | None = None, max_new_tokens: int | None = None,
         method_map: dict[str, Any] | None = None, tasks: bool | None = None) -> ReadResult:
    """Every choice and turn of every Spec-Bench answer file under ``path`` as run-record mappings.

    ``questions``: a ``question.jsonl`` for all files (default: the one beside each ``model_answer*/``).
    ``max_new_tokens``: the budget the runs were generated with (Spec-Bench does not log it).
    ``method_map``: model id (or glob) -> method, or -> {target, draft, method, params, temperature},
    for ids the reader cannot parse (EAGLE's own answer files). ``tasks``: make the task the dataset
    (default: on Spec-Bench's main set, see the module docstring); False keeps the bench folder.
    """
    path = Path(path)
    files = answer_files(path)
    if not files:
        raise ValueError(f"{path}: no Spec-Bench answer files (expected <bench>/model_answer/<model-id>.jsonl)")
    method_map = check_method_map(method_map)
    budget = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    out = ReadResult(records=[], warnings=[] if max_new_tokens else [
        f"{path}: Spec-Bench logs no token budget; max_new_tokens = {budget} (Spec-Bench's default) assumed for censoring"])
    shared_q = None
    if questions:
        shared_q, qwarn = read_questions(Path(questions))
        out.warnings.extend(qwarn)
    contexts: dict[Path, dict] = {}
    n_found = 0
    for f in files:
        bench = f.parent.parent if f.parent.name.startswith("model_answer") else f.parent
        if bench not in contexts:
            contexts[bench], qwarn = _bench_context(bench, [g for g in files if bench in g.parents], shared_q, tasks)
            out.warnings.extend(qwarn)
        try:
            ident = resolve_id(f.stem, method_map)
        except ValueError as exc:
            out.failures.append({"path": str(f), "reason": str(exc), "stage": "read"})
            n_found += 1
            continue
        run = ident.pop("run", None)
        m = _RUN.search(f.parent.name)
        run_index = int(m.group(1)) - 1 if m else (run or 0)
        ctx = {**contexts[bench], "budget": budget, "seed0": run_index * SEED_STRIDE}
        recs, fails, warns, n = _file_records(f, ident, ctx)
        out.records.extend(recs)
        out.failures.extend(fails)
        out.warnings.extend(cap_warnings(f, warns))
        n_found += n
    return ReadResult(out.records, out.failures, out.warnings, n_found)
