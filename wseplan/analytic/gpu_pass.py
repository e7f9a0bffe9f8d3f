"""GPU inference passes: one forward pass of an engine replica (prefill chunks and decode steps together), from
the per-operator times of :mod:`.gpu_time`, every block type of the model timed as what it is.

A pass's new tokens are the M of every GEMM; each block type (:func:`wseplan.workload.block_types`: dense or MoE
MLP with its shared experts; full, sliding or chunked attention; standard or MLA) reads the weights it uses and its
own KV cache, so that ``time`` reads the per-layer workload ``fit`` holds. Decode is HBM-bound at small batch
(weights and KV cache read every step), prefill GEMM-bound.

References
----------
Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023 (decode memory-bound, KV-cache reads).
DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model", 2024, sec. 2.1
(multi-head latent attention: the cached latent, absorbed projections).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..calibration_data import GpuCalibration
from ..errors import InputError
from ..workload import (BYTES_PER_ELEMENT, KV_FORMATS, activation_bytes_per_element, block_types, kv_bytes,
                        kv_bytes_per_element, weight_bytes_split, edge_weight_bytes)
from . import elementwise as X
from .attention_dp import rank_share
from .collectives import send_recv_time_s
from .gpu_gemm import block_gemms_s
from .gpu_links import Links as _Links
from .gpu_time import (_attention_s, _elementwise_s, _head_forward_time_s, _layer_sum,
                       ATTENTION_PRECISION, attention_peak_flop_per_s)
from .layers import attended_per_token, cached_tokens, slowest_run
from .rows import pair_groups


class Sequences(NamedTuple):
    """Sequences of one kind in an inference pass (arrays broadcast): ``seqs`` sequences adding ``new`` tokens each,
    ``tokens`` in all, on top of ``prior`` cached tokens each; ``decode``: decode steps (else prompt chunks, whose
    queries attend over the positions they cover)."""

    seqs: object
    tokens: object
    new: object
    prior: object
    decode: bool = True


def attention_format(precision: str, kv_precision: str | None) -> str:
    """The format attention computes in: the weights' rule (:data:`~.gpu_time.ATTENTION_PRECISION`), or a KV cache's
    own format where it is wider (a 16-bit cache beside fp8 weights feeds 16-bit attention: an fp8 kernel needs fp8
    K and V; review28b #2); a narrower cache (fp8 beside bf16 weights) is dequantized into the weights' format."""
    base = ATTENTION_PRECISION.get(precision, precision)
    if kv_precision is None:  # the weights' default cache (16-bit beside int8/int4/fp4 weights: 16-bit attention)
        return "bf16" if kv_bytes_per_element(precision) > BYTES_PER_ELEMENT.get(base, 2.0) else base
    return kv_precision if KV_FORMATS[kv_precision] > BYTES_PER_ELEMENT.get(base, 2.0) else base


#: kernels of a dense transformer block in a serving engine's decode pass, the count ``layer_launch_s`` stands for
#: (catalogs/software/profiles.yaml: QKV, rotary, attention, output, norm + all-reduce, gate/up, activation, down,
#: norm + all-reduce, and the KV-cache write)
DENSE_BLOCK_KERNELS = 10


def block_kernels(b) -> int:
    """Kernels one block of type ``b`` launches in an inference pass: one per GEMM of the block, six others (rotary,
    attention, activation, the KV-cache write, two norm + all-reduce); a routed MLP four more (the router GEMM, the
    top-k softmax, the token permutation into expert order and the weighted combine: vLLM's fused-MoE path runs
    ``fused_topk``, ``moe_align_block_size``, two grouped GEMMs, ``silu_and_mul`` and ``moe_sum`` where a dense MLP runs
    gate/up, activation and down), a shared expert its activation, multi-head latent attention its two latent norms.
    Dense 10, Mixtral/Qwen3/gpt-oss MoE 14, Llama 4 MoE 17, DeepSeek-V3 MoE 22."""
    names = {g.name for g in b.gemms}
    k = len(b.gemms) + 6
    if "kv_a" in names:
        k += 2
    if b.moe:
        k += 4
    if "shared_up" in names:
        k += 1
    return k


def vector_peak_flop_per_s(gpu) -> float:
    """The rate a decode attention kernel without tensor-core instructions runs against [FLOP/s]: its vector units'
    instruction issue (4 warp instructions per SM and clock) counted as fused multiply-adds, ``vector_issue_flop_per_s``
    where the catalog gives it (Volta, Ampere: twice their FP32 peak, as an FP32 warp instruction takes two of an SM
    partition's issue slots and conversions and shuffles fill the others), else the FP32 peak (Hopper, Ada,
    Blackwell: one FP32 warp instruction per slot). InputError where the catalog gives neither."""
    q = gpu.vector_issue_flop_per_s or gpu.dense_peak_flop_per_s.get("fp32")
    if q is None:
        raise InputError(f"software: a per-query-head decode attention kernel runs on the vector units, and {gpu.name} "
                         "has no fp32 peak in the catalog (dense_peak_flop_per_s.fp32, or vector_issue_flop_per_s); "
                         "use a grouped-kernel profile")
    return q.si


def _layer_attention(att, sequences, tokens, tp, peak_flop_per_s, kv_bytes, hbm, cal: GpuCalibration,
                     vector_peak=None):
    """One layer's attention in a pass on one GPU [s]: (its compute time, its KV read time). Full attention: each
    new token attends to its sequence's prior tokens and its predecessors in the pass; a window caps the keys and the
    cached tokens read (:func:`~.layers.attended_per_token`); MLA decodes in its absorbed form and reads its latent
    whole on every rank (:class:`~wseplan.workload.Attention`). ``vector_peak`` [FLOP/s]: the decode rows' score and
    context products run on the vector units at this rate (a per-query-head kernel, ``decode_attention:
    per_query_head``), else on the tensor cores at ``attention_frac`` of ``peak_flop_per_s``."""
    vec = vector_peak is not None and not att.latent_dim
    if att.plain:
        pairs = kv_read = None
        v_pairs = 0.0
        for g in sequences:  # in order: the decode rows, then the prompt rows
            p_g, r_g = g.tokens * (g.prior + (g.new + 1.0) / 2.0), g.seqs * (g.prior + g.new)
            if vec and g.decode:
                v_pairs, p_g = v_pairs + p_g, p_g * 0.0
            pairs, kv_read = (p_g, r_g) if pairs is None else (pairs + p_g, kv_read + r_g)
        attn = _attention_s(att.flop_per_pair, pairs / tokens, tokens, tp, peak_flop_per_s, cal)
        v_flop = att.flop_per_pair * v_pairs
    else:
        flop = v_flop = kv_read = 0.0
        for g in sequences:
            fpp = att.decode_flop_per_pair if g.decode else att.flop_per_pair
            f_g = g.tokens * fpp * attended_per_token(att, g.prior, g.new, decode=g.decode)
            if vec and g.decode:
                v_flop = v_flop + f_g
            else:
                flop = flop + f_g
            kv_read = kv_read + g.seqs * cached_tokens(att, g.prior + g.new)
        attn = _attention_s(1.0, flop / tokens, tokens, tp, peak_flop_per_s, cal)
    if vec:
        attn = attn + v_flop / tp / vector_peak
    kv_tok = att.kv_elems_per_token * kv_bytes / X.minimum(tp, att.kv_shards)
    return attn, kv_tok * X.asfloat(kv_read) / hbm


def pass_time_s(m, gpu, *, precision: str, sequences, logits_rows, tp, pp=1, cal: GpuCalibration,
                grouped_kv: bool = True, kv_precision: str | None = None, expert_layout: str = "best", adp=1.0):
    """One inference forward pass on one engine replica (``tp x pp`` GPUs) [s], its slowest stage and parts.

    Parameters (arrays broadcast)
    -----------------------------
    sequences : the pass's :class:`Sequences` (decode rows, prompt-chunk rows): its new tokens are the M of every
        GEMM; each attends to its sequence's keys; the cached K/V of every sequence is read from HBM (split over
        ``min(tp, kv_heads)``; MLA's latent whole on every rank)
    logits_rows : rows of the LM head (one per sequence that emits a token)
    grouped_kv : the decode attention kernel computes a KV head's query heads together on the tensor cores (else one
        thread block per query head and sequence on the vector units, at ``vector_attention_frac`` of the FP32 peak:
        the engine's ``decode_attention: per_query_head``; its repeated KV reads hit L2, as the blocks of a group
        run side by side)
    kv_precision : the KV cache's own format (``workload.KV_FORMATS``), else the weights' rule
    expert_layout : how the routed experts run over the TP group (:data:`.gpu_gemm.EXPERT_LAYOUTS`; an engine fixes one,
        :meth:`wseplan.devices.gpu.GpuFamily.engine_variants`; ``best``: the faster for this pass)
    adp : data-parallel attention ranks in the TP group (:mod:`.attention_dp`; 1: attention split over TP like the
        other weights; ``tp``: every GPU runs the attention of its own requests with the whole attention weights, the
        busiest holding ``ceil(s / adp)`` of a kind's ``s`` decode requests or prompt chunks (a chunk is one
        request's, on its rank: a pass's cost when the prompts are demand-driven; the engine's token budget is the
        replica's here, where engines give each rank one, so prompt-bound serving undercounts a DP-attention replica's
        prompt rate up to ``adp`` times); an all-gather before the MLP and a reduce-scatter after it: one all-reduce's
        bytes, two latencies)

    Every block type (:func:`~wseplan.workload.block_types`) is timed as what it is, its GEMMs reading the weights it
    uses (routed experts: those some token picked; shared experts; a dense layer's MLP) and its attention reading its
    own cache; the pass runs every layer, a pipeline stage the slowest run of ``ceil(L / pp)`` of them.

    Returns ``(latency_s, stage_s, parts)``: the pass's latency, the busy time of its slowest pipeline stage
    (the last: its blocks plus the LM head; equal to the latency at ``pp = 1``) and the parts [s].
    """
    sequences = tuple(sequences)
    tokens = sequences[0].tokens
    for g in sequences[1:]:
        tokens = tokens + g.tokens
    tokens = X.maximum(X.asfloat(tokens), 1e-12)
    tp = X.asfloat(tp)
    peak = gpu.peak_flop_per_s(precision) * gpu.gemm_library_rel(precision)
    links = _Links(gpu, cal)
    hbm = links.hbm_bw
    types = block_types(m)
    # the terms that depend only on the pass's tokens and the TP degree (GEMMs, element-wise, TP all-reduce, the
    # stage-to-stage hop) once per distinct pair: a decode round's passes repeat a few micro-batch sizes
    dp_att = np.any(X.asfloat(adp) > 1)
    groups = pair_groups(tokens, tp) if isinstance(tokens, np.ndarray) and not dp_att else None
    att_seqs, att_tokens, tp_att = sequences, tokens, tp
    if dp_att:  # the busiest attention rank's requests, on whole attention weights (1 / (tp / adp) of them)
        adp = X.asfloat(adp)
        att_seqs = tuple(g._replace(seqs=g.seqs * sh, tokens=g.tokens * sh)
                         for g, sh in ((g, rank_share(g.seqs, adp)) for g in sequences))
        att_tokens = att_seqs[0].tokens
        for g in att_seqs[1:]:
            att_tokens = att_tokens + g.tokens
        att_tokens, tp_att = X.maximum(X.asfloat(att_tokens), 1e-12), tp / adp
    tk, tq = (tokens, tp) if groups is None else (tokens[groups[0]], tp[groups[0]])
    # a published checkpoint that quantizes its routed experts alone reads its other weights in bf16 (gpt-oss)
    split = weight_bytes_split(m, precision, "decode")
    split = None if split[0] == split[1] == BYTES_PER_ELEMENT[precision] else split
    edge = edge_weight_bytes(m, precision, "decode")  # the LM head's (16-bit in a quantized checkpoint)
    gemms = [block_gemms_s(b, tk, tq, peak, hbm, precision, cal, split, expert_layout=expert_layout,
                           attention=(att_tokens, tp_att) if dp_att else None) for b in types]
    elem = _elementwise_s(m, tk, tq, hbm, cal)
    msg = activation_bytes_per_element(precision) * tk * m.d_model
    t_tp = 2.0 * links.tp_allreduce(msg, tq)
    if dp_att:  # an all-gather before the MLP and a reduce-scatter after it: two latencies, one all-reduce's bytes
        t_tp = X.where(adp > 1, 0.5 * t_tp + links.tp_allreduce(0.0, tq), t_tp)
    hop = send_recv_time_s(message_bytes=msg, link_bandwidth_bytes_per_s=links.nvlink_bw, link_latency_s=links.nvlink_lat)
    if groups is not None:
        inv = groups[1]
        gemms = [(g[inv], gm[inv]) for g, gm in gemms]
        elem, t_tp, hop = elem[inv], t_tp[inv], hop[inv]
    attn_peak = attention_peak_flop_per_s(gpu, attention_format(precision, kv_precision))
    kvb = kv_bytes(precision, kv_precision)
    vec_peak = None if grouped_kv else vector_peak_flop_per_s(gpu) * cal.vector_attention_frac
    layer, attn_parts, kv_parts = [], [], []
    launches = []
    for (gemm, _), b in zip(gemms, types):
        # the engine's kernel gaps scale with the block's kernels (a DeepSeek MoE block runs ~2.2x a dense one's)
        launch = cal.layer_overhead_s + cal.layer_launch_s * block_kernels(b) / DENSE_BLOCK_KERNELS
        launches.append(launch)
        attn, t_kv = _layer_attention(b.attention, att_seqs, att_tokens, tp_att, attn_peak, kvb, hbm, cal, vec_peak)
        t_attn = X.maximum(attn, t_kv)  # attention is compute- or KV-read-bound
        t_blk = gemm + attn + elem
        t_blk = t_blk - attn + t_attn
        layer.append(t_blk + t_tp + launch)
        attn_parts.append(t_attn)
        kv_parts.append(t_kv)
    logits = X.asfloat(logits_rows)
    if groups is not None and logits.shape == tokens.shape and np.array_equal(logits[groups[0]][groups[1]], logits):
        # one logits count per (tokens, TP) pair, as in every decode round: the LM head once per pair too
        t_head = _head_forward_time_s(m, tokens=logits[groups[0]], tp=tq, peak_flop_per_s=peak, hbm_bytes_per_s=hbm,
                                      precision=precision, cal=cal, weight_bytes=edge)[groups[1]]
    else:
        t_head = _head_forward_time_s(m, tokens=logits, tp=tp, peak_flop_per_s=peak, hbm_bytes_per_s=hbm,
                                      precision=precision, cal=cal, weight_bytes=edge)
    pp = X.asfloat(pp)
    p2p = (pp - 1.0) * hop
    L = m.num_layers
    host = cal.step_overhead_s + cal.step_host_s
    if len(types) == 1:  # a uniform model: L layers alike, a stage ceil(L / pp) of them
        (gemm, gemm_mem), = gemms
        total = L * layer[0] + t_head + p2p + host
        stage = X.ceil(L / pp) * layer[0] + t_head + X.where(pp > 1, hop, 0.0) + host
        parts = {"gemm": L * gemm, "gemm_memory_bound": L * gemm_mem, "attention": L * attn_parts[0],
                 "kv_read": L * kv_parts[0]}
    else:
        counts = [b.count for b in types]
        total = _layer_sum(counts, layer) + t_head + p2p + host
        stage = _layer_sum(slowest_run(types, L, pp, layer), layer) + t_head + X.where(pp > 1, hop, 0.0) + host
        parts = {"gemm": _layer_sum(counts, [g for g, _ in gemms]),
                 "gemm_memory_bound": _layer_sum(counts, [g for _, g in gemms]),
                 "attention": _layer_sum(counts, attn_parts), "kv_read": _layer_sum(counts, kv_parts)}
    stage = X.minimum(stage, total)
    over = L * launches[0] if len(types) == 1 else _layer_sum([b.count for b in types], launches)
    parts.update({"elementwise": L * elem, "tp_comm": L * t_tp, "overhead": over + host, "lm_head": t_head,
                  "p2p": p2p})
    return total, stage, parts


def forward_pass_time_s(m, gpu, *, precision: str, batch, new_tokens, context, tp, pp=1, cal: GpuCalibration,
                        logits_tokens=None):
    """One forward pass over ``batch`` sequences, each adding ``new_tokens`` on top of ``context`` cached ones.

    Prefill: ``new_tokens`` = prompt, ``context`` = 0. Decode step: ``new_tokens`` = 1, ``context`` = KV length.
    Returns (time [s], parts dict): :func:`pass_time_s` of one :class:`Sequences` (a decode step where
    ``new_tokens`` is 1 everywhere): ``tokens = batch * new_tokens``, each token attending to ``context +
    (new_tokens + 1) / 2`` keys (causal), ``batch * (context + new_tokens)`` KV tokens read.
    """
    b = np.asarray(batch, dtype=float)
    tokens = b * new_tokens
    seqs = Sequences(seqs=b, tokens=tokens, new=new_tokens, prior=np.asarray(context, dtype=float),
                     decode=bool(np.all(np.asarray(new_tokens) == 1)))
    t, _, parts = pass_time_s(m, gpu, precision=precision, sequences=(seqs,),
                              logits_rows=b if logits_tokens is None else logits_tokens, tp=tp, pp=pp, cal=cal)
    return t, parts
