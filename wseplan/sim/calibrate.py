"""Calibrate the closed forms against the simulators (``wseplan calibrate``).

The closed forms in :mod:`wseplan.analytic.fabric` and :mod:`wseplan.analytic.stream` leave a few constants
open that only a model of the mechanism resolves. This module runs the simulators (:mod:`wseplan.sim.mesh`,
:mod:`wseplan.sim.memoryx`) over a documented design grid, fits those constants with
``scipy.optimize.least_squares`` on ``log(closed_form / simulator)``, and reports the residuals on the grid and
on a held-out grid of other sizes. The result is written to ``catalogs/calibration/fabric_sim_fit.yaml`` and
``stream_sim_fit.yaml``; the analytic models read them from there.

Fabric (per wafer; hardware numbers from the catalog, the same for both models):

* ``reduce_stage_cycles``, ``tree_level_cycles`` - extra cycles of each chain add-and-forward stage and of
  each tree level (the receive-add-send service of a PE on the reduction path, which the closed form's
  hop + ramp latency leaves out);
* ``tree_level_overlap_frac`` - how much of each further tree level's message time overlaps the previous
  level (the simulator pipelines the levels wavelet by wavelet);
* ``broadcast_overlap_frac`` - share of the shorter of (input serialisation, MACs) hidden behind the longer
  when the GEMV input streams into the MACs (back-pressure from finite input queues decides how much).

The routing-colour limit is a hardware number (``free_routing_colors``), not fitted: both models get it.

Stream (one file): ``overlap_efficiency_frac`` (share of the shorter of a slot's compute and the next load
hidden) and ``latency_exposed_frac`` (share of each transfer's request latency that is exposed per layer slot;
the simulator's FIFO link overlaps the latency of one transfer with the next transfer's data).

Everything is deterministic: fixed grids, fixed starting points, values rounded to 4 significant digits.
"""
from __future__ import annotations

import csv
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ..analytic import fabric as fab
from ..analytic import fabric_constants as fabc
from ..analytic import stream as stm
from ..analytic.rows import distinct
from ..catalog.load import default_catalog_dir, read_yaml
from ..errors import CatalogError, InputError
from ..report.atomic import write_file_atomically
from ..workload import build_workload
from .catalog_params import mesh_params_from_catalog
from .memoryx import simulate_stream
from .mesh import MeshParams, allreduce, broadcast, gemm, gemv, reduce

SOURCE_ID = "wseplan-sim-calibration"
FABRIC_BOUNDS = {"reduce_stage_cycles": (0.0, 16.0), "tree_level_cycles": (0.0, 16.0),
                 "tree_level_overlap_frac": (0.0, 1.0), "broadcast_overlap_frac": (0.0, 1.0)}
FABRIC_X0 = {"reduce_stage_cycles": 1.0, "tree_level_cycles": 1.0, "tree_level_overlap_frac": 0.5,
             "broadcast_overlap_frac": 0.5}
STREAM_BOUNDS = {"overlap_efficiency_frac": (0.0, 1.0), "latency_exposed_frac": (0.0, 1.0)}
STREAM_X0 = {"overlap_efficiency_frac": 0.5, "latency_exposed_frac": 0.5}
TREE_MODEL = "critical_path"  # path model of reduction/broadcast trees used with the fitted constants
TOLERANCE_FRAC = 0.10  # stated agreement of closed form and simulator (max |rel_error|) on both grids

