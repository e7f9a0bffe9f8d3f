"""``wseplan validate`` on a large file (issue 15: 1e6 rows in under 60 s, bounded memory).

The file is the bundled public validation set repeated until it has N rows, each copy with new ids
(``R001-000042``) and the measured value perturbed by a seeded factor in [0.5, 2] (so every row has its own
relative error), written to a temporary folder. Figures: wall time and peak RSS of a cold
``wseplan validate FILE --format csv`` (every row streamed to stdout, which goes to /dev/null) and of the
default table output (the per-category summary), against 60 s.

Run: ``python benchmarks/bench_validate.py`` (N = 1,000,000; ``WSEPLAN_BENCH_QUICK=1`` or ``--rows`` for fewer).
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from run import figure, quick  # noqa: E402

TARGET_S = 60.0


def make_file(path: Path, rows: int, seed: int = 15) -> int:
    """Write ``rows`` rows (the public set repeated, new ids, perturbed values) to ``path``; returns its bytes."""
    from wseplan.validate import default_cases_path

    with open(default_cases_path(), encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        base = [r for r in reader if r]
    i_id, i_val = header.index("id"), header.index("value")
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8", newline="") as out:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(header)
        n = 0
        copy = 0
        while n < rows:
            for r in base:
                if n >= rows:
                    break
                r2 = list(r)
                r2[i_id] = f"{r[i_id]}-{copy:06d}"
                r2[i_val] = repr(float(r[i_val]) * rng.uniform(0.5, 2.0))
                w.writerow(r2)
                n += 1
            copy += 1
    return path.stat().st_size


def run_cli(args: list[str]) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, exit status) of a cold ``wseplan`` run with stdout to /dev/null."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = Path(sys.executable).with_name("wseplan")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "wseplan.cli"]
    code = ("import resource, subprocess, sys, time; t=time.perf_counter(); "
            "r=subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
            "w=time.perf_counter()-t; "
            "m=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024; "
            "sys.stderr.write(r.stderr.decode()[-500:]); print(w, m, r.returncode)")
    out = subprocess.run([sys.executable, "-c", code, *cmd, *args], env=env, capture_output=True, text=True)
    if out.stderr.strip():
        sys.stderr.write(out.stderr)
    w, m, rc = out.stdout.split()
    return float(w), float(m), int(rc)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000 if quick() else 1_000_000)
    ap.add_argument("--keep", help="write the generated file here and keep it")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(a.keep) if a.keep else Path(d) / "validation-large.csv"
        t0 = time.perf_counter()
        size = make_file(path, a.rows)
        print(f"# generated {a.rows:,} rows ({size / 2**20:,.0f} MiB) in {time.perf_counter() - t0:.1f} s")
        ok = True
        for fmt in ("csv", "table"):
            wall, rss, rc = run_cli(["validate", str(path), "--format", fmt])
            if rc != 0:
                print(f"validate --format {fmt}: exit status {rc}")
                return 1
            target = TARGET_S * a.rows / 1_000_000
            ok &= figure(f"validate {a.rows:,} rows --format {fmt} (wall)", wall, "s", target, higher_is_better=False)
            print(f"validate {a.rows:,} rows --format {fmt}: peak RSS {rss:,.0f} MiB; "
                  f"{a.rows / wall:,.0f} rows/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
