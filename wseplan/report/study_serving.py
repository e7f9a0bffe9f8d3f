"""The ``serving`` study kind: a model served at a stated demand and per-user speed, answered as a curve.

* **curve**: per target, :func:`wseplan.serving.serve` (the one replica search: replica sizes x the study's
  concurrencies, each at the default load) gives the Pareto frontier of $/M output tokens versus tokens/s per
  user, with TTFT; the point a target offers at the study's speed is :func:`wseplan.serving.with_limits` of it.
* **crossover**: the per-user speeds at which the cheapest platform changes (each platform's cheapest point
  at a speed is a step function of the speed; the winner is re-judged at every frontier speed).
* **fleet**: :func:`wseplan.optimize.fleet.plan_fleet` on the demand the study states (:func:`serving_demand`),
  fed by :func:`wseplan.operating.replica_options` — the same path and the same answer as ``wseplan fleet`` on that
  demand file: each target alone, and the cheapest mix of all of them.
* **batch sweep**: :func:`wseplan.compare.compare_case` per target and batch (the replica at full load, with
  the Monte Carlo cost bands), as ``wseplan compare`` prints it.
* **why**: see :mod:`wseplan.report.study_serving_why`.
"""
from __future__ import annotations

from ..compare import compare_case, layout_text
from ..costing import list_price_notes, service_price_for
from ..errors import InfeasibleError, InputError
from ..optimize.fleet import RELAX_FRAC, plan_fleet, serve_key
from ..optimize.fleet_schema import DemandSpec, Sla, SystemSpec, WorkloadSpec
from ..plan import layout_columns, setup
from ..pricing import params_for
from ..admission import LOWER_LOADS
from ..serving import DEFAULT_UTILIZATION, occupancy, serve, split_sizes, with_limits
from ..targets import parse_target
from ..workload import resolve_model
from .markdown import Column, Table, fmt_num
from .plots import Marker, Plot, Series
from .study_plots import cost_vs_util, roofline
from .study_schema import Study
from .study_serving_why import all_in, crossovers, frontier, serving_why
from .study_sources import _arow, prices_of

HOURS_PER_YEAR = 8766.0  # 365.25 days

_CAPTIONS = {
    "cost_vs_speed": "Each platform's Pareto frontier from the replica search: no other point of that platform is "
                     "both cheaper (all-in: the prompts' prefill included) and faster per user. Every point is a "
                     "replica size and concurrency with 90% of its slots held on average (queueing headroom; a running batch "
                     "below the slots turns faster, so it uses a little more than 90% of its capacity). The dotted line "
                     "is the per-user speed the study asks for; dashed "
                     "lines mark the crossovers where the cheapest platform changes.",
    "latency_throughput": "Each point is one batch size on the replica the batch sweep uses; up and to the right is "
                          "better. The dotted line is the per-user speed the study asks for.",
    "roofline": "Markers: the FLOP/s per device wseplan predicts at each swept batch (replica tokens/s x FLOPs per "
                "token / devices). Dashed: one device's roofs, an upper bound (dense peak, and the memory that holds "
                "the weights: SRAM on a wafer, HBM on a GPU); a point far below its roof is bound by something else "
                "(fabric latency, overheads). The vertical lines mark decode at the smallest and largest swept batch.",
    "cost_vs_utilization": "Amortised cost per output token of each fleet's replica falls as the share of busy hours "
                           "rises.",
    "cost_bands": "P10-P90 of the Monte Carlo over the cost inputs' ranges (prices, power, PUE, utilisation, "
                  "amortisation), per batch of the batch sweep (replica at full load).",
}


