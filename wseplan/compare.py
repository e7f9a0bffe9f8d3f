"""Compare: one model on several targets side by side — fit, time, throughput, bottleneck, power and cost.

Each target is one evaluation of the planning chain (:func:`wseplan.plan.evaluate`: fit, layout, time) priced
by :func:`wseplan.costing.price_record` — the numbers ``fit``, ``time`` and ``cost`` print for the same question.
Nothing here models physics of its own; a target that does not fit has no time and no cost.

A serving question (``decode``/``serve``) without a batch is compared at each target's operating point (the
cheapest point that meets the per-user speed, :func:`wseplan.operating.operating_point`, as ``cost`` does); each
row says which batch it used and why.
"""
from __future__ import annotations

import numpy as np

from . import costing, pricing
from .analytic import cost as C
from .catalog.load import load_catalog
from .catalog.schema import Frozen
from .errors import InputError, WseplanError
from .plan import default_sizes, evaluate, normalise_phase, record, setup
from .report.markdown import Column, Table
from .operating import default_min_tokens_per_s_per_user, operating_point
from .catalog.software import load_software
from .targets import parse_distinct, split_targets
from .workload import resolve_model

SCHEMA_VERSION = 1
PHASES = ("train", "prefill", "decode", "serve")


class CompareRow(Frozen):
    """One target. SI units: seconds, tokens/s, watts, USD, joules. None where it does not apply."""

    target: str
    hardware: str
    device_kind: str
    fits: bool
    num_devices: int
    num_systems: int | None = None
    binding: str
    batch: int | None = None
    batch_source: str | None = None  # given | default | searched (the operating point) | searched, fastest
    operating_point: str | None = None  # how the batch was chosen when none was given (see wseplan.serving)
    software: str | None = None  # the software profile the row ran (as time's record)
    layout: dict | None = None  # the layout the row ran (as time's record: searched, or the operating point's)
    step_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_user: float | None = None
    model_flop_utilization_frac: float | None = None
    bottleneck: str | None = None
    power_w: float | None = None
    usd_per_hour: float | None = None
    usd_per_mtok: float | None = None
    usd_per_run: float | None = None
    run_s: float | None = None
    energy_j_per_token: float | None = None
    usd_per_mtok_p10: float | None = None
    usd_per_mtok_p50: float | None = None
    usd_per_mtok_p90: float | None = None
    #: the time record's 80% interval of its ``interval_metric`` (``step_s`` or ``tokens_per_s``), as ``time`` gives it
    interval_metric: str | None = None
    interval_low: float | None = None
    interval_high: float | None = None
    notes: list[str] = []

    def to_row(self) -> dict:
        row = self.model_dump(mode="json")
        row["notes"] = "; ".join(self.notes)
        return row


