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
from typing import NamedTuple, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..errors import InputError
from ..records import RecordHead
from .milp import SOLVERS, SolverRun, highs_available, resolve_solver, status_detail  # noqa: F401 (re-exported)

OBJECTIVES = ("latency", "devices")
METHODS = ("auto", "dp", "ilp")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeviceGroup(NamedTuple):
    """``count`` devices of ``capacity_bytes`` each on which a stage's cost is multiplied by ``cost_scale``."""

    count: int
    capacity_bytes: float
    cost_scale: float = 1.0


class PartitionSolution(_Frozen):
    """Solution of :func:`solve_partition` (item indices, 0-based inclusive)."""

    status: str  # optimal | time_limit | infeasible
    optimal: bool
    objective: float | None
    num_stages: int
    max_stage_cost: float | None
    stages: list[tuple[int, int]]
    solver: str  # dp | highs | cbc: what produced the answer
    solve_s: float
    num_variables: int
    num_constraints: int
    reason: str | None = None
    method: str = "dp"  # dp | ilp
    gap_frac: float | None = None
    best_bound: float | None = None
    stage_groups: list[int] = []  # device group of each stage (mixed devices)
    solver_run: SolverRun


# ---------------------------------------------------------------------------------------------
# PuLP helpers kept for callers that build PuLP models
# ---------------------------------------------------------------------------------------------
def new_var(prob, name: str, *, low=None, up=None, cat: str = "Continuous"):
    """A PuLP variable attached to ``prob`` (``add_variable`` on PuLP >= 3.3, the constructor before)."""
    import pulp

    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, low, up, cat=cat)
    return pulp.LpVariable(name, lowBound=low, upBound=up, cat=cat)


# ---------------------------------------------------------------------------------------------
def _run(name: str, requested: str, *, status: str, solve_s: float, version: str | None = None,
         fallback: str | None = None, gap: float | None = None, bound: float | None = None, reason: str | None = None,
         num_solves: int = 1) -> SolverRun:
    return SolverRun(name=name, version=version, requested=requested, fallback_reason=fallback, status=status,
                     status_detail=status_detail(status, gap, reason), solve_s=solve_s, gap_frac=gap, best_bound=bound,
                     num_solves=num_solves)


def _check_items(item_cost, item_bytes) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(item_cost, dtype=float)
    b = np.asarray(item_bytes, dtype=float)
    if c.ndim != 1 or len(c) == 0 or b.shape != c.shape:
        raise InputError("items: need at least one item and equal-length cost and bytes arrays")
    if not np.isfinite(c).all() or not np.isfinite(b).all() or (c < 0).any() or (b < 0).any():
        raise InputError("items: costs and bytes must be finite and non-negative")
    return c, b


