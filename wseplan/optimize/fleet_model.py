"""The fleet integer program as one array model, solved by exact decomposition where the structure allows.

Variables: integer replicas ``n_i`` of each configuration (a workload on a system type) and integer systems
``S_j`` of each type. Rows: demand (``sum_i supply_i n_i >= amount_d``), devices (``per_j S_j >= sum_i
devices_i n_i``) and the caps (power, rack units, capex). Objective: yearly TCO.

**Decomposition (exact).** A replica that fills whole systems (``devices_i`` a multiple of the type's devices
per system, e.g. a wafer, or 16 GPUs on 8-GPU nodes) needs no rounding shared with anyone: its systems are
``devices_i / per_j`` per replica, and its cost is linear in ``n_i``. Only replicas that share systems
(fractional occupancy) or a type with ``max_systems`` tie workloads together. Workloads are grouped into
connected components of that relation; without the caps the problem separates exactly into one small integer
program per component. If the combined plan meets every cap it is optimal for the capped problem too (it is
optimal for a relaxation and feasible); otherwise the full model with the caps is solved.

**Re-solves.** Component solutions are remembered by their data, so relaxing one workload's demand or SLA
re-solves that workload's component only, warm-started from the base plan (which stays feasible under every
relaxation). Relaxing a cap of a plan the caps do not bind is answered without any solve.

**Duals.** One LP relaxation of the full model gives the shadow prices of the demand and cap rows and the
reduced costs of the configurations an SLA excludes.

References
----------
Wolsey, Integer Programming, Wiley 1998, ch. 2 (relaxations and bounds) and ch. 8 (decomposition).
Bertsimas and Tsitsiklis, Introduction to Linear Optimization, Athena 1997, ch. 4-5 (duality, sensitivity).
"""
from __future__ import annotations

import math
import time

import numpy as np

from ..analytic.rows import distinct
from .milp import Milp, MilpResult, resolve_solver, solve_milp

CAPS = ("power_cap_w", "rack_units_cap", "budget_usd")
RELAX_FRAC = 0.10  # each constraint is relaxed by this fraction in the analysis



def _row_units(amounts: np.ndarray) -> np.ndarray:
    """The scale of each demand row (its amount; 1 where it is not positive): rows divided by it have a bound of 1."""
    a = np.asarray(amounts, dtype=float)
    return np.where(a > 0, a, 1.0)

