"""Plausibility rules of one run record: counters that cannot all be true at once, each defined once.

A rule is written once, in a small expression language whose terms evaluate both on one record
(a mapping, for the record model :class:`lengthlens.data.schema.RunRecord`) and as a polars
expression (for the vectorised screen of flat tables). Both evaluations use the same null logic
(Kleene: a comparison with a missing value is unknown, and an unknown rule does not fire), so the
record path and the table path cannot disagree; a property test checks it on random records.

The rules and their bounds (docs/input-rules.md explains each):

* ``output_tokens`` beyond ``max_new_tokens``: a run that says it stopped for the budget
  (``finish_reason`` in :data:`LENGTH_FINISH_REASONS`) may pass it by at most
  ``max(BUDGET_SLACK_TOKENS, max_new_tokens / BUDGET_SLACK_DIVISOR)`` tokens (methods that emit
  several tokens per verification step check the budget after each step); any other run not at all.
* ``accepted_tokens`` above ``output_tokens`` or above ``draft_tokens``: accepted draft tokens are
  emitted tokens, and drafted ones.
* ``draft_rounds`` 0 while ``output_tokens`` > 1: the prefill gives the first token; every further
  token needs a verifier round.
* ``draft_rounds`` above ``output_tokens + 1``: every round emits at least one token (the slack of
  one covers engines that count the prefill as a round).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import polars as pl

#: finish_reason values meaning the run stopped because it hit the token budget.
LENGTH_FINISH_REASONS = frozenset({"length", "max_tokens", "max_new_tokens"})
#: A run stopped at the budget may pass it by this many tokens, or by BUDGET_SLACK_DIVISOR-th of it if larger.
BUDGET_SLACK_TOKENS = 64
#: ... the budget divided by this (5 %).
BUDGET_SLACK_DIVISOR = 20


@dataclass(frozen=True)
class Term:
    """A value computed from a record's fields: ``fn`` on a mapping, ``expr`` on a table; None/null is unknown."""

    fn: Callable[[Mapping[str, Any]], Any]
    expr: pl.Expr

    def _binary(self, other: Any, op: Callable[[Any, Any], Any], pl_op: Callable[[pl.Expr, pl.Expr], pl.Expr]) -> Term:
        o = other if isinstance(other, Term) else lit(other)

        def fn(r: Mapping[str, Any]) -> Any:
            a, b = self.fn(r), o.fn(r)
            return None if a is None or b is None else op(a, b)

        return Term(fn, pl_op(self.expr, o.expr))

    def __add__(self, o: Any) -> Term: return self._binary(o, operator.add, operator.add)
    def __sub__(self, o: Any) -> Term: return self._binary(o, operator.sub, operator.sub)
    def __floordiv__(self, o: Any) -> Term: return self._binary(o, operator.floordiv, operator.floordiv)
    def __gt__(self, o: Any) -> Term: return self._binary(o, operator.gt, operator.gt)  # type: ignore[override]
    def __lt__(self, o: Any) -> Term: return self._binary(o, operator.lt, operator.lt)  # type: ignore[override]
    def __eq__(self, o: Any) -> Term: return self._binary(o, operator.eq, operator.eq)  # type: ignore[override]

    def __and__(self, o: Term) -> Term:
        def fn(r: Mapping[str, Any]) -> Any:
            a, b = self.fn(r), o.fn(r)
            if a is False or b is False:
                return False
            return None if a is None or b is None else True
        return Term(fn, self.expr & o.expr)

    def __or__(self, o: Term) -> Term:
        def fn(r: Mapping[str, Any]) -> Any:
            a, b = self.fn(r), o.fn(r)
            if a is True or b is True:
                return True
            return None if a is None or b is None else False
        return Term(fn, self.expr | o.expr)

    def __invert__(self) -> Term:
        return Term(lambda r: None if (a := self.fn(r)) is None else not a, ~self.expr)

    __hash__ = None  # type: ignore[assignment]  # == builds a term


def col(name: str) -> Term:
    """A field of the record."""
    return Term(lambda r: r.get(name), pl.col(name))


def lit(value: Any) -> Term:
    """A constant."""
    return Term(lambda r: value, pl.lit(value))


def is_in(term: Term, values: frozenset[str]) -> Term:
    """Whether the value is one of ``values``; a missing value is not (False, never unknown)."""
    return Term(lambda r: term.fn(r) in values, term.expr.is_in(sorted(values)).fill_null(False))


@dataclass(frozen=True)
class Rule:
    """A plausibility rule: the field it blames, when it fires, and the message (formatted with the record's fields)."""

    field: str
    fires: Term
    message: str


_out, _budget = col("output_tokens"), col("max_new_tokens")
_over = _out - _budget
_at_budget = is_in(col("finish_reason"), LENGTH_FINISH_REASONS)
_rounds, _accepted = col("draft_rounds"), col("accepted_tokens")

#: Every rule, in the order their messages are listed.
RULES: tuple[Rule, ...] = (
    Rule("output_tokens", (_over > 0) & ~_at_budget,
         "{output_tokens} exceeds max_new_tokens {max_new_tokens} and the run did not stop for the budget "
         "(finish_reason {finish_reason!r})"),
    Rule("output_tokens", _at_budget & (_over > BUDGET_SLACK_TOKENS) & (_over > _budget // BUDGET_SLACK_DIVISOR),
         "{output_tokens} exceeds max_new_tokens {max_new_tokens} by more than a last verification step can "
         f"(at most the larger of {BUDGET_SLACK_TOKENS} tokens and 1/{BUDGET_SLACK_DIVISOR} of the budget)"),
    Rule("accepted_tokens", _accepted > _out,
         "{accepted_tokens} accepted draft tokens but only {output_tokens} output tokens"),
    Rule("accepted_tokens", _accepted > col("draft_tokens"),
         "{accepted_tokens} accepted draft tokens but only {draft_tokens} drafted"),
    Rule("draft_rounds", (_rounds == 0) & (_out > 1),
         "0 verifier rounds but {output_tokens} output tokens (every token after the first needs a round)"),
    Rule("draft_rounds", (_rounds - 1) > _out,
         "{draft_rounds} verifier rounds but only {output_tokens} output tokens (each round emits at least one)"),
)

#: Fields the rules read (a table needs them all, as nulls where absent).
RULE_FIELDS = ("output_tokens", "max_new_tokens", "finish_reason", "draft_rounds", "accepted_tokens", "draft_tokens")


def violations(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, message) of every rule the record breaks."""
    return [(r.field, r.message.format_map(_Fmt(record))) for r in RULES if r.fires.fn(record) is True]


def violated(extra: pl.Expr | None = None) -> pl.Expr:
    """A boolean polars expression: True on rows that break any rule (null logic as in :func:`violations`)."""
    out = pl.any_horizontal([r.fires.expr.fill_null(False) for r in RULES])
    return out if extra is None else out | extra


class _Fmt(dict):
    def __init__(self, record: Mapping[str, Any]):
        super().__init__(record)

    def __missing__(self, key: str) -> None:
        return None
