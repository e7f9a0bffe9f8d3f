"""Vectorized cycle-level simulator of kernels on a 2-D mesh of processing elements (PEs).

The grid is a P x Q region of PEs (P rows, Q columns). Each kernel is a handful of phases (scatter,
broadcast, compute, reduction, gather); each phase is one closed-form max-plus recurrence evaluated over the
whole grid at once (see :mod:`wseplan.sim._fabric`), so there is no Python loop over PEs, wavelets or cycles.
The loops that remain run over tree levels (log2 of a side) and over the phases of a kernel.

Physical effects modelled
-------------------------
* hop latency and link serialisation of every wavelet (cut-through pipelining);
* contention: flows converging on one link (gather, busy-period formula), segments sharing the source link
  (scatter, serialised farthest first), and the same link carrying a whole tree level or chain;
* back-pressure: a multicast colour stalls when any receiver's input queue (``input_queue_depth_wavelets``)
  is full, so a busy or slow receiver throttles the whole row (max-plus recurrence with a lag of D);
* compute limited by both FLOP/cycle and SRAM bytes/cycle;
* SRAM capacity (tiles + buffers) and routing colours: a kernel that needs more than it has returns
  ``fits=False`` with a reason (the time is still reported, for sweeps).

Assumptions are listed in each kernel's Notes. No result is hard-coded; everything follows from
:class:`MeshParams`.
"""

from __future__ import annotations

import enum
import math
import types
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from wseplan.sim import _fabric as fb
from wseplan.sim._errors import InputError

__all__ = [
    "MeshParams",
    "KernelResult",
    "BroadcastAlgo",
    "ReduceAlgo",
    "Gather",
    "broadcast",
    "reduce",
    "allreduce",
    "gemv",
    "gemm",
    "decode_layer",
]


