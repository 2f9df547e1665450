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

import math
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl

from lengthlens.data.readers.common import (
    IDENTITY,
    arm_from_files,
    check_arm,
    files_under,
    identity_failure,
    missing_identity,
    seconds,
    whole,
)
from lengthlens.data.safeio import JSONProblem, UnreadableFile, decode_json, read_input
from lengthlens.data.readers import ReadResult, Record
from lengthlens.data.schema import STRICT

_PER_REQUEST = ("input_lens", "output_lens", "latencies", "generated_texts", "errors")
_FROM_METADATA = (*IDENTITY, "temperature", "top_p", "max_new_tokens", "gpu", "seed")


def results(path: Path) -> list[dict[str, Any]]:
    """The result objects of one file (one, or one per line with ``--append-result``); ValueError for a file that is
    not a readable regular file or holds no result."""
    try:
        data = read_input(path)
    except (OSError, UnreadableFile) as exc:
        raise ValueError(str(exc)) from None
    try:
        parsed = decode_json(data)
        out = parsed if isinstance(parsed, list) else [parsed]
    except JSONProblem:
        try:
            out = [decode_json(line) for line in data.split(b"\n") if line.strip()]
        except JSONProblem as exc:
            raise ValueError(f"line {exc.line}: {exc.reason}" if exc.line else exc.reason) from None
    if not out:
        raise ValueError("an empty file: it holds no result")
    return out


def _serving(res: dict[str, Any]) -> dict[str, Any]:
    rate = res.get("request_rate")
    out: dict[str, Any] = {"concurrency": res.get("max_concurrency"), "target": res.get("model_id")}
    if rate == "inf" or (isinstance(rate, (int, float)) and not isinstance(rate, bool)):
        out["request_rate"] = math.inf if rate == "inf" else float(rate)
    return {k: v for k, v in out.items() if v is not None}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _unusable_totals(res: dict[str, Any]) -> list[str]:
    """The run's speculative totals that are logged but not finite non-negative numbers (left out, and named)."""
    keys = ("spec_decode_num_drafts", "spec_decode_accepted_tokens", "spec_decode_draft_tokens",
            "spec_decode_acceptance_length")
    return [f"{k} {res[k]!r}" for k in keys if res.get(k) is not None and not _finite(res[k])]


def pooled(res: dict[str, Any]) -> dict[str, Any] | None:
    """The run's pooled speculative figures (drafts, accepted, ℓ̄ = accepted / drafts), or None when not logged."""
    drafts, acc = res.get("spec_decode_num_drafts"), res.get("spec_decode_accepted_tokens")
    if not _finite(drafts) or not _finite(acc) or not drafts:
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
               "status": "error" if err else "ok", "source": f"{where}#request{i}"}
        rec.setdefault("seed", 0)
        try:  # a malformed entry skips its request only, named
            rec.update(input_tokens=whole(res["input_lens"][i], "input_lens"), text=res["generated_texts"][i])
            if not err:
                rec.update(output_tokens=whole(res["output_lens"][i], "output_lens"),
                           wall_time_s=seconds(res["latencies"][i], "s", "latencies"))
        except ValueError as exc:
            rec = {"_failure": str(exc), "source": rec["source"]}
        out.append(rec)
    return out


def _pooled_warning(res: dict[str, Any], where: str) -> str:
    p = pooled(res)
    head = (f"{where}: vllm bench serve logs speculative counters only for the whole run, none per request: "
            "gain, ℓ̄ and R/R* are unavailable per cell")
    bad = _unusable_totals(res)
    if bad:
        return head + f" (and this run's totals are not usable numbers: {', '.join(bad)})"
    if p is None:
        return head + " (and this run logged none)"
    return (head + f"; pooled over the run: {p['num_drafts']} verification steps, {p['accepted_tokens']} accepted "
            f"draft tokens, ℓ̄ {p['l_bar_pooled']:.4f} (vLLM's acceptance length "
            f"{p['acceptance_length_vllm']} counts the bonus token), without item intervals (vllm_bench.run_summary)")


#: The columns of :func:`pooled_cells`.
POOLED_COLUMNS = ("target", "draft", "dataset", "method", "params", "concurrency", "request_rate", "file", "file_star",
                  "n_prompts", "n_ok", "num_drafts", "num_drafts_star", "accepted_tokens", "accepted_tokens_star",
                  "l_bar_pooled", "l_bar_pooled_star", "gain_pooled", "rounds_ratio", "lambda", "rounds_ratio_predicted",
                  "time_ratio", "note")


