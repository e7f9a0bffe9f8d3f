"""Fit acceptance cases (issue 2) and hand-calculated memory accounting."""
import json

import pytest

from wseplan.catalog.schema import Model
from wseplan.cli import main
from wseplan.fit import fit
from wseplan.workload import total_params

RECORD_FIELDS = {"schema_version", "fits", "num_devices", "capacity_bytes", "weights_bytes", "kv_cache_bytes",
                 "activation_bytes", "optimizer_bytes", "total_bytes", "headroom_bytes", "binding",
                 "max_tokens_in_flight", "stages"}


def _check_stages(res, num_blocks):
    covered = []
    for s in res.stages:
        assert s.bytes <= res.capacity_bytes
        covered.extend(range(s.first_layer, s.last_layer + 1))
    assert covered == list(range(num_blocks))  # contiguous, each block exactly once, in order
    assert res.stages[0].embedding and res.stages[-1].lm_head


def test_llama3_70b_needs_four_wse3(catalog):
    """Cerebras serves Llama 3.1 70B with 16-bit weights on four CS-3 (cerebras-inference-blog)."""
    res = fit("llama-70b", "wse3", catalog=catalog)
    assert res.fits and res.num_devices == 4
    assert 140e9 < res.weights_bytes < 142e9
    _check_stages(res, 80)


def test_llama3_8b_fits_one_wse3(catalog):
    res = fit("llama-3-8b", "wse3", catalog=catalog)
    assert res.fits and res.num_devices == 1 and res.binding == "none"


def test_llama31_405b_needs_21_or_22_wse3(catalog):
    """~6.4 GB per layer; 16-bit weights alone need >= 19 wafers (405e9 x 2 B / 44 GB)."""
    res = fit("llama-405b", "wse3", catalog=catalog)
    assert res.fits and res.num_devices in (21, 22)
    _check_stages(res, 126)


