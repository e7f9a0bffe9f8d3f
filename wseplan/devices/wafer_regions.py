"""The region search of the resident wafer family: the shape (rows x cols PEs) of the regions its layer groups run
on, per pass kind (decode GEMV, prefill GEMM), and the hand-over between groups that both the search and the pass time
count.

The candidates (:func:`region_shapes`) are WaferLLM's square sides (He et al., OSDI 2025) and the near-square
rectangles that tile the wafer maximally: ``R // a`` x ``C // b`` for ``a`` x ``b`` regions, ``b`` the floor or the
ceiling of ``a C / R`` (whichever gives columns nearer the rows), aspect at most 2. A square tiling leaves the wafer's
remainder idle (on the 1,170 x 755 CS-3, 5 x 5 regions of 151 x 151 use 65% of the PEs) and its region count jumps
(24 regions of 188 x 188, then 6 of 377 x 377), so a few more bytes of KV cache could push the layer groups onto far
fewer, larger regions (Llama-3.1-8B at 4,096 tokens: a decode step 70% slower for 2.6% more bytes); the rectangles
fill the wafer (24 regions of 195 x 188, 8 of 292 x 251, one of 1,170 x 755), so that the step follows the workload
and a wafer whose SRAM holds its bytes always has a region for every layer group. A region must tile the wafer, hold the largest layer and leave a region for
every layer group of the fullest wafer (WaferLLM's admissibility). Among those, decode takes the region whose decode
round is fastest, composed as :meth:`.WaferFamily.pass_time` and :func:`~wseplan.analytic.engine.decode_round` compose it
(smaller regions give more layer groups, each busy with its own micro-batch); prefill the region on which the family's
own prefill (every prompt pass, pipelined through the groups) is fastest; serving the region of the shortest request,
every admissible region answered by the family's serving time in one array evaluation (:func:`best_serving_side`).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..analytic import elementwise as X
from ..analytic import engine as E
from ..analytic import fabric as fab
from ..analytic import wse_time as wt
from ..errors import InputError
from .wafer_row import MEMO_MAX, MEMO_ROWS, keep_decode_table, prefetch_rows


def parse_grid(value, name: str, wafer) -> tuple[int, int] | None:
    """``"420x420"`` or ``(420, 420)`` -> (rows, cols) inside the wafer's PE grid; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.lower().replace(" ", "").split("x")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise InputError(f"{name}: expected ROWSxCOLS such as 420x420, got {value!r}")
        value = (int(parts[0]), int(parts[1]))
    try:
        r, c = (int(v) for v in value)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected (rows, cols) PEs, got {value!r}") from None
    R, C = int(wafer.pe_rows.si), int(wafer.pe_cols.si)
    if r < 1 or c < 1 or not ((r <= R and c <= C) or (r <= C and c <= R)):
        raise InputError(f"{name}: {r}x{c} PEs must be positive and fit the wafer's {R}x{C} grid")
    return r, c


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


