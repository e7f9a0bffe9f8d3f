"""Cost through the planning chain: the same evaluation as ``time``, priced (``wseplan cost``, compare, sweep,
fleet and reports all use :func:`wseplan.pricing.cost_columns`, re-exported here).

A configuration that does not fit has no time and therefore no cost (NaN in arrays; the scalar API refuses it
with one line naming the shortfall). Inputs come from the dated prices catalog (:mod:`wseplan.analytic.cost`)
and the family's hardware figures (devices per system, power, rack space).

**Operating point.** A serving question (phase ``serve`` or ``decode``) without a batch is priced at the point a
buyer means: the cheapest point of the replica search (:func:`wseplan.operating.operating_point`, i.e.
:func:`wseplan.serving.serve` with ``tpot_limit_s = 1 / min speed``) that fits and gives every user at least the
stated per-user speed, or the catalog's documented default (``defaults.default_min_tokens_per_s_per_user``).
The record says so (``operating_point``, ``plan.sources.batch == "searched"``). A given batch is priced as given.

:func:`list_price_flags` (one note per side) flags a computed $/M tokens more than :data:`LIST_PRICE_FACTOR` off
a vendor's list price for the same model and system, with the likely reasons; :func:`list_price_notes` finds the
list price for a caller without a cost record (reports).
"""
from __future__ import annotations

import math
import re

import numpy as np

from .analytic import cost as C
from .analytic.cost.params import price_key_of
from .catalog.load import load_catalog
from .catalog.software import calibrated_name
from .errors import InputError
from .model_error import (architecture_class, category_for, engine_devices, load_model_error, roof_time_factor,
                          time_factor_range)
from .timing import require_time_model
from .plan import Setup, check_given_layout, default_sizes, evaluate, fit_fix, floor_s, floor_text, normalise_phase, record, setup
from .targets import parse_target
from .pricing import (HEADLINE, ArrayTimes, array_times, cost_columns, num_systems, params_for,  # noqa: F401
                      no_wafer_interruptions_note, total_params)
from .operating import operating_point
from .records import split_note
from .workload import resolve_model


def check_train_tokens(train_tokens) -> float | None:
    if train_tokens is None:
        return None
    if isinstance(train_tokens, bool) or not isinstance(train_tokens, (int, float)) or not train_tokens > 0 \
            or not math.isfinite(train_tokens):
        raise InputError(f"train_tokens: must be a positive number, got {train_tokens!r}")
    return float(train_tokens)


def _cluster_note(res) -> str:
    """What a wafer training cost counts beside the systems: MemoryX capex, and its cluster's CPU servers' power (the
    cost record's ``cluster_nodes`` and ``cluster_peak_power_w``)."""
    head = "MemoryX capex is estimated from DRAM/flash prices"
    n = res.metric("cluster_nodes")
    if not n:
        return head + "; the cluster's CPU servers (MemoryX, SwarmX) are not counted (the catalog gives no node figures)"
    return (head + f"; the cluster's {n:,.0f} CPU servers (MemoryX, SwarmX, input workers, activation servers) draw "
            f"{res.metric('cluster_peak_power_w') / n:,.0f} W each (an estimate) beside the systems; their capex beyond "
            "MemoryX's is in the network share")


def check_applies(phase: str, batch, train_tokens, min_tokens_per_s_per_user) -> None:
    """Refuse inputs a cost question does not use (one line naming the flag), as ``time`` and ``serve`` do: tokens of a
    training run outside training, and a minimum per-user speed beside a given batch (the speed chooses the batch
    of the operating point; with a batch given there is nothing to choose)."""
    if train_tokens is not None and phase != "train":
        raise InputError(f"--train-tokens: applies to --phase train (the phase is {phase}); drop it or give --phase train")
    if min_tokens_per_s_per_user is not None and batch is not None:
        raise InputError("--min-speed: chooses the batch of the operating point, so it applies only without --batch; "
                         "drop one of them")


