"""Coverage: rows with empty inputs are predicted from documented defaults and say so (issue 12, item 4)."""
from __future__ import annotations

import pytest

from wseplan.catalog import load_catalog
from wseplan.validate import Case, SkipRow, validate_cases
from wseplan.validate.defaults import fill_defaults


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _case(cid="X1", **f):
    base = dict(category="gpu-infer", phase="decode", model="llama-3-70b", metric="tokens_per_s_per_user", value=30.0,
                unit="tok/s/user", hardware="h100-sxm", quality="medium")
    top = {k: f.pop(k) for k in list(f) if k in base}
    base.update(top)
    return Case(id=cid, category=base["category"], phase=base["phase"], model=base["model"], metric=base["metric"],
                value=base["value"], unit=base["unit"], hardware=base["hardware"], quality=base["quality"], fields=f,
                source="test", notes="")


def test_training_batch_defaults_to_the_planner_step_and_one_sequence_per_node(cat):
    """defaults.yaml: 1,024 x 4,096 = 4,194,304 tokens per step. seq 2,048 -> 2,048 sequences; on 16,384 GPUs with
    8-GPU tensor parallelism at least 16,384 / 8 = 2,048 sequences; seq 8,192 on 16,384 GPUs -> max(512, 2,048)."""
    c, filled = fill_defaults(_case(phase="train", category="gpu-train", metric="mfu", seq_len=2048, n_devices=64), cat)
    assert c.get("global_batch") == 2048 and filled == ("global_batch",)
    c, _ = fill_defaults(_case(phase="train", category="gpu-train", metric="mfu", seq_len=8192, n_devices=16384), cat)
    assert c.get("global_batch") == 2048
    c, filled = fill_defaults(_case(phase="train", category="gpu-train", metric="gpu_hours"), cat)
    assert (c.get("seq_len"), c.get("global_batch"), c.get("n_devices")) == (4096, 1024, 1024)
    assert filled == ("seq_len", "global_batch", "n_devices")


def test_decode_rows_take_the_default_context(cat):
    c, filled = fill_defaults(_case(n_devices=8, tp=8, concurrency=1), cat)
    assert c.get("input_len") == int(cat.defaults.default_context_tokens.si) and filled == ("input_len",)


def test_prefill_and_e2e_rows_take_the_public_per_user_benchmark_workload(cat):
    # Artificial Analysis' default workload: ~1,000 prompt tokens and ~1,000 answer tokens
    c, filled = fill_defaults(_case(phase="e2e-infer", metric="tokens_per_s", output_len=292, n_devices=8, tp=2), cat)
    # one prompt at a time, as the benchmark sends them
    assert (c.get("input_len"), c.get("output_len"), c.get("concurrency")) == (1000, 292, 1)
    assert filled == ("input_len", "concurrency")
    c, filled = fill_defaults(_case(phase="prefill", metric="ttft_ms", n_devices=8, tp=8, concurrency=4), cat)
    assert (c.get("input_len"), c.get("output_len"), c.get("concurrency")) == (1000, 1000, 4)
    assert filled == ("input_len", "output_len")


def test_without_a_default_workload_prefill_rows_are_not_defined(cat, tmp_path, monkeypatch):
    from wseplan.validate import defaults as D
    monkeypatch.setattr(D, "default_workload", lambda: None)
    with pytest.raises(SkipRow, match="prompt length"):
        fill_defaults(_case(phase="e2e-infer", metric="tokens_per_s", output_len=292, n_devices=8, tp=2), cat)


def test_two_default_workloads_are_refused(tmp_path):
    from wseplan.errors import CatalogError
    from wseplan.validate.defaults import read_datasets
    entry = ("  {n}:\n    match: []\n    default_workload: true\n    mean_input_tokens: {{value: 100}}\n"
             "    mean_output_tokens: {{value: 100}}\n")
    p = tmp_path / "d.yaml"
    p.write_text("datasets:\n" + entry.format(n="a") + entry.format(n="b"))
    with pytest.raises(CatalogError, match="default_workload"):
        read_datasets(str(p))
    p.write_text("datasets:\n  a:\n    match: []\n    mean_input_tokens: {value: 100}\n    mean_output_tokens: {value: 1}\n")
    with pytest.raises(CatalogError, match="non-empty"):
        read_datasets(str(p))


