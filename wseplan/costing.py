"""Cost through the planning chain: the same evaluation as ``time``, priced (``wseplan cost``, compare, sweep,
fleet and reports all use :func:`cost_columns`).

A configuration that does not fit has no time and therefore no cost (NaN in arrays; the scalar API refuses it
with one line naming the shortfall). Inputs come from the dated prices catalog (:mod:`wseplan.analytic.cost`)
and the family's hardware figures (devices per system, power, rack space); the pure functions of
:mod:`wseplan.analytic.cost` do the arithmetic, vectorized over configurations, Monte Carlo samples or tornado
cases alike.

Serving cost splits the deployment's busy time between input and output tokens by what the engine spends on
each: with static batches the prefill of the batch versus its decode steps; with in-flight batching the decode
round alone versus the extra time the prompt chunks add to it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .analytic import cost as C
from .catalog.load import load_catalog
from .errors import InputError
from .plan import Setup, default_sizes, evaluate, normalise_phase, record, setup
from .workload import total_params as transformer_params

#: the headline metric of each phase
HEADLINE = {"train": "usd_per_run", "prefill": "input_usd_per_mtok", "decode": "output_usd_per_mtok",
            "serve": "output_usd_per_mtok"}


@dataclass(frozen=True)
class ArrayTimes:
    """Time inputs of the cost functions, as arrays over configurations (see :class:`~wseplan.analytic.cost.TimeInputs`)."""

    phase: str
    num_devices: np.ndarray
    num_systems: np.ndarray
    prefill_s: np.ndarray | None = None
    prompt_tokens: np.ndarray | None = None
    decode_step_s: np.ndarray | None = None
    output_tokens_per_step: np.ndarray | None = None
    step_s: np.ndarray | None = None
    tokens_per_step: np.ndarray | None = None
    train_tokens: np.ndarray | float | None = None


def params_for(s: Setup, prices, *, overrides: dict | None = None) -> dict:
    """The named cost inputs of the setup's target (site, capex, network share, power, rack space, and MemoryX for
    wafer training): :func:`wseplan.analytic.cost.cost_params` for the built-in kinds, the family's
    :class:`~wseplan.devices.base.Hardware` figures for plug-in kinds."""
    hw = s.family.hardware(s.ctx)
    q = s.query
    stream = s.family.name == "wafer_streaming"
    if q.target.kind in ("gpu", "wafer"):
        out = C.cost_params(prices, q.catalog, q.target, include_memoryx=stream,
                            memoryx_option=getattr(s.ctx, "option", None) if stream else None)
    else:
        out = {name: C.Param.from_quantity(name, getattr(prices.site, name)) for name in C.SitePrices.model_fields}
        hp = prices.hardware.get(hw.price_key)
        if hp is None:
            raise InputError(f"prices: no capex for {hw.price_key!r} ({hw.system_name}); add hardware.{hw.price_key}."
                             "capex_usd and network_frac to a prices file (--prices FILE)")
        for name, value in (("peak_power_w", hw.system_power_w), ("rack_units", hw.system_rack_units)):
            out[name] = C.Param(name=name, value=value, low=value, high=value, source=["catalog"], basis="estimate",
                                note=f"{hw.system_name}: from its catalog entry")
        out["capex_usd"] = C.Param.from_quantity("capex_usd", hp.capex_usd)
        out["network_frac"] = C.Param.from_quantity("network_frac", hp.network_frac)
    return C.apply_overrides(out, overrides or {}, hardware_key=hw.price_key)


def num_systems(s: Setup, num_devices) -> np.ndarray:
    """Whole systems (CS-3s, GPU nodes) a device count occupies [count]."""
    per = s.family.hardware(s.ctx).devices_per_system
    return np.ceil(np.asarray(num_devices, dtype=float) / per - 1e-9)


def array_times(s: Setup, arr: dict, *, train_tokens=None) -> ArrayTimes:
    """The cost model's time inputs from :func:`wseplan.plan.evaluate`'s arrays (NaN where nothing fits)."""
    ph = s.query.phase
    ndev = np.asarray(arr["num_devices"], dtype=float)
    nsys = num_systems(s, ndev)
    if ph == "train":
        return ArrayTimes(phase="train", num_devices=ndev, num_systems=nsys, step_s=arr["step_s"],
                          tokens_per_step=arr["batch"] * arr["context"], train_tokens=train_tokens)
    g = lambda k: arr.get(f"time.{k}", np.full(len(ndev), np.nan))  # noqa: E731
    return ArrayTimes(phase="serve", num_devices=ndev, num_systems=nsys, prefill_s=g("cost_prefill_s"),
                      prompt_tokens=g("cost_prompt_tokens"), decode_step_s=g("cost_decode_s"),
                      output_tokens_per_step=g("cost_output_tokens"))


def cost_columns(s: Setup, arr: dict, p: dict, *, train_tokens=None) -> dict:
    """Cost metrics per configuration (arrays; NaN where the configuration does not fit) at inputs ``p``
    (nominal values or sampled arrays)."""
    ph = s.query.phase
    if ph == "train" and train_tokens is None:
        train_tokens = p["train_tokens_per_param"] * total_params(s.query.model)
    t = array_times(s, arr, train_tokens=train_tokens)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN times of rows that do not fit stay NaN
        out = C.evaluate(p, t)
        if ph in ("prefill", "decode"):  # one side of serving only
            for k in list(out):
                if (ph == "prefill" and "output" in k) or (ph == "decode" and "input" in k):
                    out[k] = np.full(np.shape(out[k]) or (1,), np.nan)
    return out


def total_params(model) -> float:
    return transformer_params(model) if hasattr(model, "num_layers") else float(sum(layer.params for layer in model.layers))


def check_train_tokens(train_tokens) -> float | None:
    if train_tokens is None:
        return None
    if isinstance(train_tokens, bool) or not isinstance(train_tokens, (int, float)) or not train_tokens > 0 \
            or not math.isfinite(train_tokens):
        raise InputError(f"train_tokens: must be a positive number, got {train_tokens!r}")
    return float(train_tokens)


def cost(model, target, *, phase: str = "serve", precision: str = "bf16", batch: int | None = None,
         context: int | None = None, output_tokens: int | None = None, train_tokens: float | None = None,
         overrides: dict[str, float] | None = None, prices_files: list[str] | tuple = (), uncertainty: int = 0,
         seed: int = 0, memoryx_option: str | None = None, catalog=None, prices=None, software: str | None = None,
         layout: dict | None = None, options: dict | None = None):
    """Cost of serving or training ``model`` on ``target`` (the API behind ``wseplan cost``).

    The configuration is the one :func:`wseplan.plan.plan` answers for the same arguments (``phase`` ``serve``,
    the default, is whole requests; ``prefill``/``decode`` price one side). A configuration that does not fit is
    refused with one line (no price for what cannot run). ``uncertainty`` Monte Carlo samples (seeded) give
    P10/P50/P90 of every metric; the tornado ranks the inputs by their swing of the headline metric.
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
    opts = dict(options or {})
    if memoryx_option is not None:
        opts["memoryx_option"] = memoryx_option
    s = setup(model, target, phase=phase, precision=precision, software=software, options=opts, catalog=cat)
    b, c, o, src = default_sizes(cat, phase, batch, context, output_tokens)
    cfg = {"batch": np.array([float(b)]), "context": np.array([float(c)]), "output_tokens": np.array([float(o)])}
    for k, v in (layout or {}).items():
        cfg[k] = np.array([float(v)])
    arr = evaluate(s, cfg)
    rec = record(s, arr, 0, sources=src)
    if not rec.fits:
        raise InputError(f"{rec.model} does not fit {rec.target} at batch {b}, context {c} ({rec.binding} binds, "
                         f"{rec.shortfall_bytes:,.0f} B short per device); no cost for a configuration that cannot run "
                         "— lower the batch or context, or add devices")
    return price_record(s, arr, rec, prices, overrides=overrides, train_tokens=train_tokens, uncertainty=uncertainty,
                        seed=seed)


