"""Drawing one (pair, dataset) group's runs from a spec: items, lengths, censoring, rounds, time and correctness."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtri

from lengthlens.data.schema import STRICT
from lengthlens.synth.spec import MIN_LEN, Dataset, Effect, Pair, SynthSpec, ArmDef


def _key(*names: str) -> list[int]:
    """Stable 32-bit keys from names (crc32, not hash(): no per-process randomisation)."""
    return [zlib.crc32(n.encode("utf-8")) for n in names]


def rng_for(seed: int, *names: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), *_key(*names)])))


@dataclass
class Items:
    """Per-item quantities shared by every arm and pair of a dataset."""

    mu: np.ndarray  # log-length mean
    sigma: float
    diff: np.ndarray  # item difficulty (standard normal)
    ref: list[str | None]  # reference answer
    ref_num: np.ndarray  # numeric/letter index of the reference
    prompt_tokens: np.ndarray


def _items(ds: Dataset, seed: int) -> Items:
    rng = rng_for(seed, "items", ds.name)
    n = ds.n_items
    z = rng.standard_normal(n)
    diff = rng.standard_normal(n)
    tau = math.sqrt(ds.item_share) * ds.log_sd
    sigma = math.sqrt(1 - ds.item_share) * ds.log_sd
    mu = math.log(ds.mean_len) - ds.log_sd ** 2 / 2 + tau * z
    prompt = np.maximum(1, np.rint(ds.prompt_tokens * np.exp(0.25 * rng.standard_normal(n) - 0.25 ** 2 / 2))).astype(np.int64)
    if ds.kind == "gsm8k":
        num = rng.integers(2, 1000, n)
        ref: list[str | None] = [str(v) for v in num.tolist()]
    elif ds.kind == "boxed":
        num = rng.integers(0, 1000, n)
        ref = [str(v) for v in num.tolist()]
    elif ds.kind == "choice":
        num = rng.integers(0, 4, n)
        ref = ["ABCD"[v] for v in num.tolist()]
    else:
        num = np.zeros(n, dtype=np.int64)
        ref = [None] * n
    return Items(mu, sigma, diff, ref, num, prompt)


def phi(ds: Dataset, e: Effect) -> float:
    """Share of an uncensored completion that is answer, so that think_share of the extra length is thinking."""
    return float(np.clip((ds.final_frac + (1 - e.think_share) * (e.lambda_ - 1)) / e.lambda_, 0.0, 0.95))


def _rounds(rng: np.random.Generator, L: np.ndarray, e: Effect, k: int, spec: SynthSpec):
    w = 1 + spec.rounds_sd * math.sqrt(3) * rng.uniform(-1.0, 1.0, L.shape)
    R = np.rint(L / (e.l_bar + 1) * w).astype(np.int64)
    # Only the extremes of tiny runs can leave these bounds (the spec rules out clipping otherwise).
    R = np.clip(R, -(-L // (k + 1)), np.maximum(L - 1, 1))
    wall = R * e.time_per_round * np.exp(spec.time_sd * rng.standard_normal(L.shape) - spec.time_sd ** 2 / 2)
    return R, wall


def _draw_arm(rng: np.random.Generator, spec: SynthSpec, pair: Pair, ds: Dataset, arm: ArmDef,
              it: Items) -> dict[str, np.ndarray]:
    """One plain arm's (items x seeds) draws: lengths, censoring, answer split, correctness, rounds, time."""
    n, S, B, rho = ds.n_items, len(spec.seeds), ds.budget, spec.item_corr
    e = spec.effect(pair, ds, arm.method, arm.params)
    x = e.lambda_ * np.exp(it.mu[:, None] + it.sigma * rng.standard_normal((n, S)))
    L_true = np.maximum(np.rint(x), MIN_LEN).astype(np.int64)
    cens = L_true >= B
    L = np.minimum(L_true, B)
    F = np.where(cens, 0, np.clip(np.rint(L * phi(ds, e)), 1, L - 1)).astype(np.int64)
    lat = rho * it.diff[:, None] + math.sqrt(1 - rho ** 2) * rng.standard_normal((n, S))
    hit = lat < ndtri(e.accuracy)
    R, wall = _rounds(rng, L, e, pair.k, spec)
    aux = rng.integers(0, 2 ** 31 - 1, (n, S, 2))
    jit = np.exp(0.04 * rng.standard_normal((n, S)))
    return dict(L_true=L_true, cens=cens, L=L, F=F, hit=hit, R=R, wall=wall, aux0=aux[..., 0], aux1=aux[..., 1],
                jit=jit, fired=np.zeros((n, S), bool))


