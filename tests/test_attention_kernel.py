"""The training step's attention implementation (gpu_time.train_step(attention_kernel=...)), and the rules that give a
validation row its training framework's generation: attention kernel, tensor-parallel overlap, sequence parallelism."""
from pathlib import Path

import pytest

from wseplan.analytic import gpu_time as G
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog.load import load_catalog
from wseplan.errors import InputError
from wseplan.timing import predict_time
from wseplan.validate.cases import Case, read_cases
from wseplan.validate.common import (attention_kernel_of, dp_comm_overlap_of, pipeline_split_of, sequence_parallel_of,
                                    tp_comm_overlap_of)
from wseplan.workload import resolve_model


def test_materialized_scores_hand_calculation():
    cat = load_catalog()
    m = resolve_model("llama-3-8b", cat)  # 32 query heads
    # TP 4: 8 heads per GPU; 2,048 queries x 2,048 keys each: 8 x 2048 x 2048 = 33,554,432 score elements per layer;
    # forward 10 B + backward 15 B each, no recompute: 838,860,800 B; at 1 TB/s 0.8389 ms
    t = G.materialized_scores_s(m, tokens=2048.0, seq_len=2048.0, tp=4.0, recompute=0.0, hbm_bytes_per_s=1e12)
    assert float(t) == pytest.approx(8 * 2048 * 2048 * 25 / 1e12, rel=1e-12)
    # a recomputed forward passes the scores once more (10 B)
    t2 = G.materialized_scores_s(m, tokens=2048.0, seq_len=2048.0, tp=4.0, recompute=2.0, hbm_bytes_per_s=1e12)
    assert float(t2) == pytest.approx(8 * 2048 * 2048 * 35 / 1e12, rel=1e-12)


def test_materialized_attention_is_slower_by_at_least_its_score_traffic():
    cat = load_catalog()
    m = resolve_model("gpt-3-175b", cat)
    g = cat.gpus["a100-80gb"]
    kw = dict(precision="bf16", seq_len=2048, global_batch=1536, tp=8, pp=8, dp=24, micro_batch=1, recompute="full",
              cal=gpu_calibration(), single_layer=True)
    flash = G.train_step(m, g, attention_kernel="flash", **kw)
    mat = G.train_step(m, g, attention_kernel="materialized", **kw)
    hbm = g.hbm_bandwidth_bytes_per_s.si * gpu_calibration().hbm_frac
    scores = G.materialized_scores_s(m, tokens=2048.0, seq_len=2048.0, tp=8.0, recompute=2.0, hbm_bytes_per_s=hbm)
    # plus the masked half of the score GEMMs that flash skips
    assert float(mat["layer_s"]) > float(flash["layer_s"]) + float(scores)
    with pytest.raises(ValueError, match="attention_kernel"):
        G.train_step(m, g, attention_kernel="fused-ish", **kw)


def test_plan_default_is_flash_and_option_is_checked():
    a = predict_time("llama-3-8b", "h100x8", phase="train", batch=64, context=4096, layout={"tp": 1, "pp": 1, "dp": 8})
    b = predict_time("llama-3-8b", "h100x8", phase="train", batch=64, context=4096, layout={"tp": 1, "pp": 1, "dp": 8},
                     attention_kernel="flash")
    c = predict_time("llama-3-8b", "h100x8", phase="train", batch=64, context=4096, layout={"tp": 1, "pp": 1, "dp": 8},
                     attention_kernel="materialized")
    assert a.step_s == b.step_s < c.step_s
    with pytest.raises(InputError, match="attention_kernel"):
        predict_time("llama-3-8b", "h100x8", phase="train", batch=64, context=4096, attention_kernel="sometimes")


def _case(source, notes=""):
    return Case(id="R1", category="gpu-train", phase="train", model="m", metric="step_s", value=1.0, unit="s",
                hardware="a100-80gb", quality="strong", source=source, notes=notes, fields={})


