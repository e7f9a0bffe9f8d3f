"""Layouts a user gives: tensor parallelism must divide the attention heads (every framework splits heads over TP
ranks), and a context-parallel run's completed layout uses the target's GPUs once."""
import pytest

from wseplan.errors import InputError
from wseplan.plan import plan


def test_tp_that_does_not_divide_the_heads_is_refused():
    # Llama-3-8B has 32 query heads: tp 64 would give half a head per GPU
    with pytest.raises(InputError, match="tp: 64 does not divide .*32 attention heads"):
        plan("llama-3-8b", "h100x64", phase="train", layout={"tp": 64, "pp": 1, "dp": 1})
    r = plan("llama-3-8b", "h100x64", phase="train", layout={"tp": 8, "pp": 1, "dp": 8})
    assert r.fits and r.layout["tensor_parallel"] == 8


def test_completed_layout_counts_context_parallel_once():
    # 64 GPUs, cp 2, tp 8 and pp 1 given: dp = 64 / (8 x 1 x 2) = 4 (it was 64 / 8 = 8, then refused as 128 GPUs)
    r = plan("llama-3-8b", "h100x64", phase="train", layout={"tp": 8, "pp": 1}, options={"context_parallel": 2})
    assert r.layout["data_parallel"] == 4 and r.num_devices == 64


def test_long_context_training_searches_context_parallelism(catalog):
    """GPU training searches context parallelism where each rank keeps >= 4,096 tokens of the sequence (second audit:
    `fit` refused Llama-3.1-405B at 131,072 tokens on 1,024 H100, which `--cp 8` fits, and Llama-3.1-70B ran 1.66x
    slower than with cp 16). Meta trained its 128K stage with context parallelism (Llama 3 paper, sec. 3.3.2)."""
    from wseplan.plan import plan

    big = dict(phase="train", batch=128, context=131072, catalog=catalog)
    searched = plan("llama-3.1-405b", "h100x1024", **big)
    assert searched.fits and searched.layout["context_parallel"] > 1
    assert not plan("llama-3.1-405b", "h100x1024", options={"context_parallel": 1}, **big).fits
    kw = dict(phase="train", batch=64, context=131072, catalog=catalog)
    s = plan("llama-3.1-70b", "h100x1024", **kw)
    for cp in (1, 16):
        given = plan("llama-3.1-70b", "h100x1024", options={"context_parallel": cp}, **kw)
        assert given.layout["context_parallel"] == cp and s.step_s <= given.step_s
    assert s.step_s < 0.75 * plan("llama-3.1-70b", "h100x1024", options={"context_parallel": 1}, **kw).step_s
    short = plan("gpt-3-175b", "h100x1024", phase="train", batch=1536, context=2048, catalog=catalog)
    assert short.layout["context_parallel"] == 1  # 2,048 tokens: no rank would keep 4,096
    assert plan("llama-3.1-70b", "h100x1024", layout={"cp": 8}, **kw).layout["context_parallel"] == 8  # a layout column


def test_training_with_a_count_may_leave_gpus_idle_when_fewer_are_faster():
    """Mixtral at 256 x 8,192 on 12,288 H100: every layout using all 12,288 splits the batch into too few micro-batches
    per replica (pp 12 x dp 64 x cp 2: 4 each), so 8,192 of them (tp 8, pp 16, dp 32, cp 2) train faster (second audit:
    12,288 GPUs took 1.494 days where 8,192 took 1.336). The target is still all 12,288: priced on them, with a note."""
    from wseplan.costing import cost
    from wseplan.timing import predict_time

    kw = dict(phase="train", batch=256, context=8192)
    big, small = predict_time("mixtral", "h100x12288", **kw), predict_time("mixtral", "h100x8192", **kw)
    assert big.step_s <= small.step_s
    lay = big.layout
    used = lay["tensor_parallel"] * lay["pipeline_parallel"] * lay["data_parallel"] * lay["context_parallel"]
    assert used < 12288 and big.num_devices == 12288
    assert any(f"{12288 - used:,} of 12,288 GPUs left idle" in n for n in big.notes)
    ls = small.layout  # (with expert parallelism 4,096 of 8,192 train fastest too: the note says so exactly then)
    used_s = ls["tensor_parallel"] * ls["pipeline_parallel"] * ls["data_parallel"] * ls["context_parallel"]
    assert any("idle" in n for n in small.notes) == (used_s < 8192)
    # a layout that uses every GPU is slower: the forced full-width one
    full = predict_time("mixtral", "h100x12288", layout={"tp": 8, "pp": 12, "dp": 64, "cp": 2}, **kw)
    assert full.step_s > big.step_s
    # priced on the whole target: 1.5x the GPUs for the same step; interrupted as often as the GPUs it trains on
    # (audit31a H1: idle GPUs do not stop the job), so the run's goodput is the 8,192 GPUs' alone
    cb, cs = cost("mixtral", "h100x12288", **kw), cost("mixtral", "h100x8192", **kw)
    assert cb.times.goodput_frac == cs.times.goodput_frac
    assert cb.metric("usd_per_run") == pytest.approx(cs.metric("usd_per_run") * 1.5 * big.step_s / small.step_s,
                                                     rel=1e-9)


