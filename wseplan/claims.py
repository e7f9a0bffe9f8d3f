"""Check: is a vendor's or an article's performance claim physically possible, and how does it compare with
wseplan's estimate?

Every claim is judged by general physics and by the time models, never by looking up known claims:

1. **Hard bounds** from the catalog. A claim that beats one is ``impossible`` and names the bound
   (:data:`BOUNDS`): ``compute_peak`` (dense peak = PEs x FLOP/cycle x clock for a wafer, datasheet dense peak
   for a GPU, times the device count), ``sram_capacity`` / ``hbm_capacity`` / ``memoryx_capacity`` (via
   :func:`wseplan.fit.fit`), ``memory_bandwidth`` (bytes that must be read per output token over the aggregate
   SRAM/HBM bandwidth), ``fabric_bandwidth`` / ``io_bandwidth`` (catalog link rates; weights streamed in over the
   system I/O for wafer training), and ``hop_latency_floor`` (per-hop latency, and for wafer decode the hops a
   reduction across each layer's PE region must make).
2. **Estimates** from :func:`wseplan.timing.predict_time` (and the catalog for power). A claim better than the
   estimate by more than the validated error of that kind of prediction is ``optimistic``.
3. Otherwise ``consistent`` (including claims at or below the estimate).

``margin`` is how many times better than the bound (impossible) or the estimate (optimistic) the claim is:
claimed/bound for higher-is-better quantities, bound/claimed for lower-is-better ones. Values are in SI units.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import CatalogError, InputError, WseplanError

KINDS = ("fits", "memory_bytes", "latency_per_token_s", "tokens_per_s_per_user", "tokens_per_s", "ttft_s",
         "step_time_s", "time_to_train_s", "peak_flop_per_s", "bandwidth_bytes_per_s", "hop_latency_s", "power_w",
         "usd_per_mtok")
BOUNDS = ("sram_capacity", "hbm_capacity", "memoryx_capacity", "compute_peak", "memory_bandwidth", "fabric_bandwidth",
          "io_bandwidth", "hop_latency_floor")
VERDICTS = ("impossible", "optimistic", "consistent")

# kind -> (SI unit shown, lower is better?)
_KIND_UNIT = {
    "fits": ("", False), "memory_bytes": ("bytes", True), "latency_per_token_s": ("s", True),
    "tokens_per_s_per_user": ("tokens/s", False), "tokens_per_s": ("tokens/s", False), "ttft_s": ("s", True),
    "step_time_s": ("s", True), "time_to_train_s": ("s", True), "peak_flop_per_s": ("FLOP/s", False),
    "bandwidth_bytes_per_s": ("bytes/s", False), "hop_latency_s": ("s", True), "power_w": ("W", True),
    "usd_per_mtok": ("USD/M tokens", True),
}
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "seconds": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0,
               "minutes": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0, "day": 86400.0, "days": 86400.0,
               "week": 604800.0, "weeks": 604800.0, "month": 30 * 86400.0, "months": 30 * 86400.0,
               "year": 365.25 * 86400.0, "years": 365.25 * 86400.0}
_RATE_UNITS = {"tokens/s": 1.0, "tok/s": 1.0, "token/s": 1.0, "tokens/s/user": 1.0, "tok/s/user": 1.0,
               "ktokens/s": 1e3, "ktok/s": 1e3, "Mtokens/s": 1e6}
_USD_UNITS = {"USD/Mtok": 1.0, "USD/M tokens": 1.0, "$/Mtok": 1.0, "$/M tokens": 1.0, "USD/1M tokens": 1.0}


class Claim(BaseModel):
    """One claim. ``value`` is a number in ``unit`` (or SI when no unit), or true/false for ``fits``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    kind: Literal["fits", "memory_bytes", "latency_per_token_s", "tokens_per_s_per_user", "tokens_per_s", "ttft_s",
                  "step_time_s", "time_to_train_s", "peak_flop_per_s", "bandwidth_bytes_per_s", "hop_latency_s",
                  "power_w", "usd_per_mtok"]
    value: bool | float | str
    unit: str | None = None
    model: str | None = None
    target: str | None = None
    precision: Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"] = "bf16"
    phase: Literal["train", "prefill", "decode"] | None = None
    batch: int | None = Field(default=None, gt=0)
    context: int | None = Field(default=None, gt=0)
    tokens: float | None = Field(default=None, gt=0)
    output_tokens: int | None = Field(default=None, gt=0)
    scope: Literal["fabric", "sram", "io", "hbm", "dense", "sparse"] | None = None
    source: str | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _finite(cls, v):
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("must be finite")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
            raise ValueError("a claimed rate, time, size, power or price must be positive")
        return v


class ClaimsFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    claims: list[Claim] = Field(min_length=1)


class Verdict(BaseModel):
    """The verdict on one claim (``wseplan check --format json`` record; see docs/cli-output.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: str
    verdict: Literal["impossible", "optimistic", "consistent"]
    bound: str | None = None
    bound_value: float | None = None
    claimed_value: float | bool
    estimate: float | bool | None = None
    margin: float | None = None
    error_frac: float | None = None
    unit: str
    bound_unit: str | None = None
    reason: str

    def to_record(self) -> dict:
        return {k: self.__dict__[k] for k in ("id", "verdict", "bound", "bound_value", "claimed_value", "estimate",
                                              "margin", "reason", "kind", "unit", "bound_unit",
                                              "error_frac")}

    def to_row(self) -> dict:
        return self.to_record()


# --------------------------------------------------------------------------------------------- loading
def load_claims(path: str | Path) -> list[Claim]:
    """Read a claims YAML file (top-level ``claims:`` list). Malformed input raises a one-line InputError."""
    from .catalog.load import read_yaml

    from .catalog.schema import check_name, check_text

    p = Path(path)
    if not os.path.lexists(p):
        raise InputError(f"claims file {path}: not found; check the path")
    try:
        data = read_yaml(p)  # a FIFO, device or symlink loop is refused without blocking
    except CatalogError as exc:
        raise InputError(f"claims file {exc}") from None
    if not isinstance(data, dict) or "claims" not in data:
        raise InputError(f"{path}: needs a top-level 'claims:' list")
    try:
        parsed = ClaimsFile.model_validate(data)
    except ValidationError as exc:
        raise InputError(_fmt_error(path, data, exc)) from None
    for i, c in enumerate(parsed.claims):  # names reach terminals and reports: no escapes, markup or huge text
        for field, value, check in (("id", c.id, check_name), ("text", c.text, check_text),
                                    ("model", c.model, check_name), ("target", c.target, check_name),
                                    ("unit", c.unit, check_name), ("source", c.source, check_text)):
            if value is None:
                continue
            try:
                check(value)
            except ValueError as exc:
                raise InputError(f"{path}: claims[{i}].{field}: {exc}") from None
    from collections import Counter

    dup = sorted(i for i, n in Counter(c.id for c in parsed.claims).items() if n > 1)
    if dup:
        raise InputError(f"{path}: claims: duplicate id {dup[0]!r}; ids must be unique")
    return list(parsed.claims)


def _fmt_error(path, data, exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = list(err.get("loc", ()))
    where = ""
    if len(loc) >= 2 and loc[0] == "claims" and isinstance(loc[1], int):
        items = data.get("claims") or []
        cid = items[loc[1]].get("id") if loc[1] < len(items) and isinstance(items[loc[1]], dict) else None
        where = f"claims[{loc[1]}]" + (f" ({cid})" if cid else "")
        loc = loc[2:]
    field = ".".join(str(x) for x in loc if not str(x).startswith(("function-", "literal[", "bool", "float", "str")))
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown key; remove it or fix its spelling"
    elif err.get("type") == "missing":
        msg = "required key is missing; add it"
    elif err.get("type") == "literal_error" and field == "kind":
        msg = f"unknown kind; use one of {', '.join(KINDS)}"
    return f"{path}: {where}{'.' if where and field else ''}{field}: {msg}"


# --------------------------------------------------------------------------------------------- units
def claimed_si(c: Claim) -> float | bool:
    """The claimed value in SI units (bool for ``fits``)."""
    if c.kind == "fits":
        if not isinstance(c.value, bool):
            raise InputError(f"claim {c.id}: value must be true or false for kind 'fits'")
        return c.value
    if isinstance(c.value, bool):
        raise InputError(f"claim {c.id}: value must be a number for kind {c.kind!r}")
    from .units import parse_quantity

    raw = c.value
    unit = (c.unit or "").strip()
    if isinstance(raw, str):
        try:
            num = float(raw.replace(",", "").replace("_", ""))
        except ValueError:
            if unit:
                raise InputError(f"claim {c.id}: value {raw!r} must be a plain number when 'unit' is given") from None
            v, _dim = _parse_with_unit(c, raw, parse_quantity)
            return v
    else:
        num = float(raw)
    if not unit:
        return num
    return _parse_with_unit(c, f"{num!r} {unit}", parse_quantity)[0]


def _parse_with_unit(c: Claim, text: str, parse_quantity) -> tuple[float, str | None]:
    num_txt, _, unit = text.strip().partition(" ")
    unit = unit.strip()
    try:
        num = float(num_txt.replace(",", ""))
    except ValueError:
        raise InputError(f"claim {c.id}: cannot read value {text!r}; write a number and a unit") from None
    if c.kind in ("latency_per_token_s", "ttft_s", "step_time_s", "time_to_train_s", "hop_latency_s"):
        if unit in _TIME_UNITS:
            return num * _TIME_UNITS[unit], "s"
    elif c.kind in ("tokens_per_s_per_user", "tokens_per_s"):
        if unit in _RATE_UNITS:
            return num * _RATE_UNITS[unit], "tokens/s"
        raise InputError(f"claim {c.id}: unit {unit!r} unknown for {c.kind}; use tokens/s or tok/s")
    elif c.kind == "usd_per_mtok":
        if unit in _USD_UNITS:
            return num, "USD/Mtok"
        raise InputError(f"claim {c.id}: unit {unit!r} unknown for usd_per_mtok; use USD/Mtok")
    want = {"memory_bytes": "bytes", "peak_flop_per_s": "flop/s", "bandwidth_bytes_per_s": "bytes/s", "power_w": "W",
            "latency_per_token_s": "s", "ttft_s": "s", "step_time_s": "s", "time_to_train_s": "s",
            "hop_latency_s": "s"}[c.kind]
    v, dim = parse_quantity(f"{num!r} {unit}", field=f"claim {c.id} unit")
    if dim is not None and dim != want:
        raise InputError(f"claim {c.id}: unit {unit!r} is {dim}; kind {c.kind} needs {want}")
    return v, dim


# --------------------------------------------------------------------------------------------- physics
def _need(c: Claim, *fields: str) -> None:
    for f in fields:
        if getattr(c, f) is None:
            raise InputError(f"claim {c.id}: kind {c.kind!r} needs '{f}'; add it")


def _target(c: Claim, cat):
    """The claim's target with an explicit device count (1 when the claim names none)."""
    from .targets import parse_target

    t = parse_target(c.target, cat)
    if t.count is None:
        t = parse_target(f"{t.key}x1", cat)
    return t


