"""The device-family contract: what every accelerator family implements, vectorized over configurations.

A *family* (GPU nodes and clusters; a wafer with weights resident in SRAM; a wafer fed by MemoryX through
SwarmX; a plug-in such as a TPU pod) turns a :class:`Query` (model x target x phase x precision x software
profile x options, all scalars) and a table of *configurations* (equal-length numpy columns: ``batch``,
``context``, ``output_tokens`` and the family's layout columns) into arrays:

* :meth:`Family.candidates` expands every configuration whose layout is not fully given into the layouts the
  family can run (the layout search space) and returns the parent row of each candidate;
* :meth:`Family.fit` gives the memory of the fullest device, the usable capacity and whether it fits;
* :meth:`Family.time` gives step, TTFT, TPOT, throughput and a named bottleneck (inference families build it
  from :meth:`InferenceFamily.pass_time` through the one serving engine, :mod:`wseplan.analytic.engine`);
* :meth:`Family.hardware` gives what the cost model needs (devices per system, power, rack space).

A scalar question is a table of one row; a sweep is the same code on many rows. :mod:`wseplan.plan` is the
only caller: it chains fit -> layout choice -> time -> cost and never times or prices what does not fit.

Column conventions (all float64 numpy arrays of one length ``n``):

* ``batch`` [sequences], ``context`` [tokens] (train: sequence length; prefill/serve: prompt length; decode:
  KV length), ``output_tokens`` [tokens] (serve: generated tokens per request; 0 elsewhere);
* a layout column holds a value, or NaN where the value is to be searched.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..analytic.engine import phase_objective

#: every bottleneck name a prediction can carry, in one list (codes index it, so arrays stay numeric)
BOTTLENECKS = (
    "compute", "hbm_bandwidth", "nvlink", "overhead", "launch_overhead", "host_overhead", "collective_latency",
    "prefill", "pipeline_bubble", "pipeline_p2p", "network", "optimizer", "kernel_overhead", "fabric_latency",
    "fabric_bandwidth", "fabric", "cross_region_link", "recompute", "weight_stream", "spill_io", "sram",
    "memoryx_capacity", "queueing", "none", "expert_all_to_all",
)
BOTTLENECK_CODE = {name: i for i, name in enumerate(BOTTLENECKS)}

#: what binds a fit (codes index it)
BINDINGS = ("none", "weights", "kv_cache", "activations", "optimizer", "memoryx")
BINDING_CODE = {name: i for i, name in enumerate(BINDINGS)}

PHASES = ("train", "prefill", "decode", "serve")

#: columns every configuration table has
BASE_COLUMNS = ("batch", "context", "output_tokens")


def argmax_code(parts: dict[str, Any], n: int) -> np.ndarray:
    """Bottleneck code (index into :data:`BOTTLENECKS`) of the largest part per row; the first part wins a tie."""
    if not parts:
        return np.full(n, BOTTLENECK_CODE["none"], dtype=np.int64)
    names = list(parts)
    if n <= _FEW_ROWS:  # one question: the same rule per row in Python floats (numpy's nan_to_num, first maximum)
        cols = [_as_n(parts[k], n).tolist() for k in names]
        return np.array([BOTTLENECK_CODE[names[_first_max([_nan_low(c[r]) for c in cols])]] for r in range(n)],
                        dtype=_INT)
    stack = np.stack([_as_n(parts[k], n) for k in names])
    codes = np.asarray([BOTTLENECK_CODE[k] for k in names])
    return codes[np.argmax(np.nan_to_num(stack, nan=-np.inf), axis=0)]


#: rows up to which :func:`argmax_code` and :func:`binding_code` decide row by row in Python floats
_FEW_ROWS = 8
_BIG = float(np.finfo(float).max)
_INT = np.asarray([0]).dtype  # numpy's integer of a list of Python ints (the array path's codes)


def _nan_low(v: float) -> float:
    """``np.nan_to_num(v, nan=-inf)``: NaN -> -inf, +inf -> the largest float, -inf -> the most negative one."""
    if v != v:
        return -math.inf
    return _BIG if v == math.inf else -_BIG if v == -math.inf else v


def _first_max(vals: list) -> int:
    """``np.argmax`` of one row: the first NaN, else the first maximum."""
    best = 0
    for j, v in enumerate(vals):
        if v != v:
            return j
        if v > vals[best]:
            best = j
    return best


def _as_n(v, n: int) -> np.ndarray:
    """``np.broadcast_to(np.asarray(v, dtype=float), (n,))``; an array of that shape and type as it is."""
    if type(v) is np.ndarray and v.shape == (n,) and v.dtype == np.float64:
        return v
    return np.broadcast_to(np.asarray(v, dtype=float), (n,))


def binding_code(parts: dict[str, np.ndarray], load: np.ndarray, capacity, fits: np.ndarray) -> np.ndarray:
    """What binds a fit per row: ``none`` while the fullest device is under half full and fits; a row that fits, its
    largest term (``weights``, ``kv_cache``, ``activations``, ``optimizer``); a row that does not fit, the largest of the
    weights and optimizer state where they alone exceed the capacity (no batch or context helps), else the largest
    of the terms the batch and context set (``kv_cache``, ``activations``: audit28e L5, a 329 MB shortfall the KV
    cache causes beside weights that fit was called "weights")."""
    n = len(load)
    names = list(parts)
    fixed = [k for k in names if k in ("weights", "optimizer")]
    sized = [k for k in names if k not in fixed]
    if n <= _FEW_ROWS:  # one question: the same rule per row in Python floats
        cols = {k: _as_n(parts[k], n).tolist() for k in names}
        ld, cap, ok = _as_n(load, n).tolist(), _as_n(capacity, n).tolist(), np.broadcast_to(fits, (n,)).tolist()

        def one(r):
            if ok[r]:
                return BINDING_CODE["none"] if ld[r] < 0.5 * cap[r] else BINDING_CODE[names[_first_max([cols[k][r] for k in names])]]
            pick = fixed if not sized or sum(cols[k][r] for k in fixed) >= cap[r] else sized
            return BINDING_CODE[pick[_first_max([cols[k][r] for k in pick])]]
        return np.array([one(r) for r in range(n)], dtype=_INT)
    cap = np.asarray(capacity, dtype=float)

    def largest_of(keys):
        stack = np.stack([np.broadcast_to(np.asarray(parts[k], dtype=float), (n,)) for k in keys])
        return np.asarray([BINDING_CODE[k] for k in keys])[np.argmax(stack, axis=0)]
    largest = largest_of(names)
    if fixed and sized:
        with np.errstate(invalid="ignore", over="ignore"):  # an unplaceable row's parts may be inf (it binds)
            static = sum(np.broadcast_to(np.asarray(parts[k], dtype=float), (n,)) for k in fixed)
        misfit = np.where(static >= cap, largest_of(fixed), largest_of(sized))
        largest = np.where(np.broadcast_to(fits, (n,)), largest, misfit)
    return np.where(fits & (load < 0.5 * cap), BINDING_CODE["none"], largest)


@dataclass(frozen=True)
class Query:
    """The scalar part of a question: model x target x phase x precision x software profile x options.

    ``options`` are family options (GPU: ``zero_stage``, ``recompute``, ``sequence_parallel``, ``trainable``,
    ``context_parallel``, ``attention_kernel`` ("flash" or "materialized" for pre-2023 training frameworks), ``tp_comm_overlap`` (False
    for pre-2023 frameworks, which expose the tensor-parallel collectives), ``dp_comm_overlap`` (False: the gradient
    reduction after the backward, Megatron-LM's local DDP before 2023), ``pipeline_split`` ("uneven", or "even"
    for frameworks that need the layers to divide the interleaved stages); wafer: ``reserve``, ``memoryx_option``, ``policy``, ``micro_batch`` ...); a family
    refuses options it does not know with one line.
    """

    model: Any
    target: Any
    phase: str
    precision: str
    catalog: Any
    software: Any
    options: dict = field(default_factory=dict)
    #: a per-user speed floor [tokens/s] the question states (``serve --min-speed``): where no layout of a
    #: configuration reaches it, the fastest layout is chosen instead of the near-tie's most throughput (audit37a F3)
    speed_floor: float | None = None


@dataclass(frozen=True)
class Hardware:
    """What the cost model needs from a family for one target."""

    devices_per_system: float
    system_power_w: float
    system_rack_units: float
    price_key: str
    system_name: str


class Family:
    """Base class of a device family. Subclasses set the class attributes and implement the methods.

    Attributes
    ----------
    name : str
        Registry name (``gpu``, ``wafer``, ``wafer_streaming`` ...).
    kinds : tuple of str
        Catalog kinds this family handles (a target's ``kind``).
    phases : tuple of str
        Phases it answers (a kind may have one family for training and another for inference).
    layout_columns : tuple of str
        Its layout columns; NaN in a column means "search this".
    options : tuple of str
        Family options it accepts in :attr:`Query.options`.
    """

    name: ClassVar[str] = ""
    kinds: ClassVar[tuple[str, ...]] = ()
    phases: ClassVar[tuple[str, ...]] = ()
    layout_columns: ClassVar[tuple[str, ...]] = ()
    options: ClassVar[tuple[str, ...]] = ()

    # -- per query -------------------------------------------------------------------------------
    def prepare(self, q: Query) -> Any:
        """Everything that depends only on the query (workload arrays, constants); passed to every method."""
        raise NotImplementedError

    def hardware(self, ctx) -> Hardware:
        raise NotImplementedError

    # -- vectorized over configurations ----------------------------------------------------------
    def candidates(self, ctx, cfg: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Expand rows with searched (NaN) layout columns into candidate layouts.

        Returns the candidate table (same columns, all layout values filled) and, per candidate, the index of
        the configuration row it came from. Rows whose layout is fully given map to themselves.
        """
        raise NotImplementedError

    def fit(self, ctx, cfg: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Memory fit per row.

        Returns at least: ``num_devices`` (devices the configuration occupies), ``num_replicas``,
        ``per_device_bytes`` (fullest device), ``capacity_bytes`` (usable per device), ``weights_bytes``,
        ``kv_cache_bytes``, ``activation_bytes``, ``optimizer_bytes`` (the fullest device's parts),
        ``total_bytes`` (all devices of one replica), ``fits`` (bool), ``binding`` (code into
        :data:`BINDINGS`), ``max_tokens_in_flight`` (tokens of KV/activations the layout could hold).
        """
        raise NotImplementedError

    def time(self, ctx, cfg: dict[str, np.ndarray], fit: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Time per row (only rows that fit are passed, with their :meth:`fit` arrays).

        Returns at least ``step_s`` and ``tokens_per_s`` and ``bottleneck`` (code into :data:`BOTTLENECKS`),
        and where they apply ``ttft_s``, ``tpot_s``, ``tokens_per_s_per_user``, ``requests_per_s``,
        ``model_flop_per_s``, ``model_flop_utilization_frac``, ``breakdown`` (dict of named part arrays [s]).
        """
        raise NotImplementedError

    # -- scalar records ---------------------------------------------------------------------------
    def describe(self, ctx, row: dict) -> tuple[dict, dict, list[str]]:
        """The layout (long names), family-specific details (stages, MemoryX, streaming bounds ...) and notes of
        one evaluated row (:func:`wseplan.plan.row`)."""
        return {}, {}, []

    def objective(self, q: Query, tim: dict[str, np.ndarray]) -> np.ndarray:
        """Smaller is better: how :mod:`wseplan.plan` chooses among candidate layouts of one configuration."""
        return phase_objective(q.phase, tim)
