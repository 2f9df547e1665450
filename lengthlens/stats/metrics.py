"""Every cell metric, defined once, as a function of sums over the cell's paired runs.

Each metric is a ratio or difference of sums, so the same definition serves the point estimate
(sums over all paired runs), each bootstrap resample (sums weighted by item counts) and the
jackknife (sums minus one item). The definitions are the study's:

- ``l_bar``: mean over the cell's runs of per-run l_bar = accepted_tokens / draft_rounds
  (accepted draft tokens per verifier round, bonus token excluded); ``l_bar_pooled`` =
  sum(accepted) / sum(rounds). Starred names are the strict baseline on the same items.
- ``gain`` = (l_bar + 1) / (l_bar* + 1): the theoretical per-round gain, not a speed-up (the
  paper's, from the mean of per-run l_bar); ``gain_pooled`` = (l_bar_pooled + 1) / (l_bar_pooled* + 1).
- ``lambda`` = mean(output_tokens) / mean(output_tokens*), a ratio of means.
- ``rounds_ratio`` = mean(draft_rounds) / mean(draft_rounds*); ``time_ratio`` likewise for wall time.
- ``rounds_ratio_predicted`` = lambda / gain_pooled, the length-correction identity R/R* = lambda / gain:
  exact with the pooled l_bar when every round emits its accepted tokens plus one (A + R = L).
- ``time_per_round_ratio`` = (T/T*) / (R/R*): wall time per verifier round, relaxed over strict.
- ``accuracy_delta_pp`` = 100 (accuracy - accuracy*) on runs graded on both sides.
- ``censored_frac``: share of runs that stopped at the token budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from lengthlens.stats.dual import Dual, divide

#: Per-run quantities summed over a cell's paired runs (columns of the item-sum matrix).
#: ``_star`` = the strict baseline run of the same item and seed.
SUM_FIELDS: tuple[str, ...] = (
    "n", "L", "L_star", "R", "R_star", "T", "T_star",
    "lbar", "lbar_star", "n_lbar", "n_lbar_star", "A", "A_star",
    "n_graded", "c", "c_star", "cens", "cens_star", "w2r", "r2w",
)
SUM_INDEX = {name: i for i, name in enumerate(SUM_FIELDS)}

Sums = Mapping[str, np.ndarray]


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b, NaN where b is 0. Divides once and masks in place: this runs ~10^4 times per report on
    (resamples x cells) arrays, where np.where's extra temporaries cost 20x. On a :class:`Dual` (the
    delta-method SEs) the same value, with its derivatives."""
    if isinstance(a, Dual) or isinstance(b, Dual):
        return divide(a, b, _div(a.value if isinstance(a, Dual) else a, b.value if isinstance(b, Dual) else b))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.asarray(np.true_divide(a, b, dtype=float))
    zero = np.asarray(b) == 0
    if r.ndim == 0:
        return np.asarray(np.nan) if zero else r
    if zero.any():
        r[np.broadcast_to(zero, r.shape)] = np.nan
    return r


def l_bar(s: Sums) -> np.ndarray:
    return _div(s["lbar"], s["n_lbar"])


def l_bar_star(s: Sums) -> np.ndarray:
    return _div(s["lbar_star"], s["n_lbar_star"])


def l_bar_pooled(s: Sums) -> np.ndarray:
    return _div(s["A"], s["R"])


def l_bar_pooled_star(s: Sums) -> np.ndarray:
    return _div(s["A_star"], s["R_star"])


def gain(s: Sums) -> np.ndarray:
    return _div(l_bar(s) + 1.0, l_bar_star(s) + 1.0)


def gain_pooled(s: Sums) -> np.ndarray:
    return _div(l_bar_pooled(s) + 1.0, l_bar_pooled_star(s) + 1.0)


def length_ratio(s: Sums) -> np.ndarray:
    return _div(s["L"], s["L_star"])


def rounds_ratio(s: Sums) -> np.ndarray:
    return _div(s["R"], s["R_star"])


def rounds_ratio_predicted(s: Sums) -> np.ndarray:
    return _div(length_ratio(s), gain_pooled(s))


def time_ratio(s: Sums) -> np.ndarray:
    return _div(s["T"], s["T_star"])


def time_per_round_ratio(s: Sums) -> np.ndarray:
    return _div(time_ratio(s), rounds_ratio(s))


def accuracy(s: Sums) -> np.ndarray:
    return _div(s["c"], s["n_graded"])


def accuracy_star(s: Sums) -> np.ndarray:
    return _div(s["c_star"], s["n_graded"])


def accuracy_delta_pp(s: Sums) -> np.ndarray:
    c = s["c"] if isinstance(s["c"], Dual) else np.asarray(s["c"], float)
    return 100.0 * _div(c - s["c_star"], s["n_graded"])


def censored_frac(s: Sums) -> np.ndarray:
    return _div(s["cens"], s["n"])


def censored_frac_star(s: Sums) -> np.ndarray:
    return _div(s["cens_star"], s["n"])


@dataclass(frozen=True)
class Metric:
    """A named cell metric; ``interval`` says whether cells.csv carries its bootstrap interval."""

    name: str
    fn: Callable[[Sums], np.ndarray]
    interval: bool
    ci_name: str | None = None  # column stem of the interval when it differs from ``name``
    description: str = ""
    #: Scale of the studentized interval: "log" for positive ratios and means, "identity" for
    #: differences (which keep the percentile interval, see README "Intervals").
    scale: str = "log"


