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


@pytest.mark.parametrize("tp, reads", [
    (1, 8.0),   # 64 query heads over 8 KV heads: each KV head read by its 8 query heads
    (2, 8.0),   # 32 query heads and 4 KV heads per GPU
    (8, 8.0),   # 8 query heads and 1 KV head per GPU
    (16, 4.0),  # 4 query heads per GPU; the 8 KV heads replicated, 1 per GPU
])
def test_llama_2_70b_per_query_head_reads_by_hand(tp, reads):
    att = _att("llama-2-70b")
    assert (att.num_heads, att.num_kv_heads) == (64, 8)
    assert float(P.decode_kv_reads(att, tp, grouped=False)) == reads
    assert float(P.decode_kv_reads(att, tp, grouped=True)) == 1.0


def test_multi_head_and_latent_attention_read_once_either_way():
    assert float(P.decode_kv_reads(_att("llama-2-7b"), 1, grouped=False)) == 1.0  # 32 heads, 32 KV heads
    assert float(P.decode_kv_reads(_att("deepseek-v3"), 8, grouped=False)) == 1.0  # MLA: one latent


def test_decode_step_kv_read_is_group_times_longer_and_prefill_unchanged():
    """One decode step of Llama 2 70B fp8 on one H200 (batch 64, 2,048 cached tokens): the KV-read part of a
    per-query-head kernel is exactly 8x the grouped kernel's (160 KiB of fp8 KV per token, read by 8 query heads);
    a prompt pass (the context-phase kernel) is the same either way."""
    m = resolve_model("llama-2-70b", CAT)
    cal = setup("llama-2-70b", "h200x1", phase="decode", precision="fp8", catalog=CAT).ctx.cal
    dec = (P.Sequences(seqs=64.0, tokens=64.0, new=1.0, prior=2048.0),)
    kw = dict(precision="fp8", sequences=dec, logits_rows=64.0, tp=1.0, cal=cal)
    _, _, grouped = P.pass_time_s(m, CAT.gpus["h200-sxm"], **kw)
    _, _, per_head = P.pass_time_s(m, CAT.gpus["h200-sxm"], grouped_kv=False, **kw)
    assert float(per_head["kv_read"]) == pytest.approx(8.0 * float(grouped["kv_read"]), rel=1e-12)
    hbm = CAT.gpus["h200-sxm"].hbm_bandwidth_bytes_per_s.si * cal.hbm_frac
    assert float(grouped["kv_read"]) == pytest.approx(80 * 2 * 8 * 128 * 1.0 * 64 * 2049 / hbm, rel=1e-12)
    pre = (P.Sequences(seqs=1.0, tokens=2048.0, new=2048.0, prior=0.0, decode=False),)
    kw.update(sequences=pre, logits_rows=1.0)
    t1 = P.pass_time_s(m, CAT.gpus["h200-sxm"], **kw)[0]
    t2 = P.pass_time_s(m, CAT.gpus["h200-sxm"], grouped_kv=False, **kw)[0]
    assert float(t1) == float(t2)


def test_gpu_trtllm_2023_profile_decodes_gqa_slower_and_mha_alike():
    """The named profile of TensorRT-LLM v0.5-v0.6 is the production engine's constants with the per-query-head
    decode kernel: a GQA model's decode step is slower by its extra KV reads, a multi-head model's is the same."""
    kw = dict(phase="decode", precision="fp8", batch=64, context=2048, catalog=CAT)
    new = predict_time("llama-2-70b", "h200x1", **kw)
    old = predict_time("llama-2-70b", "h200x1", software="gpu-trtllm-2023", **kw)
    assert old.step_s > 1.3 * new.step_s
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
