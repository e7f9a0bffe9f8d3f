"""Physics of a claim: the physical quantity it states (:func:`normalise`) and the hard bounds on it.

A claim is restated as one physical quantity before it is judged, so that the same run gets the same verdict
however it is phrased:

* **training rate** ``train_tokens_per_s`` (higher is better): ``tokens_per_s`` in training as stated,
  ``time_to_train_s`` as ``tokens / time``, ``step_time_s`` as ``batch x context / step``;
* **time per output token** ``tpot_s`` of one sequence at the stated batch (lower is better):
  ``latency_per_token_s`` as stated, ``tokens_per_s_per_user`` as ``1 / rate``, ``generation_time_s`` (the time to
  decode ``output_tokens`` tokens of one sequence) as ``time / output_tokens``, and a decode ``tokens_per_s`` with a
  batch as ``batch / rate``;
* **time to first token** ``ttft_s`` of ``batch`` prompts of ``context`` tokens: ``ttft_s`` as stated, a prefill
  ``tokens_per_s`` as ``batch x context / rate``;
* every other kind is its own quantity.

Bounds, the estimate and the verdict are computed on the quantity; the record shows them in the claim's own unit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..devices.speculation import speculation
from ..errors import InputError
from ..fit import fit
from ..plan import setup
from ..targets import parse_target
from ..workload import build_workload, resolve_model
from .schema import KIND_UNIT, Claim, need

#: quantity -> (SI unit, lower is better?)
QUANTITY_UNIT = {"train_tokens_per_s": ("tokens/s", False), "tpot_s": ("s", True), "ttft_s": ("s", True)}
QUANTITY_TEXT = {"train_tokens_per_s": "training throughput", "tpot_s": "time per output token",
                 "ttft_s": "time to first token"}


@dataclass(frozen=True)
class Physical:
    """A claim restated as its physical quantity: ``claim value = scale / q`` (``inverse``) or ``scale x q``."""

    quantity: str
    value: float
    unit: str
    lower_better: bool
    phase: str
    scale: float = 1.0
    inverse: bool = False

    def to_claim(self, q: float) -> float:
        """A value of the quantity in the claim's own unit."""
        return self.scale / q if self.inverse else self.scale * q

    @property
    def restated(self) -> bool:
        return self.inverse or self.scale != 1.0

    @property
    def training(self) -> bool:
        return self.quantity == "train_tokens_per_s"


def default_phase(c: Claim) -> str:
    return c.phase or {"ttft_s": "prefill", "step_time_s": "train", "time_to_train_s": "train"}.get(c.kind, "decode")


def normalise(c: Claim, claimed: float) -> Physical:
    """The physical quantity a time/throughput claim states (see the module docstring)."""
    kind, phase = c.kind, default_phase(c)
    unit, lower = KIND_UNIT[kind]

    def q(name, value, scale=1.0, inverse=False):
        u, low = QUANTITY_UNIT[name]
        return Physical(quantity=name, value=value, unit=u, lower_better=low, phase=phase, scale=scale,
                        inverse=inverse)

    if phase == "train" and kind in ("tokens_per_s", "time_to_train_s", "step_time_s"):
        if kind == "tokens_per_s":
            return q("train_tokens_per_s", claimed)
        if kind == "time_to_train_s":
            need(c, "tokens")
            return q("train_tokens_per_s", c.tokens / claimed, c.tokens, True)
        need(c, "batch", "context")  # a step is one batch of sequences of `context` tokens
        tokens = float(c.batch * c.context)
        return q("train_tokens_per_s", tokens / claimed, tokens, True)
    if phase == "decode":
        if kind == "latency_per_token_s":
            return q("tpot_s", claimed)
        if kind == "tokens_per_s_per_user":
            return q("tpot_s", 1.0 / claimed, 1.0, True)
        if kind == "generation_time_s":
            need(c, "output_tokens")
            return q("tpot_s", claimed / c.output_tokens, float(c.output_tokens))
        if kind == "tokens_per_s" and c.batch is not None:
            return q("tpot_s", c.batch / claimed, float(c.batch), True)
    if phase == "prefill":
        if kind == "ttft_s":
            return q("ttft_s", claimed)
        if kind == "tokens_per_s":
            need(c, "context")  # a prompt's length sets its work
            tokens = float((c.batch or 1) * c.context)
            return q("ttft_s", tokens / claimed, tokens, True)
    if kind in ("ttft_s", "generation_time_s", "step_time_s", "time_to_train_s", "latency_per_token_s",
                "tokens_per_s_per_user"):
        raise InputError(f"claim {c.id}: kind {kind!r} does not apply to phase {phase!r}; "
                         f"{'drop the phase' if c.phase else 'give a phase'}")
    return Physical(quantity=kind, value=claimed, unit=unit, lower_better=lower, phase=phase)


# --------------------------------------------------------------------------------------------- the target
def target_of(c: Claim, cat):
    """The claim's target with an explicit device count (1 when the claim names none)."""
    t = parse_target(c.target, cat)
    if t.count is None:
        t = parse_target(f"{t.key}x1", cat)
    return t


