"""Sweep speed and memory: ``wseplan sweep`` end to end, whole processes, local and on Dask (issues 14, 15, 16).

End to end (what a user waits for): each figure is one fresh ``wseplan sweep SPEC --out TMP -f json`` process,
from interpreter start to the renamed output file, run through a small wrapper process that reports the wall
time and, from ``resource.getrusage(RUSAGE_CHILDREN)``, the CPU time (user + system) of the command and every
process it started (Dask workers included) and the peak resident memory of the largest of them.

* GPU serving, Llama-3.1-8B and -70B on 64 H100 (every TP x PP x DP layout), 1,024 batches x 4 output lengths
  x 6 prompt lengths = 1,056,768 configurations ("1e6") and x 57 prompt lengths = 10,039,296 ("1e7"); Parquet
  (and the 1e6 sweep once more as CSV). Targets: 1e7 in <= 30 s with <= 1 GB peak RSS; configurations/s
  against 1e7 / 30 s.
* Wafer serving, Llama-3.1-8B and -70B on 2 and 4 CS-3, 1,024 batches x 7 prompt x 4 output lengths = 114,688
  configurations ("1e5"), Parquet.
* Each sweep also with ``--engine dask --workers 2`` (a local cluster of 2 worker processes): the speed-up over
  the local engine is printed beside the target of approaching 2x on 2 cores; the files are checked
  byte-identical to the local engine's. The wafer sweep runs a third time on 2 workers with Dask's default
  ``MALLOC_TRIM_THRESHOLD_=65536`` (which the engine clears for its workers) to show that setting's cost.
* Bytes per configuration of each output file are printed (documented in docs/cli-output.md).

Evaluation only (for information; the process pinned to one CPU): :func:`wseplan.sweep.evaluate_columns` on
the 1e6-style sweep (1,409,024 configurations), against a plain-Python loop over a random sample of the same
configurations through the scalar APIs, extrapolated (its step times and bytes are checked equal).

Run: ``python benchmarks/bench_sweep.py`` (or through ``python benchmarks/run.py``); ``--quick`` skips the 1e7
sweeps and the malloc comparison. The machine is shared: compare CPU seconds when the load average is high.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llm_analysis_ref as ref  # noqa: E402
from run import ROOT, figure, machine_facts, quick  # noqa: E402

#: benchmarks/run.py gives this script this long (the whole-process runs take 5-10 minutes on a loaded machine)
BENCH_TIMEOUT_S = 1800
TARGET_1E7_S = 30.0
TARGET_RSS_GB = 1.0
TARGET_E2E_PER_S = 1e7 / TARGET_1E7_S
TARGET_DASK_SPEEDUP = 2.0
TARGET_EVAL_PER_S = 1e6

GPU = dict(phase="decode", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["h100-sxmx64"],
           batches=list(range(1, 1025)), output_tokens=[1, 64, 256, 1024])
GPU_1E6 = dict(GPU, name="gpu-1e6", contexts=[256, 1024, 2048, 4096, 8192, 16384])
GPU_1E7 = dict(GPU, name="gpu-1e7", contexts=list(range(256, 256 * 58, 256)))
WAFER_1E5 = dict(name="wafer-1e5", phase="decode", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["cs3x2", "cs3x4"],
                 batches=list(range(1, 1025)), contexts=[512, 1024, 2048, 4096, 8192, 16384, 32768],
                 output_tokens=[64, 256, 1024, 4096])

MAIN = dict(name="bench-serve", phase="decode", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["h100-sxmx64"],
            batches=list(range(1, 1025)), contexts=[256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
            output_tokens=[1, 64, 256, 1024])

_WRAPPER = r"""
import json, resource, subprocess, sys, time
out = open(sys.argv[1], "wb")
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[2:], stdout=out)
wall = time.perf_counter() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "wall_s": wall, "user_s": r.ru_utime, "sys_s": r.ru_stime, "maxrss_kb": r.ru_maxrss}))
"""


def run_cli(spec: dict, tmp: Path, *args: str, env: dict | None = None, suffix: str = "parquet") -> dict:
    """One ``wseplan sweep`` process for ``spec``; returns its times, peak RSS, record and output path."""
    import yaml

    tag = "-".join([spec["name"], *[a.strip("-") for a in args], *(f"{k}={v}" for k, v in (env or {}).items())])
    f = tmp / f"{tag}.yaml"
    f.write_text(yaml.safe_dump(dict(spec, output=f"{spec['name']}.{suffix}")))
    out = tmp / f"out-{tag}-{suffix}"
    rec_f = tmp / f"{tag}-{suffix}.json"
    e = dict(os.environ)
    e.pop("MALLOC_TRIM_THRESHOLD_", None)
    e.update(env or {})
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, "-c", _WRAPPER, str(rec_f), sys.executable, "-m", "wseplan.cli", "sweep", str(f),
           "--out", str(out), "-f", "json", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=ROOT)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"bench_sweep: {tag} failed: {proc.stderr.strip()[-500:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["rc"] != 0:
        raise SystemExit(f"bench_sweep: {tag} exited {res['rc']}: {proc.stderr.strip()[-500:]}")
    res["record"] = json.loads(rec_f.read_text())
    res["path"] = Path(res["record"]["output"])
    res["cpu_s"] = res["user_s"] + res["sys_s"]
    res["rss_gb"] = res["maxrss_kb"] * 1024 / 1e9
    res["n"] = res["record"]["configurations"]
    res["tag"] = tag
    return res


def show(label: str, r: dict) -> None:
    n = r["n"]
    print(f"  {label}: {n:,} configurations in {r['wall_s']:.1f} s wall -> {n / r['wall_s']:,.0f} configurations/s; "
          f"CPU {r['cpu_s']:.1f} s (user {r['user_s']:.1f}, system {r['sys_s']:.1f}); peak RSS {r['rss_gb']:.2f} GB; "
          f"{r['record']['output_bytes'] / n:.1f} bytes/configuration ({r['record']['output_bytes'] / 1e6:,.0f} MB, "
          f"{r['record']['tasks']} tasks); load {os.getloadavg()[0]:.1f}", flush=True)


#: llm-analysis's nearest models (it has no Llama-3.1 configs; the work per call does not depend on the sizes)
LLM_ANALYSIS_MODEL = {"llama-3.1-8b": "NousResearch_Llama-2-7b-hf", "llama-3.1-70b": "upstage_Llama-2-70b-instruct-v2"}


def llm_analysis_rate(spec: dict, sample: int) -> float | None:
    """Configurations/s of a loop of llm-analysis ``infer`` calls over a random sample of the sweep's GPU
    configurations (batch, prompt, output length, TP, PP, DP); no file is written (the wseplan figure includes its
    file). None when llm-analysis is not installed."""
    if not ref.available():
        return None
    import numpy as np

    from wseplan import sweep as S
    from wseplan.catalog import load_catalog

    plan = S.plan_sweep(S.parse_sweep(spec), load_catalog())
    rng = np.random.default_rng(0)
    kws = []
    for _ in range(sample):
        g = plan.groups[int(rng.integers(len(plan.groups)))]
        i = int(rng.integers(g.size))
        c = {k: int(v[0]) for k, v in S._config_arrays(g, i, i + 1).items() if k in ("batch", "context", "output_tokens",
                                                                                       "tp", "pp", "dp")}
        kws.append(dict(ref.infer_kwargs(tp=c["tp"], batch=c["batch"], seq_len=c["context"],
                                         output_tokens=max(c["output_tokens"], 1)),
                        model_name=LLM_ANALYSIS_MODEL[g.model_name],
                        pp_size=c["pp"], dp_size=c["dp"]))
    rate, _ = ref.loop_rate(kws, "infer", sample=sample)
    return rate


def end_to_end(tmp: Path) -> bool:
    ok = True
    print("end to end (whole `wseplan sweep` processes):", flush=True)
    g6 = run_cli(GPU_1E6, tmp)
    show("GPU 1e6, local, Parquet", g6)
    g6c = run_cli(GPU_1E6, tmp, suffix="csv")
    show("GPU 1e6, local, CSV", g6c)
    g6d = run_cli(GPU_1E6, tmp, "--engine", "dask", "--workers", "2")
    show("GPU 1e6, Dask 2 workers, Parquet", g6d)
    same = g6d["path"].read_bytes() == g6["path"].read_bytes()
    print(f"  Dask file byte-identical to the local engine's: {same}", flush=True)
    ok &= same
    ref_rate = llm_analysis_rate(GPU_1E6, 60 if quick() else 200)
    figure("sweep end to end, 1e6 GPU configurations, Parquet, local", g6["n"] / g6["wall_s"], "configurations/s",
           TARGET_E2E_PER_S, higher_is_better=True, ref=ref_rate,
           detail=f"CPU {g6['cpu_s']:.1f} s, peak RSS {g6['rss_gb']:.2f} GB"
                  + ("; llm-analysis: a loop of infer() over a sample, no file" if ref_rate else ""))
    if not quick():
        g7 = run_cli(GPU_1E7, tmp)
        show("GPU 1e7, local, Parquet", g7)
        g7d = run_cli(GPU_1E7, tmp, "--engine", "dask", "--workers", "2")
        show("GPU 1e7, Dask 2 workers, Parquet", g7d)
        same = g7d["path"].read_bytes() == g7["path"].read_bytes()
        print(f"  Dask file byte-identical to the local engine's: {same}", flush=True)
        ok &= same
        figure("sweep end to end, 1e7 GPU configurations, Parquet, local", g7["wall_s"], "s", TARGET_1E7_S,
               higher_is_better=False, detail=f"{g7['n'] / g7['wall_s']:,.0f} configurations/s, CPU {g7['cpu_s']:.1f} s")
        figure("sweep peak RSS, 1e7 GPU configurations, local", g7["rss_gb"], "GB", TARGET_RSS_GB, higher_is_better=False)
        figure("Dask 2 workers / local engine, 1e7 GPU configurations", g7["wall_s"] / g7d["wall_s"], "x speed-up",
               TARGET_DASK_SPEEDUP, higher_is_better=True,
               detail=f"local {g7['wall_s']:.1f} s, Dask {g7d['wall_s']:.1f} s wall; CPU {g7['cpu_s']:.1f} vs "
                      f"{g7d['cpu_s']:.1f} s")
    w = run_cli(WAFER_1E5, tmp)
    show("wafer 1e5, local, Parquet", w)
    wd = run_cli(WAFER_1E5, tmp, "--engine", "dask", "--workers", "2")
    show("wafer 1e5, Dask 2 workers (MALLOC_TRIM_THRESHOLD_ cleared), Parquet", wd)
    same = wd["path"].read_bytes() == w["path"].read_bytes()
    print(f"  Dask file byte-identical to the local engine's: {same}", flush=True)
    ok &= same
    figure("Dask 2 workers / local engine, 1e5 wafer configurations", w["wall_s"] / wd["wall_s"], "x speed-up",
           TARGET_DASK_SPEEDUP, higher_is_better=True,
           detail=f"local {w['wall_s']:.1f} s, Dask {wd['wall_s']:.1f} s wall; CPU {w['cpu_s']:.1f} vs {wd['cpu_s']:.1f} s")
    if not quick():
        wt = run_cli(WAFER_1E5, tmp, "--engine", "dask", "--workers", "2", env={"MALLOC_TRIM_THRESHOLD_": "65536"})
        show("wafer 1e5, Dask 2 workers with Dask's default MALLOC_TRIM_THRESHOLD_=65536", wt)
        print(f"  clearing MALLOC_TRIM_THRESHOLD_ saves {wt['cpu_s'] - wd['cpu_s']:.1f} CPU-s "
              f"({wt['sys_s']:.1f} -> {wd['sys_s']:.1f} s system time) and {wt['wall_s'] - wd['wall_s']:.1f} s wall",
              flush=True)
    return ok


# ---------------------------------------------------------------------------------------------
# evaluation only, one core (information)
# ---------------------------------------------------------------------------------------------
def _loop_row(S, g, i, catalog, prices):
    """One configuration through the scalar APIs, as a plain-Python program would evaluate it: the plan
    (:func:`wseplan.plan.plan`, fit and time) and, where it fits, its cost (:func:`wseplan.costing.cost`)."""
    from wseplan.costing import cost
    from wseplan.plan import plan

    cfg = S._config_arrays(g, i, i + 1)
    b, c, o = int(cfg["batch"][0]), int(cfg["context"][0]), int(cfg["output_tokens"][0])
    lay = {k: int(cfg[k][0]) for k in ("tp", "pp", "dp") if k in cfg}
    kw = dict(phase=g.phase, precision=g.precision, batch=b, context=c, output_tokens=o or None, layout=lay,
              catalog=catalog)
    r = plan(g.model, g.target, **kw)
    if r.fits:
        cost(g.model, g.target, prices=prices, **kw)
    return (r.step_s if r.step_s is not None else float("nan")), float(r.per_device_bytes)


def evaluation_only() -> bool:
    import numpy as np

    from wseplan import sweep as S
    from wseplan.analytic.cost import load_prices
    from wseplan.catalog import load_catalog

    pin = "not pinned (no sched_setaffinity)"
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        pin = f"pinned to CPU {cpu}"
    repeats = 3 if quick() else 5
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
    step = np.concatenate([p["step_s"] for p in parts])
    mem = np.concatenate([p["per_device_bytes"] for p in parts])
    del parts
    print(f"evaluation only ({pin}): {n:,} configurations, fit + time + cost as arrays (no file): median {t_vec:.3f} s "
          f"of {repeats} -> {rate:,.0f} configurations/s", flush=True)
    sample = 30 if quick() else 100
    rng = np.random.default_rng(0)
    g_idx = rng.integers(0, len(plan.groups), size=sample)
    c_idx = rng.integers(0, plan.groups[0].size, size=sample)
    prices = load_prices(catalog=cat)
    _loop_row(S, plan.groups[0], 0, cat, prices)  # warm-up
    t0 = time.perf_counter()
    loop = [_loop_row(S, plan.groups[gi], int(ci), cat, prices) for gi, ci in zip(g_idx, c_idx)]
    t_loop = time.perf_counter() - t0
    rate_loop = sample / t_loop
    offsets = np.cumsum([0] + [g.size for g in plan.groups])
    rows = offsets[g_idx] + c_idx
    same = bool(np.allclose([s for s, _ in loop], step[rows], rtol=1e-9, atol=0, equal_nan=True)
                and np.allclose([m for _, m in loop], mem[rows], rtol=1e-9, atol=0))
    print(f"  plain-Python loop over {sample} random configurations: {rate_loop:,.0f} configurations/s "
          f"(the whole sweep: {n / rate_loop / 3600:.2f} h); agree with the arrays: {same}", flush=True)
    figure("sweep evaluation only (fit + time + cost, one core, no file)", rate, "configurations/s", TARGET_EVAL_PER_S,
           higher_is_better=True, detail=f"{rate / rate_loop:,.0f}x the plain-Python loop")
    return same


def main() -> int:
    facts = machine_facts()
    print("machine: " + "; ".join(f"{k} {v}" for k, v in facts.items()), flush=True)
    with tempfile.TemporaryDirectory(prefix="wseplan-bench-sweep-") as tmp:
        ok = end_to_end(Path(tmp))
    ok &= evaluation_only()  # last: it pins this process to one CPU
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
