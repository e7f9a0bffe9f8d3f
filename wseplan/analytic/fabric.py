"""On-wafer mesh (fabric) closed forms: messages, line broadcast/reduce, all-reduce, GEMV and GEMM on a
P x Q region of processing elements (PEs), and cross-wafer hops over the systems' Ethernet.

A PLMR-style model (He et al., OSDI 2025: Parallelism, Latency, Memory per PE, Routing): a 2-D mesh of PEs,
each with local SRAM and a router to its four neighbours. A message of ``b`` bytes over ``h`` hops costs
``h * hop_latency_cycles + ceil(b / wavelet_bytes) * wavelet_bytes / link_bytes_per_cycle`` cycles
(cut-through: the hop latency is paid once per hop, the serialisation once per message). Compute on a PE is
limited by its FLOP/cycle and its SRAM bytes/cycle. Every kernel adds a fixed ``per_kernel_overhead_cycles``
(task activation, synchronisation, colour switch) that the published WSE-2 measurements show to be the
largest term of small-batch decode.

All physics functions are keyword-only and numpy-vectorized (scalars or arrays broadcast); times are in cycles
unless the name ends in ``_s``. The calibrated constants (``per_kernel_overhead_cycles``,
``gemm_step_overhead_cycles``, ...) live in ``catalogs/calibration/fabric.yaml`` with their source and basis
and are loaded by :mod:`.fabric_constants` (its names are re-exported here); the simulator in :mod:`wseplan.sim.mesh` is the reference
they are later fitted against.

References
----------
He, C. et al., "WaferLLM: Large Language Model Inference at Wafer Scale", USENIX OSDI 2025
(arXiv:2502.04563): PLMR model, MeshGEMV (tree all-reduce), MeshGEMM (cyclic shifts), Tables 2-6.
Cerebras SDK documentation, "A Conceptual View" (wavelets of 32 bits, one per link per cycle).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from . import fabric_kernels as _k
# the calibrated constants, re-exported: callers use fabric.load_fabric_constants() beside the closed forms
from .fabric_constants import (SIM_FIT_IDENTITY, SIM_FIT_NAMES, TREE_MODELS, FabricConstants, FabricFile,  # noqa: F401
                               FabricSimConstants, FabricSimFile, WseFitRecord, WseFitStats, _check_tree_model,
                               default_calibration_dir, load_fabric_constants, load_fabric_sim_fit, sim_fit_values)

BROADCAST_ALGOS = ("chain", "store_forward", "tree")
REDUCE_ALGOS = ("chain", "tree", "ktree", "best")
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 1, "fp4": 1}


# ---------------------------------------------------------------------------------------------
# Messages and lines
# ---------------------------------------------------------------------------------------------
num_wavelets = _k.num_wavelets  # Wavelets carrying ``message_bytes`` [count] (at least one)


def message_cycles(*, hops, message_bytes, hop_latency_cycles, link_bytes_per_cycle, wavelet_bytes=4.0):
    """Point-to-point message over ``hops`` mesh hops [cycles].

    Notes
    -----
    Cut-through routing: ``hops * hop_latency_cycles + wavelets * wavelet_bytes / link_bytes_per_cycle``.
    """
    w = num_wavelets(message_bytes=message_bytes, wavelet_bytes=wavelet_bytes)
    return np.asarray(hops, dtype=float) * hop_latency_cycles + w * wavelet_bytes / link_bytes_per_cycle


def tree_path_cycles(*, length_pes, hop_latency_cycles, send_cycles, skip_cycles):
    """Critical path of a binary tree over a line of ``length_pes`` PEs (strides 1, 2, 4, ...) [cycles].

    Notes
    -----
    With ``L = 2^J + r`` (``1 <= r <= 2^J``): the first ``2^J`` PEs form a full tree, the last ``r`` a tree of
    their own joined to it over ``2^J`` hops::

        T(L) = max(F(2^J) + skip, T(r) + 2^J h + send),   F(N) = (N - 1) h + log2(N) send,   T(1) = 0

    ``send`` is the cost of one level's transfer beyond its hops, ``skip`` what the other side pays for it.
    For a power-of-two line this is ``(L-1) h + log2(L) send`` (the ``levels`` model); just above a power of
    two the last subtree is shallow and the path is up to ~30% shorter. Evaluated by unrolling the
    remainders (at most ``log2 L`` steps), vectorized; whole-number lengths up to
    :data:`~.fabric_kernels.TABLE_MAX_PES` with scalar constants come from a table of that evaluation
    (:func:`.fabric_kernels.tree_path_cycles`).
    """
    return _k.tree_path_cycles(length_pes, hop_latency_cycles, send_cycles, skip_cycles)


def line_broadcast_cycles(*, length_pes, message_bytes, hop_latency_cycles, link_bytes_per_cycle, wavelet_bytes=4.0,
                          ramp_latency_cycles=0.0, algo: str = "chain", tree_model: str = "levels"):
    """Broadcast ``message_bytes`` from the first PE of a line of ``length_pes`` PEs to all of them [cycles].

    Notes
    -----
    With ``M`` wavelets, ``s = wavelet_bytes / link_bytes_per_cycle`` and ``h`` the hop latency:
    chain (hardware multicast, pipelined): ``(L-1) h + M s``; store-and-forward: ``(L-1)(h + ramp + M s)``;
    binary tree (store-and-forward per level): ``sum over levels (stride h + ramp + M s)`` =
    ``(L-1) h + ceil(log2 L)(ramp + M s)`` (``tree_model='levels'``, exact for a power-of-two line), or the
    critical path of the tree (``'critical_path'``, :func:`tree_path_cycles` with ``send = ramp + M s`` and
    ``skip = M s``: the root's sends are serialised).
    """
    _check_tree_model(tree_model)
    if algo not in BROADCAST_ALGOS:
        raise InputError(f"algo: unknown broadcast {algo!r}; use one of {', '.join(BROADCAST_ALGOS)}")
    L = np.asarray(length_pes, dtype=float)
    M = num_wavelets(message_bytes=message_bytes, wavelet_bytes=wavelet_bytes)
    s = wavelet_bytes / link_bytes_per_cycle
    if algo == "chain":
        t = (L - 1.0) * hop_latency_cycles + M * s
    elif algo == "store_forward":
        t = (L - 1.0) * (hop_latency_cycles + ramp_latency_cycles + M * s)
    elif tree_model == "critical_path":
        t = tree_path_cycles(length_pes=L, hop_latency_cycles=hop_latency_cycles,
                             send_cycles=ramp_latency_cycles + M * s, skip_cycles=M * s)
    else:
        levels = np.ceil(np.log2(np.maximum(L, 1.0)))
        t = (L - 1.0) * hop_latency_cycles + levels * (ramp_latency_cycles + M * s)
    return np.where(L > 1, t, 0.0)


def line_reduce_cycles(*, length_pes, message_bytes, hop_latency_cycles, link_bytes_per_cycle, wavelet_bytes=4.0,
                       ramp_latency_cycles=0.0, add_cycles_per_wavelet=1.0, algo: str = "best",
                       reduce_stage_cycles=0.0, tree_level_cycles=0.0, tree_level_overlap_frac=0.0,
                       max_tree_levels=np.inf, tree_model: str = "levels"):
    """Sum a vector of ``message_bytes`` held by every PE of a line into its first PE [cycles].

    Parameters
    ----------
    reduce_stage_cycles, tree_level_cycles : float
        Extra cycles of each add-and-forward stage (chain) and of each tree level (send, receive and add)
        beyond hop and ramp latency [cycles]; fitted to the simulator
        (``catalogs/calibration/fabric_sim_fit.yaml``), 0 by default.
    tree_level_overlap_frac : float
        Share of each further tree level's message time that overlaps the previous level (the levels are
        pipelined) [0-1]; fitted to the simulator, 0 by default (every level pays the whole message).
    max_tree_levels : float
        Routing colours the reduction may use (a binary tree takes one per level) [colours]; where the binary tree
        needs more, ``best`` takes the faster of the chain and the two-level K-tree (at most 4 colours). Default:
        no limit.
    tree_model : {'levels', 'critical_path'}
        ``levels``: every PE path pays ``ceil(log2 L)`` levels and ``L-1`` hops (exact for a power-of-two
        line); ``critical_path``: :func:`tree_path_cycles` with ``send = ramp + c_t`` and ``skip = a``.

    Notes
    -----
    Per-wavelet service ``a = max(s, add_cycles_per_wavelet)``, ``c`` = ``reduce_stage_cycles``,
    ``c_t`` = ``tree_level_cycles``, ``phi`` = ``tree_level_overlap_frac``. Chain (pipelined add-and-forward
    through every PE): ``(L-1)(h + ramp + c) + M a``. Binary tree (one pipelined pairwise transfer per level,
    ``lv`` levels): ``(L-1) h + lv (ramp + c_t) + M a (1 + (lv - 1)(1 - phi))``; with ``c_t = phi = 0`` this is
    ``(L-1) h + lv (ramp + M a)``. Two-level K-tree (WaferLLM's K-tree all-reduce with K = 2: chains within
    segments of ``r = ceil(sqrt L)`` PEs, then a chain over the segment heads; 2 colours per level of three or more
    members, :func:`wseplan.sim._fabric.ktree_reduce_line`): ``(L-1) h + ((r-1) + (ceil(L/r)-1)) (ramp + c) +
    M a`` when ``L`` is a perfect square (:func:`.fabric_kernels.ktree_path` for a partial last segment). ``best``
    takes the faster among those the colour budget allows, the K-tree only where the binary tree does not fit
    (WSE-3's 6 free colours: lines over 32 PEs); ``best_tc`` the faster of chain and tree alone (the 2-D
    all-reduce, whose colour accounting lets each line use the whole budget, so it keeps to the two).
    """
    if algo not in REDUCE_ALGOS and algo != "best_tc":
        raise InputError(f"algo: unknown reduce {algo!r}; use one of {', '.join(REDUCE_ALGOS)}")
    L = np.asarray(length_pes, dtype=float)
    M = num_wavelets(message_bytes=message_bytes, wavelet_bytes=wavelet_bytes)
    a = np.maximum(wavelet_bytes / link_bytes_per_cycle, add_cycles_per_wavelet)
    line = _k.ReduceLine(L, h=hop_latency_cycles, ramp=ramp_latency_cycles, rsc=reduce_stage_cycles, tlc=tree_level_cycles,
                         tlof=tree_level_overlap_frac, a=a, max_levels=max_tree_levels,
                         tree_model=_check_tree_model(tree_model), algo=algo)
    return line.cycles(M * a)


def allreduce_cycles(*, rows, cols, message_bytes, hop_latency_cycles, link_bytes_per_cycle, wavelet_bytes=4.0,
                     ramp_latency_cycles=0.0, add_cycles_per_wavelet=1.0, reduce_stage_cycles=0.0,
                     tree_level_cycles=0.0, tree_level_overlap_frac=0.0, num_colors=np.inf,
                     tree_model: str = "levels"):
    """All-reduce a vector held by every PE of a rows x cols region (result on every PE) [cycles].

    Notes
    -----
    Reduce along rows, then down the first column, then broadcast back up the column and along the rows
    (four line phases, as :func:`wseplan.sim.mesh.allreduce`). The two broadcasts hold two colours, so a
    reduction tree may use ``num_colors - 2`` levels; ``reduce_stage_cycles``, ``tree_level_cycles`` and
    ``tree_level_overlap_frac``
    as :func:`line_reduce_cycles`.
    """
    kw = dict(message_bytes=message_bytes, hop_latency_cycles=hop_latency_cycles,
              link_bytes_per_cycle=link_bytes_per_cycle, wavelet_bytes=wavelet_bytes,
              ramp_latency_cycles=ramp_latency_cycles)
    rk = dict(kw, add_cycles_per_wavelet=add_cycles_per_wavelet, reduce_stage_cycles=reduce_stage_cycles,
              tree_level_cycles=tree_level_cycles, tree_level_overlap_frac=tree_level_overlap_frac,
              max_tree_levels=num_colors - 2.0, tree_model=tree_model, algo="best_tc")
    red = line_reduce_cycles(length_pes=cols, **rk) + line_reduce_cycles(length_pes=rows, **rk)
    bc = line_broadcast_cycles(length_pes=rows, **kw) + line_broadcast_cycles(length_pes=cols, **kw)
    return red + bc


# ---------------------------------------------------------------------------------------------
# Local compute
# ---------------------------------------------------------------------------------------------
def mac_cycles(*, flop_per_cycle, sram_bytes_per_cycle, dtype_bytes=2.0, efficiency_frac=1.0):
    """Cycles per multiply-accumulate on one PE [cycles/MAC].

    Notes
    -----
    ``max(2 / flop_per_cycle, 3 * dtype_bytes / sram_bytes_per_cycle) / efficiency_frac``: a MAC is 2 FLOP
    and, in the AXPY form the kernels use, reads the weight and reads and writes the accumulator. On WSE-2
    (8 FLOP and 24 B per cycle, 16-bit) both limits give 4 MAC/cycle; on WSE-3 the SRAM limit binds.
    """
    return _k.mac_cycles(flop_per_cycle=flop_per_cycle, sram_bytes_per_cycle=sram_bytes_per_cycle,
                         dtype_bytes=dtype_bytes, efficiency_frac=efficiency_frac)


_ceil_div = _k.ceil_div


# ---------------------------------------------------------------------------------------------
# GEMV and GEMM on a region
# ---------------------------------------------------------------------------------------------
def gemv_cycles(*, k, n, rows, cols, flop_per_cycle, sram_bytes_per_cycle, hop_latency_cycles,
                link_bytes_per_cycle, m=1, dtype_bytes=2.0, wavelet_bytes=4.0, ramp_latency_cycles=0.0,
                per_kernel_overhead_cycles=0.0, mac_efficiency_frac=1.0, reduce_algo: str = "best",
                broadcast_overlap_frac=0.0, reduce_stage_cycles=0.0, tree_level_cycles=0.0,
                tree_level_overlap_frac=0.0, num_colors=np.inf, tree_model: str = "levels"):
    """``y[m, n] = x[m, k] @ W[k, n]`` with W stationary on a rows x cols region (MeshGEMV) [cycles].

    Parameters
    ----------
    k, n : array_like
        Matrix dimensions [elements]; k is split over the rows, n over the columns.
    rows, cols : array_like
        Region [PEs].
    m : array_like
        Activation rows streamed through (1 for a GEMV, the batch in batched decode) [rows].
    flop_per_cycle, sram_bytes_per_cycle : float
        Per-PE compute [FLOP/cycle] and SRAM bandwidth [bytes/cycle].
    hop_latency_cycles, link_bytes_per_cycle : float
        Router latency per hop [cycles] and link width per direction [bytes/cycle].
    per_kernel_overhead_cycles : float
        Fixed cost of one kernel (task launch, synchronisation) [cycles].
    mac_efficiency_frac : float
        Achieved share of the PE's MAC rate [0-1].
    broadcast_overlap_frac : float
        Share of the shorter of (streamed serialisation, MACs) hidden behind the longer [0-1]: the input
        ``M_x s`` streams into the MACs, and with ``m > 1`` the partial sums of the first ``m - 1`` rows
        (``(M_y - M_y1) a``) are reduced while later rows compute; fitted to the simulator
        (``fabric_sim_fit.yaml``), 0 by default.
    reduce_stage_cycles, tree_level_cycles, tree_level_overlap_frac : float
        Constants of the partial-sum reduction (:func:`line_reduce_cycles`); fitted to the simulator.
    num_colors : float
        Routing colours free for the kernel; the input broadcast holds one, so the reduction tree may use
        ``num_colors - 1`` levels [count]. Default: no limit.
    tree_model : {'levels', 'critical_path'}
        Path model of the reduction tree (:func:`line_reduce_cycles`).

    Returns
    -------
    ndarray
        Latency [cycles].

    Notes
    -----
    ``T = c_k + [(Q-1) h + M_x s] + m kt nt t_mac - psi min(M_x s + (M_y - M_y1) a, m kt nt t_mac)
    + T_reduce(P, M_y)`` with ``kt = ceil(k/P)``,
    ``nt = ceil(n/Q)``, ``M_x`` the wavelets of the ``m kt`` input values broadcast along each row (the MACs
    consume them as they stream in, so only the pipeline fill is exposed), and ``T_reduce`` the faster of the
    chain and tree line reductions of the ``m nt`` partial sums along each column
    (:func:`line_reduce_cycles`), each partial-sum wavelet added at the MAC rate.
    """
    _check_kernel(reduce_algo, tree_model)
    return _k.gemv_variants(
        _k.Region(rows, cols), k=k, n=n, m=m, flop_per_cycle=flop_per_cycle, sram_bytes_per_cycle=sram_bytes_per_cycle,
        link_bytes_per_cycle=link_bytes_per_cycle, dtype_bytes=dtype_bytes, wavelet_bytes=wavelet_bytes,
        reduce_algo=reduce_algo, broadcast_overlap_frac=broadcast_overlap_frac,
        tree_level_overlap_frac=tree_level_overlap_frac, num_colors=num_colors, tree_model=tree_model,
        variants=((hop_latency_cycles, ramp_latency_cycles, per_kernel_overhead_cycles, reduce_stage_cycles,
                   tree_level_cycles, mac_efficiency_frac),))[0]


def _check_kernel(reduce_algo: str, tree_model: str) -> None:
    if reduce_algo not in REDUCE_ALGOS:
        raise InputError(f"algo: unknown reduce {reduce_algo!r}; use one of {', '.join(REDUCE_ALGOS)}")
    _check_tree_model(tree_model)


def gemv_parts_cycles(**kw) -> dict[str, np.ndarray]:
    """The terms of :func:`gemv_cycles` by name [cycles]: ``overhead`` (fixed per kernel), ``serialization``
    (message wavelets, no hops, no MACs), ``compute`` (MACs, no hops) and ``latency`` (the rest: hops and core
    pass-through). They sum to :func:`gemv_cycles`."""
    kw = dict(kw)
    region = _k.Region(kw.pop("rows"), kw.pop("cols"))
    _check_kernel(kw.get("reduce_algo", "best"), kw.get("tree_model", "levels"))
    return _k.gemv_parts(region, **kw)


def gemm_cycles(*, m, k, n, rows, cols, flop_per_cycle, sram_bytes_per_cycle, hop_latency_cycles,
                link_bytes_per_cycle, dtype_bytes=2.0, wavelet_bytes=4.0, ramp_latency_cycles=0.0,
                per_kernel_overhead_cycles=0.0, mac_efficiency_frac=1.0, step_overhead_cycles=0.0,
                broadcast_overlap_frac=0.0, reduce_stage_cycles=0.0, tree_level_cycles=0.0,
                tree_level_overlap_frac=0.0, num_colors=np.inf, tree_model: str = "levels"):
    """``C[m, n] = A[m, k] @ B[k, n]`` on a rows x cols region by cyclic shifts (MeshGEMM / Cannon) [cycles].

    Parameters
    ----------
    m, k, n : array_like
        Matrix dimensions [elements] (m: tokens).
    step_overhead_cycles : float
        Fixed cost of each shift step (synchronisation, task switch) [cycles].
    broadcast_overlap_frac, reduce_stage_cycles, tree_level_cycles, tree_level_overlap_frac, num_colors, tree_model
        Not used (the shift algorithm has no line broadcast or reduction); accepted so that one set of
        :func:`wafer_fabric_kwargs` serves every kernel.

    Other parameters as :func:`gemv_cycles`.

    Returns
    -------
    ndarray
        Latency [cycles].

    Notes
    -----
    ``S = max(P, Q)`` steps; each PE multiplies an ``mt x kt`` tile of A by a ``kt x nt`` tile of B
    (``mt = ceil(m/P)``, ``kt = ceil(k/S)``, ``nt = ceil(n/Q)``, padding included) while the next tiles
    shift in over two hops (the interleaved ring of MeshGEMM):
    ``T = c_k + S [c_step + max(mt kt nt t_mac, 2 (h + ramp) + W s)]`` with ``W`` the wavelets of the
    larger tile. The ``S c_step`` term grows with the region side, so a bigger region helps prefill only
    while the compute term dominates (He et al. 2025, Table 3).
    """
    return _k.gemm_variants(
        _k.Region(rows, cols), m=m, k=k, n=n, flop_per_cycle=flop_per_cycle, sram_bytes_per_cycle=sram_bytes_per_cycle,
        link_bytes_per_cycle=link_bytes_per_cycle, dtype_bytes=dtype_bytes, wavelet_bytes=wavelet_bytes,
        variants=((hop_latency_cycles, ramp_latency_cycles, per_kernel_overhead_cycles, step_overhead_cycles,
                   mac_efficiency_frac),))[1][0]


def gemm_parts_cycles(**kw) -> dict[str, np.ndarray]:
    """The terms of :func:`gemm_cycles` by name [cycles]: ``overhead`` (per kernel and per step), and the rest
    of each step attributed to ``compute`` when the local tile product is longer than the tile shift, else to
    ``fabric``. They sum to :func:`gemm_cycles`."""
    kw = dict(kw)
    return _k.gemm_parts(_k.Region(kw.pop("rows"), kw.pop("cols")), **kw)


# ---------------------------------------------------------------------------------------------
# Convenience on a catalog wafer
# ---------------------------------------------------------------------------------------------
def wafer_fabric_kwargs(wafer, precision: str = "fp16", constants: FabricConstants | None = None,
                        use_sim_fit: bool | None = None) -> dict:
    """Keyword arguments of the kernels above for a catalog :class:`~wseplan.catalog.schema.Wafer`.

    Hardware numbers come from the wafer, kernel constants from ``fabric.yaml`` (or ``constants``) and, with
    the simulator fit, the simulator-fitted constants (``reduce_stage_cycles``, ``tree_level_cycles``,
    ``tree_level_overlap_frac``, ``broadcast_overlap_frac``, ``tree_model``) from ``fabric_sim_fit.yaml``
    (:func:`sim_fit_values`) plus the wafer's routing-colour limit ``num_colors`` (catalog
    ``free_routing_colors``; a binary reduction tree needs one colour per level, so long lines take the two-level
    K-tree or the chain).

    Parameters
    ----------
    use_sim_fit : bool, optional
        True / False: with / without the simulator fit. None (default): as the kernel ``constants`` passed
        declare (``fabric_model: sim_fit`` in ``fabric.yaml``: they were fitted on top of the simulator fit,
        so the two must be used together, as :mod:`.wse_time` and :func:`gemv_latency_s` do); without
        ``constants``, the closed forms as written (no fitted correction, no colour limit).
    """
    c = constants or load_fabric_constants()
    if use_sim_fit is None:
        use_sim_fit = constants is not None and constants.fabric_model == "sim_fit"
    return dict(flop_per_cycle=wafer.flop_per_cycle(precision),
                sram_bytes_per_cycle=wafer.sram_bytes_per_cycle_per_pe.si,
                hop_latency_cycles=wafer.hop_latency_cycles.si,
                link_bytes_per_cycle=wafer.link_width_bytes_per_cycle.si,
                dtype_bytes=float(DTYPE_BYTES.get(precision, 2)),
                wavelet_bytes=c.wavelet_bytes.si,
                ramp_latency_cycles=c.ramp_latency_cycles.si,
                per_kernel_overhead_cycles=c.per_kernel_overhead_cycles.si,
                num_colors=float(wafer.free_routing_colors.si) if use_sim_fit else np.inf,
                **(sim_fit_values(wafer) if use_sim_fit else SIM_FIT_IDENTITY))


def default_region(wafer) -> tuple[int, int]:
    """The largest square region of the wafer's usable PE grid [PEs]."""
    side = int(min(wafer.pe_rows.si, wafer.pe_cols.si))
    return side, side


