"""GPU layout search: GPT-3 175B training on 1,024 H100 (candidates/s, seconds, the layout chosen).

Run: ``python benchmarks/bench_layout_search.py`` (or through ``python benchmarks/run.py``). Two figures, medians
of repeated runs with the catalog loaded:

* one question, ``wseplan.timing.predict_time("gpt-3-175b", "h100x1024", phase="train", batch=1536,
  context=2048)`` with no layout given: the chain searches every tensor x pipeline x data x micro-batch x
  virtual-stage x recomputation x ZeRO candidate of the GPU family's grid (memory fit for all, time for those
  that fit) and keeps the fastest;
* the array chain on many questions at once (:func:`wseplan.plan.evaluate` over 64 global batch sizes, 64 to
  4,096 sequences), in candidates/s; target >= 1M candidates/s.

llm-analysis (when installed) has no layout search: its reference is a plain loop of its one-configuration
``train`` call over a random sample of the same candidates (no virtual stages; its TP <= 8 check refuses the
rest, which the loop still pays for), as candidates/s.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llm_analysis_ref as ref  # noqa: E402
from run import figure, quick  # noqa: E402

from wseplan.analytic.memory import RECOMPUTE  # noqa: E402
from wseplan.catalog import load_catalog  # noqa: E402
from wseplan.plan import evaluate, setup  # noqa: E402
from wseplan.timing import predict_time  # noqa: E402

MODEL, TARGET, NUM_GPUS = "gpt-3-175b", "h100x1024", 1024
TARGET_PER_S = 1e6


def candidates(s, batches: np.ndarray):
    """The candidate layouts the chain evaluates for these global batches (2,048-token sequences)."""
    n = len(batches)
    base = {"batch": batches.astype(float), "context": np.full(n, 2048.0), "output_tokens": np.zeros(n)}
    base |= {c: np.full(n, np.nan) for c in s.layout_columns}
    return s.family.candidates(s.ctx, base)[0], base


def median_time(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def llm_analysis_rate(cand: dict, sample: int) -> float | None:
    if not ref.available():
        return None
    kws = [ref.train_kwargs(tp=int(t), pp=int(p), num_gpus=NUM_GPUS, micro_batch=int(m), global_batch=1536,
                            recompute=int(r), zero=int(z))
           for t, p, m, r, z in zip(cand["tp"], cand["pp"], cand["micro_batch"], cand["recompute"], cand["zero_stage"])]
    rate, _ = ref.loop_rate(kws, "train", sample=sample)
    return rate


def main() -> None:
    reps = 3 if quick() else 7
    cat = load_catalog()
    s = setup(MODEL, TARGET, phase="train", catalog=cat)
    one, _ = candidates(s, np.array([1536]))
    n1 = len(one["tp"])
    t1 = median_time(lambda: predict_time(MODEL, TARGET, phase="train", batch=1536, context=2048, catalog=cat), reps)
    r = predict_time(MODEL, TARGET, phase="train", batch=1536, context=2048, catalog=cat)
    lay = r.layout
    print(f"one question: {n1:,} candidates searched in {t1 * 1e3:.1f} ms (median of {reps}); chosen TP{lay['tensor_parallel']} "
          f"PP{lay['pipeline_parallel']} DP{lay['data_parallel']}, micro-batch {lay['micro_batch']}, "
          f"{lay['virtual_pipeline']} virtual stages, recompute {lay['recompute']}, ZeRO-{lay['zero_stage']}: "
          f"{r.step_s:.2f} s/step", flush=True)
    rate_ref = llm_analysis_rate(one, 100 if quick() else 300)
    figure(f"GPU layout search, one question ({MODEL} on {NUM_GPUS:,} H100, {n1:,} candidates)", n1 / t1,
           "candidates/s", TARGET_PER_S, higher_is_better=True, ref=rate_ref,
           detail=f"{t1 * 1e3:.1f} ms per question")
    batches = np.arange(64, 4097, 64)
    many, base = candidates(s, batches)
    n = len(many["tp"])
    t = median_time(lambda: evaluate(s, base), max(3, reps // 2))
    figure(f"GPU layout search, array chain ({len(batches)} global batches, {n:,} candidates)", n / t, "candidates/s",
           TARGET_PER_S, higher_is_better=True, ref=rate_ref, detail=f"{t:.3f} s")
    assert RECOMPUTE[1] == "selective"  # the llm-analysis mapping above: 0 none, 1 selective, 2 full


if __name__ == "__main__":
    main()