def _peak(t, precision: str, scope: str = "dense") -> float:
    """Peak FLOP/s of the whole target (device x count). Wafer: usable PEs x FLOP/cycle x highest clock."""
    if t.kind == "wafer":
        w = t.device
        if scope == "sparse":
            return w.sparse_marketing_peak_flop_per_s.bound("high") * t.count
        key = precision if precision in w.flop_per_cycle_per_pe else "fp16"
        return w.num_pes * w.flop_per_cycle_per_pe[key].si * w.clock_hz.bound("high") * t.count
    g = t.device
    if scope == "sparse":
        order = [precision, "fp8", "fp16", "bf16"]
        for p in order:
            if p in g.sparse_peak_flop_per_s:
                return g.sparse_peak_flop_per_s[p].si * t.count
        return 2.0 * g.peak_flop_per_s(precision) * t.count
    return g.peak_flop_per_s(precision) * t.count


def _memory_bandwidth(t) -> float:
    """Aggregate bandwidth of the memory holding the weights [bytes/s]: SRAM on a wafer (the larger of the
    quoted figure and PEs x bytes/cycle x clock), HBM on a GPU."""
    if t.kind == "wafer":
        w = t.device
        derived = w.num_pes * w.sram_bytes_per_cycle_per_pe.si * w.clock_hz.bound("high")
        return max(w.sram_bandwidth_bytes_per_s.bound("high"), derived) * t.count
    return t.device.hbm_bandwidth_bytes_per_s.bound("high") * t.count


def _hop_s(t) -> float:
    w = t.device
    return w.hop_latency_cycles.bound("low") / w.clock_hz.bound("high")


