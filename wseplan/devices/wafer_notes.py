"""The plain-language notes of a resident wafer record (:meth:`.WaferFamily.describe`): idle wafers of a count, the
region fallback, and where placing whole layers costs wafers that the bytes alone would not."""
from __future__ import annotations

import math


def resident_notes(ctx, r: dict, k: int) -> list[str]:
    """Notes of one row ``r`` of :func:`wseplan.plan.evaluate` on ``k`` wafers per replica."""
    notes = []
    if ctx.count and ctx.count % k:
        notes.append(f"{ctx.count % k} of {ctx.count} wafers left idle ({ctx.count // k} replica"
                     f"{'s' if ctx.count // k != 1 else ''} of {k})")
    if r.get("time.region_fallback"):
        notes.append("no region (square, or rectangle filling the wafer) tiles the wafer with a region for every layer "
                     "group (the SRAM holds them in total): timed on the largest square as if each group had its own "
                     "region, an approximation (fewer, larger regions than the layer groups)")
    bound = math.ceil(r["total_bytes"] / r["capacity_bytes"]) if r.get("capacity_bytes") else k
    if getattr(ctx.m, "num_experts", 1) > 1 and k > 1.25 * bound:
        notes.append(f"layers are placed whole, one MoE layer's experts on one wafer: {k} wafers where the bytes alone "
                     f"need {bound}; spreading a layer's experts over wafers (expert parallelism across systems) is "
                     "not modelled")
    return notes