def gemv_region(*, k: int, n: int, wafer, precision: str = "fp16", m: int = 1,
                constants: FabricConstants | None = None) -> tuple[int, int]:
    """The square region a mapper would pick for one GEMV [PEs]: the side with the lowest
    :func:`gemv_cycles` among those whose PEs hold their weight tile and vector buffers
    (``(kt nt + m kt + 2 m nt) * dtype_bytes <= sram_per_pe_bytes``). Falls back to :func:`default_region`
    when even the whole square cannot hold the matrix."""
    c = constants or load_fabric_constants()
    kw = wafer_fabric_kwargs(wafer, precision, c)
    side_max = int(min(wafer.pe_rows.si, wafer.pe_cols.si))
    sides = np.arange(1, side_max + 1, dtype=float)
    P, Q = np.minimum(sides, k), np.minimum(sides, n)
    kt, nt = np.ceil(k / P), np.ceil(n / Q)
    fits = (kt * nt + m * kt + 2 * m * nt) * kw["dtype_bytes"] <= wafer.sram_per_pe_bytes.si
    if not fits.any():
        return default_region(wafer)
    cyc = gemv_cycles(k=k, n=n, m=m, rows=P, cols=Q, mac_efficiency_frac=c.gemv_mac_efficiency_frac.si, **kw)
    s = int(sides[int(np.argmin(np.where(fits, cyc, np.inf)))])
    return s, s