def _max_cost(c: np.ndarray, stages, const: float, scales=None) -> float:
    pre = np.concatenate([[0.0], np.cumsum(c)])
    vals = [(pre[e + 1] - pre[a] + const) * (1.0 if scales is None else scales[s]) for s, (a, e) in enumerate(stages)]
    return float(max(vals))


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
        return _solve_groups(c, b, groups, stage_const_cost, stage_const_bytes, objective, solver, time_limit_s,
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
    return _solve_ilp_identical(c, b, capacity_bytes, stage_const_cost, stage_const_bytes, objective, k_exact,
                                max_stages, solver, time_limit_s, dp if warm_start else None)


def _solve_dp(c, b, cap, cc, cb, objective, k_exact, max_stages, solver) -> PartitionSolution:
    from ..analytic.partition import bottleneck_partition, fewest_stages

    n = len(c)
    t0 = time.perf_counter()

    def infeasible(reason: str) -> PartitionSolution:
        s = time.perf_counter() - t0
        return PartitionSolution(status="infeasible", optimal=False, objective=None, num_stages=0, max_stage_cost=None,
                                 stages=[], solver="dp", solve_s=s, num_variables=0, num_constraints=0, reason=reason,
                                 method="dp", solver_run=_run("dp", solver, status="infeasible", solve_s=s, reason=reason))

    too_big = np.nonzero(b + cb > cap * (1 + 1e-12))[0]
    if len(too_big):
        i = int(too_big[0])
        return infeasible(f"memory: item {i} alone needs {b[i] + cb:.4g} B, more than one device's {cap:.4g} B")
    if objective == "devices":
        g = fewest_stages(b, cap, cb)
        if max_stages is not None and len(g) > int(max_stages):
            return infeasible(f"memory: no partition within {max_stages} devices of {cap:.4g} B each; "
                              f"at least {len(g)} are needed")
        k = len(g)
    else:
        k = k_exact
    res = bottleneck_partition(c, k, item_bytes=b, capacity_bytes=cap, stage_const_cost=cc, stage_const_bytes=cb)
    if not res.feasible:
        return infeasible(f"memory: no {k} contiguous stages fit each device's {cap:.4g} B "
                          f"({res.binding.split(': ', 1)[-1]})")
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
# The integer program (arrays for wseplan.optimize.milp)
# ---------------------------------------------------------------------------------------------
class _Ilp(NamedTuple):
    milp: object
    arc_i: np.ndarray
    arc_j: np.ndarray
    arc_g: np.ndarray
    arc_cost: np.ndarray
    num_y: int
    vals: np.ndarray  # thresholds (latency)
    kidx: np.ndarray  # arc -> threshold index (-1: at or below the lower bound)
    r_of_arc: np.ndarray  # arc -> suffix variable column (-1: none)
    r_next: np.ndarray  # suffix column -> next suffix column (-1: none)
    r_arc: np.ndarray  # suffix column -> its arc
    lb: float


def _build_ilp(c, b, groups: list[DeviceGroup], cc, cb, objective, *, exact_k: int | None, max_total: int | None,
               lb: float, ub: float | None, min_len_other: int = 0) -> _Ilp | None:
    """The DAG model over arcs (i, j, g) as arrays; None when no arc can start or end the path."""
    import scipy.sparse as sp

    from .milp import Milp

    n = len(c)
    cpre = np.concatenate([[0.0], np.cumsum(c)])
    bpre = np.concatenate([[0.0], np.cumsum(b)])
    ii, jj = np.triu_indices(n + 1, k=1)
    seg_b = bpre[jj] - bpre[ii] + cb
    seg_c = cpre[jj] - cpre[ii] + cc
    A_i, A_j, A_g, A_c = [], [], [], []
    for g, grp in enumerate(groups):
        keep = seg_b <= grp.capacity_bytes * (1 + 1e-12)
        if exact_k is not None:
            keep &= (jj - ii) <= n - exact_k + 1  # the other k-1 stages each need one item
        cost = seg_c * grp.cost_scale
        if objective == "latency" and ub is not None:
            keep &= cost <= ub * (1 + 1e-12)
        A_i.append(ii[keep]); A_j.append(jj[keep]); A_g.append(np.full(int(keep.sum()), g)); A_c.append(cost[keep])
    ai, aj, ag, acost = (np.concatenate(v) for v in (A_i, A_j, A_g, A_c))
    order = np.lexsort((aj, ag, ai))  # by start node, group, end node
    ai, aj, ag, acost = ai[order], aj[order], ag[order], acost[order]
    na = len(ai)
    if na == 0 or not (ai == 0).any() or not (aj == n).any():
        return None
    rows, cols, vals_ = [], [], []
    row_lo, row_hi = [], []
    r = 0
    # flow conservation: out - in = 1 at 0, -1 at n, 0 elsewhere
    rows += list(ai + r); cols += list(range(na)); vals_ += [1.0] * na
    rows += list(aj + r); cols += list(range(na)); vals_ += [-1.0] * na
    rhs = np.zeros(n + 1)
    rhs[0], rhs[n] = 1.0, -1.0
    row_lo += list(rhs); row_hi += list(rhs)
    r += n + 1
    if len(groups) > 1:
        for g, grp in enumerate(groups):
            idx = np.nonzero(ag == g)[0]
            rows += [r] * len(idx); cols += list(idx); vals_ += [1.0] * len(idx)
            row_lo.append(-np.inf); row_hi.append(float(grp.count))
            r += 1
    if exact_k is not None or max_total is not None:
        rows += [r] * na; cols += list(range(na)); vals_ += [1.0] * na
        row_lo.append(float(exact_k) if exact_k is not None else -np.inf)
        row_hi.append(float(exact_k) if exact_k is not None else float(max_total))
        r += 1
    ncol = na
    vals = np.zeros(0)
    kidx = np.full(na, -1)
    r_of_arc = np.full(na, -1)
    r_next_l, r_arc_l = [], []
    obj = np.zeros(0)
    offset = 0.0
    if objective == "latency":
        above = acost > lb * (1 + 1e-12)
        vals = np.unique(acost[above])
        nw = len(vals)
        w0 = ncol
        ncol += nw
        for k in range(1, nw):  # w_k <= w_{k-1}
            rows += [r, r]; cols += [w0 + k, w0 + k - 1]; vals_ += [1.0, -1.0]
            row_lo.append(-np.inf); row_hi.append(0.0)
            r += 1
        kidx[above] = np.searchsorted(vals, acost[above] * (1 - 1e-12))
        # suffix sums per (start node, group): the arcs that need threshold k form a suffix of the out-arcs
        starts = np.nonzero(np.r_[True, (ai[1:] != ai[:-1]) | (ag[1:] != ag[:-1])])[0]
        ends = np.r_[starts[1:], na]
        for s, e in zip(starts, ends):
            nxt = -1
            for a in range(e - 1, s - 1, -1):
                if not above[a]:
                    break
                col = ncol
                ncol += 1
                r_of_arc[a] = col
                r_next_l.append(nxt)
                r_arc_l.append(a)
                # r_a - y_a - r_next = 0
                rows += [r, r]; cols += [col, a]; vals_ += [1.0, -1.0]
                if nxt >= 0:
                    rows.append(r); cols.append(nxt); vals_.append(-1.0)
                row_lo.append(0.0); row_hi.append(0.0)
                r += 1
                # r_a - w_k <= 0
                rows += [r, r]; cols += [col, w0 + int(kidx[a])]; vals_ += [1.0, -1.0]
                row_lo.append(-np.inf); row_hi.append(0.0)
                r += 1
                nxt = col
        scale = float(max(vals.max(initial=0.0), lb, 1e-300))
        obj = np.zeros(ncol)
        obj[w0 : w0 + nw] = np.diff(np.concatenate([[lb], vals])) / scale
        offset = lb / scale
    else:
        obj = np.zeros(ncol)
        obj[:na] = 1.0
    A = sp.csr_matrix((np.asarray(vals_, dtype=float), (np.asarray(rows), np.asarray(cols))), shape=(r, ncol))
    integer = np.zeros(ncol, dtype=bool)
    integer[: na + len(vals)] = True
    col_lo = np.zeros(ncol)
    col_hi = np.ones(ncol)
    m = Milp(c=obj, A=A, row_lo=np.asarray(row_lo), row_hi=np.asarray(row_hi), col_lo=col_lo, col_hi=col_hi,
             integer=integer, offset=offset)
    return _Ilp(m, ai, aj, ag, acost, na, vals, kidx, r_of_arc, np.asarray(r_next_l, dtype=int),
                np.asarray(r_arc_l, dtype=int), lb)


def _start_vector(ilp: _Ilp, stages, groups_of_stage) -> np.ndarray | None:
    """The model's column values for a placement (None when one of its arcs is not in the model)."""
    x = np.zeros(ilp.milp.num_cols)
    lookup = {(int(a), int(e), int(g)): k for k, (a, e, g) in enumerate(zip(ilp.arc_i, ilp.arc_j, ilp.arc_g))}
    used = []
    for (a, e), g in zip(stages, groups_of_stage):
        k = lookup.get((a, e + 1, g))
        if k is None:
            return None
        x[k] = 1.0
        used.append(k)
    nw = len(ilp.vals)
    if nw:
        worst = max(ilp.arc_cost[k] for k in used)
        x[ilp.num_y : ilp.num_y + nw] = (ilp.vals <= worst * (1 + 1e-12)).astype(float)
        base = ilp.num_y + nw
        vals = np.zeros(len(ilp.r_arc))
        for t in range(len(ilp.r_arc)):  # chains were built from the last arc backwards: next < t
            nx = ilp.r_next[t]
            vals[t] = x[ilp.r_arc[t]] + (vals[nx - base] if nx >= 0 else 0.0)
        x[base:] = vals
    return x


def _decode(ilp: _Ilp, x: np.ndarray) -> tuple[list[tuple[int, int]], list[int]]:
    used = np.nonzero(x[: ilp.num_y] > 0.5)[0]
    order = np.argsort(ilp.arc_i[used])
    used = used[order]
    return [(int(ilp.arc_i[k]), int(ilp.arc_j[k]) - 1) for k in used], [int(ilp.arc_g[k]) for k in used]


def _ilp_solution(ilp: _Ilp, res, c, cc, groups, objective, solver_name, requested, version, fallback, t_build,
                  start_sol: tuple | None, lb_obj: float) -> PartitionSolution:
    """Turn a MILP result into a PartitionSolution; a stopped search keeps the better of its and the warm start."""
    m = ilp.milp
    nv, nc = m.num_cols, m.num_rows
    scales = [g.cost_scale for g in groups]
    if res.status in ("optimal", "time_limit"):
        stages, sg = _decode(ilp, res.x)
    elif start_sol is not None:
        stages, sg = start_sol
    else:
        stages, sg = [], []
    if res.status == "infeasible":
        reason = ("memory: no placement of the stages on the devices fits their memory" if len(groups) > 1
                  else "memory: no partition fits the devices")
        return PartitionSolution(status="infeasible", optimal=False, objective=None, num_stages=0, max_stage_cost=None,
                                 stages=[], solver=solver_name, solve_s=res.solve_s, num_variables=nv, num_constraints=nc,
                                 reason=reason, method="ilp",
                                 solver_run=_run(solver_name, requested, version=version, fallback=fallback,
                                                 status="infeasible", solve_s=res.solve_s, reason=reason))
    if res.status == "time_limit" and start_sol is not None:
        ws_stages, ws_g = start_sol
        ws_obj = (_max_cost(c, ws_stages, cc, [scales[g] for g in ws_g]) if objective == "latency" else len(ws_stages))
        cur = (_max_cost(c, stages, cc, [scales[g] for g in sg]) if objective == "latency" else len(stages))
        if ws_obj < cur:
            stages, sg = ws_stages, ws_g
    if not stages:  # stopped before any solution and no warm start
        return PartitionSolution(status="time_limit", optimal=False, objective=None, num_stages=0, max_stage_cost=None,
                                 stages=[], solver=solver_name, solve_s=res.solve_s, num_variables=nv, num_constraints=nc,
                                 reason="time limit before any placement was found; raise the time limit", method="ilp",
                                 best_bound=lb_obj,
                                 solver_run=_run(solver_name, requested, version=version, fallback=fallback,
                                                 status="time_limit", solve_s=res.solve_s, bound=lb_obj))
    max_cost = _max_cost(c, stages, cc, [scales[g] for g in sg])
    obj = float(len(stages)) if objective == "devices" else max_cost
    if res.status == "optimal":
        status, gap, bound = "optimal", 0.0, obj
    else:
        # the solver's bound (in the model's scaled units for latency) and the partition's bound: keep the larger
        bound = lb_obj
        if res.bound is not None and np.isfinite(res.bound):
            sb = res.bound * (float(max(ilp.vals.max(initial=0.0), ilp.lb, 1e-300)) if objective == "latency" else 1.0)
            bound = max(bound, sb)
        bound = min(bound, obj)
        status, gap = "time_limit", (obj - bound) / max(abs(obj), 1e-300)
    return PartitionSolution(status=status, optimal=status == "optimal", objective=obj, num_stages=len(stages),
                             max_stage_cost=max_cost, stages=stages, solver=solver_name, solve_s=res.solve_s + t_build,
                             num_variables=nv, num_constraints=nc, method="ilp", gap_frac=gap, best_bound=bound,
                             stage_groups=sg,
                             solver_run=_run(solver_name, requested, version=version, fallback=fallback, status=status,
                                             solve_s=res.solve_s + t_build, gap=gap, bound=bound))


def _solve_ilp_identical(c, b, cap, cc, cb, objective, k_exact, max_stages, solver, time_limit_s,
                         dp: PartitionSolution | None) -> PartitionSolution:
    from .milp import solve_milp

    name, version, fallback = resolve_solver(solver)
    t0 = time.perf_counter()
    groups = [DeviceGroup(k_exact or len(c), cap, 1.0)]
    if objective == "latency":
        lb = max(float(c.sum()) / k_exact, float(c.max())) + cc
        ub = dp.max_stage_cost if dp is not None else _balanced_ub(c, b, cap, cc, cb, k_exact)
    else:
        lb, ub = 0.0, None
    ilp = _build_ilp(c, b, groups, cc, cb, objective, exact_k=k_exact, max_total=max_stages, lb=lb, ub=ub)
    if ilp is None:
        reason = "memory: no stage that fits one device can start or end the sequence"
        return PartitionSolution(status="infeasible", optimal=False, objective=None, num_stages=0, max_stage_cost=None,
                                 stages=[], solver=name, solve_s=0.0, num_variables=0, num_constraints=0, reason=reason,
                                 method="ilp", solver_run=_run(name, solver, version=version, fallback=fallback,
                                                               status="infeasible", solve_s=0.0, reason=reason))
    start = start_sol = None
    if dp is not None:
        start_sol = (dp.stages, [0] * dp.num_stages)
        start = _start_vector(ilp, *start_sol)
    t_build = time.perf_counter() - t0
    res = solve_milp(ilp.milp, name, time_limit_s=time_limit_s, start=start)
    return _ilp_solution(ilp, res, c, cc, groups, objective, name, solver, version, fallback, t_build, start_sol,
                         dp.best_bound if dp is not None and dp.best_bound is not None else (lb if objective == "latency" else 1.0))


def _balanced_ub(c, b, cap, cc, cb, k) -> float | None:
    """Largest stage cost of a split at the s/k quantiles of the cost, when it fits memory (a quick bound)."""
    n = len(c)
    pre = np.cumsum(c)
    cuts = [0]
    for s in range(1, k):
        j = int(np.searchsorted(pre, pre[-1] * s / k)) + 1
        j = min(max(j, cuts[-1] + 1), n - (k - s))
        cuts.append(j)
    cuts.append(n)
    split = [(cuts[s], cuts[s + 1] - 1) for s in range(k)]
    if all(b[a : e + 1].sum() + cb <= cap * (1 + 1e-12) for a, e in split):
        return max(float(c[a : e + 1].sum()) for a, e in split) + cc
    return None


def _assign(stage_costs: list[float], groups: list[DeviceGroup], stage_bytes: list[float]) -> list[int] | None:
    """Devices for stages: the costliest stages on the fastest devices that hold them (None if some stage finds
    none). With every stage fitting every device this pairing is optimal for the slowest stage (exchange
    argument)."""
    slots = sorted(((g.cost_scale, -g.capacity_bytes, gi) for gi, g in enumerate(groups) for _ in range(g.count)))
    out = [-1] * len(stage_costs)
    free = list(slots)
    for s in sorted(range(len(stage_costs)), key=lambda t: -stage_costs[t]):
        for pos, (_, negcap, gi) in enumerate(free):
            if -negcap >= stage_bytes[s] * (1 - 1e-12):
                out[s] = gi
                del free[pos]
                break
        else:
            return None
    return out


def _solve_groups(c, b, groups: list[DeviceGroup], cc, cb, objective, solver, time_limit_s,
                  warm_start: bool) -> PartitionSolution:
    """Mixed device groups: partition bounds first (weakest device: a start; strongest: a bound), then the ILP."""
    from ..analytic.partition import bottleneck_partition, fewest_stages
    from .milp import solve_milp

    name, version, fallback = resolve_solver(solver)
    t0 = time.perf_counter()
    n = len(c)
    total = sum(g.count for g in groups)
    k = min(total, n)
    cap_max = max(g.capacity_bytes for g in groups)
    cap_min = min(g.capacity_bytes for g in groups)
    s_min = min(g.cost_scale for g in groups)
    s_max = max(g.cost_scale for g in groups)
    cpre = np.concatenate([[0.0], np.cumsum(c)])
    bpre = np.concatenate([[0.0], np.cumsum(b)])

    def infeasible(reason: str, who: str = "dp") -> PartitionSolution:
        s = time.perf_counter() - t0
        return PartitionSolution(status="infeasible", optimal=False, objective=None, num_stages=0, max_stage_cost=None,
                                 stages=[], solver=who, solve_s=s, num_variables=0, num_constraints=0, reason=reason,
                                 method="dp", solver_run=_run(who, solver, status="infeasible", solve_s=s, reason=reason))

    # a relaxation: every device as large (and as fast) as the best one
    strong = fewest_stages(b, cap_max, cb)
    if strong is None:
        i = int(np.argmax(b + cb > cap_max * (1 + 1e-12)))
        return infeasible(f"memory: item {i} alone needs {b[i] + cb:.4g} B, more than the largest device's {cap_max:.4g} B")
    if len(strong) > total:
        return infeasible(f"memory: the {total} devices cannot hold the items even if all had the largest memory "
                          f"({cap_max:.4g} B); at least {len(strong)} such devices are needed")
    start_sol = None
    if objective == "latency":
        lbr = bottleneck_partition(c, k, item_bytes=b, capacity_bytes=cap_max, stage_const_cost=cc, stage_const_bytes=cb)
        lb_obj = lbr.lower_bound * s_min
        wk = bottleneck_partition(c, k, item_bytes=b, capacity_bytes=cap_min, stage_const_cost=cc, stage_const_bytes=cb)
        cands = [wk.stages] if wk.feasible else []
        if lbr.feasible:
            cands.append(lbr.stages)
        best = None
        for st in cands:
            costs = [float(cpre[e + 1] - cpre[a]) + cc for a, e in st]
            byts = [float(bpre[e + 1] - bpre[a]) + cb for a, e in st]
            asg = _assign(costs, groups, byts)
            if asg is not None:
                val = max(cost * groups[g].cost_scale for cost, g in zip(costs, asg))
                if best is None or val < best[0]:
                    best = (val, st, asg)
        if best is not None:
            start_sol = (best[1], best[2])
            ub = best[0]
        else:
            ub = None
    else:
        lb_obj = float(len(strong))
        weak = fewest_stages(b, cap_min, cb)
        if weak is not None and len(weak) <= total:
            byts = [float(bpre[e + 1] - bpre[a]) + cb for a, e in weak]
            costs = [float(cpre[e + 1] - cpre[a]) + cc for a, e in weak]
            asg = _assign(costs, groups, byts)
            if asg is not None:
                start_sol = (weak, asg)
        # the strongest packing may already be placeable: then it is optimal
        byts = [float(bpre[e + 1] - bpre[a]) + cb for a, e in strong]
        costs = [float(cpre[e + 1] - cpre[a]) + cc for a, e in strong]
        asg = _assign(costs, groups, byts)
        if asg is not None:
            start_sol = (strong, asg)
        ub = None
    if start_sol is not None and warm_start:
        sc = [groups[g].cost_scale for g in start_sol[1]]
        start_obj = _max_cost(c, start_sol[0], cc, sc) if objective == "latency" else float(len(start_sol[0]))
        if start_obj <= lb_obj * (1 + 1e-12):  # the bound meets the start: proved without an ILP
            s = time.perf_counter() - t0
            return PartitionSolution(status="optimal", optimal=True, objective=start_obj, num_stages=len(start_sol[0]),
                                     max_stage_cost=_max_cost(c, start_sol[0], cc, sc), stages=start_sol[0], solver="dp",
                                     solve_s=s, num_variables=0, num_constraints=0, method="dp", gap_frac=0.0,
                                     best_bound=start_obj, stage_groups=start_sol[1],
                                     solver_run=_run("dp", solver, status="optimal", solve_s=s, gap=0.0, bound=start_obj))
    if not warm_start:
        start_sol, ub = None, None
        if objective == "latency":
            lb_obj = max(float(c.max()) + cc, (float(c.sum()) + cc) / total) * s_min
    lb = lb_obj if objective == "latency" else 0.0
    if objective == "latency" and ub is None:
        ub = (float(c.sum()) + cc) * s_max  # one stage on the slowest device bounds every useful arc
    ilp = _build_ilp(c, b, groups, cc, cb, objective, exact_k=None, max_total=None, lb=lb, ub=ub)
    if ilp is None:
        return infeasible("memory: no stage that fits a device can start or end the sequence")
    start = _start_vector(ilp, *start_sol) if start_sol is not None else None
    t_build = time.perf_counter() - t0
    res = solve_milp(ilp.milp, name, time_limit_s=time_limit_s, start=start)
    return _ilp_solution(ilp, res, c, cc, groups, objective, name, solver, version, fallback, t_build, start_sol,
                         lb_obj)


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
    from ..catalog.load import load_catalog
    from ..fit import _stage_records, build_workload, resolve_model
    from ..targets import parse_target
    from ..workload import check_positive_int

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
    stages = _stage_records(w, sol.stages, loads) if sol.stages else []
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