class CompareResult(Frozen):
    """The compare record (``wseplan compare --format json``; see docs/cli-output.md)."""

    schema_version: int = SCHEMA_VERSION
    model: str
    phase: str
    precision: str
    batch: int | None  # None: searched per target (each row's batch and operating_point)
    context: int
    output_tokens: int | None = None
    train_tokens: float | None = None
    min_tokens_per_s_per_user: float | None = None  # the per-user speed the operating points meet (batch None)
    prices_date: str | None = None
    rows: list[CompareRow]
    notes: list[str] = []

    def to_frame(self):
        """One row per target (pandas DataFrame), the case in ``df.attrs``."""
        import pandas as pd

        df = pd.DataFrame([r.to_row() for r in self.rows])
        df.attrs.update(model=self.model, phase=self.phase, precision=self.precision, batch=self.batch,
                        context=self.context, prices_date=self.prices_date)
        return df

    @property
    def batch_text(self) -> str:
        """``batch 8``, or how the batch was searched per target."""
        if self.batch is not None:
            return f"batch {self.batch}"
        return (f"batch searched per target (cheapest meeting >= {self.min_tokens_per_s_per_user:g} tokens/s per "
                "user)")

    def table(self, name: str = "compare"):
        """A report table with display units in every header."""
        train = self.phase == "train"
        cols = [Column("target", "target"), Column("fits", "fits"), Column("num_devices", "devices [count]"),
                Column("batch", "batch [requests]" if not train else "batch [sequences]"),
                Column("layout_text", "layout"), Column("software", "software"), Column("bottleneck", "bottleneck")]
        if train:
            cols += [Column("step_s", "step [s]"), Column("tokens_per_s", "throughput [tokens/s]"),
                     Column("model_flop_utilization_frac", "MFU [fraction]"),
                     Column("run_s", "run [days]", 86400.0)]
        elif self.phase == "prefill":
            cols += [Column("ttft_s", "time to first token [ms]", 1e-3),
                     Column("tokens_per_s", "prompt throughput [tokens/s]")]
        else:
            cols += [Column("ttft_s", "time to first token [ms]", 1e-3),
                     Column("tpot_s", "time per output token [ms]", 1e-3),
                     Column("tokens_per_s_per_user", "per user [tokens/s]"),
                     Column("tokens_per_s", "throughput (whole target) [tokens/s]")]
        cols += [Column("power_w", "power [kW]", 1e3), Column("usd_per_hour", "cost [$/h]")]
        cols += ([Column("usd_per_run", "run cost [$M]", 1e6), Column("usd_per_mtok", "[$/M tokens trained]")]
                 if train else [Column("usd_per_mtok", "all-in [$/M output tokens]" if self.phase == "serve"
                                       else "output [$/M tokens]" if self.phase == "decode" else "input [$/M tokens]")])
        cols.append(Column("energy_j_per_token", "energy [J/token]"))
        if any(r.operating_point for r in self.rows):
            cols.insert(4, Column("batch_source", "batch from"))
        title = f"{self.model}: {self.phase}, {self.precision}, {self.batch_text}, context {self.context}"
        rows = []
        for r in self.rows:
            row = r.to_row()
            row["layout_text"] = layout_text(r.layout) if r.layout else ""
            if not r.fits and r.bottleneck is None:
                row["bottleneck"] = f"does not fit ({r.binding})"
            rows.append(row)
        return Table(name=name, title=title, columns=cols, rows=rows)


def layout_text(layout: dict) -> str:
    """A record's layout in a few characters: ``TP2 x PP4`` (data, context and expert parallel and virtual stages
    shown where above 1: ``TP1 x PP8 x DP32 x EP32 x v2``), ``9 wafers``."""
    if "num_wafers" in layout:
        return f"{layout['num_wafers']} wafers"
    if "num_systems" in layout:
        return f"{layout['num_systems']} systems"
    parts = [f"{k} {layout[n]}" for n, k in (("tensor_parallel", "TP"), ("pipeline_parallel", "PP"),
                                            ("data_parallel", "DP"), ("context_parallel", "CP"),
                                            ("expert_parallel", "EP"), ("attention_data_parallel", "ADP"),
                                            ("virtual_pipeline", "v"))
             if layout.get(n, 1) != 1 or n == "tensor_parallel"]
    return " x ".join(p.replace(" ", "") for p in parts)


def _metric(res, name: str):
    try:
        return res.metric(name)
    except KeyError:
        return None


def energy_metric(phase: str) -> str:
    """The energy per token a phase's row shows: per token trained, per input token, per output token all in
    (serving) or of the decode steps alone."""
    return {"train": "energy_j_per_train_token", "prefill": "energy_j_per_input_token",
            "serve": "energy_j_per_output_token_all_in"}.get(phase, "energy_j_per_output_token")


def compare_one(model, target: str, **kw) -> CompareRow:
    """Fit, time and cost of ``model`` on one target (see :func:`compare_case`)."""
    return compare_case(model, target, **kw)[0]


