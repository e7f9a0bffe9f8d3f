"""The serving record of evaluated operating points (:mod:`wseplan.serving`): which meet the limits, the point chosen
(the cheapest meeting them; none meeting them, the closest; no limits, the highest throughput per device fast enough
for every user) and the frontier, with the notes that say why."""
from __future__ import annotations

from .catalog.load import load_catalog
from .records import ServePoint, ServeResult, _worst_ratio, all_in_usd_per_mtok, occupancy, pareto_frontier, tpot_for_limit

#: the load at which a point is reported when no rate is given (share of the replica's capacity)
DEFAULT_UTILIZATION = 0.9
#: answers this short are read whole rather than as a stream: the speed-floor note says what else states the wait
SHORT_ANSWER_TOKENS = 16


def near_tie_frac(catalog) -> float:
    """``defaults.layout_near_tie_frac`` of ``catalog`` (the bundled one when None): how much slower per user a point
    may be than the closest to a speed it cannot reach and still be chosen for what it carries (Seow 2008)."""
    return float((catalog or load_catalog()).defaults.layout_near_tie_frac.si)


def cost_key(p: ServePoint) -> float:
    """What "cheapest" ranks a point by: its all-in $/M output tokens (9 digits), or without prices the throughput per
    device, negated (review31 M2)."""
    if p.usd_per_hour is not None:
        return float(f"{all_in_usd_per_mtok(p):.9g}")
    return -float(f"{p.tokens_per_s / p.num_devices:.9g}")


def result_record(base: dict, points: list[ServePoint], *, concurrency=None, utilization=DEFAULT_UTILIZATION,
                  near_tie: float = 0.0) -> ServeResult:
    """The record for evaluated ``points``: which meet ``base``'s limits, the chosen point and the frontier."""
    rate, ttft_limit_s, tpot_limit_s = base["rate_per_s"], base["ttft_limit_s"], base["tpot_limit_s"]
    if not points:
        why = "even at one request" if concurrency else "at any concurrency"  # more users than fit queue
        note = (f"{base['model']} does not fit {base['target']} {why}" if rate is None else
                f"no point of {base['model']} on {base['target']} fits and carries {rate:g} requests/s")
        return ServeResult(**base, fits=False, notes=[note])
    ok = [p for p in points if p.meets_sla]
    notes = []
    if not ok:  # the closest to the limits, or within near_tie of it the one that carries the most (audit31c M3)
        close = min(_worst_ratio(p, ttft_limit_s, tpot_limit_s) for p in points)
        near = [p for p in points if _worst_ratio(p, ttft_limit_s, tpot_limit_s) <= close * (1.0 + near_tie)]
        chosen = min(near, key=lambda p: (cost_key(p), _worst_ratio(p, ttft_limit_s, tpot_limit_s), p.tpot_s))
        notes.append("no point meets the limits; the point closest to them is shown" if not near_tie else
                     f"no point meets the limits; the cheapest point within {near_tie:.0%} of the closest to them is "
                     "shown (defaults.layout_near_tie_frac: a difference users do not notice)")
    elif rate is not None or ttft_limit_s is not None or tpot_limit_s is not None:
        # cheapest all-in, then at an equal price (a fixed rate on a fixed target) the shortest request at the
        # percentile (audit28e H1: the most queued point was chosen), fewer devices, a larger batch
        o = max(int(base["output_tokens"] or 1), 1)
        chosen = min(ok, key=lambda p: (cost_key(p), (p.ttft_at_percentile_s or 0.0) +
                                        (o - 1) * (tpot_for_limit(p) or 0.0), p.num_devices, -p.batch))
    else:  # the highest throughput per device among the points fast enough for every user (audit28e L3)
        floor = base.get("min_tokens_per_s_per_user")
        o_len = max(int(base["output_tokens"] or 1), 1)
        fast = [p for p in ok if floor is None or p.tokens_per_s_per_user >= floor]
        rank = lambda p: (p.tokens_per_s / p.num_devices, -p.tpot_s)  # noqa: E731
        # none that fast: near the fastest per user, the point closest to the floor (as cost and compare fall back:
        # audit30b H1, the highest-throughput point was shown at 3.3 tokens/s per user against a floor of 200)
        quick = min(tpot_for_limit(p) for p in ok)  # (none that fast: within near_tie of the fastest, as above)
        chosen = max(fast, key=rank) if fast else \
            max([p for p in ok if tpot_for_limit(p) <= quick * (1.0 + near_tie)], key=rank)
        best = max(ok, key=rank)
        if floor is not None and fast and chosen is not best:
            notes.append(f"chosen: the highest-throughput point giving every user >= {floor:g} tokens/s (--min-speed; "
                         f"the floor cost and compare price at), {chosen.tokens_per_s / chosen.num_devices:.4g} tokens/s "
                         f"per device; a slower point not chosen carries more: batch {best.batch} on {best.num_devices} "
                         f"device(s), {best.tokens_per_s / best.num_devices:.4g} tokens/s per device at "
                         f"{best.tokens_per_s_per_user:.3g} tokens/s per user (a lower --min-speed admits it)"
                         + (f"; with answers of {o_len} tokens a step carries mostly the other users' prompts, and "
                            "where users wait for the whole answer (classification, reranking) a --ttft-limit or a "
                            "lower --min-speed states what they wait for" if o_len <= SHORT_ANSWER_TOKENS else ""))
        elif floor is not None and not fast:
            top = max(ok, key=lambda p: p.tokens_per_s_per_user)
            # (audit37a F3: each batch runs its fastest layout where none reaches a floor the user gives)
            notes.append(f"no point gives every user {floor:g} tokens/s (--min-speed); the most throughput per device "
                         f"within {near_tie:.0%} of the fastest per user is shown (the point cost and compare price); "
                         f"the fastest is {top.tokens_per_s_per_user:.4g} tokens/s per user (batch {top.batch}), each "
                         "batch on its fastest layout where none reaches the floor")
    if rate is None and occupancy(chosen) < 1.0:  # else users queue for the slots (closed loop, its note)
        occ = occupancy(chosen)
        at = (f"points at {utilization:.0%} of each replica's slots" if abs(occ - utilization) < 0.005 else
              f"the point shown at {occ:.0%} of its slots (the others at {utilization:.0%} unless a note says otherwise)")
        notes.append(f"{at} (no --rate given): requests arrive at "
                     "random (open loop) and the engine holds that share of its slots on average, the batch it steps; "
                     "TTFT counts their queueing; `wseplan time --phase serve --batch N` gives the steady point of N "
                     "requests in flight (N users each sending the next as the last ends)")
    elif rate is None and concurrency and chosen.batch == concurrency:
        notes.append(f"{concurrency} {'user' if concurrency == 1 else 'users'} per replica in a closed loop (each sends "
                     "the next request as the last ends; the point `wseplan time --phase serve --batch N` gives): "
                     "tokens/s at full load, TTFT with the other users' prompt chunks and no admission queue; --rate gives "
                     "random arrivals (open loop)")
    notes += [n for n in chosen.notes if n not in notes]  # what the plan says of the chosen point
    return ServeResult(**base, fits=True, chosen=chosen, points=points, frontier=pareto_frontier(ok), notes=notes)
