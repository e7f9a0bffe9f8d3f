"""The machinery of the PE-mesh simulator (:mod:`wseplan.sim.mesh`): the per-kernel trace (link loads, busy time,
colours, SRAM, phases) and the line phases every kernel is built from (broadcast, reduction, the GEMV core, the
gather, the all-reduce of a sub-region), each a max-plus recurrence over the whole grid (:mod:`._fabric`)."""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field

import numpy as np

from wseplan.sim import _fabric as fb
from wseplan.sim._errors import InputError

from wseplan.sim.mesh_types import BroadcastAlgo, Gather, KernelResult, MeshParams, ReduceAlgo


# ----------------------------------------------------------------------------------------------- tracing
def _kind(phase_name: str, what: str) -> bool:
    """Whether a phase (``reduce``, ``attention.head_reduce``, ``allreduce.broadcast``) is of kind ``what``, judged
    on its own name after the kernel's prefix."""
    return what in phase_name.rsplit(".", 1)[-1]


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
            # by the phase's own name, after the kernel's (``allreduce.broadcast`` is a broadcast, not a reduce)
            broadcast_cycles=sum(v for k, v in phase.items() if _kind(k, "broadcast") or _kind(k, "scatter")),
            reduce_cycles=sum(v for k, v in phase.items() if _kind(k, "reduce")),
            gather_cycles=sum(v for k, v in phase.items() if _kind(k, "gather")),
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
        line = fb.tree_reduce_line if algo == ReduceAlgo.TREE else fb.ktree_reduce_line
        done, levels = line(ready=ready, ready_step=ready_step, first_cycles=a0, stage_service_cycles=a,
                            num_wavelets=M, hop_cycles=h, ramp_cycles=ramp)
        if loads.size:
            loads += _span_loads(length, levels, M, toward_zero=True)
        if algo == ReduceAlgo.TREE:
            tr.use_colors({(axis, "reduce-tree", lvl) for lvl in range(len(levels))})
        else:
            tr.use_colors({(axis, "reduce-ktree", c) for c in range(fb.ktree_colors(length))})
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


def _pick_reduce(tr: _Trace, algo, *, ready, ready_step, num_wavelets, dtype_bytes, epw, other_colors, ktree=True):
    """Chosen algorithm: the given one, or the faster of chain/tree (and, where the binary tree does not fit and
    ``ktree``, the two-level K-tree) that fits the colour budget."""
    if algo is not None:
        return ReduceAlgo(algo)
    length = ready.shape[-1]
    if length == 1:
        return ReduceAlgo.CHAIN
    # Evaluate on the slowest line only (all lines of a kernel are alike up to their ready times).
    worst = ready.reshape(-1, length)[[int(np.argmax(ready.reshape(-1, length).max(-1)))]]
    budget = tr.params.num_colors - other_colors
    cands = []
    # the two-level K-tree is a candidate where the colours cannot hold the binary tree (it needs at most 4)
    algs = (ReduceAlgo.CHAIN, ReduceAlgo.TREE) + ((ReduceAlgo.KTREE,) if ktree and fb.tree_levels(length) > budget else ())
    for alg in algs:
        need = (min(2, length - 1) if alg == ReduceAlgo.CHAIN else fb.tree_levels(length) if alg == ReduceAlgo.TREE
                else fb.ktree_colors(length))
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


def _allreduce_into(tr: _Trace, *, ready, nbytes, dtype_bytes, algo, name, rows=None, cols=None):
    """All-reduce over the sub-region rows x cols of the trace (default all): reduce rows to column 0,
    column 0 to PE (0, 0), broadcast down column 0, then along the rows. Returns per-PE finish (P', Q').

    Each line reduction picks from chain and tree with the budget less the two broadcasts' colours (the two do not
    share it: a known simplification, which the closed form mirrors), so the K-tree is left out here."""
    p = tr.params
    sub = ready if rows is None else ready[:rows, :cols]
    P, Q = sub.shape
    M = max(1, math.ceil(nbytes / p.wavelet_bytes))
    epw = max(1, p.wavelet_bytes // dtype_bytes)
    store = p.wavelet_bytes / p.sram_bytes_per_cycle
    view = _Trace(p, P, Q)
    view.phase_colors = tr.phase_colors
    alg_r = _pick_reduce(view, algo, ready=sub, ready_step=0.0, num_wavelets=M, dtype_bytes=dtype_bytes,
                         epw=epw, other_colors=2, ktree=False)
    row_busy = None
    row_done = _reduce_phase(view, axis="row", algo=alg_r, ready=sub, ready_step=0.0, num_wavelets=M,
                             dtype_bytes=dtype_bytes, epw=epw)
    row_busy = view.busy.copy()
    col_in = row_done[:, :1].T                                   # (1, P)
    alg_c = _pick_reduce(view, algo, ready=col_in, ready_step=0.0, num_wavelets=M, dtype_bytes=dtype_bytes,
                         epw=epw, other_colors=2, ktree=False)
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
