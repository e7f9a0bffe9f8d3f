"""Two mechanisms of the GPU training step: the NVFP4 training recipe (a share of the blocks and the attention in 16
bits) and the data-parallel all-reduce inside a scale-up domain larger than a node (GB200 NVL72)."""
import pytest

from wseplan.analytic import gpu_time as G
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog.load import load_catalog
from wseplan.workload import block_types, resolve_model


def test_fp4_training_mix_is_the_nvfp4_recipe():
    # NVIDIA, "Pretraining LLMs with NVFP4" (arXiv:2509.25149), sec. 4: ~15% of the linear layers and the attention in BF16
    q = load_catalog().defaults.fp4_training_high_precision_frac
    assert q.si == 0.15 and q.source == "nvidia-nvfp4-pretraining"
    mix, hp = G.training_precision_mix("fp4", q.si)
    assert hp == "bf16"
    assert mix == ((pytest.approx(0.85), "fp4"), (pytest.approx(0.15), "bf16"))
    assert G.training_precision_mix("fp8", q.si) == (((1.0, "fp8"),), "fp8")
    assert G.training_precision_mix("bf16", q.si) == (((1.0, "bf16"),), "bf16")


def test_a_catalog_may_change_the_recipe_share(tmp_path):
    """``--catalog`` folders override defaults key by key: a recipe with no BF16 blocks makes 4-bit training faster."""
    from wseplan.plan import plan

    (tmp_path / "defaults.yaml").write_text("defaults:\n  fp4_training_high_precision_frac: {value: 0.0, "
                                            "source: mine, basis: user}\n")
    kw = dict(phase="train", precision="fp4", batch=64, context=4096, layout={"tp": 4, "pp": 1, "dp": 16})
    base = plan("llama-3-70b", "b200x64", **kw)
    mine = plan("llama-3-70b", "b200x64", catalog=load_catalog(extra_dirs=[str(tmp_path)]), **kw)
    assert mine.step_s < base.step_s


def _layer(precision, cal, gpu="gb200"):
    cat = load_catalog()
    # one block, 16 sequences of 4,096 tokens: every GEMM compute-bound at its precision's peak
    return G.train_step(resolve_model("llama-3-70b", cat), cat.gpus[gpu], precision=precision, seq_len=4096,
                        global_batch=16, micro_batch=16, tp=1, pp=1, dp=1, recompute="none", single_layer=True,
                        cal=cal)


def test_fp4_training_layer_by_hand():
    cat = load_catalog()
    g = cat.gpus["gb200"]
    base = gpu_calibration()
    # the same GEMM ceiling at every precision and the plain roofline (these 65k-token GEMMs are compute-bound; the
    # soft ridge would add a precision-dependent share of their memory time), so a GEMM's time scales with
    # 1 / (peak x library ratio) alone
    cal = base.replace(gemm_max_frac_4bit=0.7, gemm_max_frac_8bit=0.7, gemm_max_frac_16bit=0.7, gemm_ridge_exponent=0.0,
                       lowp_training_overhead_frac=0.0)  # the 4-bit scaling cost: test_gpu_time.py
    t4 = float(_layer("fp4", cal)["compute_s"])
    t16 = float(_layer("bf16", cal)["compute_s"])
    m = resolve_model("llama-3-70b", cat)
    tokens = 16 * 4096
    gemm16, _ = G.block_gemms_s(block_types(m)[0], tokens, 1.0, g.peak_flop_per_s("bf16") * g.gemm_library_rel("bf16"),
                                g.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac, "bf16", cal)
    speed = (g.peak_flop_per_s("fp4") * g.gemm_library_rel("fp4")) / (g.peak_flop_per_s("bf16") * g.gemm_library_rel("bf16"))
    # forward + 2x backward, no recompute: the 85% of blocks at fp4 save (1 - 1/speed) of their GEMM time; the attention
    # and the element-wise operators are those of the bf16 run
    saving = 3.0 * 0.85 * float(gemm16) * (1.0 - 1.0 / speed)
    assert t16 - t4 == pytest.approx(saving, rel=1e-9)
    # an all-fp4 step would have been faster: the recipe costs 15% of the blocks at the bf16 rate
    assert t4 > t16 - 3.0 * float(gemm16) * (1.0 - 1.0 / speed)