def _workload(c: Claim, cat, phase: str, batch: int, context: int):
    from .workload import build_workload, resolve_model

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
    import numpy as np

    active_bytes = w.weight_bytes * np.where(w.params > 0, w.active_params / np.maximum(w.params, 1), 1.0)
    read = float(np.minimum(w.weight_bytes, active_bytes * w.batch).sum()) + w.kv_cache_bytes
    out = {"memory_bandwidth": read / _memory_bandwidth(t),
           "compute_peak": float(w.flop_per_token.sum()) * w.batch / _peak(t, w.precision)}
    if t.kind == "wafer":
        pes = np.ceil(w.weight_bytes[w.kind == 1] / t.device.sram_per_pe_bytes.si)
        hops = float(np.maximum(np.ceil(np.sqrt(pes)) - 1, 0).sum())
        out["hop_latency_floor"] = hops * _hop_s(t)
    return out


def _fit_bound(c: Claim, cat, phase: str, batch: int, context: int, t):
    """(fits, bound name, capacity of the whole target, bytes needed, FitResult) from :func:`wseplan.fit.fit`.

    A hard bound must be generous: GPU training is fitted with ZeRO-3 and full recompute (the least memory any
    layout needs); wafer training only needs MemoryX to hold weights and optimizer state and the wafer to hold
    the double-buffered largest layer (activations can be recomputed or spilled).
    """
    from .fit import fit

    kw = {"zero_stage": 3, "recompute": "full"} if phase == "train" and t.kind == "gpu" else {}
    r = fit(c.model, t, precision=c.precision, phase=phase, batch=batch, context=context, catalog=cat, **kw)
    if r.memoryx is not None and not r.memoryx.fits:
        return False, "memoryx_capacity", r.memoryx.capacity_bytes, r.memoryx.required_bytes, r
    name = "sram_capacity" if t.kind == "wafer" else "hbm_capacity"
    cap = r.capacity_bytes * r.num_devices
    if t.kind == "wafer" and phase == "train":
        # weights_bytes of a streaming fit is the double-buffered largest layer on each of its wafers
        per_wafer = r.weights_bytes / max(r.num_devices, 1)
        ok = per_wafer <= r.capacity_bytes
        return ok, name, r.capacity_bytes, per_wafer, r
    need = r.total_bytes
    if not r.fits:
        need = max(need, cap + r.shortfall_bytes)
    return r.fits, name, cap, need, r


# --------------------------------------------------------------------------------------------- error
def validated_errors(catalog=None) -> dict[str, tuple[float, str]]:
    """The validated relative error of each kind of prediction, from the validation results.

    Runs :func:`wseplan.validate.validate_file` on the bundled validation set and takes, per category
    (gpu-train, gpu-infer, wse-infer, wse-train), the 80th percentile of |rel_error| over the strong and
    medium rows that were predicted: a claim better than the estimate by more than this is beyond the error
    band that covers four in five published measurements. Categories without predicted rows are absent, and
    claims of that kind are never called optimistic.

    Returns
    -------
    dict
        category -> (error [fraction], a sentence naming where it comes from).
    """
    from .validate import TOLERANCE_PERCENTILE, category_bands, default_cases_path, validate_file

    records = validate_file(default_cases_path(), catalog)
    out = {}
    for cat_name, val in category_bands(records).items():
        n = sum(r["category"] == cat_name and r["rel_error"] is not None and r.get("quality") in ("strong", "medium")
                for r in records)
        out[cat_name] = (val, f"P{TOLERANCE_PERCENTILE} |rel_error| of {n} strong/medium {cat_name} rows "
                              f"of the validation set")
    return out


def validated_error_frac(kind: str, device_kind: str, errors: dict) -> tuple[float, str]:
    """(error fraction, its source) for this kind of claim; LookupError when none is validated."""
    cat_name = _category(kind, device_kind)
    if cat_name in errors:
        return errors[cat_name]
    raise LookupError(cat_name)


def _category(kind: str, device_kind: str) -> str:
    dev = "wse" if device_kind == "wafer" else "gpu"
    train = kind in ("step_time_s", "time_to_train_s") or kind == "train"
    return f"{dev}-{'train' if train else 'infer'}"


