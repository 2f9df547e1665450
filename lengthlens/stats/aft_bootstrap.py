"""Bootstrap refits of the paired AFT model: one vectorised Newton solve over many resample weight rows.

Each row of a count matrix is a resample of items; the refits share one problem and iterate together,
so 1,000 refits cost a few passes over (B, N). Kept beside the sandwich interval as an option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lengthlens.stats.aft import (
    AFTFit,
    Dist,
    _AFTProblem,
    _html,
    _newton,
    _no_spread,
    _prepare,
    _separation,
    fit_aft,
)

if TYPE_CHECKING:  # pandas is imported where a frame is built: worker processes need none
    import pandas as pd

__all__ = ["AFTBootstrap", "fit_aft_bootstrap"]


@dataclass(frozen=True, eq=False)  # holds arrays: compare fields, not objects
class AFTBootstrap:
    """Bootstrap replicates of beta for one AFT distribution (one per weight row).

    ``beta`` holds +/-inf for resamples where an arm has no finished run (the MLE runs off to
    infinity; these count as extreme values in the percentile interval) and NaN for resamples that
    failed to converge or are undefined, which are dropped and counted in ``n_failed``.
    """

    dist: str
    beta: np.ndarray
    converged: np.ndarray
    n_infinite: int
    n_failed: int

    def to_frame(self) -> pd.DataFrame:
        """The replicates, one row per resample."""
        import pandas as pd
        return pd.DataFrame({"beta": self.beta, "lambda_aft": np.exp(self.beta), "converged": self.converged})

    def _repr_html_(self) -> str:
        import pandas as pd
        summary = pd.DataFrame([{"dist": self.dist, "n": len(self.beta), "n_infinite": self.n_infinite,
                                 "n_failed": self.n_failed}])
        return _html("AFT bootstrap replicates", summary)


def fit_aft_bootstrap(
    lengths: np.ndarray,
    censored: np.ndarray,
    relaxed_indicator: np.ndarray,
    weight_rows: np.ndarray,
    dist: Dist = "lognormal",
    start: AFTFit | None = None,
) -> AFTBootstrap:
    """Refit the AFT model for every row of ``weight_rows`` (B, n_runs), vectorised across rows.

    All rows are solved together by damped Newton from the point fit ``start`` (a warm start:
    resamples sit near it, so 3–6 iterations usually suffice).
    """
    y, event, x = _prepare(lengths, censored, relaxed_indicator)
    W = np.asarray(weight_rows, dtype=float)
    if W.ndim != 2 or W.shape[1] != len(y):
        raise ValueError("weight_rows must have shape (B, n_runs)")
    if start is None or not start.converged:
        start = fit_aft(np.exp(y), ~event, x, None, dist)
    B = W.shape[0]
    beta = np.full(B, np.nan)
    lim, irregular = _separation(W, event, x)
    beta[irregular] = lim[irregular]
    # Resamples where each arm shows a single length (e.g. one item drawn every time in a small
    # cell) have no spread: sigma's MLE is 0 and beta is not identified. They stay NaN (failed).
    irregular = irregular | _no_spread(W, y, x)
    converged = np.zeros(B, dtype=bool)
    if start.converged and np.any(~irregular):
        psi0 = np.tile([1.0 / start.sigma, start.intercept / start.sigma, start.beta / start.sigma], (B, 1))
        problem = _AFTProblem(y, event, x, W, dist)
        psi, conv, _ = _newton(problem, psi0, ~irregular)
        ok = conv & ~irregular
        beta[ok] = psi[ok, 2] / psi[ok, 0]
        converged = ok
    n_inf = int(np.sum(np.isinf(beta)))
    return AFTBootstrap(dist=dist, beta=beta, converged=converged, n_infinite=n_inf,
                        n_failed=int(np.sum(np.isnan(beta))))
