"""Engines: evaluate a plan's tasks in this process or on a Dask distributed cluster, streaming to one file.

:func:`sweep_to_file` is what ``wseplan sweep`` runs. Every task (a contiguous slice of one group, see
:meth:`Plan.tasks`) is evaluated by :func:`wseplan.sweep.evaluate.evaluate_task`, encoded as a part
(:func:`~wseplan.sweep.output.encode_part`) and summarised (:func:`~wseplan.sweep.output.chunk_summary`); the
parts are joined in task order into the output file by :class:`~wseplan.sweep.writer.StreamWriter`. Memory is
that of the tasks in flight, never of the whole sweep.

* ``local``: one task after another in this process.
* ``dask``: each task runs on a worker, which evaluates it AND writes its part file into a folder beside the
  output (the folder must be on a file system the workers share with the client, as a cluster's home or
  scratch folder is; a worker that cannot see it sends the part's bytes back instead). The client only
  gathers per-task summaries and joins the parts in task order as they arrive. Without ``--scheduler`` the
  engine starts a local cluster of worker *processes* (one per usable core) bound to 127.0.0.1, with no
  dashboard unless asked, and with glibc's ``MALLOC_TRIM_THRESHOLD_`` cleared for the workers (Dask sets it to
  64 KiB by default, which makes every large numpy temporary an mmap/munmap pair: issue 16 measured 26.9 instead
  of 8.2 CPU-s for the same wafer sweep). With ``--scheduler tcp://HOST:PORT`` it connects to a running
  ``dask scheduler`` (after checking, with a timeout, that the address answers as one) and uses its workers.

Both engines give the same bytes: the parts, their order and the joining are the same. Failures are one line
(:class:`~wseplan.errors.InputError`), never a traceback or a hang: a wrong, unreachable or non-Dask scheduler
address, an unsupported protocol, no workers, a task that kills its workers, losing all workers or the
scheduler. A lost worker's tasks are re-run by Dask on the others (parts are written atomically and
idempotently, so a re-run gives the same bytes). Connecting to and starting clusters is
:mod:`wseplan.sweep.dask_cluster`.
"""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, WseplanError
from . import evaluate as _evaluate
from .dask_cluster import (_dask_error, _distributed, _n_workers, _one_line, _quiet, connect,  # noqa: F401
                           local_cluster, parse_scheduler_address, probe_scheduler, usable_cores)
from .output import (OUTPUT_BYTES_PER_CONFIGURATION, chunk_summary, csv_part_buffers, encode_part, merge_summaries,
                     output_format, output_spec, to_frame)
from .plan import Plan, default_chunk, plan_sweep
from .schema import SCHEMA_VERSION, Sweep, load_sweep
from .writer import StreamWriter, check_target

# =============================================================================================
# Memory and size limits
# =============================================================================================
#: peak working memory of one evaluate_task (tracemalloc, numpy included), by device kind: a fixed part (wafer:
#: the per-layer stage partition of the model) plus a part per configuration; measured ~0.5 KB per GPU
#: configuration and ~9 KB per wafer configuration (+28 MiB for Llama-3.1-70B), and held by tests/test_sweep.py
EVAL_TASK_BYTES = {"gpu": 4 << 20, "wafer": 64 << 20}
EVAL_BYTES_PER_CONFIGURATION = {"gpu": 1_024, "wafer": 12_288}
#: memory per configuration of run_sweep's DataFrame path: the task columns, their concatenation and the frame
#: (measured ~840 bytes; the frame itself keeps ~210)
FRAME_BYTES_PER_CONFIGURATION = 1_024
#: client memory per task while streaming (row-group footer, summary, Dask future)
TASK_BYTES = 16_384
#: a Parquet row-group ordinal is a 16-bit integer
MAX_ROW_GROUPS = 32_767
#: fraction of the available memory a sweep may plan to use
MEMORY_FRACTION = 0.8


def available_memory_bytes() -> int | None:
    """Memory this process may still use: the smaller of MemAvailable and the cgroup's limit minus its usage."""
    vals = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    vals.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    for limit_f, usage_f in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                             ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_f).read_text().strip()
            if limit != "max" and int(limit) < 1 << 60:
                vals.append(max(int(limit) - int(Path(usage_f).read_text().strip()), 0))
            break
        except (OSError, ValueError):
            continue
    if not vals and hasattr(os, "sysconf"):
        try:
            vals.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            pass
    return min(vals) if vals else None


