"""Tensor-parallel communication overlap of a training framework (gpu_time.train_step(tp_comm_overlap=...), the GPU
family option ``tp_comm_overlap``) and the rule that gives a validation row its framework's overlap."""
import pytest

from wseplan.analytic import gpu_time as G
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog.load import load_catalog
from wseplan.errors import InputError
from wseplan.timing import predict_time
from wseplan.validate.cases import Case
from wseplan.validate.common import tp_comm_overlap_of
from wseplan.workload import resolve_model


def test_without_overlap_the_layer_carries_all_its_tp_collectives():
    cat = load_catalog()
    m, g = resolve_model("gpt-3-175b", cat), cat.gpus["a100-80gb"]
    cal = gpu_calibration()
    kw = dict(precision="bf16", seq_len=2048, global_batch=1536, tp=8, pp=8, dp=24, micro_batch=1, recompute="full",
              cal=cal, single_layer=True)
    on = G.train_step(m, g, tp_comm_overlap=True, **kw)
    off = G.train_step(m, g, tp_comm_overlap=False, **kw)
    # the exposed TP time scales by 1 - tp_overlap_frac; the compute is the same
    assert float(on["compute_s"]) == float(off["compute_s"])
    assert float(on["tp_comm_s"]) == pytest.approx(float(off["tp_comm_s"]) * (1.0 - cal.tp_overlap_frac), rel=1e-12)
    # six all-reduces of a 2,048 x 12,288 16-bit activation per block (fwd, bwd, recomputed fwd) inside the node
    links = G._Links(g, cal)
    ar = float(links.tp_allreduce(2.0 * 2048 * m.d_model, 8.0))
    assert float(off["tp_comm_s"]) == pytest.approx(6.0 * ar, rel=1e-12)


def test_plan_default_overlaps_and_option_is_checked():
    kw = dict(phase="train", batch=64, context=4096, layout={"tp": 4, "pp": 1, "dp": 2})
    a = predict_time("llama-3-8b", "h100x8", **kw)
    b = predict_time("llama-3-8b", "h100x8", tp_comm_overlap=False, **kw)
    assert a.step_s < b.step_s
    with pytest.raises(InputError, match="tp_comm_overlap"):
        predict_time("llama-3-8b", "h100x8", tp_comm_overlap="sometimes", **kw)


def _case(source, notes=""):
    return Case(id="R1", category="gpu-train", phase="train", model="m", metric="step_s", value=1.0, unit="s",
                hardware="a100-80gb", quality="strong", source=source, notes=notes, fields={})


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
