"""ZeRO-3 / FSDP data parallelism in the training step (gpu_time.train_step, zero_stage=3): three flat rings of the
16-bit parameters per micro-batch, at each GPU's own network link once the group leaves the scale-up domain, hidden
behind ``zero3_overlap_frac`` of the compute."""
import pytest

from wseplan.analytic import gpu_time as G
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog.load import load_catalog
from wseplan.workload import resolve_model

KW = dict(precision="bf16", seq_len=2048, tp=1, pp=1, recompute="full")


def _step(dp, gbs, cal, zero_stage=3, model="gpt-3-175b", gpu="a100-80gb"):
    cat = load_catalog()
    # one micro-batch per step, as in the paper's runs (micro-batch 4, 2 and 1 at 384, 768 and 1,536 GPUs)
    return G.train_step(resolve_model(model, cat), cat.gpus[gpu], global_batch=gbs, dp=dp, zero_stage=zero_stage,
                        micro_batch=gbs // dp, cal=cal, **KW)


def test_zero3_traffic_hand_calculation_across_nodes():
    cat = load_catalog()
    cal = gpu_calibration()
    m, g = resolve_model("gpt-3-175b", cat), cat.gpus["a100-80gb"]
    r = _step(1536, 1536, cal)
    params = float(G._stage_params(m, 1.0))
    net = g.scale_out_bandwidth_bytes_per_s.si * cal.network_frac
    # one micro-batch: 2 all-gathers of the 16-bit parameters + 1 reduce-scatter of the fp32 gradients (bf16 training,
    # Megatron-LM and Llama 3's FSDP reduce in fp32), each a ring over 1,536 ranks that leaves the 8-GPU node: (n-1)
    # latency steps and (n-1)/n of B bytes x params through the GPU's own network link
    ring = lambda b: 1535 * cal.network_latency_s + 1535 / 1536 * b * params / net  # noqa: E731
    assert float(r["dp_comm_s"]) == pytest.approx(2.0 * ring(2.0) + ring(4.0), rel=1e-12)
    # about a minute for GPT-3 on HDR InfiniBand (25 GB/s per GPU): far above the ~15 s of compute of one sequence
    assert 40.0 < float(r["dp_comm_s"]) < 90.0
    # at most the compute (``compute_s``: the micro-batches' layers and LM head) hides it
    assert float(r["dp_comm_s"]) - float(r["compute_s"]) <= float(r["dp_exposed_s"]) < float(r["dp_comm_s"])


def test_zero3_step_is_bound_by_the_network_at_a_fixed_batch():
    # Narayanan et al. 2021, Table 2: ZeRO-3 at a fixed batch of 1,536 loses per-GPU throughput as GPUs are added,
    # because each GPU moves the whole model three times per step whatever the GPU count; the step time stops falling
    cal = gpu_calibration()
    t = {n: float(_step(n, 1536, cal)["step_s"]) for n in (384, 768, 1536)}
    assert t[1536] > 0.8 * t[768]  # twice the GPUs, almost the same step
    assert t[384] < 2.0 * t[768]


def test_overlap_hides_the_collectives_behind_compute():
    base = gpu_calibration()
    none = _step(384, 1536, base.replace(zero3_overlap_frac=0.1))
    full = _step(384, 1536, base.replace(zero3_overlap_frac=1.0))
    assert float(full["step_s"]) < float(none["step_s"])
    # full overlap: only what exceeds the compute is exposed
    assert float(full["dp_exposed_s"]) == pytest.approx(
        max(float(full["dp_comm_s"]) - float(full["compute_s"]), 0.0), abs=0.02 * float(full["compute_s"]))


def test_inside_the_scale_up_domain_the_rings_run_on_nvlink():
    cat = load_catalog()
    cal = gpu_calibration()
    m, g = resolve_model("llama-3-8b", cat), cat.gpus["h100-sxm"]
    r = G.train_step(m, g, global_batch=8, dp=8, zero_stage=3, micro_batch=1, cal=cal, **KW)
    params = float(G._stage_params(m, 1.0))
    nv = g.scale_up_bandwidth_bytes_per_s.si * cal.nvlink_frac
    ring = lambda b: 7 * cal.nvlink_latency_s + 7 / 8 * b * params / nv  # noqa: E731
    assert float(r["dp_comm_s"]) == pytest.approx(2.0 * ring(2.0) + ring(4.0), rel=1e-12)  # bf16 params, fp32 grads
    # ZeRO-1 keeps the plain all-reduce and its own overlap
    r1 = G.train_step(m, g, global_batch=8, dp=8, zero_stage=1, micro_batch=1, cal=cal, **KW)
    assert float(r1["dp_comm_s"]) != pytest.approx(float(r["dp_comm_s"]))
