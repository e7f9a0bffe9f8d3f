"""Alpha-beta models of collective communication (ring and tree), flat and hierarchical.

Every function is keyword-only, pure and numpy-vectorized: arguments broadcast, results are arrays (0-d for
scalar inputs). ``message_bytes`` is the full buffer each rank holds (all-reduce) or contributes (reduce-scatter
input; an all-gather of the same output costs the same); ``link_bandwidth_bytes_per_s`` is one rank's injection bandwidth in
one direction and ``link_latency_s`` the per-step start-up cost (alpha).

Units: bytes, seconds, bytes/s.

References
----------
Thakur, Rabenseifner and Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 19(1),
2005 (ring/recursive-doubling costs). Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for
clusters of workstations", JPDC 69(2), 2009 (ring all-reduce ``2 (n-1)/n`` bytes per rank). Sanders, Speck and
Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 35, 2009
(the double binary tree NCCL uses: ``2 log2 n`` latency steps, full bandwidth).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError

ALGORITHMS = ("ring", "tree")


def _prep(message_bytes, num_ranks, link_bandwidth_bytes_per_s, link_latency_s):
    m = np.asarray(message_bytes, dtype=float)
    n = np.asarray(num_ranks, dtype=float)
    bw = np.asarray(link_bandwidth_bytes_per_s, dtype=float)
    a = np.asarray(link_latency_s, dtype=float)
    if np.any(n < 1):
        raise InputError("num_ranks: must be at least 1")
    if np.any(bw <= 0):
        raise InputError("link_bandwidth_bytes_per_s: must be positive")
    if np.any(m < 0) or np.any(a < 0):
        raise InputError("message_bytes and link_latency_s: must be non-negative")
    return m, n, bw, a


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise InputError(f"algorithm: unknown {algorithm!r}; use ring or tree")


def allreduce_time_s(*, message_bytes, num_ranks, link_bandwidth_bytes_per_s, link_latency_s, algorithm: str = "ring"):
    """All-reduce time [s] of a ``message_bytes`` buffer over ``num_ranks`` ranks.

    Notes
    -----
    Ring (reduce-scatter then all-gather): ``2 (n-1) alpha + 2 (n-1)/n * m / B``.
    Tree (NCCL double binary tree, pipelined): ``2 ceil(log2 n) alpha + 2 (n-1)/n * m / B`` — same bandwidth
    term, logarithmic latency. One rank costs nothing.
    """
    _check_algorithm(algorithm)
    m, n, bw, a = _prep(message_bytes, num_ranks, link_bandwidth_bytes_per_s, link_latency_s)
    steps = 2.0 * (n - 1.0) if algorithm == "ring" else 2.0 * np.ceil(np.log2(np.maximum(n, 1.0)))
    t = steps * a + 2.0 * (n - 1.0) / n * m / bw
    return np.where(n > 1, t, 0.0)


def reduce_scatter_time_s(*, message_bytes, num_ranks, link_bandwidth_bytes_per_s, link_latency_s, algorithm: str = "ring"):
    """Reduce-scatter time [s]: each rank ends with ``m / n`` of the reduced buffer.

    Notes
    -----
    Ring: ``(n-1) alpha + (n-1)/n * m / B``; tree: ``ceil(log2 n) alpha + (n-1)/n * m / B``.
    """
    _check_algorithm(algorithm)
    m, n, bw, a = _prep(message_bytes, num_ranks, link_bandwidth_bytes_per_s, link_latency_s)
    steps = (n - 1.0) if algorithm == "ring" else np.ceil(np.log2(np.maximum(n, 1.0)))
    return np.where(n > 1, steps * a + (n - 1.0) / n * m / bw, 0.0)


def send_recv_time_s(*, message_bytes, link_bandwidth_bytes_per_s, link_latency_s):
    """Point-to-point transfer time [s]: ``alpha + m / B``."""
    m, _, bw, a = _prep(message_bytes, 1, link_bandwidth_bytes_per_s, link_latency_s)
    return a + m / bw


def hierarchical_allreduce_time_s(*, message_bytes, num_ranks, ranks_per_node, intra_bandwidth_bytes_per_s,
                                  intra_latency_s, inter_bandwidth_bytes_per_s, inter_latency_s,
                                  algorithm: str = "ring"):
    """Two-level all-reduce [s]: reduce-scatter inside the node, all-reduce across nodes, all-gather inside.

    Parameters
    ----------
    message_bytes : array_like
        Buffer per rank [bytes].
    num_ranks : array_like
        Ranks in the collective [count].
    ranks_per_node : array_like
        Ranks that share the fast (NVLink) domain [count]; ``min(num_ranks, ranks_per_node)`` are used.
    intra_bandwidth_bytes_per_s, intra_latency_s : array_like
        Per-rank NVLink bandwidth (one direction) [bytes/s] and step latency [s].
    inter_bandwidth_bytes_per_s, inter_latency_s : array_like
        Per-rank scale-out (InfiniBand/RoCE) bandwidth [bytes/s] and step latency [s]. Each rank of a node
        drives its own NIC, so the inter-node stage moves ``m / g`` per rank.

    Notes
    -----
    ``t = RS_intra(m, g) + AR_inter(m / g, n / g) + AG_intra(m, g)`` with ``g = min(n, ranks_per_node)``.
    With everything in one node this is the flat intra-node ring; with one rank per node, the flat
    inter-node all-reduce.
    """
    n = np.asarray(num_ranks, dtype=float)
    g = np.minimum(n, np.asarray(ranks_per_node, dtype=float))
    m = np.asarray(message_bytes, dtype=float)
    rs = reduce_scatter_time_s(message_bytes=m, num_ranks=g, link_bandwidth_bytes_per_s=intra_bandwidth_bytes_per_s,
                               link_latency_s=intra_latency_s, algorithm=algorithm)
    ar = allreduce_time_s(message_bytes=m / g, num_ranks=np.maximum(np.ceil(n / g), 1.0),
                          link_bandwidth_bytes_per_s=inter_bandwidth_bytes_per_s, link_latency_s=inter_latency_s,
                          algorithm=algorithm)
    return 2.0 * rs + ar