def cost(model, target, *, phase: str = "serve", precision: str = "bf16", batch: int | None = None,
         context: int | None = None, output_tokens: int | None = None, train_tokens: float | None = None,
         overrides: dict[str, float] | None = None, prices_files: list[str] | tuple = (), uncertainty: int = 0,
         seed: int = 0, memoryx_option: str | None = None, catalog=None, prices=None, software: str | None = None,
         layout: dict | None = None, options: dict | None = None, min_tokens_per_s_per_user: float | None = None):
    """Cost of serving or training ``model`` on ``target`` (the API behind ``wseplan cost``).

    The configuration is the one :func:`wseplan.plan.plan` answers for the same arguments (``phase`` ``serve``,
    the default, is whole requests; ``prefill``/``decode`` price one side). A configuration that does not fit is
    refused with one line (no price for what cannot run). ``uncertainty`` Monte Carlo samples (seeded) give
    P10/P50/P90 of every metric; the tornado ranks the inputs by their swing of the headline metric.

    Serving (``serve``/``decode``) without ``batch``: the operating point (module docstring) at
    ``min_tokens_per_s_per_user`` (default: the catalog default); a target without a count gets the replica
    size the search chose. The record's ``operating_point`` says which point and why.
    """
    cat = catalog or load_catalog()
    prices = prices or C.load_prices(list(prices_files), catalog=cat)
    phase = normalise_phase(phase, output_tokens)
    if isinstance(uncertainty, bool) or not isinstance(uncertainty, int) or uncertainty < 0 or uncertainty == 1:
        raise InputError(f"--uncertainty: sample count must be 0 or an integer >= 2, got {uncertainty!r}")
    if uncertainty > C.MAX_UNCERTAINTY_SAMPLES:
        raise InputError(f"--uncertainty: {uncertainty:,} samples exceed the limit of {C.MAX_UNCERTAINTY_SAMPLES:,}; "
                         "use fewer samples")
    train_tokens = check_train_tokens(train_tokens)
    check_applies(phase, batch, train_tokens, min_tokens_per_s_per_user)
    opts = dict(options or {})
    kind = target.kind if hasattr(target, "kind") else parse_target(target, cat).kind
    if kind == "wafer" and (layout or {}).get("micro_batch") is not None:  # a pass's sequences: stream's option, as
        layout = dict(layout)  # `time --micro-batch` takes it (audit32c F5)
        opts["micro_batch"] = layout.pop("micro_batch")
    if memoryx_option is not None:
        if phase != "train" or kind != "wafer":
            raise InputError(f"--memoryx: the MemoryX weight store holds a wafer training run's weights and optimizer "
                             f"state (--phase train on a CS target); drop it for {'phase ' + phase if phase != 'train' else 'a GPU target'}")
        opts["memoryx_option"] = memoryx_option
    op = None
    if batch is None and phase in ("serve", "decode"):
        _, c0, o0, _ = default_sizes(cat, "serve", None, context, output_tokens,
                                     model=resolve_model(model, cat) if isinstance(model, str) else model)
        op = operating_point(model, target, precision=precision, software=software, input_tokens=c0, output_tokens=o0,
                             min_tokens_per_s_per_user=min_tokens_per_s_per_user, catalog=cat, prices=prices,
                             overrides=overrides, options=opts, layout=layout)
        if op is not None:
            target, batch, layout = op.target, op.batch, {**op.layout, **(layout or {})}
    s = setup(model, target, phase=phase, precision=precision, software=software, options=opts, catalog=cat)
    require_time_model(s)
    searched_context = context is None and op is not None  # the point was searched at the serving request's prompt
    b, c, o, src = default_sizes(cat, phase, batch, c0 if searched_context else context, output_tokens,
                                 model=s.query.model)
    if op is not None:
        src["batch"] = "searched"
    if searched_context:
        src["context"] = "default (the serving request's prompt)"
    cfg = {"batch": np.array([float(b)]), "context": np.array([float(c)]), "output_tokens": np.array([float(o)])}
    for k, v in check_given_layout(s, layout).items():  # (recompute by name, the family's rules: as plan takes it)
        cfg[k] = np.array([float(v)])
    arr = evaluate(s, cfg)
    rec = record(s, arr, 0, sources=src)
    if not rec.fits:
        mx = rec.details.get("memoryx") or {}
        if rec.binding == "memoryx" and mx:  # the weight store, not a device, is too small
            need, have = mx["required_bytes"], mx["capacity_bytes"]
            raise InputError(f"{rec.model} does not fit {rec.target} at batch {b}, context {c}: MemoryX option "
                             f"{mx['option']} holds {have:,.0f} B, weights and optimizer state need {need:,.0f} B "
                             f"({need - have:,.0f} B short); no cost for a configuration that cannot run — choose a "
                             "larger MemoryX option (--memoryx)")
        raise InputError(f"{rec.model} does not fit {rec.target} at batch {b}, context {c} ({rec.binding} binds, "
                         f"{rec.shortfall_bytes:,.0f} B short per device); no cost for a configuration that cannot run "
                         f"— {fit_fix(rec)}")
    res = price_record(s, arr, rec, prices, overrides=overrides, train_tokens=train_tokens, uncertainty=uncertainty,
                       seed=seed)
    if op is not None:
        res = res.model_copy(update={"operating_point": op.to_record(),
                                     "notes": [f"operating point: {op.label}", *res.notes]})
    elif phase == "decode" and context is None and src.get("context") == "default":
        prompt = int(cat.defaults.default_prompt_tokens.si)
        if c != prompt:  # the batch copied from the operating point's answer is priced at another context (audit35a L3)
            res = res.model_copy(update={"notes": [
                f"context: the decode default, {c:,} cached tokens; without --batch the operating point is searched "
                f"at the serving request's {prompt:,}-token prompt: give --context {prompt} to price that point", *res.notes]})
    return res


