"""Benchmark the optimisers against their targets: ``python benchmarks/bench_optimize.py``.

Targets (issue 5):
* placement ILP, Llama-3.1-405B (126 blocks + embedding + head) onto 22-32 CS-3 wafers: proved optimal with
  <= 1 s of solver time each; the whole ``wseplan place llama-3.1-405b --target cs3x32`` command <= 3 s
  (measured as a fresh process, interpreter start-up included);
* fleet ILP, 8 system types x 20 workloads (4 configurations per pair): solved in <= 2 s.

Prints one line per case and exits 1 when a target is missed.
"""
from __future__ import annotations

import subprocess
import sys
import time

from wseplan.analytic.partition import min_max_partition
from wseplan.catalog import load_catalog
from wseplan.fit import build_workload
from wseplan.optimize.fleet import solve_fleet, synthetic_problem
from wseplan.optimize.placement import place


def main() -> int:
    ok = True
    cat = load_catalog()
    w = build_workload(cat.models["llama-3.1-405b"], cat, precision="bf16", phase="decode", batch=1, context=8192)
    x = w.weight_bytes + w.kv_bytes_per_token * 8192
    x[-1] += w.tied_head_bytes
    act = w.working_set_bytes_per_token
    for solver in ("cbc", "highs"):
        worst = 0.0
        for k in range(22, 33):
            res = place("llama-3.1-405b", f"cs3x{k}", catalog=cat, solver=solver)
            dp, _ = min_max_partition(x, k, act)
            agree = abs(res.objective - dp) <= 1e-9 * dp
            worst = max(worst, res.solve_s)
            if not (res.optimal and agree and res.solve_s <= 1.0):
                ok = False
                print(f"MISS placement {solver} cs3x{k}: status {res.status}, solve {res.solve_s:.3f} s, DP agrees {agree}")
        print(f"placement 405B -> 22..32 wafers ({solver}): all optimal, agree with DP; worst solver time {worst:.3f} s (target 1 s)")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "wseplan.cli", "place", "llama-3.1-405b", "--target", "cs3x32",
                          "--format", "json"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    ok &= out.returncode == 0 and wall <= 3.0
    print(f"`wseplan place llama-3.1-405b --target cs3x32`: {wall:.2f} s wall, exit {out.returncode} (target 3 s)")
    pb = synthetic_problem(8, 20, seed=0)
    t0 = time.perf_counter()
    plan = solve_fleet(pb, analyze=False)
    wall = time.perf_counter() - t0
    ok &= plan.optimal and plan.solve_s <= 2.0
    print(f"fleet 8 types x 20 workloads ({len(pb.configs)} configurations): {plan.status}, solver {plan.solve_s:.3f} s, "
          f"total {wall:.3f} s (target 2 s)")
    t0 = time.perf_counter()
    plan = solve_fleet(pb, analyze=True)
    print(f"fleet with the 10% relaxation analysis ({len(plan.constraints)} constraints re-solved): "
          f"{time.perf_counter() - t0:.2f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
