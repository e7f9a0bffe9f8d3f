"""One array-form mixed-integer program and the two solvers behind it (HiGHS through highspy, CBC through PuLP).

Placement and fleet build their models as arrays (costs, a sparse constraint matrix, row and column bounds,
an integrality mask) and solve them here, so that both record the same things about the solve: the solver
actually used (``highs`` falls back on ``cbc``, and says so, when highspy cannot be imported), its version,
the status (``optimal`` within the gap tolerance, ``time_limit`` with the best solution found and its gap, or
``infeasible``), the time and the relative gap.

HiGHS is called through highspy directly rather than through PuLP: PuLP's ``HiGHS`` class takes no starting
solution and rebuilds the model from Python objects on every solve, and ``HiGHS_CMD`` needs a separate
``highs`` executable. CBC runs as PuLP's bundled executable (a subprocess); it takes a starting solution but
reports no bound, so its gap is known only where the caller supplies a bound of its own.

References
----------
Huangfu and Hall, Parallelizing the dual revised simplex method, Math. Prog. Comp. 10, 2018 (HiGHS).
Forrest et al., COIN-OR Branch-and-Cut (CBC), https://github.com/coin-or/Cbc.
"""
from __future__ import annotations

import importlib.metadata
import os
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..errors import InputError, WseplanError

SOLVERS = ("highs", "cbc")
#: relative MIP gap at which a solve counts as optimal (HiGHS's default is 1e-4; tighter keeps the relaxation
#: analysis' savings exact to about a dollar on plans of 1e8 USD/year)
MIP_REL_GAP = 1e-6


