"""Uncertainty of the cost inputs: seeded, vectorized triangular Monte Carlo (P10/P50/P90) and the tornado (swing of
an answer when each input moves from low to high)."""
from __future__ import annotations

from typing import Callable

import math

import numpy as np

from ...catalog.schema import Frozen
from ...errors import InputError
from .params import Param, nominal

#: most Monte Carlo samples of the cost inputs (the cap study files have, wseplan.report.study.CostSpec): each
#: sample holds every input and output, ~1 KB, so the cap bounds memory at ~100 MB
MAX_UNCERTAINTY_SAMPLES = 100_000


def _check_samples(n: int) -> None:
    if n > MAX_UNCERTAINTY_SAMPLES:
        raise InputError(f"--uncertainty: {n:,} samples exceed the limit of {MAX_UNCERTAINTY_SAMPLES:,} (as in study "
                         "files); use fewer samples")


def sample_params(params: dict[str, Param], n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` samples of every input: triangular(low, value, high) via scipy.stats; fixed inputs repeat.

    Inputs are drawn independently, in the order of ``params``, from one ``numpy`` generator seeded with
    ``seed``, so the same seed gives the same samples.
    """
    from scipy import stats

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise InputError(f"--uncertainty: sample count must be an integer >= 2, got {n!r}")
    _check_samples(n)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for k, p in params.items():
        if not p.uncertain:
            out[k] = np.full(n, p.value)
            continue
        lo, mid, hi = ((math.log(p.low), math.log(p.value), math.log(p.high)) if p.log_scale and p.low > 0
                       else (p.low, p.value, p.high))
        x = stats.triang.rvs((mid - lo) / (hi - lo), loc=lo, scale=hi - lo, size=n, random_state=rng)
        out[k] = np.exp(x) if p.log_scale and p.low > 0 else x
        if p.clip_low is not None:  # a hard bound inside the support: the samples below it take it (review37 H2)
            out[k] = np.maximum(out[k], p.clip_low)
    return out


class Percentiles(Frozen):
    metric: str
    nominal: float
    p10: float
    p50: float
    p90: float
    mean: float


class TornadoRow(Frozen):
    """Swing of ``metric`` when ``param`` moves from its low to its high value, the rest at nominal."""

    metric: str
    param: str
    low: float
    high: float
    metric_at_low: float
    metric_at_high: float
    swing: float


def monte_carlo(params: dict[str, Param], fn: Callable[[dict], dict], *, n: int, seed: int = 0,
                metrics: list[str] | None = None) -> list[Percentiles]:
    """P10/P50/P90 of each metric of ``fn`` over ``n`` seeded samples of ``params`` (one vectorized call)."""
    samples = sample_params(params, n, seed)
    res = fn(samples)
    nom = fn(nominal(params))
    rows = []
    for k in metrics or list(res):
        v = np.broadcast_to(np.asarray(res[k], dtype=float), (n,))
        p10, p50, p90 = np.percentile(v, [10, 50, 90])
        rows.append(Percentiles(metric=k, nominal=float(nom[k]), p10=float(p10), p50=float(p50), p90=float(p90),
                                mean=float(v.mean())))
    return rows


def tornado(params: dict[str, Param], fn: Callable[[dict], dict], metric: str) -> list[TornadoRow]:
    """One-at-a-time sensitivity of ``metric``: rows sorted by |swing|, largest first (uncertain inputs only).

    All low and high cases are evaluated in one vectorized call: column 2i holds input i at its low value,
    column 2i+1 at its high value, every other input at nominal.
    """
    names = [k for k, p in params.items() if p.uncertain]
    if not names:
        return []
    m = 2 * len(names)
    cols = {k: np.full(m, p.value) for k, p in params.items()}
    for i, k in enumerate(names):
        cols[k][2 * i] = params[k].least
        cols[k][2 * i + 1] = params[k].high
    v = np.broadcast_to(np.asarray(fn(cols)[metric], dtype=float), (m,))
    rows = [TornadoRow(metric=metric, param=k, low=params[k].least, high=params[k].high, metric_at_low=float(v[2 * i]),
                       metric_at_high=float(v[2 * i + 1]), swing=float(v[2 * i + 1] - v[2 * i]))
            for i, k in enumerate(names)]
    rows.sort(key=lambda r: (-abs(r.swing), r.param))
    return rows


def triangle_through(q_low: float, q_high: float, *, p: float = 0.1) -> tuple[float, float]:
    """The support ``(a, b)`` of the triangular distribution with its mode at 0 whose ``p`` and ``1 - p`` quantiles
    are ``q_low < 0 < q_high``: CDF ``(x - a)^2 / ((b - a)(-a))`` below the mode, survival ``(b - x)^2 / ((b - a) b)``
    above. A symmetric pair gives ``b = q_high / (1 - sqrt(2 p))``. Used for the model's time error, whose P10 and P90
    are then the 80% prediction interval ``time`` prints (audit37b F1: a triangle over the 5th-95th percentiles put
    the Monte Carlo's P90 at half the interval's top)."""
    from scipy import optimize

    if not (q_low < 0.0 < q_high) or not 0.0 < p < 0.5:
        raise ValueError(f"triangle_through: needs q_low < 0 < q_high and 0 < p < 0.5, got {q_low}, {q_high}, {p}")

    def resid(z):
        a, b = -math.exp(z[0]), math.exp(z[1])
        L = b - a
        return [math.log((q_low - a) ** 2 / (L * -a) / p) if q_low > a else -50.0 + (q_low - a),
                math.log((b - q_high) ** 2 / (L * b) / p) if b > q_high else -50.0 + (b - q_high)]

    k = 1.0 - math.sqrt(2.0 * p)
    sol = optimize.root(resid, [math.log(-q_low / k), math.log(q_high / k)], method="hybr", tol=1e-12)
    a, b = -math.exp(sol.x[0]), math.exp(sol.x[1])
    if max(abs(r) for r in resid(sol.x)) > 1e-9:  # (hybr may stop "not making progress" at a residual of 1e-16)
        raise ValueError(f"triangle_through: no triangle through {q_low}, {q_high} at p = {p}")
    return a, b
