"""Weight streaming: training on a wafer with MemoryX (and N systems behind SwarmX).

Activations stay on the wafer; each layer's weights stream in from MemoryX for the forward pass and again for
the backward pass, gradients stream out on the other direction of the full-duplex links, and the optimizer
update runs in MemoryX. With a prefetch depth of at least one layer, a layer slot costs
``max(t_compute, t_load)``; only the first load and the gradient/update of the last backward layer (layer 0,
which the next step needs first) are exposed at the iteration boundary.

Where the activation checkpoints of the backward pass do not fit on the wafer there are two ways out, and this
module models both and reports which binds:

* **recompute** - keep a checkpoint every ``k`` layers (``k ~ sqrt(L)``) and recompute each segment's
  forward in the backward pass (one extra forward pass of FLOPs);
* **spill** - write the checkpoints that do not fit to host-side activation memory during the forward pass and
  read them back during the backward pass, over the system's I/O ports, where they compete with the weight
  stream (Cerebras R2.0 "dynamic memory offload").

All physics functions are keyword-only and numpy-vectorized; the layer axis is the first axis. Constants
(``compute_efficiency_frac``, ``overlap_efficiency_frac``, ...) come from ``catalogs/calibration/stream.yaml``.

References
----------
Cerebras, "Scaling up and out: training massive models on Cerebras systems using weight streaming" (M. James,
2021); MemoryX and SwarmX glossaries; "Cerebras Software Release 2.0" blog (2023, dynamic memory offload).
Chen et al., "Training deep nets with sublinear memory cost", arXiv:1604.06174 (2016) (sqrt(L) checkpoints).
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..catalog.schema import Quantity
from ..errors import CatalogError, InputError, validation_detail
from .memory import stream_min_tokens_compute_bound, wafer_stream_buffer_bytes

POLICIES = ("auto", "store", "checkpoint", "recompute", "spill")


# ---------------------------------------------------------------------------------------------
# Constants (catalogs/calibration/stream.yaml)
# ---------------------------------------------------------------------------------------------
class StreamConstants(BaseModel):
    """Constants of the weight-streaming model, each a :class:`Quantity` with source and basis."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compute_efficiency_frac: Quantity
    overlap_efficiency_frac: Quantity
    prefetch_layers: Quantity
    memoryx_update_bytes_per_s: Quantity
    gpu_dp_compute_efficiency_frac: Quantity
    gpu_dp_overlap_frac: Quantity
    gpu_dp_link_latency_s: Quantity
    latency_exposed_frac: Quantity | None = None


class StreamFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int
    stream: StreamConstants


@lru_cache(maxsize=8)
def _load(path: str) -> StreamConstants:
    from pydantic import ValidationError

    from ..catalog.load import read_yaml

    try:
        return StreamFile.model_validate(read_yaml(Path(path))).stream
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        raise CatalogError(f"{path}: {loc}: {msg}; fix the calibration file") from None


