"""Fleet ILP: brute-force optimum on small cases, binding constraints and their savings, infeasibility
diagnosis, the example demand traced to the catalogs, and the `wseplan fleet` command."""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.errors import InfeasibleError
from wseplan.optimize.fleet import (Config, Demand, FleetProblem, Sla, SystemType, build_problem, meets_sla, plan_fleet,
                                    read_demand, solve_fleet, synthetic_problem)
from wseplan.timing import TimeResult

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "studies" / "demand-example.yaml"


def _sys(name, capex, annual, power=1.0, ru=1.0, per=1):
    return SystemType(name=name, hardware=name, price_key=name, devices_per_system=per, capex_usd=capex,
                      annual_usd=annual, peak_facility_power_w=power, rack_units=ru)


def _brute(pb: FleetProblem, caps=None):
    """Cheapest plan by enumeration: replicas of each SLA-meeting config up to what it needs alone."""
    caps = caps or {k: getattr(pb, k) for k in ("power_cap_w", "rack_units_cap", "budget_usd")}
    dem = {d.name: d for d in pb.demands}
    cfg = [c for c in pb.configs if meets_sla(c, dem[c.workload])]
    ranges = [range(0, math.ceil(dem[c.workload].amount / c.supply) + 1) for c in cfg]
    sysd = {s.name: s for s in pb.systems}
    best = None
    for n in itertools.product(*ranges):
        if any(sum(c.supply * k for c, k in zip(cfg, n) if c.workload == d.name) < d.amount - 1e-9 for d in pb.demands):
            continue
        counts = {s: math.ceil(sum(c.num_devices * k for c, k in zip(cfg, n) if c.system == s) / sysd[s].devices_per_system)
                  for s in sysd}
        use = {"power_cap_w": sum(sysd[s].peak_facility_power_w * v for s, v in counts.items())
               + sum(c.extra_facility_power_w * k for c, k in zip(cfg, n)),
               "rack_units_cap": sum(sysd[s].rack_units * v for s, v in counts.items()),
               "budget_usd": sum(sysd[s].capex_usd * v for s, v in counts.items())
               + sum(c.extra_capex_usd * k for c, k in zip(cfg, n))}
        if any(caps[k] is not None and use[k] > caps[k] + 1e-9 for k in use):
            continue
        cost = sum(sysd[s].annual_usd * v for s, v in counts.items()) + sum(c.extra_annual_usd * k for c, k in zip(cfg, n))
        best = cost if best is None else min(best, cost)
    return best


def _budget_case(budget=730.0, power=100.0):
    # A: cheap to buy, dear to run, supplies 1; B: dear to buy, cheaper per unit of supply, supplies 3.
    systems = [_sys("A", 100, 10), _sys("B", 400, 25)]
    demands = [Demand(name="w", kind="serve", model="m", amount=6, unit="tok/s", sla=Sla(tpot_s=0.05))]
    configs = [Config(workload="w", system="A", num_devices=1, batch=1, supply=1, ttft_s=0.1, tpot_s=0.01),
               Config(workload="w", system="B", num_devices=1, batch=1, supply=3, ttft_s=0.1, tpot_s=0.01)]
    return FleetProblem(demands=demands, systems=systems, configs=configs, budget_usd=budget, power_cap_w=power)


def test_budget_binds_and_relaxing_it_saves_what_enumeration_says():
    pb = _budget_case()
    plan = solve_fleet(pb)
    # hand: 1 B + 3 A costs 25 + 30 = 55/yr for 700 capex; 2 B (50/yr) needs 800 > 730
    assert plan.status == "optimal" and plan.total_usd_per_year == pytest.approx(55.0)
    assert plan.capex_usd == pytest.approx(700.0)
    cons = {c.name: c for c in plan.constraints}
    b = cons["budget_usd"]
    assert b.binding and b.slack == pytest.approx(30.0)
    assert b.relaxed_usd_per_year == pytest.approx(_brute(pb, {"budget_usd": 730 * 1.1, "power_cap_w": 100,
                                                               "rack_units_cap": None}))
    assert b.saving_usd_per_year == pytest.approx(5.0)
    assert not cons["power_cap_w"].binding and cons["power_cap_w"].saving_usd_per_year == 0.0
    # 10% less demand (5.4 tok/s) still needs 1 B + 3 A within the budget: tight (slack 0) but no saving
    less = pb.model_copy(update={"demands": [pb.demands[0].model_copy(update={"amount": 5.4})]})
    assert cons["demand_w"].slack == 0.0
    assert cons["demand_w"].relaxed_usd_per_year == pytest.approx(_brute(less))
    assert not cons["demand_w"].binding
    assert plan.to_frames()["systems"]["count"].sum() == 4


small = st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(0, 10_000))


@settings(max_examples=25, deadline=None)
@given(small)
def test_ilp_equals_brute_force_on_small_cases(args):
    ns, nw, seed = args
    import numpy as np

    rng = np.random.default_rng(seed)
    systems = [_sys(f"s{j}", float(rng.integers(50, 500)), float(rng.integers(5, 60)), power=float(rng.integers(1, 5)),
                    ru=float(rng.integers(1, 4)), per=int(rng.choice([1, 2]))) for j in range(ns)]
    demands, configs = [], []
    for w in range(nw):
        demands.append(Demand(name=f"w{w}", kind="serve", model="m", amount=float(rng.integers(1, 9)), unit="tok/s",
                              sla=Sla(tpot_s=0.05)))
        for s in systems:
            for _ in range(2):
                configs.append(Config(workload=f"w{w}", system=s.name, num_devices=int(rng.integers(1, 3)), batch=1,
                                      supply=float(rng.integers(2, 6)), ttft_s=0.1, tpot_s=float(rng.choice([0.01, 0.2])),
                                      extra_facility_power_w=float(rng.choice([0.0, 0.0, 4.0]))))  # a replica's own servers
    caps = dict(power_cap_w=float(rng.integers(20, 60)), rack_units_cap=None, budget_usd=float(rng.integers(800, 4000)))
    pb = FleetProblem(demands=demands, systems=systems, configs=configs, **caps)
    best = _brute(pb)
    if best is None:
        with pytest.raises(InfeasibleError):
            solve_fleet(pb, analyze=False)
    else:
        plan = solve_fleet(pb, analyze=False)
        assert plan.total_usd_per_year == pytest.approx(best, rel=1e-9)
        assert all(a.tpot_at_percentile_s <= 0.05 for a in plan.allocations)  # only SLA-meeting configurations serve


def test_infeasible_power_cap_is_named():
    pb = _budget_case(budget=None, power=1.0)
    with pytest.raises(InfeasibleError, match=r"power cap .* needs at least 2 W") as exc:
        solve_fleet(pb)
    assert "\n" not in str(exc.value)


