"""`wseplan fleet DEMAND.yaml`: the cheapest fleet meeting a demand under SLA, power, space and budget (ILP).

The record is documented in docs/cli-output.md. pulp loads only inside the command.
"""
from __future__ import annotations

from typing import Optional

import typer

from ..report.formats import fmt_field
from . import options as O
from ..errors import InputError
from .output import Rendered, Section, check_format, quantities, render, without_timings


def fleet_cmd(
    demand: str = typer.Argument(..., help="Demand YAML (workloads, system menu, caps); see studies/demand-example.yaml."),
    set_: Optional[list[str]] = O.set_opt("Pin a cost input: NAME=VALUE (HW.NAME for one system type). Repeatable."),
    prices: Optional[list[str]] = O.prices_opt(),
    solver: str = O.solver_opt("highs", "highs (HiGHS via highspy) | cbc (bundled with PuLP)."),
    time_limit: float = typer.Option(60.0, "--time-limit", help="Time limit of each integer solve [s]; a stopped solve reports the best plan and its gap."),
    no_analysis: bool = typer.Option(False, "--no-analysis", help="Skip the analysis of each constraint relaxed 10% (and the shadow prices)."),
    analysis: str = typer.Option("auto", "--analysis", help="auto | exact | lp: where the LP relaxation may answer 'what if 10% looser' instead of integer re-solves (auto: exact unless a large plan's caps bind)."),
    timings: bool = typer.Option(False, "--timings", help="Show the solver's wall-clock times (solve_s, analysis_s); without it they are null, so the same inputs give the same bytes."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Cheapest fleet (integer systems per type and replicas per workload) meeting a demand under SLA, power, space, budget.

    Example: wseplan fleet studies/demand-example.yaml ; wseplan fleet studies/demand-example.yaml --set electricity_usd_per_kwh=0.15 --format json
    """
    from ..optimize.fleet import plan_fleet

    check_format(fmt)
    if no_analysis and analysis != "auto":
        raise InputError("--analysis: chooses how the analysis is answered; drop it or --no-analysis")
    cat = O.load_catalog(catalog)
    plan = plan_fleet(demand, catalog=cat, prices_files=list(prices or []), overrides=O.cost_overrides(set_, cat),
                      solver=solver, analyze=not no_analysis, time_limit_s=time_limit, analysis=analysis)
    render_fleet(plan, fmt, list(prices or []), timings=timings)


def render_fleet(plan, fmt: str, prices: list[str] | None = None, timings: bool = False) -> None:
    """The fleet record: json the record, csv the allocations, table/md the summary, systems, allocations and
    the constraints (each relaxed 10% and re-solved); the solver's times only with ``timings``."""
    keep = (lambda r: r) if timings else without_timings
    summary = quantities({k: v for k, v in keep(plan.to_row()).items() if not k.startswith("count_")})
    systems = [s.model_dump() for s in plan.systems]
    allocs = [{k: v for k, v in a.model_dump().items() if v is not None} for a in plan.allocations]
    cons = []
    for c in plan.constraints:
        row = {k: v for k, v in c.model_dump().items() if v is not None}
        for k in ("lhs", "rhs", "slack"):  # in the constraint's own unit (power_cap_w: W, budget_usd: $)
            if k in row:
                row[k] = fmt_field(c.name, row[k])
        cons.append(row)
    title = f"fleet plan: {plan.name}"
    render(Rendered(record=keep(plan.to_record()), csv_rows=[a.model_dump() for a in plan.allocations], heading=title,
                    sections=[Section(title, summary), Section("systems", systems), Section("allocations", allocs),
                              Section("constraints (each relaxed 10%; LP shadow prices)", cons)],
                    notes=list(plan.notes), prices=list(prices or [])), fmt)


def register(app: typer.Typer) -> None:
    app.command("fleet")(fleet_cmd)
