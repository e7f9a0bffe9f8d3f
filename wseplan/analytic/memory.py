"""Memory accounting (no I/O): wafer SRAM for resident weights and for weight streaming; GPU HBM per layout.

All functions are pure and numpy-vectorized; inputs and outputs in bytes, tokens and FLOP/s.
"""
from __future__ import annotations

import numpy as np

from ..workload import KIND_BLOCK, kv_bytes_rows, weight_bytes_split
from .attention_dp import attention_params_per_block, kv_head_shards, rank_share
from .rows import run_starts

#: activation recomputation of a GPU training layout (codes 0-3). ``partial``: Megatron-LM's ``--recompute-method
#: block`` with ``--recompute-granularity full`` ("recompute the input activations of only a set number of individual
#: Transformer layers per pipeline stage and do the rest without any recomputing", megatron/training/arguments.py):
#: ``recompute_num_layers`` of a stage's layers are recomputed whole, the rest keep their activations; the layout
#: search takes the fewest layers that fit (as a fraction of the stage's layers, ``recompute_frac``).
RECOMPUTE = ("none", "selective", "full", "partial")
PARTIAL = 3


def wafer_stream_buffer_bytes(layer_weight_bytes: np.ndarray) -> float:
    """SRAM held by streamed weights during training [bytes]: the largest unit streamed at once (a layer, or one
    routed expert of an MoE layer: ``Workload.stream_units``), double-buffered for prefetch."""
    return 2.0 * float(np.max(layer_weight_bytes))


def stream_min_tokens_compute_bound(*, layer_weight_bytes: np.ndarray, layer_flop_per_token: np.ndarray,
                                    peak_flop_per_s: float, stream_bandwidth_bytes_per_s: float) -> float:
    """Tokens per step needed for the forward compute of every layer to hide its weight load [tokens].

    A layer is compute-bound when ``T * flop_per_token / peak >= weight_bytes / bandwidth``, i.e.
    ``T >= peak * weight_bytes / (bandwidth * flop_per_token)``; the largest such T over layers binds.
    With 16-bit weights and ``2 FLOP`` per weight per token this is ``peak / bandwidth`` (about 1e5 tokens
    for a CS-3 at 15.5 PFLOP/s fed at 150 GB/s, the 12 x 100 GbE port rate of the MemoryX glossary).
    """
    w = np.asarray(layer_weight_bytes, dtype=float)
    f = np.asarray(layer_flop_per_token, dtype=float)
    ok = (w > 0) & (f > 0)
    if not ok.any():
        return 0.0
    return float(np.max(peak_flop_per_s * w[ok] / (stream_bandwidth_bytes_per_s * f[ok])))


def gpu_activation_bytes_per_token_layer(*, activation_bytes_per_token: float, checkpoint_bytes_per_token: float,
                                         replicated_bytes_per_token: float, tp, recompute, sequence_parallel=True,
                                         recompute_frac=0.0):
    """Activation bytes kept per token per layer on one GPU [bytes] (Korthikanti et al. 2022, eqs. 2-4).

    ``none``/``selective`` keep the layer's activations (flash attention already drops the score terms that
    selective recomputation targets); with sequence parallelism everything is split over ``tp``, otherwise
    the norm/dropout part (``replicated_bytes_per_token``) is replicated. ``full`` keeps only the layer
    input (split over ``tp`` with sequence parallelism); ``partial`` (code 3) keeps the input of the
    ``recompute_frac`` of the layers recomputed whole and the activations of the rest (the mean layer).
    """
    tp = np.asarray(tp, dtype=float)
    code = np.asarray(RECOMPUTE.index(recompute) if isinstance(recompute, str) else recompute, dtype=float)
    full = checkpoint_bytes_per_token / np.where(sequence_parallel, tp, 1.0)
    if sequence_parallel:
        kept = activation_bytes_per_token / tp
    else:
        kept = replicated_bytes_per_token + (activation_bytes_per_token - replicated_bytes_per_token) / tp
    f = np.asarray(recompute_frac, dtype=float)
    return np.where(code == 2, full, np.where(code == PARTIAL, kept + f * (full - kept), kept))