def serving_demand(st: Study, cat, targets: list[str] | None = None) -> DemandSpec:
    """The study's demand as a ``wseplan fleet`` demand: one serve workload (the study's demand, prompt and answer
    lengths, concurrencies, replica sizes, SLA: TPOT <= 1 / per-user speed and the TTFT limit at its percentile,
    per-system precisions) on a menu of the study's targets (their hardware, without counts)."""
    sv = st.serving
    systems, prec, seen, counts = [], {}, {}, {}
    for tgt in targets or st.target_names:
        t = parse_target(tgt, cat)
        if t.key in seen:
            raise InputError(f"targets {seen[t.key]} and {tgt} are the same hardware ({t.key}); a fleet menu lists "
                             "each hardware once")
        seen[t.key] = tgt
        systems.append(SystemSpec(hardware=t.key))
        prec[t.key] = st.precision_for(tgt)
        if t.count is not None:  # a counted target is the replica: the fleet's replicas of that many devices, or the
            # equal replicas it splits into, as serve's search of that target (audit32b M1: h100x8's fleet ran TP8
            # replicas at $7.889/M where its own frontier and serve chose 2 x TP4 at $7.17/M)
            counts[t.key] = [int(t.count)] + split_sizes(t)
    wl = WorkloadSpec(name=st.slug, model=st.model_ref, kind="serve", precision=st.precision, precisions=prec,
                      output_tokens_per_s=sv.demand_tokens_per_s, requests_per_s=sv.requests_per_s,
                      users_per_day=sv.users_per_day, requests_per_user_per_day=sv.requests_per_user_per_day,
                      peak_factor=sv.peak_factor, prompt_tokens=sv.prompt_tokens, output_tokens=sv.output_tokens,
                      batches=sv.batches, replica_sizes=sv.replica_sizes, device_counts=counts,
                      sla=Sla(ttft_s=sv.ttft_limit_s, tpot_s=1.0 / sv.min_tokens_per_s_per_user,
                              percentile=sv.percentile))
    return DemandSpec(name=st.slug, systems=systems, workloads=[wl], set=dict(st.cost.set))