def compare_case(model, target: str, *, phase: str, precision: str, batch: int | None, context: int | None,
                 output_tokens: int | None = None, train_tokens: float | None = None, catalog=None, prices=None,
                 uncertainty: int = 0, seed: int = 0, overrides: dict | None = None, software: str | None = None,
                 layout: dict | None = None, operating_point: str | None = None, options: dict | None = None):
    """Fit, time and cost of ``model`` on one target: ``(CompareRow, TimeInputs or None, cost params or None)``.

    One evaluation of the planning chain (:func:`wseplan.plan.evaluate`) priced by
    :func:`wseplan.costing.price_record` — the same numbers as ``time`` and ``cost`` for the same arguments.
    The time inputs and cost parameters let a caller re-evaluate the cost for other inputs
    (:func:`wseplan.analytic.cost.evaluate`) without re-running the time models. ``layout`` fixes the chain's
    layout columns (``tp``/``pp``/``dp``, ``num_wafers``); ``operating_point`` is the label of a searched batch.
    """
    s = setup(model, target, phase=normalise_phase(phase, output_tokens), precision=precision, software=software,
              options=options, catalog=catalog)
    b, c, o, src = default_sizes(s.query.catalog, s.query.phase, batch, context, output_tokens, model=s.query.model)
    cfg = {"batch": np.array([float(b)]), "context": np.array([float(c)]), "output_tokens": np.array([float(o)])}
    for k, v in (layout or {}).items():
        cfg[k] = np.array([float(v)])
    arr = evaluate(s, cfg)
    rec = record(s, arr, 0, sources=src)
    label = target if isinstance(target, str) else s.query.target.label
    if s.query.target.count is None:
        label = f"{label} (x{rec.num_devices})"
    n_sys = int(costing.num_systems(s, rec.num_devices))
    notes = list(rec.notes)
    how = src.get("batch")
    if operating_point:
        how = "searched" if operating_point.startswith("cheapest") else "searched, fastest"
    base = dict(target=label, hardware=rec.hardware, device_kind=rec.device_kind, fits=rec.fits,
                num_devices=rec.num_devices, num_systems=n_sys, binding=rec.binding, batch=b, batch_source=how,
                operating_point=operating_point, software=s.query.software.name, layout=dict(rec.layout or {}) or None)
    if not rec.fits:
        return CompareRow(**base, notes=notes), None, None
    row = dict(base, step_s=rec.step_s, ttft_s=rec.ttft_s, tpot_s=rec.tpot_s, tokens_per_s=rec.tokens_per_s,
               tokens_per_s_per_user=rec.tokens_per_s_per_user,
               model_flop_utilization_frac=rec.model_flop_utilization_frac, bottleneck=rec.bottleneck,
               interval_metric=rec.interval_metric, interval_low=rec.interval_low, interval_high=rec.interval_high)
    try:
        cr = costing.price_record(s, arr, rec, prices, overrides=overrides, train_tokens=train_tokens,
                                  uncertainty=uncertainty, seed=seed, note_other_hardware=False)
    except WseplanError as exc:
        if "--set" in str(exc):
            raise
        notes.append(f"cost model: {exc}")
        if pricing.unpriced(s, prices):  # no price: the run's days, power and energy stand without the dollars
            cr = costing.price_record(s, arr, rec, pricing.with_placeholder_price(s, prices), train_tokens=train_tokens)
            row.update(power_w=_metric(cr, "busy_it_power_w"), energy_j_per_token=_metric(cr, energy_metric(s.query.phase)))
            if s.query.phase == "train":
                row.update(run_s=_metric(cr, "run_s"))
        return CompareRow(**row, notes=notes), None, None
    phase = s.query.phase
    metric = costing.HEADLINE[phase] if phase != "train" else "usd_per_mtok_trained"
    row.update(power_w=_metric(cr, "busy_it_power_w"), usd_per_hour=_metric(cr, "usd_per_hour"),
               usd_per_mtok=_metric(cr, metric), energy_j_per_token=_metric(cr, energy_metric(phase)))
    if phase == "train":
        row.update(usd_per_run=_metric(cr, "usd_per_run"), run_s=_metric(cr, "run_s"))
    band = next((m for m in cr.metrics if m.metric == metric and m.p10 is not None), None)
    if band is not None:
        row.update(usd_per_mtok_p10=band.p10, usd_per_mtok_p50=band.p50, usd_per_mtok_p90=band.p90)
    notes += [n for n in cr.notes if n not in notes]
    return CompareRow(**row, notes=notes), cr.times, {p.name: p for p in cr.params}  # the inputs the cost used


