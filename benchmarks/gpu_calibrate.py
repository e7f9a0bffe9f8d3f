"""Measure GPU efficiency factors (bf16 GEMM TFLOP/s over a size sweep; device-to-device copy bandwidth).

Run on a machine with an NVIDIA/AMD GPU and PyTorch:

    python benchmarks/gpu_calibrate.py [--out catalogs/calibration/gpu_measured] [--sizes 1024,2048,4096,8192]

It writes one YAML file of *measured* calibration data (date, device name, driver/CUDA/PyTorch versions,
each point with its shape, seconds and achieved rate, and the efficiency against the catalog's dense peak).
Without a GPU (or without PyTorch) it prints why and exits with status 3; it never writes invented numbers.

Sanity check for your own measurement (from the project brief, not recorded as ours): on one H200 SXM with
PyTorch 2.11 an 8192^3 bf16 GEMM runs at about 770-800 TFLOP/s (dense peak 989) and a device-to-device copy at
about 4.3 TB/s counting bytes read and written.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import platform
import statistics
import sys
from pathlib import Path

NO_GPU_EXIT = 3


def _time_cuda(fn, torch, repeats: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def measure(sizes: list[int], copy_bytes: int) -> dict:
    import torch

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    gemm = []
    for n in sizes:
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        t = _time_cuda(lambda: torch.matmul(a, b), torch)
        gemm.append({"m": n, "n": n, "k": n, "seconds": t, "flop_per_s": 2.0 * n**3 / t})
    src = torch.empty(copy_bytes // 2, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = _time_cuda(lambda: dst.copy_(src), torch)
    return {
        "date": _dt.date.today().isoformat(),
        "device_name": props.name,
        "device_memory_bytes": int(props.total_memory),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda or torch.version.hip or "unknown",
        "python_version": platform.python_version(),
        "gemm_bf16": gemm,
        "copy": {"bytes": copy_bytes, "seconds": t, "bytes_per_s_read_plus_write": 2.0 * copy_bytes / t},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="catalogs/calibration/gpu_measured")
    ap.add_argument("--sizes", default="1024,2048,4096,8192,16384")
    ap.add_argument("--copy-gib", type=float, default=4.0)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_calibrate: PyTorch is not installed; nothing measured (install torch on a GPU machine).")
        return NO_GPU_EXIT
    if not torch.cuda.is_available():
        print("gpu_calibrate: no GPU visible to PyTorch on this machine; nothing measured.")
        return NO_GPU_EXIT
    import yaml

    sizes = [int(s) for s in args.sizes.split(",") if s]
    data = measure(sizes, int(args.copy_gib * 2**30))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{data['date']}-{data['device_name'].replace(' ', '_').lower()}.yaml"
    body = {"measurement": {**data, "source": "measured with benchmarks/gpu_calibrate.py", "basis": "measured"}}
    (out / name).write_text(yaml.safe_dump(body, sort_keys=False))
    for g in data["gemm_bf16"]:
        print(f"GEMM {g['m']}^3 bf16: {g['flop_per_s'] / 1e12:8.1f} TFLOP/s")
    print(f"copy: {data['copy']['bytes_per_s_read_plus_write'] / 1e12:.2f} TB/s (read + write)")
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
