"""Distinct rows of float columns: evaluate a pure function once per distinct input and gather the answers."""
from __future__ import annotations

import numpy as np


def unique_rows(*cols):
    """Distinct rows of equal-length float columns, by bit pattern: ``(first, inverse)`` with ``first`` the index of
    each distinct row's first occurrence and ``cols[j][first][inverse] == cols[j]`` bit for bit. Pure functions of
    the columns evaluated on ``first`` and gathered by ``inverse`` give the numbers they give row by row."""
    n = len(cols[0])
    if n <= 1:
        return np.arange(n), np.arange(n)
    keys = [np.ascontiguousarray(c, dtype=float).view(np.int64) for c in cols]
    keys = [k for k in keys if (k != k[0]).any()] or keys[:1]  # a column equal everywhere tells no rows apart
    order = np.lexsort(keys[::-1]) if len(keys) > 1 else np.argsort(keys[0], kind="stable")
    new = np.ones(n, dtype=bool)
    new[1:] = False
    for k in keys:
        ks = k[order]
        new[1:] |= ks[1:] != ks[:-1]
    uid = np.cumsum(new) - 1
    inv = np.empty(n, dtype=np.int64)
    inv[order] = uid
    return order[new], inv
