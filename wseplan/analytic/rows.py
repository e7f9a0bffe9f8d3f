"""Distinct rows of float columns: evaluate a pure function once per distinct input and gather the answers."""
from __future__ import annotations

import numpy as np


def unique_rows(*cols):
    """Distinct rows of equal-length float columns, by bit pattern: ``(first, inverse)`` with ``first`` the index of
    each distinct row's first occurrence and ``cols[j][first][inverse] == cols[j]`` bit for bit. Pure functions of
    the columns evaluated on ``first`` and gathered by ``inverse`` give the numbers they give row by row. The distinct
    rows come in the lexicographic order of the columns' bits (as int64)."""
    n = len(cols[0])
    if n <= 1:
        return np.arange(n), np.arange(n)
    keys = [np.ascontiguousarray(c, dtype=float).view(np.int64) for c in cols]
    keys = [k for k in keys if (k != k[0]).any()] or keys[:1]  # a column equal everywhere tells no rows apart
    if n >= CODED_MIN_ROWS:
        got = _coded_unique(keys, n)
        if got is not None:
            return got
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


#: rows from which :func:`unique_rows` codes its columns instead of sorting them together
CODED_MIN_ROWS = 16384
_FLAGS_EXTRA = 1 << 16  # a flag table of up to 4 n + this many entries costs less than a sort


def _column_codes(k: np.ndarray, n: int):
    """``(codes, count)``: each entry's rank among the distinct values of an int64 key column (the bits of a float
    column), in key order: by a flag table over the values where they are non-negative whole numbers of a small range
    (a non-negative float's bits order as its value), else by sorting the column (no argsort) and a binary search."""
    c = k.view(np.float64)
    lo, hi = c.min(), c.max()
    if lo >= 0.0 and hi - lo < 4 * n + _FLAGS_EXTRA and not (lo == 0.0 and np.signbit(c).any()):  # NaN fails
        ci = c.astype(np.int64)
        if np.array_equal(ci, c):
            ci -= int(lo)
            seen = np.zeros(int(hi - lo) + 1, dtype=bool)
            seen[ci] = True
            rank = np.cumsum(seen) - 1
            return rank[ci], int(rank[-1]) + 1
    u = np.sort(k)
    u = u[np.concatenate([[True], u[1:] != u[:-1]])]
    return np.searchsorted(u, k), len(u)


def _coded_unique(keys: list, n: int):
    """:func:`unique_rows` of many rows: each column coded by rank (:func:`_column_codes`; a column equal to an earlier
    one dropped: it orders nothing more), the codes joined into one int64 in mixed radix (lexicographic order kept)
    and that key's distinct values found by a flag table or one sort of key and row index packed together; the same
    ``(first, inverse)`` as the joint sort. None where the key would not fit 62 bits."""
    kept: list = []
    for k in keys:
        if not any(np.array_equal(k[:16], j[:16]) and np.array_equal(k, j) for j in kept):
            kept.append(k)
    key, size = None, 1
    for k in kept:
        code, count = _column_codes(k, n)
        if size * count >= 1 << 62:
            return None
        key = code if key is None else key * count + code
        size *= count
    if size <= 4 * n + _FLAGS_EXTRA:
        seen = np.zeros(size, dtype=bool)
        seen[key] = True
        rank = np.cumsum(seen) - 1
        inv = rank[key]
        first = np.full(int(rank[-1]) + 1, n, dtype=np.int64)
        np.minimum.at(first, inv, np.arange(n))
        return first, inv
    bits = int(n - 1).bit_length()
    if size >= 1 << (62 - bits):
        return None
    packed = (key << bits) | np.arange(n)
    packed.sort()
    ks = packed >> bits
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(ks[1:], ks[:-1], out=new[1:])
    idx = packed & ((1 << bits) - 1)
    inv = np.empty(n, dtype=np.int64)
    inv[idx] = np.cumsum(new) - 1
    return idx[new], inv


