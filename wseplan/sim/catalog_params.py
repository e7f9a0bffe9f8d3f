"""Build :class:`~wseplan.sim.mesh.MeshParams` from a catalog wafer entry (no number pasted into code)."""
from __future__ import annotations

from .mesh import MeshParams

_DTYPE_KEY = {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32"}


def mesh_params_from_catalog(wafer, *, precision: str = "fp16", **overrides) -> MeshParams:
    """MeshParams for a catalog :class:`~wseplan.catalog.schema.Wafer` at ``precision``.

    FLOP/cycle comes from ``flop_per_cycle_per_pe`` (8/4-bit formats run at the 16-bit rate); colours are the
    wafer's free routing colours; every other field is the catalog value of the same name. ``overrides``
    replace any field (e.g. ``clock_hz=0.85e9`` for the 850 MHz that csl-examples' timing code uses).
    """
    key = _DTYPE_KEY.get(precision, "fp16")
    fpc = wafer.flop_per_cycle_per_pe.get(key) or wafer.flop_per_cycle_per_pe["fp16"]
    base = dict(rows=int(wafer.pe_rows.si), cols=int(wafer.pe_cols.si), sram_per_pe_bytes=wafer.sram_per_pe_bytes.si,
                sram_bytes_per_cycle=wafer.sram_bytes_per_cycle_per_pe.si, flop_per_cycle=fpc.si,
                hop_latency_cycles=wafer.hop_latency_cycles.si, link_bytes_per_cycle=wafer.link_width_bytes_per_cycle.si,
                input_queue_depth_wavelets=int(wafer.input_queue_depth_wavelets.si), wavelet_bytes=4,
                num_colors=int(wafer.free_routing_colors.si), clock_hz=wafer.clock_hz.si,
                ramp_latency_cycles=wafer.ramp_latency_cycles.si)
    base.update(overrides)
    return MeshParams(**base)