def test_fp8_training_is_unchanged_by_the_mix():
    cal = gpu_calibration()
    a = _layer("fp8", cal)
    cat = load_catalog()
    g = cat.gpus["gb200"]
    m = resolve_model("llama-3-70b", cat)
    t_fwd, parts = G.block_forward_time_s(m, tokens=16 * 4096, context_attended=(4096 + 1) / 2, tp=1.0,
                                      peak_flop_per_s=g.peak_flop_per_s("fp8") * g.gemm_library_rel("fp8"),
                                      hbm_bytes_per_s=g.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac, precision="fp8",
                                      cal=G.training_calibration(cal), attention_peak_flop_per_s=G.attention_peak_flop_per_s(g, "fp8"))
    # fwd + 2x bwd + the flash backward's extra half attention, every block at fp8
    assert float(a["compute_s"]) == pytest.approx(3.0 * float(t_fwd) + 0.5 * float(parts["attention"]), rel=1e-12)


def test_dp_allreduce_inside_an_nvl72_rack_runs_on_nvlink():
    cat = load_catalog()
    cal = gpu_calibration()
    g = cat.gpus["gb200"]
    m = resolve_model("llama-3-8b", cat)
    r = G.train_step(m, g, precision="bf16", seq_len=8192, global_batch=72, micro_batch=1, tp=1, pp=1, dp=72,
                     recompute="none", cal=cal)
    grad = float(G._stage_params(m, 1.0)) * 4.0  # fp32 gradients of bf16 training
    bw = g.scale_up_bandwidth_bytes_per_s.si * cal.nvlink_frac
    # 72 ranks, all in the rack's NVLink domain (not the 4-GPU compute tray): reduce-scatter + all-gather rings on NVLink
    ring = 71 * cal.nvlink_latency_s + 71 / 72 * grad / bw
    assert float(r["dp_comm_s"]) == pytest.approx(2.0 * ring, rel=1e-9)
    # 144 GPUs leave the rack: slower than the 72 inside it
    r2 = G.train_step(m, g, precision="bf16", seq_len=8192, global_batch=144, micro_batch=1, tp=1, pp=1, dp=144,
                      recompute="none", cal=cal)
    assert float(r2["dp_comm_s"]) > float(r["dp_comm_s"])


def test_dp_blocks_that_straddle_racks_reduce_over_the_network():
    """64-GPU data-parallel blocks (TP 4 x DP 16) in 72-GPU racks: most blocks straddle a rack boundary, so the ring
    runs at each GPU's network link (one rank per 4-GPU tray, as before NVL72); 72-GPU blocks (TP 4 x DP 18) fill
    whole racks and stay on NVLink."""
    cat = load_catalog()
    cal = gpu_calibration()
    g = cat.gpus["gb200"]
    m = resolve_model("llama-3-70b", cat)

    def dp_comm(dp):
        return float(G.train_step(m, g, precision="bf16", seq_len=4096, global_batch=dp, micro_batch=1, tp=4, pp=1,
                                  dp=dp, recompute="none", cal=cal)["dp_comm_s"])

    grad = float(G._stage_params(m, 1.0)) / 4 * 4.0  # fp32 gradients of bf16 training
    net = g.scale_out_bandwidth_bytes_per_s.si * cal.network_frac
    ring16 = 2 * 15 * cal.network_latency_s + 2 * 15 / 16 * grad / net  # 16 ranks, one per tray: all on the network
    assert dp_comm(16) == pytest.approx(ring16, rel=1e-9)
    nv = g.scale_up_bandwidth_bytes_per_s.si * cal.nvlink_frac
    ring18 = 2 * (17 * cal.nvlink_latency_s + 17 / 18 * grad / nv)  # reduce-scatter + all-gather inside the rack
    assert dp_comm(18) == pytest.approx(ring18, rel=1e-9)
    assert dp_comm(18) < dp_comm(16)


def test_a_format_without_a_datapath_is_named_in_the_notes():
    """fp4 on H100 (no FP4 tensor cores: its catalog entry has no fp4 peak) serves at the bf16 rate (W4A16), and fp8 on a WSE-3
    (16-bit SIMD only) at the fp16 rate, weight-only; both say so (second audit: silently). A format the device has:
    no note. Training in a format without its datapath is refused (tests/test_precision_datapath.py)."""
    from wseplan.timing import predict_time

    kw = dict(phase="decode", batch=8, context=2048)
    h = predict_time("llama-3-70b", "h100x8", precision="fp4", **kw)
    assert any("no fp4 datapath" in n and "bf16 rate" in n and "weight-only" in n for n in h.notes)
    w8 = predict_time("llama-3-8b", "cs3", precision="fp8", **kw)
    assert any("no fp8 datapath" in n and "fp16 rate" in n for n in w8.notes)
    b = predict_time("llama-3-70b", "b200x8", precision="fp4", **kw)
    w16 = predict_time("llama-3-8b", "cs3", precision="bf16", **kw)
    assert not any("datapath" in n for n in b.notes + w16.notes)
