"""Decode attention that reads a grouped-query KV cache once per query head (TensorRT-LLM before v0.7) against the
grouped kernels of current engines (XQA, FlashInfer, FlashAttention decode): the engine's ``decode_attention``."""
from __future__ import annotations

import pytest

from wseplan.analytic import gpu_pass as P
from wseplan.catalog import load_catalog
from wseplan.plan import setup
from wseplan.timing import predict_time
from wseplan.validate.cases import Case
from wseplan.validate.gpu import decode_attention_of
from wseplan.workload import block_types, resolve_model

CAT = load_catalog()


def _att(model):
    return block_types(resolve_model(model, CAT))[0].attention


def test_decode_attention_on_the_vector_units_by_hand():
    """One decode step of Llama 2 70B fp8 on one H200 (batch 64, 2,048 cached tokens) with a per-query-head kernel:
    each of the 64 sequences' new token attends to 2,049 keys in each of 64 query heads of 128 (4 x 64 x 128 =
    32,768 FLOP per pair), 80 layers, on the FP32 vector units (66.9 TFLOP/s) at ``vector_attention_frac`` - far
    above its KV read (160 KiB of fp8 KV per token from HBM, once: the repeats of a group hit L2), which is the
    grouped kernel's; a prompt pass (the context-phase kernel) is the same either way."""
    m = resolve_model("llama-2-70b", CAT)
    gpu = CAT.gpus["h200-sxm"]
    cal = setup("llama-2-70b", "h200x1", phase="decode", precision="fp8", catalog=CAT).ctx.cal
    dec = (P.Sequences(seqs=64.0, tokens=64.0, new=1.0, prior=2048.0),)
    kw = dict(precision="fp8", sequences=dec, logits_rows=64.0, tp=1.0, cal=cal)
    _, _, grouped = P.pass_time_s(m, gpu, **kw)
    _, _, per_head = P.pass_time_s(m, gpu, grouped_kv=False, **kw)
    hand = 80 * 64 * 2049 * (4 * 64 * 128) / (66.9e12 * cal.vector_attention_frac)
    assert float(per_head["attention"]) == pytest.approx(hand, rel=1e-12)
    assert float(per_head["kv_read"]) == float(grouped["kv_read"])
    hbm = gpu.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac
    assert float(grouped["kv_read"]) == pytest.approx(80 * 2 * 8 * 128 * 1.0 * 64 * 2049 / hbm, rel=1e-12)
    assert float(per_head["attention"]) > 3 * float(grouped["attention"])
    pre = (P.Sequences(seqs=1.0, tokens=2048.0, new=2048.0, prior=0.0, decode=False),)
    kw.update(sequences=pre, logits_rows=1.0)
    t1 = P.pass_time_s(m, gpu, **kw)[0]
    t2 = P.pass_time_s(m, gpu, grouped_kv=False, **kw)[0]
    assert float(t1) == float(t2)


def test_the_vector_kernel_is_kv_read_bound_for_a_multi_head_model():
    """Llama 2 7B (32 query heads, 32 KV heads, fp16 KV) on one A100 at the same step: 512 FLOP and 512 bytes per
    head and key, so at a quarter of the A100's 39 TFLOP/s of vector issue the kernel computes at 9.75 TFLOP/s
    against ~1.8 TB/s of KV reads: the step is the grouped kernel's (the KV read bounds both)."""
    m = resolve_model("llama-2-7b", CAT)
    gpu = CAT.gpus["a100-80gb"]
    cal = setup("llama-2-7b", "a100-80gbx1", phase="decode", catalog=CAT).ctx.cal.replace(vector_attention_frac=0.25)
    kw = dict(precision="bf16", sequences=(P.Sequences(seqs=64.0, tokens=64.0, new=1.0, prior=2048.0),),
              logits_rows=64.0, tp=1.0, cal=cal)
    t1, _, p1 = P.pass_time_s(m, gpu, **kw)
    t2, _, p2 = P.pass_time_s(m, gpu, grouped_kv=False, **kw)
    assert float(p2["attention"]) == float(p2["kv_read"]) == float(p1["kv_read"])
    assert float(t1) == pytest.approx(float(t2), rel=1e-12)


@pytest.mark.parametrize("target, fp32", [("h100-pciex4", 51.2e12), ("l40sx4", 91.6e12), ("gh200x4", 66.9e12)])
def test_the_old_kernel_runs_on_gpus_with_a_datasheet_fp32_figure(target, fp32):
    """The FP32 peaks of the H100 PCIe (51 TFLOP/s), L40S (91.6) and GH200 (the H100 SXM's 66.9) are in the catalog,
    so the gpu-trtllm-2023 profile times them (TensorRT-LLM v0.5 tables ran L40S)."""
    from wseplan.targets import parse_target
    assert P.vector_peak_flop_per_s(parse_target(target, CAT).device) == pytest.approx(fp32, rel=1e-12)
    r = predict_time("llama-2-70b", target, phase="decode", precision="fp8", batch=8, context=1024,
                     software="gpu-trtllm-2023", catalog=CAT)
    assert r.fits and r.step_s > 0


