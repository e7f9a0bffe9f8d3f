"""Contiguous partitions of a layer sequence into stages (one stage per device).

Stage load = sum of its items' bytes + a per-stage constant. Greedy first-fit is optimal for the minimum
number of stages under a capacity; :func:`min_max_partition` is the exact dynamic program for the smallest
possible largest stage with exactly ``k`` stages (used by fit with a fixed device count and to check the
placement ILP). :func:`bottleneck_partition` is the exact parametric (bottleneck) search for the same problem
with a stage cost that differs from the stage bytes (balance time, cap memory); it solves placements of
thousands of layers in milliseconds and is the placement's primary algorithm. The same problems for many item
vectors at once (one per configuration of a sweep) are in :mod:`wseplan.analytic.partition_rows`.
"""
from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np



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


def _bottleneck_partition(x: np.ndarray, k: int, const: float) -> tuple[float, list[tuple[int, int]]]:
    """Exact min-max contiguous partition of ``x`` into exactly ``k`` stages (see :func:`bottleneck_partition`)."""
    res = bottleneck_partition(x, k, stage_const_cost=const)
    return res.max_stage_cost, res.stages


# ---------------------------------------------------------------------------------------------
# Exact bottleneck search with two resources: stage cost (the objective) and stage bytes (a capacity)
# ---------------------------------------------------------------------------------------------
#: relative tolerance of the capacity test (as in the placement ILP) and of the threshold test
CAPACITY_RTOL = 1e-12


class BottleneckResult(NamedTuple):
    """Result of :func:`bottleneck_partition`.

    ``stages`` are (first, last) inclusive item indices, ``None`` when infeasible; ``lower_bound`` is the proved
    lower bound on the largest stage cost (equal to ``max_stage_cost`` when ``optimal``); ``binding`` names what
    makes it infeasible.
    """

    feasible: bool
    optimal: bool
    max_stage_cost: float | None
    lower_bound: float | None
    stages: list[tuple[int, int]] | None
    num_probes: int
    binding: str | None = None


def _probe(cpre: np.ndarray, bpre: np.ndarray, threshold: float, cap_limit: float, cc: float, cb: float, k: int,
           tol: float) -> tuple[list[int] | None, float, bool]:
    """Greedy packing with every stage as long as its cost <= ``threshold`` and its bytes <= ``cap_limit``.

    Returns ``(starts or None, next_threshold, memory_only)``: the stage starts when at most ``k`` stages do; else
    None with the smallest threshold above ``threshold`` at which the greedy packing changes (the cost of a
    cost-limited stage extended by its next item). Every threshold below it gives the same packing, so it is
    a proved lower bound on the optimum. ``memory_only`` says that no stage was cost-limited: no threshold helps.
    """
    n = len(cpre) - 1
    starts: list[int] = []
    nxt = np.inf
    i = 0
    while i < n:
        if len(starts) == k:
            return None, nxt, not np.isfinite(nxt)
        starts.append(i)
        jc = int(np.searchsorted(cpre, cpre[i] + (threshold - cc) + tol, side="right")) - 1
        jb = int(np.searchsorted(bpre, bpre[i] + (cap_limit - cb), side="right")) - 1
        if jb <= i:
            return None, np.inf, True  # item i alone exceeds the capacity
        if jc <= i:  # item i alone costs more than the threshold
            return None, min(nxt, float(cpre[i + 1] - cpre[i]) + cc), False
        j = min(jc, jb, n)
        if jc < jb and j < n:
            nxt = min(nxt, float(cpre[j + 1] - cpre[i]) + cc)
        i = j
    return starts, nxt, False


def _split_to(starts: list[int], n: int, k: int) -> list[tuple[int, int]]:
    """Split stages (the one with the most items first) until there are ``k``; stage loads only fall."""
    bounds = starts + [n]
    heap = [(-(bounds[s + 1] - bounds[s]), bounds[s], bounds[s + 1]) for s in range(len(starts))]
    heapq.heapify(heap)
    while len(heap) < k:
        neg, a, e = heapq.heappop(heap)
        mid = a + (e - a) // 2
        heapq.heappush(heap, (-(mid - a), a, mid))
        heapq.heappush(heap, (-(e - mid), mid, e))
    return sorted((a, e - 1) for _, a, e in heap)