def serving_body(st: Study, cat) -> dict:
    sv = st.serving
    m = resolve_model(st.model_ref, cat)
    prices = prices_of(cat)
    names = st.target_names
    speed = sv.min_tokens_per_s_per_user
    pct = sv.percentile
    kw = dict(input_tokens=sv.prompt_tokens, output_tokens=sv.output_tokens, catalog=cat)

    # batch sweep: the replica at full load, with the Monte Carlo cost bands (the numbers `compare` prints)
    sweep, params_used = [], {}
    for tgt in names:
        for b in sv.batches:
            row, times, params = compare_case(m, tgt, phase="decode", precision=st.precision_for(tgt), batch=b,
                                              context=sv.prompt_tokens, output_tokens=sv.output_tokens, catalog=cat,
                                              prices=prices, uncertainty=st.cost.uncertainty, seed=st.cost.seed,
                                              overrides=st.cost.set)
            rec = row.to_row()
            rec.update(study_target=tgt, batch=b, meets_sla=bool(
                row.fits and row.tokens_per_s_per_user is not None and row.tokens_per_s_per_user >= speed))
            sweep.append(rec)
            if times is not None:
                params_used.setdefault(tgt, params)

    # the curves: one replica search per target, judged at the study's speed
    demand = serving_demand(st, cat)
    curves, at_speed, cache = {}, {}, {}
    for tgt, spec in zip(names, demand.systems):
        base = serve(m, tgt, precision=st.precision_for(tgt), batches=sv.batches, percentile=pct, prices=prices,
                     overrides=st.cost.set, **kw)  # every point at the default load: the fleet's search
        res = with_limits(base, ttft_limit_s=sv.ttft_limit_s)  # = serve(..., ttft_limit_s=...), one search
        curves[tgt] = res
        judged = with_limits(base, ttft_limit_s=sv.ttft_limit_s, tpot_limit_s=1.0 / speed)
        at_speed[tgt] = judged.chosen if judged.chosen is not None and judged.chosen.meets_sla else None
        if parse_target(tgt, cat).count is None:  # the fleet's search of this hardware is this one
            cache[serve_key(m.name, spec.hardware, demand.workloads[0], st.precision_for(tgt))] = base

    utils = {t: params_for(setup(m, t, phase="serve", precision=st.precision_for(t), catalog=cat), prices,
                           overrides=st.cost.set)["utilization_frac"].value for t in names}

    # the fleet: the fleet solver on the study's demand (as `wseplan fleet`), each target alone and all together
    plans, notes = {}, {}
    for tgt in names:
        try:
            plans[tgt] = plan_fleet(serving_demand(st, cat, [tgt]), catalog=cat, analyze=len(names) == 1, cache=cache)
        except InfeasibleError as exc:
            plans[tgt], notes[tgt] = None, str(exc).split(": infeasible: ", 1)[-1]
    best_alone = min((t for t in names if plans[t]), key=lambda t: plans[t].total_usd_per_year, default=None)
    mix = plans[best_alone] if len(names) == 1 and best_alone is not None else None
    if len(names) > 1:
        try:
            mix = plan_fleet(demand, catalog=cat, cache=cache)
        except InfeasibleError:
            mix = None
    fleet_rows, replica_cases = _fleet_rows(st, m, cat, prices, names, plans, notes, curves, mix, best_alone)

    tables = [_fleet_table(st, demand, fleet_rows), _frontier_table(st, curves, at_speed, utils), _sweep_table(sweep)]
    cases = {(t, b): tp for t, (b, _label, tp, _u) in replica_cases.items()}
    chosen = {t: (b, label) for t, (b, label, _tp, _u) in replica_cases.items()}
    loads = {t: u for t, (_b, _label, _tp, u) in replica_cases.items()}
    plots = {"cost_vs_speed": _speed_plot(st, m, curves, speed, utils)}
    plots["latency_throughput"] = Plot(
        title=f"{m.name}: per-user speed vs replica throughput (batch sweep)",
        xlabel="replica throughput [output tokens/s]", ylabel="per-user speed [tokens/s]", logx=True, logy=True,
        series=[Series(label=t, x=[r["tokens_per_s"] for r in sweep if r["study_target"] == t and r["tokens_per_s"]],
                       y=[r["tokens_per_s_per_user"] for r in sweep if r["study_target"] == t and r["tokens_per_s"]])
                for t in names if any(r["study_target"] == t and r["tokens_per_s"] for r in sweep)],
        markers=[Marker(speed, f"per-user target {fmt_num(speed)} tokens/s", axis="y")])
    achieved = {(r["study_target"], r["batch"]): {"tokens_per_s": r["tokens_per_s"], "num_devices": r["num_devices"]}
                for r in sweep if r.get("tokens_per_s")}
    plots["roofline"] = roofline(st, m, cat, phase="decode", batches=sv.batches, context=sv.prompt_tokens,
                                 achieved=achieved)
    # all-in, at the replica's own load (audit32b M3: the output side of its slots full, $0.354/M beside the headline's
    # $1.088/M all-in, for 64 requests in flight that miss the per-user floor where the fleet holds 32)
    plots["cost_vs_utilization"], util_rows = cost_vs_util(st, cases, chosen, "all_in_usd_per_mtok",
                                                           "all-in [$/M output tokens]", loads=loads)
    plots["cost_bands"] = Plot(
        title="Monte Carlo cost bands (P10-P90 shaded, median line) vs batch",
        xlabel="batch [concurrent requests]", ylabel="all-in cost [$/M output tokens]", logx=True, logy=True,
        series=[Series(label=t, x=[r["batch"] for r in sweep if r["study_target"] == t and r["usd_per_mtok_p50"]],
                       y=[r["usd_per_mtok_p50"] for r in sweep if r["study_target"] == t and r["usd_per_mtok_p50"]],
                       low=[r["usd_per_mtok_p10"] for r in sweep if r["study_target"] == t and r["usd_per_mtok_p50"]],
                       high=[r["usd_per_mtok_p90"] for r in sweep if r["study_target"] == t and r["usd_per_mtok_p50"]])
                for t in names if any(r["study_target"] == t and r["usd_per_mtok_p50"] for r in sweep)])
    tables.append(Table(name="cost_vs_utilization", title="All-in cost versus utilisation (each fleet's replica, its "
                                                          "slots at the fleet's load)",
                        columns=[Column("target", "replica"), Column("utilization_frac", "utilisation [fraction]"),
                                 Column("value", "all-in [$/M output tokens]")], rows=util_rows))
    cross = crossovers(curves, sv.ttft_limit_s, utils)
    why = serving_why(st, m, cat, prices, curves, at_speed, fleet_rows, mix, cross, params_used, utils)
    answer = _answer(st, m, demand, fleet_rows, mix, cross, at_speed)
    rows, ids = list_price_inputs(m, names, prices, cat)
    return {"answer": answer, "tables": tables, "plots": plots, "params": params_used, "plot_captions": _CAPTIONS,
            "why": why, "assumption_rows": rows, "extra_sources": ids}


def list_price_inputs(m, names, prices, cat) -> tuple[list[dict], list[str]]:
    """The vendor list prices the report compares its costs with (``service_prices``): an inputs row per side and
    their sources (audit29b M4: the comparison cited a source the report never listed)."""
    rows, ids = [], []
    for tgt in names:
        listed = service_price_for(m, parse_target(tgt, cat), prices, cat)
        if listed is None:
            continue
        key, sp = listed
        for side, q in (("input", sp.input_usd_per_mtok), ("output", sp.output_usd_per_mtok)):
            rows.append(_arow(f"{tgt}: vendor list price, {side} (service_prices.{key})", f"${q.si:.3g}/M tokens", q,
                              cat))
            ids += list(q.source_ids)
    return rows, ids


