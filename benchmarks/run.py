"""The one benchmark command: ``python benchmarks/run.py`` (from the repository root).

It prints the machine's facts (CPU model, cores, Python, numpy, OS), then every figure with its target and
the ratio against it:

* its own figure: vectorized GPU layout memory (:func:`wseplan.devices.gpu.layout_memory`) over >= 1e6
  tensor x pipeline x data layouts of GPT-3 175B, in candidates/s, against a plain-Python loop over the
  same candidates (one call per candidate, checked to give the same bytes);
* then each ``benchmarks/bench_*.py`` script, discovered by name and run in a fresh interpreter (so each
  measures from a cold process); each prints its own figures (``bench_startup.py``: cold start-up of
  ``wseplan fit`` and ``wseplan --help``).

Options: ``--quick`` (fewer repeats; sets ``WSEPLAN_BENCH_QUICK=1`` for the scripts), ``--only SUBSTR``
(run the scripts whose name contains it), ``--list``, ``--timeout S`` (per script, default 600),
``--no-scripts``. Exit status 1 when a script fails; a missed target is reported, not an error.

Bench scripts may ``from run import figure, machine_facts, quick`` (the script's folder is on ``sys.path``).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def quick() -> bool:
    """True when the run was asked to be quick (fewer repeats)."""
    return os.environ.get("WSEPLAN_BENCH_QUICK") == "1"


def figure(name: str, value: float, unit: str, target: float | None, *, higher_is_better: bool, detail: str = "",
           ref: float | None = None, ref_name: str = "llm-analysis") -> bool:
    """Print one figure as ``name: value unit (target <= T unit; ratio r) ok|MISSED``; return whether it met it.

    The ratio is value/target for lower-is-better figures (<= 1 meets the target) and target/value for
    higher-is-better ones (also <= 1 when met), so a ratio below 1 always means better than the target. ``ref`` is
    the same run through another tool (``ref_name``, llm-analysis by default; None where it is not installed or
    has no such run), in the same unit; it is printed with the ratio value/ref (times) or ref/value (rates), again
    below 1 when wseplan is faster. ``target=None`` prints the figure with its reference only.
    """
    extra = f"  [{detail}]" if detail else ""
    other = ""
    if ref is not None:
        r = (ref / value if value else float("inf")) if higher_is_better else (value / ref if ref else float("inf"))
        other = f"; {ref_name} {_num(ref)} {unit}, ratio {r:.3g}"
    if target is None:
        print(f"{name}: {_num(value)} {unit} (no target{other}){extra}", flush=True)
        return True
    met = value >= target if higher_is_better else value <= target
    ratio = (target / value if value else float("inf")) if higher_is_better else value / target
    rel = ">=" if higher_is_better else "<="
    print(f"{name}: {_num(value)} {unit} (target {rel} {_num(target)} {unit}; ratio {ratio:.3g}{other}) "
          f"{'ok' if met else 'MISSED'}{extra}", flush=True)
    return met


def _num(v: float) -> str:
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.4g}"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.3e}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict[str, str]:
    """CPU model, logical cores (and those this process may use), memory, Python, numpy, OS."""
    import numpy as np

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = ""
    try:
        kb = int(next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")).split()[1])
        mem = f"{kb / 2**20:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    return {
        "cpu": _cpu_model(),
        "cores": f"{os.cpu_count()} logical ({usable} usable by this process)",
        "memory": mem or "unknown",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy": np.__version__,
        "os": f"{platform.system()} {platform.release()}",
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a",
    }


# ---------------------------------------------------------------------------------------------
# vectorized fit throughput
# ---------------------------------------------------------------------------------------------
TARGET_CANDIDATES_PER_S = 1e6


def layout_candidates(num_layers: int):
    """Every TP in {1..64 powers of 2} x PP in 1..L x DP in 1..1536: >= 1e6 layouts for L >= 96."""
    import numpy as np

    tp = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)
    pp = np.arange(1, num_layers + 1, dtype=float)
    dp = np.arange(1, 1537, dtype=float)
    T, P, D = (a.ravel() for a in np.meshgrid(tp, pp, dp, indexing="ij"))
    return T, P, D


def bench_fit_throughput(repeats: int = 5, loop_sample: int = 20_000) -> bool:
    """Vectorized gpu_layout_memory over >= 1e6 layouts vs a plain-Python loop over a sample of the same."""
    import numpy as np

    from wseplan.catalog import load_catalog
    from wseplan.devices.gpu import layout_memory
    from wseplan.workload import build_workload, resolve_model

    cat = load_catalog()
    model = resolve_model("gpt-3-175b", cat)
    w = build_workload(model, cat, precision="bf16", phase="train", batch=1536, context=2048)
    T, P, D = layout_candidates(model.num_layers)
    n = T.size
    kw = dict(zero_stage=1, recompute="selective")
    layout_memory(w, cat, tp=T[:1000], pp=P[:1000], dp=D[:1000], **kw)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = layout_memory(w, cat, tp=T, pp=P, dp=D, **kw)["total"]
        times.append(time.perf_counter() - t0)
    t_vec = statistics.median(times)
    rate_vec = n / t_vec
    rng = np.random.default_rng(0)
    idx = rng.choice(n, size=min(loop_sample, n), replace=False)
    t0 = time.perf_counter()
    loop = [float(layout_memory(w, cat, tp=T[i], pp=P[i], dp=D[i], **kw)["total"]) for i in idx]
    t_loop = time.perf_counter() - t0
    rate_loop = len(idx) / t_loop
    same = np.allclose(np.array(loop), total[idx], rtol=1e-12, atol=0)
    cap = cat.gpus["h100-sxm"].hbm_bytes.si * (1 - cat.defaults.gpu_hbm_reserve_frac.si)
    feasible = int((total <= cap).sum())
    print(f"GPU layout memory, GPT-3 175B training (bf16, batch 1536 x 2048 tokens, ZeRO-1, selective recompute): "
          f"{n:,} layouts (TP 1-64 x PP 1-{model.num_layers} x DP 1-1536), {feasible:,} fit an H100's usable HBM",
          flush=True)
    print(f"  vectorized: median {t_vec * 1e3:.1f} ms of {repeats} -> {rate_vec:,.0f} candidates/s; "
          f"plain-Python loop over {len(idx):,} of the same candidates: {t_loop:.2f} s -> {rate_loop:,.0f} candidates/s; "
          f"speed-up {rate_vec / rate_loop:,.0f}x; loop and vectorized agree: {same}", flush=True)
    ok = figure("vectorized fit throughput", rate_vec, "candidates/s", TARGET_CANDIDATES_PER_S, higher_is_better=True,
                detail=f"{rate_vec / rate_loop:,.0f}x the plain-Python loop")
    return ok and same


# ---------------------------------------------------------------------------------------------
def discover(only: str | None = None) -> list[Path]:
    return [p for p in sorted(HERE.glob("bench_*.py")) if only is None or only in p.name]


def declared_timeout(path: Path) -> float:
    """A script's own ``BENCH_TIMEOUT_S = N`` (module level), for scripts that need longer than the default."""
    import re

    m = re.search(r"^BENCH_TIMEOUT_S\s*=\s*([0-9_.]+)", path.read_text(), flags=re.M)
    return float(m.group(1).replace("_", "")) if m else 0.0


