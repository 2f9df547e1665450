"""What :func:`lengthlens.load` returns: the validated, paired run table with what was skipped and why."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import polars as pl

from lengthlens.data.errors import LoadError  # noqa: F401 (public here and in loading)
from lengthlens.data.schema import ARM_KEY

if TYPE_CHECKING:  # pandas is imported where a frame is built: worker processes need none
    import pandas as pd

    from lengthlens.data.pairing import Derived


@dataclass(frozen=True)
class RunSet:
    """Every run found: the validated normalized table and the runs skipped with their reasons.

    ``table`` holds one row per distinct valid run (all statuses) with a boolean ``paired``
    column: True for ok runs that enter a cell (baselines and relaxed runs whose item/seed the
    baseline has). ``skipped`` has (path, reason, stage) for every run not loaded or not paired.
    """

    table: pl.DataFrame
    skipped: pl.DataFrame
    sources: tuple[str, ...]
    n_found: int
    warnings: tuple[str, ...] = field(default=())
    #: The grading policy of the graders that read the texts (``default`` or ``study``).
    grading: str = "default"

    def __post_init__(self) -> None:
        from lengthlens.data.serving import with_serving

        # A table built by hand (tests, notebooks) gets its serving condition like a loaded one.
        object.__setattr__(self, "table", with_serving(self.table))

    @cached_property
    def paired(self) -> pl.DataFrame:
        """Ok runs that enter cells (computed once: at scale it is most of the table)."""
        return self.table.filter(pl.col("paired"))

    @cached_property
    def derived(self) -> Derived:
        """The runs derived once for every analysis: derived columns, channel split, cell pairs (each on first use)."""
        from lengthlens.data.pairing import Derived

        return Derived(self.table)

    def to_frame(self) -> pd.DataFrame:
        """The normalized table as pandas (text column left out: it is large and rarely wanted here)."""
        return self.table.drop("text").to_pandas()

    def summary(self) -> str:
        """A few lines for a terminal: what was found, loaded, skipped and why."""
        t = self.table
        if "shared_baseline" in t.columns:  # a shared autoregressive baseline counts once
            t = t.filter(~pl.col("shared_baseline"))
        arms = t.select(ARM_KEY).unique().height
        lines = [
            f"{self.n_found} runs found in {len(self.sources)} source(s); {t.height} loaded "
            f"({t.filter(pl.col('paired')).height} paired into cells), {self.skipped.height} listed as skipped or unpaired",
            f"{arms} arms, {_pairs(t)} target-draft pair(s), "
            f"{_datasets_line(t)}",
        ]
        if self.skipped.height:
            reasons = (
                self.skipped.with_columns(pl.col("reason").str.replace(r"duplicate of .*", "duplicate of another run")
                                          .str.replace(r"^field 'output_tokens': \d+ exceeds max_new_tokens.*", "output_tokens exceeds the budget")
                                          .str.replace(r"^field '(\w+)': \d+ accepted draft tokens but only \d+ drafted",
                                                       "field '${1}': more accepted draft tokens than drafted")
                                          .str.replace(r"setting differs from the baseline: .*", "setting differs from the baseline"))
                .group_by("reason").len().sort("len", descending=True)
            )
            for r in reasons.head(8).iter_rows(named=True):
                lines.append(f"  skipped {r['len']:>6}: {r['reason'][:160]}")
            if reasons.height > 8:
                lines.append(f"  ... {reasons.height - 8} more reasons (see skipped.csv)")
        from lengthlens.data.coverage import incomplete_lines

        incomplete = incomplete_lines(self.table)
        lines += [f"  {line}" for line in incomplete[:10]]
        if len(incomplete) > 10:
            lines.append(f"  ... {len(incomplete) - 10} more incomplete arms")
        for w in self.warnings[:10]:
            lines.append(f"  warning: {w}")
        if len(self.warnings) > 10:
            lines.append(f"  ... {len(self.warnings) - 10} more warnings")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(self.summary()) + "</pre>"

    def __repr__(self) -> str:
        return f"RunSet({self.summary().splitlines()[0]})"


def _pairs(t: pl.DataFrame) -> int:
    """Target–draft pairs of the relaxed arms (an autoregressive baseline serves them and is no pair of its own)."""
    relaxed = t.filter(pl.col("method") != "strict")
    return (relaxed if relaxed.height else t).select("target", "draft").unique().height


def benchmark_of(dataset: str, targets: list[str]) -> str:
    """The benchmark a dataset folder holds: ``aime24_qwen3`` run on target ``Qwen3-8B`` is ``aime24`` (the suffix
    names the target, which is a column of its own)."""
    head, sep, tail = str(dataset).rpartition("_")
    key = re.sub(r"[^a-z0-9]", "", tail.lower())
    if sep and head and key and any(key in re.sub(r"[^a-z0-9]", "", str(t).lower()) for t in targets):
        return head
    return str(dataset)


def benchmarks_of(t: pl.DataFrame) -> dict[str, list[str]]:
    """Distinct benchmarks of a run table with the dataset folders that hold them (one benchmark on two targets counts once)."""
    if not t.height:
        return {}
    groups: dict[str, list[str]] = {}
    for ds, tg in t.group_by("dataset").agg(pl.col("target").unique()).sort("dataset").iter_rows():
        groups.setdefault(benchmark_of(ds, tg), []).append(ds)
    return {b: sorted(f) for b, f in sorted(groups.items())}


def _datasets_line(t: pl.DataFrame) -> str:
    """The datasets as the report counts them: benchmarks, with the folders when a benchmark has several."""
    b = benchmarks_of(t)
    n_folders = sum(len(f) for f in b.values())
    return f"{len(b)} dataset(s)" + (f" in {n_folders} dataset folders" if n_folders != len(b) else "")