def test_tensor_parallel_from_device_count_and_node_size(cat):
    """16 H100 (8 per node), no layout: TP 8 inside the node, 2 replicas. No device count: the smallest power of two
    whose 80 GB x 0.9 holds the weights: Llama-3-70B in bf16 is 141 GB -> 2 GPUs hold 144 GB."""
    c, filled = fill_defaults(_case(n_devices=16, input_len=1024, concurrency=1), cat)
    assert (c.get("tp"), c.get("dp")) == (8, 2) and filled == ("tp",)
    c, filled = fill_defaults(_case(input_len=1024, concurrency=1), cat)
    assert (c.get("tp"), c.get("n_devices")) == (2, 2) and set(filled) == {"tp", "n_devices"}


def test_a_complete_row_is_not_defaulted(cat):
    c0 = _case(n_devices=8, tp=8, input_len=128, concurrency=1)
    c, filled = fill_defaults(c0, cat)
    assert c is c0 and filled == ()


def test_records_name_the_defaulted_fields(cat):
    recs = validate_cases([_case(n_devices=8, tp=8, concurrency=1),
                           _case("X2", phase="e2e-infer", metric="tokens_per_s", output_len=292, n_devices=8, tp=2)], cat)
    assert recs[0]["defaulted"] == ["input_len"] and recs[0]["predicted"] is not None
    assert recs[1]["defaulted"] == ["input_len", "concurrency"] and recs[1]["predicted"] is not None


# ---------------------------------------------------------------------------------------------
# Empty parallel degrees, device counts and answer lengths; model names without architecture columns
# ---------------------------------------------------------------------------------------------
from wseplan.validate.cases import _catalog_named, _name_candidates, case_model  # noqa: E402
from wseplan.validate.gpu import train_degrees  # noqa: E402


@pytest.mark.parametrize("given, n, cp, expect", [
    ((8, 16, 64), 8192, 1, (8, 16, 64)),  # all stated: kept
    ((None, 1, 32), 64, 1, (2, 1, 32)),  # one empty: 64 / (1 x 32) = 2
    ((8, None, 24), 1536, 1, (8, 8, 24)),  # 1,536 / (8 x 24) = 8
    ((4, 1, None), 64, 2, (4, 1, 8)),  # 64 / (4 x 1 x cp 2) = 8
    ((8, None, None), 8, 1, (8, 1, 1)),  # the stated tp already uses every GPU: the rest are 1
    ((8, None, None), 64, 1, (8, None, None)),  # two empty with GPUs left: searched, never read as 1
    ((None, None, None), 64, 1, (None, None, None)),
])
def test_train_degrees_follow_the_device_count(given, n, cp, expect):
    assert train_degrees(*given, n=n, cp=cp) == expect


def test_train_degrees_refuse_a_count_they_do_not_divide():
    with pytest.raises(SkipRow, match="do not divide"):
        train_degrees(8, 3, None, n=64)


def test_training_device_count_defaults_to_the_stated_layout(cat):
    # tp 8 x pp 4 x dp 16 x cp 2 = 1,024 GPUs, whatever the batch
    c, filled = fill_defaults(_case(phase="train", category="gpu-train", metric="mfu", seq_len=4096, global_batch=512,
                                    tp=8, pp=4, dp=16, cp=2), cat)
    assert c.get("n_devices") == 1024 and filled == ("n_devices",)
    # tp 8 only: one GPU per sequence (510) in whole groups of 8: 510 / 8 = 63.75 -> 64 groups, 512 GPUs
    c, _ = fill_defaults(_case(phase="train", category="gpu-train", metric="mfu", seq_len=4096, global_batch=510, tp=8),
                         cat)
    assert c.get("n_devices") == 512


def test_an_end_to_end_row_without_answer_length_takes_the_planner_default(cat):
    c, filled = fill_defaults(_case(phase="e2e-infer", metric="tokens_per_s", input_len=2048, n_devices=8, tp=8), cat)
    assert c.get("output_len") == int(cat.defaults.default_output_tokens.si) == 256 and filled == ("output_len",)


