"""`wseplan cost`, `wseplan place` and `wseplan fleet`: TCO and $/token, layer placement ILP, fleet ILP.

Records are documented in docs/cli-output.md. Heavy libraries (scipy, pulp, pandas) load only inside
the command functions.
"""
from __future__ import annotations

from typing import Optional

import typer

FMT_HELP = "Output: table | json | csv | md."


def register(app) -> None:
    @app.command("cost")
    def cost_cmd(
        model: str = typer.Argument(..., help="Catalog model name/alias (llama-70b) or a config.json path."),
        target: str = typer.Option(..., "--target", "-t", help="<hardware key>[x<N>]: cs3x4, h100-sxmx8 … (no count: the fewest that fit)."),
        phase: str = typer.Option("serve", "--phase", help="serve (whole requests) | prefill (input side) | decode (output side) | train."),
        precision: str = typer.Option("bf16", "--precision", "-p", help="fp32 | tf32 | bf16 | fp16 | fp8 | int8 | int4 | fp4"),
        batch: Optional[int] = typer.Option(None, "--batch", "-b", help="Serve: concurrent requests; train: sequences per step."),
        context: Optional[int] = typer.Option(None, "--context", "-c", help="Serve: prompt tokens; train: sequence length."),
        output_tokens: Optional[int] = typer.Option(None, "--output-tokens", "-o", help="Serve: output tokens per request (default 256)."),
        train_tokens: Optional[float] = typer.Option(None, "--train-tokens", help="Train: tokens in the run (default 20 x params)."),
        memoryx: Optional[str] = typer.Option(None, "--memoryx", help="Wafer training: MemoryX capacity option (e.g. 12tb)."),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="Pin a cost input: NAME=VALUE (e.g. electricity_usd_per_kwh=0.12, cs3.capex_usd=2e6). Repeatable."),
        prices: Optional[list[str]] = typer.Option(None, "--prices", help="Prices YAML merged over catalogs/prices (repeatable)."),
        uncertainty: int = typer.Option(0, "--uncertainty", "-u", help="Monte Carlo samples for P10/P50/P90 (0: off)."),
        seed: int = typer.Option(0, "--seed", help="Random seed of the Monte Carlo."),
        fmt: str = typer.Option("table", "--format", "-f", help=FMT_HELP),
        catalog: Optional[list[str]] = typer.Option(None, "--catalog", help="Extra catalog folder(s)."),
    ) -> None:
        """TCO per system-hour, $/M tokens (input and output), $/training run, J/token, power and rack space.

        Example: wseplan cost llama-3.1-70b --target cs3x4 --batch 8 --context 2048 --uncertainty 2000 ;
        wseplan cost llama-3.1-70b --target h100-sxmx8 --set electricity_usd_per_kwh=0.12 --format json
        """
        from ..analytic.cost import parse_overrides
        from ..cli import _catalog, _check_format
        from ..costing import cost

        _check_format(fmt)
        cat = _catalog(catalog)
        res = cost(model, target, phase=phase, precision=precision, batch=batch, context=context,
                   output_tokens=output_tokens, train_tokens=train_tokens, overrides=parse_overrides(set_),
                   prices_files=list(prices or []), uncertainty=uncertainty, seed=seed, memoryx_option=memoryx, catalog=cat)
        _render_cost(res, fmt)

    @app.command("place")
    def place_cmd(
        model: str = typer.Argument(..., help="Catalog model name/alias (llama-3.1-405b) or a config.json path."),
        target: str = typer.Option(..., "--target", "-t", help="<hardware key>[x<N>]: cs3x32, h100-sxmx16 … (no count: the fewest that fit)."),
        objective: str = typer.Option("latency", "--objective", help="latency (slowest stage) | devices (fewest devices)."),
        precision: str = typer.Option("bf16", "--precision", "-p", help="fp32 | tf32 | bf16 | fp16 | fp8 | int8 | int4 | fp4"),
        phase: str = typer.Option("decode", "--phase", help="prefill | decode"),
        batch: Optional[int] = typer.Option(None, "--batch", "-b", help="Concurrent sequences (KV cache) (default 1)."),
        context: Optional[int] = typer.Option(None, "--context", "-c", help="Tokens per sequence / KV length (default 8192)."),
        reserve: Optional[float] = typer.Option(None, "--reserve", help="Fraction of SRAM/HBM kept back (default: catalog)."),
        tensor_parallel: int = typer.Option(1, "--tensor-parallel", "--tp", help="GPU: GPUs per pipeline stage."),
        also: Optional[list[str]] = typer.Option(None, "--also", help="Mixed devices: another target with a count (cs2x4), placed together with --target (ILP). Repeatable."),
        method: str = typer.Option("auto", "--method", help="auto (exact partition; ILP for mixed devices) | dp | ilp."),
        solver: str = typer.Option("highs", "--solver", help="ILP solver: highs (HiGHS via highspy) | cbc (bundled with PuLP)."),
        time_limit: float = typer.Option(30.0, "--time-limit", help="ILP time limit [s]; a stopped search reports the best placement and its gap."),
        fmt: str = typer.Option("table", "--format", "-f", help=FMT_HELP),
        catalog: Optional[list[str]] = typer.Option(None, "--catalog", help="Extra catalog folder(s)."),
    ) -> None:
        """Place contiguous layers on wafers (or GPU pipeline stages): the slowest stage or the fewest devices.

        Example: wseplan place llama-3.1-405b --target cs3x32 ; wseplan place llama-3.1-70b --target cs3 --objective devices --format json ; wseplan place llama-3.1-70b --target cs3x2 --also cs2x3
        """
        from ..cli import _catalog, _check_format, _emit
        from ..optimize.placement import place

        _check_format(fmt)
        cat = _catalog(catalog)
        res = place(model, target, objective=objective, precision=precision, phase=phase, batch=batch, context=context,
                    reserve=reserve, tensor_parallel=tensor_parallel, solver=solver, time_limit_s=time_limit, method=method,
                    also_targets=list(also or []), catalog=cat)
        _render_place(res, fmt)
        if res.status == "infeasible":  # the record is printed; the exit status and one line say why
            from ..errors import InfeasibleError

            raise InfeasibleError(f"placement infeasible: {res.notes[-1] if res.notes else 'no stage fits a device'}")
        if not res.stages:  # stopped by the time limit before any placement
            from ..errors import WseplanError

            raise WseplanError(f"placement: {res.notes[-1] if res.notes else 'no placement found'}")

    @app.command("fleet")
    def fleet_cmd(
        demand: str = typer.Argument(..., help="Demand YAML (workloads, system menu, caps); see studies/demand-example.yaml."),
        set_: Optional[list[str]] = typer.Option(None, "--set", help="Pin a cost input: NAME=VALUE (HW.NAME for one system type). Repeatable."),
        prices: Optional[list[str]] = typer.Option(None, "--prices", help="Prices YAML merged over catalogs/prices (repeatable)."),
        solver: str = typer.Option("highs", "--solver", help="highs (HiGHS via highspy) | cbc (bundled with PuLP)."),
        time_limit: float = typer.Option(60.0, "--time-limit", help="Time limit of each integer solve [s]; a stopped solve reports the best plan and its gap."),
        no_analysis: bool = typer.Option(False, "--no-analysis", help="Skip the analysis of each constraint relaxed 10% (and the shadow prices)."),
        analysis: str = typer.Option("auto", "--analysis", help="auto | exact | lp: where the LP relaxation may answer 'what if 10% looser' instead of integer re-solves (auto: exact unless a large plan's caps bind)."),
        fmt: str = typer.Option("table", "--format", "-f", help=FMT_HELP),
        catalog: Optional[list[str]] = typer.Option(None, "--catalog", help="Extra catalog folder(s)."),
    ) -> None:
        """Cheapest fleet (integer systems per type and replicas per workload) meeting a demand under SLA, power, space, budget.

        Example: wseplan fleet studies/demand-example.yaml ; wseplan fleet studies/demand-example.yaml --set electricity_usd_per_kwh=0.15 --format json
        """
        from ..analytic.cost import parse_overrides
        from ..cli import _catalog, _check_format
        from ..optimize.fleet import plan_fleet

        _check_format(fmt)
        cat = _catalog(catalog)
        plan = plan_fleet(demand, catalog=cat, prices_files=list(prices or []), overrides=parse_overrides(set_),
                          solver=solver, analyze=not no_analysis, time_limit_s=time_limit, analysis=analysis)
        _render_fleet(plan, fmt)