def test_infeasible_sla_is_named():
    pb = _budget_case()
    pb = pb.model_copy(update={"demands": [pb.demands[0].model_copy(update={"sla": Sla(tpot_s=0.001)})]})
    with pytest.raises(InfeasibleError, match="workload w: no configuration meets its SLA"):
        solve_fleet(pb)


def test_eight_systems_twenty_workloads_solve_fast():
    pb = synthetic_problem(8, 20, seed=1)
    plan = solve_fleet(pb, analyze=False)
    assert plan.status == "optimal"
    assert plan.solve_s <= 2.0
    # every workload is served
    served = {a.workload for a in plan.allocations}
    assert served == {d.name for d in pb.demands}


# --------------------------------------------------------------------------------------------- example demand
def _fake_predict(model, target, *, phase="decode", precision="bf16", batch=None, context=None, output_tokens=None,
                  catalog=None, **kw):
    n = target.count or 1
    common = dict(model="m", target=target.label, hardware=target.key, device_kind=target.kind, precision=precision,
                  phase=phase, batch=batch, context=context, num_devices=n, bottleneck="compute")
    if phase == "prefill":
        step = 2e-5 * batch * context / n
        return TimeResult(step_s=step, ttft_s=step, **common)
    if phase == "decode":
        tpot = 0.04 / n + 1e-4 * batch
        return TimeResult(step_s=tpot, tpot_s=tpot, **common)
    return TimeResult(step_s=20.0 * batch * context / 3e6 / (n / 64 if target.kind == "wafer" else n / 512), **common)


@pytest.fixture
def fake_time(monkeypatch):
    import wseplan.timing

    monkeypatch.setattr(wseplan.timing, "predict_time", _fake_predict)


def test_example_demand_traces_to_catalog_inputs(fake_time):
    from wseplan.analytic.cost import HOURS_PER_YEAR, load_prices
    from wseplan.catalog import load_catalog

    cat = load_catalog()
    prices = load_prices(catalog=cat)
    spec = read_demand(EXAMPLE)
    pb = build_problem(spec, catalog=cat, prices=prices)
    site = {k: getattr(prices.site, k).si for k in type(prices.site).model_fields}
    for s in pb.systems:
        hp = prices.hardware[s.price_key]
        if s.price_key == "cs3":
            power, ru = cat.systems["cs3"].power_w.si, cat.systems["cs3"].rack_units.si
        else:
            g = cat.gpus[s.hardware]
            power, ru = g.node_power_w.si, g.node_rack_units.si
        hw = hp.capex_usd.si * (1 + hp.network_frac.si)
        u = site["utilization_frac"]
        annual = (hw * (1 + site["installation_frac"]) / site["amortization_years"] + hw * site["maintenance_frac_per_year"]
                  + power * (u * site["busy_power_frac"] + (1 - u) * site["idle_power_frac"]) * site["pue"] / 1000
                  * HOURS_PER_YEAR * site["electricity_usd_per_kwh"] + power / 1000 * site["facility_usd_per_kw_month"] * 12)
        assert s.annual_usd == pytest.approx(annual, rel=1e-9), s.name
        assert s.capex_usd == pytest.approx(hw * (1 + site["installation_frac"]), rel=1e-9)
        assert s.peak_facility_power_w == pytest.approx(power * site["pue"], rel=1e-9)
        assert s.rack_units == ru
    plan = solve_fleet(pb, name=spec.name)
    sysd = {s.name: s for s in pb.systems}
    total = sum(r.count * sysd[r.system].annual_usd for r in plan.systems)
    total += sum(a.replicas * c.extra_annual_usd for a in plan.allocations for c in pb.configs
                 if c.workload == a.workload and c.system == a.system and c.num_devices == a.devices_per_replica
                 and c.batch == a.batch)
    assert plan.total_usd_per_year == pytest.approx(total, rel=1e-9)
    # supply meets demand, SLAs hold, caps hold
    for d in pb.demands:
        assert sum(a.supply for a in plan.allocations if a.workload == d.name) >= d.amount
    for a in plan.allocations:
        if a.tpot_at_percentile_s is not None:
            assert a.tpot_at_percentile_s <= 0.05 and a.ttft_at_percentile_s <= 2.0
            assert a.tpot_s <= a.tpot_at_percentile_s * (1 + 1e-12)  # the mean TPOT, not above the percentile's
        if a.run_s is not None:
            assert a.run_s <= 30 * 86400
    assert plan.peak_facility_power_w <= spec.constraints.power_cap_w
    assert plan.capex_usd <= spec.constraints.budget_usd
    # what the dollars hold and leave out, and that a deadline run's systems are charged all year (audit33a M2, M5)
    years = site["amortization_years"]
    assert any(n.startswith(f"TCO: hardware capex over {years:g} years") and "leaves out staff" in n for n in pb.notes)
    assert any(n.startswith("train-175b: 1 run(s) within 30 days") and "whole yearly TCO" in n for n in pb.notes)