FABRIC_NOTES = {
    "reduce_stage_cycles": "fitted to the mesh simulator: receive-add-forward service of each chain reduction "
                           "stage beyond hop and ramp latency",
    "tree_level_cycles": "fitted to the mesh simulator: send, receive and add service of each reduction tree "
                         "level beyond hop and ramp latency",
    "tree_level_overlap_frac": "fitted to the mesh simulator: the levels of a reduction tree are pipelined "
                               "wavelet by wavelet, so each further level adds only this share less of the "
                               "message time",
    "broadcast_overlap_frac": "fitted to the mesh simulator: share of min(input serialisation, MACs) hidden "
                              "while the GEMV input streams into the MACs through finite input queues",
}
STREAM_NOTES = {
    "overlap_efficiency_frac": "fitted to the MemoryX stream simulator: share of min(compute, next load) hidden "
                               "by prefetching (1 = the load runs entirely behind the compute)",
    "latency_exposed_frac": "fitted to the MemoryX stream simulator: share of each transfer's request latency "
                            "exposed per layer slot (the FIFO link overlaps one transfer's latency with the next "
                            "transfer's data)",
}


def _round_sig(x: float, digits: int = 4) -> float:
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(round(x, digits - 1 - int(math.floor(math.log10(abs(x))))))


# ---------------------------------------------------------------------------------------------
# Fabric design grid
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FabricCase:
    """One simulator run: ``kind`` in gemv, gemm (m > 1), reduce, broadcast, allreduce."""

    kind: str
    rows: int
    cols: int
    k: int = 0
    n: int = 0
    m: int = 1
    nbytes: float = 0.0
    algo: str = "best"   # reduce: chain | tree | best; broadcast: chain | tree


FABRIC_GRID_TEXT = {
    "fit": ("gemv [1,k]x[k,n], (k,n) in {1K,4K,4Kx6K,4Kx28K,14Kx4K,8K,16K} on squares {16,64,128,256,420,max}; "
            "batched gemv m in {16,32}, (k,n) in {1K,4K,4Kx14K} on {64,128,420}; line reduce chain/tree/best and "
            "broadcast chain/tree over L in {8,64,256,max} x {4,64,1024} B; all-reduce on squares "
            "{8,64,256,max} x {4,256} B; fp16; only runs that fit SRAM"),
    "holdout": ("gemv (k,n) in {2K,5Kx15K,12K,3Kx8K,13.5Kx5K} on squares {24,96,192,360,600}; batched gemv "
                "m in {12,24}, (k,n) in {2K,5K} on {48,200}; reduce/broadcast L in {32,100,500} x {16,512} B; "
                "all-reduce on {24,100,500} squares and 100x300 x {16,64} B"),
}


def fabric_grid(params: MeshParams, which: str = "fit") -> list[FabricCase]:
    """The design grid (``which='fit'``) or the held-out grid (``'holdout'``) for a mesh (see
    ``FABRIC_GRID_TEXT``). GEMV/GEMM cases whose tiles do not fit a PE's SRAM are left out."""
    side_max = min(params.rows, params.cols)
    K = 1024
    if which == "fit":
        mats = [(K, K), (4 * K, 4 * K), (4 * K, 6 * K), (4 * K, 28 * K), (14 * K, 4 * K), (8 * K, 8 * K),
                (16 * K, 16 * K)]
        sides = [16, 64, 128, 256, 420, side_max]
        bm, bmats, bsides = [16, 32], [(K, K), (4 * K, 4 * K), (4 * K, 14 * K)], [64, 128, 420]
        lines, sizes = [8, 64, 256, side_max], [4.0, 64.0, 1024.0]
        ar = [((s, s), b) for s in (8, 64, 256, side_max) for b in (4.0, 256.0)]
    elif which == "holdout":
        mats = [(2 * K, 2 * K), (5 * K, 15 * K), (12 * K, 12 * K), (3 * K, 8 * K), (13824, 5 * K)]
        sides = [24, 96, 192, 360, 600]
        bm, bmats, bsides = [12, 24], [(2 * K, 2 * K), (5 * K, 5 * K)], [48, 200]
        lines, sizes = [32, 100, 500], [16.0, 512.0]
        ar = [((s, s), b) for s in (24, 100, 500) for b in (16.0, 64.0)] + [((100, 300), b) for b in (16.0, 64.0)]
    else:
        raise InputError(f"which: unknown grid {which!r}; use 'fit' or 'holdout'")
    sides = sorted({min(s, side_max) for s in sides})
    cases: list[FabricCase] = []

    def tile_fits(k, n, P, Q, m):
        kt, nt = math.ceil(k / P), math.ceil(n / Q)
        return (kt * nt + 2 * m * nt) * 2 + params.sram_reserved_bytes <= params.sram_per_pe_bytes

    for (k, n), s in itertools.product(mats, sides):
        if s <= min(k, n) and tile_fits(k, n, s, s, 1):
            cases.append(FabricCase("gemv", s, s, k=k, n=n))
    for m, (k, n), s in itertools.product(bm, bmats, [min(s, side_max) for s in bsides]):
        if s <= min(k, n) and tile_fits(k, n, s, s, m):
            cases.append(FabricCase("gemm", s, s, k=k, n=n, m=m))
    for L, b in itertools.product(sorted({min(v, side_max) for v in lines}), sizes):
        for algo in ("chain", "tree", "best"):
            cases.append(FabricCase("reduce", 1, L, nbytes=b, algo=algo))
        for algo in ("chain", "tree"):
            cases.append(FabricCase("broadcast", 1, L, nbytes=b, algo=algo))
    for (P, Q), b in ar:
        cases.append(FabricCase("allreduce", min(P, side_max), min(Q, side_max), nbytes=b))
    return cases


