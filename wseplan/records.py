"""The machine-readable records of the planning chain (documented in docs/cli-output.md).

:class:`PlanRecord` is the one answer of :func:`wseplan.plan.plan`; :class:`FitResult`, :class:`TimeResult` and
:class:`StreamResult` are views of it that keep the field names the ``fit``, ``time`` and ``stream`` commands
have always printed, so every command reads the same numbers. Units: bytes, seconds, tokens, FLOP/s; fractions
end in ``_frac``. A field that does not apply (or a time of a configuration that does not fit) is None.
"""
from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, PrivateAttr

from .catalog.schema import Frozen

SCHEMA_VERSION = 2


def bounded_tokens(v) -> int | None:
    """A record's token bound: None where nothing bounds it (2^62 or more: review31 L3), else the whole tokens."""
    return None if v is not None and v >= 2**62 else int(v or 0)


class RecordHead(Frozen):
    """Fields every model-on-target record starts with."""

    schema_version: int = SCHEMA_VERSION
    model: str
    target: str
    hardware: str
    device_kind: str
    precision: str
    phase: str
    batch: int
    context: int


def view(cls, rec: Frozen, **given):
    """A ``cls`` record filled from the same-named fields of ``rec`` (``given`` fields win)."""
    shared = _SHARED.get((cls, type(rec)))
    if shared is None:
        src = type(rec).model_fields
        shared = _SHARED[(cls, type(rec))] = tuple(k for k in cls.model_fields if k in src)
    return cls(**{k: getattr(rec, k) for k in shared if k not in given}, **given)


#: the field names two record classes share, in the view's order (classes do not change while the program runs)
_SHARED: dict = {}


def _flat(rec: dict, nested: tuple[str, ...] = ()) -> dict:
    row = {k: v for k, v in rec.items() if not isinstance(v, (list, dict)) and v is not None}
    for name in nested:
        for k, v in (rec.get(name) or {}).items():
            if not isinstance(v, (list, dict)):
                row[f"{name}_{k}"] = v
    return row


class PlanRecord(RecordHead):
    """One configuration through the whole chain: fit, the layout used, time (None where it does not fit).

    ``sources`` says where ``batch``, ``context``, ``output_tokens`` and the ``layout`` came from (``given``,
    ``default`` from catalogs/defaults.yaml, or ``searched``); ``software`` names the software profile.
    """

    family: str
    software: str
    output_tokens: int | None = None
    sources: dict[str, str]
    fits: bool
    num_devices: int
    num_replicas: int
    capacity_bytes: float
    per_device_bytes: float
    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    optimizer_bytes: float
    total_bytes: float
    headroom_bytes: float
    shortfall_bytes: float
    binding: str
    max_tokens_in_flight: int | None  # None: unbounded (no KV cache or activations bound the tokens)
    layout: dict
    step_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_user: float | None = None
    request_s: float | None = None
    requests_per_s: float | None = None
    model_flop_per_s: float | None = None
    model_flop_utilization_frac: float | None = None
    bottleneck: str | None = None
    #: interval of the true value of the headline ``interval_metric`` (``tokens_per_s``, or ``step_s`` in training)
    #: from the cross-validated errors of its category (:mod:`wseplan.model_error`); None without a time
    interval_metric: str | None = None
    interval_low: float | None = None
    interval_high: float | None = None
    interval_note: str | None = None
    breakdown_s: dict[str, float] = {}
    details: dict = {}
    notes: list[str] = []

    def to_row(self) -> dict:
        row = _flat(self.to_record(), ("layout", "sources"))
        for k, v in self.breakdown_s.items():
            row[f"breakdown_{k}_s"] = v
        return row


class Stage(Frozen):
    """One device's share: 0-based inclusive transformer-block indices (-1/-1 when it holds no block)."""

    device: int
    first_layer: int
    last_layer: int
    embedding: bool
    lm_head: bool
    bytes: float


class MemoryXFit(Frozen):
    option: str
    capacity_bytes: float
    required_bytes: float
    fits: bool


class StreamingFit(Frozen):
    """Batch bounds for weight-streaming training on a wafer (per system and pass)."""

    stream_bandwidth_bytes_per_s: float
    min_tokens_compute_bound: float
    max_tokens_on_wafer: float | None  # None: unbounded (no activations to hold)
    min_batch_compute_bound: int
    max_batch_on_wafer: int | None  # None: unbounded
    feasible_compute_bound: bool


