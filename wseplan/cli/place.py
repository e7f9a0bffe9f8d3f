"""`wseplan place MODEL --target T`: contiguous layers on wafers (or GPU pipeline stages) by ILP.

The record is documented in docs/cli-output.md. pulp loads only inside the command.
"""
from __future__ import annotations

from typing import Optional

import typer

from . import options as O
from .output import check_format, emit, notes_out, print_table, rich_table, to_markdown


def place_cmd(
    model: str = typer.Argument(..., help="Catalog model name/alias (llama-3.1-405b) or a config.json path."),
    target: str = O.target_opt("<hardware key>[x<N>]: cs3x32, h100-sxmx16 … (no count: the fewest that fit)."),
    objective: str = typer.Option("latency", "--objective", help="latency (slowest stage) | devices (fewest devices)."),
    precision: str = O.precision_opt(),
    phase: str = O.phase_opt("decode", "prefill | decode"),
    batch: Optional[int] = O.batch_opt("Concurrent sequences (KV cache) (default 1)."),
    context: Optional[int] = O.context_opt(),
    reserve: Optional[float] = O.reserve_opt(),
    tensor_parallel: int = typer.Option(1, "--tensor-parallel", "--tp", help="GPU: GPUs per pipeline stage."),
    solver: str = O.solver_opt("cbc", "cbc (bundled with PuLP) | highs (HiGHS via highspy)."),
    time_limit: float = typer.Option(30.0, "--time-limit", help="Solver time limit [s]."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Place contiguous layers on wafers (or GPU pipeline stages) by ILP: the slowest stage or the fewest devices.

    Example: wseplan place llama-3.1-405b --target cs3x32 ; wseplan place llama-3.1-70b --target cs3 --objective devices --format json
    """
    from ..optimize.placement import place

    check_format(fmt)
    cat = O.load_catalog(catalog)
    res = place(model, target, objective=objective, precision=precision, phase=phase, batch=batch, context=context,
                reserve=reserve, tensor_parallel=tensor_parallel, solver=solver, time_limit_s=time_limit, catalog=cat)
    render_place(res, fmt)
    if res.status == "infeasible":  # the record is printed; the exit status and one line say why
        from ..errors import InfeasibleError

        raise InfeasibleError(f"placement infeasible: {res.notes[-1] if res.notes else 'no stage fits a device'}")


def render_place(res, fmt: str) -> None:
    from ..report import formats as F

    if fmt == "json":
        emit(F.to_json(res.to_record()))
        return
    if fmt == "csv":
        emit(F.to_csv([res.to_row()]))
        return
    summary = res.to_row()
    stages = [{"device": s.device, "layers": f"{s.first_layer}-{s.last_layer}", "embedding": s.embedding,
               "lm_head": s.lm_head, "bytes": s.bytes} for s in res.stages]
    if fmt == "md":
        emit(f"## Placement: {res.model} on {res.target}\n\n" + to_markdown([summary]) + "\n### Stages\n\n"
             + (to_markdown(stages) if stages else "(none)\n"))
    else:
        print_table(rich_table([{"field": k, "value": v} for k, v in summary.items()], title=f"placement: {res.model} on {res.target}"),
                    rich_table(stages[:64], title="stages (0-based inclusive transformer blocks)"))
    notes_out(res.notes)


def register(app: typer.Typer) -> None:
    app.command("place")(place_cmd)
