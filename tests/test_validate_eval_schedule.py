"""MLPerf training rows time their benchmark's evaluations from its sourced schedule
(catalogs/validation/training_benchmarks.yaml)."""
import pytest

from wseplan.validate.cases import Case
from wseplan.validate.common import eval_schedule, eval_time_s, training_benchmarks


def _case(model, source, notes, seq=8192):
    return Case(id="R1", category="gpu-train", phase="train", model=model, metric="time_to_train_min", value=1.0,
                unit="min", hardware="h100-sxm", quality="strong", source=source, notes=notes,
                fields={"seq_len": seq})


LORA = _case("Llama 2 70B LoRA fine-tune (MLPerf llama2_70b_lora)", "MLCommons training_results_v4.0 (ASUSTeK)",
             "LoRA rank 16 | train_samples=3072")


def test_lora_schedule_is_the_sourced_one():
    s = training_benchmarks()["mlperf-llama2-70b-lora"]
    assert (s["eval_samples"], s["eval_every_samples"], s["skipped_evals"]) == (173, 384, 3)
    assert eval_schedule(LORA) is s


def test_eval_time_hand_calculation_and_the_log_it_comes_from():
    # 3,072 samples: floor(3072 / 384) - 3 = 5 evaluations of 173 sequences of 8,192 tokens, each a forward pass,
    # a LoRA step being a forward and a 1x backward: 5 x 173 x 8192 / (tok/s x 2)
    tok_s = 1.9530 * 8192  # the log's training rate: 1.953 samples/s on 8 H100 (tracked_stats throughput)
    t = eval_time_s(LORA, tokens_per_s=tok_s, recompute="none")
    assert t == pytest.approx(5 * 173 * 8192 / (tok_s * 2.0), rel=1e-12)
    # the MLLOG of that run (ASUSTeK ESC_N8A-E12, result_0): five evaluations of 38.1-38.3 s each, 191 s in all;
    # the forward-share estimate is within 20% of it
    assert t == pytest.approx(191.0, rel=0.20)


def test_rows_without_a_schedule_or_samples_keep_the_overhead_share():
    other = _case("GPT-2 1.5B", "a paper", "train_samples=1000", seq=2048)
    assert eval_schedule(other) is None and eval_time_s(other, tokens_per_s=1e6, recompute="full") is None
    no_samples = _case(LORA.model, LORA.source, "LoRA rank 16")
    assert eval_time_s(no_samples, tokens_per_s=1e4, recompute="none") is None
    # fewer samples than the skipped evaluations: no evaluation ran
    short = _case(LORA.model, LORA.source, "LoRA | train_samples=1500")
    assert eval_time_s(short, tokens_per_s=1e4, recompute="none") == 0.0


def _gbs(case, gbs):
    return Case(**{**case.__dict__, "fields": {**case.fields, "global_batch": gbs}})


def test_llama31_405b_schedule_follows_the_round_of_the_source():
    v50 = _case("Llama 3.1 405B (MLPerf llama31_405b pretraining)", "MLCommons training_results_v5.0 (NVIDIA)",
                "train_tokens=2264924160")
    v51 = _case(v50.model, "MLCommons training_results_v5.1 (NVIDIA)", v50.notes)
    b = training_benchmarks()
    assert eval_schedule(v50) is b["mlperf-llama31-405b-v5.0"] and eval_schedule(v51) is b["mlperf-llama31-405b-v5.1"]
    tok_s = 1e5
    # v5.0 (training_rules.adoc): every 46,080 sequences, none skipped; 276,480 samples at GBS 1152 -> 6 evaluations
    # of 5,760 sequences, each a forward (a third of a step without recompute); the NVIDIA log shows these six
    t50 = eval_time_s(_gbs(v50, 1152), tokens_per_s=tok_s, recompute="none")
    assert t50 == pytest.approx(6 * 5760 * 8192 / (tok_s * 3.0), rel=1e-12)
    # v5.1: every 18,432 sequences after FLOOR(0.0026 x 1152 + 12) = 14 skipped: 276,480 / 18,432 = 15 -> 1 evaluation
    t51 = eval_time_s(_gbs(v51, 1152), tokens_per_s=tok_s, recompute="none")
    assert t51 == pytest.approx(1 * 5760 * 8192 / (tok_s * 3.0), rel=1e-12)
    # a global batch that does not divide the interval rounds it up to whole batches: GBS 1280 -> 15 x 1280 = 19,200
    # sequences, FLOOR(0.0026 x 1280 + 12) = 15 skipped; 326,400 samples -> floor(326400 / 19200) - 15 = 2 (the log's 2)
    v51b = _case(v50.model, v51.source, "train_tokens=%d" % (326400 * 8192))
    t = eval_time_s(_gbs(v51b, 1280), tokens_per_s=tok_s, recompute="none")
    assert t == pytest.approx(2 * 5760 * 8192 / (tok_s * 3.0), rel=1e-12)


def test_llama31_8b_and_gpt3_schedules():
    b = training_benchmarks()
    s8 = b["mlperf-llama31-8b"]
    assert (s8["eval_samples"], s8["eval_every_samples"], s8["skipped_evals"]) == (1024, 12288, 0)
    c8 = _gbs(_case("Llama 3.1 8B pretraining (MLPerf llama31_8b)", "MLCommons training_results_v5.1",
                    "train_samples=180634"), 16)
    # floor(180,634 / 12,288) = 14 evaluations of 1,024 sequences
    assert eval_time_s(c8, tokens_per_s=1e5, recompute="none") == pytest.approx(14 * 1024 * 8192 / 3e5, rel=1e-12)
    g = b["mlperf-gpt3"]
    # the whole 11,590,004-token validation subset in 2,048-token sequences, every 24,576 sequences
    assert g["eval_samples"] == round(11_590_004 / 2048) and g["eval_every_samples"] == 24576
    c3 = _gbs(_case("GPT-3 175B (MLPerf gpt3 pretraining)", "MLCommons training_results_v4.1 (NVIDIA/results/x/gpt3/r)",
                    "train_tokens=1211105280", seq=2048), 2048)
    # 1,211,105,280 tokens = 591,360 sequences; floor(591,360 / 24,576) = 24 evaluations (the v4.1 NVIDIA log: 24)
    assert eval_time_s(c3, tokens_per_s=1e6, recompute="none") == pytest.approx(24 * 5659 * 2048 / 3e6, rel=1e-12)