def _split_note(res, prompt: int, output: int):
    """:func:`wseplan.records.split_note` of a cost record, added to its notes."""
    m = {x.metric: x.value for x in res.metrics}
    note = split_note(prompt, output, m.get("input_usd_per_mtok"), m.get("output_usd_per_mtok"),
                      m.get("all_in_usd_per_mtok"))
    return res if note is None else res.model_copy(update={"notes": list(res.notes) + [note]})


def model_time_param(s: Setup, rec) -> C.Param | None:
    """The model error of the time prediction as a cost input: true time / predicted time, triangular in its logarithm
    with its mode at 1 (so nominal costs are the predicted ones) and its 10th and 90th percentiles at the ends of the
    80% prediction interval ``time`` prints (:func:`~wseplan.analytic.cost.uncertainty.triangle_through`; the held-out
    errors of its category, :mod:`wseplan.model_error`; an interval on one side of 1: a triangle over its 5th-95th
    percentiles); the Monte Carlo samples it with the prices. None without a model-error file."""
    q = s.query
    env = dict(params_b=total_params(q.model) / 1e9 if hasattr(q.model, "num_layers") else None,
               devices=engine_devices(q.phase, rec.num_devices, rec.num_replicas, *(
                   (rec.layout or {}).get(k) for k in ("tensor_parallel", "pipeline_parallel"))),
               hardware=q.target.key, software=calibrated_name(q.software), precision=q.precision,
               architecture=architecture_class(q.model))
    cat = category_for(q.target.kind, q.phase)
    b = time_factor_range(cat, level=None, **env)
    if b is None:
        return None
    lo, hi, note = b
    level = load_model_error().level
    tri = None
    if lo < 1.0 < hi:
        try:
            tri = C.triangle_through(math.log(lo), math.log(hi), p=(1.0 - level) / 2.0)
        except ValueError:  # an interval lopsided beyond any triangle with its mode at 1 (review37 L4): the 5-95% one
            tri = None
    if tri is not None:
        note += (f"; sampled triangular in the logarithm with its P{50 - 50 * level:g}-P{50 + 50 * level:g} at the "
                 f"{level:.0%} interval x{lo:.3g}-x{hi:.3g}")
        lo, hi = math.exp(tri[0]), math.exp(tri[1])
    else:
        lo, hi, note = time_factor_range(cat, level=0.9, **env)
    floor = floor_s(rec.details) if q.phase == "train" else None  # a training step's floors replace MFU's roof
    f = roof_time_factor(None if floor is not None else rec.model_flop_utilization_frac, floor_s=floor,
                         time_s=rec.step_s)
    clip = None
    if f is not None and lo < f:  # no sample may run the model's FLOPs above the peak, or stream faster than the links:
        # the samples below are held at the bound, the triangle kept (review37 H2: raising its low end moved its mass)
        roof = floor_text(rec.details) if floor is not None else "the compute roof (MFU 1)"
        clip, note = min(f, 1.0), note + f"; the fast end held at {roof} (x{f:.3g})"
    return C.Param(name="model_time_factor", value=1.0, low=min(lo, 1.0), high=max(hi, 1.0), log_scale=True,
                   clip_low=clip, source=["wseplan-model-error"], basis="estimate",
                   note=f"true time / predicted time of the {q.phase} times; {note}")