def _check_region(wafer, region_rows, region_cols) -> tuple[int, int]:
    R, C = int(wafer.pe_rows.si), int(wafer.pe_cols.si)
    for name, v in (("region_rows", region_rows), ("region_cols", region_cols)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}: must be a positive integer number of PEs, got {v!r}")
    if not ((region_rows <= R and region_cols <= C) or (region_rows <= C and region_cols <= R)):
        raise InputError(f"region: {region_rows}x{region_cols} PEs exceeds the wafer's {R}x{C} grid; use a smaller region")
    return int(region_rows), int(region_cols)


def gemv_latency_s(*, k: int, n: int, region_rows: int | None = None, region_cols: int | None = None, wafer,
                   precision: str = "fp16", m: int = 1, constants: FabricConstants | None = None) -> float:
    """Latency of one GEMV ``[m, k] x [k, n]`` on a region of a catalog wafer [s].

    Parameters
    ----------
    k, n : int
        Matrix dimensions [elements].
    region_rows, region_cols : int, optional
        Region [PEs]; default the fastest square whose PEs hold their tiles (:func:`gemv_region`).
    wafer : Wafer
        Catalog wafer entry (clock, per-PE compute and SRAM bandwidth, hop latency, link width).
    precision : str
        Weight/activation format (sets bytes per element and FLOP/cycle).
    m : int
        Activation rows [rows].
    constants : FabricConstants, optional
        Default: ``catalogs/calibration/fabric.yaml``.

    Returns
    -------
    float
        Latency [s]: :func:`gemv_cycles` divided by the clock.

    Examples
    --------
    WaferLLM Table 6 measures 1.2 us for ``[1,16K]x[16K,16K]`` on WSE-2.
    """
    for name, v in (("k", k), ("n", n), ("m", m)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}: must be a positive integer, got {v!r}")
    c = constants or load_fabric_constants()
    if region_rows is None or region_cols is None:
        dr, dc = gemv_region(k=k, n=n, wafer=wafer, precision=precision, m=m, constants=c)
        region_rows = dr if region_rows is None else region_rows
        region_cols = dc if region_cols is None else region_cols
    P, Q = _check_region(wafer, region_rows, region_cols)
    P, Q = min(P, k), min(Q, n)
    kw = wafer_fabric_kwargs(wafer, precision, c)
    cyc = gemv_cycles(k=k, n=n, m=m, rows=P, cols=Q, mac_efficiency_frac=c.gemv_mac_efficiency_frac.si, **kw)
    return float(cyc) / wafer.clock_hz.si


