"""The region search of the resident wafer family: the square side of the PE regions its layer groups run on, per
pass kind (decode GEMV, prefill GEMM), and the hand-over between groups that both the search and the pass time count.

A side must tile the wafer, hold the largest layer and leave a region for every layer group of the fullest wafer
(WaferLLM's region choice, He et al., OSDI 2025). Among those, decode takes the side whose decode round is
fastest, composed as :meth:`.WaferFamily.pass_time` and :func:`~wseplan.analytic.engine.decode_round` compose it
(smaller regions give more layer groups, each busy with its own micro-batch); prefill the side with the fastest
pass over the fullest wafer's layers.
"""
from __future__ import annotations

import numpy as np

from ..analytic import fabric as fab
from ..analytic import wse_time as wt
from ..analytic.rows import unique_rows
from .wafer_row import MEMO_MAX


def _remembered(ctx, memo_name: str, key, compute):
    """``compute()`` for one question, remembered in the setup's memo ``memo_name`` under ``key`` (``None``: not
    remembered, e.g. several rows at once); the memo starts again when it holds :data:`.wafer_row.MEMO_MAX`."""
    if key is None:
        return compute()
    memo = ctx.__dict__.setdefault(memo_name, {})
    hit = memo.get(key)
    if hit is None:
        hit = compute()
        if len(memo) >= MEMO_MAX:
            memo.clear()
        memo[key] = hit
    return hit


