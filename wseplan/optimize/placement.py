"""Placement: contiguous layers -> wafers (or GPU pipeline stages), minimising the slowest stage or the number of
devices, under the memory of each device (weights + KV cache of the serving batch + activations).

Two exact algorithms, one answer:

* **Identical devices** (one target): the exact contiguous partition of
  :mod:`wseplan.analytic.partition`. ``devices``: greedy packing is optimal (then the stages are balanced over
  that count). ``latency``: the bottleneck search :func:`~wseplan.analytic.partition.bottleneck_partition`,
  exact, with a memory cap per stage; thousands of layers onto hundreds of wafers take milliseconds.
* **Mixed devices** (``also_targets``: e.g. CS-3 and CS-2 wafers together, each group with its own memory and
  speed, the order of the devices free): an integer program, which the partition cannot express. It is
  warm-started with the partition on the weakest device (a placement every device can hold) and bounded below
  by the partition on the strongest (a relaxation); when the two meet, no integer program is solved.

The integer program (also available for identical devices, ``method="ilp"``, to check the partition) is a path
in a DAG, so contiguity and stage order are built in and there are no symmetric duplicates: nodes 0..n are
the cut positions between the n items (embedding, blocks, head); an arc (i, j, g) is the stage holding items
i..j-1 on a device of group g, present only when its bytes fit that device. A partition is one 0 -> n path.

* ``devices``: minimise the number of arcs on the path (for one group a network matrix: the LP is integral).
* ``latency``: the slowest stage is a threshold T over the distinct arc costs between the lower bound and the
  warm start's cost; binary ``w_k = [T >= v_k]`` (monotone in k) switch on the arcs that cost v_k, written on
  suffix sums of each node's out-arcs (an arc reaching further costs more). Each group's arcs are at most its
  device count (exactly K arcs for one group with K devices).

A solver stopped by its time limit returns the best placement found with status ``time_limit`` and its gap to
the proved bound, never ``infeasible``; an infeasible placement names the binding constraint.

References
----------
Ahuja, Magnanti, Orlin, Network Flows, Prentice Hall 1993, ch. 11 (total unimodularity of network matrices).
Pinar and Aykanat, Fast optimal load balancing algorithms for 1D partitioning, J. Parallel Distrib. Comput.
64(8), 2004 (the chains-on-chains partitioning problem and its bottleneck formulation).
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from ..analytic.partition import bottleneck_partition, fewest_stages
from ..catalog.load import load_catalog
from ..errors import InputError
from ..records import RecordHead, Stage
from ..targets import parse_target
from ..workload import build_workload, check_positive_int, resolve_model, stage_records
from .milp import SOLVERS, SolverRun, highs_available, new_var, resolve_solver, status_detail  # noqa: F401 (re-exported)
from .placement_ilp import solve_groups, solve_identical
from .placement_types import DeviceGroup, PartitionSolution, _run

OBJECTIVES = ("latency", "devices")
METHODS = ("auto", "dp", "ilp")


def _check_items(item_cost, item_bytes) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(item_cost, dtype=float)
    b = np.asarray(item_bytes, dtype=float)
    if c.ndim != 1 or len(c) == 0 or b.shape != c.shape:
        raise InputError("items: need at least one item and equal-length cost and bytes arrays")
    if not np.isfinite(c).all() or not np.isfinite(b).all() or (c < 0).any() or (b < 0).any():
        raise InputError("items: costs and bytes must be finite and non-negative")
    return c, b


def solve_partition(*, item_cost, item_bytes, capacity_bytes: float | None = None, stage_const_cost: float = 0.0,
                    stage_const_bytes: float = 0.0, objective: str = "latency", num_stages: int | None = None,
                    max_stages: int | None = None, solver: str = "highs", time_limit_s: float = 30.0,
                    method: str = "auto", warm_start: bool = True,
                    device_groups: Sequence[DeviceGroup] | None = None) -> PartitionSolution:
    """Contiguous partition of items into device stages: exact partition search, or an integer program.

    Parameters
    ----------
    item_cost : array_like
        Cost of each item (its time [s], or bytes as a proxy) [any unit].
    item_bytes : array_like
        Memory each item needs on its device [bytes].
    capacity_bytes : float
        Memory of one device [bytes] (identical devices; omit with ``device_groups``).
    stage_const_cost, stage_const_bytes : float
        Per-stage cost and memory whatever the stage holds (activation working set) [unit, bytes].
    objective : str
        ``latency``: minimise the largest stage cost; with identical devices exactly ``num_stages`` non-empty
        stages (all items when ``num_stages`` is None or larger than the item count: one item per stage is then
        optimal), with device groups at most one stage per device. ``devices``: minimise the number of stages
        (at most ``max_stages`` when given).
    solver : str
        ``highs`` (HiGHS via highspy, the default; CBC when highspy is missing, recorded as such) or ``cbc``
        (bundled with PuLP); used only when an integer program is solved.
    time_limit_s : float
        Integer-program time limit [s]; a stopped search returns status ``time_limit`` with the best placement
        found and its gap.
    method : str
        ``auto`` (the exact partition for identical devices, the integer program for device groups), ``dp``
        or ``ilp`` (force one; ``dp`` cannot take device groups).
    warm_start : bool
        Start the integer program from the partition's placement and bound it by the partition (the default);
        off, the integer program runs alone (used by the tests that check it against the partition).
    device_groups : sequence of DeviceGroup, optional
        Mixed devices: ``(count, capacity_bytes, cost_scale)`` per group; a stage on group g costs
        ``(items' cost + stage_const_cost) x cost_scale_g`` and must fit ``capacity_bytes_g``.

    Returns
    -------
    PartitionSolution
        ``objective`` is the largest stage cost (latency) or the stage count (devices); ``solver_run`` says
        what solved it.
    """
    if objective not in OBJECTIVES:
        raise InputError(f"--objective: unknown {objective!r}; use one of {', '.join(OBJECTIVES)}")
    if method not in METHODS:
        raise InputError(f"method: unknown {method!r}; use one of {', '.join(METHODS)}")
    c, b = _check_items(item_cost, item_bytes)
    n = len(c)
    if device_groups is not None:
        groups = [DeviceGroup(int(g[0]), float(g[1]), float(g[2]) if len(g) > 2 else 1.0) for g in device_groups]
        if not groups or any(g.count < 1 or not g.capacity_bytes > 0 or not g.cost_scale > 0 for g in groups):
            raise InputError("device_groups: each group needs count >= 1, capacity_bytes > 0 and cost_scale > 0")
        if method == "dp":
            raise InputError("method: the exact partition takes identical devices; mixed device groups need the ILP")
        if len(groups) == 1:  # one group is identical devices
            g = groups[0]
            k = min(g.count, n) if objective == "latency" else None
            sol = solve_partition(item_cost=c * g.cost_scale, item_bytes=b, capacity_bytes=g.capacity_bytes,
                                  stage_const_cost=stage_const_cost * g.cost_scale, stage_const_bytes=stage_const_bytes,
                                  objective=objective, num_stages=k, max_stages=g.count if objective == "devices" else None,
                                  solver=solver, time_limit_s=time_limit_s, method=method, warm_start=warm_start)
            return sol.model_copy(update={"stage_groups": [0] * sol.num_stages})
        return solve_groups(c, b, groups, stage_const_cost, stage_const_bytes, objective, solver, time_limit_s,
                            warm_start)
    if capacity_bytes is None:
        raise InputError("capacity_bytes: give the memory of one device (or device_groups)")
    k_exact = None
    if objective == "latency":
        k_exact = n if num_stages is None else min(int(num_stages), n)
        if k_exact < 1:
            raise InputError(f"num_stages: must be at least 1, got {num_stages}")
    dp = _solve_dp(c, b, capacity_bytes, stage_const_cost, stage_const_bytes, objective, k_exact, max_stages, solver)
    if method != "ilp":
        return dp
    if dp.status == "infeasible":  # the partition proves it and names the binding constraint
        return dp.model_copy(update={"solver_run": dp.solver_run.model_copy(update={"requested": solver})})
    return solve_identical(c, b, capacity_bytes, stage_const_cost, stage_const_bytes, objective, k_exact, max_stages,
                           solver, time_limit_s, dp if warm_start else None)


def _solve_dp(c, b, cap, cc, cb, objective, k_exact, max_stages, solver) -> PartitionSolution:
    t0 = time.perf_counter()

    def infeasible(reason: str) -> PartitionSolution:
        s = time.perf_counter() - t0
        return PartitionSolution(status="infeasible", optimal=False, objective=None, num_stages=0, max_stage_cost=None,
                                 stages=[], solver="dp", solve_s=s, num_variables=0, num_constraints=0, reason=reason,
                                 method="dp", solver_run=_run("dp", solver, status="infeasible", solve_s=s, reason=reason))

    too_big = np.nonzero(b + cb > cap * (1 + 1e-12))[0]
    if len(too_big):
        i = int(too_big[0])
        return infeasible(f"memory: item {i} alone needs {b[i] + cb:,.0f} B, more than one device's {cap:,.0f} B")
    if objective == "devices":
        g = fewest_stages(b, cap, cb)
        if max_stages is not None and len(g) > int(max_stages):
            return infeasible(f"memory: no partition within {max_stages} devices of {cap:,.0f} B each; "
                              f"at least {len(g)} are needed")
        k = len(g)
    else:
        k = k_exact
    res = bottleneck_partition(c, k, item_bytes=b, capacity_bytes=cap, stage_const_cost=cc, stage_const_bytes=cb)
    if not res.feasible:
        return infeasible(res.binding)
    s = time.perf_counter() - t0
    obj = float(k) if objective == "devices" else res.max_stage_cost
    bound = obj if objective == "devices" else res.lower_bound
    status = "optimal" if res.optimal else "time_limit"
    gap = 0.0 if res.optimal else (res.max_stage_cost - res.lower_bound) / max(res.max_stage_cost, 1e-300)
    return PartitionSolution(status=status, optimal=res.optimal, objective=obj, num_stages=k,
                             max_stage_cost=res.max_stage_cost, stages=res.stages, solver="dp", solve_s=s, num_variables=0,
                             num_constraints=0, method="dp", gap_frac=gap, best_bound=bound,
                             solver_run=_run("dp", solver, status=status, solve_s=s, gap=gap, bound=bound,
                                             num_solves=res.num_probes))


# ---------------------------------------------------------------------------------------------
class PlacementResult(RecordHead):
    """The placement record (``wseplan place --format json``), documented in docs/cli-output.md.

    ``stages`` use fit's encoding: 0-based inclusive transformer-block indices per device.
    """

    objective_kind: str
    status: str  # optimal | time_limit | infeasible
    status_detail: str  # "optimal", "time limit, best found, gap 1.2%", "infeasible: memory: ..."
    optimal: bool
    objective: float | None
    objective_unit: str
    gap_frac: float | None = None
    best_bound: float | None = None
    method: str  # dp | ilp
    solver: str  # dp | highs | cbc
    solve_s: float
    solver_run: SolverRun
    num_devices: int
    num_stages: int
    devices_per_stage: int
    capacity_bytes: float
    max_stage_bytes: float | None
    max_stage_cost: float | None
    cost_unit: str
    num_variables: int
    num_constraints: int
    stages: list  # list[wseplan.fit.Stage]
    stage_hardware: list[str] = []  # mixed devices: the hardware of each stage
    notes: list[str] = []

    def to_record(self) -> dict:
        return self.model_dump(mode="json")

    def to_row(self) -> dict:
        rec = self.to_record()
        row = {k: v for k, v in rec.items() if not isinstance(v, (list, dict)) and v is not None}
        row.update({f"solver_{k}": v for k, v in rec["solver_run"].items() if v is not None and k != "status_detail"})
        return row

    def to_frame(self):
        import pandas as pd

        df = pd.DataFrame([s.model_dump() for s in self.stages])
        if self.stage_hardware:
            df["hardware"] = self.stage_hardware
        return df


def place(model, target, *, objective: str = "latency", precision: str = "bf16", phase: str = "decode",
          batch: int | None = None, context: int | None = None, reserve: float | None = None,
          tensor_parallel: int = 1, solver: str = "highs", time_limit_s: float = 30.0, method: str = "auto",
          also_targets: Sequence[str] = (), catalog=None) -> PlacementResult:
    """Place ``model``'s layers on ``target``'s devices (the API behind ``wseplan place``).

    Wafer targets: one stage per wafer, memory as ``wseplan fit`` counts it (weights + KV cache for
    batch x context + per-wafer activation working set, a tied LM head copied to the last wafer), capacity
    usable SRAM x (1 - reserve). GPU targets: one pipeline stage per group of ``tensor_parallel`` GPUs
    holding weights + KV in HBM x tp x (1 - reserve); bytes and capacity are reported per GPU, as fit does
    (a stage's bytes / tp). With a device count in the target (``cs3x32``) and
    ``latency``, exactly that many stages; without one, the fewest devices that fit.

    The stage cost stands for its time at equal device speed: in decode (bandwidth-bound) the stage's weight +
    KV bytes, which a step reads once; in prefill (compute-bound) its FLOPs for the tokens in flight
    (``objective_unit`` says which). Per-layer times from the time models would replace these proxies.

    ``also_targets`` (each with a count, same kind as ``target``: ``place(m, "cs3x8", also_targets=["cs2x8"])``)
    places on mixed devices: each stage on one device, at most each target's count, every device with its own
    memory; the stage cost is then a time [s]: bytes / memory bandwidth (decode) or FLOP / dense peak (prefill)
    of its device. Solved by the integer program (see the module notes).
    """

    cat = catalog or load_catalog()
    d = cat.defaults
    if objective not in OBJECTIVES:
        raise InputError(f"--objective: unknown {objective!r}; use one of {', '.join(OBJECTIVES)}")
    if phase not in ("prefill", "decode"):
        raise InputError(f"phase: placement covers inference (prefill or decode), got {phase!r}; "
                         "training on wafers streams every layer through each wafer (see `wseplan fit --phase train`)")
    if method not in METHODS:
        raise InputError(f"method: unknown {method!r}; use one of {', '.join(METHODS)}")
    resolve_solver(solver)  # a bad name fails before any work
    batch = int(d.default_batch.si) if batch is None else batch
    context = int(d.default_context_tokens.si) if context is None else context
    check_positive_int(batch, "batch")
    check_positive_int(context, "context")
    check_positive_int(tensor_parallel, "tensor_parallel")
    m = resolve_model(model, cat) if isinstance(model, str) else model
    t = parse_target(target, cat) if isinstance(target, str) else target
    others = [parse_target(x, cat) if isinstance(x, str) else x for x in also_targets]
    if reserve is None:
        reserve = (d.wafer_sram_reserve_frac if t.kind == "wafer" else d.gpu_hbm_reserve_frac).si
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not (0.0 <= reserve < 1.0) or math.isnan(reserve):
        raise InputError(f"reserve: must be a fraction in [0, 1), got {reserve!r}")
    w = build_workload(m, cat, precision=precision, phase=phase, batch=batch, context=context)
    tokens = w.batch * w.context
    kv_items = w.kv_bytes_per_token * tokens
    in_flight = float(w.batch) if phase == "decode" else float(min(tokens, d.prefill_chunk_tokens.si))
    act_const = w.working_set_bytes_per_token * in_flight
    notes: list[str] = []
    if t.kind == "wafer" and tensor_parallel != 1:
        raise InputError(f"tensor_parallel: {tensor_parallel} applies to GPU targets; a wafer holds whole layers "
                         "(leave --tp out)")
    tp = 1 if t.kind == "wafer" else tensor_parallel

    def capacity(tt) -> float:
        return tt.device.usable_sram_bytes * (1.0 - reserve) if tt.kind == "wafer" else tt.device.hbm_bytes.si * (1.0 - reserve) * tp

    cap = capacity(t)
    single = w.weight_bytes + kv_items
    multi = single.copy()
    if w.tied_head_bytes:
        multi[-1] += w.tied_head_bytes  # the last device needs its own copy of a tied LM head
    n_items = len(single)
    if phase == "prefill":
        # prefill is compute-bound: a stage's time is its FLOPs for the tokens in flight at equal device peak
        flop = np.asarray(w.flop_per_token, dtype=float) * in_flight
        cost_of, const_cost, cost_unit = (lambda xb: flop), 0.0, "FLOP"
    else:
        # decode is bandwidth-bound: a stage's time is the weight + KV bytes it reads per step
        cost_of, const_cost, cost_unit = (lambda xb: xb), act_const, "bytes"
    kw = dict(solver=solver, time_limit_s=time_limit_s, method=method)
    stage_hw: list[str] = []
    if others:
        sol, cost_unit, groups_hw = _place_mixed(t, others, tp, capacity, precision, phase, single, multi, cost_of,
                                                 const_cost, act_const, objective, kw)
        stage_hw = [groups_hw[g] for g in sol.stage_groups]
        n_dev_total = t.count + sum(o.count for o in others)
    elif t.count is not None:
        if t.count % tp:
            raise InputError(f"target: {t.count} GPUs is not a multiple of --tensor-parallel {tp}")
        k = t.count // tp
        if k > n_items:
            notes.append(f"only {n_items} layers to place; {k - n_items} devices left idle")
        x = single if k == 1 else multi
        if objective == "latency":
            sol = solve_partition(item_cost=cost_of(x), item_bytes=x, capacity_bytes=cap, stage_const_cost=const_cost,
                                  stage_const_bytes=act_const, objective="latency", num_stages=k, **kw)
        else:
            sol = _min_devices(single, multi, cap, act_const, cost_of, const_cost, kw, max_stages=k)
    else:
        sol = _min_devices(single, multi, cap, act_const, cost_of, const_cost, kw, max_stages=None)
        if objective == "latency" and sol.status == "optimal":
            # the fewest devices first, then the most even split over them (the latency objective)
            x = single if sol.num_stages == 1 else multi
            sol2 = solve_partition(item_cost=cost_of(x), item_bytes=x, capacity_bytes=cap, stage_const_cost=const_cost,
                                   stage_const_bytes=act_const, objective="latency", num_stages=sol.num_stages, **kw)
            run = sol2.solver_run.model_copy(update={"solve_s": sol.solve_s + sol2.solve_s,
                                                     "num_solves": sol.solver_run.num_solves + sol2.solver_run.num_solves})
            sol = sol2.model_copy(update={"solve_s": sol.solve_s + sol2.solve_s, "solver_run": run})
    x = single if sol.num_stages <= 1 else multi
    if sol.reason:
        notes.append(sol.reason)
    # per device, as fit reports it: a GPU stage's bytes are split over its tp GPUs
    loads = [float(x[a : e + 1].sum() + act_const) / tp for a, e in sol.stages]

    stages = [Stage(**r) for r in stage_records(w, sol.stages, loads)] if sol.stages else []
    n_stages = sol.num_stages
    if others:
        max_cost = sol.max_stage_cost
        num_devices = n_dev_total if objective == "latency" else n_stages * tp
        if objective == "latency" and n_stages * tp < n_dev_total and sol.stages:
            notes.append(f"{n_dev_total - n_stages * tp} of the {n_dev_total} devices left idle")
    else:
        c_items = cost_of(x)
        max_cost = (max(float(c_items[a : e + 1].sum()) + const_cost for a, e in sol.stages) / tp) if sol.stages else None
        num_devices = t.count if (t.count is not None and objective == "latency") else n_stages * tp
        if objective == "devices" and t.count is not None and sol.status != "infeasible" and n_stages * tp < t.count:
            notes.append(f"{n_stages * tp} of the {t.count} devices suffice")
    if not sol.stages:  # nothing placed: the devices asked for, whatever the objective (audit33c L5: 4 or 0)
        num_devices = n_dev_total if others else (t.count or 0)
    if sol.status == "time_limit" and sol.stages:
        notes.append(f"{sol.solver_run.status_detail} (best bound {sol.best_bound:.6g} {cost_unit if objective == 'latency' else 'devices'})")
    if objective == "latency":
        obj, unit = max_cost, cost_unit
        bound = None if sol.best_bound is None else (sol.best_bound / tp if not others else sol.best_bound)
    else:
        obj, unit = (float(n_stages * tp) if sol.objective is not None else None), "devices"
        bound = None if sol.best_bound is None else sol.best_bound * tp
    return PlacementResult(model=w.model_name, target=t.label if not others else "+".join([t.label, *(o.label for o in others)]),
                           hardware=t.key, device_kind=t.kind, precision=precision,
                           phase=phase, batch=batch, context=context, objective_kind=objective, status=sol.status,
                           status_detail=sol.solver_run.status_detail, optimal=sol.optimal, objective=obj,
                           objective_unit=unit, gap_frac=sol.gap_frac, best_bound=bound, method=sol.method,
                           solver=sol.solver, solve_s=sol.solve_s, solver_run=sol.solver_run, num_devices=num_devices,
                           num_stages=n_stages, devices_per_stage=tp, capacity_bytes=cap / tp,
                           max_stage_bytes=max(loads) if loads else None, max_stage_cost=max_cost,
                           cost_unit=cost_unit, num_variables=sol.num_variables, num_constraints=sol.num_constraints,
                           stages=stages, stage_hardware=stage_hw, notes=notes)


def _place_mixed(t, others, tp, capacity, precision, phase, single, multi, cost_of, const_cost, act_const, objective, kw):
    """Mixed devices: one group per target; stage cost in seconds on each group's device."""
    labels = [t, *others]
    for o in labels:
        if o.count is None:
            raise InputError(f"target {o.text}: mixed devices need a count in every target (e.g. cs3x8 with cs2x8)")
        if o.kind != t.kind:
            raise InputError(f"target {o.text}: mixed devices must all be wafers or all GPUs (got {t.kind} and {o.kind})")
        if o.count % tp:
            raise InputError(f"target {o.text}: {o.count} GPUs is not a multiple of --tensor-parallel {tp}")
    keys = [o.key for o in labels]
    if len(set(keys)) != len(keys):
        raise InputError(f"targets: {', '.join(keys)} repeat a device; give each hardware once with its count")
    groups, hw = [], []
    for o in labels:
        dev = o.device
        if phase == "prefill":
            rate = dev.peak_flop_per_s(precision) * tp
        else:
            rate = (dev.sram_bandwidth_bytes_per_s.si if o.kind == "wafer" else dev.hbm_bandwidth_bytes_per_s.si) * tp
        groups.append(DeviceGroup(o.count // tp, capacity(o), 1.0 / rate))
        hw.append(o.key)
    total = sum(g.count for g in groups)
    x = single if total == 1 else multi
    sol = solve_partition(item_cost=cost_of(x), item_bytes=x, stage_const_cost=const_cost, stage_const_bytes=act_const,
                          objective=objective, device_groups=groups, **kw)
    return sol, "s", hw


def _min_devices(single, multi, cap, act_const, cost_of, const_cost, kw, max_stages):
    """Fewest stages; one stage holds the model without the extra tied-head copy when it fits alone."""
    x = single if single.sum() + act_const <= cap else multi
    return solve_partition(item_cost=cost_of(x), item_bytes=x, capacity_bytes=cap, stage_const_cost=const_cost,
                           stage_const_bytes=act_const, objective="devices", max_stages=max_stages, **kw)
