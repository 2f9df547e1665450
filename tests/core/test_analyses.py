"""Attribution, censoring table and their consistency with the cell table, against plain computations."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lengthlens as ll
from lengthlens.analyses.analyse import censoring_table
from lengthlens.analyses.analyse import attribution
from lengthlens.stats.resample import counts_for_group
from lengthlens.report import wording


def _rec(method, item, think, answer, L, budget=1000):
    return dict(target="Qwen3-8B", draft="Qwen3-0.6B", dataset="ds", method=method,
                params="strict" if method == "strict" else "alpha0.2", alpha=None if method == "strict" else 0.2,
                item_id=f"case_{item:03d}", seed=0, status="ok", output_tokens=L, max_new_tokens=budget,
                finish_reason="length" if L >= budget else "stop", draft_rounds=max(1, L // 4),
                accepted_tokens=L - max(1, L // 4), draft_tokens=4 * max(1, L // 4), wall_time_s=L / 50,
                text=f"<think>{'t' * think}</think>{'a' * answer}")


@pytest.fixture()
def runs(tmp_path):
    rng = np.random.default_rng(3)
    recs, expect = [], []
    for i in range(15):
        tb, ab = int(rng.integers(50, 400)), int(rng.integers(10, 80))
        tr, ar = tb + int(rng.integers(-20, 300)), ab + int(rng.integers(-10, 20))
        recs += [_rec("strict", i, tb, ab, (tb + ab) // 3), _rec("cactus", i, tr, ar, 1000 if i % 5 == 0 else (tr + ar) // 3)]
        expect.append((tb, ab, tr, ar))
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs))
    return ll.load(f), expect


def test_attribution_equals_plain_loop_and_bootstrap(runs):
    rs, expect = runs
    a = attribution(rs, n_resamples=2000, seed=5)
    row = a.cells.iloc[0]
    extra = sum((tr + ar) - (tb + ab) for tb, ab, tr, ar in expect)
    extra_t = sum(tr - tb for tb, ab, tr, ar in expect)
    assert row.extra_chars == extra and row.extra_chars_thinking == extra_t
    assert row.thinking_share == pytest.approx(extra_t / extra)
    shares = [(tr - tb) / ((tr + ar) - (tb + ab)) for tb, ab, tr, ar in expect if (tr + ar) != (tb + ab)]
    assert row.item_share_median == pytest.approx(np.median(shares))
    # The interval from the cell table's own draws, recomputed by a plain loop over resamples.
    counts = counts_for_group(5, ("Qwen3-8B", "Qwen3-0.6B", "ds"), 15, 2000)
    d_all = np.array([(tr + ar) - (tb + ab) for tb, ab, tr, ar in expect], float)
    d_think = np.array([tr - tb for tb, ab, tr, ar in expect], float)
    boot = [(c @ d_think) / (c @ d_all) for c in counts]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    assert row.thinking_share_lo == pytest.approx(lo, rel=1e-12)
    assert row.thinking_share_hi == pytest.approx(hi, rel=1e-12)
    assert a.summary.iloc[-1]["method"] == "all"


def test_censoring_table_consistent_with_cells(runs):
    rs, _ = runs
    cz = censoring_table(rs, n_resamples=1000, n_resamples_aft=200)
    cells = ll.cells(rs, n_resamples=1000).to_frame()
    assert len(cz) == 1
    r = cz.iloc[0]
    # Plain lambda and its interval are the cell table's (same draws, same definition).
    assert r.lambda_plain == pytest.approx(cells["lambda"].iloc[0], rel=1e-12)
    assert r.lambda_plain_lo == pytest.approx(cells["lambda_lo"].iloc[0], rel=1e-9)
    assert r.censored_frac == pytest.approx(cells["censored_frac"].iloc[0])
    assert r.censored_frac == pytest.approx(3 / 15)
    assert np.isfinite(r.lambda_aft_lognormal) and r.lambda_aft_lognormal_lo <= r.lambda_aft_lognormal <= r.lambda_aft_lognormal_hi


def test_analyse_has_every_table(runs):
    rs, _ = runs
    a = ll.analyse(rs, n_resamples=500, n_resamples_aft=100)
    assert {"cells", "arms", "table3", "skipped", "censoring", "attribution", "attribution_summary"} <= set(a.tables)
    assert "table4" not in a.tables  # no intervention arms here
    assert wording.headline(a).startswith("Across 1 cells")
