"""The drill-down lists the most influenced cells first, each cell's items by influence, with runs cut at the budget."""

from __future__ import annotations

import numpy as np
import polars as pl

from lengthlens.analyses.drilldown import item_drivers


def _units(seed: int = 3) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for m, spread in (("calm", 1.05), ("wild", 4.0), ("mid", 1.6)):
        for i in range(8):
            for s in range(2):
                L = int(rng.integers(100, 400) * (spread if i == 0 else 1))
                rows.append({"target": "T", "draft": "D", "dataset": "a", "method": m, "params": "p", "serving": "",
                             "item_id": f"i{i}", "output_tokens": L, "output_tokens_star": int(rng.integers(100, 400)),
                             "censored": bool(L >= 1000), "censored_star": bool(i == 1 and s == 0),
                             "correct": bool(rng.random() < 0.5), "correct_star": bool(rng.random() < 0.6)})
    return pl.DataFrame(rows)


def test_cells_most_influenced_first_items_by_shift_and_cut_runs_counted():
    u = _units()
    got = item_drivers(u, top=2)
    df = u.to_pandas()
    influence = {}
    for m, g in df.groupby("method"):
        L, Ls = g["output_tokens"].sum(), g["output_tokens_star"].sum()
        per = g.groupby("item_id").agg(L=("output_tokens", "sum"), Ls=("output_tokens_star", "sum"),
                                       cut=("censored", "sum"), cut_star=("censored_star", "sum"))
        shift = (L / Ls - (L - per["L"]) / (Ls - per["Ls"])).abs()
        influence[m] = shift.max()
        mine = got[got["method"] == m]
        # Within the cell: by |shift|, largest first (the λ drivers lead, accuracy-only items after them).
        lam = mine[mine["driver"].str.contains("λ")]
        assert list(lam["item_id"]) == list(shift.sort_values(ascending=False, kind="mergesort").index[:2])
        for r in mine.itertuples():
            assert (r.n_censored, r.n_censored_star) == (per.loc[r.item_id, "cut"], per.loc[r.item_id, "cut_star"])
        assert mine["cell_influence"].iloc[0] == influence[m]
    order = list(dict.fromkeys(got["method"]))
    assert order == sorted(influence, key=lambda m: -influence[m]) == ["wild", "mid", "calm"]
    assert got["n_censored"].sum() > 0 and got["n_censored_star"].sum() == 1
