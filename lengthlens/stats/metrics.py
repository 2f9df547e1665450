"""The metric registry: every per-run quantity and every cell metric, defined once, one row each.

A cell pairs each relaxed run with the strict baseline run of the same item and seed. A
:class:`Quantity` is a number per paired run (e.g. ``L`` = the relaxed run's output tokens); the
cell's sums of quantities over its paired runs (an item's seeds added up, since the item is the
resampling unit) are what every :class:`Metric` is a function of, written with plain operators.
The same definition serves the point estimate (sums over all items), each bootstrap resample
(sums weighted by item counts), the jackknife, and, evaluated on dual numbers, the exact gradient
the delta-method standard errors need.

Everything else is generated from the rows: which run fields a metric needs (and why it is empty
where they are not logged), the Methods section and the column labels of the report, the columns
of cells.csv and the field → metric table of the docs. To add a metric, add a row to
:data:`METRICS` (and, if it sums a new per-run number, a row to :data:`QUANTITIES`).

Definitions (the study's): ``l_bar`` is the mean over the cell's runs of per-run accepted draft
tokens per verifier round (bonus token excluded); ``gain`` = (ℓ̄ + 1) / (ℓ̄* + 1), the theoretical
per-round gain, not a speed-up; ``lambda`` = mean output length ratio; ``rounds_ratio`` = R/R*, the
primary cost measure; ``rounds_ratio_predicted`` = λ / gain_pooled, the length-correction identity
(exact when every round emits its accepted tokens plus one); ``time_per_round_ratio`` =
(T/T*) / (R/R*); ``accuracy_delta_pp`` = 100 (accuracy − accuracy*) on pairs graded on both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, Literal

import numpy as np

from lengthlens.stats.dual import Dual
from lengthlens.stats.margin import ACCURACY_DROP_PP

__all__ = ["ACCURACY_DROP_PP", "METRICS", "QUANTITIES", "Metric", "Quantity", "Registry", "REGISTRY", "Sums",
           "dependencies", "drop_2pp_point", "extended", "finite_or_nan", "registry"]


class Sums(dict):
    """Named arrays, also readable as attributes: ``s.L`` is ``s["L"]`` (how definitions read their inputs)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no sum or run field named {name!r}") from None


@dataclass(frozen=True)
class Quantity:
    """A number per paired run, summed over a cell's runs.

    ``of`` maps the paired runs' fields (float arrays named as in the run record, the baseline's with
    a ``_star`` suffix, NaN where not logged, booleans as 0/1; ``r.one`` is all ones) to one value per
    run. ``inputs`` are the run fields without which the value is unknown: a metric that sums this
    quantity is left empty, with the reason, in a cell where one of them is missing on either side of a
    pair. They are derived from the fields ``of`` reads (evaluated once at definition); given by hand,
    they must name every field it reads, else the definition is refused. ``absent_ok`` names the fields
    it reads whose absence it handles itself (an ungraded pair counts as ungraded, not as unknown).
    """

    name: str
    of: Callable[[Sums], np.ndarray]
    inputs: tuple[str, ...] | None = None
    description: str = ""
    absent_ok: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        reads = tuple(f for f in dict.fromkeys(x.removesuffix("_star") for x in _fields_read((self,)))
                      if f not in self.absent_ok)
        if self.inputs is None:
            object.__setattr__(self, "inputs", reads)
            return
        undeclared = [f for f in reads if f not in self.inputs]
        if undeclared:
            raise ValueError(f"quantity {self.name!r} reads {', '.join(undeclared)} but does not declare "
                             f"{'it' if len(undeclared) == 1 else 'them'} in inputs={tuple(self.inputs)!r}: leave inputs "
                             "out (they are derived from what it reads), or name every field it reads (absent_ok= for "
                             "a field whose absence it handles itself)")
        object.__setattr__(self, "inputs", tuple(self.inputs))


IntervalKind = Literal["ratio", "difference"]


@dataclass(frozen=True)
class ItemInterval:
    """An interval made from a cell's item columns themselves, not from resamples: a score or t interval.

    A metric's row declares it as its default interval (``default_ci``): the interval ``ci="studentized"``
    (the default) gives it. ``of`` maps the per-item sums (``s.c`` is each item's correct runs, ...) and the
    confidence level to (low, high, standard error, method); ``words`` says what it is (docs/outputs.md).
    """

    of: Callable[[Sums, float], tuple[float, float, float, str]]
    words: str