def best_side(ctx, cfg, phase, mb, tokens, layer_bytes):
    """Square side minimising one pass kind's time on the replica, among sides that tile the wafer, hold the
    largest layer and leave room for every layer group (WaferLLM's region choice). Decode (``mb``: positions per
    sequence, k + 1 under speculative decoding): the decode round as :meth:`.WaferFamily.pass_time` and
    :func:`~wseplan.analytic.engine.decode_round` compose it, for one micro-batch and for as many as there are
    layer groups (smaller regions give more groups, each busy with its own micro-batch); prefill (``mb``: prompts
    per pass): one pass over the fullest wafer's layers and the hand-overs between its groups."""
    sides = ctx.sides
    n = len(layer_bytes)
    regions = (ctx.R // sides) * (ctx.C // sides)
    capr = sides ** 2 * ctx.sram_pe * (1.0 - ctx.reserve)
    ok = capr[None, :] >= layer_bytes[:, None]
    # every wafer's groups fit its regions when the fullest wafer's do (the group count grows with the bytes)
    sb_max = np.where(cfg["_valid"], cfg["_sb"], -np.inf).max(axis=1)
    ok &= np.ceil(sb_max[:, None] / capr[None, :]) <= np.maximum(regions, 1)[None, :]
    cost = np.full((n, len(sides)), np.inf)
    cols = np.nonzero(ok.any(axis=0))[0]
    if len(cols):
        tok = np.broadcast_to(np.asarray(tokens, dtype=float), (n,))
        sd = sides[cols][None, :]
        if phase == "decode":
            est = _decode_round_cycles(ctx, cfg, mb, tok, cols, sd[0], capr[cols])
        else:
            mb = np.broadcast_to(np.asarray(mb, dtype=float), (n,))
            tot = _side_cycles(ctx, phase, np.broadcast_to(mb[:, None], (n, len(cols))),
                                    np.broadcast_to(tok[:, None], (n, len(cols))), sd)
            # and the hand-overs between the fullest wafer's layer groups (as pass_time: the activations cross
            # the region, then a kernel launch), so that smaller regions pay for the stages they add
            grp = np.minimum(np.ceil(sb_max[:, None] / capr[None, cols]), np.maximum(cfg["_nl"].max(axis=1), 1.0)[:, None])
            hand = handover_cycles(ctx.fk, sd, sd, tok[:, None] * ctx.m.d_model * ctx.fk["dtype_bytes"])
            est = tot * np.maximum(cfg["_nl"].max(axis=1), 1.0)[:, None] + np.maximum(grp - 1.0, 0.0) * hand
        cost[:, cols] = np.where(ok[:, cols], est, np.inf)
    anyok = np.isfinite(cost).any(axis=1)
    return np.where(anyok, sides[np.argmin(np.where(np.isfinite(cost), cost, np.inf), axis=1)], float(min(ctx.R, ctx.C)))

def _decode_round_cycles(ctx, cfg, per_seq, kv, cols, sides, capr):
    """Decode round [cycles, rows x sides] on each square side, composed as :meth:`.WaferFamily.pass_time` and
    :func:`~wseplan.analytic.engine.decode_round` compose it: the layer groups per wafer as :meth:`.WaferFamily._groups`, a
    micro-batch's pass (every block, the hand-overs between groups, the LM head, the wafer-to-wafer links) and its
    slowest group (a wafer's first group ends with a hand-over, its last with the LM head or the link to the next
    wafer), the round ``max(pass, micro-batches x slowest group)`` for each micro-batch count the round tries
    (powers of two up to ``min(groups, batch)`` and that bound), the fastest: smaller regions give more groups,
    each busy with its own micro-batch."""
    B = np.asarray(cfg["batch"], dtype=float)[:, None]
    valid, nl = cfg["_valid"][:, :, None], cfg["_nl"][:, :, None]
    g = np.where(valid, np.minimum(np.maximum(1.0, np.ceil(cfg["_sb"][:, :, None] / capr[None, None, :])),
                                   np.maximum(nl, 1.0)), 0.0)
    G = g.sum(axis=1)
    nw = cfg["_valid"].sum(axis=1)[:, None]
    L = cfg["_nl"].sum(axis=1)[:, None]
    gs = np.maximum(g, 1.0)
    q = np.floor_divide(nl, gs)
    first_layers = q + (nl - q * gs > 0)
    last = (np.arange(nl.shape[1])[None, :] == (nw - 1))[:, :, None]
    shape = G.shape
    best = np.full(shape, np.inf)
    bound = np.maximum(np.minimum(G, B), 1.0)
    powers = 2.0 ** np.arange(int(np.log2(max(float(bound.max()), 1.0))) + 1)
    for top in [np.minimum(p, bound) for p in powers] + [bound]:
        seqs = np.ceil(B / top)
        count = np.ceil(B / seqs)
        rows = seqs * per_seq
        blk = _side_cycles(ctx, "decode", np.broadcast_to(rows, shape), np.broadcast_to(kv[:, None], shape),
                                np.broadcast_to(sides[None, :], shape))
        head = _side_cycles(ctx, "head", np.broadcast_to(rows, shape), np.zeros(shape),
                                 np.broadcast_to(sides[None, :], shape))
        act = rows * ctx.m.d_model * ctx.fk["dtype_bytes"]
        hand = handover_cycles(ctx.fk, sides[None, :], sides[None, :], act)
        x = fab.cross_system_transfer_s(message_bytes=act, bandwidth_bytes_per_s=ctx.system.io_bandwidth_bytes_per_s.si,
                                        latency_s=ctx.c.cross_system_latency_s.si) * ctx.clock
        x = np.broadcast_to(x, shape)
        t_last = q * blk[:, None, :] + np.where(last, head[:, None, :], x[:, None, :])
        t_first = first_layers * blk[:, None, :] + hand[:, None, :]
        stage = np.where(valid, np.where(g > 1, np.maximum(t_first, t_last), t_last), -np.inf).max(axis=1)
        lat = L * blk + (G - nw) * hand + head + (nw - 1.0) * x
        best = np.minimum(best, np.maximum(lat, count * stage))
    return best

def _side_cycles(ctx, phase, mb, tok, sd):
    """Cycles of one block [rows x sides] of the pass kind: ``mb`` sequences (decode) or prompts (prefill) and
    ``tok`` KV or prompt tokens per row and side on square sides ``sd``, once per distinct (sequences, tokens,
    side); one question's remembered per setup."""
    shape = mb.shape
    sdf = np.broadcast_to(sd, shape).ravel()
    mbf, tokf = np.ravel(mb), np.ravel(tok)
    key = (phase, mbf.tobytes(), tokf.tobytes(), sdf.tobytes()) if shape[0] == 1 else None
    return _remembered(ctx, "_side_memo", key, lambda: _block_cycles(ctx, phase, mbf, tokf, sdf)).reshape(shape)

def _block_cycles(ctx, phase, mb, tok, sd):
    first, inv = unique_rows(mb, tok, sd)
    s = sd[first]
    if phase == "head":
        blk = wt.head_decode_cycles_array(arch=ctx.m, batch=mb[first], rows=s, cols=s, fk=ctx.fk,
                                          gemv_mac_efficiency_frac=ctx.c.gemv_mac_efficiency_frac.si)
    elif phase == "decode":
        blk = wt.decode_block_cycles_array(arch=ctx.m, batch=mb[first], context=tok[first], rows=s, cols=s, fk=ctx.fk,
                                           gemv_mac_efficiency_frac=ctx.c.gemv_mac_efficiency_frac.si)
    else:
        blk = wt.prefill_block_cycles_array(arch=ctx.m, tokens=tok[first], batch=1, rows=s, cols=s,
                                            fk=ctx.fk, gemm_mac_efficiency_frac=ctx.c.gemm_mac_efficiency_frac.si,
                                            gemm_step_overhead_cycles=ctx.c.gemm_step_overhead_cycles.si)
    return sum(np.asarray(v, dtype=float) for v in blk.values())[inv]


def handover_cycles(fk: dict, rows, cols, act_bytes):
    """One hand-over of a pass's activations from a layer group's region to the next on the wafer [cycles]: the
    activations (``act_bytes``, spread over the region's shorter side) cross ``rows + cols`` hops, then a kernel
    launch. Used by the pass time and by the region search (arrays broadcast; ``wafer_row`` has its float form)."""
    return fab.message_cycles(hops=rows + cols, message_bytes=act_bytes / np.minimum(rows, cols),
                              hop_latency_cycles=fk["hop_latency_cycles"], link_bytes_per_cycle=fk["link_bytes_per_cycle"],
                              wavelet_bytes=fk["wavelet_bytes"]) + fk["per_kernel_overhead_cycles"]
