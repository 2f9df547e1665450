"""Coverage and error rates of lengthlens' default intervals and accuracy rules, against known truth.

    python benchmarks/validate.py [--quick] [--reps N] [--seed S] [--workers W] [--write-doc docs/validation.md]

Everything goes through the public API: synthetic records with a known truth are written as a flat
Parquet file, read with ``lengthlens.load`` and analysed with ``lengthlens.cells`` at its defaults
(10,000 resamples, 95 %), and each cell's estimates are compared with the truth. So the figures are
those of whatever the defaults are when it runs. It prints Markdown (the tables of docs/validation.md):

1. coverage of every registry metric that has an interval, at n = 3/12/30/150 items, 1 and 4 seeds
   per item, without and with censoring at the token budget (``--reps`` cells per setting);
2. the exact coverage of the accuracy change's interval, one run per item: every paired 2×2 table
   at n = 12 and 30 goes through ``cells`` once, and the coverage at each (discordance, true change)
   is the sum of the probabilities of the tables whose interval holds the truth;
3. the accuracy-loss flag's rate at its −2-point boundary and at drops of 5/10/20 points (exact for
   one seed, by simulation with 4 seeds), with the accuracy test's rejection rate at no change;
4. the multiplicity family rule: study-shaped reports of many cells (3-item probes, partly graded
   cells, 12- and 30-item cells; most without change, some with real drops), and what Holm and
   Benjamini–Hochberg over the report's family reject.

The data generator is this script's own (not ``lengthlens.synth``), matched to the spread of the
study's logs (``../shared/data/lossy-token-eff/runs``: 12 items a cell, between-item SD of log length
0.5–1.2, SD of an item's log length ratio ≈ 0.47, ℓ̄* ≈ 2.2 and ℓ̄ ≈ 3.1 with a per-run SD ≈ 0.38,
per-round time ratio SD ≈ 0.05, 0–25 % of runs at the budget, 8–10 % discordant pairs). Per item i
(z's standard normal, independent):

* strict log length ``mu_i = log 1200 + 0.8 z``; a relaxed arm's own log-length effect ``b_i = 0.3 z``;
  each run's length is ``exp(mu_i + 0.25 z)`` (strict) or ``LAMBDA0 · exp(mu_i + b_i + 0.25 z)``,
  rounded (at least 4 tokens), and capped at the budget (``finish_reason = "length"``) when censored;
* per-run acceptance ``a = 2.2 + 0.3 z_i + 0.2 z`` (strict) and ``a + 0.9 + 0.2 z_i' + 0.2 z`` (relaxed,
  clipped to [0.3, 5.5]); rounds ``R = max(1, round(L / (a + 1)))``, accepted ``A = L − R``;
* wall time ``T = R · 0.02 s · c · (1 + L / 16000) · exp(0.05 z)`` (a round costs more as the context
  grows; ``c`` = 1 strict, 1.03 relaxed);
* correctness: the baseline run is correct with probability ``p*`` (an item's seeds repeat its first
  verdict with probability 0.5, else draw afresh), the relaxed run of a pair is correct with
  probability ``1 − r2w/p*`` after a correct baseline and ``w2r/(1 − p*)`` after a wrong one, where
  ``w2r = (d + Δ)/2`` and ``r2w = (d − Δ)/2``: so each pair is discordant with probability ``d`` and
  the true accuracy change is exactly ``Δ``. Correctness does not depend on length.

The truth of each ratio metric is its definition applied to expectations over the item population
(ratios of expected sums: λ = E L / E L*, gain = (E ℓ̄ + 1)/(E ℓ̄* + 1), R/R*, T/T*, time per round =
(T/T*)/(R/R*), ...), computed by Monte Carlo on 2,000,000 items (relative error below 0.1 %, far
inside every interval's width); the uncensored λ is also known analytically, LAMBDA0 · exp(0.3²/2),
and the Monte Carlo value is checked against it. The accuracy change's truth is Δ, exactly.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lengthlens as ll  # noqa: E402
from lengthlens.execution import map_ordered  # noqa: E402
from lengthlens.stats import metrics  # noqa: E402

LAMBDA0 = 1.3  # the relaxed arm's length scale; the population λ is LAMBDA0 · exp(0.3² / 2) uncensored
BUDGET = 3500  # tokens: about 10 % of strict and 20 % of relaxed runs reach it
NO_BUDGET = 10**9
P_STAR = 0.7  # baseline accuracy
SEED_REPEAT = 0.5  # chance an item's later seed repeats its first baseline verdict
ACC = (0.15, -0.05)  # (discordance, true change) of the coverage grid's accuracy
SIZES = (3, 12, 30, 150)
SEEDS = (1, 4)
DISCORDANCE = (0.10, 0.15, 0.25)
CHANGES_PP = (0, -2, -5, -10, -20)
LEVEL = 0.95
DEFAULT_SEED = 20260817


# ------------------------------------------------------------------------------------------------
# The data generator
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArmSpec:
    """A relaxed arm: its method name, length scale and accuracy (discordance, change; proportions)."""

    method: str
    lambda0: float = LAMBDA0
    discordance: float = ACC[0]
    change: float = ACC[1]


def _runs(rng: np.random.Generator, n_items: int, n_seeds: int, budget: int, arms: tuple[ArmSpec, ...],
          p_star: float = P_STAR, graded_items: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """One group's runs: arm name -> field -> (n_items * n_seeds,) array, item-major; ``strict`` first."""
    n = n_items * n_seeds
    item = np.repeat(np.arange(n_items), n_seeds)
    mu = np.log(1200.0) + 0.8 * rng.standard_normal(n_items)
    a_item = 2.2 + 0.3 * rng.standard_normal(n_items)
    first = rng.random(n_items) < p_star
    repeat = rng.random(n) < SEED_REPEAT
    repeat[np.arange(0, n, n_seeds)] = True  # the first seed is the item's verdict
    c_star = np.where(repeat, first[item], rng.random(n) < p_star)
    graded = item < (n_items if graded_items is None else graded_items)

    def run(log_len: np.ndarray, a: np.ndarray, cost: float) -> dict[str, np.ndarray]:
        full = np.maximum(4.0, np.round(np.exp(log_len)))
        L = np.minimum(full, budget)
        R = np.maximum(1.0, np.round(L / (np.clip(a, 0.3, 5.5) + 1.0)))
        T = R * 0.02 * cost * (1.0 + L / 16000.0) * np.exp(0.05 * rng.standard_normal(n))
        return {"output_tokens": L, "draft_rounds": R, "accepted_tokens": L - R, "wall_time_s": T, "censored": full >= budget}

    out = {"strict": {**run(mu[item] + 0.25 * rng.standard_normal(n), a_item[item] + 0.2 * rng.standard_normal(n), 1.0),
                      "correct": c_star, "graded": graded}}
    for arm in arms:
        b = 0.3 * rng.standard_normal(n_items)
        extra = 0.9 + 0.2 * rng.standard_normal(n_items)
        r = run(np.log(arm.lambda0) + mu[item] + b[item] + 0.25 * rng.standard_normal(n),
                a_item[item] + extra[item] + 0.2 * rng.standard_normal(n), 1.03)
        w2r, r2w = (arm.discordance + arm.change) / 2, (arm.discordance - arm.change) / 2
        u = rng.random(n)
        r["correct"] = np.where(c_star, u >= r2w / p_star, u < w2r / (1 - p_star))
        r["graded"] = graded
        out[arm.method] = r
    return out