def price_record(s: Setup, arr: dict, rec, prices, *, overrides=None, train_tokens=None, uncertainty: int = 0,
                 seed: int = 0, note_other_hardware: bool = True):
    """The :class:`~wseplan.analytic.cost.CostResult` of row 0 of ``arr`` (a configuration that fits)."""
    phase = s.query.phase
    cat = s.query.catalog
    b, c, o = rec.batch, rec.context, rec.output_tokens or 0
    # (a --set capex prices hardware the catalogs do not: applied here with the rest below)
    params = params_for(s, prices, overrides={k: v for k, v in (overrides or {}).items() if k.endswith("capex_usd")})
    mt = model_time_param(s, rec)
    if mt is not None:
        params["model_time_factor"] = mt
    own = s.family.hardware(s.ctx).price_key
    params = C.apply_overrides(params, overrides or {}, hardware_key=own, catalog=cat)
    notes = list(rec.notes)
    notes.append(C.tco_scope_note(amortization_years=params["amortization_years"].value,
                                  cost_of_capital_frac_per_year=params["cost_of_capital_frac_per_year"].value))
    other = [k for k in overrides or {} if "." in k and price_key_of(k.split(".", 1)[0], cat) != own]
    if other and note_other_hardware:  # audit30a L9: a hardware-prefixed --set for other hardware prices nothing here
        # (compare prices several targets with one --set: each applies where its hardware is, review31 L4)
        notes.append(f"--set {', '.join(other)}: not applied (the target {rec.target} is {own} hardware; "
                     "HW.NAME=VALUE pins HW's input only)")
    tt = train_tokens
    if phase == "train" and tt is None:
        tt = params["train_tokens_per_param"].value * total_params(s.query.model)
        notes.append(f"training run of {tt:,.3g} tokens (train_tokens_per_param x parameters)")
    at = array_times(s, arr, train_tokens=tt)
    one = {k: (float(np.asarray(v).ravel()[0]) if v is not None and k != "phase" else v)
           for k, v in at.__dict__.items()}
    one["num_devices"] = int(one["num_devices"])
    times = C.TimeInputs(**{k: v for k, v in one.items() if v is None or k == "phase" or math.isfinite(v)})
    listed = None
    if s.query.target.kind == "wafer" and phase != "train":
        listed = service_price_for(s.query.model, s.query.target, prices, cat)
        if listed is None:
            notes.append("no public per-hour cloud price for CS-2/CS-3 was found; no rental alternative")
    hw = s.family.hardware(s.ctx)
    res = C.cost_from_times(params, times, model=rec.model, target=rec.target, hardware=rec.hardware,
                            price_key=hw.price_key, batch=b, context=c, output_tokens=o if phase == "serve" else None,
                            uncertainty=uncertainty, seed=seed, prices_date=prices.date,
                            service=listed[1] if listed else None, notes=notes, headline_metric=HEADLINE[phase],
                            plan=rec.to_record())
    if phase in ("decode", "prefill"):  # one side of serving priced: the record says which (audit31a L2), as compare's
        res = res.model_copy(update={"phase": phase})
    if s.family.name == "wafer_streaming":
        res = res.model_copy(update={"notes": list(res.notes) + [_cluster_note(res)]})
    if phase == "train":
        extra = [no_wafer_interruptions_note(s.query.catalog)] if s.query.target.kind == "wafer" else []
        return res.model_copy(update={"notes": list(res.notes) + extra + _long_run_note(res, params, s.query.target)})
    if phase == "serve" and b > 1 and any(m.metric == "input_usd_per_mtok" and m.value == 0.0 for m in res.metrics):
        res = res.model_copy(update={"notes": list(res.notes) + [
            "input $/M is 0: the prompts' prefill chunks ride in pipeline slots the decode rounds leave idle, so they "
            "add no time and the input side is charged none of it (the input/output split follows the engine's "
            "time; all-in $/M carries the replica's whole cost, prompts included)"]})
    if phase == "serve":
        res = _split_note(res, c, o)
    if phase in ("serve", "decode"):
        if any(m.metric == "rental_all_in_usd_per_mtok" for m in res.metrics):  # (audit33a M1; review33 L5: decode)
            res = res.model_copy(update={"notes": list(res.notes) + [
                "rental $/M: the same devices rented on demand at the prices catalog's cloud_usd_per_device_hour and "
                "paid only while busy; the owned $/M pay every hour of the year (utilization_frac "
                f"{params['utilization_frac'].value:.0%}); capacity reserved all year costs the rental $/M divided by "
                "the utilisation; compare all in with rental all in"]})
    if listed is None:
        return res
    computed = {k: res.metric(k) for k in ("input_usd_per_mtok", "output_usd_per_mtok")
                if any(m.metric == k for m in res.metrics)}
    acc = arr.get("time.accepted_tokens_per_step")
    flags = list_price_flags(computed, listed, batch=b, utilization_frac=params["utilization_frac"].value,
                             software=s.query.software.name, precision=s.query.precision,
                             speculative=bool(acc is not None and np.nanmax(acc) > 1.0))
    a = {m.metric: m.value for m in res.metrics}.get("all_in_usd_per_mtok")
    if phase == "serve" and a is not None and math.isfinite(a) and a > 0 and o:
        # the whole request against what the list prices charge for it leads (audit33a M3: one side's marginal $/M
        # against its list price said 12.9x where the request costs 3.8x; the report compares requests)
        flags = [request_list_price(a, c, o, listed)[1]] + flags
    return res.model_copy(update={"notes": list(res.notes) + flags}) if flags else res