def gemm_latency_s(*, m: int, k: int, n: int, region_rows: int | None = None, region_cols: int | None = None, wafer,
                   precision: str = "fp16", constants: FabricConstants | None = None) -> float:
    """Latency of one GEMM ``[m, k] x [k, n]`` by cyclic shifts (:func:`gemm_cycles`) on a region of a catalog
    wafer [s], with the measured kernel constants (``gemm_mac_efficiency_frac``, ``gemm_step_overhead_cycles``,
    ``per_kernel_overhead_cycles``) of ``constants``.

    Parameters
    ----------
    m, k, n : int
        Matrix dimensions [elements].
    region_rows, region_cols : int, optional
        Region [PEs]; default the largest square of the wafer (:func:`default_region`), no larger than ``m`` x ``n``.
    wafer : Wafer
        Catalog wafer entry.
    precision : str
        Element format (bytes per element, FLOP/cycle).
    constants : FabricConstants, optional
        Default: ``catalogs/calibration/fabric.yaml``.

    Returns
    -------
    float
        Latency [s]: :func:`gemm_cycles` divided by the clock.

    Examples
    --------
    Miyajima, Matsuzaki and Mukunoki (J. Inf. Process. 34, 2026; SC24 IA^3 workshop) measure 349.0 TFLOP/s for
    an fp32 ``33,000 x 33,000`` product on 750 x 750 PEs of a CS-2: ``2 * 33000**3 / 349.0e12 = 0.206 s``.
    """
    for name, v in (("m", m), ("k", k), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}: must be a positive integer, got {v!r}")
    c = constants or load_fabric_constants()
    side = default_region(wafer)
    P, Q = _check_region(wafer, side[0] if region_rows is None else region_rows,
                         side[1] if region_cols is None else region_cols)
    P, Q = min(P, m), min(Q, n)
    kw = wafer_fabric_kwargs(wafer, precision, c)
    cyc = gemm_cycles(m=m, k=k, n=n, rows=P, cols=Q, mac_efficiency_frac=c.gemm_mac_efficiency_frac.si,
                      step_overhead_cycles=c.gemm_step_overhead_cycles.si, **kw)
    return float(cyc) / wafer.clock_hz.si


