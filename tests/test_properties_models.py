"""Hypothesis properties of the time, streaming, cost, placement and fabric models (200 examples each).

Each property is physics every model must obey, whatever its calibration: more bandwidth or compute never
makes anything slower, more work never makes it faster, scaling every bandwidth by k scales a
bandwidth-bound time by 1/k, fractions stay in [0, 1], the ILP is never worse than any enumerated candidate,
and the closed-form fabric stays within the calibrated tolerance of the simulator.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wseplan.analytic import cost as C
from wseplan.analytic import gpu_pass as P
from wseplan.analytic import gpu_time as G
from wseplan.analytic import stream as S
from wseplan.calibration_data import gpu_calibration
from wseplan.catalog import load_catalog
from wseplan.catalog.schema import Quantity

PROPS = settings(max_examples=200, deadline=None, derandomize=True, database=None)
CAT = load_catalog()
CAL = gpu_calibration()
MODELS = ["llama-3-8b", "llama-2-13b", "llama-3-70b", "mixtral-8x7b", "gpt-3-175b"]
GPUS = ["a100-80gb", "h100-sxm", "h200-sxm", "b200", "mi300x"]


def _scaled_gpu(key: str, *, bw: float = 1.0, flops: float = 1.0, links: float = 1.0):
    """The catalog GPU with HBM bandwidth, every dense peak and the link bandwidths scaled."""
    g = CAT.gpus[key]

    def q(x: Quantity, f: float) -> Quantity:
        return Quantity(value=x.si * f, source=x.source, basis=x.basis, note=x.note)

    return g.model_copy(update={
        "hbm_bandwidth_bytes_per_s": q(g.hbm_bandwidth_bytes_per_s, bw),
        "dense_peak_flop_per_s": {k: q(v, flops) for k, v in g.dense_peak_flop_per_s.items()},
        "scale_up_bandwidth_bytes_per_s": q(g.scale_up_bandwidth_bytes_per_s, links),
        "scale_out_bandwidth_bytes_per_s": q(g.scale_out_bandwidth_bytes_per_s, links),
    })


def _decode_s(model, gpu, *, batch, context, tp):
    t, _ = P.forward_pass_time_s(CAT.models[model], gpu, precision="bf16", batch=batch, new_tokens=1,
                                 context=context, tp=tp, cal=CAL)
    return float(t)


infer_case = st.tuples(st.sampled_from(MODELS), st.sampled_from(GPUS), st.integers(1, 256),
                       st.integers(1, 32768), st.sampled_from([1, 2, 4, 8]))


@PROPS
@given(infer_case, st.floats(1.01, 8.0))
def test_decode_never_slower_with_more_hbm_bandwidth(case, k):
    model, gpu, b, c, tp = case
    assert _decode_s(model, _scaled_gpu(gpu, bw=k), batch=b, context=c, tp=tp) <= \
        _decode_s(model, CAT.gpus[gpu], batch=b, context=c, tp=tp) * (1 + 1e-12)


@PROPS
@given(infer_case, st.floats(1.01, 8.0))
def test_decode_never_slower_with_more_compute(case, k):
    model, gpu, b, c, tp = case
    assert _decode_s(model, _scaled_gpu(gpu, flops=k), batch=b, context=c, tp=tp) <= \
        _decode_s(model, CAT.gpus[gpu], batch=b, context=c, tp=tp) * (1 + 1e-12)


@PROPS
@given(infer_case, st.integers(1, 64), st.integers(1, 8192))
def test_decode_step_never_faster_with_more_batch_or_context(case, db, dc):
    model, gpu, b, c, tp = case
    g = CAT.gpus[gpu]
    base = _decode_s(model, g, batch=b, context=c, tp=tp)
    assert _decode_s(model, g, batch=b + db, context=c, tp=tp) >= base * (1 - 1e-12)
    assert _decode_s(model, g, batch=b, context=c + dc, tp=tp) >= base * (1 - 1e-12)


train_case = st.tuples(st.sampled_from(["llama-3-8b", "llama-3-70b", "gpt-3-175b"]), st.sampled_from(GPUS),
                       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 4, 16]),
                       st.sampled_from(["none", "selective", "full"]), st.sampled_from([0, 1, 2, 3]))


def _step(model, gpu, tp, pp, dp, rec, zs):
    r = G.train_step(CAT.models[model], gpu, precision="bf16", seq_len=2048, global_batch=64 * dp, tp=tp, pp=pp,
                     dp=dp, micro_batch=1, recompute=rec, zero_stage=zs, cal=CAL)
    return r


@PROPS
@given(train_case, st.floats(1.01, 8.0))
def test_train_step_never_slower_with_more_compute_or_links(case, k):
    model, gpu, tp, pp, dp, rec, zs = case
    base = float(_step(model, CAT.gpus[gpu], tp, pp, dp, rec, zs)["step_s"])
    for g in (_scaled_gpu(gpu, flops=k), _scaled_gpu(gpu, links=k), _scaled_gpu(gpu, bw=k)):
        assert float(_step(model, g, tp, pp, dp, rec, zs)["step_s"]) <= base * (1 + 1e-12)


@PROPS
@given(train_case)
def test_train_parts_and_fractions(case):
    model, gpu, tp, pp, dp, rec, zs = case
    r = _step(model, CAT.gpus[gpu], tp, pp, dp, rec, zs)
    for key in ("step_s", "compute_s", "tp_comm_s", "bubble_s", "p2p_s", "dp_exposed_s", "optimizer_s"):
        assert float(r[key]) >= 0.0
    assert float(r["step_s"]) >= float(r["compute_s"]) * (1 - 1e-12)
    m = CAT.models[model]
    flops = G.model_flop_per_token(m, seq_len=2048) * 64 * dp * 2048
    mfu = flops / float(r["step_s"]) / (tp * pp * dp * CAT.gpus[gpu].peak_flop_per_s("bf16"))
    assert 0.0 < mfu <= 1.0
    bubble = float(G.pipeline_bubble_frac(num_stages=pp, num_microbatches=64, virtual_stages=1))
    assert 0.0 <= bubble < 1.0


def _stream(model, *, bw_scale=1.0, flop_scale=1.0, tokens=131072.0):
    from wseplan.fit import build_workload

    w = build_workload(CAT.models[model], CAT, precision="bf16", phase="train", batch=1, context=2048)
    peak = CAT.wafers["wse3"].peak_flop_per_s("bf16") * 0.5
    return S.training_step_time_s(weight_bytes=w.weight_bytes, flop_per_token=w.flop_per_token, tokens=tokens,
                                  compute_flop_per_s=peak * flop_scale, stream_bandwidth_bytes_per_s=150e9 * bw_scale,
                                  io_bandwidth_bytes_per_s=150e9 * bw_scale, latency_s=10e-6)


@PROPS
@given(st.sampled_from(MODELS), st.floats(1.01, 16.0), st.floats(1e3, 1e6))
def test_stream_step_monotone_and_fractions(model, k, tokens):
    base = _stream(model, tokens=tokens)
    faster_link = _stream(model, bw_scale=k, tokens=tokens)
    faster_compute = _stream(model, flop_scale=k, tokens=tokens)
    more_tokens = _stream(model, tokens=tokens * k)
    assert float(faster_link["step_s"]) <= float(base["step_s"]) * (1 + 1e-12)
    assert float(faster_compute["step_s"]) <= float(base["step_s"]) * (1 + 1e-12)
    assert float(more_tokens["step_s"]) >= float(base["step_s"]) * (1 - 1e-12)
    for r in (base, faster_link, faster_compute, more_tokens):
        assert 0.0 <= float(r["utilization_frac"]) <= 1.0


@PROPS
@given(st.sampled_from(MODELS), st.floats(1.5, 16.0))
def test_stream_bound_step_scales_as_one_over_k(model, k):
    """With compute made negligible, the step is the weight stream: every bandwidth x k -> time / k."""
    base = _stream(model, flop_scale=1e6, tokens=1.0)
    fast = _stream(model, bw_scale=k, flop_scale=1e6, tokens=1.0)
    lat = 2 * (len(_workload_rows(model))) * 10e-6  # latency terms do not scale; bound them
    ratio = (float(fast["step_s"]) - 0) / float(base["step_s"])
    assert ratio == pytest.approx(1.0 / k, rel=0.02 + lat / float(fast["step_s"]))


def _workload_rows(model):
    from wseplan.fit import build_workload

    return build_workload(CAT.models[model], CAT, precision="bf16", phase="train", batch=1, context=2048).weight_bytes


cost_case = st.tuples(st.floats(1.0, 1e5), st.floats(1e3, 1e6), st.floats(1.0, 2.0), st.floats(1e-3, 10.0),
                      st.floats(1e-4, 1.0), st.integers(1, 512))


@PROPS
@given(cost_case, st.floats(1.01, 10.0))
def test_cost_per_token_scales_with_time_and_price(case, k):
    usd_h, power, pue, pre_s, step_s, batch = case
    base = C.serving_cost(usd_per_busy_hour=usd_h, busy_it_power_w=power, pue=pue, prefill_s=pre_s, prompt_tokens=2048,
                          decode_step_s=step_s, output_tokens_per_step=batch)
    slower = C.serving_cost(usd_per_busy_hour=usd_h, busy_it_power_w=power, pue=pue, prefill_s=pre_s * k,
                            prompt_tokens=2048, decode_step_s=step_s * k, output_tokens_per_step=batch)
    dearer = C.serving_cost(usd_per_busy_hour=usd_h * k, busy_it_power_w=power, pue=pue, prefill_s=pre_s,
                            prompt_tokens=2048, decode_step_s=step_s, output_tokens_per_step=batch)
    for key in ("input_usd_per_mtok", "output_usd_per_mtok"):
        assert float(slower[key]) == pytest.approx(k * float(base[key]), rel=1e-9)
        assert float(dearer[key]) == pytest.approx(k * float(base[key]), rel=1e-9)
        assert float(base[key]) > 0


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.floats(0.1, 10.0), min_size=2, max_size=7), st.integers(1, 4), st.floats(0.0, 2.0))
def test_placement_ilp_never_worse_than_any_enumerated_partition(costs, k, const):
    """The latency placement's slowest stage (exactly k stages) is <= that of every contiguous k-stage partition,
    both by the exact partition (the default) and by the ILP alone (no warm start)."""
    from wseplan.optimize.placement import solve_partition

    n = len(costs)
    k = min(k, n)
    item_bytes = [1.0] * n
    cap = float(n)  # everything fits; the optimiser chooses the split
    best = np.inf
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = [0, *cuts, n]
        worst = max(sum(costs[a:b]) + const for a, b in zip(bounds, bounds[1:]))
        best = min(best, worst)
    for method in ("dp", "ilp"):
        sol = solve_partition(item_cost=costs, item_bytes=item_bytes, capacity_bytes=cap, stage_const_cost=const,
                              objective="latency", num_stages=k, method=method, warm_start=False)
        assert sol.status == "optimal" and sol.method == method
        assert sol.max_stage_cost <= best * (1 + 1e-6) + 1e-9
        assert sol.max_stage_cost >= best * (1 - 1e-6) - 1e-9


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["wse2", "wse3"]), st.sampled_from([16, 24, 32, 48, 64, 96, 128]), st.integers(1, 6),
       st.integers(1, 6))
def test_closed_form_gemv_within_calibrated_tolerance_of_simulator(wafer, side, kf, nf):
    """Off the calibration grid, the sim-fitted closed-form GEMV stays within 10% of the simulator."""
    from wseplan.analytic.fabric import sim_fit_values
    from wseplan.sim.calibrate import FabricCase, closed_form_fabric, simulate_fabric
    from wseplan.sim.catalog_params import mesh_params_from_catalog

    params = mesh_params_from_catalog(CAT.wafers[wafer])
    case = FabricCase(kind="gemv", rows=side, cols=side, k=side * kf * 64, n=side * nf * 64)
    sim = float(simulate_fabric(params, [case])[0])
    cf = float(closed_form_fabric(params, [case], sim_fit_values(CAT.wafers[wafer]))[0])
    assert cf == pytest.approx(sim, rel=0.10)