def _fleet_rows(st, m, cat, prices, names, plans, notes, curves, mix, best_alone):
    """One row per allocation (replica configuration) of each target's fleet alone, and of the mix of all targets
    when it differs; the system totals (count, power, capex, TCO) on the first row of each system. The menu's
    all-in $/M output tokens is its TCO over the tokens it delivers; the output side uses the replica point's share,
    and P10/P90 the Monte Carlo band of :func:`compare_case` at exactly that replica (full load)."""
    sv = st.serving
    wl = serving_demand(st, cat).workloads[0]
    rate, sla = wl.output_tokens_per_s_demand(), wl.sla
    rows, cases = [], {}
    menus = [(t, t, plans[t]) for t in names]
    if mix is not None and len(names) > 1 and (best_alone is None or _composition(mix) != _composition(plans[best_alone])):
        menus.append(("all targets", None, mix))
    for menu, tgt, plan in menus:
        if plan is None:
            rows.append({"menu": menu, "target": tgt, "meets_sla": False, "note": notes.get(tgt, "no plan")})
            continue
        for sysrow in plan.systems:
            tgt_s = tgt or next(t for t in names if parse_target(t, cat).key == sysrow.hardware)
            prec = st.precision_for(tgt_s)
            for i, a in enumerate(a for a in plan.allocations if a.system == sysrow.system):
                point = _point(m, cat, prices, st, curves[tgt_s], tgt_s, prec, a, sla)
                text = _replica_text(tgt_s, a.devices_per_replica, cat)
                s = setup(m, text, phase="serve", precision=prec, catalog=cat)
                row, times, params = compare_case(m, text, phase="decode", precision=prec, batch=a.batch,
                                                  context=sv.prompt_tokens, output_tokens=sv.output_tokens, catalog=cat,
                                                  prices=prices, uncertainty=st.cost.uncertainty, seed=st.cost.seed,
                                                  overrides=st.cost.set, layout=layout_columns(s, point.layout))
                # the tokens delivered: the demand rate in the site's busy hours, or, a day's volume given (users per
                # day), that volume all year, the peak rate / peak_factor (audit32b H3: a peak factor of 3 tripled
                # the TCO and lowered the $/M, the fleet priced as if it ran at its peak)
                util = (1.0 / (wl.peak_factor or 1.0) if wl.users_per_day is not None else
                        params["utilization_frac"].value if params else 1.0)
                fleet_usd = plan.total_usd_per_year / (rate * 3600.0 * HOURS_PER_YEAR * util) * 1e6
                band = {k: (fleet_usd * getattr(row, k) / row.usd_per_mtok if getattr(row, k) is not None
                            and row.usd_per_mtok else None) for k in ("usd_per_mtok_p10", "usd_per_mtok_p90")}
                if menu != "all targets" and times is not None and tgt_s not in cases:
                    # (the replica as the fleet runs it: its slots at their load, the share of its capacity used)
                    cases[tgt_s] = (a.batch, f"{text}, {a.batch} slots at {fmt_num(100 * occupancy(point))}% load",
                                    (times, params), point.utilization_frac)
                first = i == 0
                flags = list_price_notes(m, text, {"input_usd_per_mtok": point.input_usd_per_mtok,
                                                   "output_usd_per_mtok": point.output_usd_per_mtok}, batch=a.batch,
                                         precision=prec, prices=prices, catalog=cat, utilization_frac=util)
                rows.append({
                    "menu": menu, "target": tgt_s, "meets_sla": True, "system": sysrow.system,
                    "systems": sysrow.count if first else None, "replicas": a.replicas,
                    "devices_per_replica": a.devices_per_replica, "batch": a.batch, "layout": layout_text(point.layout),
                    "load": occupancy(point), "in_flight": point.running_batch,
                    "devices": a.replicas * a.devices_per_replica,
                    "tokens_per_s_per_user": point.tokens_per_s_per_user, "ttft_s": point.ttft_at_percentile_s,
                    "tokens_per_s_per_replica": row.tokens_per_s, "fleet_tokens_per_s": a.supply,
                    "peak_power_w": sysrow.peak_facility_power_w if first else None,
                    "capex_usd": sysrow.capex_usd if first else None, "usd_per_year": sysrow.annual_usd if first else None,
                    "usd_per_mtok": fleet_usd, **band, "bottleneck": point.bottleneck,
                    "plan_usd_per_year": plan.total_usd_per_year, "plan_systems": sum(x.count for x in plan.systems),
                    "plan_devices": sum(x.devices for x in plan.systems),
                    "note": "; ".join(([] if len(plan.systems) == 1 else
                                       [f"part of a mix of {len(plan.systems)} system types"]) + flags)})
    return rows, cases


