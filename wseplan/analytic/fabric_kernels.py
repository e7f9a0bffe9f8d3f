"""The arithmetic of the fabric closed forms (:mod:`.fabric`), organised so that many kernels on the same regions
share what depends on the region alone.

The wafer time model evaluates tens of kernels per region: every matrix of a transformer block, each three times
(as written, without hop latency, without MAC time: :func:`.fabric.gemv_parts_cycles` splits a kernel into parts
by difference), and the statistics' reductions, over many configurations and region sides at once. Much of it
depends only on a region's lines and the constants: the critical path of a reduction tree, the depth of the tree,
the hops of a chain. :class:`Region` computes those terms once per constant set and keeps them;
:func:`gemv_variants`, :func:`gemm_variants` and :func:`reduce_broadcast` evaluate the kernels from them.

The operations are those of the formulas in :mod:`.fabric`, in the same order, so the numbers are the same bit
for bit (``tests/test_wafer_vector_equality.py`` holds them to the numbers of the kernel-at-a-time code); the
formulas, their notation and their references are documented there. :func:`tree_path_cycles` takes integer line
lengths from a table built once per constant set (:func:`tree_path_unrolled` evaluated on every length).
"""
from __future__ import annotations

import functools

import numpy as np

#: lines up to this many PEs take their tree critical path from a table (a wafer's lines are ~1,200 PEs at most)
TABLE_MAX_PES = 1 << 16


def num_wavelets(*, message_bytes, wavelet_bytes=4.0):
    """Wavelets carrying ``message_bytes`` [count] (at least one)."""
    return np.maximum(1.0, np.ceil(np.asarray(message_bytes, dtype=float) / wavelet_bytes))


def ceil_div(a, b):
    """``ceil(a / b)`` of broadcasting arrays [count]."""
    return np.ceil(np.asarray(a, dtype=float) / np.asarray(b, dtype=float))


def mac_cycles(*, flop_per_cycle, sram_bytes_per_cycle, dtype_bytes=2.0, efficiency_frac=1.0):
    """Cycles per multiply-accumulate on one PE [cycles/MAC] (documented at :func:`.fabric.mac_cycles`); scalar
    constants are computed once per set (:func:`_mac_scalar`, the same expression)."""
    try:
        return _mac_scalar(flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, efficiency_frac)
    except TypeError:  # an array argument: not hashable
        return _mac(flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, efficiency_frac)


def _mac(flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, efficiency_frac):
    ideal = np.maximum(2.0 / np.asarray(flop_per_cycle, dtype=float),
                       3.0 * dtype_bytes / np.asarray(sram_bytes_per_cycle, dtype=float))
    return ideal / efficiency_frac


@functools.lru_cache(maxsize=256)
def _mac_scalar(flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, efficiency_frac):
    return _mac(flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, efficiency_frac)


# ---------------------------------------------------------------------------------------------
# Tree critical path
# ---------------------------------------------------------------------------------------------
def tree_path_unrolled(length_pes, hop_latency_cycles, send_cycles, skip_cycles):
    """:func:`.fabric.tree_path_cycles` by unrolling the remainders (at most ``log2 L`` steps), any lengths."""
    L = np.asarray(length_pes, dtype=float)
    h = float(hop_latency_cycles)
    L, send, skip = np.broadcast_arrays(L, np.asarray(send_cycles, dtype=float), np.asarray(skip_cycles, dtype=float))
    steps = []
    cur = L.copy()
    while np.any(cur > 1):
        active = cur > 1
        J = np.where(active, np.ceil(np.log2(np.maximum(cur, 2.0))) - 1.0, 0.0)
        N = 2.0 ** J
        X = (N - 1.0) * h + J * send + skip
        Y = N * h + send
        steps.append((active, X, Y))
        cur = np.where(active, cur - N, cur)
    T = np.zeros(L.shape)
    for active, X, Y in reversed(steps):
        T = np.where(active, np.maximum(X, Y + T), T)
    return T


