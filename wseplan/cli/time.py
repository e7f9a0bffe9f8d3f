"""`wseplan time MODEL --target T --phase train|prefill|decode` — step, prefill and decode time on any target.

Calls :func:`wseplan.timing.predict_time`, which dispatches to the wafer models (``wse_time``) or the GPU
models (``gpu_time``). ``--search`` (GPU training) picks the fastest TP x PP x DP x micro-batch x recompute x
ZeRO layout by vectorized enumeration first.
"""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import Rendered, Section, check_format, quantities, render


def time_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b) or a config.json path."),
    target: str = O.target_opt("<hardware key>[x<N>]: wse3, cs3x4, h100x8, a100x1536 …"),
    phase: str = O.phase_opt(),
    precision: str = O.precision_opt(),
    batch: Optional[int] = O.batch_opt("Train: global batch [sequences]; inference: concurrent requests."),
    context: Optional[int] = O.context_opt("Train: sequence length; prefill: prompt; decode: KV length."),
    output_tokens: Optional[int] = O.output_tokens_opt("Decode: generate a whole request of N tokens (e2e)."),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel degree (GPU)."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel degree (GPU)."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Data-parallel degree (GPU train: default count/(tp*pp*cp))."),
    cp: Optional[int] = typer.Option(None, "--cp", help="Context-parallel degree (GPU train)."),
    vpp: Optional[int] = typer.Option(None, "--vpp", help="Virtual pipeline stages per rank (interleaved schedule)."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Sequences per micro-batch (GPU train)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="GPU train: none | selective | full."),
    zero: Optional[int] = typer.Option(None, "--zero", help="GPU train: ZeRO stage 0-3."),
    search: bool = typer.Option(False, "--search", help="GPU train: search the fastest layout that fits first."),
    train_tokens: Optional[float] = O.train_tokens_opt("Train: also report wall time and GPU-hours for N tokens."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """How long a training step, a prefill or a decoded token takes on TARGET, and what binds.

    Example: wseplan time gpt-3-175b --target a100x1536 --phase train --batch 1536 --context 2048 --tp 8 --pp 12 ;
    wseplan time llama-3-8b --target h100x1 --phase decode --batch 64 --context 2048 --output-tokens 512
    """
    from ..errors import InputError
    from ..fit import resolve_model
    from ..targets import parse_target
    from ..timing import predict_time

    check_format(fmt)
    cat = O.load_catalog(catalog)
    m = resolve_model(model, cat)
    t = parse_target(target, cat)
    opts = {}
    if t.kind == "gpu":
        opts = {k: v for k, v in dict(tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, context_parallel=cp,
                                      virtual_pipeline=vpp, micro_batch=micro_batch, recompute=recompute,
                                      zero_stage=zero).items() if v is not None}
        if phase != "train":
            bad = [k for k in ("data_parallel", "context_parallel", "virtual_pipeline", "micro_batch", "recompute", "zero_stage")
                   if k in opts and k != "data_parallel"]
            if bad:
                raise InputError(f"--{bad[0].replace('_', '-')}: applies to --phase train only")
    elif any(v is not None for v in (tp, pp, dp, cp, vpp, micro_batch, recompute, zero)) or search:
        raise InputError("--tp/--pp/--dp/--cp/--vpp/--micro-batch/--recompute/--zero/--search: GPU targets only")
    searched = None
    if search:
        if t.kind != "gpu" or phase != "train":
            raise InputError("--search: applies to GPU training (--phase train)")
        if not t.count:
            raise InputError("--search: give the GPU count in the target, e.g. h100x1024")
        from ..analytic.gpu_time import search_layouts

        seq = context or int(cat.defaults.default_context_tokens.si)
        gb = batch or t.count
        searched = search_layouts(m, t, cat, num_gpus=t.count, global_batch=gb, seq_len=seq, precision=precision)
        b = searched["best"]
        opts = {"tensor_parallel": b["tensor_parallel"], "pipeline_parallel": b["pipeline_parallel"],
                "data_parallel": b["data_parallel"], "virtual_pipeline": b["virtual_pipeline"],
                "micro_batch": b["micro_batch"], "recompute": b["recompute"], "zero_stage": b["zero_stage"]}
        batch, context = gb, seq
    if train_tokens is not None:
        if phase != "train":
            raise InputError("--train-tokens: applies to --phase train")
        if not train_tokens > 0:
            raise InputError(f"--train-tokens: must be > 0, got {train_tokens!r}")
        if t.kind == "gpu":
            opts["train_tokens"] = train_tokens
    res = predict_time(m, t, phase=phase, precision=precision, batch=batch, context=context,
                       output_tokens=output_tokens, catalog=cat, **opts)
    extra = {}
    if train_tokens is not None and res.step_s and res.tokens_per_s:
        secs = train_tokens / res.tokens_per_s
        extra = {"train_tokens": train_tokens, "time_to_train_s": secs, "gpu_hours": secs * res.num_devices / 3600.0}
    rec = res.to_record()
    rec.update(extra)
    row = res.to_row()
    row.update(extra)
    if searched:
        rec["search"] = {k: searched[k] for k in ("num_evaluated", "num_feasible", "num_infeasible")}
        row.update({f"search_{k}": searched[k] for k in ("num_evaluated", "num_feasible", "num_infeasible")})
    render(Rendered(record=rec, csv_rows=[row], heading=f"Time: {res.model} on {res.target} ({res.phase})",
                    sections=[Section(f"{res.model} on {res.target}: {res.phase}", quantities(row))], notes=list(res.notes)),
           fmt)

def register(app: typer.Typer) -> None:
    app.command("time")(time_cmd)