def _point(m, cat, prices, st, curve, tgt: str, prec: str, a, sla: Sla):
    """The serve point of a fleet allocation, as the fleet took it: from the target's curve at the default load, else
    at the lower load the fleet moved it to (``with_limits`` at the workload's SLA, or at the relaxation analysis'
    looser one, as :func:`~wseplan.optimize.fleet.build_problem` asks), else from a search of the replica's own
    target (its device count) at that batch and load."""
    sv = st.serving
    load = a.load_frac if a.load_frac is not None else DEFAULT_UTILIZATION

    def match(points):
        return next((p for p in points if p.num_replicas == 1 and p.batch == a.batch
                     and p.devices_per_replica == a.devices_per_replica and abs(occupancy(p) - load) < 1e-9), None)
    point = match(curve.points)
    if point is None and (sla.ttft_s is not None or sla.tpot_s is not None):  # run at a lower load (LOWER_LOADS)
        for f in (1.0, 1.0 + RELAX_FRAC):
            point = match(with_limits(curve, ttft_limit_s=None if sla.ttft_s is None else sla.ttft_s * f,
                                      tpot_limit_s=None if sla.tpot_s is None else sla.tpot_s * f).points)
            if point is not None:
                return point
    if point is None:  # another replica size than the curve's: the replica's own target (audit32b H1: h200x16's
        # replicas of 16 were searched on the bare hardware, whose search stays inside a node, and none came back)
        u = min((DEFAULT_UTILIZATION,) + LOWER_LOADS, key=lambda x: abs(x - load))
        point = next((p for p in serve(m, _replica_text(tgt, a.devices_per_replica, cat), precision=prec,
                                       input_tokens=sv.prompt_tokens, output_tokens=sv.output_tokens,
                                       batches=[a.batch], percentile=sv.percentile, catalog=cat, prices=prices,
                                       overrides=st.cost.set, utilization=u).points
                      if p.num_replicas == 1 and p.devices_per_replica == a.devices_per_replica), None)
    if point is None:
        raise InputError(f"targets: the fleet's replica of {a.devices_per_replica} device(s) at batch {a.batch} on {tgt} "
                         "has no serve point to report; give the target with that count (e.g. "
                         f"{_replica_text(tgt, a.devices_per_replica, cat)})")
    return point


def _replica_text(tgt: str, n: int, cat) -> str:
    """The study target's hardware with ``n`` devices: ``cs3`` -> ``cs3x5``, ``h200x8`` -> ``h200x2``."""
    t = parse_target(tgt, cat)
    base = tgt[: -len(f"x{t.count}")] if t.count is not None and tgt.endswith(f"x{t.count}") else \
        (tgt if t.count is None else t.key)
    return f"{base}x{n}"


def _composition(plan) -> tuple:
    return tuple(sorted((s.hardware, s.count) for s in plan.systems))


