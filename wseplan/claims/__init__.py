"""Check: is a vendor's or an article's performance claim physically possible, and how does it compare with
wseplan's estimate?

Every claim is judged by general physics and by the planning chain, never by looking up known claims:

0. **Normalise** the claim to the physical quantity it states (:func:`~wseplan.claims.physics.normalise`):
   time-to-train, step time and tokens/s of one training run are one training rate; tokens/s per user, time per
   output token, the time to generate N tokens and a decode tokens/s at a stated batch are one time per output
   token; a prompt throughput is a time to first token. Bounds, estimate and verdict are computed on that
   quantity, so the same run gets the same verdict however it is written, and are shown in the claim's own unit.
1. **Hard bounds** from the catalog. A claim that beats one is ``impossible`` and names the bound
   (:data:`BOUNDS`): ``compute_peak`` (dense peak = PEs x FLOP/cycle x clock for a wafer, datasheet dense peak
   for a GPU, times the device count), ``sram_capacity`` / ``hbm_capacity`` / ``memoryx_capacity`` (via
   :func:`wseplan.fit.fit` with the most generous configuration: ZeRO-3 and full recompute on GPUs, the largest
   MemoryX option of the catalog for wafer training, named in the reason), ``memory_bandwidth`` (bytes that must
   be read per output token over the aggregate SRAM/HBM bandwidth; with speculative decoding of ``k`` draft
   tokens, ``k + 1`` tokens per pass), ``fabric_bandwidth`` / ``io_bandwidth`` (catalog link rates; weights
   streamed in over the system I/O once per wafer training step), and ``hop_latency_floor`` (per-hop latency,
   and for wafer decode the hops a reduction across each layer's PE region must make).
2. **Estimates** from :func:`wseplan.plan.plan` (the best layout that fits, searched when the claim gives none,
   with the claim's software profile and speculative-decoding options; never a layout that does not fit) and the
   catalog for power. A claim better than the estimate by more than the **held-out** error of that estimate is
   ``optimistic``: the upper end of the plan record's own prediction interval (:mod:`wseplan.model_error`: the
   leave-one-source-out residuals of its category, training claims by training rows, widened outside the validated
   model sizes, device counts and hardware), the same interval ``wseplan time``/``plan`` print.
3. Otherwise ``consistent`` (including claims at or below the estimate).

``margin`` is how many times better than the bound (impossible) or the estimate (optimistic) the claim is:
claimed/bound for higher-is-better quantities, bound/claimed for lower-is-better ones. Values are in SI units.
"""
from __future__ import annotations

from .judge import (category, check, check_claim, estimate, time_model_available, to_frame, validated_error_frac,
                    validated_errors)
from .physics import decode_floors, normalise
from .schema import BOUNDS, KINDS, VERDICTS, Claim, ClaimsFile, Verdict, claimed_si, load_claims

__all__ = ["BOUNDS", "KINDS", "VERDICTS", "Claim", "ClaimsFile", "Verdict", "category", "check", "check_claim",
           "claimed_si", "decode_floors", "estimate", "load_claims", "normalise", "time_model_available", "to_frame",
           "validated_error_frac", "validated_errors"]
