"""Vectorized numpy simulators: a PE-mesh kernel simulator and a MemoryX weight-stream pipeline.

They produce the reference data that the closed-form models in ``wseplan.analytic`` are calibrated against;
nothing on the normal ``fit``/``time`` path imports them.
"""

from wseplan.sim._decode import decode_layer
from wseplan.sim.memoryx import StreamResult, simulate_stream
from wseplan.sim.mesh import (
    BroadcastAlgo,
    Gather,
    KernelResult,
    MeshParams,
    ReduceAlgo,
    allreduce,
    broadcast,
    gemm,
    gemv,
    reduce,
)

__all__ = [
    "MeshParams", "KernelResult", "BroadcastAlgo", "ReduceAlgo", "Gather",
    "broadcast", "reduce", "allreduce", "gemv", "gemm", "decode_layer",
    "StreamResult", "simulate_stream",
]
