"""Contiguous partitions for many item vectors at once (one per configuration of a sweep or a batch of questions):
the fewest stages under a capacity (:func:`greedy_stage_counts`) and the exact min-max partition
(:func:`min_max_partition_batched`), each giving, row by row and bit for bit, what the one-vector forms of
:mod:`wseplan.analytic.partition` give.
"""
from __future__ import annotations

import numpy as np

from .partition import _DP_LIMIT, min_max_partition
from .rows import unique_rows


def greedy_stage_counts(x_multi: np.ndarray, x_single: np.ndarray, stage_const: np.ndarray, capacity: float) -> np.ndarray:
    """Fewest contiguous stages per row (:func:`fewest_stages` without a cost limit, vectorized over rows) [count].

    ``x_single`` (N, n) are the item bytes when everything sits on one device, ``x_multi`` (N, n) when the
    items are spread (e.g. a tied LM head needs its own copy); ``stage_const`` (N,) bytes every stage holds.
    A row whose single item alone exceeds the capacity gets ``n`` stages (one per item: it cannot fit).
    """
    a = np.asarray(stage_const, dtype=float)
    N, n = x_multi.shape
    single_ok = x_single.sum(axis=1) + a <= capacity
    if N <= _FEW_ROWS:  # a handful of rows: the same additions and comparisons on Python floats, item by item
        return np.where(single_ok, 1, np.array([_greedy_count(row, ar, capacity) for row, ar in
                                                zip(x_multi.tolist(), a.tolist())], dtype=np.int64).reshape(N))
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


#: up to this many rows :func:`greedy_stage_counts` packs row by row on Python floats (identical IEEE arithmetic,
#: without a numpy call per item)
_FEW_ROWS = 4


def _greedy_count(items: list, a: float, capacity: float) -> int:
    """Stages of one row for :func:`greedy_stage_counts` (``n`` when an item alone does not fit)."""
    load, stages, fail = a, 1, False
    for b in items:
        fail |= a + b > capacity
        if load + b > capacity:
            stages += 1
            load = a + b
        else:
            load = load + b
    return len(items) if fail else stages


def _prefix(x: np.ndarray) -> np.ndarray:
    """Prefix sums of each row of ``x`` (N, n) with a leading 0: (N, n + 1)."""
    out = np.empty((x.shape[0], x.shape[1] + 1))
    out[:, 0] = 0.0
    np.cumsum(x, axis=1, out=out[:, 1:])
    return out