def test_the_vector_rate_is_instruction_issue_by_hand():
    """An SM issues four warp instructions (4 x 32 lanes) per clock. Hopper has 128 FP32 lanes per SM, so its issue
    rate is its FP32 peak; Ampere has 64, so an FP32 instruction takes two slots and a mixed stream of conversions,
    shuffles and FMAs issues at twice the FP32 peak: A100 108 SMs x 1.41 GHz x 128 lanes x 2 FLOP = 39.0 TFLOP/s."""
    assert P.vector_peak_flop_per_s(CAT.gpus["a100-80gb"]) == pytest.approx(108 * 1.41e9 * 128 * 2, rel=1e-3)
    assert P.vector_peak_flop_per_s(CAT.gpus["h100-sxm"]) == CAT.gpus["h100-sxm"].dense_peak_flop_per_s["fp32"].si


def test_a_gpu_without_an_fp32_figure_is_refused_in_one_line():
    from wseplan.errors import InputError

    gpu = CAT.gpus["a100-80gb"].model_copy(update={"dense_peak_flop_per_s": {
        k: v for k, v in CAT.gpus["a100-80gb"].dense_peak_flop_per_s.items() if k != "fp32"}, "vector_issue_flop_per_s": None})
    with pytest.raises(InputError, match="fp32"):
        P.vector_peak_flop_per_s(gpu)


def test_gpu_trtllm_2023_profile_decodes_gqa_slower_and_mha_alike():
    """The named profile of TensorRT-LLM v0.5-v0.6 is the production engine's constants with the per-query-head
    decode kernel: a GQA model's decode step is slower (its query heads' products on the vector units), a multi-head
    model's with a 16-bit KV cache is the same (KV-read-bound either way; an 8-bit cache halves the bytes per product
    and can turn the vector units into the bound)."""
    kw = dict(phase="decode", precision="fp8", batch=64, context=2048, catalog=CAT)
    new = predict_time("llama-2-70b", "h200x1", **kw)
    old = predict_time("llama-2-70b", "h200x1", software="gpu-trtllm-2023", **kw)
    assert old.step_s > 1.3 * new.step_s
    kw["precision"] = "bf16"  # 16-bit KV: 512 bytes per head and key against 512 FLOP, read-bound on the vector units
    mha_new = predict_time("llama-2-7b", "h200x1", **kw)
    mha_old = predict_time("llama-2-7b", "h200x1", software="gpu-trtllm-2023", **kw)
    assert mha_old.step_s == pytest.approx(mha_new.step_s, rel=1e-12)


def _case(source, notes=""):
    return Case(id="R999", category="gpu-infer", phase="e2e-infer", model="Llama 2 70B", metric="tokens_per_s_per_gpu",
                value=1.0, unit="tok/s/GPU", hardware="h100-sxm", quality="medium", source=source, notes=notes,
                fields={})


@pytest.mark.parametrize("source, notes, kernel", [
    ("NVIDIA/TensorRT-LLM docs/source/performance.md (@138f96d4; data 'updated for v0.6.1')", "", "per_query_head"),
    ("NVIDIA/TensorRT-LLM docs/source/blogs/H200launch.md (TRT-LLM v0.5.0, TensorRT 9.1.0.4)", "", "per_query_head"),
    ("NVIDIA/TensorRT-LLM docs/source/blogs/Falcon180B-H200.md (TRT-LLM v0.7a; preliminary)", "", "grouped"),
    ("NVIDIA/TensorRT-LLM docs/source/blogs/XQA-kernel.md (TRT-LLM v0.8a)", "decode_attention=per_query_head", "per_query_head"),
    ("vLLM blog (v0.5.3)", "", "grouped"),  # the release rule is TensorRT-LLM's
    ("MLCommons inference_results_v4.0 closed/NVIDIA", "", "grouped"),
])
def test_validation_rows_take_the_kernel_their_release_ran(source, notes, kernel):
    assert decode_attention_of(_case(source, notes)) == kernel


def test_time_takes_the_software_profile_and_records_it(capsys):
    """``wseplan time --software`` runs the named profile (the same answer as the API) and names it in the record; an
    unknown profile is a one-line error with exit status 2."""
    import json

    from wseplan.cli import main

    args = ["time", "llama-2-70b", "--target", "h200x1", "--precision", "fp8", "--batch", "64", "--context", "2048"]
    assert main([*args, "--software", "gpu-trtllm-2023", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    api = predict_time("llama-2-70b", "h200x1", phase="decode", precision="fp8", batch=64, context=2048,
                       software="gpu-trtllm-2023", catalog=CAT)
    assert rec["software"] == "gpu-trtllm-2023" and rec["step_s"] == pytest.approx(api.step_s, rel=1e-12)
    assert main([*args, "--software", "no-such-engine"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "software" in err[0] and "gpu-trtllm-2023" in err[0]
