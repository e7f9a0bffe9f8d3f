"""Why a serving study's answer is what it is (see :mod:`wseplan.report.why`), from the study's own replica
searches:

Costs are all-in: a point's whole cost per million output tokens (:func:`all_in`: the replica's TCO per hour over
the output tokens it delivers at its load, per busy hour at the site's utilisation), the measure
:func:`wseplan.serving.serve` chooses its cheapest point by. ``utils`` maps a target to its site utilisation.

* **crossovers** (:func:`crossovers`): each platform's cheapest point at a required speed ``X`` is
  :func:`wseplan.serving.with_limits` of its search at TPOT <= 1/X, a step function of ``X`` that changes only at
  frontier speeds (:func:`frontier`); re-judging every platform at every frontier speed finds every speed where the winner changes,
  exactly (a bisection over ``X`` would converge to the same breakpoints, and could miss one of several).
* **capex flips** (:func:`capex_flips`): a replica's TCO per hour, hence its $/M tokens, is affine in the capex
  per system (capex, network share, installation and maintenance scale with it; power and facility do not). One
  more :func:`wseplan.serving.serve` per platform at twice the capex gives each point's line; a bisection over
  the capex multiplier finds where the platform becomes (or stops being) the cheapest at the study's speed.
* **binding constraints**: what stops each platform's chosen point from being cheaper (the per-user speed, the
  TTFT limit, the replica's memory), its step's bottleneck, and the fleet solver's binding constraints.
"""
from __future__ import annotations

import math

from ..costing import LIST_PRICE_FACTOR, list_price_notes, request_list_price, service_price_for
from ..plan import setup
from ..pricing import params_for
from ..serving import all_in_usd_per_mtok, occupancy, pareto_frontier, serve, tpot_for_limit, with_limits
from ..targets import parse_target
from .markdown import fmt_num
from .study_schema import Study
from .why import bisect, interval_text


_EPS = 1e-12  # a point at exactly the required speed qualifies (1 / (1 / tpot) may round up by one ulp)


def all_in(p, util: float = 1.0) -> float:
    """:func:`wseplan.serving.all_in_usd_per_mtok` (one definition)."""
    return all_in_usd_per_mtok(p, util)


def _u(utils, t) -> float:
    return (utils or {}).get(t, 1.0)


def frontier(res, util: float = 1.0, *, only_ok: bool = True) -> list:
    """:func:`wseplan.serving.pareto_frontier` of ``res``'s points (``only_ok``: those that meet its limits)."""
    return pareto_frontier([p for p in res.points if p.meets_sla or not only_ok], util)


def _at_speed(res, speed: float, ttft_limit_s):
    r = with_limits(res, ttft_limit_s=ttft_limit_s, tpot_limit_s=(1.0 / speed) * (1 + _EPS))
    return r.chosen if r.chosen is not None and r.chosen.meets_sla else None


def cheapest_at(curves: dict, speed: float, ttft_limit_s, utils: dict | None = None) -> tuple[str, float] | None:
    """(target, all-in $/M output tokens) of the cheapest platform at ``speed`` tokens/s per user, or None."""
    best = None
    for t, res in curves.items():
        c = _at_speed(res, speed, ttft_limit_s)
        if c is not None and c.usd_per_hour is not None and (best is None or all_in(c, _u(utils, t)) < best[1]):
            best = (t, all_in(c, _u(utils, t)))
    return best


def crossovers(curves: dict, ttft_limit_s, utils: dict | None = None) -> list[dict]:
    """Every per-user speed above which the cheapest platform changes: ``{above_tokens_per_s_per_user, from, to,
    from_usd_per_mtok, to_usd_per_mtok}`` (the winner of speeds in (a, b] is judged at b, a frontier speed)."""
    # the speeds where a TPOT limit admits another point: 1 / the TPOT it applies to (at the percentile), of every
    # point that meets the search's other limits (the cost/speed frontier is on the mean TPOT)
    speeds = sorted({1.0 / tpot_for_limit(p) for res in curves.values() for p in res.points if p.meets_sla})
    out, prev, prev_speed = [], None, 0.0
    for x in speeds:
        w = cheapest_at(curves, x, ttft_limit_s, utils)
        if w is None:
            break
        if prev is not None and w[0] != prev[0]:
            below = cheapest_at(curves, prev_speed, ttft_limit_s, utils)
            only = _at_speed(curves[prev[0]], x, ttft_limit_s) is None  # the former winner cannot go this fast
            out.append({"above_tokens_per_s_per_user": prev_speed, "from": prev[0], "to": w[0], "only": only,
                        "from_usd_per_mtok": below[1] if below else math.nan, "to_usd_per_mtok": w[1]})
        prev, prev_speed = w, x
    return out


