"""Placement ILP: contiguous layers -> wafers (or GPU pipeline stages), minimising the slowest stage or the
number of devices, under the memory of each device (weights + KV cache of the serving batch + activations).

Formulation (a path in a DAG, so contiguity and stage order are built in and there are no symmetric
duplicates): nodes 0..n are the cut positions between the n items (embedding, blocks, head); an arc (i, j)
is the stage holding items i..j-1, present only when its bytes fit one device. A partition into stages is
exactly one 0 -> n path, and each path is exactly one partition.

* ``devices``: minimise the number of arcs on the path. The constraint matrix is a network matrix
  (flow conservation), so the LP relaxation is integral and the solver proves optimality at the root.
* ``latency``: the slowest stage is a threshold T taken from the distinct arc costs between a lower bound
  LB = max(sum/K, largest item) + per-stage cost and an upper bound UB from a balanced split. Binary
  ``w_k = [T >= v_k]`` (monotone in k) switch on the arcs that cost v_k; exactly K arcs form the path.
  For a fixed threshold the remaining problem is a shortest-path feasibility question (integral LP), so
  branching happens only on the few threshold variables.

The exact dynamic program :func:`wseplan.analytic.partition.min_max_partition` solves the same problem and
is used in tests to check the ILP.

References
----------
Ahuja, Magnanti, Orlin, Network Flows, Prentice Hall 1993, ch. 11 (total unimodularity of network matrices).
Pinar and Aykanat, Fast optimal load balancing algorithms for 1D partitioning, J. Parallel Distrib. Comput.
64(8), 2004 (the chains-on-chains partitioning problem and its bottleneck formulation).
"""
from __future__ import annotations

import math
import time

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..errors import InputError
from ..records import RecordHead

OBJECTIVES = ("latency", "devices")
SOLVERS = ("highs", "cbc")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PartitionSolution(_Frozen):
    """Solution of :func:`solve_partition` (item indices, 0-based inclusive)."""

    status: str  # optimal | feasible | infeasible
    optimal: bool
    objective: float | None
    num_stages: int
    max_stage_cost: float | None
    stages: list[tuple[int, int]]
    solver: str
    solve_s: float
    num_variables: int
    num_constraints: int
    reason: str | None = None


_HIGHS_QUIET = []


def _quiet_highs() -> None:
    """HiGHS prints a banner on its first instance in a process, straight to file descriptor 1, whatever its
    options; create that first instance with fd 1 sent to /dev/null so that JSON on stdout stays clean."""
    if _HIGHS_QUIET:
        return
    import os
    import sys

    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
            h.setOptionValue("output_flag", False)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    _HIGHS_QUIET.append(h)


def highs_available() -> bool:
    import pulp

    return "HiGHS" in pulp.listSolvers(onlyAvailable=True)


def _solver(name: str, time_limit_s: float):
    """A PuLP solver object and its short name (``highs`` falls back on ``cbc`` when highspy is missing)."""
    import pulp

    if name == "highs":
        if highs_available():
            _quiet_highs()
            return pulp.HiGHS(msg=False, timeLimit=time_limit_s), "highs"
        name = "cbc"
    if name == "cbc":
        import warnings

        with warnings.catch_warnings():  # PuLP 3.x flags its bundled CBC as deprecated for 4.0
            warnings.simplefilter("ignore", DeprecationWarning)
            return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s), "cbc"
    raise InputError(f"solver: unknown {name!r}; use one of {', '.join(SOLVERS)}")


def new_var(prob, name: str, *, low=None, up=None, cat: str = "Continuous"):
    """A PuLP variable attached to ``prob`` (``add_variable`` on PuLP >= 3.3, the constructor before)."""
    import pulp

    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, low, up, cat=cat)
    return pulp.LpVariable(name, lowBound=low, upBound=up, cat=cat)


def _status(prob) -> tuple[str, bool]:
    import pulp

    st = pulp.LpStatus.get(prob.status, "Undefined")
    sol = getattr(prob, "sol_status", None)
    if st == "Infeasible":
        return "infeasible", False
    if st == "Optimal" and sol in (None, pulp.LpSolutionOptimal):
        return "optimal", True
    if sol in (pulp.LpSolutionIntegerFeasible, pulp.LpSolutionOptimal) or st == "Optimal":
        return "feasible", False
    return "infeasible", False


def _balanced_split(cost: np.ndarray, k: int) -> list[tuple[int, int]]:
    """Cut where the cost prefix crosses s/k of the total (a quick feasible heuristic, not optimal)."""
    n = len(cost)
    pre = np.cumsum(cost)
    cuts = [0]
    for s in range(1, k):
        j = int(np.searchsorted(pre, pre[-1] * s / k)) + 1
        j = min(max(j, cuts[-1] + 1), n - (k - s))
        cuts.append(j)
    cuts.append(n)
    return [(cuts[s], cuts[s + 1] - 1) for s in range(k)]


