"""Engines: evaluate a plan's tasks in this process or on a Dask distributed cluster."""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from . import evaluate as _evaluate
from .output import to_frame
from .plan import Plan, plan_sweep
from .schema import DEFAULT_CHUNK, Sweep, load_sweep

def evaluate_columns(plan: Plan, *, chunk: int = DEFAULT_CHUNK, progress=None) -> list[dict]:
    """Evaluate every task locally, in order (the array path; no DataFrame)."""
    groups = {g.index: g for g in plan.groups}
    parts = []
    for gi, s, e in plan.tasks(chunk):
        parts.append(_evaluate.evaluate_task(groups[gi], s, e))
        if progress is not None:
            progress(e - s)
    return parts


def _dask_task(g, s: int, e: int) -> dict:
    return _evaluate.evaluate_task(g, s, e)


def evaluate_dask(plan: Plan, *, scheduler: str | None = None, chunk: int = DEFAULT_CHUNK, client=None,
                  progress=None) -> list[dict]:
    """Evaluate the tasks on a Dask distributed cluster (``scheduler`` address, a given ``client``, or a local
    in-process cluster) and return their columns in task order."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("--engine dask: dask[distributed] is not installed; pip install 'wseplan[dask]'") from None
    own_client = own_cluster = None
    if client is None:
        if scheduler:
            try:
                client = own_client = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise InputError(f"--scheduler: cannot reach {scheduler!r} ({exc.__class__.__name__}); "
                                 "check the address (tcp://HOST:8786)") from None
        else:
            own_cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
            client = own_client = Client(own_cluster)
    try:
        groups = {g.index: g for g in plan.groups}
        tasks = plan.tasks(chunk)
        scattered = {gi: client.scatter(g, broadcast=True) for gi, g in groups.items()}
        futures = [client.submit(_dask_task, scattered[gi], s, e, pure=False) for gi, s, e in tasks]
        pos = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(futures)
        for fut in as_completed(futures):
            i = pos[fut.key]
            results[i] = fut.result()
            if progress is not None:
                progress(tasks[i][2] - tasks[i][1])
        return results
    finally:
        if own_client is not None:
            own_client.close()
        if own_cluster is not None:
            own_cluster.close()


def run_sweep(sweep: Sweep | str | Path, *, catalog=None, engine: str = "local", scheduler: str | None = None,
              chunk: int = DEFAULT_CHUNK, client=None, progress=None):
    """Evaluate a sweep and return its DataFrame (one row per configuration, in a fixed order)."""
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    if engine not in ("local", "dask"):
        raise InputError(f"--engine: unknown {engine!r}; use local or dask")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InputError(f"--chunk: must be a positive integer, got {chunk!r}")
    plan = plan_sweep(sweep, catalog)
    if engine == "dask":
        parts = evaluate_dask(plan, scheduler=scheduler, chunk=chunk, client=client, progress=progress)
    else:
        if scheduler:
            raise InputError("--scheduler: applies to --engine dask only")
        parts = evaluate_columns(plan, chunk=chunk, progress=progress)
    return to_frame(plan, parts)