@dataclass(frozen=True, kw_only=True)
class MeshParams:
    """Hardware parameters of a PE mesh. All times in cycles, sizes in bytes.

    Parameters
    ----------
    rows, cols : int
        Usable grid [PEs].
    sram_per_pe_bytes : float
        Local SRAM per PE [bytes].
    sram_bytes_per_cycle : float
        SRAM bandwidth per PE [bytes/cycle].
    flop_per_cycle : float
        Peak arithmetic per PE for the simulated data type [FLOP/cycle] (an FMA is 2 FLOP).
    hop_latency_cycles : float
        Router-to-router latency per hop [cycles].
    link_bytes_per_cycle : float
        Bandwidth of one link in one direction [bytes/cycle].
    input_queue_depth_wavelets : int
        Depth of a PE's input queue [wavelets].
    wavelet_bytes : int
        Payload of one wavelet [bytes]; 16-bit values are packed two per wavelet.
    num_colors : int
        Routing colours (or, on WSE-3, input queues) free for a kernel's concurrent routes [count].
    clock_hz : float
        PE clock [Hz].
    kernel_launch_overhead_cycles : float
        Fixed cost added once per kernel or per phase of a composed kernel [cycles].
    ramp_latency_cycles : float
        Extra latency each time a wavelet passes through a core rather than only a router (ejection,
        task activation, injection) [cycles].
    sram_reserved_bytes : float
        SRAM per PE kept for code, stack and runtime [bytes].
    """

    rows: int
    cols: int
    sram_per_pe_bytes: float
    sram_bytes_per_cycle: float
    flop_per_cycle: float
    hop_latency_cycles: float
    link_bytes_per_cycle: float
    input_queue_depth_wavelets: int
    wavelet_bytes: int = 4
    num_colors: int
    clock_hz: float
    kernel_launch_overhead_cycles: float = 0.0
    ramp_latency_cycles: float = 0.0
    sram_reserved_bytes: float = 0.0

    def __post_init__(self):
        for name in ("rows", "cols", "input_queue_depth_wavelets", "wavelet_bytes", "num_colors"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise InputError(f"MeshParams.{name}={v!r}: must be an integer >= 1")
        for name in ("sram_per_pe_bytes", "sram_bytes_per_cycle", "flop_per_cycle", "link_bytes_per_cycle",
                     "clock_hz"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)):
                raise InputError(f"MeshParams.{name}={v!r}: must be a finite number > 0")
        for name in ("hop_latency_cycles", "kernel_launch_overhead_cycles", "ramp_latency_cycles",
                     "sram_reserved_bytes"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise InputError(f"MeshParams.{name}={v!r}: must be a finite number >= 0")

    @property
    def wavelet_cycles(self) -> float:
        """Link time of one wavelet [cycles]."""
        return self.wavelet_bytes / self.link_bytes_per_cycle

    @classmethod
    def wse2(cls, **overrides) -> "MeshParams":
        """Cerebras WSE-2 (CS-2), FP16. Sources: the ids of ``catalogs/sources.yaml`` named below.

        * rows x cols 994 x 750: largest program rectangle 750 x 994 (``csl-examples`` single-tile-matvec).
        * 48 KiB SRAM per PE (``alcf-cerebras``); 24 B/cycle SRAM (``cerebras-hc34``: 2 x 64-bit reads + 1
          write).
        * 8 FLOP/cycle FP16 (4-wide FMAC, ``cerebras-weight-streaming-blog``: 3.4 M FPUs / 850k cores).
        * 1 cycle per hop (third-party simulator designs, unverified); 32-bit link per direction per cycle =
          4 B/cycle (``csl-skills-digest``).
        * 21 colours: 24 routable minus 3 reserved by memcpy (``cerebras-sdk-colors``).
        * 1.1 GHz (``cerebras-hc34``; Cerebras's own timing code in ``csl-examples`` uses 850 MHz - override
          ``clock_hz`` for it).
        * Input-queue depth 8 wavelets and 2 cycles of ramp latency: estimates (no public figure; "a few cycles
          of injection/ejection overhead" assumed).
        """
        base = dict(rows=994, cols=750, sram_per_pe_bytes=48 * 1024, sram_bytes_per_cycle=24.0,
                    flop_per_cycle=8.0, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0,
                    input_queue_depth_wavelets=8, wavelet_bytes=4, num_colors=21, clock_hz=1.1e9,
                    kernel_launch_overhead_cycles=0.0, ramp_latency_cycles=2.0, sram_reserved_bytes=0.0)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def wse3(cls, **overrides) -> "MeshParams":
        """Cerebras WSE-3 (CS-3), FP16. Sources: the ids of ``catalogs/sources.yaml`` named below.

        * rows x cols 1170 x 755: fabric 762 x 1172 (``waferllm-code``) with the WSE-2 rule width-7, height-2
          (``csl-examples``; an estimate).
        * 48 KiB SRAM and 24 B/cycle per PE, as WSE-2 (``alcf-cerebras``; 21 PB/s over 900k cores leaves the
          per-core SRAM bandwidth unchanged, ``alcf-sc24``).
        * 16 FLOP/cycle FP16 (8-wide SIMD, ``csl-skills-digest`` of the SDK docs).
        * 1 cycle per hop (unverified), 4 B/cycle links.
        * 6 colours: the binding resource on WSE-3 is ~6 free input queues (8 minus memcpy's,
          ``cerebras-sdk-colors``).
        * 1.1 GHz (WaferLLM ``launch_wse3.py``, ``waferllm-code``).
        * Input-queue depth 8 wavelets and ramp latency 2 cycles: estimates, as for WSE-2.
        """
        base = dict(rows=1170, cols=755, sram_per_pe_bytes=48 * 1024, sram_bytes_per_cycle=24.0,
                    flop_per_cycle=16.0, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0,
                    input_queue_depth_wavelets=8, wavelet_bytes=4, num_colors=6, clock_hz=1.1e9,
                    kernel_launch_overhead_cycles=0.0, ramp_latency_cycles=2.0, sram_reserved_bytes=0.0)
        base.update(overrides)
        return cls(**base)


class BroadcastAlgo(str, enum.Enum):
    """How a message is spread along a line of PEs."""

    CHAIN = "chain"                  #: hardware multicast, cut-through, streamed into the consumer
    STORE_FORWARD = "store_forward"  #: each PE stores the whole message, then re-sends it
    TREE = "tree"                    #: binary tree, store-and-forward per level


class ReduceAlgo(str, enum.Enum):
    """How partial vectors are summed along a line of PEs."""

    CHAIN = "chain"  #: pipelined add-and-forward through every PE
    TREE = "tree"    #: binary tree, one pipelined pairwise transfer per level


class Gather(str, enum.Enum):
    """Where a GEMV/GEMM result ends up."""

    NONE = "none"      #: left on the reduction root line, one segment per PE (input layout of the next,
                       #: transposed, GEMV)
    CORNER = "corner"  #: all segments sent to PE (0, 0)
    COLUMN = "column"  #: redistributed to the region's first column (through PE (0, 0))


@dataclass(frozen=True, kw_only=True)
class KernelResult:
    """Outcome of one simulated kernel.

    Attributes
    ----------
    cycles : float
        Makespan [cycles]. time_s : float — makespan [s].
    compute_cycles : float
        Largest per-PE arithmetic time (FLOP or SRAM limited), excluding waits [cycles].
    phase_cycles : Mapping[str, float]
        Critical-path decomposition: for each phase in order, the time from the end of the previous phase
        to the end of this one on the grid [cycles]; they sum to ``cycles``.
    broadcast_cycles, reduce_cycles, gather_cycles : float
        The matching entries of ``phase_cycles`` (0 when the kernel has no such phase) [cycles].
    hop_floor_cycles : float
        Farthest hop distance a phase's data must travel times hop latency, summed over phases [cycles].
    pe_busy_mean_frac, pe_busy_max_frac : float
        Core busy time (arithmetic and per-wavelet work) over the makespan, mean and max over PEs [0-1].
    link_utilization_max_frac, link_utilization_mean_frac : float
        Busy time of a directed link over the makespan, max and mean over the region's links [0-1].
    sram_bytes_per_pe : float
        Largest SRAM use on any PE, including the reserve [bytes].
    shortfall_bytes : float
        SRAM missing on the worst PE (0 when it fits) [bytes].
    colors_used : int
        Routing colours needed by the kernel's concurrent routes [count].
    fits : bool
        False when SRAM or colours are exceeded. reason : str — why not ('' when it fits).
    bottleneck : str
        The phase with the largest share of ``phase_cycles``.
    """

    cycles: float
    time_s: float
    compute_cycles: float
    phase_cycles: Mapping[str, float]
    broadcast_cycles: float
    reduce_cycles: float
    gather_cycles: float
    hop_floor_cycles: float
    pe_busy_mean_frac: float
    pe_busy_max_frac: float
    link_utilization_max_frac: float
    link_utilization_mean_frac: float
    sram_bytes_per_pe: float
    shortfall_bytes: float
    colors_used: int
    fits: bool
    reason: str
    bottleneck: str

    def part_cycles(self) -> dict:
        """Sum of ``phase_cycles`` by part (the text before the first '.') [cycles]."""
        out: dict = {}
        for k, v in self.phase_cycles.items():
            out[k.split(".")[0]] = out.get(k.split(".")[0], 0.0) + v
        return out

    def to_row(self) -> dict:
        """Flat dict (phase cycles as ``phase_<name>_cycles``) for a DataFrame row."""
        row = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "phase_cycles"}
        row.update({f"phase_{k}_cycles": v for k, v in self.phase_cycles.items()})
        return row


