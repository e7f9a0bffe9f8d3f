"""GPU time models: training steps (TP x PP x DP x CP with recompute and ZeRO), prefill, decode and
end-to-end serving, plus a vectorized search over parallel layouts.

Physics (all per GPU, per transformer block, then composed). Every block type of the model
(:func:`wseplan.workload.block_types`, the per-layer workload ``fit`` holds: dense or MoE MLP with its shared
experts, full, sliding or chunked attention, standard or MLA) is timed as what it is, and a stage holds the slowest run
of its layers (:mod:`.layers`); a uniform model has one type. The inference passes are in :mod:`.gpu_pass`.

* **GEMMs** run at ``peak * eff(I)`` with the shape-dependent efficiency
  ``eff(I) = e_max * I / (I + I_half)`` of the GEMM's arithmetic intensity ``I = 1/(1/M + 1/N + 1/K)``
  (M tokens, N and K the weight matrix's dimensions after the tensor-parallel split), and never faster
  than reading their operands from HBM: the compute time ``t_c`` and the memory time ``t_m`` combine on a soft
  roofline ``(t_c^p + t_m^p)^(1/p)`` (:func:`ridge_combine_s`, ``gemm_ridge_exponent``: loads overlap the math only
  partly near the ridge point). Small per-GPU matrices (high TP, small batch) are slower.
  The GEMMs of a block type, their tensor- and expert-parallel splits and the two ways an inference pass runs routed
  experts over its tensor-parallel group are in :mod:`.gpu_gemm`.
* **Attention** (flash) runs at ``attention_frac`` of peak (of the fp8 peak for 4-bit models:
  :data:`ATTENTION_PRECISION`); causal masks halve its work. A training run of a framework
  without fused attention (``attention_kernel="materialized"``: the 2021-2022 Megatron-LM runs) computes the whole
  score matrix and passes it through HBM (:func:`materialized_scores_s`, the bytes of Korthikanti et al. 2022).
* **Element-wise operators** move ``elementwise_vectors_per_token`` d-wide 16-bit vectors per token per block.
* **Tensor parallelism**: two all-reduces (or reduce-scatter + all-gather with sequence parallelism) per block
  per pass on the scale-up network (alpha-beta ring, :mod:`wseplan.analytic.collectives`; a full mesh gives a group
  of g GPUs g - 1 links, :class:`.gpu_links.Links`).
* **Pipeline**: ``t = t_mb (m + (p-1)/v)`` — the bubble ``(p-1)/(v m)`` of Narayanan et al. (2021), eq. 2
  (``v = 1``: the plain 1F1B bubble ``(p-1)/(m+p-1)`` of the whole pipeline); point-to-point activations.
* **Data parallelism**: gradient all-reduce (ZeRO-1/2: reduce-scatter + all-gather) over InfiniBand,
  hidden behind ``dp_overlap_frac`` of the compute; ZeRO-3/FSDP instead moves 3x the parameters per micro-batch in
  flat rings (two all-gathers, one reduce-scatter), hidden behind ``zero3_overlap_frac`` of the compute.
* **Recompute**: ``full`` adds a forward pass, ``selective`` the attention core's forward.
* **Context parallelism**: ring attention passes K/V between ``cp`` ranks, overlapped with attention.
* **Decode** reads the weights and the KV cache every step (HBM-bound at small batch), plus collective
  latency and a fixed per-block overhead; **prefill** is GEMM-bound. A routed-expert layer reads the
  ``E (1 - (1 - k/E)^tokens)`` experts some token picked, plus its shared experts; a windowed layer reads and attends
  over ``min(context, window)`` tokens; MLA reads its latent (``kv_lora_rank + qk_rope_head_dim`` per token and
  layer) whole on every tensor-parallel rank.

All efficiency constants live in ``catalogs/calibration/gpu_efficiency.yaml`` (see
:mod:`wseplan.calibration_data`), fitted on the public validation rows.

References
----------
Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC21
(eq. 2 interleaved bubble, eq. 3 FLOP count). Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models", MLSys 2023 (sequence parallelism, selective recompute). Rajbhandari et al., "ZeRO:
Memory Optimizations Toward Training Trillion Parameter Models", SC20 (communication volume per stage).
Williams, Waterman and Patterson, "Roofline", CACM 52(4), 2009. Pope et al., "Efficiently Scaling Transformer
Inference", MLSys 2023 (decode memory-bound, KV-cache reads).
"""
from __future__ import annotations

import math

import numpy as np

from ..calibration_data import GpuCalibration, gpu_calibration
from ..catalog.load import load_catalog
from ..errors import InputError
from ..workload import (BYTES_PER_ELEMENT, activation_bytes_per_element, block_params, block_types, embedding_params,
                        head_params)