#: GPU training options a compare applies to its GPU rows alone, and their flags
GPU_TRAINING = ("context_parallel", "pipeline_split", "trainable")
_FLAG = {"context_parallel": "--cp", "pipeline_split": "--pipeline-split", "trainable": "--trainable"}


def compare(model, targets, *, phase: str = "serve", precision: str = "bf16", batch: int | None = None,
            context: int | None = None, output_tokens: int | None = None, train_tokens: float | None = None,
            catalog=None, prices=None, uncertainty: int = 0, seed: int = 0,
            overrides: dict | None = None, min_tokens_per_s_per_user: float | None = None, software: str | None = None,
            options: dict | None = None) -> CompareResult:
    """Compare ``model`` across ``targets`` (the API behind ``wseplan compare``).

    Parameters
    ----------
    model : str
        Catalog model name or alias.
    targets : list of str
        ``<hardware key>[x<N>]``; without a count, the fewest devices that fit (serving without a batch: the replica
        size of the target's operating point, as ``serve`` sizes it).
    phase : str
        ``train`` (cost per run and per M tokens trained), ``prefill`` (input tokens), ``decode`` (output tokens) or
        ``serve`` (whole requests: all-in per output token, prompts included; the default, as ``cost``'s, so that
        the two price the same question: audit28b M5).
    batch, context : int
        Sequences in flight and tokens per sequence (prompt/KV length in inference) [count, tokens]. Serving
        (``decode``/``serve``) without a batch: each target at its operating point (module docstring).
    output_tokens : int
        Decode: tokens generated per request (default 256 for the cost model's serving mix).
    train_tokens : float
        Train: tokens of the whole run [tokens]; default from the price catalog's tokens-per-parameter.
    uncertainty, seed : int
        Monte Carlo samples of the cost inputs (0: none) and their seed; adds P10/P50/P90 of $/M tokens.
    overrides : dict
        Cost inputs pinned to a value, ``{name: value}`` or ``{"HW.name": value}`` (as ``wseplan cost --set``).
    min_tokens_per_s_per_user : float
        The per-user speed the operating points meet (default: the catalog's ``default_min_tokens_per_s_per_user``).
    software, options : str, dict
        A software profile for the targets of its family (the others keep their family's default profile) and family
        options, e.g. ``{"speculative": "none"}`` to compare without a draft (as ``time --speculative none``).
    """
    phase = normalise_phase(phase, output_tokens)
    if isinstance(targets, str):
        targets = split_targets(targets)
    if not targets:
        raise InputError("--targets: give at least one target, e.g. wse3,cs3x4,h100x8")
    cat = catalog or load_catalog()
    train_tokens = costing.check_train_tokens(train_tokens)  # inf/NaN/negative: one line, as in cost()
    costing.check_applies(phase, batch, train_tokens, min_tokens_per_s_per_user)
    parsed = parse_distinct(targets, cat)  # one target under two spellings (h100x8, h100-sxmx8; cs3, wse3): refused
    search = batch is None and phase in ("decode", "serve")
    m = resolve_model(model, cat) if isinstance(model, str) else model
    given_context, given_batch = context, batch
    batch, context, output_tokens, _ = default_sizes(cat, phase, batch, context, output_tokens, model=m)
    prices = prices or C.load_prices(catalog=cat)
    C.unscoped_hardware_inputs(overrides, [C.hardware_price_key(pt) for pt in parsed.values()], prices=prices)
    kw = dict(phase=phase, precision=precision, context=context, output_tokens=output_tokens, train_tokens=train_tokens,
              catalog=cat, prices=prices, uncertainty=uncertainty, seed=seed, overrides=overrides, options=options)
    # a software profile belongs to one hardware family: the targets of that family run it, the others their default
    profile = load_software(cat).get(software.lower()) if software is not None else None
    sw_family = profile.family if profile is not None else None

    if sw_family is not None and not any(pt.kind == sw_family for pt in parsed.values()):
        raise InputError(f"--software: profile {software!r} is for {sw_family} hardware and no target is; give a "
                         f"{sw_family} target or another profile")

    def sw_for(t) -> str | None:
        if software is None or sw_family is None:
            return software  # (an unknown name: the row's setup names the field and the choices)
        return software if parsed[t].kind == sw_family else None

    def opts_for(t) -> dict | None:
        """A GPU engine's KV-cache format applies to the GPU rows (review28b #4: a wafer row refused the whole
        comparison), wafer training's MemoryX option and activation policy to the wafer rows; every other option to
        every row."""
        if not options:
            return options
        drop = ("memoryx_option", "policy") if parsed[t].kind == "gpu" else ("kv_precision",) + GPU_TRAINING
        return {k: v for k, v in options.items() if k not in drop} or None
    notes = ["power is the busy IT power of the whole fleet; $/h is the amortised TCO per wall-clock hour; "
             "J/token includes the site PUE (see `wseplan cost`)"]
    if options and options.get("kv_precision") and any(pt.kind != "gpu" for pt in parsed.values()):
        if not any(pt.kind == "gpu" for pt in parsed.values()):
            raise InputError("--kv-precision: a GPU serving engine's KV-cache format and no target is a GPU; drop "
                             "--kv-precision")
        notes.append(f"--kv-precision {options['kv_precision']} applies to the GPU rows; the wafer rows keep their own "
                     "KV cache")
    gpu_train = [k for k in GPU_TRAINING if (options or {}).get(k) is not None]
    if gpu_train and any(pt.kind != "gpu" for pt in parsed.values()):  # review37 M3: they refused the wafer rows
        if not any(pt.kind == "gpu" for pt in parsed.values()):
            raise InputError(f"{', '.join(_FLAG[k] for k in gpu_train)}: GPU training options and no target is a GPU; "
                             "drop them")
        notes.append(f"{', '.join(_FLAG[k] + ' ' + str(options[k]) for k in gpu_train)} "
                     f"appl{'ies' if len(gpu_train) == 1 else 'y'} to the GPU rows; the "
                     "wafer rows train as wafer training does (every weight, their own layout)")
    if phase == "train":  # audit28a L4: run days x 24 x $/h did not give the run cost
        notes.append("a run is charged per busy hour: run cost = run hours x $/h / utilization_frac (the site's share "
                     "of hours doing paid work; `wseplan cost` shows usd_per_busy_hour)")
    speed = None
    rows = []
    if search:
        speed = min_tokens_per_s_per_user or default_min_tokens_per_s_per_user(cat)
        _, c_search, o_search, _ = default_sizes(cat, "serve", None, given_context, output_tokens or None, model=m)
        if phase == "decode":  # the operating point's decode steps, as `cost --phase decode` prices them (audit30b
            # M4: compare priced whole requests, $2.99/M, where cost priced the decode side, $1.13/M)
            context = c_search
            kw.update(context=context)
            notes.append("decode without a batch: each row is the decode step alone at its target's serving operating "
                         "point (its batch and replica size, the serving request's prompt as the context), as `wseplan "
                         "cost --phase decode` gives it; --phase serve prices whole requests")
        for t in targets:
            op = operating_point(m, t, precision=precision, software=sw_for(t), input_tokens=context,
                                 output_tokens=o_search, min_tokens_per_s_per_user=min_tokens_per_s_per_user,
                                 catalog=cat, prices=prices, overrides=overrides, options=opts_for(t))
            if op is None:  # nothing fits: the row at the default batch says why
                rows.append(compare_one(m, t, batch=given_batch, software=sw_for(t), **dict(kw, options=opts_for(t))))
                continue
            row = compare_one(m, op.target, batch=op.batch, layout=op.layout, operating_point=op.label,
                              software=sw_for(t), **dict(kw, options=opts_for(t)))
            rows.append(row.model_copy(update={"target": t if op.target == t else f"{t} (as {op.target})"}))
            if not op.meets:  # a row below the floor the title names says so (audit33a M6), as `cost` does
                notes.append(f"{rows[-1].target}: misses the {op.min_tokens_per_s_per_user:g} tokens/s per user "
                             f"floor: no point reaches it (fastest near-tie point {op.point.tokens_per_s_per_user:.4g} "
                             "tokens/s per user, priced here); its price is not one of a point meeting the floor")
        notes.append(f"no batch given: each target at its operating point, the cheapest point of the replica search "
                     f"(`wseplan serve`) that gives every user >= {speed:g} tokens/s"
                     + (" (the catalog default, defaults.default_min_tokens_per_s_per_user)"
                        if min_tokens_per_s_per_user is None else "") + "; give --batch to compare at one batch")
    else:
        # the user's own sizes (None where not given): each row states its batch as given or defaulted, as time does
        refused = []
        for t in targets:
            try:
                rows.append(compare_one(m, t, batch=given_batch, software=sw_for(t),
                                        **dict(kw, context=given_context, options=opts_for(t))))
            except InputError as exc:  # a format a target cannot train in leaves the others' rows (audit32d F4)
                if phase != "train" or not str(exc).startswith("precision:"):
                    raise
                refused.append((t, exc))
        if refused and not rows:
            raise refused[0][1]
        notes += [f"{t}: no row: {str(exc).split(': ', 1)[-1]}" for t, exc in refused]
    drafting = [r.target for r in rows if r.fits and any(n.startswith(("speculative decoding on",
                                                                         "the time to first token includes the draft"))
                                                          for n in r.notes)]
    plain = [r.target for r in rows if r.fits and r.target not in drafting]
    asked = (options or {}).get("speculative") not in (None, "none")
    if phase in ("decode", "serve", "prefill") and drafting and plain and asked:  # asked for: each row's engine judged
        notes.append(f"speculative decoding differs across the rows (on: {', '.join(drafting)}; off: {', '.join(plain)}): "
                     "asked for on every row, each engine speculates only where the draft fits beside the target and a "
                     "step is faster with it (each row's notes say why not); --speculative none compares every row "
                     "plain")
    elif phase in ("decode", "serve", "prefill") and drafting and plain:  # unlike engines: say so, and how to align them
        notes.append(f"speculative decoding differs across the rows (on: {', '.join(drafting)}; off: {', '.join(plain)}), "
                     "as each family's default software profile runs; for like for like give --speculative none (every "
                     "row plain) or --software gpu-production-specdec (GPU rows drafting too)")
    if phase == "serve":
        inflight = "each target's searched batch" if search else f"{batch}"
        notes.append(f"serving: requests of {context} prompt and {output_tokens} output tokens, {inflight} in flight "
                     "per replica")
    for head in ("TCO: ", "rental $/M:"):  # the site's terms, alike on every row that has them: said once (audit33a
        # M5; audit33e L2: the rental note was repeated once per GPU row)
        said = {n for r in rows for n in r.notes if n.startswith(head)}
        if len(said) == 1:
            note = said.pop()
            on = [r.target for r in rows if note in r.notes]
            notes.append(note if len(on) == len(rows) else f"{', '.join(on)}: {note}")
            rows = [r.model_copy(update={"notes": [n for n in r.notes if n != note]}) for r in rows]
    return CompareResult(model=m.name, phase=phase, precision=precision, batch=None if search else batch,
                         context=context, output_tokens=output_tokens or None, train_tokens=train_tokens,
                         min_tokens_per_s_per_user=speed, prices_date=prices.date, rows=rows, notes=notes)