def bottleneck_partition(item_cost, num_stages: int, *, item_bytes=None, capacity_bytes: float = np.inf,
                         stage_const_cost: float = 0.0, stage_const_bytes: float = 0.0) -> BottleneckResult:
    """Exact contiguous partition into exactly ``num_stages`` stages minimising the largest stage cost, each
    stage's bytes within ``capacity_bytes``.

    Parameters
    ----------
    item_cost : array_like
        Cost of each item (time [s], bytes or FLOP as a proxy); non-negative [any unit].
    num_stages : int
        Stages, in [1, number of items].
    item_bytes : array_like, optional
        Memory of each item [bytes]; without it only the cost is balanced.
    capacity_bytes : float
        Memory of one stage's device [bytes].
    stage_const_cost, stage_const_bytes : float
        Added to every stage's cost and bytes [unit, bytes].

    Returns
    -------
    BottleneckResult

    Notes
    -----
    Parametric search on the bottleneck ``T`` (the chains-on-chains partitioning problem). For a given ``T``,
    greedy packing (every stage as long as both its cost <= T and its bytes <= capacity allow) needs the fewest
    stages: ending a stage later never leaves more work for the stages after it, as items are non-negative.
    Splitting a stage never raises a stage's cost or bytes, so at most ``k`` stages is as good as exactly ``k``,
    and the optimum ``T*`` is the smallest ``T`` at which greedy needs at most ``k``. Bisection keeps
    ``lo <= T* <= hi`` with ``hi`` the largest stage cost of the best packing found (a real stage cost) and ``lo``
    the smallest cost at which an infeasible packing would change (also a real stage cost, and a proof: every
    threshold below it gives the same infeasible packing); it stops when ``lo`` reaches ``hi`` (to the rounding of the prefix sums), so the result is exact,
    with ``O(k log n)`` work per probe. Infeasibility is decided first by greedy packing on bytes alone: if that
    needs more than ``k`` stages, memory binds whatever the threshold.

    References
    ----------
    Pinar and Aykanat, Fast optimal load balancing algorithms for 1D partitioning, J. Parallel Distrib. Comput.
    64(8), 2004 (greedy probes and exact bisection on the bottleneck value).
    Nicol, Rectilinear partitioning of irregular data parallel computations, J. Parallel Distrib. Comput. 23(2),
    1994 (probe-based search for chains-on-chains partitioning).
    """
    c = np.asarray(item_cost, dtype=float)
    n = len(c)
    k = int(num_stages)
    if k < 1 or k > n:
        raise ValueError(f"num_stages must be in [1, {n}], got {k}")
    b = np.zeros(n) if item_bytes is None else np.asarray(item_bytes, dtype=float)
    cc, cb = float(stage_const_cost), float(stage_const_bytes)
    cpre = np.concatenate([[0.0], np.cumsum(c)])
    bpre = np.concatenate([[0.0], np.cumsum(b)])
    cap_limit = capacity_bytes * (1.0 + CAPACITY_RTOL) if np.isfinite(capacity_bytes) else np.inf
    tol = 8.0 * np.finfo(float).eps * (abs(cpre[-1]) + abs(cc) + 1e-300)
    big = b + cb > cap_limit
    if big.any():
        i = int(np.argmax(big))
        return BottleneckResult(False, False, None, None, None, 0,
                                f"memory: item {i} alone needs {b[i] + cb:,.0f} B, more than the capacity {capacity_bytes:,.0f} B")
    starts, _, _ = _probe(cpre, bpre, np.inf, cap_limit, cc, cb, k, 0.0)
    probes = 1
    if starts is None:
        need = len(_probe(cpre, bpre, np.inf, cap_limit, cc, cb, n, 0.0)[0])
        return BottleneckResult(False, False, None, None, None, 2,
                                f"memory: {k} contiguous stages of {capacity_bytes:,.0f} B each cannot hold the items; "
                                f"at least {need} are needed")

    def max_cost(st: list[int]) -> float:
        e = np.asarray(st[1:] + [n])
        return float(np.max(cpre[e] - cpre[np.asarray(st)])) + cc

    best = starts
    hi = max_cost(best)
    lo = max(float(np.max(np.diff(cpre))), float(cpre[-1]) / k) + cc  # a bound, not necessarily a stage cost
    for _ in range(400):
        if hi - lo <= tol:  # closed to the resolution of the prefix sums
            break
        mid = 0.5 * (lo + hi)
        st, nxt, _mem = _probe(cpre, bpre, mid, cap_limit, cc, cb, k, tol)
        probes += 1
        if st is not None:
            m = max_cost(st)
            if m <= hi:
                best, hi = st, m
        else:
            lo = max(lo, nxt)
    optimal = hi - lo <= tol
    return BottleneckResult(True, optimal, hi, min(lo, hi), _split_to(best, n, k), probes)


def fewest_stages(item_bytes, capacity_bytes: float, stage_const_bytes: float = 0.0, *, item_cost=None,
                  max_stage_cost: float = np.inf, stage_const_cost: float = 0.0) -> list[tuple[int, int]] | None:
    """Greedy packing into the fewest contiguous stages of at most ``capacity_bytes`` each (and, when
    ``item_cost`` is given, of at most ``max_stage_cost``); None when one item alone does not fit.

    Greedy is optimal: extending the current stage never hurts the stages after it (items are non-negative).
    O(stages log n) with prefix sums.
    """
    b = np.asarray(item_bytes, dtype=float)
    n = len(b)
    c = np.zeros(n) if item_cost is None else np.asarray(item_cost, dtype=float)
    cpre = np.concatenate([[0.0], np.cumsum(c)])
    bpre = np.concatenate([[0.0], np.cumsum(b)])
    cap_limit = capacity_bytes * (1.0 + CAPACITY_RTOL) if np.isfinite(capacity_bytes) else np.inf
    tol = 8.0 * np.finfo(float).eps * (abs(cpre[-1]) + abs(stage_const_cost) + 1e-300)
    starts, _, _ = _probe(cpre, bpre, max_stage_cost, cap_limit, stage_const_cost, stage_const_bytes, n, tol)
    if starts is None:
        return None
    bounds = starts + [n]
    return [(bounds[s], bounds[s + 1] - 1) for s in range(len(starts))]