def _runs(path: Path, arm: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every result under ``path`` with its identity, serving condition and file; a file or result that cannot be read
    is left out here (:func:`read` names it as a failure)."""
    opts = check_arm(arm, "arm option")
    out = []
    for f in files_under(path, ("*.json",)):
        base = {**opts, **arm_from_files(f, path)}
        try:
            objs = results(f)
        except ValueError:
            continue
        for k, res in enumerate(objs, start=1):
            if not isinstance(res, dict):
                continue
            ident = {**_serving(res), **base, **{key: res[key] for key in _FROM_METADATA if res.get(key) is not None}}
            out.append({"ident": ident, "res": res, "file": f"{f}:{k}" if len(objs) > 1 else str(f)})
    return out


def _pooled_row(run: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """One relaxed run against its baseline run over the same prompts (see :func:`pooled_cells`)."""
    res, bres = run["res"], base["res"]
    ident = run["ident"]
    row: dict[str, Any] = {**{k: ident.get(k) for k in IDENTITY}, "concurrency": ident.get("concurrency"),
                           "request_rate": ident.get("request_rate"), "file": run["file"], "file_star": base["file"]}
    p, q = pooled(res), pooled(bres)
    notes = []
    lens, blens = res.get("input_lens"), bres.get("input_lens")
    if not isinstance(lens, list) or not isinstance(blens, list) or lens != blens:
        notes.append("the two runs' prompts differ (input lengths not equal request by request): not the same prompts, "
                     "not paired")
        row.update(n_prompts=None if not isinstance(lens, list) else len(lens), note="; ".join(notes))
        return row
    errs, berrs = res.get("errors") or [""] * len(lens), bres.get("errors") or [""] * len(lens)
    ok = [i for i in range(len(lens)) if not errs[i] and not berrs[i]]
    row.update(n_prompts=len(lens), n_ok=len(ok))
    if len(ok) < len(lens):
        notes.append(f"{len(lens) - len(ok)} requests failed in one run: the run-level counters also count them")
    out_l, bout_l = res.get("output_lens"), bres.get("output_lens")
    if isinstance(out_l, list) and isinstance(bout_l, list) and ok:
        row["lambda"] = sum(out_l[i] for i in ok) / sum(bout_l[i] for i in ok)
    lat, blat = res.get("latencies"), bres.get("latencies")
    if isinstance(lat, list) and isinstance(blat, list) and ok:
        row["time_ratio"] = sum(lat[i] for i in ok) / sum(blat[i] for i in ok)
    if p is None or q is None:
        notes.append("no speculative counters logged (server without /metrics spec-decode counters)")
    else:
        row.update(num_drafts=p["num_drafts"], num_drafts_star=q["num_drafts"], accepted_tokens=p["accepted_tokens"],
                   accepted_tokens_star=q["accepted_tokens"], l_bar_pooled=p["l_bar_pooled"],
                   l_bar_pooled_star=q["l_bar_pooled"], gain_pooled=(p["l_bar_pooled"] + 1) / (q["l_bar_pooled"] + 1),
                   rounds_ratio=p["num_drafts"] / q["num_drafts"])
        if row.get("lambda") is not None:
            row["rounds_ratio_predicted"] = row["lambda"] / row["gain_pooled"]
    row["note"] = "; ".join(notes) or None
    return row


def pooled_cells(path: str | Path, *, arm: dict[str, Any] | None = None) -> pd.DataFrame:
    """Each relaxed ``vllm bench serve`` run paired with its strict run over the same prompts: pooled gain and R/R*.

    Two result files of the same dataset, ``--num-prompts`` and ``--seed`` (a strict and a relaxed arm of one
    target, draft, dataset and serving condition) hold the same prompts in the same order; the pairing checks it
    request by request on the prompt lengths. The speculative counters exist only for the whole run, so the
    cell's figures are pooled, without item intervals: ℓ̄ = accepted / drafts of each run, gain = (ℓ̄ + 1) /
    (ℓ̄* + 1), R/R* = drafts / drafts* (verification steps of the same prompts). λ (Σ output lengths) and T/T*
    (Σ latencies) are over the prompts both runs completed; the cells of ``lengthlens report --format
    vllm-bench`` give them with item intervals too.

    Parameters
    ----------
    path : a result file or a folder of them.
    arm : identity fields for files that do not carry them (as for :func:`read`).

    Returns
    -------
    pandas.DataFrame with :data:`POOLED_COLUMNS`: the arm, its file and its baseline's, ``n_prompts``,
    ``n_ok``, both runs' drafts and accepted tokens, ``l_bar_pooled`` (bonus excluded), ``gain_pooled``,
    ``rounds_ratio`` (R/R*), ``lambda``, ``rounds_ratio_predicted`` (λ / gain), ``time_ratio`` and a ``note``.

    Examples
    --------
    >>> import tempfile, pathlib, json
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> run = lambda m, drafts, acc, lens: {"model_id": "t", "draft": "d", "dataset": "x", "method": m, "params": m,
    ...     "max_concurrency": 1, "request_rate": "inf", "spec_decode_num_drafts": drafts,
    ...     "spec_decode_accepted_tokens": acc, "input_lens": [5, 7], "output_lens": lens, "latencies": [1.0, 1.0],
    ...     "errors": ["", ""]}
    >>> _ = (d / "s.json").write_text(json.dumps(run("strict", 100, 100, [60, 40])))
    >>> _ = (d / "r.json").write_text(json.dumps(run("fly", 60, 120, [70, 50])))
    >>> row = pooled_cells(d).iloc[0]
    >>> float(row["gain_pooled"]), float(row["rounds_ratio"]), float(row["lambda"])
    (1.5, 0.6, 1.2)
    """
    runs = _runs(Path(path), arm)
    key = ("target", "draft", "dataset", "concurrency", "request_rate")
    bases = {tuple(r["ident"].get(k) for k in key): r for r in runs if r["ident"].get("method") == STRICT}
    rows = []
    for r in runs:
        if r["ident"].get("method") == STRICT or (k := tuple(r["ident"].get(x) for x in key)) not in bases:
            continue
        try:
            rows.append(_pooled_row(r, bases[k]))
        except (TypeError, ValueError, ZeroDivisionError, IndexError, AttributeError, KeyError) as exc:
            # A malformed per-request list or total: this pair is named, not pooled; the others stand.
            rows.append({**{x: r["ident"].get(x) for x in IDENTITY}, "concurrency": r["ident"].get("concurrency"),
                         "request_rate": r["ident"].get("request_rate"), "file": r["file"], "file_star": bases[k]["file"],
                         "note": f"not pooled: a per-request list or total is malformed ({type(exc).__name__}: {exc})"})
    return pd.DataFrame(rows, columns=list(POOLED_COLUMNS))


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
    if not files and not files.skipped:
        raise ValueError(f"{path}: no vllm bench serve result files (.json)")
    records: list[Record] = []
    failures: list[dict[str, str]] = list(files.skipped)
    warnings: list[str] = []
    n = len(files.skipped)
    for f in files:
        base = {**opts, **arm_from_files(f, path)}
        try:
            objs = results(f)
        except ValueError as exc:
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
                if "_failure" in rec:
                    failures.append({"path": rec["source"], "reason": rec["_failure"], "stage": "read"})
                    continue
                miss = missing_identity(rec)
                if miss:
                    failures.append(identity_failure(rec["source"], miss))
                else:
                    records.append((str(f), k, rec))
    return ReadResult(records, failures, warnings + _pooled_lines(path, arm), n)


def _pooled_lines(path: Path, arm: dict[str, Any] | None) -> list[str]:
    """One line per relaxed run with its baseline: the pooled gain and R/R* the cells cannot carry."""
    try:
        cells = pooled_cells(path, arm=arm)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        return []  # the files' problems are already failures of read()
    out = []
    for r in cells.to_dict("records"):
        head = f"pooled cell {r['method']} / {r['params']} against strict ({r['file']} vs {r['file_star']})"
        if pd.isna(r["gain_pooled"]):
            out.append(f"{head}: {r['note']}")
        else:
            out.append(f"{head}: {r['num_drafts']} / {r['num_drafts_star']} verification steps, R/R* {r['rounds_ratio']:.3f}, "
                       f"gain {r['gain_pooled']:.3f}, λ {r['lambda']:.3f} over {r['n_ok']} prompts (pooled, without item "
                       f"intervals: vllm_bench.pooled_cells)" + (f"; {r['note']}" if r["note"] else ""))
    return out


def run_summary(path: str | Path, *, arm: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per benchmark run under ``path``: its arm, serving condition and pooled speculative figures.

    Parameters
    ----------
    path : a result file or a folder of them.
    arm : identity fields for files that do not carry them (as for :func:`read`).

    Returns
    -------
    pandas.DataFrame (as every public table) with file, target, draft, method, params, dataset, concurrency, request_rate,
    completed, duration_s, output_throughput, num_drafts, accepted_tokens, draft_tokens, l_bar_pooled
    (accepted / drafts: bonus excluded) and acceptance_length_vllm (bonus included).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "r.json"
    >>> _ = d.write_text('{"model_id": "m", "max_concurrency": 8, "request_rate": "inf", "completed": 2, '
    ...                  '"spec_decode_num_drafts": 40, "spec_decode_accepted_tokens": 60}')
    >>> run_summary(d)["l_bar_pooled"].tolist()
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
    return pl.DataFrame(rows, schema=schema, orient="row").to_pandas()
