"""The serving search's concurrencies refined between its powers of two (audit31a M1, review31 H1).

The replica search (:func:`wseplan.serving.serve`) tries each layout at the powers of two up to the engine's largest
batch (and the batch that fills the KV cache), so a speed floor or a limit that binds between two of them was met
at the power of two below: 405B fp8 on 8 H200 was priced at batch 16 (28 tokens/s per user, $18.05/M) where batch 28
still gives 20.2 tokens/s per user at $14.27/M. Here every layout whose largest eligible batch of the grid is
followed by an ineligible (or unfitting) one is bisected between the two, so each layout's point lies where its
limit binds; then the record chooses once among all of them. A layout is skipped where even its next batch of the
grid, were it eligible, would not be chosen (its cost or throughput per device bounds what the batches between can
give), so only the layouts that can win are asked again.

One function serves a fresh search and a search re-judged against other limits (:func:`wseplan.serving.with_limits`):
both refine the same grid with the same questions, so they give one record.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import cmp_to_key

from .records import ServePoint, ServeResult


def layout_key(p: ServePoint) -> tuple:
    """The replica layout a point runs (devices, replica size, layout): the batch is what refinement varies."""
    return p.num_devices, p.devices_per_replica, tuple(sorted(p.layout.items()))


def refine(res: ServeResult, grid_points: list[ServePoint], grid_batches: list[int], *,
           choose: Callable[[list[ServePoint]], ServeResult], eligible: Callable[[ServePoint], bool],
           ask: Callable[[ServePoint, int], list[ServePoint]], key: Callable[[ServePoint], tuple] = layout_key,
           margin: Callable[[ServePoint], float] | None = None,
           comparable: Callable[[ServePoint], bool] | None = None) -> ServeResult:
    """``res`` (``choose(grid_points)``) with each layout's largest eligible batch refined up to the next batch of
    ``grid_batches`` by bisection, and the record chosen again among the grid's points and the refined ones.

    ``choose(points)``: the record the search gives for ``points`` (the caller's choice rule); ``eligible(p)``:
    whether ``p`` may be chosen (meets the limits and any per-user speed floor); ``ask(p, batch)``: the points of
    ``p``'s layout at ``batch``, judged as the search judges them (empty where it does not fit or carry the load).
    Batches not in ``grid_batches`` (the one that fills the KV cache) are the layout's largest and are not refined.
    ``key(p)``: the layout a point's batch is varied on (default :func:`layout_key`; a family whose record layout
    follows the batch, as a wafer's regions do, groups by the layout the question fixes). ``margin(p)``: how far
    ``p`` is inside its limits (>= 0 eligible, < 0 not; None: unknown), to probe where it crosses 0 by linear
    interpolation between the bracket's ends instead of at their middle (a per-user speed or a TPOT is near linear in
    the batch: two or three questions instead of six); the bracket still closes as bisection's does.
    ``comparable(p)``: whether a grid point may bound its layout's batches between (default: all); one the search
    showed at a lower load than the one asked costs more than they can (audit31c H1), so it bounds nothing.
    """
    if res.chosen is None or not grid_points:
        return res
    groups: dict[tuple, list[ServePoint]] = {}
    for p in grid_points:
        groups.setdefault(key(p), []).append(p)
    spans = []
    for pts in groups.values():
        ok = [p for p in pts if eligible(p)]
        if not ok:
            continue
        lo = max(ok, key=lambda p: p.batch)
        hi = min((b for b in grid_batches if b > lo.batch), default=None)
        if lo.batch not in grid_batches or hi is None or hi - lo.batch <= 1:
            continue
        spans.append((lo, hi, next((p for p in pts if p.batch == hi), None)))
    # the most promising layouts first (by their next batch as if eligible; the chosen layout's first among layouts
    # without one): a good point early prunes the rest
    hypos = {id(s): None if s[2] is None or (comparable is not None and not comparable(s[2])) else
             s[2].model_copy(update={"meets_sla": True, "tokens_per_s_per_user": float("inf")}) for s in spans}
    chosen_key = key(res.chosen)

    def before(a, b) -> int:
        ha, hb = hypos[id(a)], hypos[id(b)]
        if ha is None or hb is None:
            return (hb is None) - (ha is None) or (key(b[0]) == chosen_key) - (key(a[0]) == chosen_key)
        return -1 if choose([hb, ha]).chosen is ha else 1
    spans.sort(key=cmp_to_key(before))
    extra: list[ServePoint] = []
    best = res
    for span in spans:
        lo, hi, at_hi = span
        hypo = hypos[id(span)]
        if hypo is not None and choose([best.chosen, hypo]).chosen is not hypo:
            continue  # the next batch, were it eligible, bounds what the batches between can give
        top, m_hi = lo, None if margin is None or at_hi is None else margin(at_hi)
        while hi - top.batch > 1:
            mid = (top.batch + hi) // 2
            m_lo = None if margin is None else margin(top)
            if m_lo is not None and m_hi is not None and m_lo >= 0.0 > m_hi:  # where the margin crosses 0, linearly
                guess = int(top.batch + (hi - top.batch) * m_lo / (m_lo - m_hi))
                mid = min(max(guess, top.batch + 1), hi - 1)
            asked = [q for q in ask(top, mid) if key(q) == key(top)]
            got = [q for q in asked if eligible(q)]
            if got:
                top = got[0]
            else:
                hi, m_hi = mid, (margin(asked[0]) if margin is not None and asked else None)
        if top is not lo:
            extra.append(top)
            best = choose(grid_points + extra)
    return best