# --------------------------------------------------------------------------------------------- checking
def check_claim(c: Claim, catalog=None, *, errors: dict | None = None) -> Verdict:
    """Judge one claim (see the module docstring). ``errors`` as from :func:`validated_errors` (computed when
    not given)."""
    from .catalog.load import load_catalog

    cat = catalog or load_catalog()
    if errors is None and c.kind not in ("fits", "peak_flop_per_s", "bandwidth_bytes_per_s", "hop_latency_s"):
        errors = validated_errors(cat)
    claimed = claimed_si(c)
    unit, lower_better = _KIND_UNIT[c.kind]
    kind = c.kind
    bounds: dict[str, float] = {}  # name -> bound value in the claim's unit (max achievable / min time)
    estimate = None
    est_note = ""
    device_kind = None
    t = None
    if c.target is not None:
        t = _target(c, cat)
        device_kind = t.kind

    if kind == "peak_flop_per_s":
        _need(c, "target")
        scope = c.scope or "dense"
        if scope not in ("dense", "sparse"):
            raise InputError(f"claim {c.id}: scope for a peak must be dense or sparse, got {scope!r}")
        bounds["compute_peak"] = _peak(t, c.precision, scope)
        estimate = bounds["compute_peak"]
        est_note = f"{scope} {c.precision} peak of {t.label}"
    elif kind == "bandwidth_bytes_per_s":
        _need(c, "target", "scope")
        bounds.update(_bandwidth_bound(c, t, cat))
        estimate = next(iter(bounds.values()))
        est_note = f"{c.scope} bandwidth of {t.label}"
    elif kind == "hop_latency_s":
        _need(c, "target")
        if t.kind != "wafer":
            raise InputError(f"claim {c.id}: hop_latency_s applies to a wafer target, got {c.target!r}")
        bounds["hop_latency_floor"] = _hop_s(t)
        estimate = t.device.hop_latency_cycles.si / t.device.clock_hz.si
        est_note = "catalog hop latency / clock"
    elif kind == "fits":
        _need(c, "model", "target")
        phase = c.phase or "decode"
        ok, name, cap, need, r = _fit_bound(c, cat, phase, c.batch or 1, c.context or 1, t)
        estimate = ok
        if claimed and not ok:
            return Verdict(id=c.id, kind=kind, verdict="impossible", bound=name, bound_value=cap, claimed_value=claimed,
                           estimate=ok, margin=need / cap, unit="", bound_unit="bytes",
                           reason=f"{r.model} ({c.precision}, {phase}) needs {_fmt(need, 'bytes')}; {t.label} holds "
                                  f"{_fmt(cap, 'bytes')} ({name}), {need / cap:.3g}x over")
        return Verdict(id=c.id, kind=kind, verdict="consistent", claimed_value=claimed, estimate=ok, unit="",
                       reason=f"wseplan fit says {'it fits' if ok else 'it does not fit'} ({r.binding} binds, "
                              f"{r.num_devices} device(s))")
    elif kind == "memory_bytes":
        _need(c, "model")
        phase = c.phase or "decode"
        tt = t or _target(c.model_copy(update={"target": "h100-sxm"}), cat)
        ok, name, cap, need, r = _fit_bound(c, cat, phase, c.batch or 1, c.context or 1, tt)
        w = _workload(c, cat, phase, c.batch or 1, c.context or 1)
        floor = w.total_weight_bytes
        estimate = r.total_bytes
        est_note = f"wseplan fit total ({phase}, batch {c.batch or 1}, context {c.context or 1})"
        if claimed < floor:  # the weights alone must be stored somewhere
            cap_name = "sram_capacity" if tt.kind == "wafer" else "hbm_capacity"
            return Verdict(id=c.id, kind=kind, verdict="impossible", bound=cap_name, bound_value=floor,
                           claimed_value=claimed, estimate=estimate, margin=floor / claimed, unit=unit,
                           bound_unit="bytes",
                           reason=f"the weights alone take {_fmt(floor, 'bytes')} at {c.precision}; the claim is "
                                  f"{floor / claimed:.3g}x smaller")
    elif kind == "power_w":
        _need(c, "target")
        estimate, est_note = _estimate(c, cat, t, c.phase or "decode", c.batch or 1, c.context)
    else:
        _need(c, "model", "target")
        bounds, estimate, est_note, capacity = _performance(c, cat, t)
        return _judge(c, claimed, unit, lower_better, bounds, estimate, est_note, device_kind, cat, capacity,
                      errors)

    return _judge(c, claimed, unit, lower_better, bounds, estimate, est_note, device_kind, cat, None, errors)


