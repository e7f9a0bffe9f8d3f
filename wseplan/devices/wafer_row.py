"""The resident wafer family's forward pass of one configuration row in Python floats (issue 14 item 1).

:meth:`WaferFamily.pass_time <wseplan.devices.wafer.WaferFamily.pass_time>` on arrays costs numpy's dispatch per
operation; a question of one configuration asks for a few passes (one per micro-batch candidate of a decode round),
each on one row. :func:`pass_row` is the same pass on one row: the kernels (cycles of a block and of the head, which
depend on the region and the pass's token counts alone) are evaluated by the array code itself, once per distinct
combination per setup and remembered (a decode round announces its micro-batch candidates, :func:`announce_row`, and
their kernels are evaluated in one array pass at the first miss, under speculative decoding with the verification
round's; a serving question announces every pass of the target); a pass of decode rows alone takes them from the
region search's decode tables where those hold its entry (:func:`keep_decode_table`: the same array code), and the pass's
bookkeeping over the replica's wafers (layer groups, hops, the slowest group) is the array code's expression in
Python floats: the same IEEE-754 operations in the same order, so every number is the array path's, bit for bit.
Where numpy would give inf or NaN the float forms raise one of
:data:`~wseplan.analytic.elementwise.SCALAR_ERRORS` and the question goes to the arrays.
"""
from __future__ import annotations

import contextlib
import math
import struct

import numpy as np

from ..analytic import wse_time as wt

#: kernel results remembered per setup (a bound on memory: the memo starts again when it is full)
MEMO_MAX = 4096
#: region-search decode tables kept per setup for the pass kernels (:func:`keep_decode_table`)
TABLES_MAX = 4
#: the most entries of a kept table
TABLE_ENTRIES_MAX = 512
#: passes whose answers a setup remembers (:func:`pass_row`); emptied when full
PASS_ROW_MEMO_MAX = 4096
#: an array pass of at most this many entries takes its kernels from the setup's memo (:func:`kernels_rows`; a serving
#: search of a question has up to about 70 admissible regions with layer_groups: fill)
MEMO_ROWS = 128

_KEY = struct.Struct("9d").pack  # the kernel arguments' exact bits (-0.0 and NaN payloads kept apart)


def own_prefill_regions(ctx) -> bool:
    """Whether prompts run on prefill regions of their own: under a static engine, whose batch is laid out again
    between its prompts and its decode (WaferLLM's prefill and decode layouts, He et al., OSDI'25), or where
    a prefill grid is given. An in-flight engine's replica keeps one layout: resident weights are not moved between
    a request's phases, and its prompt chunks ride on the decode passes, so a prefill (``time --phase prefill``) runs
    on the decode regions of the replica's serving layout, as ``serve`` times the prompt."""
    if ctx.q.phase == "decode":
        return False
    return ctx.engine.scheduling == "static" or (ctx.q.phase == "prefill" and ctx.grids["prefill"] is not None
                                                 and ctx.grids["prefill"] != ctx.grids["decode"])


def _kernel_args(fam, ctx, cfg, i, decode_seqs, decode_kv, prefill_tokens, prefill_span, prefill_kv, prefill_seqs,
                 new_per_seq=1.0) -> tuple:
    """The kernels' arguments of one pass of row ``i`` (floats): ``(rows, cols, decode seqs, prompt tokens, decode KV,
    span, prompt KV, prompt seqs, new tokens per seq)``; a pass with decode sequences runs on the decode regions, a
    prefill-only pass on the prefill regions where prompts have their own (:func:`own_prefill_regions`)."""
    dseq = float(decode_seqs)
    own = own_prefill_regions(ctx)
    if own and "_rows_p" not in cfg and not dseq > 0:
        fam._regions(ctx, cfg, ("prefill",))
    k = "d" if (dseq > 0 or not own or "_rows_p" not in cfg) and "_rows_d" in cfg else "p"
    return (float(cfg[f"_rows_{k}"][i]), float(cfg[f"_cols_{k}"][i]), dseq, float(prefill_tokens), float(decode_kv),
            float(prefill_span), float(prefill_kv), float(prefill_seqs), float(new_per_seq))


