"""Serving: what engine replicas of a model deliver at a load, the SLA they meet, and what it costs.

The one serving model that ``serve``, ``fleet``, ``report`` and the Python API share. Every operating point is one
row of the planning chain (:func:`wseplan.plan.evaluate`, phase ``serve``: in-flight or static batching per the
software profile) at a concurrency (the replica's batch slots) and a replica size; on top of it:

* **load and queueing** (:mod:`wseplan.analytic.queueing`): requests arrive as a Poisson process, hold a slot for
  ``S = TTFT_own + (O - 1) TPOT`` (answer lengths spread with squared CV ``output_scv``); a replica carries at most
  ``B / E[S]`` requests/s; at a rate below that, TTFT percentiles are the own prefill plus the M/G/c wait;
* **users** (a given concurrency without a rate): a closed loop of that many users, each sending the next request as
  the last ends, the slots full (the point ``wseplan time --phase serve --batch N`` gives); above what the KV cache of
  every replica size holds the engine runs the largest batch that fits and the other users wait to be admitted
  (:mod:`wseplan.admission`, :func:`~wseplan.analytic.engine.admission_wait_s`; with a rate, the M/G/c wait for the
  batch's slots), and on a target with a count also where a layout holding fewer carries more;
* **SLA**: TTFT at a percentile and TPOT (the per-token time of the running batch) within limits;
* **cost**: the replica's TCO per busy hour over the output tokens it delivers at that load;
* **replica search**: without a device count, every replica size from the fewest devices that hold the model
  (GPUs: the fewest that fit, whatever their count, powers of two inside the scale-up domain, and whole nodes up to
  twice the fewest where those exceed it; wafers: the fewest
  wafers to twice that; with a count, equal replicas of each size that divides it) x the concurrencies (powers of two,
  the one that fills the KV cache, and the chosen one refined by bisection up to the next power of two),
  the cheapest point that meets the SLA, and the Pareto frontier of $/M output tokens vs tokens/s per user;
* **operating point** (:func:`wseplan.operating.operating_point`): the point a buyer means when no batch is given to ``cost`` or
  ``compare``: the cheapest that fits and serves every user at least a per-user speed (default: the catalog's
  ``default_min_tokens_per_s_per_user``), from the same search.
"""
from __future__ import annotations

import numpy as np

from .admission import (LOWER_LOADS, admission_note, admitted, at_lower_loads, concurrency_grid, running_batch,
                        running_split, slot_evaluation, with_priced_notes)
from .analytic import engine as E
from .analytic import queueing as Q
from .analytic.cost import load_prices, nominal
from .catalog.load import load_catalog
from .pricing import cost_columns, params_for, pins_capex, unpriced
from .errors import InputError, percentile_problem
from .records import (ServePoint, ServeResult, _Frozen, _worst_ratio, all_in_usd_per_mtok, point_interval,  # noqa: F401 (the API)
                      occupancy, pareto_frontier, tpot_for_limit)
from .plan import (bottleneck_name, check_given_layout, default_sizes, evaluate, layout_columns, positions_note, record,
                   setup, target_with_count)
from .serve_choice import DEFAULT_UTILIZATION, SHORT_ANSWER_TOKENS  # noqa: F401 (the API)
from .serve_choice import cost_key as _cost_key, near_tie_frac as _near_tie, result_record as _result  # noqa: F401
from .serve_refine import refine
from .targets import parse_target
from .timing import require_time_model
from .workload import check_positive_int, resolve_model

#: squared coefficient of variation of the answer length when none is given (chat answers spread about +-70%)
DEFAULT_OUTPUT_SCV = 0.5
PERCENTILES = (50, 90, 95, 99)