def simulate_fabric(params: MeshParams, cases: list[FabricCase]) -> np.ndarray:
    """Simulated cycles of each case [cycles]."""
    out = np.empty(len(cases))
    for i, c in enumerate(cases):
        region = (c.rows, c.cols)
        if c.kind == "gemv":
            r = gemv(params, k=c.k, n=c.n, region=region)
        elif c.kind == "gemm":
            r = gemm(params, m=c.m, k=c.k, n=c.n, region=region)
        elif c.kind == "reduce":
            r = reduce(params, nbytes=c.nbytes, region=region, algo=None if c.algo == "best" else c.algo)
        elif c.kind == "broadcast":
            r = broadcast(params, nbytes=c.nbytes, region=region, algo=c.algo)
        else:
            r = allreduce(params, nbytes=c.nbytes, region=region)
        out[i] = r.cycles
    return out


def closed_form_kwargs(params: MeshParams, dtype_bytes: int = 2) -> dict:
    """Hardware keyword arguments of the fabric closed forms for the same mesh as the simulator (no kernel
    overhead: the simulator has none either)."""
    return dict(flop_per_cycle=params.flop_per_cycle, sram_bytes_per_cycle=params.sram_bytes_per_cycle,
                hop_latency_cycles=params.hop_latency_cycles, link_bytes_per_cycle=params.link_bytes_per_cycle,
                wavelet_bytes=float(params.wavelet_bytes), ramp_latency_cycles=params.ramp_latency_cycles,
                dtype_bytes=float(dtype_bytes))


