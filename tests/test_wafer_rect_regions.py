"""Rectangular regions of the resident wafer family (buyer audit): WaferLLM's square regions (He et al., OSDI 2025)
leave the wafer's remainder idle and their count jumps, so a few more bytes of KV cache pushed the layer groups onto
far fewer, larger regions (decode time cliffs that do not follow the workload). The region search also takes the
near-square rectangles that tile the wafer maximally (:func:`wseplan.devices.wafer_regions.region_shapes`), so the
time per output token follows the batch and the context, and a layout whose bytes the SRAM holds always has a region.
"""
from __future__ import annotations

import numpy as np
import pytest

from wseplan.devices.wafer_regions import admissible, region_capacity, region_shapes
from wseplan.plan import evaluate, setup


def _decode(catalog, model, target, batch, context):
    s = setup(model, target, phase="decode", catalog=catalog)
    b = np.asarray(batch, dtype=float)
    return evaluate(s, {"batch": b, "context": np.broadcast_to(np.asarray(context, dtype=float), b.shape).copy(),
                        "output_tokens": np.zeros(len(b))})


def test_8b_one_cs3_batch_scan_is_monotone_without_fallback(catalog):
    """Llama-3.1-8B on one CS-3 at 4,096 tokens, batch 40..48: before, batch 43 ran on 24 squares of 188 PEs (0.448
    ms), 44 on 6 of 377 (0.559 ms) and 45 on the 755-PE fallback (0.762 ms) for 2.6% more SRAM. Now every batch that
    fits (40..46; 47 and 48 exceed the wafer's SRAM) has an admissible region and the time per output token never
    falls as the batch grows."""
    b = np.arange(40.0, 49.0)
    r = _decode(catalog, "llama-3.1-8b", "cs3x1", b, 4096.0)
    fits = r["fits"].astype(bool)
    assert fits[:7].all()
    tpot = np.asarray(r["tpot_s"], dtype=float)[fits]
    assert np.all(np.diff(tpot) >= -1e-12 * tpot[1:]), tpot
    assert not np.asarray(r["time.region_fallback"], dtype=float)[fits].any()
    assert tpot.max() < 0.46e-3  # no cliff: within a few percent of batch 40's


def test_405b_on_22_cs3_longer_context_is_not_faster(catalog):
    """Llama-3.1-405B on 22 CS-3 at batch 1: before, 64k tokens (0.755-PE fallback, 1.39 ms) came out faster than 32k
    (2.05 ms on 377-PE squares). Now the time per output token is non-decreasing over 16k, 32k, 48k and 64k tokens and
    no context falls back."""
    ctx = np.array([16384.0, 32768.0, 49152.0, 65536.0])
    r = _decode(catalog, "llama-3.1-405b", "cs3x22", np.ones(4), ctx)
    assert r["fits"].all()
    tpot = np.asarray(r["tpot_s"], dtype=float)
    assert np.all(np.diff(tpot) >= 0.0), tpot
    assert not np.asarray(r["time.region_fallback"], dtype=float).any()


def test_a_rectangle_by_hand(catalog):
    """On the 1,170 x 755 PE CS-3, a = 6 region rows give rows of 1,170 // 6 = 195 PEs; 6 x 755 / 1,170 = 3.87, and of
    b = 3 (755 // 3 = 251 columns) and b = 4 (188) the nearer to 195 is 188: 6 x 4 = 24 regions of 195 x 188 = 36,660
    PEs, each 36,660 x 48 KiB x (1 - 5% reserve) = 1,711,816,704 bytes. The 188-PE square also tiles into 6 x 4 = 24
    regions, of 35,344 PEs (3.7% less: 1,170 - 6 x 188 = 42 PE rows idle). A fullest wafer of 24 such rectangles' bytes
    is admissible on them and not on the squares; one byte more needs a 25th group and is not admissible either (the
    research profile: equal regions, the fewest groups). An engine that spreads its layers over every region
    (``layer_groups: fill``, the production profile) shares the whole wafer's SRAM over the 24 regions of either
    tiling: 1,170 x 755 x 48 KiB x 0.95 / 24 each, so both hold it."""
    s = setup("llama-3.1-8b", "cs3", phase="decode", software="wafer-research", catalog=catalog)
    ctx = s.ctx
    assert (ctx.R, ctx.C, ctx.sram_pe, ctx.reserve) == (1170, 755, 49152.0, 0.05)
    rows, cols = region_shapes(1170, 755, ctx.sides)
    assert rows.tolist() == ctx.region_rows.tolist() and cols.tolist() == ctx.region_cols.tolist()
    assert rows[: len(ctx.sides)].tolist() == cols[: len(ctx.sides)].tolist() == ctx.sides.tolist()  # squares first
    pairs = list(zip(rows.tolist(), cols.tolist()))
    assert (195.0, 188.0) in pairs and (195.0, 251.0) not in pairs and (1170.0, 755.0) in pairs
    assert all(max(p) <= 2 * min(p) for p in pairs)
    j, sq = pairs.index((195.0, 188.0)), pairs.index((188.0, 188.0))
    cap = region_capacity(ctx, rows, cols)
    assert float(cap[j]) == 1_711_816_704.0 and float(cap[sq]) == 188 * 188 * 49152 * 0.95
    assert (1170 // 195) * (755 // 188) == (1170 // 188) * (755 // 188) == 24
    cfg = {"_valid": np.array([[True], [True]]), "_sb": np.array([[24 * cap[j]], [24 * cap[j] + 1.0]])}
    ok = admissible(ctx, cfg, np.array([1e9, 1e9]))
    assert ok[0, j] and not ok[1, j]
    assert not ok[0, sq] and not ok[1, sq]
    fill = setup("llama-3.1-8b", "cs3", phase="decode", catalog=catalog).ctx
    assert fill.engine.layer_groups == "fill"
    share = 1170 * 755 * 49152 * 0.95 / 24
    fcap = region_capacity(fill, rows, cols)
    assert float(fcap[j]) == pytest.approx(share, rel=1e-12) and float(fcap[sq]) == pytest.approx(share, rel=1e-12)
    ok = admissible(fill, cfg, np.array([1e9, 1e9]))
    assert ok[0, j] and ok[0, sq] and ok[1, j] and ok[1, sq]