def _fleet_table(st: Study, demand: DemandSpec, rows: list[dict]) -> Table:
    sv = st.serving
    rate = demand.workloads[0].output_tokens_per_s_demand()
    limits = f">= {fmt_num(sv.min_tokens_per_s_per_user)} tokens/s per user" + (
        f", TTFT p{fmt_num(sv.percentile)} <= {fmt_num(sv.ttft_limit_s)} s" if sv.ttft_limit_s else "")
    return Table(
        name="fleet", title=f"Fleet for {fmt_num(rate)} output tokens/s at {limits} (fleet solver, as `wseplan fleet`)",
        note=("Each target alone (its cheapest fleet), and the cheapest mix of all targets when it differs; one row "
              "per replica configuration, the system totals on the first row of each system. Replicas hold 90% of their "
              "slots on average (queueing headroom; a point that misses the limits there runs at the highest lower "
              "load that meets them: the load column of the curve) and pack into whole systems. All-in $/M is the menu's TCO over the "
              "output tokens it delivers at the demand rate in its busy hours (the site's utilisation; with users per "
              "day, the day's volume all year: the peak rate over the peak factor), prompts included; P10-P90 scale it by the Monte Carlo band of the replica's cost."),
        columns=[Column("menu", "menu"), Column("system", "system"), Column("systems", "systems [count]"),
                 Column("replicas", "replicas [count]"), Column("devices_per_replica", "devices per replica [count]"),
                 Column("layout", "layout"), Column("batch", "slots per replica [requests]"),
                 Column("load", "load [fraction of the slots]"), Column("in_flight", "in flight per replica [requests]"),
                 Column("devices", "devices [count]"),
                 Column("tokens_per_s_per_user", "per user, mean [tokens/s]"),
                 Column("ttft_s", f"TTFT p{fmt_num(sv.percentile)} [ms]", 1e-3),
                 Column("tokens_per_s_per_replica", "replica capacity [tokens/s, slots full]"),
                 Column("fleet_tokens_per_s", "fleet supply [tokens/s]"),
                 Column("peak_power_w", "peak facility power [kW]", 1e3), Column("capex_usd", "capex [$M]", 1e6),
                 Column("usd_per_year", "TCO [$M/yr]", 1e6), Column("usd_per_mtok", "all-in [$/M output tokens]"),
                 Column("usd_per_mtok_p10", "P10 [$/M tokens]"), Column("usd_per_mtok_p90", "P90 [$/M tokens]"),
                 Column("bottleneck", "bottleneck"),
                 Column("note", "note")],
        rows=rows)


def _frontier_table(st: Study, curves: dict, at_speed: dict, utils: dict) -> Table:
    sv = st.serving
    rows = []

    def same(p, q):  # one replica, batch and load (the chosen point may run its slots less full than the curve's)
        return (p.devices_per_replica, p.batch, p.layout) == (q.devices_per_replica, q.batch, q.layout) and \
            abs(occupancy(p) - occupancy(q)) < 1e-9

    for tgt, res in curves.items():
        ch = at_speed.get(tgt)
        pts = frontier(res, utils[tgt])
        if ch is not None and not any(same(p, ch) for p in pts):  # chosen at a load the curve does not show
            pts = sorted(pts + [ch], key=lambda p: p.tokens_per_s_per_user)
        for p in pts:
            rows.append({"target": tgt, "precision": res.precision, "devices": p.num_devices,  # every replica's
                         # (audit32b L2: "4 devices" beside "TP4 x DP2" and both replicas' tokens/s)
                         "layout": layout_text(p.layout), "batch": p.batch, "load": occupancy(p),
                         "tokens_per_s_per_user": p.tokens_per_s_per_user, "ttft_s": p.ttft_at_percentile_s,
                         "tpot_s": p.tpot_s, "tokens_per_s": p.tokens_per_s, "usd_per_mtok": p.output_usd_per_mtok,
                         "input_usd_per_mtok": p.input_usd_per_mtok, "all_in_usd_per_mtok": all_in(p, utils[tgt]),
                         "bottleneck": p.bottleneck, "chosen": ch is not None and same(p, ch)})
    return Table(
        name="frontier", title="Cost versus per-user speed: each platform's Pareto frontier (replica search)",
        note=(f"Points at 90% of each replica's slots (a point that misses the limits there: at the highest of "
              f"80%, 70%, ..., 10% that meets them, as `wseplan serve` with the limits shows it; 'load' is the share of "
              f"the slots held); 'chosen' marks the cheapest point (all-in) at >= "
              f"{fmt_num(sv.min_tokens_per_s_per_user)} tokens/s per user (added where it runs at a lower load than "
              f"the frontier's point of the same replica and batch)"
              + (f" and TTFT p{fmt_num(sv.percentile)} <= {fmt_num(sv.ttft_limit_s)} s" if sv.ttft_limit_s else "")
              + ". Output and input $/M split the replica's cost by the engine's decode and prefill time; all-in is "
                "the replica's whole cost per output token (its TCO per busy hour over the output tokens it delivers), "
                "the measure the search chooses by; it differs from output + input x prompt / answer tokens where the "
                "engine's step timings and its capacity at load differ. A GPU replica smaller than a node is charged its "
                "share of the node (its GPUs' part of the node's cost), as the fleet, which packs several into a node."
              + (" An input $/M of 0: the prompts' prefill chunks ride in pipeline slots the decode rounds leave idle, "
                 "adding no time, so the input side is charged none (the prompts' cost is in the all-in $/M; as "
                 "`wseplan cost` notes)" if any(r["input_usd_per_mtok"] == 0.0 for r in rows) else "")),
        columns=[Column("target", "target"), Column("precision", "precision"), Column("devices", "devices [count]"),
                 Column("layout", "layout"), Column("batch", "batch [requests per replica]"),
                 Column("load", "load [fraction]"), Column("tokens_per_s_per_user", "per user, mean [tokens/s]"),
                 Column("ttft_s", f"TTFT p{fmt_num(sv.percentile)} [ms]", 1e-3),
                 Column("tpot_s", "time per output token [ms]", 1e-3), Column("tokens_per_s", "throughput [tokens/s]"),
                 Column("usd_per_mtok", "output [$/M tokens]"), Column("input_usd_per_mtok", "input [$/M tokens]"),
                 Column("all_in_usd_per_mtok", "all-in [$/M output tokens]"), Column("bottleneck", "bottleneck"),
                 Column("chosen", "chosen")],
        rows=rows)


