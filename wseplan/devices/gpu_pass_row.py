"""One GPU inference pass of a configuration's rows (:meth:`wseplan.devices.gpu.GpuFamily.pass_time`): the
:class:`~wseplan.analytic.gpu_pass.Sequences` of its decode and prompt rows through :func:`~wseplan.analytic.gpu_pass.pass_time_s`,
its parts by bottleneck name."""
from __future__ import annotations

import numpy as np

from ..analytic import elementwise as X
from ..analytic import gpu_pass as P


def adp_of(ctx, cfg: dict, rows):
    """The data-parallel attention degree of ``rows`` of ``cfg`` (1 where the model offers none)."""
    return np.asarray(cfg["adp"], dtype=float)[rows] if ctx.adp_offered and "adp" in cfg else np.ones(np.shape(rows))


def infer_pass(ctx, *, tp, pp, decode_seqs, decode_kv, prefill_tokens, prefill_span, prefill_kv, prefill_seqs,
               new_per_seq, adp=1.0):
    """One forward pass (see :meth:`GpuFamily.pass_time`) of arrays of rows, or of one row in Python floats."""
    seqs = (P.Sequences(seqs=decode_seqs, tokens=decode_seqs * new_per_seq, new=new_per_seq, prior=decode_kv),
            P.Sequences(seqs=prefill_seqs, tokens=prefill_tokens, new=prefill_span, prior=prefill_kv, decode=False))
    lat, stage, parts = P.pass_time_s(ctx.m, ctx.gpu, precision=ctx.q.precision, kv_precision=ctx.kv_precision,
                                      sequences=seqs, tp=tp, pp=pp, cal=ctx.cal, expert_layout=ctx.expert_layout or "best",
                                      logits_rows=decode_seqs * new_per_seq + prefill_seqs, grouped_kv=ctx.grouped_kv,
                                      adp=adp)
    return lat, stage, infer_breakdown(parts)


def infer_breakdown(parts: dict) -> dict:
    """Inference parts by bottleneck name: compute, hbm_bandwidth, nvlink, overhead [s]."""
    gemm = parts["gemm"] + parts["lm_head"]
    gemm_mem = parts["gemm_memory_bound"]
    kv, att = parts["kv_read"], parts["attention"]
    return {"compute": gemm - gemm_mem + X.maximum(att - kv, 0.0),
            "hbm_bandwidth": gemm_mem + X.minimum(kv, att) + parts["elementwise"],
            "nvlink": parts["tp_comm"] + parts["p2p"],
            "overhead": parts["overhead"]}


__all__ = ["adp_of", "infer_breakdown", "infer_pass"]
