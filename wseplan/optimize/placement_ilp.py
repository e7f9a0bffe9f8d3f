"""The placement integer program: mixed device groups (and identical devices with ``method="ilp"``).

A path in a DAG over the cut positions 0..n between the items; an arc (i, j, g) is the stage holding items
i..j-1 on a device of group g, present only when it fits that device's memory (see
:mod:`wseplan.optimize.placement` for the formulation). Built as arrays for :mod:`wseplan.optimize.milp`,
warm-started with the exact partition's placement and bounded by it.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ..analytic.partition import bottleneck_partition, fewest_stages
from ..analytic.rows import distinct
from .milp import Milp, resolve_solver, solve_milp
from .placement_types import DeviceGroup, PartitionSolution, _max_cost, _run


class _Ilp(NamedTuple):
    milp: object
    arc_i: np.ndarray
    arc_j: np.ndarray
    arc_g: np.ndarray
    arc_cost: np.ndarray
    num_y: int
    vals: np.ndarray  # thresholds (latency)
    r_next: np.ndarray  # suffix column -> next suffix column (-1: none)
    r_arc: np.ndarray  # suffix column -> its arc
    lb: float


def _build_ilp(c, b, groups: list[DeviceGroup], cc, cb, objective, *, exact_k: int | None, max_total: int | None,
               lb: float, ub: float | None) -> _Ilp | None:
    """The DAG model over arcs (i, j, g) as arrays; None when no arc can start or end the path."""
    import scipy.sparse as sp


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
        A_i.append(ii[keep])
        A_j.append(jj[keep])
        A_g.append(np.full(int(keep.sum()), g))
        A_c.append(cost[keep])
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
    r_next_l, r_arc_l = [], []
    obj = np.zeros(0)
    offset = 0.0
    if objective == "latency":
        above = acost > lb * (1 + 1e-12)
        vals = distinct(acost[above])
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
    return _Ilp(m, ai, aj, ag, acost, na, vals, np.asarray(r_next_l, dtype=int),
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
    if "solver" in res.extra:  # the requested solver failed and another one answered (milp._solve_highs)
        solver_name, fallback = res.extra["solver"], res.extra.get("fallback_reason", fallback)
        version = None
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
                                                 status="time_limit", solve_s=res.solve_s, bound=lb_obj, found=False))
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


def solve_identical(c, b, cap, cc, cb, objective, k_exact, max_stages, solver, time_limit_s,
                         dp: PartitionSolution | None) -> PartitionSolution:
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


def solve_groups(c, b, groups: list[DeviceGroup], cc, cb, objective, solver, time_limit_s,
                  warm_start: bool) -> PartitionSolution:
    """Mixed device groups: partition bounds first (weakest device: a start; strongest: a bound), then the ILP."""

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
        return infeasible(f"memory: item {i} alone needs {b[i] + cb:,.0f} B, more than the largest device's {cap_max:,.0f} B")
    if len(strong) > total:
        return infeasible(f"memory: the {total} devices cannot hold the items even if all had the largest memory "
                          f"({cap_max:,.0f} B); at least {len(strong)} such devices are needed")
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
