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