def _points(s, *, batches, input_tokens, output_tokens, layout, prices, overrides, rate, percentile, output_scv,
            ttft_limit_s, tpot_limit_s, utilization, fill_to: int | None = None, users: int | None = None,
            admit: bool | str = False, closed_loop: bool = False, max_batch: int | None = None,
            full_slots: bool = False) -> list[ServePoint]:

    b = np.asarray(batches, dtype=float)
    n = len(b)
    cfg = {"batch": b, "context": np.full(n, float(input_tokens)), "output_tokens": np.full(n, float(output_tokens))}
    for k, v in (layout or {}).items():
        cfg[k] = np.full(n, float(v))
    cfg, arr = slot_evaluation(s, cfg, input_tokens + output_tokens, fill_to)
    b = cfg["batch"]
    n = len(b)
    ok = np.asarray(arr["fits"], dtype=bool) & np.isfinite(arr["tpot_s"])
    run = None
    queued = False  # users (a given concurrency) beyond the KV cache: the engine runs what fits, the rest queue
    if admit and users is not None and users > 1 and (admit == "fewer" or not ok.any()):
        got = admitted(s, cfg, users, max_batch or users, input_tokens + output_tokens)
        if got is None:  # not even one request fits: the weights
            return []
        (cfg, arr), queued, n = got, True, 1
        b = cfg["batch"]
        ok = np.ones(1, dtype=bool)
    if not ok.any():
        return []
    R = np.asarray(arr["num_replicas"], dtype=float)
    acc = np.asarray(arr.get("time.accepted_tokens_per_step", np.ones(n)), dtype=float)
    tpot = arr["tpot_s"]
    tpot_pct = tpot  # the TPOT of the requests at the percentile: the mean where the batch held is fixed (full slots)
    # own prefill (no queue) and the engine's prefill-budget time per prompt (0 for static batches)
    own = np.where(np.isfinite(arr.get("time.ttft_own_s", np.full(n, np.nan))), arr.get("time.ttft_own_s", 0.0),
                   arr["ttft_s"])
    busy = np.nan_to_num(np.asarray(arr.get("time.prefill_busy_s", np.zeros(n)), dtype=float), nan=0.0)
    cap = np.asarray(arr["tokens_per_s"], dtype=float) / (R * max(output_tokens, 1))  # requests/s at full concurrency
    closed = users is not None and rate is None and (closed_loop or queued) or full_slots
    held = b.astype(float)  # requests the engine holds on average (Little's law); the slots when full
    if closed:  # the users keep every slot full (the engine's closed loop at the batch); any beyond it wait to be admitted
        lam = cap
        queue = E.admission_wait_s(users=float(users) if queued else b, slots=b, request_s=np.asarray(arr["request_s"], dtype=float))
        waits = {p: np.asarray(arr["ttft_s"], dtype=float) + queue - own for p in (None, *PERCENTILES, percentile)}
    else:
        lam = np.full(n, np.nan) if rate is None else rate / R
        lam = np.where(np.isnan(lam), utilization * cap, lam)
        run = running_batch(s, cfg, arr, b, lam / cap, ok, R, output_tokens, percentile, own, busy,
                            rate=None if rate is None else lam)
        per_held = np.full(n, np.nan) if run is None else run["per_held"]
        if run is not None:  # the batch an in-flight engine runs at this load (Little's law), not its slot count
            tpot, tpot_pct, own, busy = (run[k] for k in ("tpot", "tpot_pct", "own", "busy"))
            acc = run["acc"]
        got = np.isfinite(per_held)
        if rate is None:  # a load given as a share of the slots: utilization x b requests held on average
            lam = np.where(got, utilization * b * per_held, lam)
        held = np.where(got, lam / np.where(got, per_held, 1.0), lam / cap * b)
        # the prompts a request meets at the engine's prefill budget are those of the other slots' requests (as the
        # engine's closed loop, :func:`~wseplan.analytic.engine.closed_loop_prefill_wait`): none with one slot
        lam_p = E.others_arrival_rate(lam, b)
        with np.errstate(divide="ignore", invalid="ignore"):
            pre_wait = {p: np.where(busy > 0, Q.mgc_wait(arrival_rate=lam_p, mean_service_s=np.where(busy > 0, busy, 1.0),
                                                         servers=np.ones(n), service_scv=0.0, percentile=p), 0.0)
                        for p in (None, *PERCENTILES, percentile)}
        ttft = own + pre_wait[None]  # mean TTFT before waiting for a slot
        slot = ttft + (output_tokens - 1.0) * tpot  # a request's time in its slot
        scv = Q.service_scv(prefill_s=ttft, decode_s_per_token=tpot, output_tokens_mean=output_tokens,
                            output_tokens_scv=output_scv)
        waits = {p: pre_wait[p] + Q.mgc_wait(arrival_rate=lam, mean_service_s=slot, servers=b, service_scv=scv,
                                             percentile=p) for p in (None, *PERCENTILES, percentile)}
        if s.query.software.engine.scheduling == "static":  # a request joins a batch only where its cycle ends
            waits = {p: w + Q.cycle_wait(arrival_rate=lam, cycle_s=slot, percentile=p) for p, w in waits.items()}
    util = lam / cap  # the load as a share of the full slots' capacity (cost per token scales with its inverse)
    # a steady state needs free slots: fewer requests held on average than slots (the full-slot rate when the batch
    # steps at the slots' pace; a smaller running batch can carry more where a replica's capacity falls with its slots)
    stable = held < b * (1.0 - 1e-12) if not closed else np.ones(n, dtype=bool)
    cost = split = None
    if prices is not None:
        cost = cost_columns(s, arr, nominal(params_for(s, prices, overrides=overrides)))
        split = running_split(run, lam * R * max(output_tokens, 1), prices, overrides) if run is not None else None
    out = []
    for i in np.nonzero(ok)[0]:
        if not stable[i]:
            continue  # the rate exceeds what this point carries: no steady state
        tt = {p: float(own[i] + waits[p][i]) for p in waits}  # own prefill + prefill-budget wait + slot wait
        meets = (tpot_limit_s is None or tpot_pct[i] <= tpot_limit_s) and \
            (ttft_limit_s is None or tt[percentile] <= ttft_limit_s)
        rec = record(s, arr, int(i))
        usd_h = out_usd = in_usd = all_in = None
        if cost is not None:
            u = max(float(util[i]), 1e-12)
            usd_h = float(np.asarray(cost["usd_per_hour"]).ravel()[i if np.size(cost["usd_per_hour"]) > 1 else 0])
            out_usd = float(np.asarray(cost["output_usd_per_mtok"]).ravel()[i]) / u
            all_in = float(np.asarray(cost["all_in_usd_per_mtok"]).ravel()[i]) / u
            iv = np.asarray(cost.get("input_usd_per_mtok", np.full(n, np.nan))).ravel()[i]
            in_usd = None if not np.isfinite(iv) else float(iv) / u
            if split is not None and split[i] is not None:  # the batch the engine runs at this load, not its slots'
                out_usd, in_usd = split[i]
        out.append(ServePoint(
            devices_per_replica=int(round(arr["num_devices"][i] / R[i])), num_replicas=int(R[i]),
            num_devices=int(arr["num_devices"][i]), batch=int(b[i]), running_batch=float(held[i]), layout=rec.layout,
            tpot_s=float(tpot[i]), tpot_at_percentile_s=float(tpot_pct[i]),
            ttft_s=tt[None], ttft_own_s=float(own[i]), ttft_p50_s=tt[50], ttft_p90_s=tt[90], ttft_p95_s=tt[95], ttft_p99_s=tt[99],
            ttft_at_percentile_s=tt[percentile], tokens_per_s_per_user=float(1.0 / tpot[i]),
            capacity_requests_per_s=float(cap[i] * R[i]), requests_per_s=float(lam[i] * R[i]),
            tokens_per_s=float(lam[i] * R[i] * output_tokens), utilization_frac=float(util[i]),
            accepted_tokens_per_step=float(acc[i]),
            bottleneck=bottleneck_name(arr["bottleneck"][i]), meets_sla=bool(meets), usd_per_hour=usd_h,
            output_usd_per_mtok=out_usd, input_usd_per_mtok=in_usd, all_in_usd_per_mtok=all_in,
            **point_interval(rec, float(lam[i] * R[i] * output_tokens), rate), notes=_running_notes(s, rec.notes, run, int(i)) + ([admission_note(users, int(b[i]), float(arr["request_s"][i]),
                                                      float(queue[i]) if closed else None)] if queued else [])))
    return out


