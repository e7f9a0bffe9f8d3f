"""The parameters and results of the PE-mesh simulator (:mod:`wseplan.sim.mesh`): :class:`MeshParams` (the
hardware of a mesh), the broadcast, reduction and gather choices, and :class:`KernelResult` (one simulated
kernel)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Mapping

from wseplan.sim._errors import InputError


@dataclass(frozen=True, kw_only=True)
class MeshParams:
    """Hardware parameters of a PE mesh. All times in cycles, sizes in bytes.

    Parameters
    ----------
    rows, cols : int
        Usable grid [PEs].
    sram_per_pe_bytes : float
        Local SRAM per PE [bytes].
    sram_bytes_per_cycle : float
        SRAM bandwidth per PE [bytes/cycle].
    flop_per_cycle : float
        Peak arithmetic per PE for the simulated data type [FLOP/cycle] (an FMA is 2 FLOP).
    hop_latency_cycles : float
        Router-to-router latency per hop [cycles].
    link_bytes_per_cycle : float
        Bandwidth of one link in one direction [bytes/cycle].
    input_queue_depth_wavelets : int
        Depth of a PE's input queue [wavelets].
    wavelet_bytes : int
        Payload of one wavelet [bytes]; 16-bit values are packed two per wavelet.
    num_colors : int
        Routing colours (or, on WSE-3, input queues) free for a kernel's concurrent routes [count].
    clock_hz : float
        PE clock [Hz].
    kernel_launch_overhead_cycles : float
        Fixed cost added once per kernel or per phase of a composed kernel [cycles].
    ramp_latency_cycles : float
        Extra latency each time a wavelet passes through a core rather than only a router (ejection,
        task activation, injection) [cycles].
    sram_reserved_bytes : float
        SRAM per PE kept for code, stack and runtime [bytes].
    """

    rows: int
    cols: int
    sram_per_pe_bytes: float
    sram_bytes_per_cycle: float
    flop_per_cycle: float
    hop_latency_cycles: float
    link_bytes_per_cycle: float
    input_queue_depth_wavelets: int
    wavelet_bytes: int = 4
    num_colors: int
    clock_hz: float
    kernel_launch_overhead_cycles: float = 0.0
    ramp_latency_cycles: float = 0.0
    sram_reserved_bytes: float = 0.0

    def __post_init__(self):
        for name in ("rows", "cols", "input_queue_depth_wavelets", "wavelet_bytes", "num_colors"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise InputError(f"MeshParams.{name}={v!r}: must be an integer >= 1")
        for name in ("sram_per_pe_bytes", "sram_bytes_per_cycle", "flop_per_cycle", "link_bytes_per_cycle",
                     "clock_hz"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)):
                raise InputError(f"MeshParams.{name}={v!r}: must be a finite number > 0")
        for name in ("hop_latency_cycles", "kernel_launch_overhead_cycles", "ramp_latency_cycles",
                     "sram_reserved_bytes"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise InputError(f"MeshParams.{name}={v!r}: must be a finite number >= 0")

    @property
    def wavelet_cycles(self) -> float:
        """Link time of one wavelet [cycles]."""
        return self.wavelet_bytes / self.link_bytes_per_cycle


class BroadcastAlgo(str, enum.Enum):
    """How a message is spread along a line of PEs."""

    CHAIN = "chain"                  #: hardware multicast, cut-through, streamed into the consumer
    STORE_FORWARD = "store_forward"  #: each PE stores the whole message, then re-sends it
    TREE = "tree"                    #: binary tree, store-and-forward per level


class ReduceAlgo(str, enum.Enum):
    """How partial vectors are summed along a line of PEs."""

    CHAIN = "chain"  #: pipelined add-and-forward through every PE
    TREE = "tree"    #: binary tree, one pipelined pairwise transfer per level
    KTREE = "ktree"  #: two-level tree (WaferLLM's K-tree, K = 2): chains within segments of ceil(sqrt L), then over their heads


class Gather(str, enum.Enum):
    """Where a GEMV/GEMM result ends up."""

    NONE = "none"      #: left on the reduction root line, one segment per PE (input layout of the next,
                       #: transposed, GEMV)
    CORNER = "corner"  #: all segments sent to PE (0, 0)
    COLUMN = "column"  #: redistributed to the region's first column (through PE (0, 0))


@dataclass(frozen=True, kw_only=True)
class KernelResult:
    """Outcome of one simulated kernel.

    Attributes
    ----------
    cycles : float
        Makespan [cycles]. time_s : float — makespan [s].
    compute_cycles : float
        Largest per-PE arithmetic time (FLOP or SRAM limited), excluding waits [cycles].
    phase_cycles : Mapping[str, float]
        Critical-path decomposition: for each phase in order, the time from the end of the previous phase
        to the end of this one on the grid [cycles]; they sum to ``cycles``.
    broadcast_cycles, reduce_cycles, gather_cycles : float
        The matching entries of ``phase_cycles`` (0 when the kernel has no such phase) [cycles].
    hop_floor_cycles : float
        Farthest hop distance a phase's data must travel times hop latency, summed over phases [cycles].
    pe_busy_mean_frac, pe_busy_max_frac : float
        Core busy time (arithmetic and per-wavelet work) over the makespan, mean and max over PEs [0-1].
    link_utilization_max_frac, link_utilization_mean_frac : float
        Busy time of a directed link over the makespan, max and mean over the region's links [0-1].
    sram_bytes_per_pe : float
        Largest SRAM use on any PE, including the reserve [bytes].
    shortfall_bytes : float
        SRAM missing on the worst PE (0 when it fits) [bytes].
    colors_used : int
        Routing colours needed by the kernel's concurrent routes [count].
    fits : bool
        False when SRAM or colours are exceeded. reason : str — why not ('' when it fits).
    bottleneck : str
        The phase with the largest share of ``phase_cycles``.
    """

    cycles: float
    time_s: float
    compute_cycles: float
    phase_cycles: Mapping[str, float]
    broadcast_cycles: float
    reduce_cycles: float
    gather_cycles: float
    hop_floor_cycles: float
    pe_busy_mean_frac: float
    pe_busy_max_frac: float
    link_utilization_max_frac: float
    link_utilization_mean_frac: float
    sram_bytes_per_pe: float
    shortfall_bytes: float
    colors_used: int
    fits: bool
    reason: str
    bottleneck: str

    def part_cycles(self) -> dict:
        """Sum of ``phase_cycles`` by part (the text before the first '.') [cycles]."""
        out: dict = {}
        for k, v in self.phase_cycles.items():
            out[k.split(".")[0]] = out.get(k.split(".")[0], 0.0) + v
        return out

    def to_row(self) -> dict:
        """Flat dict (phase cycles as ``phase_<name>_cycles``) for a DataFrame row."""
        row = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "phase_cycles"}
        row.update({f"phase_{k}_cycles": v for k, v in self.phase_cycles.items()})
        return row