class FleetModel:
    """Arrays of a :class:`~wseplan.optimize.fleet.FleetProblem` and every solve made on them."""

    def __init__(self, pb, *, solver: str = "highs", time_limit_s: float = 60.0):
        self.pb = pb
        self.requested = solver
        self.solver, self.version, self.fallback = resolve_solver(solver)
        self.time_limit_s = float(time_limit_s)
        dem = {d.name: k for k, d in enumerate(pb.demands)}
        sys_idx = {s.name: j for j, s in enumerate(pb.systems)}
        cfg = [c for c in pb.configs]
        self.known = np.array([c.workload in dem and c.system in sys_idx for c in cfg], dtype=bool)
        self.wl = np.array([dem.get(c.workload, -1) for c in cfg], dtype=int)
        self.sy = np.array([sys_idx.get(c.system, -1) for c in cfg], dtype=int)
        self.supply = np.array([c.supply for c in cfg], dtype=float)
        self.dev = np.array([c.num_devices for c in cfg], dtype=float)
        self.x_capex = np.array([c.extra_capex_usd for c in cfg], dtype=float)
        self.x_annual = np.array([c.extra_annual_usd for c in cfg], dtype=float)
        self.x_power = np.array([c.extra_facility_power_w for c in cfg], dtype=float)
        self.x_ru = np.array([c.extra_rack_units for c in cfg], dtype=float)
        self.ttft = np.array([np.nan if c.ttft_s is None else c.ttft_s for c in cfg], dtype=float)
        self.tpot = np.array([np.nan if c.tpot_s is None else c.tpot_s for c in cfg], dtype=float)
        self.has_run = np.array([c.run_s is not None for c in cfg], dtype=bool)
        S = pb.systems
        self.per = np.array([s.devices_per_system for s in S], dtype=float)
        self.annual = np.array([s.annual_usd for s in S], dtype=float)
        self.power = np.array([s.peak_facility_power_w for s in S], dtype=float)
        self.ru = np.array([s.rack_units for s in S], dtype=float)
        self.capex = np.array([s.capex_usd for s in S], dtype=float)
        self.max_sys = np.array([np.inf if s.max_systems is None else s.max_systems for s in S], dtype=float)
        per_c = self.per[np.maximum(self.sy, 0)]
        self.whole = np.isclose(np.mod(self.dev, per_c), 0.0) & (self.dev > 0)
        self.k_sys = np.where(self.whole, self.dev / per_c, 0.0)  # systems per replica when whole
        self.amount = np.array([d.amount for d in pb.demands], dtype=float)
        self.kind = [d.kind for d in pb.demands]
        self._cache: dict = {}
        # bookkeeping over every solve, for the record
        self.mip_solves = 0
        self.lp_solves = 0
        self.solve_s = 0.0

    # -- admissibility -------------------------------------------------------------------------
    def admissible(self, sla_factor: dict[str, float] | None = None) -> np.ndarray:
        """Configurations that may serve their workload (SLA limits scaled by ``sla_factor[workload]``)."""
        sla_factor = sla_factor or {}
        ok = self.known.copy()
        for k, d in enumerate(self.pb.demands):
            m = self.wl == k
            if d.kind == "train":
                ok[m] &= self.has_run[m] & (self.supply[m] >= 1)
                continue
            f = sla_factor.get(d.name, 1.0)
            sel = ok[m] & (self.supply[m] > 0)
            if d.sla.ttft_s is not None:
                t = self.ttft[m]
                sel &= ~np.isnan(t) & (np.nan_to_num(t, nan=np.inf) <= d.sla.ttft_s * f)
            if d.sla.tpot_s is not None:
                t = self.tpot[m]
                sel &= ~np.isnan(t) & (np.nan_to_num(t, nan=np.inf) <= d.sla.tpot_s * f)
            ok[m] = sel
        return ok

    # -- the full model ------------------------------------------------------------------------
    def full_milp(self, ok: np.ndarray, amounts: np.ndarray, caps: dict, minimise: str | None = None,
                  all_columns: bool = False) -> tuple[Milp, np.ndarray]:
        """The whole model with the caps; columns are the admissible configurations (every known one, fixed at
        zero when not admissible, with ``all_columns``) then the systems. Returns (model, config indices)."""
        import scipy.sparse as sp

        idx = np.nonzero(self.known if all_columns else ok)[0]
        nc, ns, nd = len(idx), len(self.per), len(amounts)
        cols_c = np.arange(nc)
        rows = [self.wl[idx], nd + self.sy[idx], nd + np.arange(ns)]
        cols = [cols_c, cols_c, nc + np.arange(ns)]
        # demand rows scaled to a bound of 1 (supply / amount): the solver's absolute feasibility tolerance (~1e-6)
        # met a demand of 1e-6 tokens/s with nothing (audit31b M1); a huge one is as well conditioned
        unit = _row_units(amounts)
        vals = [self.supply[idx] / unit[self.wl[idx]], -self.dev[idx], self.per]
        r_lo = [amounts / unit, np.zeros(ns)]
        r_hi = [np.full(nd, np.inf), np.full(ns, np.inf)]
        r = nd + ns
        usage_rows = {"power_cap_w": (self.power, self.x_power[idx]), "rack_units_cap": (self.ru, self.x_ru[idx]),
                      "budget_usd": (self.capex, self.x_capex[idx])}
        cap_row = {}
        for k in CAPS:
            if caps.get(k) is None:
                continue
            sys_v, cfg_v = usage_rows[k]
            rows += [np.full(ns, r)]
            cols += [nc + np.arange(ns)]
            vals += [sys_v]
            if cfg_v is not None:
                rows += [np.full(nc, r)]
                cols += [cols_c]
                vals += [cfg_v]
            r_lo.append([-np.inf])
            r_hi.append([float(caps[k])])
            cap_row[k] = r
            r += 1
        A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, nc + ns))
        if minimise in ("power_cap_w", "rack_units_cap", "budget_usd"):
            sys_v, cfg_v = usage_rows[minimise]
            c = np.concatenate([cfg_v if cfg_v is not None else np.zeros(nc), sys_v])
        else:
            c = np.concatenate([self.x_annual[idx], self.annual])
        col_hi = np.concatenate([np.where(ok[idx], np.inf, 0.0), self.max_sys])
        m = Milp(c=c, A=A, row_lo=np.concatenate([np.ravel(v) for v in r_lo]),
                 row_hi=np.concatenate([np.ravel(v) for v in r_hi]), col_lo=np.zeros(nc + ns), col_hi=col_hi,
                 integer=np.ones(nc + ns, dtype=bool))
        m.cap_row = cap_row  # type: ignore[attr-defined]
        return m, idx

    def lp_duals(self, ok: np.ndarray, caps: dict) -> dict:
        """LP relaxation of the full model: row duals (d objective / d bound) and the reduced cost of every
        known configuration (those not admissible are columns fixed at zero)."""
        m, idx = self.full_milp(ok, self.amount, caps, all_columns=True)
        res = self._solve(m, relax=True)
        self.lp_solves += 1
        nd = len(self.amount)
        if res.status != "optimal" or res.row_dual is None:
            return {"status": res.status}
        rc = np.full(len(self.known), np.nan)
        rc[idx] = res.col_dual[: len(idx)]
        return {"status": "optimal", "objective": res.objective, "demand": res.row_dual[:nd] / _row_units(self.amount),
                "caps": {k: float(res.row_dual[r]) for k, r in m.cap_row.items()}, "reduced_cost": rc}

    def lp_objective(self, ok: np.ndarray, amounts: np.ndarray, caps: dict) -> float | None:
        """The LP relaxation's optimum of a variant (None when the LP is not solved)."""
        m, _ = self.full_milp(ok, amounts, caps)
        res = self._solve(m, relax=True)
        self.lp_solves += 1
        return res.objective if res.status == "optimal" else None

    # -- components ----------------------------------------------------------------------------
    def components(self, ok: np.ndarray) -> list[np.ndarray]:
        """Workload groups that share systems (fractional occupancy, or a type with max_systems)."""
        nd = len(self.amount)
        parent = list(range(nd))

        def find(a):
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        for j in range(len(self.per)):
            on_j = ok & (self.sy == j)
            tie = on_j & (~self.whole | np.isfinite(self.max_sys[j]))
            ws = distinct(self.wl[tie])
            for w in ws[1:]:
                ra, rb = find(int(ws[0])), find(int(w))
                if ra != rb:
                    parent[rb] = ra
        roots: dict[int, list[int]] = {}
        for w in range(nd):
            roots.setdefault(find(w), []).append(w)
        return [np.asarray(v, dtype=int) for v in roots.values()]

    def _component(self, ws: np.ndarray, ok: np.ndarray, amounts: np.ndarray, start: dict | None) -> dict:
        """Solve one component without the caps; remembered by its data."""
        import scipy.sparse as sp

        in_c = ok & np.isin(self.wl, ws)
        idx = np.nonzero(in_c)[0]
        pooled = distinct(self.sy[idx[~self.whole[idx] | np.isfinite(self.max_sys[self.sy[idx]])]])
        idx = self._undominated(idx, pooled)
        key = (idx.tobytes(), amounts[ws].tobytes(), pooled.tobytes())
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        nc, npool = len(idx), len(pooled)
        pool_col = {int(j): nc + q for q, j in enumerate(pooled)}
        is_pooled = np.isin(self.sy[idx], pooled)
        c = np.concatenate([self.x_annual[idx] + np.where(is_pooled, 0.0, self.annual[self.sy[idx]] * self.k_sys[idx]),
                            self.annual[pooled]])
        wpos = {int(w): r for r, w in enumerate(ws)}
        rows = [np.array([wpos[int(w)] for w in self.wl[idx]], dtype=int)]
        cols = [np.arange(nc)]
        unit = _row_units(amounts)  # demand rows scaled to a bound of 1, as full_milp's
        vals = [self.supply[idx] / unit[self.wl[idx]]]
        nd = len(ws)
        pidx = np.nonzero(is_pooled)[0]
        if npool:
            prow = {int(j): nd + q for q, j in enumerate(pooled)}
            rows += [np.array([prow[int(self.sy[idx[i]])] for i in pidx], dtype=int), nd + np.arange(npool)]
            cols += [pidx, nc + np.arange(npool)]
            vals += [-self.dev[idx[pidx]], self.per[pooled]]
        A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(nd + npool, nc + npool))
        m = Milp(c=c, A=A, row_lo=np.concatenate([amounts[ws] / unit[ws], np.zeros(npool)]),
                 row_hi=np.full(nd + npool, np.inf), col_lo=np.zeros(nc + npool),
                 col_hi=np.concatenate([np.full(nc, np.inf), self.max_sys[pooled]]), integer=np.ones(nc + npool, dtype=bool))
        def completed(reps: np.ndarray) -> np.ndarray | None:
            """Replica counts plus the pooled systems they need; None if that is not feasible here."""
            x = np.concatenate([reps, np.zeros(npool)])
            for j in pooled:
                use = float(np.dot(self.dev[idx[pidx]], x[pidx] * (self.sy[idx[pidx]] == j)))
                x[pool_col[int(j)]] = math.ceil(use / self.per[j] - 1e-9)
            ok_rows = np.all(A @ x >= m.row_lo - 1e-9 * np.maximum(1.0, np.abs(m.row_lo)))
            return x if ok_rows and np.all(x <= m.col_hi) else None

        x0 = None
        if start is not None:  # the base plan restricted to this component
            x0 = completed(np.array([start["replicas"].get(int(i), 0) for i in idx], dtype=float))
        if x0 is None:  # a greedy start: each workload on its cheapest configuration per unit supplied
            reps = np.zeros(nc)
            unit = (c[:nc] + np.where(is_pooled, self.annual[self.sy[idx]] * self.dev[idx] / self.per[self.sy[idx]], 0.0)
                    ) / self.supply[idx]
            wl_c = self.wl[idx]
            for w in ws:
                mine = np.nonzero(wl_c == w)[0]
                if len(mine):
                    q = mine[np.argmin(unit[mine])]
                    reps[q] = math.ceil(amounts[w] / self.supply[idx[q]] - 1e-12)
            x0 = completed(reps)
        res = self._solve(m, start=x0)
        out = {"status": res.status, "objective": res.objective, "bound": res.bound, "gap": res.gap_frac,
               "n_vars": nc + npool, "n_rows": nd + npool, "idx": idx, "pooled": pooled,
               "x": None if res.x is None else np.round(res.x).astype(np.int64)}
        self._cache[key] = out
        return out

    def _undominated(self, idx: np.ndarray, pooled: np.ndarray) -> np.ndarray:
        """Drop configurations another one of the same workload beats without the caps: a replica filling whole
        systems of a type nobody pools is beaten by one that supplies at least as much for at most its yearly
        cost; a pooled replica by one on the same type that supplies at least as much with at most its devices
        and extra cost. Identical ones keep the first. Exact for the problem without the caps."""
        is_pooled = np.isin(self.sy[idx], pooled)
        cost = self.x_annual[idx] + np.where(is_pooled, 0.0, self.annual[self.sy[idx]] * self.k_sys[idx])
        group = np.where(is_pooled, self.sy[idx], -1)
        keep = np.ones(len(idx), dtype=bool)
        sup, dev, xa = self.supply[idx], self.dev[idx], self.x_annual[idx]
        for w in distinct(self.wl[idx]):
            for g in distinct(group[self.wl[idx] == w]):
                sel = np.nonzero((self.wl[idx] == w) & (group == g))[0]
                if len(sel) < 2:
                    continue
                if g < 0:
                    le = [cost[sel]]
                else:
                    le = [dev[sel], xa[sel]]
                ge = sup[sel]
                # dom[a, b]: b beats a
                no_worse = ge[None, :] >= ge[:, None]
                strict = ge[None, :] > ge[:, None]
                for v in le:
                    no_worse &= v[None, :] <= v[:, None]
                    strict |= v[None, :] < v[:, None]
                first = np.arange(len(sel))[None, :] < np.arange(len(sel))[:, None]
                dom = no_worse & (strict | first)
                keep[sel[dom.any(axis=1)]] = False
        return idx[keep]

    # -- one solve of a variant --------------------------------------------------------------------
    def solve(self, *, caps: dict | None = None, demand_scale: dict | None = None, sla_factor: dict | None = None,
              minimise: str | None = None, start: dict | None = None, decompose: bool = True) -> dict:
        """Solve one variant of the problem. Returns a dict: status, objective, bound, gap, replicas {config:
        count}, systems {type: count}, usage {cap: amount}, n_vars, n_rows, method, solves."""
        caps = {k: getattr(self.pb, k) for k in CAPS} if caps is None else caps
        demand_scale = demand_scale or {}
        amounts = self.amount * np.array([demand_scale.get(d.name, 1.0) for d in self.pb.demands])
        ok = self.admissible(sla_factor)
        for k in range(len(amounts)):
            if not (ok & (self.wl == k)).any():
                return {"status": "infeasible", "no_config": k}
        if minimise is None and decompose:
            comps = [self._component(ws, ok, amounts, start) for ws in self.components(ok)]
            if any(c["status"] == "infeasible" for c in comps):  # infeasible without the caps: with them too
                return {"status": "infeasible"}
            if all(c["status"] in ("optimal", "time_limit") for c in comps):
                plan = self._combine(comps)
                if all(caps.get(k) is None or plan["usage"][k] <= caps[k] * (1 + 1e-9) + 1e-9 for k in CAPS):
                    status = "optimal" if all(c["status"] == "optimal" for c in comps) else "time_limit"
                    bounds = [c["objective"] if c["status"] == "optimal" else c["bound"] for c in comps]
                    if all(b is not None and np.isfinite(b) for b in bounds):
                        bound = float(sum(bounds))
                        gap = max(0.0, (plan["objective"] - bound) / max(abs(plan["objective"]), 1e-300))
                        if status == "optimal":
                            gap = max(c["gap"] or 0.0 for c in comps)
                    else:
                        bound, gap = None, None
                    plan.update(status=status, bound=bound, gap=gap, method=f"decomposed: {len(comps)} independent components",
                                n_vars=sum(c["n_vars"] for c in comps), n_rows=sum(c["n_rows"] for c in comps),
                                decomposed=True, num_components=len(comps))
                    return plan
        return self._solve_full(ok, amounts, caps, minimise, start)

    def _combine(self, comps: list[dict]) -> dict:
        reps: dict[int, int] = {}
        syss = np.zeros(len(self.per))
        for c in comps:
            idx, x = c["idx"], c["x"]
            nc = len(idx)
            pooled_set = set(int(j) for j in c["pooled"])
            for q, i in enumerate(idx):
                if x[q]:
                    reps[int(i)] = int(x[q])
                    if int(self.sy[i]) not in pooled_set:
                        syss[self.sy[i]] += self.k_sys[i] * x[q]
            for q, j in enumerate(c["pooled"]):
                syss[j] += x[nc + q]
        return self._plan(reps, {j: int(round(v)) for j, v in enumerate(syss)})

    def _plan(self, reps: dict[int, int], syss: dict[int, int]) -> dict:
        r_idx = np.array(list(reps), dtype=int)
        r_val = np.array([reps[i] for i in r_idx], dtype=float)
        s = np.array([syss.get(j, 0) for j in range(len(self.per))], dtype=float)
        use = {"power_cap_w": float(self.power @ s + (self.x_power[r_idx] @ r_val if len(r_idx) else 0.0)),
               "rack_units_cap": float(self.ru @ s + (self.x_ru[r_idx] @ r_val if len(r_idx) else 0.0)),
               "budget_usd": float(self.capex @ s + (self.x_capex[r_idx] @ r_val if len(r_idx) else 0.0))}
        obj = float(self.annual @ s + (self.x_annual[r_idx] @ r_val if len(r_idx) else 0.0))
        return {"replicas": reps, "systems": {j: int(v) for j, v in enumerate(s)}, "usage": use, "objective": obj}

    def _solve_full(self, ok, amounts, caps, minimise, start) -> dict:
        key = ("full", ok.tobytes(), amounts.tobytes(), tuple(caps.get(k) for k in CAPS), minimise)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        m, idx = self.full_milp(ok, amounts, caps, minimise)
        x0 = None
        if start is not None and minimise is None:
            x0 = np.concatenate([[start["replicas"].get(int(i), 0) for i in idx],
                                 [start["systems"].get(j, 0) for j in range(len(self.per))]]).astype(float)
            Ax = m.A @ x0
            if not (np.all(Ax >= m.row_lo - 1e-6 * np.maximum(1, np.abs(m.row_lo)))
                    and np.all(Ax <= m.row_hi + 1e-6 * np.maximum(1, np.abs(m.row_hi)))
                    and np.all(x0 <= m.col_hi)):
                x0 = None
        res = self._solve(m, start=x0)
        if res.status not in ("optimal", "time_limit"):
            out = {"status": res.status}
        else:
            x = np.round(res.x).astype(np.int64)
            reps = {int(i): int(x[q]) for q, i in enumerate(idx) if x[q]}
            plan = self._plan(reps, {j: int(x[len(idx) + j]) for j in range(len(self.per))})
            objective = plan["objective"] if minimise is None else float(res.objective)
            plan.update(status=res.status, bound=res.bound, gap=res.gap_frac, method="full model with the caps",
                        n_vars=m.num_cols, n_rows=m.num_rows, decomposed=False, num_components=1)
            if minimise is not None:
                plan["minimised"] = objective
            out = plan
        self._cache[key] = out
        return out

    def _solve(self, m: Milp, *, start=None, relax: bool = False) -> MilpResult:
        t0 = time.perf_counter()
        # the LP relaxation is cheap and gives the bounds and duals: it is not held to a MIP time limit of zero
        limit = max(self.time_limit_s, 30.0) if relax else self.time_limit_s
        res = solve_milp(m, self.solver, time_limit_s=limit, start=start, relax=relax)
        if "solver" in res.extra:  # HiGHS failed and CBC answered: the later solves and the record say CBC
            self.solver, self.version, self.fallback = res.extra["solver"], None, res.extra.get("fallback_reason")
        self.solve_s += time.perf_counter() - t0
        if not relax:
            self.mip_solves += 1
        return res


