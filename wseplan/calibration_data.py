"""Loader for ``catalogs/calibration/gpu_efficiency.yaml``: the fitted achievable-efficiency constants of the
GPU time models (:mod:`wseplan.analytic.gpu_time`).

The file is not read by the core catalog loader; this module owns it. Each constant is a catalog
:class:`~wseplan.catalog.schema.Quantity` (value, source, basis, note); the file also lists the validation
row ids the constants were fitted on (``fitted_on``), the fit method and the constants that ended at a bound of
their prior. :func:`gpu_calibration` returns a plain frozen dataclass of floats (:class:`GpuCalibration`) for the
hot path. The priors of the fitted constants (mechanism, value, physical range, sources) are hand-written in
``catalogs/calibration/gpu_priors.yaml`` (:func:`read_gpu_priors`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .catalog.load import default_catalog_dir, read_yaml
from .catalog.schema import Quantity
from .catalog.software import calibrated_name
from .errors import CatalogError, validation_detail


@dataclass(frozen=True)
class GpuCalibration:
    """Achievable-efficiency constants of the GPU time models (fractions, seconds, counts).

    Attributes
    ----------
    gemm_max_frac_16bit, gemm_max_frac_8bit, gemm_max_frac_4bit : float
        Asymptotic fraction of the dense peak a large GEMM reaches, by operand width [fraction].
    gemm_half_intensity : float
        GEMM arithmetic intensity ``1/(1/M + 1/N + 1/K)`` at which a GEMM reaches half its asymptotic
        efficiency [FLOP/element-ish, dimensionless].
    gemm_ridge_exponent : float
        Exponent ``p`` of the soft roofline ``(t_c^p + t_m^p)^(1/p)`` of a GEMM's compute and memory times (operand
        loads overlap the math only partly near the ridge point); ``0`` selects the plain ``max`` [dimensionless].
    attention_frac : float
        Fraction of the dense peak reached by (flash) attention score/context products [fraction].
    hbm_frac : float
        Achievable fraction of the HBM bandwidth [fraction].
    elementwise_vectors_per_token : float
        Memory traffic of a block's non-GEMM operators (norms, activations, residuals, rotary, dropout) per
        token in the forward pass, in d_model-wide 16-bit vectors [count].
    nvlink_frac, network_frac : float
        Achieved fraction of the scale-up (NVLink) and scale-out (InfiniBand/RoCE) per-GPU bandwidth [fraction].
    nvlink_latency_s, network_latency_s : float
        Per-step latency (alpha) of collectives inside and across nodes [s].
    tp_overlap_frac : float
        Share of tensor-parallel communication hidden behind compute in training [fraction].
    dp_overlap_frac : float
        Share of a micro-batch's compute that its data-parallel collectives run under (ZeRO-0/1: the step's one
        gradient reduction under the last micro-batch; ZeRO-2: each micro-batch's reduce-scatter) [fraction].
    zero3_overlap_frac : float
        Share of the step's compute time that ZeRO-3/FSDP's prefetched parameter gathers and gradient
        reduce-scatters can hide behind [fraction].
    lowp_training_overhead_frac : float
        Time an 8-bit or 4-bit training GEMM spends beyond the GEMM itself, as a share of it: the framework's scaling
        (amax reductions, casting 16-bit activations, weights and gradients, the transposed copies the backward
        needs) that inference's pre-quantized weights skip [fraction].
    vector_attention_frac : float
        Achieved share of the FP32 vector-unit (CUDA-core) peak by a decode attention kernel without tensor-core
        instructions, one thread block per query head and sequence (``decode_attention: per_query_head``) [fraction].
    layer_overhead_s : float
        Fixed cost per transformer block per forward pass in inference (kernel launches, scheduling) [s].
    step_overhead_s : float
        Fixed cost per inference forward pass (sampling, scheduling, host) [s].
    train_step_overhead_s : float
        Fixed cost per training step (optimizer launch, gradient-norm synchronisation, data loading) [s].
    engine_max_batch : float
        Largest batch an inference engine runs when the concurrency is not given [sequences].
    benchmark_eval_overhead_frac : float
        Share of a timed benchmark training run spent in its periodic evaluation [fraction].
    allreduce_latency_s : float
        Latency of one tensor-parallel all-reduce inside the NVLink domain with the engine's custom one/two-shot
        kernel [s]; 0 selects the alpha-beta tree of NCCL with ``nvlink_latency_s`` per step (training, legacy).
    layer_launch_s : float
        Kernel launch gaps of one transformer block's kernels in an inference pass (kernels per block x gap per
        kernel; with CUDA graphs a graph node costs about a microsecond, eager launches several) [s].
    step_host_s : float
        Host work per engine step not hidden behind the GPU (scheduling, sampling, input preparation) [s].
    """

    gemm_max_frac_16bit: float = 0.80
    gemm_max_frac_8bit: float = 0.65
    gemm_max_frac_4bit: float = 0.55
    gemm_half_intensity: float = 60.0
    gemm_ridge_exponent: float = 0.0
    attention_frac: float = 0.5
    hbm_frac: float = 0.8
    elementwise_vectors_per_token: float = 20.0
    nvlink_frac: float = 0.75
    network_frac: float = 0.7
    nvlink_latency_s: float = 1.0e-5
    network_latency_s: float = 2.0e-5
    tp_overlap_frac: float = 0.1
    dp_overlap_frac: float = 0.7
    zero3_overlap_frac: float = 0.5
    lowp_training_overhead_frac: float = 0.0
    vector_attention_frac: float = 0.25
    layer_overhead_s: float = 2.0e-5
    step_overhead_s: float = 1.0e-3
    train_step_overhead_s: float = 0.1
    engine_max_batch: float = 256.0
    benchmark_eval_overhead_frac: float = 0.05
    allreduce_latency_s: float = 0.0
    layer_launch_s: float = 0.0
    step_host_s: float = 0.0

    def replace(self, **kw) -> "GpuCalibration":
        return dataclasses.replace(self, **kw)


CALIBRATION_KEYS = tuple(f.name for f in dataclasses.fields(GpuCalibration))


class GpuEfficiencyFile(BaseModel):
    """Schema of ``catalogs/calibration/gpu_efficiency.yaml``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    description: str
    method: str
    fitted_on: list[str]
    residuals: dict[str, float] = {}
    #: fitted constants that ended at a bound of their prior range ("name: low" / "name: high")
    at_bound: list[str] = []
    #: the model choice of the calibration and the cross-validated errors it was chosen by
    selection: dict = {}
    constants: dict[str, Quantity]
    #: the fitted values of software profiles' mechanism constants (profile -> constant -> value); they replace the
    #: prior value a profile states with a range (low/high), see :func:`profile_constants`
    profiles: dict[str, dict[str, Quantity]] = {}


