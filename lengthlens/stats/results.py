"""Small, frozen result objects with a ``to_frame()`` and an HTML repr for Jupyter (like scipy.stats results)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pandas is imported where a frame is built: worker processes need none
    import pandas as pd


@dataclass(frozen=True)
class ConfidenceInterval:
    """A two-sided interval; NaN bounds mean the interval is not defined (e.g. too few items)."""

    low: float
    high: float

    def __contains__(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its bootstrap interval.

    ``undefined_resamples`` counts resamples where the statistic had no value (e.g. a zero
    denominator); they are left out of the interval and reported rather than hidden.
    """

    point: float
    confidence_interval: ConfidenceInterval | None = None
    undefined_resamples: int = 0

    def __format__(self, spec: str) -> str:
        spec = spec or ".3g"
        if self.confidence_interval is None:
            return format(self.point, spec)
        ci = self.confidence_interval
        return f"{format(self.point, spec)} [{format(ci.low, spec)}, {format(ci.high, spec)}]"

    def __str__(self) -> str:
        return format(self)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def frame_html(df: pd.DataFrame, title: str | None = None, max_rows: int = 60) -> str:
    """A compact HTML table for notebooks (numbers to 4 significant digits)."""
    shown = df.head(max_rows)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>" for r in shown.itertuples(index=False))
    more = f"<p>… {len(df) - max_rows} more rows (use .to_frame())</p>" if len(df) > max_rows else ""
    cap = f"<caption>{html.escape(title)}</caption>" if title else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}"


@dataclass(frozen=True)
class Cell:
    """One relaxed arm paired with its strict baseline on the items where both runs are ok."""

    target: str
    draft: str
    dataset: str
    method: str
    params: str
    alpha: float | None
    n_items: int
    n_runs: int
    n_graded: int
    estimates: Mapping[str, Estimate]
    extras: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, metric: str) -> Estimate:
        return self.estimates[metric]

    def to_row(self) -> dict[str, Any]:
        """Flat columns as in cells.csv: metric, metric_lo, metric_hi (interval stems may differ)."""
        from lengthlens.stats.metrics import METRIC_BY_NAME

        row: dict[str, Any] = {
            "target": self.target, "draft": self.draft, "dataset": self.dataset, "method": self.method,
            "params": self.params, "alpha": self.alpha, "n_items": self.n_items, "n_runs": self.n_runs,
            "n_graded": self.n_graded,
        }
        for name, est in self.estimates.items():
            row[name] = est.point
            if est.confidence_interval is not None:
                stem = METRIC_BY_NAME[name].ci_name or name
                row[f"{stem}_lo"] = est.confidence_interval.low
                row[f"{stem}_hi"] = est.confidence_interval.high
        row.update(self.extras)
        return row

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd
        return pd.DataFrame([self.to_row()])

    def _repr_html_(self) -> str:
        import pandas as pd
        title = f"{self.target} / {self.draft} / {self.dataset}: {self.method} {self.params} (n={self.n_items} items)"
        body = pd.DataFrame(
            [{"metric": k, "estimate": v.point,
              "low": v.confidence_interval.low if v.confidence_interval else float("nan"),
              "high": v.confidence_interval.high if v.confidence_interval else float("nan")}
             for k, v in self.estimates.items()])
        return frame_html(body, title)


def _empty_cell_columns() -> list[str]:
    """The key, count and metric columns of cells.csv, for a table with no cells."""
    from lengthlens.stats.metrics import METRICS

    nan = float("nan")
    ests = {m.name: Estimate(nan, ConfidenceInterval(nan, nan) if m.interval else None) for m in METRICS}
    return list(Cell("", "", "", "", "", None, 0, 0, 0, ests).to_row())


@dataclass(frozen=True)
class CellTable:
    """All cells of a run set with the bootstrap settings that produced their intervals."""

    cells: tuple[Cell, ...]
    n_resamples: int
    seed: int
    ci_method: str
    confidence_level: float
    #: Bootstrap replicates kept for summaries over cells: name -> (n_resamples, n_cells), columns in cell order.
    replicates: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.cells)

    def __iter__(self):
        return iter(self.cells)

    def get(self, **keys: Any) -> Cell:
        """The single cell matching the given key fields, e.g. ``get(dataset='gsm8k', method='cactus', params='alpha0.35')``."""
        hits = [c for c in self.cells if all(getattr(c, k) == v for k, v in keys.items())]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} cells match {keys}")
        return hits[0]

    def to_frame(self) -> pd.DataFrame:
        """One row per cell, the columns of cells.csv."""
        import pandas as pd
        if not self.cells:
            return pd.DataFrame(columns=_empty_cell_columns())
        return pd.DataFrame([c.to_row() for c in self.cells])

    def _repr_html_(self) -> str:
        df = self.to_frame()
        cols = [c for c in ("dataset", "method", "params", "n_items", "gain", "lambda", "lambda_lo", "lambda_hi",
                            "rounds_ratio", "time_ratio", "accuracy_delta_pp") if c in df.columns]
        title = (f"{len(self)} cells; {self.ci_method} {self.confidence_level:.0%} intervals from "
                 f"{self.n_resamples} paired item resamples (seed {self.seed})")
        return frame_html(df[cols], title)