def test_cli_fleet_example_and_infeasible(fake_time, capsys, tmp_path):
    from wseplan.cli import main

    rc = main(["fleet", str(EXAMPLE), "--format", "json"])
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0 and rec["status"] == "optimal" and rec["systems"] and rec["constraints"]
    for fmt in ("table", "csv", "md"):
        assert main(["fleet", str(EXAMPLE), "--no-analysis", "--format", fmt]) == 0
    capsys.readouterr()
    text = EXAMPLE.read_text().replace('power_cap_w: "1.6 MW"', 'power_cap_w: "20 kW"')
    bad = tmp_path / "tight.yaml"
    bad.write_text(text)
    rc = main(["fleet", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and "power cap" in err and err.count("\n") == 1
    typo = tmp_path / "typo.yaml"
    typo.write_text(EXAMPLE.read_text().replace("deadline_days:", "deadline_dayz:"))
    rc = main(["fleet", str(typo)])
    err = capsys.readouterr().err
    assert rc == 2 and "deadline_dayz" in err and err.count("\n") == 1
    rc = main(["fleet", str(tmp_path / "missing.yaml")])
    assert rc == 2 and "not found" in capsys.readouterr().err


def test_example_demand_with_the_time_models():
    """The example demand is feasible with the real time models and every workload is served."""
    plan = plan_fleet(EXAMPLE, analyze=False)
    assert plan.status == "optimal"
    assert {a.workload for a in plan.allocations} == {"chat-70b", "train-175b"}
    assert plan.peak_facility_power_w <= 1.6e6 and plan.capex_usd <= 60e6 and plan.rack_units <= 1008


def test_overrides_apply_per_system_type(fake_time):
    from wseplan.catalog import load_catalog
    from wseplan.errors import InputError

    cat = load_catalog()
    spec = read_demand(EXAMPLE)
    base = {s.name: s for s in build_problem(spec, catalog=cat).systems}
    pb = build_problem(spec, catalog=cat, overrides={"h100-sxm.capex_usd": 200000.0, "memoryx_dram_usd_per_tb": 1e5,
                                                      "h200-sxm.cloud_usd_per_device_hour": 2.0})
    new = {s.name: s for s in pb.systems}
    assert new["h100-sxm"].cost_inputs["capex_usd"] == 200000.0
    assert new["h200-sxm"].capex_usd == base["h200-sxm"].capex_usd  # untouched
    assert new["cs3"].cost_inputs["memoryx_dram_usd_per_tb"] == 1e5
    wafer_train = [c for c in pb.configs if c.system == "cs3" and c.run_s is not None]
    assert wafer_train and all(c.extra_capex_usd > 0 for c in wafer_train)
    # the MemoryX priced is the option the plan holds the model in (the smallest that holds it), not the default
    from wseplan.analytic.cost import memoryx_capex_usd
    from wseplan.plan import plan

    p = new["cs3"].cost_inputs
    wls = {w.name: w for w in spec.workloads}
    for c in wafer_train[:2]:
        wl = wls[c.workload]
        mx = plan(wl.model, f"cs3x{c.num_devices}", phase="train", precision=wl.precision, batch=wl.batch,
                  context=wl.context, catalog=cat).details["memoryx"]
        hw = memoryx_capex_usd(capacity_bytes=mx["capacity_bytes"], dram_capacity_bytes=p["memoryx_dram_capacity_bytes"],
                               dram_usd_per_tb=1e5, flash_usd_per_tb=p["memoryx_flash_usd_per_tb"])
        assert c.extra_capex_usd == pytest.approx(float(hw) * (1 + p["installation_frac"]), rel=1e-9)
    # a replica of k CS-3 brings its cluster's CPU servers: 12 MemoryX + 4 per system, 800 W each, times the PUE
    for c in wafer_train:
        assert c.extra_facility_power_w == pytest.approx((12 + 4 * c.num_devices) * 800.0 * p["pue"], rel=1e-9)
    with pytest.raises(InputError, match="unknown cost input"):
        build_problem(spec, catalog=cat, overrides={"electricity": 0.1})
    with pytest.raises(InputError, match="cloud_usd_per_device_hour is per hardware"):  # one price for three (review37 M5)
        build_problem(spec, catalog=cat, overrides={"cloud_usd_per_device_hour": 2.0})


# --------------------------------------------------------------------------------------------- analysis, solver
def test_shadow_prices_by_hand():
    """LP relaxation of the budget case, by hand: replicas = systems (1 device each); with the budget tight,
    S_A = D - 3 S_B and 100 S_A + 400 S_B = B give S_B = (B - 100 D)/100 ... cost = 10 S_A + 25 S_B
    = 15 D - 0.05 B + 0 (at D = 6, B = 730: S_B = 1.3, S_A = 2.1, cost 53.5). So the budget's shadow price is
    0.05 USD/year per USD, the demand's 15 USD/year per tok/s, the power cap's 0."""
    plan = solve_fleet(_budget_case())
    assert plan.lp_usd_per_year == pytest.approx(53.5, rel=1e-9)
    cons = {c.name: c for c in plan.constraints}
    assert cons["budget_usd"].shadow_price == pytest.approx(0.05, rel=1e-9)
    assert cons["budget_usd"].shadow_price_unit == "USD/year per USD"
    assert cons["demand_w"].shadow_price == pytest.approx(15.0, rel=1e-9)
    assert cons["demand_w"].shadow_price_unit == "USD/year per tok/s"
    assert cons["power_cap_w"].shadow_price == 0.0 and cons["power_cap_w"].shadow_price_unit == "USD/year per W"
    # the LP is a lower bound; the integer plan (55) is what the record's total and savings use
    assert plan.lp_usd_per_year <= plan.total_usd_per_year
    assert all(c.analysis for c in plan.constraints)


def _power_capped(pb: FleetProblem, frac: float) -> FleetProblem:
    """``pb`` with only a power cap: ``frac`` of the way from the least power any plan needs to the power of
    the cheapest plan (> 1: above it, the cap does not bind)."""
    from wseplan.optimize.fleet import _solve_once

    free = dict(power_cap_w=None, rack_units_cap=None, budget_usd=None)
    cheapest = solve_fleet(pb.model_copy(update=free), analyze=False).peak_facility_power_w
    least = _solve_once(pb, caps=free, minimise="power_cap_w").objective
    return pb.model_copy(update=dict(free, power_cap_w=least + frac * (cheapest - least)))


@pytest.mark.parametrize("frac", [1.5, 0.5])
def test_analysis_equals_independent_full_solves(frac):
    """Every relaxation's optimum (decomposed, remembered, warm-started) equals a cold solve of the full model
    of the relaxed problem; with frac 0.5 the power cap binds (the full model with the caps is solved)."""
    from wseplan.optimize.fleet_model import FleetModel

    pb = _power_capped(synthetic_problem(3, 6, seed=0, configs_per_pair=3), frac)
    plan = solve_fleet(pb)
    assert ("decomposed" in plan.method) == (frac > 1)
    cons = {c.name: c for c in plan.constraints}
    for c in cons.values():
        if c.kind == "cap":
            rel = FleetModel(pb).solve(caps={"power_cap_w": pb.power_cap_w * 1.1, "rack_units_cap": None,
                                             "budget_usd": None}, decompose=False)
        elif c.kind == "demand":
            rel = FleetModel(pb).solve(demand_scale={c.name[len("demand_"):]: 0.9}, decompose=False)
        else:
            rel = FleetModel(pb).solve(sla_factor={c.name[len("sla_"):]: 1.1}, decompose=False)
        assert c.relaxed_usd_per_year == pytest.approx(rel["objective"], rel=2e-6), c.name
        assert c.saving_usd_per_year == pytest.approx(max(0.0, plan.total_usd_per_year - rel["objective"]),
                                                      rel=1e-6, abs=1e-6 * plan.total_usd_per_year)
    assert cons["power_cap_w"].binding == (frac < 1)
    if frac > 1:
        assert cons["power_cap_w"].analysis.startswith("proved unchanged")


def test_highs_start_is_checked():
    """Workload w8 of the 32 x 80 benchmark as a knapsack: the plan at its SLA is the start for the SLA relaxed
    10%. HiGHS 1.16 returns that start as "optimal" with objective 0 after presolve; the solver layer notices
    (objective != cost of the solution) and re-solves without the start, reaching the cold optimum."""
    import numpy as np
    import scipy.sparse as sp

    from wseplan.optimize.milp import Milp, solve_milp

    pb = synthetic_problem(32, 80, seed=0)
    d = pb.demands[8]
    cfg = [c for c in pb.configs if c.workload == d.name and c.tpot_s <= d.sla.tpot_s * 1.1]
    per_device = {s.name: s.annual_usd / s.devices_per_system for s in pb.systems}
    cost = np.array([per_device[c.system] * c.num_devices for c in cfg])
    supply = np.array([c.supply for c in cfg])

    def knapsack(col_hi):
        return Milp(c=cost, A=sp.csr_matrix(supply[None, :]), row_lo=np.array([d.amount]), row_hi=np.array([np.inf]),
                    col_lo=np.zeros(len(cfg)), col_hi=col_hi, integer=np.ones(len(cfg), dtype=bool))

    at_sla = np.array([c.tpot_s <= d.sla.tpot_s for c in cfg])
    base = solve_milp(knapsack(np.where(at_sla, np.inf, 0.0)), "highs")
    relaxed = knapsack(np.full(len(cfg), np.inf))
    cold = solve_milp(relaxed, "highs")
    warm = solve_milp(relaxed, "highs", start=base.x)
    assert warm.status == cold.status == "optimal" and cold.objective < base.objective
    assert warm.objective == pytest.approx(cold.objective, rel=1e-6)
    assert warm.objective == pytest.approx(float(cost @ warm.x), rel=1e-9)
    assert warm.extra["retries"] <= 2


def test_highs_missing_falls_back_to_cbc_and_records_it(monkeypatch):
    import wseplan.optimize.milp as M

    pb = _budget_case()
    ref = solve_fleet(pb)
    assert ref.solver == "highs" and ref.solver_run.name == "highs" and ref.solver_run.fallback_reason is None
    assert ref.solver_run.version and ref.solver_run.status == "optimal" and ref.solver_run.gap_frac is not None
    monkeypatch.setattr(M, "highs_available", lambda: False)
    plan = solve_fleet(pb)
    assert plan.solver == "cbc" and plan.solver_run.name == "cbc" and plan.solver_run.requested == "highs"
    assert "highspy" in plan.solver_run.fallback_reason and any("highspy" in n for n in plan.notes)
    assert plan.total_usd_per_year == pytest.approx(ref.total_usd_per_year, rel=1e-9)
    assert [c.saving_usd_per_year for c in plan.constraints] == pytest.approx([c.saving_usd_per_year for c in ref.constraints])
    assert [c.shadow_price for c in plan.constraints] == pytest.approx([c.shadow_price for c in ref.constraints])
    rec = plan.to_record()
    assert rec["solver_run"]["name"] == "cbc" and rec["solver_run"]["requested"] == "highs"


def test_unknown_solver_is_an_input_error():
    from wseplan.errors import InputError

    with pytest.raises(InputError, match="solver"):
        solve_fleet(_budget_case(), solver="gurobi")


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_time_limit_gives_the_best_plan_found_with_its_gap(solver):
    """Stopped at once, the solve still returns a plan (the greedy start: each workload on its cheapest
    configuration per unit supplied) with status time_limit and its gap to the LP bound, never infeasible."""
    pb = synthetic_problem(4, 6, seed=0)
    plan = solve_fleet(pb, time_limit_s=0.0, analyze=False, solver=solver)
    best = solve_fleet(pb, analyze=False, solver=solver)
    assert plan.status == "time_limit" and not plan.optimal
    assert plan.status_detail == f"time limit, best found, gap {100 * plan.gap_frac:.3g}%"
    assert plan.best_bound_usd_per_year <= best.total_usd_per_year <= plan.total_usd_per_year
    assert plan.gap_frac == pytest.approx(1 - plan.best_bound_usd_per_year / plan.total_usd_per_year)
    for d in pb.demands:
        assert sum(a.supply for a in plan.allocations if a.workload == d.name) >= d.amount


def test_lp_analysis_mode_by_hand():
    """analysis='lp': the demand row is answered by the LP relaxation. By hand (budget case): at D = 5.4 the LP
    buys B only, S_B = 1.8 (capex 720 <= 730), 45 USD/year, against 53.5 at D = 6: an LP saving of 8.5; the
    integer fields stay empty and the row says the LP answered it. The caps are still re-solved exactly."""
    plan = solve_fleet(_budget_case(), analysis="lp")
    cons = {c.name: c for c in plan.constraints}
    dem = cons["demand_w"]
    assert dem.lp_saving_usd_per_year == pytest.approx(8.5, rel=1e-9)
    assert dem.saving_usd_per_year is None and dem.relaxed_usd_per_year is None
    assert dem.analysis.startswith("LP relaxation") and dem.binding
    assert cons["budget_usd"].saving_usd_per_year == pytest.approx(5.0)  # integer, as in the exact mode
    assert plan.analysis_mode == "lp"
    exact = solve_fleet(_budget_case(), analysis="exact")
    assert {c.name: c.saving_usd_per_year for c in exact.constraints}["demand_w"] == 0.0
    with pytest.raises(Exception, match="analysis"):
        solve_fleet(_budget_case(), analysis="fast")


def test_binding_means_the_same_for_caps_and_demands():
    """A cap met with equality whose 10% relaxation saves nothing is tight but not binding, as a demand is (before, a
    zero-slack cap was called binding and a zero-slack demand was not). Hand: demand 6 tok/s from A (1 tok/s, 10/yr,
    power 10 W) or B (3 tok/s, 25/yr, power 40 W): 2 B cost 50/yr and draw 80 W; under an 80 W cap the plan is 2 B
    with zero slack, and at 88 W (10% looser) nothing cheaper exists (3 A + 1 B = 55/yr, 6 A = 60/yr)."""
    pb = _budget_case(budget=None, power=80.0)
    pb = pb.model_copy(update={"systems": [_sys("A", 100, 10, power=10), _sys("B", 400, 25, power=40)]})
    assert _brute(pb) == pytest.approx(50.0)
    assert _brute(pb, {"power_cap_w": 88.0, "rack_units_cap": None, "budget_usd": None}) == pytest.approx(50.0)
    plan = solve_fleet(pb)
    assert plan.total_usd_per_year == pytest.approx(50.0)
    cons = {c.name: c for c in plan.constraints}
    cap, dem = cons["power_cap_w"], cons["demand_w"]
    assert cap.slack == pytest.approx(0.0) and cap.tight and cap.saving_usd_per_year == 0.0 and not cap.binding
    assert dem.slack == pytest.approx(0.0) and dem.tight
    assert dem.binding == (dem.saving_usd_per_year > 0)  # 5.4 tok/s: 1 B + 3 A = 55 > 50, so no saving
    assert not dem.binding


def test_wafer_training_replica_prices_the_memoryx_option_its_plan_uses(tmp_path, fake_time):
    """review18 #1: an 8B training workload fits the 1.5 TB MemoryX option (8.03e9 x 16 B = 0.13 TB); the fleet
    charges a replica that option (1.5 TB x $40k/TB DRAM x (1 + installation)), not the 12 TB default."""
    from wseplan.catalog import load_catalog

    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems:\n  - hardware: cs3\nworkloads:\n  - name: tr\n    model: llama-3-8b\n    kind: train\n"
                 "    precision: bf16\n    train_tokens: 1e9\n    runs: 1\n    deadline_days: 30\n    batch: 64\n"
                 "    context: 2048\n    device_counts:\n      cs3: [1]\n")
    pb = build_problem(read_demand(f), catalog=load_catalog())
    (c,) = [c for c in pb.configs if c.run_s is not None]
    p = pb.systems[0].cost_inputs
    assert c.extra_capex_usd == pytest.approx(1.5 * 40_000 * (1 + p["installation_frac"]), rel=1e-9)


def test_serving_configs_missing_the_sla_at_90pct_are_offered_at_a_lower_load(tmp_path):
    """audit25 F2: a TTFT limit that queueing breaks at 90% load was reported as infeasible ("relax the SLA") though
    the same replicas meet it run less full. Each replica size and batch that misses the SLA at 0.9 comes back at the
    highest lower load that meets it, with the supply, TTFT and TPOT `serve` gives at that load."""
    from wseplan.catalog import load_catalog
    from wseplan.serving import serve

    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems:\n  - hardware: h200-sxm\nworkloads:\n  - name: chat\n    model: llama-3.1-70b\n"
                 "    kind: serve\n    precision: bf16\n    output_tokens_per_s: 20000\n    prompt_tokens: 2048\n"
                 "    output_tokens: 256\n    batches: [16, 64]\n    sla: {ttft_s: 1.0, tpot_s: 0.05}\n")
    cat = load_catalog()
    spec = read_demand(f)
    pb = build_problem(spec, catalog=cat)
    (d,) = pb.demands
    at90 = {(c.num_devices, c.batch): c for c in pb.configs if c.load_frac == pytest.approx(0.9, rel=1e-12)}
    below = [c for c in pb.configs if c.load_frac < 0.9 - 1e-9]
    lower = [c for c in below if meets_sla(c, d)]
    assert not any(meets_sla(c, d) for c in at90.values())  # nothing meets the SLA at 90% load ...
    assert lower                                             # ... but run less full, some do
    # the others meet the relaxation analysis' looser limits (1.1 x; audit28b H1), at a load above the SLA's own
    for c in below:
        if c not in lower:
            assert c.ttft_s <= 1.0 * 1.1 and c.tpot_s <= 0.05 * 1.1
            strict = [x for x in lower if (x.num_devices, x.batch) == (c.num_devices, c.batch)]
            assert all(x.load_frac < c.load_frac for x in strict)
    for c in lower:
        hi = at90[(c.num_devices, c.batch)]
        assert not meets_sla(hi, d) and c.supply < hi.supply
        # the same point as `serve` at that load (the API behind `wseplan serve --utilization`)
        u = round(c.load_frac, 9)  # the ladder's load: the share of the slots held, as serve --utilization takes it
        res = serve("llama-3.1-70b", "h200-sxm", precision="bf16", input_tokens=2048, output_tokens=256, batches=[16, 64],
                    percentile=95, prices=False, utilization=u, catalog=cat)
        (p,) = [p for p in res.points if p.num_replicas == 1 and p.num_devices == c.num_devices and p.batch == c.batch]
        assert p.tokens_per_s == pytest.approx(c.supply, rel=1e-12)
        assert p.ttft_at_percentile_s == pytest.approx(c.ttft_s, rel=1e-12)
        # and the next load up (if it is on the ladder) misses the SLA: this is the highest load that meets it
        from wseplan.optimize.fleet import LOWER_LOADS
        up = [x for x in (0.9,) + LOWER_LOADS if x > u + 1e-9][-1]
        res_up = serve("llama-3.1-70b", "h200-sxm", precision="bf16", input_tokens=2048, output_tokens=256,
                       batches=[16, 64], percentile=95, prices=False, utilization=up, catalog=cat)
        (q,) = [q for q in res_up.points if q.num_replicas == 1 and q.num_devices == c.num_devices and q.batch == c.batch]
        assert q.ttft_at_percentile_s > 1.0 or (q.tpot_at_percentile_s or q.tpot_s) > 0.05
    plan = solve_fleet(pb, analyze=False)
    assert plan.status == "optimal" and all(a.load_frac < 0.9 - 1e-9 for a in plan.allocations)


