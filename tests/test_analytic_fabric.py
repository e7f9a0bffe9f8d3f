"""Fabric closed forms (wseplan/analytic/fabric.py).

Named test_analytic_fabric.py, not test_fabric.py: tests/sim/test_fabric.py already owns that basename and
pytest's default import mode rejects two test modules with the same name.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.analytic import fabric as F
from wseplan.catalog import load_catalog
from wseplan.errors import InputError

KW = dict(flop_per_cycle=8.0, sram_bytes_per_cycle=24.0, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0)


def test_message_cycles_hand():
    # 10 hops x 1 cycle + 8 bytes = 2 wavelets x (4 B / 4 B per cycle)
    assert F.message_cycles(hops=10, message_bytes=8, hop_latency_cycles=1, link_bytes_per_cycle=4) == pytest.approx(12.0)
    # a 1-byte message still takes one wavelet
    assert F.message_cycles(hops=0, message_bytes=1, hop_latency_cycles=1, link_bytes_per_cycle=4) == pytest.approx(1.0)


def test_line_broadcast_hand():
    kw = dict(message_bytes=16, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0, ramp_latency_cycles=2.0)
    # chain over 5 PEs: 4 hops + 4 wavelets
    assert F.line_broadcast_cycles(length_pes=5, algo="chain", **kw) == pytest.approx(8.0)
    # store and forward: 4 x (1 + 2 + 4)
    assert F.line_broadcast_cycles(length_pes=5, algo="store_forward", **kw) == pytest.approx(28.0)
    # tree over 8 PEs: 7 hops + 3 levels x (2 + 4)
    assert F.line_broadcast_cycles(length_pes=8, algo="tree", **kw) == pytest.approx(25.0)
    assert F.line_broadcast_cycles(length_pes=1, **kw) == 0.0
    with pytest.raises(InputError):
        F.line_broadcast_cycles(length_pes=4, algo="ring", **kw)


def test_line_reduce_hand():
    kw = dict(message_bytes=16, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0, ramp_latency_cycles=2.0,
              add_cycles_per_wavelet=2.0)
    # chain over 9 PEs: 8 x (1 + 2) + 4 wavelets x max(1, 2) = 32
    # tree: 8 hops + ceil(log2 9) = 4 levels x (2 + 4 x 2) = 48
    assert F.line_reduce_cycles(length_pes=9, algo="chain", **kw) == pytest.approx(32.0)
    assert F.line_reduce_cycles(length_pes=9, algo="tree", **kw) == pytest.approx(48.0)
    assert F.line_reduce_cycles(length_pes=9, algo="best", **kw) == pytest.approx(32.0)
    # long line, short message: the tree wins (999 + 10 x (2 + 1) = 1029 vs 999 x 3 + 1 = 2998)
    kw1 = dict(kw, message_bytes=4, add_cycles_per_wavelet=1.0)
    assert F.line_reduce_cycles(length_pes=1000, algo="best", **kw1) == pytest.approx(1029.0)


def test_line_reduce_tree_levels_hand():
    # 9 PEs need ceil(log2 9) = 4 levels: 8 hops + 4 x (2 + 4 wavelets x 2 cycles)
    got = F.line_reduce_cycles(length_pes=9, message_bytes=16, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0,
                               ramp_latency_cycles=2.0, add_cycles_per_wavelet=2.0, algo="tree")
    assert got == pytest.approx(8 + 4 * (2 + 8))


def test_gemv_cycles_hand():
    # k = n = 8 on 2 x 2 PEs: tiles 4 x 4; MAC = max(2/8, 3*2/24) = 0.25 cycles -> compute 16 x 0.25 = 4
    # broadcast along 2 columns: 1 hop + 2 wavelets (4 values x 2 B / 4 B) = 3
    # reduce 4 values (2 wavelets) along 2 rows: chain 1 x (1 + 2) + 2 x max(1, 2 x 0.25) = 5; tree 1 + 1 x (2 + 2) = 5
    got = F.gemv_cycles(k=8, n=8, rows=2, cols=2, ramp_latency_cycles=2.0, per_kernel_overhead_cycles=10.0, **KW)
    assert got == pytest.approx(10 + 3 + 4 + 5)
    parts = F.gemv_parts_cycles(k=8, n=8, rows=2, cols=2, ramp_latency_cycles=2.0, per_kernel_overhead_cycles=10.0, **KW)
    assert sum(float(v) for v in parts.values()) == pytest.approx(float(got), rel=1e-9)
    assert float(parts["compute"]) == pytest.approx(4.0)
    assert float(parts["overhead"]) == pytest.approx(10.0)


def test_gemm_cycles_hand():
    # m = k = n = 64 on 4 x 4: 4 steps, tiles 16 x 16 x 16 = 4096 MAC x 0.25 / 0.5 = 2048 cycles per step;
    # shift 2 x (1 + 2) + 16*16*2/4 = 128 wavelets -> 134 < 2048; step overhead 100 -> 4 x (100 + 2048) + 7
    got = F.gemm_cycles(m=64, k=64, n=64, rows=4, cols=4, ramp_latency_cycles=2.0, per_kernel_overhead_cycles=7.0,
                        mac_efficiency_frac=0.5, step_overhead_cycles=100.0, **KW)
    assert got == pytest.approx(7 + 4 * (100 + 2048))
    parts = F.gemm_parts_cycles(m=64, k=64, n=64, rows=4, cols=4, ramp_latency_cycles=2.0, per_kernel_overhead_cycles=7.0,
                                mac_efficiency_frac=0.5, step_overhead_cycles=100.0, **KW)
    assert float(parts["overhead"]) == pytest.approx(407.0)
    assert float(parts["compute"]) == pytest.approx(4 * 2048)


def test_mac_cycles_sram_bound_on_wse3():
    cat = load_catalog()
    w3 = cat.wafers["wse3"]
    # 16 FLOP/cycle would allow 8 MAC/cycle, but 24 B/cycle of SRAM allows 4 (6 B per 16-bit MAC)
    assert F.mac_cycles(flop_per_cycle=w3.flop_per_cycle_per_pe["fp16"].si,
                        sram_bytes_per_cycle=w3.sram_bytes_per_cycle_per_pe.si) == pytest.approx(0.25)


def test_allreduce_is_two_reductions_and_two_broadcasts():
    kw = dict(message_bytes=64, hop_latency_cycles=1.0, link_bytes_per_cycle=4.0, ramp_latency_cycles=2.0)
    want = (F.line_reduce_cycles(length_pes=30, **kw) + F.line_reduce_cycles(length_pes=20, **kw)
            + F.line_broadcast_cycles(length_pes=20, **kw) + F.line_broadcast_cycles(length_pes=30, **kw))
    assert F.allreduce_cycles(rows=20, cols=30, **kw) == pytest.approx(float(want), rel=1e-12)


@pytest.mark.parametrize("k,n,region", [(16384, 16384, (750, 750)), (4096, 4096, (420, 420)),
                                        (4096, 14336, (360, 360)), (2048, 2048, (64, 64))])
def test_gemv_closed_form_tracks_simulator(catalog, k, n, region):
    """The closed form (no kernel overhead, same hardware numbers) stays within 25% of the cycle simulator."""
    from wseplan.sim.catalog_params import mesh_params_from_catalog
    from wseplan.sim.mesh import gemv

    sim = gemv(mesh_params_from_catalog(catalog.wafers["wse2"]), k=k, n=n, region=region).cycles
    cf = float(F.gemv_cycles(k=k, n=n, rows=region[0], cols=region[1], ramp_latency_cycles=2.0, **KW))
    assert abs(cf / sim - 1) < 0.25


def test_gemv_latency_s_catalog_and_errors():
    cat = load_catalog()
    w2 = cat.wafers["wse2"]
    c = F.load_fabric_constants()
    t = F.gemv_latency_s(k=16384, n=16384, region_rows=750, region_cols=750, wafer=w2)
    kw = F.wafer_fabric_kwargs(w2, "fp16", c)
    want = float(F.gemv_cycles(k=16384, n=16384, rows=750, cols=750, mac_efficiency_frac=c.gemv_mac_efficiency_frac.si,
                               **kw)) / w2.clock_hz.si
    assert t == pytest.approx(want, rel=1e-12)
    # default: the fastest square whose PEs hold their tiles; never slower than the whole 750 x 750 square
    r, q = F.gemv_region(k=16384, n=16384, wafer=w2)
    assert F.gemv_latency_s(k=16384, n=16384, wafer=w2) == pytest.approx(
        F.gemv_latency_s(k=16384, n=16384, region_rows=r, region_cols=q, wafer=w2), rel=1e-12)
    assert F.gemv_latency_s(k=16384, n=16384, wafer=w2) <= t
    kt, nt = math.ceil(16384 / r), math.ceil(16384 / q)
    assert (kt * nt + kt + 2 * nt) * 2 <= w2.sram_per_pe_bytes.si
    # 16K x 16K x 2 B needs at least 537 MB / 48 KiB = 10,923 PEs
    assert r * q >= 16384 * 16384 * 2 / w2.sram_per_pe_bytes.si
    with pytest.raises(InputError):
        F.gemv_latency_s(k=0, n=16, wafer=w2)
    with pytest.raises(InputError):
        F.gemv_latency_s(k=16, n=16, region_rows=2000, region_cols=2000, wafer=w2)


def test_cross_system_transfer_hand():
    # 2 hops x 5 us + 1 MB at 150 GB/s
    assert F.cross_system_transfer_s(message_bytes=1e6, bandwidth_bytes_per_s=150e9, latency_s=5e-6, num_hops=2) == \
        pytest.approx(1e-5 + 1e6 / 150e9)


def test_calibration_sources_exist():
    cat = load_catalog()
    c = F.load_fabric_constants()
    for name in type(c).model_fields:
        for sid in getattr(c, name).source_ids:
            assert sid in cat.sources, (name, sid)


dims = st.integers(min_value=1, max_value=20000)
sides = st.integers(min_value=1, max_value=700)
factor = st.floats(min_value=1.0, max_value=16.0)


@settings(max_examples=60, deadline=None)
@given(k=dims, n=dims, p=sides, q=sides, f=factor)
def test_gemv_never_slower_with_more_bandwidth_or_compute(k, n, p, q, f):
    base = dict(k=k, n=n, rows=p, cols=q, ramp_latency_cycles=2.0, per_kernel_overhead_cycles=50.0, **KW)
    t0 = float(F.gemv_cycles(**base))
    for key in ("flop_per_cycle", "sram_bytes_per_cycle", "link_bytes_per_cycle"):
        faster = dict(base, **{key: base[key] * f})
        assert float(F.gemv_cycles(**faster)) <= t0 * (1 + 1e-12)
    assert float(F.gemv_cycles(**dict(base, hop_latency_cycles=1.0 / f))) <= t0 * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(m=dims, k=dims, n=dims, p=sides, q=sides, f=factor)
def test_gemm_never_slower_with_more_bandwidth_or_compute(m, k, n, p, q, f):
    base = dict(m=m, k=k, n=n, rows=p, cols=q, step_overhead_cycles=10.0, mac_efficiency_frac=0.3, **KW)
    t0 = float(F.gemm_cycles(**base))
    for key in ("flop_per_cycle", "sram_bytes_per_cycle", "link_bytes_per_cycle"):
        assert float(F.gemm_cycles(**dict(base, **{key: base[key] * f}))) <= t0 * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(nbytes=st.floats(min_value=1.0, max_value=1e9), k=st.sampled_from([2.0, 4.0, 8.0]))
def test_bandwidth_bound_message_scales_inversely(nbytes, k):
    """With no hop latency a message is pure serialisation: k x the link width gives 1/k the time (whole wavelets)."""
    nb = math.ceil(nbytes / 4) * 4
    t1 = F.message_cycles(hops=0, message_bytes=nb, hop_latency_cycles=0, link_bytes_per_cycle=4.0)
    tk = F.message_cycles(hops=0, message_bytes=nb, hop_latency_cycles=0, link_bytes_per_cycle=4.0 * k)
    assert float(tk) == pytest.approx(float(t1) / k, rel=1e-12)
    t1 = F.cross_system_transfer_s(message_bytes=nbytes, bandwidth_bytes_per_s=1e10, latency_s=0.0)
    tk = F.cross_system_transfer_s(message_bytes=nbytes, bandwidth_bytes_per_s=1e10 * k, latency_s=0.0)
    assert float(tk) == pytest.approx(float(t1) / k, rel=1e-12)


def test_vectorized_over_regions():
    sides = np.array([64, 128, 256])
    out = F.gemv_cycles(k=4096, n=4096, rows=sides, cols=sides, **KW)
    assert out.shape == (3,)
    for i, s in enumerate(sides):
        assert out[i] == pytest.approx(float(F.gemv_cycles(k=4096, n=4096, rows=int(s), cols=int(s), **KW)))


def test_fabric_model_declaration_and_kwargs(tmp_path):
    """fabric.yaml's `fabric_model` travels with the loaded constants and decides wafer_fabric_kwargs' default;
    an unknown value is a CatalogError naming the file."""
    from wseplan.errors import CatalogError

    w2 = load_catalog().wafers["wse2"]
    c = F.load_fabric_constants()
    assert c.fabric_model == "sim_fit" and "fabric_model" not in c.values()
    closed = c.with_fabric_model("closed_form")
    kw = F.wafer_fabric_kwargs(w2, "fp16", closed)
    assert all(kw[k] == 0.0 for k in F.SIM_FIT_NAMES) and kw["num_colors"] == np.inf
    assert F.wafer_fabric_kwargs(w2, "fp16", closed, use_sim_fit=True)["num_colors"] == 21
    with pytest.raises(InputError):
        c.with_fabric_model("exact")
    text = (F.default_calibration_dir() / "fabric.yaml").read_text()
    bad = tmp_path / "fabric.yaml"
    bad.write_text(text.replace("fabric_model: sim_fit", "fabric_model: simulated"))
    with pytest.raises(CatalogError, match="fabric_model"):
        F.load_fabric_constants(bad)