def test_a_given_layout_runs_whole_sequences_per_replica():
    """1,536 sequences on 1,024 data-parallel replicas: half the replicas hold 2 and the step waits for them, so the
    step is that of 2 micro-batches (2,048 sequences), not 1.5 (second audit: 0.419 s, 10% under the 0.4615 s of
    batch 2,048, reported as 2 micro-batches)."""
    from wseplan.timing import predict_time

    kw = dict(phase="train", context=2048, layout={"tp": 1, "pp": 1, "dp": 1024, "micro_batch": 1})
    r15, r20, r10 = (predict_time("llama-3.1-8b", "h100x1024", batch=b, **kw) for b in (1536, 2048, 1024))
    assert r15.layout["num_microbatches"] == r20.layout["num_microbatches"] == 2
    assert r15.step_s == pytest.approx(r20.step_s, rel=0.01)
    assert r15.step_s > 1.2 * r10.step_s
    # micro-batches of 2 over 3 sequences per replica: 2 micro-batches, the second short
    r3 = predict_time("llama-3.1-8b", "h100x1024", phase="train", context=2048, batch=3072,
                      layout={"tp": 1, "pp": 1, "dp": 1024, "micro_batch": 2})
    assert r3.layout["num_microbatches"] == 2


def test_too_small_a_batch_for_the_replicas_is_named_not_memory():
    """1,000 sequences on 1,024 data-parallel replicas of one GPU (audit26 F5): memory holds a replica's micro-batch,
    but a replica would get none; the note names the batch and the fix, not a memory shortfall."""
    r = plan("llama-3-8b", "h100x1024", phase="train", batch=1000, context=4096, layout={"tp": 1, "pp": 1})
    assert not r.fits and r.step_s is None
    note = r.notes[0]
    assert "1,024 data-parallel replicas x micro-batch 1" in note and "--batch 1,024 or more" in note
    assert "binds" not in note
    # the same layout with enough sequences fits and is timed
    ok = plan("llama-3-8b", "h100x1024", phase="train", batch=1024, context=4096, layout={"tp": 1, "pp": 1})
    assert ok.fits and ok.step_s > 0


def test_the_search_pairs_sharded_gradients_with_no_pipeline():
    """ZeRO-2/3 shard the gradients a pipeline's micro-batches accumulate (DeepSpeed refuses the pair, Megatron-LM has
    no ZeRO-2): a searched layout with pipeline stages keeps ZeRO-0/1 (audit26 F3); a ZeRO stage the user gives is
    held (Meta's Llama 3 405B ran ZeRO-2-like sharding with pp 16)."""
    for target in ("h100x256", "a100x1536"):
        r = plan("gpt-3-175b", target, phase="train", batch=1536, context=2048)
        assert r.fits
        assert r.layout["pipeline_parallel"] == 1 or r.layout["zero_stage"] <= 1, r.layout
    given = plan("gpt-3-175b", "h100x256", phase="train", batch=1536, context=2048,
                 layout={"tp": 8, "pp": 4, "zero_stage": 2})
    assert given.layout["zero_stage"] == 2 and given.layout["pipeline_parallel"] == 4


