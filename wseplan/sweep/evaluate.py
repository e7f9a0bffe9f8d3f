"""Evaluation of one task: :func:`evaluate_task` (group, start, stop) -> columns (name -> numpy array).

This is the one interface between the engines and the per-configuration models; the functions below compose
fit, time and cost as numpy arrays (see the package docstring).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from .plan import Group
from .schema import BOTTLENECKS


# =============================================================================================
# Evaluation of one task
# =============================================================================================
def _config_arrays(g: Group, start: int, stop: int) -> dict:
    idx = np.arange(start, stop)
    ib, ic, io, il = np.unravel_index(idx, g.shape)
    out = {"batch": g.batches[ib], "context": g.contexts[ic], "output_tokens": g.outputs[io]}
    for k, a in g.layouts.items():
        out[k] = a[il]
    return out


def evaluate_task(g: Group, start: int, stop: int) -> dict:
    """Columns (name -> numpy array) of configurations ``[start, stop)`` of group ``g``."""
    cfg = _config_arrays(g, start, stop)
    if g.target.kind == "gpu":
        res = _gpu_train(g, cfg) if g.phase == "train" else _gpu_infer(g, cfg)
    else:
        res = _wafer_train(g, cfg) if g.phase == "train" else _wafer_infer(g, cfg)
    res.update(_cost(g, cfg, res))
    return _columns(g, cfg, res)


def _argmax_name(parts: dict) -> np.ndarray:
    """Code (index into BOTTLENECKS) of the largest part; the first in ``parts`` order wins a tie."""
    names = list(parts)
    stack = np.stack(np.broadcast_arrays(*[np.asarray(parts[k], dtype=float) for k in names]))
    codes = np.asarray([BOTTLENECKS.index(k) for k in names])
    return codes[np.argmax(stack, axis=0)]


# ---------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------
def _gpu_infer(g: Group, cfg: dict) -> dict:
    from ..analytic.gpu_time import forward_pass_time_s, gpu_calibration
    from ..fit import build_workload, gpu_layout_memory
    from ..workload import BYTES_PER_ELEMENT, activation_bytes_per_element, kv_bytes_per_element, total_params

    m, gpu, prec, cat = g.model, g.target.device, g.precision, g.catalog
    cal = gpu_calibration()
    B, C, O = cfg["batch"], cfg["context"], cfg["output_tokens"]
    tp, pp, dp = cfg["tp"], cfg["pp"], cfg["dp"]
    reserve = cat.defaults.gpu_hbm_reserve_frac.si
    # engine batch limit: gpu_time.max_batch_in_memory, element-wise
    wb = max(BYTES_PER_ELEMENT[prec], 0.5)
    cap = gpu.hbm_bytes.si * (1.0 - reserve)
    weights = total_params(m) * wb / (tp * pp)
    act = activation_bytes_per_element(prec) * 2048 * (4 * m.d_model + 2 * m.d_ff) / tp
    ctx_fit = C + np.where(O > 0, O, 1.0)
    kv_seq = m.num_layers / pp * 2.0 * m.num_kv_heads * m.head_dim_ * kv_bytes_per_element(prec) \
        / np.minimum(tp, m.num_kv_heads) * ctx_fit
    free = cap - weights - act
    fit_b = np.where(kv_seq > 0, np.maximum(np.floor_divide(free, kv_seq), 0.0), 0.0)
    run_b = np.where(fit_b <= 0, B, np.minimum(B, fit_b))
    out: dict = {}
    if g.phase == "prefill":
        t, parts = forward_pass_time_s(m, gpu, precision=prec, batch=run_b, new_tokens=C, context=0, tp=tp, pp=pp,
                                       cal=cal, logits_tokens=run_b)
        waves = np.ceil(B / run_b)
        out.update(step_s=t * waves, ttft_s=t, tokens_per_s=dp * B * C / (t * waves))
        bd = _infer_breakdown(parts, 1.0)
        out["prompt_tokens"] = dp * B * C
        out["prefill_s"] = t * waves
    else:
        single = O <= 0
        kw = dict(precision=prec, batch=run_b, tp=tp, pp=pp, cal=cal)
        if single.all():  # one decode step only: the request passes are not needed
            t_dec1, p1 = forward_pass_time_s(m, gpu, new_tokens=1, context=C, **kw)
            t_pre, t_dec, p2 = t_dec1, t_dec1, p1
        elif not single.any():
            t_pre, _ = forward_pass_time_s(m, gpu, new_tokens=C, context=0, **kw)
            t_dec, p2 = forward_pass_time_s(m, gpu, new_tokens=1, context=C + O / 2.0, **kw)
            t_dec1, p1 = t_dec, p2
        else:
            t_dec1, p1 = forward_pass_time_s(m, gpu, new_tokens=1, context=C, **kw)
            t_pre, _ = forward_pass_time_s(m, gpu, new_tokens=C, context=0, **kw)
            t_dec, p2 = forward_pass_time_s(m, gpu, new_tokens=1, context=C + O / 2.0, **kw)
        steps = np.maximum(O - 1.0, 0.0)
        req = t_pre + steps * t_dec
        bd1 = _infer_breakdown(p1, 1.0)
        bd2 = _infer_breakdown(p2, steps)
        bd2["prefill"] = t_pre
        bd = {k: np.where(single, bd1[k], bd2[k]) for k in bd1}
        bd["prefill"] = np.where(single, -np.inf, t_pre)
        out.update(step_s=np.where(single, t_dec1, req), ttft_s=np.where(single, np.nan, t_pre),
                   tpot_s=np.where(single, t_dec1, t_dec),
                   tokens_per_s=np.where(single, dp * run_b / t_dec1, dp * run_b * O / req),
                   tokens_per_s_per_user=np.where(single, 1.0 / t_dec1, O / req))
        out["decode_step_s"] = out["tpot_s"]
        out["output_tokens_per_step"] = dp * run_b
        out["prompt_tokens"] = np.where(single, np.nan, dp * run_b * C)
        out["prefill_s"] = out["ttft_s"]
    out["bottleneck"] = _argmax_name(bd)
    out["batch_in_flight"] = run_b
    # memory: wseplan.fit.gpu_layout_memory at the fit's phase and KV length
    fit_phase = "prefill" if g.phase == "prefill" else "decode"
    w = build_workload(m, cat, precision=prec, phase=fit_phase, batch=1, context=1)
    kvctx = C if g.phase == "prefill" else C + O
    mem = gpu_layout_memory(w, tp=tp, pp=pp, dp=np.ones_like(tp), zero_stage=1, recompute="selective", catalog=cat,
                            batch=B, context=kvctx)["total"]
    out.update(per_device_bytes=mem, capacity_bytes=np.full_like(mem, cap), fits=mem <= cap,
               num_devices=tp * pp * dp)
    return out


def _infer_breakdown(parts: dict, scale) -> dict:
    """gpu_time._infer_breakdown for arrays (compute, hbm_bandwidth, nvlink, overhead)."""
    gemm = parts["gemm"] + parts["lm_head"]
    gemm_mem = parts["gemm_memory_bound"]
    kv, att = parts["kv_read"], parts["attention"]
    return {"compute": scale * (gemm - gemm_mem + np.maximum(att - kv, 0.0)),
            "hbm_bandwidth": scale * (gemm_mem + np.minimum(kv, att) + parts["elementwise"]),
            "nvlink": scale * (parts["tp_comm"] + parts["p2p"]),
            "overhead": scale * parts["overhead"]}


def _gpu_train(g: Group, cfg: dict) -> dict:
    from ..analytic.gpu_time import RECOMPUTE_CODES, gpu_calibration, model_flop_per_token, train_step
    from ..fit import build_workload, gpu_layout_memory

    m, gpu, prec, cat = g.model, g.target.device, g.precision, g.catalog
    cal = gpu_calibration()
    B, C = cfg["batch"], cfg["context"]
    tp, pp, dp, mb, rc, zs = (cfg[k] for k in ("tp", "pp", "dp", "micro_batch", "recompute", "zero_stage"))
    n = len(B)
    cols = {k: np.empty(n) for k in ("step_s", "tokens_per_s", "mfu", "per_device_bytes", "bottleneck")}
    cap = gpu.hbm_bytes.si * (1.0 - cat.defaults.gpu_hbm_reserve_frac.si)
    peak = gpu.peak_flop_per_s(prec)
    codes = {v: k for k, v in RECOMPUTE_CODES.items()}
    for s in np.unique(C):  # train_step takes one sequence length
        sel = C == s
        r = train_step(m, gpu, precision=prec, seq_len=int(s), global_batch=B[sel], tp=tp[sel], pp=pp[sel], dp=dp[sel],
                       micro_batch=mb[sel], recompute=rc[sel], zero_stage=zs[sel], cal=cal)
        step = r["step_s"]
        bd = {"compute": r["compute_s"] - r["tp_comm_s"], "nvlink": r["tp_comm_s"], "pipeline_bubble": r["bubble_s"],
              "pipeline_p2p": r["p2p_s"], "network": r["dp_exposed_s"], "optimizer": r["optimizer_s"]}
        tokens = B[sel] * s
        flops = model_flop_per_token(m, seq_len=s) * tokens
        ndev = tp[sel] * pp[sel] * dp[sel]
        cols["step_s"][sel] = step
        cols["tokens_per_s"][sel] = tokens / step
        cols["mfu"][sel] = np.minimum(flops / step / (ndev * peak), 1.0)
        cols["bottleneck"][sel] = _argmax_name(bd)
        w = build_workload(m, cat, precision=prec, phase="train", batch=1, context=int(s))
        for z in np.unique(zs[sel]):
            for rcode in np.unique(rc[sel]):
                sub = sel & (zs == z) & (rc == rcode)
                if sub.any():
                    cols["per_device_bytes"][sub] = gpu_layout_memory(
                        w, tp=tp[sub], pp=pp[sub], dp=dp[sub], zero_stage=int(z), recompute=codes[int(rcode)],
                        catalog=cat, micro_batch=mb[sub], batch=B[sub], context=C[sub])["total"]
    mem = cols["per_device_bytes"]
    return {"step_s": cols["step_s"], "tokens_per_s": cols["tokens_per_s"], "model_flop_utilization_frac": cols["mfu"],
            "bottleneck": cols["bottleneck"].astype(int), "per_device_bytes": mem, "capacity_bytes": np.full(n, cap),
            "fits": mem <= cap, "num_devices": tp * pp * dp, "tokens_per_step": B * C}


# ---------------------------------------------------------------------------------------------
# Wafer: inference
# ---------------------------------------------------------------------------------------------
def min_max_partition_batched(x: np.ndarray, k: np.ndarray, stage_const: np.ndarray, *, chunk: int = 128):
    """:func:`wseplan.analytic.partition.min_max_partition` for many item vectors at once.

    ``x`` (N, n) item bytes, ``k`` (N,) stage counts, ``stage_const`` (N,). The same dynamic program and the same
    tie-breaking (first minimal split point), vectorized over the N rows. Returns ``(start, end)``, each (N, K)
    with ``K = max(k)``: inclusive item indices of each stage, -1 beyond a row's ``k`` stages.
    """
    x = np.asarray(x, dtype=float)
    N, n = x.shape
    k = np.asarray(k, dtype=np.int64)
    K = int(k.max()) if N else 1
    start = np.full((N, K), -1, dtype=np.int64)
    end = np.full((N, K), -1, dtype=np.int64)
    tri = np.tril_indices(n + 1)
    for c0 in range(0, N, chunk):
        sl = slice(c0, min(c0 + chunk, N))
        xs, ks, a = x[sl], k[sl], np.asarray(stage_const, dtype=float)[sl]
        M = xs.shape[0]
        Kc = int(ks.max())
        pre = np.concatenate([np.zeros((M, 1)), np.cumsum(xs, axis=1)], axis=1)
        seg = pre[:, None, :] - pre[:, :, None] + a[:, None, None]
        seg[:, tri[0], tri[1]] = np.inf
        dp = np.full((M, n + 1), np.inf)
        dp[:, 0] = 0.0
        args = np.zeros((Kc + 1, M, n + 1), dtype=np.int64)
        rows = np.arange(M)
        for s in range(1, Kc + 1):
            cand = np.maximum(dp[:, :, None], seg)
            arg = np.argmin(cand, axis=1)
            args[s] = arg
            dp = np.take_along_axis(cand, arg[:, None, :], axis=1)[:, 0, :]
        j = np.full(M, n, dtype=np.int64)
        for t in range(Kc):
            s = ks - t
            act = s >= 1
            i = args[np.maximum(s, 1), rows, j]
            idx = np.maximum(s - 1, 0)
            start[sl][rows[act], idx[act]] = i[act]
            end[sl][rows[act], idx[act]] = j[act] - 1
            j = np.where(act, i, j)
    return start, end


def _wafer_stages(g: Group, w, T, a, cap):
    """The stages :func:`wseplan.fit.fit_wafer_inference` picks, for arrays of KV tokens ``T`` and per-stage
    activation bytes ``a``. Returns (start, end, loads (N, K), valid (N, K), num_devices, fits, weights_multi)."""
    from ..analytic.partition import greedy_stages  # noqa: F401  (the scalar form this mirrors)

    N = len(T)
    n = len(w.kind)
    wb_single = w.weight_bytes.copy()
    wb_multi = w.weight_bytes.copy()
    if w.tied_head_bytes:
        wb_multi[-1] += w.tied_head_bytes
    kv = w.kv_bytes_per_token[None, :] * T[:, None]
    x_single = wb_single[None, :] + kv
    x_multi = wb_multi[None, :] + kv
    count = g.target.count
    if count is None:
        single_ok = x_single.sum(axis=1) + a <= cap
        load = a.copy()
        stages = np.ones(N, dtype=np.int64)
        fail = np.zeros(N, dtype=bool)
        for i in range(n):  # greedy first fit, vectorized over configurations
            b = x_multi[:, i]
            fail |= a + b > cap
            new = load + b > cap
            stages += new
            load = np.where(new, a, load) + b
        k = np.where(single_ok, 1, np.where(fail, n, stages))
        x = np.where(single_ok[:, None], x_single, x_multi)
        dp_rows = ~single_ok & ~fail & (k > 1)
    else:
        kk = min(count, n)
        k = np.full(N, kk, dtype=np.int64)
        x = x_multi if kk > 1 else x_single
        fail = np.zeros(N, dtype=bool)
        dp_rows = np.full(N, kk > 1)
    K = int(k.max())
    start = np.full((N, K), -1, dtype=np.int64)
    end = np.full((N, K), -1, dtype=np.int64)
    one = k == 1
    start[one, 0], end[one, 0] = 0, n - 1
    if fail.any():
        fi = np.nonzero(fail)[0]
        start[fi, :n] = np.arange(n)
        end[fi, :n] = np.arange(n)
    if dp_rows.any():
        di = np.nonzero(dp_rows)[0]
        # the partition depends only on (item bytes, k, constant): solve each distinct row once
        key = np.column_stack([T[di], a[di], k[di]])
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        first = np.zeros(len(uniq), dtype=np.int64)
        first[inv[::-1]] = np.arange(len(di))[::-1]
        s_u, e_u = min_max_partition_batched(x[di[first]], k[di[first]], a[di[first]])
        start[di, : s_u.shape[1]] = s_u[inv.ravel()]
        end[di, : e_u.shape[1]] = e_u[inv.ravel()]
    valid = start >= 0
    pre = np.concatenate([np.zeros((N, 1)), np.cumsum(x, axis=1)], axis=1)
    rows = np.arange(N)[:, None]
    loads = np.where(valid, pre[rows, np.maximum(end, 0) + 1] - pre[rows, np.maximum(start, 0)] + a[:, None], -np.inf)
    maxload = loads.max(axis=1)
    fits = maxload <= cap
    num = k if count is None else np.full(N, count)
    return start, end, loads, valid, num, fits, maxload


def _wafer_infer(g: Group, cfg: dict) -> dict:
    from ..analytic import fabric as fab
    from ..analytic import wse_time as wt
    from ..fit import build_workload
    from ..workload import KIND_BLOCK

    m, wafer, prec, cat = g.model, g.target.device, g.precision, g.catalog
    d = cat.defaults
    system = cat.system_for_wafer(g.target.key)
    c = fab.load_fabric_constants()
    fk = fab.wafer_fabric_kwargs(wafer, prec, c)
    reserve = d.wafer_sram_reserve_frac.si
    cap = wafer.usable_sram_bytes * (1.0 - reserve)
    clock = wafer.clock_hz.si
    B, C, O = cfg["batch"], cfg["context"], cfg["output_tokens"]
    N = len(B)
    kvctx = C + O
    # the time model's stages: fit at phase decode, KV length context + output tokens
    w = build_workload(m, cat, precision=prec, phase="decode", batch=1, context=1)
    a_dec = w.working_set_bytes_per_token * B
    start, end, loads, valid, num, fits, maxload = _wafer_stages(g, w, B * kvctx, a_dec, cap)
    bc = np.concatenate([[0], np.cumsum(w.kind == KIND_BLOCK)])
    nl = np.where(valid, bc[np.maximum(end, 0) + 1] - bc[np.maximum(start, 0)], 0).astype(float)
    sb = np.where(valid, loads, 0.0)
    nw = valid.sum(axis=1)
    R, Cc = int(wafer.pe_rows.si), int(wafer.pe_cols.si)
    layer_bytes = wt.largest_layer_bytes_array(m, precision=prec, batch=B, context=kvctx)
    sram_pe = wafer.sram_per_pe_bytes.si

    def groups_needed(stage_bytes, side):
        capr = np.asarray(side, dtype=float) * side * sram_pe * (1.0 - reserve)
        return np.maximum(1.0, np.ceil(stage_bytes / capr))

    def phase_parts(phase, mb, ctx, side):
        if phase == "decode":
            blk = wt.decode_block_cycles_array(arch=m, batch=mb, context=ctx, rows=side, cols=side, fk=fk,
                                               gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si)
        else:
            blk = wt.prefill_block_cycles_array(arch=m, tokens=ctx, batch=1, rows=side, cols=side, fk=fk,
                                                gemm_mac_efficiency_frac=c.gemm_mac_efficiency_frac.si,
                                                gemm_step_overhead_cycles=c.gemm_step_overhead_cycles.si)
        head = wt.head_decode_cycles_array(arch=m, batch=mb, rows=side, cols=side, fk=fk,
                                           gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si)
        return blk, head

    def best_grid(phase, mb, ctx):
        sides = wt._region_candidates(wafer).astype(float)
        blk, _ = phase_parts(phase, np.asarray(mb, float)[:, None], ctx[:, None], sides[None, :])
        tot = sum(np.asarray(v, dtype=float) for v in blk.values())
        regions = (R // sides) * (Cc // sides)
        capr = sides ** 2 * sram_pe * (1.0 - reserve)
        ok = capr[None, :] >= layer_bytes[:, None]
        need = groups_needed(sb[:, :, None], sides[None, None, :])  # (N, K, S)
        ok &= np.all(np.where(valid[:, :, None], need <= np.maximum(regions, 1)[None, None, :], True), axis=1)
        cost = np.where(ok, tot * np.maximum(nl.max(axis=1), 1)[:, None], np.inf)
        anyok = np.isfinite(cost).any(axis=1)
        return np.where(anyok, sides[np.argmin(cost, axis=1)], float(min(R, Cc)))

    def pipeline(phase, side, mb, ctx, rows_idx=None):
        """wse_time._pipeline_time for arrays: (latency_s, max_stage_s, parts_s, num_stages)."""
        nl_, sb_, valid_, nw_ = (nl, sb, valid, nw) if rows_idx is None else (nl[rows_idx], sb[rows_idx], valid[rows_idx], nw[rows_idx])
        blk, head = phase_parts(phase, mb, ctx, side)
        blk_total = sum(blk.values())
        head_total = sum(head.values())
        tokens_moved = mb * (ctx if phase == "prefill" else 1.0)
        act_bytes = tokens_moved * m.d_model * fk["dtype_bytes"]
        hop = fab.message_cycles(hops=side + side, message_bytes=act_bytes / side,
                                 hop_latency_cycles=fk["hop_latency_cycles"], link_bytes_per_cycle=fk["link_bytes_per_cycle"],
                                 wavelet_bytes=fk["wavelet_bytes"]) + fk["per_kernel_overhead_cycles"]
        x = fab.cross_system_transfer_s(message_bytes=act_bytes, bandwidth_bytes_per_s=system.io_bandwidth_bytes_per_s.si,
                                        latency_s=c.cross_system_latency_s.si)
        G = np.maximum(1.0, np.minimum(groups_needed(sb_, side[:, None]), np.maximum(nl_, 1.0)))
        G = np.where(valid_, G, 0.0)
        last = np.arange(nl_.shape[1])[None, :] == (nw_ - 1)[:, None]
        q = np.floor_divide(nl_, np.maximum(G, 1.0))
        r = nl_ - q * np.maximum(G, 1.0)
        bt, ht, hp, xx = blk_total[:, None], head_total[:, None], hop[:, None], x[:, None]
        t_last = (q * bt + np.where(last, ht, 0.0)) / clock + np.where(last, 0.0, xx)
        t_first = ((q + (r > 0)) * bt) / clock + hp / clock
        stage_max = np.where(G > 1, np.maximum(t_first, t_last), t_last)
        mx = np.where(valid_, stage_max, -np.inf).max(axis=1)
        sumG = G.sum(axis=1)
        L = nl_.sum(axis=1)
        lat = L * blk_total / clock + (sumG - nw_) * hop / clock + head_total / clock + (nw_ - 1) * x
        parts = {}
        for key in list(blk) + [k for k in head if k not in blk]:
            parts[wt._PART_NAMES[key]] = (L * blk.get(key, 0.0) + head.get(key, 0.0)) / clock
        parts["cross_region_link"] = (hop * (sumG - nw_) + x * clock * (nw_ - 1)) / clock
        return lat, mx, parts, sumG

    out: dict = {}
    bd: dict = {}
    if g.phase == "prefill" or (O > 0).any():
        side_p = best_grid("prefill", np.ones(N), C)
        lat, mx, parts_p, _ = pipeline("prefill", side_p, np.ones(N), C)
        ttft = lat + (B - 1.0) * mx
    if g.phase == "decode":
        ctx_d = C + np.floor_divide(O, 2)
        side_d = best_grid("decode", B, ctx_d)
        lat1, mx1, parts1, ns = pipeline("decode", side_d, B, ctx_d)
        top = np.minimum(ns, B).astype(np.int64)
        P = int(top.max()).bit_length()
        pw = np.array([1 << i for i in range(1, P)], dtype=float)
        cand = np.concatenate([np.broadcast_to(pw, (N, len(pw))), top[:, None].astype(float)], axis=1)
        okc = (cand <= top[:, None]) & (cand >= 2)
        cand = np.sort(np.where(okc, cand, np.inf), axis=1)
        nc = cand.shape[1]
        rows_idx = np.repeat(np.arange(N), nc)
        nmb = cand.ravel()
        fin = np.isfinite(nmb)
        mbs = np.where(fin, np.ceil(B[rows_idx] / np.where(fin, nmb, 1.0)), 1.0)
        lat_c, mx_c, parts_c, _ = pipeline("decode", side_d[rows_idx], mbs, ctx_d[rows_idx], rows_idx)
        rnd = np.where(fin, np.maximum(lat_c, np.where(fin, nmb, 0.0) * mx_c), np.inf).reshape(N, nc)
        allr = np.concatenate([lat1[:, None], rnd], axis=1)
        best = np.argmin(allr, axis=1)
        tpot = allr[np.arange(N), best]
        pick = np.clip(best - 1, 0, nc - 1)
        flat = np.arange(N) * nc + pick
        scale = tpot / lat_c.reshape(N, nc)[np.arange(N), pick]
        parts_d = {k: np.where(best == 0, parts1[k], parts_c[k][flat] * scale) for k in parts1}
        single = O <= 0
        out["micro_batches_in_flight"] = np.where(best == 0, 1.0, cand[np.arange(N), pick])
        if single.all():
            e2e = tpot
        else:
            e2e = np.where(single, tpot, ttft + O * tpot)
        out.update(step_s=e2e, tpot_s=tpot, ttft_s=np.where(single, np.nan, ttft) if not single.all() else np.full(N, np.nan),
                   tokens_per_s=np.where(single, B / tpot, B * O / e2e),
                   tokens_per_s_per_user=np.where(single, 1.0 / tpot, O / e2e))
        for k, v in parts_d.items():
            bd[k] = np.where(single, v, v * O)
        if not single.all():
            for k, v in parts_p.items():
                bd.setdefault(k, 0.0)
            # a whole request: prefill_* and decode_* parts compete (prefill first, as wse_time.predict)
            bdp = {("p_" + k): np.where(single, -np.inf, v) for k, v in parts_p.items()}
            out["bottleneck"] = _argmax_name_prefixed(bdp, {k: bd[k] for k in parts_d})
        else:
            out["bottleneck"] = _argmax_name(parts_d)
        out["decode_step_s"] = tpot
        out["output_tokens_per_step"] = B
        out["prompt_tokens"] = np.where(single, np.nan, B * C)
        out["prefill_s"] = out["ttft_s"]
        fit_loads = maxload
        fit_ok = fits
    else:
        out.update(step_s=ttft, ttft_s=ttft, tokens_per_s=B * C / ttft)
        out["bottleneck"] = _argmax_name(parts_p)
        out["prompt_tokens"] = B * C
        out["prefill_s"] = ttft
        # the fit record of phase prefill: same stages rule, the prefill working set
        a_pre = w.working_set_bytes_per_token * np.minimum(B * C, d.prefill_chunk_tokens.si)
        _, _, _, _, num, fit_ok, fit_loads = _wafer_stages(g, w, B * C, a_pre, cap)
    out.update(per_device_bytes=fit_loads, capacity_bytes=np.full(N, cap), fits=fit_ok, num_devices=num.astype(float),
               num_wafers_timed=nw.astype(float))
    return out


def _argmax_name_prefixed(first: dict, second: dict) -> np.ndarray:
    """Bottleneck over prefill parts (keys ``p_<name>``) then decode parts; first in order wins a tie."""
    names = [k[2:] for k in first] + list(second)
    arrs = np.stack(np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in (*first.values(), *second.values())]))
    codes = np.asarray([BOTTLENECKS.index(k) for k in names])
    return codes[np.argmax(arrs, axis=0)]


# ---------------------------------------------------------------------------------------------
# Wafer: weight-streaming training
# ---------------------------------------------------------------------------------------------
def _wafer_train(g: Group, cfg: dict) -> dict:
    from ..analytic.memory import stream_min_tokens_compute_bound  # noqa: F401
    from ..analytic.memory import wafer_stream_buffer_bytes, wafer_train_activation_bytes_per_token
    from ..analytic.stream import (activation_bytes_per_token, load_stream_constants, recompute_forward_passes,
                                  swarmx_tree_levels, training_step_time_s)
    from ..fit import build_workload

    m, wafer, prec, cat = g.model, g.target.device, g.precision, g.catalog
    d = cat.defaults
    c = load_stream_constants()
    system = cat.system_for_wafer(g.target.key)
    mx = cat.memoryx[system.memoryx]
    sx = cat.swarmx[system.swarmx]
    Nsys = g.target.count or 1
    if Nsys > sx.max_systems.si or Nsys > system.max_cluster_systems.si:
        raise InputError(f"targets: {g.target.text}: {Nsys} systems exceed the largest {system.name} cluster")
    B, C = cfg["batch"], cfg["context"]
    n = len(B)
    option = mx.default_capacity
    mx_cap = mx.capacity_options_bytes[option].si
    io_bw = system.io_bandwidth_bytes_per_s.si
    rate = wafer.peak_flop_per_s(prec) * c.compute_efficiency_frac.si
    reserve = d.wafer_sram_reserve_frac.si
    cap = wafer.usable_sram_bytes * (1.0 - reserve)
    levels = float(swarmx_tree_levels(num_systems=Nsys, fanout=sx.fanout.si))
    lat = mx.link_latency_s.si + levels * sx.per_level_latency_s.si
    res = {k: np.empty(n) for k in ("step_s", "tokens_per_s", "bottleneck", "per_device_bytes", "fits", "mfu")}
    for s in np.unique(C):  # the workload's attention FLOPs take one sequence length
        sel = C == s
        Bs = B[sel]
        w = build_workload(m, cat, precision=prec, phase="train", batch=1, context=int(s))
        mx_need = w.total_params * mx.optimizer_bytes_per_param.si
        dram = mx_need <= mx.dram_capacity_bytes.si
        stream_bw = min((mx.dram_stream_bandwidth_bytes_per_s if dram else mx.flash_stream_bandwidth_bytes_per_s).si, io_bw)
        if Nsys > 1:
            stream_bw = min(stream_bw, sx.per_system_bandwidth_bytes_per_s.si)
        per_sys = Bs / Nsys
        avail = cap - wafer_stream_buffer_bytes(w.weight_bytes)
        ck, act = w.checkpoint_bytes_per_token, w.activation_bytes_per_token
        act_max = float(act.max(initial=0.0))
        fit_seqs = int(max(avail, 0.0) // (act_max * s)) if act_max > 0 else math.inf
        whole = fit_seqs >= per_sys
        mb = max(1, fit_seqs) if math.isfinite(fit_seqs) else 1
        one = whole | (mb >= per_sys)
        passes = np.where(one, 1.0, np.ceil(per_sys / mb))
        tokens = np.where(one, per_sys * s, per_sys * s / passes)
        per_tok = {p: activation_bytes_per_token(policy=p, checkpoint_bytes_per_token=ck, activation_bytes_per_token=act)
                   for p in ("store", "checkpoint", "recompute")}
        opt_s = w.params * mx.optimizer_bytes_per_param.si * 2.0 / c.memoryx_update_bytes_per_s.si
        common = dict(weight_bytes=w.weight_bytes, flop_per_token=w.flop_per_token, tokens=tokens, compute_flop_per_s=rate,
                      stream_bandwidth_bytes_per_s=stream_bw, io_bandwidth_bytes_per_s=io_bw, latency_s=lat,
                      prefetch_layers=int(c.prefetch_layers.si), overlap_efficiency_frac=c.overlap_efficiency_frac.si,
                      optimizer_s=opt_s)
        lef = getattr(c, "latency_exposed_frac", None)
        if lef is not None or "latency_exposed_frac" in type(c).model_fields:
            common["latency_exposed_frac"] = 1.0 if lef is None else lef.si
        over = np.maximum(0.0, tokens * per_tok["checkpoint"] - max(avail, 0.0))
        total_ck = tokens * float(ck.sum())
        spill = np.where(total_ck > 0, np.minimum(over, total_ck) / np.where(total_ck > 0, total_ck, 1.0), 0.0)[None, :] \
            * tokens[None, :] * ck[:, None]

        def run(p):
            r = training_step_time_s(spill_bytes=spill if p == "spill" else None,
                                     extra_forward_passes=recompute_forward_passes(p), **common)
            opt = r["optimizer_exposed_s"]
            out = {}
            for k in ("step_s", "compute_s", "exposed_load_s", "recompute_s"):
                v = np.asarray(r[k], dtype=float)
                out[k] = np.where(passes > 1, (v - opt) * passes + opt if k == "step_s" else v * passes, v)
            out["optimizer_exposed_s"] = np.asarray(opt, dtype=float) * np.ones(len(tokens))
            return out

        runs = {p: run(p) for p in ("store", "checkpoint", "recompute", "spill")}
        fitp = {p: tokens * per_tok[p] <= avail for p in ("store", "checkpoint", "recompute")}
        fitp["spill"] = tokens * act_max <= avail
        alt_rec = runs["recompute"]["step_s"]
        alt_sp = runs["spill"]["step_s"]
        pick_rec = np.where(fitp["recompute"] & fitp["spill"], alt_rec <= alt_sp,
                            np.where(fitp["recompute"], True, np.where(fitp["spill"], False, False)))
        chosen = np.where(fitp["store"], 0, np.where(fitp["checkpoint"], 1, np.where(pick_rec, 2, 3)))
        names = ("store", "checkpoint", "recompute", "spill")

        def sel_(key):
            return np.choose(chosen, [runs[p][key] for p in names])

        step, compute, exposed = sel_("step_s"), sel_("compute_s"), sel_("exposed_load_s")
        recomp, opt = sel_("recompute_s"), sel_("optimizer_exposed_s")
        okp = np.choose(chosen, [fitp[p] for p in names]) & (avail > 0)
        is_spill = chosen == 3
        exposed_spill = np.where(is_spill, np.maximum(0.0, step - runs["checkpoint"]["step_s"]), 0.0)
        link_busy = passes * ((w.weight_bytes / stream_bw).sum() * 2.0 + np.where(is_spill, 2.0 * spill.sum(axis=0) / io_bw, 0.0))
        parts = {"compute": compute - recomp, "recompute": recomp, "weight_stream": exposed - exposed_spill,
                 "spill_io": exposed_spill, "optimizer": opt}
        bn = _argmax_name(parts)
        bn = np.where(link_busy > compute, np.where(exposed_spill > exposed - exposed_spill,
                                                    BOTTLENECKS.index("spill_io"), BOTTLENECKS.index("weight_stream")), bn)
        bn = np.where(okp, bn, BOTTLENECKS.index("sram"))
        model_flop = 3.0 * float(w.flop_per_token.sum()) * Bs * s
        res["step_s"][sel] = step
        res["tokens_per_s"][sel] = Bs * s / step
        res["mfu"][sel] = np.minimum(1.0, model_flop / step / (wafer.peak_flop_per_s(prec) * Nsys))
        res["bottleneck"][sel] = bn
        # fit record (wseplan.fit.fit_wafer_train): double-buffered weights + checkpoints of all tokens
        buf = wafer_stream_buffer_bytes(w.weight_bytes)
        act_tok = wafer_train_activation_bytes_per_token(ck, act)
        load = buf + act_tok * (Bs * s)
        res["per_device_bytes"][sel] = load
        res["fits"][sel] = (mx_need <= mx_cap) & (load <= cap)
    return {"step_s": res["step_s"], "tokens_per_s": res["tokens_per_s"], "model_flop_utilization_frac": res["mfu"],
            "bottleneck": res["bottleneck"].astype(int), "per_device_bytes": res["per_device_bytes"],
            "capacity_bytes": np.full(n, cap), "fits": res["fits"].astype(bool), "num_devices": np.full(n, float(Nsys)),
            "tokens_per_step": B * C}


# ---------------------------------------------------------------------------------------------
# Cost
# ---------------------------------------------------------------------------------------------
def _cost(g: Group, cfg: dict, res: dict) -> dict:
    from ..analytic.cost import deployment_cost, memoryx_capex_usd, serving_cost, training_cost
    from ..workload import total_params

    p = g.params
    ndev = np.asarray(res["num_devices"], dtype=float)
    if g.target.kind == "wafer":
        nsys = ndev
    else:
        nsys = np.ceil(ndev / g.target.device.gpus_per_node.si)
    extra = 0.0
    if "memoryx_capacity_bytes" in p:
        extra = memoryx_capex_usd(capacity_bytes=p["memoryx_capacity_bytes"], dram_capacity_bytes=p["memoryx_dram_capacity_bytes"],
                                  dram_usd_per_tb=p["memoryx_dram_usd_per_tb"], flash_usd_per_tb=p["memoryx_flash_usd_per_tb"])
    dcost = deployment_cost(num_systems=nsys, capex_per_system_usd=p["capex_usd"], network_frac=p["network_frac"],
                            extra_capex_usd=extra, installation_frac=p["installation_frac"],
                            amortization_years=p["amortization_years"], maintenance_frac_per_year=p["maintenance_frac_per_year"],
                            peak_power_per_system_w=p["peak_power_w"], busy_power_frac=p["busy_power_frac"],
                            idle_power_frac=p["idle_power_frac"], utilization_frac=p["utilization_frac"], pue=p["pue"],
                            electricity_usd_per_kwh=p["electricity_usd_per_kwh"],
                            facility_usd_per_kw_month=p["facility_usd_per_kw_month"])
    out = {"num_systems": nsys, "usd_per_hour": dcost["usd_per_hour"], "usd_per_busy_hour": dcost["usd_per_busy_hour"],
           "busy_it_power_w": dcost["busy_it_power_w"]}
    nan = np.full(len(ndev), np.nan)
    if g.phase == "train":
        tt = g.train_tokens if g.train_tokens is not None else p["train_tokens_per_param"] * total_params(g.model)
        tc = training_cost(usd_per_busy_hour=dcost["usd_per_busy_hour"], busy_it_power_w=dcost["busy_it_power_w"],
                           pue=p["pue"], step_s=res["step_s"], tokens_per_step=res["tokens_per_step"], train_tokens=tt)
        out.update(usd_per_run=tc["usd_per_run"], run_s=tc["run_s"], usd_per_mtok=tc["usd_per_mtok_trained"],
                   energy_j_per_token=tc["energy_j_per_train_token"], input_usd_per_mtok=nan, output_usd_per_mtok=nan)
        return out
    dec = res.get("decode_step_s", res["prefill_s"])
    per_step = res.get("output_tokens_per_step", np.ones(len(ndev)))
    sc = serving_cost(usd_per_busy_hour=dcost["usd_per_busy_hour"], busy_it_power_w=dcost["busy_it_power_w"], pue=p["pue"],
                      prefill_s=res["prefill_s"], prompt_tokens=res["prompt_tokens"], decode_step_s=dec,
                      output_tokens_per_step=per_step)
    if g.phase == "prefill":
        out.update(input_usd_per_mtok=sc["input_usd_per_mtok"], output_usd_per_mtok=nan,
                   usd_per_mtok=sc["input_usd_per_mtok"], energy_j_per_token=sc["energy_j_per_input_token"])
    else:
        out.update(input_usd_per_mtok=sc["input_usd_per_mtok"], output_usd_per_mtok=sc["output_usd_per_mtok"],
                   usd_per_mtok=sc["output_usd_per_mtok"], energy_j_per_token=sc["energy_j_per_output_token"])
    out.update(usd_per_run=nan, run_s=nan)
    return out



def _columns(g: Group, cfg: dict, res: dict) -> dict:
    n = len(cfg["batch"])
    nan = np.full(n, np.nan)
    lay = g.layouts
    out = {
        "batch": cfg["batch"], "context": cfg["context"],
        "output_tokens": np.where(cfg["output_tokens"] > 0, cfg["output_tokens"], np.nan),
        "tensor_parallel": cfg.get("tp", nan), "pipeline_parallel": cfg.get("pp", nan), "data_parallel": cfg.get("dp", nan),
        "micro_batch": cfg.get("micro_batch", nan), "recompute": cfg.get("recompute", np.full(n, -1.0)),
        "zero_stage": cfg.get("zero_stage", nan),
    }
    if not lay or g.phase != "train":
        out["recompute"] = np.full(n, -1.0)
    for k in ("num_devices", "num_systems", "per_device_bytes", "capacity_bytes", "fits", "step_s", "ttft_s", "tpot_s",
              "tokens_per_s", "tokens_per_s_per_user", "bottleneck", "usd_per_hour", "usd_per_busy_hour", "usd_per_mtok",
              "input_usd_per_mtok", "output_usd_per_mtok", "usd_per_run", "energy_j_per_token"):
        v = res.get(k)
        out[k] = nan if v is None else np.broadcast_to(np.asarray(v), (n,))
    out["_group"] = g.index
    return out


