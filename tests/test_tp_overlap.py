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


def test_without_dp_overlap_the_step_carries_the_whole_gradient_reduction():
    """Megatron-LM's local DDP (``dp_comm_overlap=False``) all-reduces the gradients after the backward pass: the step
    grows by exactly the part an overlapping framework hides, ``min(t_dp, dp_overlap_frac x one micro-batch's
    compute)`` for ZeRO-0/1; ZeRO-3's prefetched gathers are not this option's."""
    cat = load_catalog()
    m, g = resolve_model("gpt-3-175b", cat), cat.gpus["a100-80gb"]
    cal = gpu_calibration()
    kw = dict(precision="bf16", seq_len=2048, global_batch=1536, tp=8, pp=12, dp=16, micro_batch=1, recompute="full",
              cal=cal, zero_stage=0)
    on, off = G.train_step(m, g, **kw), G.train_step(m, g, dp_comm_overlap=False, **kw)
    assert float(off["dp_comm_s"]) > 0
    assert float(off["dp_exposed_s"]) == pytest.approx(float(off["dp_comm_s"]), rel=1e-12)
    # one micro-batch's compute (ZeRO-0/1): the stage's 96 / 12 = 8 layers' compute (TP collectives not counted)
    window = 8 * float(G.train_step(m, g, single_layer=True, **kw)["compute_s"])
    # train_step scales the calibration's overlap for training (training_calibration): read it back from the record
    hidden = float(off["dp_exposed_s"]) - float(on["dp_exposed_s"])
    assert hidden == pytest.approx(min(float(on["dp_comm_s"]), G.training_calibration(cal).dp_overlap_frac * window),
                                   rel=1e-9)
    assert float(off["step_s"]) - float(on["step_s"]) == pytest.approx(hidden, rel=1e-9)
    z3 = dict(kw, zero_stage=3)
    assert float(G.train_step(m, g, dp_comm_overlap=False, **z3)["step_s"]) == float(G.train_step(m, g, **z3)["step_s"])


def test_dp_overlap_option_is_checked_and_training_only():
    kw = dict(phase="train", batch=64, context=4096, layout={"tp": 1, "pp": 1, "dp": 8, "zero_stage": 1})
    a = predict_time("llama-3-8b", "h100x8", **kw)
    b = predict_time("llama-3-8b", "h100x8", dp_comm_overlap=False, **kw)
    assert a.step_s < b.step_s
    with pytest.raises(InputError, match="dp_comm_overlap"):
        predict_time("llama-3-8b", "h100x8", dp_comm_overlap="sometimes", **kw)
    with pytest.raises(InputError, match="dp_comm_overlap"):
        predict_time("llama-3-8b", "h100x8", phase="decode", batch=1, context=1024, dp_comm_overlap=False)
