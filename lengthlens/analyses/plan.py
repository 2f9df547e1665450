"""How much data a rule-level verdict needs: items per cell, seeds and datasets, from the pilot's own spread.

:func:`plan` reads a cell table (the pilot) the way :func:`lengthlens.rules` pools it and asks what it
would take for the pooled verdict to detect a rule-level accuracy loss of X points (default 2 and 5) or
an R/R* change of Y % (default 5 %) with 80 % power, and what the current sizes detect.

The model is the pooled estimate's: with K datasets of n items and s seeds per item, the variance of
the random-effects mean is about (σ²_w(n, s) + τ²)/K: σ²_w the within-cell variance, from the pilot's
cells ((b + c)/n − Δ̂² per graded pair for accuracy; the delta-method variance of log R/R* times the
items), over n and shrunk by seeds as σ²(ρ + (1 − ρ)/s), ρ how alike an item's seeds are; τ² the
between-dataset variance (the pilot's Paule–Mandel τ̂², the median over its
rules). The verdict is a one-sided t(K − 1) test at 2.5 % divided by the number of rules (Holm's first
step, the level one real effect among null ones meets). A design is checked by simulating the pooled
estimator itself (the cells' own variances, Paule–Mandel, the floored HKSJ interval) at the pilot's
parameters: :attr:`Design.simulated_power`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from scipy import special

from lengthlens.analyses.cells import SMALL_N_ITEMS, CellTable
from lengthlens.analyses.rules import SIGNIFICANCE, cell_inputs
from lengthlens.results import frame, frame_html
from lengthlens.stats.meta import detectable_effect, random_effects

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Design", "Pilot", "PlanResult", "plan", "pooled_power", "simulate_power"]

#: Seeds per item and datasets the search tries (items per cell are solved for).
SEEDS = (1, 2, 4, 8)
#: The largest number of items per cell a plan proposes; beyond it the target is called out of reach at that K.
MAX_ITEMS = 5000
#: How alike an item's seeds are when the pilot has one seed per item (it cannot tell).
DEFAULT_SEED_CORRELATION = 0.5
#: A proposed design must reach the power asked less this in its simulation (0.8: at least 77 %, so that it stays
#: above 75 % in another simulation of the same size).
CHECK_SLACK = 0.03
#: The most datasets a plan looks for when the between-dataset spread rules out the usual numbers.
MAX_DATASETS = 1000

_NAN = float("nan")


def pooled_power(effect: float, standard_error: float, k: int, alpha: float) -> float:
    """Power of the one-sided t(K − 1) test at ``alpha`` against a true ``effect`` (> 0) at this pooled SE.

    Examples
    --------
    >>> round(pooled_power(2.802, 1.0, 10**6, 0.025), 3)   # the normal limit
    0.8
    """
    if not (k >= 2 and standard_error > 0):
        return _NAN
    crit = float(special.stdtrit(k - 1, 1.0 - alpha))
    return float(1.0 - special.nctdtr(k - 1, effect / standard_error, crit))


@dataclass(frozen=True)
class Pilot:
    """What the pilot says: the within-cell variance per unit, the between-dataset variance, its sizes.

    ``accuracy_unit_var``: per graded pair (one seed), in points², the median over cells of (b + c)/n − Δ̂²
    (with seeds, the item-level variance brought back to one seed); ``accuracy_tau2`` in points²;
    ``rounds_unit_var``: per item at one seed, of log R/R* (the cells' delta-method variance × items);
    ``rounds_tau2`` on the log scale; ``discordance``: the share of discordant pairs (median over cells).
    """

    n_rules: int
    k: int
    n_items: int
    n_seeds: int
    accuracy_unit_var: float
    accuracy_tau2: float
    discordance: float
    rounds_unit_var: float
    rounds_tau2: float
    seed_correlation: float
    seed_correlation_source: str


@dataclass(frozen=True)
class Design:
    """A design for one target: K datasets × n items × s seeds, its power by the formula and by simulation."""

    target: str
    effect: float
    k: int
    n_items: int
    n_seeds: int
    power: float
    simulated_power: float = _NAN
    n_simulations: int = 0

    @property
    def runs_per_arm(self) -> int:
        return self.k * self.n_items * self.n_seeds


@dataclass(frozen=True)
class PlanResult:
    """The pilot's parameters, what the current sizes detect, and per target the designs that reach the power."""

    pilot: Pilot
    power: float
    alpha: float
    detectable_accuracy_pp: float
    detectable_rounds_change: float
    designs: tuple[Design, ...]
    proposed: tuple[Design, ...] = field(default=())
    #: Every target asked for, in order (one without a proposed design is out of reach).
    targets: tuple[str, ...] = field(default=())

    def to_frame(self) -> pd.DataFrame:
        """One row per design considered (target, effect, K, items, seeds, runs per arm, power; simulated for the
        proposed ones)."""
        proposed = {(d.target, d.k, d.n_items, d.n_seeds) for d in self.proposed}
        sim = {(d.target, d.k, d.n_items, d.n_seeds): d for d in self.proposed}
        rows = []
        for d in self.designs:
            key = (d.target, d.k, d.n_items, d.n_seeds)
            s = sim.get(key, d)
            rows.append({"target": d.target, "effect": d.effect, "datasets": d.k, "items_per_cell": d.n_items,
                         "seeds": d.n_seeds, "runs_per_arm": d.runs_per_arm, "power": d.power,
                         "proposed": key in proposed, "simulated_power": s.simulated_power,
                         "n_simulations": s.n_simulations})
        return frame(rows, columns=["target", "effect", "datasets", "items_per_cell", "seeds", "runs_per_arm", "power",
                                    "proposed", "simulated_power", "n_simulations"])

    def _repr_html_(self) -> str:
        return frame_html(self.to_frame(), f"Designs for {self.power:.0%} power (pilot: K = {self.pilot.k} datasets × "
                                           f"{self.pilot.n_items} items × {self.pilot.n_seeds} seeds)")


def _median(values: list[float]) -> float:
    v = [x for x in values if np.isfinite(x)]
    return float(np.median(v)) if v else _NAN


def _pilot(cells: CellTable, seed_correlation: float | None) -> Pilot:
    """The pilot's parameters from the cells :func:`lengthlens.rules` pools."""
    from lengthlens.analyses.rules import rules
    from lengthlens.analyses.tables import table3_cells

    chosen = table3_cells(cells, include_small=False)
    chosen = chosen[~chosen["method"].astype(str).str.endswith("_force_commit")]
    picked = [cells.cells[int(i)] for i in chosen["_rep"]]
    inputs = [cell_inputs(c) for c in picked]
    if seed_correlation is not None:
        rho, source = float(seed_correlation), "given"
    else:
        rho, source = DEFAULT_SEED_CORRELATION, "assumed: the pilot cannot tell how alike an item's seeds are"
    acc_unit, disc, rr_unit = [], [], []
    for c, inp in zip(picked, inputs):
        seeds = c.n_runs / c.n_items if c.n_items else 1.0
        shrink = rho + (1.0 - rho) / seeds  # the pilot's own seeds: back to one run per item
        if "accuracy_delta_pp" in inp.values and c.wrong_to_right is not None and c.n_graded:
            b, cc, n = c.wrong_to_right, c.right_to_wrong, c.n_graded
            disc.append((b + cc) / n)
            if c.n_graded_items == n:  # one graded pair per item: the per-pair variance of the change
                acc_unit.append(1e4 * ((b + cc) / n - ((b - cc) / n) ** 2))
            else:  # several: the item-level variance, per item at one seed
                se = c.estimates["accuracy_delta_pp"].standard_error
                acc_unit.append(se * se * c.n_graded_items / shrink)
        if "rounds_ratio" in inp.values:
            rr_unit.append(inp.values["rounds_ratio"][1] * c.n_items / shrink)
    table = rules(cells)
    all_rows = [r for r in table if r.target == "all"]
    tau_acc = _median([r.pooled["accuracy_delta_pp"].tau2 for r in all_rows
                       if r.pooled.get("accuracy_delta_pp") is not None and r.pooled["accuracy_delta_pp"].k >= 2])
    tau_rr = _median([r.pooled["rounds_ratio"].tau2 for r in all_rows
                      if r.pooled.get("rounds_ratio") is not None and r.pooled["rounds_ratio"].k >= 2])
    ks = [r.pooled["rounds_ratio"].k for r in all_rows if r.pooled.get("rounds_ratio") is not None]
    seeds = [c.n_runs / c.n_items for c in picked if c.n_items]
    return Pilot(n_rules=max(len(all_rows), 1), k=int(np.median(ks)) if ks else 0,
                 n_items=int(np.median([c.n_items for c in picked])) if picked else 0,
                 n_seeds=int(round(float(np.median(seeds)))) if seeds else 1,
                 accuracy_unit_var=_median(acc_unit), accuracy_tau2=0.0 if math.isnan(tau_acc) else tau_acc,
                 discordance=_median(disc), rounds_unit_var=_median(rr_unit),
                 rounds_tau2=0.0 if math.isnan(tau_rr) else tau_rr, seed_correlation=rho, seed_correlation_source=source)


def _within(unit_var: float, n_items: int, n_seeds: int, rho: float) -> float:
    """A cell's variance at n items and s seeds: the pilot's per-unit variance over n, shrunk by seeds."""
    return unit_var * (rho + (1.0 - rho) / n_seeds) / n_items


def _se(unit_var: float, tau2: float, k: int, n_items: int, n_seeds: int, rho: float) -> float:
    return math.sqrt((_within(unit_var, n_items, n_seeds, rho) + tau2) / k)


def _items_needed(unit_var: float, tau2: float, k: int, n_seeds: int, rho: float, effect: float, alpha: float,
                  power: float) -> int | None:
    """The fewest items per cell (at least SMALL_N_ITEMS: smaller cells are never pooled) at which the pooled test
    reaches ``power`` with K datasets and s seeds (None: not within MAX_ITEMS; the between-dataset spread alone may
    rule it out)."""
    def ok(n: int) -> bool:
        return pooled_power(effect, _se(unit_var, tau2, k, n, n_seeds, rho), k, alpha) >= power

    return _fewest(ok, SMALL_N_ITEMS, MAX_ITEMS)


def _datasets_needed(unit_var: float, tau2: float, rho: float, effect: float, alpha: float, power: float) -> int | None:
    """The fewest datasets at which :data:`MAX_ITEMS` items per cell (one seed) reach ``power``; None beyond MAX_DATASETS."""
    def ok(k: int) -> bool:
        return pooled_power(effect, _se(unit_var, tau2, k, MAX_ITEMS, 1, rho), k, alpha) >= power

    return _fewest(ok, 2, MAX_DATASETS)


def _fewest(ok: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The smallest n in [lo, hi] where ``ok`` (which only turns from False to True as n grows) holds; None if not at hi."""
    if not ok(hi):
        return None
    if ok(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _accuracy_cells(d: np.ndarray, n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """Cells' accuracy change and Agresti–Min variance (points) from per-item sums of changes ``d`` (..., items), every
    seed graded: :func:`lengthlens.stats.meta.accuracy_change_variance` over the last axis, vectorised."""
    n = d.shape[-1]
    total = d.sum(axis=-1)
    shrunk = total / (n_seeds * (n + 2))
    spread = np.sum((d - n_seeds * shrunk[..., None]) ** 2, axis=-1) / (n_seeds * n_seeds)
    return 100.0 * total / (n * n_seeds), 1e4 * (spread + 1.0 + 2.0 * shrunk * shrunk) / (n + 2) ** 2


def simulate_power(pilot: Pilot, design: Design, alpha: float, n_sim: int = 400, seed: int = 0) -> float:
    """The share of simulated studies at ``design`` whose pooled verdict detects the target, by the pooled estimator.

    Accuracy: per dataset a true change −effect + τ·z; per item a baseline verdict and its seeds (alike with
    correlation ρ through a shared item draw) flipping at the pilot's background discordance, the drop added to
    right→wrong flips; the cell's change and Agresti–Min variance from its per-item sums; pooled by
    :func:`~lengthlens.stats.meta.random_effects` and called a loss when the upper limit of the one-sided
    (1 − alpha) interval lies below 0. R/R*: per item a log ratio with the pilot's per-item variance (seeds
    averaged as above), the cell's mean and its variance from its items, pooled the same way.
    """
    rng = np.random.default_rng([seed, design.k, design.n_items, design.n_seeds])
    k, n, s, rho = design.k, design.n_items, design.n_seeds, pilot.seed_correlation
    shape = (n_sim, k)
    if design.target.startswith("accuracy"):
        drop = (design.effect + math.sqrt(pilot.accuracy_tau2) * rng.standard_normal(shape)) / 100.0
        psi = np.clip(pilot.discordance - np.maximum(drop, 0.0), 0.0, 1.0)
        p10 = psi / 2
        p01 = np.clip(psi / 2 + drop, 0.0, 1.0 - p10)
        # an item's seeds share its draw with probability rho, else draw afresh
        u = np.where(rng.random((*shape, n, s)) < rho, rng.random((*shape, n, 1)), rng.random((*shape, n, s)))
        d = np.where(u < p10[..., None, None], 1.0, np.where(u < (p10 + p01)[..., None, None], -1.0, 0.0)).sum(axis=3)
        y, v = _accuracy_cells(d, s)
    else:
        theta = math.log(1.0 - design.effect) + math.sqrt(pilot.rounds_tau2) * rng.standard_normal(shape)
        item_sd = math.sqrt(pilot.rounds_unit_var * (rho + (1 - rho) / s))
        x = theta[..., None] + item_sd * rng.standard_normal((*shape, n))
        y, v = x.mean(axis=2), np.maximum(x.var(axis=2, ddof=1), 1e-12) / n
    level = 1.0 - 2.0 * alpha
    hits = sum(bool(random_effects(y[i], v[i], confidence_level=level).high < 0) for i in range(n_sim))
    return hits / n_sim


def plan(cells: CellTable, *, accuracy_losses_pp: tuple[float, ...] = (2.0, 5.0), rounds_changes: tuple[float, ...] = (0.05,),
         power: float = 0.8, seed_correlation: float | None = None, datasets: tuple[int, ...] | None = None,
         check: bool = True, n_sim: int = 400, seed: int = 0) -> PlanResult:
    """How many items, seeds and datasets a rule-level verdict needs, from the pilot's own variances.

    Parameters
    ----------
    cells : the pilot's cell table (:func:`lengthlens.cells`); its Table 3 cells, as :func:`lengthlens.rules` pools them.
    accuracy_losses_pp : rule-level accuracy losses (points) to detect.
    rounds_changes : R/R* reductions (0.05: 5 %) to detect (a rise needs the same).
    power : the power to reach.
    seed_correlation : how alike an item's seeds are (0: independent draws, 1: identical); default 0.5 (a pilot
        with one seed per item cannot tell).
    datasets : the numbers of datasets K to consider (default: the pilot's K, 2K, 3K and 4K).
    check : simulate the proposed design of each target (:func:`simulate_power`).
    n_sim, seed : simulated studies per check and their seed.

    Returns
    -------
    PlanResult
        The pilot's parameters, the effects detectable at its sizes, every design considered (per target, K and
        seeds: the fewest items per cell that reach ``power``) and per target the proposed one (the fewest runs per
        arm), with its simulated power.

    Examples
    --------
    >>> import lengthlens as ll
    >>> p = ll.plan(ll.cells(ll.load(ll.synth.example_path())))     # doctest: +SKIP
    >>> p.proposed[0].simulated_power >= 0.75                        # doctest: +SKIP
    True
    """
    pilot = _pilot(cells, seed_correlation)
    alpha = SIGNIFICANCE / 2 / max(pilot.n_rules, 1)
    k0 = max(pilot.k, 2)
    ks = datasets or tuple(sorted({k0, 2 * k0, 3 * k0, 4 * k0}))
    rho = pilot.seed_correlation
    se_acc = _se(pilot.accuracy_unit_var, pilot.accuracy_tau2, k0, max(pilot.n_items, 1), pilot.n_seeds, rho)
    se_rr = _se(pilot.rounds_unit_var, pilot.rounds_tau2, k0, max(pilot.n_items, 1), pilot.n_seeds, rho)
    detect_acc = detectable_effect(se_acc, k0 - 1, alpha, power) if pilot.k >= 2 else _NAN
    detect_rr = 1.0 - math.exp(-detectable_effect(se_rr, k0 - 1, alpha, power)) if pilot.k >= 2 else _NAN
    targets = [(f"accuracy loss of {x:g} points", x, pilot.accuracy_unit_var, pilot.accuracy_tau2) for x in accuracy_losses_pp]
    targets += [(f"R/R* change of {100 * y:g} %", y, pilot.rounds_unit_var, pilot.rounds_tau2) for y in rounds_changes]
    designs, proposed = [], []
    for name, effect, unit_var, tau2 in targets:
        if not np.isfinite(unit_var):
            continue
        scale_effect = effect if name.startswith("accuracy") else -math.log(1.0 - effect)

        def grid(ks_: tuple[int, ...], want: float) -> list[Design]:
            out = []
            for k in ks_:
                for s in SEEDS:
                    n = _items_needed(unit_var, tau2, k, s, rho, scale_effect, alpha, want)
                    if n is not None:
                        out.append(Design(name, effect, k, n, s,
                                          pooled_power(scale_effect, _se(unit_var, tau2, k, n, s, rho), k, alpha)))
            return out

        mine = grid(ks, power)
        if not mine:  # the between-dataset spread needs more datasets than asked: the fewest that can do it
            k_min = _datasets_needed(unit_var, tau2, rho, scale_effect, alpha, power)
            if k_min is not None:
                mine = grid(tuple(sorted({k_min, int(1.5 * k_min), 2 * k_min})), power)
        designs.extend(mine)
        if not mine:
            continue
        best = min(mine, key=lambda d: (d.runs_per_arm, d.k, d.n_seeds))
        if check:
            # The formula takes the variances as known; the pooled estimator estimates them (and floors its
            # interval): where the simulation falls short, aim higher until the design holds up in simulation.
            want = power
            sim = simulate_power(pilot, best, alpha, n_sim, seed)
            while sim < power - CHECK_SLACK and want < 0.99:
                want = min(0.99, want + 0.03)
                more = grid(tuple(sorted({d.k for d in mine})), want)
                if not more:
                    break
                best = min(more, key=lambda d: (d.runs_per_arm, d.k, d.n_seeds))
                designs.extend(d for d in more if d not in designs)
                sim = simulate_power(pilot, best, alpha, n_sim, seed)
            best = Design(best.target, best.effect, best.k, best.n_items, best.n_seeds, best.power, sim, n_sim)
        proposed.append(best)
    return PlanResult(pilot, power, alpha, detect_acc, detect_rr, tuple(designs), tuple(proposed),
                      tuple(name for name, *_ in targets))
