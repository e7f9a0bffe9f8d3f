"""Time the simulators against their targets: ``python benchmarks/bench_sim.py``."""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from wseplan.catalog import load_catalog  # noqa: E402
from wseplan.sim import decode_layer, gemv, simulate_stream  # noqa: E402
from wseplan.sim.catalog_params import mesh_params_from_catalog  # noqa: E402


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main():
    cat = load_catalog()
    w3, w2 = (mesh_params_from_catalog(cat.wafers[k]) for k in ("wse3", "wse2"))
    t, r = median_time(lambda: gemv(w3, k=32768, n=32768, region=(w3.rows, w3.cols)), 5)
    print(f"GEMV 32768x32768 on WSE-3 {w3.rows}x{w3.cols}: {t:.3f} s (target <= 1 s)  "
          f"-> {r.cycles:.0f} cycles, bottleneck {r.bottleneck}")
    t, r = median_time(lambda: decode_layer(w2, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336,
                                            context=4096, region=(750, 994)), 5)
    print(f"Llama-3-8B decode layer on WSE-2 750x994: {t:.3f} s (target <= 5 s)  "
          f"-> {r.cycles:.0f} cycles = {r.time_s * 1e6:.1f} us, fits={r.fits}")
    bw = np.linspace(25e9, 300e9, 25)[:, None, None]
    tok = np.logspace(3, 6, 40)[None, :, None]
    pre = np.arange(10)[None, None, :]
    t, r = median_time(lambda: simulate_stream(
        layer_weight_bytes=np.full(96, 2 * 1.81e9), fwd_flop_per_token=np.full(96, 2 * 1.81e9),
        tokens_per_step=tok, compute_flop_per_s=15.5e15, link_bandwidth_bytes_per_s=bw,
        prefetch_layers=pre, duplex=True), 5)
    print(f"Stream sweep, {r.step_time_s.size} configurations x 96 layers: {t:.3f} s "
          f"(no target; {t / r.step_time_s.size * 1e6:.1f} us per configuration)")


if __name__ == "__main__":
    main()
