"""Queueing at a serving replica: how long a request waits for a slot, and the TTFT percentiles that follow.

An engine replica runs at most ``c`` requests at once (its batch slots). Requests arrive at rate ``lambda``
(Poisson, as MLPerf's Server scenario and most production traffic models assume) and hold a slot for their
service time ``S`` (own prefill + the decode of their answer), whose spread comes from the spread of the answer
lengths. That is an M/G/c queue. Its waiting time is approximated by the Allen-Cunneen correction of the exact
M/M/c (Erlang C) result,

    P(wait) = C(c, a),  a = lambda E[S]  (offered load),  rho = a / c < 1,
    E[W] ~= C(c, a) / (c / E[S] - lambda) * (Ca^2 + Cs^2) / 2,

with ``Ca^2 = 1`` for Poisson arrivals and ``Cs^2`` the squared coefficient of variation of ``S``, and the wait's
tail taken as exponential with that mean, conditional on waiting: ``P(W > t) = C(c, a) exp(-t C / E[W])``.
The TTFT at percentile ``p`` is the replica's own prefill time plus the wait at ``p``. The approximation is held
to a discrete-event simulation of the same queue in ``tests/test_queueing.py`` (within 10% at loads 0.1-0.9).

References: Allen, "Probability, Statistics and Queueing Theory", 2nd ed., Academic Press 1990, sec. 6.2
(the Allen-Cunneen approximation); Kleinrock, "Queueing Systems", vol. 1, 1975 (Erlang C).
"""
from __future__ import annotations

import numpy as np
from scipy import special


def erlang_c(*, servers, offered_load):
    """Probability that an arrival waits in an M/M/c queue, C(c, a) [fraction]; 1 when ``a >= c``.

    Computed through the regularised upper incomplete gamma function (stable for thousands of servers):
    ``B = Erlang B = a^c e^-a / c! / Q(c+1, a)``, ``C = c B / (c - a (1 - B))``.
    """
    c = np.asarray(servers, dtype=float)
    a = np.asarray(offered_load, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        log_term = c * np.log(np.maximum(a, 1e-300)) - a - special.gammaln(c + 1.0)
        q = special.gammaincc(c + 1.0, a)  # P(Poisson(a) <= c)
        b = np.exp(log_term) / np.maximum(q, 1e-300)
        cprob = c * b / (c - a * (1.0 - b))
    return np.where(a >= c, 1.0, np.where(a <= 0, 0.0, np.clip(cprob, 0.0, 1.0)))


def mgc_wait(*, arrival_rate, mean_service_s, servers, service_scv=1.0, arrival_scv=1.0, percentile=None):
    """Mean wait [s] (or the wait at ``percentile`` in [0, 100)) of an M/G/c queue, Allen-Cunneen.

    ``service_scv`` and ``arrival_scv`` are squared coefficients of variation (1: exponential/Poisson).
    Infinite at or above capacity (``lambda E[S] >= c``).
    """
    lam = np.asarray(arrival_rate, dtype=float)
    es = np.asarray(mean_service_s, dtype=float)
    c = np.asarray(servers, dtype=float)
    a = lam * es
    pw = erlang_c(servers=c, offered_load=a)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = c / es - lam
        mean = np.where(rate > 0, pw / rate * (np.asarray(arrival_scv) + np.asarray(service_scv)) / 2.0, np.inf)
        if percentile is None:
            return mean
        p = np.asarray(percentile, dtype=float) / 100.0
        cond = mean / np.maximum(pw, 1e-300)  # mean wait of those who wait
        tail = np.where(pw > 1.0 - p, cond * np.log(pw / np.maximum(1.0 - p, 1e-300)), 0.0)
    return np.where(rate > 0, tail, np.inf)


def service_scv(*, prefill_s, decode_s_per_token, output_tokens_mean, output_tokens_scv):
    """Squared coefficient of variation of a request's slot time ``S = prefill + O tpot`` when the answer length
    ``O`` varies with squared CV ``output_tokens_scv`` and the prompt part is fixed [dimensionless]."""
    var = (np.asarray(decode_s_per_token) * np.asarray(output_tokens_mean)) ** 2 * np.asarray(output_tokens_scv)
    mean = np.asarray(prefill_s) + np.asarray(decode_s_per_token) * np.asarray(output_tokens_mean)
    return var / np.maximum(mean, 1e-300) ** 2


def cycle_wait(*, arrival_rate, cycle_s, percentile=None):
    """Wait for the batch in progress of a static-batching engine [s]: requests join only where a cycle (the batch's
    prefill and all its decode steps) ends, and the engine starts a cycle whenever a request waits. With cycles of a
    fixed length T and arrivals at rate lambda, a busy period is a run of cycles that ends at the first cycle that sees
    no arrival (probability e^(-lambda T)), so the engine is busy a share P = x e^x / (1 + x e^x) of the time (x =
    lambda T), and an arrival during a cycle waits its residual, uniform on (0, T): the mean is P T / 2, the quantile q
    0 below 1 - P and T (q - 1 + P) / P above. The wait for a free slot beyond the cycle is :func:`mgc_wait`'s."""
    x = np.asarray(arrival_rate, dtype=float) * np.asarray(cycle_s, dtype=float)
    e = x * np.exp(np.minimum(x, 700.0))
    busy = e / (1.0 + e)
    if percentile is None:
        return busy * cycle_s / 2.0
    q = percentile / 100.0
    return np.where(q <= 1.0 - busy, 0.0, cycle_s * (q - 1.0 + busy) / np.where(busy > 0, busy, 1.0))
