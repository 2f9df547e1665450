"""Read ``vllm bench serve --save-result --save-detailed`` result files: per-request lengths, latencies, texts.

The file is the ``result_json`` that ``vllm/benchmarks/serve.py`` (``main``) writes: the run's
settings (``model_id``, ``request_rate``, ``max_concurrency``, ``--metadata KEY=VALUE`` entries as
top-level keys), aggregates, and, with ``--save-detailed``, parallel per-request lists in the order
the prompts were sampled: ``input_lens``, ``output_lens`` (the server's ``usage`` count, else the
client's tokenizer count of the text; 0 for a failed request), ``latencies`` (seconds from sending
the request to its last token, the client's wait for a concurrency slot excluded), ``ttfts``,
``generated_texts`` and ``errors`` (empty string when the request succeeded). ``--append-result``
appends further results, one JSON object per line.

The speculative counters are **only for the whole run**: ``spec_decode_num_drafts``,
``spec_decode_accepted_tokens``, ``spec_decode_draft_tokens`` and ``spec_decode_acceptance_length``
are deltas of the server's Prometheus counters around the benchmark (so they also count any other
traffic the server had). No request has counters of its own, so the records carry none: per cell,
gain, ℓ̄ and R/R* are unavailable, and the reader says so in a warning with the run's pooled
figures (ℓ̄ pooled = accepted / drafts, without item intervals); :func:`run_summary` gives them
as a table. λ, T/T*, censoring (given the budget) and accuracy (from the texts) are per item as usual.

The mapping: ``item_id`` = the request's position (the same dataset, ``--num-prompts`` and
``--seed`` sample the same prompts in the same order for every arm; nothing in the file checks it),
``output_tokens`` = ``output_lens[i]``, ``input_tokens`` = ``input_lens[i]``, ``wall_time_s`` =
``latencies[i]``, ``text`` = ``generated_texts[i]``, status ``error`` when ``errors[i]`` is not empty;
``target`` = ``model_id``, ``concurrency`` = ``max_concurrency``, ``request_rate`` = ``request_rate``
(``inf``: all requests at once); draft, method, params, dataset and the budget from ``--metadata``
keys of the same names, ``arm.json`` or ``arm=``. No finish reason is logged: censoring comes from
the length against ``max_new_tokens``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from lengthlens.data.readers.common import (
    IDENTITY,
    arm_from_files,
    check_arm,
    files_under,
    identity_failure,
    missing_identity,
    whole,
)
from lengthlens.data.readers import ReadResult, Record

_PER_REQUEST = ("input_lens", "output_lens", "latencies", "generated_texts", "errors")
_FROM_METADATA = (*IDENTITY, "temperature", "top_p", "max_new_tokens", "gpu", "seed")


def results(path: Path) -> list[dict[str, Any]]:
    """The result objects of one file (one, or one per line with ``--append-result``)."""
    text = path.read_bytes().decode("utf-8")
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def _serving(res: dict[str, Any]) -> dict[str, Any]:
    rate = res.get("request_rate")
    out: dict[str, Any] = {"concurrency": res.get("max_concurrency"), "target": res.get("model_id")}
    if rate == "inf" or (isinstance(rate, (int, float)) and not isinstance(rate, bool)):
        out["request_rate"] = math.inf if rate == "inf" else float(rate)
    return {k: v for k, v in out.items() if v is not None}


def pooled(res: dict[str, Any]) -> dict[str, Any] | None:
    """The run's pooled speculative figures (drafts, accepted, ℓ̄ = accepted / drafts), or None when not logged."""
    drafts, acc = res.get("spec_decode_num_drafts"), res.get("spec_decode_accepted_tokens")
    if not drafts or acc is None:
        return None
    return {"num_drafts": int(drafts), "accepted_tokens": int(acc), "draft_tokens": res.get("spec_decode_draft_tokens"),
            "l_bar_pooled": acc / drafts, "acceptance_length_vllm": res.get("spec_decode_acceptance_length")}


def _result_records(res: dict[str, Any], base: dict[str, Any], where: str) -> list[dict[str, Any]]:
    missing = [k for k in _PER_REQUEST if not isinstance(res.get(k), list)]
    if missing:
        raise ValueError(f"no per-request {', '.join(missing)}: save the result with --save-detailed")
    n = len(res["output_lens"])
    if any(len(res[k]) != n for k in _PER_REQUEST):
        raise ValueError("the per-request lists have different lengths")
    meta = {k: res[k] for k in _FROM_METADATA if res.get(k) is not None}
    out = []
    for i in range(n):
        err = res["errors"][i]
        rec = {**_serving(res), **base, **meta, "item_id": str(i), "backend": "vllm",
               "status": "error" if err else "ok", "source": f"{where}#request{i}",
               "input_tokens": whole(res["input_lens"][i], "input_lens"), "text": res["generated_texts"][i]}
        rec.setdefault("seed", 0)
        if not err:
            rec.update(output_tokens=whole(res["output_lens"][i], "output_lens"), wall_time_s=res["latencies"][i])
        out.append(rec)
    return out