class FitResult(RecordHead):
    """The fit record (``wseplan fit``)."""

    family: str = ""
    software: str = ""
    sources: dict[str, str] = {}
    output_tokens: int | None = None  # serve: the answer tokens whose KV cache the fit reserves beside the prompt's
    fits: bool
    num_devices: int
    capacity_bytes: float
    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    optimizer_bytes: float
    total_bytes: float
    headroom_bytes: float
    shortfall_bytes: float
    binding: str
    max_tokens_in_flight: int | None  # None: unbounded (no KV cache or activations bound the tokens)
    stages: list[Stage] = []
    layout: dict | None = None
    memoryx: MemoryXFit | None = None
    streaming: StreamingFit | None = None
    notes: list[str] = []

    def to_row(self) -> dict:
        """Flat scalar fields (no stages), for tables and CSV."""
        return _flat(self.to_record(), ("layout", "sources", "memoryx", "streaming"))


class TimeResult(RecordHead):
    """One time prediction (``wseplan time``); fields that do not apply are None."""

    family: str = ""
    software: str = ""
    sources: dict[str, str] = {}
    fits: bool = True
    num_devices: int
    output_tokens: int | None = None
    step_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_user: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    request_s: float | None = None
    requests_per_s: float | None = None
    model_flop_per_s: float | None = None
    model_flop_utilization_frac: float | None = None
    bottleneck: str | None = None
    #: as in :class:`PlanRecord`: the interval of the true ``interval_metric`` from the cross-validated errors
    interval_metric: str | None = None
    interval_low: float | None = None
    interval_high: float | None = None
    interval_note: str | None = None
    breakdown_s: dict[str, float] = {}
    layout: dict | None = None
    notes: list[str] = []

    to_row = PlanRecord.to_row


class StreamResult(Frozen):
    """One weight-streaming training prediction (``wseplan stream``).

    ``min_tokens_compute_bound`` / ``max_tokens_on_wafer`` and ``min_batch_compute_bound`` / ``max_batch_on_wafer``
    are per system and per pass: the streaming minimum (tokens whose forward compute at the achieved rate hides
    every layer's weight load) and the SRAM maximum under the chosen activation policy.
    """

    schema_version: int = SCHEMA_VERSION
    model: str
    target: str
    hardware: str
    precision: str
    batch: int
    context: int
    num_systems: int
    per_system_batch: float
    tokens_per_step: float
    fits: bool
    activation_policy: str
    step_s: float | None
    tokens_per_s: float | None
    #: the step's parts; None where the configuration does not fit (nothing that does not fit is timed)
    compute_s: float | None
    recompute_s: float | None
    exposed_load_s: float | None
    exposed_spill_s: float | None
    optimizer_exposed_s: float | None
    utilization_frac: float | None
    model_flop_per_s: float | None
    model_flop_utilization_frac: float | None
    stream_bandwidth_bytes_per_s: float
    io_bandwidth_bytes_per_s: float
    transfer_latency_s: float
    memoryx_tier: str
    min_tokens_compute_bound: float
    max_tokens_on_wafer: float | None  # None: unbounded (no activations to hold)
    min_batch_compute_bound: int
    max_batch_on_wafer: int | None  # None: unbounded
    feasible_compute_bound: bool
    spill_bytes: float
    #: the step's hard floors: the weights over the links, the executed FLOPs at the dense peak [s] (None: no fit)
    stream_floor_s: float | None = None
    compute_floor_s: float | None = None
    bottleneck: str
    alternatives_step_s: dict[str, float] = {}
    notes: list[str] = []
    #: as in :class:`PlanRecord` (``time --phase train`` of the same step, audit33d H2): the true ``step_s``'s interval
    interval_metric: str | None = None
    interval_low: float | None = None
    interval_high: float | None = None
    interval_note: str | None = None

    def to_row(self) -> dict:
        row = _flat(self.to_record())
        for k, v in self.alternatives_step_s.items():
            row[f"step_s_if_{k}"] = v
        return row


_SHORT = (("tensor_parallel", "TP{}"), ("pipeline_parallel", "PP{}"), ("data_parallel", "DP{}"),
          ("context_parallel", "CP{}"), ("expert_parallel", "EP{}"), ("attention_data_parallel", "ADP{}"),
          ("virtual_pipeline", "v{}"), ("micro_batch", "mb{}"), ("zero_stage", "ZeRO-{}"),
          ("recompute", "recompute={}"), ("num_wafers", "{} wafers"), ("num_replicas", "x{} replicas"),
          ("num_systems", "{} systems"), ("activation_policy", "{}"))