def _long_run_note(res, params, target) -> list[str]:
    """A note where a training run outlasts the hardware's amortisation period (its yearly TCO would then be paid for
    longer than the hardware is written off over: no practical plan), naming the fix; else nothing."""
    run_s = res.metric("run_s") if any(m.metric == "run_s" for m in res.metrics) else None
    years = params["amortization_years"].value
    year_s = C.HOURS_PER_YEAR * 3600.0  # the year the TCO writes the hardware off over
    if run_s is None or not math.isfinite(run_s) or run_s <= years * year_s:
        return []
    base = re.sub(r"x\d+$", "", target.text)
    fix = (f"give a larger count (--target {base}xN)" if target.count
           else f"give a count (--target {base}xN): without one the fewest systems that hold the model are priced")
    return [f"the run takes {run_s / year_s:,.3g} years, longer than the {years:g}-year amortisation: not a "
            f"practical plan; {fix}, or fewer --train-tokens"]


# =============================================================================================
# Vendor list prices
# =============================================================================================
#: a computed $/M tokens more than this factor above or below a vendor's list price is flagged
LIST_PRICE_FACTOR = 3.0
_SIXTEEN_BIT = ("fp32", "tf32", "bf16", "fp16")


def service_price_for(model, target, prices, catalog) -> tuple[str, C.ServicePrice] | None:
    """(key, entry) of the vendor's per-token list price for ``model`` on ``target``'s system in the prices
    catalog (``service_prices``; matched by the model's name, aliases or catalog key), or None."""
    if target.kind != "wafer":
        return None
    names = {model.name.lower(), *[a.lower() for a in getattr(model, "aliases", [])]}
    names |= {k for k, v in catalog.models.items() if v is model or v.name == model.name}
    return next(((k, sp) for k, sp in prices.service_prices.items()
                 if sp.hardware == target.device.system and k in names), None)


def request_list_price(all_in_usd_per_mtok: float, prompt_tokens: int, output_tokens: int,
                       listed: tuple[str, C.ServicePrice]) -> tuple[float, str]:
    """A request of ``prompt_tokens`` and ``output_tokens`` priced all-in [$ per million output tokens] against what the
    vendor's list prices charge for it, ``output + input x prompt / output`` [$ per million output tokens] at the list
    prices: ``(ratio, sentence)``, the ratio computed / list. ``cost``, ``compare`` and reports call this one function."""
    key, sp = listed
    bill = sp.output_usd_per_mtok.si + sp.input_usd_per_mtok.si * prompt_tokens / output_tokens
    ratio = all_in_usd_per_mtok / bill
    src = ", ".join(dict.fromkeys([*sp.output_usd_per_mtok.source_ids, *sp.input_usd_per_mtok.source_ids]))
    off = not 1.0 / LIST_PRICE_FACTOR <= ratio <= LIST_PRICE_FACTOR
    return ratio, (f"list price: a request of {prompt_tokens:,} prompt and {output_tokens:,} answer tokens costs "
                   f"${_plain(all_in_usd_per_mtok, 4)} per million output tokens all-in here, "
                   f"{_plain(ratio if ratio >= 1 else 1 / ratio, 3)}x {'above' if ratio >= 1 else 'below'} the "
                   f"${_plain(bill, 4)} "
                   f"the vendor's list prices charge for it (service_prices.{key}, {src})"
                   + (f", more than {LIST_PRICE_FACTOR:g}x off." if off else "."))


