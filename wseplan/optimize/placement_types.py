"""The shared types of placement (:mod:`wseplan.optimize.placement`) and its integer program
(:mod:`wseplan.optimize.placement_ilp`): device groups, the partition's solution record and its solver run."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..catalog.schema import Frozen
from .milp import SolverRun, status_detail


class DeviceGroup(NamedTuple):
    """``count`` devices of ``capacity_bytes`` each on which a stage's cost is multiplied by ``cost_scale``."""

    count: int
    capacity_bytes: float
    cost_scale: float = 1.0


class PartitionSolution(Frozen):
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


def _run(name: str, requested: str, *, status: str, solve_s: float, version: str | None = None,
         fallback: str | None = None, gap: float | None = None, bound: float | None = None, reason: str | None = None,
         num_solves: int = 1, found: bool = True) -> SolverRun:
    return SolverRun(name=name, version=version, requested=requested, fallback_reason=fallback, status=status,
                     status_detail=status_detail(status, gap, reason, found), solve_s=solve_s, gap_frac=gap, best_bound=bound,
                     num_solves=num_solves)


def _max_cost(c: np.ndarray, stages, const: float, scales=None) -> float:
    pre = np.concatenate([[0.0], np.cumsum(c)])
    vals = [(pre[e + 1] - pre[a] + const) * (1.0 if scales is None else scales[s]) for s, (a, e) in enumerate(stages)]
    return float(max(vals))