def _bandwidth_bound(c: Claim, t, cat) -> dict[str, float]:
    s = c.scope
    if t.kind == "wafer":
        w = t.device
        if s == "fabric":
            return {"fabric_bandwidth": w.fabric_bandwidth_bytes_per_s.bound("high") * t.count}
        if s == "sram":
            return {"memory_bandwidth": _memory_bandwidth(t)}
        if s == "io":
            return {"io_bandwidth": _io_from_catalog(t, cat)}
        raise InputError(f"claim {c.id}: scope {s!r} does not apply to a wafer; use fabric, sram or io")
    g = t.device
    if s == "hbm":
        return {"memory_bandwidth": _memory_bandwidth(t)}
    if s == "fabric":
        return {"fabric_bandwidth": g.scale_up_bandwidth_bytes_per_s.bound("high") * t.count}
    if s == "io":
        return {"io_bandwidth": g.scale_out_bandwidth_bytes_per_s.bound("high") * t.count}
    raise InputError(f"claim {c.id}: scope {s!r} does not apply to a GPU; use hbm, fabric or io")


def _io_from_catalog(t, cat) -> float:
    """System I/O of the wafer target (MemoryX/SwarmX links), all systems together [bytes/s]."""
    return cat.system_for_wafer(t.key).io_bandwidth_bytes_per_s.bound("high") * t.count


def _performance(c: Claim, cat, t):
    """Bounds (as limits on the claimed quantity) and the time-model estimate for time/throughput claims."""
    kind = c.kind
    phase = c.phase or {"ttft_s": "prefill", "step_time_s": "train", "time_to_train_s": "train"}.get(kind, "decode")
    if kind in ("power_w", "usd_per_mtok"):
        phase = c.phase or "decode"
    batch = c.batch or 1
    bounds: dict[str, float] = {}
    if kind == "time_to_train_s":
        _need(c, "tokens")
    if kind == "ttft_s" or (kind == "tokens_per_s" and phase == "prefill"):
        _need(c, "context")  # a prompt's length sets its work
    # bounds must be generous: without a stated context, one token of context (the least work and memory)
    ctx = c.context or 1
    capacity = None  # (bound name, capacity, bytes needed) when the model does not fit the target
    ok, name, cap, need, r = _fit_bound(c, cat, phase, batch, ctx, t)
    if not ok:
        capacity = (name, cap, need)
    if kind == "tokens_per_s" and phase == "decode" and c.batch is None:
        # no batch stated: any batch could be meant, so only the compute peak bounds system throughput
        w = _workload(c, cat, "decode", 1, ctx)
        bounds["compute_peak"] = _peak(t, c.precision) / float(w.flop_per_token.sum())
    elif kind in ("latency_per_token_s", "tokens_per_s_per_user", "tokens_per_s") and phase == "decode":
        w = _workload(c, cat, "decode", batch, ctx)
        floors = decode_floors(w, t)
        for name, step_s in floors.items():
            bounds[name] = _as_kind(kind, step_s, batch)
    elif kind == "ttft_s" or (kind in ("tokens_per_s",) and phase == "prefill"):
        w = _workload(c, cat, "prefill", batch, ctx)
        step = w.forward_flop() / _peak(t, c.precision)
        bounds["compute_peak"] = step if kind == "ttft_s" else batch * ctx / step
        mem = w.total_weight_bytes / _memory_bandwidth(t)
        bounds["memory_bandwidth"] = mem if kind == "ttft_s" else batch * ctx / mem
    elif kind in ("step_time_s", "time_to_train_s", "tokens_per_s"):
        seq = ctx
        w = _workload(c, cat, "train", batch, seq)
        flop_per_token = 3.0 * float(w.flop_per_token.sum())  # forward + backward (2x forward)
        peak = _peak(t, c.precision)
        if kind == "step_time_s":
            bounds["compute_peak"] = flop_per_token * batch * seq / peak
            if t.kind == "wafer":
                bounds["io_bandwidth"] = w.total_weight_bytes * t.count / _io_from_catalog(t, cat)
        elif kind == "time_to_train_s":
            bounds["compute_peak"] = flop_per_token * c.tokens / peak
        else:
            bounds["compute_peak"] = peak / flop_per_token
    if c.batch is None and kind in ("tokens_per_s", "time_to_train_s", "step_time_s"):
        est, note = None, "no batch stated, so no estimate to compare with"
    else:
        est, note = _estimate(c, cat, t, phase, batch, c.context)
    return bounds, est, note, capacity


