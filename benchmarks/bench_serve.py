"""Replica search speed: one model on five platforms over an SLA grid (issue 11's target: <= 1 s).

Each platform gets one replica search (:func:`wseplan.serving.serve`, every replica size x every concurrency up to
the engine's largest batch); the 4 x 4 grid of TTFT and TPOT limits re-judges those points
(:func:`wseplan.serving.with_limits`) without re-timing them. Printed: the whole grid's wall time (median of
repeats, catalog already loaded), and per platform the time of its replica search.
"""
from __future__ import annotations

import statistics
import time

from run import figure, quick

from wseplan.catalog.load import load_catalog
from wseplan.operating import sla_grid
from wseplan.serving import serve

MODEL = "llama-70b"
TARGETS = ["cs3", "h100", "h200", "b200", "mi300x"]
TTFT = [0.25, 0.5, 1.0, 2.0]
TPOT = [0.01, 0.02, 0.04, 0.08]


def main() -> None:
    cat = load_catalog()
    sla_grid("llama-8b", ["h100"], ttft_limits_s=[1.0], tpot_limits_s=[0.05], catalog=cat)  # warm imports
    reps = 3 if quick() else 7
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        rows = sla_grid(MODEL, TARGETS, ttft_limits_s=TTFT, tpot_limits_s=TPOT, catalog=cat,
                        input_tokens=2048, output_tokens=256)
        times.append(time.perf_counter() - t0)
    met = sum(r["meets_sla"] for r in rows)
    figure(f"replica search, {MODEL} x {len(TARGETS)} platforms x {len(TTFT) * len(TPOT)} SLAs (median of {reps})",
           statistics.median(times), "s", 1.0, higher_is_better=False, detail=f"{met}/{len(rows)} cells met")
    for t in TARGETS:
        t0 = time.perf_counter()
        res = serve(MODEL, t, catalog=cat, input_tokens=2048, output_tokens=256)
        print(f"  {t}: {time.perf_counter() - t0:.3f} s, {len(res.points)} points")


if __name__ == "__main__":
    main()