def test_a_looser_sla_never_costs_a_fleet_more(tmp_path):
    """audit27 F1: a fleet of H100 nodes serving 20,000 tokens/s at TPOT <= 20 ms cost 22 nodes with TTFT <= 5 s and 18
    with TTFT <= 1 s: lower loads were offered only for a TTFT limit that failed, and a batch that misses the TPOT limit
    at 90% load meets it run less full. Loosening (or dropping) a limit only admits configurations."""
    from wseplan.catalog import load_catalog

    cat = load_catalog()
    tco = {}
    for name, sla in (("strict", "{ttft_s: 1.0, tpot_s: 0.02}"), ("loose", "{ttft_s: 5.0, tpot_s: 0.02}"),
                      ("tpot", "{tpot_s: 0.02}")):
        f = tmp_path / f"{name}.yaml"
        f.write_text("name: t\nsystems:\n  - hardware: h100-sxm\nworkloads:\n  - name: chat\n    model: llama-3.1-70b\n"
                     "    kind: serve\n    precision: bf16\n    output_tokens_per_s: 20000\n    prompt_tokens: 2048\n"
                     f"    output_tokens: 256\n    batches: [16, 32]\n    sla: {sla}\n")
        plan = solve_fleet(build_problem(read_demand(f), catalog=cat), analyze=False)
        assert plan.status == "optimal"
        tco[name] = plan.total_usd_per_year
    assert tco["loose"] <= tco["strict"] * (1 + 1e-9) and tco["tpot"] <= tco["loose"] * (1 + 1e-9)


