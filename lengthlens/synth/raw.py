"""The study's raw layout written from a spec: run.json, config.json, output.txt, proposals.jsonl and grade files."""

from __future__ import annotations

import json
import os
import re
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any, Collection

import numpy as np

from lengthlens.data.schema import STRICT
from lengthlens.execution import map_ordered
from lengthlens.synth.draw import rng_for
from lengthlens.synth.flat import run_rows
from lengthlens.synth.spec import (
    ENGINE_VERSION,
    FIXED_TIMESTAMP,
    SYNTH_MARKER,
    Dataset,
    Pair,
    SynthSpec,
    ArmDef,
)
from lengthlens.synth.texts import entry_point

_ACCEPTANCE_RULE = {
    STRICT: "accept iff p(x) / q(x) >= u",
    "mentored_dec": "accept iff p(x) / ((1-alpha) * q(x)) >= u  (alpha = {a})",
    "cactus": "accept iff gamma_x / q(x) >= u, gamma_x = min(p(x) + sqrt(2*{a}*p(x)*(1-p(x))), 1)",
    "spec_casc_opt": "defer to strict p/q test iff max_u q(u) < max_u p(u) - {a}*TV(p,q), else accept unconditionally",
    "spec_casc_tok": "pi_rej(v) = q(v)+eta*p(v) for v with p(v) >= (1-{a})*max(p), else eta*p(v)",
    "r_fuzzy": "accept iff JSD(p,q) < {a} (then unconditional accept), else strict p/q test",
}


def _tag(method: str, params: str, alpha: float | None) -> str:
    """The study's config `tag`: ``strict``, ``cactus0.35``, ``specCascOptneg0.3`` (camel-cased method)."""
    if method == STRICT:
        return STRICT
    parts = method.split("_")
    camel = parts[0] + "".join(p.capitalize() for p in parts[1:])
    return camel + params[len("alpha"):]


class _Template:
    """JSON text with placeholders, rendered by interleaving: json.dumps(indent=2) once per arm, not per run."""

    _MARK = re.compile(r'"?@@(\w+)@@"?')

    def __init__(self, obj: Any) -> None:
        text = json.dumps(obj, indent=2)
        pieces = self._MARK.split(text)
        self.parts = pieces[0::2]
        self.keys = pieces[1::2]

    def render(self, values: dict[str, str]) -> str:
        out = [self.parts[0]]
        for key, part in zip(self.keys, self.parts[1:]):
            out.append(values[key])
            out.append(part)
        return "".join(out)


