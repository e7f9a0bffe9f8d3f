"""Catalog entries of the 2025 accelerators (B300, GB300, MI355X), checked against independent arithmetic on the
vendors' rack and architecture figures."""
import pytest

from wseplan.catalog.load import load_catalog


def test_gb300_per_gpu_figures_are_the_rack_figures_over_72():
    g = load_catalog().gpus["gb300"]
    # NVIDIA GB300 NVL72: 1,080 PF dense FP4, 360 PF dense FP8, 576 TB/s of HBM bandwidth, 130 TB/s NVLink per rack
    assert g.peak_flop_per_s("fp4") == pytest.approx(1080e15 / 72)
    assert g.peak_flop_per_s("fp8") == pytest.approx(360e15 / 72)
    assert g.hbm_bandwidth_bytes_per_s.si == pytest.approx(576e12 / 72)
    # 130 TB/s bidirectional per rack: ~1.8 TB/s per GPU, 900 GB/s each way
    assert g.scale_up_bandwidth_bytes_per_s.si * 2 * 72 == pytest.approx(130e12, rel=0.01)
    assert g.scale_up_domain_gpus.si == 72
    # Blackwell Ultra: FP4 at 3x the FP8 rate (B200: 2x)
    assert g.peak_flop_per_s("fp4") == pytest.approx(3 * g.peak_flop_per_s("fp8"))


def test_mi355x_fp8_peak_from_its_compute_units():
    g = load_catalog().gpus["mi355x"]
    # AMD at ISSCC 2026: 8,192 FP8 FLOP per clock per CU; 256 CUs (8 XCDs x 32) at 2.4 GHz
    assert g.peak_flop_per_s("fp8") == pytest.approx(8192 * 256 * 2.4e9, rel=1e-4)
    assert g.peak_flop_per_s("bf16") == pytest.approx(g.peak_flop_per_s("fp8") / 2, rel=1e-4)
    assert g.peak_flop_per_s("fp4") == pytest.approx(g.peak_flop_per_s("fp8") * 2, rel=1e-4)


def test_new_gpus_fit_and_time_through_the_plan_chain():
    from wseplan.plan import plan
    cat = load_catalog()
    for target in ("gb300x72", "b300x8", "mi355xx8"):
        r = plan("llama-3.1-70b", target, phase="decode", batch=8, context=4096, catalog=cat)
        assert r.fits
        assert r.tokens_per_s > 0


def test_tpu_v6e_and_v5e_chips_add_up_to_googles_pod_figures():
    cat = load_catalog()
    v6e, v5e = cat.gpus["tpu-v6e"], cat.gpus["tpu-v5e"]
    # Google's pod tables: v6e 234.9 PF bf16 and 102.4 TB/s of all-reduce bandwidth per 256-chip pod; v5e 50.63 PF
    # bf16, 100 PetaOps int8 and 51.2 TB/s
    assert 256 * v6e.peak_flop_per_s("bf16") == pytest.approx(234.9e15, rel=0.002)
    assert 256 * v6e.scale_up_bandwidth_bytes_per_s.si == pytest.approx(102.4e12, rel=1e-9)
    assert 256 * v5e.peak_flop_per_s("bf16") == pytest.approx(50.63e15, rel=0.005)
    assert 256 * v5e.peak_flop_per_s("int8") == pytest.approx(100e15, rel=0.01)
    assert 256 * v5e.scale_up_bandwidth_bytes_per_s.si == pytest.approx(51.2e12, rel=1e-9)
    assert v6e.scale_up_domain_gpus.si == v5e.scale_up_domain_gpus.si == 256


def test_l40s_dense_peaks_are_half_the_sparse_ones():
    g = load_catalog().gpus["l40s"]
    # the datasheet's own pair is 362.05 dense and 733 sparse (1.2% apart from 2x; its FP8 pair is exact)
    assert 2 * g.peak_flop_per_s("bf16") == pytest.approx(733e12, rel=0.015)
    assert 2 * g.peak_flop_per_s("fp8") == pytest.approx(1466e12, rel=1e-9)
    assert g.scale_up_bandwidth_bytes_per_s.si == pytest.approx(64e9 / 2)  # PCIe Gen4 x16, per direction


def test_gh200_runs_the_h100_sxm_gpu_with_more_memory():
    cat = load_catalog()
    h100 = cat.gpus["h100-sxm"]
    for key, hbm, bw in (("gh200", 96, 4.0e12), ("gh200-144gb", 144, 4.9e12)):
        g = cat.gpus[key]
        for p in ("bf16", "fp8", "int8"):  # the same Hopper GPU and tensor cores
            assert g.peak_flop_per_s(p) == pytest.approx(h100.peak_flop_per_s(p), rel=1e-3)
        assert g.hbm_bytes.si == hbm * 2**30 and g.hbm_bandwidth_bytes_per_s.si == pytest.approx(bw)
        assert g.scale_up_bandwidth_bytes_per_s.si == h100.scale_up_bandwidth_bytes_per_s.si


def test_rtx_pro_6000_dense_rates_follow_its_sparse_fp4_figure():
    g = load_catalog().gpus["rtx-pro-6000"]
    # NVIDIA lists 4,000 AI TOPS (FP4, sparse): dense FP4 half of it, FP8 half of that, BF16 half again (Blackwell ratios)
    assert g.peak_flop_per_s("fp4") == pytest.approx(4000e12 / 2)
    assert g.peak_flop_per_s("fp8") == pytest.approx(g.peak_flop_per_s("fp4") / 2)
    assert g.peak_flop_per_s("bf16") == pytest.approx(g.peak_flop_per_s("fp8") / 2)
    # 28 Gb/s GDDR7 on a 512-bit bus
    assert g.hbm_bandwidth_bytes_per_s.si == pytest.approx(28e9 * 512 / 8)
    assert g.scale_up_bandwidth_bytes_per_s.si == pytest.approx(128e9 / 2)  # PCIe Gen5 x16, per direction