def capex_lines(st: Study, m, cat, prices, curves: dict, speed: float,
                utils: dict | None = None) -> dict[str, tuple[float, dict]]:
    """Per target: (its capex per system [USD], {point key: (a, b)}) with all-in $/M(mult) = a + b mult for the
    points of its search, from one more :func:`serve` at twice the capex."""
    sv = st.serving
    out = {}
    for tgt, res in curves.items():
        s = setup(m, tgt, phase="serve", precision=st.precision_for(tgt), catalog=cat)
        cap = params_for(s, prices, overrides=st.cost.set)["capex_usd"].value
        if not cap > 0:
            continue
        res2 = serve(m, tgt, precision=st.precision_for(tgt), input_tokens=sv.prompt_tokens,
                     output_tokens=sv.output_tokens, batches=sv.batches, ttft_limit_s=sv.ttft_limit_s,
                     percentile=sv.percentile, catalog=cat, prices=prices,
                     overrides={**st.cost.set, "capex_usd": 2.0 * cap})
        u = _u(utils, tgt)
        # the points as cheapest_at judges them at the study's speed (a point that misses the TPOT limit at the
        # default load runs at a lower one; the capex moves no time, so both searches move the same points)
        lim = dict(ttft_limit_s=sv.ttft_limit_s, tpot_limit_s=(1.0 / speed) * (1 + _EPS))
        twice = {_key(p): all_in(p, u) for p in with_limits(res2, **lim).points if p.usd_per_hour is not None}
        out[tgt] = (cap, {_key(p): (2 * all_in(p, u) - twice[_key(p)], twice[_key(p)] - all_in(p, u))
                          for p in with_limits(res, **lim).points if _key(p) in twice and p.usd_per_hour is not None})
    return out


def _key(p) -> tuple:
    return (p.devices_per_replica, p.num_replicas, p.batch, tuple(sorted(p.layout.items())), round(occupancy(p), 9))


def capex_flips(st: Study, curves: dict, lines: dict, speed: float) -> list[dict]:
    """At the study's speed: the capex per system at which each platform becomes the cheapest (or, for the
    cheapest, stops being it). ``{target, capex_usd, flip_capex_usd or None, mult, direction, winner, ...}``."""
    ttft = st.serving.ttft_limit_s

    def qualifying(tgt):  # the points cheapest_at chooses among: those the limits admit, judged as with_limits does
        r = with_limits(curves[tgt], ttft_limit_s=ttft, tpot_limit_s=(1.0 / speed) * (1 + _EPS))
        ok = {_key(p) for p in r.points if p.meets_sla}
        return [ab for k, ab in lines[tgt][1].items() if k in ok]

    cost = {t: (lambda ab: (lambda x: min(a + b * x for a, b in ab)))(qualifying(t)) for t in lines if qualifying(t)}
    if len(cost) < 2:
        return []
    now = {t: f(1.0) for t, f in cost.items()}
    win = min(now, key=now.get)
    out = []
    for t, f in cost.items():
        cap = lines[t][0]
        others = min(v for u, v in now.items() if u != t)
        if t == win:
            hi = 2.0
            while f(hi) < others and hi < 1e4:
                hi *= 2
            mult = bisect(lambda x: f(x) - others, 1.0, hi) if f(hi) >= others else None
            out.append({"target": t, "capex_usd": cap, "mult": mult, "flip_capex_usd": mult * cap if mult else None,
                        "direction": "stays cheapest up to", "winner": t, "rival": min((u for u in now if u != t),
                                                                                      key=now.get)})
        else:
            if f(0.0) >= others:
                out.append({"target": t, "capex_usd": cap, "mult": None, "flip_capex_usd": None,
                            "direction": "never cheapest", "winner": win, "free_usd_per_mtok": f(0.0),
                            "winner_usd_per_mtok": others})
                continue
            mult = bisect(lambda x: f(x) - others, 0.0, 1.0)
            out.append({"target": t, "capex_usd": cap, "mult": mult, "flip_capex_usd": mult * cap,
                        "direction": "becomes cheapest below", "winner": win})
    return out