class GpuPrior(Quantity):
    """The prior of one fitted constant: the mechanism it stands for, its likely value and physical range."""

    mechanism: str = Field(min_length=1)


def priors_path(base_dir: str | Path | None = None) -> Path:
    base = Path(base_dir) if base_dir is not None else default_catalog_dir()
    return base / "calibration" / "gpu_priors.yaml"


@lru_cache(maxsize=4)
def read_gpu_priors(path: str | Path | None = None) -> dict[str, GpuPrior]:
    """The priors of ``catalogs/calibration/gpu_priors.yaml`` by constant name; :class:`CatalogError` on a bad file
    (an unknown constant, a prior without a range, a value outside its range)."""
    return read_priors(Path(path) if path is not None else priors_path(), "gpu_priors", CALIBRATION_KEYS)


#: the wafer kernel constants fitted to measurements (``catalogs/calibration/fabric.yaml``), whose priors
#: ``catalogs/calibration/wafer_priors.yaml`` holds
WAFER_FITTED_KEYS = ("per_kernel_overhead_cycles", "gemm_mac_efficiency_frac", "gemm_step_overhead_cycles")


@lru_cache(maxsize=4)
def read_wafer_priors(path: str | Path | None = None) -> dict[str, GpuPrior]:
    """The priors of the measured wafer kernel constants (``catalogs/calibration/wafer_priors.yaml``) by name, in
    :data:`WAFER_FITTED_KEYS` order; :class:`CatalogError` on a bad file or a missing constant."""
    p = Path(path) if path is not None else default_catalog_dir() / "calibration" / "wafer_priors.yaml"
    out = read_priors(p, "wafer_priors", WAFER_FITTED_KEYS)
    missing = [k for k in WAFER_FITTED_KEYS if k not in out]
    if missing:
        raise CatalogError(f"{p}: no prior for {', '.join(missing)}; every fitted wafer constant needs one")
    return {k: out[k] for k in WAFER_FITTED_KEYS}