def records(groups: list[tuple[str, dict[str, dict[str, np.ndarray]]]], n_seeds: int, budget: int) -> pl.DataFrame:
    """Flat run records (the library's input) for groups of runs, one dataset per group."""
    parts = []
    for dataset, runs in groups:
        for method, f in runs.items():
            n = len(f["output_tokens"])
            item = np.arange(n) // n_seeds
            parts.append(pl.DataFrame({
                "target": ["T"] * n, "draft": ["D"] * n, "dataset": [dataset] * n, "method": [method] * n,
                "params": ["strict" if method == "strict" else "alpha0.3"] * n,
                "item_id": [f"i{i:03d}" for i in item], "seed": (np.arange(n) % n_seeds).astype(np.int64),
                "status": ["ok"] * n, "output_tokens": f["output_tokens"].astype(np.int64),
                "finish_reason": np.where(f["censored"], "length", "stop").tolist(),
                "max_new_tokens": np.full(n, budget, dtype=np.int64),
                "draft_rounds": f["draft_rounds"].astype(np.int64), "accepted_tokens": f["accepted_tokens"].astype(np.int64),
                "wall_time_s": f["wall_time_s"],
                "correct": np.asarray(f["correct"], dtype=bool), "graded": np.asarray(f["graded"], dtype=bool),
            }).with_columns(pl.when(pl.col("graded")).then(pl.col("correct")).otherwise(None).alias("correct")).drop("graded"))
    return pl.concat(parts)


def analyse(frame: pl.DataFrame, n_resamples: int | None = None):
    """``lengthlens.cells`` at its defaults on records: written as Parquet, read back with ``lengthlens.load``."""
    with tempfile.TemporaryDirectory(prefix="lengthlens-validate-") as tmp:
        path = Path(tmp) / "runs.parquet"
        frame.write_parquet(path)
        runs = ll.load(path, with_text=False, run_graders=False)
        return ll.cells(runs) if n_resamples is None else ll.cells(runs, n_resamples=n_resamples)


# ------------------------------------------------------------------------------------------------
# Truth
# ------------------------------------------------------------------------------------------------

def truth(budget: int, n_items: int = 2_000_000, seed: int = 1) -> dict[str, float]:
    """Each interval metric's population value: its definition on expected sums (Monte Carlo on ``n_items``)."""
    rng = np.random.default_rng([seed, budget])
    runs = _runs(rng, n_items, 1, budget, (ArmSpec("relaxed"),))
    s, r = runs["strict"], runs["relaxed"]
    lbar, lbar_star = (r["accepted_tokens"] / r["draft_rounds"]).mean(), (s["accepted_tokens"] / s["draft_rounds"]).mean()
    lam = r["output_tokens"].sum() / s["output_tokens"].sum()
    rr = r["draft_rounds"].sum() / s["draft_rounds"].sum()
    tt = r["wall_time_s"].sum() / s["wall_time_s"].sum()
    gain_pooled = ((r["accepted_tokens"].sum() / r["draft_rounds"].sum() + 1)
                   / (s["accepted_tokens"].sum() / s["draft_rounds"].sum() + 1))
    out = {"l_bar": lbar, "gain": (lbar + 1) / (lbar_star + 1), "gain_pooled": gain_pooled, "lambda": lam,
           "rounds_ratio": rr, "rounds_ratio_predicted": lam / gain_pooled, "time_ratio": tt,
           "time_per_round_ratio": tt / rr, "throughput_ratio": lam / tt, "accuracy_delta_pp": 100 * ACC[1]}
    # Metrics this script does not know by name: the registry's definition on the population's sums.
    reg = metrics.registry()
    fields = {k: np.asarray(v, dtype=float) for k, v in r.items() if k != "graded"}
    fields |= {f"{k}_star": np.asarray(v, dtype=float) for k, v in s.items() if k != "graded"}
    fields["max_new_tokens"] = fields["max_new_tokens_star"] = np.full(n_items, float(budget))
    sums = {q: v.sum() for q, v in reg.quantities_of(fields, n_items).items()}
    for name in reg.interval_metrics:
        if name not in out:
            out[name] = float(reg.evaluate(sums, [name])[name])
    return out


# ------------------------------------------------------------------------------------------------
# 1. Coverage of every default interval
# ------------------------------------------------------------------------------------------------

#: Metrics that are a ratio of two sums, so a weighted mean of the item ratios: no resample can leave their range.
RATIOS_OF_SUMS = {"lambda": ("output_tokens", "output_tokens"), "rounds_ratio": ("draft_rounds", "draft_rounds"),
                  "time_ratio": ("wall_time_s", "wall_time_s")}


def coverage_task(args: tuple[int, int, int, int, int, int]) -> dict[str, np.ndarray]:
    """Cells of one setting: per interval metric, (lo, hi, method is the asked one) for ``reps`` replicates."""
    seed, n_items, n_seeds, budget, chunk, reps = args
    rng = np.random.default_rng([seed, n_items, n_seeds, budget, chunk])
    groups = [(f"r{chunk}_{k}", _runs(rng, n_items, n_seeds, budget, (ArmSpec("relaxed"),))) for k in range(reps)]
    table = analyse(records(groups, n_seeds, budget))
    out: dict[str, np.ndarray] = {}
    for name, (num, den) in RATIOS_OF_SUMS.items():  # each cell's range of item ratios, in cell order
        ranges = {}
        for dataset, runs in groups:
            item = np.arange(n_items * n_seeds) // n_seeds
            r = np.bincount(item, runs["relaxed"][num]) / np.bincount(item, runs["strict"][den])
            ranges[dataset] = (r.min(), r.max())
        out[name + ":range"] = np.array([ranges[c.dataset] for c in table])
    for name in metrics.registry().interval_metrics:
        est = [c[name] for c in table]
        ci = [e.confidence_interval for e in est]
        out[name] = np.array([[c.low, c.high] for c in ci], dtype=float)
        out[name + ":method"] = np.array([e.method for e in est])
    return out


def coverage_grid(seed: int, reps: int, sizes, workers: int, chunk: int = 100):
    tasks, keys = [], []
    for budget in (NO_BUDGET, BUDGET):
        for n_seeds in SEEDS:
            for n in sizes:
                for k in range(math.ceil(reps / chunk)):
                    tasks.append((seed, n, n_seeds, budget, k, min(chunk, reps - k * chunk)))
                    keys.append((budget, n_seeds, n))
    results = map_ordered(coverage_task, tasks, workers=workers, cost=lambda t: t[1] * t[2] * t[5])
    merged: dict[tuple, dict[str, np.ndarray]] = {}
    for key, res in zip(keys, results):
        m = merged.setdefault(key, {})
        for name, v in res.items():
            m[name] = np.concatenate([m[name], v]) if name in m else v
    return merged


