"""Contiguous partitions of a layer sequence into stages (one stage per device).

Stage load = sum of its items' bytes + a per-stage constant. Greedy first-fit is optimal for the minimum
number of stages under a capacity; :func:`min_max_partition` is the exact dynamic program for the smallest
possible largest stage with exactly ``k`` stages (used by fit with a fixed device count and to check the
placement ILP).
"""
from __future__ import annotations

import numpy as np


def greedy_stages(item_bytes: np.ndarray, capacity_bytes: float, stage_const_bytes: float = 0.0) -> list[tuple[int, int]] | None:
    """Pack items into the fewest contiguous stages of at most ``capacity_bytes`` each.

    Returns a list of (first, last) inclusive item indices, or None if one item alone does not fit.
    Greedy is optimal here: extending the current stage never hurts the stages that follow.
    """
    stages: list[tuple[int, int]] = []
    start, load = 0, stage_const_bytes
    for i, b in enumerate(item_bytes):
        if stage_const_bytes + b > capacity_bytes:
            return None
        if load + b > capacity_bytes:
            stages.append((start, i - 1))
            start, load = i, stage_const_bytes
        load += b
    stages.append((start, len(item_bytes) - 1))
    return stages


def min_max_partition(item_bytes: np.ndarray, num_stages: int, stage_const_bytes: float = 0.0) -> tuple[float, list[tuple[int, int]]]:
    """Exact DP: split items into exactly ``num_stages`` non-empty contiguous stages minimising the largest load.

    ``dp[k][j]`` = best largest load covering items ``[0, j)`` with ``k`` stages; each step is vectorized over
    the split point. O(k n^2) arithmetic in O(k n) numpy operations.

    Returns
    -------
    (largest_stage_bytes, stages)
    """
    x = np.asarray(item_bytes, dtype=float)
    n = len(x)
    k = int(num_stages)
    if k < 1 or k > n:
        raise ValueError(f"num_stages must be in [1, {n}], got {k}")
    if (n + 1) ** 2 * k > _DP_LIMIT:
        return _bottleneck_partition(x, k, stage_const_bytes)
    pre = np.concatenate([[0.0], np.cumsum(x)])
    inf = np.inf
    dp = np.full((k + 1, n + 1), inf)
    arg = np.zeros((k + 1, n + 1), dtype=np.int64)
    dp[0, 0] = 0.0
    # seg[i, j] = load of items [i, j) ; only i < j valid
    seg = pre[None, :] - pre[:, None] + stage_const_bytes
    seg[np.tril_indices(n + 1)] = inf
    for s in range(1, k + 1):
        cand = np.maximum(dp[s - 1][:, None], seg)  # (i, j)
        arg[s] = np.argmin(cand, axis=0)
        dp[s] = cand[arg[s], np.arange(n + 1)]
    stages = []
    j = n
    for s in range(k, 0, -1):
        i = int(arg[s, j])
        stages.append((i, j - 1))
        j = i
    stages.reverse()
    return float(dp[k, n]), stages


#: above this many DP cells (k x (n+1)^2) the bottleneck search below is used instead (same optimum)
_DP_LIMIT = 20_000_000


def _greedy_cuts(pre: np.ndarray, capacity: float, const: float) -> list[int] | None:
    """Start indices of greedy stages at ``capacity`` using prefix sums (O(stages log n)); None if an item is too big."""
    n = len(pre) - 1
    starts = [0]
    i = 0
    while True:
        j = int(np.searchsorted(pre, pre[i] + capacity - const, side="right")) - 1  # largest j with load <= cap
        if j <= i:
            return None
        if j >= n:
            return starts
        starts.append(j)
        i = j


def _bottleneck_partition(x: np.ndarray, k: int, const: float) -> tuple[float, list[tuple[int, int]]]:
    """Exact min-max contiguous partition into exactly k stages by bisection on the bottleneck.

    The optimum C* is the smallest capacity at which greedy packing needs at most k stages; bisection brackets
    it to float resolution and the greedy partition at the upper bracket has largest load exactly C* (no
    segment sum lies strictly between). Stages are then split (never raising the maximum) until there are k.
    """
    pre = np.concatenate([[0.0], np.cumsum(x)])
    lo = float(x.max() + const)
    hi = float(pre[-1] + const)
    if _greedy_cuts(pre, lo, const) is not None and len(_greedy_cuts(pre, lo, const)) <= k:
        hi = lo
    for _ in range(200):
        if hi - lo <= 1e-12 * max(hi, 1.0):
            break
        mid = 0.5 * (lo + hi)
        cuts = _greedy_cuts(pre, mid, const)
        if cuts is not None and len(cuts) <= k:
            hi = mid
        else:
            lo = mid
    starts = _greedy_cuts(pre, hi, const)
    bounds = starts + [len(x)]
    stages = [(bounds[i], bounds[i + 1] - 1) for i in range(len(starts))]
    best = max(float(pre[b + 1] - pre[a]) + const for a, b in stages)
    while len(stages) < k:  # split the longest stage; loads only fall
        i = max(range(len(stages)), key=lambda t: stages[t][1] - stages[t][0])
        a, b = stages[i]
        stages[i : i + 1] = [(a, a), (a + 1, b)]
    return best, stages