def _gib(n: float) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n:,.0f} bytes"


def task_memory_bytes(kind: str, n: int) -> int:
    """Planned working memory of evaluating ``n`` configurations of a ``kind`` ("gpu"/"wafer") group at once."""
    return EVAL_TASK_BYTES[kind] + n * EVAL_BYTES_PER_CONFIGURATION[kind]


def _task_bytes(plan: Plan, chunk: int | None) -> tuple[int, int]:
    """(largest task's working memory, its configurations)."""
    worst = (0, 0)
    for g in plan.groups:
        c = chunk or default_chunk(g)
        n = -(-g.size // -(-g.size // c))
        worst = max(worst, (task_memory_bytes(g.target.kind, n), n))
    return worst


def check_limits(plan: Plan, *, chunk: int | None = None, parallel: int = 1, fmt: str | None = None,
                 out_dir: str | Path | None = None, in_memory: bool = False, available: int | None = None) -> None:
    """Refuse, in one line naming the size and the limit, a sweep this machine cannot hold or store.

    Streaming keeps ``parallel`` tasks in memory (:func:`task_memory_bytes` each) plus
    :data:`TASK_BYTES` per task; ``in_memory`` (``run_sweep``'s DataFrame) adds
    :data:`FRAME_BYTES_PER_CONFIGURATION` per configuration. The output file needs
    ``OUTPUT_BYTES_PER_CONFIGURATION`` per configuration of free disk.
    """
    avail = available_memory_bytes() if available is None else available
    size = plan.size
    budget = None if avail is None else avail * MEMORY_FRACTION
    if in_memory and budget is not None and size * FRAME_BYTES_PER_CONFIGURATION + _task_bytes(plan, chunk)[0] > budget:
        limit = max(int((budget - _task_bytes(plan, chunk)[0]) // FRAME_BYTES_PER_CONFIGURATION), 0)
        raise InputError(f"sweep: {size:,} configurations need ~{_gib(size * FRAME_BYTES_PER_CONFIGURATION)} as one "
                         f"DataFrame ({FRAME_BYTES_PER_CONFIGURATION} bytes each), over the limit of {limit:,} that "
                         f"{_gib(avail)} of available memory allows; write them to a file with `wseplan sweep` "
                         "(it streams) or shrink an axis")
    need, n = _task_bytes(plan, chunk)
    if budget is not None and need * parallel > budget:
        raise InputError(f"--chunk: tasks of {n:,} configurations need ~{_gib(need)} each"
                         + (f" x {parallel} at once" if parallel > 1 else "")
                         + f", more than the {_gib(avail)} of available memory allows; use a smaller --chunk")
    ntasks = plan.num_tasks(chunk)
    if fmt == "parquet" and ntasks > MAX_ROW_GROUPS:
        raise InputError(f"--chunk: {ntasks:,} tasks exceed the limit of {MAX_ROW_GROUPS:,} row groups in a Parquet "
                         f"file; use --chunk {math.ceil(size / MAX_ROW_GROUPS):,} or larger")
    if budget is not None and ntasks * TASK_BYTES > budget:
        raise InputError(f"--chunk: {ntasks:,} tasks need ~{_gib(ntasks * TASK_BYTES)} of bookkeeping, more than the "
                         f"{_gib(avail)} of available memory allows; use a larger --chunk")
    if fmt is not None and out_dir is not None:
        where = Path(out_dir).absolute()
        while not where.exists() and where != where.parent:
            where = where.parent
        try:
            free = shutil.disk_usage(where).free
        except OSError:
            return
        per = OUTPUT_BYTES_PER_CONFIGURATION[fmt]
        if size * per > free:
            raise InputError(f"sweep: {size:,} configurations need ~{_gib(size * per)} of {fmt.upper()} (~{per} bytes "
                             f"each), more than the {_gib(free)} free in {where} (a limit of {free // per:,}); free "
                             "space, choose another --out or shrink an axis")


def _check_engine_args(engine: str, chunk, scheduler, workers) -> None:
    if engine not in ("local", "dask"):
        raise InputError(f"--engine: unknown {engine!r}; use local or dask")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise InputError(f"--chunk: must be a positive integer, got {chunk!r}")
    if scheduler and engine != "dask":
        raise InputError("--scheduler: applies to --engine dask only")
    if workers is not None:
        if engine != "dask" or scheduler:
            raise InputError("--workers: applies to --engine dask without --scheduler (a local cluster) only")
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
            raise InputError(f"--workers: must be an integer from 1 to 256, got {workers!r}")


# =============================================================================================
# Results
# =============================================================================================
@dataclass(frozen=True)
class SweepResult:
    """What :func:`sweep_to_file` wrote: the file, its size, the counts and the per-group summary rows."""

    path: Path
    configurations: int
    fitting: int
    groups: list
    output_bytes: int
    engine: str
    tasks: int


def sweep_to_file(plan: Plan, out_dir: str | Path, name: str, *, engine: str = "local", scheduler: str | None = None,
                  chunk: int | None = None, workers: int | None = None, dashboard: str | None = None, client=None,
                  progress=None, connect_timeout_s: float = 10.0, worker_timeout_s: float = 60.0,
                  malloc_trim_threshold: str | None = None) -> SweepResult:
    """Evaluate every configuration of ``plan`` and stream the rows into ``out_dir/name`` (atomically).

    ``engine`` local or dask (``scheduler`` address, a given ``client``, or a local cluster of ``workers``
    processes); ``chunk`` configurations per task (default per group: :func:`~wseplan.sweep.plan.default_chunk`);
    ``progress(n)`` is called as tasks finish. ``malloc_trim_threshold`` sets glibc's ``MALLOC_TRIM_THRESHOLD_``
    in a local cluster's workers (default: unset; the benchmark passes Dask's 65536 to measure its cost).
    """
    _check_engine_args(engine, chunk, scheduler, workers)
    check_target(out_dir, name)
    spec = output_spec(plan, name)
    local_cluster_ = engine == "dask" and client is None and not scheduler
    parallel = (workers or usable_cores()) if local_cluster_ else 1
    check_limits(plan, chunk=chunk, parallel=parallel, fmt=spec.fmt, out_dir=out_dir)
    tasks = plan.tasks(chunk)

    def open_writer() -> StreamWriter:  # only once the engine is ready: a failed connection leaves --out untouched
        return StreamWriter(out_dir, name, spec)

    if engine == "local":
        with open_writer() as writer:
            summaries = _run_local(plan, tasks, spec, writer, progress)
            path = writer.commit()
    else:
        summaries, path = _run_dask(plan, tasks, spec, open_writer, scheduler=scheduler, client=client,
                                    workers=parallel, dashboard=dashboard, progress=progress,
                                    connect_timeout_s=connect_timeout_s, worker_timeout_s=worker_timeout_s,
                                    malloc_trim_threshold=malloc_trim_threshold)
    rows = merge_summaries(plan, summaries)
    return SweepResult(path=path, configurations=plan.size, fitting=sum(r["fitting"] for r in rows), groups=rows,
                       output_bytes=path.stat().st_size, engine=engine, tasks=len(tasks))


# =============================================================================================
# Local engine
# =============================================================================================
def _run_local(plan: Plan, tasks, spec, writer: StreamWriter, progress) -> list[dict]:
    groups = {g.index: g for g in plan.groups}
    summaries = []
    for gi, s, e in tasks:
        cols = _evaluate.evaluate_task(groups[gi], s, e)
        summaries.append(chunk_summary(cols))
        parts = csv_part_buffers(spec, cols) if spec.fmt == "csv" else [encode_part(spec, cols)]
        del cols
        for part in parts:
            writer.add_bytes(part)
        del parts
        if progress is not None:
            progress(e - s)
    return summaries


def evaluate_columns(plan: Plan, *, chunk: int | None = None, progress=None) -> list[dict]:
    """Evaluate every task locally, in order, and return their columns (the array path; no file, no frame)."""
    groups = {g.index: g for g in plan.groups}
    parts = []
    for gi, s, e in plan.tasks(chunk):
        parts.append(_evaluate.evaluate_task(groups[gi], s, e))
        if progress is not None:
            progress(e - s)
    return parts


# =============================================================================================
# Dask engine
# =============================================================================================
def _sees(parts_dir: str | None) -> bool:
    """Whether this worker sees the client's part folder (the same file system)."""
    return bool(parts_dir) and os.path.isdir(parts_dir)


def _dask_part(g, start: int, stop: int, index: int, spec, parts_dir: str | None) -> dict:
    """One task on a worker: evaluate, summarise, encode; write the part file into ``parts_dir`` when this worker
    sees that folder (a shared file system), else return the part's bytes."""
    cols = _evaluate.evaluate_task(g, start, stop)
    summary = chunk_summary(cols)
    data = encode_part(spec, cols)
    del cols
    if _sees(parts_dir):
        path = os.path.join(parts_dir, f"part-{index:06d}.{spec.fmt}")
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)  # a re-run (after a lost worker) replaces it with the same bytes
        return {"summary": summary, "path": path, "data": None, "rows": stop - start}
    return {"summary": summary, "path": None, "data": data, "rows": stop - start}


def _run_dask(plan: Plan, tasks, spec, open_writer, *, scheduler, client, workers, dashboard, progress,
              connect_timeout_s, worker_timeout_s, malloc_trim_threshold) -> tuple[list[dict], Path]:
    dist = _distributed()
    owned = []
    where = scheduler or "the local cluster"
    with _quiet():
        try:
            if client is None:
                if scheduler:
                    client = connect(scheduler, connect_timeout_s)
                    owned.append(client)
                    where = client.scheduler.address
                else:
                    try:
                        cluster = local_cluster(workers, dashboard, malloc_trim_threshold=malloc_trim_threshold)
                    except WseplanError:
                        raise
                    except Exception as exc:  # noqa: BLE001
                        raise InputError(f"--engine dask: the local cluster did not start ({exc.__class__.__name__}: "
                                         f"{_one_line(exc)[:120]}); from a Python script, run wseplan under `if "
                                         "__name__ == '__main__':` (the workers are spawned processes)") from None
                    owned.append(cluster)
                    client = dist.Client(cluster, set_as_default=False)
                    owned.insert(0, client)
            if scheduler is None:
                with contextlib.suppress(Exception):
                    where = client.scheduler.address or where
            try:
                client.wait_for_workers(1, timeout=worker_timeout_s)
            except (TimeoutError, dist.TimeoutError):
                raise InputError(f"--engine dask: no workers joined the scheduler at {where} within "
                                 f"{worker_timeout_s:g} s; start some with `dask worker {where}`") from None
            groups = {g.index: g for g in plan.groups}
            token = uuid.uuid4().hex[:12]
            # each group as a task of its own (not scattered data): the scheduler keeps its recipe, so a group lost
            # with the worker that held it is made again and the sweep tasks that need it are retried, not cancelled
            group_futs = {gi: client.submit(_same, groups[gi], key=f"wseplan-group-{token}-{gi}", pure=False)
                          for gi in sorted({gi for gi, _, _ in tasks})}
            with open_writer() as writer:
                parts_dir = str(writer.parts_dir())
                futures = [client.submit(_dask_part, group_futs[gi], s, e, i, spec, parts_dir, pure=False,
                                         key=f"wseplan-sweep-{token}-{i:06d}", priority=-i)
                           for i, (gi, s, e) in enumerate(tasks)]
                try:
                    summaries = _gather_in_order(dist, client, futures, writer, progress, where, connect_timeout_s,
                                                 worker_timeout_s)
                except BaseException:
                    with contextlib.suppress(Exception):
                        client.cancel(futures + list(group_futs.values()))
                    raise
                return summaries, writer.commit()
        except (WseplanError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - every other failure of the cluster is one line
            raise _dask_error(dist, exc, where) from None
        finally:
            for obj in owned:
                with contextlib.suppress(Exception):
                    obj.close(timeout=5) if obj.__class__.__name__ == "Client" else obj.close()


def _same(x):
    """The argument itself: a task whose result is a sweep group (:func:`_run_dask`)."""
    return x


def _gather_in_order(dist, client, futures, writer: StreamWriter, progress, where, connect_timeout_s,
                     worker_timeout_s) -> list[dict]:
    """Wait for the futures, join their parts in task order as soon as each next one is there, and watch the
    cluster: no workers for ``worker_timeout_s`` or no scheduler for ``connect_timeout_s`` ends the run."""
    index = {f.key: i for i, f in enumerate(futures)}
    pending = set(futures)
    ready: dict[int, dict] = {}
    summaries: list = [None] * len(futures)
    nxt = 0
    no_workers_since = disconnected_since = None
    last_check = 0.0
    while nxt < len(futures):
        done = [f for f in pending if f.done()]
        if not done:
            time.sleep(0.02)
        for f in done:
            pending.discard(f)
            res = f.result()  # raises the task's exception, KilledWorker or a cancellation
            i = index[f.key]
            if res["data"] is not None and i != nxt:  # a worker without the shared folder, ahead of order:
                path = writer.parts_dir() / f"part-{i:06d}.recv"  # keep it on disk, not in memory
                try:
                    path.write_bytes(res["data"])
                except OSError as exc:
                    raise InputError(f"output: cannot write {path}: {exc.strerror or exc}") from None
                res = dict(res, data=None, path=str(path))
            ready[i] = res
            f.release()
        while nxt in ready:
            res = ready.pop(nxt)
            summaries[nxt] = res["summary"]
            if res["path"] is not None:
                writer.add_file(res["path"])
            else:
                writer.add_bytes(res["data"])
            if progress is not None:
                progress(res["rows"])
            nxt += 1
        now = time.monotonic()
        if done or now - last_check < 2.0:
            continue
        last_check = now
        if client.status not in ("running", "connecting", "newly-created"):
            raise InputError(f"--engine dask: lost the connection to the scheduler at {where}; check that it is "
                             "running and run again")
        if client.status != "running":
            disconnected_since = disconnected_since or now
            if now - disconnected_since > connect_timeout_s:
                raise InputError(f"--engine dask: lost the connection to the scheduler at {where} for "
                                 f"{connect_timeout_s:g} s; check that it is running and run again")
            continue
        disconnected_since = None
        n = _n_workers(client)
        if n == 0:
            no_workers_since = no_workers_since or now
            if now - no_workers_since > worker_timeout_s:
                raise InputError(f"--engine dask: no workers left on the scheduler at {where} for "
                                 f"{worker_timeout_s:g} s; start workers (`dask worker {where}`) and run again")
        else:
            no_workers_since = None
    return summaries


# =============================================================================================
# The Python API: a DataFrame
# =============================================================================================
def run_sweep(sweep: Sweep | str | Path, *, catalog=None, engine: str = "local", scheduler: str | None = None,
              chunk: int | None = None, client=None, progress=None, workers: int | None = None, **dask_options):
    """Evaluate a sweep and return its DataFrame (one row per configuration, in a fixed order).

    The whole table is held in memory (about ``FRAME_BYTES_PER_CONFIGURATION`` bytes per configuration; a
    sweep over what the available memory allows is refused in one line); ``wseplan sweep`` streams to a file
    instead. With ``engine="dask"`` the rows are written by the workers to a temporary Parquet file, exactly as
    ``wseplan sweep --engine dask`` does, and read back.
    """
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    _check_engine_args(engine, chunk, scheduler, workers)
    plan = plan_sweep(sweep, catalog)
    check_limits(plan, chunk=chunk, in_memory=True)
    if engine == "local":
        return to_frame(plan, evaluate_columns(plan, chunk=chunk, progress=progress))
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="wseplan-sweep-") as tmp:
        res = sweep_to_file(plan, tmp, "sweep.parquet", engine=engine, scheduler=scheduler, chunk=chunk,
                            workers=workers, client=client, progress=progress, **dask_options)
        df = pd.read_parquet(res.path)
    df.attrs.update(schema_version=SCHEMA_VERSION, sweep=plan.sweep.name, skipped=list(plan.skipped))
    return df


__all__ = ["EVAL_BYTES_PER_CONFIGURATION", "EVAL_TASK_BYTES", "task_memory_bytes", "FRAME_BYTES_PER_CONFIGURATION", "SweepResult", "available_memory_bytes",
           "check_limits", "connect", "evaluate_columns", "local_cluster", "output_format", "parse_scheduler_address",
           "probe_scheduler", "run_sweep", "sweep_to_file"]