def _pooled_warning(res: dict[str, Any], where: str) -> str:
    p = pooled(res)
    head = (f"{where}: vllm bench serve logs speculative counters only for the whole run, none per request: "
            "gain, ℓ̄ and R/R* are unavailable per cell")
    if p is None:
        return head + " (and this run logged none)"
    return (head + f"; pooled over the run: {p['num_drafts']} verification steps, {p['accepted_tokens']} accepted "
            f"draft tokens, ℓ̄ {p['l_bar_pooled']:.4f} (vLLM's acceptance length "
            f"{p['acceptance_length_vllm']} counts the bonus token), without item intervals (vllm_bench.run_summary)")


def read(path: Path, *, arm: dict[str, Any] | None = None, max_new_tokens: int | None = None) -> ReadResult:
    """Every request of every ``vllm bench serve`` result under ``path`` (a .json file or a folder) as run records.

    ``arm``: identity and settings for every file (arm.json files and ``--metadata`` keys win);
    ``max_new_tokens``: the budget the requests were sent with (the result file does not log it).
    """
    path = Path(path)
    opts = check_arm(arm, "arm option")
    if max_new_tokens is not None:
        opts.setdefault("max_new_tokens", max_new_tokens)
    files = files_under(path, ("*.json",))
    if not files:
        raise ValueError(f"{path}: no vllm bench serve result files (.json)")
    records: list[Record] = []
    failures: list[dict[str, str]] = []
    warnings: list[str] = []
    n = 0
    for f in files:
        base = {**opts, **arm_from_files(f, path)}
        try:
            objs = results(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            failures.append({"path": str(f), "reason": f"unreadable result file ({exc})", "stage": "read"})
            n += 1
            continue
        for k, res in enumerate(objs, start=1):
            where = f"{f}:{k}" if len(objs) > 1 else str(f)
            try:
                recs = _result_records(res, base, where)
            except (ValueError, TypeError, AttributeError) as exc:
                failures.append({"path": where, "reason": f"not a detailed vllm bench serve result ({exc})", "stage": "read"})
                n += 1
                continue
            n += len(recs)
            warnings.append(_pooled_warning(res, where))
            for rec in recs:
                miss = missing_identity(rec)
                if miss:
                    failures.append(identity_failure(rec["source"], miss))
                else:
                    records.append((str(f), k, rec))
    return ReadResult(records, failures, warnings, n)


def run_summary(path: str | Path, *, arm: dict[str, Any] | None = None) -> pl.DataFrame:
    """One row per benchmark run under ``path``: its arm, serving condition and pooled speculative figures.

    Parameters
    ----------
    path : a result file or a folder of them.
    arm : identity fields for files that do not carry them (as for :func:`read`).

    Returns
    -------
    polars.DataFrame with file, target, draft, method, params, dataset, concurrency, request_rate,
    completed, duration_s, output_throughput, num_drafts, accepted_tokens, draft_tokens, l_bar_pooled
    (accepted / drafts: bonus excluded) and acceptance_length_vllm (bonus included).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "r.json"
    >>> _ = d.write_text('{"model_id": "m", "max_concurrency": 8, "request_rate": "inf", "completed": 2, '
    ...                  '"spec_decode_num_drafts": 40, "spec_decode_accepted_tokens": 60}')
    >>> run_summary(d)["l_bar_pooled"].to_list()
    [1.5]
    """
    path = Path(path)
    opts = check_arm(arm, "arm option")
    rows = []
    for f in files_under(path, ("*.json",)):
        base = {**opts, **arm_from_files(f, path)}
        for res in results(f):
            ident = {**_serving(res), **base, **{k: res[k] for k in _FROM_METADATA if res.get(k) is not None}}
            p = pooled(res) or {}
            rows.append({"file": str(f), **{k: ident.get(k) for k in IDENTITY},
                         "concurrency": ident.get("concurrency"), "request_rate": ident.get("request_rate"),
                         "completed": res.get("completed"), "duration_s": res.get("duration"),
                         "output_throughput": res.get("output_throughput"),
                         **{k: p.get(k) for k in ("num_drafts", "accepted_tokens", "draft_tokens", "l_bar_pooled",
                                                  "acceptance_length_vllm")}})
    schema = {"file": pl.String, **dict.fromkeys(IDENTITY, pl.String), "concurrency": pl.Int64,
              "request_rate": pl.Float64, "completed": pl.Int64, "duration_s": pl.Float64, "output_throughput": pl.Float64,
              "num_drafts": pl.Int64, "accepted_tokens": pl.Int64, "draft_tokens": pl.Int64, "l_bar_pooled": pl.Float64,
              "acceptance_length_vllm": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")
