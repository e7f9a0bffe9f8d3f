"""Benchmark the optimisers against their targets: ``python benchmarks/bench_optimize.py``.

Targets (issues 5 and 14):

* placement, exact partition (the default): 4,000 layers onto 200 wafers proved optimal in <= 2 s (synthetic
  layers, seeded: stage cost and stage bytes differ, a memory cap per wafer), with 1,000 and 2,000 layers
  printed beside it; the proof is checked independently (greedy packing below the optimum needs more than
  200 wafers);
* placement ILP (kept for mixed devices), cold, Llama-3.1-405B (126 blocks + embedding + head) onto 22-32 CS-3
  wafers: proved optimal with <= 1 s of solver time each and equal to the exact partition; the whole
  ``wseplan place llama-3.1-405b --target cs3x32`` command <= 3 s (a fresh process);
* fleet ILP, 8 system types x 20 workloads (4 configurations per pair): solved in <= 2 s;
* fleet ILP with the relaxation analysis (every cap, demand and SLA relaxed 10%, LP shadow prices), 32 system
  types x 80 workloads: <= 10 s.

Prints one line per figure (``name: value unit (target ...; ratio r) ok|MISSED``).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import figure  # noqa: E402

from wseplan.analytic.partition import fewest_stages, min_max_partition  # noqa: E402
from wseplan.catalog import load_catalog  # noqa: E402
from wseplan.fit import build_workload  # noqa: E402
from wseplan.optimize.fleet import solve_fleet, synthetic_problem  # noqa: E402
from wseplan.optimize.placement import place, solve_partition  # noqa: E402


def _layers(n: int, seed: int = 0):
    """Synthetic layers: decode bytes per layer (cost) and memory per layer (bytes) that differ by up to 2x."""
    rng = np.random.default_rng(seed)
    cost = rng.uniform(0.5e9, 3.0e9, n)
    mem = cost * rng.uniform(0.6, 1.4, n)
    return cost, mem


def bench_partition() -> None:
    k = 200
    for n in (1000, 2000, 4000):
        cost, mem = _layers(n)
        cap = 1.25 * (mem.sum() / k + 1e8)
        t0 = time.perf_counter()
        sol = solve_partition(item_cost=cost, item_bytes=mem, capacity_bytes=cap, stage_const_cost=1e8,
                              stage_const_bytes=1e8, objective="latency", num_stages=k)
        wall = time.perf_counter() - t0
        # independent proof: no packing with every stage below the optimum fits in k stages
        below = fewest_stages(mem, cap, 1e8, item_cost=cost, max_stage_cost=sol.objective * (1 - 1e-9),
                              stage_const_cost=1e8)
        proved = sol.optimal and sol.best_bound == sol.objective and (below is None or len(below) > k)
        name = f"placement, exact partition, {n:,} layers onto {k} wafers (memory-capped)"
        if n == 4000:
            figure(name, wall, "s", 2.0, higher_is_better=False,
                   detail=f"{sol.status}, proved {proved}, {sol.solver_run.num_solves} probes")
        else:
            print(f"{name}: {wall:.4f} s, {sol.status}, proved {proved}", flush=True)


def bench_ilp_405b(cat) -> None:
    w = build_workload(cat.models["llama-3.1-405b"], cat, precision="bf16", phase="decode", batch=1, context=8192)
    x = w.weight_bytes + w.kv_bytes_per_token * 8192
    x[-1] += w.tied_head_bytes
    act = w.working_set_bytes_per_token
    for solver in ("highs", "cbc"):
        worst, agree_all, optimal_all = 0.0, True, True
        for k in range(22, 33):
            sol = solve_partition(item_cost=x, item_bytes=x, capacity_bytes=1e15, stage_const_cost=act,
                                  stage_const_bytes=act, objective="latency", num_stages=k, method="ilp",
                                  warm_start=False, solver=solver)
            dp, _ = min_max_partition(x, k, act)
            agree_all &= abs(sol.objective - dp) <= 1e-9 * dp
            optimal_all &= sol.optimal
            worst = max(worst, sol.solve_s)
        figure(f"placement ILP (cold, {solver}), Llama-3.1-405B onto 22..32 wafers, worst", worst, "s", 1.0,
               higher_is_better=False, detail=f"all optimal {optimal_all}, equal to the exact partition {agree_all}")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "wseplan.cli", "place", "llama-3.1-405b", "--target", "cs3x32",
                          "--format", "json"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    figure("`wseplan place llama-3.1-405b --target cs3x32`, fresh process", wall, "s", 3.0, higher_is_better=False,
           detail=f"exit {out.returncode}")
    t0 = time.perf_counter()
    mixed = place("llama-3.1-405b", "cs3x16", also_targets=["cs2x16"], catalog=cat)
    print(f"placement on mixed wafers (ILP), Llama-3.1-405B onto 16 CS-3 + 16 CS-2: {time.perf_counter() - t0:.3f} s, "
          f"{mixed.status_detail}, method {mixed.method}, solver {mixed.solver}", flush=True)


def bench_fleet() -> None:
    pb = synthetic_problem(8, 20, seed=0)
    t0 = time.perf_counter()
    plan = solve_fleet(pb, analyze=False)
    wall = time.perf_counter() - t0
    figure(f"fleet ILP, 8 types x 20 workloads ({len(pb.configs)} configurations)", wall, "s", 2.0,
           higher_is_better=False, detail=f"{plan.status}, {plan.method}, solver {plan.solver_run.name}")
    for ns, nw, target in ((8, 80, None), (32, 80, 10.0)):
        pb = synthetic_problem(ns, nw, seed=0)
        t0 = time.perf_counter()
        plan = solve_fleet(pb, analyze=True)
        wall = time.perf_counter() - t0
        binding = sum(c.binding for c in plan.constraints)
        detail = (f"{plan.status}; {len(plan.constraints)} constraints ({binding} binding), "
                  f"{plan.solver_run.num_solves} solves, solve {plan.solve_s:.2f} s + analysis {plan.analysis_s:.2f} s")
        name = f"fleet ILP + relaxation analysis, {ns} types x {nw} workloads ({len(pb.configs)} configurations)"
        if target is None:
            print(f"{name}: {wall:.2f} s  [{detail}]", flush=True)
        else:
            figure(name, wall, "s", target, higher_is_better=False, detail=detail)


def bench_fleet_capped() -> None:
    """The 8 x 20 problem with a power cap that binds (halfway between the least power any plan needs and the
    cheapest plan's): the caps couple every workload, so the full model is solved; no target."""
    from wseplan.optimize.fleet import _solve_once

    pb = synthetic_problem(8, 20, seed=0)
    free = dict(power_cap_w=None, rack_units_cap=None, budget_usd=None)
    cheapest = solve_fleet(pb.model_copy(update=free), analyze=False).peak_facility_power_w
    least = _solve_once(pb, caps=free, minimise="power_cap_w").objective
    pb = pb.model_copy(update=dict(free, power_cap_w=least + 0.5 * (cheapest - least)))
    t0 = time.perf_counter()
    plan = solve_fleet(pb, analyze=True)
    wall = time.perf_counter() - t0
    lp_rows = sum(c.analysis.startswith("LP") for c in plan.constraints if c.analysis)
    print(f"fleet ILP + analysis, 8 types x 20 workloads, power cap binding: {wall:.2f} s  [{plan.status}, "
          f"{plan.method}; {len(plan.constraints)} constraints, {lp_rows} answered by the LP relaxation "
          f"(analysis auto), solve {plan.solve_s:.2f} s + analysis {plan.analysis_s:.2f} s]", flush=True)


def main() -> int:
    cat = load_catalog()
    bench_partition()
    bench_ilp_405b(cat)
    bench_fleet()
    bench_fleet_capped()
    return 0


if __name__ == "__main__":
    sys.exit(main())