def _j(v: Any) -> str:
    """One JSON scalar as json.dumps writes it."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, float):
        return float.__repr__(v)
    if isinstance(v, int):
        return int.__repr__(v)
    return json.dumps(v)


_RUN_KEYS = ("status", "backend", "wall_time_seconds", "server_request_ordinal", "input_tokens", "output_tokens",
             "finish_reason", "eos_reached", "reached_max_new_tokens", "usage", "analysis_chars", "final_chars",
             "reached_final_channel", "draft_tokens", "accepted_tokens", "draft_rounds", "draft_acceptance_rate",
             "l_bar", "mean_accept_length", "L_over_l_bar")


@lru_cache(maxsize=2)
def _run_template(force_commit: bool = False) -> _Template:
    keys = _RUN_KEYS + (("force_commit_fired",) if force_commit else ())
    obj: dict[str, Any] = {k: f"@@{k}@@" for k in keys}
    obj["status"], obj["backend"], obj["server_request_ordinal"] = "ok", "vllm", 1
    obj["usage"] = {"prompt_tokens": "@@prompt_tokens@@", "total_tokens": "@@total_tokens@@",
                    "completion_tokens": "@@completion_tokens@@", "prompt_tokens_details": None}
    return _Template(obj)


def _config_template(spec: SynthSpec, pair: Pair, ds: Dataset, arm: ArmDef, seed: int) -> _Template:
    lossy = arm.method != STRICT
    base_method = arm.fc.method if arm.fc is not None else arm.method
    rule = _ACCEPTANCE_RULE.get(base_method, "accept iff the {m} rule accepts (alpha = {a})")
    params: dict[str, Any] = {} if not lossy else {"alpha": arm.alpha}
    if arm.fc is not None:
        rule += f"; force-commit: close the thinking at {arm.fc.threshold_for(ds.budget)} tokens and answer"
        params["threshold"] = arm.fc.threshold_for(ds.budget)
    obj = {
        "timestamp_utc": FIXED_TIMESTAMP,
        "backend": "vllm",
        "tag": _tag(arm.method, arm.params, arm.alpha),
        "mode": "lossy" if lossy else "strict",
        "lossy_method": arm.method if lossy else None,
        "lossy_parameters": params,
        "acceptance_rule": rule.format(a=arm.alpha, m=base_method),
        "model": pair.target,
        "draft_model": pair.draft,
        "seed": "@@seed@@",
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": ds.budget,
        "input_tokens_archived": "@@input_tokens@@",
        "prompt_case": "@@case@@",
        "prompt_source_id": "@@source_id@@",
        "reference_answer": "@@reference@@",
        "server_request_ordinal": 1,
        "vllm": {"version": ENGINE_VERSION, "commit_id": "synthetic"},
        "synthetic": {"generator": "lengthlens.synth", "seed": int(seed), "speculative_tokens": pair.k},
    }
    return _Template(obj)


_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def _write(path: str, text: str) -> int:
    """Plain write with the fewest system calls (paper scale writes ~540k files)."""
    data = text.encode("utf-8")
    fd = os.open(path, _O_NEW, 0o644)
    try:
        view, n = memoryview(data), 0
        while n < len(data):
            n += os.write(fd, view[n:])
    finally:
        os.close(fd)
    return len(data)


def _grade_entry(ds: Dataset, r: dict[str, Any], tag: str) -> dict[str, Any]:
    arm: ArmDef = r["arm"]
    cens = r["finish_reason"] == "length"
    e: dict[str, Any] = {"case": r["item_id"], "seed": r["seed"], "tag": tag, "method": arm.method,
                         "params": arm.params, "mode": "strict" if arm.method == STRICT else "lossy",
                         "lossy_method": None if arm.method == STRICT else arm.method}
    if ds.kind == "code":
        key = "entry_point" if "humaneval" in ds.name else "question_id"
        e[key] = entry_point(r["item"])
        e["extracted_by"] = "no_final_channel" if cens else "fenced_block"
        e["verdict"] = "no_answer" if cens else ("passed" if r["correct"] else "failed")
        e["detail"] = "" if cens or r["correct"] else "AssertionError"
    else:
        e["alpha"] = arm.alpha
        e["reference"] = r["reference_answer"]
        e["answer"] = r["extracted"]
        e["extracted_by"] = "no_final_channel" if cens else {"gsm8k": "hash_marker", "boxed": "boxed", "choice": "answer_phrase"}[ds.kind]
        e["verdict"] = "no_answer" if cens else ("correct" if r["correct"] else "wrong")
    e.update(output_tokens=r["output_tokens"], finish_reason=r["finish_reason"], hit_cap=cens,
             l_bar=r["l_bar_logged"])
    return e


def _write_group(args: tuple[SynthSpec, int, int, str, int, bool]) -> tuple[int, int]:
    """Write one (pair, dataset) subtree and its grade file; return (files, bytes)."""
    spec, pi, di, root, seed, proposals = args
    pair, ds = spec.pairs[pi], spec.datasets[di]
    tree = os.path.join(root, pair.slug)
    ds_dir = os.path.join(tree, "runs", ds.name)
    cfg_t: dict[int, _Template] = {}
    made: set[str] = set()
    grades: list[dict[str, Any]] = []
    n_files = n_bytes = 0
    # proposals: True for every dataset, or a collection of dataset names (the study traced gsm8k only).
    if proposals is not True and proposals:
        proposals = ds.name in proposals
    prop_rng = rng_for(seed, "proposals", pair.target, pair.draft, ds.name) if proposals else None
    for r in run_rows(spec, pair, ds, seed, text=True):
        arm: ArmDef = r["arm"]
        key = id(arm)
        if key not in cfg_t:
            cfg_t[key] = _config_template(spec, pair, ds, arm, seed)
        arm_dir = os.path.join(ds_dir, arm.method, arm.params)
        if arm_dir not in made:
            os.makedirs(arm_dir, exist_ok=True)
            made.add(arm_dir)
        case_dir = os.path.join(arm_dir, r["item_id"])
        if case_dir not in made:
            os.mkdir(case_dir)  # the tree is new (write_raw refuses existing trees)
            made.add(case_dir)
        run_dir = os.path.join(case_dir, f"seed_{r['seed']}")
        os.mkdir(run_dir)
        run_json = _run_json(r, arm)
        cfg_json = cfg_t[key].render({
            "seed": _j(r["seed"]), "input_tokens": _j(r["input_tokens"]), "case": _j(r["item_id"]),
            "source_id": _j(r["prompt_source_id"]), "reference": _j(r["reference_answer"]),
        })
        n_bytes += _write(os.path.join(run_dir, "run.json"), run_json)
        n_bytes += _write(os.path.join(run_dir, "config.json"), cfg_json)
        n_bytes += _write(os.path.join(run_dir, "output.txt"), r["text_value"])
        n_files += 3
        if prop_rng is not None:
            n_bytes += _write(os.path.join(run_dir, "proposals.jsonl"), _proposals(prop_rng, r, pair.k))
            n_files += 1
        if ds.graded:
            grades.append(_grade_entry(ds, r, f"{arm.method}/{arm.params}"))
    if ds.graded:
        grades.sort(key=lambda e: (e["case"], e["seed"], e["tag"]))
        gdir = os.path.join(tree, "campaign", "grades")
        os.makedirs(gdir, exist_ok=True)
        n_bytes += _write(os.path.join(gdir, f"{ds.name}.json"), json.dumps({"runs": grades}, indent=2) + "\n")
        n_files += 1
    return n_files, n_bytes


def _run_json(r: dict[str, Any], arm: ArmDef) -> str:
    """run.json of one synthetic run, with the study's counters and derived fields."""
    L, A, R, D = r["output_tokens"], r["accepted_tokens"], r["draft_rounds"], r["draft_tokens"]
    cens = r["finish_reason"] == "length"
    lbar = A / R
    return _run_template(arm.fc is not None).render({
        "wall_time_seconds": _j(r["wall_time_s"]), "input_tokens": _j(r["input_tokens"]),
        "output_tokens": _j(L), "finish_reason": _j(r["finish_reason"]), "eos_reached": _j(not cens),
        "reached_max_new_tokens": _j(cens), "prompt_tokens": _j(r["input_tokens"]),
        "total_tokens": _j(r["input_tokens"] + L), "completion_tokens": _j(L),
        "analysis_chars": _j(r["analysis_chars"]), "final_chars": _j(r["final_chars"]),
        "reached_final_channel": _j(not cens), "draft_tokens": _j(float(D)), "accepted_tokens": _j(float(A)),
        "draft_rounds": _j(float(R)), "draft_acceptance_rate": _j(A / D), "l_bar": _j(lbar),
        "mean_accept_length": _j(lbar + 1), "L_over_l_bar": _j(L / lbar if A else None),
        "force_commit_fired": _j(r["force_commit_fired"]),
    })