# ---------------------------------------------------------------------------------------------
def _render_cost(res, fmt: str) -> None:
    from ..cli import _emit
    from ..report import formats as F

    if fmt == "json":
        _emit(F.to_json(res.to_record()))
        return
    if fmt == "csv":
        _emit(F.to_csv([res.to_row()]))
        return
    rows = [{k: v for k, v in m.model_dump().items() if v is not None} for m in res.metrics]
    params = [{"input": p.name, "value": p.value, "low": p.low, "high": p.high, "basis": p.basis,
               "source": ", ".join(p.source)} for p in res.params]
    torn = [{"input": r.param, "low": r.low, "high": r.high, f"{r.metric} at low": r.metric_at_low,
             f"{r.metric} at high": r.metric_at_high, "swing": r.swing} for r in res.tornado]
    title = f"Cost: {res.model} on {res.target} ({res.phase}, batch {res.batch}, context {res.context}, prices {res.prices_date})"
    if fmt == "md":
        text = f"## {title}\n\n" + F.to_markdown(rows) + "\n### Inputs\n\n" + F.to_markdown(params)
        if torn:
            text += f"\n### Sensitivity of {res.headline_metric} (tornado)\n\n" + F.to_markdown(torn)
        _emit(text)
    else:
        tables = [F.rich_table(rows, title=title), F.rich_table(params, title="inputs (low / value / high)")]
        if torn:
            tables.append(F.rich_table(torn[:12], title=f"sensitivity of {res.headline_metric} (tornado)"))
        F.print_table(*tables)
    for n in res.notes:
        _emit(f"note: {n}\n")