_FIGURE = re.compile(r" \((target [<>]=|no target)")


def is_figure(line: str) -> bool:
    """Whether a printed line is a figure in :func:`figure`'s format."""
    return bool(_FIGURE.search(line))


def run_script(path: Path, timeout: float) -> tuple[int, float, list[str]]:
    """Run one bench script in a fresh interpreter from the repository root; stream its output and return its exit
    status, wall time and figure lines. The timeout is the larger of ``timeout`` and the script's
    :func:`declared_timeout`."""
    timeout = max(timeout, declared_timeout(path))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    t0 = time.perf_counter()
    figures: list[str] = []
    proc = subprocess.Popen([sys.executable, str(path)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
                            bufsize=1)
    killed: list[bool] = []

    def _kill() -> None:
        killed.append(True)
        proc.kill()

    timer = threading.Timer(timeout, _kill)
    timer.start()
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if is_figure(line):
                figures.append(line.rstrip("\n"))
        rc = proc.wait()
    finally:
        timer.cancel()
    if killed:
        print(f"  {path.name}: timed out after {timeout:.0f} s", flush=True)
        rc = 124
    return rc, time.perf_counter() - t0, figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (sets WSEPLAN_BENCH_QUICK=1 for the scripts)")
    ap.add_argument("--only", help="run only bench scripts whose file name contains this")
    ap.add_argument("--list", action="store_true", help="list the bench scripts and exit")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per script (default 600)")
    ap.add_argument("--no-scripts", action="store_true", help="only the machine facts and run.py's own figure")
    args = ap.parse_args(argv)
    scripts = discover(args.only)
    if args.list:
        for p in scripts:
            print(p.relative_to(ROOT))
        return 0
    if args.quick:
        os.environ["WSEPLAN_BENCH_QUICK"] = "1"
    sys.path.insert(0, str(ROOT))
    print("== machine", flush=True)
    for k, v in machine_facts().items():
        print(f"{k}: {v}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M %Z')}", flush=True)
    failed: list[str] = []
    summary: list[str] = []
    if args.only is None:
        print("\n== run.py: vectorized fit throughput", flush=True)
        buf = io.StringIO()
        with contextlib.redirect_stdout(_Tee(buf)):
            bench_fit_throughput(repeats=3 if quick() else 5, loop_sample=5_000 if quick() else 20_000)
        summary += [ln for ln in buf.getvalue().splitlines() if is_figure(ln)]
    if not args.no_scripts:
        for p in scripts:
            print(f"\n== {p.relative_to(ROOT)}", flush=True)
            rc, dt, figs = run_script(p, args.timeout)
            summary += figs
            print(f"  ({p.name}: exit {rc}, {dt:.1f} s)", flush=True)
            if rc != 0:
                failed.append(p.name)
    missed = sum(ln.rstrip().endswith("MISSED") or " MISSED  [" in ln for ln in summary)
    print(f"\n== summary: {len(summary)} figures, {missed} missed their target; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg()) if hasattr(os, 'getloadavg') else 'n/a'}")
    for ln in summary:
        print(ln)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
        return 1
    return 0


class _Tee(io.TextIOBase):
    """Writes to the real stdout and to a buffer."""

    def __init__(self, buf: io.StringIO):
        self.buf, self.out = buf, sys.stdout

    def write(self, s: str) -> int:
        self.buf.write(s)
        return self.out.write(s)

    def flush(self) -> None:
        self.out.flush()


if __name__ == "__main__":
    sys.exit(main())