def _spread_accepted(rng: np.random.Generator, R: int, A: int, k: int) -> np.ndarray:
    """Accepted drafts per round: ``A`` spread over ``R`` rounds, each at most ``k``, with some spread."""
    a = np.full(R, A // R, dtype=np.int64)
    extra = A - int(a.sum())
    if extra:
        a[rng.choice(R, extra, replace=False)] += 1
    # Move tokens between random rounds to add spread while keeping the sum and the cap.
    src, dst = rng.integers(0, R, R), rng.integers(0, R, R)
    for s_, d_ in zip(src.tolist(), dst.tolist()):
        if a[s_] > 0 and a[d_] < k:
            a[s_] -= 1
            a[d_] += 1
    return a


def _token_draws(rng: np.random.Generator, n_acc: int, R: int, lossy_share: float):
    """Per emitted token: target p, draft q, uniform u, lossy-only flag (accepted rows only) and target rank."""
    p = np.round(rng.uniform(0.05, 1.0, n_acc + R), 8)
    q = np.round(np.clip(p * np.exp(0.3 * rng.standard_normal(n_acc + R)), 1e-6, 1.0), 8)
    u_draw = rng.uniform(0.0, 1.0, n_acc + R)
    lossy_only = (rng.uniform(0, 1, n_acc) < lossy_share).tolist()
    rank = np.minimum(rng.geometric(0.7, n_acc + R) - 1, 50)
    # Tokens accepted only because of the relaxation are ones the target finds unlikely (the study:
    # median p ~0.15, rank >= 1), with q above p so the lossless test would likely reject them.
    lo_mask = np.zeros(n_acc + R, dtype=bool)
    lo_mask[:n_acc] = lossy_only
    n_lo = int(lo_mask.sum())
    if n_lo:
        p[lo_mask] = np.round(0.001 + 0.6 * rng.beta(1.2, 5.0, n_lo), 8)
        q[lo_mask] = np.round(np.minimum(1.0, p[lo_mask] * rng.uniform(1.5, 6.0, n_lo)), 8)
        rank[lo_mask] = np.minimum(rng.geometric(0.35, n_lo), 50)
    return p, q, u_draw, lossy_only, rank.tolist()


def _proposals(rng: np.random.Generator, r: dict[str, Any], k: int) -> str:
    """proposals.jsonl as the study logs it: one row per emitted token (accepted drafts, then a recovered or bonus token).

    Per round the first a_r drafts are accepted (sum a_r = accepted_tokens, a_r <= k); the round
    then emits a recovered token (the first rejected draft, with its p, q, u) or, when all k were
    accepted, a bonus token. Lossy arms mark a planted share of accepted drafts as lossy-only.
    """
    R = r["draft_rounds"]
    a = _spread_accepted(rng, R, r["accepted_tokens"], k)
    arm: ArmDef = r["arm"]
    lossy = arm.method != STRICT
    method, param = (arm.method, arm.alpha) if lossy else (STRICT, None)
    lines: list[str] = []
    pos = 0
    m_j, p_j = json.dumps(method), _j(param)
    n_acc = int(a.sum())
    p, q, u_draw, lossy_only, rank = _token_draws(rng, n_acc, R, 0.25 if lossy else 0.0)
    idx = 0
    for rnd, ar in enumerate(a.tolist()):
        for pr in range(ar):
            pi, qi = float(p[idx]), float(q[idx])
            ratio = pi / qi
            lo = lossy_only[idx]
            # Strict accepts iff u <= p/q; a lossy-only acceptance has u above p/q.
            u = min(ratio, 1.0) * u_draw[idx] if not lo else min(ratio, 1.0) + (1 - min(ratio, 1.0)) * u_draw[idx]
            strict_ok = not lo or ratio >= 1.0
            lines.append(f'{{"round":{rnd},"batch":0,"pos_in_round":{pr},"output_position":{pos},"p":{_j(pi)},'
                         f'"q":{_j(qi)},"p_over_q":{_j(round(ratio, 6))},"u":{_j(round(float(u), 8))},'
                         f'"relaxation_param":{p_j},"relaxation_method":{m_j},"strict_would_accept":{_j(strict_ok)},'
                         f'"lossy_would_accept":true,"actually_accepted":true,"lossy_only_accepted":{_j(not strict_ok)},'
                         f'"emission_source":"accepted_draft","target_rank":{rank[idx]},"consecutive_accepted_length":{pr + 1}}}')
            pos += 1
            idx += 1
        if ar < k:
            # The first rejected draft: both rules reject it (u above p/q), the target's token is emitted.
            j = n_acc + rnd
            pi = float(p[j])
            qi = float(max(q[j], min(1.0, pi * 1.5)))
            ratio = pi / qi
            u = ratio + (1 - ratio) * float(u_draw[j]) if ratio < 1 else 1.0
            lines.append(f'{{"round":{rnd},"batch":0,"pos_in_round":{ar},"output_position":{pos},"p":{_j(pi)},'
                         f'"q":{_j(qi)},"p_over_q":{_j(round(ratio, 6))},"u":{_j(round(u, 8))},'
                         f'"relaxation_param":{p_j},"relaxation_method":{m_j},"strict_would_accept":false,'
                         f'"lossy_would_accept":false,"actually_accepted":false,"lossy_only_accepted":false,'
                         f'"emission_source":"recovered","target_rank":{rank[j]},"consecutive_accepted_length":{ar}}}')
        else:
            lines.append(f'{{"round":{rnd},"batch":0,"pos_in_round":{ar},"output_position":{pos},'
                         f'"emission_source":"bonus","consecutive_accepted_length":{ar},'
                         f'"relaxation_param":{p_j},"relaxation_method":{m_j}}}')
        pos += 1
    return "\n".join(lines) + "\n"


def raw_roots(spec: SynthSpec, root: str | os.PathLike[str]) -> list[Path]:
    """The per-pair ``runs`` folders :func:`write_raw` writes under ``root``."""
    return [Path(root) / p.slug / "runs" for p in spec.pairs]


def write_raw(spec: SynthSpec, root: str | os.PathLike[str], *, seed: int = 0, proposals: bool | Collection[str] = False,
              workers: int = 1, overwrite: bool = False) -> Path:
    """Write the study's raw layout, one tree per pair (``<root>/<pair_slug>/runs/...``); return ``root``.

    Existing pair trees are replaced when an earlier ``write_raw`` made them (they hold its
    ``.lengthlens-synth`` marker), so stale runs never mix with new ones; any other existing folder
    of that name is an error unless ``overwrite``. ``proposals`` writes proposals.jsonl for every
    dataset (True) or for the named ones (the study traced gsm8k only). ``workers`` > 1 writes (pair, dataset) groups in
    parallel processes; the bytes do not depend on it.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for p in spec.pairs:
        tree = root / p.slug
        if tree.exists():
            if not (overwrite or (tree / SYNTH_MARKER).is_file()):
                raise FileExistsError(f"{tree} exists and was not written by lengthlens.synth; pass overwrite=True to replace it")
            shutil.rmtree(tree)
        tree.mkdir()
        _write(str(tree / SYNTH_MARKER), json.dumps({"generator": "lengthlens.synth", "seed": int(seed),
                                                      "target": p.target, "draft": p.draft}) + "\n")
    jobs = [(spec, pi, di, str(root), seed, proposals) for pi in range(len(spec.pairs)) for di in range(len(spec.datasets))]
    # Biggest groups first so parallel workers finish together.
    jobs.sort(key=lambda j: -_group_cost(spec.datasets[j[2]], spec))
    map_ordered(_write_group, jobs, workers=workers)
    return root


def _group_cost(ds: Dataset, spec: SynthSpec) -> float:
    # Files dominate small runs, characters dominate long ones.
    return ds.n_items * len(spec.arms_of(ds)) * (1.0 + ds.mean_len * ds.chars_per_token / 20000)
