"""Cost through the planning chain: the same evaluation as ``time``, priced (``wseplan cost``, compare, sweep,
fleet and reports all use :func:`wseplan.pricing.cost_columns`, re-exported here).

A configuration that does not fit has no time and therefore no cost (NaN in arrays; the scalar API refuses it
with one line naming the shortfall). Inputs come from the dated prices catalog (:mod:`wseplan.analytic.cost`)
and the family's hardware figures (devices per system, power, rack space).

**Operating point.** A serving question (phase ``serve`` or ``decode``) without a batch is priced at the point a
buyer means: the cheapest point of the replica search (:func:`wseplan.serving.operating_point`, i.e.
:func:`wseplan.serving.serve` with ``tpot_limit_s = 1 / min speed``) that fits and gives every user at least the
stated per-user speed, or the catalog's documented default (``defaults.default_min_tokens_per_s_per_user``).
The record says so (``operating_point``, ``plan.sources.batch == "searched"``). A given batch is priced as given.

:func:`list_price_gap` compares a computed $/M tokens with a vendor's public list price for the same model and
hardware and names the likely reasons when they differ by more than :data:`LIST_PRICE_GAP_FACTOR`.
"""
from __future__ import annotations

import math

import numpy as np

from .analytic import cost as C
from .catalog.load import load_catalog
from .errors import InputError
from .plan import Setup, default_sizes, evaluate, normalise_phase, record, setup
from .pricing import (HEADLINE, ArrayTimes, array_times, cost_columns, num_systems, params_for,  # noqa: F401
                      total_params)
from .serving import operating_point
from .targets import parse_target
from .workload import resolve_model

#: a computed $/M tokens this many times above or below a vendor's list price is flagged (issue 13)
LIST_PRICE_GAP_FACTOR = 3.0


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
    opts = dict(options or {})
    if memoryx_option is not None:
        opts["memoryx_option"] = memoryx_option
    op = None
    if batch is None and phase in ("serve", "decode"):
        _, c0, o0, _ = default_sizes(cat, "serve", None, context, output_tokens)
        op = operating_point(model, target, precision=precision, software=software, input_tokens=c0, output_tokens=o0,
                             min_tokens_per_s_per_user=min_tokens_per_s_per_user, catalog=cat, prices=prices,
                             overrides=overrides, options=opts, layout=layout)
        if op is not None:
            target, batch, layout = op.target, op.batch, {**op.layout, **(layout or {})}
    s = setup(model, target, phase=phase, precision=precision, software=software, options=opts, catalog=cat)
    b, c, o, src = default_sizes(cat, phase, batch, context, output_tokens)
    if op is not None:
        src["batch"] = "searched"
    cfg = {"batch": np.array([float(b)]), "context": np.array([float(c)]), "output_tokens": np.array([float(o)])}
    for k, v in (layout or {}).items():
        cfg[k] = np.array([float(v)])
    arr = evaluate(s, cfg)
    rec = record(s, arr, 0, sources=src)
    if not rec.fits:
        raise InputError(f"{rec.model} does not fit {rec.target} at batch {b}, context {c} ({rec.binding} binds, "
                         f"{rec.shortfall_bytes:,.0f} B short per device); no cost for a configuration that cannot run "
                         "— lower the batch or context, or add devices")
    res = price_record(s, arr, rec, prices, overrides=overrides, train_tokens=train_tokens, uncertainty=uncertainty,
                       seed=seed)
    if op is not None:
        res = res.model_copy(update={"operating_point": op.to_record(),
                                     "notes": [f"operating point: {op.label}", *res.notes]})
    return res


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
    service = None
    if s.query.target.kind == "wafer" and phase != "train":
        service = service_price_for(s.query.model, s.query.target.device.system, prices, cat)
        if service is None:
            notes.append("no public per-hour cloud price for CS-2/CS-3 was found; no rental alternative")
    hw = s.family.hardware(s.ctx)
    return C.cost_from_times(params, times, model=rec.model, target=rec.target, hardware=rec.hardware,
                             price_key=hw.price_key, batch=b, context=c, output_tokens=o if phase == "serve" else None,
                             uncertainty=uncertainty, seed=seed, prices_date=prices.date, service=service, notes=notes,
                             headline_metric=HEADLINE[phase], plan=rec.to_record())


def _model_names(m, cat) -> set[str]:
    names = {m.name.lower(), *[a.lower() for a in getattr(m, "aliases", [])]}
    return names | {k for k, v in cat.models.items() if v is m or v.name == m.name}