@pytest.mark.parametrize("source, notes, kernel", [
    ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training'", "", "materialized"),
    ("Korthikanti et al. 2022 (arXiv:2205.05198), Table 4", "", "materialized"),
    ("MLCommons training_results_v5.0 (NVIDIA/results/eos)", "", "flash"),
    ("Llama Team, 'The Llama 3 Herd of Models' (arXiv:2407.21783)", "", "flash"),
    ("Somebody 2025, a blog", "", "flash"),
    ("Narayanan et al. 2021", "attention_kernel=flash", "flash"),
])
def test_row_attention_rule(source, notes, kernel):
    assert attention_kernel_of(_case(source, notes)) == kernel


@pytest.mark.parametrize("source, notes, overlap", [
    ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training'", "", False),
    ("Korthikanti et al. 2022 (arXiv:2205.05198), Table 4", "", False),
    ("MLCommons training_results_v5.0 (NVIDIA/results/eos)", "", True),
    ("Llama Team, 'The Llama 3 Herd of Models' (arXiv:2407.21783)", "", True),
    ("Narayanan et al. 2021", "tp_comm_overlap=yes", True),
    ("MLCommons training_results_v5.0", "tp_comm_overlap=no", False),
    # the attention hint does not decide the overlap
    ("Narayanan et al. 2021", "attention_kernel=flash", False),
])
def test_row_overlap_rule(source, notes, overlap):
    assert tp_comm_overlap_of(_case(source, notes)) is overlap


@pytest.mark.parametrize("source, notes, overlap", [
    ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM'", "",
     False),
    ("Narayanan et al. 2021 (arXiv:2104.04473), Table 2 (PTD-P vs ZeRO-3)", "", False),
    ("Chowdhery et al. 2022, 'PaLM'", "", True),  # of that time, but not Megatron-LM's local DDP
    ("MLCommons training_results_v5.0 (NVIDIA/results/eos, NeMo Megatron)", "", True),  # Megatron-Core overlaps
    ("Narayanan et al. 2021, 'Megatron-LM'", "dp_comm_overlap=yes", True),
    ("MLCommons training_results_v5.0", "dp_comm_overlap=no", False),
])
def test_row_dp_overlap_rule(source, notes, overlap):
    assert dp_comm_overlap_of(_case(source, notes)) is overlap


@pytest.mark.parametrize("source, notes, sp", [
    ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training'", "", False),
    ("Chowdhery et al. 2022, 'PaLM'", "", False),
    ("MLCommons training_results_v5.0 (NVIDIA/results/eos)", "", True),
    ("Llama Team, 'The Llama 3 Herd of Models' (arXiv:2407.21783)", "", True),
    ("Korthikanti et al. 2022 (arXiv:2205.05198), Table 4", "x; sequence_parallel=yes: the row", True),
    ("MLCommons training_results_v5.0", "sequence_parallel=no", False),
])
def test_row_sequence_parallel_rule(source, notes, sp):
    assert sequence_parallel_of(_case(source, notes)) is sp


@pytest.mark.parametrize("source, notes, split", [
    ("Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training'", "", "even"),
    ("Smith et al. 2022, 'Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B'", "", "even"),
    ("Llama Team, 'The Llama 3 Herd of Models' (arXiv:2407.21783)", "", "uneven"),
    ("MLCommons training_results_v5.0 (NVIDIA/results/eos)", "", "uneven"),
    ("Narayanan et al. 2021", "pipeline_split=uneven", "uneven"),
    ("MLCommons training_results_v5.0", "pipeline_split=even", "even"),
])
def test_row_pipeline_split_rule(source, notes, split):
    assert pipeline_split_of(_case(source, notes)) == split


def test_korthikanti_table4_rows_state_their_sequence_parallelism():
    rows = {c.id: c for c in read_cases(Path(__file__).parents[1] / "catalogs/validation/validation-public.csv")}
    assert [sequence_parallel_of(rows[i]) for i in ("R047", "R048", "R049", "R050", "R051")] == \
        [False, True, False, False, True]
