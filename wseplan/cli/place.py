"""`wseplan place MODEL --target T`: contiguous layers on wafers (or GPU pipeline stages) by ILP.

The record is documented in docs/cli-output.md. pulp loads only inside the command.
"""
from __future__ import annotations

import json
from typing import Optional

import typer

from ..errors import InfeasibleError, WseplanError
from ..report.formats import fmt_bool, fmt_quantity, layer_range
from . import options as O
from .output import Rendered, Section, check_format, quantities, render, without_timings


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
    also: Optional[list[str]] = typer.Option(None, "--also", help="Mixed devices: another target with a count (cs2x4), placed together with --target (ILP). Repeatable."),
    method: str = typer.Option("auto", "--method", help="auto (exact partition; ILP for mixed devices) | dp | ilp."),
    solver: str = O.solver_opt("highs", "ILP solver: highs (HiGHS via highspy) | cbc (bundled with PuLP)."),
    time_limit: float = typer.Option(30.0, "--time-limit", help="ILP time limit [s]; a stopped search reports the best placement and its gap."),
    timings: bool = typer.Option(False, "--timings", help="Show the solver's wall-clock times (solve_s, analysis_s); without it they are null, so the same inputs give the same bytes."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Place contiguous layers on wafers (or GPU pipeline stages): the slowest stage or the fewest devices.

    Example: wseplan place llama-3.1-405b --target cs3x32 ; wseplan place llama-3.1-70b --target cs3 --objective devices --format json ; wseplan place llama-3.1-70b --target cs3x2 --also cs2x3
    """
    from ..optimize.placement import place

    check_format(fmt)
    cat = O.load_catalog(catalog)
    res = place(model, target, objective=objective, precision=precision, phase=phase, batch=batch, context=context,
                reserve=reserve, tensor_parallel=tensor_parallel, solver=solver, time_limit_s=time_limit, method=method,
                also_targets=list(also or []), catalog=cat)
    render_place(res, fmt, timings=timings)
    if res.status == "infeasible":  # the record is printed; the exit status and one line say why
        raise InfeasibleError(f"placement infeasible: {res.notes[-1] if res.notes else 'no stage fits a device'}")
    if not res.stages:  # stopped by the time limit before any placement
        raise WseplanError(f"placement: {res.notes[-1] if res.notes else 'no placement found'}")


_PROXY = {"bytes": ("slowest stage: bytes read per step",
                    "the latency objective minimises the bytes the slowest stage reads per decode step; decode is "
                    "bandwidth-bound, so its time is proportional to them (a proxy, not seconds)"),
          "FLOP": ("slowest stage: FLOPs per pass",
                   "the latency objective minimises the FLOPs of the slowest stage per prefill pass; prefill is "
                   "compute-bound, so its time is proportional to them (a proxy, not seconds)")}


def render_place(res, fmt: str, timings: bool = False) -> None:
    """The placement record: json the record, csv one row, table/md a summary and the stages. The latency
    objective is a proxy the ILP minimises (bytes read in decode, FLOPs in prefill); the tables say so. The solver's
    times only with ``timings``."""
    keep = (lambda r: r) if timings else without_timings
    row = keep(res.to_row())
    if fmt == "csv":  # the answer itself (which layers on which device) as one JSON cell
        hw = list(res.stage_hardware) or [res.hardware] * len(res.stages)
        row = dict(row, stages_json=json.dumps([dict(s.model_dump(), hardware=h) for s, h in zip(res.stages, hw)],
                                               separators=(",", ":")))
    summary = quantities({k: v for k, v in row.items() if k not in ("objective", "objective_unit", "max_stage_cost",
                                                                      "cost_unit")})
    unit = res.objective_unit
    for q in summary:  # the bounds are in the objective's unit (bytes, FLOP, seconds)
        v = row.get(q["quantity"].replace(" ", "_"))
        if q["quantity"] == "solver best bound" and isinstance(v, (int, float)) and res.objective_kind == "devices":
            q["value"] = f"{v:,.0f} stages"  # the solver counts stages; 'best bound' above is in devices (audit28b L3)
        elif q["quantity"] in ("best bound", "solver best bound") and isinstance(v, (int, float)) and unit:
            q["value"] = fmt_quantity(v, unit)
    notes = list(res.notes)
    if res.objective is not None:
        if res.objective_kind == "latency" and unit in _PROXY:
            what, why = _PROXY[unit]
            notes.append(why)
            shown = fmt_quantity(res.objective, unit)
        elif res.objective_kind == "latency":  # mixed devices: the slowest stage's time
            what, shown = "slowest stage: time per step", fmt_quantity(res.objective, unit)
        else:
            what, shown = "devices used", f"{res.objective:,.0f}"
        summary.insert(10, {"quantity": f"objective: {what}", "value": shown})
    stages = [{"device": s.device, "layers": layer_range(s), "embedding": fmt_bool(s.embedding),
               "lm_head": fmt_bool(s.lm_head), "bytes": s.bytes} for s in res.stages]
    for srow, hw in zip(stages, res.stage_hardware):
        srow["hardware"] = hw
    title = f"placement: {res.model} on {res.target}"
    render(Rendered(record=keep(res.to_record()), csv_rows=[row], heading=title,
                    sections=[Section(title, summary),
                              Section("stages (0-based inclusive transformer blocks)", stages[:64] if fmt == "table" else stages)],
                    notes=notes), fmt)


def register(app: typer.Typer) -> None:
    app.command("place")(place_cmd)
