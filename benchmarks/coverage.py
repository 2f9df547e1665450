"""Coverage of the cell intervals (studentized, percentile, BCa) for lambda and the accuracy change, with planted truth.

    python benchmarks/coverage.py [--sizes 3 12 30 150 1319] [--reps 1000] [--reps-large 200] [--resamples 1000]

Each replication draws a fresh data set from ``lengthlens.synth`` (one pair, one dataset of n items,
strict + two relaxed arms with planted lambda 1.6 and 1.25 and planted accuracies, no censoring),
sums it by item as the cell table does (``metrics.SUM_FIELDS``) and computes the three 95 %
intervals with lengthlens' own interval code (``stats.estimate.cell_intervals``) on the same
draws. Prints, per n and method, the share of intervals holding the planted value, with its
binomial standard error; ``--reps`` replications for n <= 150 and ``--reps-large`` at the largest
sizes. Undefined intervals (NaN) count as misses.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lengthlens import synth  # noqa: E402
from lengthlens.stats.estimate import cell_intervals, studentized_identity  # noqa: E402
from lengthlens.stats.metrics import INTERVAL_METRICS, SUM_INDEX  # noqa: E402
from lengthlens.stats.resample import item_counts  # noqa: E402
from lengthlens.synth import Arm, Dataset, Effect, Pair, SynthSpec  # noqa: E402

METHODS = ("studentized", "percentile", "bca")
ARMS = (Arm("cactus", 0.2, Effect(lambda_=1.6, l_bar=3.6, accuracy=0.62, time_per_round=0.021)),
        Arm("mentored_dec", 0.5, Effect(lambda_=1.25, l_bar=2.9, accuracy=0.69, think_share=0.7, time_per_round=0.02)))
STRICT = Effect(l_bar=2.2, accuracy=0.7, time_per_round=0.02)


def spec_for(n_items: int) -> SynthSpec:
    ds = Dataset("bench", n_items, 10**8, "gsm8k", mean_len=600, log_sd=0.8, final_frac=0.1)
    return SynthSpec(pairs=(Pair("T", "D", k=6),), datasets=(ds,), arms=ARMS, strict=STRICT)


def item_matrix(frame) -> tuple[np.ndarray, list[str]]:
    """(n_items, n_arms, n_fields) item sums of each relaxed arm paired with strict (one seed per item)."""
    df = frame.to_pandas().sort_values("item_id")
    base = df[df.method == "strict"].set_index("item_id")
    arms = [a.method for a in ARMS]
    X = np.zeros((len(base), len(arms), len(SUM_INDEX)))
    for j, m in enumerate(arms):
        r = df[df.method == m].set_index("item_id").loc[base.index]
        vals = {"n": 1.0, "L": r.output_tokens, "L_star": base.output_tokens, "R": r.draft_rounds,
                "R_star": base.draft_rounds, "T": r.wall_time_s, "T_star": base.wall_time_s,
                "lbar": r.accepted_tokens / r.draft_rounds, "lbar_star": base.accepted_tokens / base.draft_rounds,
                "n_lbar": 1.0, "n_lbar_star": 1.0, "A": r.accepted_tokens, "A_star": base.accepted_tokens,
                "n_graded": 1.0, "c": r.correct.astype(float), "c_star": base.correct.astype(float)}
        for f, v in vals.items():
            X[:, j, SUM_INDEX[f]] = np.asarray(v, dtype=float)
    return X, arms


def run(n_items: int, reps: int, n_resamples: int) -> dict[tuple[str, str], float]:
    """Coverage per (method, metric) over ``reps`` simulated data sets of ``n_items`` items."""
    spec = spec_for(n_items)
    truth = {a.method: {"lambda": a.effect.lambda_, "accuracy_delta_pp": 100 * (a.effect.accuracy - STRICT.accuracy)}
             for a in ARMS}
    hits = {(m, k): 0 for m in (*METHODS, "t_identity") for k in ("lambda", "accuracy_delta_pp")}
    total = 0
    rng = np.random.default_rng(n_items)
    for s in range(reps):
        X, arms = item_matrix(synth.simulate(spec, seed=s))
        counts = item_counts(n_items, n_resamples, rng).astype(np.float64)
        for method in METHODS:
            lo, hi, _ = cell_intervals(X, counts, method, 0.95)
            for metric in ("lambda", "accuracy_delta_pp"):
                k = INTERVAL_METRICS.index(metric)
                hits[(method, metric)] += sum(int(lo[k, j] <= truth[a][metric] <= hi[k, j]) for j, a in enumerate(arms))
        lo, hi, _ = studentized_identity(X, counts, "accuracy_delta_pp", 0.95)
        hits[("t_identity", "accuracy_delta_pp")] += sum(
            int(lo[j] <= truth[a]["accuracy_delta_pp"] <= hi[j]) for j, a in enumerate(arms))
        total += len(arms)
    return {key: h / total for key, h in hits.items()} | {("n", "intervals"): total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[3, 12, 30, 150, 1319])
    ap.add_argument("--reps", type=int, default=1000, help="replications for n <= 150")
    ap.add_argument("--reps-large", type=int, default=200, help="replications for n > 150")
    ap.add_argument("--resamples", type=int, default=1000)
    args = ap.parse_args()
    print("| n items | intervals | λ studentized (default) | λ percentile | λ BCa | Δacc percentile (default) "
          "| Δacc BCa | Δacc bootstrap-t, identity scale |")
    print("|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for n in args.sizes:
        cov = run(n, args.reps if n <= 150 else args.reps_large, args.resamples)
        total = cov[("n", "intervals")]
        cells = []
        for metric, m in [("lambda", m) for m in METHODS] + [("accuracy_delta_pp", m) for m in METHODS[1:]] + [
                ("accuracy_delta_pp", "t_identity")]:
            c = cov[(m, metric)]
            cells.append(f"{c:.1%} ± {math.sqrt(c * (1 - c) / total):.1%}")
        print(f"| {n} | {total} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{args.resamples} resamples per interval; ± is one binomial SE; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
