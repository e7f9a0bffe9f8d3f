"""`wseplan time MODEL --target T --phase train|prefill|decode` — step, prefill and decode time on any target.

Calls :func:`wseplan.timing.predict_time`, a view of the planning chain (:func:`wseplan.plan.plan`). Without a
layout option the layout is searched (the fastest that fits); a configuration that does not fit (no layout, or the
given one) is refused in one line naming what binds and the fix (exit 2), as ``cost`` refuses it; ``fit`` shows its
memory.
"""
from __future__ import annotations

from typing import Optional

import typer

from ..errors import InputError
from . import options as O
from .output import Rendered, Section, check_format, quantities, render


def time_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b) or a config.json path."),
    target: str = O.target_opt("<hardware key>[x<N>]: wse3, cs3x4, h100x8, a100x1536 …"),
    phase: str = O.phase_opt(help="train | prefill | decode | serve (whole requests)"),
    precision: str = O.precision_opt(),
    software: Optional[str] = O.software_opt(),
    batch: Optional[int] = O.batch_opt("Train: global batch [sequences]; inference: concurrent requests "
                                      "per replica (a layout of several data-parallel replicas holds this many in "
                                      "each; throughput counts them all)."),
    context: Optional[int] = O.context_opt("Train: sequence length; prefill: prompt; decode: KV length."),
    output_tokens: Optional[int] = O.output_tokens_opt("Serve: generated tokens per request (decode with -o = serve)."),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel degree (GPU)."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel degree (GPU)."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Data-parallel degree (GPU train: default count/(tp*pp*cp))."),
    cp: Optional[int] = O.cp_opt(),
    vpp: Optional[int] = typer.Option(None, "--vpp", help="Virtual pipeline stages per rank (interleaved schedule)."),
    ep: Optional[int] = O.ep_opt(),
    adp: Optional[int] = O.adp_opt(),
    expert_dispatch: Optional[str] = O.expert_dispatch_opt(),
    expert_overlap: Optional[str] = O.expert_overlap_opt(),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="Sequences per micro-batch (GPU train); "
                                              "wafer train: sequences per pass per system, as `stream --micro-batch`."),
    memoryx: Optional[str] = O.memoryx_opt(),
    policy: Optional[str] = O.policy_opt(None, "Wafer train: "),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="GPU train: none | selective | full | partial (the fewest whole layers per stage that fit, Megatron-LM block recompute)."),
    zero: Optional[int] = typer.Option(None, "--zero", help="GPU train: ZeRO stage 0-3."),
    pipeline_split: Optional[str] = O.pipeline_split_opt(),
    trainable: Optional[str] = O.trainable_opt(),
    speculative: Optional[str] = O.speculative_opt(),
    kv_precision: Optional[str] = O.kv_precision_opt(),
    draft_tokens: Optional[int] = O.draft_tokens_opt(),
    acceptance: Optional[float] = O.acceptance_opt(),
    search: bool = typer.Option(False, "--search", help="Search the layout (the default whenever no layout option is given)."),
    train_tokens: Optional[float] = O.train_tokens_opt("Train: also report wall time and GPU-hours for N tokens."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """How long a training step, a prefill or a decoded token takes on TARGET, and what binds.

    Example: wseplan time gpt-3-175b --target a100x1536 --phase train --batch 1536 --context 2048 --tp 8 --pp 12 ;
    wseplan time llama-3-8b --target h100x1 --phase decode --batch 64 --context 2048 --output-tokens 512 ;
    wseplan time llama-2-70b --target h200x1 --precision fp8 --batch 64 --software gpu-trtllm-2023 ;
    wseplan time llama-3.1-8b --target cs3x1 --speculative none ;
    wseplan time qwen3-30b-a3b --target h100x16 --phase train --batch 1024 --context 4096 -p fp8 --tp 1 --dp 16 --ep 16 ;
    wseplan time deepseek-v3 --target h200x8 -p fp8 --batch 256 --context 32768 --adp 8 --speculative mtp
    """
    from ..timing import predict_time

    check_format(fmt)
    cat = O.load_catalog(catalog)
    lay = {k: v for k, v in dict(tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, virtual_pipeline=vpp,
                                  micro_batch=micro_batch, expert_parallel=ep, attention_data_parallel=adp).items()
           if v is not None}
    opts = {k: v for k, v in dict(recompute=recompute, zero_stage=zero).items() if v is not None}
    opts.update(O.training_options(cp, pipeline_split, trainable, memoryx, policy, phase))
    opts.update(O.with_kv(O.spec_options(speculative, draft_tokens, acceptance, cat), kv_precision))
    opts = O.with_moe(opts, phase, ep, expert_dispatch, expert_overlap)
    # (wafer training takes stream's options, --memoryx and --policy: audit32c F5)
    if search and lay:
        raise InputError("--search: the layout is searched whenever none is given; drop --search or the layout options")
    if train_tokens is not None:
        if phase != "train":
            raise InputError("--train-tokens: applies to --phase train")
        if not train_tokens > 0:
            raise InputError(f"--train-tokens: must be > 0, got {train_tokens!r}")
    with O.spec_flag_errors():
        res = predict_time(model, target, phase=phase, precision=precision, batch=batch, context=context,
                           output_tokens=output_tokens, catalog=cat, software=software, **lay, **opts)
    if not res.fits:  # an infeasible plan is an error, as cost's (audit30a M2): one line, exit 2, no record
        why = next((n for n in res.notes if n.startswith("does not fit")), "does not fit")
        adp = next((f"; {n}" for n in res.notes if "data-parallel attention (--adp" in n), "")  # as cost's fix says
        other = None
        if lay:  # does a searched layout fit? (review37 M2: the pointer was given where none does)
            with O.spec_flag_errors():
                other = predict_time(model, target, phase=phase, precision=precision, batch=batch, context=context,
                                     output_tokens=output_tokens, catalog=cat, software=software, **opts)
        raise InputError(f"{res.model} on {res.target} ({res.phase}, batch {res.batch}, context {res.context}) {why}{adp}"
                         + ("; without the layout options `wseplan time` and `wseplan fit` choose a layout that fits"
                            if other is not None and other.fits else "; `wseplan fit` shows the memory"))
    extra = {}
    if train_tokens is not None and res.step_s and res.tokens_per_s:
        from ..analytic.cost import time_to_train
        from ..pricing import job_devices, run_goodput

        good = float(run_goodput(res.device_kind, cat, job_devices(res.layout or {}, res.num_devices)))
        secs, hours = time_to_train(step_s=res.step_s, tokens_per_step=res.tokens_per_s * res.step_s,
                                    train_tokens=train_tokens, num_gpus=res.num_devices, goodput=good)
        secs, hours = float(secs), float(hours)
        # device-hours in every record; gpu_hours only where the devices are GPUs (on wafers they are system-hours)
        extra = {"train_tokens": train_tokens, "time_to_train_s": secs, "device_hours": hours, "goodput_frac": good,
                 **({"gpu_hours": hours} if res.device_kind == "gpu" else {})}
    notes = list(res.notes)
    if extra and res.device_kind == "wafer":
        from ..pricing import no_wafer_interruptions_note

        notes.append(no_wafer_interruptions_note(cat))
    rec = res.to_record()
    rec.update(extra, notes=notes)
    row = res.to_row()
    row.update(extra)
    render(Rendered(record=rec, csv_rows=[row], heading=f"Time: {res.model} on {res.target} ({res.phase})",
                    sections=[Section(f"{res.model} on {res.target}: {res.phase}", quantities(row))], notes=notes),
           fmt)

def register(app: typer.Typer) -> None:
    app.command("time")(time_cmd)