def peak(t, precision: str, scope: str = "dense") -> float:
    """Peak FLOP/s of the whole target (device x count). Wafer: usable PEs x FLOP/cycle x highest clock.

    ``scope="sparse"``: a GPU's sparse figure for ``precision`` where the catalog lists one, else twice its dense peak
    (2:4 structured sparsity, which every listed GPU with sparsity doubles at); never a wider format's sparse figure
    (B200 fp4: 2 x 9 = 18 PFLOP/s, not the fp8 9). A wafer: the marketing sparse peak."""
    if t.kind == "wafer":
        w = t.device
        if scope == "sparse":
            return w.sparse_marketing_peak_flop_per_s.bound("high") * t.count
        return w.num_pes * w.flop_per_cycle(precision) * w.clock_hz.bound("high") * t.count
    g = t.device
    if scope == "sparse":  # the format's own sparse figure, else 2:4 structured sparsity: twice its dense peak
        if precision in g.sparse_peak_flop_per_s:
            return g.sparse_peak_flop_per_s[precision].si * t.count
        return 2.0 * g.peak_flop_per_s(precision, bound=True) * t.count
    return g.peak_flop_per_s(precision, bound=True) * t.count


def memory_bandwidth(t) -> float:
    """Aggregate bandwidth of the memory holding the weights [bytes/s]: SRAM on a wafer (the larger of the
    quoted figure and PEs x bytes/cycle x clock), HBM on a GPU."""
    if t.kind == "wafer":
        w = t.device
        derived = w.num_pes * w.sram_bytes_per_cycle_per_pe.si * w.clock_hz.bound("high")
        return max(w.sram_bandwidth_bytes_per_s.bound("high"), derived) * t.count
    return t.device.hbm_bandwidth_bytes_per_s.bound("high") * t.count


def hop_s(t) -> float:
    w = t.device
    return w.hop_latency_cycles.bound("low") / w.clock_hz.bound("high")


def io_bandwidth(t, cat) -> float:
    """System I/O of the wafer target (MemoryX/SwarmX links), all systems together [bytes/s]."""
    return cat.system_for_wafer(t.key).io_bandwidth_bytes_per_s.bound("high") * t.count


def workload(c: Claim, cat, phase: str, batch: int, context: int):
    m = resolve_model(c.model, cat)
    return build_workload(m, cat, precision=c.precision, phase=phase, batch=batch, context=context)


def decode_floors(w, t) -> dict[str, float]:
    """Lower bounds on one decode step (one token for every sequence of the batch) [s].

    memory_bandwidth: every active weight and the batch's KV cache are read once per step,
    ``(sum_rows min(weight_bytes, batch x active_weight_bytes) + kv_bytes) / aggregate bandwidth``.
    compute_peak: ``batch x forward FLOP per token / peak``.
    hop_latency_floor (wafer): each layer's GEMV spans a region of ``P = layer bytes / SRAM per PE`` PEs; the most
    compact region is a square of side ``ceil(sqrt(P))`` and a reduction across it takes at least ``side - 1``
    hops; layers run one after another for a token.
    """
    active_bytes = w.weight_bytes * np.where(w.params > 0, w.active_params / np.maximum(w.params, 1), 1.0)
    read = float(np.minimum(w.weight_bytes, active_bytes * w.batch).sum()) + w.kv_cache_bytes
    out = {"memory_bandwidth": read / memory_bandwidth(t),
           "compute_peak": float(w.flop_per_token.sum()) * w.batch / peak(t, w.precision)}
    if t.kind == "wafer":
        pes = np.ceil(w.weight_bytes[w.kind == 1] / t.device.sram_per_pe_bytes.si)
        hops = float(np.maximum(np.ceil(np.sqrt(pes)) - 1, 0).sum())
        out["hop_latency_floor"] = hops * hop_s(t)
    return out


def tokens_per_pass(c: Claim, cat, t) -> tuple[float, str]:
    """The most output tokens one sequence can gain from one pass over the weights, and why: ``k + 1`` when
    speculative decoding with ``k`` draft tokens is on (the claim's options, else its software profile's default),
    else 1."""
    s = setup(c.model, t, phase="decode", precision=c.precision, software=c.software, options=c.spec_options(),
              catalog=cat)
    spec = speculation(s.query)
    if spec is None:
        return 1.0, f"one output token per pass over the weights, no speculative decoding ({s.query.software.name})"
    k = spec["draft_tokens"]
    return k + 1.0, (f"at most {k + 1:g} tokens per pass over the weights: speculative decoding with {k:g} draft "
                     f"tokens ({s.query.software.name})")


# --------------------------------------------------------------------------------------------- capacity
def largest_memoryx(t, cat) -> tuple[str, float] | None:
    """(option key, capacity [bytes]) of the largest MemoryX option of a wafer target's system, else None."""
    if t.kind != "wafer":
        return None
    mx = cat.memoryx.get(cat.system_for_wafer(t.key).memoryx)
    if mx is None or not mx.capacity_options_bytes:
        return None
    key = max(mx.capacity_options_bytes, key=lambda k: (mx.capacity_options_bytes[k].si, k))
    return key, mx.capacity_options_bytes[key].si