# ---------------------------------------------------------------------------------------------
# Between wafers
# ---------------------------------------------------------------------------------------------
def cross_system_transfer_s(*, message_bytes, bandwidth_bytes_per_s, latency_s, num_hops=1):
    """Activation transfer between systems over Ethernet [s]: ``hops * latency + bytes / bandwidth``."""
    return np.asarray(num_hops, dtype=float) * latency_s + np.asarray(message_bytes, dtype=float) / bandwidth_bytes_per_s


def cycles_to_s(cycles, clock_hz: float):
    """Cycles -> seconds."""
    return np.asarray(cycles, dtype=float) / clock_hz


__all__ = [
    "FabricConstants", "WseFitRecord", "WseFitStats", "load_fabric_constants", "FabricSimConstants", "load_fabric_sim_fit", "sim_fit_values", "num_wavelets", "message_cycles", "line_broadcast_cycles",
    "line_reduce_cycles", "allreduce_cycles", "mac_cycles", "gemv_cycles", "gemv_parts_cycles", "gemm_cycles",
    "gemm_parts_cycles", "wafer_fabric_kwargs", "default_region", "gemv_region", "gemv_latency_s", "gemm_latency_s",
    "cross_system_transfer_s",
    "cycles_to_s", "tree_path_cycles", "TREE_MODELS",
]