ItemSummary = Literal["median"]


@dataclass(frozen=True)
class Metric:
    """A cell metric: its definition over sums of quantities, and how it is estimated and shown.

    ``interval``: ``"ratio"`` (a positive ratio or mean: the default interval is the studentized
    bootstrap on the log scale), ``"difference"`` (a difference of proportions, on its own scale), or
    None (a point estimate only). ``better``: whether lower or higher values favour the relaxed rule
    (``reference`` is the break-even value), which the report's colouring and verdicts read; ``fmt``
    is the report's number format (``f2`` = 2 decimals); ``ci_stem`` names the interval's columns in
    cells.csv when they are not ``<name>_lo``/``<name>_hi``; ``table``: shown in the report's cell table.

    ``default_ci``: the interval the default (``ci="studentized"``) gives instead of the bootstrap, declared
    here (:class:`ItemInterval`; the accuracy change's is Tango's score interval). ``influence``: cells.csv
    reports single items' weight in the metric (a ratio of two sums: ``<name>_item_min``, ``_item_max``,
    ``_loo_lo``, ``_loo_hi``, ``_top_share``). ``over_items``: the metric is not a function of the cell's
    sums but that summary (``"median"``) over items of ``of`` evaluated on each item's own sums (items where
    it is undefined left out); such a metric has no interval.
    """

    name: str
    of: Callable[[Sums], np.ndarray]
    label: str
    formula: str
    description: str
    interval: IntervalKind | None = "ratio"
    fmt: str = "f2"
    better: Literal["lower", "higher"] | None = None
    reference: float = 1.0
    ci_stem: str | None = None
    table: bool = True
    default_ci: ItemInterval | None = None
    influence: bool = False
    over_items: ItemSummary | None = None

    def __post_init__(self) -> None:
        if self.over_items is not None and self.interval is not None:
            raise ValueError(f"metric {self.name!r}: a summary over items has no interval (interval=None)")
        if self.default_ci is not None and self.interval is None:
            raise ValueError(f"metric {self.name!r}: default_ci needs an interval kind")

    @property
    def interval_method(self) -> str:
        """The default interval in words (what ``ci="studentized"`` gives: docs/outputs.md says this)."""
        if self.interval is None:
            return "none"
        if self.default_ci is not None:
            return self.default_ci.words
        return "studentized, log scale" if self.interval == "ratio" else "percentile"

    @property
    def stem(self) -> str:
        """The column stem of the interval: ``<stem>_lo``, ``<stem>_hi``."""
        return self.ci_stem or self.name

    @property
    def scale(self) -> str:
        """The scale of the studentized interval: log for ratios, identity for differences."""
        return "log" if self.interval == "ratio" else "identity"


