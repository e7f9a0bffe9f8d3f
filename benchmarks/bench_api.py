"""One GPU evaluation through the Python API, and the same question as a whole process (issue 14, item 6).

Figures (each beside llm-analysis's same run when llm-analysis is installed; see ``llm_analysis_ref.py``):

* GPU training, one configuration with its layout given: :func:`wseplan.timing.predict_time` for GPT-3 175B on
  1,024 H100 (TP 8, PP 8, DP 16, micro-batch 1, selective recomputation, ZeRO-1; global batch 1,536 x 2,048
  tokens), seconds per call, median; target <= 0.5 ms (issue 14 sets a wafer evaluation "as cheap as a GPU
  evaluation (<= 0.5 ms)"; ``bench_wafer.py`` times the wafer side).
* GPU decoding, one configuration: Llama-3-70B on 8 H100 (TP 8), batch 1, 2,048 prompt tokens, 256 generated.
* The GPU training question as a whole process, where a user waits: ``wseplan time gpt-3-175b --target h100x1024
  --phase train ... -f json`` from a fresh interpreter (median of cold runs after one unmeasured run), against
  ``python -m llm_analysis.analysis train ...``; target <= 0.35 s (the cold-start target of ``wseplan fit``).

Run: ``python benchmarks/bench_api.py`` (or through ``python benchmarks/run.py``).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llm_analysis_ref as ref  # noqa: E402
from run import ROOT, figure, quick  # noqa: E402

from wseplan.catalog import load_catalog  # noqa: E402
from wseplan.timing import predict_time  # noqa: E402

TARGET_EVAL_S = 0.5e-3
TARGET_PROCESS_S = 0.35
TRAIN = dict(phase="train", batch=1536, context=2048,
             layout=dict(tp=8, pp=8, dp=16, micro_batch=1, vpp=1, recompute="selective", zero_stage=1))
DECODE = dict(phase="decode", batch=1, context=2048, output_tokens=256, layout=dict(tp=8, pp=1, dp=1))
CLI_TRAIN = ["time", "gpt-3-175b", "--target", "h100x1024", "--phase", "train", "--batch", "1536", "--context", "2048",
             "--tp", "8", "--pp", "8", "--dp", "16", "--micro-batch", "1", "--vpp", "1", "--recompute", "selective",
             "--zero", "1", "-f", "json"]


def per_call(fn, *, repeats: int, calls: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def main() -> int:
    have_ref = ref.available()
    print(f"llm-analysis: {ref.version() + ' installed' if have_ref else 'not installed (pip install llm-analysis)'}",
          flush=True)
    reps, calls = (3, 20) if quick() else (7, 50)
    cat = load_catalog()
    t_train = per_call(lambda: predict_time("gpt-3-175b", "h100x1024", catalog=cat, **TRAIN), repeats=reps, calls=calls)
    r_train = ref.train_call_s() if have_ref else None
    figure("GPU training evaluation, Python API (GPT-3 175B on 1,024 H100, layout given)", t_train * 1e3, "ms",
           TARGET_EVAL_S * 1e3, higher_is_better=False, ref=None if r_train is None else r_train * 1e3)
    t_dec = per_call(lambda: predict_time("llama-3-70b", "h100x8", catalog=cat, **DECODE), repeats=reps, calls=calls)
    r_dec = ref.infer_call_s() if have_ref else None
    figure("GPU decode evaluation, Python API (Llama-3-70B on 8 H100, TP 8, 2,048 + 256 tokens)", t_dec * 1e3, "ms",
           TARGET_EVAL_S * 1e3, higher_is_better=False, ref=None if r_dec is None else r_dec * 1e3)
    runs = 5 if quick() else 11
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    argv = [sys.executable, "-m", "wseplan.cli", *CLI_TRAIN]
    t_cli, c_cli = ref.cold_process_s(argv, runs, env=env, cwd=str(ROOT))
    r_cli, rc_cli = ref.cold_process_s(ref.cli_train_argv(), runs) if have_ref else (None, None)
    cpu = f"CPU {c_cli:.3f} s" + (f" (llm-analysis {rc_cli:.3f} s)" if rc_cli is not None else "")
    figure("GPU training question, whole process (`wseplan time gpt-3-175b --target h100x1024 --phase train ...`)",
           t_cli, "s", TARGET_PROCESS_S, higher_is_better=False, ref=r_cli,
           detail=f"median of {runs} cold runs; {cpu}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