def layout_label(layout: dict | None) -> str:
    """A short human label of a layout dict: ``TP4 PP8 DP32 v4 mb1 ZeRO-1 recompute=none``, ``4 wafers``."""
    if not layout:
        return ""
    parts = []
    for key, fmt in _SHORT:
        v = layout.get(key)
        if v is None or (key in ("context_parallel", "expert_parallel", "attention_data_parallel", "virtual_pipeline",
                                 "num_replicas") and v == 1):
            continue
        parts.append(fmt.format(v))
    return " ".join(parts)


# ------------------------------------------------------------------ serving (wseplan.serving)
class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServePoint(_Frozen):
    """One operating point: a replica size and concurrency at a load. Units: s, tokens/s, requests/s, USD.

    ``ttft_s`` is the mean time to first token at the point's load, as in every record (``wseplan time``: at its
    concurrency): the request's own prefill (``ttft_own_s``, no queueing) plus the mean wait for the engine's prefill
    budget (M/D/1, in-flight engines) and for a batch slot (M/G/c); ``ttft_p50_s`` ... ``ttft_p99_s`` the same at
    those percentiles."""

    devices_per_replica: int
    num_replicas: int
    num_devices: int
    batch: int
    #: requests the engine holds on average at this load (Little's law: arrival rate x time in the engine); an in-flight
    #: engine steps that batch (``tpot_s`` is its step), a static one its ``batch`` slots; ``batch`` when they are full
    running_batch: float | None = None
    layout: dict
    tpot_s: float
    #: TPOT of the request at the record's percentile (a request's mean step over its life; with random arrivals the
    #: batch held varies around ``running_batch``): the TPOT limit applies to it; ``tpot_s`` when the slots are full
    tpot_at_percentile_s: float | None = None
    ttft_s: float
    ttft_own_s: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p95_s: float
    ttft_p99_s: float
    ttft_at_percentile_s: float
    tokens_per_s_per_user: float
    capacity_requests_per_s: float
    requests_per_s: float
    tokens_per_s: float
    utilization_frac: float
    accepted_tokens_per_step: float
    bottleneck: str | None
    meets_sla: bool
    usd_per_hour: float | None = None
    output_usd_per_mtok: float | None = None
    input_usd_per_mtok: float | None = None
    #: the busy hour over the output tokens delivered at this load, prompts and waits included (as ``cost``'s headline)
    all_in_usd_per_mtok: float | None = None
    #: the plan record's notes at this point (speculation on or off and why, positions beyond the model's, datapath)
    notes: list[str] = []
    #: interval of the true ``tokens_per_s`` at this point [tokens/s]: the plan record's (``wseplan time`` of the
    #: replica at its slots, the same category, envelope and roof) as factors of the prediction (audit33d H2)
    interval_low: float | None = None
    interval_high: float | None = None
    interval_note: str | None = None


def split_note(prompt: int, output: int, input_usd: float | None, output_usd: float | None,
               all_in_usd: float | None) -> str | None:
    """A note where the input and output $/M, priced at a request's prompt and answer, recover less of the all-in $/M
    than 99% (audit28b M4: 85.7% on cs3x4 at batch 8; audit33e H2: 56% at 120k-token prompts): the split prices the
    marginal time of each side, and a request's own prefill and wait count in the all-in only. None otherwise.
    ``cost`` and ``serve`` say it alike."""
    if None in (input_usd, output_usd, all_in_usd) or not all_in_usd > 0 or not output:
        return None
    share = (prompt * input_usd + output * output_usd) / (output * all_in_usd)
    if share >= 0.99:
        return None
    return (f"the input and output $/M price each side's marginal time: at {prompt:,} prompt and {output:,} output "
            f"tokens they recover {share:.1%} of the all-in $/M (a request's own prefill and its wait are in the all-in "
            "only); price a whole request by the all-in $/M per output token")