@pytest.mark.parametrize("extra,msg", [
    ("constraints: {power_cap_w: -5}\n", "constraints.power_cap_w: Input should be greater than 0"),
    ("constraints: {budget_usd: 0}\n", "constraints.budget_usd: Input should be greater than 0"),
    ("", "workloads.chat.precisions: 'b20' is neither a system of the menu (h100-sxm) nor a catalog hardware key"),
    ("h100", "workloads.chat.precisions: write 'h100' as 'h100-sxm'"),
])
def test_demand_settings_that_would_be_ignored_are_refused(tmp_path, extra, msg):
    """audit27 (open questions): a negative power cap was reported as infeasibility, and a precision for a system not in
    the menu (a typo) was ignored without a word."""
    f = tmp_path / "d.yaml"
    prec = ", precisions: {h100: fp8}" if extra == "h100" else "" if extra else ", precisions: {b20: fp8}"
    extra = "" if extra == "h100" else extra
    f.write_text("name: t\nsystems: [{hardware: h100-sxm}]\n" + extra + "workloads:\n  - {name: chat, model: "
                 "llama-3.1-70b, kind: serve, output_tokens_per_s: 1000, batches: [16]" + prec + "}\n")
    from wseplan.errors import InputError

    with pytest.raises(InputError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        build_problem(read_demand(f))


def test_serving_device_counts_outside_the_replica_search_are_searched_on_the_count(tmp_path):
    """review27 #3: device_counts filtered the hardware's own replica search, so a count it never tries (16 H200:
    the search stops at a node) left the fleet with no configuration at all; the count is searched as a target."""
    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems: [{hardware: h200-sxm}]\nworkloads:\n  - {name: chat, model: llama-3.1-70b, "
                 "kind: serve, precision: bf16, output_tokens_per_s: 20000, prompt_tokens: 2048, output_tokens: 256, "
                 "batches: [16, 64], device_counts: {h200-sxm: [16]}, sla: {tpot_s: 0.05}}\n")
    plan = solve_fleet(build_problem(read_demand(f)), analyze=False)
    assert plan.status == "optimal" and plan.allocations
    assert all(a.devices_per_replica == 16 for a in plan.allocations)


def test_gpu_training_run_time_is_the_cost_commands(tmp_path):
    """audit28b H2: the fleet timed a GPU training run without the interruptions `time --train-tokens` and `cost`
    count (24.48 against 24.52 days for GPT-3 175B on 256 H100), so a 24.5-day deadline was 'met'. Its run time is
    now theirs: steps / goodput, goodput = 1 / (1 + N x rate x loss)."""
    from wseplan.catalog import load_catalog
    from wseplan.costing import cost

    cat = load_catalog()
    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems:\n  - hardware: h100-sxm\nworkloads:\n  - name: tr\n    model: llama-3-8b\n"
                 "    kind: train\n    precision: bf16\n    train_tokens: 1e10\n    runs: 1\n    deadline_days: 30\n"
                 "    batch: 256\n    context: 2048\n    device_counts:\n      h100-sxm: [256]\n")
    (c,) = [c for c in build_problem(read_demand(f), catalog=cat).configs if c.run_s is not None]
    res = cost("llama-3-8b", "h100-sxmx256", phase="train", batch=256, context=2048, train_tokens=1e10, catalog=cat)
    assert c.run_s == pytest.approx(res.metric("run_s"), rel=1e-9)
    d = cat.defaults
    g = 1.0 / (1.0 + 256 * d.gpu_job_interruptions_per_gpu_hour.si / 3600.0 * d.job_interruption_loss_s.si)
    assert g < 0.9999  # the interruptions are in it: the steps alone are shorter by the goodput
    steps = res.metric("run_s") * g
    assert c.run_s > steps * (1 + 1e-6)