# ----------------------------------------------------------------------------------------------- tracing
@dataclass
class _Trace:
    """Internal accumulator for one kernel evaluation (link loads, busy time, colours, SRAM, phases)."""

    params: MeshParams
    P: int
    Q: int
    east: np.ndarray = field(init=False)
    west: np.ndarray = field(init=False)
    south: np.ndarray = field(init=False)
    north: np.ndarray = field(init=False)
    busy: np.ndarray = field(init=False)
    colors: int = 0
    phase_colors: set = field(default_factory=set)
    sram_bytes: float = 0.0
    reasons: list = field(default_factory=list)
    phases: list = field(default_factory=list)   # (name, end_time)
    compute_cycles: float = 0.0
    hop_floor: float = 0.0

    def __post_init__(self):
        self.east = np.zeros((self.P, max(self.Q - 1, 0)))
        self.west = np.zeros_like(self.east)
        self.south = np.zeros((max(self.P - 1, 0), self.Q))
        self.north = np.zeros_like(self.south)
        self.busy = np.zeros((self.P, self.Q))

    def links(self, axis: str, forward: bool) -> np.ndarray:
        """Link-load array in line orientation: (lines, L-1); forward = towards higher index."""
        if axis == "row":
            return self.east if forward else self.west
        return (self.south if forward else self.north).T

    def grid(self, arr: np.ndarray, axis: str) -> np.ndarray:
        """View of a (P, Q) array with lines along ``axis`` as the last axis."""
        return arr if axis == "row" else arr.T

    def use_colors(self, keys):
        self.phase_colors.update(keys)

    def end_phase(self, name: str, end_time: float):
        self.phases.append((name, float(end_time)))

    def end_kernel(self):
        """Routes of one kernel are live together; a composed kernel reloads routes between kernels."""
        self.colors = max(self.colors, len(self.phase_colors))
        self.phase_colors = set()

    def need_sram(self, nbytes: float, what: str):
        total = float(nbytes) + self.params.sram_reserved_bytes
        if total > self.sram_bytes:
            self.sram_bytes = total
        if total > self.params.sram_per_pe_bytes:
            self.reasons.append(f"SRAM: {what} needs {total:.0f} B per PE > {self.params.sram_per_pe_bytes:.0f} B")

    def result(self, end_time: float) -> KernelResult:
        p = self.params
        cycles = float(end_time) + p.kernel_launch_overhead_cycles * max(len(self.phases), 1)
        cycles = max(cycles, 1e-12)
        self.end_kernel()
        phase = {}
        prev = 0.0
        for name, t in self.phases:
            t = max(t, prev)
            phase[name] = phase.get(name, 0.0) + (t - prev) + p.kernel_launch_overhead_cycles
            prev = t
        if self.colors > p.num_colors:
            self.reasons.append(f"colours: needs {self.colors} concurrent routes > {p.num_colors} available")
        loads = [a.ravel() for a in (self.east, self.west, self.south, self.north) if a.size]
        loads = np.concatenate(loads) * p.wavelet_cycles if loads else np.zeros(1)
        busy = self.busy / cycles
        shortfall = max(0.0, self.sram_bytes - p.sram_per_pe_bytes)
        return KernelResult(
            cycles=cycles, time_s=cycles / p.clock_hz, compute_cycles=self.compute_cycles,
            phase_cycles=types.MappingProxyType(phase),
            broadcast_cycles=sum(v for k, v in phase.items() if "broadcast" in k or "scatter" in k),
            reduce_cycles=sum(v for k, v in phase.items() if "reduce" in k),
            gather_cycles=sum(v for k, v in phase.items() if "gather" in k),
            hop_floor_cycles=self.hop_floor,
            pe_busy_mean_frac=float(min(busy.mean(), 1.0)), pe_busy_max_frac=float(min(busy.max(), 1.0)),
            link_utilization_max_frac=float(min(loads.max() / cycles, 1.0)),
            link_utilization_mean_frac=float(min(loads.mean() / cycles, 1.0)),
            sram_bytes_per_pe=self.sram_bytes, shortfall_bytes=shortfall, colors_used=int(self.colors),
            fits=not self.reasons, reason="; ".join(dict.fromkeys(self.reasons)),
            bottleneck=max(phase, key=phase.get) if phase else "none",
        )


def _region(params: MeshParams, region) -> tuple[int, int]:
    try:
        P, Q = (int(v) for v in region)
    except (TypeError, ValueError):
        raise InputError(f"region={region!r}: must be a pair (rows, cols) of positive integers") from None
    fits = (P <= params.rows and Q <= params.cols) or (P <= params.cols and Q <= params.rows)
    if P < 1 or Q < 1 or not fits:
        raise InputError(f"region={region!r}: must fit the {params.rows} x {params.cols} grid "
                         "(either way round: the mesh is symmetric, a region may be placed rotated)")
    return P, Q


def _positive_int(name, v):
    if int(v) != v or v < 1:
        raise InputError(f"{name}={v!r}: must be an integer >= 1")
    return int(v)


def _wavelets(num_elements, dtype_bytes, params) -> int:
    """Wavelets needed for ``num_elements`` values packed into ``wavelet_bytes`` payloads."""
    return max(1, math.ceil(num_elements * dtype_bytes / params.wavelet_bytes))


