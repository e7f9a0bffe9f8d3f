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
from pydantic import BaseModel, ConfigDict, ValidationError

from ..catalog.load import read_yaml
from ..catalog.schema import Quantity
from ..errors import CatalogError, InputError, validation_detail
from .fabric_constants import default_calibration_dir
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
    out_end = np.max(E + tail_out, axis=0) + np.where(layer_sum(out) > 0, lat, 0.0)
    return np.maximum(E[-1], out_end)


def layer_sum(a):
    """The sum over the layer axis (the first) of ``a`` [same unit], in the order one configuration's column takes
    whatever the other axes hold: each column summed along contiguous memory (numpy's pairwise summation), not row
    by row, so a configuration's numbers do not depend on the rows evaluated beside it."""
    a = np.asarray(a, dtype=float)
    if a.ndim <= 1:
        return a.sum(axis=0)
    return np.ascontiguousarray(np.moveaxis(a, 0, -1)).sum(axis=-1)


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
    compute = layer_sum(fwd_c) + layer_sum(bwd_c)
    if optimizer_s is None:
        opt_exposed = np.zeros_like(compute)
    else:
        o = per_layer(optimizer_s)
        opt_exposed = np.maximum(o[0], layer_sum(o) - (bwd - o[0]))
    step = fwd + bwd - hidden + opt_exposed
    step = np.maximum(step, compute)
    recompute = extra_forward_passes * layer_sum(fl) * T / R
    spill_io = 2.0 * layer_sum(sp) / Bio
    return {"step_s": step, "compute_s": compute, "forward_s": fwd, "backward_s": bwd - hidden,
            "exposed_load_s": np.maximum(step - compute - opt_exposed, 0.0), "optimizer_exposed_s": opt_exposed,
            "recompute_s": recompute * np.ones_like(step), "spill_io_s": spill_io * np.ones_like(step),
            "utilization_frac": np.clip(compute / step, 0.0, 1.0), "num_layers": L}


def swarmx_tree_levels(*, num_systems, fanout) -> np.ndarray:
    """Levels of the SwarmX broadcast/reduce tree: ``ceil(log_fanout N)`` (0 for one system) [levels]."""
    n = np.asarray(num_systems, dtype=float)
    return np.where(n > 1, np.ceil(np.log(np.maximum(n, 1.0)) / math.log(fanout) - 1e-12), 0.0)
