"""Placement: the exact partition (the default) and the ILP (mixed devices, or ``method="ilp"``) agree with
each other and with brute force; fit's device count; time limits reported as such; the solver fallback."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
import time

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from wseplan.analytic.partition import fewest_stages, min_max_partition
from wseplan.catalog import load_catalog
from wseplan.fit import fit
from wseplan.optimize.placement import place, solve_partition


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _compositions(n: int, k: int):
    """Every split of n items into k non-empty contiguous stages (brute force)."""
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = (0, *cuts, n)
        yield [(b[s], b[s + 1] - 1) for s in range(k)]


items = st.lists(st.integers(0, 50), min_size=1, max_size=9).map(lambda v: np.array(v, dtype=float))


@settings(max_examples=40, deadline=None)
@given(x=items, k=st.integers(1, 9), const=st.sampled_from([0.0, 3.0]))
# HiGHS 1.16 reports "Solve error" on this instance with its presolve (with or without the start); solved again without presolve (milp._solve_highs)
@example(x=np.array([0.0, 5.0, 23.0, 1.0, 3.0, 0.0, 1.0, 21.0]), k=3, const=0.0)
def test_latency_ilp_equals_dp_and_beats_every_candidate(x, k, const):
    k = min(k, len(x))
    sol = solve_partition(item_cost=x, item_bytes=x, capacity_bytes=1e9, stage_const_cost=const, stage_const_bytes=const,
                          objective="latency", num_stages=k, method="ilp", warm_start=False)
    dp, _ = min_max_partition(x, k, const)
    assert sol.method == "ilp" and sol.solver in ("highs", "cbc")
    assert sol.status == "optimal" and sol.optimal
    assert sol.objective == pytest.approx(dp, rel=1e-9, abs=1e-9)
    assert sol.num_stages == k
    # contiguous cover of every item, in order
    assert sol.stages[0][0] == 0 and sol.stages[-1][1] == len(x) - 1
    assert all(a[1] + 1 == b[0] for a, b in zip(sol.stages, sol.stages[1:]))
    best = min(max(x[a : b + 1].sum() + const for a, b in cand) for cand in _compositions(len(x), k))
    assert sol.objective <= best + 1e-9


@settings(max_examples=40, deadline=None)
@given(x=items, cap_mult=st.floats(1.0, 4.0), const=st.sampled_from([0.0, 2.0]))
def test_devices_ilp_equals_greedy_and_brute_force(x, cap_mult, const):
    cap = (x.max() + const) * cap_mult
    sol = solve_partition(item_cost=x, item_bytes=x, capacity_bytes=cap, stage_const_bytes=const, objective="devices",
                          method="ilp", warm_start=False)
    g = fewest_stages(x, cap, const)
    assert solve_partition(item_cost=x, item_bytes=x, capacity_bytes=cap, stage_const_bytes=const,
                           objective="devices").num_stages == len(g)  # the default (greedy) path
    assert sol.status == "optimal"
    assert sol.num_stages == len(g)
    # the solvers' capacity test carries a relative tolerance of 1e-12 (a stage of 2.0 fits a capacity of
    # 2 x (1 - 2e-16)); the brute force holds the same one
    brute = min(k for k in range(1, len(x) + 1)
                for cand in _compositions(len(x), k) if all(x[a : b + 1].sum() + const <= cap * (1 + 1e-12)
                                                            for a, b in cand))
    assert sol.num_stages == brute
    assert all(x[a : b + 1].sum() + const <= cap * (1 + 1e-12) for a, b in sol.stages)


@pytest.mark.parametrize("method", ["dp", "ilp"])
def test_memory_cap_constrains_latency_stages(method):
    """Costs and bytes differ: the slowest stage is minimised among memory-feasible splits only."""
    cost = np.array([1.0, 1.0, 10.0, 1.0, 1.0])
    mem = np.array([5.0, 5.0, 1.0, 5.0, 5.0])
    kw = dict(method=method, warm_start=False)
    sol = solve_partition(item_cost=cost, item_bytes=mem, capacity_bytes=10.0, objective="latency", num_stages=3, **kw)
    best = min(max(cost[a : b + 1].sum() for a, b in c) for c in _compositions(5, 3)
               if all(mem[a : b + 1].sum() <= 10.0 for a, b in c))
    assert sol.objective == best
    infeasible = solve_partition(item_cost=cost, item_bytes=mem, capacity_bytes=10.0, objective="latency", num_stages=2,
                                 **kw)
    assert infeasible.status == "infeasible" and not infeasible.optimal
    assert infeasible.reason.startswith("memory")  # the binding constraint is named
    too_big = solve_partition(item_cost=cost, item_bytes=mem, capacity_bytes=4.0, objective="devices", **kw)
    assert too_big.status == "infeasible" and "item 0" in too_big.reason


def test_cbc_agrees_with_highs():
    x = np.array([3.0, 7, 2, 9, 4, 4, 1, 8, 6, 5])
    kw = dict(item_cost=x, item_bytes=x, capacity_bytes=1e9, objective="latency", num_stages=4, method="ilp",
              warm_start=False)
    a = solve_partition(solver="highs", **kw)
    b = solve_partition(solver="cbc", **kw)
    assert a.objective == b.objective == min_max_partition(x, 4)[0]
    assert b.solver == "cbc" and b.solver_run.name == "cbc" and b.solver_run.fallback_reason is None
    assert a.solver == "highs" and a.solver_run.version  # highspy is a dependency: HiGHS really ran


@pytest.mark.parametrize("k", [22, 26, 32])
def test_llama_405b_on_up_to_32_wafers_is_proved_optimal_fast(cat, k):
    res = place("llama-3.1-405b", f"cs3x{k}", catalog=cat)
    assert res.status == "optimal" and res.optimal
    assert res.solve_s <= 1.0
    assert res.num_devices == k and len(res.stages) == k
    # the same item bytes through the dynamic program
    from wseplan.fit import build_workload

    w = build_workload(cat.models["llama-3.1-405b"], cat, precision="bf16", phase="decode", batch=1, context=8192)
    x = w.weight_bytes + w.kv_bytes_per_token * 8192
    act = w.working_set_bytes_per_token * 1
    dp, _ = min_max_partition(x, k, act)
    assert res.objective == pytest.approx(dp, rel=1e-9)
    assert res.objective <= res.capacity_bytes


@pytest.mark.parametrize("model,batch,context", [("llama-3.1-405b", 1, 8192), ("llama-3.1-70b", 1, 8192),
                                                 ("llama-3.1-70b", 16, 4096), ("llama-3.1-8b", 1, 8192),
                                                 ("gpt-3-175b", 4, 2048)])
def test_devices_objective_matches_fit(cat, model, batch, context):
    r = place(model, "cs3", objective="devices", batch=batch, context=context, catalog=cat)
    f = fit(model, "cs3", batch=batch, context=context, catalog=cat)
    assert r.status == "optimal"
    assert r.num_devices == f.num_devices == int(r.objective)
    assert r.objective_unit == "devices"
    # fit's stage encoding: contiguous 0-based inclusive blocks, embedding on the first, head on the last
    blocks = [(s.first_layer, s.last_layer) for s in r.stages if s.first_layer >= 0]
    assert blocks[0][0] == 0 and blocks[-1][1] == cat.models[model].num_layers - 1
    assert all(a[1] + 1 == b[0] for a, b in zip(blocks, blocks[1:]))
    assert r.stages[0].embedding and r.stages[-1].lm_head
    assert max(s.bytes for s in r.stages) <= r.capacity_bytes


def test_gpu_pipeline_stages(cat):
    r = place("llama-3.1-70b", "h100-sxmx8", tensor_parallel=2, batch=8, context=4096, catalog=cat)
    assert r.status == "optimal" and r.num_stages == 4 and r.devices_per_stage == 2 and r.num_devices == 8
    assert max(s.bytes for s in r.stages) <= r.capacity_bytes


def test_cli_place_json_record_and_speed(capsys):
    from wseplan.cli import main

    t0 = time.perf_counter()
    rc = main(["place", "llama-3.1-405b", "--target", "cs3x32", "--format", "json"])
    wall = time.perf_counter() - t0
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0 and wall <= 3.0
    for k in ("status", "optimal", "objective", "objective_unit", "solver", "solve_s", "stages"):
        assert k in rec
    assert rec["status"] == "optimal" and rec["optimal"] is True and rec["solver"] == "dp" and rec["method"] == "dp"
    run = rec["solver_run"]
    assert run["name"] == "dp" and run["requested"] == "highs" and run["status"] == "optimal" and run["gap_frac"] == 0.0
    assert set(rec["stages"][0]) == {"device", "first_layer", "last_layer", "embedding", "lm_head", "bytes"}
    for fmt in ("table", "csv", "md"):
        assert main(["place", "llama-3.1-70b", "--target", "cs3", "--objective", "devices", "--format", fmt]) == 0
    capsys.readouterr()


def test_cli_place_infeasible_and_bad_input(capsys):
    from wseplan.cli import main

    rc = main(["place", "llama-3.1-405b", "--target", "cs3x20", "--format", "json"])
    cap = capsys.readouterr()
    assert rc == 2 and json.loads(cap.out)["status"] == "infeasible" and cap.err.count("\n") == 1
    assert "memory" in cap.err  # names the binding constraint
    for args, needle in ((["--objective", "speed"], "objective"), (["--phase", "train"], "phase"),
                         (["--solver", "gurobi"], "solver")):
        rc = main(["place", "llama-3.1-8b", "--target", "cs3x2", *args])
        err = capsys.readouterr().err
        assert rc == 2 and needle in err and err.count("\n") == 1


def test_devices_objective_with_a_count_reports_what_suffices(cat):
    r = place("llama-3.1-70b", "cs3x8", objective="devices", catalog=cat)
    f = fit("llama-3.1-70b", "cs3", catalog=cat)
    assert r.num_devices == f.num_devices < 8 and any("suffice" in n for n in r.notes)
    tight = place("llama-3.1-70b", f"cs3x{f.num_devices - 1}", objective="devices", catalog=cat)
    assert tight.status == "infeasible" and tight.stages == []


def test_prefill_balances_flops_within_memory(cat):
    """Prefill minimises the slowest stage by FLOPs; any memory-feasible split (here the bytes-balanced DP
    partition) is a candidate it must not lose to."""
    from wseplan.fit import build_workload

    k = 24
    r = place("llama-3.1-405b", f"cs3x{k}", phase="prefill", context=8192, catalog=cat)
    assert r.status == "optimal" and r.objective_unit == "FLOP"
    w = build_workload(cat.models["llama-3.1-405b"], cat, precision="bf16", phase="prefill", batch=1, context=8192)
    tif = min(8192, cat.defaults.prefill_chunk_tokens.si)
    flop = w.flop_per_token * tif
    x = w.weight_bytes + w.kv_bytes_per_token * 8192
    x[-1] += w.tied_head_bytes
    act = w.working_set_bytes_per_token * tif
    _, dp_stages = min_max_partition(x, k, act)
    assert max(x[a : b + 1].sum() + act for a, b in dp_stages) <= r.capacity_bytes
    assert r.objective <= max(flop[a : b + 1].sum() for a, b in dp_stages) * (1 + 1e-12)
    assert max(s.bytes for s in r.stages) <= r.capacity_bytes


@pytest.mark.parametrize("model,target", [("llama-70b", "h100"), ("llama-405b", "h100"), ("llama-405b", "b200"),
                                          ("llama-3-8b", "a100")])
def test_devices_objective_matches_fit_on_gpus(model, target):
    """`place --objective devices` (any contiguous split of the layers) never needs more GPUs than `fit` (the
    engines' default even split, ``ceil(L / pp)`` blocks per stage plus the embedding or head), and at most one
    fewer: both count HBM the same way, the optimum only moves blocks off the edge stages."""
    from wseplan.fit import fit
    from wseplan.optimize import place

    cat = load_catalog()
    f = fit(model, target, catalog=cat)
    p = place(model, target, objective="devices", catalog=cat)
    assert p.status == "optimal"
    assert f.num_devices - 1 <= p.num_devices <= f.num_devices


# --------------------------------------------------------------------------------------------- exact partition
@settings(max_examples=60, deadline=None)
@given(cost=items, data=st.data())
def test_default_partition_with_memory_cap_equals_brute_force(cost, data):
    """The default path (bottleneck search, cost and bytes differ) is the brute-force optimum, and names memory
    when no split fits."""
    n = len(cost)
    mem = np.array(data.draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)), dtype=float)
    k = data.draw(st.integers(1, n))
    cap = float(data.draw(st.integers(1, 80)))
    sol = solve_partition(item_cost=cost, item_bytes=mem, capacity_bytes=cap, stage_const_cost=1.0,
                          stage_const_bytes=2.0, objective="latency", num_stages=k)
    feas = [max(cost[a : b + 1].sum() + 1.0 for a, b in c) for c in _compositions(n, k)
            if all(mem[a : b + 1].sum() + 2.0 <= cap for a, b in c)]
    if not feas:
        assert sol.status == "infeasible" and sol.reason.startswith("memory") and sol.stages == []
        return
    assert sol.status == "optimal" and sol.method == "dp" and sol.solver == "dp"
    assert sol.objective == pytest.approx(min(feas), rel=1e-12)
    assert sol.best_bound == pytest.approx(sol.objective, rel=1e-12) and sol.gap_frac == 0.0
    assert len(sol.stages) == k and all(mem[a : b + 1].sum() + 2.0 <= cap for a, b in sol.stages)


def test_bottleneck_search_equals_quadratic_dp_on_a_larger_case():
    """300 items onto 40 stages: the bottleneck search (placement's default) equals the O(k n^2) DP."""
    from wseplan.analytic.partition import bottleneck_partition

    rng = np.random.default_rng(7)
    x = rng.uniform(1e8, 4e9, 300)
    dp, _ = min_max_partition(x, 40, 5e7)
    res = bottleneck_partition(x, 40, stage_const_cost=5e7)
    assert res.optimal and res.max_stage_cost == pytest.approx(dp, rel=1e-12)
    assert res.lower_bound == pytest.approx(dp, rel=1e-12) and len(res.stages) == 40


# --------------------------------------------------------------------------------------------- mixed devices (ILP)
def _mixed_brute(c, b, groups, const_c, const_b, objective):
    """Best placement over every split and every assignment of device groups to its stages."""
    n = len(c)
    total = sum(g.count for g in groups)
    best = None
    for k in range(1, min(total, n) + 1):
        for split in _compositions(n, k):
            for asg in itertools.product(range(len(groups)), repeat=k):
                if any(asg.count(g) > groups[g].count for g in range(len(groups))):
                    continue
                if any(b[a : e + 1].sum() + const_b > groups[g].capacity_bytes for (a, e), g in zip(split, asg)):
                    continue
                val = (max((c[a : e + 1].sum() + const_c) * groups[g].cost_scale for (a, e), g in zip(split, asg))
                       if objective == "latency" else k)
                best = val if best is None else min(best, val)
    return best


mixed = st.tuples(st.lists(st.integers(1, 9), min_size=2, max_size=6), st.integers(0, 10_000))


@settings(max_examples=20, deadline=None)
@given(mixed, st.sampled_from(["latency", "devices"]), st.sampled_from(["highs", "cbc"]), st.booleans())
def test_mixed_devices_ilp_equals_brute_force(args, objective, solver, warm):
    from wseplan.optimize.placement import DeviceGroup

    vals, seed = args
    rng = np.random.default_rng(seed)
    c = np.array(vals, dtype=float)
    b = rng.integers(1, 9, len(c)).astype(float)
    groups = [DeviceGroup(int(rng.integers(1, 3)), float(rng.integers(8, 20)), 1.0),
              DeviceGroup(int(rng.integers(1, 4)), float(rng.integers(5, 12)), float(rng.choice([1.5, 2.0])))]
    sol = solve_partition(item_cost=c, item_bytes=b, stage_const_cost=0.5, stage_const_bytes=1.0, objective=objective,
                          device_groups=groups, solver=solver, warm_start=warm)
    best = _mixed_brute(c, b, groups, 0.5, 1.0, objective)
    if best is None:
        assert sol.status == "infeasible" and sol.reason.startswith("memory")
        return
    assert sol.status == "optimal" and sol.objective == pytest.approx(best, rel=1e-9)
    assert sol.solver_run.name in ("dp", solver)
    for (a, e), g in zip(sol.stages, sol.stage_groups):  # each stage fits the device it is on, counts hold
        assert b[a : e + 1].sum() + 1.0 <= groups[g].capacity_bytes
    assert all(sol.stage_groups.count(g) <= groups[g].count for g in range(len(groups)))


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_time_limit_is_reported_with_its_gap_never_as_infeasible(solver):
    """A solver stopped by its time limit returns the best placement found (here the warm start), its bound and
    gap, and status time_limit."""
    from wseplan.optimize.placement import DeviceGroup

    rng = np.random.default_rng(0)
    c, b = rng.uniform(1, 10, 60), rng.uniform(1, 10, 60)
    groups = [DeviceGroup(6, 60.0, 1.0), DeviceGroup(8, 45.0, 1.3), DeviceGroup(4, 80.0, 0.8)]
    sol = solve_partition(item_cost=c, item_bytes=b, objective="latency", device_groups=groups, solver=solver,
                          time_limit_s=0.0)
    assert sol.status == "time_limit" and not sol.optimal and sol.stages
    assert sol.best_bound < sol.objective and sol.gap_frac == pytest.approx(1 - sol.best_bound / sol.objective)
    assert sol.solver_run.status_detail == f"time limit, best found, gap {100 * sol.gap_frac:.3g}%"
    assert sol.objective == pytest.approx(max((c[a : e + 1].sum()) * groups[g].cost_scale
                                              for (a, e), g in zip(sol.stages, sol.stage_groups)))


def test_highs_missing_falls_back_to_cbc_and_says_so(monkeypatch):
    import wseplan.optimize.milp as M

    monkeypatch.setattr(M, "highs_available", lambda: False)
    x = np.array([3.0, 7, 2, 9, 4, 4, 1, 8, 6, 5])
    sol = solve_partition(item_cost=x, item_bytes=x, capacity_bytes=1e9, objective="latency", num_stages=4,
                          method="ilp", solver="highs")
    assert sol.solver == "cbc" and sol.solver_run.name == "cbc" and sol.solver_run.requested == "highs"
    assert "highspy" in sol.solver_run.fallback_reason
    assert sol.objective == min_max_partition(x, 4)[0]


def test_place_on_mixed_wafers(cat):
    """Llama-3.1-70B on 2 CS-3 + 3 CS-2: each stage fits its own wafer's SRAM, counts hold, and the slowest
    stage's time is bytes / that wafer's SRAM bandwidth."""
    from wseplan.fit import build_workload

    r = place("llama-3.1-70b", "cs3x2", also_targets=["cs2x3"], catalog=cat)
    assert r.status == "optimal" and r.method in ("dp", "ilp") and r.cost_unit == "s"
    assert len(r.stage_hardware) == r.num_stages and set(r.stage_hardware) <= {"wse3", "wse2"}
    assert r.stage_hardware.count("wse3") <= 2 and r.stage_hardware.count("wse2") <= 3
    reserve = cat.defaults.wafer_sram_reserve_frac.si
    caps = {k: cat.wafers[k].usable_sram_bytes * (1 - reserve) for k in ("wse2", "wse3")}
    bw = {k: cat.wafers[k].sram_bandwidth_bytes_per_s.si for k in ("wse2", "wse3")}
    for s, hw in zip(r.stages, r.stage_hardware):
        assert s.bytes <= caps[hw] * (1 + 1e-12)
    assert r.objective == pytest.approx(max(s.bytes / bw[hw] for s, hw in zip(r.stages, r.stage_hardware)), rel=1e-9)
    w = build_workload(cat.models["llama-3.1-70b"], cat, precision="bf16", phase="decode", batch=1, context=8192)
    assert r.stages[0].embedding and r.stages[-1].lm_head and len(w.weight_bytes) >= r.num_stages
    with pytest.raises(Exception, match="count"):
        place("llama-3.1-70b", "cs3x2", also_targets=["cs2"], catalog=cat)


def test_a_highs_solve_error_that_survives_the_retries_is_solved_by_cbc(monkeypatch):
    """min x0 + 2 x1 s.t. x0 + x1 >= 3, integers in [0, 5]: optimum 3 at (3, 0). HiGHS made to fail every time: the
    three tries are made, then CBC answers and the result says so."""
    import scipy.sparse as sp

    from wseplan.optimize import milp as M

    m = M.Milp(c=np.array([1.0, 2.0]), A=sp.csr_matrix(np.array([[1.0, 1.0]])), row_lo=np.array([3.0]),
               row_hi=np.array([np.inf]), col_lo=np.zeros(2), col_hi=np.full(2, 5.0), integer=np.array([True, True]))
    tries = []

    def failing(mm, **kw):
        tries.append(kw["presolve"])
        return M.MilpResult(status="solve_error", x=None, objective=None, bound=None, gap_frac=None, solve_s=0.0)

    monkeypatch.setattr(M, "_solve_highs_once", failing)
    res = M.solve_milp(m, "highs", time_limit_s=10.0)
    assert tries == [True, True, False]
    assert res.status == "optimal" and res.objective == pytest.approx(3.0)
    assert res.extra["solver"] == "cbc" and "solve error" in res.extra["fallback_reason"]


def test_cli_outputs_are_byte_identical_without_timings(capsys, tmp_path):
    """audit27 H7: place and fleet printed the solver's wall-clock times (solve_s, analysis_s) in json, csv, table and
    md, so the same inputs never gave the same bytes. They are null unless --timings asks for them."""
    from wseplan.cli import main

    root = Path(__file__).resolve().parents[1]
    for argv in (["place", "llama-3.1-405b", "--target", "cs3x32"], ["fleet", str(root / "studies" / "demand-example.yaml")]):
        for fmt in ("json", "csv", "md"):
            outs = []
            for _ in range(2):
                assert main(argv + ["-f", fmt]) == 0
                outs.append(capsys.readouterr().out)
            assert outs[0] == outs[1], (argv[0], fmt)
        assert main(argv + ["-f", "json"]) == 0
        rec = json.loads(capsys.readouterr().out)
        assert rec["solve_s"] is None
        assert main(argv + ["-f", "json", "--timings"]) == 0
        assert json.loads(capsys.readouterr().out)["solve_s"] >= 0.0


def test_a_time_limit_with_nothing_found_does_not_say_best_found():
    """audit33c L4: a solve stopped before any placement says so, not 'best found'; one with an incumbent keeps its gap."""
    from wseplan.optimize.milp import status_detail
    from wseplan.optimize.placement_types import _run

    r = _run("highs", "highs", status="time_limit", solve_s=0.1, reason="raise the time limit", found=False)
    assert r.status_detail == "time limit, nothing found: raise the time limit"
    assert status_detail("time_limit", 0.05) == "time limit, best found, gap 5%"


def test_an_infeasible_placement_reports_the_devices_asked_for_under_either_objective(capsys):
    """audit33c L5: Llama-3.1-405B does not fit 4 CS-3 (bf16): the record's num_devices was 4 under the latency
    objective and 0 under the devices one; it is the count asked for under both."""
    import json

    from wseplan.cli import main

    got = []
    for objective in ("latency", "devices"):
        main(["place", "llama-3.1-405b", "--target", "cs3x4", "--objective", objective, "-f", "json"])
        rec = json.loads(capsys.readouterr().out)
        got.append((rec["status"], rec["num_devices"]))
    assert got == [("infeasible", 4), ("infeasible", 4)]