# ---------------------------------------------------------------------------------------------
# Vectorized over many item vectors (one per configuration)
# ---------------------------------------------------------------------------------------------
def greedy_stage_counts(x_multi: np.ndarray, x_single: np.ndarray, stage_const: np.ndarray, capacity: float) -> np.ndarray:
    """Fewest contiguous stages per row (:func:`greedy_stages`, vectorized over rows) [count].

    ``x_single`` (N, n) are the item bytes when everything sits on one device, ``x_multi`` (N, n) when the
    items are spread (e.g. a tied LM head needs its own copy); ``stage_const`` (N,) bytes every stage holds.
    A row whose single item alone exceeds the capacity gets ``n`` stages (one per item: it cannot fit).
    """
    a = np.asarray(stage_const, dtype=float)
    N, n = x_multi.shape
    single_ok = x_single.sum(axis=1) + a <= capacity
    load = a.copy()
    stages = np.ones(N, dtype=np.int64)
    fail = np.zeros(N, dtype=bool)
    for i in range(n):
        b = x_multi[:, i]
        fail |= a + b > capacity
        new = load + b > capacity
        stages += new
        load = np.where(new, a, load) + b
    return np.where(single_ok, 1, np.where(fail, n, stages))


def min_max_partition_batched(x: np.ndarray, k: np.ndarray, stage_const: np.ndarray, *, chunk: int = 128):
    """:func:`min_max_partition` for many item vectors at once: the same dynamic program, the same tie-breaking
    (first minimal split point), vectorized over rows; identical rows are solved once.

    ``x`` (N, n) item bytes, ``k`` (N,) stage counts (1..n), ``stage_const`` (N,). Returns ``(start, end, loads)``,
    each (N, K) with ``K = max(k)``: inclusive item indices of each stage (-1 beyond a row's ``k`` stages) and the
    stage loads (-inf there).
    """
    x = np.asarray(x, dtype=float)
    N, n = x.shape
    k = np.clip(np.asarray(k, dtype=np.int64), 1, n)
    a_all = np.asarray(stage_const, dtype=float)
    K = int(k.max()) if N else 1
    start = np.full((N, K), -1, dtype=np.int64)
    end = np.full((N, K), -1, dtype=np.int64)
    one = k == 1
    start[one, 0], end[one, 0] = 0, n - 1
    multi = np.nonzero(~one)[0]
    if len(multi):
        key = np.column_stack([x[multi], a_all[multi], k[multi]])
        uniq, first_idx, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        src = multi[first_idx]
        us = np.full((len(src), K), -1, dtype=np.int64)
        ue = np.full((len(src), K), -1, dtype=np.int64)
        tri = np.tril_indices(n + 1)
        for c0 in range(0, len(src), chunk):
            sl = slice(c0, min(c0 + chunk, len(src)))
            rows_ = src[sl]
            xs, ks, a = x[rows_], k[rows_], a_all[rows_]
            M = xs.shape[0]
            Kc = int(ks.max())
            pre = np.concatenate([np.zeros((M, 1)), np.cumsum(xs, axis=1)], axis=1)
            seg = pre[:, None, :] - pre[:, :, None] + a[:, None, None]
            seg[:, tri[0], tri[1]] = np.inf
            dp = np.full((M, n + 1), np.inf)
            dp[:, 0] = 0.0
            args = np.zeros((Kc + 1, M, n + 1), dtype=np.int64)
            r = np.arange(M)
            for s in range(1, Kc + 1):
                cand = np.maximum(dp[:, :, None], seg)
                arg = np.argmin(cand, axis=1)
                args[s] = arg
                dp = np.take_along_axis(cand, arg[:, None, :], axis=1)[:, 0, :]
            j = np.full(M, n, dtype=np.int64)
            for t in range(Kc):
                s = ks - t
                act = s >= 1
                i = args[np.maximum(s, 1), r, j]
                idx = np.maximum(s - 1, 0)
                us[sl][r[act], idx[act]] = i[act]
                ue[sl][r[act], idx[act]] = j[act] - 1
                j = np.where(act, i, j)
        start[multi] = us[inv.ravel()]
        end[multi] = ue[inv.ravel()]
    valid = start >= 0
    pre = np.concatenate([np.zeros((N, 1)), np.cumsum(x, axis=1)], axis=1)
    rows = np.arange(N)[:, None]
    loads = np.where(valid, pre[rows, np.maximum(end, 0) + 1] - pre[rows, np.maximum(start, 0)] + a_all[:, None], -np.inf)
    return start, end, loads