def serving_why(st: Study, m, cat, prices, curves: dict, at_speed: dict, fleet_rows: list[dict], mix,
                cross: list[dict], params_used: dict, utils: dict | None = None) -> list[tuple[str, str]]:
    sv = st.serving
    speed, ttft = sv.min_tokens_per_s_per_user, sv.ttft_limit_s
    out: list[tuple[str, str]] = []
    # binding constraints of each platform's chosen point
    binds = []
    for tgt, c in at_speed.items():
        res = curves[tgt]
        if c is None:
            fastest = max((p.tokens_per_s_per_user for p in res.points), default=None)
            binds.append(f"{tgt}: no point reaches {fmt_num(speed)} tokens/s per user"
                         + (f" (fastest {fmt_num(fastest)})" if fastest else " (nothing fits)"))
            continue
        what = _limit(res, c, speed, ttft, sv.batches, _u(utils, tgt))
        binds.append(f"{tgt}: batch {c.batch} on {c.devices_per_replica} device{'s' if c.devices_per_replica != 1 else ''}, "
                     f"step {c.bottleneck}-bound; {what}")
    if mix is not None:
        tight = [r for r in mix.constraints if r.binding and r.saving_usd_per_year]
        if tight:
            what = {"demand": "the demand", "sla": "the SLA"}
            binds.append("fleet solver: " + "; ".join(
                f"{what.get(r.kind, r.name)} binds (10% looser saves ${fmt_num(r.saving_usd_per_year / 1e6)}M/yr)"
                for r in tight))
    out.append(("Binding constraints", " ".join(b.rstrip(".") + "." for b in binds)))
    # what flips the ranking: the per-user speed, and each platform's capex
    flips = []
    if len(curves) > 1:
        w = cheapest_at(curves, speed, ttft, utils)
        if w is not None:
            flips.append(f"On the curves (all-in $ per million output tokens, one replica priced alone; a per-user speed "
                         f"here is one over the time per output token at p{fmt_num(st.serving.percentile)}, as the "
                         f"requirement is judged, where the tables show the mean) {w[0]} is the "
                         f"cheapest at {fmt_num(speed)} tokens/s per user (${fmt_num(w[1])}).")
        for c in cross:
            x = fmt_num(c["above_tokens_per_s_per_user"])
            if c["only"]:
                flips.append(f"Above {x} tokens/s per user ({c['from']}'s fastest point, "
                             f"${fmt_num(c['from_usd_per_mtok'])}) only {c['to']} qualifies, at "
                             f"${fmt_num(c['to_usd_per_mtok'])} and up.")
            else:
                flips.append(f"{c['to']} becomes the cheapest above {x} tokens/s per user "
                             f"(${fmt_num(c['to_usd_per_mtok'])} against {c['from']}'s "
                             f"${fmt_num(c['from_usd_per_mtok'])} just below).")
        if not cross:
            flips.append("No required speed changes the cheapest platform within the searched range.")
        for f in capex_flips(st, curves, capex_lines(st, m, cat, prices, curves, speed, utils), speed):
            cap = f"${fmt_num(f['capex_usd'] / 1e6)}M"
            if f["direction"] == "never cheapest":
                flips.append(f"No capex makes {f['target']} the cheapest at {fmt_num(speed)} tokens/s per user: even "
                             f"free systems cost ${fmt_num(f['free_usd_per_mtok'])} per million tokens in power, "
                             f"facility and site costs against {f['winner']}'s ${fmt_num(f['winner_usd_per_mtok'])}.")
            elif f["direction"] == "becomes cheapest below":
                flips.append(f"{f['target']} becomes the cheapest below ${fmt_num(f['flip_capex_usd'] / 1e6)}M per "
                             f"system ({fmt_num(f['mult'] * 100)}% of the {cap} assumed).")
            elif f["mult"] is not None:
                flips.append(f"{f['target']} stays the cheapest up to ${fmt_num(f['flip_capex_usd'] / 1e6)}M per "
                             f"system ({fmt_num(f['mult'])}x the {cap} assumed), then {f['rival']} wins.")
            else:
                flips.append(f"{f['target']} stays the cheapest at any capex up to 10,000x the {cap} assumed.")
    else:
        flips.append("One target: there is no ranking to flip; the curve shows how its cost moves with the speed.")
    out.append(("What would flip the ranking", " ".join(flips)))
    # the prediction interval on the headline
    best = min((r for r in fleet_rows if r.get("meets_sla") and r["menu"] != "all targets"),
               key=lambda r: r["plan_usd_per_year"], default=None)
    if best is not None:
        kind = parse_target(best["target"], cat).kind
        point = at_speed.get(best["target"])
        out.append(("Prediction interval", interval_text(
            f"The headline ({best['target']} fleet)", best["usd_per_mtok"],
            point.model_dump() if point is not None else None, device_kind=kind, cat=cat, prefix="$",
            unit="/M output tokens")))
    # computed cost against the vendor's list price
    gaps, others = [], []
    for tgt, c in at_speed.items():
        if c is None:
            continue
        text = list_price_finding(st, m, tgt, c, _u(utils, tgt), cat, prices)
        (gaps.append(text) if text else others.append(tgt))
    if others:
        gaps.append(f"{', '.join(others)}: no vendor list price for {m.name} in the prices catalog (service_prices).")
    out.append(("List prices", " ".join(gaps) if gaps else "No platform meets the speed: nothing to compare."))
    return out


