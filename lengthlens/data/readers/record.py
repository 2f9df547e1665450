"""Record one run's engine outputs as flat run records that :func:`lengthlens.load` reads.

For people who call vLLM or SGLang themselves: hand the outputs of one arm (offline vLLM
``RequestOutput`` objects, vLLM or SGLang OpenAI-compatible response dicts, SGLang ``meta_info``
outputs) with the arm's identity, and get one validated record per request (per sequence for
``n > 1``), written to JSONL, CSV or Parquet if asked::

    outs = llm.generate(prompts, SamplingParams(max_tokens=2048, seed=0))
    lengthlens.data.readers.record.record_outputs(outs, target="Qwen3-8B", draft="Qwen3-0.6B", method="strict",
                                          params="strict", dataset="gsm8k", item_ids=ids, out="strict.jsonl")

The counters come from the engines' per-request metrics through the readers' mappings
(:mod:`lengthlens.data.readers.vllm_records`, :mod:`lengthlens.data.readers.sglang`), so a record made here and one
read from a saved response are the same.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lengthlens.data.readers.common import check_arm
from lengthlens.data.schema import validate_record


def _fields(output: Any, wall_time: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The run-record fields of one engine output, whichever engine and shape it is."""
    from lengthlens.data.readers import sglang, vllm_records

    if isinstance(output, dict):
        if "sglext" in output or "meta_info" in output or any("meta_info" in c for c in output.get("choices") or []):
            return sglang.from_response(output)
        return vllm_records.from_openai_response(output, wall_time=wall_time)
    if hasattr(output, "outputs") and hasattr(output, "prompt_token_ids"):
        return vllm_records.from_request_output(output, wall_time=wall_time)
    raise TypeError(f"cannot record a {type(output).__name__}: expected a vLLM RequestOutput or a response dict")


def _dump(rec: dict[str, Any]) -> str:
    # request_rate may be inf (all requests at once): JSON has no inf, Python's json spells it Infinity.
    return json.dumps(rec, allow_nan=True)


def write_records(records: Sequence[dict[str, Any]], out: str | os.PathLike[str]) -> Path:
    """Write run records to ``out`` (.jsonl, .csv or .parquet), whole or not at all; returns the path."""
    import polars as pl

    from lengthlens.data.schema import POLARS_SCHEMA

    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".jsonl", ".csv", ".parquet"):
        raise ValueError(f"{out}: records go to .jsonl, .csv or .parquet, not {suffix or 'no suffix'}")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if suffix == ".jsonl":
            Path(tmp).write_text("".join(_dump(r) + "\n" for r in records), encoding="utf-8")
        else:
            frame = pl.DataFrame([{k: r.get(k) for k in POLARS_SCHEMA} for r in records], schema=POLARS_SCHEMA, orient="row")
            if suffix == ".parquet":
                frame.write_parquet(tmp)
            else:
                frame.write_csv(tmp)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def record_outputs(outputs: Sequence[Any], *, target: str, draft: str, method: str, params: str, dataset: str,
                   item_ids: Sequence[Any] | None = None, seed: int | Sequence[int] = 0, with_text: bool = True,
                   wall_time: str = "inference", out: str | os.PathLike[str] | None = None,
                   **settings: Any) -> list[dict[str, Any]]:
    """Flat, validated run records of one arm's engine outputs (written to ``out`` when given).

    Parameters
    ----------
    outputs : vLLM ``RequestOutput`` objects (offline ``LLM.generate``), vLLM OpenAI-compatible response
        dicts, or SGLang outputs (native ``meta_info`` dicts or OpenAI-compatible responses with
        ``sglext``), one per request, in the order of ``item_ids``.
    target, draft, method, params, dataset : the arm (``method="strict"``, ``params="strict"`` for the
        lossless baseline; ``method="autoregressive"`` with ``draft=""`` for plain decoding).
    item_ids : the item of each output (default: its position, ``"0"``, ``"1"``, ...).
    seed : the sampling seed of every run, or one per output.
    with_text : keep the completion texts (needed for grading and the thinking attribution).
    wall_time : ``inference`` (scheduled to last token) or ``e2e`` (with queueing), from the engine's timings.
    out : write the records there too (.jsonl, .csv or .parquet), atomically.
    **settings : further run-record fields for every run: ``max_new_tokens``, ``temperature``, ``top_p``,
        ``concurrency``, ``request_rate``, ``batch_size``, ``gpu``, ``engine_version``, ...

    Returns
    -------
    list of dict, one run record per request (per sequence when a request has several), validated
    against the run-record schema (ValueError naming the output and field otherwise).

    Examples
    --------
    >>> resp = {"model": "t", "choices": [{"index": 0, "text": "4", "finish_reason": "stop"}],
    ...         "usage": {"prompt_tokens": 7, "completion_tokens": 2},
    ...         "metrics": {"speculative_decoding": {"num_spec_steps": 1, "num_accepted_draft_tokens": 1,
    ...                                              "num_draft_tokens": 3, "mean_acceptance_length": 2.0}}}
    >>> recs = record_outputs([resp], target="t", draft="d", method="eagle3", params="k3", dataset="toy")
    >>> recs[0]["draft_rounds"], recs[0]["accepted_tokens"], recs[0]["item_id"]
    (1, 1, '0')
    """
    n = len(outputs)
    ids = [str(i) for i in range(n)] if item_ids is None else [str(i) for i in item_ids]
    seeds = [seed] * n if isinstance(seed, int) else list(seed)
    if len(ids) != n or len(seeds) != n:
        raise ValueError(f"{n} outputs but {len(ids)} item_ids and {len(seeds)} seeds")
    extra = check_arm(settings, "record_outputs settings")
    base = {"target": target, "draft": draft, "method": method, "params": params, "dataset": dataset, **extra}
    records = []
    for k, (output, item, s) in enumerate(zip(outputs, ids, seeds)):
        fields, _ = _fields(output, wall_time)
        for j, f in enumerate(fields):
            rec = {**base, **{key: v for key, v in f.items() if v is not None}, "item_id": item,
                   "seed": int(s) + j, "source": f"output {k}" + (f" sequence {j}" if len(fields) > 1 else "")}
            if not with_text:
                rec.pop("text", None)
            valid, errors = validate_record(rec, f"output {k}")
            if valid is None:
                raise ValueError("; ".join(str(e) for e in errors))
            records.append({key: v for key, v in valid.model_dump().items()
                            if v is not None and not (isinstance(v, float) and math.isnan(v))})
    if out is not None:
        write_records(records, out)
    return records


#: ``lengthlens.record(outputs, target=..., ...)``: the short name the package exports.
record = record_outputs
