"""Optimisers (PuLP): layer placement across devices and fleet procurement.

Public API: :func:`place`, :func:`solve_partition` (placement ILP), :func:`plan_fleet`, :func:`solve_fleet`
(fleet ILP). PuLP and its solvers are imported only inside the functions that solve.
"""
from __future__ import annotations

from .placement import PartitionSolution, PlacementResult, place, solve_partition

__all__ = ["PartitionSolution", "PlacementResult", "place", "solve_partition"]