def _draw_force_commit(rng: np.random.Generator, spec: SynthSpec, pair: Pair, ds: Dataset, arm: ArmDef,
                       it: Items, base: dict[str, np.ndarray], be: Effect) -> dict[str, np.ndarray]:
    """A force-commit arm: its base arm's runs, replaced where the thinking reached the threshold."""
    n, S, B, rho = ds.n_items, len(spec.seeds), ds.budget, spec.item_corr
    t = arm.fc.threshold_for(B)
    fired = (base["L"] - base["F"]) >= t
    Ff = min(max(1, int(round(ds.final_frac * ds.mean_len))), B - t - 1)
    Lf = np.full((n, S), t + Ff, dtype=np.int64)
    lat = rho * it.diff[:, None] + math.sqrt(1 - rho ** 2) * rng.standard_normal((n, S))
    hitf = lat < ndtri(arm.fc.accuracy_after)
    Rf, wallf = _rounds(rng, Lf, be, pair.k, spec)
    d = {name: v.copy() for name, v in base.items()}
    for name, v in (("L_true", Lf), ("cens", False), ("L", Lf), ("F", Ff), ("hit", hitf), ("R", Rf), ("wall", wallf)):
        d[name] = np.where(fired, v, base[name])
    d["fired"] = fired
    return d


def item_group(spec: SynthSpec, pair: Pair, ds: Dataset, seed: int) -> dict[str, Any]:
    """All runs of one (pair, dataset), arm after arm, item-major, as columns of numpy arrays."""
    it = _items(ds, seed)
    n, S = ds.n_items, len(spec.seeds)
    strict_e = spec.effect(pair, ds, STRICT, STRICT)
    cols: dict[str, list[np.ndarray]] = {}
    arm_rows: list[ArmDef] = spec.arms_of(ds)
    drawn: list[dict[str, np.ndarray]] = []
    for ai, arm in enumerate(arm_rows):
        rng = rng_for(seed, pair.target, pair.draft, ds.name, arm.method, arm.params)
        if arm.fc is None:
            d = _draw_arm(rng, spec, pair, ds, arm, it)
        else:
            base_arm = arm_rows[arm.base]
            be = spec.effect(pair, ds, base_arm.method, base_arm.params)
            d = _draw_force_commit(rng, spec, pair, ds, arm, it, drawn[arm.base], be)
        drawn.append(d)
        for name, v in d.items():
            cols.setdefault(name, []).append(v.reshape(-1))
        cols.setdefault("arm", []).append(np.full(n * S, ai, dtype=np.int64))
        cols.setdefault("item", []).append(np.repeat(np.arange(n), S))
        cols.setdefault("seed", []).append(np.tile(np.asarray(spec.seeds, dtype=np.int64), n))
    g = {k: np.concatenate(v) for k, v in cols.items()}
    g["T"] = g["L"] - g["F"]
    g["A"] = g["L"] - g["R"]
    g["D"] = pair.k * g["R"]
    g["answered"] = ~g["cens"]
    g["correct_if"] = g["hit"] & g["answered"]
    g["arms"] = arm_rows
    g["items"] = it
    g["strict_e"] = strict_e
    return g
