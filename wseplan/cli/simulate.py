"""`wseplan simulate gemv|gemm|reduce|broadcast|allreduce|layer|stream` — the numpy kernel simulator."""
from __future__ import annotations

from typing import Optional

import typer

from ..errors import InputError
from . import options as O
from .output import check_format, quantities, table_out

sim_app = typer.Typer(help="Run the vectorized wafer/MemoryX kernel simulator (cycles, µs, utilisation). "
                           "Example: wseplan simulate gemv --k 8192 --n 8192 ; wseplan simulate stream gpt3-175b "
                           "--batch 64",
                      no_args_is_help=True)

_TARGET = O.target_opt("A wafer: wse2 or wse3 (also cs2, cs3).", default="wse3")
_REGION = typer.Option(None, "--region", help="PE region RxC (rows x cols); default the whole usable grid.")
_PREC = O.precision_opt("fp16", "fp16 | bf16 | fp32 (sets FLOP/cycle and bytes/element).")
_FMT = O.format_opt()
_CAT = O.catalog_opt()
_CLOCK = typer.Option(None, "--clock-hz", help="Override the PE clock [Hz] (catalog 1.1e9; Cerebras's csl-examples timing code uses 0.85e9).")


def _params(target: str, precision: str, catalog, clock_hz):
    from ..sim.catalog_params import mesh_params_from_catalog
    from ..targets import parse_target

    cat = O.load_catalog(catalog)
    t = parse_target(target, cat)
    if t.kind != "wafer":
        raise InputError(f"--target: the simulator models wafers; {target!r} is a GPU (use wse2 or wse3)")
    if t.count is not None and t.count != 1:
        raise InputError(f"--target: the simulator runs one wafer's mesh; give {t.key} without a count (got {target!r})")
    if precision not in ("fp16", "bf16", "fp32"):
        raise InputError(f"--precision: the simulator supports fp16, bf16 or fp32, got {precision!r}")
    over = {} if clock_hz is None else {"clock_hz": clock_hz}
    if clock_hz is not None and not clock_hz > 0:
        raise InputError(f"--clock-hz: must be > 0, got {clock_hz!r}")
    return cat, t, mesh_params_from_catalog(t.device, precision=precision, **over)


def _region(text: Optional[str]):
    if text is None:
        return None
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) <= 9 and int(p) > 0 for p in parts):
        raise InputError(f"--region: expected RxC with positive integers (e.g. 360x360), got {text!r}")
    return int(parts[0]), int(parts[1])