def solve_partition(*, item_cost, item_bytes, capacity_bytes: float, stage_const_cost: float = 0.0,
                    stage_const_bytes: float = 0.0, objective: str = "latency", num_stages: int | None = None,
                    max_stages: int | None = None, solver: str = "cbc", time_limit_s: float = 30.0) -> PartitionSolution:
    """Contiguous partition of items into device stages by integer programming (PuLP).

    Parameters
    ----------
    item_cost : array_like
        Cost of each item (its time [s], or bytes as a proxy) [any unit].
    item_bytes : array_like
        Memory each item needs on its device [bytes].
    capacity_bytes : float
        Memory of one device [bytes].
    stage_const_cost, stage_const_bytes : float
        Per-stage cost and memory whatever the stage holds (activation working set) [unit, bytes].
    objective : str
        ``latency``: minimise the largest stage cost with exactly ``num_stages`` non-empty stages (all items
        when ``num_stages`` is None or larger than the item count: one item per stage is then optimal).
        ``devices``: minimise the number of stages (at most ``max_stages`` when given).
    solver : str
        ``cbc`` (bundled with PuLP; the default: its solve times were the steadier in our benchmarks) or
        ``highs`` (HiGHS via highspy).
    time_limit_s : float
        Solver time limit [s]; a stopped search returns status ``feasible``.

    Returns
    -------
    PartitionSolution
        ``objective`` is the largest stage cost (latency) or the stage count (devices).
    """
    import pulp

    if objective not in OBJECTIVES:
        raise InputError(f"--objective: unknown {objective!r}; use one of {', '.join(OBJECTIVES)}")
    c = np.asarray(item_cost, dtype=float)
    b = np.asarray(item_bytes, dtype=float)
    n = len(c)
    if n == 0 or len(b) != n:
        raise InputError("items: need at least one item and equal-length cost and bytes arrays")
    if (c < 0).any() or (b < 0).any() or not np.isfinite(c).all() or not np.isfinite(b).all():
        raise InputError("items: costs and bytes must be finite and non-negative")
    slv, slv_name = _solver(solver, time_limit_s)
    cpre = np.concatenate([[0.0], np.cumsum(c)])
    bpre = np.concatenate([[0.0], np.cumsum(b)])
    ii, jj = np.triu_indices(n + 1, k=1)  # arcs (i, j): items i..j-1
    seg_b = bpre[jj] - bpre[ii] + stage_const_bytes
    seg_c = cpre[jj] - cpre[ii] + stage_const_cost
    keep = seg_b <= capacity_bytes * (1 + 1e-12)
    too_big = [i for i in range(n) if b[i] + stage_const_bytes > capacity_bytes * (1 + 1e-12)]
    empty = PartitionSolution(status="infeasible", optimal=False, objective=None, num_stages=0, max_stage_cost=None,
                              stages=[], solver=slv_name, solve_s=0.0, num_variables=0, num_constraints=0)
    if too_big:
        i = too_big[0]
        return empty.model_copy(update={"reason": f"item {i} alone needs {b[i] + stage_const_bytes:.4g} B, more than one "
                                                  f"device's {capacity_bytes:.4g} B"})
    k_exact = None
    if objective == "latency":
        k_exact = n if num_stages is None else min(int(num_stages), n)
        if k_exact < 1:
            raise InputError(f"num_stages: must be at least 1, got {num_stages}")
        keep &= (jj - ii) <= n - k_exact + 1  # the other k-1 stages each need one item
        lb = max(cpre[-1] / k_exact, c.max()) + stage_const_cost
        split = _balanced_split(c, k_exact)
        if all(bpre[bb + 1] - bpre[a] + stage_const_bytes <= capacity_bytes * (1 + 1e-12) for a, bb in split):
            ub = max(cpre[bb + 1] - cpre[a] for a, bb in split) + stage_const_cost
            keep &= seg_c <= ub * (1 + 1e-12)
    ii, jj, seg_c = ii[keep], jj[keep], seg_c[keep]
    scale = float(max(seg_c.max(initial=0.0), 1e-300))
    prob = pulp.LpProblem("placement", pulp.LpMinimize)
    y = [new_var(prob, f"y_{a}_{e}", cat="Binary") for a, e in zip(ii.tolist(), jj.tolist())]
    out_arcs: list[list[int]] = [[] for _ in range(n + 1)]
    in_arcs: list[list[int]] = [[] for _ in range(n + 1)]
    for idx, (a, e) in enumerate(zip(ii.tolist(), jj.tolist())):
        out_arcs[a].append(idx)
        in_arcs[e].append(idx)
    if not out_arcs[0] or not in_arcs[n]:
        return empty.model_copy(update={"reason": "no stage that fits one device can start or end the sequence"})
    ncons = 0
    for v in range(n + 1):
        rhs = 1 if v == 0 else (-1 if v == n else 0)
        prob += pulp.lpSum(y[i] for i in out_arcs[v]) - pulp.lpSum(y[i] for i in in_arcs[v]) == rhs, f"flow_{v}"
        ncons += 1
    nvars = len(y)
    if objective == "devices":
        prob += pulp.lpSum(y)
        if max_stages is not None:
            prob += pulp.lpSum(y) <= int(max_stages), "max_stages"
            ncons += 1
    else:
        prob += pulp.lpSum(y) == k_exact, "num_stages"
        ncons += 1
        vals = np.unique(seg_c[seg_c > lb * (1 + 1e-12)])
        w = [new_var(prob, f"w_{k}", cat="Binary") for k in range(len(vals))]
        nvars += len(w)
        for k in range(1, len(w)):
            prob += w[k] <= w[k - 1], f"mono_{k}"
            ncons += 1
        kidx = np.searchsorted(vals, seg_c * (1 - 1e-12))  # arc cost -> threshold index
        # Arcs out of node i cost more the further they reach (items are non-negative), so the arcs that need
        # threshold k form a suffix of i's out-arcs; at most one of them is used, hence
        # sum(suffix) <= w_k, written with continuous suffix sums r (stronger than y <= w_k arc by arc).
        for v in range(n + 1):
            arcs = sorted(out_arcs[v], key=lambda a: int(jj[a]))
            nxt = None
            for a in reversed(arcs):
                if seg_c[a] <= lb * (1 + 1e-12):
                    break
                r = new_var(prob, f"r_{a}", low=0)
                nvars += 1
                prob += r == (y[a] + nxt if nxt is not None else y[a]), f"suf_{a}"
                prob += r <= w[int(kidx[a])], f"thr_{a}"
                ncons += 2
                nxt = r
        steps = np.diff(np.concatenate([[lb], vals])) / scale
        prob += lb / scale + pulp.lpSum(float(s) * wk for s, wk in zip(steps, w))
    t0 = time.perf_counter()
    prob.solve(slv)
    solve_s = float(getattr(prob, "solutionTime", None) or (time.perf_counter() - t0))
    status, optimal = _status(prob)
    if status == "infeasible":
        why = (f"no {k_exact} contiguous stages fit each device's {capacity_bytes:.4g} B" if objective == "latency"
               else f"no partition within {max_stages} devices of {capacity_bytes:.4g} B each")
        return empty.model_copy(update={"solver": slv_name, "solve_s": solve_s, "num_variables": nvars,
                                        "num_constraints": ncons, "reason": why})
    used = sorted((int(ii[i]), int(jj[i]) - 1) for i, v in enumerate(y) if (v.value() or 0) > 0.5)
    max_cost = max(cpre[e + 1] - cpre[a] + stage_const_cost for a, e in used)
    obj = float(len(used)) if objective == "devices" else float(max_cost)
    return PartitionSolution(status=status, optimal=optimal, objective=obj, num_stages=len(used),
                             max_stage_cost=float(max_cost), stages=used, solver=slv_name, solve_s=solve_s,
                             num_variables=nvars, num_constraints=ncons)


