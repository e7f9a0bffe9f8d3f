"""Wafer time: training steps (weight streaming, :mod:`.stream`) and weights-resident inference (prefill,
decode, end to end) from the fabric closed forms in :mod:`.fabric`.

Inference mapping (the WaferLLM / Cerebras layout): a model's layers are split into contiguous stages across
wafers (:func:`wseplan.fit.fit`); on each wafer the stage's layers are split into *layer groups*, each placed
on its own rectangular region of PEs, every layer of a group spread over its whole region. One layer's kernels
(GEMV in decode, GEMM in prefill) run on that region (``core_grid``), so the region side sets the hop
distances and the work per PE. A token passes the groups in order (an activation vector hops between regions
on the wafer and over Ethernet between wafers). With several groups, independent micro-batches fill the
pipeline.

Per transformer block the kernels are: two RMS/layer norms (all-reduce), the QKV projection, attention scores
and context (the KV cache is the stationary operand), a softmax (all-reduce), the output projection and the MLP
(up/gate, down). Decode maps each matrix product to :func:`.fabric.gemv_cycles`, prefill to
:func:`.fabric.gemm_cycles` (causal attention attends to ``(t+1)/2`` tokens on average).

Constants: hardware from the catalog wafer; the fabric constants the mesh simulator resolves
(``fabric_sim_fit.yaml``, ``wseplan calibrate``) and the wafer's routing-colour limit (``free_routing_colors``:
binary reduction trees deeper than the free colours allow give way to the two-level K-tree or the chain) through
:func:`.fabric.wafer_fabric_kwargs`; the kernel constants fitted to the WaferLLM measurements on top of them
(``fabric.yaml``, :func:`.wse_fit.fit_wse_overheads`).

References
----------
He, C. et al., "WaferLLM: Large Language Model Inference at Wafer Scale", USENIX OSDI 2025.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..architecture import Attention
from ..errors import InputError
from ..workload import (block_params, block_types, edge_weight_bytes, kv_bytes_per_element, routed_params,
                        weight_bytes_split)
from . import fabric as fab
from . import fabric_kernels as fkern
from .layers import attended_per_token, cached_tokens
from .rows import distinct, unique_rows
from .fabric import gemv_latency_s  # noqa: F401  (re-exported for validation's micro rows)

PHASES = ("train", "prefill", "decode", "e2e")


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------
class _Dims(NamedTuple):
    """The matrix shapes of one block type on a region (:func:`_dims`)."""

    share: float  # the type's share of the model's layers
    pre: tuple  # (input, output) features of the weight GEMVs before the attention core (QKV; MLA's projections)
    post: tuple  # ... and after it (attention output, MLP or the top-k experts side by side, shared experts)
    score_k: int  # score GEMV's reduction (heads x query-key width) in prefill; context GEMV's output: ctx_n
    ctx_n: int
    decode_score_k: int  # the same in decode (MLA: absorbed, over the latent and the RoPE key)
    decode_ctx_n: int
    attention: Attention
    heads: int


def _dims(arch) -> tuple[_Dims, ...]:
    """Per block type of ``arch`` (:func:`~wseplan.workload.block_types`, the fit's per-layer workload), the shapes
    its kernels run: each weight matrix as a GEMV or GEMM of ``(input, output)`` features, a routed MLP as its
    ``experts_per_token`` experts side by side (the compute of the tokens x k routed rows), the attention core's
    score and context products over the type's window (:data:`_FUSED_WITH`: matrices run as one GEMV). A uniform
    model has one type of share 1."""
    hit = _DIMS.get(id(arch))
    if hit is not None and hit[0] is arch:
        return hit[1]
    types = block_types(arch)
    out = []
    for b in types:
        att = b.attention
        mats, names = [], []
        for g in b.gemms:
            k_, n_ = (g.k * g.active, g.n) if g.tp_split == "k" else (g.k, g.n * g.active)
            fuse = _FUSED_WITH.get(g.name)
            if fuse in names:  # one GEMV with the matrix that reads the same vector (or writes the same sum)
                i = names.index(fuse)
                k0, n0 = mats[i]
                mats[i] = (k0 + k_, n0) if g.tp_split == "k" else (k0, n0 + n_)
                continue
            mats.append((k_, n_))
            names.append(g.name)
        mats = tuple(mats)
        cut = names.index("attn_out")
        H = att.num_heads
        dk, dn = (att.kv_elems_per_token, att.latent_dim) if att.latent_dim else (att.qk_head_dim, att.v_head_dim)
        out.append(_Dims(share=1.0 if len(types) == 1 else b.count / arch.num_layers, pre=mats[:cut], post=mats[cut:],
                         score_k=H * att.qk_head_dim, ctx_n=H * att.v_head_dim, decode_score_k=H * dk,
                         decode_ctx_n=H * dn, attention=att, heads=arch.num_heads))
    out = tuple(out)
    if len(_DIMS) >= 64:
        _DIMS.clear()
    _DIMS[id(arch)] = (arch, out)
    return out


#: matrices the wafer runs as one GEMV with an earlier one of the block: MLA's two down-projections of the block input
#: (outputs side by side), and the shared experts beside the routed ones (one more active expert: up-projections side
#: by side, down-projections summed into one output)
_FUSED_WITH = {"kv_a": "q_a", "shared_up": "mlp_up", "shared_down": "mlp_down"}

#: :func:`_dims` by model object (models are frozen; the object is kept, so its id is not reused)
_DIMS: dict = {}


def _mean_parts(types, parts_by_type: list[dict]) -> dict:
    """The parts of a model's mean block [cycles]: each type's parts weighted by its share of the layers (one type:
    its parts), so that ``layers x`` the mean is the layers' sum."""
    if len(parts_by_type) == 1:
        return parts_by_type[0]
    out = {}
    for key in parts_by_type[0]:
        acc = types[0].share * parts_by_type[0][key]
        for D, p in zip(types[1:], parts_by_type[1:]):
            acc = acc + D.share * p[key]
        out[key] = acc
    return out


# ---------------------------------------------------------------------------------------------
# Per-block closed forms (cycles), vectorized over region sides
# ---------------------------------------------------------------------------------------------
def decode_block_cycles(*, arch, batch, context, rows, cols, fk: dict, gemv_mac_efficiency_frac: float) -> dict:
    """One transformer block of one decode step for ``batch`` sequences on a rows x cols region [cycles].

    Returns the parts ``overhead``, ``latency``, ``serialization``, ``compute`` (they sum to the block time):
    the QKV, score, context, output and MLP GEMVs (the KV cache of each sequence is its own stationary
    operand) plus the all-reduces of two norms and one softmax. Scalar form of
    :func:`decode_block_cycles_array` (one implementation).
    """
    return decode_block_cycles_array(arch=arch, batch=batch, context=context, rows=rows, cols=cols, fk=fk,
                                     gemv_mac_efficiency_frac=gemv_mac_efficiency_frac)


def _reduce_kwargs(fk: dict) -> dict:
    """Line-reduction constants of the fabric kwargs ``fk`` (:func:`.fabric.wafer_fabric_kwargs`): the
    simulator-fitted stage/level costs and tree model, and the tree depth the routing colours allow (the
    broadcast of the result holds one colour, each tree level one more)."""
    return dict(reduce_stage_cycles=fk.get("reduce_stage_cycles", 0.0), tree_level_cycles=fk.get("tree_level_cycles", 0.0),
                tree_level_overlap_frac=fk.get("tree_level_overlap_frac", 0.0),
                tree_model=fk.get("tree_model", "levels"), max_tree_levels=fk.get("num_colors", np.inf) - 1.0)


def _stacked(region, *operands) -> list[np.ndarray]:
    """Each group of operands broadcast to one shape (theirs and the region's) and stacked along a new first axis
    (one entry per kernel), so a block's kernels run as one array pass."""
    shapes = {region.P.shape, region.Q.shape}
    for group in operands:
        for v in group:
            if type(v) is np.ndarray:
                shapes.add(v.shape)
            elif not isinstance(v, (float, int, np.generic)):
                shapes.add(np.shape(v))
    shape = shapes.pop() if len(shapes) == 1 else np.broadcast_shapes(*shapes)
    out = []
    for group in operands:
        a = np.empty((len(group), *shape))
        for i, v in enumerate(group):
            a[i] = v
        out.append(a)
    return out


def _statistics(rows, cols, nbytes, fk, region, *, serial: bool):
    """Line reduction + line broadcast of each statistic in ``nbytes`` (one per row of the stack) along the rows of
    the region [cycles]: ``(full, serial)`` sums (``serial``: without hop, ramp and stage latency) or ``full`` alone."""
    region = fkern.Region.of(rows, cols) if region is None else region
    rk = _reduce_kwargs(fk)
    variants = [(fk["hop_latency_cycles"], fk["ramp_latency_cycles"], rk["reduce_stage_cycles"], rk["tree_level_cycles"])]
    if serial:
        variants.append((0.0, 0.0, 0.0, 0.0))
    return fkern.reduce_broadcast(
        region, "Q", _stacked(region, nbytes)[0], link_bytes_per_cycle=fk["link_bytes_per_cycle"], wavelet_bytes=fk["wavelet_bytes"],
        tree_level_overlap_frac=rk["tree_level_overlap_frac"], max_tree_levels=rk["max_tree_levels"],
        tree_model=fab._check_tree_model(rk["tree_model"]), variants=variants)


def _add_allreduce(parts, rows, cols, nbytes, fk, region=None):
    """Norm/softmax statistics: each vector lives along one line of the region (the root line of the previous
    reduction), so its all-reduce is one line reduction plus one line broadcast of its bytes. ``nbytes``: one
    statistic's bytes or a sequence of them (added in order); ``region``: a :class:`~.fabric_kernels.Region` of
    ``rows`` x ``cols`` whose line terms the block's kernels share."""
    seq = nbytes if isinstance(nbytes, (list, tuple)) else [nbytes]
    (red, bc), (red0, bc0) = _statistics(rows, cols, seq, fk, region, serial=True)
    for i in range(len(seq)):
        full = red[i] + bc[i]
        serial = red0[i] + bc0[i]
        parts["overhead"] = parts["overhead"] + fk["per_kernel_overhead_cycles"]
        parts["latency"] = parts["latency"] + (full - serial)
        parts["serialization"] = parts["serialization"] + serial


def _accumulate(parts: dict, stacked: dict) -> dict:
    """``parts[key] + stacked[key][0] + stacked[key][1] + ...``, in that order, for every key of ``parts``."""
    for key in parts:
        acc = parts[key]
        for v in stacked[key]:
            acc = acc + v
        parts[key] = acc
    return parts


def decode_layer_floor_s(arch, wafer, *, rows: int, cols: int, precision: str = "fp16", context: int = 1,
                         constants=None) -> float:
    """Latency floor of one decode block on a rows x cols region [s]: the kernel overheads and hop/pass-through
    latencies that no amount of compute or link bandwidth removes (the parts ``overhead`` + ``latency`` of
    :func:`decode_block_cycles`), divided by the clock."""
    c = constants or fab.load_fabric_constants()
    fk = fab.wafer_fabric_kwargs(wafer, precision, c)
    parts = decode_block_cycles(arch=arch, batch=1, context=context, rows=rows, cols=cols, fk=fk,
                                gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si)
    return float(parts["overhead"] + parts["latency"]) / wafer.clock_hz.si


def head_decode_cycles(*, arch, batch, rows, cols, fk: dict, gemv_mac_efficiency_frac: float) -> dict:
    """Final norm + LM head GEMV + arg-max for ``batch`` sequences [cycles], by part (scalar form of
    :func:`head_decode_cycles_array`)."""
    return head_decode_cycles_array(arch=arch, batch=batch, rows=rows, cols=cols, fk=fk,
                                    gemv_mac_efficiency_frac=gemv_mac_efficiency_frac)


def prefill_block_cycles(*, arch, tokens, rows, cols, fk: dict, gemm_mac_efficiency_frac: float,
                         gemm_step_overhead_cycles: float, batch: int = 1, causal: bool = True) -> dict:
    """One transformer block over ``batch`` prompts of ``tokens`` tokens on a rows x cols region [cycles], by
    part (``overhead``, ``compute``, ``fabric``). Attention attends within each prompt; norms and softmax
    reduce per-token statistics along each row and broadcast them back. Scalar form of
    :func:`prefill_block_cycles_array`."""
    return prefill_block_cycles_array(arch=arch, tokens=tokens, rows=rows, cols=cols, fk=fk,
                                      gemm_mac_efficiency_frac=gemm_mac_efficiency_frac,
                                      gemm_step_overhead_cycles=gemm_step_overhead_cycles, batch=batch, causal=causal)


# ---------------------------------------------------------------------------------------------

def _region_candidates(wafer, min_side: int = 32) -> np.ndarray:
    """Square region sides that tile the wafer maximally: ``min(R // a, C // b)`` for a x b regions [PEs] (WaferLLM's
    square regions; the resident wafer search adds the near-square rectangles that fill the remainder a square tiling
    leaves idle, :func:`wseplan.devices.wafer_regions.region_shapes`)."""
    R, C = int(wafer.pe_rows.si), int(wafer.pe_cols.si)
    a = np.arange(1, max(R // min_side, 1) + 1)
    b = np.arange(1, max(C // min_side, 1) + 1)
    sides = np.minimum.outer(R // a, C // b).ravel()
    return distinct(sides[sides >= min(min_side, min(R, C))])


_PART_NAMES = {"overhead": "kernel_overhead", "latency": "fabric_latency", "serialization": "fabric_bandwidth",
               "compute": "compute", "fabric": "fabric", "transfer": "cross_region_link"}


# ---------------------------------------------------------------------------------------------
# Array-capable forms (batch, context and region sides broadcast), for vectorized sweeps
# ---------------------------------------------------------------------------------------------
#: the fewest rows :func:`_row_plan` looks for repeats among
ROW_PLAN_MIN = 32


#: up to this many entries :func:`decode_block_and_head_cycles_array` is one array pass even where rows repeat (numpy's
#: cost per call outweighs the kernels evaluated twice)
FUSED_MAX = 256


def _row_plan(x, region, shape, min_rows: int = ROW_PLAN_MIN):
    """Distinct rows for evaluating a function of ``x`` and the region along the first axis of ``shape``:
    ``(inverse, x on the distinct rows, their region)`` when ``x`` and the region vary along that axis alone (a
    configuration's batch against region sides along the second axis, or one region per row) and rows repeat
    enough to pay; None otherwise."""
    nd = len(shape)
    if nd == 0 or shape[0] < min_rows:
        return None
    n0 = shape[0]

    def row_only(a):
        return a.ndim == nd and a.shape[0] == n0 and all(d == 1 for d in a.shape[1:])

    if not row_only(x):
        return None
    keys, vary = [x.reshape(n0)], []
    for a in (region.P, region.Q):
        vary.append(row_only(a))
        if vary[-1]:
            keys.append(a.reshape(n0))
        elif not (a.ndim < nd or a.shape[0] == 1):
            return None
    first, inv = unique_rows(*keys)
    if len(first) > 0.75 * n0:
        return None
    sub = fkern.Region(region.P[first] if vary[0] else region.P, region.Q[first] if vary[1] else region.Q) \
        if any(vary) else region
    return inv, x[first], sub


def _gather(out, inv):
    """Nested dicts/tuples of stacked arrays ``(kernels, rows, ...)``, rows taken by ``inv``."""
    if isinstance(out, dict):
        return {k: _gather(v, inv) for k, v in out.items()}
    if isinstance(out, tuple):
        return tuple(_gather(v, inv) for v in out)
    return out[:, inv]


def _on_rows(fn, x, region, shape):
    """``fn(x, region)`` (stacked arrays ``(kernels, *shape)``), evaluated once per distinct row when rows repeat
    (:func:`_row_plan`) and gathered: the numbers ``fn`` gives row by row."""
    plan = _row_plan(x, region, shape)
    if plan is None:
        return fn(x, region)
    inv, xs, reg = plan
    return _gather(fn(xs, reg), inv)


def decode_block_cycles_array(*, arch, batch, context, rows, cols, fk: dict, gemv_mac_efficiency_frac: float,
                              region=None) -> dict:
    """:func:`decode_block_cycles` with ``batch``, ``context``, ``rows`` and ``cols`` as broadcasting arrays
    [cycles]; the same kernels and the same arithmetic. ``region``: a :class:`~.fabric_kernels.Region` of ``rows``
    x ``cols`` to share line terms with other calls on the same regions.

    The kernels that depend on the batch alone (QKV, output and MLP GEMVs, the statistics) and those that depend on
    context x batch (score and context GEMVs) each run as one stacked array pass, once per distinct row where rows
    repeat (:func:`_on_rows`), and the parts are summed in the block's order. A model whose layers differ: the mean
    block of its types (:func:`_dims`, :func:`_mean_parts`), each type's context capped by its window."""
    b = np.asarray(batch, dtype=float)
    ctx = np.asarray(context, dtype=float)
    region = fkern.Region.of(rows, cols) if region is None else region  # line terms shared by every kernel of the block
    types = _dims(arch)
    return _mean_parts(types, [_decode_block_type(D, b, ctx, region, fk, gemv_mac_efficiency_frac) for D in types])


def _decode_block_type(D: _Dims, b, ctx, region, fk: dict, gemv_mac_efficiency_frac: float) -> dict:
    """:func:`decode_block_cycles_array` of one block type [cycles]."""
    g = dict(fk, mac_efficiency_frac=gemv_mac_efficiency_frac)
    cb = cached_tokens(D.attention, ctx) * b
    shape = np.broadcast_shapes(b.shape, cb.shape, region.P.shape, region.Q.shape)
    npre = len(D.pre)
    nw = npre + len(D.post)

    def per_batch(bb, reg):
        mats = [(bb, k_, n_) for k_, n_ in D.pre + D.post]
        m, k, n = _stacked(reg, *zip(*mats))
        (red, bc), (red0, bc0) = _statistics(None, None, [4.0 * bb, 4.0 * bb, 8.0 * bb * D.heads], fk, reg, serial=True)
        serial = red0 + bc0
        return fkern.gemv_parts(reg, m=m, k=k, n=n, **g), (red + bc) - serial, serial

    def per_context(x, reg):
        m, k, n = _stacked(reg, (1.0, 1.0), (D.decode_score_k, x), (x, D.decode_ctx_n))
        return fkern.gemv_parts(reg, m=m, k=k, n=n, **g)

    if _row_plan(b, region, shape) is None and _row_plan(cb, region, shape) is None:
        # no row repeats enough to pay: the GEMVs as one array pass (QKV, score, context, output, MLP up, down)
        mats = [(b, k_, n_) for k_, n_ in D.pre] + [(1.0, D.decode_score_k, cb), (1.0, cb, D.decode_ctx_n)] \
            + [(b, k_, n_) for k_, n_ in D.post]
        m, k, n = _stacked(region, *zip(*mats))
        every = fkern.gemv_parts(region, m=m, k=k, n=n, **g)
        (red, bc), (red0, bc0) = _statistics(None, None, [4.0 * b, 4.0 * b, 8.0 * b * D.heads], fk, region, serial=True)
        ser = red0 + bc0
        lat = (red + bc) - ser
        order = {key: [v[i] for i in range(nw + 2)] for key, v in every.items()}
    else:
        pa, lat, ser = _on_rows(per_batch, b, region, shape)
        pc = _on_rows(per_context, cb, region, shape)
        order = {key: [pa[key][i] for i in range(npre)] + [pc[key][0], pc[key][1]]
                 + [pa[key][i] for i in range(npre, nw)] for key in pa}
    parts = {}
    for key in ("overhead", "latency", "serialization", "compute"):  # QKV, score, context, output, MLP up, MLP down
        acc = 0.0
        for v in order[key]:
            acc = acc + v
        parts[key] = acc
    for i in range(3):  # two norms and one softmax
        parts["overhead"] = parts["overhead"] + fk["per_kernel_overhead_cycles"]
        parts["latency"] = parts["latency"] + lat[i]
        parts["serialization"] = parts["serialization"] + ser[i]
    return parts


def head_decode_cycles_array(*, arch, batch, rows, cols, fk: dict, gemv_mac_efficiency_frac: float, region=None) -> dict:
    """:func:`head_decode_cycles` with broadcasting ``batch``, ``rows``, ``cols`` [cycles] (``region`` as
    :func:`decode_block_cycles_array`; once per distinct row where rows repeat)."""
    b = np.asarray(batch, dtype=float)
    region = fkern.Region.of(rows, cols) if region is None else region
    shape = np.broadcast_shapes(b.shape, region.P.shape, region.Q.shape)

    def per_batch(bb, reg):
        parts = fkern.gemv_parts(reg, m=bb, k=arch.d_model, n=arch.vocab_size,
                                 **dict(fk, mac_efficiency_frac=gemv_mac_efficiency_frac))
        parts = {k: v * 1.0 for k, v in parts.items()}
        _add_allreduce(parts, None, None, [4.0 * bb, 8.0 * bb], fk, reg)
        return {k: v[None] for k, v in parts.items()}

    return {k: v[0] for k, v in _on_rows(per_batch, b, region, shape).items()}


def decode_block_and_head_cycles_array(*, arch, batch, context, head_batch, rows, cols, fk: dict,
                                       gemv_mac_efficiency_frac: float, region=None) -> tuple[dict, dict]:
    """:func:`decode_block_cycles_array` (``batch`` sequences at ``context``) and :func:`head_decode_cycles_array`
    (``head_batch`` sequences) on the same regions as one array pass [cycles]: ``(block parts, head parts)``, the two
    calls' numbers (the same kernels, stacked: the block's six GEMVs and the head's, the block's three statistics and
    the head's two). Where rows are more than :data:`FUSED_MAX` and repeat enough for :func:`_row_plan` to pay, the two
    calls (and for a model whose layers differ, :func:`_dims`)."""
    b = np.asarray(batch, dtype=float)
    hb = np.asarray(head_batch, dtype=float)
    ctx = np.asarray(context, dtype=float)
    region = fkern.Region.of(rows, cols) if region is None else region
    shape = np.broadcast_shapes(b.shape, hb.shape, ctx.shape, region.P.shape, region.Q.shape)
    kw = dict(arch=arch, fk=fk, gemv_mac_efficiency_frac=gemv_mac_efficiency_frac, region=region, rows=rows, cols=cols)
    cb = ctx * b
    types = _dims(arch)
    if len(types) > 1 or (math.prod(shape) > FUSED_MAX and any(_row_plan(x, region, shape) is not None for x in (b, cb, hb))):
        return decode_block_cycles_array(batch=b, context=ctx, **kw), head_decode_cycles_array(batch=hb, **kw)
    D = types[0]
    cb = cached_tokens(D.attention, ctx) * b
    mats = [(b, k_, n_) for k_, n_ in D.pre] + [(1.0, D.decode_score_k, cb), (1.0, cb, D.decode_ctx_n)] \
        + [(b, k_, n_) for k_, n_ in D.post] + [(hb, arch.d_model, arch.vocab_size)]
    nb = len(mats) - 1
    m, k, n = _stacked(region, *zip(*mats))
    seven = fkern.gemv_parts(region, m=m, k=k, n=n, **dict(fk, mac_efficiency_frac=gemv_mac_efficiency_frac))
    (red, bc), (red0, bc0) = _statistics(None, None, [4.0 * b, 4.0 * b, 8.0 * b * D.heads, 4.0 * hb, 8.0 * hb], fk,
                                         region, serial=True)
    ser = red0 + bc0
    lat = (red + bc) - ser
    pko = fk["per_kernel_overhead_cycles"]
    blk = {}
    for key in ("overhead", "latency", "serialization", "compute"):  # QKV, score, context, output, MLP up, MLP down
        acc = 0.0
        for i in range(nb):
            acc = acc + seven[key][i]
        blk[key] = acc
    head = {key: v[nb] * 1.0 for key, v in seven.items()}
    for part, stats in ((blk, range(3)), (head, (3, 4))):  # the block's norms and softmax; the head's norm, arg-max
        for i in stats:
            part["overhead"] = part["overhead"] + pko
            part["latency"] = part["latency"] + lat[i]
            part["serialization"] = part["serialization"] + ser[i]
    return blk, head


def prefill_block_cycles_array(*, arch, tokens, rows, cols, fk: dict, gemm_mac_efficiency_frac: float,
                               gemm_step_overhead_cycles: float, batch=1, causal: bool = True, prior_tokens=0.0,
                               region=None) -> dict:
    """:func:`prefill_block_cycles` with broadcasting ``tokens``, ``batch``, ``rows``, ``cols`` [cycles].

    ``prior_tokens``: earlier tokens of the same prompt already in the KV cache (chunked prefill), which every
    token of the chunk also attends to. ``region`` as :func:`decode_block_cycles_array`; a model whose layers differ:
    the mean block of its types, as there."""
    tok = np.asarray(tokens, dtype=float)
    prior = np.asarray(prior_tokens, dtype=float)
    t = tok * np.asarray(batch, dtype=float)
    region = fkern.Region.of(rows, cols) if region is None else region  # line terms shared by every kernel of the block
    types = _dims(arch)
    return _mean_parts(types, [_prefill_block_type(D, tok, prior, t, rows, cols, fk, gemm_mac_efficiency_frac,
                                                   gemm_step_overhead_cycles, causal, region) for D in types])


def _prefill_block_type(D: _Dims, tok, prior, t, rows, cols, fk, gemm_mac_efficiency_frac, gemm_step_overhead_cycles,
                        causal, region) -> dict:
    """:func:`prefill_block_cycles_array` of one block type [cycles]."""
    if D.attention.window is None:
        att = prior + ((tok + 1.0) / 2.0 if causal else tok)
    else:
        att = attended_per_token(D.attention, prior, tok, decode=False) if causal else \
            cached_tokens(D.attention, prior + tok)
    g = dict(fk, mac_efficiency_frac=gemm_mac_efficiency_frac, step_overhead_cycles=gemm_step_overhead_cycles)
    mats = [(t, k_, n_) for k_, n_ in D.pre] + [(t, D.score_k, att), (t, att, D.ctx_n)] + [(t, k_, n_) for k_, n_ in D.post]
    m, k, n = _stacked(region, *zip(*mats))  # the GEMMs as one array pass, summed in order
    parts = _accumulate({"overhead": 0.0, "compute": 0.0, "fabric": 0.0}, fkern.gemm_parts(region, m=m, k=k, n=n, **g))
    mt = np.ceil(t / np.asarray(rows, dtype=float))
    ((lr, lb),) = _statistics(rows, cols, [4.0 * mt, 4.0 * mt, 8.0 * mt * D.heads], fk, region, serial=False)
    for i in range(3):
        parts["overhead"] = parts["overhead"] + fk["per_kernel_overhead_cycles"]
        parts["fabric"] = parts["fabric"] + lr[i] + lb[i]
    return parts


def largest_layer_bytes_array(arch, *, precision, batch, context):
    """The largest layer's weights and KV cache for ``batch`` sequences of ``context`` tokens, or the LM head's
    weights where larger [bytes] (broadcasting arrays); per block type (:func:`~wseplan.workload.block_types`), a
    window caps the cached tokens."""
    we, wb = weight_bytes_split(arch, precision, "decode")  # a checkpoint's own layout (gpt-oss: bf16 but experts)
    head = edge_weight_bytes(arch, precision, "decode")  # 16-bit in a quantized checkpoint
    kvb = kv_bytes_per_element(precision)
    b, c = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
    types = block_types(arch)
    if len(types) == 1 and types[0].attention.plain and we == wb:
        kv = 2.0 * arch.num_kv_heads * arch.head_dim_ * kvb * b * c
        return np.maximum(block_params(arch)[0] * wb + kv, arch.vocab_size * arch.d_model * head)
    layer = 0.0
    for t in types:
        w = t.params * wb + routed_params(t) * (we - wb)
        layer = np.maximum(layer, w + t.attention.kv_elems_per_token * kvb * b * cached_tokens(t.attention, c))
    return np.maximum(layer, arch.vocab_size * arch.d_model * head)