class SolverRun(BaseModel):
    """What solved an optimisation record's problem (``solver_run`` in the place and fleet records)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # dp | highs | cbc (what actually ran)
    version: str | None = None
    requested: str  # what the caller asked for
    fallback_reason: str | None = None  # why ``name`` differs from ``requested``
    status: str  # optimal | time_limit | infeasible
    status_detail: str  # one line: "optimal", "time limit, best found, gap 1.3%", "infeasible: ..."
    solve_s: float
    gap_frac: float | None = None  # (best found - best bound) / |best found|; None where unknown
    best_bound: float | None = None
    num_solves: int = 1


def status_detail(status: str, gap_frac: float | None, reason: str | None = None, found: bool = True) -> str:
    """A solve's status in words: a time limit with the incumbent's gap, or with nothing found (``found`` False: the
    solver stopped before any solution, audit33c L4); an infeasible one with its reason."""
    if status == "time_limit":
        if not found:
            return "time limit, nothing found" + (f": {reason}" if reason else "")
        gap = "unknown" if gap_frac is None else f"{100.0 * gap_frac:.3g}%"
        return f"time limit, best found, gap {gap}"
    if status == "infeasible":
        return f"infeasible: {reason}" if reason else "infeasible"
    return status


def highs_available() -> bool:
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_solver(name: str) -> tuple[str, str | None, str | None]:
    """``(solver used, its version, fallback reason)`` for the requested ``name`` (``highs`` or ``cbc``)."""
    if name not in SOLVERS:
        raise InputError(f"solver: unknown {name!r}; use one of {', '.join(SOLVERS)}")
    if name == "highs":
        if highs_available():
            return "highs", _highs_version(), None
        return "cbc", _cbc_version(), "highspy is not installed (pip install highspy); used CBC"
    return "cbc", _cbc_version(), None


def _highs_version() -> str | None:
    try:
        return importlib.metadata.version("highspy")
    except Exception:  # noqa: BLE001 - a version is a nicety; never fail a solve over it
        return None


def _cbc_version() -> str | None:
    try:
        return f"bundled with PuLP {importlib.metadata.version('pulp')}"
    except Exception:  # noqa: BLE001
        return None


@dataclass
class Milp:
    """``min c.x`` subject to ``row_lo <= A x <= row_hi``, ``col_lo <= x <= col_hi``, ``x[integer]`` integral.

    ``A`` is a scipy.sparse matrix (any format); infinite bounds are ``numpy.inf``.
    """

    c: np.ndarray
    A: object
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    integer: np.ndarray
    offset: float = 0.0

    @property
    def num_cols(self) -> int:
        return len(self.c)

    @property
    def num_rows(self) -> int:
        return len(self.row_lo)


@dataclass
class MilpResult:
    status: str  # optimal | time_limit | infeasible
    x: np.ndarray | None
    objective: float | None
    bound: float | None
    gap_frac: float | None
    solve_s: float
    row_dual: np.ndarray | None = None  # LP only: d objective / d row bound
    col_dual: np.ndarray | None = None  # LP only: reduced costs
    extra: dict = field(default_factory=dict)


_HIGHS_QUIET: list = []


def _quiet_highs() -> None:
    """HiGHS prints a banner on its first instance in a process, straight to file descriptor 1, whatever its
    options; create that first instance with fd 1 sent to /dev/null so that JSON on stdout stays clean."""
    if _HIGHS_QUIET:
        return

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


def solve_milp(m: Milp, solver: str, *, time_limit_s: float = 60.0, start: np.ndarray | None = None,
               relax: bool = False, mip_rel_gap: float = MIP_REL_GAP) -> MilpResult:
    """Solve ``m`` with ``solver`` (``highs`` or ``cbc``: the name :func:`resolve_solver` returned).

    ``start`` is a feasible point to begin from (a MIP start). ``relax`` solves the LP relaxation and returns
    the row duals and reduced costs.
    """
    if solver == "highs":
        return _solve_highs(m, time_limit_s=time_limit_s, start=start, relax=relax, mip_rel_gap=mip_rel_gap)
    if solver == "cbc":
        return _solve_cbc(m, time_limit_s=time_limit_s, start=start, relax=relax, mip_rel_gap=mip_rel_gap)
    raise InputError(f"solver: unknown {solver!r}; use one of {', '.join(SOLVERS)}")


def _gap(obj: float | None, bound: float | None) -> float | None:
    if obj is None or bound is None or not np.isfinite(bound):
        return None
    return max(0.0, (obj - bound) / max(abs(obj), 1e-300)) if obj != 0 else max(0.0, -bound)


def _consistent(m: Milp, res: MilpResult, relax: bool = False) -> bool:
    """Does a reported solution hold up: objective = c.x, x within its bounds and rows and integral, and the
    bound not above the objective? (Guards against solver defects, e.g. HiGHS 1.16 returning a MIP start as
    "optimal" with objective 0 after presolve; see ERGO-Code/HiGHS issue 2900 for the same symptom.)"""
    if res.x is None or res.objective is None:
        return True
    x = res.x
    scale = max(1.0, abs(res.objective))
    if abs(float(np.dot(m.c, x) + m.offset) - res.objective) > 1e-6 * scale:
        return False
    ax = m.A @ x
    tol_r = 1e-6 * np.maximum(1.0, np.abs(np.where(np.isfinite(m.row_lo), m.row_lo, m.row_hi)))
    if np.any(ax < m.row_lo - tol_r) or np.any(ax > m.row_hi + tol_r):
        return False
    if np.any(x < m.col_lo - 1e-6) or np.any(x > m.col_hi + 1e-6):
        return False
    if not relax and np.any(np.abs(x[m.integer] - np.round(x[m.integer])) > 1e-5):
        return False
    return res.bound is None or res.bound <= res.objective + 1e-6 * scale


def _solve_highs(m: Milp, *, time_limit_s, start, relax, mip_rel_gap) -> MilpResult:
    """HiGHS, checked: a solution that does not hold up, or a solve error, is solved again without the start, then
    without presolve; ``extra["retries"]`` counts the repeats. A solve error that survives both is solved by CBC, and
    ``extra`` says so (``solver``, ``fallback_reason``) for the record's ``solver_run``."""
    t0 = time.perf_counter()
    res = _solve_highs_once(m, time_limit_s=time_limit_s, start=start, relax=relax, mip_rel_gap=mip_rel_gap,
                            presolve=True)
    retries = 0
    for use_start, presolve in ((False, True), (False, False)):
        if res.status != "solve_error" and _consistent(m, res, relax):
            break
        retries += 1
        res = _solve_highs_once(m, time_limit_s=time_limit_s, start=start if use_start else None, relax=relax,
                                mip_rel_gap=mip_rel_gap, presolve=presolve)
    if res.status == "solve_error":
        res = _solve_cbc(m, time_limit_s=time_limit_s, start=start, relax=relax, mip_rel_gap=mip_rel_gap)
        res.extra.update(solver="cbc", fallback_reason="HiGHS reported a solve error three times (with and without "
                                                      "the start and presolve); solved with CBC")
    elif not _consistent(m, res, relax):
        raise WseplanError("HiGHS returned a solution that violates its own model three times; try --solver cbc")
    res.solve_s = time.perf_counter() - t0
    res.extra["retries"] = retries
    return res