def micro_batches_in_flight(*, num_stages, virtual_stages, micro_batches, rank):
    """Micro-batches whose activations pipeline rank ``rank`` (0 = the first stage) holds at once under 1F1B, in
    units of the rank's whole stage [count].

    Plain 1F1B (``v = 1``) runs ``p - rank - 1`` warm-up forwards before its first backward, so the rank holds
    ``p - rank`` micro-batches; the interleaved schedule with ``v`` model chunks per rank runs ``2 (p - rank - 1) +
    (v - 1) p`` warm-up chunk forwards, so it holds ``2 (p - rank - 1) + (v - 1) p + 1`` chunks of ``1/v`` of its
    stage (rank 0: ``p + (p - 1) / v``, the ``1 + (p - 1) / (p v)`` factor of Korthikanti et al., "Reducing Activation
    Recomputation in Large Transformer Models", MLSys 2023, sec. 4.2.3). Either way the warm-up stops at the
    ``m`` micro-batches the step has (Megatron-LM ``schedules.py``: the warm-up count is capped at the total number
    of (chunk) micro-batches), so a rank never holds more than ``m``: Meta's Llama 3 405B ran interleaved at
    ``m = p = 16`` without activation checkpointing (Llama Team 2024, arXiv:2407.21783, sec. 3.3.2).
    """
    p = np.asarray(num_stages, dtype=float)
    v = np.asarray(virtual_stages, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    r = np.minimum(float(rank), p - 1.0)
    held = np.where(v > 1, (2.0 * (p - r - 1.0) + (v - 1.0) * p + 1.0) / np.maximum(v, 1.0), p - r)
    return np.minimum(held, m)


def gpu_layout_memory(w, *, tp, pp, dp, zero_stage, recompute, micro_batch, virtual_stages, batch, context,
                      gradient_bytes_per_param: float, adam_state_bytes_per_param: float,
                      prefill_chunk_tokens: float, working_tokens=None, frozen_mlp: bool = False,
                      recompute_frac=0.0, logits_bytes_per_token: float = 0.0, adp=1.0) -> dict[str, np.ndarray]:
    """Per-GPU memory of the fullest pipeline stage for arrays of layouts [bytes], by part.

    ``w`` is the :class:`~wseplan.workload.Workload` (its phase decides training vs inference accounting; its
    batch and context are not used: ``batch`` and ``context`` arrays are). Every other argument broadcasts
    (``recompute`` as codes 0 none, 1 selective, 2 full). The first stage holds the embedding, the last the LM
    head; blocks split as evenly as possible (``ceil(L / pp)`` consecutive blocks on the fullest stage: the weights of
    the heaviest run of that many consecutive blocks, which is the whole model at ``pp = 1`` and bounds any contiguous
    split of models whose blocks differ, e.g. dense and MoE blocks interleaved; the mean block's KV cache, so windowed
    layers are counted). Inference keeps the KV
    cache of ``batch x context`` tokens and the activation working set of ``working_tokens`` tokens in flight
    (default: the batch in decode, one prefill chunk in prefill). Weights, gradients and
    Adam state split over TP and PP and, by ZeRO stage, over DP (1: optimizer state, 2: + gradients, 3: +
    weights; Rajbhandari et al., SC20). KV heads split over TP up to the number of KV heads (then replicate).
    Training activations: the micro-batches each stage holds under 1F1B, plain or interleaved, at most the step's
    (:func:`micro_batches_in_flight`: the first stage for an edge stage, the second for a middle one); inference: a
    chunk's working set. ``frozen_mlp``: the MLP weights are frozen (LoRA on the attention projections), so a block
    keeps ``w.frozen_mlp_bytes_per_token`` less per token (:func:`wseplan.workload.frozen_mlp_bytes_per_token`).
    Training's last stage also holds the LM head's logits of the micro-batch whose loss it computes,
    ``logits_bytes_per_token / tp`` per token (vocabulary x bytes per element; Korthikanti et al. 2022 sec. 4.1: the
    cross entropy's 4sbv bytes), beside the one micro-batch of activations 1F1B leaves it (audit31a M2: a 201k-token
    vocabulary's logits are 13-26 GB a micro-batch, beyond the headroom the layout search left).

    Inference with data-parallel attention (``adp`` ranks in the TP group, :mod:`.attention_dp`): each GPU holds its
    stage's attention weights over ``tp / adp`` GPUs (whole at ``adp = tp``) and the KV cache of the busiest rank's
    ``ceil(batch / adp)`` requests, split over ``min(tp / adp, kv_heads)``.

    Returns a dict of arrays: ``weights``, ``optimizer`` (gradients + Adam state), ``kv_cache``,
    ``activations``, ``total``.
    """
    tp, pp, dp, zs, mb, vpp = (np.asarray(v, dtype=float) for v in (tp, pp, dp, zero_stage, micro_batch, virtual_stages))
    rc = np.asarray(RECOMPUTE.index(recompute) if isinstance(recompute, str) else recompute, dtype=float)
    rf = np.asarray(recompute_frac, dtype=float)
    B = np.asarray(batch, dtype=float)
    C = np.asarray(context, dtype=float)
    L = max(w.num_blocks, 1)
    n = np.ceil(L / pp)
    blocks, run_w, run_p, edge_w, edge_p, edge_w_sum, edge_p_sum, act_l, ck_l, act_frozen = _layer_figures(w)
    if frozen_mlp:
        act_l = act_frozen
    single = pp == 1
    # the middle stages hold n = ceil(L / pp) blocks; the two edge stages (embedding, head) take the pp x n - L blocks
    # the split leaves over, half each, so an edge stage holds n - k blocks and its edge layer (k = 0 at pp <= 2 and
    # where the blocks divide evenly): the fullest of the two kinds is the fullest stage
    k = np.where(pp >= 3, np.minimum(np.floor((pp * n - L) / 2.0), n), 0.0)
    mid = _stage_parts(w, n, 0.0, 0.0, run_w, run_p, act_l, ck_l, blocks, rank=1, tp=tp, pp=pp, dp=dp, zs=zs, mb=mb, vpp=vpp,
                       rc=rc, rf=rf, B=B, C=C, gradient_bytes_per_param=gradient_bytes_per_param,
                       adam_state_bytes_per_param=adam_state_bytes_per_param,
                       prefill_chunk_tokens=prefill_chunk_tokens, working_tokens=working_tokens)
    edge = _stage_parts(w, n - k, np.where(single, edge_w_sum, edge_w), np.where(single, edge_p_sum, edge_p), run_w,
                        run_p, act_l, ck_l, blocks, rank=0, tp=tp, pp=pp, dp=dp, zs=zs, mb=mb, vpp=vpp, rc=rc, rf=rf,
                        B=B, C=C,
                        gradient_bytes_per_param=gradient_bytes_per_param,
                        adam_state_bytes_per_param=adam_state_bytes_per_param,
                        prefill_chunk_tokens=prefill_chunk_tokens, working_tokens=working_tokens)
    take_mid = (pp >= 3) & (mid["total"] > edge["total"])
    out = {key: np.where(take_mid, mid[key], edge[key]) for key in edge}
    if w.phase != "train" and np.any(np.asarray(adp) > 1):
        out = _attention_dp_memory(w, out, np.where(take_mid, n, n - k), tp, np.asarray(adp, dtype=float), B)
    if w.phase != "train" or not logits_bytes_per_token:
        return out
    # the loss's logits: on the one stage at pp = 1, else on the last stage (its own blocks and edge layer, the
    # micro-batches 1F1B leaves the last rank) when that is the fullest
    tok_mb = np.asarray(micro_batch, dtype=float) * C
    logits = logits_bytes_per_token / tp * tok_mb
    head = _stage_parts(w, n - k, edge_w, edge_p, run_w, run_p, act_l, ck_l, blocks, rank=np.inf, tp=tp, pp=pp, dp=dp,
                        zs=zs, mb=mb, vpp=vpp, rc=rc, rf=rf, B=B, C=C, gradient_bytes_per_param=gradient_bytes_per_param,
                        adam_state_bytes_per_param=adam_state_bytes_per_param,
                        prefill_chunk_tokens=prefill_chunk_tokens, working_tokens=working_tokens)
    head = dict(head, activations=head["activations"] + logits, total=head["total"] + logits)
    last = np.where(single, out["total"] + logits, head["total"])
    take_last = last > out["total"]
    res = {key: np.where(take_last, np.where(single, out[key], head[key]), out[key]) for key in out}
    res["activations"] = np.where(take_last & single, out["activations"] + logits, res["activations"])
    res["total"] = np.where(take_last, last, out["total"])
    return res


def _attention_dp_memory(w, out: dict, nb, tp, adp, B) -> dict:
    """``out`` (an inference stage's parts, attention split over TP) with ``adp`` data-parallel attention ranks: the
    stage's ``nb`` blocks' attention weights over ``tp / adp`` GPUs, the busiest rank's share of the KV cache."""
    m = w.arch
    kv_heads = kv_head_shards(m)
    tp_att = tp / adp
    attn = attention_params_per_block(m) * weight_bytes_split(m, w.precision, w.phase)[1] * nb
    weights = out["weights"] + attn * (1.0 / tp_att - 1.0 / tp)
    kv = out["kv_cache"] * rank_share(B, adp) * np.minimum(tp, kv_heads) / np.minimum(tp_att, kv_heads)
    res = dict(out, weights=weights, kv_cache=kv)
    res["total"] = out["total"] + (weights - out["weights"]) + (kv - out["kv_cache"])
    return res


def _stage_parts(w, nb, ew, ep, run_w, run_p, act_l, ck_l, blocks, *, rank, tp, pp, dp, zs, mb, vpp, rc, rf, B, C,
                 gradient_bytes_per_param, adam_state_bytes_per_param, prefill_chunk_tokens, working_tokens) -> dict:
    """Per-GPU bytes of a stage of ``nb`` consecutive blocks (the heaviest run of that many) and an edge layer of
    ``ew`` bytes / ``ep`` parameters (0: a middle stage) at pipeline rank ``rank`` (0: the first; 1: the busiest
    middle one), by part (:func:`gpu_layout_memory`)."""
    per_stage = nb
    n_run = np.clip(per_stage, 0, len(run_w) - 1).astype(np.int64)
    stage_w = run_w[n_run] + ew
    stage_p = run_p[n_run] + ep
    weights = stage_w / tp
    # KV heads split over TP up to their number; a latent (MLA) cache is one vector per token, replicated on every
    # TP rank (DeepSeek-V3 report, sec. 2.1.1)
    kv_heads = kv_head_shards(w.arch)
    if w.phase == "train":
        weights = np.where(zs >= 3, weights / dp, weights)
        grads = stage_p * gradient_bytes_per_param / tp
        grads = np.where(zs >= 2, grads / dp, grads)
        opt = stage_p * adam_state_bytes_per_param / tp
        opt = np.where(zs >= 1, opt / dp, opt)
        repl = 4.0 * w.arch.d_model if w.arch is not None else 0.0
        per_tok = gpu_activation_bytes_per_token_layer(activation_bytes_per_token=act_l, checkpoint_bytes_per_token=ck_l,
                                                       replicated_bytes_per_token=repl, tp=tp, recompute=rc,
                                                       recompute_frac=rf)
        in_flight = micro_batches_in_flight(num_stages=pp, virtual_stages=vpp, micro_batches=np.ceil(np.ceil(B / dp) / mb),
                                            rank=rank)
        tok_mb = mb * C
        act = per_tok * tok_mb * per_stage * in_flight
        recomputes = (rc == 2) | ((rc == PARTIAL) & (rf > 0))
        act = act + np.where(recomputes, act_l / tp * tok_mb, 0.0)  # one layer's activations in its recomputed backward
        kv = np.zeros_like(weights * act)
        out = dict(weights=weights + 0.0 * act, optimizer=opt + grads + 0.0 * act, kv_cache=kv, activations=act)
    else:
        shape = np.broadcast_shapes(np.shape(B), np.shape(C))
        kv_block = _kv_block_mean(w, np.broadcast_to(B, shape).ravel(), np.broadcast_to(C, shape).ravel(),
                                  blocks).reshape(shape)
        kv = per_stage * kv_block / np.minimum(tp, kv_heads)
        if working_tokens is not None:
            tif = np.asarray(working_tokens, dtype=float)
        else:
            tif = B if w.phase == "decode" else np.minimum(B * C, prefill_chunk_tokens)
        act = w.working_set_bytes_per_token * tif / tp * np.ones_like(weights)
        z = np.zeros_like(kv + act + weights)
        out = dict(weights=weights + z, optimizer=z, kv_cache=kv + z, activations=act + z)
    out["total"] = out["weights"] + out["optimizer"] + out["kv_cache"] + out["activations"]
    return out


_FIGURES: dict = {}


def _layer_figures(w):
    """The per-layer reductions :func:`gpu_layout_memory` needs, once per workload (a frozen dataclass): the block
    mask, the weight bytes and parameters of the heaviest run of ``n`` consecutive blocks for every ``n`` from 0 to the
    block count (arrays indexed by ``n``), the largest edge layer's (embedding, head; a tied head's bytes at least) and
    the edge layers' sums, the largest block activation and checkpoint bytes per token, and the largest block
    activation bytes per token with a frozen MLP."""
    hit = _FIGURES.get(id(w))
    if hit is not None and hit[0] is w:
        return hit[1]
    blocks = w.kind == KIND_BLOCK
    run_w = _heaviest_runs(w.weight_bytes[blocks])
    run_p = _heaviest_runs(w.params[blocks])
    edge_w = float(w.weight_bytes[~blocks].max()) if (~blocks).any() else 0.0
    edge_p = float(w.params[~blocks].max()) if (~blocks).any() else 0.0
    if w.tied_head_bytes:
        edge_w = max(edge_w, w.tied_head_bytes)
    act_l = float(w.activation_bytes_per_token[blocks].max()) if blocks.any() else 0.0
    ck_l = float(w.checkpoint_bytes_per_token[blocks].max()) if blocks.any() else 0.0
    frozen = w.frozen_mlp_bytes_per_token
    act_f = act_l if frozen is None or not blocks.any() else \
        float((w.activation_bytes_per_token[blocks] - frozen[blocks]).max())
    out = (blocks, run_w, run_p, edge_w, edge_p, float(w.weight_bytes[~blocks].sum()), float(w.params[~blocks].sum()),
           act_l, ck_l, act_f)
    if len(_FIGURES) >= 64:
        _FIGURES.clear()
    _FIGURES[id(w)] = (w, out)  # the entry keeps w alive: its id is not reused while the entry stands
    return out


def _heaviest_runs(values) -> np.ndarray:
    """``out[n]``: the largest sum of ``n`` consecutive entries of ``values`` (``out[0] = 0``; ``out[len]`` the total)."""
    v = np.asarray(values, dtype=float)
    cs = np.concatenate([[0.0], np.cumsum(v)])
    out = np.zeros(len(v) + 1)
    if len(v) and v.max() == v.min():  # equal blocks: n of them
        return np.arange(len(v) + 1) * v[0]
    for n in range(1, len(v) + 1):
        out[n] = (cs[n:] - cs[:-n]).max()
    return out


def _kv_block_mean(w, b: np.ndarray, c: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """Mean KV-cache bytes of a transformer block per row [bytes] for ``b`` sequences of ``c`` tokens (1-D arrays).

    A row's value depends on its batch and context alone, so it is computed once per run of consecutive rows
    with equal ones (a sweep's layouts of one batch and context; the (rows x layers) table is the costly part)
    and repeated: the same numbers as computing every row."""
    n = len(b)
    if not blocks.any():
        return np.zeros(n)
    if n > 1:
        starts = run_starts(b, c)
        if len(starts) < n:
            per_run = kv_bytes_rows(w, b[starts], c[starts])[:, blocks].mean(axis=1)
            return np.repeat(per_run, np.diff(np.append(starts, n)))
    return kv_bytes_rows(w, b, c)[:, blocks].mean(axis=1)