@dataclass(frozen=True)
class Registry:
    """The quantities and metrics, with what is derived from them (inputs, reasons, evaluation)."""

    quantities: tuple[Quantity, ...]
    metrics: tuple[Metric, ...]
    #: How a derived input is named in the reasons.
    input_words: Mapping[str, str] = field(default_factory=lambda: {"censored": "finish_reason or max_new_tokens"})

    def __post_init__(self) -> None:
        names = [q.name for q in self.quantities]
        if len(set(names)) != len(names):
            raise ValueError(f"quantities defined twice: {sorted({n for n in names if names.count(n) > 1})}")
        mnames = [m.name for m in self.metrics]
        if len(set(mnames)) != len(mnames):
            raise ValueError(f"metrics defined twice: {sorted({n for n in mnames if mnames.count(n) > 1})}")
        for m in self.metrics:  # every metric reads only known quantities (found by evaluating it once)
            self.sums_of(m.name)
            if m.influence:
                self.ratio_parts(m.name)

    def ratio_parts(self, name: str) -> tuple[str, str]:
        """(x, y) of a metric that is the ratio of two sums Σx / Σy (found by evaluating it once); else ValueError."""
        deps = self.sums_of(name)
        fn = self.metric(name).of
        if len(deps) == 2:
            a, b = deps
            probe = Sums({k: np.float64(50.0 + 3.0 * i) for i, k in enumerate(self.quantity_names)})
            with np.errstate(all="ignore"):
                value = float(np.asarray(fn(probe)))
            for x, y in ((a, b), (b, a)):
                if np.isclose(value, float(probe[x] / probe[y]), rtol=1e-12, atol=0.0):
                    return x, y
        raise ValueError(f"metric {name!r} is not a ratio of two sums, so it can have no influence diagnostics")

    @property
    def influence_metrics(self) -> dict[str, tuple[str, str]]:
        """The metrics whose items' influence cells.csv reports, each with the sums (x, y) of its ratio Σx / Σy."""
        return dict(self._influence_parts)

    @cached_property
    def _influence_parts(self) -> dict[str, tuple[str, str]]:
        # Found by evaluating each metric once: once per registry (it is frozen), not at every cell.
        return {m.name: self.ratio_parts(m.name) for m in self.metrics if m.influence}

    # --- look-up ------------------------------------------------------------------------------
    def metric(self, name: str) -> Metric:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(f"no metric named {name!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics)

    @property
    def interval_metrics(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics if m.interval is not None)

    @property
    def item_metrics(self) -> tuple[str, ...]:
        """The metrics that summarize items (``over_items``), not the cell's sums."""
        return tuple(m.name for m in self.metrics if m.over_items is not None)

    @property
    def quantity_names(self) -> tuple[str, ...]:
        return tuple(q.name for q in self.quantities)

    def sums_of(self, name: str) -> tuple[str, ...]:
        """The quantities a metric sums: those with a derivative when its definition is evaluated on duals."""
        return dependencies(self.metric(name).of, self.quantity_names)

    def inputs_of(self, name: str) -> tuple[str, ...]:
        """The run fields a metric needs on both sides of every paired run of a cell."""
        q = {x.name: x for x in self.quantities}
        return tuple(dict.fromkeys(f for s in self.sums_of(name) for f in q[s].inputs))

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every run field some metric needs (their absence is counted per cell)."""
        return tuple(sorted({f for q in self.quantities for f in q.inputs}))

    def fields_read(self) -> tuple[str, ...]:
        """The paired-run fields the quantities read (both sides), found by evaluating each once."""
        return _fields_read(self.quantities)

    # --- evaluation ---------------------------------------------------------------------------
    def quantities_of(self, runs: Mapping[str, np.ndarray], n: int, names: Iterable[str] | None = None
                      ) -> dict[str, np.ndarray]:
        """Every quantity (or those named) per paired run, from the runs' fields (float arrays, NaN where not logged,
        a field the runs lack NaN throughout); NaN -> 0: a metric whose inputs are missing is left empty by
        :meth:`unavailable`, and a value a definition leaves undefined (ℓ̄ of a run without a round) adds nothing."""
        r = _Fields(runs, n)
        wanted = None if names is None else set(names)
        out = {}
        with np.errstate(all="ignore"):
            for q in self.quantities:
                if wanted is not None and q.name not in wanted:
                    continue
                v = np.asarray(q.of(r), dtype=np.float64)
                v = np.broadcast_to(v, (n,)).copy() if v.shape != (n,) else v.copy()
                v[np.isnan(v)] = 0.0  # an unknown value adds nothing; the metrics it feeds are left empty
                out[q.name] = v
        return out

    def evaluate(self, sums: Mapping[str, Any], names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """Metrics' definitions (all, or those named) on sums of quantities (arrays of any shape); undefined values are
        NaN. For a metric over items (``over_items``) this is its value on one item's sums: :meth:`evaluate_items`."""
        s = Sums({k: np.asarray(v, dtype=np.float64) for k, v in sums.items()})  # numpy division: x / 0 is inf, not an error
        wanted = self.names if names is None else tuple(names)
        with np.errstate(all="ignore"):
            return {m.name: finite_or_nan(m.of(s)) for m in self.metrics if m.name in wanted}

    def evaluate_items(self, item_sums: Mapping[str, np.ndarray], names: Iterable[str] | None = None) -> dict[str, float]:
        """The metrics over items (all, or those named) from each item's sums (n_items,): the summary over items of the
        definition on each item (items where it is undefined left out; NaN when none is defined)."""
        wanted = self.item_metrics if names is None else tuple(n for n in names if n in self.item_metrics)
        values = self.evaluate(item_sums, wanted)
        out = {}
        for name in wanted:
            v = values[name][~np.isnan(values[name])]
            out[name] = float(np.median(v)) if v.size else np.nan
        return out

    def unavailable(self, missing: Mapping[str, int], n_runs: int) -> dict[str, str]:
        """Metric -> why it is empty, given how many of a cell's ``n_runs`` paired runs lack each input field.

        ``missing[f]`` counts the pairs where field ``f`` is not logged on either side.
        """
        out: dict[str, str] = {}
        for m in self.metrics:
            lacking: dict[int, list[str]] = {}
            for f in sorted(self.inputs_of(m.name)):
                if missing.get(f, 0):
                    lacking.setdefault(missing[f], []).append(self.input_words.get(f, f))
            if lacking:
                out[m.name] = "; ".join(f"{' and '.join(fs)} not logged on {k} of {n_runs} paired runs"
                                        for k, fs in sorted(lacking.items(), reverse=True))
        return out


