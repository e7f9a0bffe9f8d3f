"""GPU time models: formulas, properties, the layout search against brute force, and the time command."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.analytic import gpu_pass as P
from wseplan.analytic import gpu_time as G
from wseplan.calibration_data import GpuCalibration, gpu_calibration, read_gpu_efficiency
from wseplan.cli import main
from wseplan.errors import InputError
from wseplan.analytic.memory import gpu_layout_memory
from wseplan.plan import plan
from wseplan.targets import parse_target
from wseplan.timing import predict_time
from wseplan.workload import resolve_model, transformer_workload


def _mem(w, catalog, *, tp, pp, dp, zero_stage, recompute, micro_batch, vpp=1):
    d = catalog.defaults
    return gpu_layout_memory(w, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage, recompute=recompute, micro_batch=micro_batch,
                             virtual_stages=vpp, batch=w.batch, context=w.context,
                             gradient_bytes_per_param=d.gradient_bytes_per_param.si,
                             adam_state_bytes_per_param=d.adam_state_bytes_per_param.si,
                             prefill_chunk_tokens=d.prefill_chunk_tokens.si)


def _scaled(gpu, *, bw=1.0, compute=1.0):
    """A copy of a catalog GPU with every bandwidth scaled by ``bw`` and every peak by ``compute``."""
    def q(x, k):
        return x.model_copy(update={"si": x.si * k})

    upd = {f: q(getattr(gpu, f), bw) for f in ("hbm_bandwidth_bytes_per_s", "scale_up_bandwidth_bytes_per_s",
                                                "scale_out_bandwidth_bytes_per_s")}
    upd["dense_peak_flop_per_s"] = {p: q(v, compute) for p, v in gpu.dense_peak_flop_per_s.items()}
    return gpu.model_copy(update=upd)


def test_pipeline_bubble_formulas():
    # Narayanan et al. 2021: 1F1B bubble (p-1)/(m+p-1); interleaved overhead (p-1)/(v m) of the ideal time
    assert G.pipeline_bubble_frac(num_stages=8, num_microbatches=96) == pytest.approx(7 / 103, rel=1e-12)
    f = G.pipeline_bubble_frac(num_stages=8, num_microbatches=96, virtual_stages=2)
    assert f / (1 - f) == pytest.approx(7 / (2 * 96), rel=1e-12)
    assert G.pipeline_bubble_frac(num_stages=1, num_microbatches=5) == 0.0


def test_gemm_efficiency_saturates_with_shape():
    e = G.gemm_efficiency_frac(m=np.array([1, 64, 1024, 65536]), n=8192, k=8192, max_frac=0.8, half_intensity=50.0)
    assert np.all(np.diff(e) > 0)
    assert e[-1] < 0.8
    # intensity 1/(1/M+1/N+1/K) = 100 when M=N=K=300: eff = 0.8 * 100/150
    assert G.gemm_efficiency_frac(m=300, n=300, k=300, max_frac=0.8, half_intensity=50.0) == pytest.approx(0.8 * 100 / 150)


def test_ridge_combine_is_a_soft_roofline():
    # p = 2 on a 3-4-5 triangle: sqrt(3^2 + 4^2) = 5 (hand calculation); p <= 0 is the plain roofline max
    assert G.ridge_combine_s(3.0, 4.0, 2.0) == pytest.approx(5.0, rel=1e-12)
    assert G.ridge_combine_s(3.0, 4.0, 0.0) == 4.0
    # p = 1 adds the two times (no overlap): half the compute roof exactly at the ridge
    assert G.ridge_combine_s(np.array([2.0]), np.array([2.0]), 1.0)[0] == pytest.approx(4.0, rel=1e-12)
    # between the roofline max and the sum for any p >= 1; tends to the max as p grows
    rng = np.random.default_rng(1)
    tc, tm = rng.uniform(1e-6, 1e-3, 200), rng.uniform(1e-6, 1e-3, 200)
    for p in (1.0, 1.7, 3.0, 8.0):
        t = G.ridge_combine_s(tc, tm, p)
        assert np.all(t >= np.maximum(tc, tm) * (1 - 1e-12)) and np.all(t <= (tc + tm) * (1 + 1e-12))
    assert np.allclose(G.ridge_combine_s(tc, tm, 200.0), np.maximum(tc, tm), rtol=0.01)
    # far from the ridge the larger time is the answer: a batch-1 GEMV's compute time is ~1/150 of its memory time
    # on an A100 (2 FLOP per 2-byte weight against a 153 FLOP/byte balance), and p = 1.7 adds well under 1%
    assert G.ridge_combine_s(1.0, 150.0, 1.7) == pytest.approx(150.0, rel=1e-2)


def test_calibration_file_loads_and_lists_fitted_rows():
    f = read_gpu_efficiency()
    assert f.fitted_on and all(r.startswith("R") for r in f.fitted_on)
    cal = gpu_calibration()
    for k, q in f.constants.items():
        assert getattr(cal, k) == pytest.approx(q.si)
        assert q.source == "wseplan-gpu-calibration"


def test_train_step_hand_composition(catalog):
    """Step = pipeline (m + (p-1)/v) x per-micro-batch time + exposed DP + optimizer + fixed overhead."""
    m = resolve_model("gpt-3-175b", catalog)
    gpu = catalog.gpus["a100-80gb"]
    cal = gpu_calibration()
    r = G.train_step(m, gpu, precision="bf16", seq_len=2048, global_batch=1536, tp=8, pp=12, dp=16, vpp=2, micro_batch=1,
                     recompute="full", zero_stage=1, cal=cal)
    nmb = 1536 / 16
    t_unit = (r["compute_s"] + r["p2p_s"]) / nmb
    expect = t_unit * (nmb + 11 / 2) + r["dp_exposed_s"] + r["optimizer_s"] + cal.train_step_overhead_s
    assert r["step_s"] == pytest.approx(expect, rel=1e-9)
    assert r["bubble_s"] == pytest.approx(t_unit * 11 / 2, rel=1e-9)


def test_recompute_and_interleaving_effects(catalog):
    m = resolve_model("gpt-3-175b", catalog)
    gpu = catalog.gpus["a100-80gb"]
    cal = gpu_calibration()
    kw = dict(precision="bf16", seq_len=2048, global_batch=512, tp=8, pp=16, dp=4, micro_batch=1, zero_stage=1, cal=cal)
    none, sel, full = (G.train_step(m, gpu, recompute=r, **kw)["step_s"] for r in ("none", "selective", "full"))
    assert none < sel < full
    assert full / none == pytest.approx(4 / 3, rel=0.1)  # an extra forward on a GEMM-bound step
    v1 = G.train_step(m, gpu, recompute="full", vpp=1, **kw)["bubble_s"]
    v2 = G.train_step(m, gpu, recompute="full", vpp=3, **kw)["bubble_s"]
    assert v2 < v1


def test_narayanan_145b_within_10pct(catalog):
    """Narayanan et al. 2021, Table 1: 145.6B on 1,536 A100 (TP8 PP8 DP24, batch 2304): 148 TFLOP/s per GPU."""
    from wseplan.validate import predict_case, read_cases, default_cases_path

    case = next(c for c in read_cases(default_cases_path()) if c.id == "R013")
    assert case.value == 148 and case.get("tp") == 8 and case.get("pp") == 8 and case.get("dp") == 24
    pred = predict_case(case, catalog)
    assert abs(pred / 148 - 1) <= 0.10


def test_predict_time_train_record(catalog):
    r = predict_time("gpt-3-175b", "a100x1536", phase="train", batch=2304, context=2048, catalog=catalog,
                     tensor_parallel=8, pipeline_parallel=8, recompute="full", zero_stage=0)
    assert r.num_devices == 1536 and r.layout["data_parallel"] == 24
    assert r.bottleneck in r.breakdown_s
    assert 0 < r.model_flop_utilization_frac <= 1
    assert r.tokens_per_s == pytest.approx(2304 * 2048 / r.step_s)


def test_inference_bottlenecks(catalog):
    dec = predict_time("llama-2-13b", "a100x1", phase="decode", batch=1, context=4096, catalog=catalog)
    assert dec.bottleneck == "hbm_bandwidth"
    assert dec.tokens_per_s_per_user == pytest.approx(1 / dec.tpot_s)
    pre = predict_time("llama-3-8b", "h100x1", phase="prefill", batch=1, context=8192, catalog=catalog)
    assert pre.bottleneck == "compute"
    # static batches (the benchmark profile): a request is the batch's prefill then 255 decode steps
    e2e = predict_time("llama-3-8b", "h100x1", phase="decode", batch=8, context=1024, output_tokens=256, catalog=catalog,
                       software="gpu-fitted-2026-11")
    assert e2e.step_s == pytest.approx(e2e.ttft_s + 255 * e2e.tpot_s, rel=1e-9)
    assert e2e.tokens_per_s == pytest.approx(8 * 256 / e2e.step_s, rel=1e-9)
    # in-flight batching (production): 8 slots, each holding a request for its life (own prompt chunks, then 255
    # steps whose TPOT carries the other requests' chunks): throughput by Little's law, 8 x 256 / request time
    live = predict_time("llama-3-8b", "h100x1", phase="serve", batch=8, context=1024, output_tokens=256, catalog=catalog)
    assert live.request_s == pytest.approx(live.ttft_s + 255 * live.tpot_s, rel=1e-9)
    assert live.tokens_per_s == pytest.approx(8 * 256 / live.request_s, rel=1e-9)
    assert live.tokens_per_s < 8 / live.tpot_s  # the slots spend part of their time prefilling


def test_kv_overflow_is_not_timed(catalog):
    """A batch whose KV cache does not fit is reported with fits=false and no time (never timed or priced)."""
    r = predict_time("llama-2-70b", "h100x2", phase="decode", batch=4096, context=4096, output_tokens=512, catalog=catalog,
                     tensor_parallel=2)
    assert not r.fits
    assert r.step_s is None and r.tpot_s is None and r.tokens_per_s is None
    assert any("does not fit" in n for n in r.notes)


def test_bad_options(catalog):
    with pytest.raises(InputError):
        predict_time("llama-3-8b", "h100x8", phase="train", batch=8, context=2048, catalog=catalog, recompute="some")
    with pytest.raises(InputError):
        predict_time("llama-3-8b", "h100x8", phase="decode", batch=8, context=2048, catalog=catalog, recompute="full")
    with pytest.raises(InputError):
        predict_time("llama-3-8b", "h100x6", phase="train", batch=8, context=2048, catalog=catalog, tensor_parallel=4)


# -- properties -------------------------------------------------------------------------------
_LAYOUTS = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]),
                     st.sampled_from(["none", "selective", "full"]), st.sampled_from([0, 1, 3]))


@settings(max_examples=40, deadline=None)
@given(layout=_LAYOUTS, k=st.floats(1.0, 8.0), which=st.sampled_from(["bw", "compute"]))
def test_train_time_never_rises_with_more_bandwidth_or_compute(catalog, layout, k, which):
    tp, pp, mb, rec, zs = layout
    m = resolve_model("llama-2-13b", catalog)
    gpu = catalog.gpus["h100-sxm"]
    fast = _scaled(gpu, **{which: k})
    kw = dict(precision="bf16", seq_len=4096, global_batch=256, tp=tp, pp=pp, dp=4, micro_batch=mb, recompute=rec,
              zero_stage=zs, cal=gpu_calibration())
    assert G.train_step(m, fast, **kw)["step_s"] <= G.train_step(m, gpu, **kw)["step_s"] * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 512), ctx=st.integers(1, 16384), tp=st.sampled_from([1, 2, 4, 8]), k=st.floats(1.0, 8.0),
       which=st.sampled_from(["bw", "compute"]), new=st.sampled_from([1, 512]))
def test_inference_time_never_rises_with_more_bandwidth_or_compute(catalog, batch, ctx, tp, k, which, new):
    m = resolve_model("llama-3-8b", catalog)
    gpu = catalog.gpus["a100-80gb"]
    kw = dict(precision="bf16", batch=batch, new_tokens=new, context=ctx, tp=tp, cal=gpu_calibration())
    t0, _ = P.forward_pass_time_s(m, gpu, **kw)
    t1, _ = P.forward_pass_time_s(m, _scaled(gpu, **{which: k}), **kw)
    assert t1 <= t0 * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(ctx=st.integers(128, 32768), tp=st.sampled_from([1, 2, 4, 8]), k=st.floats(0.02, 1.0))
def test_bandwidth_bound_decode_scales_as_one_over_k(catalog, ctx, tp, k):
    """Batch-1 decode with no fixed overheads is bandwidth-bound: every bandwidth x k gives time / k (on the plain
    roofline: the soft ridge, exponent > 0, lets the small compute time of the padded tiles add a little as the
    bandwidth grows towards the ridge)."""
    m = resolve_model("llama-3-8b", catalog)
    gpu = catalog.gpus["h100-sxm"]
    cal = gpu_calibration().replace(layer_overhead_s=0.0, step_overhead_s=0.0, nvlink_latency_s=0.0, network_latency_s=0.0,
                                    gemm_ridge_exponent=0.0)
    kw = dict(precision="bf16", batch=1, new_tokens=1, context=ctx, tp=tp, cal=cal)
    t1, _ = P.forward_pass_time_s(m, gpu, **kw)
    tk, _ = P.forward_pass_time_s(m, _scaled(gpu, bw=k), **kw)
    assert tk == pytest.approx(t1 / k, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(layout=_LAYOUTS, gb=st.sampled_from([64, 256, 1024]), seq=st.sampled_from([512, 2048, 8192]))
def test_fractions_stay_in_unit_interval(catalog, layout, gb, seq):
    tp, pp, mb, rec, zs = layout
    r = predict_time("llama-2-7b", f"h100x{tp * pp * 4}", phase="train", batch=gb, context=seq, catalog=catalog,
                     tensor_parallel=tp, pipeline_parallel=pp, micro_batch=mb, recompute=rec, zero_stage=zs)
    if r.fits:
        assert 0.0 <= r.model_flop_utilization_frac <= 1.0
    else:  # a given layout that does not fit is not timed
        assert r.model_flop_utilization_frac is None and r.step_s is None
    f = G.pipeline_bubble_frac(num_stages=pp, num_microbatches=max(gb / (4 * mb), 1))
    assert 0.0 <= f < 1.0
    e = G.gemm_efficiency_frac(m=seq * mb, n=4096 / tp, k=4096, max_frac=gpu_calibration().gemm_max_frac_16bit,
                               half_intensity=gpu_calibration().gemm_half_intensity)
    assert 0.0 <= e <= 1.0


# -- layout search ----------------------------------------------------------------------------------
def test_layout_search_matches_brute_force(catalog):
    """The searched layout of plan() is the fastest fitting candidate of a scalar brute force over the same grid."""
    m = resolve_model("llama-2-7b", catalog)
    target = parse_target("a100-40gbx16", catalog)
    gpu = target.device
    cal = gpu_calibration()
    N, gb, seq = 16, 64, 2048
    r = plan(m, target, phase="train", batch=gb, context=seq, catalog=catalog)
    from wseplan.plan import setup

    cal = setup(m, target, phase="train", catalog=catalog).ctx.cal  # the default profile's constants
    w = transformer_workload(m, precision="bf16", phase="train", batch=gb, context=seq)
    cap = gpu.hbm_bytes.si * (1 - catalog.defaults.gpu_hbm_reserve_frac.si)
    best, best_t = None, math.inf
    for tp, pp, mb, v, rec, zs in itertools.product((1, 2, 4, 8), range(1, m.num_layers + 1), (1, 2, 4, 8, 16, 32),
                                                     (1, 2, 4), ("none", "selective", "full"), (0, 1, 2, 3)):
        if N % (tp * pp) or m.num_heads % tp:
            continue
        dp = N // (tp * pp)
        if (gb // dp) % mb or gb % dp or gb // dp < mb or (v > 1 and (pp == 1 or m.num_layers % (pp * v))):
            continue
        mem = float(_mem(w, catalog, tp=tp, pp=pp, dp=dp, zero_stage=zs, recompute=rec, micro_batch=mb, vpp=v)["total"])
        if mem > cap:
            continue
        t = float(G.train_step(m, gpu, precision="bf16", seq_len=seq, global_batch=gb, tp=tp, pp=pp, dp=dp, vpp=v,
                               micro_batch=mb, recompute=rec, zero_stage=zs, cal=cal)["step_s"])
        if t < best_t:
            best_t, best = t, dict(tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, micro_batch=mb,
                                   virtual_pipeline=v, recompute=rec, zero_stage=zs)
    assert r.fits and r.sources["layout"] == "searched"
    assert r.step_s == pytest.approx(best_t, rel=1e-9)
    got = {k: r.layout[k] for k in best}
    assert got == best


def test_search_without_a_fitting_layout_reports_no_time(catalog):
    r = plan("gpt-3-175b", "a100-40gbx2", phase="train", batch=8, context=2048, catalog=catalog)
    assert not r.fits and r.step_s is None and r.shortfall_bytes > 0


def test_interleaved_pipeline_memory_hand_calculation(catalog):
    """Korthikanti et al. (2023) sec. 4.2.3: interleaving with v chunks scales the first stage's activations by
    1 + (p-1)/(p v); with p = 8, v = 4 that is 1 + 7/32 = 1.21875."""
    w = transformer_workload(resolve_model("gpt-3-175b", catalog), precision="bf16", phase="train", batch=1536,
                             context=2048)
    kw = dict(tp=2, pp=8, dp=64, zero_stage=2, recompute="none", micro_batch=1)
    plain = _mem(w, catalog, **kw, vpp=1)
    inter = _mem(w, catalog, **kw, vpp=4)
    assert inter["activations"] == pytest.approx(plain["activations"] * (1 + 7 / 32), rel=1e-12)
    assert inter["weights"] == plain["weights"] and inter["optimizer"] == plain["optimizer"]


def test_gpt3_on_1024_h100_picks_a_layout_that_fits(catalog):
    """The issue-16 case: with the interleaving factor the searched layout's memory stays under usable HBM."""
    r = plan("gpt-3-175b", "h100x1024", phase="train", batch=1536, context=2048, catalog=catalog)
    assert r.fits and r.per_device_bytes <= r.capacity_bytes
    lay = r.layout
    w = transformer_workload(resolve_model("gpt-3-175b", catalog), precision="bf16", phase="train", batch=1536,
                             context=2048)
    mem = _mem(w, catalog, tp=lay["tensor_parallel"], pp=lay["pipeline_parallel"], dp=lay["data_parallel"],
               zero_stage=lay["zero_stage"], recompute=lay["recompute"], micro_batch=lay["micro_batch"],
               vpp=lay["virtual_pipeline"])
    assert float(mem["total"]) == pytest.approx(r.per_device_bytes, rel=1e-12)