from . import elementwise as X
from .collectives import hierarchical_allreduce_time_s, reduce_scatter_time_s, send_recv_time_s
from .gpu_links import Links as _Links
from .gpu_gemm import block_gemms_s, gemm_efficiency_frac, gemm_max, ridge_combine_s, roofline_time_s  # noqa: F401
from .moe_train import expert_dispatch_s, expert_grad_allreduce_s, stage_routed_params
from .layers import attended_per_token, cached_tokens, slowest_run

RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2, "partial": 3}


# ---------------------------------------------------------------------------------------------
# Building blocks (pure numpy)
# ---------------------------------------------------------------------------------------------
def pipeline_bubble_frac(*, num_stages, num_microbatches, virtual_stages=1):
    """Share of pipeline time that is idle [fraction]: ``(p-1)/(v m + p - 1)``.

    With ``v = 1`` this is the 1F1B bubble ``(p-1)/(m+p-1)``; Narayanan et al. (2021) write the interleaved
    schedule's overhead relative to the ideal time as ``(p-1)/(v m)``, i.e. the same fraction of the total.
    """
    p = np.asarray(num_stages, dtype=float)
    m = np.asarray(num_microbatches, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    return (p - 1.0) / (v * m + p - 1.0)


#: the math precision of the attention kernels for a model precision: 4-bit models run their attention in fp8 at the
#: lowest, as the engines of the validated measurements (2023-2025) do: FlashAttention-3 and TensorRT-LLM's FMHA stop at
#: fp8, and NVFP4 inference checkpoints state an fp8 KV cache (NVIDIA has since shown FP4 attention; NVFP4 training
#: keeps its attention in 16 bits, so for 4-bit training this floor is optimistic). In inference it applies with an
#: 8-bit KV cache (``--kv-precision fp8``); the default cache beside 4- and 8-bit weights is 16-bit, and so is their
#: attention (:func:`.gpu_pass.attention_format`)
ATTENTION_PRECISION = {"fp4": "fp8", "int4": "fp8"}


#: the precision of the attention, the LM head and the high-precision blocks of a 4-bit training run: NVIDIA's NVFP4
#: pretraining recipe keeps the attention (softmax and its batched GEMMs), the output head and a share of the linear
#: layers (``defaults.fp4_training_high_precision_frac``, mostly the last blocks) in BF16 (NVIDIA, "Pretraining Large
#: Language Models with NVFP4", arXiv:2509.25149, 2025, sec. 4). The blocks are assumed spread over the pipeline
#: stages (the recipe does not say how a pipeline places them).
FP4_TRAINING_HIGH_PRECISION = "bf16"


def training_calibration(cal: GpuCalibration) -> GpuCalibration:
    """``cal`` for training GEMMs: an 8-bit or 4-bit GEMM of a training step also scales and casts its 16-bit inputs
    (amax, cast, transposed copy: ``lowp_training_overhead_frac`` of its time), which inference's pre-quantized
    weights skip, so its ceiling is the inference ceiling over ``1 + lowp_training_overhead_frac``."""
    q = cal.lowp_training_overhead_frac
    if q <= 0:
        return cal
    return cal.replace(gemm_max_frac_8bit=cal.gemm_max_frac_8bit / (1.0 + q),
                       gemm_max_frac_4bit=cal.gemm_max_frac_4bit / (1.0 + q), lowp_training_overhead_frac=0.0)


def training_precision_mix(precision: str, high_precision_frac: float):
    """The (share of the blocks, GEMM precision) pairs a ``precision`` training run computes its linear layers in, and
    the precision of its attention and LM head: one pair and the model's precision, except for 4-bit training, which
    keeps ``high_precision_frac`` of the blocks in :data:`FP4_TRAINING_HIGH_PRECISION`."""
    if BYTES_PER_ELEMENT[precision] <= 0.5:
        h = float(high_precision_frac)
        return ((1.0 - h, precision), (h, FP4_TRAINING_HIGH_PRECISION)), FP4_TRAINING_HIGH_PRECISION
    return ((1.0, precision),), precision


def attention_peak_flop_per_s(gpu, precision: str) -> float:
    """The dense peak [FLOP/s] the attention kernels of a ``precision`` model run against (:data:`ATTENTION_PRECISION`),
    scaled by the GPU's GEMM library as the GEMMs are."""
    p = ATTENTION_PRECISION.get(precision, precision)
    return gpu.peak_flop_per_s(p) * gpu.gemm_library_rel(p)


def _only_block(m):
    """The one block type of a model whose layers are all alike; a model whose layers differ is timed per type."""
    types = block_types(m)
    if len(types) != 1:
        raise ValueError(f"{m.name} has {len(types)} block types; time each (wseplan.workload.block_types)")
    return types[0]


def _attention_s(flop_per_pair, context_attended, tokens, tp, peak_flop_per_s, cal: GpuCalibration):
    """Attention (flash) of one block on one GPU at ``attention_frac`` of peak [s]: ``flop_per_pair`` (4 heads
    head_dim for standard attention, :class:`~wseplan.workload.Attention`) per query and attended key."""
    attn_flop = flop_per_pair * X.asfloat(context_attended) * tokens / tp
    return attn_flop / (peak_flop_per_s * cal.attention_frac)


#: share of a block's element-wise traffic outside the tensor-parallel regions (the layer norms, dropouts and residual
#: adds on the full hidden state): 10 of the 34 bytes per token and hidden unit a layer stores (Korthikanti et al. 2022,
#: eq. 2, ``sbh (10 + 24/t + ...)`` without sequence parallelism, ``34/t`` with it)
REPLICATED_ELEMENTWISE_SHARE = 10.0 / 34.0


def _elementwise_s(m, tokens, tp, hbm_bytes_per_s, cal: GpuCalibration, sequence_parallel: bool = True):
    """Element-wise operators of one block on one GPU (HBM-bound) [s]: split over ``tp`` with sequence parallelism;
    without it the :data:`REPLICATED_ELEMENTWISE_SHARE` outside the tensor-parallel regions runs whole on every GPU."""
    total = cal.elementwise_vectors_per_token * 2.0 * m.d_model * tokens / hbm_bytes_per_s
    if sequence_parallel:
        return total / tp
    return total * ((1.0 - REPLICATED_ELEMENTWISE_SHARE) / tp + REPLICATED_ELEMENTWISE_SHARE)


def block_forward_time_s(m, *, tokens, context_attended, tp, peak_flop_per_s, hbm_bytes_per_s, precision: str,
                         cal: GpuCalibration, sequence_parallel: bool = True, attention_peak_flop_per_s=None, block=None,
                         ep=None):
    """Forward time of one block's compute on one GPU [s] and its parts (gemm, attention, elementwise).

    ``tokens`` are the tokens the GPU processes in this pass (M of every GEMM); ``context_attended`` is the
    mean number of keys each query attends to. Weights are read once per pass (roofline against HBM).
    ``block``: the block type (:func:`~wseplan.workload.block_types`; default the model's only one); ``ep``: training's
    expert parallelism, whole routed experts split over that many GPUs (None: the experts split over TP like the other
    weights, as inference engines run them). Arrays broadcast (tokens, tp, ep).
    """
    block = _only_block(m) if block is None else block
    tokens = X.asfloat(tokens)
    tp = X.asfloat(tp)
    gemm, gemm_mem = block_gemms_s(block, tokens, tp, peak_flop_per_s, hbm_bytes_per_s, precision, cal, ep=ep,
                                   expert_layout="tp" if ep is None else "train")
    attn_peak = peak_flop_per_s if attention_peak_flop_per_s is None else attention_peak_flop_per_s
    attn = _attention_s(block.attention.flop_per_pair, context_attended, tokens, tp, attn_peak, cal)
    elem = _elementwise_s(m, tokens, tp, hbm_bytes_per_s, cal, sequence_parallel)
    return gemm + attn + elem, {"gemm": gemm, "gemm_memory_bound": gemm_mem, "attention": attn, "elementwise": elem}


def _head_forward_time_s(m, *, tokens, tp, peak_flop_per_s, hbm_bytes_per_s, precision, cal, weight_bytes=None):
    tokens = X.asfloat(tokens)
    n_ = m.vocab_size / X.asfloat(tp)
    eff = gemm_efficiency_frac(m=tokens, n=n_, k=m.d_model, max_frac=gemm_max(cal, precision),
                               half_intensity=cal.gemm_half_intensity)
    byt = n_ * m.d_model * (max(BYTES_PER_ELEMENT[precision], 0.5) if weight_bytes is None else weight_bytes)
    return roofline_time_s(flop=2.0 * tokens * n_ * m.d_model, bytes_moved=byt, peak_flop_per_s=peak_flop_per_s,
                           efficiency_frac=eff, bandwidth_bytes_per_s=hbm_bytes_per_s, exponent=cal.gemm_ridge_exponent)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------
def train_step(m, gpu, *, precision: str, seq_len, global_batch, tp, pp, dp, cp=1, vpp=1, micro_batch=1,
               recompute="full", zero_stage=1, sequence_parallel=True, trainable="full", single_layer=False,
               attention_kernel="flash", tp_comm_overlap=True, fp4_high_precision_frac=None, recompute_frac=0.0,
               frozen_weight_frac=1.0, dp_comm_overlap=True, grad_dtype_bytes=4.0, ep=1, expert_dispatch="flat",
               expert_comm_overlap=False, cal: GpuCalibration):
    """Step time and its parts for arrays of layouts (tp, pp, dp, cp, vpp, micro_batch, recompute code).

    Returns a dict of numpy arrays [s]: ``step_s``, ``compute_s``, ``tp_comm_s``, ``expert_a2a_s`` (the routed
    layers' all-to-alls, inside ``compute_s``), ``bubble_s``, ``p2p_s``, ``dp_exposed_s``, ``dp_comm_s``,
    ``optimizer_s``, ``layer_s`` (one block's fwd+bwd of one micro-batch, including its TP communication),
    ``num_microbatches``.
    ``recompute`` may be a string or an array of codes (0 none, 1 selective, 2 full, 3 partial: the
    ``recompute_frac`` of the stage's layers recomputed whole, the rest not at all). ``attention_kernel``:
    ``"flash"`` (fused, causal blocks skipped: FlashAttention, 2022 on) or ``"materialized"`` (the frameworks before
    it: the full s x s score matrix computed and passed through HBM, :func:`materialized_scores_s`).
    ``tp_comm_overlap``: the framework overlaps the tensor-parallel collectives with the adjacent GEMMs
    (userbuffers, 2023 on), hiding ``cal.tp_overlap_frac`` of them; False (the frameworks before it) exposes them all;
    ``dp_comm_overlap`` False: the gradient reduction of ZeRO-0/1/2 after the backward (Megatron-LM's local DDP).
    ``fp4_high_precision_frac``: the share of the blocks a 4-bit run keeps in BF16 (:func:`training_precision_mix`;
    default: the bundled catalog's ``defaults.fp4_training_high_precision_frac``). ``frozen_weight_frac``: LoRA's
    frozen weights' bytes over their 16-bit copy (0.5 where an fp8 run stores them in fp8), as ZeRO-3 gathers them.
    ``grad_dtype_bytes``: bytes of a gradient as the data-parallel ranks reduce it (4: fp32, as Megatron-LM and Llama
    3's FSDP reduce bf16 training's gradients; 2 for fp16 parameters); parameters are gathered in 16 bits.
    ``ep``: expert parallelism of an MoE model's routed experts, whole, over that many of the tp x dp x cp GPUs of a
    pipeline stage (its token
    dispatch and all-to-all: :mod:`.moe_train`); 1 for a dense model. ``expert_dispatch``: how its all-to-all crosses
    scale-up domains (:data:`.moe_train.DISPATCHES`); ``expert_comm_overlap``: one micro-batch's all-to-alls run under
    another's compute where the schedule allows it (True: a single stage or an interleaved pipeline, Megatron-Core;
    ``"dualpipe"``: any pipeline, DeepSeek's bidirectional DualPipe schedule).
    """
    if attention_kernel not in ATTENTION_KERNELS:
        raise ValueError(f"attention_kernel must be one of {ATTENTION_KERNELS}, not {attention_kernel!r}")
    tp, pp, dp, cp, vpp, mb, ep = (X.asfloat(v) for v in (tp, pp, dp, cp, vpp, micro_batch, ep))
    rc = X.asfloat(RECOMPUTE_CODES[recompute] if isinstance(recompute, str) else recompute)
    # the share of layers whose forward runs again in the backward (full: all; partial: recompute_frac)
    full_frac = X.where(rc == 2, 1.0, X.where(rc == 3, X.asfloat(recompute_frac), 0.0))
    cal = training_calibration(cal)
    if fp4_high_precision_frac is None:  # the bundled catalog's recipe share (callers with a catalog pass theirs)
        fp4_high_precision_frac = load_catalog().defaults.fp4_training_high_precision_frac.si
    mix, hp = training_precision_mix(precision, fp4_high_precision_frac)
    links = _Links(gpu, cal)
    hbm = links.hbm_bw
    L = m.num_layers
    ab = activation_bytes_per_element(precision)
    s = X.asfloat(seq_len)
    tokens = mb * s / cp  # tokens per micro-batch per GPU's sequence shard
    # causal: flash skips the masked half; a materialized score matrix is computed whole and masked
    attended = (s + 1.0) / 2.0 if attention_kernel == "flash" else s
    attn_peak = attention_peak_flop_per_s(gpu, hp)
    types = block_types(m)
    per_type = [_train_layer_s(m, b, gpu, mix=mix, tokens=tokens, s=s, attended=attended, tp=tp, cp=cp, rc=rc,
                               full_frac=full_frac, hbm=hbm,
                               ab=ab, links=links, attn_peak=attn_peak, sequence_parallel=sequence_parallel,
                               trainable=trainable, attention_kernel=attention_kernel, tp_comm_overlap=tp_comm_overlap,
                               cal=cal, ep=ep, dispatch=expert_dispatch,
                               overlap=X.where(expert_comm_overlap == "dualpipe", True,
                                               ((pp <= 1.0) | (vpp > 1.0)) & bool(expert_comm_overlap))) for b in types]
    if len(types) == 1:
        t_layer, t_layer_compute, t_tp, t_a2a = per_type[0]
        layers_stage = X.ceil(L / pp)
    else:  # the slowest run of ceil(L / pp) consecutive layers (every layer with single_layer), as its mean layer
        counts = [float(b.count) for b in types] if single_layer else \
            slowest_run(types, L, pp, [t[0] for t in per_type])
        layers_stage = _layer_sum(counts, [1.0] * len(counts))
        t_layer, t_layer_compute, t_tp, t_a2a = (_layer_sum(counts, [t[i] for t in per_type]) / layers_stage
                                                 for i in range(4))
    if single_layer:
        z = X.zeros_like(t_layer)
        return {"step_s": t_layer, "layer_s": t_layer, "compute_s": t_layer_compute, "tp_comm_s": t_tp,
                "expert_a2a_s": t_a2a, "bubble_s": z, "p2p_s": z, "dp_exposed_s": z, "dp_comm_s": z, "optimizer_s": z,
                "num_microbatches": X.ones_like(t_layer)}
    t_head = _head_forward_time_s(m, tokens=tokens, tp=tp, hbm_bytes_per_s=hbm, precision=hp, cal=cal,
                                  peak_flop_per_s=gpu.peak_flop_per_s(hp) * gpu.gemm_library_rel(hp))
    t_head = t_head * (2.0 if trainable == "lora" else 3.0)  # forward, input gradients, weight gradients (not LoRA's)
    t_mb = layers_stage * t_layer + t_head  # the last stage (the slowest) also runs the LM head
    # point-to-point between stages (scatter/gather: 1/tp of the activation each), fwd + bwd, v times
    p2p_bytes = ab * tokens * m.d_model / tp
    cross = tp * cp * dp >= links.per_node  # neighbours in the pipeline sit in other nodes
    p2p_bw = X.where(cross, links.net_bw, links.nvlink_bw)
    p2p_lat = X.where(cross, links.net_lat, links.nvlink_lat)
    t_p2p = X.where(pp > 1, 2.0 * vpp * send_recv_time_s(message_bytes=p2p_bytes, link_bandwidth_bytes_per_s=p2p_bw,
                                                          link_latency_s=p2p_lat), 0.0)
    # the busiest replica holds ceil(B / dp) whole sequences in ceil(that / mb) micro-batches (the last may be short)
    nmb = X.maximum(X.ceil(X.ceil(X.asfloat(global_batch) / dp - 1e-9) / mb - 1e-9), 1.0)
    t_unit = t_mb + t_p2p
    # the warm-up and cool-down run p - 1 model chunks of the slowest stage: ceil(L / (p v)) layers each, so the
    # interleaved bubble (p - 1) / v of a stage's micro-batch grows where v does not divide a stage's layers (126 layers
    # on pp 4 x vpp 20: chunks of 2 layers, not 1.6)
    chunk = X.where(vpp > 1, X.ceil(L / (pp * vpp) - 1e-9) * vpp / X.maximum(X.ceil(L / pp - 1e-9), 1.0), 1.0)
    bubble = t_unit * (pp - 1.0) / vpp * X.maximum(chunk, 1.0)
    t_pipe = t_unit * nmb + bubble
    # data parallel over dp*cp ranks of the same (tp, pp) shard
    params_stage = _stage_params(m, pp, trainable)
    # expert parallelism: a GPU holds (and reduces the gradients of) 1 / ep of the routed experts, whole, over the
    # tp x dp x cp / ep ranks that hold the same ones (their ring moves the same bytes per GPU); ZeRO shards their
    # optimizer state over those ranks, tp x dp x cp / ep of them: per GPU as the other weights' (1 / (tp dp cp))
    routed = stage_routed_params(m, pp) if trainable != "lora" else X.zeros_like(X.asfloat(pp))
    own = params_stage - routed * (1.0 - tp / ep)
    ranks = dp * cp
    # the data-parallel neighbours of a TP group that share its scale-up domain (an NVL72 rack's 72 GPUs, a TPU pod's
    # ICI torus; a node's 8 elsewhere) reduce over NVLink; the rest cross the scale-out network. The group's ranks
    # (Megatron's order: TP innermost, then CP and DP) fill tp*cp*dp consecutive GPUs; where such blocks are smaller
    # than the domain and do not divide it, most straddle its boundaries (72-GPU racks holding 64-GPU pipeline
    # stages) and the domain counts as its nodes only; a block of whole domains or more reduces inside each of them
    span = tp * ranks
    aligned = X.where(span < links.domain, links.domain % X.maximum(span, 1.0), 0.0) == 0
    ranks_node = X.maximum(X.floor(X.where(aligned, links.domain, links.per_node) / tp), 1.0)
    ranks_node = X.minimum(ranks_node, ranks)
    ar = hierarchical_allreduce_time_s(message_bytes=(own - routed * tp / ep) / tp * grad_dtype_bytes, num_ranks=ranks,
                                       ranks_per_node=ranks_node, intra_bandwidth_bytes_per_s=links.group_bw(ranks_node),
                                       intra_latency_s=links.nvlink_lat,
                                       inter_bandwidth_bytes_per_s=links.net_bw, inter_latency_s=links.net_lat)
    ar = ar + expert_grad_allreduce_s(routed / ep * grad_dtype_bytes, tp=tp, dp=dp, cp=cp, ep=ep, links=links)
    zs = X.asfloat(zero_stage)
    compute_total = nmb * layers_stage * t_layer_compute
    # ZeRO-3 / fully sharded data parallel: per micro-batch, an all-gather of the 16-bit parameters for the forward,
    # another for the backward and a reduce-scatter of the gradients (3x the parameters per GPU: Rajbhandari et al.
    # 2020, sec. 7.2.2). They are flat rings over all the ranks, so a group that leaves the scale-up domain moves each
    # GPU's whole share through its own network link (Wang et al. 2023, ZeRO++, sec. 3: 3M of cross-node traffic per
    # GPU and iteration). Prefetching issues a layer's gathers during its neighbour's compute (Zhao et al. 2023, FSDP,
    # sec. 3.3): ``zero3_overlap_frac`` of the compute can hide them.
    spans = tp * ranks > links.domain
    ring_bw, ring_lat = X.where(spans, links.net_bw, links.group_bw(ranks)), X.where(spans, links.net_lat, links.nvlink_lat)
    ring_kw = dict(num_ranks=ranks, link_bandwidth_bytes_per_s=ring_bw, link_latency_s=ring_lat)
    # the routed experts' shards ring over the tp x dp x cp / ep GPUs that hold the same experts (none to exchange
    # with at one such GPU), the other weights' over the dp x cp ranks
    edp = X.maximum(tp * ranks / ep, 1.0)
    exp_kw = dict(num_ranks=edp, link_bandwidth_bytes_per_s=X.where(spans, links.net_bw, links.group_bw(edp)),
                  link_latency_s=ring_lat)
    dense_p, exp_p = (params_stage - routed) / tp, routed / ep

    def exp_rs(nbytes):  # a dense model has no expert ring (not even its latency)
        return X.where(exp_p > 0.0, reduce_scatter_time_s(message_bytes=nbytes, **exp_kw), 0.0)

    ring = reduce_scatter_time_s(message_bytes=dense_p * grad_dtype_bytes, **ring_kw) + exp_rs(exp_p * grad_dtype_bytes)
    # an all-gather moves what a reduce-scatter does
    gather = reduce_scatter_time_s(message_bytes=dense_p * 2.0, **ring_kw) + exp_rs(exp_p * 2.0)
    t_z3 = nmb * (2.0 * gather + ring)
    if trainable == "lora":  # frozen weights sharded by ZeRO-3 are still gathered for the forward and the backward
        frozen_exp = stage_routed_params(m, pp)  # (as stored; no gradients to scatter)
        frozen = (_stage_params(m, pp, "full") - frozen_exp) / tp * 2.0 * frozen_weight_frac
        t_z3 = 2.0 * nmb * (reduce_scatter_time_s(message_bytes=frozen, **ring_kw) + X.where(
            frozen_exp > 0.0, reduce_scatter_time_s(message_bytes=frozen_exp / ep * 2.0 * frozen_weight_frac, **exp_kw), 0.0))
    # ZeRO-2 (gradients sharded): every micro-batch reduce-scatters its own gradients under its backward, the updated
    # shard is all-gathered once. ZeRO-0/1 (and DDP) accumulate locally and reduce once, under the last micro-batch's
    # backward, the all-gather under the next step's first forward (Megatron-core syncs gradients only in the last
    # micro-batch; NeMo, Communication Overlap: layer-sized chunks, one exposed): one micro-batch's compute is the window
    t_dp = X.where(zs >= 3, t_z3, X.where(zs >= 2, nmb * ring + gather, ar))
    window = X.where(zs >= 2, compute_total, compute_total / nmb)
    hide = X.where(zs >= 3, cal.zero3_overlap_frac, cal.dp_overlap_frac if dp_comm_overlap else 0.0) * window
    exposed = X.maximum(t_dp - hide, 0.0)
    # optimizer: read/write weights, grads and Adam state (~36 B/param), sharded by ZeRO>=1
    opt_params = X.where(zs >= 1, params_stage / tp / ranks, own / tp)
    t_opt = opt_params * 36.0 / hbm
    step = t_pipe + exposed + t_opt + cal.train_step_overhead_s
    return {"step_s": step, "layer_s": t_layer, "compute_s": nmb * t_mb, "tp_comm_s": nmb * layers_stage * t_tp,
            "expert_a2a_s": nmb * layers_stage * t_a2a, "bubble_s": bubble, "p2p_s": nmb * t_p2p, "dp_exposed_s": exposed, "dp_comm_s": t_dp,
            "optimizer_s": t_opt, "num_microbatches": nmb}


def _layer_sum(counts, values):
    """``sum(counts[j] * values[j])`` in order [s] (one type: ``counts[0] * values[0]``)."""
    acc = counts[0] * values[0]
    for c, v in zip(counts[1:], values[1:]):
        acc = acc + c * v
    return acc


def _train_layer_s(m, block, gpu, *, mix, tokens, s, attended, tp, cp, rc, full_frac, hbm, ab, links, attn_peak,
                   sequence_parallel, trainable, attention_kernel, tp_comm_overlap, cal, ep=1.0, dispatch="flat",
                   overlap=False):
    """One layer of ``block``'s type in a training micro-batch [s]: (fwd + bwd with its TP and CP communication,
    its compute alone, its TP communication, its expert all-to-all), the mean over the stage's layers where ``full_frac`` of them recompute
    their forward. ``attended``: the keys a query of a full-attention layer attends to."""
    att = block.attention
    if att.window is not None and attention_kernel == "flash":  # a window caps the keys (the workload's causal sums)
        attended = attended_per_token(att, 0.0, s, decode=False)
    t_fwd, parts = 0.0, {}
    for share, p in mix:  # the blocks of each GEMM precision, averaged over the stage
        t_p, parts_p = block_forward_time_s(m, tokens=tokens, context_attended=attended, tp=tp,
                                            peak_flop_per_s=gpu.peak_flop_per_s(p) * gpu.gemm_library_rel(p),
                                            hbm_bytes_per_s=hbm, precision=p, cal=cal,
                                            sequence_parallel=sequence_parallel, attention_peak_flop_per_s=attn_peak,
                                            block=block, ep=ep)
        t_fwd = t_fwd + share * t_p
        parts = {k: parts.get(k, 0.0) + share * v for k, v in parts_p.items()}
    t_recompute = full_frac * t_fwd + X.where(rc == 1, parts["attention"], 0.0)
    # without sequence parallelism the replicated norms and dropouts slow the forward passes; their backward is
    # counted split (Korthikanti et al. 2022, Table 4: sequence parallelism saves 0.5 ms of a 7.7 ms forward, 0.1 ms
    # of an 11.9 ms backward)
    t_bwd = t_fwd if sequence_parallel else t_fwd - parts["elementwise"] + _elementwise_s(m, tokens, tp, hbm, cal)
    # backward: activation gradients (1x the forward) + weight gradients (1x), the fused attention's backward 2.5x its
    # forward (FlashAttention-2, Dao 2023, sec. 3.1: 5 matmuls against the forward's 2)
    t_layer_compute = t_fwd + t_bwd * 2.0 + t_recompute + parts["attention"] * 0.5
    if trainable == "lora":
        # LoRA freezes the base weights (Hu et al. 2021): the backward skips only their weight-gradient GEMMs, one
        # GEMM pass; the attention (no weights) and the element-wise operators back-propagate as in full training
        t_layer_compute = t_layer_compute - parts["gemm"]
    if attention_kernel == "materialized":
        t_layer_compute = t_layer_compute + materialized_scores_s(m, tokens=tokens, seq_len=s, tp=tp,
                                                                  recompute=rc, hbm_bytes_per_s=hbm,
                                                                  recomputed_frac=X.where(rc == 1, 1.0, full_frac))
    # tensor parallel: 2 collectives per block per pass (fwd, bwd, recomputed fwd)
    msg = ab * tokens * m.d_model
    t_ar = links.tp_allreduce(msg, tp)
    n_tp = 4.0 + 2.0 * full_frac
    t_tp = n_tp * t_ar * (1.0 - (cal.tp_overlap_frac if tp_comm_overlap else 0.0))
    # context parallel: ring-pass K/V, hidden behind attention
    cp_bytes = att.kv_elems_per_token / X.minimum(tp, att.kv_shards) * tokens * ab * (cp - 1.0)
    cp_bw = X.where(tp * cp <= links.domain, links.nvlink_bw, links.net_bw)
    t_cp = 3.0 * X.maximum(cp_bytes / cp_bw - parts["attention"], 0.0)
    # a routed-expert layer's token dispatch, once per pass (forward, backward, recomputed forward): exposed
    # (overlapped: under another micro-batch's compute of the layer, so the longer of the two)
    permute, a2a = expert_dispatch_s(block, m.d_model, tokens=tokens, tp=tp, ep=ep, ab=ab, links=links,
                                     dispatch=dispatch)
    passes = 2.0 + full_frac
    t_layer_compute = t_layer_compute + passes * permute
    t_a2a = X.where(overlap, X.maximum(passes * a2a - t_layer_compute, 0.0), passes * a2a)
    t_layer = t_layer_compute + t_tp + t_cp + t_a2a
    return t_layer, t_layer_compute, t_tp, t_a2a


#: attention implementations of a training step (``train_step(attention_kernel=...)``)
ATTENTION_KERNELS = ("flash", "materialized")
#: HBM bytes per attention-score element and layer of an unfused attention (Korthikanti et al. 2022, section 4.1:
#: the forward stores 5 bytes per score element, the 16-bit softmax input and output and a 1-byte dropout mask, plus
#: the 16-bit dropout output; each written once and read once): forward 10 B; backward 15 B (each stored tensor read,
#: the gradients of the dropout output, the softmax output and the scores written and read once)
SCORE_BYTES_FWD = 10.0
SCORE_BYTES_BWD = 15.0


def materialized_scores_s(m, *, tokens, seq_len, tp, recompute, hbm_bytes_per_s, recomputed_frac=None):
    """HBM time [s] of one block's attention-score matrices over a training micro-batch (forward, backward and a
    recomputed forward when ``recompute`` >= 1, or in the share ``recomputed_frac`` of the layers when given), when
    the attention is not fused: each of ``tokens`` queries scores all ``seq_len`` keys in each of the GPU's
    ``num_heads / tp`` heads, and every score element crosses HBM :data:`SCORE_BYTES_FWD` + :data:`SCORE_BYTES_BWD`
    bytes (plus a forward's again when recomputed)."""
    heads = m.num_heads / X.minimum(X.asfloat(tp), float(m.num_heads))
    elems = heads * X.asfloat(tokens) * X.asfloat(seq_len)
    again = X.where(X.asfloat(recompute) >= 1, 1.0, 0.0) if recomputed_frac is None else X.asfloat(recomputed_frac)
    per_elem = SCORE_BYTES_FWD + SCORE_BYTES_BWD + again * SCORE_BYTES_FWD
    return elems * per_elem / hbm_bytes_per_s


def _stage_params(m, pp, trainable="full"):
    blk = block_params(m)[0]
    if trainable == "lora":
        return X.zeros_like(X.asfloat(pp))
    pp = X.asfloat(pp)
    edge = max(embedding_params(m), head_params(m))
    return X.ceil(m.num_layers / pp) * blk + X.where(pp > 1, edge, embedding_params(m) + head_params(m))


def model_flop_per_token(m, *, seq_len, recompute_counted=False, trainable="full") -> float:
    """Model FLOPs per trained token [FLOP]: ``3 x forward`` (``4 x`` with a recomputed forward).

    Forward = 2 FLOP per active matmul weight (blocks and LM head) + ``4 h s`` attention per layer,
    counted without the causal mask (Narayanan et al. 2021, eq. 3; Chowdhery et al. 2022, App. B). Per block type
    (:func:`~wseplan.workload.block_types`): its own active weights (a dense layer's MLP, an MoE layer's top-k and
    shared experts) and its attention's FLOPs per pair over ``min(s, window)`` keys (MLA: the non-absorbed form of
    DeepSeek-V3's FLOP counts, ``2 heads (qk_head_dim + v_head_dim)``). ``trainable="lora"``: the frozen weights
    get no weight gradients, so their matmuls count twice the forward (forward and input gradients), the attention
    three times.
    """
    d = m.d_model
    norms = 2 * (2 * d if m.norm == "layernorm" else d)
    types = block_types(m)
    if len(types) == 1 and types[0].attention.plain:
        blk_active = block_params(m)[1] - norms
        fwd = m.num_layers * (2.0 * blk_active + 4.0 * m.num_heads * m.head_dim_ * seq_len) + 2.0 * m.vocab_size * d
        weights = m.num_layers * 2.0 * blk_active + 2.0 * m.vocab_size * d
    else:
        fwd = weights = 2.0 * m.vocab_size * d
        for b in types:
            att = b.attention
            fwd = fwd + b.count * (2.0 * (b.active_params - norms) + att.flop_per_pair * cached_tokens(att, seq_len))
            weights = weights + b.count * 2.0 * (b.active_params - norms)
    total = fwd * (4.0 if recompute_counted else 3.0)
    return total - weights if trainable == "lora" else total  # no weight-gradient pass of the frozen weights


# ---------------------------------------------------------------------------------------------
# Inference
# ---------------------------------------------------------------------------------------------
def gemv_time_s(gpu, *, m, k, n, tp, precision: str, cal: GpuCalibration):
    """Latency of an ``[m, k] x [k, n]`` GEMV split over ``tp`` GPUs by rows of the weight [s].

    Each GPU streams its ``k n / tp`` weights from HBM (roofline against its compute), then the partial
    outputs are summed with an all-reduce of ``m n`` elements (NVLink inside the node, hierarchical beyond),
    plus one kernel's fixed overhead.
    """
    tp = np.asarray(tp, dtype=float)
    links = _Links(gpu, cal)
    wb = max(BYTES_PER_ELEMENT[precision], 0.5)
    ab = activation_bytes_per_element(precision)
    flop = 2.0 * m * k * n / tp
    eff = gemm_efficiency_frac(m=m, n=n, k=k / tp, max_frac=gemm_max(cal, precision), half_intensity=cal.gemm_half_intensity)
    t = roofline_time_s(flop=flop, bytes_moved=k * n / tp * wb + ab * m * (k / tp + n), peak_flop_per_s=gpu.peak_flop_per_s(precision) * gpu.gemm_library_rel(precision),
                        efficiency_frac=eff, bandwidth_bytes_per_s=links.hbm_bw, exponent=cal.gemm_ridge_exponent)
    return t + links.tp_allreduce(ab * m * n, tp) + cal.layer_overhead_s