@functools.lru_cache(maxsize=256)
def _tree_path_table(h: float, send: float, skip: float, size: int) -> np.ndarray:
    t = tree_path_unrolled(np.arange(size + 1, dtype=float), h, send, skip)
    t.flags.writeable = False
    return t


def tree_path_cycles(length_pes, hop_latency_cycles, send_cycles, skip_cycles):
    """:func:`.fabric.tree_path_cycles`: from a table of every length up to the longest (built once per constant
    set) when the lengths are whole numbers of PEs and the constants scalars, else unrolled."""
    L = np.asarray(length_pes, dtype=float)
    if L.size and _scalar(hop_latency_cycles) and _scalar(send_cycles) and _scalar(skip_cycles):
        lo, hi = L.min(), L.max()
        if 0.0 <= lo and hi <= TABLE_MAX_PES:
            Li = L.astype(np.int64)
            if np.array_equal(Li, L):
                table = _tree_path_table(float(hop_latency_cycles), float(send_cycles), float(skip_cycles),
                                         1 << max(int(hi).bit_length(), 6))
                return np.asarray(table[Li])
    return tree_path_unrolled(L, hop_latency_cycles, send_cycles, skip_cycles)


# ---------------------------------------------------------------------------------------------
# Lines of a region
# ---------------------------------------------------------------------------------------------
def _scalar(v) -> bool:
    return isinstance(v, (float, int, str, np.generic)) or (isinstance(v, np.ndarray) and v.ndim == 0)


def ktree_colors(L):
    """Routing colours of the two-level K-tree over lines of ``L`` PEs (:func:`wseplan.sim._fabric.ktree_colors`):
    per level 2 for a chain of three or more members, 1 for a pair [colours]."""
    L = np.asarray(L, dtype=float)
    r = np.ceil(np.sqrt(np.maximum(L, 1.0)))
    heads = np.ceil(L / r)
    lvl1 = np.where(np.minimum(r, L) >= 3.0, 2.0, 1.0)
    lvl2 = np.where(heads >= 3.0, 2.0, np.where(heads >= 2.0, 1.0, 0.0))
    return np.where(L > 1.0, lvl1 + lvl2, 0.0)


def ktree_path(L, h, stage):
    """Critical path of the two-level K-tree over lines of ``L`` PEs without the message [cycles]: with
    ``r = ceil(sqrt L)`` segments, ``k = ceil(L/r)`` of them, the last holding ``g = L - (k-1) r``, level-1 stages
    costing ``c1 = h + stage`` and level-2 stages (``r`` hops apart) ``c2 = r h + stage``, the slower of the path
    through the last segment, ``(g-1) c1 + (k-1) c2``, and through the one before it, ``(r-1) c1 + (k-2) c2``
    (``stage`` = ramp + the chain's stage service). A perfect square gives ``(L-1) h + 2 (r-1) stage``."""
    L = np.asarray(L, dtype=float)
    r = np.ceil(np.sqrt(np.maximum(L, 1.0)))
    k = np.ceil(L / r)
    g = L - (k - 1.0) * r
    c1, c2 = h + stage, r * h + stage
    return np.where(L > 1.0, np.maximum((g - 1.0) * c1 + (k - 1.0) * c2, (r - 1.0) * c1 + (k - 2.0) * c2), 0.0)


