"""MemoryX -> wafer weight-streaming pipeline, simulated for many configurations at once.

One training step streams every layer's weights to the wafer for the forward pass (layers 0..L-1) and again
for the backward pass (L-1..0); after each backward layer its gradients go back to MemoryX. The loop runs
over the 2L layer slots (hundreds); every step of it is a numpy operation over all configurations, which
broadcast against each other (batch sizes x bandwidths x buffer depths ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wseplan.sim._errors import InputError

__all__ = ["StreamResult", "simulate_stream"]


@dataclass(frozen=True, kw_only=True)
class StreamResult:
    """Arrays broadcast to the common configuration shape.

    Attributes
    ----------
    step_time_s : ndarray
        One training step, including the exposed gradient tail and optimizer [s].
    compute_time_s : ndarray
        Sum of forward and backward compute [s].
    stall_time_s : ndarray
        ``step_time_s - compute_time_s``: time the wafer waits [s].
    stream_time_s : ndarray
        Busy time of the busier link direction (weights in, gradients out) [s].
    utilization_frac : ndarray
        ``compute_time_s / step_time_s`` [0-1].
    bound : ndarray of str
        'stream' where the link is busier than the wafer, else 'compute'.
    """

    step_time_s: np.ndarray
    compute_time_s: np.ndarray
    stall_time_s: np.ndarray
    stream_time_s: np.ndarray
    utilization_frac: np.ndarray
    bound: np.ndarray

    def to_dict(self) -> dict:
        """Field name -> array."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _layer_array(name, value, num_layers=None):
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        raise InputError(f"{name}: must be an array over layers (first axis), got a scalar")
    if num_layers is not None and arr.shape[0] != num_layers:
        raise InputError(f"{name}: has {arr.shape[0]} layers, expected {num_layers}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise InputError(f"{name}: values must be finite and >= 0")
    return arr


def _conf(name, value, *, minimum=0.0, strict=False, allow_inf=False):
    arr = np.asarray(value, dtype=float)
    bad = (arr <= minimum) if strict else (arr < minimum)
    if np.any(bad) or np.any(np.isnan(arr)) or (not allow_inf and np.any(np.isinf(arr))):
        op = ">" if strict else ">="
        raise InputError(f"{name}={value!r}: must be {op} {minimum}" + ("" if allow_inf else " and finite"))
    return arr


def simulate_stream(*, layer_weight_bytes, fwd_compute_s=None, bwd_compute_s=None,
                    link_bandwidth_bytes_per_s, link_latency_s=0.0, prefetch_layers=1, duplex=True,
                    grad_bytes=None, fwd_flop_per_token=None, bwd_flop_per_token=None, tokens_per_step=None,
                    compute_flop_per_s=None, num_systems=1, swarmx_bandwidth_bytes_per_s=np.inf,
                    swarmx_mode="shared", swarmx_fanout=4, swarmx_hop_latency_s=0.0,
                    optimizer_exposed_s=0.0, backward=True) -> StreamResult:
    """Simulate the weight stream of one training step for every configuration at once.

    Parameters
    ----------
    layer_weight_bytes : array_like, shape (L, ...)
        Weight bytes of each layer [bytes]; the first axis is the layer, trailing axes broadcast with the
        configuration parameters.
    fwd_compute_s, bwd_compute_s : array_like, shape (L, ...), optional
        Wafer time of each layer forward and backward [s]. Alternatively give ``fwd_flop_per_token``,
        ``bwd_flop_per_token`` [FLOP/token], ``tokens_per_step`` [tokens] and ``compute_flop_per_s``
        [FLOP/s] so that compute scales with the batch.
    link_bandwidth_bytes_per_s : array_like
        MemoryX -> wafer bandwidth per direction [bytes/s].
    link_latency_s : array_like
        Latency of each transfer [s]; it delays the transfer's end but does not occupy the link.
    prefetch_layers : array_like of int
        N: weight buffers beyond the layer being computed [layers]. N = 0 means no overlap of loading
        and compute; N = 1 is double buffering.
    duplex : bool
        True: gradients use the other direction of full-duplex links; False: they share the link with
        weight loads (first come, first served; a load requested at the same instant goes first).
    grad_bytes : array_like, shape (L, ...), optional
        Gradient bytes per layer [bytes]; default ``layer_weight_bytes``.
    num_systems : array_like of int
        Data-parallel systems behind SwarmX [count].
    swarmx_bandwidth_bytes_per_s : array_like
        'shared' mode: total SwarmX bandwidth split between the systems [bytes/s].
    swarmx_mode : {'shared', 'tree'}
        'shared': per-system bandwidth ``min(link, swarmx_total / num_systems)``. 'tree': SwarmX broadcasts
        and reduces at line rate in a tree of the given fanout, adding ``ceil(log_fanout(num_systems)) *
        swarmx_hop_latency_s`` to every transfer's latency.
    optimizer_exposed_s : array_like
        Exposed weight-update time at the end of the step [s].
    backward : bool
        False simulates a forward-only (inference) pass.

    Returns
    -------
    StreamResult

    Notes
    -----
    Slots i = 0..2L-1 (forward layers, then backward layers in reverse). With link bandwidth B and
    latency λ, for every configuration::

        req_i        = 0 for i <= N, else compute_end[i-N-1]         (a weight buffer frees)
        load_start_i = max(link_free, req_i);  link_free = load_start_i + w_i/B
        load_end_i   = load_start_i + w_i/B + λ
        compute_end_i = max(compute_end_{i-1}, load_end_i) + t_i
        (backward)  grad_start_i = max(grad_link_free, compute_end_i); grad_link_free += g_i/B
        step = max(compute_end_last, grad_end_last) + optimizer_exposed_s

    With ``duplex=False`` ``grad_link_free`` and ``link_free`` are the same timeline. The loop is over
    slots; each line is one array operation over all configurations.
    """
    w = _layer_array("layer_weight_bytes", layer_weight_bytes)
    num_layers = w.shape[0]
    conf_ndim = max(np.ndim(v) for v in (link_bandwidth_bytes_per_s, link_latency_s, prefetch_layers, num_systems,
                                         swarmx_bandwidth_bytes_per_s, optimizer_exposed_s, tokens_per_step,
                                         compute_flop_per_s, swarmx_hop_latency_s))
    conf_ndim = max([conf_ndim] + [np.ndim(v) - 1 for v in (layer_weight_bytes, fwd_compute_s, bwd_compute_s,
                                                             grad_bytes, fwd_flop_per_token, bwd_flop_per_token)
                                   if v is not None])

    def per_layer(arr):
        """(L, *T) -> (L, 1.., *T) so that its trailing axes line up with the configuration axes."""
        return arr.reshape((arr.shape[0],) + (1,) * (conf_ndim - (arr.ndim - 1)) + arr.shape[1:])

    def conf(arr):
        """Configuration array with a leading layer axis of length 1."""
        return np.asarray(arr)[None]

    w = per_layer(w)
    if fwd_compute_s is None:
        if fwd_flop_per_token is None or tokens_per_step is None or compute_flop_per_s is None:
            raise InputError("give fwd_compute_s, or fwd_flop_per_token with tokens_per_step and "
                             "compute_flop_per_s")
        tokens = _conf("tokens_per_step", tokens_per_step)
        rate = _conf("compute_flop_per_s", compute_flop_per_s, strict=True)
        f_tok = per_layer(_layer_array("fwd_flop_per_token", fwd_flop_per_token, num_layers))
        b_tok = 2.0 * f_tok if bwd_flop_per_token is None else \
            per_layer(_layer_array("bwd_flop_per_token", bwd_flop_per_token, num_layers))
        fwd = f_tok * conf(tokens) / conf(rate)
        bwd = b_tok * conf(tokens) / conf(rate)
    else:
        fwd = per_layer(_layer_array("fwd_compute_s", fwd_compute_s, num_layers))
        bwd = 2.0 * fwd if bwd_compute_s is None else \
            per_layer(_layer_array("bwd_compute_s", bwd_compute_s, num_layers))
    g = w if grad_bytes is None else per_layer(_layer_array("grad_bytes", grad_bytes, num_layers))
    bw = _conf("link_bandwidth_bytes_per_s", link_bandwidth_bytes_per_s, strict=True)
    lat = _conf("link_latency_s", link_latency_s)
    n_pre = _conf("prefetch_layers", prefetch_layers)
    if np.any(n_pre != np.round(n_pre)):
        raise InputError(f"prefetch_layers={prefetch_layers!r}: must be whole numbers >= 0")
    n_sys = _conf("num_systems", num_systems, minimum=1)
    sx_bw = _conf("swarmx_bandwidth_bytes_per_s", swarmx_bandwidth_bytes_per_s, strict=True, allow_inf=True)
    opt = _conf("optimizer_exposed_s", optimizer_exposed_s)
    if swarmx_mode == "shared":
        bw = np.minimum(bw, sx_bw / n_sys)
    elif swarmx_mode == "tree":
        if int(swarmx_fanout) < 2:
            raise InputError(f"swarmx_fanout={swarmx_fanout!r}: must be an integer >= 2")
        levels = np.ceil(np.log(n_sys) / math.log(int(swarmx_fanout)) - 1e-12)
        lat = lat + np.maximum(levels, 0) * _conf("swarmx_hop_latency_s", swarmx_hop_latency_s)
    else:
        raise InputError(f"swarmx_mode={swarmx_mode!r}: must be 'shared' or 'tree'")

    slots_w = np.concatenate([w, w[::-1]]) if backward else w
    slots_t = np.concatenate([fwd, bwd[::-1]]) if backward else fwd
    slots_g = np.concatenate([np.zeros_like(g), g[::-1]]) if backward else np.zeros_like(w)
    n_slots = slots_w.shape[0]
    shape = np.broadcast_shapes(slots_w.shape[1:], slots_t.shape[1:], slots_g.shape[1:], bw.shape, lat.shape,
                                n_pre.shape, opt.shape)
    full = (n_slots,) + shape
    load_time = np.broadcast_to(slots_w / conf(bw), full)
    grad_time = np.broadcast_to(slots_g / conf(bw), full)
    comp_time = np.broadcast_to(slots_t, full)
    lat_b = np.broadcast_to(lat, shape)
    n_pre_b = np.broadcast_to(n_pre, shape).astype(int)
    load_end = np.full(full, np.inf)
    state = {"link": np.zeros(shape)}

    def schedule(slot, request, mask):
        """FIFO on the inbound link: load ``slot`` (per configuration) requested at ``request``."""
        valid = mask & (slot < n_slots)
        idx = np.clip(slot, 0, n_slots - 1)[None]
        start = np.maximum(state["link"], request)
        free = start + np.take_along_axis(load_time, idx, axis=0)[0]
        state["link"] = np.where(valid, free, state["link"])
        old = np.take_along_axis(load_end, idx, axis=0)[0]
        np.put_along_axis(load_end, idx, np.where(valid, free + lat_b, old)[None], axis=0)

    zeros = np.zeros(shape)
    for j in range(int(n_pre_b.max()) + 1 if n_pre_b.size else 1):   # buffers filled before the step
        schedule(np.full(shape, j), zeros, n_pre_b >= j)
    grad_free = zeros.copy()
    grad_end = zeros.copy()
    prev_end = zeros.copy()
    for i in range(n_slots):
        prev_end = np.maximum(prev_end, load_end[i]) + comp_time[i]
        # Slot i's buffer is free: the load N+1 slots ahead is requested now (and goes before the gradient).
        schedule(i + 1 + n_pre_b, prev_end, np.ones(shape, dtype=bool))
        if backward and i >= num_layers:
            if duplex:
                grad_free = np.maximum(grad_free, prev_end) + grad_time[i]
            else:
                state["link"] = np.maximum(state["link"], prev_end) + grad_time[i]
                grad_free = state["link"]
            grad_end = grad_free + lat_b
    step = np.maximum(prev_end, grad_end) + opt
    compute = comp_time.sum(axis=0)
    stream_in = np.broadcast_to(load_time.sum(axis=0), shape)
    stream_out = np.broadcast_to(grad_time.sum(axis=0), shape)
    stream = np.maximum(stream_in, stream_out) if duplex else stream_in + stream_out
    util = np.clip(np.divide(compute, step, out=np.ones(shape), where=step > 0), 0.0, 1.0)
    return StreamResult(step_time_s=step, compute_time_s=np.array(compute, dtype=float),
                        stall_time_s=np.maximum(step - compute, 0.0), stream_time_s=np.array(stream, dtype=float),
                        utilization_frac=util, bound=np.where(stream > compute, "stream", "compute"))
