"""The grading time budget: how long one load may spend running graded programs, all of them together.

Each program has its own CPU limit and a wall limit that scales with it (:class:`~.limits.Limits`);
the budget bounds their sum, so that many programs that sleep, or a problem file with thousands of
tests, cannot stretch a report without end. :func:`lengthlens.load` opens a :func:`session` for its
sources; the clock starts with the first program. A program still running when the budget is spent
is stopped, and every run not graded by then stays ungraded (``correct`` null, left out of
accuracy) with :data:`SPENT` in its detail; one warning counts them. Where the budget was spent,
which runs got graded depends on the machine's speed, so such a load is not cached.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["BUDGET_ENV", "DEFAULT_BUDGET_S", "SPENT", "SPENT_WARNING", "BudgetSpent", "Session", "budget_seconds", "current", "session"]

#: Environment variable for the budget in seconds when ``grading_budget_s`` / ``--grading-budget`` is not given.
BUDGET_ENV = "LENGTHLENS_GRADING_BUDGET_S"
#: Seconds of grading one load may spend by default: the study's 180 HumanEval runs take about 8 s here.
DEFAULT_BUDGET_S = 600.0
#: How the detail of a run left ungraded by the budget starts.
SPENT = "not graded: the grading time budget"
#: The words of the one warning that counts such runs (a load with it is not cached).
SPENT_WARNING = "were left ungraded because the grading time budget"


class BudgetSpent(RuntimeError):
    """The load's grading time budget is spent: the program was not run, or was stopped (the message says which)."""


def budget_seconds(value: float | None = None) -> float:
    """The budget in seconds: ``value``, else ``$LENGTHLENS_GRADING_BUDGET_S``, else :data:`DEFAULT_BUDGET_S`.

    Examples
    --------
    >>> budget_seconds(30)
    30.0
    """
    if value is None:
        raw = os.environ.get(BUDGET_ENV, "").strip()
        if not raw:
            return DEFAULT_BUDGET_S
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{BUDGET_ENV}={raw!r}: give the grading time budget in seconds, e.g. 600") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"the grading time budget must be a positive number of seconds, not {value!r}")
    return float(value)


@dataclass
class Session:
    """One load's budget (``seconds``) and how many programs run at once (``workers``); the clock starts on first use."""

    seconds: float
    workers: int
    started: float | None = None

    def deadline(self) -> float:
        """The monotonic time the budget ends (the clock starts at the first call; two first calls at once start it
        within microseconds of each other, which no deadline can tell apart)."""
        if self.started is None:
            self.started = time.monotonic()
        return self.started + self.seconds

    def spent(self) -> bool:
        return self.started is not None and time.monotonic() >= self.started + self.seconds

    @property
    def detail(self) -> str:
        return f"{SPENT} of {self.seconds:g} s was spent (--grading-budget, ${BUDGET_ENV})"

    def warning(self, n: int, counts: str) -> str:
        """The one line that counts the runs left ungraded by this budget."""
        return (f"{n} runs ({counts}) {SPENT_WARNING} of {self.seconds:g} s was spent: their accuracy is left out, "
                f"nothing else changes; raise it with --grading-budget or ${BUDGET_ENV}")


_current: Session | None = None


def current() -> Session | None:
    """The budget of the load running now, or None (a grader called on its own has no total budget)."""
    return _current


@contextlib.contextmanager
def session(seconds: float, workers: int) -> Iterator[Session]:
    """Give the graders of everything loaded inside the block one budget of ``seconds`` and ``workers`` programs at once."""
    global _current
    outer = _current
    _current = Session(seconds, max(1, int(workers)))
    try:
        yield _current
    finally:
        _current = outer