def _render_place(res, fmt: str) -> None:
    from ..cli import _emit
    from ..report import formats as F

    if fmt == "json":
        _emit(F.to_json(res.to_record()))
        return
    if fmt == "csv":
        _emit(F.to_csv([res.to_row()]))
        return
    summary = res.to_row()
    stages = [{"device": s.device, "layers": f"{s.first_layer}-{s.last_layer}", "embedding": s.embedding,
               "lm_head": s.lm_head, "bytes": s.bytes} for s in res.stages]
    for row, hw in zip(stages, res.stage_hardware):
        row["hardware"] = hw
    if fmt == "md":
        _emit(f"## Placement: {res.model} on {res.target}\n\n" + F.to_markdown([summary]) + "\n### Stages\n\n"
              + (F.to_markdown(stages) if stages else "(none)\n"))
    else:
        F.print_table(F.rich_table([{"field": k, "value": v} for k, v in summary.items()], title=f"placement: {res.model} on {res.target}"),
                      F.rich_table(stages[:64], title="stages (0-based inclusive transformer blocks)"))
    for n in res.notes:
        _emit(f"note: {n}\n")


def _render_fleet(plan, fmt: str) -> None:
    from ..cli import _emit
    from ..report import formats as F

    if fmt == "json":
        _emit(F.to_json(plan.to_record()))
        return
    if fmt == "csv":
        _emit(F.to_csv([a.model_dump() for a in plan.allocations]))
        return
    summary = [{k: v for k, v in plan.to_row().items() if not k.startswith("count_")}]
    systems = [s.model_dump() for s in plan.systems]
    allocs = [{k: v for k, v in a.model_dump().items() if v is not None} for a in plan.allocations]
    cons = [{k: v for k, v in c.model_dump().items() if v is not None} for c in plan.constraints]
    if fmt == "md":
        _emit(f"## Fleet plan: {plan.name}\n\n" + F.to_markdown(summary) + "\n### Systems\n\n" + F.to_markdown(systems)
              + "\n### Allocations\n\n" + F.to_markdown(allocs) + "\n### Constraints (each relaxed 10%; shadow prices of the LP relaxation)\n\n" + F.to_markdown(cons))
    else:
        F.print_table(F.rich_table([{"field": k, "value": v} for k, v in summary[0].items()], title=f"fleet plan: {plan.name}"),
                      F.rich_table(systems, title="systems"),
                      F.rich_table(allocs, title="allocations"), F.rich_table(cons, title="constraints (each relaxed 10%; LP shadow prices)"))
    for n in plan.notes:
        _emit(f"note: {n}\n")
