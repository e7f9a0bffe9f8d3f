"""The resident wafer family's forward pass of one configuration row in Python floats (issue 14 item 1).

:meth:`WaferFamily.pass_time <wseplan.devices.wafer.WaferFamily.pass_time>` on arrays costs numpy's dispatch per
operation; a question of one configuration asks for a few passes (one per micro-batch candidate of a decode round),
each on one row. :func:`pass_row` is the same pass on one row: the kernels (cycles of a block and of the head, which
depend on the region and the pass's token counts alone) are evaluated by the array code itself, once per distinct
combination per setup and remembered (a decode round's micro-batch candidates in one array pass, under speculative
decoding with the verification round's), and the pass's
bookkeeping over the replica's wafers (layer groups, hops, the slowest group) is the array code's expression in
Python floats: the same IEEE-754 operations in the same order, so every number is the array path's, bit for bit.
Where numpy would give inf or NaN the float forms raise one of
:data:`~wseplan.analytic.elementwise.SCALAR_ERRORS` and the question goes to the arrays.
"""
from __future__ import annotations

import math
import struct

import numpy as np

from ..analytic import elementwise as X
from ..analytic import wse_time as wt

#: kernel results remembered per setup (a bound on memory: the memo starts again when it is full)
MEMO_MAX = 4096

_KEY = struct.Struct("9d").pack  # the kernel arguments' exact bits (-0.0 and NaN payloads kept apart)
_POWERS = [2.0 ** k for k in range(11)]  # the engine's micro-batch counts (a guess of the sizes to come; any will do)


def kernels_row(fam, ctx, cfg, i, r_, c_, dseq, ptok, dkv, span, pkv, pseqs, nps):
    """Block and head kernel parts [cycles] (dicts of floats) of one pass on an ``r_`` x ``c_`` region, from the
    setup's memo; a miss evaluates :meth:`WaferFamily._pass_kernels` (arrays), for a plain decode pass on the micro-batch
    sizes of all of the row's round candidates at once, and under speculative decoding for both the plain round (one
    token per sequence) and the verification round (k + 1), which a decode question asks one after the other."""
    memo = ctx.__dict__.setdefault("_kernel_memo", {})
    key = _KEY(r_, c_, dseq, ptok, dkv, span, pkv, pseqs, nps)
    hit = memo.get(key)
    if hit is not None:
        return hit
    want = [(dseq, nps)]
    if dseq > 0 and ptok == 0 and span == 0 and pkv == 0 and pseqs == 0:  # a plain decode pass: the round's other sizes
        # and, under speculative decoding, the verification round's (k + 1 tokens per sequence: the same sizes, asked
        # right after this round) or the plain round's
        spec = getattr(ctx, "spec", None)
        per_seq = [nps]
        if spec is not None:
            other = 1.0 if nps == spec["draft_tokens"] + 1.0 else spec["draft_tokens"] + 1.0 if nps == 1.0 else None
            if other is not None:
                per_seq.append(other)
        b = float(cfg["batch"][i])
        top = max(min(float(cfg["_groups_d"][i]), b), 1.0)
        sizes = [dseq]
        if math.isfinite(top):
            for n in [p for p in _POWERS if p <= top] + [top]:
                mb = float(math.ceil(b / n))
                if mb > 0 and mb not in sizes:
                    sizes.append(mb)
        want = [(s, t) for t in per_seq for s in sizes
                if (s, t) == (dseq, nps) or _KEY(r_, c_, s, ptok, dkv, span, pkv, pseqs, t) not in memo]
    m = len(want)
    cols = [np.full(m, r_), np.full(m, c_), np.array([s for s, _ in want]), np.full(m, ptok)] \
        + [np.full(m, v) for v in (dkv, span, pkv, pseqs)] + [np.array([t for _, t in want])]
    blk, head = fam._pass_kernels(ctx, *cols)
    blk = {k: np.broadcast_to(np.asarray(v, dtype=float), (m,)).tolist() for k, v in blk.items()}
    head = {k: np.broadcast_to(np.asarray(v, dtype=float), (m,)).tolist() for k, v in head.items()}
    if len(memo) + m > MEMO_MAX:
        memo.clear()
    for j, (s, t) in enumerate(want):
        memo[_KEY(r_, c_, s, ptok, dkv, span, pkv, pseqs, t)] = ({k: v[j] for k, v in blk.items()},
                                                                  {k: v[j] for k, v in head.items()})
    return memo[key]