# ---------------------------------------------------------------------------------------------
class PlacementResult(RecordHead):
    """The placement record (``wseplan place --format json``), documented in docs/cli-output.md.

    ``stages`` use fit's encoding: 0-based inclusive transformer-block indices per device.
    """

    objective_kind: str
    status: str
    optimal: bool
    objective: float | None
    objective_unit: str
    solver: str
    solve_s: float
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
    notes: list[str] = []

    def to_record(self) -> dict:
        return self.model_dump(mode="json")

    def to_row(self) -> dict:
        rec = self.to_record()
        return {k: v for k, v in rec.items() if not isinstance(v, (list, dict)) and v is not None}

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([s.model_dump() for s in self.stages])


def place(model, target, *, objective: str = "latency", precision: str = "bf16", phase: str = "decode",
          batch: int | None = None, context: int | None = None, reserve: float | None = None,
          tensor_parallel: int = 1, solver: str = "cbc", time_limit_s: float = 30.0, catalog=None) -> PlacementResult:
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
    """
    from ..catalog.load import load_catalog
    from ..workload import build_workload, resolve_model, stage_records
    from ..targets import parse_target
    from ..workload import check_positive_int

    cat = catalog or load_catalog()
    d = cat.defaults
    if objective not in OBJECTIVES:
        raise InputError(f"--objective: unknown {objective!r}; use one of {', '.join(OBJECTIVES)}")
    if phase not in ("prefill", "decode"):
        raise InputError(f"phase: placement covers inference (prefill or decode), got {phase!r}; "
                         "training on wafers streams every layer through each wafer (see `wseplan fit --phase train`)")
    batch = int(d.default_batch.si) if batch is None else batch
    context = int(d.default_context_tokens.si) if context is None else context
    check_positive_int(batch, "batch")
    check_positive_int(context, "context")
    check_positive_int(tensor_parallel, "tensor_parallel")
    m = resolve_model(model, cat) if isinstance(model, str) else model
    t = parse_target(target, cat) if isinstance(target, str) else target
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
    if t.kind == "wafer":
        tp = 1
        cap = t.device.usable_sram_bytes * (1.0 - reserve)
    else:
        tp = tensor_parallel
        cap = t.device.hbm_bytes.si * (1.0 - reserve) * tp
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
    if t.count is not None:
        if t.count % tp:
            raise InputError(f"target: {t.count} GPUs is not a multiple of --tensor-parallel {tp}")
        k = t.count // tp
        if k > n_items:
            notes.append(f"only {n_items} layers to place; {k - n_items} devices left idle")
        x = single if k == 1 else multi
        if objective == "latency":
            sol = solve_partition(item_cost=cost_of(x), item_bytes=x, capacity_bytes=cap, stage_const_cost=const_cost,
                                  stage_const_bytes=act_const, objective="latency", num_stages=k, solver=solver,
                                  time_limit_s=time_limit_s)
        else:
            sol = _min_devices(single, multi, cap, act_const, solver, time_limit_s, max_stages=k)
    else:
        sol = _min_devices(single, multi, cap, act_const, solver, time_limit_s, max_stages=None)
        if objective == "latency" and sol.status != "infeasible":
            # the fewest devices first, then the most even split over them (the latency objective)
            x = single if sol.num_stages == 1 else multi
            sol2 = solve_partition(item_cost=cost_of(x), item_bytes=x, capacity_bytes=cap, stage_const_cost=const_cost,
                                   stage_const_bytes=act_const, objective="latency", num_stages=sol.num_stages,
                                   solver=solver, time_limit_s=time_limit_s)
            sol = sol2.model_copy(update={"solve_s": sol.solve_s + sol2.solve_s})
    x = single if sol.num_stages <= 1 else multi
    if sol.reason:
        notes.append(sol.reason)
    # per device, as fit reports it: a GPU stage's bytes are split over its tp GPUs
    loads = [float(x[a : e + 1].sum() + act_const) / tp for a, e in sol.stages]
    from ..records import Stage

    stages = [Stage(**r) for r in stage_records(w, sol.stages, loads)] if sol.stages else []
    n_stages = sol.num_stages
    c_items = cost_of(x)
    max_cost = (max(float(c_items[a : e + 1].sum()) + const_cost for a, e in sol.stages) / tp) if sol.stages else None
    num_devices = t.count if (t.count is not None and objective == "latency") else n_stages * tp
    if objective == "devices" and t.count is not None and sol.status != "infeasible" and n_stages * tp < t.count:
        notes.append(f"{n_stages * tp} of the {t.count} devices suffice")
    if objective == "latency":
        obj, unit = max_cost, cost_unit
    else:
        obj, unit = (float(n_stages * tp) if sol.objective is not None else None), "devices"
    return PlacementResult(model=w.model_name, target=t.label, hardware=t.key, device_kind=t.kind, precision=precision,
                           phase=phase, batch=batch, context=context, objective_kind=objective, status=sol.status,
                           optimal=sol.optimal, objective=obj, objective_unit=unit, solver=sol.solver,
                           solve_s=sol.solve_s, num_devices=num_devices,
                           num_stages=n_stages, devices_per_stage=tp, capacity_bytes=cap / tp,
                           max_stage_bytes=max(loads) if loads else None, max_stage_cost=max_cost,
                           cost_unit=cost_unit, num_variables=sol.num_variables, num_constraints=sol.num_constraints,
                           stages=stages, notes=notes)


def _min_devices(single, multi, cap, act_const, solver, time_limit_s, max_stages):
    """Fewest stages; one stage holds the model without the extra tied-head copy when it fits alone."""
    if single.sum() + act_const <= cap:
        return solve_partition(item_cost=single, item_bytes=single, capacity_bytes=cap, stage_const_cost=act_const,
                               stage_const_bytes=act_const, objective="devices", max_stages=max_stages, solver=solver,
                               time_limit_s=time_limit_s)
    return solve_partition(item_cost=multi, item_bytes=multi, capacity_bytes=cap, stage_const_cost=act_const,
                           stage_const_bytes=act_const, objective="devices", max_stages=max_stages, solver=solver,
                           time_limit_s=time_limit_s)