def region_shapes(R: int, C: int, sides, min_side: int = 32, max_aspect: float = 2.0):
    """The candidate regions ``(rows, cols)`` [PEs] of an ``R`` x ``C`` PE wafer: the square ``sides`` (WaferLLM's,
    :func:`~wseplan.analytic.wse_time._region_candidates`), then the maximal near-square rectangles ``R // a`` x
    ``C // b`` for ``a`` region rows and the ``b`` of ``floor(a C / R)``, ``ceil(a C / R)`` (at least 1) whose columns
    are nearer the rows (both sides at least ``min_side``, longer over shorter at most ``max_aspect``, squares left to
    the squares), by increasing area.
    A rectangle tiling uses the wafer's remainder that a square tiling leaves idle (the region count is ``a b``, the
    capacity ``(R // a) (C // b)`` PEs' SRAM)."""
    sides = np.asarray(sides, dtype=float)
    a = np.arange(1, max(R // min_side, 1) + 1)
    b = np.maximum(np.stack([np.floor(a * C / R), np.ceil(a * C / R)]), 1.0).astype(np.int64)
    r = R // a
    c = C // b[np.argmin(np.abs(C // b - r[None, :]), axis=0), np.arange(len(a))]  # the b whose columns are nearest r
    keep = (r >= min_side) & (c >= min_side) & (r != c) & (np.maximum(r, c) <= max_aspect * np.minimum(r, c))
    pairs = sorted(set(zip(r[keep].tolist(), c[keep].tolist())), key=lambda p: (p[0] * p[1], p[0]))
    return (np.concatenate([sides, np.array([p[0] for p in pairs], dtype=float)]),
            np.concatenate([sides, np.array([p[1] for p in pairs], dtype=float)]))


def region_tiles(ctx, rows, cols):
    """How many ``rows`` x ``cols`` PE regions the wafer tiles into (float arrays; ``layer_groups: fill`` puts a layer
    group on each)."""
    return np.floor(ctx.R / np.asarray(rows, dtype=float)) * np.floor(ctx.C / np.asarray(cols, dtype=float))


def region_capacity(ctx, rows, cols):
    """The SRAM a layer group's region of ``rows`` x ``cols`` PEs holds after the runtime reserve [bytes]: its PEs'; with
    ``layer_groups: fill`` the wafer's shared over the regions it tiles into (a compiler's regions need not be equal
    rectangles: the PEs an equal tiling leaves over hold weights too, so a wafer filling up does not drop the smaller
    regions for the few percent a tiling leaves idle; audit30c H2)."""
    capr = rows * cols * ctx.sram_pe * (1.0 - ctx.reserve)
    if ctx.engine.layer_groups == "fill":
        capr = np.maximum(capr, ctx.cap / region_tiles(ctx, rows, cols))
    return capr


def admissible(ctx, cfg, layer_bytes):
    """Which candidate regions [rows x candidates] may carry the rows' layer groups: a region holds the largest layer
    and the wafer tiles into at least as many regions as its fullest stage needs groups (every wafer's groups fit its
    regions when the fullest wafer's do: the group count grows with the bytes)."""
    rr, cc = ctx.region_rows, ctx.region_cols
    regions = (ctx.R // rr) * (ctx.C // cc)
    capr = region_capacity(ctx, rr, cc)
    sb_max = np.where(cfg["_valid"], cfg["_sb"], -np.inf).max(axis=1)
    return (capr[None, :] >= layer_bytes[:, None]) & (np.ceil(sb_max[:, None] / capr[None, :]) <= np.maximum(regions, 1)[None, :])


def _first_best(ctx, cost):
    """Per row ``(rows, cols)`` of the first candidate region of least finite ``cost`` [rows x candidates]; a square of
    the wafer's shorter side where none is."""
    anyok = np.isfinite(cost).any(axis=1)
    j = np.argmin(np.where(np.isfinite(cost), cost, np.inf), axis=1)
    fall = float(min(ctx.R, ctx.C))
    return np.where(anyok, ctx.region_rows[j], fall), np.where(anyok, ctx.region_cols[j], fall)


def best_prefill_side(family, ctx, cfg, layer_bytes, ok=None):
    """The region ``(rows, cols)`` on which the prefill phase of each row (every pass of its prompts, pipelined through
    the layer groups) is fastest, timed by the family's own prefill on each admissible region (the rows repeated once
    per region):
    more, smaller regions let prompt passes follow each other through more groups, larger ones run each pass's
    GEMMs faster. ``ok``: :func:`admissible` of the rows where the caller has it."""
    ok = admissible(ctx, cfg, layer_bytes) if ok is None else ok
    n = len(layer_bytes)
    cols = np.nonzero(ok.any(axis=0))[0]
    cost = np.full(ok.shape, np.inf)
    if len(cols):
        rows = np.repeat(np.arange(n), len(cols))
        r_, c_ = np.tile(ctx.region_rows[cols], n), np.tile(ctx.region_cols[cols], n)
        sub = {k: (v[rows] if type(v) is np.ndarray and v.shape[:1] == (n,) else v) for k, v in cfg.items()}
        sub["_rows_p"], sub["_cols_p"] = r_, c_
        sub["_groups_p"] = family._groups(ctx, sub, r_, c_).sum(axis=1)
        B, C = np.asarray(sub["batch"], dtype=float), np.asarray(sub["context"], dtype=float)
        t = None
        if n <= X.SCALAR_ROWS and getattr(family, "pass_row", None) is not None:  # a question's few rows: floats
            try:
                announce = getattr(family, "announce_row", None)
                with contextlib.ExitStack() as stack:  # every region's prefill passes announced: one array pass
                    for j in range(len(rows) if announce is not None else 0):
                        cuts = family._prefill_cuts(ctx, float(B[j]), float(C[j]))
                        stack.enter_context(announce(ctx, sub, j, lambda c=cuts: [kw for _, kw in c]))
                    t = [family._prefill(ctx, sub, j, float(B[j]), float(C[j]))[0] for j in range(len(rows))]
            except X.SCALAR_ERRORS:
                t = None
        if t is None:
            t, _ = family._prefill(ctx, sub, np.arange(len(rows)), B, C)
        cost[:, cols] = np.where(ok[:, cols], np.asarray(t, dtype=float).reshape(n, len(cols)), np.inf)
    return _first_best(ctx, cost)


def best_side(ctx, cfg, tokens, spec, layer_bytes, ok=None):
    """The decode region ``(rows, cols)`` of the fastest decode round on the replica, among the candidates
    (:func:`region_shapes`: squares and near-square rectangles) that tile the wafer, hold the largest layer and leave
    room for every layer group (WaferLLM's admissibility): the time per output token of the round at ``tokens`` of KV
    as :meth:`.WaferFamily.pass_time` and :func:`~wseplan.analytic.engine.decode_round` compose it (smaller regions give
    more groups, each busy with its own micro-batch); with ``spec = (k, accepted tokens per step, the draft's round
    [cycles], whether the draft fits)`` the faster of the plain round and ``(verification round of k + 1 positions + k
    draft rounds) / accepted``, as the engine chooses. ``ok``: :func:`admissible` of the rows where the caller has it.
    Serving: :func:`best_serving_side`; prefill: :func:`best_prefill_side`."""
    n = len(layer_bytes)
    capr = region_capacity(ctx, ctx.region_rows, ctx.region_cols)
    ok = admissible(ctx, cfg, layer_bytes) if ok is None else ok
    cost = np.full((n, len(capr)), np.inf)
    cols = np.nonzero(ok.any(axis=0))[0]
    if len(cols):
        tok = np.broadcast_to(np.asarray(tokens, dtype=float), (n,))
        shape = (ctx.region_rows[cols], ctx.region_cols[cols])
        # the plain round and the verification round, in the same array pass
        est, *verify = _decode_round_cycles(ctx, cfg, [1.0] + ([] if spec is None else [spec[0] + 1.0]), tok, shape,
                                            capr[cols])
        if spec is not None:
            k, g, draft, fits = spec
            est = np.where(np.asarray(fits)[:, None], np.minimum(est, (verify[0] + k * np.asarray(draft)[:, None]) / g), est)
        cost[:, cols] = np.where(ok[:, cols], est, np.inf)
    return _first_best(ctx, cost)


def best_serving_side(family, ctx, cfg, ok):
    """Serving: the decode region ``(rows, cols)`` of each row on which its request is shortest (``step_s``: its
    time to first token and decode steps, the prompt chunks riding on the decode passes and the engine's prefill
    queue included), and the answers there (``infer_time``'s columns): every admissible candidate (``ok``) answered
    by the family's own serving time in one evaluation of the rows repeated once per candidate (a row with none: the
    square of the wafer's shorter side, as :func:`best_side`), the first of least time kept. Smaller regions speed
    the decode round with more layer groups, but a request's own prompt chunks pass every group: neither the fastest
    round nor the fastest pass is the shortest request. One question's remembered per setup (copies handed out)."""
    key = None if len(ok) != 1 else b"".join(np.asarray(cfg[k], dtype=float).tobytes() for k in (
        "batch", "context", "output_tokens", "num_wafers"))
    r_, c_, served = _remembered(ctx, "_serve_memo", key, lambda: _serving_side(family, ctx, cfg, ok))
    return r_.copy(), c_.copy(), {k: {p: x.copy() for p, x in v.items()} if k == "breakdown" else v.copy()
                                  for k, v in served.items()}


def _serving_side(family, ctx, cfg, ok):
    n = len(ok)
    rows, cand = np.nonzero(np.concatenate([ok, ~ok.any(axis=1)[:, None]], axis=1))  # by row, candidates in order
    fall = float(min(ctx.R, ctx.C))
    last = len(ctx.region_rows)
    r_ = np.where(cand < last, ctx.region_rows[np.minimum(cand, last - 1)], fall)
    c_ = np.where(cand < last, ctx.region_cols[np.minimum(cand, last - 1)], fall)
    dcfg = family.draft_setup(ctx, cfg)[1] if getattr(ctx, "spec", None) else None
    take = lambda d: {k: (v[rows] if type(v) is np.ndarray and v.shape[:1] == (n,) else v) for k, v in d.items()}  # noqa: E731
    sub = take(cfg)
    sub["_rows_d"], sub["_cols_d"] = r_, c_
    sub["_groups_d"] = family._groups(ctx, sub, r_, c_).sum(axis=1)
    if dcfg is not None:  # the draft model's layout of the repeated rows, as laid out for cfg's
        ctx._draft_for = (sub, take(dcfg))
    if len(rows) <= MEMO_ROWS and ctx.engine.scheduling != "static" and getattr(family, "announce_row", None):
        # a question's candidates: every pass of each, its kernels in one array pass (the composition takes them from
        # the setup's memo, :func:`.wafer_row.kernels_rows`)
        B, C, O, G = (np.asarray(sub[k], dtype=float).tolist() for k in ("batch", "context", "output_tokens", "_groups_d"))
        keys = [(b, c, o, tuple(E.round_counts(b, g))) for b, c, o, g in zip(B, C, O, G)]
        lists: dict = {}  # a question's candidates differ in their regions and micro-batch counts alone
        for key in keys:
            if key not in lists:
                lists[key] = family.serving_passes(ctx, *key)
        prefetch_rows(family, ctx, [(sub, i, lists[key]) for i, key in enumerate(keys)])
    out = family.infer_time(ctx, sub, arrays=True)
    t = np.asarray(out["step_s"], dtype=float)
    order = np.lexsort((np.arange(len(rows)), np.where(np.isnan(t), np.inf, t), rows))
    best = order[np.concatenate([[True], rows[order][1:] != rows[order][:-1]])]  # one per row, in row order
    pick = lambda v: v[best] if type(v) is np.ndarray and v.shape[:1] == (len(rows),) else v  # noqa: E731
    served = {k: ({p: pick(np.broadcast_to(x, t.shape)) for p, x in v.items()} if k == "breakdown" else pick(v))
              for k, v in out.items()}
    return r_[best], c_[best], served


def _decode_round_cycles(ctx, cfg, rounds, kv, shape, capr):
    """Decode rounds [cycles, rows x regions] on each region of ``shape = (rows, cols)``, one per count of positions per
    sequence of ``rounds``, composed as :meth:`.WaferFamily.pass_time` and
    :func:`~wseplan.analytic.engine.decode_round` compose it: the layer groups per wafer as
    :meth:`.WaferFamily._groups`, a micro-batch's pass (every block, the hand-overs between groups, the LM head, the
    wafer-to-wafer links) and its slowest group (a wafer's first group ends with a hand-over, its last with the LM
    head or the link to the next wafer), the round ``max(pass, micro-batches x slowest group)`` for each micro-batch
    count the round tries (powers of two up to ``min(groups, batch)`` and that bound), the fastest: smaller regions
    give more groups, each busy with its own micro-batch. The rounds' kernels in one array pass; one question's
    remembered per setup."""
    B = np.asarray(cfg["batch"], dtype=float)
    key = None
    if len(B) == 1:
        f = lambda v: np.ascontiguousarray(v, dtype=float).tobytes()  # noqa: E731
        key = (b"".join(f(v) for v in (B, kv, shape[0], shape[1], cfg["_sb"], cfg["_nl"], cfg["_valid"])),
               tuple(rounds))
    return _remembered(ctx, "_side_memo", key, lambda: _round_cycles(ctx, cfg, rounds, kv, shape, capr))


def _round_cycles(ctx, cfg, rounds, kv, shape, capr):
    B = np.asarray(cfg["batch"], dtype=float)[:, None]
    valid, nl = cfg["_valid"][:, :, None], cfg["_nl"][:, :, None]
    g = np.maximum(1.0, np.ceil(cfg["_sb"][:, :, None] / capr[None, None, :]))
    if ctx.engine.layer_groups == "fill":  # a group on every region the wafer tiles into (WaferFamily._groups)
        g = np.maximum(g, region_tiles(ctx, *shape)[None, None, :])
    g = np.where(valid, np.minimum(g, np.maximum(nl, 1.0)), 0.0)
    G = g.sum(axis=1)
    nw = cfg["_valid"].sum(axis=1)[:, None]
    L = cfg["_nl"].sum(axis=1)[:, None]
    gs = np.maximum(g, 1.0)
    q = np.floor_divide(nl, gs)
    # the slowest group's blocks by how the group ends (a block takes the same time on every wafer of a region): a
    # wafer's first group followed by another (hand-over), a wafer's last group before the next wafer (link), the last
    # wafer's last group (LM head)
    last = (np.arange(nl.shape[1])[None, :] == (nw - 1))[:, :, None]
    first_n = np.where(valid & (g > 1), q + (nl - q * gs > 0), -np.inf).max(axis=1)
    link_n = np.where(valid & ~last, q, -np.inf).max(axis=1)
    head_n = np.where(last, q, 0.0).sum(axis=1)
    bound = np.maximum(np.minimum(G, B), 1.0)
    powers = 2.0 ** np.arange(int(np.log2(max(float(bound.max()), 1.0))) + 1)
    tops = np.stack([np.minimum(p, bound) for p in powers] + [bound])
    seqs = np.ceil(B / tops)
    count = np.ceil(B / seqs)
    every = [seqs * per_seq for per_seq in rounds]
    T = len(tops)
    tables = _decode_tables(ctx, np.concatenate(every) if len(every) > 1 else every[0], np.asarray(kv, dtype=float), shape)
    out = []
    for j in range(len(rounds)):
        blk, head, hand, x = (v[j * T:(j + 1) * T] for v in tables)
        stage = np.maximum(np.maximum(first_n * blk + hand, link_n * blk + x), head_n * blk + head)
        lat = L * blk + (G - nw) * hand + head + (nw - 1.0) * x
        out.append(np.maximum(lat, count * stage).min(axis=0))
    return out


def _distinct(key, size: int):
    """The distinct values of a non-negative int64 key array below ``size`` and each entry's index among them, by a
    table of ``size`` flags where that is small (no sort), else by sorting."""
    if size <= 4 * key.size + (1 << 20):
        seen = np.zeros(size, dtype=bool)
        seen[key] = True
        values = np.flatnonzero(seen)
        return values, (np.cumsum(seen) - 1)[key]
    return np.unique(key, return_inverse=True)


def _decode_tables(ctx, rows, kv, shape):
    """Cycles [rows.shape] of one block, of the LM head, of a hand-over between layer groups and of a link to the
    next wafer for decode passes of ``rows`` sequence positions (whole numbers, shape ``(..., n, regions)``) at the KV
    lengths ``kv`` (``n``) on the regions ``shape = (rows, cols)``: each distinct (positions, KV length, region)
    evaluated once."""
    pr, pc = shape
    S = len(pr)
    kv_u, kv_i = np.unique(kv, return_inverse=True)
    K = len(kv_u)
    r = rows.astype(np.int64)
    top = int(r.max()) + 1
    side_i = np.arange(S)
    hv, hi = _distinct((r * S + side_i).ravel(), top * S)
    hr, hc = pr[hv % S], pc[hv % S]
    bv, bi = _distinct(((r * K + kv_i[:, None]) * S + side_i).ravel(), top * K * S)
    br, bc = pr[bv % S], pc[bv % S]
    b_at = ((bv // (S * K)).astype(float), kv_u[(bv // S) % K], br, bc)
    kw = dict(arch=ctx.m, fk=ctx.fk, gemv_mac_efficiency_frac=ctx.c.gemv_mac_efficiency_frac.si)
    if K == 1 or len(bv) < wt.ROW_PLAN_MIN:  # the head on the block's entries (as many), both in one array pass
        blk, head = wt.decode_block_and_head_cycles_array(batch=b_at[0], context=b_at[1], head_batch=b_at[0], rows=br,
                                                          cols=bc, **kw)
        h_at, h_i = (b_at[0], br, bc), bi
    else:
        h_at, h_i = ((hv // S).astype(float), hr, hc), hi
        head = wt.head_decode_cycles_array(batch=h_at[0], rows=hr, cols=hc, **kw)
        blk = wt.decode_block_cycles_array(batch=b_at[0], context=b_at[1], rows=br, cols=bc, **kw)
    act = (hv // S) * ctx.m.d_model * ctx.fk["dtype_bytes"]
    hand = handover_cycles(ctx.fk, hr, hc, act)
    x = fab.cross_system_transfer_s(message_bytes=act, bandwidth_bytes_per_s=ctx.system.io_bandwidth_bytes_per_s.si,
                                    latency_s=ctx.c.cross_system_latency_s.si) * ctx.clock
    keep_decode_table(ctx, b_at, blk, h_at, head)
    return tuple(v[i].reshape(rows.shape) for v, i in ((_total(blk), bi), (_total(head), h_i), (hand, hi), (x, hi)))


def _total(parts: dict) -> np.ndarray:
    return sum(np.asarray(v, dtype=float) for v in parts.values())


def handover_cycles(fk: dict, rows, cols, act_bytes):
    """One hand-over of a pass's activations from a layer group's region to the next on the wafer [cycles]: the
    activations (``act_bytes``, spread over the region's shorter side) cross ``rows + cols`` hops, then a kernel
    launch. Used by the pass time and by the region search (arrays broadcast; ``wafer_row`` has its float form)."""
    return fab.message_cycles(hops=rows + cols, message_bytes=act_bytes / np.minimum(rows, cols),
                              hop_latency_cycles=fk["hop_latency_cycles"], link_bytes_per_cycle=fk["link_bytes_per_cycle"],
                              wavelet_bytes=fk["wavelet_bytes"]) + fk["per_kernel_overhead_cycles"]