def pass_row(fam, ctx, cfg, i: int, *, decode_seqs, decode_kv, prefill_tokens, prefill_span, prefill_kv, prefill_seqs,
             new_per_seq=1.0):
    """:meth:`WaferFamily.pass_time` of row ``i`` in Python floats: ``(latency_s, slowest group's busy time, parts)``."""
    dseq, ptok = float(decode_seqs), float(prefill_tokens)
    nps = float(new_per_seq)
    has_d = dseq > 0
    if "_rows_p" not in cfg and not has_d:
        fam._regions(ctx, cfg, ("prefill",))
    k = "d" if has_d or "_rows_p" not in cfg else "p"
    r_, c_ = float(cfg[f"_rows_{k}"][i]), float(cfg[f"_cols_{k}"][i])
    blk, head = kernels_row(fam, ctx, cfg, i, r_, c_, dseq, ptok, float(decode_kv), float(prefill_span),
                            float(prefill_kv), float(prefill_seqs), nps)
    fk, c = ctx.fk, ctx.c
    clock = float(ctx.clock)
    blk_total = head_total = 0.0  # summed left to right as the arrays are (not math.fsum, not 3.12's compensated sum)
    for v in blk.values():
        blk_total = blk_total + v
    for v in head.values():
        head_total = head_total + v
    act_bytes = (dseq * nps + ptok) * float(ctx.m.d_model) * float(fk["dtype_bytes"])
    side = X.minimum(r_, c_)
    wb = float(fk["wavelet_bytes"])
    w = X.maximum(1.0, X.ceil(act_bytes / side / wb))
    hop = (r_ + c_) * float(fk["hop_latency_cycles"]) + w * wb / float(fk["link_bytes_per_cycle"]) \
        + float(fk["per_kernel_overhead_cycles"])
    x = float(c.cross_system_latency_s.si) + act_bytes / float(ctx.system.io_bandwidth_bytes_per_s.si)
    nl, valid, sb = cfg["_nl"][i].tolist(), cfg["_valid"][i].tolist(), cfg["_sb"][i].tolist()
    nw = float(cfg["_nw"][i])
    capr = r_ * c_ * float(ctx.sram_pe) * (1.0 - float(ctx.reserve))
    mx = -math.inf
    sumG = L = 0.0
    for j, (nl_j, ok, sb_j) in enumerate(zip(nl, valid, sb)):
        g = X.minimum(X.maximum(1.0, X.ceil(sb_j / capr)), X.maximum(nl_j, 1.0)) if ok else 0.0
        sumG += g
        L += nl_j
        if not ok:
            continue
        gg = X.maximum(g, 1.0)
        q = float(nl_j // gg)
        rem = nl_j - q * gg
        last = j == nw - 1
        t_last = (q * blk_total + (head_total if last else 0.0)) / clock + (0.0 if last else x)
        t_first = ((q + (1.0 if rem > 0 else 0.0)) * blk_total) / clock + hop / clock
        stage = X.maximum(t_first, t_last) if g > 1 else t_last
        mx = X.maximum(mx, stage)
    lat = L * blk_total / clock + (sumG - nw) * hop / clock + head_total / clock + (nw - 1) * x
    parts: dict = {}
    for key in list(blk) + [k for k in head if k not in blk]:
        name = wt._PART_NAMES[key]
        parts[name] = parts.get(name, 0.0) + (L * blk.get(key, 0.0) + head.get(key, 0.0)) / clock
    parts["cross_region_link"] = (hop * (sumG - nw) + x * clock * (nw - 1)) / clock
    return lat, mx, parts
