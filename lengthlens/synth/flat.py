"""Flat run records from a spec (one row per run, the schema's fields plus planted extras for tests)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import polars as pl

from lengthlens.data.schema import POLARS_SCHEMA
from lengthlens.synth.draw import item_group, Items
from lengthlens.synth.spec import ENGINE_VERSION, Dataset, Pair, SynthSpec, ArmDef
from lengthlens.synth.texts import H_CLOSE, H_OPEN, answer_core, compose, words


def run_rows(spec: SynthSpec, pair: Pair, ds: Dataset, seed: int, *, text: bool) -> Iterator[dict[str, Any]]:
    """One dict per run of a (pair, dataset): record fields plus the pieces the writers need."""
    g = item_group(spec, pair, ds, seed)
    it: Items = g["items"]
    arms: list[ArmDef] = g["arms"]
    cols = {k: v.tolist() for k, v in g.items() if isinstance(v, np.ndarray)}
    cpt = ds.chars_per_token
    for j in range(len(cols["L"])):
        arm = arms[cols["arm"][j]]
        i = cols["item"][j]
        L, F, T, R, A = cols["L"][j], cols["F"][j], cols["T"][j], cols["R"][j], cols["A"][j]
        cens = cols["cens"][j]
        jit, aux0, aux1 = cols["jit"][j], cols["aux0"][j], cols["aux1"][j]
        correct = bool(cols["correct_if"][j])
        n_think = max(1, int(round(T * cpt * jit)))
        if cens:
            core, extracted, answer = "", None, None
        else:
            core, extracted = answer_core(ds, i, int(it.ref_num[i]), correct, aux1)
            n_final = int(round(F * cpt * jit))
            n_pre = n_final - len(core) - (2 if core else 0)
            pre = words("answer", aux1, n_pre) if n_pre > 0 else ""  # short: always built
            answer = pre + "\n\n" + core if (pre and core) else (pre or core or ".")
        if text:
            out_text, a_chars, f_chars = compose(pair.style, words("think", aux0, n_think), answer)
        else:
            # Same counts as compose, without building the strings (flat tables without text).
            out_text, f_chars = None, 0 if answer is None else len(answer)
            if pair.style == "harmony":
                a_chars = len(H_OPEN) + n_think + (0 if answer is None else len(H_CLOSE))
            else:
                a_chars = n_think
        yield {
            "arm": arm, "item": i, "L_true": cols["L_true"][j], "fired": cols["fired"][j],
            "thinking_tokens": T, "answer_tokens": F, "extracted": extracted, "text_value": out_text,
            "target": pair.target, "draft": pair.draft, "dataset": ds.name, "method": arm.method,
            "params": arm.params, "alpha": arm.alpha, "item_id": _case(i), "seed": cols["seed"][j],
            "status": "ok", "output_tokens": L, "finish_reason": "length" if cens else "stop",
            "max_new_tokens": ds.budget, "draft_rounds": R, "accepted_tokens": A, "draft_tokens": cols["D"][j],
            "wall_time_s": cols["wall"][j], "correct": correct if ds.graded else None,
            "temperature": 1.0, "top_p": 1.0, "input_tokens": int(it.prompt_tokens[i]), "l_bar_logged": A / R,
            "analysis_chars": a_chars, "final_chars": f_chars, "reached_final_channel": not cens,
            "reference_answer": it.ref[i], "prompt_source_id": ds.source.format(i=i), "backend": "vllm",
            "engine_version": ENGINE_VERSION, "force_commit_fired": bool(cols["fired"][j]) if arm.fc else None,
            "text": out_text, "source": None,
        }


def _case(i: int) -> str:
    return f"case_{i + 1:03d}"


_EXTRA_COLS = {"pair": pl.String, "L_true": pl.Int64, "censored": pl.Boolean, "fired": pl.Boolean,
               "thinking_tokens": pl.Int64, "answer_tokens": pl.Int64}


def simulate(spec: SynthSpec, *, seed: int = 0, text: bool = False) -> pl.DataFrame:
    """Every run as a normalized record (POLARS_SCHEMA columns) plus planted extras.

    Extras: ``pair`` (slug), ``L_true`` (length before censoring), ``censored``, ``fired``
    (force-commit intervention fired), ``thinking_tokens``, ``answer_tokens``.
    """
    frames = []
    names = list(POLARS_SCHEMA.names())
    for pair in spec.pairs:
        for ds in spec.datasets:
            rows = list(run_rows(spec, pair, ds, seed, text=text))
            # .get: a field the schema gains later is null here until the generator learns it.
            data = {c: [r.get(c) for r in rows] for c in names}
            data["pair"] = [pair.slug] * len(rows)
            data["L_true"] = [r["L_true"] for r in rows]
            data["censored"] = [r["finish_reason"] == "length" for r in rows]
            data["fired"] = [r["fired"] for r in rows]
            data["thinking_tokens"] = [r["thinking_tokens"] for r in rows]
            data["answer_tokens"] = [r["answer_tokens"] for r in rows]
            frames.append(pl.DataFrame(data, schema={**dict(POLARS_SCHEMA), **_EXTRA_COLS}))
    return pl.concat(frames) if frames else pl.DataFrame(schema={**dict(POLARS_SCHEMA), **_EXTRA_COLS})


def write_flat(spec: SynthSpec, path: str | os.PathLike[str], *, seed: int = 0, text: bool = False) -> Path:
    """Write every run as one normalized record to JSONL, CSV or Parquet (by extension); return the path."""
    path = Path(path)
    df = simulate(spec, seed=seed, text=text).select(POLARS_SCHEMA.names())
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        df.write_ndjson(path)
    elif suffix == ".csv":
        df.write_csv(path)
    elif suffix in (".parquet", ".pq"):
        df.write_parquet(path, statistics=False)
    else:
        raise ValueError(f"{path}: unknown extension (use .jsonl, .csv or .parquet)")
    return path