def _sweep_table(sweep: list[dict]) -> Table:
    return Table(
        name="batch_sweep", title="Latency and throughput per replica versus batch (full load, as `wseplan compare`)",
        note="The replica each target names (without a count: the fewest devices that hold the model), at full load "
             "(as `wseplan compare` prices it): the all-in $/M output tokens here are the curve's for the same point x "
             "the curve's tokens/s at its load over these at full load (audit29b L2: not the load itself).",
        columns=[Column("target", "replica"), Column("batch", "batch [requests]"), Column("fits", "fits"),
                 Column("ttft_s", "time to first token [ms]", 1e-3),
                 Column("tpot_s", "time per output token [ms]", 1e-3),
                 Column("tokens_per_s_per_user", "per user, mean [tokens/s]"),
                 Column("tokens_per_s", "per replica [tokens/s]"), Column("bottleneck", "bottleneck"),
                 Column("usd_per_mtok", "all-in [$/M output tokens]"), Column("usd_per_mtok_p10", "P10 [$/M output tokens]"),
                 Column("usd_per_mtok_p90", "P90 [$/M output tokens]"), Column("energy_j_per_token", "energy [J/token]"),
                 Column("meets_sla", "meets per-user speed")],
        rows=sweep)


def _speed_plot(st: Study, m, curves: dict, speed: float, utils: dict) -> Plot:
    series = [Series(label=f"{t} ({res.precision})", x=[p.tokens_per_s_per_user for p in frontier(res, utils[t])],
                     y=[all_in(p, utils[t]) for p in frontier(res, utils[t])])
              for t, res in curves.items() if frontier(res, utils[t])]
    markers = [Marker(speed, f"required {fmt_num(speed)} tokens/s per user")]
    for c in crossovers(curves, st.serving.ttft_limit_s, utils):
        x = fmt_num(c["above_tokens_per_s_per_user"])
        markers.append(Marker(c["above_tokens_per_s_per_user"], f"only {c['to']} above {x}" if c["only"] else
                              f"{c['to']} cheapest above {x}"))
    return Plot(title=f"{m.name}: cost per output token vs speed per user (Pareto frontiers)",
                xlabel="speed per user [tokens/s]", ylabel="all-in cost [$/M output tokens]", logx=True, logy=True,
                series=series, markers=markers)


def _cross_text(c: dict) -> str:
    x = fmt_num(c["above_tokens_per_s_per_user"])
    if c["only"]:
        return f"above {x} tokens/s per user at the percentile ({c['from']}'s fastest point) only {c['to']} qualifies"
    return f"{c['to']} becomes the cheapest above {x} tokens/s per user at the percentile"


def _speed_text(rows: list[dict], r: dict) -> str:
    """The per-user speed of a fleet menu: its one configuration's, or, where it runs several, the range with the
    share of the output tokens served at the slowest (the answer quotes what most users get, not the first row)."""
    mine = [x for x in rows if x["menu"] == r["menu"] and x.get("tokens_per_s_per_user") is not None]
    speeds = [x["tokens_per_s_per_user"] for x in mine]
    if len(mine) < 2 or max(speeds) - min(speeds) <= 1e-9 * max(speeds):
        return f"{fmt_num(r['tokens_per_s_per_user'])} tokens/s per user"
    lo = min(mine, key=lambda x: x["tokens_per_s_per_user"])
    total = sum(x["fleet_tokens_per_s"] or 0.0 for x in mine)
    share = sum(x["fleet_tokens_per_s"] or 0.0 for x in mine if x["tokens_per_s_per_user"] <= lo["tokens_per_s_per_user"] + 1e-12)
    return (f"{fmt_num(lo['tokens_per_s_per_user'])}-{fmt_num(max(speeds))} tokens/s per user, "
            f"{fmt_num(100 * share / total if total else 0.0)}% of the output tokens at {fmt_num(lo['tokens_per_s_per_user'])}")


