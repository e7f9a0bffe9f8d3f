"""Data-parallel attention in an MoE model's inference replica (wseplan.analytic.attention_dp): the memory a GPU holds
and the bytes a decode step reads, against hand calculations from DeepSeek-V3's published config.json, and the chain's
layout search and refusals."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from wseplan.analytic import gpu_pass as P
from wseplan.analytic.attention_dp import attention_params_per_block, rank_share
from wseplan.analytic.memory import gpu_layout_memory
from wseplan.calibration_data import gpu_calibration
from wseplan.errors import InputError
from wseplan.plan import plan
from wseplan.workload import build_workload, resolve_model

ROOT_HF = Path(__file__).resolve().parent / "reference" / "hf_config"

#: DeepSeek-V3's config.json (huggingface.co/deepseek-ai/DeepSeek-V3): hidden 7168, 128 heads, q_lora_rank 1536,
#: kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, 61 layers
D, H, QL, KL, NOPE, ROPE, V, LAYERS = 7168, 128, 1536, 512, 128, 64, 128, 61
#: one block's attention by hand: q_a, q_b, kv_a (latent + RoPE key), kv_b, the output projection, the two latent norms
ATTN_PARAMS = D * QL + QL * H * (NOPE + ROPE) + D * (KL + ROPE) + KL * H * (NOPE + V) + H * V * D + QL + KL


def test_attention_parameters_of_a_deepseek_v3_block(catalog):
    assert ATTN_PARAMS == 187_107_328
    assert attention_params_per_block(resolve_model("deepseek-v3", catalog)) == ATTN_PARAMS


def test_rank_share_is_the_busiest_rank():
    assert rank_share(256.0, 8.0) == pytest.approx(1 / 8)
    assert rank_share(9.0, 8.0) == pytest.approx(2 / 9)  # one rank holds two of nine requests
    assert rank_share(1.0, 8.0) == 1.0  # a lone request is all on one rank
    assert rank_share(0.0, 8.0) == 1.0
    assert rank_share(5.0, 1.0) == 1.0
    assert np.allclose(rank_share(np.array([256.0, 9.0, 1.0]), 8.0), [1 / 8, 2 / 9, 1.0])


def _memory(w, adp, B=256.0, C=32768.0):
    return gpu_layout_memory(w, tp=8.0, pp=1.0, dp=1.0, zero_stage=1, recompute=1, micro_batch=1, virtual_stages=1,
                             batch=B, context=C, gradient_bytes_per_param=0.0, adam_state_bytes_per_param=0.0,
                             prefill_chunk_tokens=2048.0, working_tokens=B, adp=adp)


def test_memory_moves_attention_weights_in_and_kv_cache_out(catalog):
    """TP 8 at fp8: with 8 attention ranks each GPU holds the whole attention weights (7/8 of them more: 1 byte per
    weight) and 1/8 of the latent cache, which a split attention holds whole on every GPU (one latent a token)."""
    m = resolve_model("deepseek-v3", catalog)
    w = build_workload(m, catalog, precision="fp8", phase="decode", batch=1, context=1)
    split, dp8 = _memory(w, 1.0), _memory(w, 8.0)
    assert float(dp8["weights"] - split["weights"]) == pytest.approx(ATTN_PARAMS * LAYERS * 1.0 * (1 - 1 / 8), rel=1e-9)
    # the latent cache: (512 + 64) fp8 elements a token and layer, every request's on every GPU of a split attention
    latent = (KL + ROPE) * 1.0 * LAYERS * 256 * 32768
    assert float(split["kv_cache"]) == pytest.approx(latent, rel=1e-6)
    assert float(dp8["kv_cache"]) == pytest.approx(latent / 8, rel=1e-6)
    assert float(dp8["total"]) == pytest.approx(float(dp8["weights"] + dp8["kv_cache"] + dp8["activations"]), rel=1e-12)


def test_decode_step_reads_one_eighth_of_the_cache_and_all_the_attention_weights(catalog):
    m = resolve_model("deepseek-v3", catalog)
    cal = gpu_calibration()
    gpu = catalog.gpus["h200-sxm"]
    seqs = (P.Sequences(seqs=256.0, tokens=256.0, new=1.0, prior=32768.0),)
    kw = dict(precision="fp8", sequences=seqs, logits_rows=256.0, tp=8.0, cal=cal, expert_layout="ep")
    _, _, split = P.pass_time_s(m, gpu, adp=1.0, **kw)
    _, _, dp8 = P.pass_time_s(m, gpu, adp=8.0, **kw)
    assert dp8["kv_read"] == pytest.approx(split["kv_read"] / 8, rel=1e-9)
    # an all-gather before the MLP and a reduce-scatter after it: one all-reduce's bytes a layer, not two, and two
    # collectives' latencies (an empty all-reduce's time each)
    from wseplan.analytic.gpu_links import Links

    latency = Links(gpu, cal).tp_allreduce(0.0, 8.0)
    assert latency > 0
    assert dp8["tp_comm"] == pytest.approx(split["tp_comm"] / 2 + LAYERS * latency, rel=1e-9)
    # one request alone: its rank does all its attention, so the cache read is the split one's
    one = (P.Sequences(seqs=1.0, tokens=1.0, new=1.0, prior=32768.0),)
    kw1 = dict(kw, sequences=one, logits_rows=1.0)
    assert P.pass_time_s(m, gpu, adp=8.0, **kw1)[2]["kv_read"] == pytest.approx(
        P.pass_time_s(m, gpu, adp=1.0, **kw1)[2]["kv_read"], rel=1e-9)
    # ... and reads the whole attention weights (memory-bound at one token): more GEMM time than the split layout
    assert P.pass_time_s(m, gpu, adp=8.0, **kw1)[2]["gemm"] > P.pass_time_s(m, gpu, adp=1.0, **kw1)[2]["gemm"]


def test_arrays_and_floats_agree(catalog):
    m = resolve_model("deepseek-v3", catalog)
    cal, gpu = gpu_calibration(), catalog.gpus["h200-sxm"]
    B = np.array([1.0, 9.0, 256.0])
    seqs = (P.Sequences(seqs=B, tokens=B, new=1.0, prior=np.full(3, 4096.0)),)
    arr = P.pass_time_s(m, gpu, precision="fp8", sequences=seqs, logits_rows=B, tp=np.full(3, 8.0), cal=cal,
                        adp=np.array([8.0, 8.0, 1.0]))[0]
    for i, a in enumerate((8.0, 8.0, 1.0)):
        one = (P.Sequences(seqs=float(B[i]), tokens=float(B[i]), new=1.0, prior=4096.0),)
        t = P.pass_time_s(m, gpu, precision="fp8", sequences=one, logits_rows=float(B[i]), tp=8.0, cal=cal, adp=a)[0]
        assert float(arr[i]) == pytest.approx(t, rel=1e-12)


def test_search_finds_the_layout_that_fits_and_a_given_split_is_refused(catalog):
    """DeepSeek-V3 fp8, 256 requests of 32k tokens on 8 H200: the latent cache of all of them (295 GB) on every GPU
    cannot fit; in 8 attention ranks it is 37 GB a GPU."""
    kw = dict(phase="decode", precision="fp8", batch=256, context=32768, catalog=catalog)
    r = plan("deepseek-v3", "h200x8", **kw)
    assert r.fits and r.layout["attention_data_parallel"] == 8 and r.layout["tensor_parallel"] == 8
    given = plan("deepseek-v3", "h200x8", layout={"tp": 8, "pp": 1, "dp": 1, "adp": 1}, **kw)
    assert not given.fits and given.step_s is None
    assert given.layout["attention_data_parallel"] == 1
    from wseplan.plan_notes import fit_fix

    assert "--adp 8" in fit_fix(given)  # the refusal names the layout that holds it
    from wseplan.records import layout_label

    assert layout_label(r.layout).split()[:4] == ["TP8", "PP1", "DP1", "EP8"] and "ADP8" in layout_label(r.layout)
    assert "ADP" not in layout_label(given.layout)


def test_dense_models_keep_their_records_and_refuse_adp(catalog):
    r = plan("llama-3.1-8b", "h100x8", phase="decode", batch=64, context=4096, catalog=catalog)
    assert "attention_data_parallel" not in r.layout
    with pytest.raises(InputError, match="adp"):
        plan("llama-3.1-8b", "h100x8", phase="decode", layout={"tp": 8, "adp": 8}, catalog=catalog)
    with pytest.raises(InputError, match="adp"):  # an MoE model, adp other than tp
        plan("deepseek-v3", "h200x8", precision="fp8", phase="decode", layout={"tp": 8, "adp": 4}, catalog=catalog)


def test_small_batches_keep_the_split_attention(catalog):
    """One request: 8 attention ranks would read the whole attention weights on every GPU for nothing."""
    r = plan("deepseek-v3", "h200x8", phase="decode", precision="fp8", batch=1, context=4096, catalog=catalog)
    assert r.layout["attention_data_parallel"] == 1
    assert math.isfinite(r.step_s)


def test_published_deepseek_serving_rows_are_predicted_with_their_attention_layout(catalog):
    """catalogs/validation/validation-moe-serve.csv (never fitted): every row is predicted, and a row that states
    ``dp_attention=yes`` (SGLang 0.4.3 with --enable-dp-attention on 8 H200, R811) runs 8 attention ranks: stating
    ``no`` instead gives another prediction."""
    import dataclasses

    from wseplan.catalog.load import default_catalog_dir
    from wseplan.validate.cases import read_cases
    from wseplan.validate.run import predict_case

    cases = read_cases(default_catalog_dir() / "validation" / "validation-moe-serve.csv")
    assert len(cases) == 21 and all(c.category == "gpu-infer" for c in cases)
    # the MLPerf rows (R812-R821) name their benchmark and leave the prompt length to the dataset's mean: filled, and
    # said so (803.8 tokens, catalogs/validation/datasets.yaml)
    from wseplan.validate.defaults import fill_defaults
    r812 = next(c for c in cases if c.id == "R812")
    filled, names = fill_defaults(r812, catalog)
    assert r812.fields.get("input_len") is None and filled.fields["input_len"] == 804  # 803.8, whole tokens
    assert "input_len" in names
    r811 = next(c for c in cases if c.id == "R811")
    assert "dp_attention=yes" in r811.notes
    yes = predict_case(r811, catalog)
    no = predict_case(dataclasses.replace(r811, notes=r811.notes.replace("dp_attention=yes", "dp_attention=no")),
                      catalog)
    assert yes > 0 and no > 0 and abs(yes / no - 1) > 0.01


# ---------------------------------------------------------------------------------------------
# --speculative mtp: a model's own multi-token-prediction module drafts
# ---------------------------------------------------------------------------------------------
def test_mtp_draft_is_one_moe_block_with_the_shared_embedding_and_head(catalog):
    """DeepSeek-V3's MTP module: one MoE transformer block (its model card: 685B on Hugging Face = 671B main model +
    14B MTP module, counted with the embedding and head it shares), here 13.4B without the 2d x d projection."""
    from wseplan.devices.speculation import mtp_draft
    from wseplan.workload import block_types, total_params

    m = resolve_model("deepseek-v3", catalog)
    assert m.mtp_layers == 1
    d = mtp_draft(m)
    (b,) = block_types(d)
    assert d.num_layers == 1 and b.moe and b.count == 1 and d.tokenizer == m.tokenizer
    block = ATTN_PARAMS + 257 * 3 * D * 2048 + D * 256 + 256 + 2 * D  # routed + shared experts, router, its bias, norms
    emb = 129280 * D
    assert total_params(d) == pytest.approx(block + 2 * emb + D, rel=1e-3)  # + the final norm
    assert 0.93 < total_params(d) / 14e9 < 1.0
    with pytest.raises(InputError, match="multi-token-prediction"):
        mtp_draft(resolve_model("llama-3.1-8b", catalog))


def test_mtp_speculation_and_its_config_json(catalog, tmp_path):
    import json

    from wseplan.model_files import model_from_hf_config
    from wseplan.timing import predict_time

    plain = predict_time("deepseek-r1", "h200x8", precision="fp8", batch=1, context=2048, speculative="none",
                         catalog=catalog)
    mtp = predict_time("deepseek-r1", "h200x8", precision="fp8", batch=1, context=2048, speculative="mtp",
                       draft_tokens=3, catalog=catalog)
    # 3 drafted tokens at the default acceptance 0.8: (1 - 0.8^4) / 0.2 = 2.952 tokens a verify pass
    assert 1.5 < mtp.tokens_per_s_per_user / plain.tokens_per_s_per_user < 2.952
    assert any("DeepSeek-V3 MTP drafts 3 tokens" in n for n in mtp.notes)
    with pytest.raises(InputError, match="multi-token-prediction"):
        predict_time("llama-3.1-8b", "h100x1", speculative="mtp", catalog=catalog)
    cfg = json.loads((ROOT_HF / "deepseek-r1.json").read_text())
    assert model_from_hf_config(ROOT_HF / "deepseek-r1.json").mtp_layers == cfg["num_nextn_predict_layers"] == 1
    cfg["num_nextn_predict_layers"] = 0
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert model_from_hf_config(tmp_path / "c.json").mtp_layers == 0


def test_a_wafer_drafts_only_where_one_wafer_holds_the_drafts_largest_layer(catalog):
    """audit37a F4: on wafers a layer is placed whole (an MoE layer's experts on one wafer), so the MTP block of
    DeepSeek-V3 (one MoE block: 257 experts x 3 x 7168 x 2048 + MLA ~ 11.5B parameters, 23 GB in bf16) needs that
    much free on one wafer. In bf16 the target's 58 wafers leave at most ~18 GB free on any (41.25 GB each): no
    speculation, though their free bytes add up to far more; in fp8 (11.5 GB) a wafer holds it."""
    from wseplan.plan import setup
    from wseplan.timing import predict_time

    bf = predict_time("deepseek-v3", "wse3", precision="bf16", speculative="mtp", catalog=catalog)
    plain = predict_time("deepseek-v3", "wse3", precision="bf16", speculative="none", catalog=catalog)
    assert bf.tokens_per_s_per_user == pytest.approx(plain.tokens_per_s_per_user, rel=1e-12)
    assert any("does not fit beside the target" in n for n in bf.notes)
    s = setup("deepseek-v3", "wse3", phase="decode", precision="bf16", catalog=catalog,
              options={"speculative": "mtp"})
    fam, ctx = s.family, s.ctx
    n1 = np.ones(1)
    cfg = fam._with_stages(ctx, *(lambda c: (c, fam.fit(ctx, c)))(
        fam.candidates(ctx, {"batch": n1, "context": n1 * 8192, "output_tokens": 0 * n1, "num_wafers": n1 * np.nan})[0]))
    dctx, dcfg = fam.draft_setup(ctx, cfg)
    free_w = np.where(cfg["_valid"][0], ctx.cap - cfg["_sb"][0], 0.0)
    block = 257 * 3 * 7168 * 2048 * 2  # the MTP block's experts alone, bf16 [bytes]
    assert free_w.max() < block < free_w.sum()
    assert fam.draft_fits(ctx, cfg, 0, dctx, dcfg) is False
    f8 = predict_time("deepseek-v3", "wse3", precision="fp8", speculative="mtp", catalog=catalog)
    assert f8.tokens_per_s_per_user > 1.5 * predict_time("deepseek-v3", "wse3", precision="fp8", speculative="none",
                                                         catalog=catalog).tokens_per_s_per_user


def test_prompt_bound_data_parallel_attention_says_its_budget_is_the_replicas(catalog):
    """audit37a F5: 256 requests of 32,768 prompt tokens and 256 answer tokens bring 32,768 prompt tokens per decode
    step (256 x 32,768 / 256) against the production engine's budget of 8,192 a pass: prompts bind, and the budget is
    taken per replica where the engines give each attention rank one, so the record says its prompt rate may be up to
    8x pessimistic. Not at 64 x 2,048 + 1,024 (128 prompt tokens and 64 decode rows a step). With MTP (review37b M2)
    a request takes fewer steps: 32 x 30,000 over 256 / 3.36 accepted tokens a step, plus 32 x 5 verified rows."""
    from wseplan.timing import predict_time

    kw = dict(precision="fp8", phase="serve", catalog=catalog, layout={"tp": 8, "pp": 1, "dp": 1})
    long = predict_time("deepseek-v3", "h200x8", batch=256, context=32768, output_tokens=256,
                        **dict(kw, layout=dict(kw["layout"], adp=8)))
    (n,) = [n for n in long.notes if n.startswith("prompts bind this point")]
    assert "33,024 tokens per decode step" in n and "8,192" in n and "up to 8x" in n  # 32,768 prompt + 256 decode
    short = predict_time("deepseek-v3", "h200x8", batch=64, context=2048, output_tokens=1024,
                         **dict(kw, layout=dict(kw["layout"], adp=8)))
    assert not any(n.startswith("prompts bind") for n in short.notes)
    mtp = predict_time("deepseek-v3", "h200x8", batch=32, context=30000, output_tokens=256, speculative="mtp",
                       **dict(kw, layout=dict(kw["layout"], adp=8)))
    (n,) = [n for n in mtp.notes if n.startswith("prompts bind this point")]
    acc = (1 - 0.8 ** 5) / (1 - 0.8)  # 4 drafted tokens at the default acceptance 0.8: 3.3616 a verify pass
    assert f"{32 * 30000 / (256 / acc) + 32 * 5:,.0f} tokens per decode step" in n  # + 32 x (4 + 1) verified rows


def test_a_prompt_chunk_runs_on_its_requests_rank(catalog):
    """Under data-parallel attention a prompt (or a chunk of one) is its request's, on that request's rank with all
    128 heads: a lone prompt's attention takes 8x the split layout's on the busiest GPU, while eight whole prompts in
    one pass run one per rank (the split layout's attention time)."""
    m = resolve_model("deepseek-v3", catalog)
    cal, gpu = gpu_calibration(), catalog.gpus["h200-sxm"]
    kw = dict(precision="fp8", tp=8.0, cal=cal, expert_layout="ep")

    def attention(seqs, adp):
        g = (P.Sequences(seqs=seqs, tokens=2048.0 * seqs, new=2048.0, prior=0.0, decode=False),)
        return P.pass_time_s(m, gpu, sequences=g, logits_rows=seqs, adp=adp, **kw)[2]["attention"]

    assert attention(1.0, 8.0) == pytest.approx(8 * attention(1.0, 1.0), rel=1e-6)
    assert attention(8.0, 8.0) == pytest.approx(attention(8.0, 1.0), rel=1e-6)
    assert attention(9.0, 8.0) == pytest.approx(2 * attention(9.0, 1.0) * 8 / 9, rel=1e-6)  # the busiest has two


def test_serving_fit_records_and_the_draft_under_data_parallel_attention(catalog):
    kw = dict(precision="fp8", catalog=catalog)
    lay = {"tp": 8, "pp": 1, "dp": 1, "adp": 8}
    # serving: each decode step reads 1/8 of the latent cache, and the prompts riding on the steps (whole, on their
    # rank) cost more: long answers after short prompts favour it; at 2k answers after 2k prompts the split layout
    # is faster; at 256 requests of 2k + 8k tokens only the data-parallel layout holds the cache
    long8, long1 = (plan("deepseek-v3", "h200x8", phase="serve", batch=128, context=1024, output_tokens=8192,
                         layout=dict(lay, adp=a), **kw) for a in (8, 1))
    assert long8.tokens_per_s > long1.tokens_per_s
    short8, short1 = (plan("deepseek-v3", "h200x8", phase="serve", batch=128, context=2048, output_tokens=2048,
                           layout=dict(lay, adp=a), **kw) for a in (8, 1))
    assert short8.tokens_per_s < short1.tokens_per_s
    big8, big1 = (plan("deepseek-v3", "h200x8", phase="serve", batch=256, context=2048, output_tokens=8192,
                       layout=dict(lay, adp=a), **kw) for a in (8, 1))
    assert big8.fits and not big1.fits
    # the cache the replica holds, and the tokens it can hold, do not jump with the batch's split over the ranks
    tokens, latent = [], (KL + ROPE) * 1.0 * LAYERS
    for b in (1, 9, 17):
        r = plan("deepseek-v3", "h200x8", phase="decode", batch=b, context=32768, layout=lay, **kw)
        assert r.kv_cache_bytes == pytest.approx(latent * b * 32768, rel=1e-3)
        parts = r.weights_bytes + r.kv_cache_bytes + r.activation_bytes + r.optimizer_bytes
        assert r.total_bytes == pytest.approx(parts, rel=1e-12)  # the record's total is its parts' sum
        tokens.append(r.max_tokens_in_flight)
    assert max(tokens) / min(tokens) < 1.001
    # the MTP draft's memory is judged beside the target's data-parallel cache (it fits: about 3 GB a GPU)
    r = plan("deepseek-v3", "h200x8", phase="decode", batch=64, context=32768, layout=lay,
             options={"speculative": "mtp"}, **kw)
    assert any(n.startswith("speculative decoding on") for n in r.notes), r.notes


def test_given_layouts_and_their_messages(catalog):
    r = plan("llama-3.1-70b", "h200x8", phase="decode", layout={"tp": 8, "pp": 1, "dp": 1}, catalog=catalog)
    assert r.sources["layout"] == "given"  # a dense model's tp x pp x dp is its whole layout
    with pytest.raises(InputError, match="adp: data-parallel attention is a layout of GPU inference"):
        plan("llama-3.1-70b", "h200x8", phase="train", layout={"adp": 8}, catalog=catalog)
    with pytest.raises(InputError, match=r"must equal the replica's tp \(4"):
        plan("deepseek-v3", "h200x8", precision="fp8", phase="decode", layout={"pp": 2, "adp": 8}, catalog=catalog)
    from wseplan.plan_notes import fit_fix

    # Mixtral's 8 KV heads already split over TP 8: no data-parallel hint for its misfit
    mix = plan("mixtral-8x7b", "h100x8", precision="fp8", phase="decode", batch=4096, context=32768,
               layout={"tp": 8, "pp": 1, "dp": 1, "adp": 1}, catalog=catalog)
    assert not mix.fits and "--adp" not in fit_fix(mix)
    # Qwen3-235B at 512 x 32k: too big for 8 H200 either way, so no --adp hint (it would not fit either)
    qwen = plan("qwen3-235b-a22b", "h200x8", precision="fp8", phase="decode", batch=512, context=32768,
                layout={"tp": 8, "pp": 1, "dp": 1, "adp": 1}, catalog=catalog)
    assert not qwen.fits and "--adp" not in fit_fix(qwen)
    assert not plan("qwen3-235b-a22b", "h200x8", precision="fp8", phase="decode", batch=512, context=32768,
                    layout={"tp": 8, "pp": 1, "dp": 1, "adp": 8}, catalog=catalog).fits


def test_time_and_cost_name_the_data_parallel_layout_a_misfit_needs(capsys):
    """`time` and `cost` refuse DeepSeek-V3 at 256 x 32k on 8 H200 with a split attention (exit 2, one line each), and
    both say that --adp 8 keeps a request's latent cache on one GPU."""
    from wseplan.cli import main

    args = ["deepseek-v3", "--target", "h200x8", "-p", "fp8", "--batch", "256", "--context", "32768", "--tp", "8",
            "--pp", "1", "--dp", "1", "--adp", "1"]
    for cmd in ("time", "cost"):
        assert main([cmd, *args]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--adp 8" in err, (cmd, err)
        if cmd == "time":  # `fit` takes no layout: the refusal of a given one does not send the user there to see it
            # (audit37a F7)
            assert err.endswith("without the layout options `wseplan time` and `wseplan fit` choose a layout that fits")