def finite_or_nan(values: Any) -> np.ndarray:
    """``values`` as a float array with every non-finite entry (a zero denominator) NaN: undefined, not infinite.

    Parameters
    ----------
    values : numbers, an array or a :class:`~lengthlens.stats.dual.Dual` (its value is taken).

    Returns
    -------
    numpy.ndarray
        A float64 copy (0-d for a scalar).

    Examples
    --------
    >>> finite_or_nan([1.0, float("inf"), -2.0]).tolist()
    [1.0, nan, -2.0]
    """
    v = np.array(values.value if isinstance(values, Dual) else values, dtype=np.float64)
    if v.ndim == 0:
        return v if np.isfinite(v) else np.asarray(np.nan)
    bad = ~np.isfinite(v)
    if bad.any():
        v[bad] = np.nan
    return v


@lru_cache(maxsize=4096)
def dependencies(fn: Callable[[Sums], Any], keys: tuple[str, ...]) -> tuple[str, ...]:
    """The keys ``fn`` has a derivative by, evaluated once on duals of distinct positive values (cached).

    What a metric's definition reads, found by running it rather than declared by hand, so a metric's
    inputs cannot be half-filled.

    Parameters
    ----------
    fn : a metric's definition over named sums (:class:`Sums`).
    keys : the sums it may read.

    Returns
    -------
    tuple of str
        The keys, in the order given, that the value depends on.

    Examples
    --------
    >>> dependencies(lambda s: s.L / s.L_star, ("L", "L_star", "n"))
    ('L', 'L_star')
    """
    probe = Sums({k: Dual.variable(np.float64(50.0 + 3.0 * i), k) for i, k in enumerate(keys)})
    with np.errstate(all="ignore"):
        out = fn(probe)
    return tuple(k for k in keys if isinstance(out, Dual) and k in out.grad)


class _Fields(Sums):
    """The runs' fields for the definitions: a field the runs lack reads as NaN (not logged), ``one`` as ones."""

    def __init__(self, runs: Mapping[str, np.ndarray], n: int) -> None:
        super().__init__(runs)
        self._n_runs = n
        self.setdefault("one", np.ones(n))

    def __missing__(self, name: str) -> np.ndarray:
        return np.full(self._n_runs, np.nan)


class _Recorder(Sums):
    """Run fields by name that remembers which were read (every field reads as ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    def __getitem__(self, name: str) -> np.ndarray:
        if name != "one":
            self.read.append(name)
        return np.ones(2)

    def __getattr__(self, name: str) -> np.ndarray:
        return self[name]


def _fields_read(quantities: Iterable[Quantity]) -> tuple[str, ...]:
    rec = _Recorder()
    with np.errstate(all="ignore"):
        for q in quantities:
            q.of(rec)
    return tuple(dict.fromkeys(rec.read))


# ------------------------------------------------------------------------------------------------
# The quantities: one number per paired run (relaxed run, and ``_star`` for its baseline run).
# ------------------------------------------------------------------------------------------------

def _graded(r: Sums) -> np.ndarray:
    """1 where both runs of the pair have a verdict."""
    return (~np.isnan(r.correct) & ~np.isnan(r.correct_star)).astype(float)


def _l_bar_run(accepted: np.ndarray, rounds: np.ndarray) -> np.ndarray:
    """Per-run accepted draft tokens per round, NaN where the run has no round."""
    return np.where(rounds > 0, accepted / np.where(rounds > 0, rounds, 1.0), np.nan)


def _per_run_ratio(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A run's own ratio x / y, NaN where it is undefined (a zero or unknown denominator)."""
    v = x / y
    return np.where(np.isfinite(v), v, np.nan)


