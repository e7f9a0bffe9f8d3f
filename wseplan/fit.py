"""Fit: does a model fit a target, on how many devices, what binds, and how much headroom is left.

Composes the workload (per-layer arrays) with the memory accounting in :mod:`wseplan.analytic.memory` and
the contiguous partitions in :mod:`wseplan.analytic.partition`. No pandas, no I/O beyond the catalog.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from .analytic.memory import (RECOMPUTE, gpu_activation_bytes_per_token_layer, stream_min_tokens_compute_bound,
                              wafer_stream_buffer_bytes, wafer_train_activation_bytes_per_token)
from .analytic.partition import greedy_stages, min_max_partition
from .catalog.load import Catalog, load_catalog
from .catalog.schema import GenericModel, Model
from .errors import InputError
from .records import RecordHead
from .targets import Target, parse_target
from .workload import build_workload, resolve_model  # noqa: F401  (moved; re-exported)
from .workload import (KIND_BLOCK, KIND_EMBEDDING, KIND_HEAD, Workload, check_positive_int, generic_model_from_file,
                       generic_workload, model_from_hf_config, transformer_workload)



class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stage(_Frozen):
    """One device's share: 0-based inclusive transformer-block indices (-1/-1 when it holds no block)."""

    device: int
    first_layer: int
    last_layer: int
    embedding: bool
    lm_head: bool
    bytes: float


class Layout(_Frozen):
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    zero_stage: int
    recompute: str


class MemoryXFit(_Frozen):
    option: str
    capacity_bytes: float
    required_bytes: float
    fits: bool


class StreamingFit(_Frozen):
    """Batch bounds for weight-streaming training on a wafer."""

    stream_bandwidth_bytes_per_s: float
    min_tokens_compute_bound: float
    max_tokens_on_wafer: float
    min_batch_compute_bound: int
    max_batch_on_wafer: int
    feasible_compute_bound: bool


class FitResult(RecordHead):
    """The fit record (``--format json``); fields documented in docs/cli-output.md."""

    fits: bool
    num_devices: int
    capacity_bytes: float
    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    optimizer_bytes: float
    total_bytes: float
    headroom_bytes: float
    shortfall_bytes: float
    binding: str
    max_tokens_in_flight: int
    stages: list[Stage]
    layout: Layout | None = None
    memoryx: MemoryXFit | None = None
    streaming: StreamingFit | None = None
    notes: list[str] = []

    def to_record(self) -> dict:
        return self.model_dump(mode="json")

    def to_row(self) -> dict:
        """Flat scalar fields (no stages), for tables and CSV."""
        rec = self.to_record()
        row = {k: v for k, v in rec.items() if not isinstance(v, (list, dict)) and v is not None}
        if self.layout:
            row.update({f"layout_{k}": v for k, v in self.layout.model_dump().items()})
        if self.memoryx:
            row.update({f"memoryx_{k}": v for k, v in self.memoryx.model_dump().items()})
        if self.streaming:
            row.update({f"streaming_{k}": v for k, v in self.streaming.model_dump().items()})
        return row


# ---------------------------------------------------------------------------------------------
def _tokens_in_flight(w: Workload, chunk: float) -> float:
    if w.phase == "decode":
        return float(w.batch)
    return float(min(w.batch * w.context, chunk)) if w.phase == "prefill" else float(w.batch * w.context)


def _binding(parts: dict[str, float], load: float, capacity: float, fits: bool) -> str:
    if fits and load < 0.5 * capacity:
        return "none"
    return max(parts, key=lambda k: parts[k])