def summarise(limits: np.ndarray, true: float) -> dict[str, float]:
    lo, hi = limits[:, 0], limits[:, 1]
    undefined = np.isnan(lo) | np.isnan(hi)
    covered = (lo <= true) & (true <= hi)
    return {"coverage": covered.mean(), "below": (hi < true).mean(), "above": (lo > true).mean(),
            "undefined": undefined.mean(), "unbounded": (np.isinf(lo) | np.isinf(hi)).mean()}


# ------------------------------------------------------------------------------------------------
# 2. The exact coverage grid of the accuracy change (one run per item)
# ------------------------------------------------------------------------------------------------

def tables_of(n: int) -> np.ndarray:
    """Every paired 2×2 table of n items: rows (both right, relaxed only right, baseline only right, both wrong)."""
    return np.array([(a, b, c, n - a - b - c) for a in range(n + 1) for b in range(n + 1 - a) for c in range(n + 1 - a - b)])


def accuracy_rules(n: int, workers: int = 1, by_discordant: bool = False, chunk: int = 500) -> dict[str, np.ndarray]:
    """The library's default accuracy-change interval, flag and test for every 2×2 table of n items, by ``cells``.

    A pure function of n (same numbers for any ``workers``): one cell per table, each its own dataset,
    whose items are the table's pairs; lengths and counters are the same on every run (only verdicts differ).
    ``by_discordant``: one cell per discordant pair (b, c) stands for every table with those counts
    (valid where :func:`depends_on_discordant_only` holds).
    """
    tabs = tables_of(n)
    if by_discordant:
        bc, back = np.unique(tabs[:, 1:3], axis=0, return_inverse=True)
        rest = n - bc.sum(axis=1)
        run = np.column_stack([rest - rest // 3, bc, rest // 3])
    else:
        run, back = tabs, np.arange(len(tabs))
    parts = map_ordered(_rules_of_tables, [(t, run[t:t + chunk]) for t in range(0, len(run), chunk)], workers=workers)
    return {"tables": tabs} | {k: np.concatenate([p[k] for p in parts])[np.ravel(back)] for k in parts[0]}


def depends_on_discordant_only(rules: dict[str, np.ndarray]) -> bool:
    """Whether every rule's value is the same on all tables with the same discordant counts (b, c)."""
    _, key = np.unique(rules["tables"][:, 1:3], axis=0, return_inverse=True)
    key = np.ravel(key)
    for name, v in rules.items():
        if name == "tables":
            continue
        first = np.zeros(key.max() + 1, dtype=int)
        first[key[::-1]] = np.arange(len(key))[::-1]  # the first table of each (b, c)
        ref = v[first[key]]
        same = (v == ref) | (_isnan(v) & _isnan(ref))
        if not same.all():
            return False
    return True


def _isnan(v: np.ndarray) -> np.ndarray:
    return np.isnan(v) if v.dtype.kind == "f" else np.zeros(v.shape, dtype=bool)


def _rules_of_tables(args: tuple[int, np.ndarray]) -> dict[str, np.ndarray]:
    start, tabs = args
    n = int(tabs[0].sum())
    parts = []
    for t, (a, b, c, d) in enumerate(tabs, start):
        rel = np.repeat([True, True, False, False], [a, b, c, d])
        base = np.repeat([True, False, True, False], [a, b, c, d])
        for method, correct in (("strict", base), ("relaxed", rel)):
            parts.append(pl.DataFrame({
                "target": "T", "draft": "D", "dataset": f"t{t}", "method": method,
                "params": "strict" if method == "strict" else "alpha0.3", "item_id": [f"i{i:03d}" for i in range(n)],
                "seed": 0, "status": "ok", "output_tokens": 100, "finish_reason": "stop", "max_new_tokens": 1000,
                "draft_rounds": 30, "accepted_tokens": 70, "wall_time_s": 1.0, "correct": correct}))
    table = analyse(pl.concat(parts, how="vertical_relaxed"))
    by_name = {c.dataset: c for c in table}
    cells_ = [by_name[f"t{t}"] for t in range(start, start + len(tabs))]
    ci = [c["accuracy_delta_pp"].confidence_interval for c in cells_]
    mdd = [getattr(c, "accuracy_mdd_pp", None) for c in cells_]
    return {"lo": np.array([x.low for x in ci]), "hi": np.array([x.high for x in ci]),
            "method": np.array([c["accuracy_delta_pp"].method for c in cells_]),
            "flag": np.array([bool(c.drop_2pp) for c in cells_]),
            "p": np.array([np.nan if c.accuracy_test is None else c.accuracy_test.pvalue for c in cells_]),
            "mdd": np.array([np.nan if m is None else float(m) for m in mdd])}


def table_probabilities(tabs: np.ndarray, discordance: float, change: float, p_star: float = P_STAR) -> np.ndarray | None:
    """Multinomial probability of each table when pairs are discordant with probability d and the change is Δ."""
    w2r, r2w = (discordance + change) / 2, (discordance - change) / 2
    p = np.array([p_star - r2w, w2r, r2w, 1 - p_star - w2r])
    if (p < -1e-12).any():
        return None  # a change larger than the discordance cannot happen
    return sps.multinomial.pmf(tabs, tabs[0].sum(), np.clip(p, 0, 1))


def _closed_form_check(exact: dict[int, dict[str, np.ndarray]]) -> str:
    """Where the library has Tango's score interval, how far the cells' intervals are from it (the closed path)."""
    try:
        from lengthlens.stats.paired import tango_interval
    except ImportError:
        return ""
    gap = 0.0
    for e in exact.values():
        for (_, b, c, _), lo, hi in zip(e["tables"], e["lo"], e["hi"]):
            t_lo, t_hi = tango_interval(int(b), int(c), int(e["tables"][0].sum()))
            gap = max(gap, abs(100 * t_lo - lo), abs(100 * t_hi - hi))
    return (f"The cells' intervals are `lengthlens.stats.paired.tango_interval`'s to {gap:.1g} points on every table."
            if gap < 1e-6 else f"The cells' intervals differ from Tango's score interval by up to {gap:.2g} points.")


# ------------------------------------------------------------------------------------------------
# 3. The flag with several seeds, and 4. the family rule (simulation)
# ------------------------------------------------------------------------------------------------

def _feasible_arms() -> tuple[ArmSpec, ...]:
    return tuple(ArmSpec(f"d{int(d * 100)}c{-c}", discordance=d, change=c / 100)
                 for d in DISCORDANCE for c in CHANGES_PP if abs(c / 100) <= d + 1e-12)


def flag_task(args: tuple[int, int, int, int, int]) -> dict[str, np.ndarray]:
    """Cells with several seeds per item, one per feasible (discordance, change): interval, flag, test p."""
    seed, n_items, n_seeds, chunk, reps = args
    rng = np.random.default_rng([seed, 7, n_items, n_seeds, chunk])
    arms = _feasible_arms()
    groups = [(f"f{chunk}_{k}", _runs(rng, n_items, n_seeds, NO_BUDGET, arms)) for k in range(reps)]
    table = analyse(records(groups, n_seeds, NO_BUDGET))
    out = {}
    for arm in arms:
        cs = [c for c in table if c.method == arm.method]
        ci = [c["accuracy_delta_pp"].confidence_interval for c in cs]
        out[arm.method] = np.array([[x.low, x.high, bool(c.drop_2pp),
                                     np.nan if c.accuracy_test is None else c.accuracy_test.pvalue,
                                     np.nan if getattr(c, "accuracy_mdd_pp", None) is None else c.accuracy_mdd_pp]
                                    for x, c in zip(ci, cs)], dtype=float)
    return out


#: A study-shaped report: (items, graded items, datasets, arms per dataset).
FAMILY = ((12, 12, 6, 15), (30, 30, 2, 10), (3, 3, 4, 5), (12, 5, 2, 5))
FAMILY_DROPS = (0.10, 0.20, 0.30)  # in every third arm of the 12- and 30-item datasets, cycling


def family_task(args: tuple[int, bool, int]) -> list[tuple]:
    """One report: per cell (n items, n graded, true change, in the family, the family can reject, p, Holm, BH)."""
    seed, with_drops, rep = args
    rng = np.random.default_rng([seed, 11, int(with_drops), rep])
    groups, truth_of = [], {}
    for n, graded, n_ds, n_arms in FAMILY:
        for k in range(n_ds):
            arms = []
            for j in range(n_arms):
                drop = FAMILY_DROPS[(j // 3) % 3] if with_drops and graded == n and n >= 12 and j % 3 == 2 else 0.0
                arms.append(ArmSpec(f"a{j}", discordance=drop + 0.10 if drop else ACC[0], change=-drop))
            name = f"n{n}g{graded}_{k}"
            groups.append((name, _runs(rng, n, 1, NO_BUDGET, tuple(arms), graded_items=graded)))
            truth_of |= {(name, a.method): (n, graded, a.change) for a in arms}
    table = analyse(records(groups, 1, NO_BUDGET), n_resamples=200)  # the tests do not resample
    can_reject = _family_can_reject(table)
    return [(*truth_of[(c.dataset, c.method)], c.accuracy_p_holm is not None, can_reject,
             np.nan if c.accuracy_test is None else c.accuracy_test.pvalue,
             np.nan if c.accuracy_p_holm is None else c.accuracy_p_holm,
             np.nan if c.accuracy_q_bh is None else c.accuracy_q_bh) for c in table]


def _family_can_reject(table) -> float:
    """Whether the library says some cell of the family could reach significance (NaN where it does not say)."""
    try:
        from lengthlens.analyses.cells import accuracy_family
    except ImportError:
        return math.nan
    return float(accuracy_family(table).can_reject)


def worst_case_level(n: int, reject, drop: float, psi_max: float = 1.0, grid: int = 4001) -> tuple[float, float]:
    """The largest rejection rate of a paired test on n pairs over the background discordance ψ ≤ psi_max at a true
    drop ``drop`` (p10 = ψ/2, p01 = ψ/2 + drop), exactly: every table's verdict once, its probability on a grid of
    ψ refined around the maximum. Returns (level, the ψ where it is reached)."""
    from scipy import optimize

    from lengthlens.stats.paired import table_probabilities as probs, tables

    b, c = tables(n)
    rej = np.array([bool(reject(int(x), int(y), n)) for x, y in zip(b, c)])
    top = min(psi_max, 1.0 - drop)

    def size(psi: float) -> float:
        return float(np.sum(probs(n, psi / 2, psi / 2 + drop)[rej]))

    psis = np.linspace(0.0, top, grid)
    sizes = np.array([size(x) for x in psis])
    i = int(np.argmax(sizes))
    r = optimize.minimize_scalar(lambda x: -size(x), bounds=(psis[max(i - 1, 0)], psis[min(i + 1, grid - 1)]),
                                 method="bounded", options={"xatol": 1e-10})
    return (float(-r.fun), float(r.x)) if -r.fun > sizes[i] else (float(sizes[i]), float(psis[i]))


def _report_worst_case(sizes: tuple[int, ...]) -> None:
    from lengthlens.stats.mcnemar import mcnemar_exact, mcnemar_midp
    from lengthlens.stats.paired import ALPHA_ONE_SIDED, MARGIN, noninferiority_test

    tests = (("loss flag, Δ = −2 pp, one-sided 2.5 %", lambda b, c, n: noninferiority_test(b, c, n).pvalue < ALPHA_ONE_SIDED, MARGIN),
             ("mid-p McNemar, Δ = 0, 5 %", lambda b, c, n: mcnemar_midp(b, c) < 0.05, 0.0),
             ("exact McNemar, Δ = 0, 5 %", lambda b, c, n: mcnemar_exact(b, c) < 0.05, 0.0))
    rows = []
    for name, reject, drop in tests:
        row = [name]
        for n in sizes:
            level, at = worst_case_level(n, reject, drop)
            plausible, _ = worst_case_level(n, reject, drop, psi_max=0.5)
            row.append(f"{100 * level:.2f} (ψ = {at:.2f}); {100 * plausible:.2f} for ψ ≤ 0.5")
        rows.append(row)
    print("\nWorst case over the nuisance parameter (exact, one run per item): the largest rejection rate at the null "
          "over every background discordance ψ (where it is reached), and over ψ ≤ 0.5; the grid values above are "
          "rates at single ψ, not the tests' levels.\n")
    print(md(["test", *[f"n = {n}" for n in sizes]], rows))


# ------------------------------------------------------------------------------------------------
# 5. Rule-level pooled estimates (lengthlens.rules), on lengthlens.synth's planted truth
# ------------------------------------------------------------------------------------------------

#: Study shapes of the pooled check: (items per cell, seeds per item); six datasets each.
POOLED_SHAPES = ((12, 1), (30, 1), (12, 4), (30, 4))
#: Six dataset slots shaped like the study's: name, token budget, answer kind, strict mean length, SD of log length.
#: The budgets put 0–25 % of the relaxed runs at the budget; the heavy right tail (SD 0.9–1.0) gives rare runaway
#: items, cut at the budget; mtbench is ungraded, as in the study.
POOLED_SLOTS = (("gsm8k", 2048, "gsm8k", 300, 0.7), ("aime24", 16384, "boxed", 7000, 1.0),
                ("humaneval", 9000, "code", 700, 0.6), ("livecodebench", 12000, "code", 3750, 0.9),
                ("mtbench", 4096, "chat", 1700, 0.8), ("longbench_v2", 8192, "choice", 1500, 0.8))
POOLED_STRICT_ACC = {"gsm8k": 0.9, "aime24": 0.6, "humaneval": 0.8, "livecodebench": 0.5, "mtbench": 0.8,
                     "longbench_v2": 0.55}
#: Rules: mean λ, mean gain, mean accuracy change (points) across datasets; two of each change, for the power rows.
POOLED_RULES = {"p0a": (1.45, 1.30, 0.0), "p2a": (1.45, 1.30, -2.0), "p5a": (1.45, 1.30, -5.0),
                "p0b": (1.20, 1.35, 0.0), "p2b": (1.60, 1.20, -2.0), "p5b": (1.30, 1.40, -5.0)}
#: Between-dataset SDs of the planted effects: log λ, log gain (so log R/R* and log T/T* too), accuracy (points).
POOLED_TAU = (0.15, 0.05, 3.0)
POOLED_METRICS = ("rounds_ratio", "time_ratio", "lambda", "accuracy_delta_pp")
POOLED_REPS_PER_LOAD = 10
STRICT_LBAR = 2.4


def _pooled_effects(rng: np.random.Generator) -> dict[tuple[str, str], tuple[float, float, float]]:
    """One draw of every (rule, slot) effect: λ, gain and the relaxed accuracy (a proportion)."""
    t_lam, t_gain, t_acc = POOLED_TAU
    out = {}
    for slot, *_ in POOLED_SLOTS:
        for rule, (lam, gain, d) in POOLED_RULES.items():
            acc = POOLED_STRICT_ACC[slot] + (d + t_acc * rng.standard_normal()) / 100
            out[rule, slot] = (lam * math.exp(t_lam * rng.standard_normal()), gain * math.exp(t_gain * rng.standard_normal()),
                               float(np.clip(acc, 0.02, 0.99)))
    return out


def _pooled_spec(effects, target: str, n_items: int, n_seeds: int):
    """A lengthlens.synth spec of one study: one pair, the six slots, strict and the six rules at those effects."""
    from dataclasses import replace

    from lengthlens.synth import Arm, CellEffect, Dataset, Effect, Pair, SynthSpec, alpha_params

    datasets = tuple(Dataset(name, n_items, budget, kind, mean, sd) for name, budget, kind, mean, sd in POOLED_SLOTS)
    s = Effect(lambda_=1.0, l_bar=STRICT_LBAR, accuracy=0.8, time_per_round=0.025)
    alphas = {rule: 0.05 * (i + 1) for i, rule in enumerate(POOLED_RULES)}
    arms = tuple(Arm(rule, alphas[rule], replace(s, lambda_=lam, l_bar=(STRICT_LBAR + 1) * g - 1, time_per_round=0.026))
                 for rule, (lam, g, _) in POOLED_RULES.items())
    cells = [CellEffect(target, "D", d.name, "strict", "strict", replace(s, accuracy=POOLED_STRICT_ACC[d.name]))
             for d in datasets]
    cells += [CellEffect(target, "D", slot, rule, alpha_params(alphas[rule]),
                         Effect(lambda_=lam, l_bar=(STRICT_LBAR + 1) * g - 1, accuracy=acc, time_per_round=0.026))
              for (rule, slot), (lam, g, acc) in effects.items()]
    return SynthSpec(pairs=(Pair(target, "D", k=6),), datasets=datasets, arms=arms, strict=s,
                     seeds=tuple(range(n_seeds)), cells=tuple(cells))


def _pooled_truth(spec) -> dict[tuple[str, str], dict[str, float]]:
    """Each relaxed cell's planted value on the pooling scale: log ratios of the observed (capped) means, Δacc in points."""
    from lengthlens.synth import truth as synth_truth

    out = {}
    for r in synth_truth(spec).filter(pl.col("method") != "strict").iter_rows(named=True):
        rr = r["lambda_censored"] / r["gain"]  # rounds are the observed length over (ℓ̄ + 1)
        tpr = r["time_ratio"] / r["rounds_ratio"]
        acc = r["accuracy_expected"]
        out[r["method"], r["dataset"]] = {
            "rounds_ratio": math.log(rr), "time_ratio": math.log(rr * tpr), "lambda": math.log(r["lambda_censored"]),
            "accuracy_delta_pp": math.nan if acc is None else 100 * (acc - r["accuracy_strict_expected"])}
    return out


def _these(truth_of: dict, rule: str, metric: str) -> float:
    """The these-datasets truth: the mean over the rule's slots of the cells' planted values (graded ones for Δacc)."""
    v = [t[metric] for (r, _), t in truth_of.items() if r == rule]
    return float(np.nanmean(v))


def pooled_across_mean(seed: int, draws: int) -> dict[tuple[str, str], float]:
    """The across-dataset mean μ per (rule, metric): the these-datasets truth averaged over draws of the effects."""
    rng = np.random.default_rng([seed, 31])
    acc: dict[tuple[str, str], list[float]] = {}
    for _ in range(draws):
        truth_of = _pooled_truth(_pooled_spec(_pooled_effects(rng), "T", 12, 1))
        for rule in POOLED_RULES:
            for m in POOLED_METRICS:
                acc.setdefault((rule, m), []).append(_these(truth_of, rule, m))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def pooled_task(args: tuple[int, int, int, int]) -> list[tuple]:
    """``POOLED_REPS_PER_LOAD`` studies in one load (each its own target): per study, rule and metric, the pooled
    intervals (default, the accuracy change also unfloored), the fixed-effect one, the prediction interval, the
    truths, and the accuracy verdict."""
    import tempfile as _tf

    from lengthlens.synth import simulate

    seed, n_items, n_seeds, chunk = args
    rng = np.random.default_rng([seed, 29, n_items, n_seeds, chunk])
    frames, truths, new = [], {}, {}
    for k in range(POOLED_REPS_PER_LOAD):
        target = f"T{chunk}_{k}"
        spec = _pooled_spec(_pooled_effects(rng), target, n_items, n_seeds)
        frames.append(simulate(spec, seed=int(rng.integers(2**31))))
        truths[target] = _pooled_truth(spec)
        fresh = _pooled_truth(_pooled_spec(_pooled_effects(rng), target, n_items, n_seeds))  # a new dataset's effect
        slot = POOLED_SLOTS[int(rng.integers(len(POOLED_SLOTS)))][0]
        new[target] = {rule: fresh[rule, slot] for rule in POOLED_RULES}
    from lengthlens.data.schema import POLARS_SCHEMA

    with _tf.TemporaryDirectory(prefix="lengthlens-validate-") as tmp:
        path = Path(tmp) / "runs.parquet"
        pl.concat(frames).select(POLARS_SCHEMA.names()).write_parquet(path)
        runs = ll.load(path, with_text=False, run_graders=False, cache=False)
        # The pooled estimates read each cell's point, delta-method SE and 2×2 counts: no resample enters them.
        table = ll.cells(runs, n_resamples=100)
    out = []
    for floor in (True, False):
        for r in ll.rules(table, floor_accuracy=floor):
            if r.target == "all":
                continue
            for m in POOLED_METRICS if floor else ("accuracy_delta_pp",):
                p = r.pooled.get(m)
                if p is None:
                    continue
                fresh = new[r.target][r.method][m]
                out.append((n_items, n_seeds, floor, r.method, m, p.low, p.high, p.fixed_effect_interval.low,
                            p.fixed_effect_interval.high, p.prediction_interval.low, p.prediction_interval.high,
                            _these(truths[r.target], r.method, m), fresh, p.k, float(p.floored),
                            r.verdict_accuracy, p.high < 0))
    return out


def _report_pooled(args: argparse.Namespace, workers: int, reps: int) -> None:
    """Section 5: coverage of the pooled intervals and the power of the rule-level accuracy verdict."""
    draws = 200 if args.quick else 4000
    shapes = ((12, 1),) if args.quick else POOLED_SHAPES
    chunks = max(1, math.ceil(reps / POOLED_REPS_PER_LOAD))
    across = pooled_across_mean(args.seed, draws)
    tasks = [(args.seed, n, s, k) for n, s in shapes for k in range(chunks)]
    res = map_ordered(pooled_task, tasks, workers=workers, cost=lambda t: t[1] * t[2])
    cols = ["n", "seeds", "floor", "rule", "metric", "lo", "hi", "flo", "fhi", "plo", "phi", "these", "fresh", "k",
            "floored", "verdict", "below0"]
    d = {c: np.array([row[i] for part in res for row in part]) for i, c in enumerate(cols)}
    labels = {"rounds_ratio": "R/R*", "time_ratio": "T/T*", "lambda": "λ", "accuracy_delta_pp": "Δacc pp"}
    n_rules = len(POOLED_RULES)
    print("## Rule-level pooled estimates\n")
    print(f"`lengthlens.rules` on studies drawn by `lengthlens.synth`: one target–draft pair, six datasets shaped like "
          f"the study's (token budgets that cap 0–25 % of the relaxed runs, log-length SDs up to 1.0 for rare runaway "
          f"items, one ungraded dataset), strict and {n_rules} rules. Each rule's effect varies across datasets (SD "
          f"{POOLED_TAU[0]} of log λ, {POOLED_TAU[1]} of log gain, {POOLED_TAU[2]:g} points of accuracy) around means of "
          "λ 1.2–1.6, gain 1.2–1.4 and accuracy changes of 0, −2 and −5 points. Truth per cell from "
          "`lengthlens.synth.truth` (the observed, capped lengths' ratio for λ, R/R* and T/T*; the accuracy change "
          "counting capped runs wrong). **These datasets**: the mean of the rule's six (five graded) planted cell values; "
          f"**across datasets**: its expectation over the effects' distribution ({draws:,} draws). {chunks * POOLED_REPS_PER_LOAD} "
          f"studies per shape, so {chunks * POOLED_REPS_PER_LOAD * n_rules} pooled intervals per row and metric "
          f"(binomial SE ≈ {100 * math.sqrt(LEVEL * (1 - LEVEL) / (chunks * POOLED_REPS_PER_LOAD * n_rules)):.1f} "
          "points at 95 %).\n")
    rows = []
    for n, s in shapes:
        for m in POOLED_METRICS:
            sel = (d["n"] == n) & (d["seeds"] == s) & (d["metric"] == m) & (d["floor"] == True)  # noqa: E712
            mu = np.array([across[r, m] for r in d["rule"][sel]])
            lo, hi, these = d["lo"][sel].astype(float), d["hi"][sel].astype(float), d["these"][sel].astype(float)
            flo, fhi = d["flo"][sel].astype(float), d["fhi"][sel].astype(float)
            plo, phi, fresh = d["plo"][sel].astype(float), d["phi"][sel].astype(float), d["fresh"][sel].astype(float)
            row = [str(n), str(s), labels[m], pct(np.mean((lo <= these) & (these <= hi))), pct(np.mean((lo <= mu) & (mu <= hi))),
                   pct(np.mean((flo <= these) & (these <= fhi))), pct(np.mean((flo <= mu) & (mu <= fhi))),
                   pct(np.nanmean(np.where(np.isnan(fresh), np.nan, (plo <= fresh) & (fresh <= phi)))),
                   pct(np.mean(d["floored"][sel].astype(float)), 0)]
            if m == "accuracy_delta_pp":
                sel0 = (d["n"] == n) & (d["seeds"] == s) & (d["metric"] == m) & (d["floor"] == False)  # noqa: E712
                lo0, hi0, th0 = d["lo"][sel0].astype(float), d["hi"][sel0].astype(float), d["these"][sel0].astype(float)
                mu0 = np.array([across[r, m] for r in d["rule"][sel0]])
                row += [pct(np.mean((lo0 <= th0) & (th0 <= hi0))), pct(np.mean((lo0 <= mu0) & (mu0 <= hi0))),
                        f"{np.mean(hi - lo):.1f} / {np.mean(hi0 - lo0):.1f}"]
            else:
                row += ["", "", f"{np.mean(hi - lo):.3f}"]
            rows.append(row)
    print("Coverage % of the 95 % intervals: the default (random effects, HKSJ, floored) of the these-datasets truth and "
          "of the across-dataset mean; the fixed-effect interval of both; the prediction interval of a new dataset's "
          "effect; % of pools where the floor set the width; the accuracy change without the floor; the mean width "
          "(log scale for ratios; Δacc: floored / unfloored).\n")
    print(md(["n", "seeds", "metric", "default: these", "default: across", "fixed: these", "fixed: across",
              "prediction: new dataset", "floored %", "unfloored: these", "unfloored: across", "width"], rows))
    rows = []
    for n, s in shapes:
        row = [str(n), str(s)]
        for floor in (True, False):
            base = (d["n"] == n) & (d["seeds"] == s) & (d["metric"] == "accuracy_delta_pp") & (d["floor"] == floor)
            for change in (0.0, -2.0, -5.0):
                sel = base & np.isin(d["rule"], [r for r, v in POOLED_RULES.items() if v[2] == change])
                worse = np.isin(d["verdict"][sel], ["worse", "worse, within the margin"])
                row.append(f"{pct(np.mean(d['below0'][sel].astype(bool)), 0)} / {pct(np.mean(worse), 0)}")
            sel = base & np.isin(d["rule"], [r for r, v in POOLED_RULES.items() if v[2] == 0.0])
            row.append(pct(np.mean(np.isin(d["verdict"][sel], ["non-inferior", "worse, within the margin"])), 0))
        rows.append(row)
    print(f"\nThe rule-level accuracy verdict: % of rules whose pooled interval lies below 0 / % called *worse* (Holm "
          f"over the {n_rules} rules of a study), at a true mean change of 0, −2 and −5 points; and % of rules without a "
          "change called *non-inferior* at the 2-point margin. Floored (default), then unfloored.\n")
    print(md(["n", "seeds", *[f"{'floored' if f else 'unfloored'}: {c:g} pp" for f in (True, False) for c in (0, -2, -5)][:3],
              "floored: non-inferior at 0", *[f"unfloored: {c:g} pp" for c in (0, -2, -5)], "unfloored: non-inferior at 0"],
             rows))


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------

def _median_mdd(mdd: np.ndarray, weights: np.ndarray) -> str:
    """The weighted median of the cells' minimum detectable drops (∞: no drop is detectable at 80 %); — if none."""
    known = ~np.isnan(mdd)
    if not known.any():
        return "—"
    order = np.argsort(mdd[known])
    w = np.cumsum(weights[known][order]) / weights[known].sum()
    m = mdd[known][order][np.searchsorted(w, 0.5)]
    return "∞" if np.isinf(m) else f"{m:.0f}"


def pct(x: float, digits: int = 1) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{100 * x:.{digits}f}"


def md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few cells per setting (seconds): checks that it runs")
    ap.add_argument("--reps", type=int, default=None, help="cells per coverage setting (default 1000; quick 20)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--workers", type=int, default=None, help="worker processes (default 2; quick 1)")
    ap.add_argument("--pooled-reps", type=int, default=None, help="studies per shape in the pooled section (default 200)")
    ap.add_argument("--write-doc", type=Path, default=None,
                    help="also put the tables into this Markdown file, between its generated markers")
    ap.add_argument("--part", choices=("all", "cells", "pooled"), default="all",
                    help="the cell-level sections (1-4), the rule-level pooled one (5), or both (default)")
    args = ap.parse_args(argv)
    parts = [p for p in ("cells", "pooled") if args.part in ("all", p)]
    rc = 0
    for part in parts:
        report = _report if part == "cells" else _report_pooled_part
        if args.write_doc is None:
            rc = rc or report(args)
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = rc or report(args)
        text = out.getvalue()
        print(text, end="")
        doc = args.write_doc.read_text(encoding="utf-8")
        begin, finish = DOC_MARKERS[part]
        start, end = doc.index(begin) + len(begin), doc.index(finish)
        args.write_doc.write_text(doc[:start] + "\n" + text + doc[end:], encoding="utf-8")
    return rc


DOC_START, DOC_END = "<!-- generated by benchmarks/validate.py -->", "<!-- /generated -->"
#: Where each part's tables go in the document.
DOC_MARKERS = {"cells": (DOC_START, DOC_END),
               "pooled": ("<!-- generated by benchmarks/validate.py: pooled -->", "<!-- /generated: pooled -->")}


def _report_pooled_part(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    cpu0 = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))
    workers = args.workers or (1 if args.quick else 2)
    reps = args.pooled_reps or (10 if args.quick else 200)
    _report_pooled(args, workers, reps)
    secs = time.perf_counter() - t0
    cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime")) - cpu0
    options = (" --quick" if args.quick else "") + (f" --pooled-reps {args.pooled_reps}" if args.pooled_reps else "") + (
        f" --seed {args.seed}" if args.seed != DEFAULT_SEED else "")
    print(f"\nProduced by `python benchmarks/validate.py --part pooled{options}` in {secs / 60:.0f} min with {workers} "
          f"worker processes ({cpu / 60:.0f} min of CPU time).")
    return 0


def _report(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    cpu0 = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))
    args.workers = args.workers or (1 if args.quick else 2)
    reps = args.reps or (10 if args.quick else 1000)
    flag_reps = max(10, reps // 2)
    families = max(1, reps // 20)
    sizes = (3, 12) if args.quick else SIZES
    exact_sizes = (6,) if args.quick else (12, 30)
    mc_items = 200_000 if args.quick else 2_000_000
    names = metrics.registry().interval_metrics
    labels = {m.name: m.label for m in metrics.registry().metrics}

    print("## Coverage of the default intervals\n")
    truths = {b: truth(b, mc_items, args.seed) for b in (NO_BUDGET, BUDGET)}
    analytic = LAMBDA0 * math.exp(0.3**2 / 2)
    print(f"Truth (Monte Carlo, {mc_items:,} items): "
          + "; ".join(f"{labels[n]} {truths[NO_BUDGET][n]:.4g} / {truths[BUDGET][n]:.4g}" for n in names)
          + f" (uncensored / censored at {BUDGET} tokens). Uncensored λ analytically {analytic:.4f}.\n")
    if abs(truths[NO_BUDGET]["lambda"] / analytic - 1) > 0.005:
        print(f"**warning**: the Monte Carlo λ {truths[NO_BUDGET]['lambda']:.4f} is not the analytic {analytic:.4f}\n")
    grid = coverage_grid(args.seed, reps, sizes, args.workers)
    settings = sorted(grid, key=lambda k: (k[0] != NO_BUDGET, k[1], k[2]))
    usual = {}  # the method each metric's interval has at the largest n, per seeds: a cell with another one fell back
    for name in names:
        for n_seeds in SEEDS:
            got, count = np.unique(grid[(NO_BUDGET, n_seeds, sizes[-1])][name + ":method"], return_counts=True)
            usual[name, n_seeds] = got[np.argmax(count)]
    rows, misses = [], []
    for key in settings:
        budget, n_seeds, n = key
        cens = "none" if budget == NO_BUDGET else f"{BUDGET} tok"
        row, miss = [str(n), str(n_seeds), cens], [str(n), str(n_seeds), cens]
        for name in names:
            s = summarise(grid[key][name], truths[budget][name])
            fallback = (grid[key][name + ":method"] != usual[name, n_seeds]).mean()
            row.append(pct(s["coverage"]))
            miss.append("/".join(pct(x, 0) for x in (s["below"], s["above"], s["undefined"], s["unbounded"], fallback)))
        rows.append(row)
        misses.append(miss)
    print(f"Coverage % of the 95 % interval, {reps} cells per row (binomial SE ≈ "
          f"{100 * math.sqrt(LEVEL * (1 - LEVEL) / reps):.1f} points at 95 %); accuracy: d = {ACC[0]:.2f}, Δ = {100 * ACC[1]:g} pp.\n")
    print(md(["n", "seeds", "censoring", *[labels[n] for n in names]], rows))
    print("\nHow the others failed, % of cells: upper limit below the truth / lower limit above it / undefined "
          "(NaN) / unbounded (±∞) / another interval method than at the largest n with as many seeds (a fallback).\n")
    print(md(["n", "seeds", "censoring", *[labels[n] for n in names]], misses))

    print("\nIntervals past the range of the cell's item ratios, % of cells (a ratio of two sums is a weighted mean of "
          "the item ratios, so no resample leaves their range).\n")
    rows = []
    for key in settings:
        budget, n_seeds, n = key
        row = [str(n), str(n_seeds), "none" if budget == NO_BUDGET else f"{BUDGET} tok"]
        for name in RATIOS_OF_SUMS:
            lim, rng_ = grid[key][name], grid[key][name + ":range"]
            row.append(pct(np.mean((lim[:, 0] < rng_[:, 0] * (1 - 1e-9)) | (lim[:, 1] > rng_[:, 1] * (1 + 1e-9)))))
        rows.append(row)
    print(md(["n", "seeds", "censoring", *[labels[n] for n in RATIOS_OF_SUMS]], rows))

    print("\n## The accuracy change: exact coverage with one run per item\n")
    exact = {exact_sizes[0]: accuracy_rules(exact_sizes[0], args.workers)}
    reduced = depends_on_discordant_only(exact[exact_sizes[0]])
    exact |= {n: accuracy_rules(n, args.workers, by_discordant=reduced) for n in exact_sizes[1:]}
    methods = sorted({m for e in exact.values() for m in e["method"]})
    counts = ", ".join(f"{len(e['tables'])} at n = {n}" for n, e in exact.items())
    print(f"Every paired 2×2 table of n items ({counts}) "
          f"through `cells`; interval method: {', '.join(methods)}. Baseline accuracy {P_STAR}; "
          "a change larger than the discordance cannot happen (—).")
    if reduced and len(exact_sizes) > 1:
        print(f"Each rule depends on the table only through its discordant counts (b, c) (checked on all "
              f"{len(exact[exact_sizes[0]]['tables'])} tables at n = {exact_sizes[0]}), so at larger n one cell per (b, c) "
              "stands for all the tables with those counts.")
    check = _closed_form_check(exact)
    if check:
        print(check)
    if "percentile" in methods or "bca" in methods:
        print("The interval is a bootstrap: each table's limits carry the noise of its own 10,000 resamples "
              "(exact over tables, Monte Carlo within each interval).")
    print()
    rows, flag_rows = [], []
    for n, e in exact.items():
        point = 100 * (e["tables"][:, 1] - e["tables"][:, 2]) / n
        for d in DISCORDANCE:
            row, frow = [str(n), f"{d:.2f}"], [str(n), f"{d:.2f}", "1 (exact)"]
            for c in CHANGES_PP:
                w = table_probabilities(e["tables"], d, c / 100)
                if w is None:
                    row.append("—")
                    frow.append("—")
                    continue
                cov = float(w @ ((e["lo"] <= c + 1e-9) & (c - 1e-9 <= e["hi"])))
                zero = float(w @ ((e["lo"] == 0) & (e["hi"] == 0)))
                above = float(w @ (e["lo"] > c + 1e-9))
                row.append(f"{pct(cov)} ({pct(zero, 0)}, {pct(above, 0)})")
                frow.append(pct(float(w @ e["flag"])))
            p0 = table_probabilities(e["tables"], d, 0.0)
            frow.append(pct(float(p0 @ (e["p"] < 0.05))))
            frow.append(_median_mdd(e["mdd"], p0))
            rows.append(row)
            flag_rows.append(frow)
    print("Coverage % (in brackets: % of cells whose interval is [0, 0], and % whose interval lies wholly above the "
          "true change, i.e. reads as no harm).\n")
    print(md(["n", "discordance", *[f"Δ = {c} pp" for c in CHANGES_PP]], rows))

    print("\n## The accuracy-loss flag and the accuracy test\n")
    tasks, keys = [], []
    chunk = 50
    for n in exact_sizes:
        for k in range(math.ceil(flag_reps / chunk)):
            tasks.append((args.seed, n, 4, k, min(chunk, flag_reps - k * chunk)))
            keys.append(n)
    res = map_ordered(flag_task, tasks, workers=args.workers, cost=lambda t: t[1] * t[4])
    seeded: dict[int, dict[str, np.ndarray]] = {}
    for n, r in zip(keys, res):
        m = seeded.setdefault(n, {})
        for k, v in r.items():
            m[k] = np.concatenate([m[k], v]) if k in m else v
    seed_cov = []
    for n in exact_sizes:
        for d in DISCORDANCE:
            frow, crow = [str(n), f"{d:.2f}", f"4 ({flag_reps} sims)"], [str(n), f"{d:.2f}"]
            for c in CHANGES_PP:
                a = seeded[n].get(f"d{int(d * 100)}c{-c}")
                if a is None:
                    frow.append("—")
                    crow.append("—")
                    continue
                frow.append(pct(np.mean(a[:, 2] == 1)))
                crow.append(pct(np.mean((a[:, 0] <= c + 1e-9) & (c - 1e-9 <= a[:, 1]))))
            z = seeded[n][f"d{int(d * 100)}c0"]
            frow.append(pct(np.mean(z[:, 3] < 0.05)))
            frow.append(_median_mdd(z[:, 4], np.ones(len(z)) / len(z)))
            flag_rows.append(frow)
            seed_cov.append(crow)
    print(f"% of cells flagged by `drop_2pp` (the boundary is Δ = −2 pp, where a one-sided 95 % rule fires in at most "
          "2.5 %); the paired accuracy test's rejections at p < 0.05 when nothing changed; the minimum detectable drop "
          "(pp, 80 % power) where the cells report one: its median over the cells at Δ = 0 (∞: none is detectable).\n")
    print(md(["n", "discordance", "seeds", *[f"Δ = {c} pp" for c in CHANGES_PP], "test p < 0.05 at Δ = 0",
              "min. detectable drop"], flag_rows))
    _report_worst_case(exact_sizes)
    print(f"\nCoverage % of the accuracy change's interval with 4 seeds per item ({flag_reps} simulated cells each).\n")
    print(md(["n", "discordance", *[f"Δ = {c} pp" for c in CHANGES_PP]], seed_cov))

    print("\n## The multiplicity family\n")
    fam_tasks = [(args.seed, drops, r) for drops in (False, True) for r in range(families)]
    fam = map_ordered(family_task, fam_tasks, workers=args.workers)
    shape = ", ".join(f"{ds}×{arms} cells of {n} items" + (f" ({g} graded)" if g < n else "") for n, g, ds, arms in FAMILY)
    print(f"{families} simulated reports per row, each of {sum(ds * a for _, _, ds, a in FAMILY)} graded cells ({shape}), "
          f"one run per item, d = {ACC[0]} where nothing changes; with drops, every third arm of the fully graded 12- and "
          f"30-item datasets drops {', '.join(f'{100 * x:g}' for x in FAMILY_DROPS)} pp (d = drop + 0.10). "
          "A rejection: adjusted p < 0.05.\n")
    columns = []
    for drops in (False, True):
        reports = [np.array(fam[i], dtype=float) for i, t in enumerate(fam_tasks) if t[1] == drops]
        allr = np.concatenate(reports)
        smallest = [np.nanmin(r[:, 6]) if np.isfinite(r[:, 6]).any() else np.nan for r in reports]
        col = [f"{np.mean([r[:, 3].sum() for r in reports]):.0f}",
               pct(np.mean([np.any((r[:, 2] == 0) & (r[:, 6] < 0.05)) for r in reports])),
               pct(np.mean([np.any((r[:, 2] == 0) & (r[:, 7] < 0.05)) for r in reports])),
               "—" if np.isnan(smallest).all() else f"{np.nanmedian(smallest):.3f}"]
        for drop in FAMILY_DROPS:
            for n in (12, 30):
                sel = (allr[:, 2] == -drop) & (allr[:, 0] == n) & (allr[:, 1] == n)
                col.append("—" if not sel.any() else " / ".join(pct(np.mean(allr[sel, j] < 0.05), 0) for j in (5, 6, 7)))
        probes = (allr[:, 0] == 3) | (allr[:, 1] < allr[:, 0])
        col.append(pct(np.mean(allr[probes, 3] == 1)))
        can = np.array([r[0, 4] for r in reports])
        col.append("—" if np.isnan(can).all() else pct(np.mean(can == 1), 0))
        columns.append(col)
    labels_ = ["cells in the family (mean)", "a no-change cell rejected by Holm (% of reports)",
               "a no-change cell rejected by BH (% of reports)", "smallest Holm p of a report (median)",
               *[f"{100 * d:g}-pp drop, n = {n}: rejected raw / Holm / BH (% of cells)" for d in FAMILY_DROPS for n in (12, 30)],
               "3-item probes and partly graded cells in the family (%)", "the library says the family can reject (% of reports)"]
    print(md(["", "nothing changes", "with drops"], [[lab, *vals] for lab, *vals in zip(labels_, *columns)]))
    options = (" --quick" if args.quick else "") + (f" --reps {args.reps}" if args.reps else "") + (
        f" --seed {args.seed}" if args.seed != DEFAULT_SEED else "")
    secs = time.perf_counter() - t0
    cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime")) - cpu0

    def took(x: float) -> str:
        return f"{x / 60:.0f} min" if x >= 120 else f"{x:.0f} s"

    print(f"\nProduced by `python benchmarks/validate.py{options}` in {took(secs)} with {args.workers} worker processes "
          f"({took(cpu)} of CPU time).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