#: The built-in per-run quantities the metrics sum.
QUANTITIES: tuple[Quantity, ...] = (
    Quantity("n", lambda r: r.one, description="paired runs"),
    Quantity("L", lambda r: r.output_tokens, description="output tokens of the relaxed run"),
    Quantity("L_star", lambda r: r.output_tokens_star, description="output tokens of the baseline run"),
    Quantity("R", lambda r: r.draft_rounds, description="verifier rounds of the relaxed run"),
    Quantity("R_star", lambda r: r.draft_rounds_star, description="verifier rounds of the baseline run"),
    Quantity("T", lambda r: r.wall_time_s, description="wall time of the relaxed run (s)"),
    Quantity("T_star", lambda r: r.wall_time_s_star, description="wall time of the baseline run (s)"),
    Quantity("lbar", lambda r: _l_bar_run(r.accepted_tokens, r.draft_rounds),
             description="per-run ℓ̄ = accepted / rounds of the relaxed run (0 where it has no round)"),
    Quantity("lbar_star", lambda r: _l_bar_run(r.accepted_tokens_star, r.draft_rounds_star),
             description="per-run ℓ̄ of the baseline run"),
    # ℓ̄'s count needs accepted_tokens too: without it the run's ℓ̄ is unknown, not absent
    Quantity("n_lbar", lambda r: r.draft_rounds > 0, ("accepted_tokens", "draft_rounds"),
             "1 where the relaxed run has a round (its ℓ̄ is defined)"),
    Quantity("n_lbar_star", lambda r: r.draft_rounds_star > 0, ("accepted_tokens", "draft_rounds"),
             "1 where the baseline run has a round"),
    Quantity("A", lambda r: r.accepted_tokens, description="accepted draft tokens of the relaxed run"),
    Quantity("A_star", lambda r: r.accepted_tokens_star, description="accepted draft tokens, baseline run"),
    Quantity("n_graded", _graded, description="1 where both runs have a verdict", absent_ok=("correct",)),
    Quantity("c", lambda r: _graded(r) * (r.correct == 1), description="1 where both are graded and the relaxed run is correct",
             absent_ok=("correct",)),
    Quantity("c_star", lambda r: _graded(r) * (r.correct_star == 1),
             description="1 where both are graded and the baseline run is correct", absent_ok=("correct",)),
    Quantity("w2r", lambda r: _graded(r) * (r.correct == 1) * (r.correct_star == 0), description="wrong → right pairs",
             absent_ok=("correct",)),
    Quantity("r2w", lambda r: _graded(r) * (r.correct == 0) * (r.correct_star == 1), description="right → wrong pairs",
             absent_ok=("correct",)),
    Quantity("cens", lambda r: r.censored, description="1 where the relaxed run stopped at its token budget"),
    Quantity("cens_star", lambda r: r.censored_star, description="1 where the baseline run stopped at its budget"),
    Quantity("rr_run", lambda r: _per_run_ratio(r.draft_rounds, r.draft_rounds_star),
             description="the run's own Rᵢ / R*ᵢ (0 where undefined)"),
    Quantity("n_rr_run", lambda r: ~np.isnan(_per_run_ratio(r.draft_rounds, r.draft_rounds_star)),
             description="1 where the run's own Rᵢ / R*ᵢ is defined"),
    Quantity("tr_run", lambda r: _per_run_ratio(r.wall_time_s, r.wall_time_s_star),
             description="the run's own Tᵢ / T*ᵢ (0 where undefined)"),
    Quantity("n_tr_run", lambda r: ~np.isnan(_per_run_ratio(r.wall_time_s, r.wall_time_s_star)),
             description="1 where the run's own Tᵢ / T*ᵢ is defined"),
)


# ------------------------------------------------------------------------------------------------
# The metrics, in the order of cells.csv.
# ------------------------------------------------------------------------------------------------