def test_sla_relaxation_saving_is_the_resolve_with_the_looser_sla(tmp_path):
    """audit28b H1: the analysis said a 10% looser SLA saves $0 though the demand file with the looser limits written
    into it plans $58k/yr cheaper (an H100 replica meets 1.1 x the limits at a load the SLA's own search never
    offered). The analysis' relaxed cost is now the plan of the file with the looser SLA."""
    from wseplan.catalog import load_catalog

    cat = load_catalog()
    root = Path(__file__).resolve().parents[1]
    text = (root / "studies" / "demand-example.yaml").read_text()
    assert "sla: {ttft_s: 2.0, tpot_s: 0.05}" in text
    base = tmp_path / "base.yaml"
    base.write_text(text)
    loose = tmp_path / "loose.yaml"
    loose.write_text(text.replace("sla: {ttft_s: 2.0, tpot_s: 0.05}", "sla: {ttft_s: 2.2, tpot_s: 0.055}"))
    plan = plan_fleet(read_demand(base), catalog=cat)
    (row,) = [c for c in plan.constraints if c.kind == "sla"]
    relaxed = plan_fleet(read_demand(loose), catalog=cat, analyze=False)
    assert relaxed.total_usd_per_year < plan.total_usd_per_year  # the looser SLA is cheaper here ...
    assert row.relaxed_usd_per_year == pytest.approx(relaxed.total_usd_per_year, rel=1e-9)  # ... by what it says
    assert row.binding and row.saving_usd_per_year > 0


def test_wafer_training_replica_counts_its_cluster_servers_rack_space(tmp_path):
    """audit28b H3: a cs3 training replica's 1U cluster servers (MemoryX, SwarmX, workers) drew power and cost capex
    but took no rack space, so a 960 U cap was 'met' by 64 CS-3 (64 x 15 U) with 268 servers beside them. A replica
    now carries their space, as `cost` counts it, and the rack cap binds on it."""
    from wseplan.catalog import load_catalog
    from wseplan.costing import cost

    cat = load_catalog()
    f = tmp_path / "d.yaml"
    body = ("name: t\nsystems:\n  - hardware: cs3\nworkloads:\n  - name: tr\n    model: llama-3-8b\n    kind: train\n"
            "    precision: bf16\n    train_tokens: 1e9\n    runs: 1\n    deadline_days: 30\n    batch: 64\n"
            "    context: 2048\n    device_counts:\n      cs3: [4]\n")
    f.write_text(body)
    pb = build_problem(read_demand(f), catalog=cat)
    (c,) = [c for c in pb.configs if c.run_s is not None]
    res = cost("llama-3-8b", "cs3x4", phase="train", batch=64, context=2048, train_tokens=1e9, catalog=cat)
    nodes = res.metric("cluster_nodes")
    assert nodes > 0 and c.extra_rack_units == pytest.approx(nodes * 1.0)
    assert 4 * 15 + c.extra_rack_units == pytest.approx(res.metric("rack_units"))
    plan = solve_fleet(pb, analyze=False)
    assert plan.rack_units == pytest.approx(res.metric("rack_units"))
    capped = tmp_path / "capped.yaml"  # the systems alone fit 60 U; with their servers they do not
    capped.write_text(body + "constraints:\n  rack_units_cap: 60\n")
    with pytest.raises(InfeasibleError):
        plan_fleet(read_demand(capped), catalog=cat, analyze=False)


def test_an_infeasible_menu_is_blamed_on_the_menu_not_the_caps(tmp_path):
    """audit28b M1: with one system type capped at 20 systems (training alone needs 32 H100 nodes) and the site caps
    kept, the error blamed 'the caps together' though removing them does not help; it names max_systems now."""
    from wseplan.catalog import load_catalog

    f = tmp_path / "d.yaml"
    f.write_text("name: t\nconstraints:\n  power_cap_w: 1.6 MW\n  rack_units_cap: 1008\n  budget_usd: 60000000\n"
                 "systems:\n  - hardware: h100-sxm\n    max_systems: 2\nworkloads:\n  - name: tr\n    model: llama-3-8b\n"
                 "    kind: train\n    precision: bf16\n    train_tokens: 1e12\n    runs: 1\n    deadline_days: 30\n"
                 "    batch: 256\n    context: 2048\n    device_counts:\n      h100-sxm: [64]\n")
    with pytest.raises(InfeasibleError) as e:
        plan_fleet(read_demand(f), catalog=load_catalog(), analyze=False)
    msg = str(e.value)
    assert "max_systems" in msg and "h100-sxm (2)" in msg and "caps together" not in msg


