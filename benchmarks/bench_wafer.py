"""Wafer evaluation speed (issue 14 item 1): one evaluation, batches of configurations, a replica search, sweeps.

Figures (catalog loaded and imports warm unless said otherwise). The reference machine is shared by other jobs,
so every time is the CPU time of the process doing the work (``time.process_time``; for the whole-process sweep,
the child's user + system time from ``getrusage``), the minimum of repeats; on an idle machine it equals the wall
time, which is printed beside it.

* **single evaluation**: :func:`wseplan.plan.evaluate` on one configuration, Llama-3-70B decode on ``cs3x4`` at
  context 2,048, for each batch 1..32 (the setup built once); the median over the batches and the slowest.
  Target <= 0.5 ms (a GPU evaluation). Also :func:`wseplan.plan.plan` (setup included) at batch 8.
* **first ask**: the same questions (decode, and serving with 256 output tokens) asked for the first time on a built
  setup (:func:`first_asks`): the evaluation's memos hold nothing of them. Target <= 0.5 ms.
* **batched configurations**: one :func:`~wseplan.plan.evaluate` call on the 32 batches at once, and on 10,000
  random decode configurations (batch 1..32, context 512..32,768), amortised per configuration. Target <= 0.5 ms.
* **replica search**: ``wseplan.serving.serve("llama-70b", "cs3")``.
* **wafer sweep, evaluation only**: :func:`wseplan.sweep.evaluate_columns` on a serving sweep of Llama-3.1-8B and
  -70B on 2 and 4 CS-3 (batch x prompt x output length: 114,688 configurations; ``--quick``: 28,672),
  configurations/s. Target >= 1M/s.
* **wafer sweep, end to end**: the same sweep as one fresh ``wseplan sweep SPEC --out TMP -f json`` process
  (interpreter start to the renamed Parquet file), configurations/s. Target >= 300k/s.

Run ``python benchmarks/bench_wafer.py`` (or through ``python benchmarks/run.py --only wafer``).
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, figure, quick  # noqa: E402

TARGET_EVAL_S = 0.5e-3
TARGET_SWEEP_EVAL_PER_S = 1e6
TARGET_SWEEP_E2E_PER_S = 3e5
MODEL = "llama-70b"
TARGET = "cs3x4"
SWEEP = dict(name="bench-wafer", phase="serve", models=["llama-3.1-8b", "llama-3.1-70b"], targets=["cs3x2", "cs3x4"],
             batches=list(range(1, 1025)), contexts=[512, 1024, 2048, 4096, 8192, 16384, 32768],
             output_tokens=[64, 256, 1024, 4096])
SWEEP_QUICK = dict(SWEEP, models=["llama-3.1-70b"], targets=["cs3x4"])


_WALL: list[float] = []


def best_of(fn, repeats: int) -> float:
    """Least CPU time of ``repeats`` calls [s] (the least wall time goes to ``_WALL``)."""
    cpu, wall = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    _WALL.append(min(wall))
    return min(cpu)


def single_and_batched(cat) -> None:
    import numpy as np

    from wseplan.plan import evaluate, plan, setup

    reps = 3 if quick() else 7
    s = setup(MODEL, TARGET, phase="decode", catalog=cat)

    def one(b):
        return {"batch": np.array([float(b)]), "context": np.array([2048.0]), "output_tokens": np.zeros(1)}

    evaluate(s, one(1))
    per = [best_of(lambda b=b: evaluate(s, one(b)), reps) for b in range(1, 33)]
    fits = [bool(evaluate(s, one(b))["fits"][0]) for b in range(1, 33)]
    timed = [t for t, f in zip(per, fits) if f]
    figure(f"single wafer evaluation, {MODEL} decode on {TARGET}, batch 1-32 (median)", statistics.median(per) * 1e3, "ms",
           TARGET_EVAL_S * 1e3, higher_is_better=False,
           detail=f"{len(timed)} of 32 fit and are timed: median {statistics.median(timed) * 1e3:.3g} ms; slowest "
                  f"{max(per) * 1e3:.3g} ms; wall median {statistics.median(_WALL[-32:]) * 1e3:.3g} ms")
    first_asks(cat, 3 if quick() else 5)
    t = best_of(lambda: plan(MODEL, TARGET, phase="decode", batch=8, context=2048, catalog=cat), reps)
    print(f"  plan({MODEL!r}, {TARGET!r}, phase='decode', batch=8) with its setup: {t * 1e3:.3g} ms", flush=True)
    for ph, o in (("prefill", 0.0), ("serve", 256.0)):
        sp = setup(MODEL, TARGET, phase=ph, catalog=cat)
        c = {"batch": np.array([8.0]), "context": np.array([2048.0]), "output_tokens": np.array([o])}
        evaluate(sp, c)
        print(f"  single {ph} evaluation, batch 8: {best_of(lambda: evaluate(sp, c), reps) * 1e3:.3g} ms", flush=True)

    b32 = {"batch": np.arange(1.0, 33.0), "context": np.full(32, 2048.0), "output_tokens": np.zeros(32)}
    t32 = best_of(lambda: evaluate(s, b32), reps)
    figure("batched wafer evaluation, 32 configurations (batch 1-32) in one call, per configuration", t32 / 32 * 1e3, "ms",
           TARGET_EVAL_S * 1e3, higher_is_better=False, detail=f"{t32 * 1e3:.3g} ms the call")
    rng = np.random.default_rng(0)
    n = 10_000
    big = {"batch": rng.integers(1, 33, n).astype(float), "context": rng.choice([512.0, 2048.0, 8192.0, 32768.0], n),
           "output_tokens": np.zeros(n)}
    tb = best_of(lambda: evaluate(s, big), 1 if quick() else 3)
    figure(f"batched wafer evaluation, {n:,} random decode configurations, per configuration", tb / n * 1e3, "ms",
           TARGET_EVAL_S * 1e3, higher_is_better=False, detail=f"{n / tb:,.0f} configurations/s")
    sv = setup(MODEL, TARGET, phase="serve", catalog=cat)
    bigs = dict(big, output_tokens=rng.choice([64.0, 256.0, 1024.0], n))
    evaluate(sv, {k: v[:10] for k, v in bigs.items()})
    ts = best_of(lambda: evaluate(sv, bigs), 1 if quick() else 3)
    print(f"  the same {n:,} configurations served (with answer lengths 64-1,024): {ts / n * 1e3:.3g} ms per "
          f"configuration, {n / ts:,.0f} configurations/s", flush=True)


def first_asks(cat, reps: int) -> None:
    """The *first* ask of each configuration on a built setup (nothing of it remembered): a fresh setup per repeat,
    which answers one question (batch 1, context 1,024), then each batch 1..32 at context 2,048 once, in order (what
    an earlier batch left in the setup's memos stays); per batch the least CPU time over the repeats, then the median
    over the batches. Decode and serving (256 output tokens)."""
    import numpy as np

    from wseplan.plan import evaluate, setup

    for ph, o in (("decode", 0.0), ("serve", 256.0)):
        best = [np.inf] * 32
        for _ in range(reps):
            s = setup(MODEL, TARGET, phase=ph, catalog=cat)
            evaluate(s, {"batch": np.ones(1), "context": np.array([1024.0]), "output_tokens": np.array([o])})
            for b in range(1, 33):
                c = {"batch": np.array([float(b)]), "context": np.array([2048.0]), "output_tokens": np.array([o])}
                c0 = time.process_time()
                evaluate(s, c)
                best[b - 1] = min(best[b - 1], time.process_time() - c0)
        figure(f"first ask of a configuration, {MODEL} {ph} on {TARGET}, batch 1-32 (median)", statistics.median(best) * 1e3,
               "ms", TARGET_EVAL_S * 1e3, higher_is_better=False,
               detail=f"slowest {max(best) * 1e3:.3g} ms; least CPU time of {reps} fresh setups per batch")


def replica_search(cat) -> None:
    from wseplan.serving import serve

    serve(MODEL, "cs3", catalog=cat)
    t = best_of(lambda: serve(MODEL, "cs3", catalog=cat), 3)
    print(f"replica search serve({MODEL!r}, 'cs3'): {t:.3f} s ({_WALL[-1]:.3f} s wall)", flush=True)


def sweep_eval(cat, spec: dict) -> float:
    from wseplan import sweep as S

    plan = S.plan_sweep(S.parse_sweep(spec), cat)
    n = plan.size
    dt = best_of(lambda: S.evaluate_columns(plan), 1 if quick() else 2)
    figure(f"wafer sweep, evaluation only ({n:,} serving configurations, {len(spec['models'])} models x "
           f"{len(spec['targets'])} targets)", n / dt, "configurations/s", TARGET_SWEEP_EVAL_PER_S, higher_is_better=True,
           detail=f"{dt:.2f} s CPU, {_WALL[-1]:.2f} s wall")
    return n


def sweep_end_to_end(spec: dict) -> None:
    import json

    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "wafer.yaml"
        f.write_text(yaml.safe_dump(dict(spec, output="wafer.parquet")))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "wseplan.cli", "sweep", str(f), "--out", str(Path(tmp) / "out"),
                               "-f", "json"], capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"bench_wafer: sweep failed: {proc.stderr.strip()[-500:]}")
        n = json.loads(proc.stdout)["configurations"]
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    figure(f"wafer sweep, end to end (one `wseplan sweep` process, {n:,} configurations, Parquet)", n / cpu,
           "configurations/s", TARGET_SWEEP_E2E_PER_S, higher_is_better=True,
           detail=f"{cpu:.2f} s CPU, {wall:.2f} s wall, {n / wall:,.0f} configurations/s by wall time")


def main() -> None:
    from wseplan.catalog.load import load_catalog

    cat = load_catalog()
    print(f"load average {os.getloadavg()[0]:.2f} (times are CPU seconds of the working process)", flush=True)
    single_and_batched(cat)
    replica_search(cat)
    spec = SWEEP_QUICK if quick() else SWEEP
    sweep_eval(cat, spec)
    sweep_end_to_end(spec)


if __name__ == "__main__":
    main()