def keep_decode_table(ctx, blk_at, blk: dict, head_at, head: dict) -> None:
    """Keep a region search's decode kernels for the passes that follow (:func:`_from_tables`): block parts ``blk``
    [cycles] (arrays over the entries whose ``(positions, KV length, rows, cols)`` columns are ``blk_at``) and LM head
    parts ``head`` [cycles] (over ``head_at`` = ``(positions, rows, cols)``) of GEMV-only passes on the candidate
    regions (squares and rectangles, keyed by both sides). The setup keeps
    the last :data:`TABLES_MAX` of at most :data:`TABLE_ENTRIES_MAX` entries (a many-row search's are not kept: a
    question's lookup would build their index); their lookup index is built at the first lookup."""
    if len(blk_at[0]) > TABLE_ENTRIES_MAX or len(head_at[0]) > TABLE_ENTRIES_MAX:
        return
    tables = ctx.__dict__.setdefault("_decode_kernel_tables", [])
    if len(tables) >= TABLES_MAX:
        del tables[0]
    tables.append([None, blk_at, blk, head_at, head])


def _index(t) -> tuple:
    """A kept table's lookup, per part kind ``(entry -> position, part names, part values per name)`` (floats): the
    block's entries ``(positions, KV, rows, cols)``, the head's ``(positions, rows, cols)``."""
    _, blk_at, blk, head_at, head = t

    def lookup(at, parts):
        n = len(at[0])
        where = {key: j for j, key in enumerate(zip(*(np.asarray(a, dtype=float).tolist() for a in at)))}
        return where, list(parts), [np.broadcast_to(np.asarray(v, dtype=float), (n,)).tolist() for v in parts.values()]

    t[0] = (lookup(blk_at, blk), lookup(head_at, head))
    return t[0]


def _from_tables(ctx, args: tuple):
    """The kernel parts of a pass (:func:`_kernel_args`) from a kept region-search table, or None. Only a pass of
    decode rows alone on a region whose array form evaluates a table's entry: no prompt tokens, at least one
    position, and the KV length its :meth:`WaferFamily._pass_kernels` averages over the rows (``(d kv + 0) / d``) equal
    to the table's; its block parts then are the table's plus ``fabric`` 0 (the prompt-on-GEMM alternative adds
    nothing), the head the table's at those positions: the numbers the array pass gives."""
    tables = ctx.__dict__.get("_decode_kernel_tables")
    r, c, dseq, ptok, dkv, span, pkv, pseqs, nps = args
    if not tables or ptok != 0.0 or span != 0.0 or pkv != 0.0 or pseqs != 0.0 or not dseq > 0:
        return None
    dtok = dseq * nps
    if not (dtok >= 1.0 and math.isfinite(dtok) and math.isfinite(dkv)) or (dtok * dkv + 0.0) / max(dtok, 1e-12) != dkv:
        return None
    for t in reversed(tables):
        (bw, bn, bv), (hw, hn, hv) = t[0] or _index(t)
        jb, jh = bw.get((dtok, dkv, r, c)), hw.get((dtok, r, c))
        if jb is not None and jh is not None:
            blk = {k: v[jb] for k, v in zip(bn, bv)}
            if all(map(math.isfinite, blk.values())):
                blk["fabric"] = 0.0
                return blk, {k: v[jh] for k, v in zip(hn, hv)}
    return None


def _evaluate(fam, ctx, memo: dict, args: list) -> None:
    """Kernel parts of the passes ``args`` (tuples of :func:`_kernel_args`, distinct, none remembered), from the kept
    region-search tables where they hold them (:func:`_from_tables`), the rest by one array pass of
    :meth:`WaferFamily._pass_kernels`, into ``memo``."""
    found = [_from_tables(ctx, a) for a in args]
    todo = [a for a, f in zip(args, found) if f is None]
    if len(memo) + len(args) > MEMO_MAX:
        memo.clear()
    for a, f in zip(args, found):
        if f is not None:
            memo[_KEY(*a)] = f
    if not todo:
        return
    m = len(todo)
    cols = [np.array(c) for c in zip(*todo)]
    blk, head = fam._pass_kernels(ctx, *cols)
    blk = {k: np.broadcast_to(np.asarray(v, dtype=float), (m,)).tolist() for k, v in blk.items()}
    head = {k: np.broadcast_to(np.asarray(v, dtype=float), (m,)).tolist() for k, v in head.items()}
    for j, a in enumerate(todo):
        memo[_KEY(*a)] = ({k: v[j] for k, v in blk.items()}, {k: v[j] for k, v in head.items()})