def _as_kind(kind: str, step_s: float, batch: int) -> float:
    if kind == "latency_per_token_s":
        return step_s
    if kind == "tokens_per_s_per_user":
        return 1.0 / step_s
    return batch / step_s


def _estimate(c: Claim, cat, t, phase: str, batch: int, context: int | None):
    """wseplan's estimate of the claimed quantity, or (None, why) when no model covers it."""
    kind = c.kind
    if kind == "power_w":
        if t.kind == "wafer":
            q = cat.system_for_wafer(t.key).power_w
            return q.si * t.count, f"catalog CS system power x {t.count} (range {_fmt(q.bound('low'), 'W')} to {_fmt(q.bound('high'), 'W')} each)"
        g = t.device
        nodes = math.ceil(t.count / g.gpus_per_node.si)
        return g.node_power_w.si * nodes, f"catalog node power x {nodes} node(s)"
    if kind == "usd_per_mtok":
        try:
            from .analytic import cost as C  # noqa: F401  (issue 5)
        except ImportError:
            return None, "no cost model available"
        return _usd_per_mtok(c, cat, t, batch, context)
    from .timing import predict_time

    if not time_model_available(t.kind):
        return None, f"no {t.kind} time model in this version"
    try:
        r = predict_time(c.model, t, phase=phase, precision=c.precision, batch=batch, context=context,
                         output_tokens=c.output_tokens, catalog=cat)
    except (ImportError, NotImplementedError) as exc:
        return None, f"no time model ({exc.__class__.__name__})"
    except WseplanError as exc:
        return None, f"time model declined: {exc}"
    note = f"wseplan time ({phase}, batch {r.batch}, context {r.context}; bottleneck {r.bottleneck})"
    if kind == "latency_per_token_s":
        return (r.tpot_s or (1.0 / r.tokens_per_s_per_user if r.tokens_per_s_per_user else r.step_s)), note
    if kind == "tokens_per_s_per_user":
        return r.tokens_per_s_per_user, note
    if kind == "tokens_per_s":
        return r.tokens_per_s, note
    if kind == "ttft_s":
        return (r.ttft_s or r.step_s), note
    if kind == "step_time_s":
        return r.step_s, note
    if kind == "time_to_train_s":
        return (c.tokens / r.tokens_per_s if r.tokens_per_s else None), note
    return None, "no estimate for this kind"


def time_model_available(device_kind: str) -> bool:
    """Whether the time model for a device kind (wafer or gpu) is present in this installation."""
    from .devices import families

    return any(device_kind in f.kinds for f in families().values())


def _usd_per_mtok(c, cat, t, batch, context):
    from .compare import compare

    try:
        res = compare(c.model, [t.label], phase=c.phase or "decode", precision=c.precision, batch=batch,
                      context=context, catalog=cat)
    except (ImportError, NotImplementedError) as exc:
        return None, f"no cost model ({exc.__class__.__name__})"
    row = res.rows[0]
    return row.usd_per_mtok, "wseplan compare $/M tokens"