def _answer(st: Study, m, demand: DemandSpec, rows: list[dict], mix, cross: list[dict], at_speed: dict) -> str:
    sv = st.serving
    rate = demand.workloads[0].output_tokens_per_s_demand()
    head = (f"To serve {m.name} at {fmt_num(rate)} output tokens/s with at least {fmt_num(sv.min_tokens_per_s_per_user)} "
            f"tokens/s per user ({sv.prompt_tokens}-token prompts, {sv.output_tokens}-token answers"
            + (f", TTFT p{fmt_num(sv.percentile)} <= {fmt_num(sv.ttft_limit_s)} s" if sv.ttft_limit_s else "") + "), ")
    alone = [r for r in rows if r["menu"] != "all targets"]
    ok = sorted([r for r in alone if r["meets_sla"]], key=lambda r: r["plan_usd_per_year"])
    if not ok:
        what = "the per-user speed" + (" and the TTFT limit" if sv.ttft_limit_s else "")
        return head + f"no target meets {what} at any swept batch: " + "; ".join(
            f"{r['target']}: {r['note']}" for r in alone) + "."
    b = ok[0]
    mixed = mix is not None and any(r["menu"] == "all targets" for r in rows) and \
        mix.total_usd_per_year < b["plan_usd_per_year"]  # audit32b L1: a cheaper mix is the cheapest fleet
    parts = [head + f"the cheapest {'single-target ' if mixed else ''}fleet is {b['plan_systems']} x {b['system']} ({b['plan_devices']} devices; "
             f"{b['replicas']} replicas of {b['devices_per_replica']} with {b['batch']} request slots each at "
             f"{fmt_num(100 * b['load'])}% load ({fmt_num(b['in_flight'])} in flight), {b['layout']}"
             + (", and others" if sum(r['menu'] == b['menu'] for r in rows) > 1 else "") + "): "
             f"${fmt_num(b['plan_usd_per_year'] / 1e6)}M/yr TCO, ${fmt_num(b['usd_per_mtok'])} per million output tokens "
             f"all-in, the prompts' prefill included"
             + (f" (P10-P90 ${fmt_num(b['usd_per_mtok_p10'])}-{fmt_num(b['usd_per_mtok_p90'])})"
                if b.get("usd_per_mtok_p10") is not None and b.get("usd_per_mtok_p90") is not None else "") + ", "
             + _speed_text(rows, b) + f", TTFT p{fmt_num(sv.percentile)} "
             f"{fmt_num(max(r['ttft_s'] for r in rows if r['menu'] == b['menu']) * 1e3)} ms."]
    seen = {b["menu"]}
    for r in ok[1:]:
        if r["menu"] in seen:
            continue
        seen.add(r["menu"])
        parts.append(f"{r['target']} alone costs {fmt_num(r['plan_usd_per_year'] / b['plan_usd_per_year'])}x as much "
                     f"(${fmt_num(r['usd_per_mtok'])} per million output tokens all-in, at "
                     + _speed_text(rows, r) + ").")
    if mix is not None and any(r["menu"] == "all targets" for r in rows):
        parts.append(f"Mixing targets lowers the TCO to ${fmt_num(mix.total_usd_per_year / 1e6)}M/yr"
                     + (" (the cheapest fleet: the fleet table's 'all targets' rows)." if mixed else "."))
    for r in alone:
        if not r["meets_sla"]:
            parts.append(f"{r['target']} cannot meet it ({r['note']}).")
    if cross:
        parts.append("On the cost-versus-speed curves " + "; ".join(_cross_text(c) for c in cross) + ".")
    precs = {t: st.precision_for(t) for t in st.target_names}
    if len(set(precs.values())) > 1:  # unlike precisions side by side: said where the ranking is (audit29b M1)
        parts.append("Precisions differ across the targets (" + ", ".join(f"{t} {p}" for t, p in precs.items())
                     + "): each runs the study's precision for it; at one precision the ratios change.")
    return " ".join(parts)