class ReduceLine:
    """The terms of :func:`.fabric.line_reduce_cycles` that depend on the line lengths and the constants alone;
    :meth:`cycles` adds a message (its wavelets times the per-wavelet service ``a``)."""

    __slots__ = ("gt1", "all_gt1", "K1", "path", "fac", "use", "mode", "kuse", "kpath", "kfac")

    def __init__(self, L, *, h, ramp, rsc, tlc, tlof, a, max_levels, tree_model, algo):
        scalars = all(_scalar(v) for v in (h, ramp, rsc, tlc, tlof, a, max_levels))
        self.gt1 = L > 1
        self.all_gt1 = scalars and bool(np.all(self.gt1))
        self.K1 = (L - 1.0) * (h + ramp + rsc)
        self.mode = algo
        if algo == "chain":
            return
        if algo == "ktree":
            self.kpath, self.kfac = ktree_path(L, h, ramp + rsc), 1.0
            return
        lv = np.ceil(np.log2(np.maximum(L, 1.0)))
        if algo in ("best", "best_tc"):
            self.mode = "best"
            self.use = lv <= max_levels
            if scalars and np.all(self.use):
                self.mode = "min"
            else:
                # where the colours cannot hold the binary tree, the two-level K-tree (at most 4 colours) may; its
                # levels are chains, so the message is paid about once (no per-level term)
                self.kuse = ~self.use & (ktree_colors(L) <= max_levels) if algo == "best" else np.zeros(np.shape(L), bool)
                self.kpath = ktree_path(L, h, ramp + rsc) if algo == "best" else 0.0
                self.kfac = 1.0
                if scalars and not np.any(self.use) and not np.any(self.kuse):
                    self.mode = "chain"
                    return
        if tree_model == "critical_path":
            self.path = tree_path_cycles(L, h, ramp + tlc, a)
        else:
            self.path = (L - 1.0) * h + lv * (ramp + tlc)
        self.fac = 1.0 + np.maximum(lv - 1.0, 0.0) * (1.0 - tlof)

    @staticmethod
    def stack(lines: list, ndim: int):
        """Lines of the same lengths (one per variant of the constants) as one line whose terms carry the variants
        along a new first axis, for messages of ``ndim`` dimensions stacked the same way; None where the lines take
        different forms (then each runs alone)."""
        first = lines[0]
        mode = first.mode
        if any(ln.mode != mode or ln.all_gt1 != first.all_gt1 for ln in lines):
            return None

        def lead(vals):
            arr = np.stack([np.asarray(v, dtype=float) for v in vals])
            return arr.reshape((len(vals),) + (1,) * (ndim + 1 - arr.ndim) + arr.shape[1:])

        out = ReduceLine.__new__(ReduceLine)
        out.gt1, out.all_gt1, out.mode = first.gt1, first.all_gt1, mode
        out.K1 = lead([ln.K1 for ln in lines])
        if mode == "ktree":
            out.kpath = lead([ln.kpath for ln in lines])
            out.kfac = lead([ln.kfac for ln in lines])
        elif mode != "chain":
            out.path = lead([ln.path for ln in lines])
            out.fac = lead([ln.fac for ln in lines])
            if mode == "best":
                for name in ("use", "kuse"):
                    m = np.stack([np.broadcast_to(getattr(ln, name), np.shape(ln.K1)) for ln in lines])
                    setattr(out, name, m.reshape((len(lines),) + (1,) * (ndim + 1 - m.ndim) + m.shape[1:]))
                out.kpath = lead([ln.kpath for ln in lines])
                out.kfac = lead([ln.kfac for ln in lines])
        return out

    def cycles(self, Ma):
        """The reduction of a message with ``Ma`` = wavelets x per-wavelet service [cycles]."""
        chain = self.K1 + Ma
        mode = self.mode
        if mode == "chain":
            t = chain
        elif mode == "ktree":
            t = self.kpath + Ma * self.kfac
        else:
            tree = self.path + Ma * self.fac
            if mode == "tree":
                t = tree
            elif mode == "min":
                t = np.minimum(chain, tree)
            else:
                t = np.where(self.use, np.minimum(chain, tree),
                             np.where(self.kuse, np.minimum(chain, self.kpath + Ma * self.kfac), chain))
        return t if self.all_gt1 else np.where(self.gt1, t, 0.0)