def closed_form_fabric(params: MeshParams, cases: list[FabricCase], constants: dict[str, float]) -> np.ndarray:
    """Closed-form cycles of each case with the given simulator-fit constants [cycles]."""
    hw = closed_form_kwargs(params)
    colors = float(params.num_colors)
    line = dict(hop_latency_cycles=hw["hop_latency_cycles"], link_bytes_per_cycle=hw["link_bytes_per_cycle"],
                wavelet_bytes=hw["wavelet_bytes"], ramp_latency_cycles=hw["ramp_latency_cycles"])
    epw = max(1.0, hw["wavelet_bytes"] / hw["dtype_bytes"])
    add = epw * max(1.0 / hw["flop_per_cycle"], hw["dtype_bytes"] / hw["sram_bytes_per_cycle"])
    tm = constants.get("tree_model", TREE_MODEL)
    red = dict(reduce_stage_cycles=constants["reduce_stage_cycles"], tree_level_cycles=constants["tree_level_cycles"],
               tree_model=tm,
               tree_level_overlap_frac=constants["tree_level_overlap_frac"])
    out = np.empty(len(cases))
    kinds = np.array([c.kind for c in cases])
    arr = {f: np.array([getattr(c, f) for c in cases], dtype=float) for f in ("rows", "cols", "k", "n", "m", "nbytes")}
    algos = np.array([c.algo for c in cases])
    sel = np.isin(kinds, ("gemv", "gemm"))
    if sel.any():
        out[sel] = fab.gemv_cycles(k=arr["k"][sel], n=arr["n"][sel], m=arr["m"][sel], rows=arr["rows"][sel],
                                   cols=arr["cols"][sel], num_colors=colors,
                                   broadcast_overlap_frac=constants["broadcast_overlap_frac"], **red, **hw)
    for algo in ("chain", "tree", "best"):
        sel = (kinds == "reduce") & (algos == algo)
        if sel.any():
            out[sel] = fab.line_reduce_cycles(length_pes=arr["cols"][sel], message_bytes=arr["nbytes"][sel],
                                              add_cycles_per_wavelet=add, algo=algo, max_tree_levels=colors,
                                              **red, **line)
    for algo in ("chain", "tree"):
        sel = (kinds == "broadcast") & (algos == algo)
        if sel.any():
            out[sel] = fab.line_broadcast_cycles(length_pes=arr["cols"][sel], message_bytes=arr["nbytes"][sel],
                                                 algo=algo, tree_model=tm, **line)
    sel = kinds == "allreduce"
    if sel.any():
        out[sel] = fab.allreduce_cycles(rows=arr["rows"][sel], cols=arr["cols"][sel], message_bytes=arr["nbytes"][sel],
                                        add_cycles_per_wavelet=add, num_colors=colors, **red, **line)
    return out


def fit_stats(predicted, reference) -> dict:
    """Residual statistics of ``predicted / reference - 1``."""
    rel = np.asarray(predicted, dtype=float) / np.asarray(reference, dtype=float) - 1.0
    return {"num_points": int(rel.size), "median_abs_rel_error": _round_sig(float(np.median(np.abs(rel)))),
            "max_abs_rel_error": _round_sig(float(np.max(np.abs(rel)))),
            "rms_rel_error": _round_sig(float(np.sqrt(np.mean(rel ** 2))))}


def _least_squares(residual_fn, names, x0, bounds) -> dict[str, float]:
    from scipy.optimize import least_squares

    lo = np.array([bounds[k][0] for k in names])
    hi = np.array([bounds[k][1] for k in names])
    res = least_squares(lambda x: residual_fn(dict(zip(names, x))), np.array([x0[k] for k in names]),
                        bounds=(lo, hi), method="trf", x_scale=np.maximum(hi - lo, 1e-9), xtol=1e-10,
                        ftol=1e-10, gtol=1e-10, max_nfev=400)
    out = {}
    for k, v in zip(names, res.x):
        lo_k, hi_k = bounds[k]
        v = lo_k if v - lo_k < 1e-6 * (hi_k - lo_k) else hi_k if hi_k - v < 1e-6 * (hi_k - lo_k) else float(v)
        out[k] = _round_sig(v)
    return out


@dataclass(frozen=True)
class FitResult:
    """One calibrated constant set: ``values`` (name -> value), residuals on the fit and held-out grids."""

    values: dict
    fit: dict
    holdout: dict
    grid: dict
    holdout_grid: dict


def calibrate_fabric(params: MeshParams) -> FitResult:
    """Fit the fabric simulator-fit constants for one mesh (see the module docstring)."""
    names = list(fab.SIM_FIT_NAMES)
    cases = fabric_grid(params, "fit")
    held = fabric_grid(params, "holdout")
    sim = simulate_fabric(params, cases)
    sim_h = simulate_fabric(params, held)
    log_sim = np.log(sim)
    values = _least_squares(lambda th: np.log(closed_form_fabric(params, cases, th)) - log_sim, names, FABRIC_X0,
                            FABRIC_BOUNDS)
    return FitResult(values=values, fit=fit_stats(closed_form_fabric(params, cases, values), sim),
                     holdout=fit_stats(closed_form_fabric(params, held, values), sim_h),
                     grid={"description": FABRIC_GRID_TEXT["fit"], "num_points": len(cases)},
                     holdout_grid={"description": FABRIC_GRID_TEXT["holdout"], "num_points": len(held)})


