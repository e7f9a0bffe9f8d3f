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