@pytest.mark.parametrize("field, value, msg", [
    ("power_cap_w", '"1.6 MB"', "is in bytes, not W"),
    ("budget_usd", '"60 MW"', "is in W, not USD"),
    ("rack_units_cap", '"80 GB"', "is in bytes, not U"),
])
def test_a_cap_in_the_wrong_unit_is_refused(tmp_path, field, value, msg):
    """audit28b M7: the unit of a cap was parsed and thrown away, so '1.6 MB' was a 1.6 MW power cap and '60 MW' a
    $60M budget; a unit of another dimension is refused naming the field; the right unit and bare numbers pass."""
    from wseplan.errors import InputError

    text = EXAMPLE.read_text()
    f = tmp_path / "d.yaml"
    import re
    f.write_text(re.sub(rf"{field}: [^\n#]*", f"{field}: {value} ", text, count=1))
    with pytest.raises(InputError, match=f"constraints.{field}: .*{msg}"):
        read_demand(f)
    assert read_demand(EXAMPLE).constraints.power_cap_w == 1.6e6


@pytest.mark.parametrize("old, new, msg", [
    ("model: llama-3.1-70b", "model: llama-9000", r"workloads\[0\]\.model \(chat-70b\): unknown model 'llama-9000'"),
    ("hardware: h200-sxm", "hardware: h900", r"systems\[2\]\.hardware: unknown hardware 'h900'"),
])
def test_an_unknown_name_in_a_demand_file_names_its_field(tmp_path, old, new, msg):
    """audit28b L4: 'model: unknown model ...' did not say which workload or field of the demand file held it."""
    from wseplan.catalog import load_catalog
    from wseplan.errors import InputError

    f = tmp_path / "d.yaml"
    text = EXAMPLE.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    with pytest.raises(InputError, match=msg):
        plan_fleet(read_demand(f), catalog=load_catalog(), analyze=False)


def _demand(tmp_path, extra: str, systems=("cs3", "h200-sxm"), model="llama-3.1-8b"):
    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems:\n" + "".join(f"  - hardware: {s}\n" for s in systems) +
                 f"workloads:\n  - name: chat\n    model: {model}\n    kind: serve\n    output_tokens_per_s: 5000\n"
                 "    batches: [1, 4]\n" + extra)
    return read_demand(f)


def test_a_workload_sets_its_engines_and_says_when_they_differ(tmp_path):
    """audit28e M3: a demand file could not set the serving engine (the keys were refused), so wafers drafted with the
    wafer-production profile's Llama-3.2-1B while GPUs decoded plainly, and fleet said nothing. A workload now takes
    ``software`` (per system, hardware key or family), ``speculative`` and ``kv_precision`` (GPUs); the replica
    options are then serve's with the same settings, and unlike engines side by side are named in a note."""
    from wseplan.catalog import load_catalog
    from wseplan.operating import replica_options

    M = "llama-3.1-70b"  # whose CS-3 replicas speculate (the 8B's speculative step is no faster on a wafer)
    cat = load_catalog()
    pb = build_problem(_demand(tmp_path, "", model=M), catalog=cat)
    assert any("speculative decoding differs across the systems (on: cs3; off: h200-sxm)" in n for n in pb.notes)
    plain = build_problem(_demand(tmp_path, "    speculative: none\n", model=M), catalog=cat)
    assert not any("differs across" in n for n in plain.notes)
    off = build_problem(_demand(tmp_path, "    speculative: off\n", model=M), catalog=cat)  # YAML's False: the CLI's none
    assert sorted((c.system, c.num_devices, c.batch, c.supply) for c in off.configs) == \
        sorted((c.system, c.num_devices, c.batch, c.supply) for c in plain.configs)
    both = build_problem(_demand(tmp_path, "    software: {gpu: gpu-production-specdec}\n    kv_precision: fp8\n",
                                 model=M), catalog=cat)
    assert not any("differs across" in n for n in both.notes)
    assert any("kv_precision fp8 applies to the GPU systems; cs3 keep" in n for n in both.notes)
    # each system's configurations are serve's replica options under the same engine settings
    for pbx, sw, opts in ((plain, None, {"speculative": "none"}),
                          (both, "gpu-production-specdec", {"kv_precision": "fp8"})):
        from wseplan.serving import serve
        res = serve(M, "h200-sxm", software=sw, options=opts, batches=[1, 4], prices=False, catalog=cat)
        rows = replica_options(M, "h200-sxm", precision="bf16", input_tokens=2048, output_tokens=256,
                               batches=[1, 4], sizes="search", result=res)
        got = sorted((c.num_devices, c.batch, c.supply) for c in pbx.configs if c.system == "h200-sxm"
                     and c.load_frac == pytest.approx(0.9, rel=1e-12))
        assert got == sorted((r["num_devices"], r["batch"], r["tokens_per_s"]) for r in rows)
    drafted = {(c.num_devices, c.batch): c.tpot_s for c in both.configs if c.system == "h200-sxm"}
    base = {(c.num_devices, c.batch): c.tpot_s for c in pb.configs if c.system == "h200-sxm"}
    one = min(k for k in drafted if k[1] == 1)
    assert drafted[one] < base[one]  # a drafting GPU engine at one request decodes faster


@pytest.mark.parametrize("extra,msg", [
    ("    software: {h200-sxm: wafer-production}\n", "workloads.chat.software.h200-sxm: profile 'wafer-production' is for wafer"),
    ("    software: {h100-sxm: gpu-production}\n", "workloads.chat.software: 'h100-sxm' is neither a system"),
    ("    software: {gpu: gpu-prodution}\n", "workloads.chat.software.gpu: unknown profile 'gpu-prodution'"),
    ("    kv_precision: fp4\n", "unknown KV-cache format 'fp4'"),
    ("    speculative: llama-3.1-70b\n", "workloads.chat.speculative:"),
    ("    speculative: no-such-draft\n", "workloads.chat.speculative:"),
])
def test_a_bad_engine_setting_is_named(tmp_path, extra, msg):
    from wseplan.errors import InputError

    with pytest.raises(InputError) as e:
        build_problem(_demand(tmp_path, extra))
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_a_training_workload_refuses_serving_engine_settings(tmp_path):
    from wseplan.errors import InputError

    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems:\n  - hardware: h100-sxm\nworkloads:\n  - name: run\n    model: llama-3.1-8b\n"
                 "    kind: train\n    train_tokens: 1e9\n    deadline_days: 30\n    speculative: none\n")
    with pytest.raises(InputError, match="speculative: serving engine settings apply to serve workloads"):
        read_demand(f)


