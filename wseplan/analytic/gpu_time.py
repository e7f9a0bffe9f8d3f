"""GPU time models: training steps (TP x PP x DP x CP with recompute and ZeRO), prefill, decode and
end-to-end serving, plus a vectorized search over parallel layouts.

Physics (all per GPU, per transformer block, then composed):

* **GEMMs** run at ``peak * eff(I)`` with the shape-dependent efficiency
  ``eff(I) = e_max * I / (I + I_half)`` of the GEMM's arithmetic intensity ``I = 1/(1/M + 1/N + 1/K)``
  (M tokens, N and K the weight matrix's dimensions after the tensor-parallel split), and never faster
  than reading their operands from HBM (roofline). Small per-GPU matrices (high TP, small batch) are slower.
* **Attention** (flash) runs at ``attention_frac`` of peak; causal masks halve its work.
* **Element-wise operators** move ``elementwise_vectors_per_token`` d-wide 16-bit vectors per token per block.
* **Tensor parallelism**: two all-reduces (or reduce-scatter + all-gather with sequence parallelism) per block
  per pass on NVLink (alpha-beta ring, :mod:`wseplan.analytic.collectives`).
* **Pipeline**: ``t = t_mb (m + (p-1)/v)`` — the bubble ``(p-1)/(v m)`` of Narayanan et al. (2021), eq. 2
  (``v = 1``: the plain 1F1B bubble ``(p-1)/(m+p-1)`` of the whole pipeline); point-to-point activations.
* **Data parallelism**: gradient all-reduce (ZeRO-1/2: reduce-scatter + all-gather) over InfiniBand,
  hidden behind ``dp_overlap_frac`` of the compute; ZeRO-3/FSDP adds parameter all-gathers per micro-batch.
* **Recompute**: ``full`` adds a forward pass, ``selective`` the attention core's forward.
* **Context parallelism**: ring attention passes K/V between ``cp`` ranks, overlapped with attention.
* **Decode** reads the weights and the KV cache every step (HBM-bound at small batch), plus collective
  latency and a fixed per-block overhead; **prefill** is GEMM-bound.

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
from ..errors import InputError
from ..workload import BYTES_PER_ELEMENT, activation_bytes_per_element, kv_bytes_per_element
from .collectives import allreduce_time_s, hierarchical_allreduce_time_s, reduce_scatter_time_s, send_recv_time_s

RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}
TRAIN_OPTIONS = ("tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel", "virtual_pipeline",
                 "micro_batch", "recompute", "zero_stage", "sequence_parallel", "global_batch", "trainable",
                 "single_layer", "train_tokens", "calibration")
INFER_OPTIONS = ("tensor_parallel", "pipeline_parallel", "data_parallel", "concurrency", "calibration")


# ---------------------------------------------------------------------------------------------
# Building blocks (pure numpy)
# ---------------------------------------------------------------------------------------------
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
    m, n, k = (np.maximum(np.asarray(v, dtype=float), 1e-9) for v in (m, n, k))
    inten = 1.0 / (1.0 / m + 1.0 / n + 1.0 / k)
    return np.clip(max_frac * inten / (inten + half_intensity), 0.0, 1.0)


def roofline_time_s(*, flop, bytes_moved, peak_flop_per_s, efficiency_frac, bandwidth_bytes_per_s):
    """``max(flop / (peak * eff), bytes / bandwidth)`` [s]."""
    return np.maximum(np.asarray(flop, dtype=float) / (peak_flop_per_s * efficiency_frac),
                      np.asarray(bytes_moved, dtype=float) / bandwidth_bytes_per_s)


def pipeline_bubble_frac(*, num_stages, num_microbatches, virtual_stages=1):
    """Share of pipeline time that is idle [fraction]: ``(p-1)/(v m + p - 1)``.

    With ``v = 1`` this is the 1F1B bubble ``(p-1)/(m+p-1)``; Narayanan et al. (2021) write the interleaved
    schedule's overhead relative to the ideal time as ``(p-1)/(v m)``, i.e. the same fraction of the total.
    """
    p = np.asarray(num_stages, dtype=float)
    m = np.asarray(num_microbatches, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    return (p - 1.0) / (v * m + p - 1.0)


def _gemm_max(cal: GpuCalibration, precision: str) -> float:
    b = BYTES_PER_ELEMENT[precision]
    if b <= 0.5:
        return cal.gemm_max_frac_4bit
    if b <= 1.0:
        return cal.gemm_max_frac_8bit
    return cal.gemm_max_frac_16bit


def _block_gemms(m, tp):
    """Per-GPU (N, K, weight count) of a block's GEMMs after the TP split (MoE: one expert's MLP)."""
    d, hd = m.d_model, m.head_dim_
    q = m.num_heads * hd
    kvd = m.num_kv_heads * hd
    up = (2 if m.gated_mlp else 1) * m.d_ff
    tp = np.asarray(tp, dtype=float)
    return [
        ((q + 2 * kvd) / tp, d, 1.0),  # QKV
        (d, q / tp, 1.0),  # attention output projection
        (up / tp, d, 0.0),  # MLP up (gate+up when gated); expert weight flag 0
        (d, m.d_ff / tp, 0.0),  # MLP down
    ]


def block_forward_time_s(m, *, tokens, context_attended, tp, peak_flop_per_s, hbm_bytes_per_s, precision: str,
                         cal: GpuCalibration, sequence_parallel: bool = True):
    """Forward time of one block's compute on one GPU [s] and its parts (gemm, attention, elementwise).

    ``tokens`` are the tokens the GPU processes in this pass (M of every GEMM); ``context_attended`` is the
    mean number of keys each query attends to. Weights are read once per pass (roofline against HBM).
    Arrays broadcast (tokens, tp).
    """
    tokens = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    wb = max(BYTES_PER_ELEMENT[precision], 0.5)
    ab = activation_bytes_per_element(precision)
    emax = _gemm_max(cal, precision)
    E, k = m.num_experts, m.experts_per_token
    gemm = gemm_mem = 0.0
    for n_, k_, dense in _block_gemms(m, tp):
        if dense or E == 1:
            M = tokens
            count, experts_read = 1.0, 1.0
        else:  # routed experts: each expert sees tokens*k/E; a pass reads the experts some token picked
            M = np.maximum(tokens * k / E, 1.0)
            count = float(E)
            experts_read = E * (1.0 - (1.0 - k / E) ** tokens)
        flop = 2.0 * M * n_ * k_ * count
        eff = gemm_efficiency_frac(m=M, n=n_, k=k_, max_frac=emax, half_intensity=cal.gemm_half_intensity)
        byt = n_ * k_ * wb * experts_read + ab * tokens * (n_ + k_)
        t_c = flop / (peak_flop_per_s * eff)
        t_m = byt / hbm_bytes_per_s
        gemm = gemm + np.maximum(t_c, t_m)
        gemm_mem = gemm_mem + np.where(t_m > t_c, t_m, 0.0)
    attn_flop = 4.0 * m.num_heads * m.head_dim_ * np.asarray(context_attended, dtype=float) * tokens / tp
    attn = attn_flop / (peak_flop_per_s * cal.attention_frac)
    elem = cal.elementwise_vectors_per_token * 2.0 * m.d_model * tokens / (tp if sequence_parallel else 1.0) / hbm_bytes_per_s
    return gemm + attn + elem, {"gemm": gemm, "gemm_memory_bound": gemm_mem, "attention": attn, "elementwise": elem}


def _head_forward_time_s(m, *, tokens, tp, peak_flop_per_s, hbm_bytes_per_s, precision, cal):
    tokens = np.asarray(tokens, dtype=float)
    n_ = m.vocab_size / np.asarray(tp, dtype=float)
    eff = gemm_efficiency_frac(m=tokens, n=n_, k=m.d_model, max_frac=_gemm_max(cal, precision),
                               half_intensity=cal.gemm_half_intensity)
    byt = n_ * m.d_model * max(BYTES_PER_ELEMENT[precision], 0.5)
    return roofline_time_s(flop=2.0 * tokens * n_ * m.d_model, bytes_moved=byt, peak_flop_per_s=peak_flop_per_s,
                           efficiency_frac=eff, bandwidth_bytes_per_s=hbm_bytes_per_s)


class _Links:
    """Effective per-GPU link parameters of one GPU type under a calibration."""

    def __init__(self, gpu, cal: GpuCalibration):
        self.nvlink_bw = gpu.scale_up_bandwidth_bytes_per_s.si * cal.nvlink_frac
        self.net_bw = gpu.scale_out_bandwidth_bytes_per_s.si * cal.network_frac
        self.nvlink_lat = cal.nvlink_latency_s
        self.net_lat = cal.network_latency_s
        self.domain = float(gpu.scale_up_domain_gpus.si)
        self.per_node = float(gpu.gpus_per_node.si)
        self.hbm_bw = gpu.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac

    def tp_allreduce(self, message_bytes, tp):
        tp = np.asarray(tp, dtype=float)
        inside = tp <= self.domain
        t_in = allreduce_time_s(message_bytes=message_bytes, num_ranks=tp, link_bandwidth_bytes_per_s=self.nvlink_bw,
                                link_latency_s=self.nvlink_lat, algorithm="tree")
        t_out = hierarchical_allreduce_time_s(message_bytes=message_bytes, num_ranks=tp, ranks_per_node=self.domain,
                                              intra_bandwidth_bytes_per_s=self.nvlink_bw, intra_latency_s=self.nvlink_lat,
                                              inter_bandwidth_bytes_per_s=self.net_bw, inter_latency_s=self.net_lat,
                                              algorithm="tree")
        return np.where(inside, t_in, t_out)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------
def train_step(m, gpu, *, precision: str, seq_len, global_batch, tp, pp, dp, cp=1, vpp=1, micro_batch=1,
               recompute="full", zero_stage=1, sequence_parallel=True, trainable="full", single_layer=False,
               cal: GpuCalibration):
    """Step time and its parts for arrays of layouts (tp, pp, dp, cp, vpp, micro_batch, recompute code).

    Returns a dict of numpy arrays [s]: ``step_s``, ``compute_s``, ``tp_comm_s``, ``bubble_s``, ``p2p_s``,
    ``dp_exposed_s``, ``dp_comm_s``, ``optimizer_s``, ``layer_s`` (one block's fwd+bwd of one micro-batch,
    including its TP communication), ``num_microbatches``.
    ``recompute`` may be a string or an array of codes (0 none, 1 selective, 2 full).
    """
    tp, pp, dp, cp, vpp, mb = (np.asarray(v, dtype=float) for v in (tp, pp, dp, cp, vpp, micro_batch))
    rc = np.asarray(RECOMPUTE_CODES[recompute] if isinstance(recompute, str) else recompute, dtype=float)
    peak = gpu.peak_flop_per_s(precision)
    links = _Links(gpu, cal)
    hbm = links.hbm_bw
    L = m.num_layers
    ab = activation_bytes_per_element(precision)
    s = np.asarray(seq_len, dtype=float)
    tokens = mb * s / cp  # tokens per micro-batch per GPU's sequence shard
    attended = (s + 1.0) / 2.0  # causal
    t_fwd, parts = block_forward_time_s(m, tokens=tokens, context_attended=attended, tp=tp, peak_flop_per_s=peak,
                                        hbm_bytes_per_s=hbm, precision=precision, cal=cal,
                                        sequence_parallel=sequence_parallel)
    # backward: activation gradients (1x) + weight gradients (1x, not for frozen LoRA bases)
    bwd_factor = 1.0 if trainable == "lora" else 2.0
    t_recompute = np.where(rc >= 2, t_fwd, np.where(rc >= 1, parts["attention"], 0.0))
    t_layer_compute = t_fwd * (1.0 + bwd_factor) + t_recompute + parts["attention"] * 0.5  # flash bwd ~2.5x fwd
    # tensor parallel: 2 collectives per block per pass (fwd, bwd, recomputed fwd)
    msg = ab * tokens * m.d_model
    t_ar = links.tp_allreduce(msg, tp)
    n_tp = 4.0 + np.where(rc >= 2, 2.0, 0.0)
    t_tp = n_tp * t_ar * (1.0 - cal.tp_overlap_frac)
    # context parallel: ring-pass K/V, hidden behind attention
    kvd = m.num_kv_heads * m.head_dim_
    cp_bytes = 2.0 * kvd / np.minimum(tp, m.num_kv_heads) * tokens * ab * (cp - 1.0)
    cp_bw = np.where(tp * cp <= links.domain, links.nvlink_bw, links.net_bw)
    t_cp = 3.0 * np.maximum(cp_bytes / cp_bw - parts["attention"], 0.0)
    t_layer = t_layer_compute + t_tp + t_cp
    if single_layer:
        z = np.zeros_like(t_layer)
        return {"step_s": t_layer, "layer_s": t_layer, "compute_s": t_layer_compute, "tp_comm_s": t_tp,
                "bubble_s": z, "p2p_s": z, "dp_exposed_s": z, "dp_comm_s": z, "optimizer_s": z,
                "num_microbatches": np.ones_like(t_layer)}
    layers_stage = np.ceil(L / pp)
    t_head = _head_forward_time_s(m, tokens=tokens, tp=tp, peak_flop_per_s=peak, hbm_bytes_per_s=hbm,
                                  precision=precision, cal=cal) * 3.0
    t_mb = layers_stage * t_layer + t_head  # the last stage (the slowest) also runs the LM head
    # point-to-point between stages (scatter/gather: 1/tp of the activation each), fwd + bwd, v times
    p2p_bytes = ab * tokens * m.d_model / tp
    cross = tp * cp * dp >= links.per_node  # neighbours in the pipeline sit in other nodes
    p2p_bw = np.where(cross, links.net_bw, links.nvlink_bw)
    p2p_lat = np.where(cross, links.net_lat, links.nvlink_lat)
    t_p2p = np.where(pp > 1, 2.0 * vpp * send_recv_time_s(message_bytes=p2p_bytes, link_bandwidth_bytes_per_s=p2p_bw,
                                                          link_latency_s=p2p_lat), 0.0)
    nmb = np.maximum(np.asarray(global_batch, dtype=float) / (dp * mb), 1.0)
    t_unit = t_mb + t_p2p
    t_pipe = t_unit * (nmb + (pp - 1.0) / vpp)
    bubble = t_unit * (pp - 1.0) / vpp
    # data parallel over dp*cp ranks of the same (tp, pp) shard
    params_stage = _stage_params(m, pp, trainable)
    grad_bytes = params_stage / tp * 2.0
    ranks = dp * cp
    ranks_node = np.maximum(np.floor(links.per_node / tp), 1.0)
    ar = hierarchical_allreduce_time_s(message_bytes=grad_bytes, num_ranks=ranks, ranks_per_node=np.minimum(ranks_node, ranks),
                                       intra_bandwidth_bytes_per_s=links.nvlink_bw, intra_latency_s=links.nvlink_lat,
                                       inter_bandwidth_bytes_per_s=links.net_bw, inter_latency_s=links.net_lat)
    ag = 0.5 * ar  # one all-gather of the 16-bit parameters ~ half an all-reduce
    zs = np.asarray(zero_stage, dtype=float)
    t_dp = np.where(zs >= 3, ar + 2.0 * nmb * ag, ar)
    compute_total = nmb * layers_stage * t_layer_compute
    exposed = np.maximum(t_dp - cal.dp_overlap_frac * compute_total, 0.0)
    # optimizer: read/write weights, grads and Adam state (~36 B/param), sharded by ZeRO>=1
    opt_params = params_stage / tp / np.where(zs >= 1, ranks, 1.0)
    t_opt = opt_params * 36.0 / hbm
    step = t_pipe + exposed + t_opt + cal.train_step_overhead_s
    return {"step_s": step, "layer_s": t_layer, "compute_s": nmb * t_mb, "tp_comm_s": nmb * layers_stage * t_tp,
            "bubble_s": bubble, "p2p_s": nmb * t_p2p, "dp_exposed_s": exposed, "dp_comm_s": t_dp,
            "optimizer_s": t_opt, "num_microbatches": nmb}


def time_to_train(*, step_s, tokens_per_step, train_tokens, num_gpus):
    """Wall time [s] and GPU-hours [GPU-h] to train ``train_tokens`` at ``tokens_per_step`` per ``step_s``."""
    secs = np.asarray(train_tokens, dtype=float) / np.asarray(tokens_per_step, dtype=float) * np.asarray(step_s, dtype=float)
    return secs, secs * num_gpus / 3600.0


def _stage_params(m, pp, trainable="full"):
    from ..workload import block_params, embedding_params, head_params

    blk = block_params(m)[0]
    if trainable == "lora":
        return np.zeros_like(np.asarray(pp, dtype=float))
    pp = np.asarray(pp, dtype=float)
    edge = max(embedding_params(m), head_params(m))
    return np.ceil(m.num_layers / pp) * blk + np.where(pp > 1, edge, embedding_params(m) + head_params(m))


def model_flop_per_token(m, *, seq_len, recompute_counted=False) -> float:
    """Model FLOPs per trained token [FLOP]: ``3 x forward`` (``4 x`` with a recomputed forward).

    Forward = 2 FLOP per active matmul weight (blocks and LM head) + ``4 h s`` attention per layer,
    counted without the causal mask (Narayanan et al. 2021, eq. 3; Chowdhery et al. 2022, App. B).
    """
    from ..workload import block_params

    d, hd = m.d_model, m.head_dim_
    norms = 2 * (2 * d if m.norm == "layernorm" else d)
    blk_active = block_params(m)[1] - norms
    fwd = m.num_layers * (2.0 * blk_active + 4.0 * m.num_heads * hd * seq_len) + 2.0 * m.vocab_size * d
    return fwd * (4.0 if recompute_counted else 3.0)


# ---------------------------------------------------------------------------------------------
# Inference
# ---------------------------------------------------------------------------------------------
def pass_time_s(m, gpu, *, precision: str, tokens, attn_pairs, kv_read_tokens, logits_rows, tp, pp=1,
                cal: GpuCalibration):
    """One inference forward pass on one engine replica (``tp x pp`` GPUs) [s], its slowest stage and parts.

    Parameters (arrays broadcast)
    -----------------------------
    tokens : new tokens the pass processes (the M of every GEMM: decode sequences + prompt-chunk tokens)
    attn_pairs : query-key pairs of its attention (each new token x the keys it attends to)
    kv_read_tokens : cached tokens whose K/V the pass reads from HBM (split over ``min(tp, kv_heads)``)
    logits_rows : rows of the LM head (one per sequence that emits a token)

    Returns ``(latency_s, stage_s, parts)``: the pass's latency, the busy time of its slowest pipeline stage
    (the last: its blocks plus the LM head; equal to the latency at ``pp = 1``) and the parts [s].
    """
    tokens = np.maximum(np.asarray(tokens, dtype=float), 1e-12)
    tp = np.asarray(tp, dtype=float)
    peak = gpu.peak_flop_per_s(precision)
    links = _Links(gpu, cal)
    hbm = links.hbm_bw
    attended = np.asarray(attn_pairs, dtype=float) / tokens
    t_blk, parts = block_forward_time_s(m, tokens=tokens, context_attended=attended, tp=tp, peak_flop_per_s=peak,
                                        hbm_bytes_per_s=hbm, precision=precision, cal=cal)
    kv_tok = 2.0 * m.num_kv_heads * m.head_dim_ * kv_bytes_per_element(precision) / np.minimum(tp, m.num_kv_heads)
    t_kv = kv_tok * np.asarray(kv_read_tokens, dtype=float) / hbm
    t_attn = np.maximum(parts["attention"], t_kv)  # attention is compute- or KV-read-bound
    t_blk = t_blk - parts["attention"] + t_attn
    msg = activation_bytes_per_element(precision) * tokens * m.d_model
    t_tp = 2.0 * links.tp_allreduce(msg, tp)
    t_layer = t_blk + t_tp + cal.layer_overhead_s
    t_head = _head_forward_time_s(m, tokens=logits_rows, tp=tp, peak_flop_per_s=peak, hbm_bytes_per_s=hbm,
                                  precision=precision, cal=cal)
    pp = np.asarray(pp, dtype=float)
    hop = send_recv_time_s(message_bytes=msg, link_bandwidth_bytes_per_s=links.nvlink_bw, link_latency_s=links.nvlink_lat)
    p2p = (pp - 1.0) * hop
    L = m.num_layers
    total = L * t_layer + t_head + p2p + cal.step_overhead_s
    stage = np.ceil(L / pp) * t_layer + t_head + np.where(pp > 1, hop, 0.0) + cal.step_overhead_s
    stage = np.minimum(stage, total)
    parts = {"gemm": L * parts["gemm"], "gemm_memory_bound": L * parts["gemm_memory_bound"], "attention": L * t_attn,
             "kv_read": L * t_kv, "elementwise": L * parts["elementwise"], "tp_comm": L * t_tp,
             "overhead": L * cal.layer_overhead_s + cal.step_overhead_s, "lm_head": t_head, "p2p": p2p}
    return total, stage, parts


def forward_pass_time_s(m, gpu, *, precision: str, batch, new_tokens, context, tp, pp=1, cal: GpuCalibration,
                        logits_tokens=None):
    """One forward pass over ``batch`` sequences, each adding ``new_tokens`` on top of ``context`` cached ones.

    Prefill: ``new_tokens`` = prompt, ``context`` = 0. Decode step: ``new_tokens`` = 1, ``context`` = KV length.
    Returns (time [s], parts dict): :func:`pass_time_s` with ``tokens = batch * new_tokens``, each token attending
    to ``context + (new_tokens + 1) / 2`` keys (causal), ``batch * (context + new_tokens)`` KV tokens read.
    """
    b = np.asarray(batch, dtype=float)
    tokens = b * new_tokens
    t, _, parts = pass_time_s(m, gpu, precision=precision, tokens=tokens,
                              attn_pairs=tokens * (np.asarray(context, dtype=float) + (new_tokens + 1.0) / 2.0),
                              kv_read_tokens=b * (np.asarray(context, dtype=float) + new_tokens),
                              logits_rows=b if logits_tokens is None else logits_tokens, tp=tp, pp=pp, cal=cal)
    return t, parts


def max_batch_in_memory(m, gpu, *, precision: str, context, tp, pp=1, reserve_frac=0.1, activation_tokens=2048) -> int:
    """Largest batch whose KV cache for ``context`` tokens fits next to the weights [sequences] (0 if none)."""
    from ..workload import total_params

    wb = max(BYTES_PER_ELEMENT[precision], 0.5)
    cap = gpu.hbm_bytes.si * (1.0 - reserve_frac)
    weights = total_params(m) * wb / (tp * pp)
    act = activation_bytes_per_element(precision) * activation_tokens * (4 * m.d_model + 2 * m.d_ff) / tp
    kv_seq = m.num_layers / pp * 2.0 * m.num_kv_heads * m.head_dim_ * kv_bytes_per_element(precision) \
        / min(tp, m.num_kv_heads) * context
    free = cap - weights - act
    return int(max(free // kv_seq, 0)) if kv_seq > 0 else 0


def serve(m, gpu, *, precision: str, batch, input_tokens, output_tokens, tp, pp=1, cal: GpuCalibration):
    """Static-batch serving of ``batch`` requests (prompt ``input_tokens``, ``output_tokens`` generated).

    Returns a dict: ``ttft_s`` (prefill of the batch), ``tpot_s`` (mean decode step over the generation),
    ``request_s`` (prefill + all decode steps), ``tokens_per_s`` (output tokens/s of the engine),
    ``tokens_per_s_per_user``. Decode steps grow linearly with context, so the mean step is evaluated at the
    mean context ``input + output/2``.
    """
    t_pre, pre_parts = forward_pass_time_s(m, gpu, precision=precision, batch=batch, new_tokens=input_tokens, context=0,
                                           tp=tp, pp=pp, cal=cal)
    steps = max(output_tokens - 1, 0)
    c_mean = input_tokens + output_tokens / 2.0
    t_dec, dec_parts = forward_pass_time_s(m, gpu, precision=precision, batch=batch, new_tokens=1, context=c_mean,
                                           tp=tp, pp=pp, cal=cal)
    req = t_pre + steps * t_dec
    return {"ttft_s": t_pre, "tpot_s": t_dec, "request_s": req, "tokens_per_s": batch * output_tokens / req,
            "tokens_per_s_per_user": output_tokens / req, "prefill_parts": pre_parts, "decode_parts": dec_parts}


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------
def _opt(options: dict, key: str, default):
    v = options.get(key)
    return default if v is None else v


def _check_options(options: dict, allowed: tuple[str, ...], phase: str) -> None:
    bad = sorted(k for k in options if k not in allowed and options[k] is not None)
    if bad:
        raise InputError(f"options: {', '.join(bad)} not used for phase {phase}; allowed: {', '.join(allowed)}")


def _bottleneck(parts: dict[str, float]) -> str:
    return max(parts, key=lambda k: parts[k])


def predict(model, target, catalog, *, phase: str, precision: str, batch=None, context=None, output_tokens=None,
            **options):
    """GPU time prediction (the GPU half of :func:`wseplan.timing.predict_time`).

    Parameters
    ----------
    model : Model
        Transformer architecture.
    target : Target
        A GPU target; its count (or ``tp*pp*dp*cp``) is the number of GPUs.
    phase : str
        ``train`` (one optimizer step), ``prefill`` (prompt of ``context`` tokens) or ``decode``
        (one token at KV length ``context``; with ``output_tokens`` a whole request).
    batch : int
        Train: global batch [sequences]; inference: concurrent requests per engine replica.
    context : int
        Train: sequence length; prefill: prompt length; decode: KV length (prompt) [tokens].
    options
        Train: tensor_parallel, pipeline_parallel, data_parallel, context_parallel, virtual_pipeline,
        micro_batch, recompute (none|selective|full), zero_stage (0-3), sequence_parallel, trainable
        (full|lora), single_layer. Inference: tensor_parallel, pipeline_parallel, data_parallel (engine
        replicas). ``calibration``: a :class:`~wseplan.calibration_data.GpuCalibration` to use instead of the
        catalog's.
    """
    from ..catalog.schema import Model
    from ..timing import TimeResult

    if not isinstance(model, Model):
        raise InputError("model: the GPU time model needs a transformer architecture (a catalog model or config.json)")
    gpu = target.device
    cal = options.get("calibration") or gpu_calibration()
    d = catalog.defaults
    if precision not in BYTES_PER_ELEMENT:
        raise InputError(f"precision: unknown {precision!r}")
    try:
        gpu.peak_flop_per_s(precision)
    except ValueError:
        raise InputError(f"precision: {gpu.name} has no {precision} rate; choose another precision") from None
    ctx = int(d.default_context_tokens.si) if context is None else int(context)
    if ctx <= 0:
        raise InputError(f"context: must be a positive integer, got {context!r}")
    tp = int(_opt(options, "tensor_parallel", 0)) or None
    pp = int(_opt(options, "pipeline_parallel", 1))
    notes: list[str] = []
    if phase == "train":
        _check_options(options, TRAIN_OPTIONS, phase)
        cp = int(_opt(options, "context_parallel", 1))
        vpp = int(_opt(options, "virtual_pipeline", 1))
        mb = int(_opt(options, "micro_batch", 1))
        rec = _opt(options, "recompute", "selective")
        zs = int(_opt(options, "zero_stage", 1))
        trainable = _opt(options, "trainable", "full")
        if rec not in RECOMPUTE_CODES:
            raise InputError(f"recompute: must be none, selective or full, got {rec!r}")
        if zs not in (0, 1, 2, 3):
            raise InputError(f"zero_stage: must be 0, 1, 2 or 3, got {zs!r}")
        tp = tp or 1
        dp = options.get("data_parallel")
        if dp is None:
            n = target.count or tp * pp * cp
            if n % (tp * pp * cp):
                raise InputError(f"target: {n} GPUs is not a multiple of tp*pp*cp = {tp * pp * cp}; give data_parallel")
            dp = n // (tp * pp * cp)
        dp = int(dp)
        for name, v in (("tensor_parallel", tp), ("pipeline_parallel", pp), ("data_parallel", dp), ("context_parallel", cp),
                        ("virtual_pipeline", vpp), ("micro_batch", mb)):
            if v <= 0:
                raise InputError(f"{name}: must be a positive integer, got {v!r}")
        gb = int(batch) if batch is not None else int(_opt(options, "global_batch", dp * mb))
        single = bool(options.get("single_layer"))
        sp = bool(_opt(options, "sequence_parallel", True))
        r = train_step(model, gpu, precision=precision, seq_len=ctx, global_batch=gb, tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp,
                       micro_batch=mb, recompute=rec, zero_stage=zs, trainable=trainable, single_layer=single,
                       sequence_parallel=sp, cal=cal)
        r = {k: float(v) for k, v in r.items()}
        n_gpus = tp * pp * dp * cp
        step = r["step_s"]
        if not single:
            from ..fit import gpu_layout_memory
            from ..workload import transformer_workload

            w = transformer_workload(model, precision=precision, phase="train", batch=gb, context=ctx)
            # weights/optimizer: split over TP (ZeRO over dp*cp); activations: the sequence is split over cp too
            mw = gpu_layout_memory(w, tp=tp, pp=pp, dp=dp * cp, zero_stage=zs, recompute=rec, catalog=catalog, micro_batch=mb)
            ma = gpu_layout_memory(w, tp=tp * cp, pp=pp, dp=dp, zero_stage=zs, recompute=rec, catalog=catalog, micro_batch=mb)
            need = float(mw["weights"] + mw["optimizer"] + ma["activations"])
            cap = gpu.hbm_bytes.si * (1.0 - d.gpu_hbm_reserve_frac.si)
            if need > cap:
                notes.append(f"this layout needs about {need:.3e} B per GPU; usable HBM is {cap:.3e} B "
                             "(more TP/PP, ZeRO or recompute would be needed)")
        tokens = gb * ctx
        flops = model_flop_per_token(model, seq_len=ctx) * tokens
        peak = gpu.peak_flop_per_s(precision)
        train_tokens = options.get("train_tokens")
        if train_tokens and not single:
            secs, gpu_h = time_to_train(step_s=step, tokens_per_step=tokens, train_tokens=float(train_tokens), num_gpus=n_gpus)
            notes.append(f"time to train {float(train_tokens):.4g} tokens: {secs / 86400:.4g} days, {gpu_h:.4g} GPU-hours")
        breakdown = {"compute": r["compute_s"] - r["tp_comm_s"], "nvlink": r["tp_comm_s"], "pipeline_bubble": r["bubble_s"],
                     "pipeline_p2p": r["p2p_s"], "network": r["dp_exposed_s"], "optimizer": r["optimizer_s"]}
        if single:
            breakdown = {"compute": r["compute_s"], "nvlink": r["tp_comm_s"]}
        return TimeResult(model=model.name, target=target.label, hardware=target.key, device_kind="gpu", precision=precision,
                          phase=phase, batch=gb, context=ctx, num_devices=n_gpus, step_s=step,
                          tokens_per_s=None if single else tokens / step,
                          model_flop_per_s=None if single else flops / step,
                          model_flop_utilization_frac=None if single else min(flops / step / (n_gpus * peak), 1.0),
                          bottleneck=_bottleneck(breakdown), breakdown_s=breakdown,
                          layout={"tensor_parallel": tp, "pipeline_parallel": pp, "data_parallel": dp, "context_parallel": cp,
                                  "virtual_pipeline": vpp, "micro_batch": mb, "recompute": rec, "zero_stage": zs,
                                  "num_microbatches": int(round(r["num_microbatches"]))},
                          notes=notes)
    if phase not in ("prefill", "decode"):
        raise InputError(f"phase: unknown {phase!r}; use train, prefill or decode")
    _check_options(options, INFER_OPTIONS, phase)
    n = target.count
    dp = int(_opt(options, "data_parallel", 1))
    if tp is None:
        tp = max(1, (n or 1) // (pp * dp))
    conc = batch if batch is not None else options.get("concurrency")
    if conc is None:
        limit = max_batch_in_memory(model, gpu, precision=precision, context=ctx + (output_tokens or 1), tp=tp, pp=pp,
                                    reserve_frac=d.gpu_hbm_reserve_frac.si)
        conc = int(max(1, min(limit, cal.engine_max_batch)))
        notes.append(f"batch not given: the engine's largest batch that fits ({conc}) is used")
    conc = int(conc)
    if conc <= 0:
        raise InputError(f"batch: must be a positive integer, got {batch!r}")
    fit_b = max_batch_in_memory(model, gpu, precision=precision, context=ctx + (output_tokens or 1), tp=tp, pp=pp,
                                reserve_frac=d.gpu_hbm_reserve_frac.si)
    run_b = conc
    if fit_b <= 0:
        notes.append("the weights leave no room for the KV cache on this layout; times assume it fits")
    elif conc > fit_b:
        run_b = fit_b
        notes.append(f"KV cache holds only {fit_b} sequences; requests run in waves of {fit_b}")
    n_gpus = tp * pp * dp
    layout = {"tensor_parallel": tp, "pipeline_parallel": pp, "data_parallel": dp, "batch_in_flight": run_b}
    if phase == "prefill":
        t, parts = forward_pass_time_s(model, gpu, precision=precision, batch=run_b, new_tokens=ctx, context=0, tp=tp, pp=pp,
                                       cal=cal, logits_tokens=run_b)
        t = float(t)
        waves = math.ceil(conc / run_b)
        breakdown = _infer_breakdown(parts)
        return TimeResult(model=model.name, target=target.label, hardware=target.key, device_kind="gpu", precision=precision,
                          phase=phase, batch=conc, context=ctx, num_devices=n_gpus, output_tokens=1, step_s=t * waves,
                          ttft_s=t, tokens_per_s=dp * conc * ctx / (t * waves), bottleneck=_bottleneck(breakdown),
                          breakdown_s=breakdown, layout=layout, notes=notes)
    out = int(output_tokens) if output_tokens else 1
    if output_tokens is None:
        t, parts = forward_pass_time_s(model, gpu, precision=precision, batch=run_b, new_tokens=1, context=ctx, tp=tp, pp=pp,
                                       cal=cal)
        t = float(t)
        breakdown = _infer_breakdown(parts)
        return TimeResult(model=model.name, target=target.label, hardware=target.key, device_kind="gpu", precision=precision,
                          phase=phase, batch=conc, context=ctx, num_devices=n_gpus, step_s=t, tpot_s=t,
                          tokens_per_s=dp * run_b / t, tokens_per_s_per_user=1.0 / t, bottleneck=_bottleneck(breakdown),
                          breakdown_s=breakdown, layout=layout, notes=notes)
    r = serve(model, gpu, precision=precision, batch=run_b, input_tokens=ctx, output_tokens=out, tp=tp, pp=pp, cal=cal)
    breakdown = _infer_breakdown(r["decode_parts"], scale=max(out - 1, 0))
    breakdown["prefill"] = float(r["ttft_s"])
    return TimeResult(model=model.name, target=target.label, hardware=target.key, device_kind="gpu", precision=precision,
                      phase=phase, batch=conc, context=ctx, num_devices=n_gpus, output_tokens=out,
                      step_s=float(r["request_s"]), ttft_s=float(r["ttft_s"]), tpot_s=float(r["tpot_s"]),
                      tokens_per_s=dp * float(r["tokens_per_s"]), tokens_per_s_per_user=float(r["tokens_per_s_per_user"]),
                      bottleneck=_bottleneck(breakdown), breakdown_s=breakdown, layout=layout, notes=notes)


def _infer_breakdown(parts: dict, scale: float = 1.0) -> dict[str, float]:
    """Map inference parts to bottleneck names: compute, hbm_bandwidth, nvlink, overhead [s]."""
    gemm = float(parts["gemm"]) + float(parts["lm_head"])
    gemm_mem = float(parts["gemm_memory_bound"])
    kv = float(parts["kv_read"])
    att = float(parts["attention"])
    return {"compute": scale * (gemm - gemm_mem + max(att - kv, 0.0)),
            "hbm_bandwidth": scale * (gemm_mem + min(kv, att) + float(parts["elementwise"])),
            "nvlink": scale * (float(parts["tp_comm"]) + float(parts["p2p"])),
            "overhead": scale * float(parts["overhead"])}


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
    eff = gemm_efficiency_frac(m=m, n=n, k=k / tp, max_frac=_gemm_max(cal, precision), half_intensity=cal.gemm_half_intensity)
    t = roofline_time_s(flop=flop, bytes_moved=k * n / tp * wb + ab * m * (k / tp + n), peak_flop_per_s=gpu.peak_flop_per_s(precision),
                        efficiency_frac=eff, bandwidth_bytes_per_s=links.hbm_bw)
    return t + links.tp_allreduce(ab * m * n, tp) + cal.layer_overhead_s


# ---------------------------------------------------------------------------------------------
# Vectorized layout search
# ---------------------------------------------------------------------------------------------
def layout_axes(*, num_gpus: int, num_layers: int, tp_values, micro_batches, virtual_stages=(1,),
                recomputes=("none", "selective", "full"), zero_stages=(0, 1, 2, 3)) -> dict:
    """The candidate grid as an open mesh: one numpy axis per decision, shaped to broadcast.

    Axes (in order): tp (given values) x pp (1..num_layers) x micro-batch x virtual stages x recompute code x
    ZeRO stage; ``dp = num_gpus / (tp pp)`` broadcasts from the first two (fractional where tp*pp does not
    divide the count — such candidates are infeasible). Every array operation on these axes evaluates the
    full Cartesian product without one Python object per candidate, and terms that depend on few axes
    (a block's GEMM time depends only on tp and the micro-batch) are computed once per distinct value.
    """
    def ax(values, k):
        shape = [1] * 6
        shape[k] = -1
        return np.asarray(values, dtype=float).reshape(shape)

    tp = ax(tp_values, 0)
    pp = ax(np.arange(1, num_layers + 1), 1)
    return {"tp": tp, "pp": pp, "dp": num_gpus / (tp * pp), "micro_batch": ax(micro_batches, 2),
            "vpp": ax(virtual_stages, 3), "recompute": ax([RECOMPUTE_CODES[r] for r in recomputes], 4),
            "zero_stage": ax(zero_stages, 5)}


def _layout_memory(w, axes: dict, catalog, shape) -> np.ndarray:
    """Per-GPU bytes of every candidate: :func:`wseplan.fit.gpu_layout_memory` once per (recompute, ZeRO) value,
    each call vectorized over the tp x pp x micro-batch sub-grid."""
    from ..fit import gpu_layout_memory

    codes = {v: k for k, v in RECOMPUTE_CODES.items()}
    total = np.empty(shape)
    dp = np.maximum(axes["dp"], 1.0)
    for ri, r in enumerate(axes["recompute"].ravel()):
        for zi, z in enumerate(axes["zero_stage"].ravel()):
            mem = gpu_layout_memory(w, tp=axes["tp"][..., 0, 0], pp=axes["pp"][..., 0, 0], dp=dp[..., 0, 0],
                                    zero_stage=int(z), recompute=codes[int(r)], catalog=catalog,
                                    micro_batch=axes["micro_batch"][..., 0, 0])["total"]
            total[:, :, :, :, ri, zi] = np.broadcast_to(mem, shape[:4])
    return total


def evaluate_layouts(m, gpu, catalog, axes: dict, *, num_gpus: int, global_batch: int, seq_len: int, precision: str,
                     cal: GpuCalibration, workload=None):
    """Step time [s] (inf where infeasible) and the feasibility mask of every candidate of ``axes``.

    A candidate is infeasible when ``tp pp`` does not divide ``num_gpus``, the micro-batch does not divide
    the per-replica batch, the virtual stages do not divide the blocks per stage, TP does not divide the
    heads, or the fullest stage's per-GPU memory exceeds usable HBM. Both arrays have the full grid shape.
    """
    from ..workload import transformer_workload

    w = workload or transformer_workload(m, precision=precision, phase="train", batch=global_batch, context=seq_len)
    tp, pp, dp, mb, v = axes["tp"], axes["pp"], axes["dp"], axes["micro_batch"], axes["vpp"]
    shape = np.broadcast_shapes(*(a.shape for a in axes.values()))
    per_replica = global_batch / dp
    ok = (dp >= 1) & (np.abs(dp - np.round(dp)) < 1e-9)
    ok = ok & (np.abs(per_replica / mb - np.round(per_replica / mb)) < 1e-9)
    ok = ok & ((v == 1) | ((pp > 1) & (np.mod(m.num_layers, pp * v) == 0)))
    ok = ok & (np.mod(m.num_heads, tp) == 0)
    cap = gpu.hbm_bytes.si * (1.0 - catalog.defaults.gpu_hbm_reserve_frac.si)
    ok = np.broadcast_to(ok, shape) & (_layout_memory(w, axes, catalog, shape) <= cap)
    r = train_step(m, gpu, precision=precision, seq_len=seq_len, global_batch=global_batch, tp=tp, pp=pp,
                   dp=np.maximum(dp, 1.0), vpp=v, micro_batch=mb, recompute=axes["recompute"],
                   zero_stage=axes["zero_stage"], cal=cal)
    return np.where(ok, np.broadcast_to(r["step_s"], shape), np.inf), ok


def search_layouts(m, target, catalog, *, num_gpus: int, global_batch: int, seq_len: int, precision: str = "bf16",
                   micro_batches=None, virtual_stages=(1, 2, 4), recomputes=("none", "selective", "full"),
                   zero_stages=(0, 1, 2, 3), cal: GpuCalibration | None = None) -> dict:
    """Find the fastest TP x PP x DP x micro-batch x virtual-stage x recompute x ZeRO layout by enumeration.

    Every candidate of :func:`layout_axes` goes through the memory fit and the step-time model as numpy
    arrays over the whole grid. Ties go to the first candidate in grid order (smaller tp, pp, micro-batch,
    v, recompute, ZeRO stage). Returns a dict: ``best`` (layout dict with ``step_s``), ``num_evaluated``,
    ``num_infeasible``, ``num_feasible``.

    Raises
    ------
    InfeasibleError
        When no candidate fits.
    """
    from ..errors import InfeasibleError
    from ..workload import transformer_workload

    gpu = target.device
    cal = cal or gpu_calibration()
    domain = int(gpu.scale_up_domain_gpus.si)
    limit = domain if domain > 8 else min(domain, int(catalog.defaults.gpu_max_tensor_parallel.si))
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= min(limit, num_gpus)]
    if micro_batches is None:
        micro_batches = [b for b in (1, 2, 4, 8, 16, 32) if b <= global_batch]
    axes = layout_axes(num_gpus=num_gpus, num_layers=m.num_layers, tp_values=tps, micro_batches=micro_batches,
                       virtual_stages=virtual_stages, recomputes=recomputes, zero_stages=zero_stages)
    w = transformer_workload(m, precision=precision, phase="train", batch=global_batch, context=seq_len)
    t, ok = evaluate_layouts(m, gpu, catalog, axes, num_gpus=num_gpus, global_batch=global_batch, seq_len=seq_len,
                             precision=precision, cal=cal, workload=w)
    n, feasible = int(t.size), int(ok.sum())
    if feasible == 0:
        raise InfeasibleError(f"layout: no TP x PP x DP layout of {m.name} fits {num_gpus} x {gpu.name} at global batch "
                              f"{global_batch}, sequence {seq_len}; add GPUs or lower the batch")
    idx = np.unravel_index(int(np.argmin(t)), t.shape)

    def pick(key):
        a = axes[key]
        return float(a[tuple(i if a.shape[k] > 1 else 0 for k, i in enumerate(idx))])

    codes = {v: k for k, v in RECOMPUTE_CODES.items()}
    best = {"tensor_parallel": int(pick("tp")), "pipeline_parallel": int(pick("pp")),
            "data_parallel": int(round(pick("dp"))), "micro_batch": int(pick("micro_batch")),
            "virtual_pipeline": int(pick("vpp")), "recompute": codes[int(pick("recompute"))],
            "zero_stage": int(pick("zero_stage")), "step_s": float(t[idx])}
    return {"best": best, "num_evaluated": n, "num_infeasible": n - feasible, "num_feasible": feasible}
