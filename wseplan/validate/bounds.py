"""Physically inconsistent rows: a measurement no run of its configuration could reach (issue 12, item 1).

A GPU row is predicted a second time with the *ideal* calibration (:func:`ideal_trial`): every GEMM at its GPU's
full matmul rate, attention at the dense peak, HBM and links at their nominal bandwidths with no latency, every
overlap complete and every fixed overhead zero. That is the fastest the modelled configuration can run: faster than
any real run, whatever the constants. A row measured faster still (a speed above the bound, a time below it, by
more than :data:`MARGIN`) is *physically inconsistent*: a wrong unit, device count or precision in the source or in
the row. Such a row is flagged (``validate`` status ``physically inconsistent``, with the bound in its reason) and
left out of the fits, the tolerance bands and the medians instead of being fitted.

Not checked (no bound is defined): wafer rows (their kernel constants are measured, not efficiencies), capacity rows,
rows that state speculative decoding (an acceptance of one would make any draft length a bound) and rows with an
input filled by a documented default (the bound is that of the configuration the row states).
"""
from __future__ import annotations

import dataclasses

from ..calibration_data import GpuCalibration
from .cases import CAPACITY_METRICS, NON_PERFORMANCE, TIME_METRICS, Case
from .common import Trial, speculation_of

#: relative slack before a row counts as beyond the bound (rounding in the sources' tables)
MARGIN = 0.02
#: the mechanism constants of the production GPU profiles, at their ideal values (bandwidth share 1, no latency)
IDEAL_PROFILE = (("allreduce_latency_s", 0.0), ("hbm_frac", 1.0), ("layer_launch_s", 0.0), ("step_host_s", 0.0))


def _ideal_value(name: str, default: float) -> float:
    """The ideal value of one calibration constant: shares of a peak or of a time hidden 1, added costs 0."""
    if name.endswith("_overhead_frac") or name.endswith("_s") or name in ("gemm_half_intensity",
                                                                           "elementwise_vectors_per_token",
                                                                           "gemm_ridge_exponent"):
        return 0.0  # no added cost; a ridge exponent of 0 selects the plain roofline max
    if name.endswith("_frac") or name.startswith("gemm_max_frac"):
        return 1.0
    return default  # counts that are not efficiencies (engine_max_batch)


def ideal_trial() -> Trial:
    """The calibration of the fastest run a configuration allows (see the module docstring)."""
    base = GpuCalibration()
    cal = base.replace(**{f.name: _ideal_value(f.name, getattr(base, f.name)) for f in dataclasses.fields(base)})
    return Trial(cal, (("gpu-production", IDEAL_PROFILE),), ideal=True)


def checkable(case: Case, catalog) -> bool:
    """Whether a bound is defined for the row (the module docstring says which are not)."""
    if case.hardware.startswith("wse") or case.metric in CAPACITY_METRICS or case.metric in NON_PERFORMANCE:
        return False
    return speculation_of(case, catalog)[0] is not True


def beyond_bound(case: Case, bound: float | None) -> bool:
    """Whether the measured value is beyond ``bound`` (the row's metric at :func:`ideal_trial`) by more than
    :data:`MARGIN`: a speed above it, a time below it."""
    if bound is None or not bound > 0 or not case.value > 0:
        return False
    if case.metric in TIME_METRICS:
        return case.value < bound * (1.0 - MARGIN)
    return case.value > bound * (1.0 + MARGIN)


def bound_message(case: Case, bound: float | None) -> str | None:
    """The reason a row is physically inconsistent (measured value, bound, direction), else None."""
    if not beyond_bound(case, bound):
        return None
    side = "below the shortest time" if case.metric in TIME_METRICS else "above the largest value"
    return (f"physically inconsistent: measured {case.value:.4g} {case.unit} is {side} its configuration allows "
            f"({bound:.4g}: every efficiency 1, no overhead); check the row's unit, device count and precision")