# ---------------------------------------------------------------------------------------------
# Stream design grid
# ---------------------------------------------------------------------------------------------
STREAM_GRID_TEXT = {
    "fit": ("training steps of llama-3-8b and llama-2-13b (prefetch {1,2,4}) and of a 24-layer stack alternating "
            "0.2/0.6 GB layers (prefetch 1); tokens per step {2K,16K,64K,256K,1M} x stream bandwidth "
            "{37.5,75,150,300} GB/s x latency {0,0.03,0.3} ms; bf16 at the stream.yaml share of the WSE-3 dense "
            "peak; full-duplex links"),
    "holdout": ("llama-3.1-70b (prefetch {1,3}) and a 40-layer stack alternating 0.1/0.9 GB layers (prefetch 1); "
                "tokens {4K,32K,512K} x bandwidth {50,120,250} GB/s x latency {0.05,0.2} ms"),
}


def _stream_stacks(catalog, which):

    def model(name):
        w = build_workload(catalog.models[name], catalog, precision="bf16", phase="train", batch=1, context=2048)
        return np.asarray(w.weight_bytes, dtype=float), np.asarray(w.flop_per_token, dtype=float)

    def synthetic(n, small, big):
        wb = np.where(np.arange(n) % 2 == 0, small, big)
        return wb, wb.copy()  # 2 FLOP per weight byte per token (16-bit weights: one MAC per parameter)

    # (stack, prefetch depths): the closed form has no prefetch term beyond one layer, which is exact for
    # near-uniform stacks; deeper buffers over strongly alternating layers are outside its scope.
    if which == "fit":
        return [(model("llama-3-8b"), [1, 2, 4]), (model("llama-2-13b"), [1, 2, 4]),
                (synthetic(24, 0.2e9, 0.6e9), [1])]
    return [(model("llama-3.1-70b"), [1, 3]), (synthetic(40, 0.1e9, 0.9e9), [1])]


def _stream_configs(which, depths):
    if which == "fit":
        axes = ([2048.0, 16384.0, 65536.0, 262144.0, 1048576.0], [37.5e9, 75e9, 150e9, 300e9],
                [0.0, 30e-6, 300e-6], depths)
    else:
        axes = ([4096.0, 32768.0, 524288.0], [50e9, 120e9, 250e9], [50e-6, 200e-6], depths)
    grid = np.meshgrid(*[np.asarray(a, dtype=float) for a in axes], indexing="ij")
    return [g.ravel() for g in grid]


def stream_cases(catalog, which: str, rate_flop_per_s: float):
    """Simulated and closed-form inputs over the stream grid: a list of (weights, flops, tokens, bw, lat, pre,
    simulated step) per layer stack."""
    out = []
    for (wb, f), depths in _stream_stacks(catalog, which):
        T, B, LAT, N = _stream_configs(which, depths)
        sim = simulate_stream(layer_weight_bytes=wb, fwd_flop_per_token=f, tokens_per_step=T,
                              compute_flop_per_s=rate_flop_per_s, link_bandwidth_bytes_per_s=B, link_latency_s=LAT,
                              prefetch_layers=N.astype(int), duplex=True)
        out.append((wb, f, T, B, LAT, N, np.asarray(sim.step_time_s, dtype=float)))
    return out


