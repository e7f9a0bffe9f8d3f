"""Sweep throughput: configurations per second of ``wseplan sweep``'s vectorized evaluator (issue 7, item 3).

Every configuration goes through fit (per-device memory), time (step, TTFT, TPOT, tokens/s, bottleneck) and
cost ($/hour, $/M tokens, J/token), exactly as ``wseplan sweep`` evaluates it (:func:`wseplan.sweep.evaluate_columns`,
the array path; building the DataFrame and writing the file are timed separately and excluded from the
figure). The process is pinned to one CPU (``os.sched_setaffinity``) so the figure is per core.

The main sweep serves Llama-3.1-8B and -70B on 64 H100s: 1,024 batches x 8 prompt lengths x 4 output lengths
x every tensor x pipeline x data layout of 64 GPUs. The figure is the median of 5 runs; the target is
>= 1e6 configurations/s. A plain-Python loop over the same configurations - one call per configuration of
``wseplan.timing.predict_time``, ``wseplan.fit.gpu_layout_memory`` and ``wseplan.analytic.cost.deployment_cost``
/ ``serving_cost`` - is timed on a random sample and extrapolated to the whole sweep (it would take hours
otherwise); its step times are checked equal to the vectorized ones. Smaller sweeps of the other paths
(GPU training, wafer serving, wafer training) are timed once each for information.

Run: ``python benchmarks/bench_sweep.py`` (or through ``python benchmarks/run.py``).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import figure, machine_facts, quick  # noqa: E402

TARGET_PER_S = 1e6

MAIN = dict(name="bench-serve", phase="decode", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["h100-sxmx64"],
            batches=list(range(1, 1025)), contexts=[256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
            output_tokens=[1, 64, 256, 1024])
OTHERS = {
    "GPU training (Llama-3.1-70B, 256 H100, micro-batch x recompute x ZeRO)":
        dict(name="b-train", phase="train", models=["llama-3.1-70b"], targets=["h100-sxmx256"],
             batches=[256, 512, 1024, 2048], contexts=[2048, 4096, 8192],
             layouts=dict(micro_batch=[1, 2, 4], recompute=["none", "selective", "full"], zero_stage=[1, 2, 3])),
    "wafer serving (Llama-3.1-70B on 4 CS-3)":
        dict(name="b-wafer", phase="decode", models=["llama-3.1-70b"], targets=["cs3x4"], batches=list(range(1, 129)),
             contexts=[512, 1024, 2048, 4096, 8192], output_tokens=[64, 256, 1024]),
    "wafer training (GPT-3 175B on 16 CS-3)":
        dict(name="b-wtrain", phase="train", models=["gpt-3-175b"], targets=["cs3x16"],
             batches=list(range(16, 2049, 16)), contexts=[1024, 2048, 4096]),
}


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


def _loop_row(S, g, i, catalog, prices_params):
    """One configuration through the scalar APIs, as a plain-Python program would evaluate it."""
    import math

    from wseplan.analytic.cost import deployment_cost, serving_cost
    from wseplan.fit import build_workload, gpu_layout_memory
    from wseplan.timing import predict_time

    cfg = S._config_arrays(g, i, i + 1)
    b, c, o = int(cfg["batch"][0]), int(cfg["context"][0]), int(cfg["output_tokens"][0])
    tp, pp, dp = int(cfg["tp"][0]), int(cfg["pp"][0]), int(cfg["dp"][0])
    t = predict_time(g.model, g.target, phase="decode", precision=g.precision, batch=b, context=c,
                     output_tokens=o or None, catalog=catalog, tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp)
    w = build_workload(g.model, catalog, precision=g.precision, phase="decode", batch=b, context=c + o)
    mem = gpu_layout_memory(w, tp=tp, pp=pp, dp=1, zero_stage=1, recompute="selective", catalog=catalog)["total"]
    p = prices_params
    nsys = math.ceil(tp * pp * dp / g.target.device.gpus_per_node.si)
    d = deployment_cost(num_systems=nsys, capex_per_system_usd=p["capex_usd"], network_frac=p["network_frac"], extra_capex_usd=0.0,
                        installation_frac=p["installation_frac"], amortization_years=p["amortization_years"],
                        maintenance_frac_per_year=p["maintenance_frac_per_year"], peak_power_per_system_w=p["peak_power_w"],
                        busy_power_frac=p["busy_power_frac"], idle_power_frac=p["idle_power_frac"],
                        utilization_frac=p["utilization_frac"], pue=p["pue"], electricity_usd_per_kwh=p["electricity_usd_per_kwh"],
                        facility_usd_per_kw_month=p["facility_usd_per_kw_month"])
    serving_cost(usd_per_busy_hour=d["usd_per_busy_hour"], busy_it_power_w=d["busy_it_power_w"], pue=p["pue"],
                 prefill_s=t.ttft_s or t.step_s, prompt_tokens=b * c, decode_step_s=t.tpot_s,
                 output_tokens_per_step=b)
    return t.step_s, float(mem)


def main() -> int:
    import numpy as np

    from wseplan import sweep as S
    from wseplan.catalog import load_catalog

    pin = _pin_one_core()
    repeats = 3 if quick() else 5
    facts = machine_facts()
    print("machine: " + "; ".join(f"{k} {v}" for k, v in facts.items()) + f"; {pin}", flush=True)
    cat = load_catalog()
    plan = S.plan_sweep(S.parse_sweep(MAIN), cat)
    n = plan.size
    S.evaluate_columns(S.plan_sweep(S.parse_sweep(dict(MAIN, batches=[1, 2])), cat))  # warm-up (imports, caches)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        parts = S.evaluate_columns(plan)
        times.append(time.perf_counter() - t0)
    t_vec = statistics.median(times)
    rate = n / t_vec
    t0 = time.perf_counter()
    df = S.to_frame(plan, parts)
    t_frame = time.perf_counter() - t0
    head = min(len(df), 100_000)  # CSV bytes of the first 100,000 rows, extrapolated (pandas writes ~5e4 rows/s)
    t0 = time.perf_counter()
    S.frame_bytes(df.iloc[:head], "x.csv")
    t_csv = (time.perf_counter() - t0) * len(df) / head
    layouts = len(next(iter(plan.groups[0].layouts.values())))
    print(f"sweep: {n:,} configurations ({len(plan.groups)} groups: 2 models x h100-sxmx64, {len(MAIN['batches'])} batches x "
          f"{len(MAIN['contexts'])} contexts x {len(MAIN['output_tokens'])} output lengths x {layouts} TP x PP x DP layouts), "
          f"{int(df['fits'].sum()):,} fit", flush=True)
    print(f"  vectorized fit + time + cost: median {t_vec:.3f} s of {repeats} ({', '.join(f'{t:.3f}' for t in times)}) "
          f"-> {rate:,.0f} configurations/s; DataFrame {t_frame:.2f} s and CSV bytes ~{t_csv:.1f} s (extrapolated from {head:,} rows; both excluded)", flush=True)
    # plain-Python loop over a random sample of the same configurations, extrapolated
    from wseplan.analytic.cost import apply_overrides, cost_params, hardware_price_key, load_prices, nominal

    sample = 30 if quick() else 100
    rng = np.random.default_rng(0)
    g_idx = rng.integers(0, len(plan.groups), size=sample)
    c_idx = rng.integers(0, plan.groups[0].size, size=sample)
    prices = load_prices(catalog=cat)
    params = {g.index: nominal(apply_overrides(cost_params(prices, cat, g.target), {}, hardware_key=hardware_price_key(g.target)))
              for g in plan.groups}
    _loop_row(S, plan.groups[0], 0, cat, params[0])  # warm-up
    t0 = time.perf_counter()
    loop = [_loop_row(S, plan.groups[gi], int(ci), cat, params[gi]) for gi, ci in zip(g_idx, c_idx)]
    t_loop = time.perf_counter() - t0
    rate_loop = sample / t_loop
    offsets = np.cumsum([0] + [g.size for g in plan.groups])
    rows = offsets[g_idx] + c_idx
    same = bool(np.allclose([s for s, _ in loop], df["step_s"].to_numpy()[rows], rtol=1e-9, atol=0)
                and np.allclose([m for _, m in loop], df["per_device_bytes"].to_numpy()[rows], rtol=1e-9, atol=0))
    print(f"  plain-Python loop (predict_time + gpu_layout_memory + cost, one call each per configuration) over a random "
          f"sample of {sample} configurations: {t_loop:.2f} s -> {rate_loop:,.0f} configurations/s; extrapolated to the "
          f"whole sweep: {n / rate_loop / 3600:.2f} h; speed-up {rate / rate_loop:,.0f}x; loop and vectorized agree: {same}",
          flush=True)
    ok = figure("sweep throughput (fit + time + cost, one core)", rate, "configurations/s", TARGET_PER_S,
                higher_is_better=True, detail=f"{rate / rate_loop:,.0f}x the plain-Python loop (extrapolated from {sample})")
    for label, spec in OTHERS.items():
        p = S.plan_sweep(S.parse_sweep(spec), cat)
        t0 = time.perf_counter()
        S.evaluate_columns(p)
        dt = time.perf_counter() - t0
        print(f"  {label}: {p.size:,} configurations in {dt:.3f} s -> {p.size / dt:,.0f} configurations/s (information)",
              flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