def _solve_highs_once(m: Milp, *, time_limit_s, start, relax, mip_rel_gap, presolve: bool) -> MilpResult:
    import highspy
    import scipy.sparse as sp

    _quiet_highs()
    inf = highspy.kHighsInf
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(max(time_limit_s, 0.0)))
    h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    if not presolve:
        h.setOptionValue("presolve", "off")
    A = sp.csc_matrix(m.A)
    A.sort_indices()

    def fin(v):
        return np.where(np.isposinf(v), inf, np.where(np.isneginf(v), -inf, v)).astype(np.float64)

    integ = np.zeros(m.num_cols, dtype=np.int32) if relax else np.asarray(m.integer, dtype=np.int32)
    h.passModel(int(m.num_cols), int(m.num_rows), int(A.nnz), 1, 1, float(m.offset),
                np.asarray(m.c, dtype=np.float64), fin(m.col_lo), fin(m.col_hi), fin(m.row_lo), fin(m.row_hi),
                A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(np.float64), integ)
    if start is not None and not relax:
        x0 = np.asarray(start, dtype=np.float64)
        h.setSolution(int(m.num_cols), np.arange(m.num_cols, dtype=np.int32), x0)
    t0 = time.perf_counter()
    h.run()
    solve_s = time.perf_counter() - t0
    st = h.getModelStatus()
    S = highspy.HighsModelStatus
    info = h.getInfo()
    has_x = info.primal_solution_status == 2  # kSolutionStatusFeasible
    if st == S.kOptimal:
        status = "optimal"
    elif st in (S.kInfeasible, S.kUnboundedOrInfeasible):
        status = "infeasible"
    elif st in (S.kTimeLimit, S.kIterationLimit, S.kSolutionLimit, S.kInterrupt, S.kObjectiveBound,
                S.kObjectiveTarget, S.kMemoryLimit) and has_x:
        status = "time_limit"
    elif st in (S.kTimeLimit, S.kIterationLimit, S.kInterrupt, S.kMemoryLimit):
        status = "no_solution"
    elif st == S.kSolveError:  # a numerical failure inside HiGHS: the caller retries, then asks CBC
        status = "solve_error"
    else:
        raise WseplanError(f"HiGHS: unexpected model status {h.modelStatusToString(st)}")
    if status in ("infeasible", "no_solution", "solve_error"):
        return MilpResult(status=status, x=None, objective=None, bound=None, gap_frac=None, solve_s=solve_s)
    sol = h.getSolution()
    x = np.asarray(sol.col_value, dtype=float)
    obj = float(info.objective_function_value)
    if relax or not np.any(m.integer):
        return MilpResult(status=status, x=x, objective=obj, bound=obj if status == "optimal" else None,
                          gap_frac=0.0 if status == "optimal" else None, solve_s=solve_s,
                          row_dual=np.asarray(sol.row_dual, dtype=float), col_dual=np.asarray(sol.col_dual, dtype=float))
    bound = float(info.mip_dual_bound)
    return MilpResult(status=status, x=x, objective=obj, bound=bound, gap_frac=_gap(obj, bound), solve_s=solve_s)


