"""Forward-mode derivatives of the cell metrics: a value carried with its derivatives by the sums it reads.

The delta-method SEs (:mod:`lengthlens.stats.delta`) need each metric's gradient with respect to
the cell's sums, in every bootstrap resample. Evaluating the metric's one definition in
:mod:`lengthlens.stats.metrics` on :class:`Dual` inputs gives the value and the exact gradient in
one pass, where central differences took two more evaluations per field and were off by the
step's truncation error (~1e-10 relative). The value is the very array the plain definition
computes (the same operations on the same arrays), so only the SEs depend on how derivatives
are taken.

Only what the metrics use is defined: +, -, * with numbers, arrays and duals, and the division
:func:`lengthlens.stats.metrics._div` (which hands a dual to :func:`divide`). A derivative is a
number (1.0 for a sum itself, kept as a Python float so that it costs no array operation) or an
array; a sum that a value does not depend on has no entry.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Grad = dict[int, "float | np.ndarray"]


class Dual:
    """A value (array) and its derivatives {field index: d value / d sum}."""

    __slots__ = ("value", "grad")
    __array_ufunc__ = None  # ndarray (op) Dual defers to Dual's reflected operators

    def __init__(self, value, grad: Grad):
        self.value = value
        self.grad = grad

    @classmethod
    def variable(cls, value, index: int) -> "Dual":
        """A sum itself: derivative 1 with respect to itself."""
        return cls(value, {index: 1.0})

    def __add__(self, other) -> "Dual":
        if isinstance(other, Dual):
            return Dual(self.value + other.value, _combine(self.grad, other.grad, np.add))
        return Dual(self.value + other, self.grad)

    __radd__ = __add__

    def __sub__(self, other) -> "Dual":
        if isinstance(other, Dual):
            return Dual(self.value - other.value, _combine(self.grad, other.grad, np.subtract))
        return Dual(self.value - other, self.grad)

    def __rsub__(self, other) -> "Dual":
        return Dual(other - self.value, {k: -g for k, g in self.grad.items()})

    def __neg__(self) -> "Dual":
        return Dual(-self.value, {k: -g for k, g in self.grad.items()})

    def __mul__(self, other) -> "Dual":
        if isinstance(other, Dual):
            grad = _combine({k: g * other.value for k, g in self.grad.items()},
                            {k: g * self.value for k, g in other.grad.items()}, np.add)
            return Dual(self.value * other.value, grad)
        return Dual(self.value * other, {k: _times(g, other) for k, g in self.grad.items()})

    __rmul__ = __mul__


def _times(g: "float | np.ndarray", factor):
    """A derivative times ``factor``: the factor itself when the derivative is the 1.0 of a sum (no array operation)."""
    return factor if isinstance(g, float) and g == 1.0 else g * factor


def _combine(a: Grad, b: Grad, op: Callable) -> Grad:
    """Entry-wise ``op`` of two gradients; an entry missing on one side is 0 there."""
    out = dict(a)
    for k, g in b.items():
        out[k] = op(a[k], g) if k in a else (g if op is np.add else -g)
    return out


def divide(a, b, quotient: np.ndarray) -> Dual:
    """The dual of a / b given the quotient's value (computed, and masked where b is 0, by the caller).

    d(a/b) = da / b - (a/b) db / b. Where b is 0 the derivatives are inf or NaN, like the value.
    """
    vb = b.value if isinstance(b, Dual) else b
    with np.errstate(divide="ignore", invalid="ignore"):  # b = 0: the value is NaN already
        inv = np.divide(1.0, vb)
    grad: Grad = {}
    if isinstance(a, Dual):
        grad = {k: _times(g, inv) for k, g in a.grad.items()}
    if isinstance(b, Dual):
        minus_q_inv = -(quotient * inv)
        from_b = {k: _times(g, minus_q_inv) for k, g in b.grad.items()}
        grad = _combine(grad, from_b, np.add)
    return Dual(quotient, grad)