def _judge(c: Claim, claimed: float, unit: str, lower_better: bool, bounds: dict[str, float], estimate, est_note: str,
           device_kind, cat, capacity=None, errors=None) -> Verdict:
    def better(x: float, ref: float) -> bool:
        return x < ref if lower_better else x > ref

    def ratio(x: float, ref: float) -> float:
        return ref / x if lower_better else x / ref

    # every broken bound: (name, bound value, margin, unit of the bound, text)
    broken = [(n, b, ratio(claimed, b), unit, f"{n} bound is {_fmt(b, unit)}; the claim {_fmt(claimed, unit)} beats it")
              for n, b in bounds.items() if b is not None and b > 0 and better(claimed, b)
              and abs(ratio(claimed, b) - 1.0) > 1e-9]
    if capacity is not None:
        name, cap, need = capacity
        broken.append((name, cap, need / cap, "bytes",
                       f"{c.model} ({c.precision}) needs {_fmt(need, 'bytes')} but {c.target} holds "
                       f"{_fmt(cap, 'bytes')} ({name})"))
    if broken:
        # name the bound the claim breaks by the largest factor; mention the others
        broken.sort(key=lambda x: -x[2])
        name, b, m, bunit, text = broken[0]
        others = [f"{x[0]} ({x[2]:.3g}x)" for x in broken[1:]]
        extra = (" (one output token per pass over the weights, no speculative decoding)"
                 if name == "memory_bandwidth" and c.kind in ("latency_per_token_s", "tokens_per_s_per_user",
                                                               "tokens_per_s") else "")
        return Verdict(id=c.id, kind=c.kind, verdict="impossible", bound=name, bound_value=b, claimed_value=claimed,
                       estimate=estimate, margin=m, unit=unit, bound_unit=bunit,
                       reason=f"{text} by {m:.3g}x{extra}" + (f"; also breaks {', '.join(others)}" if others else ""))
    tight = None
    if bounds:
        tight = max(bounds.items(), key=lambda nb: ratio(claimed, nb[1]) if nb[1] else -math.inf)
    if estimate is None or not isinstance(estimate, (int, float)) or estimate <= 0:
        return Verdict(id=c.id, kind=c.kind, verdict="consistent", bound=None, claimed_value=claimed, estimate=None,
                       unit=unit, reason=f"no hard bound broken; {est_note or 'no estimate'}, so not judged optimistic")
    if c.kind in ("peak_flop_per_s", "bandwidth_bytes_per_s", "hop_latency_s"):
        return Verdict(id=c.id, kind=c.kind, verdict="consistent", claimed_value=claimed, estimate=estimate,
                       margin=ratio(claimed, estimate), unit=unit,
                       reason=f"within the {est_note} ({_fmt(estimate, unit)})")
    err, err_src = _error_for(c, device_kind, cat, errors or {})
    m = ratio(claimed, estimate)
    if err is None:
        return Verdict(id=c.id, kind=c.kind, verdict="consistent", claimed_value=claimed, estimate=estimate, margin=m,
                       unit=unit, reason=f"no hard bound broken; estimate {_fmt(estimate, unit)} from {est_note}; "
                                         f"{err_src}, so not judged optimistic")
    if m > 1.0 + err:
        return Verdict(id=c.id, kind=c.kind, verdict="optimistic", claimed_value=claimed, estimate=estimate, margin=m,
                       error_frac=err, unit=unit,
                       reason=f"{m:.3g}x better than wseplan's estimate {_fmt(estimate, unit)} ({est_note}); "
                              f"more than the validated error {err:.0%} ({err_src})")
    return Verdict(id=c.id, kind=c.kind, verdict="consistent", claimed_value=claimed, estimate=estimate, margin=m,
                   error_frac=err, unit=unit,
                   reason=(f"no better than wseplan's estimate {_fmt(estimate, unit)} ({est_note})" if m <= 1.0 else
                           f"{m:.3g}x better than wseplan's estimate {_fmt(estimate, unit)} ({est_note}), within the "
                           f"validated error {err:.0%} ({err_src})")
                          + (f"; tightest bound {tight[0]} {_fmt(tight[1], unit)}" if tight else ""))


def _error_for(c: Claim, device_kind, cat, errors: dict) -> tuple[float | None, str]:
    if c.kind == "power_w":
        t = _target(c, cat)
        if t.kind == "wafer":
            q = cat.system_for_wafer(t.key).power_w
        else:
            q = t.device.node_power_w
        lo = q.bound("low")
        return (q.si / lo - 1.0 if lo > 0 else 0.0), f"catalog power range of {q.source_ids[0]}"
    try:
        return validated_error_frac(c.kind, device_kind or "gpu", errors)
    except LookupError as exc:
        return None, f"no validated error for {exc.args[0]} predictions yet"


def _fmt(v: float, unit: str) -> str:
    from .report.markdown import fmt_quantity

    return fmt_quantity(float(v), unit)


def check(claims: str | Path | list[Claim], catalog=None) -> list[Verdict]:
    """Check every claim of a file (or a list of :class:`Claim`). The Python API behind ``wseplan check``."""
    from .catalog.load import load_catalog

    cat = catalog or load_catalog()
    items = load_claims(claims) if isinstance(claims, (str, Path)) else list(claims)
    errors = validated_errors(cat)
    return [check_claim(c, cat, errors=errors) for c in items]


def to_frame(verdicts: list[Verdict]):
    """Verdicts as a DataFrame (one row per claim)."""
    import pandas as pd

    return pd.DataFrame([v.to_record() for v in verdicts])
