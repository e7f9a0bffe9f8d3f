"""The engine's KV-cache memory rule on GPUs (software profiles' ``engine.kv_memory``): vLLM's share of the whole
memory (gpu-production) against TensorRT-LLM's share of the memory the weights leave free (gpu-production-trtllm)."""
import math

import pytest

from wseplan.fit import fit

GIB = 2.0 ** 30
#: Llama-3.1-70B: 80 layers x K and V x 8 KV heads x head width 128, one byte each in an fp8 cache
KV_PER_TOKEN_FP8 = 80 * 2 * 8 * 128 * 1


def _fit(software=None, **kw):
    return fit("llama-3.1-70b", "h100x1", precision="fp8", phase="decode", batch=1, context=2000, software=software, **kw)


def test_vllm_rule_keeps_a_tenth_of_the_whole_memory():
    f = _fit()
    assert f.capacity_bytes == pytest.approx(0.9 * 80 * GIB)  # gpu_memory_utilization 0.9
    room = 0.9 * 80 * GIB - f.weights_bytes - f.activation_bytes
    assert f.max_tokens_in_flight == math.floor(room / KV_PER_TOKEN_FP8)


def test_trtllm_rule_gives_the_cache_nine_tenths_of_what_the_weights_leave():
    """free_gpu_memory_fraction 0.9 of (80 GiB - 1 GiB runtime - weights - activation buffers), by hand."""
    f = _fit("gpu-production-trtllm")
    free = 80 * GIB - 1 * GIB - f.weights_bytes - f.activation_bytes
    assert abs(f.max_tokens_in_flight - 0.9 * free / KV_PER_TOKEN_FP8) <= 1.0
    # where the weights nearly fill the GPU the two rules differ by almost 2x (12 GB of cache against 7 GB)
    assert f.max_tokens_in_flight > 1.8 * _fit().max_tokens_in_flight


def test_an_explicit_reserve_wins_and_training_keeps_the_reserve():
    assert _fit("gpu-production-trtllm", reserve=0.2).capacity_bytes == pytest.approx(0.8 * 80 * GIB)
    for sw in (None, "gpu-production-trtllm"):  # the engine's KV rule is inference's: training keeps the reserve
        t = fit("llama-3-8b", "h100x8", precision="bf16", phase="train", batch=64, context=4096, software=sw)
        assert t.capacity_bytes == pytest.approx(0.9 * 80 * GIB)


def test_a_model_that_leaves_nothing_free_does_not_fit_under_either_rule():
    for sw in (None, "gpu-production-trtllm"):
        f = fit("llama-3.1-70b", "h100x1", precision="bf16", phase="decode", batch=1, context=2000, software=sw)
        assert not f.fits


def test_gpu_training_runs_the_validated_profile_by_default():
    """review28 #5 (audit28a L5): GPU training ran the serving engine's constants by default (gpu-production: no
    per-layer overhead, its HBM share), while its validation rows are predicted with the calibration's own profile:
    the default training step was 1.2% off what was validated. By default it runs that profile now; a named profile
    still applies its constants."""
    from wseplan.plan import GPU_TRAIN_PROFILE, plan
    from wseplan.validate import GPU_PROFILE

    kw = dict(phase="train", batch=64, context=4096)
    d = plan("llama-3-8b", "h100x8", **kw)
    assert d.software == GPU_TRAIN_PROFILE == GPU_PROFILE
    assert d.step_s == plan("llama-3-8b", "h100x8", software=GPU_TRAIN_PROFILE, **kw).step_s
    assert plan("llama-3-8b", "h100x8", software="gpu-production", **kw).step_s != d.step_s