def test_rows_with_empty_degrees_are_predicted(cat):
    # the GPT-3.6B weak-scaling point (Narayanan et al. 2021): 64 GPUs, tp 2 x dp 32; with tp left empty the count
    # gives it back, and the prediction is the one of the stated layout
    kw = dict(category="gpu-train", phase="train", model="gpt", metric="tflops_per_gpu", value=100.0, unit="TFLOP/s",
              hardware="a100-80gb", n_layers=30, d_model=3072, n_heads=32, seq_len=2048, global_batch=512,
              n_devices=64, pp=1, dp=32, precision="bf16")
    full = validate_cases([_case("A", tp=2, **kw)], cat)[0]
    empty = validate_cases([_case("B", **kw)], cat)[0]
    assert full["predicted"] is not None and empty["predicted"] == full["predicted"]


def test_model_names_resolve_without_architecture_columns(cat):
    assert "llama-2-70b" in _name_candidates("Llama 2 70B LoRA fine-tune (MLPerf llama2_70b_lora)")
    c = _case(model="Llama 2 70B LoRA fine-tune (MLPerf llama2_70b_lora)", n_params_b=70)
    assert _catalog_named(c, cat) is cat.models["llama-2-70b"]
    # a size that disagrees (beyond 15%) is another model: no match
    assert _catalog_named(_case(model="Llama 2 70B chat", n_params_b=13), cat) is None
    # columns that disagree with the catalog (MLPerf's 405B benchmark swaps the tokenizer: vocab 32,768) keep the
    # row's columns and take the rest (126 layers) from the model the name means
    c = _case(model="Llama 3.1 405B (MLPerf llama31_405b pretraining)", n_params_b=405, d_model=16384, n_heads=128,
              n_kv_heads=8, d_ff=53248, vocab=32768)
    m = case_model(c, cat)
    assert (m.num_layers, m.vocab_size, m.d_model) == (126, 32768, 16384)
    # no columns at all: the catalog model itself ("Llama 3 405B" is the herd paper's name of Llama 3.1 405B)
    assert case_model(_case(model="Llama 3 405B", n_params_b=405), cat) is cat.models["llama-3.1-405b"]


def test_a_row_the_models_cannot_take_is_recorded_not_fatal(cat):
    # a prefill row cannot give a per-user output speed: skipped with its reason, the run goes on
    bad = _case("P1", category="wse-infer", phase="prefill", hardware="wse2", metric="tokens_per_s_per_user",
                model="llama-3-8b", input_len=1024, n_devices=1)
    # a GEMV kernel in a format the GPU has no rate for (the catalog raises ValueError): recorded as a model error
    gemv = Case(id="K1", category="micro", phase="kernel", model="GEMV [1,16K]x[16K,16K]", metric="latency_ms",
                value=0.3, unit="ms", hardware="mi325x", quality="strong", fields={"precision": "fp32", "n_devices": 1,
                                                                                  "tp": 1}, source="test", notes="")
    good = _case("G1", n_devices=8, tp=8, concurrency=1, input_len=2048)
    recs = {r["id"]: r for r in validate_cases([bad, gemv, good], cat)}
    assert recs["P1"]["predicted"] is None and "needs a decode or end-to-end row" in recs["P1"]["reason"]
    assert recs["K1"]["predicted"] is None and recs["K1"]["reason"].startswith("model error: ValueError")
    assert recs["G1"]["predicted"] and recs["G1"]["predicted"] > 0


def test_perturbed_public_rows_never_stop_a_validation_run(cat):
    """Seeded robustness check: public rows with one to three inputs emptied or changed (and some on other hardware)
    are each predicted or skipped with a reason; no exception leaves :func:`validate_cases`."""
    import dataclasses
    import random
    from pathlib import Path

    from wseplan.validate.cases import read_cases

    rows = read_cases(Path(__file__).parents[1] / "catalogs/validation/validation-public.csv")
    rnd = random.Random(7)
    keys = ["tp", "pp", "dp", "cp", "n_devices", "concurrency", "input_len", "output_len", "global_batch", "seq_len",
            "precision", "n_layers", "d_model", "n_kv_heads", "d_ff", "vocab", "n_experts"]
    hw = ["a100-40gb", "h100-pcie", "h800", "b200", "gb200", "mi300x", "tpu-v4", "v100", "wse2", "wse3"]
    cases = []
    for i in range(150):
        c = rnd.choice(rows)
        f = dict(c.fields)
        for _ in range(rnd.randint(1, 3)):
            k = rnd.choice(keys)
            if rnd.random() < 0.5 or not isinstance(f.get(k), int):
                f[k] = None
            else:
                f[k] = max(1, int(f[k] * rnd.choice([0.5, 2, 3, 7])))
        h = rnd.choice(hw) if rnd.random() < 0.2 else c.hardware
        cases.append(dataclasses.replace(c, id=f"F{i}", fields=f, hardware=h))
    recs = validate_cases(cases, cat)
    assert len(recs) == len(cases)
    for r in recs:
        assert (r["predicted"] is not None and r["predicted"] > 0) or r["reason"], r
    assert sum(r["predicted"] is not None for r in recs) > 75  # most stay predictable