def _span_loads(length: int, levels, num_wavelets: int, toward_zero: bool) -> np.ndarray:
    """Wavelets per link (L-1,) of a tree: each level's pair (x, x+st) uses links x..x+st-1."""
    load = np.zeros(max(length - 1, 0))
    for st, send in levels:
        lo = send - st if toward_zero else send
        diff = np.zeros(length)
        np.add.at(diff, lo, num_wavelets)
        np.add.at(diff, np.minimum(lo + st, length - 1), -num_wavelets)
        load += np.cumsum(diff)[:-1]
    return load


# ------------------------------------------------------------------------------------------ line phases
def _bcast_phase(tr: _Trace, *, axis, algo, t0, ready, consume_total, num_wavelets, name):
    """Broadcast along lines (last axis of ``ready``) from position 0 and consume the message.

    ``consume_total`` [cycles] is the core time to use the whole message (per PE); with CHAIN the message
    is consumed while it streams (back-pressure), otherwise it is stored first and consumed afterwards.
    Returns (data-arrival, consume-finish) arrays in line orientation.
    """
    p = tr.params
    length = ready.shape[-1]
    M, s, h, ramp = num_wavelets, p.wavelet_cycles, p.hop_latency_cycles, p.ramp_latency_cycles
    store = p.wavelet_bytes / p.sram_bytes_per_cycle
    loads = tr.links(axis, True)
    if algo == BroadcastAlgo.CHAIN:
        a = np.maximum(consume_total / M, store)
        arrive, finish = fb.multicast_line(t0=t0, ready=ready, consume_cycles=a, num_wavelets=M, hop_cycles=h,
                                           wavelet_cycles=s, queue_depth=p.input_queue_depth_wavelets)
        if loads.size:
            loads += M
        tr.use_colors({(axis, "bcast-chain")})
    else:
        if algo == BroadcastAlgo.TREE:
            arrive, levels = fb.tree_broadcast_line(t0=t0, num_wavelets=M, hop_cycles=h, wavelet_cycles=s,
                                                    ramp_cycles=ramp, length=length)
            if loads.size:
                loads += _span_loads(length, levels, M, toward_zero=False)
            tr.use_colors({(axis, "bcast-tree", lvl) for lvl in range(len(levels))})
        else:
            arrive = fb.store_forward_line(t0=t0, num_wavelets=M, hop_cycles=h, wavelet_cycles=s,
                                           ramp_cycles=ramp, length=length)
            if loads.size:
                loads += M
            tr.use_colors({(axis, "bcast-sf", par) for par in range(min(2, length - 1) if length > 1 else 0)})
        arrive = np.broadcast_to(arrive, ready.shape)
        finish = np.maximum(arrive, ready) + consume_total
        if algo == BroadcastAlgo.STORE_FORWARD:
            tr.grid(tr.busy, axis)[...] += M * store
    tr.hop_floor += (length - 1) * h
    return arrive, finish


def _reduce_phase(tr: _Trace, *, axis, algo, ready, ready_step, num_wavelets, dtype_bytes, epw):
    """Reduce partial vectors along lines towards position 0; returns per-position done times."""
    p = tr.params
    length = ready.shape[-1]
    s, h, ramp = p.wavelet_cycles, p.hop_latency_cycles, p.ramp_latency_cycles
    # Per wavelet: read own partial (SRAM) and add epw values; never faster than the link.
    add = epw * max(1.0 / p.flop_per_cycle, dtype_bytes / p.sram_bytes_per_cycle)
    a = max(s, add)
    a0 = max(s, epw * dtype_bytes / p.sram_bytes_per_cycle)
    M = num_wavelets
    loads = tr.links(axis, False)
    if algo == ReduceAlgo.CHAIN:
        done = fb.chain_reduce_line(ready=ready[..., ::-1], ready_step=ready_step, first_cycles=a0,
                                    stage_service_cycles=a, num_wavelets=M, stage_cycles=h + ramp)[..., ::-1]
        if loads.size:
            loads += M
        tr.use_colors({(axis, "reduce-chain", par) for par in range(min(2, length - 1))})
        tr.grid(tr.busy, axis)[..., :-1] += M * add
    else:
        done, levels = fb.tree_reduce_line(ready=ready, ready_step=ready_step, first_cycles=a0,
                                           stage_service_cycles=a, num_wavelets=M, hop_cycles=h,
                                           ramp_cycles=ramp)
        if loads.size:
            loads += _span_loads(length, levels, M, toward_zero=True)
        tr.use_colors({(axis, "reduce-tree", lvl) for lvl in range(len(levels))})
        nrecv = np.zeros(length)
        for st, send in levels:
            nrecv[send - st] += 1
        tr.grid(tr.busy, axis)[...] += nrecv * M * add
    tr.hop_floor += (length - 1) * h
    return done


def _reduce_time(params: MeshParams, *, algo, ready, ready_step, num_wavelets, dtype_bytes, epw) -> float:
    """End time of a reduction without touching a trace (used to pick the faster algorithm)."""
    tmp = _Trace(params, 1, ready.shape[-1])
    return float(_reduce_phase(tmp, axis="row", algo=algo, ready=ready, ready_step=ready_step,
                               num_wavelets=num_wavelets, dtype_bytes=dtype_bytes, epw=epw)[..., 0].max())


