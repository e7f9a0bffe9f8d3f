"""`wseplan fit MODEL --target T`: does the model fit, devices needed, what binds, headroom, the layer stages."""
from __future__ import annotations

from typing import Optional

import typer

from ..report.formats import fmt_bool, fmt_bytes, fmt_num, layer_range
from . import options as O
from .output import Rendered, Section, check_format, render


def fit(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b), a config.json path, or a layer-list YAML."),
    target: str = O.target_opt(),
    precision: str = O.precision_opt(),
    phase: str = O.phase_opt(help="train | prefill | decode | serve"),
    batch: Optional[int] = O.batch_opt(),
    context: Optional[int] = O.context_opt(),
    output_tokens: Optional[int] = O.output_tokens_opt("Serve: output tokens per request, whose KV cache the fit "
                                                       "reserves beside the prompt's (default 256).", short=False),
    reserve: Optional[float] = O.reserve_opt(),
    zero: Optional[int] = typer.Option(None, "--zero", help="GPU training: ZeRO stage 0-3 (default: searched)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="GPU training: none | selective | full | partial (fewest whole layers per stage that fit; default: searched)."),
    memoryx: Optional[str] = O.memoryx_opt(),
    trainable: Optional[str] = typer.Option(
        None, "--trainable", help="GPU train: full (default: every weight) | lora (frozen base weights, adapters on the "
        "attention projections) | lora-all (adapters on every linear layer), as `wseplan time --trainable`."),
    software: Optional[str] = O.software_opt(),
    speculative: Optional[str] = O.speculative_opt(),
    kv_precision: Optional[str] = O.kv_precision_opt(),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Does MODEL fit TARGET? Devices needed, what binds, headroom, and the layer stages.

    Example: wseplan fit llama-70b --target wse3 ; wseplan fit llama-405b --target h100x16 --format json ;
    wseplan fit llama-70b --target cs3x4 --speculative none ;
    wseplan fit llama-3.1-70b --target h100x8 --phase train --batch 16 --context 4096 --trainable lora
    """
    from ..fit import fit as fit_fn

    check_format(fmt)
    cat = O.load_catalog(catalog)
    spec = O.spec_options(speculative, None, None, cat).get("speculative")
    with O.spec_flag_errors():
        res = fit_fn(model, target, precision=precision, phase=phase, batch=batch, context=context,
                     output_tokens=output_tokens, reserve=reserve,
                     catalog=cat, zero_stage=zero, recompute=recompute, memoryx_option=memoryx, software=software,
                     speculative=spec, kv_precision=kv_precision, trainable=trainable)
    render_fit(res, fmt)


def render_fit(res, fmt: str) -> None:
    """The fit record: json the record, csv one row, table/md a summary and the layer stages."""
    summary = [("fits", fmt_bool(res.fits)), ("devices", fmt_num(res.num_devices))]
    # a GPU pipeline's stages differ: its all-device totals are the fullest stage's per GPU x the GPUs, an upper bound
    # (audit28d L1, audit28a L2: 'weights (all devices)' read as the model's weights)
    staged = res.family == "gpu" and len(res.stages) > 1
    for k in ("capacity_bytes", "weights_bytes", "kv_cache_bytes", "activation_bytes", "optimizer_bytes", "total_bytes",
              "headroom_bytes", "shortfall_bytes"):
        label = k.replace("_bytes", "").replace("_", " ")
        label += (" (per device)" if k in ("capacity_bytes", "headroom_bytes", "shortfall_bytes") else
                  " (all devices, at most: the fullest stage's x devices)" if staged else " (all devices)")
        summary.append((label, fmt_bytes(getattr(res, k))))
    summary += [("binding", res.binding)]
    if res.max_tokens_in_flight is None:
        summary.append(("max tokens in flight", "unbounded (nothing the layout holds grows with them)"))
    elif res.fits and not res.max_tokens_in_flight and not res.kv_cache_bytes:  # audit29a L3: not "0" where it fits
        summary.append(("max tokens in flight", "– (no KV cache to bound them: a training step, or a model without "
                                                "attention)"))
    else:
        summary.append(("max tokens in flight", fmt_num(res.max_tokens_in_flight)))
    if res.layout:
        summary.append(("layout", " ".join(f"{k}={v}" for k, v in res.layout.items())))
    if res.memoryx:
        mx = res.memoryx
        summary.append(("MemoryX", f"{mx.option}: needs {fmt_bytes(mx.required_bytes)} of {fmt_bytes(mx.capacity_bytes)}"))
    if res.streaming:
        s = res.streaming
        summary.append(("batch whose forward hides the weight stream",
                        f">= {fmt_num(s.min_batch_compute_bound)} ({fmt_num(round(s.min_tokens_compute_bound))} tokens)"))
        summary.append(("batch the wafer holds", "unbounded (no activations to hold)" if s.max_tokens_on_wafer is None
                        else f"<= {fmt_num(s.max_batch_on_wafer)} ({fmt_num(round(s.max_tokens_on_wafer))} tokens)"))
    stages = [{"device": s.device, "layers": layer_range(s), "embedding": fmt_bool(s.embedding),
               "lm_head": fmt_bool(s.lm_head), "bytes": s.bytes} for s in res.stages]
    notes = list(res.notes)
    if staged:  # a row is a pipeline stage of tp GPUs; the model gives the fullest stage's memory, not each one's
        tp = (res.layout or {}).get("tensor_parallel", 1)
        stages = [{"stage": r["device"], **{k: v for k, v in r.items() if k not in ("device", "bytes")}} for r in stages]
        notes.append(f"each stage is {tp} GPU{'s' if tp != 1 else ''} (tensor parallel); each GPU needs at most the "
                     f"fullest stage's {fmt_bytes(res.stages[0].bytes)}")
    shown = stages[:64] + ([{"stage" if staged else "device": "…", "layers": f"{len(stages) - 64} more"}]
                           if len(stages) > 64 else [])
    head = f"{res.model} on {res.target} ({res.precision}, {res.phase}, batch {res.batch}, context {res.context})"
    render(Rendered(record=res.to_record(), csv_rows=[res.to_row()], heading=f"Fit: {head}",
                    sections=[Section(head, [{"quantity": a, "value": b} for a, b in summary]),
                              Section("stages (0-based inclusive transformer blocks)", shown)],
                    notes=notes), fmt)


def register(app: typer.Typer) -> None:
    app.command("fit")(fit)