def _plain(v: float, sig: int) -> str:
    """``v`` to ``sig`` significant digits without an exponent (``2,780``, ``5.4``; review33 L7: ``2.78e+03``)."""
    if abs(v) >= 10 ** (sig - 1):
        return f"{v:,.0f}"
    return f"{v:.{sig}g}"


def list_price_notes(model, target, computed: dict[str, float], *, batch: int, precision: str, prices,
                     catalog, software: str | None = None, utilization_frac: float | None = None) -> list[str]:
    """:func:`list_price_flags` for ``model`` on ``target`` (names or resolved objects) at ``batch``: finds the list
    price, the software profile and whether it decodes speculatively (for callers without a cost record, such as
    reports). ``utilization_frac`` defaults to the prices catalog's."""
    s = setup(model, target, phase="serve", precision=precision, software=software, catalog=catalog)
    listed = service_price_for(s.query.model, s.query.target, prices, catalog)
    if listed is None:
        return []
    util = prices.site.utilization_frac.si if utilization_frac is None else utilization_frac
    spec = getattr(s.ctx, "spec", None) is not None
    return list_price_flags(computed, listed, batch=batch, utilization_frac=util, software=s.query.software.name,
                            precision=precision, speculative=spec)


def list_price_flags(computed: dict[str, float], listed: tuple[str, C.ServicePrice] | None, *, batch: int,
                     utilization_frac: float, software: str, precision: str, speculative: bool,
                     factor: float = LIST_PRICE_FACTOR) -> list[str]:
    """One note per side (``input_usd_per_mtok``, ``output_usd_per_mtok`` in ``computed``) whose computed $/M tokens
    lies more than ``factor`` times above the high end or below the low end of the vendor's list price, with the
    likely reasons for a gap in that direction. ``wseplan cost``, ``compare`` and reports call this one function."""
    if listed is None:
        return []
    key, sp = listed
    out = []
    for side, q in (("input", sp.input_usd_per_mtok), ("output", sp.output_usd_per_mtok)):
        v = computed.get(f"{side}_usd_per_mtok")
        if v is None or not math.isfinite(v) or v <= 0:
            continue
        lo, hi = q.bound("low"), q.bound("high")
        if lo <= 0 or hi <= 0:
            continue
        high, low = v / hi, lo / v  # how many times above the high end / below the low end
        if max(high, low) <= factor * (1.0 + 1e-12):
            continue
        ratio = max(high, low)
        high = high > low
        listed_text = f"${q.si:.3g}" + (f" (${lo:.3g}-${hi:.3g})" if hi > lo else "")
        if high:
            reasons = [f"batch and utilisation: computed at {batch} concurrent request(s) per replica and "
                       f"{utilization_frac:.0%} busy hours; a service batches many users and keeps its systems busier",
                       "the list price may be subsidised (below cost, e.g. to win market share)"]
            if not speculative:  # drafting lowers the computed cost: only its absence explains a high one
                reasons.append(f"no speculative decoding in this computation ({software}); a service may use it")
            if precision in _SIXTEEN_BIT:
                reasons.append(f"precision: computed at {precision}; a service may run lower precision (fp8, int8)")
        else:
            reasons = ["the list price carries the vendor's margin (sales, support, idle capacity, profit)",
                       f"batch and utilisation: computed at {batch} concurrent request(s) per replica and "
                       f"{utilization_frac:.0%} busy hours; the vendor's real load may be lower"]
            if speculative:
                reasons.append(f"speculative decoding is on in this computation ({software}); the vendor may not "
                               "gain as many tokens per pass")
            if precision not in _SIXTEEN_BIT:
                reasons.append(f"precision: computed at {precision}; the vendor may serve 16-bit weights")
        # the ratio is to the nearer end of the list price's range (audit29b L1: "6.06x above $0.6" was 7.27 / 1.2)
        end = (f"the {'top' if high else 'bottom'} of the vendor's list-price range ${lo:.3g}-${hi:.3g}/M tokens "
               f"(list price ${q.si:.3g})" if hi > lo else f"the vendor's list price {listed_text}/M tokens")
        out.append(f"list price: computed {side} ${v:.3g}/M tokens is {ratio:.3g}x "
                   f"{'above' if high else 'below'} {end} "
                   f"(service_prices.{key}, {', '.join(q.source_ids)}); likely reasons: {'; '.join(reasons)}")
    return out
