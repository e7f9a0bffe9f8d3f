"""Fleet ILP: the cheapest mix of systems (CS-3, H100 nodes, ...) that meets a demand.

Given workloads (serving at an output-token rate under a latency SLA, or training runs by a deadline) and a
menu of system types with their TCO, choose integer replica counts per (workload, configuration) and integer
system counts per type that minimise the yearly TCO subject to

* demand: the replicas of each workload supply its rate (tokens/s) or its runs by the deadline;
* SLA: only configurations whose predicted TTFT / TPOT (serving) or run time (training) meet the SLA may
  serve it (the time models decide, :func:`wseplan.timing.predict_time`);
* systems: a type's systems hold the devices its replicas use (8 GPUs per node);
* caps: facility power (peak IT x PUE), rack units and capex budget.

Then each cap, demand and SLA is relaxed by 10% in turn: a constraint is binding when that lowers the optimum,
and the saving is reported, exactly, from one model (:mod:`wseplan.optimize.fleet_model`: the problem splits
into independent components where replicas fill whole systems, so a relaxation re-solves only what changes,
warm-started), with the LP relaxation's shadow prices beside it. An infeasible demand raises
:class:`~wseplan.errors.InfeasibleError` naming the constraint that makes it so.

``build_problem`` calls the time and cost models (slow, once); ``solve_fleet`` is the ILP alone (fast). The
demand file, problem and plan records are in :mod:`wseplan.optimize.fleet_schema` (re-exported here).
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from ..analytic.cost import (TimeInputs, apply_overrides, cost_params, deployment_terms, evaluate, hardware_price_key,
                             load_prices, nominal, tco_scope_note, unscoped_hardware_inputs)
from ..catalog.load import load_catalog
from ..catalog.software import resolve_software
from ..catalog.schema import Frozen
from ..errors import InfeasibleError, InputError, WseplanError, suggest
from ..analytic.cost.training import time_to_train
from ..plan import plan, positions_note, target_with_count
from ..pricing import job_devices, run_goodput
from ..admission import LOWER_LOADS
from ..operating import replica_options
from ..serving import DEFAULT_UTILIZATION, serve, with_limits
from ..targets import parse_target
from ..devices.speculation import draft_mismatch
from ..workload import resolve_model, total_params
from .fleet_model import ANALYSIS_MODES, CAPS, RELAX_FRAC, FleetModel, relaxation_analysis  # noqa: F401 (public names)
from .fleet_schema import (SCHEMA_VERSION, AllocationRow, Caps, Config, ConstraintRow, Demand, DemandSpec,  # noqa: F401
                           FleetPlan, FleetProblem, Sla, SystemRow, SystemSpec, SystemType, WorkloadSpec,
                           meets_sla, read_demand)
from .milp import SolverRun, resolve_solver, status_detail


# ---------------------------------------------------------------------------------------------
# Solving (the model and its decomposition live in fleet_model)
# ---------------------------------------------------------------------------------------------
class _Solved(Frozen):
    status: str
    optimal: bool
    objective: float | None
    replicas: dict[int, int] = {}
    systems: dict[int, int] = {}
    solve_s: float
    num_variables: int
    num_constraints: int
    solver: str
    usage: dict[str, float] = {}
    gap_frac: float | None = None
    bound: float | None = None
    method: str | None = None


def _as_solved(model, res: dict, solve_s: float) -> _Solved:
    if res["status"] not in ("optimal", "time_limit"):
        return _Solved(status="infeasible" if res["status"] == "infeasible" else res["status"], optimal=False,
                       objective=None, solve_s=solve_s, num_variables=0, num_constraints=0, solver=model.solver)
    return _Solved(status=res["status"], optimal=res["status"] == "optimal",
                   objective=res.get("minimised", res["objective"]), replicas=res["replicas"], systems=res["systems"],
                   solve_s=solve_s, num_variables=res["n_vars"], num_constraints=res["n_rows"], solver=model.solver,
                   usage=res["usage"], gap_frac=res.get("gap"), bound=res.get("bound"), method=res.get("method"))


def _solve_once(pb: FleetProblem, *, solver: str = "highs", time_limit_s: float = 60.0,
                caps: dict[str, float | None] | None = None, demand_scale: dict[str, float] | None = None,
                sla_factor: dict[str, float] | None = None, minimise: str | None = None, model=None) -> _Solved:
    """One solve of a variant of ``pb`` (caps replaced, demands scaled, SLA limits scaled, or a cap's use
    minimised); ``model`` reuses a :class:`~wseplan.optimize.fleet_model.FleetModel` and its remembered solves."""

    m = model or FleetModel(pb, solver=solver, time_limit_s=time_limit_s)
    t0 = time.perf_counter()
    res = m.solve(caps=caps, demand_scale=demand_scale, sla_factor=sla_factor, minimise=minimise)
    return _as_solved(m, res, time.perf_counter() - t0)


_CAP_LABEL = {"power_cap_w": "power cap", "rack_units_cap": "rack-space cap", "budget_usd": "capex budget"}
_CAP_UNIT = {"power_cap_w": "W", "rack_units_cap": "U", "budget_usd": "USD"}


def _diagnose(pb: FleetProblem, solver: str, model=None) -> str:
    """One line naming the constraint(s) that make the demand infeasible."""
    dem = {d.name: d for d in pb.demands}
    for d in pb.demands:
        cands = [c for c in pb.configs if c.workload == d.name]
        if not cands:
            whys = [n for n in pb.notes if n.startswith(f"{d.name} on ")]  # every system's reason (review31 L7)
            why = "; ".join(whys)
            if whys and all("time model" in w for w in whys):  # audit31b M4: it fits; nothing times it
                return f"workload {d.name}: no system in the menu can time {d.model}: {why}"
            return (f"workload {d.name}: no configuration of {d.model} fits any system in the menu"
                    + (f" ({why})" if why else ""))
        if not any(meets_sla(c, dem[d.name]) for c in cands):
            if d.kind == "train":
                best = min((c.run_s for c in cands if c.run_s is not None), default=None)
                return (f"workload {d.name}: no configuration finishes a run within the deadline of "
                        f"{d.deadline_s / 86400:.4g} days (fastest run {best / 86400:.4g} days); relax deadline_days")
            sla = ", ".join(f"{k} <= {v:.4g}" for k, v in d.sla.limits().items())
            return f"workload {d.name}: no configuration meets its SLA ({sla}) on any system in the menu, even at {LOWER_LOADS[-1]:.0%} load; relax the SLA"
    active = [k for k in CAPS if getattr(pb, k) is not None]
    base = {k: getattr(pb, k) for k in CAPS}
    for k in active:
        trial = dict(base, **{k: None})
        if _solve_once(pb, solver=solver, caps=trial, model=model).status != "infeasible":
            need = _solve_once(pb, solver=solver, caps=trial, minimise=k, model=model)
            amount = need.objective if need.status != "infeasible" else None
            extra = f"; the demand needs at least {amount:,.0f} {_CAP_UNIT[k]}" if amount is not None else ""
            return f"the {_CAP_LABEL[k]} ({k} = {base[k]:,.0f} {_CAP_UNIT[k]}) makes the demand infeasible{extra}"
    for a in range(len(active)):
        for b in range(a + 1, len(active)):
            trial = dict(base, **{active[a]: None, active[b]: None})
            if _solve_once(pb, solver=solver, caps=trial, model=model).status != "infeasible":
                return (f"the {_CAP_LABEL[active[a]]} and the {_CAP_LABEL[active[b]]} together make the demand "
                        "infeasible; raise either")
    if active and _solve_once(pb, solver=solver, caps={k: None for k in CAPS}, model=model).status != "infeasible":
        return f"the caps together ({', '.join(active)}) make the demand infeasible; raise them"
    # without any cap the menu still cannot meet the demand (audit28b M1: the caps were blamed for a max_systems limit)
    limited = [f"{s.name} ({s.max_systems:,})" for s in pb.systems if s.max_systems is not None]
    return ("no integer plan meets the demand with the systems in the menu" + (", even without the caps" if active else "")
            + (f": raise max_systems ({', '.join(limited)}) or add a system type" if limited else
               "; add a system type"))

def solve_fleet(pb: FleetProblem, *, solver: str = "highs", time_limit_s: float = 60.0, analyze: bool = True,
                name: str = "demand", analysis: str = "auto") -> FleetPlan:
    """Solve the fleet ILP; with ``analyze``, the relaxation analysis of every cap, demand and SLA.

    The analysis asks of each constraint "what if it were 10% looser" (caps x 1.1, demand x 0.9, SLA limits
    x 1.1) and answers exactly: an integer re-solve of the part of the problem that changes (the workload's
    component, warm-started from the base plan, which stays feasible), or a proof that nothing changes (a plan
    the caps do not bind; an SLA that admits no new configuration). One LP relaxation of the full model adds
    the shadow price of every demand and cap row, with units, and the reduced costs of the configurations an
    SLA excludes; these are marginal values of the LP, which the integer plan follows only in whole systems.
    ``analysis`` (``auto``, ``exact`` or ``lp``) chooses where the LP relaxation may answer instead of integer
    re-solves: see :func:`wseplan.optimize.fleet_model.relaxation_analysis`.

    Raises
    ------
    InfeasibleError
        When no plan meets the demand; the message names the constraint that makes it so.
    """

    if analysis not in ANALYSIS_MODES:
        raise InputError(f"analysis: unknown {analysis!r}; use one of {', '.join(ANALYSIS_MODES)}")
    model = FleetModel(pb, solver=solver, time_limit_s=time_limit_s)
    t0 = time.perf_counter()
    res = model.solve()
    main_s = time.perf_counter() - t0
    if res["status"] == "infeasible":
        raise InfeasibleError(f"fleet {name}: infeasible: {_diagnose(pb, solver, model)}")
    if res["status"] not in ("optimal", "time_limit"):
        raise WseplanError(f"fleet {name}: the solver stopped at its time limit ({time_limit_s:g} s) before finding "
                           "any plan; raise the time limit")
    if res["status"] == "time_limit" and res.get("bound") is None:  # the LP relaxation bounds the gap
        lp = model.lp_duals(model.admissible(), {k: getattr(pb, k) for k in CAPS})
        if lp.get("status") == "optimal":
            res = dict(res, bound=lp["objective"],
                       gap=max(0.0, (res["objective"] - lp["objective"]) / max(abs(res["objective"]), 1e-300)))
    base = _as_solved(model, res, main_s)
    dem = {d.name: d for d in pb.demands}
    systems = []
    for j, s in enumerate(pb.systems):
        c = base.systems.get(j, 0)
        if c:
            systems.append(SystemRow(system=s.name, hardware=s.hardware, count=c, devices=c * s.devices_per_system,
                                     capex_usd=c * s.capex_usd, annual_usd=c * s.annual_usd,
                                     peak_facility_power_w=c * s.peak_facility_power_w, rack_units=c * s.rack_units))
    allocs = []
    for i, r in sorted(base.replicas.items()):
        if r <= 0:
            continue
        c = pb.configs[i]
        d = dem[c.workload]
        allocs.append(AllocationRow(workload=c.workload, system=c.system, replicas=r, devices_per_replica=c.num_devices,
                                    batch=c.batch, supply_per_replica=c.supply, supply=c.supply * r, demand=d.amount,
                                    unit=d.unit, ttft_s=c.mean_ttft_s, tpot_s=c.mean_tpot_s, ttft_at_percentile_s=c.ttft_s,
                                    tpot_at_percentile_s=c.tpot_s, run_s=c.run_s, load_frac=c.load_frac))
    obj = base.objective

    t1 = time.perf_counter()
    rows, lp_obj = relaxation_analysis(pb, model, res, analyze, analysis)
    cons = [ConstraintRow(**r) for r in rows]
    analysis_s = time.perf_counter() - t1 if analyze else None
    gap = base.gap_frac
    run = SolverRun(name=model.solver, version=model.version, requested=solver, fallback_reason=model.fallback,
                    status=base.status, status_detail=status_detail(base.status, gap), solve_s=model.solve_s,
                    gap_frac=gap, best_bound=base.bound, num_solves=model.mip_solves + model.lp_solves)
    notes = list(pb.notes)
    if analyze:
        notes.append("shadow prices are the LP relaxation's marginal values (USD/year saved per unit loosened); the "
                     "integer plan moves in whole systems and replicas, so saving_usd_per_year (an exact re-solve with "
                     "the constraint 10% looser) answers 'what if'")
    if model.fallback:
        notes.append(f"solver: {model.fallback}")
    return FleetPlan(name=name, status=base.status, status_detail=run.status_detail, optimal=base.optimal, gap_frac=gap,
                     total_usd_per_year=obj, best_bound_usd_per_year=base.bound, capex_usd=base.usage["budget_usd"],
                     peak_facility_power_w=base.usage["power_cap_w"], rack_units=base.usage["rack_units_cap"],
                     solver=model.solver, solve_s=main_s, solver_run=run, method=res.get("method", ""),
                     num_variables=base.num_variables, num_constraints=base.num_constraints, analysis_s=analysis_s,
                     analysis_mode=analysis if analyze else None,
                     lp_usd_per_year=lp_obj, systems=systems, allocations=allocs, constraints=cons, notes=notes)


# ---------------------------------------------------------------------------------------------
# Building the problem from a demand file (calls the time and cost models)
# ---------------------------------------------------------------------------------------------
def _system_type(spec: SystemSpec, catalog, prices, overrides) -> tuple[SystemType, dict]:

    t = parse_target(spec.hardware, catalog)
    params = cost_params(prices, catalog, t, include_memoryx=t.kind == "wafer")
    key = hardware_price_key(t)
    # an override applies to the types that have that input (cloud prices: GPUs; MemoryX: wafers)
    mine = {k: v for k, v in overrides.items() if k.split(".", 1)[-1] in params}
    params = apply_overrides(params, mine, hardware_key=key, catalog=catalog)
    p = nominal(params)
    d = deployment_terms(p, 1)  # the cost model's own terms of one system (no MemoryX: :func:`_memoryx_extra`)
    per_sys = 1 if t.kind == "wafer" else int(t.device.gpus_per_node.si)
    st = SystemType(name=spec.name or t.key if t.kind == "gpu" else (spec.name or t.device.system), hardware=t.key,
                    price_key=hardware_price_key(t), devices_per_system=per_sys, capex_usd=float(d["capex_usd"]),
                    annual_usd=float(d["total_usd_per_year"]), peak_facility_power_w=float(d["peak_facility_power_w"]),
                    rack_units=float(p["rack_units"]), max_systems=spec.max_systems, cost_inputs=p)
    return st, {"target": t, "params": p}


def _memoryx_extra(p, st, num_systems) -> tuple[float, float, float, float]:
    """(capex, yearly cost, peak facility power, rack units) of a wafer training replica's MemoryX option and its
    cluster's CPU servers (MemoryX, SwarmX, input workers), beyond its ``num_systems`` systems of type ``st``: the cost
    model's terms (:func:`~wseplan.analytic.cost.evaluate`) less the systems' own (linear in the count)."""
    full = evaluate(p, TimeInputs(phase="train", num_devices=num_systems, num_systems=num_systems, step_s=1.0,
                                  tokens_per_step=1.0, train_tokens=1.0))  # the times do not enter these terms
    own = (st.capex_usd, st.annual_usd, st.peak_facility_power_w, st.rack_units)
    return tuple(float(full[k]) - num_systems * o
                 for k, o in zip(("capex_usd", "total_usd_per_year", "peak_facility_power_w", "rack_units"), own))


def _check_software(wl: WorkloadSpec, systems, ctx, cat) -> None:
    """A serving workload's ``software`` entries each name a system of the menu (name or hardware key) or a family
    (``gpu``, ``wafer``) and a profile of that family: a typo would otherwise run the default profile or skip the
    system."""
    kinds = {st.name: ctx[st.name]["target"].kind for st in systems} | {
        st.hardware: ctx[st.name]["target"].kind for st in systems}
    for k, name in wl.software.items():
        family = k if k in ("gpu", "wafer") else kinds.get(k)
        if family is None:
            raise InputError(f"workloads.{wl.name}.software: {k!r} is neither a system of the menu "
                             f"({', '.join(sorted(kinds))}) nor a family (gpu, wafer)")
        try:
            resolve_software(name, family, cat)
        except InputError as exc:
            raise InputError(f"workloads.{wl.name}.software.{k}: {str(exc).split(': ', 1)[-1]}") from None


def _check_draft(wl: WorkloadSpec, cat) -> None:
    """A serving workload's ``speculative`` draft exists and can draft for its model (one tokenizer, smaller): a bad one
    would otherwise skip every system and read as 'no configuration fits' (review29 #8)."""
    name = wl.speculative
    if wl.kind != "serve" or name is None or str(name).lower() in ("none", "off", "false", "0", ""):
        return
    try:
        draft, target = resolve_model(name, cat), resolve_model(wl.model, cat)
    except InputError as exc:
        raise InputError(f"workloads.{wl.name}.speculative: {str(exc).split(': ', 1)[-1]}") from None
    why = draft_mismatch(target, draft)
    if why is not None:
        raise InputError(f"workloads.{wl.name}.speculative: {why}; name a smaller draft of the model's family, or none")


def serve_key(model_name: str, hardware: str, wl: WorkloadSpec, precision: str, software: str | None = None,
              options: dict | None = None) -> tuple:
    """The key of a replica search in a :func:`build_problem` ``cache``: the same key, the same serve question."""
    return (model_name, hardware, precision, wl.prompt_tokens, wl.output_tokens,
            None if wl.batches is None else tuple(sorted(set(wl.batches))),
            wl.sla.percentile, software, tuple(sorted((options or {}).items())))


def _serve_configs(m, hardware: str, wl: WorkloadSpec, system: str, prec: str, hit, count: int | None = None) -> list[Config]:
    """The serving configurations of workload ``wl`` on one system type: each replica size and batch of
    :func:`~wseplan.operating.replica_options` at the default load and, where it misses the SLA there, again at
    the highest of :data:`~wseplan.admission.LOWER_LOADS` that meets the whole SLA, as ``serve`` with the SLA's limits
    shows it (:func:`~wseplan.serving.with_limits`; its supply is what the replica carries at that load), with the
    batches that search refines to where a limit binds. The
    configuration at the default load stays, for the relaxation analysis. ``count``: ``hit`` is the search of a target
    with that many devices (a ``device_counts`` entry), whose one-replica points are the configurations."""
    def options(result):
        rows = replica_options(m, hardware, precision=prec, input_tokens=wl.prompt_tokens, output_tokens=wl.output_tokens,
                               batches=wl.batches, percentile=wl.sla.percentile,
                               sizes="search" if count else wl.replica_sizes, result=result)
        return [r for r in rows if not count or r["num_devices"] == count]

    def config(r):
        return Config(workload=wl.name, system=system, num_devices=r["num_devices"], batch=r["batch"],
                      supply=r["tokens_per_s"], ttft_s=r["ttft_at_percentile_s"], tpot_s=r["tpot_at_percentile_s"],
                      mean_ttft_s=r["ttft_s"], mean_tpot_s=r["tpot_s"], load_frac=r["load_frac"])

    out = [config(r) for r in options(hit)]
    if wl.sla.ttft_s is not None or wl.sla.tpot_s is not None:  # queueing and the running batch fall with the load
        seen = {(c.num_devices, c.batch, c.load_frac) for c in out}
        # the points moved to a lower load that meets the SLA (not those shown there only as the closest to it), and
        # to the lower load that meets the relaxation analysis' looser SLA (limits x (1 + RELAX_FRAC)): a point the
        # looser limits admit at a higher load than the SLA's own (audit28b H1: the analysis saw only the SLA's loads);
        # and the batches `serve` with those limits refines to where a limit binds, at whatever load they meet them
        # (audit37a F1: the default grid alone bought two H100 nodes too many for DeepSeek-V3 at 20k tokens/s)
        for f in (1.0, 1.0 + RELAX_FRAC):
            moved = with_limits(hit, ttft_limit_s=None if wl.sla.ttft_s is None else wl.sla.ttft_s * f,
                                tpot_limit_s=None if wl.sla.tpot_s is None else wl.sla.tpot_s * f)
            for r in options(moved):
                c = config(r)
                if r["meets_sla"] and (c.num_devices, c.batch, c.load_frac) not in seen:
                    seen.add((c.num_devices, c.batch, c.load_frac))
                    out.append(c)
    return out


def build_problem(spec: DemandSpec, *, catalog=None, prices=None, overrides: dict[str, float] | None = None,
                  cache: dict | None = None) -> FleetProblem:
    """Turn a demand file into a :class:`FleetProblem`: cost every system type, time every configuration.

    ``cache`` (optional, ``{serve_key(...): ServeResult}``) holds replica searches already run for the same
    question (a report's curves), so they are not run twice; new ones are added to it.
    """

    cat = catalog or load_catalog()
    prices = prices or load_prices(spec.prices, catalog=cat)
    ov = dict(spec.set)
    ov.update(overrides or {})
    notes: list[str] = []
    systems, ctx = [], {}
    known: set[str] = set()
    keys: list[str] = []
    for i, s in enumerate(spec.systems):
        try:
            tt = parse_target(s.hardware, cat)
        except InputError as exc:  # name the demand file's field (audit28b L4)
            raise InputError(f"systems[{i}].hardware: {str(exc).split(': ', 1)[-1]}") from None
        known |= set(cost_params(prices, cat, tt, include_memoryx=tt.kind == "wafer"))
        keys.append(hardware_price_key(tt))
    unscoped_hardware_inputs(ov, keys, prices=prices)  # one number for several hardware's (audit37b F7, review37 M5)
    for k in ov:
        if k.split(".", 1)[-1] not in known:

            raise InputError(f"set: unknown cost input {k!r}{suggest(k.split('.', 1)[-1], known)}; "
                             f"inputs here: {', '.join(sorted(known))}")
    for s in spec.systems:
        st, info = _system_type(s, cat, prices, ov)
        if st.name in ctx:
            raise InputError(f"systems: {st.name} listed twice; give each entry a distinct name")
        systems.append(st)
        ctx[st.name] = info
    menu = {st.name for st in systems} | {st.hardware for st in systems}
    for wl in spec.workloads:  # per-system settings name a system: a typo or another spelling would be ignored
        for field in ("precisions", "device_counts"):
            for k in getattr(wl, field):
                if k in menu:
                    continue
                try:
                    t = parse_target(k, cat)
                except InputError:
                    raise InputError(f"workloads.{wl.name}.{field}: {k!r} is neither a system of the menu "
                                     f"({', '.join(sorted(menu))}) nor a catalog hardware key") from None
                if t.count is not None or t.key in menu:  # a count, or a menu system under another spelling
                    raise InputError(f"workloads.{wl.name}.{field}: write {k!r} as {t.key!r} (a system's name or its "
                                     "hardware key, without a count), or it is not applied")
        for st in systems:  # a count beyond what a target holds is refused, whatever its place in the list (audit32c
            # F3: [32, 5000] gave a plan and [5000, 32] "infeasible", the bad count ending the system's loop)
            for key in (st.name, st.hardware):
                for n in wl.device_counts.get(key) or []:
                    try:
                        parse_target(f"{ctx[st.name]['target'].key}x{int(n)}", cat)
                    except InputError as exc:
                        raise InputError(f"workloads.{wl.name}.device_counts.{key}: {n:,} is too many; "
                                         f"{str(exc).split('; ', 1)[-1]}") from None
        _check_software(wl, systems, ctx, cat)
        _check_draft(wl, cat)
    demands, configs = [], []
    drafting: dict[str, dict[str, bool]] = {}  # per serving workload: whether each system's replicas speculate
    for i, wl in enumerate(spec.workloads):
        try:
            m = resolve_model(wl.model, cat)
        except InputError as exc:
            raise InputError(f"workloads[{i}].model ({wl.name}): {str(exc).split(': ', 1)[-1]}") from None
        if wl.kind == "serve":
            demands.append(Demand(name=wl.name, kind="serve", model=m.name, amount=wl.output_tokens_per_s_demand(),
                                  unit="output tokens/s", sla=wl.sla))
        else:
            demands.append(Demand(name=wl.name, kind="train", model=m.name, amount=float(wl.runs), unit="runs",
                                  deadline_s=wl.deadline_days * 86400.0))
        for st in systems:
            t0 = ctx[st.name]["target"]
            p = ctx[st.name]["params"]
            try:
                if wl.kind == "serve":
                    prec = wl.precision_for(st.name, st.hardware)
                    # replicas of the given device counts (a study's counted target) are searched on those counts;
                    # else every replica size of the hardware's own search
                    counts = wl.device_counts.get(st.name) or wl.device_counts.get(st.hardware) or [None]
                    sw, opts = wl.software_for(st.name, st.hardware, t0.kind), wl.engine_options(t0.kind)
                    for k in counts:
                        tk = t0.key if k is None else f"{t0.key}x{int(k)}"
                        key = serve_key(m.name, tk, wl, prec, sw, opts)
                        hit = cache.get(key) if cache is not None else None
                        if hit is None:
                            hit = serve(m, tk, precision=prec, software=sw, options=opts, input_tokens=wl.prompt_tokens,
                                        output_tokens=wl.output_tokens, catalog=cat, percentile=wl.sla.percentile,
                                        batches=None if wl.batches is None else list(wl.batches), prices=False)
                            if cache is not None:
                                cache[key] = hit
                        configs += _serve_configs(m, t0.key, wl, st.name, prec, hit, count=k)
                        # whether its points speculate, not merely whether a draft is configured (review29 #6)
                        drafting.setdefault(wl.name, {})[st.name] = any(
                            p.accepted_tokens_per_step > 1.0 for p in hit.points)
                    notes += [f"{wl.name} on {st.name}: {n}" for n in positions_note(m, wl.prompt_tokens, wl.output_tokens)
                              if f"{wl.name} on {st.name}: {n}" not in notes]
                else:
                    counts = wl.device_counts.get(st.name) or wl.device_counts.get(st.hardware) or (
                        [1, 2, 4, 8, 16, 32, 64] if t0.kind == "wafer" else [64, 128, 256, 512, 1024, 2048])
                    tokens = wl.train_tokens
                    if tokens is None:

                        tokens = prices.site.train_tokens_per_param.si * total_params(m)
                    for k in counts:
                        t = target_with_count(t0, int(k))
                        tr = plan(m, t, phase="train", precision=wl.precision, batch=wl.batch, context=wl.context,
                                  catalog=cat)
                        if not tr.fits:
                            continue
                        if tr.step_s is None or tr.step_s <= 0:
                            continue
                        # the run's wall time as time --train-tokens and cost give it: steps over the goodput the
                        # target's interruptions leave (GPU clusters)
                        run_s = float(time_to_train(step_s=tr.step_s, tokens_per_step=wl.batch * wl.context,
                                                    train_tokens=tokens, num_gpus=int(k),
                                                    goodput=run_goodput(t0.kind, cat, job_devices(tr.layout or {}, int(k))))[0])
                        runs = math.floor(wl.deadline_days * 86400.0 / run_s)
                        mx = tr.details.get("memoryx") or {}  # the option the plan holds the model in
                        cx, cy, cw, cu = (_memoryx_extra(dict(p, memoryx_capacity_bytes=mx.get(
                            "capacity_bytes", p["memoryx_capacity_bytes"])), st, int(k))
                            if t0.kind == "wafer" else (0.0, 0.0, 0.0, 0.0))
                        configs.append(Config(workload=wl.name, system=st.name, num_devices=int(k), batch=wl.batch,
                                              supply=float(runs), run_s=run_s, extra_capex_usd=cx, extra_annual_usd=cy,
                                              extra_facility_power_w=cw, extra_rack_units=cu))
            except (WseplanError, ImportError, NotImplementedError) as exc:
                notes.append(f"{wl.name} on {st.name}: skipped ({' '.join(str(exc).split())[:160]})")
    for wl in spec.workloads:
        wafers = [st.name for st in systems if ctx[st.name]["target"].kind != "gpu"]
        if wl.kv_precision and wafers:
            notes.append(f"{wl.name}: kv_precision {wl.kv_precision} applies to the GPU systems; {', '.join(wafers)} "
                         "keep their own KV-cache format")
    for wl in spec.workloads:
        if wl.kind == "train":  # a deadline run's systems are bought for it: the yearly TCO is what it costs (audit33a M2)
            notes.append(f"{wl.name}: {wl.runs} run(s) within {wl.deadline_days:g} days on systems the plan buys for "
                         "them, charged their whole yearly TCO as every system of the fleet (idle after the runs unless "
                         "other work uses them); `wseplan cost --phase train` prices one run at its hours alone")
    scope: dict[str, list[str]] = {}
    for st in systems:
        scope.setdefault(tco_scope_note(amortization_years=st.cost_inputs["amortization_years"],
                                        cost_of_capital_frac_per_year=st.cost_inputs.get("cost_of_capital_frac_per_year",
                                                                                         0.0)), []).append(st.name)
    # one note for all, or each naming its systems where a per-hardware --set gives them different terms (review33 L1)
    notes += list(scope) if len(scope) == 1 else [f"{', '.join(names)}: {n}" for n, names in scope.items()]
    for wl_name, on in drafting.items():  # unlike engines side by side (as compare says of its rows)
        yes, no = [k for k, v in on.items() if v], [k for k, v in on.items() if not v]
        if yes and no:
            notes.append(f"{wl_name}: speculative decoding differs across the systems (on: {', '.join(yes)}; off: "
                         f"{', '.join(no)}), as each family's default software profile runs; for like for like set the "
                         "workload's speculative: none, or software: {gpu: gpu-production-specdec}")
    return FleetProblem(demands=demands, systems=systems, configs=configs,
                        power_cap_w=spec.constraints.power_cap_w, rack_units_cap=spec.constraints.rack_units_cap,
                        budget_usd=spec.constraints.budget_usd, notes=notes)


def plan_fleet(demand: str | Path | DemandSpec, *, catalog=None, prices_files: list[str] | tuple = (),
               overrides: dict[str, float] | None = None, solver: str = "highs", analyze: bool = True,
               time_limit_s: float = 60.0, analysis: str = "auto", cache: dict | None = None) -> FleetPlan:
    """Read a demand file, build the problem and solve it (the API behind ``wseplan fleet``; ``cache``: see
    :func:`build_problem`)."""

    resolve_solver(solver)  # a bad name fails before the time models run
    spec = demand if isinstance(demand, DemandSpec) else read_demand(demand)
    cat = catalog or load_catalog()
    prices = load_prices([*spec.prices, *prices_files], catalog=cat)
    pb = build_problem(spec, catalog=cat, prices=prices, overrides=overrides, cache=cache)
    return solve_fleet(pb, solver=solver, analyze=analyze, name=spec.name, time_limit_s=time_limit_s, analysis=analysis)


def synthetic_problem(num_systems: int, num_workloads: int, *, seed: int = 0, configs_per_pair: int = 4) -> FleetProblem:
    """A random but well-posed problem of the given size (benchmarks and property tests)."""
    rng = np.random.default_rng(seed)
    systems = [SystemType(name=f"sys{j}", hardware=f"hw{j}", price_key=f"hw{j}", devices_per_system=int(rng.choice([1, 8])),
                          capex_usd=float(rng.uniform(2e5, 3e6)), annual_usd=float(rng.uniform(8e4, 1.2e6)),
                          peak_facility_power_w=float(rng.uniform(8e3, 3e4)), rack_units=float(rng.choice([6, 8, 15])))
               for j in range(num_systems)]
    demands, configs = [], []
    for w in range(num_workloads):
        tpot = float(rng.uniform(0.02, 0.08))
        demands.append(Demand(name=f"w{w}", kind="serve", model="m", amount=float(rng.uniform(1e3, 5e5)),
                              unit="output tokens/s", sla=Sla(tpot_s=tpot)))
        for s in systems:
            for _ in range(configs_per_pair):
                devs = int(rng.integers(1, 5)) * s.devices_per_system
                configs.append(Config(workload=f"w{w}", system=s.name, num_devices=devs, batch=int(rng.choice([1, 8, 64])),
                                      supply=float(rng.uniform(50, 2e4)), ttft_s=float(rng.uniform(0.1, 2)),
                                      tpot_s=float(rng.uniform(0.005, 0.1))))
    return FleetProblem(demands=demands, systems=systems, configs=configs, power_cap_w=5e7, rack_units_cap=1e5,
                        budget_usd=5e10)