def closed_form_stream(cases, rate_flop_per_s: float, constants: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form (:func:`wseplan.analytic.stream.training_step_time_s`) and simulated step times [s]."""
    pred, ref = [], []
    for wb, f, T, B, LAT, N, sim in cases:
        for n in distinct(N):
            mk = N == n
            r = stm.training_step_time_s(weight_bytes=wb, flop_per_token=f, tokens=T[mk],
                                         compute_flop_per_s=rate_flop_per_s, stream_bandwidth_bytes_per_s=B[mk],
                                         io_bandwidth_bytes_per_s=B[mk], latency_s=LAT[mk], prefetch_layers=int(n),
                                         **constants)
            pred.append(np.asarray(r["step_s"], dtype=float))
            ref.append(sim[mk])
    return np.concatenate(pred), np.concatenate(ref)


def stream_rate_flop_per_s(catalog) -> float:
    """Compute rate of the stream grid: bf16 dense peak of the catalog WSE-3 x stream.yaml's compute
    efficiency [FLOP/s]."""
    c = stm.load_stream_constants()
    return catalog.wafers["wse3"].peak_flop_per_s("bf16") * c.compute_efficiency_frac.si


def calibrate_stream(catalog) -> FitResult:
    """Fit the stream simulator-fit constants (see the module docstring)."""
    names = list(STREAM_BOUNDS)
    rate = stream_rate_flop_per_s(catalog)
    cases = stream_cases(catalog, "fit", rate)
    held = stream_cases(catalog, "holdout", rate)
    _, ref = closed_form_stream(cases, rate, STREAM_X0)
    log_ref = np.log(ref)
    values = _least_squares(lambda th: np.log(closed_form_stream(cases, rate, th)[0]) - log_ref, names, STREAM_X0,
                            STREAM_BOUNDS)
    p, r = closed_form_stream(cases, rate, values)
    ph, rh = closed_form_stream(held, rate, values)
    return FitResult(values=values, fit=fit_stats(p, r), holdout=fit_stats(ph, rh),
                     grid={"description": STREAM_GRID_TEXT["fit"], "num_points": int(r.size)},
                     holdout_grid={"description": STREAM_GRID_TEXT["holdout"], "num_points": int(rh.size)})


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------
def _quantity(name, value, notes) -> dict:
    return {"value": value, "source": SOURCE_ID, "basis": "estimate", "note": notes[name]}


def fabric_section(wafer, result: FitResult) -> dict:
    return {"wafer": wafer.name, "tree_model": TREE_MODEL,
            "constants": {k: _quantity(k, result.values[k], FABRIC_NOTES) for k in fab.SIM_FIT_NAMES},
            "fit": result.fit, "holdout": result.holdout, "grid": result.grid, "holdout_grid": result.holdout_grid}


def stream_document(result: FitResult) -> dict:
    return {"schema_version": 1, "method": METHOD_TEXT,
            "stream": {k: _quantity(k, result.values[k], STREAM_NOTES) for k in STREAM_BOUNDS},
            "fit": result.fit, "holdout": result.holdout, "grid": result.grid, "holdout_grid": result.holdout_grid}


METHOD_TEXT = ("scipy.optimize.least_squares (trf, bounded) on log(closed_form / simulator) over the grid; "
               "values rounded to 4 significant digits; rel_error = closed_form / simulator - 1")
CAL_TARGETS = ("wse2", "wse3")


def run_calibration(catalog, targets=CAL_TARGETS) -> dict:
    """Fit everything: ``{'fabric': {target: FitResult}, 'stream': FitResult}``."""
    out = {"fabric": {}, "stream": calibrate_stream(catalog)}
    for t in targets:
        out["fabric"][t] = calibrate_fabric(mesh_params_from_catalog(catalog.wafers[t]))
    return out


def fabric_document(catalog, fabric_results: dict) -> dict:
    return {"schema_version": 1, "method": METHOD_TEXT,
            "targets": {t: fabric_section(catalog.wafers[t], r) for t, r in sorted(fabric_results.items())}}


HEADER = {
    "fabric_sim_fit.yaml": ("# Constants of the fabric closed forms (wseplan/analytic/fabric.py) fitted to the mesh simulator\n"
                            "# (wseplan/sim/mesh.py). Written by `wseplan calibrate`; checked by `wseplan calibrate --check`.\n"
                            "# Do not edit by hand. Hardware numbers come from catalogs/hardware/wafers.yaml; the kernel\n"
                            "# constants fitted to WaferLLM measurements stay in fabric.yaml.\n"),
    "stream_sim_fit.yaml": ("# Constants of the weight-streaming closed form (wseplan/analytic/stream.py) fitted to the MemoryX\n"
                            "# stream simulator (wseplan/sim/memoryx.py); they replace the same names in stream.yaml.\n"
                            "# Written by `wseplan calibrate`; checked by `wseplan calibrate --check`. Do not edit by hand.\n"),
}


def dump_yaml(doc: dict, name: str) -> str:

    return HEADER[name] + yaml.safe_dump(doc, sort_keys=False, width=120, default_flow_style=None)


def write_files(catalog, results: dict, out_dir, existing_fabric: dict | None = None) -> list:
    """Write both files into ``out_dir`` (fabric targets not recalibrated are kept from ``existing_fabric``), each
    atomically (:func:`wseplan.report.atomic.write_file_atomically`: the folder is created when missing, a file
    is replaced whole or not at all, file-system errors are one :class:`InputError` line)."""

    out_dir = Path(out_dir)
    fdoc = fabric_document(catalog, results["fabric"])
    if existing_fabric:
        merged = dict(existing_fabric)
        merged.update(fdoc["targets"])
        fdoc["targets"] = {k: merged[k] for k in sorted(merged)}
    paths = []
    for name, doc in (("fabric_sim_fit.yaml", fdoc), ("stream_sim_fit.yaml", stream_document(results["stream"]))):
        p = out_dir / name
        write_file_atomically(p, dump_yaml(doc, name))  # temporary file, fsync, rename: never half a file
        paths.append(p)
    fabc._load_fabric_sim.cache_clear()
    stm._load_sim_fit.cache_clear()
    return paths


def check_files(catalog, cal_dir, targets=CAL_TARGETS, rel_tol: float = 0.01) -> list[str]:
    """Recompute and compare with the shipped files; returns the problems (empty when consistent).

    A problem is a constant that differs by more than ``rel_tol`` (relative; absolute for values near 0), a
    missing constant or target, or missing residuals. Raises ``CatalogError`` when a file is missing or
    unreadable.
    """


    cal_dir = Path(cal_dir)
    docs = {}
    for name in ("fabric_sim_fit.yaml", "stream_sim_fit.yaml"):
        p = cal_dir / name
        if not p.is_file():
            raise CatalogError(f"{p}: not found; run `wseplan calibrate --out {cal_dir}`")
        docs[name] = read_yaml(p)
        if not isinstance(docs[name], dict):
            raise CatalogError(f"{p}: not a mapping; run `wseplan calibrate --out {cal_dir}`")
    problems: list[str] = []
    results = run_calibration(catalog, targets)

    def compare(where, shipped: dict, fresh: FitResult, names):
        if not isinstance(shipped, dict):
            problems.append(f"{where}: missing")
            return
        for key in ("fit", "holdout"):
            st = shipped.get(key)
            if not isinstance(st, dict) or any(not isinstance(st.get(f), (int, float)) for f in
                                               ("median_abs_rel_error", "max_abs_rel_error", "rms_rel_error",
                                                "num_points")):
                problems.append(f"{where}.{key}: residuals missing")
        consts = shipped.get("constants", shipped.get("stream"))
        for k in names:
            q = consts.get(k) if isinstance(consts, dict) else None
            v = q.get("value") if isinstance(q, dict) else None
            if not isinstance(v, (int, float)):
                problems.append(f"{where}.{k}: missing")
                continue
            want = fresh.values[k]
            if abs(v - want) > rel_tol * max(abs(want), 1e-2):
                problems.append(f"{where}.{k}: shipped {v} vs recomputed {want} (> {rel_tol:.0%})")

    ftargets = docs["fabric_sim_fit.yaml"].get("targets")
    for t in targets:
        compare(f"fabric_sim_fit.yaml:{t}", ftargets.get(t) if isinstance(ftargets, dict) else None,
                results["fabric"][t], fab.SIM_FIT_NAMES)
    compare("stream_sim_fit.yaml", docs["stream_sim_fit.yaml"], results["stream"], list(STREAM_BOUNDS))
    return problems


# ---------------------------------------------------------------------------------------------
# GEMV validation against WaferLLM (public validation rows R358, R362)
# ---------------------------------------------------------------------------------------------
GEMV_ROW_IDS = ("R358", "R362")


def _validation_rows(ids) -> list[dict]:
    """The rows ``ids`` of the shipped public validation set (``catalogs/validation/validation-public.csv``)."""


    path = default_catalog_dir() / "validation" / "validation-public.csv"
    if not path.is_file():
        raise CatalogError(f"{path}: validation set not found; restore catalogs/validation/validation-public.csv")
    with open(path, encoding="utf-8", newline="") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh) if r["id"] in ids}
    missing = [i for i in ids if i not in rows]
    if missing:
        raise CatalogError(f"{path}: rows {', '.join(missing)} missing; restore the validation set")
    return [rows[i] for i in ids]


def gemv_validation(catalog, *, target: str = "wse2") -> list[dict]:
    """Simulated GEMV ``[1,K]x[K,K]`` latencies vs the WaferLLM measurements (He et al., OSDI'25, Table 6;
    validation rows R358 and R362: WSE-2, fp16, MeshGEMV with a K=2 tree all-reduce, one whole wafer).

    Region: the rows name one WSE-2 and MeshGEMV, which runs on a square mesh; the largest square of the
    catalog's usable grid (750 x 750) is used. Per kernel the fixed launch/synchronisation cost
    ``per_kernel_overhead_cycles`` of ``fabric.yaml`` (fitted to WaferLLM's own rows, so not independent) is
    added to the simulator's cycles; the simulator alone (``sim_only``) is reported too. Clock, per-PE compute,
    SRAM, hop latency and link width come from the catalog.
    """

    rows_in = _validation_rows(GEMV_ROW_IDS)
    wafer = catalog.wafers[target]
    params = mesh_params_from_catalog(wafer, precision="fp16")
    side = min(params.rows, params.cols)
    overhead = fab.load_fabric_constants().per_kernel_overhead_cycles.si
    rows = []
    for row in rows_in:
        rid = row["id"]
        k = int(re.search(r"\[1,(\d+)K\]", row["model"]).group(1)) * 1024
        measured = float(row["value"]) * {"ms": 1e-3, "us": 1e-6, "s": 1.0}[row["unit"]]
        r = gemv(params, k=k, n=k, region=(side, side), dtype_bytes=2)
        sim_s = r.cycles / params.clock_hz
        pred = (r.cycles + overhead) / params.clock_hz
        rows.append({"id": rid, "kernel": f"GEMV [1,{k // 1024}K]x[{k // 1024}K,{k // 1024}K]", "target": target,
                     "region": f"{side}x{side}", "fits": bool(r.fits), "sim_only_us": sim_s * 1e6,
                     "kernel_overhead_us": overhead / params.clock_hz * 1e6, "predicted_us": pred * 1e6,
                     "measured_us": measured * 1e6, "rel_error": pred / measured - 1.0,
                     "sim_only_rel_error": sim_s / measured - 1.0, "within_2x": bool(0.5 <= pred / measured <= 2.0)})
    return rows


__all__ = [
    "FabricCase", "FitResult", "fabric_grid", "simulate_fabric", "closed_form_fabric", "closed_form_kwargs",
    "calibrate_fabric", "stream_cases", "closed_form_stream", "calibrate_stream", "run_calibration", "write_files",
    "check_files", "fit_stats", "gemv_validation", "TOLERANCE_FRAC", "SOURCE_ID",
]