def test_a_kv_cache_format_of_its_own():
    """audit28d M5: the KV cache took the weights' format (fp8 weights: fp8 cache; bf16: 16-bit), with no way to state
    what the engine keeps (vLLM --kv-cache-dtype fp8). By hand, Llama-3.1-70B at batch 64 x 8,192 (+1 token) on
    8 H100 keeps 80 layers x 2 x 8 KV heads x 128 x (64 x 8,193) elements: 1.718e11 B at 2 B, half at fp8; the tokens
    in flight double, the decode step reads half the cache; training and wafers refuse the option, an unknown format
    is named."""
    from wseplan.errors import InputError
    from wseplan.fit import fit
    from wseplan.plan import plan

    kw = dict(phase="decode", batch=64, context=8192)
    a = fit("llama-3.1-70b", "h100x8", **kw)
    b = fit("llama-3.1-70b", "h100x8", kv_precision="fp8", **kw)
    elems = 80 * 2 * 8 * 128 * 64 * 8192
    assert a.kv_cache_bytes == pytest.approx(2 * elems, rel=2e-4) and b.kv_cache_bytes == pytest.approx(elems, rel=2e-4)
    assert b.max_tokens_in_flight == pytest.approx(2 * a.max_tokens_in_flight, rel=1e-3)
    ta = plan("llama-3.1-70b", "h100x8", **kw)
    tb = plan("llama-3.1-70b", "h100x8", options={"kv_precision": "fp8"}, **kw)
    assert tb.tpot_s < ta.tpot_s
    for bad, msg in ((dict(phase="train"), "training keeps none"), (dict(options={"kv_precision": "fp4"}), "not a KV")):
        with pytest.raises(InputError, match=msg):
            plan("llama-3-8b", "h100x8", **{"phase": "decode", "options": {"kv_precision": "fp8"}, **bad})
    with pytest.raises(InputError, match="--kv-precision: a GPU serving engine's KV-cache format; wse3 .* drop"):
        plan("llama-3-8b", "cs3", phase="decode", options={"kv_precision": "fp8"})


def test_a_wider_kv_cache_feeds_wider_attention_and_every_command_names_the_flag():
    """review28b #1, #2, #4, #6: a 16-bit cache beside fp8 weights cannot feed an fp8 attention kernel, so attention
    runs at the 16-bit rate (a long prompt's TTFT was the fp8 one whatever the cache); a narrower cache beside bf16
    weights changes no rate. `fit` on a wafer refused nothing (it dropped the option); `compare` of a wafer and a GPU
    applies the format to the GPU row; the record says which format it assumed."""
    from wseplan.analytic.gpu_pass import attention_format
    from wseplan.compare import compare
    from wseplan.errors import InputError
    from wseplan.fit import fit
    from wseplan.plan import plan

    assert attention_format("fp8", None) == "fp8" and attention_format("fp8", "bf16") == "bf16"
    assert attention_format("bf16", "fp8") == "bf16" and attention_format("fp4", "fp8") == "fp8"
    # audit28e M2: the default cache beside 4- and 8-bit weights is 16-bit (kv_bytes_per_element), so attention is
    # 16-bit too unless an 8-bit cache is asked for; the stated default and the default agree
    for p in ("fp4", "int4", "int8"):
        assert attention_format(p, None) == attention_format(p, "bf16") == "bf16"
    a, b = (plan("llama-3.1-70b", "b200x8", phase="prefill", context=32768, precision="fp4", options=o).ttft_s
            for o in ({}, {"kv_precision": "bf16"}))
    assert a == b
    kw = dict(phase="prefill", batch=4, context=32768, precision="fp8")
    t8 = plan("llama-3.1-70b", "h100x8", options={"kv_precision": "fp8"}, **kw)
    t16 = plan("llama-3.1-70b", "h100x8", options={"kv_precision": "bf16"}, **kw)
    assert t16.ttft_s > 1.2 * t8.ttft_s and any("KV cache kept in bf16" in n for n in t16.notes)
    with pytest.raises(InputError, match="--kv-precision: a GPU serving engine's KV-cache format"):
        fit("llama-3-8b", "cs3", kv_precision="fp8")
    r = compare("llama-3.1-70b", ["cs3x4", "h100x8"], phase="decode", batch=8, context=2048,
                options={"kv_precision": "fp8"})
    assert [x.fits for x in r.rows] == [True, True]
    assert any("applies to the GPU rows" in n for n in r.notes)
