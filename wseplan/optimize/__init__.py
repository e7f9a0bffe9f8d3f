"""Optimisers: layer placement across devices and fleet procurement.

Public API: :func:`place`, :func:`solve_partition` (placement: the exact partition, an ILP for mixed devices);
:func:`plan_fleet`, :func:`build_problem`, :func:`solve_fleet`, :func:`read_demand` (fleet ILP and its
relaxation analysis). Integer programs are solved by HiGHS (highspy) or CBC (PuLP) through
:mod:`wseplan.optimize.milp`, imported only inside the functions that solve.
"""
from __future__ import annotations

from .fleet import FleetPlan, FleetProblem, build_problem, plan_fleet, read_demand, solve_fleet
from .placement import PartitionSolution, PlacementResult, place, solve_partition

__all__ = ["FleetPlan", "FleetProblem", "PartitionSolution", "PlacementResult", "build_problem", "place", "plan_fleet",
           "read_demand", "solve_fleet", "solve_partition"]
