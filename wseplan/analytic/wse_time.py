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
reduction trees deeper than the free colours allow fall back to the chain) through
:func:`.fabric.wafer_fabric_kwargs`; the kernel constants fitted to the WaferLLM measurements on top of them
(``fabric.yaml``, :func:`.wse_fit.fit_wse_overheads`).

References
----------
He, C. et al., "WaferLLM: Large Language Model Inference at Wafer Scale", USENIX OSDI 2025.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from . import fabric as fab
from .fabric import gemv_latency_s  # noqa: F401  (re-exported for validation's micro rows)

PHASES = ("train", "prefill", "decode", "e2e")


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------
def _dims(arch) -> dict:
    hd = arch.head_dim_
    q = arch.num_heads * hd
    kv = arch.num_kv_heads * hd
    ff = arch.d_ff * arch.experts_per_token
    return dict(d=arch.d_model, q=q, kv=kv, heads=arch.num_heads, ff=ff,
                ff_in=ff * (2 if arch.gated_mlp else 1), vocab=arch.vocab_size)


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


def _add_allreduce(parts, rows, cols, nbytes, fk):
    """A norm/softmax statistic: the vector lives along one line of the region (the root line of the previous
    reduction), so its all-reduce is one line reduction plus one line broadcast of ``nbytes``."""
    kw = dict(length_pes=cols, message_bytes=nbytes, link_bytes_per_cycle=fk["link_bytes_per_cycle"],
              wavelet_bytes=fk["wavelet_bytes"])
    rk = _reduce_kwargs(fk)
    full = (fab.line_reduce_cycles(hop_latency_cycles=fk["hop_latency_cycles"], ramp_latency_cycles=fk["ramp_latency_cycles"],
                                   **rk, **kw)
            + fab.line_broadcast_cycles(hop_latency_cycles=fk["hop_latency_cycles"], **kw))
    serial = (fab.line_reduce_cycles(hop_latency_cycles=0.0, ramp_latency_cycles=0.0,
                                     **dict(rk, reduce_stage_cycles=0.0, tree_level_cycles=0.0), **kw)
              + fab.line_broadcast_cycles(hop_latency_cycles=0.0, **kw))
    parts["overhead"] = parts["overhead"] + fk["per_kernel_overhead_cycles"]
    parts["latency"] = parts["latency"] + (full - serial)
    parts["serialization"] = parts["serialization"] + serial


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

def _parse_grid(value, name: str, wafer) -> tuple[int, int] | None:
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


def _largest_layer_bytes(arch, *, precision, batch, context) -> float:
    """SRAM of the largest single layer: a block's weights + its KV cache, or the LM head [bytes]."""
    from ..workload import block_params, kv_bytes_per_element, weight_bytes_per_param

    wb = weight_bytes_per_param(precision, "decode")
    kv = 2.0 * arch.num_kv_heads * arch.head_dim_ * kv_bytes_per_element(precision) * batch * context
    return max(block_params(arch)[0] * wb + kv, arch.vocab_size * arch.d_model * wb)


def _stage_layer_counts(model, target, catalog, *, precision, batch, context) -> tuple[list[int], list[float], list[str]]:
    """Blocks and SRAM bytes (weights + KV) of each wafer's pipeline stage, from :func:`wseplan.fit.fit`."""
    from ..fit import fit

    phase = "decode"
    res = fit(model, target, precision=precision, phase=phase, batch=batch, context=context, catalog=catalog)
    notes = [] if res.fits else [f"does not fit {res.target} ({res.binding} binds); time shown as if it did"]
    layers, stage_bytes = [], []
    for s in res.stages:
        n = 0 if s.first_layer < 0 else s.last_layer - s.first_layer + 1
        layers.append(n)
        stage_bytes.append(s.bytes)
    return layers, stage_bytes, notes