@contextlib.contextmanager
def announce_row(fam, ctx, cfg, i: int, passes):
    """While the block runs, the passes ``passes()`` (a callable giving keyword dicts of :func:`pass_row`) of row ``i``
    are announced: the first pass whose kernels the memo lacks has every announced pass's kernels evaluated in one
    array pass (:func:`prefetch_rows`). A decode round announces its micro-batch candidates before asking for them one
    by one, so that a first question pays one array pass where it paid one per candidate; a question asked again
    finds its kernels and never reads the announcement."""
    pending = ctx.__dict__.setdefault("_announced", [])
    entry = (cfg, i, passes)
    pending.append(entry)
    try:
        yield
    finally:
        for j in range(len(pending) - 1, -1, -1):
            if pending[j] is entry:
                del pending[j]
                break


def prefetch_rows(fam, ctx, entries, extra=()) -> None:
    """Remember the kernels of the passes of every ``(cfg, i, passes)`` entry (keyword dicts of :func:`pass_row` for
    row ``i`` of ``cfg``), and of the kernel arguments of ``extra``, that the memo lacks, in one array pass."""
    memo = ctx.__dict__.setdefault("_kernel_memo", {})
    seen, todo = set(), []
    args = [_kernel_args(fam, ctx, cfg, i, **kw) for cfg, i, passes in entries for kw in passes]
    for a in args + list(extra):
        key = _KEY(*a)
        if key not in memo and key not in seen:
            seen.add(key)
            todo.append(a)
    if todo:
        _evaluate(fam, ctx, memo, todo)


def kernels_row(fam, ctx, args: tuple):
    """Block and head kernel parts [cycles] (dicts of floats) of one pass with the kernel arguments ``args``
    (:func:`_kernel_args`), from the setup's memo; a miss evaluates the announced passes (:func:`announce_row`) with
    it, or it alone, by :meth:`WaferFamily._pass_kernels` (arrays)."""
    memo = ctx.__dict__.setdefault("_kernel_memo", {})
    key = _KEY(*args)
    hit = memo.get(key)
    if hit is None:
        pending = ctx.__dict__.get("_announced")
        if pending:  # every announced pass (of every announcing row) and this one, in one array pass
            todo = list(pending)
            pending.clear()
            prefetch_rows(fam, ctx, [(cfg_, i_, passes()) for cfg_, i_, passes in todo], extra=[args])
            hit = memo.get(key)
        if hit is None:
            _evaluate(fam, ctx, memo, [args])
            hit = memo[key]
    return hit


def kernels_rows(fam, ctx, args: list):
    """Block and head kernel parts [cycles] of the passes ``args`` (:func:`_kernel_args` tuples) as arrays over them
    (the parts' union, 0 where a pass lacks one), from the setup's memo; the misses, with the announced passes, in one
    array pass. None where the memo cannot hold them all (the caller evaluates the arrays)."""
    memo = ctx.__dict__.setdefault("_kernel_memo", {})
    keys = [_KEY(*a) for a in args]
    if not all(k in memo for k in keys):
        pending = ctx.__dict__.get("_announced") or []
        todo = list(pending)
        pending.clear()
        prefetch_rows(fam, ctx, [(cfg_, i_, passes()) for cfg_, i_, passes in todo], extra=args)
    got = [memo.get(k) for k in keys]
    if any(g is None for g in got):
        return None
    return tuple({k: np.array([g[j].get(k, 0.0) for g in got]) for k in dict.fromkeys(k for g in got for k in g[j])}
                 for j in (0, 1))