def test_a_4d_wide_mlp_is_gated_when_the_stated_size_says_so(cat):
    from wseplan.workload import total_params

    # PaLM 540B (Chowdhery et al. 2022, Table 1): 118 layers, d 18,432, 48 heads, 1 KV head, SwiGLU of width
    # 4 x 18,432 = 73,728, vocabulary 256k. Plain 2-matrix MLPs would make it ~416B: the stated 540.35B decides
    palm = _case("P", model="PaLM 540B", n_params_b=540.35, n_layers=118, d_model=18432, n_heads=48, n_kv_heads=1,
                 d_ff=73728, vocab=256000)
    m = case_model(palm, cat)
    # gated: 572.4B here (no column states PaLM's 256-wide heads, so the columns give 384: +6%); plain: ~416B (-23%)
    assert m.gated_mlp and abs(total_params(m) / 540.35e9 - 1.0) < 0.07
    # GPT-3 175B (Brown et al. 2020): the same 4 x d_model width, plain MLP, 175B
    gpt = _case("G", model="GPT-3 175B", n_params_b=175, n_layers=96, d_model=12288, n_heads=96, d_ff=49152,
                vocab=50257)
    m = case_model(gpt, cat)
    assert not m.gated_mlp and abs(total_params(m) / 175e9 - 1.0) < 0.01
    # other widths stay gated whatever the size
    odd = _case("O", model="Some 3B model", n_params_b=3.21, n_layers=28, d_model=3072, n_heads=24, n_kv_heads=8,
                d_ff=8192, vocab=128256)
    assert case_model(odd, cat).gated_mlp


def test_a_row_whose_columns_agree_with_the_model_its_name_means_takes_that_model(cat):
    from wseplan.workload import total_params

    # Llama 3.2 3B ties its input and output embeddings, which no column states: built from the columns it would
    # count 3.61B; the catalog model (Meta's config.json) counts the published 3.21B
    llama = _case("L", model="Llama 3.2 3B", n_params_b=3.21, n_layers=28, d_model=3072, n_heads=24, n_kv_heads=8,
                  d_ff=8192, vocab=128256)
    m = case_model(llama, cat)
    assert m is cat.models["llama-3.2-3b"] and abs(total_params(m) / 3.21e9 - 1.0) < 0.01
    # a column that disagrees (another vocabulary) keeps the row's own columns
    other = _case("L2", model="Llama 3.2 3B", n_params_b=3.21, n_layers=28, d_model=3072, n_heads=24, n_kv_heads=8,
                  d_ff=8192, vocab=32000)
    assert case_model(other, cat).vocab_size == 32000


def test_searched_degrees_are_marked_defaulted(cat):
    # 64 GPUs, tp 8 stated: pp and dp are searched (64 / 8 leaves a choice), so the row names them
    c, filled = fill_defaults(_case(phase="train", category="gpu-train", metric="mfu", seq_len=4096, global_batch=512,
                                    n_devices=64, tp=8), cat)
    assert filled == ("pp", "dp")
    # tp 8 x pp 2 stated: dp = 64 / 16 = 4 is decided by the count, nothing searched
    _, filled = fill_defaults(_case(phase="train", category="gpu-train", metric="mfu", seq_len=4096, global_batch=512,
                                    n_devices=64, tp=8, pp=2), cat)
    assert filled == ()
    # tp 8 on 8 GPUs: the rest are 1
    _, filled = fill_defaults(_case(phase="train", category="gpu-train", metric="mfu", seq_len=4096, global_batch=512,
                                    n_devices=8, tp=8), cat)
    assert filled == ()
