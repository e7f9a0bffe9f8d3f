"""Tensor-parallel communication overlap of a training framework (gpu_time.train_step(tp_comm_overlap=...), the GPU
family option ``tp_comm_overlap``). The rule that gives a validation row its framework's overlap is tested with the
other framework rules in tests/test_attention_kernel.py."""
import pytest

from wseplan.analytic import gpu_time as G
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog.load import load_catalog
from wseplan.errors import InputError
from wseplan.timing import predict_time
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