def _pick_reduce(tr: _Trace, algo, *, ready, ready_step, num_wavelets, dtype_bytes, epw, other_colors):
    """Chosen algorithm: the given one, or the faster of chain/tree that fits the colour budget."""
    if algo is not None:
        return ReduceAlgo(algo)
    length = ready.shape[-1]
    if length == 1:
        return ReduceAlgo.CHAIN
    # Evaluate on the slowest line only (all lines of a kernel are alike up to their ready times).
    worst = ready.reshape(-1, length)[[int(np.argmax(ready.reshape(-1, length).max(-1)))]]
    budget = tr.params.num_colors - other_colors
    cands = []
    for alg in (ReduceAlgo.CHAIN, ReduceAlgo.TREE):
        need = min(2, length - 1) if alg == ReduceAlgo.CHAIN else fb.tree_levels(length)
        t = _reduce_time(tr.params, algo=alg, ready=worst, ready_step=ready_step, num_wavelets=num_wavelets,
                         dtype_bytes=dtype_bytes, epw=epw)
        cands.append((need > budget, t, alg))
    return min(cands, key=lambda c: (c[0], c[1]))[2]


def _mac_cycles(params: MeshParams, dtype_bytes: int, *, streamed_accumulator: bool = True) -> float:
    """Core time of one multiply-accumulate [cycles/MAC].

    Notes
    -----
    ``max(2 / flop_per_cycle, bytes / sram_bytes_per_cycle)``: each MAC reads its weight once
    (``dtype_bytes``) and, in the AXPY form used when the input streams in, reads and writes one accumulator
    (``2*dtype_bytes``). On WSE-2 (8 FLOP, 24 B per cycle) both limits meet at 4 MAC/cycle; on WSE-3 the
    SRAM limit binds.
    """
    nbytes = dtype_bytes * (3 if streamed_accumulator else 1)
    return max(2.0 / params.flop_per_cycle, nbytes / params.sram_bytes_per_cycle)


