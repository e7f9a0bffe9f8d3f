"""Simulator and calibration targets: ``python benchmarks/bench_calibrate.py``.

Targets (issue 4, on the 2-core reference machine): a GEMV over a full WSE-3-sized grid (755 x 1170 PEs)
<= 1 s; one decode layer of Llama-3-8B on a 750 x 994 region <= 5 s (median of several runs); the whole
calibration (`wseplan calibrate`, both wafers and the stream model) < 60 s, ideally < 20 s.
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wseplan.catalog import load_catalog  # noqa: E402
from wseplan.sim import decode_layer, gemv  # noqa: E402
from wseplan.sim import calibrate as C  # noqa: E402
from wseplan.sim.catalog_params import mesh_params_from_catalog  # noqa: E402


def median_time(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(repeats: int = 5) -> dict:
    cat = load_catalog()
    w3 = mesh_params_from_catalog(cat.wafers["wse3"])
    w2 = mesh_params_from_catalog(cat.wafers["wse2"])
    region3 = (755, 1170)
    t_gemv, r = median_time(lambda: gemv(w3, k=32768, n=32768, region=region3), repeats)
    print(f"GEMV [1,32K]x[32K,32K] on WSE-3 {region3[0]}x{region3[1]} PEs: {t_gemv:.3f} s median of {repeats} "
          f"(target <= 1 s) -> {r.cycles:.0f} cycles, fits={r.fits}, bottleneck {r.bottleneck}")
    m = cat.models["llama-3-8b"]
    t_layer, r = median_time(lambda: decode_layer(w2, d_model=m.d_model, n_heads=m.num_heads, n_kv_heads=m.num_kv_heads,
                                                  d_ff=m.d_ff, context=4096, region=(750, 994)), repeats)
    print(f"Llama-3-8B decode layer (context 4096) on WSE-2 750x994: {t_layer:.3f} s median of {repeats} "
          f"(target <= 5 s) -> {r.cycles:.0f} cycles = {r.time_s * 1e6:.1f} us, fits={r.fits}")
    t = time.perf_counter()
    res = C.run_calibration(cat)
    t_cal = time.perf_counter() - t
    pts = sum(f.fit["num_points"] + f.holdout["num_points"] for f in res["fabric"].values())
    pts += res["stream"].fit["num_points"] + res["stream"].holdout["num_points"]
    print(f"Calibration (wse2, wse3 fabric + stream, {pts} simulated points incl. held-out): {t_cal:.2f} s "
          f"(target < 60 s, ideally < 20 s)")
    return {"gemv_wse3_full_s": t_gemv, "decode_layer_llama3_8b_s": t_layer, "calibration_s": t_cal}


if __name__ == "__main__":
    main()