def test_16_bit_training_keeps_fp32_gradients():
    """Megatron-LM's bytes per parameter for bf16 parameters with fp32 gradients and its distributed optimizer:
    6 + 12/d (README, 'Distributed Optimizer'); with d = 8 and no activations the optimizer-side bytes per GPU are
    (4 + 12/8) x parameters / (tp x pp) beside 2 x parameters / (tp x pp) of weights."""
    from wseplan.catalog.load import load_catalog

    cat = load_catalog()
    assert cat.defaults.gradient_bytes_per_param.si == 4.0
    r = plan("llama-3-8b", "h100x8", phase="train", batch=8, context=128,
             layout={"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "zero_stage": 1})
    per_gpu_opt = r.optimizer_bytes / 8
    per_gpu_w = r.weights_bytes / 8
    assert per_gpu_opt == pytest.approx(per_gpu_w / 2.0 * (4.0 + 12.0 / 8), rel=1e-6)


def test_virtual_stages_need_a_layer_each_and_a_pipeline():
    """A given interleaved layout with more virtual stages than layers (pp 16 x vpp 8 = 128 > Llama-3.1-405B's 126),
    or with one pipeline stage, is refused as the search never proposes it (audit 23 F4: it was timed, faster than
    any feasible layout); pp 16 x vpp 7 = 112 <= 126 runs, and with pipeline_split even the 80 layers of a 70B model
    must divide pp x vpp (8 x 5 = 40 does, 8 x 3 = 24 does not)."""
    lay = {"tp": 8, "pp": 16, "dp": 128, "micro_batch": 1, "recompute": "full"}
    kw = dict(phase="train", batch=2048, context=8192)
    with pytest.raises(InputError, match="vpp: pp 16 x vpp 8 = 128 virtual stages .*126 layers"):
        plan("llama-3.1-405b", "h100x16384", layout={**lay, "vpp": 8}, **kw)
    assert plan("llama-3.1-405b", "h100x16384", layout={**lay, "vpp": 7}, **kw).layout["virtual_pipeline"] == 7
    with pytest.raises(InputError, match="vpp: 2 virtual stages need a pipeline"):
        plan("llama-3-8b", "h100x8", phase="train", batch=64, context=2048, layout={"tp": 8, "pp": 1, "dp": 1, "vpp": 2})
    # audit27 H4: a vpp given without a pp was completed to pp 1 and timed (54 s a step on 32 layers)
    with pytest.raises(InputError, match="vpp: 100 virtual stages need a pipeline"):
        plan("llama-3-8b", "h100x8", phase="train", batch=64, context=2048, layout={"vpp": 100})
    even = dict(phase="train", batch=64, context=4096, options={"pipeline_split": "even"})
    with pytest.raises(InputError, match="must divide pp x vpp"):
        plan("llama-3.1-70b", "h100x64", layout={"tp": 8, "pp": 8, "dp": 1, "vpp": 3}, **even)
    assert plan("llama-3.1-70b", "h100x64", layout={"tp": 8, "pp": 8, "dp": 1, "vpp": 5}, **even).layout["virtual_pipeline"] == 5


def test_cli_time_takes_lora(capsys):
    """`time --trainable lora` reaches the LoRA step the Python API and validation use (audit 23 F10: the CLI had no
    way to ask): the base weights get no gradients or optimizer step, so the same layout's step is shorter and equal
    to the API's; an unknown kind and a wafer target are refused with exit 2."""
    import json

    from wseplan.cli import main
    from wseplan.timing import predict_time

    args = ["time", "llama-2-70b", "--target", "h100x64", "--phase", "train", "--batch", "8", "--context", "8192",
            "--tp", "4", "--pp", "1", "--dp", "8", "--cp", "2", "-f", "json"]
    assert main([*args, "--trainable", "lora"]) == 0
    lora = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    full = json.loads(capsys.readouterr().out)
    api = predict_time("llama-2-70b", "h100x64", phase="train", batch=8, context=8192, tensor_parallel=4,
                       pipeline_parallel=1, data_parallel=8, context_parallel=2, trainable="lora")
    assert api.fits and lora["step_s"] == pytest.approx(api.step_s, rel=1e-12) and lora["step_s"] < full["step_s"]
    assert main([*args, "--trainable", "qlora"]) == 2
    assert "trainable: 'qlora'" in capsys.readouterr().err
    assert main(["time", "llama-3-8b", "--target", "cs3", "--phase", "train", "--trainable", "lora"]) == 2


def test_lora_keeps_no_optimizer_state_for_the_frozen_base():
    """LoRA freezes the base weights (Hu et al. 2021): no gradients, master copies or Adam moments for them, so the
    fit counts the same weights and no optimizer state (14 of the 108 measured training runs the memory model refused
    were MLPerf's Llama 2 70B LoRA runs, refused for the full model's optimizer state)."""
    kw = dict(phase="train", batch=8, context=4096, precision="bf16",
              layout={"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1, "recompute": "full", "zero_stage": 1})
    full = plan("llama-2-70b", "h100x8", **kw)
    lora = plan("llama-2-70b", "h100x8", options={"trainable": "lora"}, **kw)
    assert lora.optimizer_bytes == 0 < full.optimizer_bytes
    assert lora.weights_bytes == full.weights_bytes
    assert lora.fits and not full.fits  # 70B x 16 B of training state on 8 x 80 GB does not fit; frozen it does


def test_lora_on_attention_keeps_no_inputs_of_the_frozen_mlp():
    """A frozen linear layer keeps no input (only its weight gradient needs it), so attention-only adapters (MLPerf's
    Llama 2 70B LoRA reference: qkv_proj, o_proj) keep d_model + d_ff fewer elements per block and token.
    Hand count, Llama 2 70B (h 8,192, 64 heads of 128, 8 KV heads, gated MLP of 28,672), 16-bit activations, flash:
    attention h + h + (q + 2 kv) + q = 8,192 + 8,192 + 10,240 + 8,192 = 34,816; MLP h + h + 3 ff = 102,400; frozen MLP
    drops h + ff = 36,864: 100,352 / 137,216 of the activations. Adapters on every layer keep them all."""
    kw = dict(phase="train", batch=8, context=8192, precision="bf16", options=None)
    lay = {"tp": 4, "pp": 1, "dp": 1, "cp": 2, "micro_batch": 1, "vpp": 1, "zero_stage": 1}
    got = {}
    for rc in ("none", "full"):
        for tr in ("full", "lora", "lora-all"):
            r = plan("llama-2-70b", "h100x8", layout=dict(lay, recompute=rc), **dict(kw, options={"trainable": tr}))
            got[rc, tr] = r.activation_bytes
    # beside the loss's logits, the same for all (1 x 8,192 tokens x 32,000 x 4 B over tp x cp = 8, on 8 GPUs)
    logits = 8192 * 32_000 * 4.0
    assert (got["none", "lora"] - logits) / (got["none", "lora-all"] - logits) == pytest.approx(100_352 / 137_216,
                                                                                               rel=1e-12)
    assert got["none", "lora-all"] == pytest.approx(got["none", "full"], rel=1e-12)
    # full recompute keeps block inputs; only the one block being recomputed holds its activations, so the two differ
    # by one block's frozen bytes: 36,864 x 2 B x 8,192 tokens / (tp 4 x cp 2) per GPU, on 8 GPUs
    assert got["full", "lora-all"] - got["full", "lora"] == pytest.approx(36_864 * 2 * 8192 / 8 * 8, rel=1e-9)
    a = plan("llama-2-70b", "h100x8", layout=dict(lay, recompute="none"), **dict(kw, options={"trainable": "lora"}))
    b = plan("llama-2-70b", "h100x8", layout=dict(lay, recompute="none"), **dict(kw, options={"trainable": "lora-all"}))
    assert a.step_s == pytest.approx(b.step_s, rel=1e-12)  # the adapters' own GEMMs are not counted either way


def test_fp8_lora_stores_the_frozen_base_in_fp8():
    """NeMo's fp8_params (on with FP8 in NVIDIA's MLPerf Llama 2 70B LoRA configuration) keeps the frozen weights in
    fp8: half the 16-bit training copy; bf16 LoRA and full fp8 training keep 16-bit weights. NVIDIA's B200 run
    (1 x 8 GPUs, tp 1, cp 2, recompute none) needs it to fit: 70B x 1 B = 69 GB per GPU beside the activations."""
    lay = {"tp": 1, "pp": 1, "dp": 4, "cp": 2, "micro_batch": 1, "vpp": 1, "zero_stage": 1, "recompute": "none"}
    kw = dict(phase="train", batch=8, context=8192, layout=lay)
    fp8 = plan("llama-2-70b", "b200x8", precision="fp8", options={"trainable": "lora"}, **kw)
    bf16 = plan("llama-2-70b", "b200x8", precision="bf16", options={"trainable": "lora"}, **kw)
    full = plan("llama-2-70b", "b200x8", precision="fp8", **kw)
    assert fp8.weights_bytes == pytest.approx(bf16.weights_bytes / 2, rel=1e-12)
    assert full.weights_bytes == pytest.approx(bf16.weights_bytes, rel=1e-12)
    assert fp8.activation_bytes == pytest.approx(bf16.activation_bytes, rel=1e-12)
    assert fp8.fits and not bf16.fits


def test_lora_under_zero3_gathers_its_frozen_weights():
    """ZeRO-3 shards the frozen base (that is how LoRA fits), so each micro-batch all-gathers it for the forward and
    again for the backward: 2 of the 3 moves of full training (no gradients to reduce-scatter; audit24 F1): 2 x 2 B
    of 16-bit weights against full training's 2 x 2 B + 4 B of fp32 gradients, one half."""
    from wseplan.analytic import gpu_time as G
    from wseplan.calibration_data import gpu_calibration
    from wseplan.catalog import load_catalog
    from wseplan.workload import resolve_model

    cat = load_catalog()
    m, gpu = resolve_model("llama-2-70b", cat), cat.gpus["h100-sxm"]
    kw = dict(precision="bf16", seq_len=4096, global_batch=128, tp=1, pp=1, dp=64, micro_batch=1, recompute="full",
              zero_stage=3, cal=gpu_calibration())
    full = G.train_step(m, gpu, trainable="full", **kw)
    lora = G.train_step(m, gpu, trainable="lora", **kw)
    assert float(lora["dp_comm_s"]) == pytest.approx(0.5 * float(full["dp_comm_s"]), rel=1e-3)  # latency steps aside
    assert float(lora["dp_exposed_s"]) > 0.0
    # an fp8 run stores the frozen base in fp8: half the bytes gathered (the ring's latency terms stay)
    fp8 = G.train_step(m, gpu, trainable="lora", frozen_weight_frac=0.5, **kw)
    assert 0.5 * float(lora["dp_comm_s"]) < float(fp8["dp_comm_s"]) < float(lora["dp_comm_s"])


def test_lora_model_flops_skip_the_frozen_weight_gradients():
    """LoRA's model FLOPs: the frozen matmuls twice their forward (forward, input gradients), the attention three
    times. Hand count, Llama 2 70B: matmul weights per layer 2 x 8,192^2 + 2 x 8,192 x 1,024 + 3 x 8,192 x 28,672 =
    855,638,016, x 80 layers + the 32,000 x 8,192 head = 68,713,185,280; one pass of them is 2 FLOP each."""
    from wseplan.analytic import gpu_time as G
    from wseplan.catalog import load_catalog
    from wseplan.workload import resolve_model

    m = resolve_model("llama-2-70b", load_catalog())
    full = G.model_flop_per_token(m, seq_len=4096)
    lora = G.model_flop_per_token(m, seq_len=4096, trainable="lora")
    assert full - lora == pytest.approx(2.0 * 68_713_185_280, rel=1e-12)


@pytest.mark.parametrize("opt", [["--trainable", "lora"], ["--pipeline-split", "even"]])
def test_training_options_are_refused_outside_training(opt, capsys):
    """audit24 F9: a training-only option given for decode changed nothing and said nothing; it is refused in one
    line naming the option by its flag (exit 2; review37 M4: the family's refusal named its internal option name)."""
    from wseplan.cli import main

    rc = main(["time", "llama-70b", "--target", "h100x8", "--phase", "decode", "--batch", "4", "--context", "2048", *opt])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"{opt[0]}: training options; give --phase train" in err


@pytest.mark.parametrize("layout,match", [({"tp": 3, "pp": 1, "dp": 8}, "tp: 3 does not divide"),
                                          ({"tp": 8, "pp": 2, "dp": 8}, "needs more GPUs than the target's 8"),
                                          ({"tp": 8, "pp": 1, "dp": 2}, "needs more GPUs than the target's 8"),
                                          ({"foo": 1}, "layout: foo not a layout of the gpu family")])
def test_serve_refuses_a_layout_time_refuses(layout, match):
    """audit27 H1: serve (and the server study on it) took any given layout into its configurations: 24 or 128 GPUs'
    worth of engines on an 8-GPU target, a tp that does not divide the heads, unknown keys dropped. It checks a given
    layout as plan() does."""
    from wseplan.serving import serve

    with pytest.raises(InputError, match=match):
        serve("llama-2-70b", "h200-sxmx8", precision="fp8", layout=layout, concurrency=64, prices=False)
    with pytest.raises(InputError, match=match):
        plan("llama-2-70b", "h200-sxmx8", phase="serve", precision="fp8", batch=64, layout=layout)
    ok = serve("llama-2-70b", "h200-sxmx8", precision="fp8", layout={"tp": 8}, concurrency=64, prices=False)
    assert ok.chosen.num_devices == 8


def test_fit_takes_the_answer_length_of_a_serving_question(capsys):
    """audit27 (open question): `fit --phase serve` reserved 256 answer tokens of KV cache with no way to change it
    and no field saying so. --output-tokens sets it, as time and serve take it, and the record states it."""
    import json

    from wseplan.cli import main

    assert main(["fit", "llama-70b", "--target", "cs3x4", "--phase", "serve", "--batch", "24", "-f", "json"]) == 0
    short = json.loads(capsys.readouterr().out)
    assert main(["fit", "llama-70b", "--target", "cs3x4", "--phase", "serve", "--batch", "24", "--output-tokens",
                 "4096", "-f", "json"]) == 0
    long = json.loads(capsys.readouterr().out)
    assert short["output_tokens"] == 256 and long["output_tokens"] == 4096 and long["sources"]["output_tokens"] == "given"
    assert long["kv_cache_bytes"] > short["kv_cache_bytes"]
    assert plan("llama-70b", "cs3x4", phase="serve", batch=24, output_tokens=4096).fits == long["fits"]


def test_a_given_layout_may_leave_gpus_idle_as_the_search_does():
    """review27 #1: the count check refused layouts the search itself picks and the docs describe (TP8 x PP3 of
    Llama-3.1-405B on 28 H100 leaves 4 idle); only a layout needing more GPUs than the count is refused."""
    searched = plan("llama-3.1-405b", "h100x28", phase="decode", batch=64)
    lay = searched.layout
    given = plan("llama-3.1-405b", "h100x28", phase="decode", batch=64,
                 layout={"tp": lay["tensor_parallel"], "pp": lay["pipeline_parallel"], "dp": lay["data_parallel"]})
    assert lay["tensor_parallel"] * lay["pipeline_parallel"] * lay["data_parallel"] < 28
    assert given.fits and given.step_s == pytest.approx(searched.step_s, rel=1e-12)


def test_a_given_micro_batch_outside_the_searched_values_is_searched_around(catalog):
    """audit28a H2: a micro-batch of 3 (outside 1, 2, 4 ... 32) matched no searched layout and fell back to the
    default completion (all 8 GPUs in tensor parallelism for an 8B model, 22% slower) labelled 'partly searched'.
    It is now searched with the rest free: the layout found (TP2 DP4 since the loss's logits are counted: TP1 needs
    ZeRO-3 and partial recompute to hold them) is no slower than other layouts with micro-batch 3."""
    from wseplan.timing import predict_time

    kw = dict(phase="train", batch=48, context=4096, catalog=catalog)
    r3 = predict_time("llama-3-8b", "h100x8", micro_batch=3, **kw)
    assert r3.layout["micro_batch"] == 3 and r3.layout["tensor_parallel"] < 8
    assert r3.layout["tensor_parallel"] * r3.layout["data_parallel"] == 8
    # every other layout with micro-batch 3 is no faster (the search held the given value)
    for tp, dp in ((1, 8), (2, 4), (8, 1)):
        other = predict_time("llama-3-8b", "h100x8", micro_batch=3, tensor_parallel=tp, data_parallel=dp, **kw)
        assert other.step_s >= r3.step_s
    # GPT-3 on 512 H100 with micro-batch 3: searched (TP8 PP8 DP8 fits) rather than refused over a tp never given
    g = predict_time("gpt-3-175b", "h100x512", phase="train", batch=1536, context=2048, micro_batch=3, catalog=catalog)
    assert g.layout["micro_batch"] == 3 and g.layout["tensor_parallel"] <= 8


def test_a_given_context_parallel_degree_is_searched_around(catalog):
    """audit28a H2: `--cp 2` on GPT-3 at 2,048 tokens (below the searched context-parallel threshold) fell back to the
    default completion and was refused with 'tp: 256 does not divide ... heads', a tp never given; a degree that does
    not divide the count names --cp."""
    from wseplan.errors import InputError
    from wseplan.timing import predict_time

    r = predict_time("gpt-3-175b", "h100x512", phase="train", batch=1536, context=2048, context_parallel=2,
                     catalog=catalog)
    assert r.layout["context_parallel"] == 2 and 96 % r.layout["tensor_parallel"] == 0
    with pytest.raises(InputError, match="context_parallel: 3 does not divide"):
        predict_time("gpt-3-175b", "h100x512", phase="train", batch=1536, context=2048, context_parallel=3,
                     catalog=catalog)


def test_the_smaller_counts_of_an_awkward_target_keep_every_context_parallel_degree():
    """review28 #1: the given-cp parameter shared its name with the grid's loop variable, so after the first GPU count
    of an awkward target (40 GPUs: 40, 32, 24) the smaller counts were searched only at the cp the loop left behind
    (24 GPUs lost cp 1; the grid of Llama-3-8B on 40 H100 fell from 36,000 to 26,800 rows)."""
    import numpy as np

    from wseplan.devices.gpu_train import layout_grid
    from wseplan.plan import setup

    s = setup("llama-3-8b", "h100x40", phase="train")
    g = layout_grid(s.ctx, 64.0, 8192.0)
    used = g["tp"] * g["pp"] * g["dp"] * g["cp"]
    for n in (40, 32, 24):
        assert 1.0 in set(g["cp"][used == n]), n
    assert len(g["tp"]) == 36000
    assert np.array_equal(np.unique(g["cp"][used == 24]), [1.0, 2.0])


def test_a_given_layout_that_leaves_gpus_idle_is_not_called_faster(catalog):
    """audit32a F6: a given TP8 x DP4 on 64 H100 said "32 train faster than any layout using all of them", while the
    same layout at DP8 (all 64) runs twice as fast. A given layout is the user's, not the search's choice: the note
    says it uses 32 of the 64 (all priced)."""
    from wseplan.timing import predict_time

    kw = dict(phase="train", batch=512, context=4096, catalog=catalog)
    half = predict_time("mixtral-8x7b", "h100x64", layout={"tp": 8, "pp": 1, "dp": 4}, **kw)
    full = predict_time("mixtral-8x7b", "h100x64", layout={"tp": 8, "pp": 1, "dp": 8}, **kw)
    assert full.step_s < half.step_s
    assert any("the given layout uses 32 of them" in n for n in half.notes)
    assert not any("faster than any layout" in n for n in half.notes)


def test_a_searched_prefill_says_it_runs_on_the_serving_replica(catalog):
    """audit32a F5: an in-flight engine's prefill takes the layout serve chooses for whole requests (by design), which
    `time --phase prefill` reported as "searched" only: Qwen3-235B fp8 on 8 H200 at batch 8 ran TP8 in 1.20 s where
    TP2 x PP4 takes 0.89 s. The record says whose layout it is; a given layout has no such note."""
    from wseplan.timing import predict_time

    kw = dict(phase="prefill", precision="fp8", batch=8, context=8192, catalog=catalog)
    got = predict_time("qwen3-235b-a22b", "h200x8", **kw)
    given = predict_time("qwen3-235b-a22b", "h200x8", layout={"tp": 2, "pp": 4}, **kw)
    assert given.step_s < got.step_s
    assert any(n.startswith("layout: the serving replica's") for n in got.notes)
    assert not any(n.startswith("layout: the serving replica's") for n in given.notes)
