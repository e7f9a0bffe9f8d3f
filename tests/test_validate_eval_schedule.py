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
    gpt3 = _case("GPT-3 175B (MLPerf gpt3)", "MLCommons training_results_v3.1", "train_samples=1000", seq=2048)
    assert eval_schedule(gpt3) is None and eval_time_s(gpt3, tokens_per_s=1e6, recompute="full") is None
    no_samples = _case(LORA.model, LORA.source, "LoRA rank 16")
    assert eval_time_s(no_samples, tokens_per_s=1e4, recompute="none") is None
    # fewer samples than the skipped evaluations: no evaluation ran
    short = _case(LORA.model, LORA.source, "LoRA | train_samples=1500")
    assert eval_time_s(short, tokens_per_s=1e4, recompute="none") == 0.0