def new_var(prob, name: str, *, low=None, up=None, cat: str = "Continuous"):
    """A PuLP variable attached to ``prob`` (``add_variable`` on PuLP >= 3.3, the constructor before)."""
    import pulp

    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, low, up, cat=cat)
    return pulp.LpVariable(name, lowBound=low, upBound=up, cat=cat)


def _solve_cbc(m: Milp, *, time_limit_s, start, relax, mip_rel_gap) -> MilpResult:
    import pulp
    import scipy.sparse as sp

    prob = pulp.LpProblem("milp", pulp.LpMinimize)
    lo = np.asarray(m.col_lo, dtype=float)
    hi = np.asarray(m.col_hi, dtype=float)
    xs = [new_var(prob, f"x{i}", low=None if np.isneginf(lo[i]) else float(lo[i]),
                  up=None if np.isposinf(hi[i]) else float(hi[i]),
                  cat="Integer" if (m.integer[i] and not relax) else "Continuous") for i in range(m.num_cols)]
    A = sp.csr_matrix(m.A)
    rows = []
    for r in range(m.num_rows):
        a, b = A.indptr[r], A.indptr[r + 1]
        expr = pulp.LpAffineExpression([(xs[j], float(v)) for j, v in zip(A.indices[a:b].tolist(), A.data[a:b].tolist())])
        rl, rh = float(m.row_lo[r]), float(m.row_hi[r])
        if rl == rh:
            prob += expr == rl, f"r{r}"
            rows.append((f"r{r}", 0))
            continue
        if np.isfinite(rl):
            prob += expr >= rl, f"r{r}_lo"
            rows.append((f"r{r}_lo", 1))
        if np.isfinite(rh):
            prob += expr <= rh, f"r{r}_hi"
            rows.append((f"r{r}_hi", 2))
    prob += pulp.lpDot([float(v) for v in m.c], xs) + float(m.offset)
    warm = start is not None and not relax
    if warm:
        for v, x0 in zip(xs, np.asarray(start, dtype=float).tolist()):
            v.setInitialValue(x0)
    with warnings.catch_warnings():  # PuLP 3.x flags its bundled CBC as deprecated for 4.0
        warnings.simplefilter("ignore", DeprecationWarning)
        slv = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(float(time_limit_s), 0.0), mip=not relax, warmStart=warm,
                                gapRel=float(mip_rel_gap))
    t0 = time.perf_counter()
    prob.solve(slv)
    solve_s = time.perf_counter() - t0
    st = pulp.LpStatus.get(prob.status, "Undefined")
    sol = getattr(prob, "sol_status", None)
    if st == "Infeasible":
        return MilpResult(status="infeasible", x=None, objective=None, bound=None, gap_frac=None, solve_s=solve_s)
    if st == "Optimal" and sol in (None, pulp.LpSolutionOptimal):
        status = "optimal"
    elif sol in (pulp.LpSolutionIntegerFeasible, pulp.LpSolutionOptimal) or st == "Optimal":
        status = "time_limit"
    else:
        return MilpResult(status="no_solution", x=None, objective=None, bound=None, gap_frac=None, solve_s=solve_s)
    x = np.array([v.value() or 0.0 for v in xs], dtype=float)
    obj = float(np.dot(m.c, x) + m.offset)
    if relax or not np.any(m.integer):
        duals = np.zeros(m.num_rows)
        get = getattr(prob, "get_constraint_by_name", None) or prob.constraints.__getitem__  # PuLP >= 3.3 / older
        for (name, _kind) in rows:
            r = int(name[1:].split("_")[0])
            duals[r] += float(get(name).pi or 0.0)
        dj = np.array([float(v.dj or 0.0) for v in xs])
        return MilpResult(status=status, x=x, objective=obj, bound=obj if status == "optimal" else None,
                          gap_frac=0.0 if status == "optimal" else None, solve_s=solve_s, row_dual=duals, col_dual=dj)
    return MilpResult(status=status, x=x, objective=obj, bound=None, gap_frac=None, solve_s=solve_s)