def point_interval(rec, tokens_per_s: float, rate=None) -> dict:
    """``interval_low``/``interval_high``/``interval_note`` of a serving point delivering ``tokens_per_s`` at a load given
    as a share of its slots: the plan record ``rec``'s throughput interval as factors of its prediction (low /
    predicted, high / predicted) applied to the point's throughput; empty where the record has none, and at a given
    arrival ``rate`` (the point then delivers the rate whatever the model's error: its latency and cost move, not its
    throughput; review33 M3)."""
    lo, hi, v = rec.interval_low, rec.interval_high, rec.tokens_per_s
    if rate is not None or rec.interval_metric != "tokens_per_s" or lo is None or hi is None or not v \
            or not math.isfinite(tokens_per_s):
        return {}
    return {"interval_low": tokens_per_s * lo / v, "interval_high": tokens_per_s * hi / v, "interval_note": rec.interval_note}


class ServeResult(_Frozen):
    """The ``serve`` record: the chosen point, every point evaluated, and the cost/speed Pareto frontier."""

    _lower: dict | None = PrivateAttr(default=None)  # how to ask the same question at a lower load (with_limits)
    _grid: list | None = PrivateAttr(default=None)  # the search's points before its batches were refined
    _again: dict | None = PrivateAttr(default=None)  # how to ask one layout at another batch (wseplan.serve_refine)

    def __eq__(self, other) -> bool:  # the record's fields; how to ask it again at another load is not part of it
        return type(other) is type(self) and self.__dict__ == other.__dict__

    schema_version: int = 1
    model: str
    target: str
    hardware: str
    software: str
    precision: str
    input_tokens: int
    output_tokens: int
    percentile: float
    ttft_limit_s: float | None = None
    tpot_limit_s: float | None = None
    rate_per_s: float | None = None
    speculative: dict | None = None
    #: without a rate, limits or a concurrency: the per-user speed [tokens/s] the chosen point keeps (the catalog's
    #: ``defaults.default_min_tokens_per_s_per_user`` unless given), the floor ``cost`` and ``compare`` price at
    min_tokens_per_s_per_user: float | None = None
    fits: bool
    chosen: ServePoint | None = None
    points: list[ServePoint] = []
    frontier: list[ServePoint] = []
    notes: list[str] = []

    def to_record(self) -> dict:
        """The flat record (the chosen point's fields at top level) plus ``points`` and ``frontier``."""
        rec = self.model_dump(mode="json", exclude={"chosen"})
        ch = self.chosen.model_dump(mode="json") if self.chosen else {}
        head = {k: rec.pop(k) for k in list(rec) if k not in ("points", "frontier", "notes")}
        return {**head, **ch, "notes": rec["notes"], "frontier": rec["frontier"], "points": rec["points"]}


# ------------------------------------------------------------------ serving points: what their records say
def all_in_usd_per_mtok(p: ServePoint, util: float = 1.0) -> float:
    """A point's whole cost per million output tokens [USD]: its TCO per hour over the output tokens it delivers per
    hour at its load (prompts included), counted over busy hours (``util``: the site's utilisation, as every $/M
    in wseplan). ``serve`` chooses its cheapest point by this measure."""
    return p.usd_per_hour / (util * 3600.0 * max(p.tokens_per_s, 1e-300)) * 1e6


def pareto_frontier(points: list[ServePoint], util: float = 1.0) -> list[ServePoint]:
    """Points not beaten on both all-in $/M output tokens (lower) and tokens/s per user (higher), by speed."""
    pts = sorted((p for p in points if p.usd_per_hour is not None),
                 key=lambda p: (-p.tokens_per_s_per_user, all_in_usd_per_mtok(p, util)))
    out, best = [], math.inf
    for p in pts:
        c = all_in_usd_per_mtok(p, util)
        if c < best:
            out.append(p)
            best = c
    return out


def _worst_ratio(p: ServePoint, ttft_limit_s, tpot_limit_s) -> float:
    """How far a point is from its limits: the larger of TTFT / TTFT limit and TPOT / TPOT limit (at the percentile)."""
    r = [p.ttft_at_percentile_s / ttft_limit_s] if ttft_limit_s else []
    r += [tpot_for_limit(p) / tpot_limit_s] if tpot_limit_s else []
    return max(r, default=0.0)


def occupancy(p: ServePoint) -> float:
    """The share of a point's slots its requests hold on average (1 when they are full)."""
    return p.running_batch / p.batch if p.running_batch is not None and p.batch else p.utilization_frac


def tpot_for_limit(p: ServePoint) -> float:
    """The TPOT a point's TPOT limit applies to [s]: at the record's percentile (the mean when the slots are full)."""
    return p.tpot_at_percentile_s if p.tpot_at_percentile_s is not None else p.tpot_s