class StreamSimFitConstants(BaseModel):
    """The stream constants fitted to the MemoryX simulator (``stream_sim_fit.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    overlap_efficiency_frac: Quantity
    latency_exposed_frac: Quantity


class StreamSimFitFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int
    method: str
    stream: StreamSimFitConstants
    fit: dict
    holdout: dict
    grid: dict
    holdout_grid: dict


@lru_cache(maxsize=8)
def _load_sim_fit(path: str) -> StreamSimFitFile:
    from pydantic import ValidationError

    from ..catalog.load import read_yaml

    try:
        return StreamSimFitFile.model_validate(read_yaml(Path(path)))
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        raise CatalogError(f"{path}: {loc}: {msg}; rerun `wseplan calibrate`") from None


def load_stream_constants(path: str | Path | None = None) -> StreamConstants:
    """Read ``catalogs/calibration/stream.yaml`` (or ``path``).

    The constants fitted to the MemoryX simulator (``overlap_efficiency_frac``, ``latency_exposed_frac``) are
    taken from ``stream_sim_fit.yaml`` in the same folder when it exists (written by ``wseplan calibrate``);
    they replace the same names of ``stream.yaml``.
    """
    from .fabric import default_calibration_dir

    p = Path(path) if path is not None else default_calibration_dir() / "stream.yaml"
    if not p.is_file():
        raise CatalogError(f"{p}: stream calibration file not found; restore catalogs/calibration/stream.yaml")
    base = _load(str(p))
    fit_path = p.parent / "stream_sim_fit.yaml"
    if not fit_path.is_file():
        return base
    fitted = _load_sim_fit(str(fit_path)).stream
    return base.model_copy(update={"overlap_efficiency_frac": fitted.overlap_efficiency_frac,
                                   "latency_exposed_frac": fitted.latency_exposed_frac})


# ---------------------------------------------------------------------------------------------
# Pure closed forms
# ---------------------------------------------------------------------------------------------
def slot_sequence_time_s(*, load_s, compute_s, out_s=0.0, latency_s=0.0, prefetch_layers=1,
                         overlap_efficiency_frac=1.0, latency_exposed_frac=1.0):
    """Time of a sequence of layer slots fed over a full-duplex link [s].

    Parameters
    ----------
    load_s : array_like, shape (S, ...)
        Inbound transfer of each slot (weights, reloaded checkpoints) [s].
    compute_s : array_like, shape (S, ...)
        Wafer compute of each slot [s].
    out_s : array_like, shape (S, ...)
        Outbound transfer produced by each slot (gradients, spilled checkpoints) [s].
    latency_s : array_like
        Latency of each transfer (MemoryX service, SwarmX tree levels) [s].
    prefetch_layers : int
        Weight buffers beyond the computing layer; 0 means no overlap.
    overlap_efficiency_frac : array_like
        Share of the shorter of (compute, next load) hidden behind the longer [0-1].
    latency_exposed_frac : array_like
        Share of each prefetched load's latency exposed in its slot [0-1]; a load is requested
        ``prefetch_layers`` slots ahead, so its latency is spread over them (fitted to the simulator in
        ``stream_sim_fit.yaml``; 1 with one prefetch buffer exposes the whole latency in each slot).

    Returns
    -------
    ndarray
        Time from the first load request to the last outbound byte [s].

    Notes
    -----
    Prefetch >= 1 (the next slot's load runs while this slot computes): slot j lasts
    ``d_j = max(c_j, x_j) + (1 - eta) min(c_j, x_j)`` with ``x_j = l_{j+1} + lat`` (``d_{S-1} = c_{S-1}``), so
    slot i computes until ``E_i = l_0 + lat + sum_{j<i} d_j + c_i``; with prefetch ``N``, ``x_j`` carries
    ``latency_exposed_frac * lat / N`` instead of ``lat``. The outbound direction is its own FIFO
    queue: ``out_end = max_i (E_i + sum_{j>=i} o_j) + lat``. ``T = max(E_{S-1}, out_end)``.
    Prefetch 0: ``d_j = c_j + l_{j+1} + lat``. This matches the event simulation
    :func:`wseplan.sim.memoryx.simulate_stream` exactly for uniform layers.
    """
    load = np.asarray(load_s, dtype=float)
    comp = np.asarray(compute_s, dtype=float)
    shape = np.broadcast_shapes(load.shape, comp.shape, np.shape(out_s))
    load, comp = np.broadcast_to(load, shape), np.broadcast_to(comp, shape)
    out = np.broadcast_to(np.asarray(out_s, dtype=float), shape)
    lat = np.asarray(latency_s, dtype=float)
    eta = np.clip(np.asarray(overlap_efficiency_frac, dtype=float), 0.0, 1.0)
    nxt = np.concatenate([load[1:], np.zeros_like(load[:1])])
    x = nxt + np.where(nxt > 0, lat, 0.0)
    if int(prefetch_layers) <= 0:
        d = comp + x
    elif int(prefetch_layers) > 0:
        lam = np.clip(np.asarray(latency_exposed_frac, dtype=float), 0.0, 1.0)
        x = nxt + np.where(nxt > 0, lam * lat / int(prefetch_layers), 0.0)
        d = np.maximum(comp, x) + (1.0 - eta) * np.minimum(comp, x)
    d = np.concatenate([d[:-1], comp[-1:]])
    before = np.cumsum(d, axis=0) - d  # sum_{j<i} d_j
    E = load[0] + lat + before + comp
    tail_out = np.flip(np.cumsum(np.flip(out, axis=0), axis=0), axis=0)  # sum_{j>=i} o_j
    out_end = np.max(E + tail_out, axis=0) + np.where(out.sum(axis=0) > 0, lat, 0.0)
    return np.maximum(E[-1], out_end)


def recompute_segment_layers(num_layers: int) -> int:
    """Checkpoint spacing k that minimises ``ceil(L/k) + k`` (about sqrt(L)) [layers]."""
    ks = np.arange(1, max(num_layers, 1) + 1)
    return int(ks[np.argmin(np.ceil(num_layers / ks) + ks)])


def activation_bytes_per_token(*, policy: str, checkpoint_bytes_per_token, activation_bytes_per_token) -> float:
    """On-wafer activation bytes per token for a policy [bytes/token].

    ``store``: every activation kept (``sum act``); ``checkpoint``/``spill``: layer inputs kept plus one layer's
    full set during its backward (``sum ckpt + max act``, as :mod:`.memory`); ``recompute``: a checkpoint every
    k layers plus one segment's inputs (``(ceil(L/k) + k) max ckpt + max act``).
    """
    ck = np.asarray(checkpoint_bytes_per_token, dtype=float)
    act = np.asarray(activation_bytes_per_token, dtype=float)
    if policy == "store":
        return float(act.sum())
    if policy in ("checkpoint", "spill"):
        return float(ck.sum() + act.max(initial=0.0))
    if policy == "recompute":
        L = int((ck > 0).sum()) or len(ck)
        k = recompute_segment_layers(L)
        return float((math.ceil(L / k) + k) * ck.max(initial=0.0) + act.max(initial=0.0))
    raise InputError(f"policy: unknown {policy!r}; use one of {', '.join(POLICIES)}")


def recompute_forward_passes(policy: str) -> float:
    """Extra forward passes of FLOPs a policy adds [passes]: store 0, checkpoint/spill 1, recompute 2."""
    return {"store": 0.0, "checkpoint": 1.0, "spill": 1.0, "recompute": 2.0}[policy]


def training_step_time_s(*, weight_bytes, flop_per_token, tokens, compute_flop_per_s, stream_bandwidth_bytes_per_s,
                         io_bandwidth_bytes_per_s, latency_s=0.0, grad_bytes=None, spill_bytes=None,
                         extra_forward_passes=0.0, prefetch_layers=1, overlap_efficiency_frac=1.0,
                         optimizer_s=None, latency_exposed_frac=1.0) -> dict:
    """One weight-streaming training step on one system [s], with its parts.

    Parameters
    ----------
    weight_bytes : array_like, shape (L,)
        Streamed weight bytes of each layer [bytes].
    flop_per_token : array_like, shape (L,)
        Forward FLOPs per token of each layer [FLOP].
    tokens : array_like
        Tokens per step on this system [tokens] (broadcasts against the other configuration arrays).
    compute_flop_per_s : array_like
        Achieved wafer FLOP rate (peak x efficiency) [FLOP/s].
    stream_bandwidth_bytes_per_s : array_like
        MemoryX -> wafer weight bandwidth per direction [bytes/s].
    io_bandwidth_bytes_per_s : array_like
        The system's I/O per direction, shared by weights and spilled activations [bytes/s].
    grad_bytes : array_like, shape (L,), optional
        Gradient bytes per layer (default ``weight_bytes``) [bytes].
    spill_bytes : array_like, shape (L, ...), optional
        Checkpoint bytes of each layer written out in the forward pass and read back in the backward [bytes].
    extra_forward_passes : float
        Recomputed forward passes (0 store, 1 per-layer checkpoints, 2 segment recompute) [passes].
    latency_exposed_frac : array_like
        As :func:`slot_sequence_time_s`.
    optimizer_s : array_like, shape (L,), optional
        MemoryX optimizer update time of each layer [s]; the update of layer 0 (the last gradient, the first
        weight the next step needs) is exposed, the rest overlaps the backward pass unless it takes longer.

    Returns
    -------
    dict
        ``step_s``, ``compute_s``, ``forward_s``, ``backward_s``, ``exposed_load_s``, ``optimizer_exposed_s``,
        ``recompute_s``, ``spill_io_s``, ``utilization_frac`` (arrays).

    Notes
    -----
    Forward slot i: load ``w_i / B_s``, compute ``f_i T / R``, outbound ``spill_i / B_io``. Backward slot i
    (reverse order): load ``w_i / B_s + spill_i / B_io`` (weights again plus the reloaded checkpoints),
    compute ``(2 + r) f_i T / R`` with ``r = extra_forward_passes``, outbound gradients ``g_i / B_s`` on the
    other direction of the full-duplex link. Each pass is timed by :func:`slot_sequence_time_s`; the backward's
    first load is prefetched during the forward's last compute. The MemoryX update of each layer starts when its
    gradient arrives, so ``optimizer_exposed = max(o_0, sum(o) - (T_bwd - o_0))``.
    ``step = max(T_fwd + T_bwd - hidden + optimizer_exposed, compute)``.
    """
    w = np.asarray(weight_bytes, dtype=float)
    f = np.asarray(flop_per_token, dtype=float)
    L = w.shape[0]
    conf_ndim = max(np.ndim(v) for v in (tokens, compute_flop_per_s, stream_bandwidth_bytes_per_s,
                                         io_bandwidth_bytes_per_s, latency_s, overlap_efficiency_frac))

    def per_layer(a):
        """(L,) -> (L, 1, ...) so that configuration axes broadcast after the layer axis."""
        a = np.asarray(a, dtype=float)
        return a.reshape(a.shape + (1,) * conf_ndim) if a.ndim == 1 else a

    T = np.asarray(tokens, dtype=float)
    R = np.asarray(compute_flop_per_s, dtype=float)
    Bs = np.asarray(stream_bandwidth_bytes_per_s, dtype=float)
    Bio = np.asarray(io_bandwidth_bytes_per_s, dtype=float)
    g = per_layer(w if grad_bytes is None else grad_bytes)
    sp = np.zeros_like(per_layer(w)) if spill_bytes is None else np.asarray(spill_bytes, dtype=float)
    if sp.ndim == 1:
        sp = per_layer(sp)
    wl, fl = per_layer(w), per_layer(f)
    fwd_c = fl * T / R
    bwd_c = (2.0 + extra_forward_passes) * fl * T / R
    fwd = slot_sequence_time_s(load_s=wl / Bs, compute_s=fwd_c, out_s=sp / Bio, latency_s=latency_s,
                               prefetch_layers=prefetch_layers, overlap_efficiency_frac=overlap_efficiency_frac,
                               latency_exposed_frac=latency_exposed_frac)
    bl = (wl / Bs + sp / Bio)[::-1]
    bwd = slot_sequence_time_s(load_s=bl, compute_s=bwd_c[::-1], out_s=(g / Bs)[::-1], latency_s=latency_s,
                               prefetch_layers=prefetch_layers, overlap_efficiency_frac=overlap_efficiency_frac,
                               latency_exposed_frac=latency_exposed_frac)
    # the backward's first load was prefetched during the forward's last layer
    hidden = np.minimum(bl[0], fwd_c[-1]) if int(prefetch_layers) > 0 else 0.0
    compute = fwd_c.sum(axis=0) + bwd_c.sum(axis=0)
    if optimizer_s is None:
        opt_exposed = np.zeros_like(compute)
    else:
        o = per_layer(optimizer_s)
        opt_exposed = np.maximum(o[0], o.sum(axis=0) - (bwd - o[0]))
    step = fwd + bwd - hidden + opt_exposed
    step = np.maximum(step, compute)
    recompute = extra_forward_passes * fl.sum(axis=0) * T / R
    spill_io = 2.0 * sp.sum(axis=0) / Bio
    return {"step_s": step, "compute_s": compute, "forward_s": fwd, "backward_s": bwd - hidden,
            "exposed_load_s": np.maximum(step - compute - opt_exposed, 0.0), "optimizer_exposed_s": opt_exposed,
            "recompute_s": recompute * np.ones_like(step), "spill_io_s": spill_io * np.ones_like(step),
            "utilization_frac": np.clip(compute / step, 0.0, 1.0), "num_layers": L}


def swarmx_tree_levels(*, num_systems, fanout) -> np.ndarray:
    """Levels of the SwarmX broadcast/reduce tree: ``ceil(log_fanout N)`` (0 for one system) [levels]."""
    n = np.asarray(num_systems, dtype=float)
    return np.where(n > 1, np.ceil(np.log(np.maximum(n, 1.0)) / math.log(fanout) - 1e-12), 0.0)


# ---------------------------------------------------------------------------------------------
# Composition on catalog entries
# ---------------------------------------------------------------------------------------------
class StreamResult(BaseModel):
    """One weight-streaming training prediction (``wseplan stream``). Units: s, tokens, bytes, fractions.

    ``min_tokens_compute_bound`` / ``max_tokens_on_wafer`` and ``min_batch_compute_bound`` /
    ``max_batch_on_wafer`` are per system and per pass: the streaming minimum (tokens whose forward compute
    hides every layer's weight load) and the SRAM maximum under the chosen activation policy.
    ``spill_bytes`` counts bytes written and read back over the step; ``alternatives_step_s`` holds the step
    time of recompute and spill when the checkpoints did not fit.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    model: str
    target: str
    hardware: str
    precision: str
    batch: int
    context: int
    num_systems: int
    per_system_batch: float
    tokens_per_step: float
    fits: bool
    activation_policy: str
    step_s: float
    tokens_per_s: float
    compute_s: float
    recompute_s: float
    exposed_load_s: float
    exposed_spill_s: float
    optimizer_exposed_s: float
    utilization_frac: float
    model_flop_per_s: float
    model_flop_utilization_frac: float
    stream_bandwidth_bytes_per_s: float
    io_bandwidth_bytes_per_s: float
    transfer_latency_s: float
    memoryx_tier: str
    min_tokens_compute_bound: float
    max_tokens_on_wafer: float
    min_batch_compute_bound: int
    max_batch_on_wafer: int
    feasible_compute_bound: bool
    spill_bytes: float
    bottleneck: str
    alternatives_step_s: dict[str, float] = {}
    notes: list[str] = []

    def to_record(self) -> dict:
        return self.model_dump(mode="json")

    def to_row(self) -> dict:
        row = {k: v for k, v in self.to_record().items() if not isinstance(v, (list, dict))}
        for k, v in self.alternatives_step_s.items():
            row[f"step_s_if_{k}"] = v
        return row


def plan_stream(model, target, catalog, *, precision: str = "bf16", batch: int = 1, context: int | None = None,
                policy: str = "auto", memoryx_option: str | None = None, num_systems: int | None = None,
                micro_batch: int | None = None, reserve: float | None = None,
                constants: StreamConstants | None = None) -> StreamResult:
    """Weight-streaming training step of ``model`` on ``num_systems`` wafers (default: the target's count or 1).

    Parameters
    ----------
    model : Model or GenericModel
    target : Target
        A wafer target (``cs3``, ``cs3x16``).
    catalog : Catalog
    batch : int
        Global batch [sequences] (split evenly over the systems).
    context : int
        Sequence length [tokens] (default: catalog default).
    policy : {'auto', 'store', 'checkpoint', 'recompute', 'spill'}
        Where activations for the backward pass live. ``auto`` keeps all activations if they fit, else layer
        checkpoints, else the faster of recompute and spill.
    memoryx_option : str
        MemoryX capacity option; its tier (DRAM or flash) sets the stream bandwidth.
    micro_batch : int, optional
        Sequences per pass on each system (gradient accumulation): each pass streams the weights again and
        holds only its own activations. Default: the whole per-system batch in one pass when one layer's
        working set for it fits on the wafer, else the largest number of sequences whose working set does.

    Notes
    -----
    Step = passes x (forward + backward of one pass) + exposed optimizer update, with
    ``passes = ceil(batch / (N * micro_batch))``. The stream bandwidth is the MemoryX tier's (DRAM when weights
    and optimizer state fit the DRAM capacity, else flash), capped by the system I/O and, for N > 1, by SwarmX;
    every transfer waits ``link_latency + ceil(log_fanout N) * per_level_latency``.

    Returns
    -------
    StreamResult
    """
    from ..fit import build_workload

    if policy not in POLICIES:
        raise InputError(f"policy: unknown {policy!r}; use one of {', '.join(POLICIES)}")
    if target.kind != "wafer":
        raise InputError(f"target: weight streaming needs a wafer target (cs2, cs3x4 ...), got {target.text!r}")
    c = constants or load_stream_constants()
    d = catalog.defaults
    context = int(d.default_context_tokens.si) if context is None else context
    N = num_systems if num_systems is not None else (target.count or 1)
    mb = micro_batch
    for name, v in (("batch", batch), ("context", context), ("num_systems", N)) + ((("micro_batch", mb),) if mb is not None else ()):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}: must be a positive integer, got {v!r}")
    wafer = target.device
    system = catalog.system_for_wafer(target.key)
    mx = catalog.memoryx[system.memoryx]
    sx = catalog.swarmx[system.swarmx]
    if N > sx.max_systems.si or N > system.max_cluster_systems.si:
        raise InputError(f"num_systems: {N} exceeds the largest {system.name} cluster "
                         f"({int(min(sx.max_systems.si, system.max_cluster_systems.si))}); use fewer systems")
    option = memoryx_option or mx.default_capacity
    if option not in mx.capacity_options_bytes:
        raise InputError(f"memoryx: unknown option {option!r}; choose one of {', '.join(mx.capacity_options_bytes)}")
    w = build_workload(model, catalog, precision=precision, phase="train", batch=batch, context=context)
    notes: list[str] = []
    mx_need = w.total_params * mx.optimizer_bytes_per_param.si
    mx_cap = mx.capacity_options_bytes[option].si
    if mx_need > mx_cap:
        notes.append(f"MemoryX {option} holds {mx_cap:.3e} B; weights + optimizer state need {mx_need:.3e} B")
    dram = mx_need <= mx.dram_capacity_bytes.si
    tier = "dram" if dram else "flash"
    io_bw = system.io_bandwidth_bytes_per_s.si
    stream_bw = min((mx.dram_stream_bandwidth_bytes_per_s if dram else mx.flash_stream_bandwidth_bytes_per_s).si, io_bw)
    levels = float(swarmx_tree_levels(num_systems=N, fanout=sx.fanout.si))
    if N > 1:
        stream_bw = min(stream_bw, sx.per_system_bandwidth_bytes_per_s.si)
    lat = mx.link_latency_s.si + levels * sx.per_level_latency_s.si
    rate = wafer.peak_flop_per_s(precision) * c.compute_efficiency_frac.si
    per_sys = batch / N
    reserve = d.wafer_sram_reserve_frac.si if reserve is None else reserve
    cap = wafer.usable_sram_bytes * (1.0 - reserve)
    avail = cap - wafer_stream_buffer_bytes(w.weight_bytes)
    ck, act = w.checkpoint_bytes_per_token, w.activation_bytes_per_token
    if mb is None:  # auto: the whole share in one pass if one layer's working set fits, else the largest that does
        act_max = float(act.max(initial=0.0))
        fit_seqs = int(max(avail, 0.0) // (act_max * context)) if act_max > 0 else math.inf
        mb = None if fit_seqs >= per_sys else max(1, fit_seqs)
    if mb is None or mb >= per_sys:
        passes, tokens = 1, per_sys * context
    else:
        passes = math.ceil(per_sys / mb)
        tokens = per_sys * context / passes  # equal passes of at most mb sequences
    per_tok = {p: activation_bytes_per_token(policy=p, checkpoint_bytes_per_token=ck, activation_bytes_per_token=act)
               for p in ("store", "checkpoint", "recompute")}
    opt_s = w.params * mx.optimizer_bytes_per_param.si * 2.0 / c.memoryx_update_bytes_per_s.si
    common = dict(weight_bytes=w.weight_bytes, flop_per_token=w.flop_per_token, tokens=tokens, compute_flop_per_s=rate,
                  stream_bandwidth_bytes_per_s=stream_bw, io_bandwidth_bytes_per_s=io_bw, latency_s=lat,
                  prefetch_layers=int(c.prefetch_layers.si), overlap_efficiency_frac=c.overlap_efficiency_frac.si,
                  optimizer_s=opt_s,
                  latency_exposed_frac=1.0 if c.latency_exposed_frac is None else c.latency_exposed_frac.si)

    def run(p):
        spill = None
        if p == "spill":
            over = max(0.0, tokens * per_tok["checkpoint"] - max(avail, 0.0))
            total_ck = tokens * float(ck.sum())
            spill = (min(over, total_ck) / total_ck * tokens * ck) if total_ck > 0 else np.zeros_like(ck)
        res = training_step_time_s(spill_bytes=spill, extra_forward_passes=recompute_forward_passes(p), **common)
        if passes > 1:  # every pass streams the weights again; the optimizer runs once, after the last pass
            res = dict(res)
            opt = res["optimizer_exposed_s"]
            for k in ("step_s", "compute_s", "forward_s", "backward_s", "exposed_load_s", "recompute_s", "spill_io_s"):
                res[k] = (res[k] - opt) * passes + opt if k == "step_s" else res[k] * passes
        return res, spill

    def fits(p):
        if p == "spill":
            return tokens * float(act.max(initial=0.0)) <= avail
        return tokens * per_tok[p] <= avail

    alternatives = {}
    if policy == "auto":
        if fits("store"):
            chosen = "store"
        elif fits("checkpoint"):
            chosen = "checkpoint"
        else:
            cands = [p for p in ("recompute", "spill") if fits(p)] or ["spill"]
            for p in ("recompute", "spill"):
                alternatives[p] = float(run(p)[0]["step_s"])
            chosen = min(cands, key=lambda p: alternatives[p])
    else:
        chosen = policy
    ok = fits(chosen) and avail > 0
    if not ok:
        notes.append(f"activations for {tokens:.4g} tokens per system do not fit on the wafer under policy {chosen}; "
                     "use a smaller batch or micro-batch, more systems, or another policy")
    res, spill = run(chosen)
    if passes > 1:
        notes.append(f"{passes} passes of {per_sys / passes:.4g} sequences per system (gradient accumulation)")
    base = run("checkpoint")[0] if chosen == "spill" else res  # the same step without the spill traffic
    base_step = float(base["step_s"])
    step = float(res["step_s"])
    compute = float(res["compute_s"])
    exposed = float(res["exposed_load_s"])
    exposed_spill = max(0.0, step - base_step) if chosen == "spill" else 0.0
    model_flop = 3.0 * float(w.flop_per_token.sum()) * batch * context
    peak_all = wafer.peak_flop_per_s(precision) * N
    t_min = stream_min_tokens_compute_bound(layer_weight_bytes=w.weight_bytes, layer_flop_per_token=w.flop_per_token,
                                            peak_flop_per_s=rate, stream_bandwidth_bytes_per_s=stream_bw)
    max_tok = {p: max(0.0, avail / v) if v > 0 else math.inf for p, v in per_tok.items()}
    max_tok["spill"] = max(0.0, avail / float(act.max(initial=1.0)))
    mt = max_tok[chosen] if chosen in max_tok else max_tok["checkpoint"]
    min_batch = max(1, math.ceil(t_min / context))  # per system (per pass)
    max_batch = int(min(mt // context, 2**62)) if math.isfinite(mt) else 2**62
    link_busy = passes * float((w.weight_bytes / stream_bw).sum() * 2.0 + (0.0 if spill is None else 2.0 * spill.sum() / io_bw))
    parts = {"compute": compute - float(res["recompute_s"]), "recompute": float(res["recompute_s"]),
             "weight_stream": exposed - exposed_spill, "spill_io": exposed_spill,
             "optimizer": float(res["optimizer_exposed_s"])}
    if not ok:
        bottleneck = "sram"
    elif link_busy > compute:  # the link is busier than the wafer
        bottleneck = "spill_io" if exposed_spill > exposed - exposed_spill else "weight_stream"
    else:
        bottleneck = max(parts, key=lambda k: parts[k])
    if chosen in ("recompute", "spill") and policy == "auto":
        other = "spill" if chosen == "recompute" else "recompute"
        notes.append(f"checkpoints do not fit on the wafer: {chosen} is faster than {other} "
                     f"({alternatives[chosen]:.4g} s vs {alternatives[other]:.4g} s per step)")
    return StreamResult(model=w.model_name, target=target.label, hardware=target.key, precision=precision, batch=batch,
                        context=context, num_systems=N, per_system_batch=batch / N, tokens_per_step=batch * context,
                        fits=bool(ok and mx_need <= mx_cap), activation_policy=chosen, step_s=step,
                        tokens_per_s=batch * context / step, compute_s=compute, recompute_s=float(res["recompute_s"]),
                        exposed_load_s=exposed, exposed_spill_s=exposed_spill,
                        optimizer_exposed_s=float(res["optimizer_exposed_s"]),
                        utilization_frac=float(res["utilization_frac"]), model_flop_per_s=model_flop / step,
                        model_flop_utilization_frac=float(min(1.0, model_flop / step / peak_all)),
                        stream_bandwidth_bytes_per_s=stream_bw, io_bandwidth_bytes_per_s=io_bw, transfer_latency_s=lat,
                        memoryx_tier=tier, min_tokens_compute_bound=t_min, max_tokens_on_wafer=float(min(mt, 1e300)),
                        min_batch_compute_bound=min_batch, max_batch_on_wafer=max_batch,
                        feasible_compute_bound=t_min <= mt, spill_bytes=0.0 if spill is None else float(2 * passes * spill.sum()),
                        bottleneck=bottleneck, alternatives_step_s=alternatives, notes=notes)


def predict_train(model, target, catalog, *, precision, batch, context, **options):
    """Weight-streaming training as a :class:`wseplan.timing.TimeResult` (the ``phase='train'`` path of
    :func:`wseplan.analytic.wse_time.predict`). Options: ``policy``, ``memoryx_option``, ``num_systems``,
    ``reserve``, ``stream_constants``."""
    from ..timing import TimeResult

    allowed = {"policy", "memoryx_option", "num_systems", "micro_batch", "reserve", "stream_constants"}
    unknown = set(options) - allowed
    if unknown:
        raise InputError(f"options: unknown {', '.join(sorted(unknown))} for wafer training; use {', '.join(sorted(allowed))}")
    r = plan_stream(model, target, catalog, precision=precision, batch=batch, context=context,
                    policy=options.get("policy", "auto"), memoryx_option=options.get("memoryx_option"),
                    num_systems=options.get("num_systems"), micro_batch=options.get("micro_batch"),
                    reserve=options.get("reserve"),
                    constants=options.get("stream_constants"))
    return TimeResult(model=r.model, target=r.target, hardware=r.hardware, device_kind="wafer", precision=precision,
                      phase="train", batch=batch, context=r.context, num_devices=r.num_systems, step_s=r.step_s,
                      tokens_per_s=r.tokens_per_s, model_flop_per_s=r.model_flop_per_s,
                      model_flop_utilization_frac=r.model_flop_utilization_frac, bottleneck=r.bottleneck,
                      breakdown_s={"compute": r.compute_s - r.recompute_s, "recompute": r.recompute_s,
                                   "exposed_load": r.exposed_load_s - r.exposed_spill_s, "exposed_spill": r.exposed_spill_s,
                                   "optimizer": r.optimizer_exposed_s},
                      layout={"num_systems": r.num_systems, "activation_policy": r.activation_policy,
                              "memoryx_tier": r.memoryx_tier, "min_batch_compute_bound": r.min_batch_compute_bound,
                              "max_batch_on_wafer": r.max_batch_on_wafer},
                      notes=list(r.notes))
