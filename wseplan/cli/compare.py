"""`wseplan compare MODEL --targets T1,T2,...`: fit, time, throughput, bottleneck, power and cost side by side.

The record is documented in docs/cli-output.md.
"""
from __future__ import annotations

from typing import Optional

import typer

from ..errors import InputError
from . import options as O
from .output import check_format, emit, json_out, notes_out, print_report_table


def compare_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias, e.g. llama-3-70b."),
    targets: str = O.targets_opt("wse3,cs3x4,h100x8,h200x8,b200x8"),
    phase: str = O.phase_opt("serve", "serve (whole requests, prompts included; the default, as cost) | prefill | "
                             "decode | train"),
    precision: str = O.precision_opt(help="Weight/compute format."),
    batch: Optional[int] = O.batch_opt("Sequences in flight. Serving without it: each target at its operating point "
                                       "(the cheapest that meets --min-speed)."),
    context: Optional[int] = O.context_opt("Serve and prefill: prompt tokens; decode: KV length; train: sequence "
                                           "length."),
    output_tokens: Optional[int] = O.output_tokens_opt("Inference: tokens generated per request.", short=False),
    train_tokens: Optional[float] = O.train_tokens_opt("Train: tokens of the whole run (for $/run)."),
    min_speed: Optional[float] = O.min_speed_opt(),
    software: Optional[str] = O.software_opt(),
    speculative: Optional[str] = O.speculative_opt(),
    kv_precision: Optional[str] = O.kv_precision_opt(),
    memoryx: Optional[str] = O.memoryx_opt("Wafer train rows: MemoryX capacity option, as `stream --memoryx` (e.g. 55tb; "
                                           "default: the smallest that holds the weights and optimizer state)."),
    policy: Optional[str] = O.policy_opt(None, "Wafer train rows: "),
    cp: Optional[int] = O.cp_opt(),
    pipeline_split: Optional[str] = O.pipeline_split_opt(),
    trainable: Optional[str] = O.trainable_opt(),
    draft_tokens: Optional[int] = O.draft_tokens_opt(),
    acceptance: Optional[float] = O.acceptance_opt(),
    set_: Optional[list[str]] = O.set_opt("Pin a cost input, NAME=VALUE (repeatable), as `wseplan cost --set`."),
    uncertainty: int = O.uncertainty_opt("Monte Carlo samples of the cost inputs (adds P10/P50/P90 $/M tokens)."),
    seed: int = O.seed_opt(),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Side by side: fit, time, throughput, bottleneck, power, $/hour, $/M tokens or $/run, J/token.

    Example: wseplan compare llama-3-70b --targets wse3,cs3x4,h100x8,h200x8,b200x8 --phase decode ;
    wseplan compare llama-3-70b --targets cs3x4,h100x8 --batch 1 --speculative none (like for like: no draft on either)
    """
    from ..compare import compare as compare_fn

    check_format(fmt)
    if uncertainty < 0 or uncertainty == 1:
        raise InputError(f"--uncertainty: sample count must be 0 or an integer >= 2, got {uncertainty}")
    cat = O.load_catalog(catalog)
    opts = O.with_kv(O.spec_options(speculative, draft_tokens, acceptance, cat), kv_precision)
    # training's options (audit32c F5; audit37b F3: `time --trainable lora` could not be compared)
    opts.update(O.training_options(cp, pipeline_split, trainable, memoryx, policy, phase))
    with O.spec_flag_errors():
        res = compare_fn(model, targets, phase=phase, precision=precision, batch=batch, context=context,
                         output_tokens=output_tokens, train_tokens=train_tokens, catalog=cat,
                         overrides=O.cost_overrides(set_, cat), uncertainty=uncertainty, seed=seed,
                         min_tokens_per_s_per_user=min_speed, software=software, options=opts or None)
    if fmt == "json":
        json_out(res.to_record(), prices=[])
        return
    if fmt == "csv":
        emit(res.table().to_csv())
        return
    notes = list(res.notes) + [f"{r.target}: {n}" for r in res.rows for n in r.notes]
    if fmt == "md":
        emit(f"## {res.model}: {res.phase}, {res.precision}\n\n" + res.table().to_markdown()
             + "".join(f"\n- {n}" for n in notes) + ("\n" if notes else ""))
    else:
        print_report_table(res.table(), title=f"{res.model}: {res.phase}, {res.precision}, {res.batch_text}, "
                                              f"context {res.context}")
        notes_out(notes)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