def _stage_records(w: Workload, stages: list[tuple[int, int]], loads: list[float]) -> list[Stage]:
    """Map item-index stages (items include embedding/head rows) to block-index stage records."""
    block_idx = np.cumsum(w.kind == KIND_BLOCK) - 1  # item -> block index
    out = []
    for dev, ((a, b), load) in enumerate(zip(stages, loads)):
        kinds = w.kind[a : b + 1]
        blocks = np.nonzero(kinds == KIND_BLOCK)[0] + a
        first = int(block_idx[blocks[0]]) if len(blocks) else -1
        last = int(block_idx[blocks[-1]]) if len(blocks) else -1
        out.append(Stage(device=dev, first_layer=first, last_layer=last,
                         embedding=bool((kinds == KIND_EMBEDDING).any()), lm_head=bool((kinds == KIND_HEAD).any()),
                         bytes=float(load)))
    return out


# ---------------------------------------------------------------------------------------------
def fit_wafer_inference(w: Workload, target: Target, catalog: Catalog, reserve_frac: float) -> FitResult:
    wafer = target.device
    cap = wafer.usable_sram_bytes * (1.0 - reserve_frac)
    tokens = w.batch * w.context
    kv_items = w.kv_bytes_per_token * tokens
    act_const = w.working_set_bytes_per_token * _tokens_in_flight(w, catalog.defaults.prefill_chunk_tokens.si)
    notes: list[str] = []

    def weights_of(multi: bool) -> np.ndarray:
        wb = w.weight_bytes.copy()
        if multi and w.tied_head_bytes:
            wb[-1] += w.tied_head_bytes  # the last wafer needs its own copy of a tied LM head
        return wb

    def items(multi: bool) -> np.ndarray:
        return weights_of(multi) + kv_items

    n_items = len(w.kind)
    if target.count is None:
        single = items(False)
        if single.sum() + act_const <= cap:
            stages = [(0, n_items - 1)]
            x = single
        else:
            x = items(True)
            stages = greedy_stages(x, cap, act_const)
            if stages is not None and len(stages) > 1:  # same count, balanced: the most headroom on every wafer
                _, stages = min_max_partition(x, len(stages), act_const)
            if stages is None:
                worst = int(np.argmax(x))
                notes.append(f"row {worst} alone needs {x[worst] + act_const:.3e} B, more than one wafer's {cap:.3e} B")
                stages = [(i, i) for i in range(n_items)]
        fits_all = True
    else:
        k = min(target.count, n_items)
        x = items(k > 1)
        _, stages = min_max_partition(x, k, act_const)
        if target.count > n_items:
            notes.append(f"only {n_items} layers to place; {target.count - n_items} wafers left idle")
        fits_all = True
    wb = weights_of(len(stages) > 1)
    loads = [float(x[a : b + 1].sum() + act_const) for a, b in stages]
    fits = fits_all and max(loads) <= cap
    num = len(stages) if target.count is None else target.count
    weights = float(sum(wb[a : b + 1].sum() for a, b in stages))
    kv_total = float(kv_items.sum())
    act_total = act_const * len(stages)
    total = weights + kv_total + act_total
    fullest = int(np.argmax(loads))
    a, b = stages[fullest]
    parts = {"weights": float(wb[a : b + 1].sum()), "kv_cache": float(kv_items[a : b + 1].sum()),
             "activations": act_const, "optimizer": 0.0}
    headroom = cap - max(loads)
    shortfall = 0.0
    if not fits:
        shortfall = max(loads) - cap  # extra bytes per wafer that would make these wafers enough
    # largest batch x context that fits with the same stages (activations held at this batch)
    kv_per_tok = [float(w.kv_bytes_per_token[a : b + 1].sum()) for a, b in stages]
    w_stage = [float(wb[a : b + 1].sum()) for a, b in stages]
    room = [(cap - ws - act_const) / kt if kt > 0 else math.inf for ws, kt in zip(w_stage, kv_per_tok)]
    mt = min(room)
    max_tokens = 0 if mt < 0 else (int(mt) if math.isfinite(mt) else 0)
    return FitResult(model=w.model_name, target=target.label, hardware=target.key, device_kind="wafer",
                     precision=w.precision, phase=w.phase, batch=w.batch, context=w.context, fits=fits,
                     num_devices=num, capacity_bytes=cap, weights_bytes=weights, kv_cache_bytes=kv_total,
                     activation_bytes=act_total, optimizer_bytes=0.0, total_bytes=total, headroom_bytes=headroom,
                     shortfall_bytes=shortfall, binding=_binding(parts, max(loads), cap, fits),
                     max_tokens_in_flight=max_tokens, stages=_stage_records(w, stages, loads), notes=notes)