def _running_notes(s, notes: list[str], run: dict | None, i: int) -> list[str]:
    """A point's notes, its speculation note taken from the batch it runs at its load where that one was timed
    (:func:`~wseplan.admission.running_batch`): a smaller running batch may speculate where the full slots do not."""
    if run is None or run["rec"][i] is None:
        return list(notes)
    sg, got, j = run["rec"][i]
    spec = [n for n in record(sg, got, j).notes if n.startswith("speculative decoding")]
    return [n for n in notes if not n.startswith("speculative decoding")] + spec


#: GPU replica sizes the serving search tries: powers of two, and an NVL72 rack whole (inside the scale-up domain)
GPU_REPLICA_SIZES = (2, 4, 8, 16, 32, 64, 72)


def split_sizes(t) -> list[int]:
    """The replica sizes a counted target ``t`` splits into (:func:`replica_sizes`): the divisors of its count below
    it, on GPUs inside the scale-up domain; none for a target without a count or of another family."""
    if t.count is None or t.kind not in ("gpu", "wafer"):
        return []
    top = t.count - 1 if t.kind == "wafer" else min(t.count - 1, int(t.device.scale_up_domain_gpus.si))
    return [n for n in range(1, top + 1) if t.count % n == 0]


def replica_sizes(s0) -> list[int | None]:
    """Replica sizes to search: without a count None (the fewest that fit) and larger ones; with a count the plan's
    own layout (None) and a split into equal replicas of each size that divides it: ``("dp", d)`` on GPUs (every
    divisor inside the scale-up domain: 12 H100 as 12 x 1, 6 x 2, 4 x 3, 3 x 4 and 2 x 6, audit31a M3), ``("num_wafers", k)`` on wafers (16 H100 as 2
    replicas of 8, 12 CS-3 as 2 of 6: the plan's layout search maximises the speed per user, so the cheaper split is
    a candidate of its own)."""
    t = s0.query.target
    if t.count is not None:  # a count also runs as equal data-parallel replicas of each size that divides it
        if t.kind == "wafer":
            return [None] + [("num_wafers", k) for k in split_sizes(t)]
        return [None] + [("dp", t.count // n) for n in split_sizes(t)]
    if t.kind == "gpu":  # and, where the fewest exceed the scale-up domain, whole nodes up to twice them (audit31c H2)
        dom = int(t.device.scale_up_domain_gpus.si)
        return [None] + [n for n in GPU_REPLICA_SIZES if n <= dom] + ["x2"]
    return [None, "x2"]


def serve(model, target, *, precision: str = "bf16", software: str | None = None, input_tokens: int | None = None,
          output_tokens: int | None = None, concurrency: int | None = None, rate: float | None = None,
          ttft_limit_s: float | None = None, tpot_limit_s: float | None = None, percentile: float = 95,
          output_scv: float = DEFAULT_OUTPUT_SCV, utilization: float | None = None, options: dict | None = None,
          layout: dict | None = None, batches=None, catalog=None, prices=None,
          overrides: dict | None = None, full_slots: bool = False, setups: dict | None = None,
          min_tokens_per_s_per_user: float | None = None) -> ServeResult:
    """Evaluate serving ``model`` on ``target`` (the API behind ``wseplan serve``).

    With ``concurrency`` the replica runs that many requests at once, or, when their KV caches do not fit, the
    largest batch that fits while the others queue (see the module docstring); without ``rate`` or ``utilization``
    those are a closed loop of ``concurrency`` users (each sends the next request as the last ends: the point of
    ``wseplan time --phase serve --batch N``, slots full; on a target with a count its layout too, the plan chain's
    own). Without a concurrency every one up to the engine's largest
    batch is tried. ``rate`` is the offered load of the whole target [requests/s] (random arrivals); without it an
    open-loop point is reported at ``utilization`` of its capacity (default :data:`DEFAULT_UTILIZATION`). The chosen point: with a rate or limits, the cheapest (or,
    without prices, the most throughput per device) point that carries the rate and meets the limits; otherwise the highest-throughput
    point that gives every user at least ``min_tokens_per_s_per_user`` (default: the catalog's
    ``defaults.default_min_tokens_per_s_per_user``, the floor of ``cost`` and ``compare``; where none does, the fastest per
    user, the point ``cost`` prices). A target without a count sizes the replica itself (replica search, see the module docstring); a
    ``layout`` (e.g. ``{"tp": 2, "pp": 1, "dp": 4}`` on ``h100x8``) fixes it instead. ``prices=False`` skips
    pricing (points without $ fields). ``input_tokens``/``output_tokens`` default to the catalog's serving request
    (``defaults.default_prompt_tokens``, ``default_output_tokens``: 2,048 and 256). ``full_slots`` reports every
    point with its slots full (a closed loop of ``batch`` users, the load ``cost`` and ``compare`` price; no rate).
    ``setups`` (a dict, filled here) reuses the setups of the same question asked before at another load: their
    evaluations do not depend on the load (the lower-load ladder of :func:`with_limits` asks it so).
    """

    cat = catalog or load_catalog()
    cut = None
    if input_tokens is None or output_tokens is None:  # the catalog's serving request, cut to the model's positions
        # with the answer, as time, cost and compare take it (the chain's default_sizes; audit35a L2)
        m = resolve_model(model, cat) if isinstance(model, str) else model
        given = input_tokens
        _, input_tokens, output_tokens, src = default_sizes(cat, "serve", 1, input_tokens, output_tokens, model=m)
        if given is None and src["context"] == "default (the model's positions)":
            cut = (f"input_tokens: the default prompt of {int(cat.defaults.default_prompt_tokens.si):,} tokens is cut "
                   f"to {input_tokens:,}, what the model's {input_tokens + output_tokens:,} positions hold with the "
                   f"{output_tokens:,}-token answer")
    check_positive_int(input_tokens, "input_tokens")
    check_positive_int(output_tokens, "output_tokens")
    if concurrency is not None:
        check_positive_int(concurrency, "concurrency")
    for name, v in (("rate", rate), ("ttft_limit_s", ttft_limit_s), ("tpot_limit_s", tpot_limit_s)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e12):
            raise InputError(f"{name}: must be a positive number below 1e12, got {v!r}")
    if percentile_problem(percentile):
        raise InputError(f"percentile: {percentile_problem(percentile)}")
    floor = None
    if rate is None and ttft_limit_s is None and tpot_limit_s is None and concurrency is None:
        floor = float(cat.defaults.default_min_tokens_per_s_per_user.si) if min_tokens_per_s_per_user is None else \
            min_tokens_per_s_per_user
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 < floor < 1e9:
            raise InputError(f"min_tokens_per_s_per_user (--min-speed): must be a positive number below 1e9 tokens/s "
                             f"per user, got {floor!r}")
    elif min_tokens_per_s_per_user is not None:
        raise InputError("--min-speed: applies without --rate, --concurrency and limits (with a limit, give "
                         "--tpot-limit 1/speed)")
    if utilization is not None and not 0 < utilization < 1:
        raise InputError(f"utilization: must be in (0, 1), got {utilization!r}")
    # a concurrency without a rate or a load: that many users in a closed loop; else random arrivals at the load
    closed_loop = concurrency is not None and rate is None and utilization is None
    # random arrivals at the default load: a point that misses a limit is shown at a lower load that meets it
    ladder = rate is None and utilization is None and not closed_loop and not full_slots
    if full_slots and rate is not None:
        raise InputError("full_slots: every point at its slots full has no arrival rate; drop rate")
    given_utilization = utilization
    utilization = DEFAULT_UTILIZATION if utilization is None else utilization
    if prices is None:
        prices = load_prices(catalog=cat)
    elif prices is False:
        prices = None
    setups = {} if setups is None else setups

    # a floor the user states picks the fastest layout of a batch where none reaches it (audit37a F3); the default
    # floor (cost's operating point) keeps the near-tie's choice
    speed_floor = floor if min_tokens_per_s_per_user is not None else None

    def _setup(m, t):  # one setup per target of the search, kept for the same question at another load
        key = (t if isinstance(t, str) else t.label, speed_floor)
        if key not in setups:
            setups[key] = setup(m, t, phase="serve", precision=precision, software=software, options=options, catalog=cat,
                                speed_floor=speed_floor)
        return setups[key]
    s0 = _setup(model, target)
    require_time_model(s0)
    unpriced_note = None
    if prices is not None and unpriced(s0, prices) and not (overrides and pins_capex(
            overrides, s0.family.hardware(s0.ctx).price_key, cat)):  # a rental-only part: times without dollars
        prices, unpriced_note = None, (f"{s0.family.hardware(s0.ctx).price_key} has no price in the catalogs: the "
                                       "points have no $ figures (--set HW.capex_usd=... prices it)")
    eng = s0.query.software.engine
    if batches is not None:  # the concurrencies to try (fleet's grid); default: powers of two to the engine's max
        for b in batches:
            check_positive_int(b, "batches")
        batches = sorted(set(int(b) for b in batches))
    # the default grid (no concurrency, no batches given) also tries the concurrency that fills the KV cache
    fill_to = int(eng.max_batch.si) if not concurrency and batches is None else None
    given_batches = batches
    batches = [concurrency] if concurrency else batches or concurrency_grid(eng.max_batch.si)
    points: list[ServePoint] = []
    t0 = s0.query.target
    kw = dict(batches=batches, input_tokens=input_tokens, output_tokens=output_tokens, prices=prices,
              overrides=overrides, rate=rate, percentile=percentile, output_scv=output_scv, ttft_limit_s=ttft_limit_s,
              tpot_limit_s=tpot_limit_s, utilization=utilization, fill_to=fill_to, users=concurrency,
              closed_loop=closed_loop, full_slots=full_slots,
              max_batch=int(eng.max_batch.si))
    if layout and s0.query.target.count is None:
        raise InputError(f"layout: a fixed layout needs a target with a device count (e.g. {s0.query.target.key}x8)")
    if layout:  # as `time` takes a given layout: known columns and the family's rules (a GPU layout uses the count)
        layout = check_given_layout(s0, layout)
    # a concurrency no replica size holds: a second search runs the largest batch that fits and queues the rest
    for admit in ((False, True) if concurrency and concurrency > 1 else (False,)):
        kw["admit"] = admit
        # N users (a closed loop, or N slots at a given load) on a target with a count: the plan chain's own layout
        # for batch N (the point of `time --phase serve --batch N`, one implementation; a load changes the load, not
        # the layout: audit30b M1); else the replica search
        for size in ([None] if layout or (concurrency and rate is None and t0.count is not None) else replica_sizes(s0)):
            if size is None:
                s, lay = s0, layout
            elif isinstance(size, tuple):  # a count split into equal data-parallel replicas
                points += _points(s0, layout={size[0]: size[1]}, **kw)
                continue
            elif size == "x2":  # from the fewest that fit to twice that (wafers; GPUs beyond a scale-up domain)
                few = _points(s0, layout=None, **dict(kw, batches=[1], rate=None, fill_to=None, users=None, admit=False))
                kmin = few[0].devices_per_replica if few else None
                step = 1 if t0.kind == "wafer" else int(t0.device.gpus_per_node.si)  # GPUs: whole nodes
                if kmin is None or (t0.kind != "wafer" and kmin <= int(t0.device.scale_up_domain_gpus.si)):
                    continue  # (inside the domain the powers of two are tried)
                for k in range(-(-(kmin + 1) // step) * step, 2 * kmin + 1, step):
                    tk = target_with_count(t0, k)
                    sk = _setup(s0.query.model, tk)
                    points += _points(sk, layout={"num_wafers": k} if t0.kind == "wafer" else {"dp": 1}, **kw)
                continue
            else:
                tk = target_with_count(t0, size)
                s = _setup(s0.query.model, tk)
                lay = {"dp": 1}
            points += _points(s, layout=lay, **kw)
        if points:
            break
    if closed_loop and concurrency > 1 and t0.count is not None and not layout and len(points) == 1 and \
            points[0].batch == concurrency:
        # N users whose layout holds all N: a layout that holds fewer and queues the rest may carry more (audit30b M3:
        # 630 users on 8 H100 ran TP8 at 2,430 tokens/s, 631 ran 618 on TP2 x PP4 at 3,178 and queued 13)
        fewer = [p for p in _points(s0, layout=None, **dict(kw, admit="fewer")) if p.tokens_per_s > points[0].tokens_per_s]
        # only where N does not fit that layout (review30 #1: 12 users on 4 CS-3 queued one that its layout holds)
        if fewer and not _points(s0, layout=layout_columns(s0, fewer[0].layout), **kw):
            points += fewer
    q = s0.query
    spec = None
    if getattr(s0.ctx, "spec", None):
        sp = s0.ctx.spec
        spec = {"draft_model": sp["draft_model"].name, "draft_tokens": sp["draft_tokens"], "acceptance_frac": sp["acceptance_frac"]}
    base = dict(model=q.model.name, target=t0.label, hardware=t0.key, software=q.software.name, precision=precision,
                input_tokens=input_tokens, output_tokens=output_tokens, percentile=percentile, ttft_limit_s=ttft_limit_s,
                tpot_limit_s=tpot_limit_s, rate_per_s=rate, speculative=spec, min_tokens_per_s_per_user=floor)
    seen, uniq = set(), []
    for p in points:  # the replica search can reach the same layout twice (the fewest devices is one of the sizes)
        key = (p.devices_per_replica, p.num_replicas, p.batch, tuple(sorted(p.layout.items())))
        if key not in seen:
            seen.add(key)
            uniq.append(p)
    points = sorted(uniq, key=lambda p: (p.devices_per_replica, p.batch))
    res = _result(base, points, concurrency=concurrency, utilization=utilization, near_tie=_near_tie(cat))
    if concurrency is None and given_batches is None and points:  # the grid's gaps are refined (serve_refine)
        res._grid, res._again = points, {"args": (s0.query.model, target), "grid": list(batches), "kw": dict(
            precision=precision, software=software, input_tokens=input_tokens, output_tokens=output_tokens, rate=rate,
            ttft_limit_s=ttft_limit_s, tpot_limit_s=tpot_limit_s, percentile=percentile, output_scv=output_scv,
            utilization=given_utilization, options=options, layout=layout, catalog=cat,
            prices=False if prices is None else prices, overrides=overrides, full_slots=full_slots, setups=setups,
            min_tokens_per_s_per_user=min_tokens_per_s_per_user)}
        if not (ladder and (ttft_limit_s or tpot_limit_s) and not all(p.meets_sla for p in points)):
            res = _refine(res, concurrency=concurrency, utilization=utilization)  # (with_limits refines its own)
    if ladder and points:  # the same question at lower loads, asked when a limit needs them (with_limits)
        res._lower = {"args": (s0.query.model, target), "loads": {}, "kw": dict(
            precision=precision, software=software, input_tokens=input_tokens, output_tokens=output_tokens,
            percentile=percentile, output_scv=output_scv, options=options, layout=layout, batches=given_batches,
            catalog=cat, prices=prices or False, overrides=overrides, setups=setups)}
        if (ttft_limit_s or tpot_limit_s) and not all(p.meets_sla for p in points):
            res = with_limits(res, ttft_limit_s=ttft_limit_s, tpot_limit_s=tpot_limit_s)
    if not points:  # a sequence past the model's positions is planned as if extended: say so beside "does not fit"
        extra = [n for n in positions_note(s0.query.model, input_tokens, output_tokens) if n not in res.notes]
        if extra:
            res = res.model_copy(update={"notes": res.notes + extra})
    if rate is not None and not points:  # say whether memory or the rate is the reason, and what would carry it
        free = serve(s0.query.model, target, precision=precision, software=software, input_tokens=input_tokens,
                     output_tokens=output_tokens, concurrency=concurrency, percentile=percentile, output_scv=output_scv,
                     utilization=utilization, options=options, layout=layout, batches=given_batches, catalog=cat, prices=False)
        if free.points:
            top = max(free.points, key=lambda p: (p.capacity_requests_per_s / p.num_devices, -p.num_devices))
            per_replica = top.capacity_requests_per_s / top.num_replicas
            reps = int(rate // per_replica) + 1
            dev = "device" if top.devices_per_replica == 1 else "devices"
            res = res.model_copy(update={"notes": res.notes + [
                f"the rate exceeds capacity: the most any point carries is "
                f"{max(p.capacity_requests_per_s for p in free.points):.4g} requests/s; {rate:g} requests/s needs "
                f"at least {reps} replicas of {top.devices_per_replica} {dev} at batch {top.batch}, each carrying "
                f"{per_replica:.4g} requests/s at 100% load (wseplan fleet sizes a fleet for a demand)"]})
    if cut is not None:
        res = res.model_copy(update={"notes": [cut] + res.notes})
    return with_priced_notes(res, prices, overrides, unpriced_note)


#: the fields of a serve record that state its question, limits aside (what a re-judged record keeps)
_QUESTION = {"model", "target", "hardware", "software", "precision", "input_tokens", "output_tokens", "percentile",
             "rate_per_s", "speculative", "min_tokens_per_s_per_user"}


def _refine(res: ServeResult, *, concurrency=None, utilization=DEFAULT_UTILIZATION) -> ServeResult:
    """``res`` with each layout refined between the grid's batches (:func:`wseplan.serve_refine.refine`): every point
    of a layout asked again as the search asked it (``res._again``: the same question with that layout and batch)."""
    again = res._again
    if again is None or res.chosen is None:
        return res
    base = res.model_dump(include=_QUESTION | {"ttft_limit_s", "tpot_limit_s"})
    floor = base["min_tokens_per_s_per_user"]
    model, target = again["args"]
    kw = again["kw"]
    # at the default load a point that misses its limits is shown at a lower one (with_limits): a batch is refined at
    # the load asked, where a larger one is cheaper; one moved to a lower load is not (it costs more per token)
    ladder = kw["rate"] is None and kw["utilization"] is None and not kw["full_slots"]
    cat = kw["catalog"]

    memo = again.setdefault("memo", {})  # at a fixed load the points do not depend on the limits (re-judged here)
    ttft, tpot = kw["ttft_limit_s"], kw["tpot_limit_s"]
    t0 = parse_target(target, cat) if isinstance(target, str) else target
    near = _near_tie(cat)

    def at_load(p: ServePoint) -> bool:  # shown at the load asked (not moved lower by with_limits)
        return not ladder or occupancy(p) >= DEFAULT_UTILIZATION - 1e-9

    def ask(p: ServePoint, batch: int) -> list[ServePoint]:  # p's layout at batch: the search's own question
        t_c = target if t0.count is not None else target_with_count(t0, p.num_devices)
        name = t_c if isinstance(t_c, str) else t_c.label
        s_c = next((v for k, v in kw["setups"].items() if k[0] == name), None) or setup(  # (keyed with the floor)
            model, t_c, phase="serve", precision=kw["precision"], software=kw["software"], options=kw["options"],
            catalog=cat)
        lay = layout_columns(s_c, p.layout)
        if ladder:  # the lower loads a limit needs depend on the limit
            return serve(model, t_c, **dict(kw, layout=lay, batches=[batch])).points
        at = (name, tuple(sorted(lay.items())), batch)
        if at not in memo:
            memo[at] = serve(model, t_c, **dict(kw, layout=lay, batches=[batch], ttft_limit_s=None, tpot_limit_s=None,
                                                min_tokens_per_s_per_user=None)).points
        return [q.model_copy(update={"meets_sla": (tpot is None or tpot_for_limit(q) <= tpot) and
                                     (ttft is None or q.ttft_at_percentile_s <= ttft)}) for q in memo[at]]

    any_setup = next(iter(kw["setups"].values()))  # (the family's layout columns: every setup of the search has them)

    def key(p: ServePoint) -> tuple:  # the layout the question fixes (a wafer's regions follow the batch)
        return p.num_devices, p.devices_per_replica, tuple(sorted(layout_columns(any_setup, p.layout).items()))

    def margin(p: ServePoint) -> float | None:  # the nearest limit's relative distance (>= 0 inside every one)
        m = [p.tokens_per_s_per_user / floor - 1.0] if floor else []
        m += [1.0 - tpot_for_limit(p) / tpot] if tpot else []
        m += [1.0 - p.ttft_at_percentile_s / ttft] if ttft else []
        return min(m) if m else None

    out = refine(res, res._grid, again["grid"], ask=ask, key=key, margin=margin,
                 comparable=at_load,
                 choose=lambda pts: _result(base, pts, concurrency=concurrency, utilization=utilization, near_tie=near),
                 eligible=lambda p: p.meets_sla and (floor is None or p.tokens_per_s_per_user >= floor) and at_load(p))
    if out is not res:  # (the record's notes are its chosen point's; how to ask again stays with it)
        out._lower, out._grid, out._again = res._lower, res._grid, res._again
    return out


def with_limits(result: ServeResult, *, ttft_limit_s: float | None = None, tpot_limit_s: float | None = None) -> ServeResult:
    """``result`` re-judged against other TTFT/TPOT limits (same percentile and points; nothing re-timed).

    The limits only decide which evaluated points qualify, so an SLA grid costs one :func:`serve` per target. A
    :func:`serve` result of random arrivals at the default load (no rate, load or closed loop given) shows a point
    that misses its limits (a TTFT that queueing breaks, a TPOT that the running batch breaks) at the highest lower
    load that meets them (:func:`~wseplan.admission.at_lower_loads`; the same question at each load is asked once per
    result, when needed), as ``serve`` with those limits does; when no load meets them, each point at its closest.
    """
    for name, v in (("ttft_limit_s", ttft_limit_s), ("tpot_limit_s", tpot_limit_s)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e12):
            raise InputError(f"{name}: must be a positive number below 1e12, got {v!r}")
    def judged(points):
        return [p.model_copy(update={"meets_sla": (tpot_limit_s is None or tpot_for_limit(p) <= tpot_limit_s)
                                     and (ttft_limit_s is None or p.ttft_at_percentile_s <= ttft_limit_s)}) for p in points]
    # the search's own points (a point refined between its powers of two is the loose question's, not these limits')
    pts, moved, closer, ask = judged(result._grid or result.points), False, False, result._lower
    if ask is not None and (ttft_limit_s is not None or tpot_limit_s is not None) and not all(p.meets_sla for p in pts):
        def points_at(u, batches):  # the search at load u of the batches still missing their limits; each batch at
            # each load asked once per result (a point's answer at a load does not depend on the other batches asked)
            got = ask["loads"].setdefault(u, {})
            new = [b for b in batches if b not in got]
            if new:
                found = serve(*ask["args"], **dict(ask["kw"], utilization=u, batches=new)).points
                for b in new:
                    got[b] = [p for p in found if p.batch == b]
            return judged([p for b in batches for p in got[b]])

        def movable(p):  # every limit the point misses is one a lower load can cure
            ttft_miss = ttft_limit_s is not None and p.ttft_at_percentile_s > ttft_limit_s
            tpot_miss = tpot_limit_s is not None and tpot_for_limit(p) > tpot_limit_s
            # a point whose own prefill (no queue) is over the TTFT limit cannot meet it at any load; a TPOT is cured
            # only where the engine steps fewer requests at a lower load (in-flight batching, more than one held)
            return ((not ttft_miss or p.ttft_own_s < ttft_limit_s)
                    and (not tpot_miss or (p.running_batch is not None and p.running_batch > 1)))
        pts, moved, closer = at_lower_loads(pts, lambda p: p.meets_sla, points_at, movable,
                                            lambda p: (_worst_ratio(p, ttft_limit_s, tpot_limit_s), p.tpot_s))
    base = result.model_dump(include=_QUESTION)
    base.update(ttft_limit_s=ttft_limit_s, tpot_limit_s=tpot_limit_s)
    if ttft_limit_s is not None or tpot_limit_s is not None:  # the limits choose the point, not the speed floor
        base["min_tokens_per_s_per_user"] = None
    util = occupancy((result._grid or result.points)[0]) if pts and result.rate_per_s is None else DEFAULT_UTILIZATION
    cat = ((result._again or result._lower or {}).get("kw") or {}).get("catalog")
    res = _result(base, pts, utilization=util, near_tie=_near_tie(cat))
    res._lower, res._grid = ask, pts if result._grid is not None else None
    res._again = None if result._again is None else dict(result._again, kw=dict(
        result._again["kw"], ttft_limit_s=ttft_limit_s, tpot_limit_s=tpot_limit_s,
        min_tokens_per_s_per_user=None if ttft_limit_s is not None or tpot_limit_s is not None else
        result._again["kw"]["min_tokens_per_s_per_user"]))
    res = _refine(res, utilization=util)
    if moved:
        res = res.model_copy(update={"notes": res.notes + [
            f"points that miss their limits at {util:.0%} of their slots are shown at the highest of "
            f"{', '.join(f'{u:.0%}' for u in LOWER_LOADS)} that meets them (the same replicas, run less full, queue "
            "less and step fewer requests at a time): their utilization_frac and running_batch say at which"]})
    if closer:
        res = res.model_copy(update={"notes": res.notes + [
            f"no load down to {LOWER_LOADS[-1]:.0%} meets the limits: each point is shown at the load that comes "
            "closest to them (utilization_frac and running_batch say which)"]})
    return with_priced_notes(res, *(((ask or {}).get("kw") or {}).get(k) for k in ("prices", "overrides")))