#: :meth:`Region.of` keeps regions of at most this many sides, and at most this many regions (then starts afresh)
KEEP_MAX_SIZE = 160  # a wafer's candidate regions (squares and rectangles: ~110 on a CS-3) are one kept region
KEEP_MAX_REGIONS = 512
_KEPT: dict = {}


class Region:
    """A rows x cols region (broadcasting arrays of PEs) and its line terms, computed once per constant set.

    :meth:`of` returns a kept region for small side arrays (the region sides of one configuration, or the candidate
    sides of a wafer), so that their line terms are computed once per process and constant set."""

    __slots__ = ("P", "Q", "_memo")

    def __init__(self, rows, cols):
        self.P = np.asarray(rows, dtype=float)
        self.Q = np.asarray(cols, dtype=float)
        self._memo: dict = {}

    @staticmethod
    def of(rows, cols) -> "Region":
        """A region of ``rows`` x ``cols``: the kept one with the same sides (bit for bit, same shapes) when the
        arrays are small (at most :data:`KEEP_MAX_SIZE` values), else a new one. A region's line terms depend on
        its sides and the constants (its memo's keys) alone, so a kept region gives the numbers a new one gives."""
        P = np.asarray(rows, dtype=float)
        Q = np.asarray(cols, dtype=float)
        if P.size > KEEP_MAX_SIZE or Q.size > KEEP_MAX_SIZE:
            return Region(P, Q)
        key = (P.shape, P.tobytes(), Q.shape, Q.tobytes())
        got = _KEPT.get(key)
        if got is None:
            if len(_KEPT) >= KEEP_MAX_REGIONS:
                _KEPT.clear()
            P, Q = P.copy(), Q.copy()
            P.flags.writeable = Q.flags.writeable = False
            got = _KEPT[key] = Region(P, Q)
        return got

    def _line(self, axis: str):
        return self.P if axis == "P" else self.Q

    def reduce_line(self, axis: str, h, ramp, rsc, tlc, tlof, a, max_levels, tree_model, algo) -> ReduceLine:
        """Reduction terms along the lines of length ``rows`` (``axis='P'``) or ``cols`` (``'Q'``), kept per
        constant set (array constants are not kept)."""
        key = (axis, h, ramp, rsc, tlc, tlof, a, max_levels, tree_model, algo)
        try:
            line = self._memo.get(key)
        except TypeError:  # an array constant: not hashable, not kept
            key, line = None, None
        if line is None:
            line = ReduceLine(self._line(axis), h=h, ramp=ramp, rsc=rsc, tlc=tlc, tlof=tlof, a=a, max_levels=max_levels,
                              tree_model=tree_model, algo=algo)
            if key is not None:
                self._memo[key] = line
        return line

    def chain_hops(self, axis: str, h):
        """``((L - 1) h, L > 1)`` of a chain broadcast along the lines of ``axis``."""
        key = ("hops", axis, h)
        try:
            got = self._memo.get(key)
        except TypeError:
            key, got = None, None
        if got is None:
            L = self._line(axis)
            got = ((L - 1.0) * h, L > 1)
            if key is not None:
                self._memo[key] = got
        return got

    def stacked_gemv(self, variants, flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, s, epw, tlof, num_colors, tree_model,
                     algo, ndim: int):
        """The per-variant terms of :func:`gemv_variants` stacked along a new first axis for operands of ``ndim``
        dimensions: ``(tm, per_kernel_overhead, chain hops along Q, per-wavelet service a, reduction line along P)``,
        each entry the term the variant's own loop computes; kept per constant set. None where a constant is an array
        or the variants' reductions take different forms (then the loop runs)."""
        key = ("gemv", variants, flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, s, epw, tlof, num_colors, tree_model,
               algo, ndim)
        try:
            got = self._memo.get(key, False)
        except TypeError:  # an array constant
            return None
        if got is not False:
            return got
        got = None
        if self.P.ndim <= ndim and self.Q.ndim <= ndim and all(_scalar(v) for v in (flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, s, epw, tlof, num_colors)) \
                and all(_scalar(c) for var in variants for c in var):
            tms, pkos, Qhs, as_, lines = [], [], [], [], []
            for h, ramp, pko, rsc, tlc, eff in variants:
                tm = mac_cycles(flop_per_cycle=flop_per_cycle, sram_bytes_per_cycle=sram_bytes_per_cycle,
                                dtype_bytes=dtype_bytes, efficiency_frac=eff)
                a = np.maximum(s, epw * tm)
                tms.append(tm)
                pkos.append(pko)
                Qhs.append(self.chain_hops("Q", h)[0])
                as_.append(a)
                lines.append(self.reduce_line("P", h, ramp, rsc, tlc, tlof, a, num_colors - 1.0, tree_model, algo))
            line = ReduceLine.stack(lines, ndim)
            if line is not None:
                lead = (len(variants),) + (1,) * ndim

                def per_variant(vals):
                    return np.array(vals, dtype=float).reshape(lead)

                def region_terms(vals):
                    arr = np.stack([np.asarray(v, dtype=float) for v in vals])
                    return arr.reshape((len(vals),) + (1,) * (ndim + 1 - arr.ndim) + arr.shape[1:])

                got = (per_variant(tms), per_variant(pkos), region_terms(Qhs), per_variant(as_), line)
        self._memo[key] = got
        return got

    def stacked_reduce(self, axis, variants, tlof, a, max_levels, tree_model, ndim: int):
        """The reduction lines and chain hops of :func:`reduce_broadcast`'s variants along ``axis`` stacked along a new
        first axis for messages of ``ndim`` dimensions: ``(line, (L - 1) h, L > 1)``; kept per constant set. None
        where a constant is an array or the lines take different forms (then the loop runs)."""
        key = ("reduce", axis, variants, tlof, a, max_levels, tree_model, ndim)
        try:
            got = self._memo.get(key, False)
        except TypeError:
            return None
        if got is not False:
            return got
        got = None
        L = self._line(axis)
        if L.ndim <= ndim and all(_scalar(v) for v in (tlof, a, max_levels)) and all(_scalar(c) for v in variants for c in v):
            lines = [self.reduce_line(axis, h, ramp, rsc, tlc, tlof, a, max_levels, tree_model, "best")
                     for h, ramp, rsc, tlc in variants]
            line = ReduceLine.stack(lines, ndim)
            if line is not None:
                hops = np.stack([self.chain_hops(axis, v[0])[0] for v in variants])
                hops = hops.reshape((len(variants),) + (1,) * (ndim + 1 - hops.ndim) + hops.shape[1:])
                got = (line, hops, self.chain_hops(axis, variants[0][0])[1])
        self._memo[key] = got
        return got

    def gt1(self, axis: str):
        key = ("gt1", axis)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._line(axis) > 1
        return got