def prior_z(value: float, low: float, high: float, x: float) -> float:
    """The prior residual of ``x`` for a prior ``value`` in ``[low, high]``: ``log(x / value)`` in half-widths, a
    half-width being half the log-distance from ``value`` to the bound on ``x``'s side (0 for a point prior)."""
    b = high if x >= value else low
    w = abs(math.log(b / value)) / 2.0
    return 0.0 if w == 0 else math.log(x / value) / w


def bound_side(x: float, low: float, high: float, rel: float = 1e-3) -> str | None:
    """``"low"`` or ``"high"`` when ``x`` lies within ``rel`` (in log) of that bound of ``[low, high]``, else None: a
    fitted constant that ends there is reported (the rows push it beyond its physical range)."""
    if abs(math.log(x / low)) < rel:
        return "low"
    if abs(math.log(high / x)) < rel:
        return "high"
    return None


def read_priors(p: Path, section: str, allowed) -> dict[str, GpuPrior]:
    """The ``section`` mapping of priors file ``p`` (constant -> :class:`GpuPrior`), each name in ``allowed``, each
    with ``0 < low <= value <= high``; :class:`CatalogError` naming the file and field otherwise."""
    data = read_yaml(p)
    if not isinstance(data, dict) or not isinstance(data.get(section), dict):
        raise CatalogError(f"{p}: must hold a {section!r} mapping")
    out = {}
    for k, v in data[section].items():
        if k not in allowed:
            raise CatalogError(f"{p}: unknown constant {k!r}; allowed: {', '.join(allowed)}")
        try:
            q = GpuPrior.model_validate(v)
        except ValidationError as exc:
            loc, msg = validation_detail(exc)
            raise CatalogError(f"{p}: {k}.{loc}: {msg}") from None
        if q.low is None or q.high is None or not 0 < q.bound("low") <= q.si <= q.bound("high"):
            raise CatalogError(f"{p}: {k}: a prior needs 0 < low <= value <= high")
        out[k] = q
    return out


def calibration_path(base_dir: str | Path | None = None) -> Path:
    base = Path(base_dir) if base_dir is not None else default_catalog_dir()
    return base / "calibration" / "gpu_efficiency.yaml"


def read_gpu_efficiency(path: str | Path | None = None) -> GpuEfficiencyFile:
    """Read and validate the calibration file; raise :class:`CatalogError` with one line on a bad file."""
    p = Path(path) if path is not None else calibration_path()
    data = read_yaml(p)
    if not isinstance(data, dict) or "gpu_efficiency" not in data:
        raise CatalogError(f"{p}: must hold a 'gpu_efficiency' mapping")
    try:
        f = GpuEfficiencyFile.model_validate(data["gpu_efficiency"])
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        raise CatalogError(f"{p}: {loc}: {msg}") from None
    unknown = sorted(set(f.constants) - set(CALIBRATION_KEYS))
    if unknown:
        raise CatalogError(f"{p}: unknown constant(s) {', '.join(unknown)}; allowed: {', '.join(CALIBRATION_KEYS)}")
    return f


@lru_cache(maxsize=4)
def _cached(path: str) -> GpuCalibration:
    p = Path(path)
    if not p.is_file():
        return GpuCalibration()
    f = read_gpu_efficiency(p)
    return GpuCalibration(**{k: float(q.si) for k, q in f.constants.items()})


@lru_cache(maxsize=4)
def _cached_profiles(path: str) -> dict[str, dict[str, float]]:
    p = Path(path)
    if not p.is_file():
        return {}
    return {name: {k: float(q.si) for k, q in qs.items()} for name, qs in read_gpu_efficiency(p).profiles.items()}


def profile_constants(profile) -> dict[str, float]:
    """The constants of a software ``profile`` as the GPU models run them: each constant the profile states with a
    prior range (``low``/``high``) takes its fitted value from the calibration file when the file has one for the
    profile (by its ``calibrated_as`` profile, else its name; a ``name/variant`` or ``name+variant`` profile uses
    ``name``'s), every other constant its stated value."""
    fitted = _cached_profiles(str(calibration_path())).get(calibrated_name(profile), {})
    return {k: (fitted[k] if k in fitted and q.low is not None and q.high is not None else q.si)
            for k, q in profile.constants.items()}


def gpu_calibration(path: str | Path | None = None) -> GpuCalibration:
    """The calibrated constants (defaults of :class:`GpuCalibration` for any the file does not give)."""
    return _cached(str(Path(path) if path is not None else calibration_path()))