# ---------------------------------------------------------------------------------------------
# The relaxation analysis
# ---------------------------------------------------------------------------------------------
_SHADOW_UNIT = {"power_cap_w": "USD/year per W", "rack_units_cap": "USD/year per U", "budget_usd": "USD/year per USD"}


#: with the caps binding, demand and SLA rows are answered by integer re-solves of the full model up to this
#: many integer columns under ``mode="auto"`` (each such re-solve costs about as much as the plan itself)
AUTO_EXACT_MAX_COLUMNS = 200
ANALYSIS_MODES = ("auto", "exact", "lp")


def relaxation_analysis(pb, model: FleetModel, base: dict, analyze: bool,
                        mode: str = "auto") -> tuple[list[dict], float | None]:
    """Rows of :class:`~wseplan.optimize.fleet.ConstraintRow` for each cap, demand and SLA of the solved plan
    ``base``, and the LP relaxation's optimum.

    With ``analyze`` each constraint is relaxed 10% and the plan re-solved, only the part that changes and
    warm-started from ``base`` (which stays feasible), and the LP duals are attached. ``mode``: ``exact``
    re-solves every row as an integer program; ``lp`` answers demand and SLA rows by the LP relaxation (caps
    are always re-solved: there are at most three); ``auto`` re-solves exactly wherever the plan decomposes
    (no cap binds) or the full model is small (<= :data:`AUTO_EXACT_MAX_COLUMNS` integer columns), and uses
    the LP relaxation for demand and SLA rows otherwise. Each row's ``analysis`` says which answered it.
    """
    obj = base["objective"]
    tol = 1e-9 * max(abs(obj), 1.0)
    caps0 = {k: getattr(pb, k) for k in CAPS}
    lp = model.lp_duals(model.admissible(), caps0) if analyze else {}
    lp_ok = lp.get("status") == "optimal"
    start = {"replicas": base["replicas"], "systems": base["systems"]}
    full_cols = int(model.admissible().sum()) + len(model.per)
    use_lp = analyze and (mode == "lp" or (mode == "auto" and not base.get("decomposed")
                                            and full_cols > AUTO_EXACT_MAX_COLUMNS))
    lp_why = (f"LP relaxation: the caps bind, so an exact answer re-solves the full model ({full_cols} integer "
              "columns) once per row; mode 'exact' does that. The integer saving moves in whole systems and may differ"
              if mode == "auto" else "LP relaxation (mode 'lp'); the integer saving moves in whole systems and may differ")
    cons = []

    def relaxed(rel: dict, how: str) -> dict:
        if rel["status"] not in ("optimal", "time_limit"):
            return {"relaxed_usd_per_year": None, "saving_usd_per_year": None, "analysis": how}
        saving = max(0.0, obj - rel["objective"])
        if rel["status"] == "time_limit":
            how += f" (time limit, gap {100 * (rel.get('gap') or 0):.3g}%)"
        return {"relaxed_usd_per_year": rel["objective"], "saving_usd_per_year": saving, "analysis": how}

    def by_lp(**variant) -> dict:
        amounts = model.amount * np.array([variant.get("demand_scale", {}).get(d.name, 1.0) for d in pb.demands])
        rel = model.lp_objective(model.admissible(variant.get("sla_factor")), amounts, caps0)
        if rel is None or not lp_ok:
            return {"analysis": lp_why + " (LP not solved)"}
        return {"lp_saving_usd_per_year": max(0.0, lp["objective"] - rel) + 0.0, "analysis": lp_why}

    def binding(row: dict) -> bool:
        return bool((row.get("saving_usd_per_year") or 0) > tol or (row.get("lp_saving_usd_per_year") or 0) > tol)

    for k in CAPS:
        rhs = getattr(pb, k)
        if rhs is None:
            continue
        lhs = base["usage"][k]
        row = dict(name=k, kind="cap", lhs=lhs, rhs=rhs, slack=rhs - lhs)
        if analyze:
            caps = dict(caps0)
            caps[k] = rhs * (1 + RELAX_FRAC)
            before = model.mip_solves
            rel = model.solve(caps=caps, start=start)
            how = ("proved unchanged: the plan without the caps meets them" if base.get("decomposed")
                   and model.mip_solves == before else "integer re-solve of the full model, warm-started")
            row.update(relaxed(rel, how))
            if lp_ok:
                row.update(shadow_price=-lp["caps"].get(k, 0.0) + 0.0, shadow_price_unit=_SHADOW_UNIT[k])
        row["binding"] = binding(row)
        row["tight"] = abs(rhs - lhs) <= 1e-9 * max(abs(rhs), 1.0)
        cons.append(row)
    for di, d in enumerate(pb.demands):
        supply = sum(pb.configs[i].supply * r for i, r in base["replicas"].items() if pb.configs[i].workload == d.name)
        row = dict(name=f"demand_{d.name}", kind="demand", lhs=supply, rhs=d.amount, slack=supply - d.amount,
                   tight=abs(supply - d.amount) <= 1e-9 * max(abs(d.amount), 1.0))
        rows_sla = None
        if analyze:
            if use_lp:
                row.update(by_lp(demand_scale={d.name: 1 - RELAX_FRAC}))
            else:
                rel = model.solve(demand_scale={d.name: 1 - RELAX_FRAC}, start=start)
                row.update(relaxed(rel, _how(base, rel)))
            if lp_ok:
                row.update(shadow_price=float(lp["demand"][di]) + 0.0, shadow_price_unit=f"USD/year per {_unit1(d.unit)}")
            if d.kind == "serve" and (d.sla.ttft_s is not None or d.sla.tpot_s is not None):
                ok0 = model.admissible()
                ok1 = model.admissible({d.name: 1 + RELAX_FRAC})
                new = ok1 & ~ok0
                sla = ", ".join(f"{k} <= {v:g}" for k, v in d.sla.limits().items())
                rows_sla = dict(name=f"sla_{d.name}", kind="sla", note=f"{sla}; relaxed: limits x {1 + RELAX_FRAC:g}")
                if not new.any():
                    rows_sla.update(relaxed(base, "same problem: no configuration lies between the limits and 1.1 x "
                                                  "the limits"))
                else:
                    if use_lp:
                        rows_sla.update(by_lp(sla_factor={d.name: 1 + RELAX_FRAC}))
                    else:
                        before = model.mip_solves
                        rel2 = model.solve(sla_factor={d.name: 1 + RELAX_FRAC}, start=start)
                        how = (f"proved unchanged: the {int(new.sum())} configuration(s) it admits are dominated (no "
                               "more supply for less cost)" if rel2.get("decomposed") and model.mip_solves == before
                               else _how(base, rel2) + f"; admits {int(new.sum())} more configuration(s)")
                        rows_sla.update(relaxed(rel2, how))
                    if lp_ok:
                        rows_sla["reduced_cost_usd_per_year"] = float(np.nanmin(lp["reduced_cost"][new])) + 0.0
                rows_sla["binding"] = binding(rows_sla)
        row["binding"] = binding(row)
        cons.append(row)
        if rows_sla:
            cons.append(rows_sla)
    return cons, (lp.get("objective") if lp_ok else None)


def _how(base: dict, rel: dict) -> str:
    if rel.get("decomposed"):
        return "integer re-solve of the workload's component, warm-started from the plan"
    return "integer re-solve of the full model, warm-started from the plan"


def _unit1(unit: str) -> str:
    """'output tokens/s' -> 'output token/s'; 'runs' -> 'run'."""
    return {"runs": "run", "output tokens/s": "output token/s"}.get(unit, unit)
