"""Benchmark: vectorized GPU layout search for GPT-3 175B on 1,024 H100 (candidates/s, seconds, best layout).

Run: ``python benchmarks/bench_layout_search.py``. The target is >= 1 million candidates per second on the
2-core reference machine; every candidate (tp x pp x micro-batch x virtual stages x recompute x ZeRO) goes
through the memory fit and the step-time model, as numpy arrays over the open mesh of the grid. The median of
five timed runs is printed.
"""
from __future__ import annotations

import time

from wseplan.analytic.gpu_time import search_layouts
from wseplan.catalog import load_catalog
from wseplan.fit import resolve_model
from wseplan.targets import parse_target


def main() -> None:
    cat = load_catalog()
    model = resolve_model("gpt-3-175b", cat)
    target = parse_target("h100-sxmx1024", cat)
    kw = dict(num_gpus=1024, global_batch=1536, seq_len=2048, precision="bf16",
              micro_batches=tuple(range(1, 17)), virtual_stages=tuple(range(1, 9)))
    search_layouts(model, target, cat, **{**kw, "micro_batches": (1,), "virtual_stages": (1,)})  # warm-up
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        res = search_layouts(model, target, cat, **kw)
        times.append(time.perf_counter() - t0)
    dt = sorted(times)[len(times) // 2]
    n = res["num_evaluated"]
    print(f"candidates: {n:,} (feasible {res['num_feasible']:,}, infeasible {res['num_infeasible']:,})")
    print(f"seconds: {dt:.3f}")
    print(f"candidates/s: {n / dt:,.0f}")
    print(f"best layout: {res['best']}")


if __name__ == "__main__":
    main()
