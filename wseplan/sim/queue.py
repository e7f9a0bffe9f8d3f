"""Discrete-event simulation of a serving replica's admission queue (M/G/c, first come first served).

The reference for :mod:`wseplan.analytic.queueing`: Poisson arrivals at ``arrival_rate``, ``servers`` slots, slot
times drawn by the caller. Deterministic for a seed. Used by the tests; small enough to run in them.
"""
from __future__ import annotations

import heapq

import numpy as np


def simulate_waits(*, arrival_rate: float, servers: int, service_s: np.ndarray, seed: int = 0) -> np.ndarray:
    """Waiting times [s] of ``len(service_s)`` requests arriving as a Poisson process at ``arrival_rate`` [1/s] to
    ``servers`` slots served first come first served, request ``i`` holding a slot for ``service_s[i]``."""
    rng = np.random.default_rng(seed)
    n = len(service_s)
    arrivals = np.cumsum(rng.exponential(1.0 / arrival_rate, size=n))
    free = [0.0] * int(servers)  # min-heap of the times each slot frees
    heapq.heapify(free)
    waits = np.empty(n)
    for i in range(n):
        t = arrivals[i]
        f = heapq.heappop(free)
        start = max(t, f)
        waits[i] = start - t
        heapq.heappush(free, start + float(service_s[i]))
    return waits