def list_price_finding(st: Study, m, tgt: str, c, util: float, cat, prices) -> str | None:
    """The chosen point of ``tgt`` against the vendor's list prices for the same model and system: the whole bill
    of the study's request (all-in, per million output tokens) and each side's flag from
    :func:`wseplan.costing.list_price_notes` (more than 3x off). None without a list price."""
    sv = st.serving
    prec = st.precision_for(tgt)
    s = setup(m, tgt, phase="serve", precision=prec, catalog=cat)
    listed = service_price_for(s.query.model, s.query.target, prices, cat)
    if listed is None:
        return None
    _, sentence = request_list_price(all_in(c, util), sv.prompt_tokens, sv.output_tokens, listed)
    text = f"{tgt}: " + sentence.removeprefix("list price: ")
    flags = list_price_notes(m, tgt, {"input_usd_per_mtok": c.input_usd_per_mtok,
                                      "output_usd_per_mtok": c.output_usd_per_mtok}, batch=c.batch, precision=prec,
                             prices=prices, catalog=cat, utilization_frac=util)
    if flags:
        return text + " Per side: " + " ".join(f.rstrip(".") + "." for f in flags)
    return text + f" Neither side's price is more than {fmt_num(LIST_PRICE_FACTOR)}x off its list price."


def _limit(res, c, speed: float, ttft, batches, util: float) -> str:
    """Why the chosen point is not cheaper: the next cheaper point of its platform and what it misses."""
    cheaper = [p for p in frontier(res, util, only_ok=False) if all_in(p, util) < all_in(c, util)]
    if not cheaper:
        return "no point of this platform is cheaper at any speed"
    q = max(cheaper, key=lambda p: p.tokens_per_s_per_user)  # the next cheaper point down the frontier
    why = []
    if q.tokens_per_s_per_user < speed:
        n = q.devices_per_replica
        load = occupancy(q)
        at = f" at {fmt_num(100 * load)}% load" if abs(load - occupancy(c)) > 1e-9 else ""
        why.append(f"the per-user speed binds: the next cheaper point (batch {q.batch} on {n} device{'s' if n != 1 else ''}"
                   f"{at}, ${fmt_num(all_in(q, util))}/M all-in) gives {fmt_num(q.tokens_per_s_per_user)} tokens/s")
    if ttft is not None and q.ttft_at_percentile_s > ttft:
        why.append(f"the TTFT limit binds: the next cheaper point waits {fmt_num(q.ttft_at_percentile_s)} s")
    same = [p.batch for p in res.points if p.devices_per_replica == c.devices_per_replica and p.num_replicas == 1]
    larger = [b for b in batches if b > c.batch]
    if larger and max(same, default=0) == c.batch:
        why.append(f"batch {larger[0]} does not fit this replica's memory")
    return "; ".join(why) or "a cheaper point exists but is not better on both cost and speed"