def pass_row(fam, ctx, cfg, i: int, *, decode_seqs, decode_kv, prefill_tokens, prefill_span, prefill_kv, prefill_seqs,
             new_per_seq=1.0):
    """:meth:`WaferFamily.pass_time` of row ``i`` in Python floats: ``(latency_s, slowest group's busy time, parts)``."""
    args = _kernel_args(fam, ctx, cfg, i, decode_seqs, decode_kv, prefill_tokens, prefill_span, prefill_kv, prefill_seqs,
                        new_per_seq)
    nl, valid, sb = cfg["_nl"][i].tolist(), cfg["_valid"][i].tolist(), cfg["_sb"][i].tolist()
    nw = float(cfg["_nw"][i])
    # the answer depends on the kernel arguments, the row's layer groups and the setup alone: a question asked again
    # (another evaluate of the same configuration on the same setup) reads it back (issue 14)
    memo = ctx.__dict__.setdefault("_pass_row_memo", {})
    mkey = (args, tuple(nl), tuple(valid), tuple(sb), nw)
    hit = memo.get(mkey)
    if hit is not None:
        return hit[0], hit[1], dict(hit[2])
    r_, c_, dseq, ptok, _, _, _, _, nps = args
    blk, head = kernels_row(fam, ctx, args)
    fk, c = ctx.fk, ctx.c
    clock = float(ctx.clock)
    blk_total = head_total = 0.0  # summed left to right as the arrays are (not math.fsum, not 3.12's compensated sum)
    for v in blk.values():
        blk_total = blk_total + v
    for v in head.values():
        head_total = head_total + v
    act_bytes = (dseq * nps + ptok) * float(ctx.m.d_model) * float(fk["dtype_bytes"])
    # every operand below is a finite Python float, so ``a if a >= b else b`` is X.maximum (and the mirror X.minimum)
    # bit for bit, without its type checks: this loop runs a dozen times per question asked again (issue 14)
    side = r_ if r_ <= c_ else c_
    wb = float(fk["wavelet_bytes"])
    w = float(math.ceil(act_bytes / side / wb))
    w = 1.0 if 1.0 >= w else w
    hop = (r_ + c_) * float(fk["hop_latency_cycles"]) + w * wb / float(fk["link_bytes_per_cycle"]) \
        + float(fk["per_kernel_overhead_cycles"])
    x = float(c.cross_system_latency_s.si) + act_bytes / float(ctx.system.io_bandwidth_bytes_per_s.si)
    capr = r_ * c_ * float(ctx.sram_pe) * (1.0 - float(ctx.reserve))
    # (fill: a group on every region the wafer tiles into, and the wafer's SRAM shared over them, as region_capacity)
    fill = ctx.engine.layer_groups == "fill"
    tiles = float(math.floor(ctx.R / r_)) * float(math.floor(ctx.C / c_)) if fill else 1.0
    if fill:
        cap_t = float(ctx.cap) / tiles
        capr = capr if capr >= cap_t else cap_t
    mx = -math.inf
    sumG = L = 0.0
    last_j = nw - 1
    for j, (nl_j, ok, sb_j) in enumerate(zip(nl, valid, sb)):
        if ok:
            g = float(math.ceil(sb_j / capr))
            g = 1.0 if 1.0 >= g else g
            g = g if g >= tiles else tiles
            top = nl_j if nl_j >= 1.0 else 1.0
            g = g if g <= top else top
        else:
            g = 0.0
        sumG += g
        L += nl_j
        if not ok:
            continue
        gg = g if g >= 1.0 else 1.0
        q = float(nl_j // gg)
        rem = nl_j - q * gg
        last = j == last_j
        t_last = (q * blk_total + (head_total if last else 0.0)) / clock + (0.0 if last else x)
        t_first = ((q + (1.0 if rem > 0 else 0.0)) * blk_total) / clock + hop / clock
        stage = (t_first if t_first >= t_last else t_last) if g > 1 else t_last
        mx = mx if mx >= stage else stage
    lat = L * blk_total / clock + (sumG - nw) * hop / clock + head_total / clock + (nw - 1) * x
    parts: dict = {}
    for key in list(blk) + [k for k in head if k not in blk]:
        name = wt._PART_NAMES[key]
        parts[name] = parts.get(name, 0.0) + (L * blk.get(key, 0.0) + head.get(key, 0.0)) / clock
    parts["cross_region_link"] = (hop * (sumG - nw) + x * clock * (nw - 1)) / clock
    if len(memo) >= PASS_ROW_MEMO_MAX:
        memo.clear()
    memo[mkey] = (lat, mx, dict(parts))
    return lat, mx, parts