def _dp_stage(dp: np.ndarray, pre: np.ndarray, a: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """One full stage ``s >= 2`` of the dynamic program: ``(dp[s], first minimal split point)`` for every ``j``.

    ``dp[s][j] = min over i of max(dp[s-1][i], seg(i, j))``, ``seg(i, j) = (pre[j] - pre[i]) + a`` (the load of items
    ``[i, j)``, +inf for ``i >= j``), and the first ``i`` reaching it, as ``argmin`` over every ``i`` gives it, by
    bisection instead of by trying every ``i``: with non-negative items ``g(i) = dp[s-1][i]`` does not decrease in
    ``i`` (it is +inf below ``i = s - 1``) and ``h(i) = seg(i, j)`` does not increase (every floating-point step is
    monotone), so ``max(g, h)`` equals ``h`` before the first ``c`` with ``g(c) >= h(c)`` and ``g`` from there on.
    Its minimum is ``min(h(c-1), g(c))``: at ``c`` when ``g(c) < h(c-1)``, else at the first ``i`` with
    ``h(i) <= h(c-1)`` (the start of ``h``'s plateau). Rows ``j < s`` (no split point) get +inf and 0, as ``argmin``
    over all +inf gives. The same comparisons and the same additions as the scalar program: bit-identical.
    """
    M, W = dp.shape  # W = n + 1
    off = (np.arange(M) * W)[:, None]
    g_flat, p_flat = dp.ravel(), pre.ravel()
    aa = a[:, None]
    j = np.broadcast_to(np.arange(W), (M, W))
    ok = j >= s
    steps = int(W).bit_length() + 1

    def h(i):
        return (pre - p_flat[off + i]) + aa

    # c: first i in [s-1, j) with g(i) >= h(i); j when none
    lo = np.full((M, W), s - 1)
    hi = np.where(ok, j, s - 1)
    for _ in range(steps):
        mid = (lo + hi) >> 1
        cond = g_flat[off + np.minimum(mid, W - 1)] >= h(np.minimum(mid, W - 1))
        live = lo < hi
        hi = np.where(live & cond, mid, hi)
        lo = np.where(live & ~cond, mid + 1, lo)
    c = lo
    has_h = ok & (c - 1 >= s - 1)
    has_g = ok & (c <= j - 1)
    hv = np.where(has_h, h(np.maximum(c - 1, 0)), np.inf)
    gv = np.where(has_g, g_flat[off + np.minimum(c, W - 1)], np.inf)
    # the plateau of h ending at c - 1: first i in [s-1, c-1] with h(i) <= h(c-1); plateaus are short (equal loads
    # need items of zero bytes), so step back a few times, then bisect what is left
    use_h = has_h & (hv <= gv)
    i = np.where(use_h, c - 1, s - 1)
    for _ in range(3):
        back = (i > s - 1) & (h(np.maximum(i - 1, 0)) <= hv)
        if not back.any():
            break
        i = np.where(back, i - 1, i)
    else:
        lo = np.full((M, W), s - 1)
        hi = i
        for _ in range(steps):
            mid = (lo + hi) >> 1
            cond = h(mid) <= hv
            live = lo < hi
            hi = np.where(live & cond, mid, hi)
            lo = np.where(live & ~cond, mid + 1, lo)
        i = lo
    arg = np.where(ok, np.where(use_h, i, c), 0)
    val = np.where(ok, np.maximum(g_flat[off + arg], h(arg)), np.inf)
    return val, arg


def _dp_stage_walk(dp: np.ndarray, pre: np.ndarray, a: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_dp_stage` for many rows: the crossing ``c`` does not decrease with ``j`` (``h`` grows with ``j``), so
    one pointer per row walks from the previous column's crossing, all rows at once, column by column: about two
    array steps per column instead of a bisection per cell. Same comparisons, same result.

    The pointers are kept as flat indices ``i * M + row`` into the transposed tables (``s >= 2``, so ``c - 1 >= 0``
    and ``c <= j <= W - 1``: no clipping is needed), and a row's ``c < j`` holds at a column's first step (``c`` ends
    the previous column at most at ``j - 1``)."""
    M, W = dp.shape
    gf = np.ascontiguousarray(dp.T).ravel()  # element (i, row) at i * M + row
    pT = np.ascontiguousarray(pre.T)
    pf = pT.ravel()
    val = np.full((W, M), np.inf)
    arg = np.zeros((W, M), dtype=np.int64)
    c = np.full(M, s - 1)
    at = c * M + np.arange(M)  # the flat index of (c, row)
    for j in range(s, W):
        pj = pT[j]
        adv = gf[at] < (pj - pf[at]) + a  # advance to the first i with g(i) >= h(i, j) (or j)
        while adv.any():
            c += adv
            at += adv * M
            adv = (c < j) & (gf[at] < (pj - pf[at]) + a)
        has_h = c >= s
        hv = np.where(has_h, (pj - pf[at - M]) + a, np.inf)
        gv = np.where(c <= j - 1, gf[at], np.inf)
        use_h = has_h & (hv <= gv)
        i = c - use_h
        ia = at - use_h * M
        back = use_h & (i > s - 1) & ((pj - pf[ia - M]) + a <= hv)
        while back.any():  # back to the start of h's plateau
            i = i - back
            ia = ia - back * M
            back = use_h & (i > s - 1) & ((pj - pf[np.maximum(ia - M, 0)]) + a <= hv)
        arg[j] = i
        val[j] = np.maximum(gf[ia], (pj - pf[ia]) + a)
    return val.T, arg.T


def _dp_stage_rows(dp: np.ndarray, pre: np.ndarray, a: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_dp_stage_walk` row by row on Python floats, for a few rows (a single question): the same pointer walk,
    the same IEEE additions, subtractions and comparisons in the same order, without numpy's cost per call."""
    M, W = dp.shape
    val = np.full((M, W), np.inf)
    arg = np.zeros((M, W), dtype=np.int64)
    inf = float("inf")
    for row in range(M):
        g, p, ar = dp[row].tolist(), pre[row].tolist(), float(a[row])
        vals, args = [inf] * W, [0] * W
        c = s - 1
        for j in range(s, W):
            pj = p[j]
            while c < j and g[c] < (pj - p[c]) + ar:  # advance to the first i with g(i) >= h(i, j) (or j)
                c += 1
            has_h = c >= s
            hv = (pj - p[c - 1]) + ar if has_h else inf
            gv = g[c] if c <= j - 1 else inf
            use_h = has_h and hv <= gv
            i = c - 1 if use_h else c
            if use_h:
                while i > s - 1 and (pj - p[i - 1]) + ar <= hv:  # back to the start of h's plateau
                    i -= 1
            args[j] = i
            gi, hi = g[i], (pj - p[i]) + ar
            vals[j] = gi if (gi >= hi or gi != gi) else hi  # np.maximum: the larger, NaN if either is
            if hi != hi:
                vals[j] = hi
        val[row] = vals
        arg[row] = args
    return val, arg


#: chunks of at most this many rows take :func:`_dp_stage_rows`
ROWS_MAX = 4


#: chunks of at least this many rows take :func:`_dp_stage_walk` (fewer array steps per row, more per chunk)
WALK_MIN_ROWS = 2048


def _dp_chunk(xs: np.ndarray, k: int, a: np.ndarray, K: int, pre: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The dynamic program of :func:`min_max_partition` on rows of ``k >= 2`` stages: (start, end), each (rows, K).

    ``dp[s][j]`` (best largest load of items ``[0, j)`` in ``s`` stages) and the first minimal split point as the
    scalar program, stage by stage over all rows; the first stage has one split point (0) and the last stage is
    needed at ``j = n`` only, so a two-stage row costs O(n) and a ``k``-stage row ``k - 2`` full stages
    (:func:`_dp_stage`, :func:`_dp_stage_walk`).
    """
    M, n = xs.shape
    if pre is None:
        pre = _prefix(xs)
    dp = np.maximum(0.0, pre - pre[:, :1] + a[:, None])
    dp[:, 0] = np.inf
    stage = _dp_stage_walk if M >= WALK_MIN_ROWS else _dp_stage_rows if M <= ROWS_MAX else _dp_stage
    args = {}
    for s in range(2, k):
        dp, args[s] = stage(dp, pre, a, s)
    # the last stage, at j = n only
    last = pre[:, n:] - pre + a[:, None]
    last[:, n] = np.inf
    i = np.argmin(np.maximum(dp, last), axis=1)
    us = np.full((M, K), -1, dtype=np.int64)
    ue = np.full((M, K), -1, dtype=np.int64)
    r = np.arange(M)
    j = np.full(M, n, dtype=np.int64)
    for s in range(k, 0, -1):  # back from (k, n): stage s covers items [i, j)
        if s < k:
            i = args[s][r, j] if s > 1 else np.zeros(M, dtype=np.int64)
        us[:, s - 1] = i
        ue[:, s - 1] = j - 1
        j = i
    return us, ue


#: chunks of at least this many rows take :func:`_neighbour_chunk` (the dynamic program on a sample, the rest verified)
NEIGHBOUR_MIN_ROWS = 512

#: one row in this many (in order of total bytes) is solved by the dynamic program in :func:`_neighbour_chunk`
NEIGHBOUR_STRIDE = 32


def _verify_partition(pre: np.ndarray, a: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Whether each row's stage boundaries are *the* answer of the dynamic program (:func:`min_max_partition`), [bool].

    ``pre`` (M, n + 1) prefix sums of the items, ``a`` (M,) the stage constant, ``bounds`` (M, k + 1) proposed
    boundaries ``0 = b_0 < b_1 < ... < b_k = n`` (stage ``s`` holds items ``[b_s, b_{s+1})``). The program's
    answer is fixed by its back-tracking from ``(k, n)``: at level ``S`` (items ``[0, b_S)`` in ``S`` stages) its best
    largest load is ``m_S = dp[S][b_S]`` and its split the *first* minimiser of ``max(dp[S-1][i], seg(i, b_S))``,
    with ``seg(i, j) = (pre[j] - pre[i]) + a``. Both terms are monotone in ``i`` (``dp[S-1]`` does not decrease, ``seg``
    does not increase: every floating-point step is monotone), so that minimiser is ``max(first i with seg(i, b_S)
    <= m_S, S - 1)``. A proposal is the program's answer iff, at every level ``S = k .. 2``:

    * its first ``S`` stages' largest load ``m_S`` is optimal for ``[0, b_S)``: the greedy packing with every stage
      *below* ``m_S`` (as long as it can be) does not cover ``[0, b_S)`` in ``S`` stages, and
    * its split is the first minimiser: ``b_{S-1} = S - 1`` or ``seg(b_{S-1} - 1, b_S) > m_S``.

    The same additions, subtractions and comparisons as the program (bit-identical values); O(k^2 log n) array
    steps per row instead of the program's O(k n).
    """
    M, W = pre.shape
    k = bounds.shape[1] - 1
    off = np.arange(M) * W
    flat = pre.ravel()
    ok = np.all(np.diff(bounds, axis=1) > 0, axis=1) & (bounds[:, 0] == 0) & (bounds[:, -1] == W - 1)
    b = np.clip(bounds, 0, W - 1)
    pb = flat[off[:, None] + b]  # pre at the boundaries
    loads = (pb[:, 1:] - pb[:, :-1]) + a[:, None]
    steps = int(W).bit_length()
    for S in range(k, 1, -1):
        m = loads[:, :S].max(axis=1)
        j, bj = b[:, S], pb[:, S]
        first = b[:, S - 1]
        prev = flat[off + np.maximum(first - 1, 0)]
        ok &= (first == S - 1) | ((bj - prev) + a > m)
        # the greedy packing below m: each stage to the last e with seg(p, e) < m (none: it is stuck, and fails)
        p = np.zeros(M, dtype=np.int64)
        for _ in range(S):
            pp = flat[off + p]
            lo, hi = p.copy(), j.copy()
            for _ in range(steps):
                mid = (lo + hi + 1) >> 1
                below = (flat[off + mid] - pp) + a < m
                live = lo < hi
                lo = np.where(live & below, mid, lo)
                hi = np.where(live & ~below, mid - 1, hi)
            p = lo
        ok &= p < j
    return ok


def _bounds(us: np.ndarray, k: int, n: int) -> np.ndarray:
    """Stage boundaries (rows, k + 1) from the stage starts ``us`` (rows, >= k)."""
    return np.concatenate([us[:, :k], np.full((len(us), 1), n, dtype=np.int64)], axis=1)


def _neighbour_chunk(xs: np.ndarray, k: int, a: np.ndarray, K: int, pre: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_dp_chunk` for many rows: rows in order of their total bytes; every ``NEIGHBOUR_STRIDE``-th is solved by
    the dynamic program, every other row takes the answer of the sampled row before it (else after it) when
    :func:`_verify_partition` proves it is the program's own answer for that row, else is solved by the program.
    The same (start, end) as :func:`_dp_chunk`, bit for bit: a proposal is kept only when proved."""
    M, n = xs.shape
    if pre is None:
        pre = _prefix(xs)
    order = np.lexsort((a, pre[:, -1]))
    rank = np.empty(M, dtype=np.int64)
    rank[order] = np.arange(M)
    sample = order[::NEIGHBOUR_STRIDE]
    ss, _ = _dp_chunk(xs[sample], k, a[sample], K, pre[sample])
    sb = _bounds(ss, k, n)
    bounds = np.empty((M, k + 1), dtype=np.int64)
    done = np.zeros(M, dtype=bool)
    bounds[sample], done[sample] = sb, True
    for shift in (0, 1):
        todo = np.nonzero(~done)[0]
        if not len(todo):
            break
        src = np.minimum(rank[todo] // NEIGHBOUR_STRIDE + shift, len(sample) - 1)
        good = _verify_partition(pre[todo], a[todo], sb[src])
        bounds[todo[good]] = sb[src[good]]
        done[todo[good]] = True
    rest = np.nonzero(~done)[0]
    if len(rest):
        rs, _ = _dp_chunk(xs[rest], k, a[rest], K, pre[rest])
        bounds[rest] = _bounds(rs, k, n)
    us = np.full((M, K), -1, dtype=np.int64)
    ue = np.full((M, K), -1, dtype=np.int64)
    us[:, :k] = bounds[:, :k]
    ue[:, :k] = bounds[:, 1:] - 1
    return us, ue


def min_max_partition_batched(x: np.ndarray, k: np.ndarray, stage_const: np.ndarray, *, chunk: int | None = None,
                              row_keys=None):
    """:func:`min_max_partition` for many item vectors at once: the same dynamic program, the same tie-breaking
    (first minimal split point), vectorized over rows (``chunk`` rows at a time at most; default: as many as ~64 MB
    of DP table allow); identical rows are solved once.

    ``x`` (N, n) item bytes, ``k`` (N,) stage counts (1..n), ``stage_const`` (N,); ``row_keys``: optional columns
    ((N,) each) that determine a row's items, constant and stage count, so that rows equal in them are recognised
    without comparing whole rows (default: the rows themselves). Returns ``(start, end, loads)``,
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
    pre = _prefix(x)  # row by row, the same sums as each solver's own
    def distinct(idx):
        """(first, inverse) of the distinct rows among ``idx`` (indices into ``idx``)."""
        if row_keys is not None:
            return unique_rows(*(np.broadcast_to(np.asarray(c, dtype=float), (N,))[idx] for c in row_keys))
        _, f, inv = np.unique(np.column_stack([x[idx], a_all[idx], k[idx]]), axis=0, return_index=True,
                              return_inverse=True)
        return f, inv.ravel()

    big = ~one & ((n + 1) ** 2 * k > _DP_LIMIT)  # long models: the exact bottleneck search, once per distinct row
    bigi = np.nonzero(big)[0]
    if len(bigi):
        f, inv = distinct(bigi)
        bs = np.full((len(f), K), -1, dtype=np.int64)
        be = np.full((len(f), K), -1, dtype=np.int64)
        for u, i in enumerate(bigi[f]):
            _, st = min_max_partition(x[i], int(k[i]), float(a_all[i]))
            for t, (a, b) in enumerate(st):
                bs[u, t], be[u, t] = a, b
        start[bigi], end[bigi] = bs[inv], be[inv]
    multi = np.nonzero(~one & ~big)[0]
    if len(multi):
        first_idx, inv = distinct(multi)
        src = multi[first_idx[np.argsort(k[multi[first_idx]], kind="stable")]]  # by stage count: tight chunks
        us = np.full((N, K), -1, dtype=np.int64)
        ue = np.full((N, K), -1, dtype=np.int64)
        c0 = 0
        while c0 < len(src):
            # one stage count per chunk
            kc = int(k[src[c0]])
            # a few rows: bisection on DP arrays of ~64k cells (in cache); many: the pointer walk, 16k rows at a time
            size = 16_384 if len(src) - c0 >= WALK_MIN_ROWS else 65_536 // (n + 1)
            size = max(1, min(chunk or len(src), size))
            rows_ = src[c0:c0 + size]
            rows_ = rows_[k[rows_] == kc]
            c0 += len(rows_)
            solve = _neighbour_chunk if len(rows_) >= NEIGHBOUR_MIN_ROWS and kc >= 2 else _dp_chunk
            cs, ce = solve(x[rows_], kc, a_all[rows_], K, pre[rows_])
            us[rows_], ue[rows_] = cs, ce
        rep = multi[first_idx]
        start[multi] = us[rep][inv]
        end[multi] = ue[rep][inv]
    valid = start >= 0
    rows = np.arange(N)[:, None]
    loads = np.where(valid, pre[rows, np.maximum(end, 0) + 1] - pre[rows, np.maximum(start, 0)] + a_all[:, None], -np.inf)
    return start, end, loads
