"""Judging one claim: hard bounds, wseplan's estimate and the held-out error band (see :mod:`wseplan.claims`)."""
from __future__ import annotations

import math
from types import SimpleNamespace
from pathlib import Path

from ..catalog.load import load_catalog
from ..costing import cost
from ..devices import families
from ..errors import InputError, WseplanError
from ..plan import plan
from ..plan_notes import no_time_model
from ..pricing import job_devices, run_goodput
from ..report.markdown import fmt_quantity
from ..model_error import load_model_error, speed_bounds
from .physics import (QUANTITY_TEXT, Physical, bandwidth_bound, fit_bound, hop_s, normalise, peak,
                      quantity_bounds, target_of, workload)
from .schema import KIND_UNIT, Claim, Verdict, claimed_si, load_claims, need

#: kinds whose "estimate" is the catalog figure itself (judged by bounds only)
_CATALOG_KINDS = ("peak_flop_per_s", "bandwidth_bytes_per_s", "hop_latency_s")


def _fmt(v: float, unit: str) -> str:
    return fmt_quantity(float(v), unit)


# --------------------------------------------------------------------------------------------- error bands
def validated_errors(catalog=None) -> dict[str, tuple[float, str]]:
    """The held-out error of each category of prediction (``gpu-train``, ``gpu-infer``, ``wse-infer`` ...):
    category -> (error [fraction], a sentence naming where it comes from): how much faster than predicted the truth
    may be at the upper end of the prediction interval of :mod:`wseplan.model_error` (the leave-one-source-out
    residuals of ``catalogs/calibration/model_error.yaml``, the same interval plan records carry), inside the
    validated envelope; used for estimates that are not a plan record (a plan record carries its own interval). A
    category without validated rows is absent."""
    f = load_model_error()
    if f is None:
        return {}
    return {k: _speed_band(speed_bounds(k)) for k in sorted(f.categories)}


def _speed_band(bounds) -> tuple[float, str]:
    """(error fraction, note) from ``(low, high, note)`` bounds of true speed / predicted speed."""
    _, hi, note = bounds
    return max(hi - 1.0, 0.0), note


def record_band(r) -> tuple[float, str] | None:
    """(error fraction, note) of a plan record's own prediction interval (its ``interval_*`` fields, widened outside
    the validated envelope): how much faster than predicted the truth may be; None when the record has none."""
    if r.interval_low is None or r.interval_high is None or not r.interval_metric:
        return None
    v = getattr(r, r.interval_metric, None)
    if not v:
        return None
    hi = v / r.interval_low if r.interval_metric == "step_s" else r.interval_high / v  # a time's low end is the fast one
    return max(hi - 1.0, 0.0), r.interval_note or ""


def category(quantity: str, device_kind: str | None) -> str:
    """The validation category a claim's quantity is judged by: training claims by training rows."""
    dev = "wse" if device_kind == "wafer" else "gpu"
    train = quantity in ("train_tokens_per_s", "step_time_s", "time_to_train_s", "train")
    return f"{dev}-{'train' if train else 'infer'}"


def validated_error_frac(quantity: str, device_kind: str, errors: dict) -> tuple[float, str]:
    """(error fraction, its source) for this kind of claim; LookupError when none is validated."""
    cat_name = category(quantity, device_kind)
    if cat_name in errors:
        return errors[cat_name]
    raise LookupError(cat_name)


def time_model_available(device_kind: str) -> bool:
    """Whether the time model for a device kind (wafer or gpu) is present in this installation."""
    return any(device_kind in f.kinds for f in families().values())


# --------------------------------------------------------------------------------------------- estimates
def _plan(c: Claim, cat, t, phase: str, batch: int, context: int | None):
    """The plan record of the claim's run: the best layout that fits (searched when the claim gives none); wafer
    training takes the smallest MemoryX option that holds the weights and optimizer state (the plan's default)."""
    opts = c.spec_options() if phase != "train" else {}
    return plan(c.model, t, phase=phase, precision=c.precision, batch=batch, context=context, software=c.software,
                options=opts, catalog=cat)


