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
:class:`MeshParams`. The parameters and results live in :mod:`.mesh_types`, the trace and the line phases the
kernels are built from in :mod:`._phases`; :func:`wseplan.sim.decode_layer` (:mod:`._decode`) composes a decoder
layer from the same phases.
"""

from __future__ import annotations

import math

import numpy as np

from wseplan.sim import _fabric as fb
from wseplan.sim._errors import InputError
from wseplan.sim._phases import (_allreduce_into, _bcast_phase, _check_dtype, _gather_phase, _gemv_core,
                                 _pick_reduce, _positive_int, _reduce_phase, _region, _Trace, _wavelets)
from wseplan.sim.mesh_types import BroadcastAlgo, Gather, KernelResult, MeshParams, ReduceAlgo

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
]


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