# --------------------------------------------------------------------------------------------- GEMV core
def _gemv_core(tr: _Trace, *, k, n, m=1, axis, ready, x_ready, bcast_algo, reduce_algo, dtype_bytes, name):
    """Weights-stationary GEMV/GEMM on the whole trace region, orientation-generic.

    ``axis='row'``: K is split over the P rows; x segment p enters row p at column 0 at ``x_ready[p]`` and
    is broadcast along the row; partial sums are reduced along each column towards row 0.
    ``axis='col'``: the transpose (K over columns, broadcast down columns from row 0, reduce along rows
    towards column 0). Returns (core-free grid (P, Q), result-ready times on the root line (L,)).
    """
    p = tr.params
    g = tr.grid(ready, axis)                  # (lines, L): lines carry the K split
    nlines, length = g.shape
    kt, nt = math.ceil(k / nlines), math.ceil(n / length)
    epw = max(1, p.wavelet_bytes // dtype_bytes)
    mx, my = _wavelets(m * kt, dtype_bytes, p), _wavelets(m * nt, dtype_bytes, p)
    mac = _mac_cycles(p, dtype_bytes)
    row_cycles = kt * nt * mac
    consume = m * row_cycles
    buf_x = 0 if bcast_algo == BroadcastAlgo.CHAIN else m * kt * dtype_bytes
    acc = nt * dtype_bytes * (1 if m == 1 else 2)
    tr.need_sram(kt * nt * dtype_bytes + acc + buf_x, f"{name} tile {kt}x{nt} + buffers")
    tr.compute_cycles = max(tr.compute_cycles, consume)
    arrive, finish = _bcast_phase(tr, axis=axis, algo=bcast_algo, t0=x_ready, ready=g, consume_total=consume,
                                  num_wavelets=mx, name=name)
    tr.grid(tr.busy, axis)[...] += consume
    tr.end_phase(f"{name}.broadcast", arrive.max())
    tr.end_phase(f"{name}.compute", finish.max())
    raxis = "col" if axis == "row" else "row"
    if nlines == 1:
        return (finish if axis == "row" else finish.T), finish[0]
    r_ready = finish.T                        # (L, nlines): reduction lines, root at position 0
    step = 0.0
    if m > 1:
        w_row = _wavelets(nt, dtype_bytes, p)
        r_ready = r_ready - (m - 1) * row_cycles
        step = row_cycles / w_row
    bcolors = len(tr.phase_colors)
    algo = _pick_reduce(tr, reduce_algo, ready=r_ready, ready_step=step, num_wavelets=my,
                        dtype_bytes=dtype_bytes, epw=epw, other_colors=bcolors)
    done = _reduce_phase(tr, axis=raxis, algo=algo, ready=r_ready, ready_step=step, num_wavelets=my,
                         dtype_bytes=dtype_bytes, epw=epw)
    tr.end_phase(f"{name}.reduce", done[:, 0].max())
    free_g = np.maximum(finish, done.T)
    return (free_g if axis == "row" else free_g.T), done[:, 0]


def _gather_phase(tr: _Trace, *, out_ready, nt, n, dtype_bytes, gather):
    """Move a result spread over row 0 (segment q at PE (0, q)) to PE (0, 0) or to column 0."""
    p = tr.params
    Q = out_ready.shape[0]
    my = _wavelets(nt, dtype_bytes, p)
    work = np.full(Q, my * p.wavelet_cycles)
    work[0] = 0.0
    arrival = out_ready + np.arange(Q) * p.hop_latency_cycles
    corner = float(fb.incast_finish(arrival=arrival, work_cycles=work)) if Q > 1 else float(out_ready[0])
    if Q > 1:
        seg = np.full(Q, float(my))
        seg[0] = 0.0
        tr.west[0] += np.flip(np.cumsum(np.flip(seg)))[1:]
        tr.use_colors({("row", "gather")})
    tr.hop_floor += (Q - 1) * p.hop_latency_cycles
    if gather == Gather.CORNER:
        tr.need_sram(n * dtype_bytes, f"gathered result of {n} values on PE (0, 0)")
        return corner
    P = tr.P
    per_row = _wavelets(math.ceil(n / P), dtype_bytes, p)
    if P > 1:
        tr.south[:, 0] += per_row * np.arange(P - 1, 0, -1)
        tr.use_colors({("col", "gather")})
    tr.hop_floor += (P - 1) * p.hop_latency_cycles
    tr.need_sram(math.ceil(n / P) * dtype_bytes, "redistributed result segment")
    # The corner's router turns the merged stream south at link rate; the last segment lands P-1 hops on.
    return corner + (P - 1) * p.hop_latency_cycles + per_row * p.wavelet_cycles * (P > 1)


def _check_dtype(dtype_bytes):
    if dtype_bytes not in (1, 2, 4):
        raise InputError(f"dtype_bytes={dtype_bytes!r}: must be 1, 2 or 4")
    return int(dtype_bytes)


def gemv(params: MeshParams, *, k: int, n: int, region=None, dtype_bytes: int = 2,
         broadcast_algo: BroadcastAlgo = BroadcastAlgo.CHAIN, reduce_algo: ReduceAlgo | None = None,
         input_at: str = "edge", gather: Gather = Gather.NONE) -> KernelResult:
    """Simulate ``y[1, n] = x[1, k] @ W[k, n]`` with W tiled over a P x Q region (weights stationary).

    Parameters
    ----------
    params : MeshParams
    k, n : int
        Matrix dimensions [elements].
    region : (int, int), optional
        Rows P (split of k) and columns Q (split of n) [PEs]; default the whole grid.
    dtype_bytes : int
        Bytes per weight, activation and partial sum [bytes].
    broadcast_algo : BroadcastAlgo
        How x segment p is spread along row p (CHAIN streams it straight into the MACs).
    reduce_algo : ReduceAlgo or None
        Partial-sum reduction along each column; None picks the faster of chain and tree that fits the
        colour budget.
    input_at : {'edge', 'corner'}
        'edge': x segment p already sits on PE (p, 0); 'corner': all of x is on PE (0, 0) and is first
        scattered down column 0 (serialised on the corner's link).
    gather : Gather
        Where the result goes (default: left on row 0, one n/Q segment per column).

    Returns
    -------
    KernelResult

    Notes
    -----
    Each PE (p, q) holds a ``ceil(k/P) x ceil(n/Q)`` tile. Phases, each a max-plus recurrence over the grid:

    1. x segment p (``ceil(k/P)`` values, packed ``wavelet_bytes/dtype_bytes`` per wavelet) is multicast
       along row p; every PE consumes it at its MAC rate, ``ceil(n/Q) * mac_cycles`` per value, with
       ``mac_cycles = max(2/flop_per_cycle, 3*dtype_bytes/sram_bytes_per_cycle)`` (weight read once,
       accumulator read and written). Receive queues throttle the multicast (:func:`_fabric.multicast_line`).
    2. The n/Q partial sums of each column are reduced towards row 0, by chain (every PE adds and forwards,
       paying ``ramp_latency_cycles`` per stage) or binary tree (log2 P pairwise transfers).
    3. Optional gather: segments converge on PE (0, 0) and contend for its link (busy-period formula).

    SRAM per PE: weight tile + accumulator (+ x buffer unless streamed, + gathered result on the corner).
    Colours: chain multicast 1, store-and-forward 2, tree one per level; chain reduce 2 (alternating parity),
    tree one per level; scatter and gather 1 each. Exceeding ``num_colors`` gives ``fits=False``.
    """
    P, Q = _region(params, region if region is not None else (params.rows, params.cols))
    k, n = _positive_int("k", k), _positive_int("n", n)
    dtype_bytes = _check_dtype(dtype_bytes)
    if P > k or Q > n:
        raise InputError(f"region={P}x{Q} with k={k}, n={n}: need P <= k and Q <= n (no empty tiles)")
    if input_at not in ("edge", "corner"):
        raise InputError(f"input_at={input_at!r}: must be 'edge' or 'corner'")
    gather = Gather(gather)
    return _gemm_like(params, m=1, k=k, n=n, P=P, Q=Q, dtype_bytes=dtype_bytes,
                      broadcast_algo=BroadcastAlgo(broadcast_algo), reduce_algo=reduce_algo, input_at=input_at,
                      gather=gather, name="gemv")


def gemm(params: MeshParams, *, m: int, k: int, n: int, region=None, dtype_bytes: int = 2,
         broadcast_algo: BroadcastAlgo = BroadcastAlgo.CHAIN, reduce_algo: ReduceAlgo | None = None,
         input_at: str = "edge", gather: Gather = Gather.NONE) -> KernelResult:
    """Simulate ``Y[m, n] = X[m, k] @ W[k, n]``: weights stationary, the m rows of X streamed through.

    Parameters are those of :func:`gemv` plus ``m`` [rows]. Notes: as :func:`gemv`, with the row
    broadcast carrying ``m * ceil(k/P)`` values and each PE's MAC work multiplied by m. The partial sums of
    activation row r are ready after r+1 rows of MACs, so the reduction of early rows overlaps the MACs of
    later ones (affine readiness per wavelet, :func:`_fabric.chain_reduce_line`). A double-buffered
    accumulator (2 x n/Q values) is counted in SRAM.
    """
    P, Q = _region(params, region if region is not None else (params.rows, params.cols))
    m, k, n = _positive_int("m", m), _positive_int("k", k), _positive_int("n", n)
    dtype_bytes = _check_dtype(dtype_bytes)
    if P > k or Q > n:
        raise InputError(f"region={P}x{Q} with k={k}, n={n}: need P <= k and Q <= n (no empty tiles)")
    if input_at not in ("edge", "corner"):
        raise InputError(f"input_at={input_at!r}: must be 'edge' or 'corner'")
    return _gemm_like(params, m=m, k=k, n=n, P=P, Q=Q, dtype_bytes=dtype_bytes,
                      broadcast_algo=BroadcastAlgo(broadcast_algo), reduce_algo=reduce_algo, input_at=input_at,
                      gather=Gather(gather), name="gemm")


def _gemm_like(params, *, m, k, n, P, Q, dtype_bytes, broadcast_algo, reduce_algo, input_at, gather, name):
    tr = _Trace(params, P, Q)
    x_ready = np.zeros(P)
    if input_at == "corner":
        kt = math.ceil(k / P)
        seg = np.full(P, _wavelets(m * kt, dtype_bytes, params), dtype=float)
        tr.need_sram(m * k * dtype_bytes, f"input of {m * k} values on PE (0, 0)")
        x_ready = fb.scatter_line(t0=np.array(0.0), wavelets=seg, hop_cycles=params.hop_latency_cycles,
                                  wavelet_cycles=params.wavelet_cycles)
        if P > 1:
            seg[0] = 0
            tr.south[:, 0] += np.flip(np.cumsum(np.flip(seg)))[:-1]
            tr.use_colors({("col", "scatter")})
        tr.hop_floor += (P - 1) * params.hop_latency_cycles
        tr.end_phase("scatter", x_ready.max())
    reduce_algo = None if reduce_algo is None else ReduceAlgo(reduce_algo)
    free, out_ready = _gemv_core(tr, k=k, n=n, m=m, axis="row", ready=np.zeros((P, Q)), x_ready=x_ready,
                                 bcast_algo=broadcast_algo, reduce_algo=reduce_algo, dtype_bytes=dtype_bytes,
                                 name=name)
    end = float(free.max())
    if gather != Gather.NONE:
        end = max(end, _gather_phase(tr, out_ready=out_ready, nt=m * math.ceil(n / Q), n=m * n,
                                     dtype_bytes=dtype_bytes, gather=gather))
        tr.end_phase("gather", end)
    return tr.result(end)


def _line_kernel(params, region, axis):
    P, Q = _region(params, region if region is not None else (params.rows, params.cols))
    if axis not in ("row", "col"):
        raise InputError(f"axis={axis!r}: must be 'row' (along each row) or 'col' (along each column)")
    return P, Q


def broadcast(params: MeshParams, *, nbytes: float, region=None, axis: str = "row",
              algo: BroadcastAlgo = BroadcastAlgo.CHAIN) -> KernelResult:
    """Every line of the region broadcasts ``nbytes`` from its first PE to all its PEs' memory.

    Parameters
    ----------
    nbytes : float
        Message size [bytes].
    region : (int, int), optional
        P x Q PEs; default the whole grid.
    axis : {'row', 'col'}
        'row': each row from column 0 eastwards; 'col': each column from row 0 southwards.
    algo : BroadcastAlgo

    Notes
    -----
    CHAIN, one wavelet, L PEs: ``(L-1)*hop_latency_cycles + wavelet_bytes/link_bytes_per_cycle`` to the far
    end. CHAIN, M wavelets: ``(L-1)*h + M*s`` (receivers store at SRAM speed, so no back-pressure unless the
    SRAM write is slower than the link). STORE_FORWARD: ``(L-1)*(h + ramp + M*s)``. TREE: per level
    ``st*h + ramp + M*s`` with serialised sends per sender.
    """
    P, Q = _line_kernel(params, region, axis)
    if not (nbytes > 0):
        raise InputError(f"nbytes={nbytes!r}: must be > 0")
    tr = _Trace(params, P, Q)
    algo = BroadcastAlgo(algo)
    M = max(1, math.ceil(nbytes / params.wavelet_bytes))
    g = tr.grid(np.zeros((P, Q)), axis)
    store = params.wavelet_bytes / params.sram_bytes_per_cycle
    tr.need_sram(M * params.wavelet_bytes, "received message")
    _, finish = _bcast_phase(tr, axis=axis, algo=algo, t0=np.zeros(g.shape[0]), ready=g,
                             consume_total=M * store, num_wavelets=M, name="broadcast")
    tr.grid(tr.busy, axis)[...] += M * store
    tr.end_phase("broadcast", finish.max())
    return tr.result(float(finish.max()))


def reduce(params: MeshParams, *, nbytes: float, region=None, axis: str = "row",
           algo: ReduceAlgo | None = None, dtype_bytes: int = 2) -> KernelResult:
    """Every line of the region sums a vector of ``nbytes`` held by each of its PEs into its first PE.

    Parameters
    ----------
    nbytes : float
        Vector size per PE [bytes].
    axis : {'row', 'col'}
        'row': towards column 0; 'col': towards row 0.
    algo : ReduceAlgo or None
        None picks the faster of chain and tree that fits the colour budget.
    dtype_bytes : int
        Bytes per value (sets the adds per wavelet) [bytes].

    Notes
    -----
    CHAIN: ``R = max_m [ready_m + (M-1)*a_max + sum a + (k-m)*(h + ramp)]`` (deterministic tandem line),
    with per-wavelet service ``a = max(s, adds)`` at every adding PE. TREE: log2 L levels, level with
    stride st costs ``st*h + ramp + a0 + a + (M-1)*max(a0, a)``.
    """
    P, Q = _line_kernel(params, region, axis)
    if not (nbytes > 0):
        raise InputError(f"nbytes={nbytes!r}: must be > 0")
    dtype_bytes = _check_dtype(dtype_bytes)
    tr = _Trace(params, P, Q)
    M = max(1, math.ceil(nbytes / params.wavelet_bytes))
    epw = max(1, params.wavelet_bytes // dtype_bytes)
    tr.need_sram(2 * M * params.wavelet_bytes, "own vector and receive buffer")
    g = tr.grid(np.zeros((P, Q)), axis)
    algo = _pick_reduce(tr, algo, ready=g, ready_step=0.0, num_wavelets=M, dtype_bytes=dtype_bytes, epw=epw,
                        other_colors=0)
    done = _reduce_phase(tr, axis=axis, algo=algo, ready=g, ready_step=0.0, num_wavelets=M,
                         dtype_bytes=dtype_bytes, epw=epw)
    tr.end_phase("reduce", done[..., 0].max())
    return tr.result(float(done[..., 0].max()))


def _allreduce_into(tr: _Trace, *, ready, nbytes, dtype_bytes, algo, name, rows=None, cols=None):
    """All-reduce over the sub-region rows x cols of the trace (default all): reduce rows to column 0,
    column 0 to PE (0, 0), broadcast down column 0, then along the rows. Returns per-PE finish (P', Q')."""
    p = tr.params
    sub = ready if rows is None else ready[:rows, :cols]
    P, Q = sub.shape
    M = max(1, math.ceil(nbytes / p.wavelet_bytes))
    epw = max(1, p.wavelet_bytes // dtype_bytes)
    store = p.wavelet_bytes / p.sram_bytes_per_cycle
    view = _Trace(p, P, Q)
    view.phase_colors = tr.phase_colors
    alg_r = _pick_reduce(view, algo, ready=sub, ready_step=0.0, num_wavelets=M, dtype_bytes=dtype_bytes,
                         epw=epw, other_colors=2)
    row_busy = None
    row_done = _reduce_phase(view, axis="row", algo=alg_r, ready=sub, ready_step=0.0, num_wavelets=M,
                             dtype_bytes=dtype_bytes, epw=epw)
    row_busy = view.busy.copy()
    col_in = row_done[:, :1].T                                   # (1, P)
    alg_c = _pick_reduce(view, algo, ready=col_in, ready_step=0.0, num_wavelets=M, dtype_bytes=dtype_bytes,
                         epw=epw, other_colors=2)
    col_done = _reduce_phase(view, axis="col", algo=alg_c, ready=np.repeat(col_in, Q, axis=0),
                             ready_step=0.0, num_wavelets=M, dtype_bytes=dtype_bytes, epw=epw)
    # Only column 0 actually reduces: undo the loads and busy time booked for the other columns.
    if Q > 1:
        view.south[:, 1:] = 0.0
        view.north[:, 1:] = 0.0
        view.busy[:, 1:] = row_busy[:, 1:]
    root = float(col_done[0, 0])
    tr.end_phase(f"{name}.reduce", root)
    _, col_have = _bcast_phase(view, axis="col", algo=BroadcastAlgo.CHAIN, t0=np.array([root]),
                               ready=sub[:, :1].T.copy(), consume_total=M * store, num_wavelets=M, name=name)
    _, fin = _bcast_phase(view, axis="row", algo=BroadcastAlgo.CHAIN, t0=col_have[0], ready=sub.copy(),
                          consume_total=M * store, num_wavelets=M, name=name)
    view.busy += 2 * M * store
    tr.end_phase(f"{name}.broadcast", fin.max())
    # Fold the sub-trace into the parent trace.
    tr.east[:P, :Q - 1] += view.east
    tr.west[:P, :Q - 1] += view.west
    tr.south[:P - 1, :Q] += view.south
    tr.north[:P - 1, :Q] += view.north
    tr.busy[:P, :Q] += view.busy
    tr.hop_floor += 2 * ((P - 1) + (Q - 1)) * p.hop_latency_cycles
    tr.compute_cycles = max(tr.compute_cycles, view.compute_cycles)
    return fin


def allreduce(params: MeshParams, *, nbytes: float, region=None, algo: ReduceAlgo | None = None,
              dtype_bytes: int = 2) -> KernelResult:
    """All-reduce a vector of ``nbytes`` held by every PE of a P x Q region (sum, result on every PE).

    Notes
    -----
    Four phases, each a recurrence over the grid: reduce along every row to column 0 (chain or tree),
    reduce column 0 to PE (0, 0), multicast down column 0, multicast along every row. The broadcast starts
    when the reduction has finished at the root (no overlap of the reduction tail with the broadcast head,
    which overestimates long vectors by at most one message time).
    """
    P, Q = _region(params, region if region is not None else (params.rows, params.cols))
    if not (nbytes > 0):
        raise InputError(f"nbytes={nbytes!r}: must be > 0")
    dtype_bytes = _check_dtype(dtype_bytes)
    tr = _Trace(params, P, Q)
    M = max(1, math.ceil(nbytes / params.wavelet_bytes))
    tr.need_sram(2 * M * params.wavelet_bytes, "own vector and receive buffer")
    fin = _allreduce_into(tr, ready=np.zeros((P, Q)), nbytes=nbytes, dtype_bytes=dtype_bytes,
                          algo=None if algo is None else ReduceAlgo(algo), name="allreduce")
    return tr.result(float(fin.max()))


from wseplan.sim._decode import decode_layer  # noqa: E402  (composed from the kernels above)
