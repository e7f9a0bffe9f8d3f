"""Hand calculations and invariants of the mesh simulator."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.sim import (BroadcastAlgo, Gather, MeshParams, ReduceAlgo, allreduce, broadcast, decode_layer,
                         gemm, gemv, reduce)
from wseplan.sim._errors import InputError
from wseplan.sim.catalog_params import mesh_params_from_catalog


def small(**kw):
    base = dict(rows=64, cols=64, sram_per_pe_bytes=48 * 1024, sram_bytes_per_cycle=24.0, flop_per_cycle=8.0,
                hop_latency_cycles=1.0, link_bytes_per_cycle=4.0, input_queue_depth_wavelets=4, wavelet_bytes=4,
                num_colors=21, clock_hz=1e9)
    base.update(kw)
    return MeshParams(**base)


def test_chain_broadcast_one_wavelet_by_hand():
    p = small(hop_latency_cycles=2.0)
    n = 10
    r = broadcast(p, nbytes=4, region=(1, n), axis="row", algo=BroadcastAlgo.CHAIN)
    # (N-1) hops x hop latency + wavelet / link width, then the write into SRAM (4 B at 24 B/cycle).
    assert r.cycles == pytest.approx((n - 1) * 2.0 + 4 / 4.0 + 4 / 24.0, rel=1e-9)
    assert r.time_s == pytest.approx(r.cycles / 1e9, rel=1e-9)
    assert r.fits and r.colors_used == 1


def test_chain_broadcast_long_message_by_hand():
    p = small()
    r = broadcast(p, nbytes=400, region=(3, 8), axis="col")   # 100 wavelets down 3 rows
    assert r.cycles == pytest.approx(2 * 1.0 + 100 * 1.0 + 4 / 24.0, rel=1e-9)


def test_store_forward_and_tree_by_hand():
    p = small(ramp_latency_cycles=3.0)
    sf = broadcast(p, nbytes=40, region=(1, 5), algo=BroadcastAlgo.STORE_FORWARD)
    assert sf.cycles == pytest.approx(4 * (1 + 3 + 10) + 10 * 4 / 24.0, rel=1e-9)
    tree = broadcast(p, nbytes=40, region=(1, 4), algo=BroadcastAlgo.TREE)
    # stride 2: 0->2 at 2+3+10 = 15; stride 1: 0->1 at max(0, 10)+1+3+10 = 24, 2->3 at 15+14 = 29.
    assert tree.cycles == pytest.approx(29 + 10 * 4 / 24.0, rel=1e-9)


def test_chain_reduce_by_hand():
    p = small(ramp_latency_cycles=2.0)
    # 4 PEs in a row, 1 wavelet of two fp16 values: 3 stages of (hop 1 + ramp 2 + add/link 1) after the
    # far end's 1-cycle send.
    r = reduce(p, nbytes=4, region=(1, 4), algo=ReduceAlgo.CHAIN)
    assert r.cycles == pytest.approx(1 + 3 * (1 + 2 + 1), rel=1e-9)


def test_gemv_compute_bound_single_pe():
    p = small()
    r = gemv(p, k=64, n=32, region=(1, 1))
    mac = max(2 / 8.0, 6 / 24.0)
    # One PE: the x stream (64 values = 32 wavelets) is consumed at 32 MACs per value.
    assert r.compute_cycles == pytest.approx(64 * 32 * mac)
    assert r.cycles >= r.compute_cycles
    assert r.cycles == pytest.approx(1.0 + 64 * 32 * mac, rel=1e-9)   # first wavelet's link time exposed


def test_sram_overflow_gives_fits_false():
    p = small()
    r = gemv(p, k=4096, n=4096, region=(8, 8))   # 512 x 512 x 2 B = 512 KiB per PE
    assert not r.fits and "SRAM" in r.reason and r.shortfall_bytes > 0


def test_colour_overflow_gives_fits_false():
    p = small(num_colors=3)
    r = gemv(p, k=1024, n=1024, region=(64, 64), reduce_algo=ReduceAlgo.TREE,
             broadcast_algo=BroadcastAlgo.TREE)
    assert not r.fits and "colours" in r.reason and r.colors_used > 3
    auto = gemv(p, k=1024, n=1024, region=(64, 64))   # auto picks a reduction that fits
    assert auto.fits and auto.colors_used <= 3


def test_bad_inputs_raise():
    p = small()
    with pytest.raises(InputError):
        gemv(p, k=4, n=64, region=(8, 8))
    with pytest.raises(InputError):
        broadcast(p, nbytes=4, region=(100, 100))
    with pytest.raises(InputError):
        small(hop_latency_cycles=-1)


def test_gather_contention_serialises_on_corner_link():
    p = small()
    free = gemv(p, k=64, n=512, region=(4, 16))
    gathered = gemv(p, k=64, n=512, region=(4, 16), gather=Gather.CORNER)
    # 15 segments of 32 values (16 wavelets) all cross the corner's link.
    assert gathered.cycles >= gathered.compute_cycles + 15 * 16 - 1e-9
    assert gathered.cycles > free.cycles
    assert gathered.gather_cycles > 0


def test_backpressure_slows_broadcast_to_the_slowest_consumer():
    # Streaming into a slow consumer: a shallow queue throttles the whole row.
    p = small()
    r = gemv(p, k=256, n=64, region=(1, 8), reduce_algo=ReduceAlgo.CHAIN)
    mac = max(2 / 8.0, 6 / 24.0)
    assert r.cycles >= 256 * 8 * mac


def test_results_fields_and_row():
    r = gemm(small(), m=8, k=256, n=256, region=(16, 16))
    row = r.to_row()
    assert row["cycles"] == r.cycles and any(k.startswith("phase_") for k in row)
    assert sum(r.phase_cycles.values()) == pytest.approx(r.cycles, rel=1e-9)
    for f in ("pe_busy_mean_frac", "pe_busy_max_frac", "link_utilization_max_frac",
              "link_utilization_mean_frac"):
        assert 0.0 <= getattr(r, f) <= 1.0


def test_decode_layer_small():
    p = small()
    r = decode_layer(p, d_model=256, n_heads=8, n_kv_heads=2, d_ff=512, context=128, region=(32, 32))
    parts = r.part_cycles()
    assert set(parts) >= {"norm1", "qkv", "attention", "o_proj", "norm2", "mlp_up", "mlp_down"}
    assert sum(parts.values()) == pytest.approx(r.cycles, rel=1e-9)
    assert r.fits
    longer = decode_layer(p, d_model=256, n_heads=8, n_kv_heads=2, d_ff=512, context=1024, region=(32, 32))
    assert longer.cycles > r.cycles


# ------------------------------------------------------------------------------------------- invariants
kernels = st.sampled_from(["gemv", "gemm", "bcast", "reduce", "allreduce"])


def run(kind, p, P, Q, size, algo_b, algo_r):
    if kind == "gemv":
        return gemv(p, k=size * P, n=size * Q, region=(P, Q), broadcast_algo=algo_b, reduce_algo=algo_r)
    if kind == "gemm":
        return gemm(p, m=3, k=size * P, n=size * Q, region=(P, Q), broadcast_algo=algo_b, reduce_algo=algo_r)
    if kind == "bcast":
        return broadcast(p, nbytes=4 * size, region=(P, Q), algo=algo_b)
    if kind == "reduce":
        return reduce(p, nbytes=4 * size, region=(P, Q), algo=algo_r)
    return allreduce(p, nbytes=4 * size, region=(P, Q), algo=algo_r)


common = dict(
    kind=kernels, P=st.integers(1, 9), Q=st.integers(1, 9), size=st.integers(1, 40),
    h=st.floats(0.0, 4.0), ramp=st.floats(0.0, 4.0), depth=st.integers(1, 8),
    algo_b=st.sampled_from(list(BroadcastAlgo)), algo_r=st.sampled_from(list(ReduceAlgo)),
)


@settings(max_examples=150, deadline=None)
@given(extra=st.floats(0.0, 3.0), **common)
def test_more_hop_latency_never_faster(kind, P, Q, size, h, ramp, depth, algo_b, algo_r, extra):
    a = run(kind, small(hop_latency_cycles=h, ramp_latency_cycles=ramp, input_queue_depth_wavelets=depth),
            P, Q, size, algo_b, algo_r)
    b = run(kind, small(hop_latency_cycles=h + extra, ramp_latency_cycles=ramp,
                        input_queue_depth_wavelets=depth), P, Q, size, algo_b, algo_r)
    assert b.cycles >= a.cycles - 1e-9


@settings(max_examples=150, deadline=None)
@given(**common)
def test_doubling_link_bandwidth_never_slower(kind, P, Q, size, h, ramp, depth, algo_b, algo_r):
    kw = dict(hop_latency_cycles=h, ramp_latency_cycles=ramp, input_queue_depth_wavelets=depth)
    a = run(kind, small(**kw), P, Q, size, algo_b, algo_r)
    b = run(kind, small(link_bytes_per_cycle=8.0, **kw), P, Q, size, algo_b, algo_r)
    assert b.cycles <= a.cycles + 1e-9


@settings(max_examples=150, deadline=None)
@given(**common)
def test_time_above_compute_and_hop_floors(kind, P, Q, size, h, ramp, depth, algo_b, algo_r):
    p = small(hop_latency_cycles=h, ramp_latency_cycles=ramp, input_queue_depth_wavelets=depth)
    r = run(kind, p, P, Q, size, algo_b, algo_r)
    assert r.cycles >= r.compute_cycles - 1e-9
    # Farthest PE is (P-1)+(Q-1) hops from where its data starts for every kernel here.
    if kind in ("gemv", "gemm", "allreduce"):
        assert r.cycles >= ((P - 1) + (Q - 1)) * h - 1e-9
    else:
        assert r.cycles >= (Q - 1) * h - 1e-9
    for f in ("pe_busy_mean_frac", "pe_busy_max_frac", "link_utilization_max_frac"):
        assert 0.0 <= getattr(r, f) <= 1.0


@settings(max_examples=100, deadline=None)
@given(P=st.integers(1, 6), Q=st.integers(1, 6), size=st.integers(1, 30), depth=st.integers(1, 6))
def test_deeper_queue_never_slower(P, Q, size, depth):
    a = gemv(small(input_queue_depth_wavelets=depth), k=size * P, n=size * Q, region=(P, Q))
    b = gemv(small(input_queue_depth_wavelets=depth + 3), k=size * P, n=size * Q, region=(P, Q))
    assert b.cycles <= a.cycles + 1e-9


def test_catalog_wafers_documented_numbers(catalog):
    w2, w3 = (mesh_params_from_catalog(catalog.wafers[k]) for k in ("wse2", "wse3"))
    assert (w2.rows * w2.cols, w3.rows * w3.cols) == (745_500, 883_350)
    assert w2.flop_per_cycle == 8 and w3.flop_per_cycle == 16 and w2.num_colors == 21
    assert mesh_params_from_catalog(catalog.wafers["wse2"], clock_hz=0.85e9).clock_hz == 0.85e9
    assert math.isclose(w2.wavelet_cycles, 1.0)


def test_colour_limit_takes_the_ktree(catalog):
    """WSE-3 keeps 6 free colours: a 377-PE line's binary tree needs 9 levels (does not fit), so the automatic
    choice is the two-level K-tree (4 colours), faster than the chain that fits too (WaferLLM's MeshGEMV)."""
    p = mesh_params_from_catalog(catalog.wafers["wse3"])
    auto = reduce(p, nbytes=64, region=(1, 377), axis="row")
    kt = reduce(p, nbytes=64, region=(1, 377), axis="row", algo=ReduceAlgo.KTREE)
    tree = reduce(p, nbytes=64, region=(1, 377), axis="row", algo=ReduceAlgo.TREE)
    chain = reduce(p, nbytes=64, region=(1, 377), axis="row", algo=ReduceAlgo.CHAIN)
    assert not tree.fits and kt.fits and chain.fits and kt.colors_used == 4
    assert auto.cycles == kt.cycles < chain.cycles
    # with colours for the binary tree the K-tree is not taken
    free = reduce(small(num_colors=21, rows=1, cols=377), nbytes=64, region=(1, 377), axis="row")
    assert free.cycles == reduce(small(num_colors=21, rows=1, cols=377), nbytes=64, region=(1, 377), axis="row",
                                 algo=ReduceAlgo.TREE).cycles


def test_allreduce_keeps_within_the_colours_on_wse3(catalog):
    """The 2-D all-reduce lets each line reduction use the budget less the two broadcasts' colours, so it leaves the
    K-tree out (two K-trees would need 4 + 4 + 2 colours): on WSE-3 a 100 x 100 all-reduce fits, with chains."""
    p = mesh_params_from_catalog(catalog.wafers["wse3"])
    r = allreduce(p, nbytes=64, region=(100, 100))
    assert r.fits and r.colors_used <= 6
    assert r.cycles == allreduce(p, nbytes=64, region=(100, 100), algo=ReduceAlgo.CHAIN).cycles