def reduce_broadcast(region: Region, axis: str, message_bytes, *, variants, link_bytes_per_cycle, wavelet_bytes,
                     tree_level_overlap_frac, max_tree_levels, tree_model, wavelets=None):
    """A line reduction (``best``, one cycle per added wavelet) and a chain broadcast of ``message_bytes`` along the
    lines of ``axis``, for each variant ``(hop, ramp, reduce_stage, tree_level)`` [cycles]: a list of
    ``(reduce, broadcast)`` pairs, as :func:`.fabric.line_reduce_cycles` and :func:`.fabric.line_broadcast_cycles`."""
    M = num_wavelets(message_bytes=message_bytes, wavelet_bytes=wavelet_bytes) if wavelets is None else wavelets
    s = wavelet_bytes / link_bytes_per_cycle
    a = np.maximum(s, 1.0)
    Ma, Ms = M * a, M * s
    st = region.stacked_reduce(axis, tuple(variants), tree_level_overlap_frac, a, max_tree_levels, tree_model, np.ndim(Ma))
    if st is not None:  # the variants along a new first axis: one array pass, each entry the loop's arithmetic
        line, Lh, gt1 = st
        red, bc = line.cycles(Ma), np.where(gt1, Lh + Ms, 0.0)
        return [(red[i], bc[i]) for i in range(len(variants))]
    out = []
    for h, ramp, rsc, tlc in variants:
        line = region.reduce_line(axis, h, ramp, rsc, tlc, tree_level_overlap_frac, a, max_tree_levels, tree_model, "best")
        Lh, gt1 = region.chain_hops(axis, h)
        out.append((line.cycles(Ma), np.where(gt1, Lh + Ms, 0.0)))
    return out


