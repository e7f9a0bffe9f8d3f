"""`wseplan cost MODEL --target T`: TCO per system-hour, $/M tokens, $/training run, J/token, power, space.

The record is documented in docs/cli-output.md. scipy loads only inside the command (the Monte Carlo).
"""
from __future__ import annotations

from typing import Optional

import typer

from ..report.formats import field_unit, fmt_field
from . import options as O
from .output import Rendered, Section, check_format, render


def cost_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b) or a config.json path."),
    target: str = O.target_opt("<hardware key>[x<N>]: cs3x4, h100-sxmx8 … (no count: the fewest that fit)."),
    phase: str = O.phase_opt("serve", "serve (whole requests) | prefill (input side) | decode (output side) | train."),
    precision: str = O.precision_opt(),
    batch: Optional[int] = O.batch_opt("Serve: concurrent requests per replica (without it: the operating point, the "
                                       "cheapest that meets --min-speed; with it and no --tp, the layout is searched "
                                       "again); train: sequences per step."),
    min_speed: Optional[float] = O.min_speed_opt(),
    context: Optional[int] = O.context_opt("Serve: prompt tokens; train: sequence length."),
    output_tokens: Optional[int] = O.output_tokens_opt(),
    train_tokens: Optional[float] = O.train_tokens_opt(),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel degree (GPU), as `time --tp`: prices the "
                                     "layout a `time` or `sweep` row names."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Pipeline-parallel degree (GPU)."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Data-parallel replicas (GPU)."),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="GPU train: sequences per micro-batch, as "
                                              "`time --micro-batch` (a sweep row's micro_batch)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="GPU train: none | selective | full | partial."),
    zero: Optional[int] = typer.Option(None, "--zero", help="GPU train: ZeRO stage 0-3."),
    vpp: Optional[int] = typer.Option(None, "--vpp", help="GPU train: virtual pipeline stages per rank."),
    ep: Optional[int] = O.ep_opt("GPU train, MoE models: expert-parallel degree, as `time --ep`."),
    adp: Optional[int] = O.adp_opt(),
    expert_dispatch: Optional[str] = O.expert_dispatch_opt(),
    expert_overlap: Optional[str] = O.expert_overlap_opt(),
    wafers: Optional[int] = typer.Option(None, "--wafers", help="Wafer serving: wafers per replica (a count splits "
                                         "into replicas of that many, as the operating point's layout num_wafers)."),
    memoryx: Optional[str] = O.memoryx_opt(),
    policy: Optional[str] = O.policy_opt(None, "Wafer train: "),
    cp: Optional[int] = O.cp_opt(),
    pipeline_split: Optional[str] = O.pipeline_split_opt(),
    trainable: Optional[str] = O.trainable_opt(),
    software: Optional[str] = O.software_opt(),
    speculative: Optional[str] = O.speculative_opt(),
    kv_precision: Optional[str] = O.kv_precision_opt(),
    draft_tokens: Optional[int] = O.draft_tokens_opt(),
    acceptance: Optional[float] = O.acceptance_opt(),
    set_: Optional[list[str]] = O.set_opt(),
    prices: Optional[list[str]] = O.prices_opt(),
    uncertainty: int = O.uncertainty_opt(),
    seed: int = O.seed_opt(),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """TCO per system-hour, $/M tokens (input and output), $/training run, J/token, power and rack space.

    Example: wseplan cost llama-3.1-70b --target cs3x4 --batch 8 --context 2048 --uncertainty 2000 ;
    wseplan cost llama-3.1-70b --target h100-sxmx8 --set electricity_usd_per_kwh=0.12 --format json ;
    wseplan cost llama-3.1-70b --target cs3x4 --batch 8 --speculative none ;
    wseplan cost llama-3.1-70b --target h200x16 -p fp8 --batch 32 --tp 1 --dp 16 (a sweep row's layout) ;
    wseplan cost llama-3.1-8b --target h100x64 --phase train --batch 512 --tp 1 --pp 1 --dp 64 --micro-batch 1
    --recompute selective --zero 1 --train-tokens 1e12 (a training sweep row) ;
    wseplan cost llama-3-70b --target h100x8 --phase train --trainable lora --batch 64 --context 4096 --train-tokens 1e9
    """
    from ..costing import cost

    check_format(fmt)
    cat = O.load_catalog(catalog)
    opts = O.with_moe(O.with_kv(O.spec_options(speculative, draft_tokens, acceptance, cat), kv_precision), phase, ep,
                      expert_dispatch, expert_overlap)
    # the training options `time` takes, so that any `time` row can be priced (audit37b F3: a LoRA fine-tune was timed
    # but could not be priced); --memoryx stays cost's own argument
    opts.update(O.training_options(cp, pipeline_split, trainable, None, policy, phase))
    with O.spec_flag_errors():
        res = cost(model, target, phase=phase, precision=precision, batch=batch, context=context,
                   output_tokens=output_tokens, train_tokens=train_tokens, overrides=O.cost_overrides(set_, cat),
                   prices_files=list(prices or []), uncertainty=uncertainty, seed=seed, memoryx_option=memoryx,
                   catalog=cat, min_tokens_per_s_per_user=min_speed, software=software, options=opts or None,
                   layout={k: v for k, v in dict(tp=tp, pp=pp, dp=dp, num_wafers=wafers, micro_batch=micro_batch,
                                                 recompute=recompute, zero_stage=zero, vpp=vpp, ep=ep,
                                                 adp=adp).items()
                           if v is not None} or None)
    render_cost(res, fmt, cat.sources, list(prices or []))


def render_cost(res, fmt: str, sources: dict | None = None, prices: list[str] | None = None) -> None:
    """The cost record: json the record, csv one row, table/md the metrics (P10/P50/P90 when sampled), the
    inputs with their ranges, basis and sources, and the tornado."""
    from ..report.tables import basis_label

    rows = [{"metric": field_unit(m.metric).label, "field": m.metric,
             **{k: fmt_field(m.metric, getattr(m, k)) for k in ("value", "p10", "p50", "p90") if getattr(m, k) is not None}}
            for m in res.metrics]
    params = [{"input": p.name, "value": fmt_field(p.name, p.value), "low": fmt_field(p.name, p.least),
               "high": fmt_field(p.name, p.high), "basis": basis_label(p.basis, p.source, sources),
               "source": ", ".join(p.source)} for p in res.params]
    head = res.headline_metric
    torn = [{"input": r.param, "low": fmt_field(r.param, r.low), "high": fmt_field(r.param, r.high),
             f"{field_unit(head).label} at low": fmt_field(head, r.metric_at_low),
             f"{field_unit(head).label} at high": fmt_field(head, r.metric_at_high), "swing": fmt_field(head, r.swing)}
            for r in res.tornado]
    how = " (searched: operating point)" if res.operating_point else ""
    title = (f"Cost: {res.model} on {res.target} ({res.phase}, batch {res.batch}{how}, context {res.context}, "
             f"prices {res.prices_date})")
    sections = [Section(title, rows), Section("inputs (value, low, high)", params)]
    if torn:
        sections.append(Section(f"sensitivity of {head} (tornado: each input at its low and high)", torn[:12]))
    render(Rendered(record=res.to_record(), csv_rows=[res.to_row()], heading=title, sections=sections,
                    notes=list(res.notes), prices=list(prices or [])), fmt)


def register(app: typer.Typer) -> None:
    app.command("cost")(cost_cmd)
