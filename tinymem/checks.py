"""Argument checks shared by the package, so that one kind of mistake gets one message.

Each check names the argument, repeats the value it got and says what it expects, and raises
``ValueError`` for a bad value or ``TypeError`` for a wrong type: the error a user sees comes
from the call they wrote, not from deep inside NumPy. They cost a comparison or two; ops that
run on every call use them only where NumPy would not already refuse the input.
"""
import numbers

import numpy as np


class AxisError(ValueError, IndexError):
    """An axis outside a tensor's dimensions. A ``ValueError`` like every refused argument, and an
    ``IndexError`` as NumPy's own ``AxisError`` is, so code that catches either still does."""


def is_int(value):
    """True for Python and NumPy integers, False for bools (``True`` is not a size)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(name, value):
    """``value`` as an ``int`` when it is an integer >= 1, else a ValueError naming ``name``."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def real_number(name, value):
    """``value`` as a ``float`` when it is a real number (not a bool, not a string), else a
    TypeError naming ``name``; the range is the caller's to check."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    try:
        return float(value)
    except OverflowError:  # an integer past float64's range (10**400): no number a caller means
        raise ValueError(f"{name} is too large for a float, got {value!r}") from None


def true_or_false(name, value):
    """``value`` as a ``bool`` when it is True or False (a NumPy bool too), else a TypeError
    naming ``name``: 1, "no" or None would pick a branch by their truth, silently."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def axis_index(op, axis, ndim):
    """``axis`` in ``[-ndim, ndim)`` as an index in ``[0, ndim)``, else an :class:`AxisError`.
    Ops call it on every call: a plain int in range costs two comparisons."""
    if type(axis) is int and -ndim <= axis < ndim:
        return axis % ndim
    if not is_int(axis) or not -ndim <= axis < ndim:
        allowed = f"-{ndim}..{ndim - 1}" if ndim else "none: it is a 0-d tensor"
        raise AxisError(f"{op}: axis {axis!r} is out of range for a tensor with {ndim} dimensions "
                        f"(valid axes: {allowed})")
    return axis % ndim


def dropout_probability(name, value):
    """``value`` as a ``float`` when it is a number in [0, 1), else a TypeError (not a number)
    or a ValueError (NaN, below 0, 1 or above) naming ``name``. 1 would drop every value and
    scale the survivors by 1 / (1 - p), a division by zero."""
    p = real_number(name, value)
    if not 0 <= p < 1:
        raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")
    return p