def _accuracy_change_ci(items: Sums, confidence_level: float) -> tuple[float, float, float, str]:
    """Tango's score interval of the accuracy change (one graded pair per item), a t interval over items with
    several seeds (Tango over the items' signs where they show no spread), in points."""
    from lengthlens.stats.paired import accuracy_change_interval  # paired.py reads this module's drop margin

    r = accuracy_change_interval(items.n_graded, items.c, items.c_star, confidence_level)
    return 100.0 * r.low, 100.0 * r.high, 100.0 * r.standard_error, r.method


#: The accuracy change's default interval, declared in its row.
ACCURACY_CHANGE_CI = ItemInterval(_accuracy_change_ci, "Tango's score interval; with several graded pairs per item a t "
                                  "interval over items")


def l_bar(s: Sums):
    return s.lbar / s.n_lbar


def l_bar_star(s: Sums):
    return s.lbar_star / s.n_lbar_star


def gain_pooled(s: Sums):
    return (s.A / s.R + 1.0) / (s.A_star / s.R_star + 1.0)


def length_ratio(s: Sums):
    return s.L / s.L_star


def rounds_ratio(s: Sums):
    return s.R / s.R_star


def time_ratio(s: Sums):
    return s.T / s.T_star


#: The built-in metrics, one row each, in cells.csv's order.
METRICS: tuple[Metric, ...] = (
    Metric("l_bar", l_bar, "ℓ̄", "ℓ̄ = (1/n) Σᵢ Aᵢ / Rᵢ",
           "mean per-run accepted draft tokens per round (relaxed arm)", better="higher"),
    Metric("l_bar_star", l_bar_star, "ℓ̄*", "ℓ̄* = (1/n) Σᵢ A*ᵢ / R*ᵢ", "the same for the strict baseline", interval=None),
    Metric("l_bar_pooled", lambda s: s.A / s.R, "ℓ̄ pooled", "Σᵢ Aᵢ / Σᵢ Rᵢ", "sum(accepted) / sum(rounds), relaxed arm",
           interval=None, table=False),
    Metric("l_bar_pooled_star", lambda s: s.A_star / s.R_star, "ℓ̄* pooled", "Σᵢ A*ᵢ / Σᵢ R*ᵢ",
           "sum(accepted) / sum(rounds), baseline", interval=None, table=False),
    Metric("gain", lambda s: (l_bar(s) + 1.0) / (l_bar_star(s) + 1.0), "gain", "gain = (ℓ̄ + 1) / (ℓ̄* + 1)",
           "theoretical per-round gain (not a speed-up)", better="higher"),
    Metric("gain_pooled", gain_pooled, "gain pooled", "(Σᵢ Aᵢ / Σᵢ Rᵢ + 1) / (Σᵢ A*ᵢ / Σᵢ R*ᵢ + 1)",
           "the gain the length identity uses", better="higher", table=False),
    Metric("lambda", length_ratio, "λ", "λ = (Σᵢ Lᵢ) / (Σᵢ L*ᵢ)", "mean completion length ratio (relaxed / strict)",
           better="lower", influence=True),
    Metric("rounds_ratio", rounds_ratio, "R/R*", "R/R* = (Σᵢ Rᵢ) / (Σᵢ R*ᵢ)", "mean verifier rounds ratio (the primary cost)",
           better="lower", influence=True),
    Metric("rounds_ratio_predicted", lambda s: length_ratio(s) / gain_pooled(s), "λ/gain", "λ / gain_pooled",
           "verifier rounds ratio predicted by the length identity", better="lower"),
    Metric("time_ratio", time_ratio, "T/T*", "T/T* = (Σᵢ Tᵢ) / (Σᵢ T*ᵢ)", "mean wall time ratio", better="lower",
           influence=True),
    Metric("time_per_round_ratio", lambda s: time_ratio(s) / rounds_ratio(s), "time/round", "(T/T*) / (R/R*)",
           "wall time per verifier round, relaxed over strict", better="lower"),
    Metric("throughput_ratio", lambda s: (s.L / s.T) / (s.L_star / s.T_star), "tok/s", "(Σᵢ Lᵢ / Σᵢ Tᵢ) / (Σᵢ L*ᵢ / Σᵢ T*ᵢ)",
           "output tokens per second, relaxed over strict (per request: under load, each request's own rate)",
           better="higher", table=False),
    Metric("accuracy", lambda s: s.c / s.n_graded, "acc", "Σᵢ cᵢ / n_graded", "accuracy of the relaxed arm on graded pairs",
           interval=None, table=False),
    Metric("accuracy_star", lambda s: s.c_star / s.n_graded, "acc*", "Σᵢ c*ᵢ / n_graded",
           "accuracy of the baseline on the same graded pairs", interval=None, table=False),
    Metric("accuracy_delta_pp", lambda s: 100.0 * ((s.c - s.c_star) / s.n_graded), "Δacc pp",
           "100 · (Σᵢ cᵢ − Σᵢ c*ᵢ) / n_graded", "accuracy change, percentage points", interval="difference", fmt="f1",
           better="higher", reference=0.0, ci_stem="accuracy_delta", default_ci=ACCURACY_CHANGE_CI),
    Metric("censored_frac", lambda s: s.cens / s.n, "cens", "(1/n) Σᵢ 1[run i stopped at its budget]",
           "share of relaxed runs cut at the budget", interval=None),
    Metric("censored_frac_star", lambda s: s.cens_star / s.n, "cens*", "(1/n) Σᵢ 1[baseline run i stopped at its budget]",
           "share of baseline runs cut at the budget", interval=None),
    Metric("rounds_ratio_median_item", lambda s: s.rr_run / s.n_rr_run, "R/R* median item",
           "median over items of (1/nᵢ) Σⱼ Rᵢⱼ / R*ᵢⱼ", "median over items of the item's mean per-run R/R*", interval=None,
           better="lower", table=False, over_items="median"),
    Metric("time_ratio_median_item", lambda s: s.tr_run / s.n_tr_run, "T/T* median item",
           "median over items of (1/nᵢ) Σⱼ Tᵢⱼ / T*ᵢⱼ", "median over items of the item's mean per-run T/T*", interval=None,
           better="lower", table=False, over_items="median"),
)