def service_price_for(model, system: str, prices, catalog=None):
    """The vendor's public per-token price (``service_prices`` in the prices catalog) for ``model`` served on
    ``system`` (``cs3``), or None. The model must be the same catalog model (name, alias or key)."""
    cat = catalog or load_catalog()
    m = resolve_model(model, cat) if isinstance(model, str) else model
    names = _model_names(m, cat)
    return next((sp for k, sp in prices.service_prices.items() if sp.hardware == system and k in names), None)


def list_price_gap(model, target, computed_usd_per_mtok: float, *, side: str = "output", prices=None, catalog=None,
                   factor: float = LIST_PRICE_GAP_FACTOR, context: dict | None = None, prompt_tokens: int | None = None,
                   output_tokens: int | None = None, always: bool = False) -> dict | None:
    """A computed $/M tokens against the vendor's public list price for the same model on the same system.

    ``side``: ``output`` or ``input`` compare one side's price; ``all-in`` compares the whole cost of a request
    per million output tokens (``computed_usd_per_mtok``: output + input cost of its prompt) with the list bill
    for the same request, ``output price + input price x prompt_tokens / output_tokens`` (both given).

    Returns None when no list price is known for ``model`` on ``target``'s system, or when the two agree within
    ``factor`` (default 3x) and not ``always``; otherwise ``{computed_usd_per_mtok, list_usd_per_mtok, ratio
    (computed / list), flagged (outside the factor), factor, side, system, source, basis, reasons}``. ``reasons`` names the likely causes of the gap, from the
    direction and from ``context`` (optional: ``batch``, ``tokens_per_s_per_user``, ``capex_basis`` of the
    point that was costed).
    """
    if side not in ("input", "output", "all-in"):
        raise InputError(f"side: use input, output or all-in, got {side!r}")
    if side == "all-in" and not (isinstance(prompt_tokens, int) and isinstance(output_tokens, int)
                                 and prompt_tokens > 0 and output_tokens > 0):
        raise InputError("list_price_gap: side all-in needs prompt_tokens and output_tokens (positive integers)")
    if not (isinstance(computed_usd_per_mtok, (int, float)) and computed_usd_per_mtok > 0
            and math.isfinite(computed_usd_per_mtok)):
        return None
    cat = catalog or load_catalog()
    prices = prices or C.load_prices(catalog=cat)
    t = parse_target(target, cat) if isinstance(target, str) else target
    system = t.device.system if t.kind == "wafer" else t.key
    sp = service_price_for(model, system, prices, cat)
    if sp is None:
        return None
    if side == "all-in":
        q = sp.output_usd_per_mtok
        listed = q.si + sp.input_usd_per_mtok.si * prompt_tokens / output_tokens
        src = list(dict.fromkeys([*q.source_ids, *sp.input_usd_per_mtok.source_ids]))
    else:
        q = getattr(sp, f"{side}_usd_per_mtok")
        listed, src = q.si, list(q.source_ids)
    ratio = float(computed_usd_per_mtok) / listed
    flagged = not (1.0 / factor <= ratio <= factor)
    if not flagged and not always:
        return None
    ctx = context or {}
    if ratio > 1:
        reasons = ["the vendor prices a shared service at its own cost and scale (wafer-scale systems bought at "
                   "cost, kept busy by many customers), not the amortised list capex and site costs assumed here",
                   "the vendor's service runs its production software (rewritten kernels, speculative decoding) that "
                   "the software profile here may not credit in full",
                   "a list price can be set below cost to win share; it is not evidence of the cost of owning systems"]
        if ctx.get("capex_basis"):
            reasons.append(f"the capex assumed here is weak ({ctx['capex_basis']}): a quote would move the cost")
        if ctx.get("tokens_per_s_per_user"):
            reasons.append(f"the point costed here keeps every user at {ctx['tokens_per_s_per_user']:.4g} tokens/s "
                           f"(batch {ctx.get('batch')}); a service may batch more users per replica")
    else:
        reasons = ["the list price includes the vendor's margin, idle capacity, support and sales costs",
                   "the point costed here runs a large batch at high utilisation, which a public service with a "
                   "latency promise may not reach"]
    return {"computed_usd_per_mtok": float(computed_usd_per_mtok), "list_usd_per_mtok": listed, "ratio": ratio,
            "flagged": flagged, "factor": factor, "side": side, "system": system, "source": src, "basis": q.basis,
            "prompt_tokens": prompt_tokens, "output_tokens": output_tokens, "reasons": reasons}
