"""One transformer decode step (batch 1) on a P x Q region, composed from the mesh kernels."""

from __future__ import annotations

import math

import numpy as np

from wseplan.sim import _phases as _m
from wseplan.sim.mesh_types import BroadcastAlgo, KernelResult, MeshParams, ReduceAlgo
from wseplan.sim._errors import InputError


def decode_layer(params: "MeshParams", *, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int,
                 context: int, region=None, gated_mlp: bool = True, dtype_bytes: int = 2,
                 reduce_algo: "ReduceAlgo | None" = None, softmax_cycles_per_value: float = 4.0,
                 activation_cycles_per_value: float = 4.0) -> "KernelResult":
    """Simulate one decoder layer for one token (batch 1) with all weights and the KV cache on the region.

    Parameters
    ----------
    params : MeshParams
    d_model, n_heads, n_kv_heads, d_ff : int
        Model width [values], attention heads and key/value heads [count], MLP width [values].
    context : int
        Tokens in the KV cache [tokens].
    region : (int, int), optional
        P x Q PEs; default the whole grid.
    gated_mlp : bool
        SwiGLU-style MLP (gate and up projections) when True.
    dtype_bytes : int
        Bytes per weight, activation and cache value [bytes].
    reduce_algo : ReduceAlgo or None
        Reduction algorithm of every GEMV (None: faster that fits the colours).
    softmax_cycles_per_value, activation_cycles_per_value : float
        Core time per exponential / SiLU evaluation [cycles] (estimates; no public figure).

    Returns
    -------
    KernelResult
        ``phase_cycles`` keys are ``<part>.<phase>``; :meth:`KernelResult.part_cycles` sums them by part
        (norm1, qkv, attention, o_proj, norm2, mlp_up, mlp_down).

    Notes
    -----
    Layout (every weight matrix tiled over the whole region, WaferLLM-style alternating orientation so that
    no transpose is needed): the hidden vector lives on column 0 (d_model/P values per row). QKV and MLP-up
    GEMVs split K over rows and leave their outputs on row 0 (n/Q per column); O-projection and MLP-down
    split K over columns and leave their outputs back on column 0. Attention: the KV cache is split by tokens
    over rows (context/P each) and by features over columns (head_dim*heads/Q each, GQA sharing K/V within a
    column); scores need a reduction across the columns of a head when Q > n_heads, softmax needs max and
    sum over rows, and P·V partials are reduced over rows to row 0. RMSNorm is a one-value all-reduce over
    column 0. Each phase starts from the per-PE finish times of the one before (max-plus composition), so
    skew between PEs carries over. Routes are reloaded between sub-kernels, so ``colors_used`` is the
    largest number any one sub-kernel needs. Assumed: the fused QKV output is laid out so each column holds
    the q, k and v features its attention tile needs; the new token's k, v travel with the q broadcast.
    """
    P, Q = _m._region(params, region if region is not None else (params.rows, params.cols))
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads), ("d_ff", d_ff),
                    ("context", context)):
        _m._positive_int(name, v)
    if d_model % n_heads or n_heads % n_kv_heads:
        raise InputError(f"d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads}: need n_heads | d_model "
                         "and n_kv_heads | n_heads")
    dt = _m._check_dtype(dtype_bytes)
    head_dim = d_model // n_heads
    d_q, d_kv = d_model, n_kv_heads * head_dim
    n_qkv = d_q + 2 * d_kv
    n_up = d_ff * (2 if gated_mlp else 1)
    if P > min(d_model, d_ff) or Q > min(n_qkv, d_model, d_ff):
        raise InputError(f"region={P}x{Q}: too large for d_model={d_model}, d_ff={d_ff} (empty tiles)")
    p = params
    tr = _m._Trace(p, P, Q)
    chain = BroadcastAlgo.CHAIN
    store = p.wavelet_bytes / p.sram_bytes_per_cycle
    epw = max(1, p.wavelet_bytes // dt)
    ready = np.zeros((P, Q))
    algo = None if reduce_algo is None else ReduceAlgo(reduce_algo)

    def local(cycles, where=(slice(None), slice(None))):
        ready[where] += cycles
        tr.busy[where] += cycles

    def norm(name):
        seg = math.ceil(d_model / P)
        local(seg * max(2.0 / p.flop_per_cycle, dt / p.sram_bytes_per_cycle), (slice(None), slice(0, 1)))
        fin = _m._allreduce_into(tr, ready=ready, nbytes=4, dtype_bytes=4, algo=algo, name=name, rows=P, cols=1)
        ready[:, :1] = np.maximum(ready[:, :1], fin)
        local(seg * max(1.0 / p.flop_per_cycle, 2 * dt / p.sram_bytes_per_cycle), (slice(None), slice(0, 1)))
        tr.end_kernel()
        return ready[:, 0].copy()

    def gemv(name, k, n, axis, x_ready):
        nonlocal ready
        ready, out = _m._gemv_core(tr, k=k, n=n, axis=axis, ready=ready, x_ready=x_ready, bcast_algo=chain,
                                   reduce_algo=algo, dtype_bytes=dt, name=name)
        ready = ready.copy()
        tr.end_kernel()
        return out

    # 1. RMSNorm on column 0, then QKV (K over rows, output on row 0).
    x = norm("norm1")
    out = gemv("qkv", d_model, n_qkv, "row", x)
    # 2. Attention.
    tok = math.ceil(context / P)
    fq, fkv = math.ceil(d_q / Q), math.ceil(d_kv / Q)
    heads_per_col = max(1, math.ceil(n_heads / Q))
    cols_per_head = max(1, Q // n_heads)
    m_q = _m._wavelets(math.ceil(n_qkv / Q), dt, p)
    g = tr.grid(ready, "col")
    _, fin = _m._bcast_phase(tr, axis="col", algo=chain, t0=out, ready=g, consume_total=m_q * store,
                             num_wavelets=m_q, name="attention")
    tr.grid(tr.busy, "col")[...] += m_q * store
    ready = np.maximum(ready, fin.T)
    tr.end_phase("attention.broadcast", ready.max())
    tr.end_kernel()
    mac_kv = lambda: max(2.0 * tok * fq / p.flop_per_cycle,  # noqa: E731
                         (tok * fkv + tok * heads_per_col) * dt / p.sram_bytes_per_cycle)
    local(mac_kv())                                                          # q . K partial scores
    tr.end_phase("attention.scores", ready.max())
    if cols_per_head > 1:
        nseg = Q // cols_per_head
        used = nseg * cols_per_head
        m_s = _m._wavelets(tok, dt, p)
        seg_ready = ready[:, :used].reshape(P * nseg, cols_per_head)
        sub = _m._Trace(p, P * nseg, cols_per_head)
        done = _m._reduce_phase(sub, axis="row", algo=_m._pick_reduce(
            sub, algo, ready=seg_ready, ready_step=0.0, num_wavelets=m_s, dtype_bytes=dt, epw=epw,
            other_colors=1), ready=seg_ready, ready_step=0.0, num_wavelets=m_s, dtype_bytes=dt, epw=epw)
        _, back = _m._bcast_phase(sub, axis="row", algo=chain, t0=done[:, 0], ready=seg_ready,
                                  consume_total=m_s * store, num_wavelets=m_s, name="attention")
        ready[:, :used] = np.maximum(seg_ready, back).reshape(P, used)
        tr.busy[:, :used] += sub.busy.reshape(P, used)
        tr.east[:, :used - 1] += np.pad(sub.east.reshape(P, nseg, -1), ((0, 0), (0, 0), (0, 1))).reshape(
            P, used)[:, :used - 1]
        tr.west[:, :used - 1] += np.pad(sub.west.reshape(P, nseg, -1), ((0, 0), (0, 0), (0, 1))).reshape(
            P, used)[:, :used - 1]
        tr.phase_colors.update(("seg",) + c for c in sub.phase_colors)
        tr.hop_floor += 2 * (cols_per_head - 1) * p.hop_latency_cycles
        tr.end_phase("attention.head_reduce", ready.max())
        tr.end_kernel()
    local(tok * heads_per_col * softmax_cycles_per_value)                   # exp
    if P > 1:                                                               # max and sum over the tokens' rows
        m_sm = _m._wavelets(2 * heads_per_col, 4, p)
        g = tr.grid(ready, "col")
        done = _m._reduce_phase(tr, axis="col", algo=_m._pick_reduce(
            tr, algo, ready=g, ready_step=0.0, num_wavelets=m_sm, dtype_bytes=4, epw=1, other_colors=1),
            ready=g, ready_step=0.0, num_wavelets=m_sm, dtype_bytes=4, epw=1)
        _, back = _m._bcast_phase(tr, axis="col", algo=chain, t0=done[:, 0], ready=g,
                                  consume_total=m_sm * store, num_wavelets=m_sm, name="attention")
        ready = np.maximum(ready, back.T)
        tr.end_phase("attention.softmax_reduce", ready.max())
    tr.end_kernel()
    local(mac_kv())                                                          # p . V partial context
    tr.end_phase("attention.pv", ready.max())
    if P > 1:
        m_c = _m._wavelets(fq, dt, p)
        g = tr.grid(ready, "col")
        done = _m._reduce_phase(tr, axis="col", algo=_m._pick_reduce(
            tr, algo, ready=g, ready_step=0.0, num_wavelets=m_c, dtype_bytes=dt, epw=epw, other_colors=0),
            ready=g, ready_step=0.0, num_wavelets=m_c, dtype_bytes=dt, epw=epw)
        ready = np.maximum(ready, done.T)
        out = done[:, 0]
        tr.end_phase("attention.reduce", ready.max())
    else:
        out = ready[0].copy()
    tr.end_kernel()
    # 3. Output projection (K over columns, output on column 0), residual, RMSNorm, MLP.
    x = gemv("o_proj", d_q, d_model, "col", out)
    local(math.ceil(d_model / P) * dt * 3 / p.sram_bytes_per_cycle, (slice(None), slice(0, 1)))  # residual
    x = norm("norm2")
    out = gemv("mlp_up", d_model, n_up, "row", x)
    local(math.ceil(d_ff / Q) * activation_cycles_per_value, (slice(0, 1), slice(None)))
    tr.end_phase("mlp_up.activation", ready.max())
    x = gemv("mlp_down", d_ff, d_model, "col", ready[0].copy())
    local(math.ceil(d_model / P) * dt * 3 / p.sram_bytes_per_cycle, (slice(None), slice(0, 1)))
    tr.end_phase("mlp_down.residual", ready.max())
    # SRAM: all weight tiles and the KV-cache tile are resident at once, plus the largest working buffer.
    weights = (math.ceil(d_model / P) * math.ceil(n_qkv / Q) + math.ceil(d_q / Q) * math.ceil(d_model / P)
               + math.ceil(d_model / P) * math.ceil(n_up / Q) + math.ceil(d_ff / Q) * math.ceil(d_model / P))
    kv = 2 * tok * fkv
    buffers = max(math.ceil(n_qkv / Q), math.ceil(n_up / Q), tok * heads_per_col, fq, math.ceil(d_model / P))
    tr.sram_bytes = 0.0
    tr.reasons = [r for r in tr.reasons if not r.startswith("SRAM")]
    tr.need_sram((weights + kv + 2 * buffers) * dt,
                 f"layer weights ({weights * dt} B) + KV cache ({kv * dt} B) + buffers")
    return tr.result(float(ready.max()))
