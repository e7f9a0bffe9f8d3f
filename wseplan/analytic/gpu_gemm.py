"""GEMM time of the GPU models: the shape-dependent efficiency, the soft roofline, and a block type's GEMMs on one GPU
with their tensor- and expert-parallel splits (:func:`block_gemms_s`), shared by the training steps
(:mod:`.gpu_time`) and the inference passes (:mod:`.gpu_pass`).

Routed experts in inference are run one of two ways over a tensor-parallel group of ``g`` GPUs, as production engines
offer (TensorRT-LLM ``--ep``/``moe_expert_parallel_size``, vLLM ``--enable-expert-parallel``, SGLang ``--ep-size``):

* **split like the other weights** (``"tp"``): every GPU holds ``1 / g`` of every expert and runs all the routed rows
  on it; balanced at any batch, but each GPU reads every routed row's whole input.
* **whole experts over the group** (``"ep"``): a GPU holds ``E / g`` whole experts and runs the rows routed to them
  (the group's tokens are on every GPU after the attention's all-reduce, so no all-to-all: the outputs are summed by
  the same all-reduce as a split MLP's). Fewer activation bytes and taller GEMMs, but the slowest GPU decides: the
  experts a pass touches and the rows routed to a GPU vary from GPU to GPU (:func:`.moe_train.routed_rows_slowest`).

An engine fixes one layout when it starts: the GPU family evaluates every inference configuration under each and keeps
the one whose step (the request, the decode step, the prompt) is shorter, for all its passes
(:meth:`wseplan.devices.gpu.GpuFamily.engine_variants`): the expert-parallel layout wins at large batches, the split one
at small batches, where the slowest GPU of an expert-parallel group holds several of the few experts a pass touches.
``"best"`` (the faster for each pass alone) is for a pass asked outside such an evaluation.
"""
from __future__ import annotations

from ..calibration_data import GpuCalibration
from ..workload import BYTES_PER_ELEMENT, activation_bytes_per_element
from . import elementwise as X
from .attention_dp import ATTENTION_GEMMS
from .moe_train import routed_rows, routed_rows_slowest

#: how an inference pass runs its routed experts over a tensor-parallel group (module docstring)
EXPERT_LAYOUTS = ("tp", "ep", "best")


def gemm_efficiency_frac(*, m, n, k, max_frac, half_intensity):
    """Achievable fraction of peak of an ``M x K`` by ``K x N`` GEMM [fraction].

    Notes
    -----
    ``eff = max_frac * I / (I + half_intensity)`` with ``I = 1 / (1/M + 1/N + 1/K)``, the GEMM's arithmetic
    intensity up to a constant (``2MNK`` FLOP over ``MK + KN + MN`` elements). It saturates for large
    matrices and falls for thin ones (small batch, high tensor parallelism): wave quantization and tile
    under-utilisation, the effect documented for cuBLAS in NVIDIA's "Matrix Multiplication Background
    User's Guide" (2023).
    """
    m, n, k = X.maximum(X.asfloat(m), 1e-9), X.maximum(X.asfloat(n), 1e-9), X.maximum(X.asfloat(k), 1e-9)
    inten = 1.0 / (1.0 / m + 1.0 / n + 1.0 / k)
    return X.clip(max_frac * inten / (inten + half_intensity), 0.0, 1.0)


def ridge_combine_s(t_compute, t_memory, exponent):
    """A kernel's time from its compute and memory times [s]: ``(t_c^p + t_m^p)^(1/p)`` with ``p = exponent``.

    The roofline's ``max(t_c, t_m)`` is the limit ``p -> inf`` (operand loads fully overlapped with the math); ``p = 1``
    adds the two (no overlap). Near the ridge point a GEMM's loads overlap its tensor-core math only partly (a few
    prefetch stages, the first and last tiles exposed), so measured GEMM throughput turns from the memory roof to the
    compute roof gradually (Williams, Waterman and Patterson, "Roofline", CACM 2009, for the limit; NVIDIA's Matrix
    Multiplication Background guide for the gradual turn). ``exponent <= 0`` selects the plain ``max``. Far from the
    ridge the result is the larger time (a batch-1 GEMV stays at its memory time).
    """
    t_c, t_m = X.asfloat(t_compute), X.asfloat(t_memory)
    if exponent <= 0:
        return X.maximum(t_c, t_m)
    hi = X.maximum(X.maximum(t_c, t_m), 1e-300)
    return hi * X.power(X.power(t_c / hi, exponent) + X.power(t_m / hi, exponent), 1.0 / exponent)


def roofline_time_s(*, flop, bytes_moved, peak_flop_per_s, efficiency_frac, bandwidth_bytes_per_s, exponent=0.0):
    """``max(flop / (peak * eff), bytes / bandwidth)`` [s] (``exponent > 0``: the soft form of
    :func:`ridge_combine_s`)."""
    return ridge_combine_s(X.asfloat(flop) / (peak_flop_per_s * efficiency_frac),
                           X.asfloat(bytes_moved) / bandwidth_bytes_per_s, exponent)



def gemm_max(cal: GpuCalibration, precision: str) -> float:
    """The GEMM efficiency ceiling of ``precision``'s width [fraction] (4-, 8- or 16-bit calibration field)."""
    b = BYTES_PER_ELEMENT[precision]
    if b <= 0.5:
        return cal.gemm_max_frac_4bit
    if b <= 1.0:
        return cal.gemm_max_frac_8bit
    return cal.gemm_max_frac_16bit