METRICS: tuple[Metric, ...] = (
    Metric("l_bar", l_bar, True, description="mean per-run accepted draft tokens per round (relaxed arm)"),
    Metric("l_bar_star", l_bar_star, False, description="the same for the strict baseline"),
    Metric("l_bar_pooled", l_bar_pooled, False, description="sum(accepted) / sum(rounds), relaxed arm"),
    Metric("l_bar_pooled_star", l_bar_pooled_star, False, description="sum(accepted) / sum(rounds), baseline"),
    Metric("gain", gain, True, description="(l_bar + 1) / (l_bar* + 1): theoretical per-round gain"),
    Metric("gain_pooled", gain_pooled, True,
           description="(l_bar_pooled + 1) / (l_bar_pooled* + 1): the gain the length identity uses"),
    Metric("lambda", length_ratio, True, description="mean completion length ratio (relaxed / strict)"),
    Metric("rounds_ratio", rounds_ratio, True, description="mean verifier rounds ratio R/R*"),
    Metric("rounds_ratio_predicted", rounds_ratio_predicted, True, description="lambda / gain_pooled"),
    Metric("time_ratio", time_ratio, True, description="mean wall time ratio T/T*"),
    Metric("time_per_round_ratio", time_per_round_ratio, True,
           description="(T/T*) / (R/R*): wall time per verifier round, relaxed over strict"),
    Metric("accuracy", accuracy, False, description="accuracy of the relaxed arm on graded pairs"),
    Metric("accuracy_star", accuracy_star, False, description="accuracy of the baseline on the same graded pairs"),
    Metric("accuracy_delta_pp", accuracy_delta_pp, True, ci_name="accuracy_delta",
           description="100 (accuracy - accuracy*), percentage points", scale="identity"),
    Metric("censored_frac", censored_frac, False, description="share of relaxed runs cut at the budget"),
    Metric("censored_frac_star", censored_frac_star, False, description="share of baseline runs cut at the budget"),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}


def evaluate(sums: np.ndarray, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Metrics (all, or those named) from a sums array whose last axis follows SUM_FIELDS."""
    s = {name: sums[..., i] for name, i in SUM_INDEX.items()}
    return {m.name: m.fn(s) for m in METRICS if names is None or m.name in names}


#: Metrics that carry a bootstrap interval.
INTERVAL_METRICS = tuple(m.name for m in METRICS if m.interval)


#: The per-run fields each metric needs, on both sides of the pair. A metric whose fields are not
#: logged on every paired run of a cell is left empty (NaN) with the reason (``unavailable``); no
#: field is required by the loader. ``censored`` is known from finish_reason, or from output_tokens
#: with max_new_tokens. Accuracy needs ``correct`` and is computed on the graded pairs only.
METRIC_INPUTS: dict[str, tuple[str, ...]] = {
    "l_bar": ("accepted_tokens", "draft_rounds"),
    "l_bar_star": ("accepted_tokens", "draft_rounds"),
    "l_bar_pooled": ("accepted_tokens", "draft_rounds"),
    "l_bar_pooled_star": ("accepted_tokens", "draft_rounds"),
    "gain": ("accepted_tokens", "draft_rounds"),
    "gain_pooled": ("accepted_tokens", "draft_rounds"),
    "lambda": ("output_tokens",),
    "rounds_ratio": ("draft_rounds",),
    "rounds_ratio_predicted": ("output_tokens", "accepted_tokens", "draft_rounds"),
    "time_ratio": ("wall_time_s",),
    "time_per_round_ratio": ("wall_time_s", "draft_rounds"),
    "censored_frac": ("censored",),
    "censored_frac_star": ("censored",),
}
assert set(METRIC_INPUTS) <= set(METRIC_BY_NAME)

#: How a missing input is named in the reasons (``censored`` is derived).
_INPUT_WORDS = {"censored": "finish_reason or max_new_tokens"}


def unavailable(missing: Mapping[str, int], n_runs: int) -> dict[str, str]:
    """Metric -> why it is empty, given how many of a cell's ``n_runs`` paired runs lack each input field.

    ``missing[f]`` counts the pairs where field ``f`` is null on either side.
    """
    out: dict[str, str] = {}
    for metric, fields in METRIC_INPUTS.items():
        lacking: dict[int, list[str]] = {}
        for f in fields:
            if missing.get(f, 0):
                lacking.setdefault(missing[f], []).append(_INPUT_WORDS.get(f, f))
        if lacking:
            out[metric] = "; ".join(f"{' and '.join(fs)} not logged on {k} of {n_runs} paired runs"
                                    for k, fs in sorted(lacking.items(), reverse=True))
    return out


def unavailable_note(reasons: Mapping[str, str]) -> str:
    """One line for cells.csv: the empty metrics grouped by their reason ("" when all are computed)."""
    by_reason: dict[str, list[str]] = {}
    for metric, why in reasons.items():
        by_reason.setdefault(why, []).append(metric)
    return " | ".join(f"{', '.join(ms)}: {why}" for why, ms in by_reason.items())


#: A cell drops accuracy by at least this many points ("drop_2pp" in the study).
ACCURACY_DROP_PP = 2.0


def drop_2pp_point(delta_pp: float) -> bool:
    """The study's rule: the point estimate of the accuracy change is at most -2 points (counts noise at n = 12-30)."""
    return bool(delta_pp <= -ACCURACY_DROP_PP)


def drop_2pp(delta_hi_pp: float) -> bool:
    """The interval rule: the whole interval of the accuracy change lies at or below -2 points (upper limit <= -2)."""
    return bool(delta_hi_pp <= -ACCURACY_DROP_PP)