#: The built-in registry.
REGISTRY = Registry(QUANTITIES, METRICS)
_CURRENT = [REGISTRY]


def registry() -> Registry:
    """The metric registry in use: :data:`REGISTRY`, or the one :func:`extended` put in place.

    Returns
    -------
    Registry

    Examples
    --------
    >>> "lambda" in registry().names
    True
    """
    return _CURRENT[0]


@contextmanager
def extended(*rows: Metric | Quantity) -> Iterator[Registry]:
    """Use the registry with more metrics (and the quantities they sum) while the ``with`` block runs.

    A metric added this way is computed wherever the built-in ones are (cells.csv, the report),
    in this process: the analyses run serially meanwhile, since worker processes import the
    registry from its module. For a metric of your own for good, add its row to :data:`METRICS`.

    Parameters
    ----------
    *rows : the :class:`Metric` rows and the :class:`Quantity` rows they sum, added after the registry's own.

    Returns
    -------
    contextlib.AbstractContextManager of Registry
        The extended registry, in use until the block ends.

    Examples
    --------
    >>> from lengthlens.stats import metrics
    >>> row = metrics.Metric("doc_draft_per_round", lambda s: s.Ddoc / s.R, "Ddoc/R", "Σ Dᵢ / Σ Rᵢ", "drafted per round",
    ...                      interval=None)
    >>> q = metrics.Quantity("Ddoc", lambda r: r.draft_tokens, ("draft_tokens",), "draft tokens")
    >>> with metrics.extended(q, row) as reg:
    ...     "doc_draft_per_round" in reg.names
    True
    """
    base = _CURRENT[0]
    reg = Registry(base.quantities + tuple(r for r in rows if isinstance(r, Quantity)),
                   base.metrics + tuple(r for r in rows if isinstance(r, Metric)), base.input_words)
    _CURRENT[0] = reg
    try:
        yield reg
    finally:
        _CURRENT[0] = base


def drop_2pp_point(delta_pp: float) -> bool:
    """The study's point rule: the accuracy change's point estimate is at most −2 points (it fires on noise at n = 12–30).

    Parameters
    ----------
    delta_pp : the accuracy change, in points.

    Returns
    -------
    bool

    Examples
    --------
    >>> drop_2pp_point(-2.0), drop_2pp_point(-1.9)
    (True, False)
    """
    return bool(delta_pp <= -ACCURACY_DROP_PP)