def _layout_text(r) -> str:
    lay = {k: v for k, v in (r.layout or {}).items() if k in ("tensor_parallel", "pipeline_parallel", "data_parallel",
                                                             "zero_stage", "recompute", "num_wafers", "num_systems")}
    short = {"tensor_parallel": "tp", "pipeline_parallel": "pp", "data_parallel": "dp", "zero_stage": "zero",
             "num_wafers": "wafers", "num_systems": "systems"}
    text = ", ".join(f"{short.get(k, k)} {v}" for k, v in lay.items())
    mx = (r.details or {}).get("memoryx")
    return text + (f", MemoryX {mx['option']}" if mx and mx.get("option") else "")


def estimate(c: Claim, cat, t, p: Physical) -> tuple[float | None, str]:
    """wseplan's estimate of the claim's physical quantity, or (None, why) when no model covers it."""
    est, note, _ = _estimate(c, cat, t, p)
    return est, note


def _estimate(c: Claim, cat, t, p: Physical):
    """:func:`estimate` and the held-out band of the plan record behind it (None when it is not a plan)."""
    kind = c.kind
    if kind == "power_w":
        if t.kind == "wafer":
            q = cat.system_for_wafer(t.key).power_w
            return q.si * t.count, (f"catalog CS system power x {t.count} (range {_fmt(q.bound('low'), 'W')} to "
                                    f"{_fmt(q.bound('high'), 'W')} each)"), None
        g = t.device
        per_node = int(g.gpus_per_node.si)
        nodes, rest = divmod(int(t.count), per_node)  # whole nodes; GPUs beyond them draw their board power (TDP)
        parts = ([f"catalog node power x {nodes} node(s)"] if nodes else []) + (
            [f"catalog GPU board power (TDP) x {rest}"] if rest else [])
        return g.node_power_w.si * nodes + g.tdp_w.si * rest, " + ".join(parts), None
    if kind == "usd_per_mtok":
        try:
            # no batch stated: the operating point a buyer means (the cheapest meeting the default speed per user);
            # a price per token is a vendor's per-side price, so the side the claim's phase names is compared
            # a decode price at a stated batch reads the serving request's prompt when the claim gives no context (as
            # the operating point without a batch does), not the decode default of a long KV length
            ctx = c.context
            if ctx is None and c.batch is not None and (c.phase or "decode") in ("decode", "serve"):
                ctx = int(cat.defaults.default_prompt_tokens.si)
            res = cost(c.model, t.label, phase=c.phase or "decode", precision=c.precision, batch=c.batch,
                       context=ctx, catalog=cat)
        except WseplanError as exc:
            return None, f"cost model declined: {exc}", None
        side = {"train": "usd_per_mtok_trained", "prefill": "input_usd_per_mtok"}.get(c.phase or "decode",
                                                                                     "output_usd_per_mtok")
        how = f"batch {c.batch}" if c.batch else f"its operating point, batch {res.batch} (searched)"
        # the price per token moves with the time model's throughput: the interval of the plan behind it (widened
        # outside the validated envelope), not the raw category band
        plan_rec = getattr(res, "plan", None)
        band = record_band(SimpleNamespace(**plan_rec)) if isinstance(plan_rec, dict) else None
        return res.metric(side), f"wseplan cost {side} at {how}", band
    if p.quantity not in ("train_tokens_per_s", "tpot_s", "ttft_s"):
        return None, "no batch stated, so no estimate to compare with", None
    if p.training and c.batch is None:
        return None, "no batch stated, so no estimate to compare with", None
    if not time_model_available(t.kind):
        return None, f"no {t.kind} time model in this version", None
    batch = c.batch or 1
    try:
        r = _plan(c, cat, t, p.phase, batch, c.context)
    except WseplanError as exc:
        return None, f"time model declined: {exc}", None
    if r.fits and r.step_s is None:  # audit31b M4: it fits; its family has no time model for it
        return None, f"{no_time_model(r.family, r.model)}: nothing to time; judged on the hard bounds only", None
    if not r.fits or r.step_s is None:
        return None, (f"no layout of {t.label} fits {r.model} at batch {batch} ({r.binding} binds), so nothing to "
                      "time; judged on the hard bounds only"), None
    note = (f"wseplan plan ({p.phase}, batch {r.batch}, context {r.context}, software {r.software}; "
            f"{_layout_text(r) or 'layout ' + r.target}; bottleneck {r.bottleneck})")
    band = record_band(r)
    if p.quantity == "train_tokens_per_s":
        return r.batch * r.context / r.step_s, note, band
    if kind == "tokens_per_s" and r.tokens_per_s:
        # a throughput claim is the whole target's, every replica's (as `time` states tokens_per_s): restated per
        # token of the claim's batch (decode) or prompt tokens (prefill), as normalise restates the claim
        return p.scale / r.tokens_per_s, note, band
    if p.quantity == "tpot_s":
        return r.tpot_s or r.step_s, note, band
    return r.ttft_s or r.step_s, note, band


