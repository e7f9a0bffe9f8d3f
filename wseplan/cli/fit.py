"""`wseplan fit MODEL --target T`: does the model fit, devices needed, what binds, headroom, the layer stages."""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import check_format, emit, notes_out, print_table, to_markdown


def fit(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b), a config.json path, or a layer-list YAML."),
    target: str = O.target_opt(),
    precision: str = O.precision_opt(),
    phase: str = O.phase_opt(),
    batch: Optional[int] = O.batch_opt(),
    context: Optional[int] = O.context_opt(),
    reserve: Optional[float] = O.reserve_opt(),
    zero: int = typer.Option(1, "--zero", help="GPU training: ZeRO stage 0-3."),
    recompute: str = typer.Option("selective", "--recompute", help="GPU training: none | selective | full."),
    memoryx: Optional[str] = O.memoryx_opt(),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Does MODEL fit TARGET? Devices needed, what binds, headroom, and the layer stages.

    Example: wseplan fit llama-70b --target wse3 ; wseplan fit llama-405b --target h100x16 --format json
    """
    from ..fit import fit as fit_fn

    check_format(fmt)
    cat = O.load_catalog(catalog)
    res = fit_fn(model, target, precision=precision, phase=phase, batch=batch, context=context, reserve=reserve,
                 catalog=cat, zero_stage=zero, recompute=recompute, memoryx_option=memoryx)
    render_fit(res, fmt)


def render_fit(res, fmt: str) -> None:
    from ..report import formats as F

    if fmt == "json":
        emit(F.to_json(res.to_record()))
        return
    stage_rows = [s.model_dump() for s in res.stages]
    if fmt == "csv":
        emit(F.to_csv([res.to_row()]))
        return
    summary = res.to_row()
    if fmt == "md":
        emit(f"## Fit: {res.model} on {res.target}\n\n" + to_markdown([summary]) + "\n### Stages\n\n" + to_markdown(stage_rows))
        return
    from rich.table import Table

    t = Table(title=f"{res.model} on {res.target}", caption=f"{res.precision}, {res.phase}, batch {res.batch}, context {res.context}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    verdict = "[green]yes[/green]" if res.fits else "[red]no[/red]"
    t.add_row("fits", verdict)
    t.add_row("devices", str(res.num_devices))
    for k in ("capacity_bytes", "weights_bytes", "kv_cache_bytes", "activation_bytes", "optimizer_bytes", "total_bytes",
              "headroom_bytes", "shortfall_bytes"):
        label = k.replace("_bytes", "") + (" (per device)" if k in ("capacity_bytes", "headroom_bytes", "shortfall_bytes") else "")
        t.add_row(label, F.fmt_bytes(getattr(res, k)))
    t.add_row("binding", res.binding)
    t.add_row("max tokens in flight", f"{res.max_tokens_in_flight:,}")
    if res.layout:
        lo = res.layout
        t.add_row("layout", f"TP{lo.tensor_parallel} PP{lo.pipeline_parallel} DP{lo.data_parallel} ZeRO-{lo.zero_stage} recompute={lo.recompute}")
    if res.memoryx:
        mx = res.memoryx
        t.add_row("MemoryX", f"{mx.option}: needs {F.fmt_bytes(mx.required_bytes)} of {F.fmt_bytes(mx.capacity_bytes)}")
    if res.streaming:
        s = res.streaming
        t.add_row("batch for compute-bound streaming", f">= {s.min_batch_compute_bound} ({s.min_tokens_compute_bound:,.0f} tokens)")
        t.add_row("batch the wafer holds", f"<= {s.max_batch_on_wafer} ({s.max_tokens_on_wafer:,.0f} tokens)")
    st = Table(title="stages (0-based inclusive transformer blocks)")
    for c in ("device", "layers", "embedding", "lm_head", "bytes"):
        st.add_column(c)
    for s in res.stages[:64]:
        st.add_row(str(s.device), f"{s.first_layer}-{s.last_layer}", "yes" if s.embedding else "", "yes" if s.lm_head else "", F.fmt_bytes(s.bytes))
    if len(res.stages) > 64:
        st.add_row("…", f"{len(res.stages) - 64} more", "", "", "")
    print_table(t, st)
    notes_out(res.notes)


def register(app: typer.Typer) -> None:
    app.command("fit")(fit)