def fit_wafer_train(w: Workload, target: Target, catalog: Catalog, reserve_frac: float,
                    memoryx_option: str | None = None) -> FitResult:
    wafer = target.device
    system = catalog.system_for_wafer(target.key)
    mx = catalog.memoryx[system.memoryx]
    option = mx.default_capacity if memoryx_option is None else memoryx_option
    if option not in mx.capacity_options_bytes:
        raise InputError(f"memoryx: unknown option {option!r}; choose one of {', '.join(mx.capacity_options_bytes)}")
    mx_cap = mx.capacity_options_bytes[option].si
    mx_req = w.total_params * mx.optimizer_bytes_per_param.si
    cap = wafer.usable_sram_bytes * (1.0 - reserve_frac)
    buf = wafer_stream_buffer_bytes(w.weight_bytes)
    act_tok = wafer_train_activation_bytes_per_token(w.checkpoint_bytes_per_token, w.activation_bytes_per_token)
    tokens = w.batch * w.context
    act = act_tok * tokens
    load = buf + act
    max_tokens = max(0.0, (cap - buf) / act_tok) if act_tok > 0 else math.inf
    bw = mx.dram_stream_bandwidth_bytes_per_s.si if mx_cap <= mx.dram_capacity_bytes.si else mx.flash_stream_bandwidth_bytes_per_s.si
    peak = wafer.peak_flop_per_s(w.precision)
    t_min = stream_min_tokens_compute_bound(layer_weight_bytes=w.weight_bytes, layer_flop_per_token=w.flop_per_token,
                                            peak_flop_per_s=peak, stream_bandwidth_bytes_per_s=bw)
    min_batch = max(1, math.ceil(t_min / w.context))
    max_batch = int(max_tokens // w.context) if math.isfinite(max_tokens) else 10**9
    mx_fits = mx_req <= mx_cap
    wafer_fits = load <= cap
    fits = mx_fits and wafer_fits
    notes = []
    if not mx_fits:
        notes.append(f"MemoryX option {option} holds {mx_cap:.3e} B; weights + optimizer state need {mx_req:.3e} B "
                     f"({mx.optimizer_bytes_per_param.si:g} B/param); choose a larger option")
    if buf > cap:
        notes.append("the largest layer's double-buffered weights do not fit on the wafer")
    if t_min > max_tokens:
        notes.append(f"no batch both hides the weight stream (>= {t_min:.3g} tokens/step) and keeps checkpoints on "
                     f"the wafer (<= {max_tokens:.3g} tokens): recompute or spill activations (see `wseplan stream`)")
    parts = {"weights": buf, "activations": act, "kv_cache": 0.0, "optimizer": 0.0}
    binding = "optimizer" if not mx_fits else _binding(parts, load, cap, wafer_fits)
    num = target.count or 1
    stages = [Stage(device=i, first_layer=0, last_layer=w.num_blocks - 1, embedding=True, lm_head=True, bytes=load)
              for i in range(num)]
    return FitResult(model=w.model_name, target=target.label, hardware=target.key, device_kind="wafer",
                     precision=w.precision, phase=w.phase, batch=w.batch, context=w.context, fits=fits,
                     num_devices=num, capacity_bytes=cap, weights_bytes=buf, kv_cache_bytes=0.0, activation_bytes=act,
                     optimizer_bytes=0.0, total_bytes=load, headroom_bytes=cap - load,
                     shortfall_bytes=max(0.0, load - cap) + max(0.0, mx_req - mx_cap), binding=binding,
                     max_tokens_in_flight=int(min(max_tokens, 2**62)), stages=stages,
                     memoryx=MemoryXFit(option=option, capacity_bytes=mx_cap, required_bytes=mx_req, fits=mx_fits),
                     streaming=StreamingFit(stream_bandwidth_bytes_per_s=bw, min_tokens_compute_bound=t_min,
                                            max_tokens_on_wafer=float(min(max_tokens, 1e300)),
                                            min_batch_compute_bound=min_batch, max_batch_on_wafer=max_batch,
                                            feasible_compute_bound=t_min <= max_tokens),
                     notes=notes)


# ---------------------------------------------------------------------------------------------
def gpu_layout_memory(w: Workload, *, tp, pp, dp, zero_stage: int, recompute: str, catalog: Catalog,
                      micro_batch=1, batch=None, context=None) -> dict[str, np.ndarray]:
    """Per-GPU memory of the fullest pipeline stage for arrays of layouts (tp, pp, dp broadcast) [bytes].

    ``batch`` and ``context`` (arrays, broadcast with the layout) default to the workload's; every term is
    exact for any of them because weights do not depend on them and the KV, activation and working-set terms
    are computed from per-token quantities.

    The first stage holds the embedding, the last the LM head; blocks are split as evenly as possible
    (``ceil(L/pp)`` on the fullest stage). Weights, gradients and optimizer state are split over TP and PP and,
    by ZeRO stage, over DP. KV heads split over TP up to the number of KV heads (then replicate).
    """
    d = catalog.defaults
    tp, pp, dp = (np.asarray(v, dtype=float) for v in (tp, pp, dp))
    B = np.asarray(w.batch if batch is None else batch, dtype=float)
    C = np.asarray(w.context if context is None else context, dtype=float)
    micro_batch = np.asarray(micro_batch, dtype=float)
    L = max(w.num_blocks, 1)
    per_stage = np.ceil(L / pp)
    blocks = w.kind == KIND_BLOCK
    blk_w = float(w.weight_bytes[blocks].max()) if blocks.any() else 0.0
    blk_p = float(w.params[blocks].max()) if blocks.any() else 0.0
    edge_w = float(w.weight_bytes[~blocks].max()) if (~blocks).any() else 0.0
    edge_p = float(w.params[~blocks].max()) if (~blocks).any() else 0.0
    if w.tied_head_bytes:
        edge_w = max(edge_w, w.tied_head_bytes)
    single = pp == 1
    stage_w = per_stage * blk_w + np.where(single, float(w.weight_bytes[~blocks].sum()) + (0 if not w.tied_head_bytes else 0), edge_w)
    stage_p = per_stage * blk_p + np.where(single, float(w.params[~blocks].sum()), edge_p)
    weights = stage_w / tp
    kv_heads = w.arch.num_kv_heads if w.arch is not None else 1
    kv_layer = float(w.kv_bytes_per_token[blocks].max()) if blocks.any() else 0.0
    out = {}
    if w.phase == "train":
        weights = np.where(zero_stage >= 3, weights / dp, weights)
        grads = stage_p * d.gradient_bytes_per_param.si / tp
        grads = grads / dp if zero_stage >= 2 else grads
        opt = stage_p * d.adam_state_bytes_per_param.si / tp
        opt = opt / dp if zero_stage >= 1 else opt
        act_l = float(w.activation_bytes_per_token[blocks].max()) if blocks.any() else 0.0
        ck_l = float(w.checkpoint_bytes_per_token[blocks].max()) if blocks.any() else 0.0
        repl = (4.0 * w.arch.d_model if w.arch is not None else 0.0)
        per_tok = gpu_activation_bytes_per_token_layer(activation_bytes_per_token=act_l, checkpoint_bytes_per_token=ck_l,
                                                       replicated_bytes_per_token=repl, tp=tp, recompute=recompute)
        seqs_per_replica = np.ceil(B / dp)
        in_flight = np.minimum(pp, np.ceil(seqs_per_replica / micro_batch))
        tok_mb = micro_batch * C
        act = per_tok * tok_mb * per_stage * in_flight
        if recompute == "full":  # one layer's full activations during its recomputed backward
            act = act + act_l / tp * tok_mb
        out.update(weights=weights, optimizer=opt + grads, kv_cache=np.zeros_like(weights), activations=act)
    else:
        kv = per_stage * kv_layer * B * C / np.minimum(tp, kv_heads)
        chunk = d.prefill_chunk_tokens.si
        tif = B if w.phase == "decode" else np.minimum(B * C, chunk)
        act = w.working_set_bytes_per_token * tif / tp * np.ones_like(weights)
        out.update(weights=weights * np.ones_like(kv), optimizer=np.zeros_like(kv), kv_cache=kv, activations=act)
    out["total"] = out["weights"] + out["optimizer"] + out["kv_cache"] + out["activations"]
    return out


def _tp_candidates(target: Target, catalog: Catalog, w: Workload) -> list[int]:
    gpu = target.device
    domain = int(gpu.scale_up_domain_gpus.si)
    limit = domain if domain > 8 else min(domain, int(catalog.defaults.gpu_max_tensor_parallel.si))
    limit = min(limit, 64)
    heads = w.arch.num_heads if w.arch is not None else 1
    return [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= limit and (heads % t == 0 or t == 1)]


def fit_gpu(w: Workload, target: Target, catalog: Catalog, reserve_frac: float, *, zero_stage: int = 1,
            recompute: str = "selective", tensor_parallel: int | None = None, pipeline_parallel: int | None = None) -> FitResult:
    gpu = target.device
    cap = gpu.hbm_bytes.si * (1.0 - reserve_frac)
    L = max(w.num_blocks, 1)
    tps = _tp_candidates(target, catalog, w) if tensor_parallel is None else [tensor_parallel]
    pps = list(range(1, L + 1)) if pipeline_parallel is None else [pipeline_parallel]
    dps = [1] if w.phase != "train" else [2**i for i in range(0, 15)]
    T, P, D = (a.ravel() for a in np.meshgrid(tps, pps, dps, indexing="ij"))
    n = T * P * D
    if target.count is not None:
        keep = n == target.count
        if not keep.any():
            # allow idle devices only if no exact layout exists (e.g. a prime count)
            keep = n <= target.count
        T, P, D, n = T[keep], P[keep], D[keep], n[keep]
    if len(n) == 0:
        raise InputError(f"target: no tensor x pipeline x data layout uses {target.count} GPUs; choose another count")
    mem = gpu_layout_memory(w, tp=T, pp=P, dp=D, zero_stage=zero_stage, recompute=recompute, catalog=catalog)
    total = mem["total"]
    ok = total <= cap
    if target.count is None:
        if ok.any():
            order = np.lexsort((D, T, P, n + np.where(ok, 0, 10**9)))
        else:
            order = np.lexsort((D, P, total))
    else:
        order = np.lexsort((P, T * P, ~ok))
        if not ok.any():
            order = np.argsort(total, kind="stable")
    i = int(order[0])
    fits = bool(ok[i])
    tp_, pp_, dp_ = int(T[i]), int(P[i]), int(D[i])
    num = target.count if target.count is not None else (int(n[i]) if fits else int(n[i]))
    # stages: pp pipeline stages, blocks split as evenly as possible
    edges = np.linspace(0, L, pp_ + 1).round().astype(int)
    stages = [Stage(device=s, first_layer=int(edges[s]), last_layer=int(edges[s + 1] - 1), embedding=s == 0,
                    lm_head=s == pp_ - 1, bytes=float(total[i])) for s in range(pp_)]
    parts = {k: float(mem[k][i]) for k in ("weights", "kv_cache", "activations", "optimizer")}
    replicas = n[i]
    notes = []
    if not fits:
        notes.append(f"the best layout (TP{tp_} PP{pp_} DP{dp_}) needs {total[i]:.3e} B per GPU; usable HBM is {cap:.3e} B")
    # totals across the devices the layout uses
    totals = {k: float(mem[k][i]) * replicas for k in ("weights", "kv_cache", "activations", "optimizer")}
    kv_room = cap - total[i] + parts["kv_cache"]
    kv_per_token = parts["kv_cache"] / max(w.batch * w.context, 1)
    max_tokens = int(max(0.0, kv_room / kv_per_token)) if kv_per_token > 0 else 0
    return FitResult(model=w.model_name, target=target.label, hardware=target.key, device_kind="gpu",
                     precision=w.precision, phase=w.phase, batch=w.batch, context=w.context, fits=fits,
                     num_devices=num, capacity_bytes=cap, weights_bytes=totals["weights"],
                     kv_cache_bytes=totals["kv_cache"], activation_bytes=totals["activations"],
                     optimizer_bytes=totals["optimizer"], total_bytes=float(total[i]) * replicas,
                     headroom_bytes=float(cap - total[i]), shortfall_bytes=float(max(0.0, total[i] - cap)),
                     binding=_binding(parts, float(total[i]), cap, fits), max_tokens_in_flight=max_tokens,
                     stages=stages, layout=Layout(tensor_parallel=tp_, pipeline_parallel=pp_, data_parallel=dp_,
                                                  zero_stage=zero_stage, recompute=recompute), notes=notes)


# ---------------------------------------------------------------------------------------------
def fit(model: str | Model | GenericModel, target: str | Target, *, precision: str = "bf16", phase: str = "decode",
        batch: int | None = None, context: int | None = None, reserve: float | None = None,
        catalog: Catalog | None = None, zero_stage: int = 1, recompute: str = "selective",
        memoryx_option: str | None = None) -> FitResult:
    """Does ``model`` fit ``target``? The Python API behind ``wseplan fit``.

    Parameters
    ----------
    model : str or Model
        Catalog name/alias, a Hugging Face ``config.json`` path, a layer-list YAML path, or a Model.
    target : str
        ``<hardware key>[x<N>]``.
    precision : str
        Weight/compute format (fp32, tf32, bf16, fp16, fp8, int8, int4, fp4).
    phase : str
        ``train`` (wafer: weight streaming with MemoryX), ``prefill`` or ``decode`` (weights resident).
    batch, context : int
        Sequences and tokens per sequence (KV length for decode). Defaults from ``catalogs/defaults.yaml``.
    reserve : float
        Share of SRAM/HBM kept back [fraction, 0-1); default from the catalog.
    """
    cat = catalog or load_catalog()
    d = cat.defaults
    if batch is None:
        batch = d.default_batch.si
        batch = int(batch) if float(batch).is_integer() and abs(batch) < 2**62 else batch
    if context is None:
        context = d.default_context_tokens.si
        context = int(context) if float(context).is_integer() and abs(context) < 2**62 else context
    check_positive_int(batch, "batch")
    check_positive_int(context, "context")
    if zero_stage not in (0, 1, 2, 3):
        raise InputError(f"zero: ZeRO stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if recompute not in RECOMPUTE:
        raise InputError(f"recompute: must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    m = resolve_model(model, cat) if isinstance(model, str) else model
    t = parse_target(target, cat) if isinstance(target, str) else target
    if reserve is None:
        reserve = (d.wafer_sram_reserve_frac if t.kind == "wafer" else d.gpu_hbm_reserve_frac).si
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not (0.0 <= reserve < 1.0) or math.isnan(reserve):
        raise InputError(f"reserve: must be a fraction in [0, 1), got {reserve!r}")
    w = build_workload(m, cat, precision=precision, phase=phase, batch=batch, context=context)
    if t.kind == "wafer":
        if phase == "train":
            return fit_wafer_train(w, t, cat, reserve, memoryx_option)
        return fit_wafer_inference(w, t, cat, reserve)
    return fit_gpu(w, t, cat, reserve, zero_stage=zero_stage, recompute=recompute)