def price_record(s: Setup, arr: dict, rec, prices, *, overrides=None, train_tokens=None, uncertainty: int = 0,
                 seed: int = 0):
    """The :class:`~wseplan.analytic.cost.CostResult` of row 0 of ``arr`` (a configuration that fits)."""
    phase = s.query.phase
    cat = s.query.catalog
    b, c, o = rec.batch, rec.context, rec.output_tokens or 0
    params = params_for(s, prices, overrides=overrides)
    notes = list(rec.notes)
    tt = train_tokens
    if phase == "train" and tt is None:
        tt = params["train_tokens_per_param"].value * total_params(s.query.model)
        notes.append(f"training run of {tt:,.3g} tokens (train_tokens_per_param x parameters)")
    at = array_times(s, arr, train_tokens=tt)
    one = {k: (float(np.asarray(v).ravel()[0]) if v is not None and k != "phase" else v)
           for k, v in at.__dict__.items()}
    one["num_devices"], one["num_systems"] = int(one["num_devices"]), int(one["num_systems"])
    times = C.TimeInputs(**{k: v for k, v in one.items() if v is None or k == "phase" or math.isfinite(v)})
    if s.family.name == "wafer_streaming":
        notes.append("MemoryX capex is estimated from DRAM/flash prices; MemoryX and SwarmX power are not included "
                     "(no published figure)")
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
    if listed is None or phase == "train":
        return res
    computed = {k: res.metric(k) for k in ("input_usd_per_mtok", "output_usd_per_mtok")
                if any(m.metric == k for m in res.metrics)}
    acc = arr.get("time.accepted_tokens_per_step")
    flags = list_price_flags(computed, listed, batch=b, utilization_frac=params["utilization_frac"].value,
                             software=s.query.software.name, precision=s.query.precision,
                             speculative=bool(acc is not None and np.nanmax(acc) > 1.0))
    return res.model_copy(update={"notes": list(res.notes) + flags}) if flags else res


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
            reasons.append(f"speculative decoding is on ({software})" if speculative else
                           f"no speculative decoding in this computation ({software}); a service may use it")
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
        out.append(f"list price: computed {side} ${v:.3g}/M tokens is {ratio:.3g}x "
                   f"{'above' if high else 'below'} the vendor's list price {listed_text}/M tokens "
                   f"(service_prices.{key}, {', '.join(q.source_ids)}); likely reasons: {'; '.join(reasons)}")
    return out