def _region_candidates(wafer, min_side: int = 32) -> np.ndarray:
    """Square region sides that tile the wafer maximally: ``min(R // a, C // b)`` for a x b regions [PEs]."""
    R, C = int(wafer.pe_rows.si), int(wafer.pe_cols.si)
    a = np.arange(1, max(R // min_side, 1) + 1)
    b = np.arange(1, max(C // min_side, 1) + 1)
    sides = np.minimum.outer(R // a, C // b).ravel()
    return np.unique(sides[sides >= min(min_side, min(R, C))])


def _groups_needed(stage_bytes, side_rows, side_cols, wafer, reserve_frac):
    cap = np.asarray(side_rows, dtype=float) * side_cols * wafer.sram_per_pe_bytes.si * (1.0 - reserve_frac)
    return np.maximum(1.0, np.ceil(stage_bytes / cap))


# ---------------------------------------------------------------------------------------------
# Phase times
# ---------------------------------------------------------------------------------------------
def _phase_parts(arch, phase, *, batch, context, rows, cols, fk, c) -> dict:
    """Per-block parts and head parts for a phase on a region [cycles]."""
    if phase == "decode":
        blk = decode_block_cycles(arch=arch, batch=batch, context=context, rows=rows, cols=cols, fk=fk,
                                  gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si)
    else:
        blk = prefill_block_cycles(arch=arch, tokens=context, batch=1, rows=rows, cols=cols, fk=fk,
                                   gemm_mac_efficiency_frac=c.gemm_mac_efficiency_frac.si,
                                   gemm_step_overhead_cycles=c.gemm_step_overhead_cycles.si)
    head = head_decode_cycles(arch=arch, batch=batch, rows=rows, cols=cols, fk=fk,
                              gemv_mac_efficiency_frac=c.gemv_mac_efficiency_frac.si)
    return {"block": blk, "head": head}


_PART_NAMES = {"overhead": "kernel_overhead", "latency": "fabric_latency", "serialization": "fabric_bandwidth",
               "compute": "compute", "fabric": "fabric", "transfer": "cross_region_link"}


def _pipeline_time(arch, phase, *, layers, stage_bytes, batch, context, grid, wafer, system, fk, c, reserve_frac,
                   micro_batch: int):
    """Time of one pass (a decode step or a prompt) of ``micro_batch`` sequences through all stages [s].

    Returns (latency_s, max_stage_s, parts_s dict, num_pipeline_stages, notes).
    """
    clock = wafer.clock_hz.si
    notes: list[str] = []
    rows, cols = grid
    parts_c = _phase_parts(arch, phase, batch=micro_batch, context=context, rows=rows, cols=cols, fk=fk, c=c)
    blk = {k: float(v) for k, v in parts_c["block"].items()}
    head = {k: float(v) for k, v in parts_c["head"].items()}
    blk_total = sum(blk.values())
    totals = {k: 0.0 for k in set(blk) | set(head) | {"transfer"}}
    stage_times, n_stages = [], 0
    per_wafer_regions = (int(wafer.pe_rows.si) // rows) * (int(wafer.pe_cols.si) // cols)
    tokens_moved = micro_batch * (context if phase == "prefill" else 1)
    act_bytes = tokens_moved * arch.d_model * fk["dtype_bytes"]
    # hand-over to the next region: across the shared boundary, min(rows, cols) links in parallel
    hop = float(fab.message_cycles(hops=rows + cols, message_bytes=act_bytes / min(rows, cols),
                                   hop_latency_cycles=fk["hop_latency_cycles"],
                                   link_bytes_per_cycle=fk["link_bytes_per_cycle"], wavelet_bytes=fk["wavelet_bytes"]))
    hop += fk["per_kernel_overhead_cycles"]
    placed_ok = True
    nw = len(layers)
    for i, (nl, sb) in enumerate(zip(layers, stage_bytes)):
        groups = int(_groups_needed(sb, rows, cols, wafer, reserve_frac))
        groups = max(1, min(groups, max(nl, 1)))
        if groups > max(per_wafer_regions, 1):
            placed_ok = False
        per_group = [nl // groups + (1 if g < nl % groups else 0) for g in range(groups)]
        for g, ng in enumerate(per_group):
            t = ng * blk_total
            for k, v in blk.items():
                totals[k] += ng * v
            if i == nw - 1 and g == groups - 1:
                t += sum(head.values())
                for k, v in head.items():
                    totals[k] += v
            t_s = t / clock
            if g < groups - 1:  # hand-over to the next region on this wafer
                t_s += hop / clock
                totals["transfer"] += hop
            stage_times.append(t_s)
            n_stages += 1
        if i < nw - 1:  # hand-over to the next wafer over Ethernet
            x = float(fab.cross_system_transfer_s(message_bytes=act_bytes, bandwidth_bytes_per_s=system.io_bandwidth_bytes_per_s.si,
                                                  latency_s=c.cross_system_latency_s.si))
            stage_times[-1] += x
            totals["transfer"] += x * clock
    if not placed_ok:
        notes.append(f"region {rows}x{cols}: the layer groups need more regions than one wafer holds; time per region "
                     "as measured on a subset and scaled (as WaferLLM reports)")
    parts_s = {_PART_NAMES[k]: v / clock for k, v in totals.items()}
    return sum(stage_times), max(stage_times), parts_s, n_stages, notes


def _best_grid(arch, phase, *, layers, stage_bytes, layer_bytes, batch, context, wafer, fk, c, reserve_frac):
    """Default region: the square side that minimises this phase's latency among the sides that tile the wafer
    (:func:`_region_candidates`), hold the largest layer (``layer_bytes``) and leave room for every layer group."""
    sides = _region_candidates(wafer)
    R, C = int(wafer.pe_rows.si), int(wafer.pe_cols.si)
    mb = batch if phase == "decode" else 1
    parts = _phase_parts(arch, phase, batch=mb, context=context, rows=sides, cols=sides, fk=fk, c=c)
    blk = sum(np.asarray(v, dtype=float) for v in parts["block"].values())
    regions = (R // sides) * (C // sides)
    cap = sides.astype(float) ** 2 * wafer.sram_per_pe_bytes.si * (1.0 - reserve_frac)
    ok = cap >= layer_bytes  # one layer (or the LM head) must fit its region
    for nl, sb in zip(layers, stage_bytes):
        ok &= _groups_needed(sb, sides, sides, wafer, reserve_frac) <= np.maximum(regions, 1)
    cost = np.where(ok, blk * max(max(layers), 1), np.inf)
    if not np.isfinite(cost).any():
        side = int(min(R, C))
        return (side, side)
    s = int(sides[int(np.argmin(cost))])
    return (s, s)


# ---------------------------------------------------------------------------------------------
def predict(model, target, catalog, *, phase, precision, batch, context, output_tokens, **options):
    """Predict wafer time for ``phase`` train | prefill | decode | e2e and return a :class:`TimeResult`.

    Parameters
    ----------
    model : Model or GenericModel
    target : Target
        A wafer target; ``count`` wafers (pipeline stages for inference, data-parallel systems for training).
    catalog : Catalog
    phase : str
        ``train`` (weight streaming with MemoryX, :mod:`.stream`), ``prefill``, ``decode`` or ``e2e``
        (``e2e-infer`` is accepted as an alias). ``decode`` with ``output_tokens`` is a whole request, as
        ``e2e`` (the convention of ``wseplan time --output-tokens``); without it, one decode step.
    precision : str
    batch : int
        Training: sequences per step (all systems). Inference: concurrent sequences.
    context : int
        Training: sequence length. Prefill/e2e: prompt tokens. Decode: KV length.
    output_tokens : int
        e2e: generated tokens per request.
    **options
        ``core_grid`` (rows, cols) or "RxC": the region one layer's kernels run on (both phases);
        ``core_grid_prefill`` / ``core_grid_decode`` per phase; ``fabric_constants`` (a FabricConstants);
        ``reserve`` SRAM reserve fraction. Training options are those of :func:`.stream.predict_train`.

    Returns
    -------
    TimeResult
    """
    from ..timing import TimeResult

    phase = {"e2e-infer": "e2e"}.get(phase, phase)  # the validation file's phase name
    if phase not in PHASES:
        raise InputError(f"phase: unknown {phase!r}; use one of {', '.join(PHASES)}")
    d = catalog.defaults
    batch = int(d.default_batch.si) if batch is None else batch
    context = int(d.default_context_tokens.si) if context is None else context
    for name, v in (("batch", batch), ("context", context)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}: must be a positive integer, got {v!r}")
    if phase == "train":
        from .stream import predict_train

        return predict_train(model, target, catalog, precision=precision, batch=batch, context=context, **options)
    if not hasattr(model, "num_layers"):
        raise InputError("model: wafer inference timing needs a transformer architecture, not a layer list")
    if phase == "e2e":
        if output_tokens is None or isinstance(output_tokens, bool) or not isinstance(output_tokens, (int, np.integer)) or output_tokens < 1:
            raise InputError(f"output_tokens: e2e needs a positive number of generated tokens, got {output_tokens!r}")
    unknown = set(options) - {"core_grid", "core_grid_prefill", "core_grid_decode", "fabric_constants", "reserve"}
    if unknown:
        raise InputError(f"options: unknown {', '.join(sorted(unknown))} for wafer inference; use core_grid, "
                         "core_grid_prefill, core_grid_decode, reserve")
    wafer = target.device
    system = catalog.system_for_wafer(target.key)
    c = options.get("fabric_constants") or fab.load_fabric_constants()
    fk = fab.wafer_fabric_kwargs(wafer, precision, c)
    reserve = options.get("reserve")
    reserve = d.wafer_sram_reserve_frac.si if reserve is None else float(reserve)
    out_tok = int(output_tokens) if output_tokens else 0
    kv_context = context + out_tok
    layers, stage_bytes, notes = _stage_layer_counts(model, target, catalog, precision=precision, batch=batch,
                                                     context=kv_context)
    base = _parse_grid(options.get("core_grid"), "core_grid", wafer)
    grids = {}
    layer_bytes = _largest_layer_bytes(model, precision=precision, batch=batch, context=kv_context)
    for ph in ("prefill", "decode"):
        g = _parse_grid(options.get(f"core_grid_{ph}"), f"core_grid_{ph}", wafer) or base
        if g is None:
            ctx = context if ph == "prefill" else context + out_tok // 2
            g = _best_grid(model, ph, layers=layers, stage_bytes=stage_bytes, layer_bytes=layer_bytes, batch=batch,
                           context=ctx, wafer=wafer, fk=fk, c=c, reserve_frac=reserve)
        elif g[0] * g[1] * wafer.sram_per_pe_bytes.si * (1.0 - reserve) < layer_bytes:
            notes.append(f"core_grid_{ph} {g[0]}x{g[1]} holds less than one layer ({layer_bytes:.3e} B); time as if "
                         "the layer's share per PE fitted")
        grids[ph] = g
    common = dict(layers=layers, stage_bytes=stage_bytes, wafer=wafer, system=system, fk=fk, c=c, reserve_frac=reserve)
    result: dict = {}
    breakdown: dict[str, float] = {}
    layout: dict = {"num_wafers": len(layers)}
    flop_tok = 2.0 * _active_params(model) + 4.0 * model.num_layers * model.num_heads * model.head_dim_ * context

    def prefill_time():
        lat, mx, parts, ns, nts = _pipeline_time(model, "prefill", batch=batch, context=context, grid=grids["prefill"],
                                                 micro_batch=1, **common)
        notes.extend(nts)
        total = lat + (batch - 1) * mx  # prompts pipelined through the stages
        layout.update(core_grid_prefill=f"{grids['prefill'][0]}x{grids['prefill'][1]}", pipeline_stages_prefill=ns)
        return lat, total, {f"prefill_{k}": v for k, v in parts.items()}

    def decode_time(ctx):
        lat1, mx1, parts1, ns, nts = _pipeline_time(model, "decode", batch=batch, context=ctx, grid=grids["decode"],
                                                    micro_batch=batch, **common)
        best = (lat1, parts1, 1)
        top = min(ns, batch)
        for n_mb in sorted({1 << i for i in range(1, top.bit_length())} | {top}):
            if n_mb < 2:
                continue
            lat, mx, parts, _, _ = _pipeline_time(model, "decode", batch=batch, context=ctx, grid=grids["decode"],
                                                  micro_batch=math.ceil(batch / n_mb), **common)
            round_s = max(lat, n_mb * mx)  # every stage serves n_mb micro-batches per token round
            if round_s < best[0]:
                best = (round_s, {k: v * round_s / lat for k, v in parts.items()}, n_mb)
        notes.extend(n for n in nts if n not in notes)
        layout.update(core_grid_decode=f"{grids['decode'][0]}x{grids['decode'][1]}", pipeline_stages_decode=ns,
                      micro_batches_in_flight=best[2])
        return best[0], {f"decode_{k}": v for k, v in best[1].items()}

    if phase == "prefill":
        ttft1, total, parts = prefill_time()
        breakdown.update(parts)
        result.update(step_s=total, ttft_s=total, tokens_per_s=batch * context / total,
                      tokens_per_s_per_user=None)
        model_flop_per_s = flop_tok * batch * context / total
    elif phase == "decode" and not out_tok:
        tpot, parts = decode_time(context)
        breakdown.update(parts)
        result.update(step_s=tpot, tpot_s=tpot, tokens_per_s=batch / tpot, tokens_per_s_per_user=1.0 / tpot)
        model_flop_per_s = flop_tok * batch / tpot
    else:  # e2e, or decode with output_tokens: a whole request (the convention of `wseplan time`)
        _, ttft, p_parts = prefill_time()
        tpot, d_parts = decode_time(context + out_tok // 2)
        e2e = ttft + out_tok * tpot
        breakdown.update(p_parts)
        breakdown.update({k: v * out_tok for k, v in d_parts.items()})
        result.update(step_s=e2e, ttft_s=ttft, tpot_s=tpot, tokens_per_s=batch * out_tok / e2e,
                      tokens_per_s_per_user=out_tok / e2e)
        model_flop_per_s = flop_tok * batch * (context + out_tok) / e2e
    peak = wafer.peak_flop_per_s(precision) * len(layers)
    bottleneck = max(breakdown, key=lambda k: breakdown[k]).split("_", 1)[1] if breakdown else "none"
    return TimeResult(model=getattr(model, "name", str(model)), target=target.label, hardware=target.key,
                      device_kind="wafer", precision=precision, phase=phase, batch=batch, context=context,
                      num_devices=len(layers), output_tokens=out_tok or None, model_flop_per_s=model_flop_per_s,
                      model_flop_utilization_frac=float(min(1.0, model_flop_per_s / peak)), bottleneck=bottleneck,
                      breakdown_s=breakdown, layout=layout, notes=notes, **result)


def _active_params(model) -> float:
    from ..workload import block_params

    return model.num_layers * block_params(model)[1] + model.vocab_size * model.d_model


def concurrency_frame(model, target, catalog, *, batches=(1, 2, 4, 8, 16, 32, 64), precision: str = "fp16",
                      context: int = 2048, output_tokens: int = 256, **options):
    """Serving on a wafer target versus concurrency, as a pandas DataFrame (one row per batch).

    Columns: ``batch, ttft_s, tpot_s, tokens_per_s_per_user, tokens_per_s, micro_batches_in_flight,
    bottleneck``; each row is :func:`predict` with ``phase='e2e'`` (requests of ``context`` prompt tokens and
    ``output_tokens`` generated tokens).
    """
    import pandas as pd

    rows = []
    for b in batches:
        r = predict(model, target, catalog, phase="e2e", precision=precision, batch=int(b), context=context,
                    output_tokens=output_tokens, **options)
        rows.append(dict(batch=int(b), ttft_s=r.ttft_s, tpot_s=r.tpot_s, tokens_per_s_per_user=r.tokens_per_s_per_user,
                         tokens_per_s=r.tokens_per_s, micro_batches_in_flight=r.layout.get("micro_batches_in_flight"),
                         bottleneck=r.bottleneck))
    df = pd.DataFrame(rows)
    df.attrs.update(model=getattr(model, "name", str(model)), target=target.label, context=context,
                    output_tokens=output_tokens, precision=precision)
    return df


# ---------------------------------------------------------------------------------------------
# Array-capable forms (batch, context and region sides broadcast), for vectorized sweeps
# ---------------------------------------------------------------------------------------------
def decode_block_cycles_array(*, arch, batch, context, rows, cols, fk: dict, gemv_mac_efficiency_frac: float) -> dict:
    """:func:`decode_block_cycles` with ``batch``, ``context``, ``rows`` and ``cols`` as broadcasting arrays
    [cycles]; the same kernels and the same arithmetic."""
    D = _dims(arch)
    b = np.asarray(batch, dtype=float)
    ctx = np.asarray(context, dtype=float)
    g = dict(fk, rows=rows, cols=cols, mac_efficiency_frac=gemv_mac_efficiency_frac)
    mats = [(b, D["d"], D["q"] + 2 * D["kv"]), (1.0, D["q"], ctx * b), (1.0, ctx * b, D["q"]), (b, D["q"], D["d"]),
            (b, D["d"], D["ff_in"]), (b, D["ff"], D["d"])]
    parts = {"overhead": 0.0, "latency": 0.0, "serialization": 0.0, "compute": 0.0}
    for m, k, n in mats:
        p = fab.gemv_parts_cycles(m=m, k=k, n=n, **g)
        for key in parts:
            parts[key] = parts[key] + p[key]
    for nbytes in (4.0 * b, 4.0 * b, 8.0 * b * D["heads"]):
        _add_allreduce(parts, rows, cols, nbytes, fk)
    return parts


def head_decode_cycles_array(*, arch, batch, rows, cols, fk: dict, gemv_mac_efficiency_frac: float) -> dict:
    """:func:`head_decode_cycles` with broadcasting ``batch``, ``rows``, ``cols`` [cycles]."""
    D = _dims(arch)
    b = np.asarray(batch, dtype=float)
    parts = fab.gemv_parts_cycles(m=b, k=D["d"], n=D["vocab"], rows=rows, cols=cols,
                                  mac_efficiency_frac=gemv_mac_efficiency_frac, **fk)
    parts = {k: v * 1.0 for k, v in parts.items()}
    _add_allreduce(parts, rows, cols, 4.0 * b, fk)
    _add_allreduce(parts, rows, cols, 8.0 * b, fk)
    return parts


def prefill_block_cycles_array(*, arch, tokens, rows, cols, fk: dict, gemm_mac_efficiency_frac: float,
                               gemm_step_overhead_cycles: float, batch=1, causal: bool = True, prior_tokens=0.0) -> dict:
    """:func:`prefill_block_cycles` with broadcasting ``tokens``, ``batch``, ``rows``, ``cols`` [cycles].

    ``prior_tokens``: earlier tokens of the same prompt already in the KV cache (chunked prefill), which every
    token of the chunk also attends to."""
    D = _dims(arch)
    tok = np.asarray(tokens, dtype=float)
    att = np.asarray(prior_tokens, dtype=float) + ((tok + 1.0) / 2.0 if causal else tok)
    t = tok * np.asarray(batch, dtype=float)
    g = dict(fk, rows=rows, cols=cols, mac_efficiency_frac=gemm_mac_efficiency_frac,
             step_overhead_cycles=gemm_step_overhead_cycles)
    mats = [(t, D["d"], D["q"] + 2 * D["kv"]), (t, D["q"], att), (t, att, D["q"]), (t, D["q"], D["d"]),
            (t, D["d"], D["ff_in"]), (t, D["ff"], D["d"])]
    parts = {"overhead": 0.0, "compute": 0.0, "fabric": 0.0}
    for m, k, n in mats:
        p = fab.gemm_parts_cycles(m=m, k=k, n=n, **g)
        for key in parts:
            parts[key] = parts[key] + p[key]
    mt = np.ceil(t / np.asarray(rows, dtype=float))
    for nbytes in (4.0 * mt, 4.0 * mt, 8.0 * mt * D["heads"]):
        lr = fab.line_reduce_cycles(length_pes=cols, message_bytes=nbytes, hop_latency_cycles=fk["hop_latency_cycles"],
                                    link_bytes_per_cycle=fk["link_bytes_per_cycle"], wavelet_bytes=fk["wavelet_bytes"],
                                    ramp_latency_cycles=fk["ramp_latency_cycles"], **_reduce_kwargs(fk))
        lb = fab.line_broadcast_cycles(length_pes=cols, message_bytes=nbytes, hop_latency_cycles=fk["hop_latency_cycles"],
                                       link_bytes_per_cycle=fk["link_bytes_per_cycle"], wavelet_bytes=fk["wavelet_bytes"])
        parts["overhead"] = parts["overhead"] + fk["per_kernel_overhead_cycles"]
        parts["fabric"] = parts["fabric"] + lr + lb
    return parts


def largest_layer_bytes_array(arch, *, precision, batch, context):
    """:func:`_largest_layer_bytes` for broadcasting ``batch`` and ``context`` arrays [bytes]."""
    from ..workload import block_params, kv_bytes_per_element, weight_bytes_per_param

    wb = weight_bytes_per_param(precision, "decode")
    kv = (2.0 * arch.num_kv_heads * arch.head_dim_ * kv_bytes_per_element(precision)
          * np.asarray(batch, dtype=float) * np.asarray(context, dtype=float))
    return np.maximum(block_params(arch)[0] * wb + kv, arch.vocab_size * arch.d_model * wb)