def test_20b_model_fits_one_cs3(catalog, tmp_path):
    """Cerebras: '20B models fit on a single CS-3' (cerebras-inference-blog). A 20B-class config at 2K context."""
    cfg = {"num_hidden_layers": 48, "hidden_size": 6144, "num_attention_heads": 48, "num_key_value_heads": 8,
           "intermediate_size": 17408, "vocab_size": 32000, "hidden_act": "silu"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    res = fit(str(p), "cs3", context=2048, catalog=catalog)
    from wseplan.workload import model_from_hf_config

    assert 19.5e9 < total_params(model_from_hf_config(p)) < 20.5e9
    assert res.fits and res.num_devices == 1


def test_fixed_count_reports_shortfall(catalog):
    res = fit("llama-70b", "cs3x3", catalog=catalog)
    assert not res.fits and res.num_devices == 3
    assert res.shortfall_bytes > 0 and res.headroom_bytes < 0
    # the shortfall is what the fullest wafer lacks: 141 GB / 3 wafers > 41.2 GB usable
    assert res.shortfall_bytes == pytest.approx(max(s.bytes for s in res.stages) - res.capacity_bytes, rel=1e-12)


def test_wafer_capacity_is_usable_grid_times_48kib_less_reserve(catalog):
    res = fit("llama-3-8b", "wse3", catalog=catalog)
    assert res.capacity_bytes == pytest.approx(755 * 1170 * 49152 * (1 - 0.05), rel=1e-12)


def test_hand_calc_wafer_inference_totals(catalog):
    """Llama-2-13B fp16 on WSE-2, batch 2, context 4096: weights + KV + activation working set."""
    m = catalog.models["llama-2-13b"]
    res = fit("llama-2-13b", "wse2", precision="fp16", batch=2, context=4096, catalog=catalog)
    weights = 2 * total_params(m)
    kv = 40 * 2 * 40 * 128 * 2 * 2 * 4096  # layers x (K,V) x heads x head_dim x bytes x batch x context
    act = 2 * (4 * 5120 + 2 * 13824) * 2  # 16-bit x (4 d + 2 d_ff) per token x 2 tokens in flight (decode)
    assert res.weights_bytes == pytest.approx(weights, rel=1e-12)
    assert res.kv_cache_bytes == pytest.approx(kv, rel=1e-12)
    assert res.activation_bytes == pytest.approx(act * res.num_devices, rel=1e-12)
    assert res.total_bytes == pytest.approx(weights + kv + act * res.num_devices, rel=1e-12)


def test_hand_calc_gpu_training_zero0(catalog):
    """Llama-3-8B bf16 training, TP1 PP1 DP1, ZeRO-0, full recompute, 1 x 2048 tokens on one B200."""
    m = catalog.models["llama-3-8b"]
    P = total_params(m)
    res = fit("llama-3-8b", "b200x1", phase="train", batch=1, context=2048, zero_stage=0, recompute="full", catalog=catalog)
    assert res.weights_bytes == pytest.approx(2 * P, rel=1e-12)
    # fp32 gradients (Megatron-LM accumulates bf16 training's gradients in fp32: 2 + 4 + 12 = 18 B/param, its README)
    # + fp32 master, m, v
    assert res.optimizer_bytes == pytest.approx((4 + 12) * P, rel=1e-12)
    ckpt = 32 * 4096 * 2 * 2048  # layer inputs: 32 layers x d x 2 B x 2048 tokens
    d, ff, kvd = 4096, 14336, 8 * 128
    # full activations of the layer being recomputed: norm in, QKV in, Q, K, V, attention out (6 d + 2 kvd
    # counting the MLP's norm in and input) and gate, up, down-input (3 d_ff), 16-bit, 2048 tokens
    one_layer = 2 * (6 * d + 2 * kvd + 3 * ff) * 2048
    # and the loss's logits of the micro-batch, fp32 (Korthikanti et al. 2022 sec. 4.1: 4sbv): 2048 x 128,256 x 4 B
    logits = 2048 * 128_256 * 4
    assert res.activation_bytes == pytest.approx(ckpt + one_layer + logits, rel=1e-12)
    assert res.fits  # 16 x 8.03e9 = 128.5 GB + ~3 GB < 162 GB usable


def test_hand_calc_gpu_inference_tp(catalog):
    """Llama-2-70B bf16 decode on 8 x H100, TP8: weights/8 + KV/8 per GPU."""
    m = catalog.models["llama-2-70b"]
    res = fit("llama-2-70b", "h100x8", batch=8, context=4096, catalog=catalog)
    assert res.layout["tensor_parallel"] * res.layout["pipeline_parallel"] * res.layout["data_parallel"] == 8
    assert res.fits
    kv_total = 80 * 2 * 8 * 128 * 2 * 8 * 4096
    assert res.kv_cache_bytes == pytest.approx(kv_total, rel=1e-12)
    assert res.weights_bytes == pytest.approx(2 * total_params(m), rel=1e-3)


def test_405b_does_not_fit_one_h100_node(catalog):
    res = fit("llama-405b", "h100x8", catalog=catalog)
    assert not res.fits and res.shortfall_bytes > 0
    assert res.binding == "weights"


def test_gpu_finds_smallest_count(catalog):
    res = fit("llama-405b", "h100", catalog=catalog)
    assert res.fits
    # 811.7 GB of bf16 weights (and the KV cache) over 77.3 GB usable per H100 (90% of 80 GiB) needs at least 11 GPUs
    assert res.num_devices >= 11 and res.num_devices * res.capacity_bytes >= 811.7e9
    smaller = fit("llama-405b", f"h100x{res.num_devices - 1}", catalog=catalog)
    assert not smaller.fits


def test_wafer_training_bounds(catalog):
    res = fit("gpt3-175b", "wse3", phase="train", batch=4, context=2048, catalog=catalog)
    assert res.memoryx.fits
    assert res.memoryx.required_bytes == pytest.approx(16 * total_params(catalog.models["gpt-3-175b"]), rel=1e-12)
    # a layer's load w / B is hidden when its forward T f / (peak x eff) is longer; 16-bit weights with 2 FLOP per
    # weight per token give T >= peak x eff / B: 883,350 PEs x 16 FLOP/cycle x 1.1 GHz x eff / 150 GB/s (the MemoryX
    # feed of cerebras-memoryx-glossary)
    from wseplan.analytic.stream import load_stream_constants

    eff = load_stream_constants().compute_efficiency_frac.si
    assert res.streaming.min_tokens_compute_bound == pytest.approx(883_350 * 16 * 1.1e9 * eff / 150e9, rel=0.02)
    assert not res.streaming.feasible_compute_bound  # checkpoints (2.36 MB/token) outgrow the wafer first
    assert res.fits


def test_json_record_fields(capsys):
    rc = main(["fit", "llama-70b", "--target", "wse3", "--format", "json"])
    assert rc == 0
    rec = json.loads(capsys.readouterr().out)
    assert RECORD_FIELDS <= set(rec)
    assert rec["num_devices"] == 4 and rec["fits"] is True
    assert set(rec["stages"][0]) == {"device", "first_layer", "last_layer", "embedding", "lm_head", "bytes"}


@pytest.mark.parametrize("fmt", ["table", "csv", "md"])
def test_other_formats(capsys, fmt):
    assert main(["fit", "llama-3-8b", "--target", "h100", "--format", fmt]) == 0
    assert capsys.readouterr().out.strip()


def test_generic_layer_list(tmp_path, capsys):
    p = tmp_path / "unet.yaml"
    p.write_text("name: tiny-unet\nlayers:\n" + "".join(
        f"  - {{name: l{i}, params: 1.0e6, flop_per_sample: 2.0e9, activation_bytes_per_sample: 4.0e6}}\n" for i in range(10)))
    assert main(["fit", str(p), "--target", "wse2", "--phase", "train", "--batch", "4", "--context", "1", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["fits"]


@pytest.mark.parametrize("argv,fragment", [
    (["fit", "no-such-model", "--target", "wse3"], "model"),
    (["fit", "llama-70b", "--target", "tpu-v99"], "target"),
    (["fit", "llama-70b", "--target", "wse3", "--batch", "-4"], "batch"),
    (["fit", "llama-70b", "--target", "wse3", "--context", "0"], "context"),
    (["fit", "llama-70b", "--target", "wse3", "--precision", "fp12"], "precision"),
    (["fit", "llama-70b", "--target", "wse3", "--phase", "warp"], "phase"),
    (["fit", "llama-70b", "--target", "wse3", "--reserve", "1.5"], "reserve"),
    (["fit", "llama-70b", "--target", "wse3", "--format", "xml"], "format"),
    (["fit", "missing.json", "--target", "wse3"], "model"),
])
def test_bad_input_one_line_exit_2(capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and fragment in err


def test_config_json_missing_fields(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 4096}))
    assert main(["fit", str(p), "--target", "wse3"]) == 2
    err = capsys.readouterr().err
    assert "num_hidden_layers" in err and err.count("\n") == 1


def test_malformed_catalog_yaml(tmp_path, capsys):
    d = tmp_path / "cat"
    d.mkdir()
    (d / "x.yaml").write_text("gpus: {h100-sxm: [unclosed\n")
    assert main(["fit", "llama-70b", "--target", "wse3", "--catalog", str(d)]) == 2
    err = capsys.readouterr().err
    assert "malformed YAML" in err and err.count("\n") == 1


def test_unknown_catalog_key(tmp_path, capsys):
    d = tmp_path / "cat"
    d.mkdir()
    (d / "x.yaml").write_text("models:\n  m:\n    name: m\n    source: wseplan-estimate\n    basis: estimate\n    note: x\n"
                              "    num_layers: 2\n    d_model: 64\n    num_heads: 4\n    num_kv_heads: 4\n    d_ff: 256\n"
                              "    gated_mlp: true\n    vocab_size: 100\n    tied_embeddings: false\n    colour: blue\n")
    assert main(["fit", "m", "--target", "wse3", "--catalog", str(d)]) == 2
    err = capsys.readouterr().err
    assert "colour" in err and "unknown key" in err


def test_catalog_commands(capsys):
    assert main(["catalog", "list", "hardware", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "wse3" in out and "h100-sxm" in out and "mi300x" in out
    assert main(["catalog", "show", "h100", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    hbm = next(r for r in rows if r["field"] == "hbm_bytes")
    assert hbm["si"] == 80 * 2**30 and hbm["source"]  # 80 GiB: HBM stacks are binary-sized
    assert main(["catalog", "show", "h1000"]) == 2


def test_model_object_api(catalog):
    m = Model(name="tiny", source="wseplan-estimate", basis="estimate", note="test", num_layers=2, d_model=64,
              num_heads=4, num_kv_heads=2, d_ff=128, gated_mlp=True, vocab_size=100, tied_embeddings=True)
    res = fit(m, "a100", catalog=catalog)
    assert res.fits and res.num_devices == 1


def test_interleaved_moe_fits_eight_h200_at_tp8(catalog):
    """Llama 4 Maverick interleaves 24 dense blocks with 24 MoE blocks (config.json interleave_moe_layer_step 2): 400B
    parameters in total (Meta's model card: 17B active, 400B total), 803 GB in bf16, 100.4 GB per GPU over TP8: it fits
    8 x H200 (141 GB, 136 GB usable at 90 %). Counting every block at the MoE block's size (the earlier fit) put
    196 GB on each GPU and refused it."""
    m = catalog.models["llama-4-maverick-17b-128e"]
    res = fit("llama-4-maverick", "h200x8", batch=1, context=2048, layout={"tp": 8, "pp": 1}, catalog=catalog)
    assert res.fits
    per_gpu_weights = 2 * total_params(m) / 8  # one pipeline stage: the whole model split over 8 ranks
    assert 99e9 < per_gpu_weights < 101e9
    assert res.weights_bytes == pytest.approx(2 * total_params(m), rel=1e-9)
    used = res.capacity_bytes - res.headroom_bytes  # the fullest GPU
    assert per_gpu_weights <= used <= per_gpu_weights + 1e9  # + KV cache and working set
    assert fit("llama-4-maverick", "h200x8", batch=1, context=2048, catalog=catalog).fits  # searched layout too


def test_deepseek_v3_fits_eight_b200(catalog):
    """DeepSeek-V3: 3 dense blocks then 58 MoE blocks, 671B parameters (DeepSeek-V3 report): 1,342 GB in bf16, 167.8
    GB per GPU over TP8 against 174 GB usable of a B200's 192 GB (at 90 %)."""
    res = fit("deepseek-v3", "b200x8", batch=1, context=2048, catalog=catalog)
    assert res.fits and res.num_devices == 8


@pytest.mark.parametrize("name", ["llama-4-maverick-17b-128e", "deepseek-v3", "llama-3.1-70b"])
@pytest.mark.parametrize("pp", [1, 2, 3, 5, 7])
def test_gpu_stage_weights_bounded_by_block_runs(catalog, name, pp):
    """The middle pipeline stages hold n = ceil(L / pp) consecutive blocks; the two edge stages (embedding, head) take
    the pp x n - L blocks left over, half each (k = floor((pp n - L) / 2) fewer blocks from pp = 3 on), beside their edge
    layer. The fullest stage's weights lie between an even share of the blocks and n of the largest block plus the
    largest edge layer (hand bounds), are the whole model at pp = 1, and for equal blocks (Llama-3.1-70B) are exactly
    max(n blocks, n - k blocks + the largest edge layer): at pp = 7, 12 blocks (80 = 10 + 5 x 12 + 10), where ceil(L/pp)
    blocks plus the embedding had been counted (audit18 F7: 70B on 7 H100 'did not fit' where `place` fits it)."""
    from wseplan.analytic.memory import gpu_layout_memory
    from wseplan.workload import KIND_BLOCK, build_workload

    w = build_workload(catalog.models[name], catalog, phase="decode", precision="bf16", batch=1, context=1)
    blocks = w.weight_bytes[w.kind == KIND_BLOCK]
    edge = w.weight_bytes[w.kind != KIND_BLOCK]
    L = len(blocks)
    mem = gpu_layout_memory(w, tp=1, pp=pp, dp=1, zero_stage=0, recompute=0, micro_batch=1, virtual_stages=1, batch=1,
                            context=1, gradient_bytes_per_param=0, adam_state_bytes_per_param=0, prefill_chunk_tokens=1)
    stage = float(mem["weights"])
    n = -(-L // pp)
    if pp == 1:
        assert stage == pytest.approx(w.weight_bytes.sum(), rel=1e-12)
        return
    top_edge = max(float(edge.max()), float(w.tied_head_bytes or 0.0))
    assert max(blocks.sum() / pp, top_edge) <= stage <= n * blocks.max() + top_edge
    k = (pp * n - L) // 2 if pp >= 3 else 0
    if blocks.max() == blocks.min():
        assert stage == pytest.approx(max(n * blocks[0] if pp >= 3 else 0.0, (n - k) * blocks[0] + top_edge), rel=1e-12)
    if name.startswith("llama-4"):  # dense and MoE blocks alternate: a run of m holds ceil(m / 2) MoE blocks
        def run(m):
            return -(-m // 2) * blocks.max() + m // 2 * blocks.min()
        assert stage == pytest.approx(max(run(n) if pp >= 3 else 0.0, run(n - k) + top_edge), rel=1e-12)


def test_gpu_fit_agrees_with_place_on_equal_blocks(catalog):
    """Llama-3.1-70B on 7 H100 (TP1, PP7) at 9 x 126,000 tokens: a block is 1.7113 GB of weights + 1,134,000 x 4,096 B
    of KV = 6.356 GB; the middle stages hold 12 (76.28 GB), the edge stages 10 plus the 2.1 GB embedding or head, so it
    fits the 77.3 GB usable: fit's fullest device equals the exact contiguous partition of `place`."""
    from wseplan.optimize import place

    res = fit("llama-3.1-70b", "h100x7", batch=9, context=126000, catalog=catalog)
    assert res.fits and res.layout["pipeline_parallel"] == 7
    pl = place("llama-3.1-70b", "h100x7", tensor_parallel=1, batch=9, context=126000, catalog=catalog)
    assert res.capacity_bytes - res.headroom_bytes == pytest.approx(pl.max_stage_bytes, rel=1e-9)


def test_config_files_of_one_folder_keep_their_own_names(tmp_path):
    """audit27c F10: two config files in one folder were both named after the folder, so compare and sweep records
    could not be told apart; a file named config.json keeps its folder's name (a Hugging Face checkout)."""
    import json as _json

    from wseplan.catalog import load_catalog
    from wseplan.workload import resolve_model

    cat = load_catalog()
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192}
    (tmp_path / "a.json").write_text(_json.dumps(cfg))
    (tmp_path / "b.json").write_text(_json.dumps(dict(cfg, num_hidden_layers=16)))
    hf = tmp_path / "My-8B"
    hf.mkdir()
    (hf / "config.json").write_text(_json.dumps(cfg))
    assert [resolve_model(str(p), cat).name for p in (tmp_path / "a.json", tmp_path / "b.json", hf / "config.json")] == \
        ["a", "b", "My-8B"]


def test_a_layer_list_model_fits_the_fewest_devices_with_one_sample_per_sequence(catalog):
    """audit28c H2: the 3D U-Net (a layer list: 6.3 GB at most) was put on 23 H100 (the untimed candidates were
    ranked by headroom, with a RuntimeWarning), and training took the 4,096-token default context as 4,096 samples
    per sequence (202 TB of activations). It fits one GPU; its context is one sample; another context is refused."""
    import warnings

    from wseplan.errors import InputError
    from wseplan.fit import fit

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = fit("unet3d", "h100", catalog=catalog)
    assert r.fits and r.num_devices == 1 and r.context == 1
    t = fit("unet3d", "h100", phase="train", batch=8, catalog=catalog)
    assert t.fits and t.num_devices == 1 and t.context == 1
    g = catalog.generic_models["unet3d-128"]
    # by hand: the activations of 8 samples are 8 x the per-sample sum (every layer's output kept for backward)
    assert t.activation_bytes <= 8 * sum(ly.activation_bytes_per_sample for ly in g.layers) * 1.0001
    with pytest.raises(InputError, match="context: .* layer-list model"):
        fit("unet3d", "h100", context=4096, catalog=catalog)


@pytest.mark.parametrize("model,target,phase,batch,context", [
    ("gpt-3-175b", "cs3x4", "train", 64, 2048), ("gpt-3-175b", "wse3", "train", 8, 2048),
    ("llama-3.1-8b", "cs3x2", "train", 32, 4096), ("llama-3.1-70b", "cs3x4", "decode", 8, 8192),
    ("llama-3.1-70b", "h100x8", "decode", 64, 8192), ("llama-3.1-8b", "h100x8", "train", 64, 4096)])
def test_the_memory_terms_add_up_to_the_total(model, target, phase, batch, context):
    """audit29a H2: a streamed wafer's ``activation_bytes`` was one system's beside every system's weights (GPT-3 on four
    CS-3: 29 + 13.7 GB shown as a total of 83.8 GB). Every family's four terms sum to ``total_bytes``; a spilling
    wafer holds the checkpoints it keeps, so it is full (no headroom) and its activations bind."""
    from wseplan.plan import plan

    r = plan(model, target, phase=phase, batch=batch, context=context, require_fit=False)
    parts = r.weights_bytes + r.kv_cache_bytes + r.activation_bytes + r.optimizer_bytes
    assert parts == pytest.approx(r.total_bytes, rel=1e-9)
    stream = r.details.get("stream")
    if stream is not None and stream.get("spill_bytes", 0.0) > 0:
        assert r.per_device_bytes == pytest.approx(r.capacity_bytes, rel=1e-9)
        assert r.binding == "activations"
        assert r.activation_bytes == pytest.approx(stream["activation_bytes"] * r.num_devices, rel=1e-12)


def test_a_kv_cache_no_wafer_count_holds_names_batch_and_context():
    """audit29a L4: Llama-3-70B at 100,000 sequences of 100,000 tokens needs 41 TB on a wafer (one layer's KV cache
    alone); the misfit note gave no fix. It says no wafer count holds it and names the flags to lower."""
    from wseplan.plan import plan

    r = plan("llama-70b", "cs3", phase="decode", batch=100000, context=100000, require_fit=False)
    assert not r.fits and r.binding == "kv_cache"
    assert "no wafer count holds it" in r.notes[0] and "--batch or --context" in r.notes[0]
    # with a count too (review29b #4: it said the target without a count would find devices that fit)
    r = plan("llama-3.1-70b", "cs3x4", phase="decode", batch=4096, context=131072, require_fit=False)
    assert "no wafer count holds it" in r.notes[0] and "without a count" not in r.notes[0]
    # and not where more wafers do hold it
    r = plan("llama-3.1-70b", "cs3x2", phase="decode", batch=1, context=8192, require_fit=False)
    assert not r.fits and "no wafer count holds it" not in r.notes[0] and "without a count" in r.notes[0]


def test_training_memory_holds_the_losss_logits(catalog):
    """audit31a M2: GPU training memory left out the LM head's logits, which the last stage keeps for the loss's
    backward (Korthikanti et al. 2022 sec. 4.1: 4sbv bytes, fp32), so gpt-oss-20b (a 201,088-token vocabulary) on
    8 H200 took micro-batches of 8 x 4,096 tokens with 2.2 GB of headroom while their logits are 26 GB. By hand: at
    pp = 1 the one stage holds micro-batch x context x vocabulary x 4 B / tp more than without them; at pp = 2 the last
    stage holds one micro-batch's activations and the logits, and the fullest stage is never below it."""
    from wseplan.analytic.memory import gpu_layout_memory
    from wseplan.workload import build_workload

    m = catalog.models["gpt-oss-20b"]
    w = build_workload(m, catalog, phase="train", precision="bf16", batch=64, context=4096)
    per_elem = catalog.defaults.training_logits_bytes_per_element.si
    assert per_elem == 4.0
    kw = dict(dp=8, zero_stage=1, recompute=0, virtual_stages=1, batch=64, context=4096, gradient_bytes_per_param=4,
              adam_state_bytes_per_param=12, prefill_chunk_tokens=8192)
    for tp, mb in ((1, 8), (2, 4)):
        plain = gpu_layout_memory(w, tp=tp, pp=1, micro_batch=mb, **kw)
        held = gpu_layout_memory(w, tp=tp, pp=1, micro_batch=mb, logits_bytes_per_token=m.vocab_size * per_elem, **kw)
        logits = mb * 4096 * 201_088 * 4.0 / tp
        assert float(held["total"] - plain["total"]) == pytest.approx(logits, rel=1e-12)
        assert float(held["activations"] - plain["activations"]) == pytest.approx(logits, rel=1e-12)
    # pp = 2: the last stage holds one micro-batch's activations beside the logits; where it becomes the fullest the
    # total grows, by at most the logits (the first stage holds more micro-batches of activations and no logits)
    # (micro-batches of 2: the first stage's two in flight, 21.7 GB, outweigh the last's one and its 6.6 GB of logits;
    # of 8: the last stage's 26.4 GB of logits make it the fullest)
    for mb, grows in ((2, False), (8, True)):
        logits = mb * 4096 * 201_088 * 4.0
        plain = gpu_layout_memory(w, tp=1, pp=2, micro_batch=mb, **kw)
        two = gpu_layout_memory(w, tp=1, pp=2, micro_batch=mb, logits_bytes_per_token=m.vocab_size * per_elem, **kw)
        diff = float(two["total"] - plain["total"])
        assert (diff > 0.0) == grows and diff <= logits * (1 + 1e-12)
    # the searched layout now leaves room for them
    from wseplan.plan import plan

    r = plan("gpt-oss-20b", "h200x8", phase="train", batch=256, context=4096, catalog=catalog)
    lay = r.layout
    logits = lay["micro_batch"] * 4096 * 201_088 * 4.0 / (lay["tensor_parallel"] * lay.get("context_parallel", 1))
    assert r.fits and r.activation_bytes / r.num_devices >= logits  # (the record's activations: every device's)


def test_fit_answers_a_lora_question_as_time_does(capsys):
    """audit33e M2: `fit --trainable lora` (frozen base weights: no weight gradients or optimizer state for them) gives
    the plan's memory, as `time --trainable lora` plans it: Llama-3.1-70B on 8 H100 at 16 x 4,096 does not fit fully
    trained (Adam state alone 1.13 TB) and fits with LoRA; an inference fit refuses the option in one line."""
    import json

    from wseplan.cli import main
    from wseplan.fit import fit
    from wseplan.plan import plan

    full = fit("llama-3.1-70b", "h100x8", phase="train", batch=16, context=4096, trainable="full")
    lora = fit("llama-3.1-70b", "h100x8", phase="train", batch=16, context=4096, trainable="lora")
    p = plan("llama-3.1-70b", "h100x8", phase="train", batch=16, context=4096, options={"trainable": "lora"})
    assert not full.fits and full.optimizer_bytes > 1e12
    assert lora.fits and lora.optimizer_bytes == 0.0 and lora.total_bytes == p.total_bytes
    assert main(["fit", "llama-3.1-70b", "--target", "h100x8", "--phase", "train", "--batch", "16", "--context",
                 "4096", "--trainable", "lora", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
    assert main(["fit", "llama-3.1-70b", "--target", "h100x8", "--trainable", "lora"]) == 2
    err = capsys.readouterr().err
    assert "trainable" in err and err.count("\n") == 1