def test_a_system_types_cost_is_the_cost_models_terms(tmp_path):
    """Read-through of the twenty-eighth session: fleet priced a system type by calling the TCO function itself, so a
    new site input could be missed there; it now takes the cost model's own terms (``deployment_terms``), the ones
    ``wseplan cost`` uses. A cost of capital set in the demand file moves both the same."""
    from wseplan.analytic.cost import TimeInputs, evaluate

    f = tmp_path / "d.yaml"
    f.write_text("name: t\nset: {cost_of_capital_frac_per_year: 0.08}\nsystems:\n  - hardware: h200-sxm\n  - hardware: cs3\n"
                 "workloads:\n  - name: chat\n    model: llama-3.1-8b\n    kind: serve\n    output_tokens_per_s: 5000\n"
                 "    batches: [4]\n")
    pb = build_problem(read_demand(f))
    for st in pb.systems:
        p = {k: v for k, v in st.cost_inputs.items() if not k.startswith(("memoryx_", "cluster_"))}
        ref = evaluate(p, TimeInputs(phase="train", num_devices=st.devices_per_system, num_systems=1, step_s=1.0,
                                     tokens_per_step=1.0, train_tokens=1.0))
        assert st.cost_inputs["cost_of_capital_frac_per_year"] == 0.08
        assert st.annual_usd == pytest.approx(float(ref["total_usd_per_year"]), rel=1e-12)
        assert st.capex_usd == pytest.approx(float(ref["capex_usd"]), rel=1e-12)


@pytest.mark.parametrize("amount,usd", [(1e-9, 10.0), (1e-6, 10.0), (6.0, 50.0)])
def test_a_demand_of_any_size_is_met(amount, usd):
    """audit31b M1: the demand rows went to the solver unscaled, so a demand below its feasibility tolerance (~1e-6
    tokens/s) was "met" by no system at all ($0/yr, slack -1e-6). Scaled to a bound of 1 they hold at any size: the
    plan supplies at least the demand."""
    pb = _budget_case(budget=None, power=None)
    pb = pb.model_copy(update={"demands": [pb.demands[0].model_copy(update={"amount": amount})]})
    plan = solve_fleet(pb, analyze=False)
    cons = {c.name: c for c in plan.constraints}
    assert plan.status == "optimal" and cons["demand_w"].lhs >= amount and cons["demand_w"].slack >= 0.0
    # by hand: A supplies 1 for 10/yr, B 3 for 25/yr: one A for a tiny demand, two B (50) for 6 (six A cost 60)
    assert plan.total_usd_per_year == pytest.approx(usd)


def test_default_batches_are_serves_grid(tmp_path):
    """audit31c L2: a demand without `batches` capped concurrency at [1, 4, 16, 64], so a loose SLA came out up to 26%
    dearer than the same demand given larger batches ($1,258,766/yr against $999,286/yr for 70B at 20k tokens/s on
    H100/H200 nodes). Without `batches` the fleet takes `serve`'s grid (every batch of its search): never dearer than
    the old default, which it contains, and here cheaper with a batch above 64, the point `serve` itself would show."""
    from wseplan.catalog import load_catalog
    from wseplan.serving import serve

    cat = load_catalog()
    body = ("name: t\nsystems:\n  - hardware: h100-sxm\nworkloads:\n  - name: chat\n    model: llama-3.1-70b\n"
            "    kind: serve\n    output_tokens_per_s: 20000\n{b}    sla: {{ttft_s: 2.0, tpot_s: 0.197}}\n")
    plans = {}
    for name, b in (("old", "    batches: [1, 4, 16, 64]\n"), ("grid", "")):
        f = tmp_path / f"{name}.yaml"
        f.write_text(body.format(b=b))
        spec = read_demand(f)
        assert (spec.workloads[0].batches is None) == (name == "grid")
        plans[name] = solve_fleet(build_problem(spec, catalog=cat), analyze=False)
    assert plans["grid"].total_usd_per_year < plans["old"].total_usd_per_year * 0.95
    assert max(a.batch for a in plans["grid"].allocations) > 64
    grid = {p.batch for p in serve("llama-3.1-70b", "h100-sxm", input_tokens=2048, output_tokens=256, prices=False,
                                   catalog=cat).points}
    assert all(a.batch in grid for a in plans["grid"].allocations)


@pytest.mark.parametrize("counts", [[32, 5000], [5000, 32]])
def test_a_device_count_beyond_the_cluster_is_refused_wherever_it_stands(tmp_path, counts):
    """audit32c F3: device_counts {cs3: [32, 5000]} gave a plan on 32 CS-3 and [5000, 32] "infeasible": the count above
    a CS-3 cluster's 2,048 systems ended the system's loop, skipping the counts after it. Refused either way, naming
    the field and the limit."""
    from wseplan.errors import InputError

    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems:\n  - hardware: cs3\nworkloads:\n  - name: run\n    model: gpt-3-175b\n"
                 f"    kind: train\n    train_tokens: 3.0e11\n    deadline_days: 30\n    device_counts: {{cs3: {counts}}}\n")
    with pytest.raises(InputError, match=r"^workloads\.run\.device_counts\.cs3: 5,000 is too many; at most 2,048 systems"):
        plan_fleet(f)


def test_fleet_offers_the_batch_serve_refines_to_under_the_sla(tmp_path):
    """audit37a F1: under TTFT/TPOT limits `serve` refines the batch to where a limit binds (Llama-3.1-8B on one H100:
    batch 153, between the grid's 128 and 256); the fleet's configurations of the same workload used to keep only the
    grid's batches and the points moved to lower loads, so its "optimal" plan bought more replicas than `serve` shows
    are needed. The refined point is a configuration now, with serve's own supply, TTFT and TPOT."""
    from wseplan.catalog import load_catalog
    from wseplan.serving import serve, tpot_for_limit

    f = tmp_path / "d.yaml"
    f.write_text("name: t\nsystems:\n  - hardware: h100-sxm\nworkloads:\n  - name: chat\n    model: llama-3.1-8b\n"
                 "    kind: serve\n    precision: bf16\n    output_tokens_per_s: 30000\n    prompt_tokens: 2048\n"
                 "    output_tokens: 256\n    sla: {ttft_s: 2.0, tpot_s: 0.05}\n")
    cat = load_catalog()
    pb = build_problem(read_demand(f), catalog=cat)
    (d,) = pb.demands
    res = serve("llama-3.1-8b", "h100-sxm", precision="bf16", input_tokens=2048, output_tokens=256, ttft_limit_s=2.0,
                tpot_limit_s=0.05, percentile=d.sla.percentile, prices=False, catalog=cat)
    p = res.chosen
    assert p.meets_sla and p.batch & (p.batch - 1)  # a refined batch, not one of the grid's powers of two
    got = [c for c in pb.configs if (c.num_devices, c.batch) == (p.num_devices, p.batch) and meets_sla(c, d)]
    assert got, sorted({c.batch for c in pb.configs})
    assert got[0].supply == pytest.approx(p.tokens_per_s, rel=1e-9)
    assert got[0].tpot_s == pytest.approx(tpot_for_limit(p), rel=1e-9)
    # the plan needs no more replicas than that point's supply asks for
    plan = solve_fleet(pb, analyze=False)
    assert sum(a.replicas * a.devices_per_replica for a in plan.allocations) <= math.ceil(30000 / p.tokens_per_s) * p.num_devices