# --------------------------------------------------------------------------------------------- checking
def check_claim(c: Claim, catalog=None, *, errors: dict | None = None) -> Verdict:
    """Judge one claim (see :mod:`wseplan.claims`). ``errors`` as from :func:`validated_errors` (read when not
    given): the category errors for estimates that are not a plan record (a plan record carries its own interval)."""
    cat = catalog or load_catalog()
    if errors is None:
        errors = validated_errors(cat)
    claimed = claimed_si(c)
    unit, lower_better = KIND_UNIT[c.kind]
    kind = c.kind
    t = target_of(c, cat) if c.target is not None else None

    def plain(bounds, est, note):
        p = Physical(quantity=kind, value=claimed, unit=unit, lower_better=lower_better, phase=c.phase or "decode")
        return _judge(c, p, bounds, est, note, t, cat, None, errors)

    if kind == "peak_flop_per_s":
        need(c, "target")
        scope = c.scope or "dense"
        if scope not in ("dense", "sparse"):
            raise InputError(f"claim {c.id}: scope for a peak must be dense or sparse, got {scope!r}")
        b = peak(t, c.precision, scope)
        return plain({"compute_peak": b}, b, f"{scope} {c.precision} peak of {t.label}")
    if kind == "bandwidth_bytes_per_s":
        need(c, "target", "scope")
        bounds = bandwidth_bound(c, t, cat)
        return plain(bounds, next(iter(bounds.values())), f"{c.scope} bandwidth of {t.label}")
    if kind == "hop_latency_s":
        need(c, "target")
        if t.kind != "wafer":
            raise InputError(f"claim {c.id}: hop_latency_s applies to a wafer target, got {c.target!r}")
        return plain({"hop_latency_floor": hop_s(t)}, t.device.hop_latency_cycles.si / t.device.clock_hz.si,
                     "catalog hop latency / clock")
    if kind == "fits":
        need(c, "model", "target")
        return _check_fits(c, cat, t, claimed)
    if kind == "memory_bytes":
        need(c, "model")
        return _check_memory(c, cat, t, claimed, unit)
    if kind == "power_w":
        need(c, "target")
        est, note, _ = _estimate(c, cat, t, Physical(kind, claimed, unit, lower_better, "decode"))
        return plain({}, est, note)
    need(c, "model", "target")
    p = normalise(c, claimed)
    full = c.context or 1  # the KV length the memory must hold at the end
    if kind == "generation_time_s" and c.output_tokens:
        # N tokens from a C-token prompt: the KV cache grows to C + N, and the N steps take (for a step linear in the
        # KV length) N steps at the mean length C + N/2: judged as decode at that length, held at C + N
        full = (c.context or 1) + c.output_tokens
        c = c.model_copy(update={"context": (c.context or 1) + c.output_tokens // 2})
    bounds, spec_note = quantity_bounds(c, cat, t, p)
    fb = fit_bound(c, cat, p.phase, c.batch or 1, max(full, c.context or 1), t)
    capacity = None if fb.fits else fb
    est, note, band = _estimate(c, cat, t, p)
    if kind == "time_to_train_s" and t.kind == "gpu" and isinstance(est, float):
        # a run's wall time holds its interruptions (`time --train-tokens`): the estimate of the wall rate is the step
        # rate x goodput; the hard bounds stay on tokens / time (a run may meet no interruption at all)
        r = _plan(c, cat, t, p.phase, c.batch or 1, c.context)  # interruptions strike the GPUs its layout uses
        g = float(run_goodput("gpu", cat, job_devices(r.layout or {}, t.count)))
        est, note = est * g, f"{note}; x goodput {g:.4g}: interruptions, as time --train-tokens"
    return _judge(c, p, bounds, est, note, t, cat, capacity, errors, spec_note, band)


def _option_text(fb, t, cat) -> str:
    if fb.option is None:
        return ""
    cap = cat.memoryx[cat.system_for_wafer(t.key).memoryx].capacity_options_bytes[fb.option].si
    return f"; judged against the largest MemoryX option in the catalog, {fb.option} ({_fmt(cap, 'bytes')})"


def _check_fits(c: Claim, cat, t, claimed: bool) -> Verdict:
    phase = c.phase or "decode"
    fb = fit_bound(c, cat, phase, c.batch or 1, c.context or 1, t)
    r = fb.record
    opt = _option_text(fb, t, cat)
    if claimed and not fb.fits:
        return Verdict(id=c.id, kind=c.kind, verdict="impossible", bound=fb.bound, bound_value=fb.capacity_bytes,
                       claimed_value=claimed, estimate=False, margin=fb.need_bytes / fb.capacity_bytes, unit="",
                       bound_unit="bytes",
                       reason=f"{r.model} ({c.precision}, {phase}) needs {_fmt(fb.need_bytes, 'bytes')}; "
                              f"{t.label} holds {_fmt(fb.capacity_bytes, 'bytes')} ({fb.bound}), "
                              f"{fb.need_bytes / fb.capacity_bytes:.3g}x over{opt}")
    return Verdict(id=c.id, kind=c.kind, verdict="consistent", claimed_value=claimed, estimate=fb.fits, unit="",
                   reason=f"wseplan fit says {'it fits' if fb.fits else 'it does not fit'} ({r.binding} binds, "
                          f"{r.num_devices} device(s)){opt}")


def _check_memory(c: Claim, cat, t, claimed: float, unit: str) -> Verdict:
    phase = c.phase or "decode"
    tt = t or target_of(c.model_copy(update={"target": "h100-sxm"}), cat)
    fb = fit_bound(c, cat, phase, c.batch or 1, c.context or 1, tt)
    floor = workload(c, cat, phase, c.batch or 1, c.context or 1).total_weight_bytes
    est, note = fb.record.total_bytes, f"wseplan fit total ({phase}, batch {c.batch or 1}, context {c.context or 1})"
    if claimed < floor:  # the weights alone must be stored somewhere
        cap_name = "sram_capacity" if tt.kind == "wafer" else "hbm_capacity"
        return Verdict(id=c.id, kind=c.kind, verdict="impossible", bound=cap_name, bound_value=floor,
                       claimed_value=claimed, estimate=est, margin=floor / claimed, unit=unit, bound_unit="bytes",
                       reason=f"the weights alone take {_fmt(floor, 'bytes')} at {c.precision}; the claim is "
                              f"{floor / claimed:.3g}x smaller")
    p = Physical(quantity=c.kind, value=claimed, unit=unit, lower_better=True, phase=phase)
    return _judge(c, p, {}, est, note, tt, cat, None, {})


def _judge(c: Claim, p: Physical, bounds: dict[str, float], est, note: str, t, cat, capacity=None, errors=None,
           spec_note: str = "", band=None) -> Verdict:
    """The verdict, computed on the physical quantity ``p`` and shown in the claim's own unit. ``band``: the
    (error, note) of the plan record behind the estimate (its own prediction interval); else the category's."""
    claim_unit, _ = KIND_UNIT[c.kind]
    show = p.to_claim  # quantity -> the claim's unit
    claimed_shown = claimed_si(c)

    def better(x: float, ref: float) -> bool:
        return x < ref if p.lower_better else x > ref

    def ratio(x: float, ref: float) -> float:
        return ref / x if p.lower_better else x / ref

    restated = f"; judged as {QUANTITY_TEXT[p.quantity]}, {_fmt(p.value, p.unit)}" if p.restated else ""
    broken = [(n, b, ratio(p.value, b), claim_unit,
               f"{n} bound is {_fmt(show(b), claim_unit)}; the claim {_fmt(claimed_shown, claim_unit)} beats it")
              for n, b in bounds.items() if b is not None and b > 0 and better(p.value, b)
              and abs(ratio(p.value, b) - 1.0) > 1e-9]
    if capacity is not None:
        opt = _option_text(capacity, t, cat)
        broken.append((capacity.bound, capacity.capacity_bytes, capacity.need_bytes / capacity.capacity_bytes, "bytes",
                       f"{c.model} ({c.precision}) needs {_fmt(capacity.need_bytes, 'bytes')} but {c.target} holds "
                       f"{_fmt(capacity.capacity_bytes, 'bytes')} ({capacity.bound}{opt})"))
    est_shown = show(est) if isinstance(est, (int, float)) and not isinstance(est, bool) and est > 0 else None
    if broken:
        # name the bound the claim breaks by the largest factor; mention the others
        broken.sort(key=lambda x: -x[2])
        name, b, m, bunit, text = broken[0]
        others = [f"{x[0]} ({x[2]:.3g}x)" for x in broken[1:]]
        extra = f"; {spec_note}" if name in ("memory_bandwidth", "hop_latency_floor") and spec_note else ""
        shown_b = b if bunit == "bytes" else show(b)
        return Verdict(id=c.id, kind=c.kind, verdict="impossible", bound=name, bound_value=shown_b,
                       claimed_value=claimed_shown, estimate=est_shown, margin=m, unit=claim_unit, bound_unit=bunit,
                       quantity=p.quantity, reason=f"{text} by {m:.3g}x{restated}{extra}"
                       + (f"; also breaks {', '.join(others)}" if others else ""))
    tight = None
    if bounds:
        tight = max(bounds.items(), key=lambda nb: ratio(p.value, nb[1]) if nb[1] else -math.inf)
    tight_text = f"; tightest bound {tight[0]} {_fmt(show(tight[1]), claim_unit)}" if tight else ""
    common = dict(id=c.id, kind=c.kind, claimed_value=claimed_shown, unit=claim_unit, quantity=p.quantity)
    if est_shown is None:
        return Verdict(**common, verdict="consistent", estimate=None,
                       reason=f"no hard bound broken; {note or 'no estimate'}, so not judged optimistic")
    if c.kind in _CATALOG_KINDS:
        return Verdict(**common, verdict="consistent", estimate=est_shown, margin=ratio(p.value, est),
                       reason=f"within the {note} ({_fmt(est_shown, claim_unit)})")
    err, err_src = band if band is not None else _error_for(c, p, t, cat, errors or {})
    m = ratio(p.value, est)
    est_text = f"wseplan's estimate {_fmt(est_shown, claim_unit)} ({note})"
    if err is None:
        return Verdict(**common, verdict="consistent", estimate=est_shown, margin=m,
                       reason=f"no hard bound broken; estimate {_fmt(est_shown, claim_unit)} from {note}; "
                              f"{err_src}, so not judged optimistic{restated}")
    if m > 1.0 + err:
        return Verdict(**common, verdict="optimistic", estimate=est_shown, margin=m, error_frac=err,
                       reason=f"{m:.3g}x better than {est_text}; beyond the estimate's tolerance +{100 * err:.3g}% "
                              f"({err_src}){restated}{tight_text}")
    return Verdict(**common, verdict="consistent", estimate=est_shown, margin=m, error_frac=err,
                   reason=(f"no better than {est_text}" if m <= 1.0 else
                           f"{m:.3g}x better than {est_text}, within the estimate's tolerance +{100 * err:.3g}% ({err_src})")
                   + restated + tight_text)


def _error_for(c: Claim, p: Physical, t, cat, errors: dict) -> tuple[float | None, str]:
    if c.kind == "power_w":
        q = cat.system_for_wafer(t.key).power_w if t.kind == "wafer" else t.device.node_power_w
        lo = q.bound("low")
        return (q.si / lo - 1.0 if lo > 0 else 0.0), f"catalog power range of {q.source_ids[0]}"
    try:
        return validated_error_frac(p.quantity, t.kind if t is not None else "gpu", errors)
    except LookupError as exc:
        return None, f"no validated error for {exc.args[0]} predictions yet"


def check(claims, catalog=None) -> list[Verdict]:
    """Check every claim of a file (or a list of :class:`Claim`). The Python API behind ``wseplan check``."""
    cat = catalog or load_catalog()
    items = load_claims(claims) if isinstance(claims, (str, Path)) else list(claims)
    errors = validated_errors(cat)
    out = []
    for c in items:
        try:
            out.append(check_claim(c, cat, errors=errors))
        except WseplanError as exc:  # an input the claim's models refuse: say which claim, as the schema errors do
            msg = str(exc)
            raise type(exc)(msg if msg.startswith(f"claim {c.id}:") else f"claim {c.id}: {msg}") from None
    return out


def to_frame(verdicts: list[Verdict]):
    """Verdicts as a DataFrame (one row per claim)."""
    import pandas as pd

    return pd.DataFrame([v.to_record() for v in verdicts])