# -- CLI ----------------------------------------------------------------------------------------------
def test_time_cli_json_and_csv(capsys):
    import json

    rc = main(["time", "llama-3-8b", "--target", "h100x1", "--phase", "decode", "--batch", "4", "--context", "1024",
               "--output-tokens", "64", "--format", "json"])
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0 and rec["phase"] == "serve" and rec["output_tokens"] == 64 and rec["bottleneck"]
    rc = main(["time", "gpt-3-175b", "--target", "h100x1024", "--phase", "train", "--batch", "1536", "--context", "2048",
               "--search", "--format", "csv"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and len(out) == 2 and "sources_layout" in out[0] and "searched" in out[1]


def test_time_cli_bad_input(capsys):
    assert main(["time", "llama-3-8b", "--target", "h100x1", "--phase", "decode", "--recompute", "full"]) == 2
    assert main(["time", "llama-3-8b", "--target", "h100x1", "--phase", "warp"]) == 2
    assert main(["time", "llama-3-8b", "--target", "h100x8", "--phase", "train", "--search", "--tp", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 3


def test_time_to_train_hand_calculation():
    from wseplan.analytic.cost import time_to_train

    secs, gpu_h = time_to_train(step_s=10.0, tokens_per_step=4e6, train_tokens=4e11, num_gpus=1024)
    assert secs == pytest.approx(1e6) and gpu_h == pytest.approx(1e6 * 1024 / 3600)
    secs, gpu_h = time_to_train(step_s=10.0, tokens_per_step=4e6, train_tokens=4e11, num_gpus=1024, goodput=0.8)
    assert secs == pytest.approx(1e6 / 0.8) and gpu_h == pytest.approx(1e6 / 0.8 * 1024 / 3600)


def test_goodput_from_the_llama3_interruption_record():
    """Llama 3 405B pre-training (Dubey et al. 2024, sec. 3.3.4): 466 interruptions in 54 days on 16,384 H100 and
    'higher than 90% effective training time'; the catalog's rate and loss per interruption give 90% there, by hand:
    16,384 x 2.19e-5 / h x 1,114 s / 3,600 s/h = 0.111 -> 1 / 1.111 = 0.900; one 8-GPU node loses 0.005%."""
    from wseplan.catalog import load_catalog
    from wseplan.pricing import run_goodput

    cat = load_catalog()
    d = cat.defaults
    assert d.gpu_job_interruptions_per_gpu_hour.si == pytest.approx(466 / (16384 * 54 * 24), rel=0.01)
    assert run_goodput("gpu", cat, 16384) == pytest.approx(1 / (1 + 16384 * 2.19e-5 * 1114 / 3600), rel=1e-9)
    assert run_goodput("gpu", cat, 16384) == pytest.approx(0.90, abs=0.002)
    assert 0.9999 < run_goodput("gpu", cat, 8) < 1.0
    assert run_goodput("wafer", cat, 64) == 1.0  # no published interruption rate for CS-3 clusters


def test_time_cli_train_tokens(capsys):
    import json

    rc = main(["time", "gpt-3-175b", "--target", "a100x1536", "--phase", "train", "--batch", "1536", "--context", "2048",
               "--tp", "8", "--pp", "8", "--train-tokens", "3e11", "--format", "json"])
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0
    # wall time: training time over the goodput of 1,536 GPUs (their interruptions)
    assert 0.98 < rec["goodput_frac"] < 0.995
    assert rec["time_to_train_s"] == pytest.approx(3e11 / rec["tokens_per_s"] / rec["goodput_frac"], rel=1e-9)
    assert rec["gpu_hours"] == pytest.approx(rec["time_to_train_s"] * 1536 / 3600, rel=1e-9)
    assert main(["time", "llama-3-8b", "--target", "h100x1", "--phase", "decode", "--train-tokens", "1e9"]) == 2


@pytest.mark.parametrize("name,tokens", [("llama-4-maverick", 1), ("llama-4-maverick", 3), ("mixtral-8x7b", 1),
                                         ("mixtral-8x7b", 512), ("gpt-oss-20b", 2)])
def test_routed_expert_flops_are_those_of_the_routed_rows(catalog, name, tokens):
    """A pass of `tokens` rows through a routed-expert layer computes tokens x k expert rows, whatever the batch
    (hand count from the block's GEMM shapes); at one token a 128-expert layer runs one expert, not 128 of one row
    each. With GEMM efficiency held at its maximum and unlimited HBM, each block type's GEMM time is FLOPs / rate
    (its dense MLP, or its top-k routed experts and its shared experts)."""
    from wseplan.workload import block_types, resolve_model

    m = resolve_model(name, catalog)
    if not hasattr(m, "num_experts") or m.num_experts <= 1:
        pytest.skip(f"{name} is not a routed-expert model here")
    cal = GpuCalibration().replace(gemm_half_intensity=1e-12)
    peak, emax = 1e15, G.gemm_max(cal, "bf16")
    for block in block_types(m):
        t, _ = G.block_gemms_s(block, np.asarray(float(tokens)), np.asarray(1.0), peak, math.inf, "bf16", cal)
        flop = sum(2.0 * g.n * g.k * tokens * g.active for g in block.gemms)
        assert float(t) == pytest.approx(flop / (peak * emax), rel=1e-9)


def test_another_vendors_gemm_library_scales_the_fitted_efficiencies(catalog):
    """An AMD GPU's GEMMs run at its measured achievable-matmul ratio to the H100 SXM (MAMF table: MI300X BF16
    51.4% / 80.3% of dense peak = 0.64) times the NVIDIA-fitted efficiency; an NVIDIA GPU takes 1."""
    mi = catalog.gpus["mi300x"]
    assert mi.gemm_library_rel("bf16") == pytest.approx(0.514 / 0.803, abs=0.005)
    assert catalog.gpus["a100-80gb"].gemm_library_rel("bf16") == 1.0  # its MAMF ratio (1.08) is not applied
    as_nvidia = mi.model_copy(update={"vendor": "nvidia"})
    m = resolve_model("llama-3-70b", catalog)
    cal = gpu_calibration().replace(hbm_frac=1e6)  # memory never binds: a compute-bound pass
    prompt = P.Sequences(seqs=1.0, tokens=8192.0, new=8192.0, prior=0.0, decode=False)
    kw = dict(precision="bf16", sequences=(prompt,), logits_rows=1.0,
              tp=8.0, cal=cal.replace(nvlink_frac=1e6, nvlink_latency_s=0.0, layer_overhead_s=0.0, step_overhead_s=0.0))
    amd = P.pass_time_s(m, mi, **kw)[0]
    nv = P.pass_time_s(m, as_nvidia, **kw)[0]
    assert float(amd / nv) == pytest.approx(1.0 / mi.gemm_library_rel("bf16"), rel=0.02)


def test_four_bit_models_run_their_attention_at_the_fp8_rate():
    """The attention kernels of the validated engines (FlashAttention-3, TensorRT-LLM's FMHA) stop at fp8: a 4-bit
    model with an fp8 KV cache runs its attention against the fp8 peak, its GEMMs against the 4-bit one. With the
    default 16-bit cache its attention is 16-bit (audit28e M2), as bf16's."""
    from wseplan.analytic import gpu_pass as P
    from wseplan.analytic import gpu_time as G
    from wseplan.calibration_data import gpu_calibration
    from wseplan.catalog.load import load_catalog
    from wseplan.workload import resolve_model

    cat = load_catalog()
    g, m, cal = cat.gpus["b200"], resolve_model("llama-3-8b", cat), gpu_calibration()
    assert G.attention_peak_flop_per_s(g, "fp4") == g.peak_flop_per_s("fp8") < g.peak_flop_per_s("fp4")
    assert G.attention_peak_flop_per_s(g, "bf16") == g.peak_flop_per_s("bf16")
    prompt = P.Sequences(seqs=1.0, tokens=4096.0, new=4096.0, prior=0.0, decode=False)
    kw = dict(sequences=(prompt,), logits_rows=1.0, tp=1.0, cal=cal)
    _, _, p4 = P.pass_time_s(m, g, precision="fp4", kv_precision="fp8", **kw)
    _, _, p8 = P.pass_time_s(m, g, precision="fp8", **kw)
    _, _, d4 = P.pass_time_s(m, g, precision="fp4", **kw)
    _, _, b16 = P.pass_time_s(m, g, precision="bf16", **kw)
    assert float(d4["attention"]) == pytest.approx(float(b16["attention"]), rel=1e-12)
    assert float(d4["attention"]) > float(p4["attention"])
    # the same attention FLOPs at the same peak: the same attention time; the GEMMs differ
    assert float(p4["attention"]) == pytest.approx(float(p8["attention"]), rel=1e-12)
    hand = m.num_layers * 4.0 * m.num_heads * m.head_dim_ * 2048.5 * 4096.0 / (g.peak_flop_per_s("fp8") * cal.attention_frac)
    assert float(p4["attention"]) == pytest.approx(hand, rel=1e-12)
    assert float(p4["gemm"]) < float(p8["gemm"])


def test_lora_backward_skips_only_the_weight_gradient_gemms(catalog):
    """LoRA (Hu et al. 2021) freezes the base weights: a block's fwd+bwd equals full training's minus one forward
    GEMM pass (the weight gradients); attention and element-wise backward stay. By hand from the forward's parts:
    full = fwd + 2 fwd + 0.5 attn (flash bwd 2.5x its fwd), LoRA = full - gemm."""
    m = resolve_model("llama-2-70b", catalog)
    gpu = catalog.gpus["h100-sxm"]
    cal = gpu_calibration()
    kw = dict(precision="fp8", seq_len=8192, global_batch=1, tp=4, pp=1, dp=1, micro_batch=1, recompute="none",
              single_layer=True, cal=cal)
    full = G.train_step(m, gpu, trainable="full", **kw)["compute_s"]
    lora = G.train_step(m, gpu, trainable="lora", **kw)["compute_s"]
    fwd, parts = G.block_forward_time_s(m, tokens=8192.0, context_attended=(8192 + 1) / 2, tp=4.0,
                                        peak_flop_per_s=gpu.peak_flop_per_s("fp8") * gpu.gemm_library_rel("fp8"),
                                        hbm_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac, precision="fp8",
                                        cal=G.training_calibration(cal),  # fp8 training pays its scaling
                                        attention_peak_flop_per_s=G.attention_peak_flop_per_s(gpu, "fp8"))
    assert float(full) == pytest.approx(3 * fwd + 0.5 * parts["attention"], rel=1e-12)
    assert float(lora) == pytest.approx(3 * fwd + 0.5 * parts["attention"] - parts["gemm"], rel=1e-12)
    # the attention's backward is not skipped: LoRA saves less than a third of the step at long context
    assert float(lora) > 2 * fwd + 1.5 * parts["attention"]


def test_gpu_draft_memory_is_checked():
    """Speculative decoding's draft shares the target's GPUs: its weights (and KV cache) must fit in the memory the
    target leaves. Llama-3.1-70B in fp8 on one H100 holds ~70.9 GB of ~77.3 GB usable; an 8B draft needs ~8 GB of fp8
    weights (hand count: 8.0e9 params x 1 B), so it does not fit and the step is the plain one; on two H100s (TP2,
    ~35 GB each) it fits and pays."""
    from wseplan.plan import plan

    kw = dict(phase="decode", batch=1, context=2048, precision="fp8", software="gpu-production-specdec")
    one = plan("llama-3.1-70b", "h100x1", options={"speculative": "llama-3.1-8b"}, **kw)
    one_plain = plan("llama-3.1-70b", "h100x1", options={"speculative": "none"}, **kw)
    assert one.fits and one.capacity_bytes - one.per_device_bytes < 8.0e9
    assert one.tpot_s == one_plain.tpot_s
    two = plan("llama-3.1-70b", "h100x2", options={"speculative": "llama-3.1-8b"}, **kw)
    two_plain = plan("llama-3.1-70b", "h100x2", options={"speculative": "none"}, **kw)
    assert two.fits and two.tpot_s < two_plain.tpot_s


def test_data_parallel_reduction_waits_for_the_last_micro_batch(catalog):
    """ZeRO-0/1 reduce the gradients once, after the last micro-batch: more micro-batches of the same size give the
    reduction no more compute to hide behind (the exposed time is the same at 1 and 8); ZeRO-2 reduce-scatters every
    micro-batch's fp32 gradients and gathers the 16-bit shard once: (8 x 4 B + 2 B) / (4 B + 2 B) = 17/3 of one
    micro-batch's, less the rings' latency steps (NeMo Communication Overlap; audit 23 F1/F2: 48% of the whole step's
    compute hid the reduction before)."""
    m = resolve_model("llama-3-8b", catalog)
    gpu = catalog.gpus["h100-sxm"]
    cal = gpu_calibration()
    kw = dict(precision="bf16", seq_len=2048, tp=1, pp=1, dp=64, micro_batch=1, recompute="selective", cal=cal)
    one = G.train_step(m, gpu, global_batch=64, zero_stage=1, **kw)
    eight = G.train_step(m, gpu, global_batch=512, zero_stage=1, **kw)
    assert float(eight["num_microbatches"]) == 8 and float(one["num_microbatches"]) == 1
    assert float(eight["dp_comm_s"]) == pytest.approx(float(one["dp_comm_s"]), rel=1e-12)
    assert float(one["dp_exposed_s"]) > 0.01  # 16 GB of gradients over 8 nodes: longer than one micro-batch
    assert float(eight["dp_exposed_s"]) == pytest.approx(float(one["dp_exposed_s"]), rel=1e-9)
    z2_one = G.train_step(m, gpu, global_batch=64, zero_stage=2, **kw)
    z2_eight = G.train_step(m, gpu, global_batch=512, zero_stage=2, **kw)
    ratio = float(z2_eight["dp_comm_s"]) / float(z2_one["dp_comm_s"])
    assert 9 / 2 < ratio < 17 / 3 and ratio == pytest.approx(17 / 3, rel=0.005)


def test_low_precision_training_pays_its_scaling_and_inference_does_not(catalog):
    """An fp8 training GEMM also scales and casts its 16-bit inputs (Transformer Engine: amax, cast, transposed copy),
    ``lowp_training_overhead_frac`` of its time, so a training step at q runs as one at q = 0 with the fp8 ceiling
    divided by 1 + q; a 16-bit step and an inference pass do not depend on q."""
    m = resolve_model("llama-3-70b", catalog)
    gpu = catalog.gpus["h100-sxm"]
    cal = gpu_calibration().replace(lowp_training_overhead_frac=0.25)
    kw = dict(seq_len=8192, global_batch=64, tp=8, pp=1, dp=8, micro_batch=1, recompute="full", zero_stage=1)
    with_q = G.train_step(m, gpu, precision="fp8", cal=cal, **kw)
    by_hand = G.train_step(m, gpu, precision="fp8", **kw, cal=cal.replace(
        lowp_training_overhead_frac=0.0, gemm_max_frac_8bit=cal.gemm_max_frac_8bit / 1.25,
        gemm_max_frac_4bit=cal.gemm_max_frac_4bit / 1.25))
    none = G.train_step(m, gpu, precision="fp8", cal=cal.replace(lowp_training_overhead_frac=0.0), **kw)
    assert float(with_q["step_s"]) == pytest.approx(float(by_hand["step_s"]), rel=1e-12)
    assert float(with_q["compute_s"]) > float(none["compute_s"])
    bf = [G.train_step(m, gpu, precision="bf16", cal=c, **kw)["step_s"] for c in (cal, cal.replace(lowp_training_overhead_frac=0.0))]
    assert float(bf[0]) == float(bf[1])
    inf = [G.block_forward_time_s(m, tokens=4096, context_attended=2048, tp=8, peak_flop_per_s=gpu.peak_flop_per_s("fp8"),
                                  hbm_bytes_per_s=3.35e12, precision="fp8", cal=c)[0]
           for c in (cal, cal.replace(lowp_training_overhead_frac=0.0))]
    assert float(inf[0]) == float(inf[1])
