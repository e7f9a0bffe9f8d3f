"""The GPU and wafer time models time each layer type as what it is (audit21 F1): MLA, shared experts, mixed
dense/MoE layers and sliding or chunked attention, checked against hand counts written out here (weights and KV
bytes per GPU over the HBM bandwidth the model uses; model FLOPs per token) and by direction (removing a shared
expert or a window changes the time the right way). The hand counts repeat the architecture's arithmetic from the
catalog's config fields, not from wseplan's block tables.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.analytic import gpu_pass as P
from wseplan.analytic import gpu_time as G
from wseplan.catalog import load_catalog
from wseplan.plan import plan, setup
from wseplan.workload import resolve_model

CAT = load_catalog()
PROPS = settings(max_examples=40, deadline=None, derandomize=True, database=None)


def _decode_parts(model, gpu_key, *, precision, batch, context, tp, cal):
    """:func:`gpu_pass.forward_pass_time_s` of one decode step: (time [s], parts)."""
    m = resolve_model(model, CAT) if isinstance(model, str) else model
    return P.forward_pass_time_s(m, CAT.gpus[gpu_key], precision=precision, batch=batch, new_tokens=1, context=context,
                                 tp=tp, cal=cal)


def _cal(model, target, precision):
    """The calibration a plan of ``model`` on ``target`` uses (the software profile's constants)."""
    return setup(model, target, phase="decode", precision=precision, catalog=CAT).ctx.cal


def test_deepseek_v3_fp8_decode_reads_its_mla_latent_and_the_experts_it_routes_to():
    """DeepSeek-V3 fp8 on 8 B200 (TP 8), batch 64, 8,192 cached tokens (audit21 F1's hand figure, ~16 ms).

    Per GPU and step: the routed experts some token picked, 256 (1 - (1 - 8/256)^64) = 222.4 per MoE layer, plus the
    shared expert, each 3 x 7,168 x 2,048 weights split 8 ways, in 58 MoE layers; 3 dense MLPs of width 18,432; MLA's
    projections (q_a and kv_a replicated, q_b, kv_b and the output projection split); the LM head split; and the KV
    latent, 576 B per token and layer (fp8), whole on every GPU. With the plain roofline every block GEMM is
    HBM-bound, so the HBM part is the bytes over the calibrated bandwidth."""
    B, C, tp, d = 64, 8192, 8, 7168
    cal = _cal("deepseek-v3", "b200x8", "fp8").replace(gemm_ridge_exponent=0.0)
    hbm = CAT.gpus["b200"].hbm_bandwidth_bytes_per_s.si * cal.hbm_frac
    read = 256 * (1 - (1 - 8 / 256) ** B)
    assert read == pytest.approx(222.44, abs=0.01)
    expert = 3 * d * 2048
    weights = (58 * (read + 1) * expert + 3 * 3 * d * 18432) / tp \
        + 61 * ((1536 * d + 576 * d) + (128 * 192 * 1536 + 128 * (128 + 128) * 512 + d * 128 * 128) / tp)
    kv = 61 * (512 + 64) * 1.0 * B * (C + 1)
    # activations in and out of every GEMM (16-bit), once per row: MoE layers 9 GEMMs (the routed ones k rows a token),
    # dense 7
    acts = 2.0 * B * (58 * _io(d, tp, moe=True) + 3 * _io(d, tp, moe=False))
    elem = 61 * cal.elementwise_vectors_per_token * 2.0 * d * B / tp
    t, parts = _decode_parts("deepseek-v3", "b200", precision="fp8", batch=B, context=C, tp=tp, cal=cal)
    hbm_part = float(parts["gemm_memory_bound"] + parts["kv_read"] + parts["elementwise"])
    assert hbm_part == pytest.approx((weights + acts + kv + elem) / hbm, rel=1e-6)
    assert float(parts["kv_read"]) == pytest.approx(kv / hbm, rel=1e-12)
    assert weights / 1e9 == pytest.approx(73.8, abs=0.1) and kv / 1e9 == pytest.approx(18.42, abs=0.01)
    # the whole step with the profile's own calibration: the hand's HBM time plus the plan's NVLink and fixed costs,
    # and the soft roofline's share of compute near the ridge (< 15%); the MHA stand-in read 196.5 GB of KV (43.7 ms)
    r = plan("deepseek-v3", "b200x8", phase="decode", batch=B, context=C, precision="fp8", catalog=CAT,
             layout={"tp": tp, "pp": 1, "dp": 1, "adp": 1})  # the attention split over TP, as the hand has it
    cal0 = _cal("deepseek-v3", "b200x8", "fp8")
    # the engine's fixed costs by hand: each block's kernel gaps (58 MoE blocks of 22 kernels, 3 dense MLA blocks of
    # 15, against the 10 of a dense block the per-block launch constant stands for) and the step's host time
    launch = (58 * 22 + 3 * 15) / 10 * cal0.layer_launch_s + 61 * cal0.layer_overhead_s
    assert r.breakdown_s["overhead"] == pytest.approx(launch + cal0.step_host_s + cal0.step_overhead_s, rel=1e-9)
    hand = (weights + kv) / (CAT.gpus["b200"].hbm_bandwidth_bytes_per_s.si * cal0.hbm_frac) \
        + r.breakdown_s["nvlink"] + r.breakdown_s["overhead"]
    assert hand == pytest.approx(17.0e-3, rel=0.02)  # with the calibration of 2026-12-05 (17.4 ms with 2026-12-04's)
    assert hand < r.tpot_s < 1.15 * hand


def _io(d, tp, *, moe):
    """Activation elements in and out of one DeepSeek-V3 layer's GEMMs per token on one GPU: a routed expert GEMM's
    for each of the token's 8 routed rows, the shared expert's once."""
    att = (d + 1536) + (1536 + 128 * 192 / tp) + (d + 576) + (512 + 128 * 256 / tp) + (d + 128 * 128 / tp)
    if moe:
        return att + (8 + 1) * ((d + 2 * 2048 / tp) + (d + 2048 / tp))
    return att + (d + 2 * 18432 / tp) + (d + 18432 / tp)


@pytest.mark.parametrize("batch", [1, 64])
def test_maverick_decode_reads_its_shared_expert_and_dense_layers(batch):
    """Llama-4-Maverick fp8 on 8 B200: 24 MoE layers (128 experts of width 8,192, top-1, and one shared expert of
    the same width) alternate with 24 dense layers of width 16,384. The weights a decode step reads per GPU (plain
    roofline): the routed experts picked, 128 (1 - (1 - 1/128)^B), plus the shared one, per MoE layer; every dense
    MLP; the attention (40 heads and 8 KV heads of 128); the LM head. Removing the shared expert saves 24 of them."""
    B, tp, d = batch, 8, 5120
    cal = _cal("llama-4-maverick", "b200x8", "fp8").replace(gemm_ridge_exponent=0.0)
    hbm = CAT.gpus["b200"].hbm_bandwidth_bytes_per_s.si * cal.hbm_frac
    read = 128 * (1 - (1 - 1 / 128) ** B)
    expert = 3 * d * 8192
    attn = d * (40 + 2 * 8) * 128 + 40 * 128 * d
    weights = (24 * (read + 1) * expert + 24 * 3 * d * 16384 + 48 * attn) / tp
    acts = 2.0 * B * (48 * ((d + 56 * 128 / tp) + (d + 40 * 128 / tp)) + 24 * ((d + 2 * 16384 / tp) + (d + 16384 / tp))
                      + 24 * ((d + 2 * 8192 / tp) + (d + 8192 / tp)) * 2)
    _, parts = _decode_parts("llama-4-maverick", "b200", precision="fp8", batch=B, context=4096, tp=tp, cal=cal)
    assert float(parts["gemm_memory_bound"]) == pytest.approx((weights + acts) / hbm, rel=1e-6)
    m = resolve_model("llama-4-maverick", CAT)
    no_shared = m.model_copy(update=dict(num_shared_experts=0))
    _, p0 = _decode_parts(no_shared, "b200", precision="fp8", batch=B, context=4096, tp=tp, cal=cal)
    saved = 24 * (expert / tp + 2.0 * B * ((d + 2 * 8192 / tp) + (d + 8192 / tp))) / hbm
    assert float(parts["gemm"] - p0["gemm"]) == pytest.approx(saved, rel=1e-6)


def test_gpt_oss_window_layers_read_their_window_at_long_context():
    """gpt-oss-120b, batch 64 at 32,768 tokens on 8 B200 (TP 8, 8 KV heads: one per GPU): 18 full layers read the
    whole cache, 18 sliding layers their 128 tokens; 2 x 8 x 64 x 2 B per token and layer over 8 GPUs. Without the
    window the KV read doubles (audit21: 19.3 GB per GPU charged where 9.7 GB is right)."""
    B, C, tp = 64, 32768, 8
    cal = _cal("gpt-oss-120b", "b200x8", "bf16")
    hbm = CAT.gpus["b200"].hbm_bandwidth_bytes_per_s.si * cal.hbm_frac
    per_tok = 2 * 8 * 64 * 2.0 / tp
    kv = per_tok * B * (18 * (C + 1) + 18 * 128)
    t, parts = _decode_parts("gpt-oss-120b", "b200", precision="bf16", batch=B, context=C, tp=tp, cal=cal)
    assert float(parts["kv_read"]) == pytest.approx(kv / hbm, rel=1e-12)
    assert kv / 1e9 == pytest.approx(9.7, abs=0.1)
    m = resolve_model("gpt-oss-120b", CAT)
    t_full, p_full = _decode_parts(m.model_copy(update=dict(sliding_window=None, layer_types=None)), "b200",
                                   precision="bf16", batch=B, context=C, tp=tp, cal=cal)
    assert float(p_full["kv_read"]) == pytest.approx(per_tok * B * 36 * (C + 1) / hbm, rel=1e-12)
    assert float(t) < float(t_full)


def test_maverick_training_mfu_counts_the_flops_the_step_times():
    """Maverick training on 1,024 H100 (4,096-token sequences, chunk 8,192 > the sequence): the model FLOPs per token
    are 3 x (2 x the active matmul weights: 24 MoE layers with one routed and one shared expert, 24 dense layers of
    16,384, the attention and the LM head; plus 4 x 40 x 128 x 4,096 attention per layer), and the reported MFU is
    those FLOPs over the step's time and the peak. Without the shared expert both the FLOPs and the step fall."""
    d, s = 5120, 4096
    attn = d * (40 + 2 * 8) * 128 + 40 * 128 * d
    mm = 24 * (2 * 3 * d * 8192 + d * 128) + 24 * 3 * d * 16384 + 48 * attn + 202048 * d
    hand = 3.0 * (2.0 * mm + 48 * 4.0 * 40 * 128 * s)
    m = resolve_model("llama-4-maverick", CAT)
    assert G.model_flop_per_token(m, seq_len=s) == pytest.approx(hand, rel=1e-12)
    r = plan(m, "h100-sxmx1024", phase="train", batch=1024, context=s, catalog=CAT)
    peak = CAT.gpus["h100-sxm"].peak_flop_per_s("bf16")
    assert r.model_flop_utilization_frac == pytest.approx(hand * 1024 * s / r.step_s / (r.num_devices * peak), rel=1e-9)
    m0 = m.model_copy(update=dict(num_shared_experts=0))
    r0 = plan(m0, "h100-sxmx1024", phase="train", batch=1024, context=s, catalog=CAT,
              layout={k: r.layout[v] for k, v in (("tp", "tensor_parallel"), ("pp", "pipeline_parallel"),
                                                  ("dp", "data_parallel"), ("micro_batch", "micro_batch"),
                                                  ("vpp", "virtual_pipeline"), ("recompute", "recompute"),
                                                  ("zero_stage", "zero_stage"))})
    assert G.model_flop_per_token(m, seq_len=s) - G.model_flop_per_token(m0, seq_len=s) == \
        pytest.approx(3.0 * 2.0 * 24 * 3 * d * 8192, rel=1e-12)
    assert r0.breakdown_s["compute"] < r.breakdown_s["compute"]


# ---------------------------------------------------------------------------------------------
# Direction: a shared expert or a window removed changes the time the right way, on GPUs and wafers
# ---------------------------------------------------------------------------------------------
GPU_CASES = st.tuples(st.sampled_from(["llama-4-maverick", "llama-4-scout", "deepseek-v3"]),
                      st.sampled_from(["h100-sxm", "b200"]), st.integers(1, 256), st.integers(1, 65536),
                      st.sampled_from([4, 8]))


@PROPS
@given(GPU_CASES)
def test_gpu_decode_is_faster_without_a_shared_expert(case):
    model, gpu, b, c, tp = case
    m = resolve_model(model, CAT)
    cal = G.gpu_calibration()
    t, _ = _decode_parts(m, gpu, precision="fp8", batch=b, context=c, tp=tp, cal=cal)
    t0, _ = _decode_parts(m.model_copy(update=dict(num_shared_experts=0)), gpu, precision="fp8", batch=b, context=c,
                          tp=tp, cal=cal)
    assert float(t0) < float(t)


@PROPS
@given(st.sampled_from(["gpt-oss-120b", "gpt-oss-20b", "llama-4-scout"]), st.integers(1, 256), st.integers(1, 131072))
def test_gpu_decode_never_slower_with_a_window(model, b, c):
    m = resolve_model(model, CAT)
    span = m.sliding_window or m.attention_chunk
    full = m.model_copy(update=dict(sliding_window=None, attention_chunk=None, layer_types=None))
    cal = G.gpu_calibration()
    t, _ = _decode_parts(m, "h100-sxm", precision="bf16", batch=b, context=c, tp=8, cal=cal)
    t_full, _ = _decode_parts(full, "h100-sxm", precision="bf16", batch=b, context=c, tp=8, cal=cal)
    assert float(t) <= float(t_full) * (1 + 1e-12)
    if c > 4 * span:
        assert float(t) < float(t_full)


@pytest.mark.parametrize("model,target,update,slower", [
    ("llama-4-maverick", "cs3x24", dict(num_shared_experts=0), False),
    ("gpt-oss-120b", "cs3x24", dict(sliding_window=None, layer_types=None), True),
])
def test_wafer_decode_direction(model, target, update, slower):
    """On wafers too: the shared expert's GEMVs cost time; a window cut from attention over the whole context
    saves it (decode batch 16 at 32k, the fewest wafers that fit, the same count for both)."""
    m = resolve_model(model, CAT)
    r = plan(m, target, phase="decode", batch=16, context=32768, catalog=CAT)
    r0 = plan(m.model_copy(update=update), target, phase="decode", batch=16, context=32768, catalog=CAT,
              layout={"num_wafers": r.layout["num_wafers"]})
    assert (r0.tpot_s > r.tpot_s) == slower and r0.tpot_s != r.tpot_s


def test_uniform_models_keep_one_block_type():
    """Llama, GPT-3, Qwen3-MoE and Mixtral have one block type with plain attention: the time models take the
    single-block arithmetic they always had (the before/after grid of the change was equal bit for bit)."""
    from wseplan.workload import block_types

    for name in ("llama-3.1-70b", "gpt-3-175b", "qwen3-235b-a22b", "mixtral-8x7b"):
        types = block_types(resolve_model(name, CAT))
        assert len(types) == 1 and types[0].attention.plain
    assert np.all([len(block_types(resolve_model(n, CAT))) > 1 for n in ("deepseek-v3", "llama-4-maverick", "gpt-oss-120b")])
