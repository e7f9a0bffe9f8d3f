"""Element-wise operations on numpy arrays or on plain Python floats, with numpy's answers.

The GPU time model (:mod:`wseplan.analytic.gpu_time`, :mod:`wseplan.analytic.collectives`) is written once, with
ordinary operators and these helpers. Given arrays (a sweep, a layout search) the helpers are numpy's ufuncs.
Given Python floats (one configuration: the scalar API evaluates a few rows, each through the same function) they
do the same IEEE-754 double operations in the interpreter, without numpy's ~1 us of dispatch per call on a
one-element array: ``+ - * /`` are correctly rounded in both, ``maximum``/``minimum`` keep numpy's NaN rule (a NaN
operand wins), ``where`` picks a branch, ``ceil``/``floor`` are exact.

Where the scalar form cannot give numpy's answer it raises instead of guessing: a division by zero
(``ZeroDivisionError``; numpy would give inf/NaN), ``ceil`` of inf or NaN (``OverflowError``/``ValueError``), an
overflowing power. Callers catch :data:`SCALAR_ERRORS` and evaluate the row through the array form, so a row's
numbers never depend on the path (``tests/test_fast_paths.py`` compares the two on random configurations).
"""
from __future__ import annotations

import math

import numpy as np

#: what the scalar forms raise where numpy would return inf or NaN: evaluate the array form instead
SCALAR_ERRORS = (ZeroDivisionError, OverflowError, ValueError)

_nd = np.ndarray


def asfloat(x):
    """``np.asarray(x, dtype=float)`` for arrays and array-likes; ``float(x)`` for a Python number."""
    if type(x) is float:
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    return np.asarray(x, dtype=float)


def maximum(a, b):
    if isinstance(a, _nd) or isinstance(b, _nd):
        return np.maximum(a, b)
    return a if (a >= b or a != a) else b  # numpy: a NaN operand is the answer


def minimum(a, b):
    if isinstance(a, _nd) or isinstance(b, _nd):
        return np.minimum(a, b)
    return a if (a <= b or a != a) else b


def clip(x, lo, hi):
    """``np.clip``: ``minimum(maximum(x, lo), hi)``."""
    if isinstance(x, _nd):
        return np.clip(x, lo, hi)
    return minimum(maximum(x, lo), hi)


def where(cond, a, b):
    if isinstance(cond, _nd) or isinstance(a, _nd) or isinstance(b, _nd):
        return np.where(cond, a, b)
    return a if cond else b


def power(x, p):
    """``np.power(x, p)``; on floats numpy's own scalar power (its answer differs from ``float ** float`` in the last
    bit for a few percent of operands: numpy's vectorised pow is not the C library's), returned as a float."""
    if isinstance(x, _nd) or isinstance(p, _nd):
        return np.power(x, p)
    return float(np.power(np.float64(x), np.float64(p)))


def ceil(x):
    if isinstance(x, _nd):
        return np.ceil(x)
    return float(math.ceil(x))


def floor(x):
    if isinstance(x, _nd):
        return np.floor(x)
    return float(math.floor(x))


def log2(x):
    """``np.log2``; on floats ``math.log2`` (both exact at powers of two, where the models take their ceilings)."""
    if isinstance(x, _nd):
        return np.log2(x)
    return math.log2(x)


def any_true(x) -> bool:
    return bool(np.any(x)) if isinstance(x, _nd) else bool(x)


def all_true(x) -> bool:
    return bool(np.all(x)) if isinstance(x, _nd) else bool(x)


def zeros_like(x):
    return np.zeros_like(x) if isinstance(x, _nd) else 0.0


def ones_like(x):
    return np.ones_like(x) if isinstance(x, _nd) else 1.0


#: rows up to which :func:`by_rows` evaluates a function row by row in Python floats (a question of one
#: configuration has one row, a decode round of it a few micro-batch counts; arrays pay from a few dozen rows)
SCALAR_ROWS = 8


def by_rows(fn, n: int, cols: dict, limit: int | None = None):
    """``fn(**cols)`` evaluated row by row in Python floats and stacked back into arrays of length ``n``, for at
    most ``limit`` rows (default :data:`SCALAR_ROWS`); None when there are more rows or a row raised one of :data:`SCALAR_ERRORS` (then call
    ``fn`` on the arrays: the same function, the same numbers). ``cols`` are arrays of length ``n`` or scalars;
    ``fn`` returns a float, a tuple or a dict of them (nested)."""
    if not 1 <= n <= (SCALAR_ROWS if limit is None else limit):
        return None
    names = list(cols)
    vals = []
    for k in names:
        c = cols[k]
        if isinstance(c, _nd) and c.ndim:
            vals.append(np.broadcast_to(np.asarray(c, dtype=float), (n,)).tolist())
        else:
            vals.append([float(c)] * n)
    try:
        res = [fn(**dict(zip(names, row))) for row in zip(*vals)]
    except SCALAR_ERRORS:
        return None
    return _stack(res)


def _stack(res: list):
    first = res[0]
    if isinstance(first, dict):
        return {k: _stack([r[k] for r in res]) for k in first}
    if isinstance(first, tuple):
        return tuple(_stack([r[i] for r in res]) for i in range(len(first)))
    return np.array(res, dtype=float)