def block_gemm_shapes(block, tp):
    """Per-GPU (N, K, weight copies, copies a token uses) of a block type's GEMMs (:class:`~wseplan.workload.Gemm`:
    QKV or MLA's projections, attention output, the MLP or the routed experts and the shared experts) after the TP
    split: column-parallel matrices split N, row-parallel ones K, MLA's latent down-projections are replicated."""
    tp = X.asfloat(tp)
    out = []
    for g in block.gemms:
        split = g.tp_split
        out.append((g.n / tp if split == "n" else g.n, g.k / tp if split == "k" else g.k, g.num_experts, g.active))
    return out


def _gemm_s(M, count, experts_read, n_, k_, wb, *, ab, emax, peak_flop_per_s, hbm_bytes_per_s, cal: GpuCalibration):
    """(time, its memory-bound part) [s] of ``count`` GEMMs of ``M`` rows by ``K x N`` weights, ``experts_read``
    weight copies read from HBM (``wb`` bytes per weight) and each row's activations read in and written out once."""
    flop = 2.0 * M * n_ * k_ * count
    eff = gemm_efficiency_frac(m=M, n=n_, k=k_, max_frac=emax, half_intensity=cal.gemm_half_intensity)
    t_c = flop / (peak_flop_per_s * eff)
    t_m = (n_ * k_ * wb * experts_read + ab * M * count * (n_ + k_)) / hbm_bytes_per_s
    t_g = ridge_combine_s(t_c, t_m, cal.gemm_ridge_exponent)
    return t_g, X.where(t_m > t_c, t_g, 0.0)


def block_gemms_s(block, tokens, tp, peak_flop_per_s, hbm_bytes_per_s, precision: str, cal: GpuCalibration,
                  weight_bytes=None, ep=1.0, expert_layout: str = "tp", attention=None):
    """The GEMMs of one block type (:class:`~wseplan.workload.BlockType`) on one GPU [s]: (time, its memory-bound
    part), by the pass's tokens and TP degree (arrays broadcast); ``weight_bytes``: (routed, other) bytes per weight
    (:func:`~wseplan.workload.weight_bytes_split`).

    ``expert_layout``: how the routed experts run, :data:`EXPERT_LAYOUTS` for inference (module docstring), or
    ``"train"``: whole experts split over ``ep`` GPUs, each GPU running its ``1 / tp`` of the tokens routed to them from
    the ``ep`` GPUs of its expert group (expert tensor parallelism 1, :mod:`.moe_train`).

    ``attention``: ``(tokens, tp)`` of the block's attention GEMMs where they differ from the MLP's (data-parallel
    attention, :mod:`.attention_dp`: the busiest rank's tokens on the whole weights), else None."""
    wb_routed, wb_other = weight_bytes or (max(BYTES_PER_ELEMENT[precision], 0.5),) * 2
    kw = dict(ab=activation_bytes_per_element(precision), emax=gemm_max(cal, precision), peak_flop_per_s=peak_flop_per_s,
              hbm_bytes_per_s=hbm_bytes_per_s, cal=cal)
    gemm = gemm_mem = 0.0
    split = whole = (0.0, 0.0)  # the routed GEMMs split over TP, and run as whole experts over the TP group
    att = None if attention is None else block_gemm_shapes(block, attention[1])
    for i, (g, (n_, k_, E, k)) in enumerate(zip(block.gemms, block_gemm_shapes(block, tp))):
        if att is not None and g.name in ATTENTION_GEMMS:
            t, tm = _gemm_s(attention[0], 1.0, 1.0, att[i][0], att[i][1], wb_other, **kw)
            gemm, gemm_mem = gemm + t, gemm_mem + tm
            continue
        if E == 1:
            t, tm = _gemm_s(tokens, 1.0, 1.0, n_, k_, wb_other, **kw)
            gemm, gemm_mem = gemm + t, gemm_mem + tm
            continue
        if expert_layout == "train":
            experts, M = routed_rows(tokens / X.asfloat(tp), E, k, ep)
            t, tm = _gemm_s(M, experts, experts, float(g.n), float(g.k), wb_routed, **kw)
            gemm, gemm_mem = gemm + t, gemm_mem + tm
            continue
        # the pass runs (and reads) the experts some token picked, E (1 - (1 - k/E)^tokens) in expectation, each on
        # its share of the tokens x k routed rows (>= 1 row): the FLOPs are those of the tokens x k rows at any batch
        if expert_layout != "ep":
            experts, M = routed_rows(tokens, E, k, 1.0)
            t, tm = _gemm_s(M, experts, experts, n_, k_, wb_routed, **kw)
            split = (split[0] + t, split[1] + tm)
        if expert_layout != "tp":
            experts, rows = routed_rows_slowest(tokens, E, k, tp)
            t, tm = _gemm_s(rows / experts, experts, experts, float(g.n), float(g.k), wb_routed, **kw)
            whole = (whole[0] + t, whole[1] + tm)
    if expert_layout == "best":
        pick = whole[0] < split[0]
        return gemm + X.where(pick, whole[0], split[0]), gemm_mem + X.where(pick, whole[1], split[1])
    routed = whole if expert_layout == "ep" else split
    return gemm + routed[0], gemm_mem + routed[1]


__all__ = ["EXPERT_LAYOUTS", "block_gemm_shapes", "block_gemms_s", "gemm_efficiency_frac", "gemm_max", "ridge_combine_s",
           "roofline_time_s"]
