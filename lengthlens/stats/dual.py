"""Forward-mode derivatives: a value carried with its exact derivatives by the sums it reads.

The delta-method standard errors (:mod:`lengthlens.stats.delta`) need each statistic's gradient with
respect to the sums it is a function of, in every bootstrap resample. Evaluating the statistic's
one definition on :class:`Dual` inputs gives the value and the exact gradient in one pass, so no
metric is written twice. The value is the very array the plain definition computes (the same
operations on the same arrays).

A dual supports what a statistic written with plain operators uses: ``+ - * / **`` with numbers,
arrays and duals, and the numpy functions ``np.log``, ``np.exp``, ``np.sqrt`` (through
``__array_ufunc__``). A derivative is a number (1.0 for a sum itself, kept as a Python float so that
it costs no array operation) or an array; a sum that a value does not depend on has no entry.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

Grad = dict[Any, "float | np.ndarray"]

__all__ = ["Dual"]


def _times(g: "float | np.ndarray", factor):
    """A derivative times ``factor``: the factor itself when the derivative is the 1.0 of a sum (no array operation)."""
    return factor if isinstance(g, float) and g == 1.0 else g * factor


def _scaled(grad: Grad, factor) -> Grad:
    return {k: _times(g, factor) for k, g in grad.items()}


def _combine(a: Grad, b: Grad, sign: float = 1.0) -> Grad:
    """a + sign * b, entry-wise; an entry missing on one side is 0 there."""
    out = dict(a)
    for k, g in b.items():
        g = g if sign > 0 else -g
        out[k] = a[k] + g if k in a else g
    return out


def _value(x):
    return x.value if isinstance(x, Dual) else x


class Dual:
    """A value (array or number) and its derivatives {sum name: d value / d sum}."""

    __slots__ = ("value", "grad")

    def __init__(self, value, grad: Grad):
        self.value = value
        self.grad = grad

    @classmethod
    def variable(cls, value, key) -> "Dual":
        """A sum itself: derivative 1 with respect to itself."""
        return cls(value, {key: 1.0})

    # --- arithmetic -----------------------------------------------------------------------
    def __add__(self, other) -> "Dual":
        if isinstance(other, Dual):
            return Dual(self.value + other.value, _combine(self.grad, other.grad))
        return Dual(self.value + other, self.grad)

    __radd__ = __add__

    def __sub__(self, other) -> "Dual":
        if isinstance(other, Dual):
            return Dual(self.value - other.value, _combine(self.grad, other.grad, -1.0))
        return Dual(self.value - other, self.grad)

    def __rsub__(self, other) -> "Dual":
        return Dual(other - self.value, {k: -g for k, g in self.grad.items()})

    def __neg__(self) -> "Dual":
        return Dual(-self.value, {k: -g for k, g in self.grad.items()})

    def __pos__(self) -> "Dual":
        return self

    def __mul__(self, other) -> "Dual":
        if isinstance(other, Dual):
            return Dual(self.value * other.value,
                        _combine(_scaled(self.grad, other.value), _scaled(other.grad, self.value)))
        return Dual(self.value * other, _scaled(self.grad, other))

    __rmul__ = __mul__

    def __truediv__(self, other) -> "Dual":
        return _divide(self, other)

    def __rtruediv__(self, other) -> "Dual":
        return _divide(other, self)

    def __pow__(self, exponent) -> "Dual":
        if isinstance(exponent, Dual):  # a ** b = exp(b log a)
            return np.exp(exponent * np.log(self))
        value = self.value ** exponent
        return Dual(value, _scaled(self.grad, exponent * self.value ** (exponent - 1)))

    def __rpow__(self, base) -> "Dual":  # base ** x = exp(x log base)
        value = base ** self.value
        return Dual(value, _scaled(self.grad, value * np.log(base)))

    # --- numpy functions ------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            return NotImplemented
        if ufunc in _BINARY:
            a, b = inputs
            return _BINARY[ufunc](a, b)
        if ufunc in _UNARY and len(inputs) == 1:
            return _UNARY[ufunc](inputs[0])
        return NotImplemented


def _divide(a, b) -> Dual:
    """d(a/b) = da / b - (a/b) db / b; where b is 0 the derivatives are inf or NaN, like the value."""
    va, vb = _value(a), _value(b)
    quotient = va / vb
    inv = 1.0 / vb
    grad: Grad = _scaled(a.grad, inv) if isinstance(a, Dual) else {}
    if isinstance(b, Dual):
        grad = _combine(grad, _scaled(b.grad, -(quotient * inv)))
    return Dual(quotient, grad)


def _log(x: Dual) -> Dual:
    return Dual(np.log(x.value), _scaled(x.grad, 1.0 / x.value))


def _exp(x: Dual) -> Dual:
    value = np.exp(x.value)
    return Dual(value, _scaled(x.grad, value))


def _sqrt(x: Dual) -> Dual:
    value = np.sqrt(x.value)
    return Dual(value, _scaled(x.grad, 0.5 / value))


def _lift(op: Callable) -> Callable:
    """A binary ufunc on a dual and a number/array or two duals, through the dual's operators."""
    return lambda a, b: op(a if isinstance(a, Dual) else Dual(a, {}), b)


_BINARY = {
    np.add: _lift(lambda a, b: a + b),
    np.subtract: _lift(lambda a, b: a - b),
    np.multiply: _lift(lambda a, b: a * b),
    np.true_divide: lambda a, b: _divide(a, b),
    np.power: _lift(lambda a, b: a ** b),
}
_UNARY = {np.log: _log, np.exp: _exp, np.sqrt: _sqrt, np.negative: lambda x: -x, np.positive: lambda x: x}