@dataclass(frozen=True)
class FitBound:
    fits: bool
    bound: str
    capacity_bytes: float
    need_bytes: float
    record: object
    option: str | None = None  # the MemoryX option judged (wafer training)


def fit_bound(c: Claim, cat, phase: str, batch: int, context: int, t) -> FitBound:
    """Whether the model can fit the target at all, from :func:`wseplan.fit.fit` with the most generous
    configuration: GPU training with ZeRO-3 and full recompute (the least memory any layout needs); wafer training
    with the largest MemoryX option of the catalog (it must hold weights and optimizer state) and the wafer
    holding the double-buffered largest streamed unit (activations can be recomputed or spilled)."""
    kw = {"zero_stage": 3, "recompute": "full"} if phase == "train" and t.kind == "gpu" else {}
    option = None
    if phase == "train" and t.kind == "wafer":
        big = largest_memoryx(t, cat)
        option = big[0] if big else None
        kw["memoryx_option"] = option
    r = fit(c.model, t, precision=c.precision, phase=phase, batch=batch, context=context, catalog=cat, **kw)
    if r.memoryx is not None and not r.memoryx.fits:
        return FitBound(False, "memoryx_capacity", r.memoryx.capacity_bytes, r.memoryx.required_bytes, r, option)
    name = "sram_capacity" if t.kind == "wafer" else "hbm_capacity"
    cap = r.capacity_bytes * r.num_devices
    if t.kind == "wafer" and phase == "train":
        # weights_bytes of a streaming fit is the double-buffered largest streamed unit on each of its wafers
        per_wafer = r.weights_bytes / max(r.num_devices, 1)
        return FitBound(per_wafer <= r.capacity_bytes, name, r.capacity_bytes, per_wafer, r, option)
    need_b = r.total_bytes
    if not r.fits:
        need_b = max(need_b, cap + r.shortfall_bytes)
    return FitBound(r.fits, name, cap, need_b, r, option)


def bandwidth_bound(c: Claim, t, cat) -> dict[str, float]:
    s = c.scope
    if t.kind == "wafer":
        w = t.device
        if s == "fabric":
            return {"fabric_bandwidth": w.fabric_bandwidth_bytes_per_s.bound("high") * t.count}
        if s == "sram":
            return {"memory_bandwidth": memory_bandwidth(t)}
        if s == "io":
            return {"io_bandwidth": io_bandwidth(t, cat)}
        raise InputError(f"claim {c.id}: scope {s!r} does not apply to a wafer; use fabric, sram or io")
    g = t.device
    if s == "hbm":
        return {"memory_bandwidth": memory_bandwidth(t)}
    if s == "fabric":
        return {"fabric_bandwidth": g.scale_up_bandwidth_bytes_per_s.bound("high") * t.count}
    if s == "io":
        return {"io_bandwidth": g.scale_out_bandwidth_bytes_per_s.bound("high") * t.count}
    raise InputError(f"claim {c.id}: scope {s!r} does not apply to a GPU; use hbm, fabric or io")


# --------------------------------------------------------------------------------------------- rate bounds
def quantity_bounds(c: Claim, cat, t, p: Physical) -> tuple[dict[str, float], str]:
    """Hard bounds on the claim's physical quantity (in its unit) and a note on how many tokens one pass may
    yield (decode). Bounds are generous: context 1 when the claim states none, batch 1 where it is not stated."""
    batch, ctx = c.batch or 1, c.context or 1
    bounds: dict[str, float] = {}
    note = ""
    if p.quantity == "train_tokens_per_s":
        w = workload(c, cat, "train", batch, ctx)
        bounds["compute_peak"] = peak(t, c.precision) / (3.0 * float(w.flop_per_token.sum()))  # fwd + 2x fwd bwd
        if t.kind == "wafer" and c.batch is not None and c.context is not None:
            # weight streaming: every system receives all weights over its own I/O once per step
            step_s = w.total_weight_bytes * t.count / io_bandwidth(t, cat)
            bounds["io_bandwidth"] = c.batch * c.context / step_s
    elif p.quantity == "tpot_s":
        w = workload(c, cat, "decode", batch, ctx)
        per_pass, note = tokens_per_pass(c, cat, t)
        for name, step_s in decode_floors(w, t).items():
            # a pass yields at most `per_pass` tokens per sequence; each token still needs its forward FLOPs
            bounds[name] = step_s if name == "compute_peak" else step_s / per_pass
    elif p.quantity == "ttft_s":
        w = workload(c, cat, "prefill", batch, ctx)
        bounds["compute_peak"] = w.forward_flop() / peak(t, c.precision)
        bounds["memory_bandwidth"] = w.total_weight_bytes / memory_bandwidth(t)
    elif p.quantity == "tokens_per_s" and p.phase == "decode":
        # no batch stated: any batch could be meant, so only the compute peak bounds system throughput
        w = workload(c, cat, "decode", 1, ctx)
        bounds["compute_peak"] = peak(t, c.precision) / float(w.flop_per_token.sum())
    return bounds, note