def _dtype_bytes(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def _out(res, fmt: str, title: str, extra: dict | None = None) -> None:
    check_format(fmt)
    row = dict(extra or {})
    r = res.to_row()
    row.update({"cycles": r["cycles"], "time_us": r["time_s"] * 1e6})
    row.update({k: v for k, v in r.items() if k not in ("cycles", "time_s")})
    table_out(quantities(row) if fmt == "table" else [row], fmt, title=title)


@sim_app.command("gemv")
def gemv_cmd(k: int = typer.Option(..., "--k", help="Input length K [elements]."),
             n: int = typer.Option(..., "--n", help="Output length N [elements]."),
             target: str = _TARGET, region: Optional[str] = _REGION, precision: str = _PREC,
             reduce_algo: Optional[str] = typer.Option(None, "--reduce", help="chain | tree | ktree (default: the fastest the colours allow)."),
             clock_hz: Optional[float] = _CLOCK, fmt: str = _FMT, catalog: Optional[list[str]] = _CAT) -> None:
    """y[1,N] = x[1,K] · W[K,N] with W tiled over a region. Example: wseplan simulate gemv --k 16384 --n 16384 --target wse2 --region 720x720"""
    from ..sim import ReduceAlgo, gemv

    _, t, p = _params(target, precision, catalog, clock_hz)
    ra = None
    if reduce_algo is not None:
        if reduce_algo not in ("chain", "tree", "ktree"):
            raise InputError(f"--reduce: use chain, tree or ktree, got {reduce_algo!r}")
        ra = ReduceAlgo(reduce_algo)
    res = gemv(p, k=k, n=n, region=_region(region), dtype_bytes=_dtype_bytes(precision), reduce_algo=ra)
    _out(res, fmt, f"GEMV {k}x{n} on {t.key}", {"kernel": "gemv", "k": k, "n": n, "target": t.key})


@sim_app.command("gemm")
def gemm_cmd(m: int = typer.Option(..., "--m", help="Rows of X [elements]."),
             k: int = typer.Option(..., "--k", help="Inner length K (columns of X, rows of W) [elements]."),
             n: int = typer.Option(..., "--n", help="Columns of W and of the output [elements]."),
             target: str = _TARGET, region: Optional[str] = _REGION, precision: str = _PREC,
             clock_hz: Optional[float] = _CLOCK, fmt: str = _FMT, catalog: Optional[list[str]] = _CAT) -> None:
    """Y[M,N] = X[M,K] · W[K,N], weights stationary. Example: wseplan simulate gemm --m 64 --k 4096 --n 4096 --region 256x256"""
    from ..sim import gemm

    _, t, p = _params(target, precision, catalog, clock_hz)
    res = gemm(p, m=m, k=k, n=n, region=_region(region), dtype_bytes=_dtype_bytes(precision))
    _out(res, fmt, f"GEMM {m}x{k}x{n} on {t.key}", {"kernel": "gemm", "m": m, "k": k, "n": n, "target": t.key})


@sim_app.command("reduce")
def reduce_cmd(nbytes: float = typer.Option(..., "--bytes", help="Vector size per PE [bytes]."),
               axis: str = typer.Option("row", "--axis", help="row | col"),
               algo: str = typer.Option("chain", "--algo", help="chain | tree | ktree (two-level K-tree)"),
               target: str = _TARGET, region: Optional[str] = _REGION, precision: str = _PREC,
               clock_hz: Optional[float] = _CLOCK, fmt: str = _FMT, catalog: Optional[list[str]] = _CAT) -> None:
    """Reduce a vector along rows or columns. Example: wseplan simulate reduce --bytes 4096 --region 1x512 --algo tree"""
    from ..sim import ReduceAlgo, reduce

    if algo not in ("chain", "tree", "ktree"):
        raise InputError(f"--algo: use chain, tree or ktree, got {algo!r}")
    if axis not in ("row", "col"):
        raise InputError(f"--axis: use row or col, got {axis!r}")
    _, t, p = _params(target, precision, catalog, clock_hz)
    res = reduce(p, nbytes=nbytes, region=_region(region), axis=axis, algo=ReduceAlgo(algo), dtype_bytes=_dtype_bytes(precision))
    _out(res, fmt, f"reduce {nbytes:g} B on {t.key}", {"kernel": "reduce", "bytes": nbytes, "target": t.key})


@sim_app.command("broadcast")
def broadcast_cmd(nbytes: float = typer.Option(..., "--bytes", help="Message size [bytes]."),
                  axis: str = typer.Option("row", "--axis", help="row | col"),
                  algo: str = typer.Option("chain", "--algo", help="chain | store_forward | tree"),
                  target: str = _TARGET, region: Optional[str] = _REGION, precision: str = _PREC,
                  clock_hz: Optional[float] = _CLOCK, fmt: str = _FMT, catalog: Optional[list[str]] = _CAT) -> None:
    """Broadcast along rows or columns. Example: wseplan simulate broadcast --bytes 8192 --region 1x750"""
    from ..sim import BroadcastAlgo, broadcast

    if algo not in ("chain", "store_forward", "tree"):
        raise InputError(f"--algo: use chain, store_forward or tree, got {algo!r}")
    if axis not in ("row", "col"):
        raise InputError(f"--axis: use row or col, got {axis!r}")
    _, t, p = _params(target, precision, catalog, clock_hz)
    res = broadcast(p, nbytes=nbytes, region=_region(region), axis=axis, algo=BroadcastAlgo(algo))
    _out(res, fmt, f"broadcast {nbytes:g} B on {t.key}", {"kernel": "broadcast", "bytes": nbytes, "target": t.key})


@sim_app.command("allreduce")
def allreduce_cmd(nbytes: float = typer.Option(..., "--bytes", help="Vector size per PE [bytes]."),
                  target: str = _TARGET, region: Optional[str] = _REGION, precision: str = _PREC,
                  clock_hz: Optional[float] = _CLOCK, fmt: str = _FMT, catalog: Optional[list[str]] = _CAT) -> None:
    """All-reduce across a region. Example: wseplan simulate allreduce --bytes 256 --region 64x64"""
    from ..sim import allreduce

    _, t, p = _params(target, precision, catalog, clock_hz)
    res = allreduce(p, nbytes=nbytes, region=_region(region), dtype_bytes=_dtype_bytes(precision))
    _out(res, fmt, f"all-reduce {nbytes:g} B on {t.key}", {"kernel": "allreduce", "bytes": nbytes, "target": t.key})


@sim_app.command("layer")
def layer_cmd(model: str = typer.Argument("llama-3-8b", help="Catalog transformer (architecture of one block)."),
              context: int = O.context_opt("Tokens in the KV cache.", default=4096),
              target: str = _TARGET, region: Optional[str] = _REGION, precision: str = _PREC,
              clock_hz: Optional[float] = _CLOCK, fmt: str = _FMT, catalog: Optional[list[str]] = _CAT) -> None:
    """One transformer decode layer (batch 1). Example: wseplan simulate layer llama-3-8b --target wse2 --region 360x360"""
    from ..catalog.schema import Model
    from ..fit import resolve_model
    from ..sim import decode_layer
    from ..workload import check_positive_int

    cat, t, p = _params(target, precision, catalog, clock_hz)
    check_positive_int(context, "context")
    m = resolve_model(model, cat)
    if not isinstance(m, Model):
        raise InputError("model: the layer simulator needs a transformer, not a layer-list model")
    # the simulator runs one dense block: an MoE block is its active experts side by side (and its shared experts),
    # as the closed forms take it; a windowed block attends its window; MLA is not simulated (said in the record)
    d_ff, what = m.d_ff, "a dense block"
    if m.num_experts > 1:
        d_ff = m.d_ff * m.experts_per_token + m.num_shared_experts * (m.shared_expert_d_ff or m.d_ff)
        what = (f"an MoE block: {m.experts_per_token} of {m.num_experts} experts"
                + (f" and {m.num_shared_experts} shared" if m.num_shared_experts else "") + f" side by side (width {d_ff:,})")
    attended = min(context, m.sliding_window) if m.sliding_window else context
    if m.sliding_window and attended < context:
        mixed = bool(m.layer_types) and "full_attention" in m.layer_types
        what += (f"; attention over its {m.sliding_window:,}-token window"
                 + (" (a windowed block; the model's full-attention blocks attend the whole context)" if mixed else ""))
    if getattr(m, "attention", None) == "mla":
        what += "; MLA attention simulated as grouped-query attention of its heads (its latent is not modelled)"
    res = decode_layer(p, d_model=m.d_model, n_heads=m.num_heads, n_kv_heads=m.num_kv_heads, d_ff=d_ff,
                       context=attended, region=_region(region), gated_mlp=m.gated_mlp, dtype_bytes=_dtype_bytes(precision))
    extra = {"kernel": "decode_layer", "model": m.name, "context": context, "target": t.key, "simulated": what}
    extra.update({f"part_{k}_cycles": v for k, v in res.part_cycles().items()})
    _out(res, fmt, f"decode layer of {m.name} on {t.key}", extra)


@sim_app.command("stream")
def stream_cmd(model: str = typer.Argument(..., help="Catalog model, config.json or layer list."),
               target: str = _TARGET,
               batch: int = O.batch_opt("Sequences per step.", default=8),
               context: int = O.context_opt("Tokens per sequence.", default=2048),
               prefetch: int = typer.Option(1, "--prefetch", help="Prefetch buffers [layers] (0 = no overlap)."),
               bandwidth: Optional[float] = typer.Option(None, "--bandwidth", help="MemoryX->wafer bytes/s (default: catalog)."),
               systems: int = typer.Option(1, "--systems", help="Data-parallel systems behind SwarmX."),
               precision: str = O.precision_opt(),
               fmt: str = _FMT, catalog: Optional[list[str]] = _CAT) -> None:
    """Weight streaming of one training step (MemoryX -> wafer), the wafer computing at the achieved rate the planner
    uses (peak x the stream calibration's compute efficiency). Example: wseplan simulate stream gpt3-175b --batch 64"""
    import numpy as np

    from ..analytic.stream import load_stream_constants
    from ..fit import build_workload, resolve_model
    from ..sim import simulate_stream
    from ..targets import parse_target
    from ..workload import check_positive_int

    check_format(fmt)
    cat = O.load_catalog(catalog)
    t = parse_target(target, cat)
    if t.kind != "wafer":
        raise InputError(f"--target: weight streaming runs on wafers; {target!r} is a GPU")
    from ..catalog.precision import device_rates, training_refusal

    why = training_refusal(getattr(t.device, "name", t.key), device_rates(t.device), precision)
    if why:  # audit31b M3: fp8/fp4 ran silently at bf16's numbers; `stream` refuses them the same way
        raise InputError(f"--{why}")
    check_positive_int(systems, "systems")
    if prefetch < 0:
        raise InputError(f"--prefetch: must be >= 0, got {prefetch}")
    m = resolve_model(model, cat)
    w = build_workload(m, cat, precision=precision, phase="train", batch=batch, context=context)
    sysm = cat.system_for_wafer(t.key)
    mx = cat.memoryx[sysm.memoryx]
    sw = cat.swarmx[sysm.swarmx]
    bw = mx.dram_stream_bandwidth_bytes_per_s.si if bandwidth is None else bandwidth
    if not bw > 0:
        raise InputError(f"--bandwidth: must be > 0 bytes/s, got {bandwidth!r}")
    # the achieved rate the planner's weight-streaming model and the calibration use (peak x compute efficiency of
    # catalogs/calibration/stream.yaml), not the dense peak
    rate = t.device.peak_flop_per_s(precision) * load_stream_constants().compute_efficiency_frac.si
    f = w.flop_per_token
    res = simulate_stream(layer_weight_bytes=w.weight_bytes, fwd_flop_per_token=f, bwd_flop_per_token=2 * f,
                          tokens_per_step=w.tokens_per_step, compute_flop_per_s=rate, link_bandwidth_bytes_per_s=bw,
                          link_latency_s=mx.link_latency_s.si, prefetch_layers=prefetch, num_systems=systems,
                          swarmx_mode="tree", swarmx_fanout=int(sw.fanout.si), swarmx_hop_latency_s=sw.per_level_latency_s.si)
    row = {"model": w.model_name, "target": t.key, "batch": batch, "context": context, "tokens_per_step": w.tokens_per_step,
           "prefetch_layers": prefetch, "bandwidth_bytes_per_s": bw, "compute_flop_per_s": rate, "systems": systems,
           "step_time_s": float(np.asarray(res.step_time_s)), "compute_time_s": float(np.asarray(res.compute_time_s)),
           "stall_time_s": float(np.asarray(res.stall_time_s)), "utilization_frac": float(np.asarray(res.utilization_frac)),
           "bound": str(np.asarray(res.bound))}
    table_out(quantities(row) if fmt == "table" else [row], fmt, title="weight stream (simulated)")


def register(app: typer.Typer) -> None:
    app.add_typer(sim_app, name="simulate")
