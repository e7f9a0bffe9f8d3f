"""Cost: TCO per system-hour, $/M tokens, $/training run, energy per token, power and rack space.

Three layers, top to bottom, one module each:

1. Pure keyword-only numpy functions: :mod:`.tco` (:func:`deployment_cost`, :func:`memoryx_capex_usd`),
   :mod:`.serving` (:func:`serving_cost`, :func:`rental_serving_cost`), :mod:`.training` (:func:`training_cost`).
   They take time numbers as inputs, never call a time model, and accept scalars or arrays alike, so the same
   code evaluates the nominal case, a Monte Carlo sample or a tornado.
2. Inputs: :mod:`.prices` (:func:`load_prices` reads ``catalogs/prices/*.yaml`` — dated, cited, low/value/high —
   into a frozen :class:`Prices`); :mod:`.params` (:func:`cost_params` resolves the named, overridable inputs of
   one target into :class:`Param` objects, ``--set NAME=VALUE``).
3. Uncertainty: :mod:`.uncertainty` (:func:`monte_carlo`, seeded, vectorized triangular sampling with
   scipy.stats, and :func:`tornado`, the swing of an answer when each input moves from low to high).

:mod:`.result` composes them for one case whose times are known (:func:`evaluate`, :func:`cost_from_times`,
:class:`CostResult`). The composition that calls the time models lives in :func:`wseplan.costing.cost`, the
Python API behind ``wseplan cost``.

Every name below is importable from ``wseplan.analytic.cost`` as before the split.

Units: USD, W, J, s, h (hours only inside ``*_per_hour`` names), kWh only in ``electricity_usd_per_kwh``.
"""
from __future__ import annotations

from .params import (PER_HARDWARE_PRICES, Param, apply_overrides, cost_params, hardware_price_key, nominal, parse_overrides,
                     unscoped_hardware_inputs)
from .prices import (HardwarePrice, MemoryXPrice, Prices, ServicePrice, SitePrices, _iter_quantities,
                     default_prices_dir, load_prices)
from .result import SCHEMA_VERSION, UNITS, CostResult, MetricRow, TimeInputs, cost_from_times, deployment_terms, evaluate
from .serving import rental_serving_cost, serving_cost
from .tco import HOURS_PER_YEAR, S_PER_HOUR, deployment_cost, memoryx_capex_usd, tco_scope_note
from .training import goodput_frac, time_to_train, training_cost
from .uncertainty import MAX_UNCERTAINTY_SAMPLES, Percentiles, TornadoRow, monte_carlo, sample_params, tornado, triangle_through

__all__ = ["HOURS_PER_YEAR", "MAX_UNCERTAINTY_SAMPLES", "S_PER_HOUR", "SCHEMA_VERSION", "UNITS", "CostResult",
           "HardwarePrice", "MemoryXPrice", "MetricRow", "Param", "Percentiles", "Prices", "ServicePrice", "SitePrices",
           "TimeInputs", "TornadoRow", "apply_overrides", "cost_from_times", "cost_params", "default_prices_dir",
           "deployment_cost", "deployment_terms", "evaluate", "hardware_price_key", "load_prices", "memoryx_capex_usd", "monte_carlo",
           "nominal", "parse_overrides", "rental_serving_cost", "sample_params", "serving_cost", "tco_scope_note",
           "tornado", "training_cost", "triangle_through", "PER_HARDWARE_PRICES", "unscoped_hardware_inputs"]