# ---------------------------------------------------------------------------------------------
# Cheaper forms for the array chain's hot paths (the same numbers; see the functions)
# ---------------------------------------------------------------------------------------------
#: rows below which grouping costs more than it saves
MIN_ROWS = 1024
#: grouping pays only when the distinct pairs are at most this share of the rows
MAX_DISTINCT_FRAC = 0.5
_INDEX_BITS = 20  # rows per call < 2**20
_SECOND_BITS = 8  # second column: integers 0..255 (tensor-parallel degrees)
_FIRST_SCALE = 256.0  # first column: multiples of 1/256 (token counts, quarter tokens ...) below 2**35 / 256


def run_starts(*cols: np.ndarray) -> np.ndarray:
    """Indices where a run of rows with equal values in every column starts (1-D columns of one length)."""
    n = len(cols[0])
    new = np.empty(n, dtype=bool)
    if n:
        new[0] = True
        np.not_equal(cols[0][1:], cols[0][:-1], out=new[1:])
        for c in cols[1:]:
            new[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(new)


def pair_groups(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The distinct ``(first, second)`` pairs of two 1-D float columns: ``(rows, inverse)`` with ``rows`` one row of
    each pair and ``first[rows][inverse] == first`` (the same for ``second``); None when grouping would not pay or
    the values are not of the kind it handles (then evaluate every row).

    Handled: ``first`` a multiple of 1/256 in (0, 2**27), ``second`` an integer in (0, 256) — as token counts and
    tensor-parallel degrees are — with at least :data:`MIN_ROWS` rows and at most :data:`MAX_DISTINCT_FRAC` of
    them distinct. Pairs are packed with the row index into one int64 and sorted (faster than an argsort)."""
    if np.ndim(first) != 1 or np.shape(second) != np.shape(first) or not MIN_ROWS <= len(first) < 1 << _INDEX_BITS:
        return None
    n = len(first)
    a = first * _FIRST_SCALE
    lo, hi = a.min(), a.max()
    if not (lo > 0.0 and hi < 2.0 ** 35):  # NaN fails too; so does -0.0 (it must not meet 0.0)
        return None
    ai = a.astype(np.int64)
    if not np.array_equal(ai, a):
        return None
    lo, hi = second.min(), second.max()
    if not (lo > 0.0 and hi < 2.0 ** _SECOND_BITS):
        return None
    bi = second.astype(np.int64)
    if not np.array_equal(bi, second):
        return None
    key = np.left_shift(ai, _SECOND_BITS + _INDEX_BITS, out=ai)  # (pair << INDEX_BITS) | row, in place
    bi <<= _INDEX_BITS
    key |= bi
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    idx = key & ((1 << _INDEX_BITS) - 1)
    key >>= _INDEX_BITS
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    if len(starts) > MAX_DISTINCT_FRAC * n:
        return None
    sizes = np.empty(len(starts), dtype=np.intp)
    np.subtract(starts[1:], starts[:-1], out=sizes[:-1])
    sizes[-1] = n - starts[-1]
    inverse = np.empty(n, dtype=np.intp)
    inverse[idx] = np.repeat(np.arange(len(starts), dtype=np.intp), sizes)  # the group of each sorted row
    return idx[starts], inverse


def distinct(a) -> np.ndarray:
    """The sorted distinct values of ``a`` (flattened): ``np.unique(a)`` without its masked-array check. numpy's
    ``unique`` imports ``numpy.ma`` on its first plain call, ~45 ms of a cold ``wseplan fit`` (numpy 2.4: that import
    reads builtin signatures through ``inspect``). NaNs collapse to one, as ``np.unique`` does."""
    s = np.sort(np.asarray(a).ravel())
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    if s.dtype.kind in "fc":
        keep[1:] &= ~(np.isnan(s[1:]) & np.isnan(s[:-1]))
    return s[keep]


def pick_rows(pick, a: dict, b: dict) -> dict:
    """``a``'s per-row values where ``pick``, else ``b``'s, key by key (nested dictionaries alike; values that are not
    per row kept from ``b``)."""
    out = {}
    for k, v in b.items():
        w = a.get(k)
        if isinstance(v, dict):
            out[k] = pick_rows(pick, w, v)
        elif isinstance(v, np.ndarray) and v.shape == pick.shape and isinstance(w, np.ndarray) and w.shape == v.shape:
            out[k] = np.where(pick, w, v)
        else:
            out[k] = v
    return out