# ---------------------------------------------------------------------------------------------
# GEMV and GEMM variants
# ---------------------------------------------------------------------------------------------
def gemv_variants(region: Region, *, k, n, flop_per_cycle, sram_bytes_per_cycle, link_bytes_per_cycle, variants, m=1,
                  dtype_bytes=2.0, wavelet_bytes=4.0, reduce_algo="best", broadcast_overlap_frac=0.0,
                  tree_level_overlap_frac=0.0, num_colors=np.inf, tree_model="levels"):
    """:func:`.fabric.gemv_cycles` on ``region`` for each variant ``(hop, ramp, per_kernel_overhead, reduce_stage,
    tree_level, mac_efficiency)`` of the constants, sharing every term the variants have in common [cycles]."""
    P, Q = region.P, region.Q
    kt, nt = ceil_div(k, P), ceil_div(n, Q)
    m = np.asarray(m, dtype=float)
    mkt = m * kt
    mktnt = mkt * nt
    s = wavelet_bytes / link_bytes_per_cycle
    Mxs = num_wavelets(message_bytes=mkt * dtype_bytes, wavelet_bytes=wavelet_bytes) * s
    serial_x = np.where(region.gt1("Q"), Mxs, 0.0)
    epw = max(1.0, wavelet_bytes / dtype_bytes)
    My = num_wavelets(message_bytes=m * nt * dtype_bytes, wavelet_bytes=wavelet_bytes)
    dMy = My - num_wavelets(message_bytes=nt * dtype_bytes, wavelet_bytes=wavelet_bytes)
    gt1P = region.gt1("P")
    st = region.stacked_gemv(variants, flop_per_cycle, sram_bytes_per_cycle, dtype_bytes, s, epw, tree_level_overlap_frac,
                             num_colors, tree_model, reduce_algo, np.ndim(mktnt))
    if st is not None:  # the variants along a new first axis: one array pass, each entry the loop's arithmetic
        tm, pko, Qh, a, line = st
        compute = mktnt * tm
        bcast = np.where(region.gt1("Q"), Qh + Mxs, 0.0)
        serial_y = np.where(gt1P, dMy * a, 0.0)
        hidden = broadcast_overlap_frac * np.minimum(serial_x + serial_y, compute)
        red = line.cycles(My * a)
        return list(pko + bcast + compute - hidden + red)
    out = []
    for h, ramp, pko, rsc, tlc, eff in variants:
        tm = mac_cycles(flop_per_cycle=flop_per_cycle, sram_bytes_per_cycle=sram_bytes_per_cycle,
                        dtype_bytes=dtype_bytes, efficiency_frac=eff)
        compute = mktnt * tm
        Qh, gt1Q = region.chain_hops("Q", h)
        bcast = np.where(gt1Q, Qh + Mxs, 0.0)
        a = np.maximum(s, epw * tm)
        serial_y = np.where(gt1P, dMy * a, 0.0)
        hidden = broadcast_overlap_frac * np.minimum(serial_x + serial_y, compute)
        line = region.reduce_line("P", h, ramp, rsc, tlc, tree_level_overlap_frac, a, num_colors - 1.0, tree_model,
                                  reduce_algo)
        red = line.cycles(My * a)
        out.append(pko + bcast + compute - hidden + red)
    return out


