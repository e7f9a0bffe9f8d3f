"""Admission: how many of a replica's users an in-flight engine runs at once.

An in-flight engine (vLLM, TensorRT-LLM, SGLang; the wafer service) admits a request while its KV cache fits, so
the concurrency a replica runs is at most what its memory holds: the default concurrency grid adds the one that fills
the KV cache (:func:`fill_kv`), and a given number of users above it runs at the largest batch that fits while the
others wait in the admission queue (:func:`admitted`, :func:`admission_note`; the wait is
:func:`wseplan.analytic.engine.admission_wait_s`); below its slots it steps the requests it holds, not the slots
(:func:`running_batch`, Little's law). Used by :mod:`wseplan.serving` and the validation of measured
serving rows, so both answer "N users on this replica" the same way.
"""
from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

import numpy as np

from .analytic.cost import nominal
from .plan import Setup, evaluate
from .pricing import cost_columns, params_for
from .records import split_note


def concurrency_grid(max_batch: float) -> list[int]:
    """1, 2, 4, ... up to the engine's largest batch."""
    top = max(1, int(max_batch))
    return [1 << i for i in range(int(math.log2(top)) + 1)]


def fill_kv(s, cfg: dict, arr: dict, kv_tokens: int, max_batch: int | None):
    """``(cfg, arr)`` with one more concurrency: the largest whose KV cache fits, when it lies between the tried ones.

    An in-flight engine (vLLM, TensorRT-LLM, SGLang; the wafer service) admits requests while their KV cache fits
    (``max_batch`` caps it), so its highest-throughput point is the concurrency that fills the memory, not the power of
    two below it. It is read off the largest fitting tried concurrency (the tokens its layout could hold over each
    request's ``kv_tokens``, prompt plus answer as the fit reserves them) and checked by evaluating it; a few smaller
    values are tried when it does not fit (the working set also grows with the concurrency)."""
    b = cfg["batch"]
    ok = np.asarray(arr["fits"], dtype=bool) & np.isfinite(arr["tpot_s"])
    if max_batch is None or not ok.any():
        return cfg, arr
    top = int(np.nonzero(ok)[0][np.argmax(b[ok])])
    room = float(arr["max_tokens_in_flight"][top])
    want = int(min(max_batch, room // max(kv_tokens, 1)))
    for c in dict.fromkeys((want, int(want * 0.97), int(want * 0.9))):
        if c <= b[top] or c in b:
            break
        cfg2 = {k: np.append(v, v[top] if k != "batch" else float(c)) for k, v in cfg.items()}
        arr2 = evaluate(s, cfg2)
        if bool(arr2["fits"][-1]) and np.isfinite(arr2["tpot_s"][-1]):
            return cfg2, arr2
    return cfg, arr


def admitted(s, cfg: dict, users: int, max_batch: int, kv_tokens: int):
    """``(cfg, arr)`` of the one concurrency an engine runs for ``users`` requests whose KV caches do not all fit: the
    largest batch that fits (the powers of two below ``users`` and the one that fills the KV cache, as the default
    grid finds it, :func:`fill_kv`), at most ``max_batch``; None when not even one request fits (the weights)."""
    top = max(1, min(users - 1, max_batch))
    grid = np.asarray(concurrency_grid(top), dtype=float)
    g = {k: grid if k == "batch" else np.full(grid.size, float(v[0])) for k, v in cfg.items()}
    g, arr = fill_kv(s, g, evaluate(s, g), kv_tokens, top)
    ok = np.asarray(arr["fits"], dtype=bool) & np.isfinite(arr["tpot_s"])
    if not ok.any():
        return None
    i = int(np.nonzero(ok)[0][np.argmax(g["batch"][ok])])
    one = {k: v[i:i + 1] for k, v in g.items()}
    return one, evaluate(s, one)


def admission_note(users: int, batch: int, request_s: float, wait_s: float | None) -> str:
    """What the point of ``users`` requests per replica on ``batch`` slots (the most the KV cache holds) means."""
    head = (f"{users} users per replica are more than the KV cache holds: the engine runs batch {batch} (the most "
            f"requests in flight whose KV cache fits) and the other {users - batch} "
            f"{'user waits' if users - batch == 1 else 'users wait'} in its admission queue")
    if wait_s is None:  # a rate is given: the open loop's slot wait (M/G/c on the batch's slots)
        return head + "; TTFT counts the wait for a slot at the given rate"
    return (head + f"; closed loop (each user sends the next request as the last ends): the slots stay full, so "
            f"tokens/s is batch {batch}'s at 100% load, and TTFT adds the queue wait ({users}/{batch} - 1) x the "
            f"{request_s:.4g} s request = {wait_s:.4g} s (every TTFT percentile is this mean)")


def slot_evaluation(s, cfg: dict, kv_tokens: int, fill_to: int | None) -> tuple[dict, dict]:
    """The points' configurations and their evaluation with every slot held (:func:`~wseplan.plan.evaluate`, and the
    concurrency that fills the KV cache where ``fill_to`` is given): what a point is at any load (the load changes the
    batch an in-flight engine steps, :func:`~wseplan.admission.running_batch`, not the slots' layout), so the same
    question at another load (``with_limits``' lower loads) reuses it. Remembered per setup; not to be modified."""
    key = (fill_to, kv_tokens, tuple(sorted((k, np.asarray(v, dtype=float).tobytes()) for k, v in cfg.items())))
    memo = s.ctx.__dict__.setdefault("_slot_evaluations", {})
    if key not in memo:
        arr = evaluate(s, cfg)
        memo[key] = fill_kv(s, cfg, arr, kv_tokens, fill_to) if fill_to is not None else (cfg, arr)
    return memo[key]


def running_batch(s, cfg: dict, arr: dict, b: np.ndarray, util: np.ndarray, ok: np.ndarray, R: np.ndarray,
                   output_tokens: int, percentile: float, own: np.ndarray, busy: np.ndarray,
                   rate: np.ndarray | None = None) -> dict | None:
    """The points as an in-flight engine runs them at a load below its slots: ``tpot`` (mean), ``tpot_pct`` (at
    ``percentile`` of the requests), ``own`` (own prefill) and ``busy`` (prefill-budget time; the full-slot ``own``
    and ``busy`` given are kept where a point does not change), ``per_held`` (requests/s per request held; NaN
    where a point keeps its full-slot figures), ``acc`` (accepted tokens per step of the running batch), ``rows`` (each
    point's row of the running batch's evaluation ``got``, -1 where it keeps its full-slot figures), or None where no
    point changes.

    An in-flight engine (vLLM, TensorRT-LLM, SGLang, the wafer service) steps the requests it holds, not its slot
    count: with requests arriving at ``lambda`` and holding a slot for ``E[S]``, it holds ``N = lambda E[S]`` on
    average (Little's law). Given the arrival rate (``rate``, requests/s per replica), ``N`` is the fixed point of
    ``N = lambda E[S(ceil N)]``, reached from above: ``util x b`` (the full-slot ``E[S]``, an upper bound), then the
    requests that batch's pace holds, until the batch stepped stops changing (a smaller batch steps faster and holds
    each request for less; the sequence falls monotonically, a few evaluations). Each point is evaluated at ``ceil N``
    requests on the layout it chose for ``b`` (the replica does not change its layout with the load); a static batch
    runs its ``b`` slots and keeps them. A load given as a share ``u`` of the slots holds ``u x b`` requests, each
    served at the rate of that batch: ``lambda = u x b / E[S(u x b)]``.

    The requests held at a random time are Poisson with mean ``N`` (an M/G/infinity system: Takacs; the slots far from
    full), and a request's TPOT is the mean step over its life, over which the count held is averaged: with a service
    time of about one request's life the average keeps 2/3 of the variance (``(2/W^2) int_0^W (W - t)(1 - t/W) dt``
    for the count's autocorrelation ``1 - t/W``). The TPOT at ``percentile`` of the requests is the step of
    ``N + z_p sqrt(2N/3)`` requests (``z_p`` the normal quantile), at most the slots."""
    if s.query.software.engine.scheduling != "inflight":
        return None
    with np.errstate(invalid="ignore"):
        run_b = np.minimum(b, np.maximum(1.0, np.ceil(util * b - 1e-9)))
        z = NormalDist().inv_cdf(min(max(percentile / 100.0, 1e-9), 1 - 1e-9))
        pct_b = np.minimum(b, np.maximum(run_b, np.ceil(run_b + z * np.sqrt(2.0 * run_b / 3.0) - 1e-9)))
    idx = np.nonzero(ok & (util < 1.0) & (run_b < b))[0]
    if idx.size == 0:
        return None
    m = idx.size
    sub = {k: np.tile(np.asarray(v)[idx], 2) for k, v in cfg.items()}
    for k in s.family.columns("serve") if hasattr(s.family, "columns") else s.family.layout_columns:
        if k in arr:  # the layout chosen for the slots
            sub[k] = np.tile(np.asarray(arr[k], dtype=float)[idx], 2)
    regions = _slot_regions(arr, np.tile(idx, 2))
    slots = np.tile(np.asarray(b, dtype=float)[idx], 2)
    for _ in range(16 if rate is not None else 1):  # the fixed point N = lambda E[S(ceil N)], from above
        sub["batch"] = np.concatenate([run_b[idx], pct_b[idx]])
        got, where = _on_regions(s, sub, regions, slots)
        if rate is None:
            break
        with np.errstate(invalid="ignore", divide="ignore"):
            per = np.asarray(got["tokens_per_s"], dtype=float)[:m] / (R[idx] * max(output_tokens, 1)) / run_b[idx]
            nxt = np.minimum(run_b[idx], np.maximum(1.0, np.ceil(rate[idx] / per - 1e-9)))
        nxt = np.where(np.isfinite(nxt), nxt, run_b[idx])
        if np.array_equal(nxt, run_b[idx]):
            break
        run_b[idx] = nxt
        pct_b[idx] = np.minimum(b[idx], np.maximum(nxt, np.ceil(nxt + z * np.sqrt(2.0 * nxt / 3.0) - 1e-9)))
    t_got = np.asarray(got["tpot_s"], dtype=float)
    good = np.isfinite(t_got[:m]) & np.isfinite(t_got[m:])
    idx, sel = idx[good], np.nonzero(good)[0]
    tpot = np.array(arr["tpot_s"], dtype=float)
    n = tpot.size
    own, busy = np.array(own, dtype=float), np.array(busy, dtype=float)
    own_r = np.where(np.isfinite(got.get("time.ttft_own_s", np.full(2 * m, np.nan))), got.get("time.ttft_own_s", 0.0),
                     got["ttft_s"])
    tpot_pct = tpot.copy()
    tpot[idx] = t_got[sel]
    tpot_pct[idx] = t_got[m + sel]
    own[idx] = np.asarray(own_r, dtype=float)[sel]
    busy[idx] = np.nan_to_num(np.asarray(got.get("time.prefill_busy_s", np.zeros(2 * m)), dtype=float), nan=0.0)[sel]
    per_held = np.full(n, np.nan)  # requests/s of the replica per request it holds, at the running batch
    per_held[idx] = np.asarray(got["tokens_per_s"], dtype=float)[sel] / (R[idx] * max(output_tokens, 1)) / \
        np.asarray(sub["batch"], dtype=float)[sel]
    # whether the running batch speculates (a smaller batch may where the slots do not: audit29a M1), and where its row
    # of the evaluation is (for its notes)
    acc = np.array(arr.get("time.accepted_tokens_per_step", np.ones(n)), dtype=float)
    acc[idx] = np.asarray(got.get("time.accepted_tokens_per_step", np.ones(2 * m)), dtype=float)[sel]
    rec = [None] * n  # (setup, evaluation, row) of each point's running batch, for its notes
    for i, j in zip(idx.tolist(), sel.tolist()):
        rec[i] = where[j]
    return {"tpot": tpot, "tpot_pct": tpot_pct, "own": own, "busy": busy, "per_held": per_held, "acc": acc,
            "rec": rec}


def running_split(run: dict, tokens_per_s, prices, overrides) -> list:
    """Per point, the output and input $/M of the batch an in-flight engine runs at its load (audit32b M2: the slots'
    split over the load put 64 slots at half load at $0.4455/M output where `cost --batch 32`, the same 32 requests
    held, gives $0.597/M): that batch's split at its own throughput, over the point's (``tokens_per_s``); None where a
    point keeps its slots' figures."""
    out, memo = [None] * len(run["rec"]), {}
    for i, rec in enumerate(run["rec"]):
        if rec is None:
            continue
        sg, got, j = rec
        if id(got) not in memo:
            memo[id(got)] = (got, cost_columns(sg, got, nominal(params_for(sg, prices, overrides=overrides))))
        c = memo[id(got)][1]
        scale = float(np.asarray(got["tokens_per_s"], dtype=float)[j]) / max(float(tokens_per_s[i]), 1e-300)
        o, v = (float(np.asarray(c[k]).ravel()[j]) * scale for k in ("output_usd_per_mtok", "input_usd_per_mtok"))
        out[i] = (o, v if np.isfinite(v) else None)
    return out


#: the evaluation columns :func:`running_batch` reads
_RUN_COLUMNS = ("tpot_s", "tokens_per_s", "ttft_s", "time.ttft_own_s", "time.prefill_busy_s",
                "time.accepted_tokens_per_step")


def _slot_regions(arr: dict, rows: np.ndarray):
    """The decode region (rows, cols) each point chose for its slots (a wafer replica's layout), or None where the
    family chooses none."""
    rr, cc = arr.get("time.region_decode_rows"), arr.get("time.region_decode_cols")
    if rr is None or cc is None:
        return None
    return np.asarray(rr, dtype=float)[rows], np.asarray(cc, dtype=float)[rows]


def _on_regions(s, sub: dict, regions, slots) -> tuple[dict, list]:
    """:func:`evaluate` of ``sub``, each row on its point's slot layout where the family chooses a region per
    question (wafers): a replica keeps its layout at any load, so fewer requests in flight run on the region chosen
    for its slots (audit29b H1: a 6-CS-3 replica of 128 slots ran cheaper at 70% load than at 90% on another region)
    and on the layer partition and layer groups laid out for its ``slots`` (per row; review29b #1: groups sized again
    for the fewer requests' KV cache changed the pipeline, and a replica at 70% load was cheaper than at 80%), not on
    a layout searched again for them. Returns the columns of :data:`_RUN_COLUMNS` and, per row, ``(setup, evaluation,
    row)`` for its record."""
    q = s.query
    if regions is None:
        got = evaluate(s, sub)
        return got, [(s, got, j) for j in range(len(sub["batch"]))]
    given = q.options.get("core_grid") is not None or q.options.get("core_grid_decode") is not None
    n = len(sub["batch"])
    out = {k: np.full(n, np.nan) for k in _RUN_COLUMNS}
    where: list = [None] * n
    keys = list(zip(regions[0].tolist(), regions[1].tolist(), np.asarray(slots, dtype=float).tolist()))
    memo = s.ctx.__dict__.setdefault("_region_setups", {})
    for key in dict.fromkeys(keys):
        rows = np.array([i for i, k in enumerate(keys) if k == key])
        if all(math.isfinite(v) for v in key):
            if key not in memo:  # the question with its layout given (its software profile as given, not by name; a
                # region given by the question stays as given, review30 #2)
                grid = {} if given else {"core_grid_decode": f"{int(key[0])}x{int(key[1])}"}
                qg = replace(q, options={**q.options, **grid, "layout_slots": key[2]})
                memo[key] = Setup(qg, s.family, s.family.prepare(qg))
            sg = memo[key]
        else:
            sg = s
        got = evaluate(sg, {k: np.asarray(v)[rows] for k, v in sub.items()})
        for k in _RUN_COLUMNS:
            if k in got:
                out[k][rows] = np.asarray(got[k], dtype=float)
        for j, i in enumerate(rows.tolist()):
            where[i] = (sg, got, j)
    return out, where


#: loads (share of a replica's slots held on average, highest first) at which a point that misses its limits at the
#: default load (``serving.DEFAULT_UTILIZATION``, 0.9) is tried again: the same replicas run less full queue less (a TTFT
#: limit that queueing breaks) and, under in-flight batching, step fewer requests at a time (a TPOT limit that the
#: running batch breaks), so a larger batch run less full can meet the limits more cheaply than a smaller one run at
#: the default load (``serve`` with limits and no rate, ``fleet``).
LOWER_LOADS = (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)


def at_lower_loads(points: list, meets, points_at, movable, closeness=None) -> tuple[list, bool, bool]:
    """``points`` (at the default load) with each one that misses its limits (``meets(p)`` false) for a reason a lower
    load can cure (``movable(p)``) replaced by the same replica (devices, replicas, layout) and batch at the highest of
    :data:`LOWER_LOADS` where it meets them all. ``points_at(load, batches)`` gives the points of those batches (the
    ones still missing) at a load; it is called only while some point misses.

    With ``closeness`` (a point's distance to its limits, lower is closer) and no point meeting the limits at any load,
    each missing point is replaced by its variant closest to the limits (the question then is which point comes
    closest, and a lower load may come closer than the default one).

    Returns ``(points, moved, closer)``: whether any point was replaced by one that meets the limits, and whether any
    was replaced by a closer one that still misses them."""
    def key(p):
        return p.devices_per_replica, p.num_replicas, p.batch, tuple(sorted(p.layout.items()))

    out = {key(p): p for p in points}
    missing = {k for k, p in out.items() if not meets(p) and movable(p)}
    # nothing meets at the default load: every missing point may come closer at a lower load (its queue shrinks)
    track = {k for k, p in out.items() if not meets(p)} if closeness is not None and not any(
        meets(p) for p in out.values()) else set()
    best = {k: out[k] for k in track}
    moved = False
    for load in LOWER_LOADS:
        if not missing and not track:
            break
        for q in points_at(load, sorted({k[2] for k in missing | track})):
            k = key(q)
            if k in missing and meets(q):
                out[k] = q
                missing.discard(k)
                moved = True
                track.clear()  # a point meets the limits: the closest one no longer matters
            elif k in track and closeness(q) < closeness(best[k]):
                best[k] = q
    closer = False
    if track and not moved:
        for k in track:
            if best[k] is not out[k]:
                out[k] = best[k]
                closer = True
    return [out[key(p)] for p in points], moved, closer


def priced_notes(res, prices, overrides, input_tokens: int, output_tokens: int) -> list[str]:
    """What a priced serve record's dollars assume, beside its points (audit33e): the busy-hour convention (the
    owned hardware's every hour over ``utilization_frac`` of the year, then over the point's load), a load above the
    full-slot rate, and where the input/output split of the chosen point recovers less than the all-in
    (:func:`wseplan.records.split_note`)."""
    c = getattr(res, "chosen", None)
    if c is None or c.all_in_usd_per_mtok is None or not hasattr(prices, "site"):
        return []
    out = []
    u = float((overrides or {}).get("utilization_frac", prices.site.utilization_frac.si))
    if u < 1.0:
        out.append(f"$/M: the hardware's cost for every hour of the year over its busy hours (utilization_frac {u:.0%}: "
                   "the load shown holds that share of the year), then over the point's load; for a demand held all "
                   f"year --set utilization_frac=1 (x{u:.2f} the $/M)")
    if any(p.utilization_frac > 1.0 + 1e-9 for p in res.points):
        out.append("utilization above 100%: at its load a point's running batch steps faster than its full slots, so it "
                   "carries more than the full-slot rate (capacity_requests_per_s); the load is a share of the slots")
    note = split_note(input_tokens, output_tokens, c.input_usd_per_mtok, c.output_usd_per_mtok, c.all_in_usd_per_mtok)
    return out + ([f"chosen point: {note}"] if note else [])


def with_priced_notes(res, prices, overrides, unpriced_note: str | None = None):
    """``res`` with :func:`priced_notes` (or ``unpriced_note``) after its notes, each once: ``serve`` and a re-judged
    record (:func:`wseplan.serving.with_limits`) say the same."""
    extra = [unpriced_note] if unpriced_note is not None else priced_notes(res, prices, overrides, res.input_tokens,
                                                                            res.output_tokens)
    extra = [n for n in extra if n not in res.notes]
    return res.model_copy(update={"notes": res.notes + extra}) if extra else res

