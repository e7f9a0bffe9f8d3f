"""Vectorized max-plus primitives for streams on a 1-D line of PEs.

Every function works along the last axis of its arrays (the line) and broadcasts over the leading axes
(many independent lines at once), so a whole 2-D grid is one call. Times are in cycles.

The functions are closed-form solutions of explicit per-wavelet recurrences; the tests check each against a
brute-force evaluation of its recurrence on small cases (``tests/sim/test_fabric.py``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "multicast_line",
    "chain_reduce_line",
    "tree_reduce_line",
    "ktree_reduce_line",
    "ktree_radix",
    "ktree_colors",
    "tree_broadcast_line",
    "store_forward_line",
    "incast_finish",
    "scatter_line",
    "tree_levels",
]


def tree_levels(length: int) -> int:
    """Number of levels of a binary tree over ``length`` positions [count]."""
    return int(np.ceil(np.log2(length))) if length > 1 else 0


def multicast_line(*, t0, ready, consume_cycles, num_wavelets, hop_cycles, wavelet_cycles, queue_depth):
    """Pipelined (cut-through) multicast from position 0 with finite receive queues.

    Parameters
    ----------
    t0 : array_like, shape (...)
        Time the source may inject the first wavelet [cycles].
    ready : ndarray, shape (..., L)
        Time each receiver's core can start consuming [cycles].
    consume_cycles : array_like, broadcastable to (..., L)
        Core time to consume one wavelet [cycles].
    num_wavelets : int
        Message length M [wavelets], M >= 1.
    hop_cycles : float
        Router-to-router latency per hop [cycles].
    wavelet_cycles : float
        Link serialisation time of one wavelet [cycles].
    queue_depth : int
        Input-queue depth D of each receiver [wavelets], D >= 1.

    Returns
    -------
    arrive : ndarray, shape (..., L)
        Time the last wavelet reaches each PE [cycles].
    finish : ndarray, shape (..., L)
        Time each PE has consumed the last wavelet [cycles].

    Notes
    -----
    The recurrence (rigid front: a multicast colour stalls everywhere when any receiver queue is full,
    router buffering folded into D), with ``d_i = i * hop_cycles + s`` (hops of the head plus the wavelet's
    own serialisation)::

        T_j    = max(t0 + j*s, T_{j-1} + s, max_i S_i(j-D) - d_i)       (source injects wavelet j)
        S_i(l) = max(T_l + d_i, ready_i, S_i(l-1) + a_i)                 (PE i starts consuming l)
        finish_i = S_i(M-1) + a_i

    Its longest-path solution is a maximum over four families of paths (link-rate, queue-throttled from the
    source, throttled from a late receiver, and late receiver then throttled), each linear in the wavelet
    index, so only their end points need evaluating.
    """
    ready = np.asarray(ready, dtype=float)
    t0 = np.asarray(t0, dtype=float)
    length = ready.shape[-1]
    a = np.broadcast_to(np.asarray(consume_cycles, dtype=float), ready.shape)
    s = float(wavelet_cycles)
    m_last = int(num_wavelets) - 1
    depth = int(queue_depth)
    # Head-to-tail: wavelet j is complete at PE i at T_j + i*h + s.
    dist = np.arange(length) * float(hop_cycles) + s
    b_minus_d = ready - dist
    neg = np.full(t0.shape, -np.inf)

    # Values of the source-front time T at the end points of each path family.
    v_0 = t0                                    # family 1 at j = 0
    t_last = t0 + m_last * s                    # family 1 at j = M-1
    v_d = neg
    v_2d = neg
    if m_last >= depth:
        a_max = a.max(axis=-1)
        max_bd = b_minus_d.max(axis=-1)
        v_d = np.maximum(t0, max_bd)            # families 2 and 3 at j = D
        t_last = np.maximum(t_last, t0 + (m_last - depth) * a_max)
        t_last = np.maximum(t_last, (b_minus_d + (m_last - depth) * np.maximum(a, s)).max(axis=-1))
        if m_last >= 2 * depth:
            v_2d = max_bd                       # family 4 at j = 2D
            t_last = np.maximum(t_last, max_bd + (m_last - 2 * depth) * a_max)
    ex = lambda v: v[..., None]  # noqa: E731
    start_last = np.maximum.reduce([
        ex(v_0) + m_last * a,
        ex(v_d) + (m_last - depth) * a,
        ex(v_2d) + (m_last - 2 * depth) * a,
        np.broadcast_to(ex(t_last), a.shape),
    ]) + dist
    start_last = np.maximum(start_last, ready + m_last * a)
    arrive = ex(t_last) + dist
    return np.broadcast_to(arrive, ready.shape), start_last + a


def chain_reduce_line(*, ready, ready_step, first_cycles, stage_service_cycles, num_wavelets, stage_cycles):
    """Pipelined chain reduction: stage 0 sends, every later stage adds its own part and forwards.

    Parameters
    ----------
    ready : ndarray, shape (..., L)
        Time the first wavelet of each stage's own partial is ready [cycles]; stage 0 is the far end,
        stage L-1 the root.
    ready_step : float
        Extra delay of each further wavelet's readiness [cycles/wavelet] (0 when all are ready together).
    first_cycles : float
        Service time of stage 0 per wavelet (read and inject) [cycles].
    stage_service_cycles : float
        Service time per wavelet at stages >= 1 (receive, add, forward; not below the link time) [cycles].
    num_wavelets : int
        Partial-sum length M [wavelets].
    stage_cycles : float
        Latency from one stage to the next (hops x hop latency + ramp latency) [cycles].

    Returns
    -------
    ndarray, shape (..., L)
        Time each stage has processed its last wavelet [cycles]; the root's value is the end of the reduction.

    Notes
    -----
    Deterministic tandem line ``R_k(j) = max(R_{k-1}(j) + c, R_k(j-1), ready_k + j*g) + a_k``. Its longest
    path enters at some stage m (first or last wavelet) and spends the remaining wavelets at the slowest
    stage::

        R_k(M-1) = max_m [ready_m + max((M-1)*a_max, (M-1)*g) + sum_{l=m..k} a_l + (k-m)*c]

    evaluated for all k at once with ``np.maximum.accumulate``. Receive queues do not change the root's
    time (they only keep upstream senders busy longer), so they are not modelled here.
    """
    ready = np.asarray(ready, dtype=float)
    length = ready.shape[-1]
    m1 = int(num_wavelets) - 1
    a, a0, g, c = float(stage_service_cycles), float(first_cycles), float(ready_step), float(stage_cycles)
    k = np.arange(length)
    out = ready[..., :1] + max(m1 * a0, m1 * g) + a0 + np.zeros_like(ready)
    if length > 1:
        amx = max(a0, a)
        from_first = ready[..., :1] + max(m1 * amx, m1 * g) + a0 + k[1:] * (a + c)
        x = ready[..., 1:] + max(m1 * a, m1 * g) - k[1:] * (a + c)
        from_later = np.maximum.accumulate(x, axis=-1) + a + k[1:] * (a + c)
        out[..., 1:] = np.maximum(from_first, from_later)
    return out


def tree_reduce_line(*, ready, ready_step, first_cycles, stage_service_cycles, num_wavelets, hop_cycles,
                     ramp_cycles):
    """Binary-tree reduction towards position 0, one pipelined two-stage transfer per level.

    Parameters are those of :func:`chain_reduce_line` except ``hop_cycles`` and ``ramp_cycles`` [cycles]:
    at the level with stride ``st`` the partner is ``st`` hops away, so the stage latency is
    ``st*hop_cycles + ramp_cycles``.

    Returns
    -------
    done : ndarray, shape (..., L)
        Time each position has finished its last send or add [cycles]; ``done[..., 0]`` ends the reduction.
    link_levels : list of (stride, senders)
        For link accounting: per level the stride and the sender positions.

    Notes
    -----
    Level strides 1, 2, 4, ...; the receiver x and sender x+st form a two-stage tandem
    (:func:`chain_reduce_line` with L = 2). A merged partial keeps an affine readiness: last wavelet at the
    level's end, earlier ones spaced by the slowest of sender, receiver and ``ready_step`` (an
    approximation only when ``ready_step`` > 0).
    """
    ready = np.array(ready, dtype=float)
    length = ready.shape[-1]
    m1 = int(num_wavelets) - 1
    a, a0 = float(stage_service_cycles), float(first_cycles)
    step = np.full(ready.shape, float(ready_step))
    first = ready.copy()           # readiness of the first wavelet of the partial held at each position
    done = ready.copy()
    levels = []
    st = 1
    while st < length:
        recv = np.arange(0, length - st, 2 * st)
        send = recv + st
        c = st * float(hop_cycles) + float(ramp_cycles)
        b_s, g_s = first[..., send], step[..., send]
        b_r, g_r = first[..., recv], step[..., recv]
        amx = max(a0, a)
        t_send = b_s + np.maximum(m1 * amx, m1 * g_s) + a0 + (a + c)
        t_recv = b_r + np.maximum(m1 * a, m1 * g_r) + a
        end = np.maximum(t_send, t_recv)
        done[..., send] = np.maximum(done[..., send], b_s + np.maximum(m1 * a0, m1 * g_s) + a0)
        new_step = np.maximum(np.maximum(g_s, g_r), amx)
        first[..., recv] = end - m1 * new_step
        step[..., recv] = new_step
        done[..., recv] = end
        levels.append((st, send))
        st *= 2
    return done, levels


def ktree_radix(length: int) -> int:
    """Segment length of the two-level K-tree over ``length`` positions: ``ceil(sqrt(length))`` [PEs]."""
    return math.isqrt(length - 1) + 1 if length > 1 else 1


def _ktree_groups(length: int, st: int, r: int) -> list[np.ndarray]:
    """Index arrays (groups, members) of one K-tree level with stride ``st``: member j of the group headed at h is
    h + j*st (j < r, within the line); groups of equal size share one array (at most two sizes); a lone head has no
    work at that level and is left out."""
    heads = np.arange(0, length, st * r)
    sizes = np.minimum(r, (length - 1 - heads) // st + 1)
    out = []
    for g in np.unique(sizes[sizes > 1]):
        hs = heads[sizes == g]
        out.append(hs[:, None] + st * np.arange(int(g))[None, :])
    return out


def ktree_colors(length: int) -> int:
    """Routing colours of the two-level K-tree over ``length`` positions: per level, 2 for a chain of 3 or more
    members (alternating parity, as the chain reduction), 1 for pairs [colours]."""
    if length <= 1:
        return 0
    r = ktree_radix(length)
    need, st = 0, 1
    while st < length:
        members = max(int(g.shape[1]) for g in _ktree_groups(length, st, r))
        need += 2 if members >= 3 else 1
        st *= r
    return need


def ktree_reduce_line(*, ready, ready_step, first_cycles, stage_service_cycles, num_wavelets, hop_cycles,
                      ramp_cycles):
    """Two-level reduction towards position 0: WaferLLM's K-tree all-reduce with K = 2 (He et al., OSDI 2025,
    MeshGEMV), which keeps a line's reduction to a few routing colours.

    Parameters are those of :func:`tree_reduce_line` [cycles]. Level 1: every segment of ``r = ceil(sqrt L)``
    consecutive positions chain-reduces into its first position (stage latency ``h + ramp``); level 2: the segment
    heads (stride ``r``) chain-reduce into position 0 (stage latency ``r*h + ramp``). Each level is
    :func:`chain_reduce_line`; a head's merged partial enters level 2 with an affine readiness (last wavelet at its
    level-1 end, earlier ones spaced by the slowest service), as a level of :func:`tree_reduce_line`.

    Returns
    -------
    done : ndarray, shape (..., L)
        Time each position has finished its last send or add [cycles]; ``done[..., 0]`` ends the reduction.
    link_levels : list of (stride, senders)
        For link accounting: per level the stride and the sender positions (each sends to the position ``stride``
        nearer to 0).
    """
    ready = np.array(ready, dtype=float)
    length = ready.shape[-1]
    done = ready.copy()
    levels = []
    if length <= 1:
        return done, levels
    r = ktree_radix(length)
    m1 = int(num_wavelets) - 1
    a, a0 = float(stage_service_cycles), float(first_cycles)
    amx = max(a0, a)
    first, step = ready.copy(), float(ready_step)
    st = 1
    while st < length:
        senders = []
        new_step = max(step, amx)
        for idx in _ktree_groups(length, st, r):
            order = idx[:, ::-1]                      # chain stage 0 = the far member, the last stage = the head
            out = chain_reduce_line(ready=first[..., order], ready_step=step, first_cycles=a0,
                                    stage_service_cycles=a, num_wavelets=num_wavelets,
                                    stage_cycles=st * float(hop_cycles) + float(ramp_cycles))
            done[..., order] = np.maximum(done[..., order], out)
            first[..., idx[:, 0]] = out[..., -1] - m1 * new_step
            senders.append(idx[:, 1:].ravel())
        step = new_step
        levels.append((st, np.sort(np.concatenate(senders))))
        st *= r
    return done, levels


def tree_broadcast_line(*, t0, num_wavelets, hop_cycles, wavelet_cycles, ramp_cycles, length):
    """Store-and-forward binary-tree broadcast from position 0 into each PE's memory.

    Returns
    -------
    have : ndarray, shape (..., L)
        Time each PE holds the whole message [cycles].
    link_levels : list of (stride, senders)

    Notes
    -----
    Strides L/2, L/4, ..., 1 (rounded up to powers of two). A sender sends one message per level, so its
    sends are serialised: ``start = max(have[x], link_free[x])``, ``have[x+st] = start + st*h + ramp + M*s``.
    Routes of one level use disjoint links, so there is no contention within a level.
    """
    t0 = np.asarray(t0, dtype=float)
    have = np.full(t0.shape + (length,), np.inf)
    have[..., 0] = t0
    free = have.copy()
    msg = int(num_wavelets) * float(wavelet_cycles)
    levels = []
    st = 1 << max(tree_levels(length) - 1, 0)
    while st >= 1 and length > 1:
        send = np.arange(0, length - st, 2 * st)
        recv = send + st
        start = np.maximum(have[..., send], free[..., send])
        have[..., recv] = start + st * float(hop_cycles) + float(ramp_cycles) + msg
        free[..., send] = start + msg
        free[..., recv] = have[..., recv]
        levels.append((st, send))
        st //= 2
    return have, levels


def store_forward_line(*, t0, num_wavelets, hop_cycles, wavelet_cycles, ramp_cycles, length):
    """Store-and-forward chain broadcast: each PE receives the whole message, then re-sends it.

    Returns the time each PE holds the message [cycles], shape (..., L):
    ``have_i = t0 + i*(hop_cycles + ramp_cycles + M*wavelet_cycles)``.
    """
    t0 = np.asarray(t0, dtype=float)
    per_hop = float(hop_cycles) + float(ramp_cycles) + int(num_wavelets) * float(wavelet_cycles)
    return t0[..., None] + np.arange(length) * per_hop


def incast_finish(*, arrival, work_cycles):
    """Completion of several flows converging on one link (FIFO, work-conserving) [cycles].

    Parameters
    ----------
    arrival : ndarray, shape (..., F)
        Time each flow's head would reach the shared link without contention [cycles].
    work_cycles : ndarray, broadcastable to (..., F)
        Link occupancy of each flow [cycles].

    Returns
    -------
    ndarray, shape (...)
        Time the last wavelet has crossed the link [cycles].

    Notes
    -----
    Busy-period formula of a single work-conserving server: ``C = max_q (arr_q + sum_{q': arr_q' >= arr_q}
    w_q')``. For flows along a line that all end at one PE the ordering by arrival is the same at every link,
    so the last link dominates and this is the completion at the destination.
    """
    arrival = np.asarray(arrival, dtype=float)
    work = np.broadcast_to(np.asarray(work_cycles, dtype=float), arrival.shape)
    order = np.argsort(arrival, axis=-1, kind="stable")
    arr = np.take_along_axis(arrival, order, axis=-1)
    w = np.take_along_axis(work, order, axis=-1)
    suffix = np.flip(np.cumsum(np.flip(w, axis=-1), axis=-1), axis=-1)
    return (arr + suffix).max(axis=-1)


def scatter_line(*, t0, wavelets, hop_cycles, wavelet_cycles):
    """Scatter distinct segments from position 0 to every position, farthest first.

    Parameters
    ----------
    t0 : array_like, shape (...)
        Source start [cycles].
    wavelets : ndarray, shape (L,)
        Segment length for each destination [wavelets] (position 0 keeps its own).

    Returns
    -------
    ndarray, shape (..., L)
        Time each destination holds its segment [cycles]: the source link is shared, so a segment waits for
        all farther segments: ``have_p = t0 + s*sum_{p'>p} M_p' + p*h + M_p*s``.
    """
    t0 = np.asarray(t0, dtype=float)
    w = np.asarray(wavelets, dtype=float).copy()
    w[0] = 0.0
    s = float(wavelet_cycles)
    before = np.concatenate([np.flip(np.cumsum(np.flip(w)))[1:], [0.0]])
    have = before * s + np.arange(w.size) * float(hop_cycles) + w * s
    have[0] = 0.0
    return t0[..., None] + have