def gemv_parts(region: Region, *, hop_latency_cycles, ramp_latency_cycles=0.0, per_kernel_overhead_cycles=0.0,
               reduce_stage_cycles=0.0, tree_level_cycles=0.0, mac_efficiency_frac=1.0, **kw) -> dict:
    """:func:`.fabric.gemv_parts_cycles` on ``region``: the kernel as written, without latency, and without latency
    or MAC time, in one pass [cycles]."""
    total, zero_lat, serial = gemv_variants(region, variants=(
        (hop_latency_cycles, ramp_latency_cycles, per_kernel_overhead_cycles, reduce_stage_cycles, tree_level_cycles,
         mac_efficiency_frac),
        (0.0, 0.0, 0.0, 0.0, 0.0, mac_efficiency_frac),
        (0.0, 0.0, 0.0, 0.0, 0.0, 1e30)), **kw)
    overhead = np.full_like(np.asarray(total, dtype=float), per_kernel_overhead_cycles)
    compute = zero_lat - serial
    latency = total - overhead - serial - compute
    return {"overhead": overhead, "latency": latency, "serialization": serial, "compute": compute}


def gemm_variants(region: Region, *, m, k, n, flop_per_cycle, sram_bytes_per_cycle, link_bytes_per_cycle, variants,
                  dtype_bytes=2.0, wavelet_bytes=4.0, broadcast_overlap_frac=0.0, reduce_stage_cycles=0.0,
                  tree_level_cycles=0.0, tree_level_overlap_frac=0.0, num_colors=np.inf, tree_model="levels"):
    """:func:`.fabric.gemm_cycles` on ``region`` for each variant ``(hop, ramp, per_kernel_overhead, step_overhead,
    mac_efficiency)`` of the constants [cycles]: ``(S, [cycles per variant])`` with ``S = max(rows, cols)`` steps.
    The reduction constants are accepted and not used (as :func:`.fabric.gemm_cycles`)."""
    P, Q = region.P, region.Q
    S = np.maximum(P, Q)
    mt, kt, nt = ceil_div(m, P), ceil_div(k, S), ceil_div(n, Q)
    mktnt = mt * kt * nt
    tile_bytes = np.maximum(mt * kt, kt * nt) * dtype_bytes
    wl = num_wavelets(message_bytes=tile_bytes, wavelet_bytes=wavelet_bytes) * wavelet_bytes / link_bytes_per_cycle
    out = []
    for h, ramp, pko, step, eff in variants:
        tm = mac_cycles(flop_per_cycle=flop_per_cycle, sram_bytes_per_cycle=sram_bytes_per_cycle,
                        dtype_bytes=dtype_bytes, efficiency_frac=eff)
        compute = mktnt * tm
        shift = 2.0 * (h + ramp) + wl
        out.append(pko + S * (step + np.maximum(compute, shift)))
    return S, out


def gemm_parts(region: Region, *, hop_latency_cycles, ramp_latency_cycles=0.0, per_kernel_overhead_cycles=0.0,
               step_overhead_cycles=0.0, mac_efficiency_frac=1.0, **kw) -> dict:
    """:func:`.fabric.gemm_parts_cycles` on ``region`` (the kernel and its fabric-only variant in one pass)."""
    S, (total, fabric_only) = gemm_variants(region, variants=(
        (hop_latency_cycles, ramp_latency_cycles, per_kernel_overhead_cycles, step_overhead_cycles, mac_efficiency_frac),
        (hop_latency_cycles, ramp_latency_cycles, 0.0, 0.0, 1e30)), **kw)
    total = np.asarray(total, dtype=float)
    overhead = per_kernel_overhead_cycles + S * step_overhead_cycles
    body = total - overhead
    compute = np.where(body > fabric_only, body, 0.0)
    fabric = body - compute
    return {"overhead": np.broadcast_to(overhead, total.shape) * 1.0, "compute": compute, "fabric": fabric}
