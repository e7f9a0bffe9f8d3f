"""Sweeps: the cartesian product of models x targets x precisions x batches x contexts x parallel layouts,
every configuration through fit, time and cost, evaluated as numpy arrays.

A sweep file (``SWEEP.yaml``, :class:`Sweep`) names the axes. :func:`plan_sweep` resolves them into *groups*
(one per model x target x precision) and cuts each group's configurations into *tasks* (contiguous chunks of
the group's batch x context x output-tokens x layout grid, C order). :func:`evaluate_task` evaluates one task
with array arithmetic only: Python loops over groups and tasks, over the values of a few small axes where an
underlying model takes a scalar (the training sequence length, GPU ZeRO stage x recompute for memory), over
the layers of a model (partitions) and over candidate region sides, never once per configuration.
:func:`run_sweep` runs the tasks locally or on a Dask distributed cluster and concatenates them in task order,
so both engines give the same rows.

Per configuration (columns documented in ``docs/cli-output.md``):

* **fit** - per-device bytes of the fullest device, usable capacity, ``fits`` (GPUs:
  :func:`wseplan.fit.gpu_layout_memory`; wafers: the stage partition of :func:`wseplan.fit.fit`, computed for
  all configurations at once by a batched form of the same dynamic program);
* **time** - step, TTFT, TPOT, tokens/s, bottleneck (GPUs: :func:`wseplan.analytic.gpu_time.forward_pass_time_s`
  and :func:`~wseplan.analytic.gpu_time.train_step`, composed exactly as :func:`wseplan.analytic.gpu_time.predict`;
  wafers: the closed forms of :mod:`wseplan.analytic.wse_time` and :func:`wseplan.analytic.stream.training_step_time_s`,
  composed as :func:`wseplan.analytic.wse_time.predict` and :func:`wseplan.analytic.stream.plan_stream`);
* **cost** - $/hour, $/M tokens or $/run, J/token (:func:`wseplan.analytic.cost.deployment_cost`,
  :func:`~wseplan.analytic.cost.serving_cost`, :func:`~wseplan.analytic.cost.training_cost` at the nominal
  value of every input, after the sweep's ``set`` overrides).

``tests/test_sweep.py`` holds sampled rows to the scalar APIs (``wseplan.timing.predict_time``,
``wseplan.fit.fit``) within a relative 1e-9.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import InputError, validation_detail

SCHEMA_VERSION = 1
PHASES = ("train", "prefill", "decode")
RECOMPUTE = ("none", "selective", "full")
from .devices.base import BOTTLENECKS  # noqa: E402  (every bottleneck name a row can carry; a fixed list keeps frames identical)
DEFAULT_CHUNK = 1 << 17
MAX_CONFIGURATIONS = 10**8
#: the CLI shows a progress bar (on a terminal) from this many configurations
PROGRESS_MIN_CONFIGURATIONS = 200_000


# =============================================================================================
# Schema
# =============================================================================================
def _positive_unique(v: list[int], what: str) -> list[int]:
    if any(isinstance(x, bool) or x <= 0 for x in v):
        raise ValueError(f"every {what} must be a positive integer")
    return list(dict.fromkeys(v))


class Layouts(BaseModel):
    """GPU parallel layouts to sweep; an omitted axis takes every sensible value for the target's count."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_parallel: list[int] | None = Field(default=None, min_length=1)
    pipeline_parallel: list[int] | None = Field(default=None, min_length=1)
    data_parallel: list[int] | None = Field(default=None, min_length=1)
    micro_batch: list[int] | None = Field(default=None, min_length=1)
    recompute: list[Literal["none", "selective", "full"]] | None = Field(default=None, min_length=1)
    zero_stage: list[Literal[0, 1, 2, 3]] | None = Field(default=None, min_length=1)

    @field_validator("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch")
    @classmethod
    def _pos(cls, v):
        return None if v is None else _positive_unique(v, "layout value")

    @field_validator("recompute", "zero_stage")
    @classmethod
    def _uniq(cls, v):
        return None if v is None else list(dict.fromkeys(v))


class Sweep(BaseModel):
    """A sweep file (frozen, ``extra="forbid"``: a misspelt key fails loudly)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    phase: Literal["train", "prefill", "decode", "serve"]
    models: list[str] = Field(min_length=1)
    targets: list[str] = Field(min_length=1)
    precisions: list[str] = Field(default=["bf16"], min_length=1)
    batches: list[int] = Field(min_length=1)
    contexts: list[int] = Field(min_length=1)
    output_tokens: list[int] | None = Field(default=None, min_length=1)
    layouts: Layouts = Layouts()
    train_tokens: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    set: dict[str, float] = {}
    output: str | None = None

    @field_validator("batches", "contexts", "output_tokens")
    @classmethod
    def _pos(cls, v):
        if v is None:
            return v
        from .workload import MAX_BATCH, MAX_CONTEXT

        v = _positive_unique(v, "value")
        if max(v) > min(MAX_BATCH, MAX_CONTEXT):
            raise ValueError(f"values must be at most {min(MAX_BATCH, MAX_CONTEXT)}")
        return v

    @field_validator("models", "targets", "precisions")
    @classmethod
    def _names(cls, v):
        if any(not isinstance(x, str) or not x.strip() for x in v):
            raise ValueError("every entry must be a non-empty name")
        return list(dict.fromkeys(x.strip() for x in v))

    @field_validator("set")
    @classmethod
    def _finite(cls, v):
        if any(not math.isfinite(x) for x in v.values()):
            raise ValueError("every value must be a finite number")
        return v

    @model_validator(mode="after")
    def _phase_fields(self):
        if self.output_tokens is not None and self.phase not in ("decode", "serve"):
            raise ValueError(f"output_tokens applies to phase serve (or decode) only, not {self.phase}; remove it")
        if self.output_tokens is None and self.phase == "serve":
            raise ValueError("phase serve needs output_tokens (generated tokens per request); add it")
        if self.train_tokens is not None and self.phase != "train":
            raise ValueError("train_tokens applies to phase train only; remove it")
        lo = self.layouts
        if self.phase != "train" and (lo.micro_batch or lo.recompute or lo.zero_stage):
            raise ValueError("layouts: micro_batch, recompute and zero_stage apply to phase train only")
        return self

    def output_name(self) -> str:
        """The output file name: ``output`` (or ``<name>.csv``) reduced to a safe name inside the output folder."""
        from .report.atomic import safe_filename

        raw = self.output if self.output is not None else f"{self.name}.csv"
        base = safe_filename(Path(str(raw).replace("\\", "/")).name, default=safe_filename(self.name, default="sweep"))
        if not base.endswith((".csv", ".parquet")):
            base = f"{base}.csv"
        return base


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file; a malformed one raises a one-line :class:`InputError` naming the field."""
    from .catalog.load import read_yaml
    from .errors import CatalogError

    p = Path(path)
    if not p.is_file():
        raise InputError(f"sweep: file {p} not found; check the path")
    try:
        data = read_yaml(p)
    except CatalogError as exc:
        raise InputError(f"sweep: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"sweep: {p}: top level must be a mapping with keys name, phase, models, targets, batches, contexts")
    return parse_sweep(data, where=str(p))


def parse_sweep(data: dict, *, where: str = "sweep") -> Sweep:
    """Validate a sweep mapping (as read from YAML)."""
    try:
        return Sweep.model_validate(data)
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        loc = loc or "(top level)"
        raise InputError(f"sweep: {where}: {loc}: {msg}") from None


# =============================================================================================
# Plan: groups and tasks
# =============================================================================================
@dataclass(frozen=True)
class Group:
    """One model x target x precision with everything its tasks need (picklable, for Dask workers)."""

    index: int
    model_name: str
    model: object
    target: object
    precision: str
    phase: str
    batches: np.ndarray
    contexts: np.ndarray
    outputs: np.ndarray  # 0 means "one decode step" (no output_tokens)
    layouts: dict  # name -> array (GPU); empty dict for wafers
    params: dict  # nominal cost inputs
    train_tokens: float | None
    catalog: object = field(repr=False, default=None)

    @property
    def shape(self) -> tuple[int, ...]:
        nl = len(next(iter(self.layouts.values()))) if self.layouts else 1
        return (len(self.batches), len(self.contexts), len(self.outputs), nl)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class Plan:
    sweep: Sweep
    groups: list[Group]
    skipped: list[str]

    @property
    def size(self) -> int:
        return sum(g.size for g in self.groups)

    def tasks(self, chunk: int = DEFAULT_CHUNK) -> list[tuple[int, int, int]]:
        """(group index, start, stop) for every chunk of every group, in output order."""
        out = []
        for g in self.groups:
            for s in range(0, g.size, chunk):
                out.append((g.index, s, min(s + chunk, g.size)))
        return out


def _gpu_layouts(sweep: Sweep, model, target, catalog) -> dict:
    """Flat arrays of the GPU layouts of one target: tp, pp, dp (x micro-batch, recompute, ZeRO for training)."""
    lo = sweep.layouts
    gpu = target.device
    n = target.count
    domain = int(gpu.scale_up_domain_gpus.si)
    limit = domain if domain > 8 else min(domain, int(catalog.defaults.gpu_max_tensor_parallel.si))
    heads = model.num_heads
    if lo.tensor_parallel is not None:
        tps = lo.tensor_parallel
    else:
        tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= limit and heads % t == 0 and (n is None or n % t == 0)]
    if lo.pipeline_parallel is not None:
        pps = lo.pipeline_parallel
    elif n is None:
        pps = [1]
    else:
        pps = [p for p in range(1, model.num_layers + 1) if n % p == 0]
    if lo.data_parallel is not None:
        dps = lo.data_parallel
    elif n is None:
        dps = [1]
    else:
        dps = None  # n / (tp pp)
    T, P = (a.ravel() for a in np.meshgrid(np.asarray(tps, float), np.asarray(pps, float), indexing="ij"))
    if dps is None:
        D = n / (T * P)
        keep = np.abs(D - np.round(D)) < 1e-9
        T, P, D = T[keep], P[keep], np.round(D[keep])
    else:
        i, dv = (a.ravel() for a in np.meshgrid(np.arange(len(T)), np.asarray(dps, float), indexing="ij"))
        T, P, D = T[i], P[i], dv
        if n is not None:
            keep = T * P * D == n
            T, P, D = T[keep], P[keep], D[keep]
    if len(T) == 0:
        raise InputError(f"layouts: no tensor x pipeline x data layout of {target.text} uses exactly {n} GPUs; "
                         "change layouts or the target's count")
    out = {"tp": T, "pp": P, "dp": D}
    if sweep.phase == "train":
        mbs = np.asarray(lo.micro_batch or [1], float)
        rcs = np.asarray([RECOMPUTE.index(r) for r in (lo.recompute or ["selective"])], float)
        zss = np.asarray(lo.zero_stage if lo.zero_stage is not None else [1], float)
        i, m_, r_, z_ = (a.ravel() for a in np.meshgrid(np.arange(len(T)), mbs, rcs, zss, indexing="ij"))
        out = {"tp": T[i], "pp": P[i], "dp": D[i], "micro_batch": m_, "recompute": r_, "zero_stage": z_}
    return out


def plan_sweep(sweep: Sweep, catalog=None, *, prices=None) -> Plan:
    """Resolve models, targets and cost inputs into groups; raise a one-line InputError for a bad name."""
    from .analytic.cost import load_prices, nominal
    from .catalog.load import load_catalog
    from .catalog.schema import Model
    from .costing import params_for
    from .plan import setup
    from .targets import parse_target
    from .workload import BYTES_PER_ELEMENT, resolve_model

    cat = catalog or load_catalog()
    prices = prices or load_prices(catalog=cat)
    models = []
    for name in sweep.models:
        try:
            m = resolve_model(name, cat)
        except InputError as exc:
            raise InputError(f"models: {exc}") from None
        if not isinstance(m, Model):
            raise InputError(f"models: {name!r} is a layer list; sweeps need transformer architectures")
        models.append((name, m))
    targets = []
    for text in sweep.targets:
        try:
            targets.append(parse_target(text, cat))
        except InputError as exc:
            raise InputError(f"targets: {exc}") from None
    for p in sweep.precisions:
        if p not in BYTES_PER_ELEMENT:
            raise InputError(f"precisions: unknown {p!r}; use one of {', '.join(BYTES_PER_ELEMENT)}")
    for t in targets:
        if t.kind == "gpu" and sweep.phase == "train" and t.count is None:
            raise InputError(f"targets: GPU training needs a GPU count, e.g. {t.key}x64 (got {t.text!r})")
    groups: list[Group] = []
    skipped: list[str] = []
    outputs = np.asarray(sweep.output_tokens or [0], dtype=float)
    batches = np.asarray(sweep.batches, dtype=float)
    contexts = np.asarray(sweep.contexts, dtype=float)
    phase = "serve" if sweep.output_tokens else sweep.phase
    for mname, m in models:
        for t in targets:
            lay = _gpu_layouts(sweep, m, t, cat) if t.kind == "gpu" else {}
            params = None
            for p in sweep.precisions:
                try:
                    t.device.peak_flop_per_s(p)
                except (ValueError, KeyError):
                    skipped.append(f"{t.key} has no {p} rate: {mname} x {t.text} x {p} skipped")
                    continue
                if params is None:
                    try:
                        params = params_for(setup(m, t, phase=phase, precision=p, catalog=cat), prices,
                                            overrides=sweep.set)
                    except InputError as exc:
                        raise InputError(f"set: {str(exc).removeprefix('--set: ')}") from None
                groups.append(Group(index=len(groups), model_name=mname, model=m, target=t, precision=p,
                                    phase=phase, batches=batches, contexts=contexts, outputs=outputs,
                                    layouts=lay, params=nominal(params), train_tokens=sweep.train_tokens, catalog=cat))
    plan = Plan(sweep=sweep, groups=groups, skipped=skipped)
    if not groups:
        raise InputError("precisions: no target supports any of the sweep's precisions; choose others")
    if plan.size > MAX_CONFIGURATIONS:
        raise InputError(f"sweep: {plan.size:,} configurations exceed the limit of {MAX_CONFIGURATIONS:,}; shrink an axis")
    return plan


# =============================================================================================
# Evaluation of one task
# =============================================================================================
def _config_arrays(g: Group, start: int, stop: int) -> dict:
    idx = np.arange(start, stop)
    ib, ic, io, il = np.unravel_index(idx, g.shape)
    out = {"batch": g.batches[ib], "context": g.contexts[ic], "output_tokens": g.outputs[io]}
    for k, a in g.layouts.items():
        out[k] = a[il]
    return out


_SETUPS: dict = {}


def group_setup(g: Group):
    """The planning chain's setup of a group (built once per process; groups travel to Dask workers)."""
    from .plan import setup

    key = (g.index, g.model_name, g.target.text, g.precision, g.phase, id(g.catalog))
    if key not in _SETUPS:
        _SETUPS[key] = setup(g.model, g.target, phase=g.phase, precision=g.precision, catalog=g.catalog)
    return _SETUPS[key]


def evaluate_task(g: Group, start: int, stop: int) -> dict:
    """Columns (name -> numpy array) of configurations ``[start, stop)`` of group ``g``: one call of the planning
    chain (:func:`wseplan.plan.evaluate`) on the chunk and the cost of its rows (:func:`wseplan.costing.cost_columns`);
    rows that do not fit keep ``fits=False`` and blank metrics."""
    from .costing import cost_columns, num_systems
    from .plan import evaluate

    cfg = _config_arrays(g, start, stop)
    s = group_setup(g)
    if g.target.kind == "gpu" and g.phase == "train":
        cfg.setdefault("vpp", np.ones(len(cfg["batch"])))
    arr = evaluate(s, cfg)
    cost = cost_columns(s, arr, g.params, train_tokens=g.train_tokens)
    n = len(cfg["batch"])
    res = {k: arr[k] for k in ("num_devices", "per_device_bytes", "capacity_bytes", "fits", "step_s", "ttft_s", "tpot_s",
                               "tokens_per_s", "tokens_per_s_per_user", "bottleneck")}
    res["num_systems"] = num_systems(s, arr["num_devices"])
    pick = {"train": ("usd_per_mtok_trained", "energy_j_per_train_token"),
            "prefill": ("input_usd_per_mtok", "energy_j_per_input_token")}.get(g.phase,
                                                                              ("output_usd_per_mtok", "energy_j_per_output_token"))
    nan = np.full(n, np.nan)

    def col(k):
        v = cost.get(k)
        return nan if v is None else np.where(arr["fits"], np.broadcast_to(np.asarray(v, dtype=float), (n,)), np.nan)

    res.update(usd_per_hour=col("usd_per_hour"), usd_per_busy_hour=col("usd_per_busy_hour"), usd_per_mtok=col(pick[0]),
               input_usd_per_mtok=col("input_usd_per_mtok") if g.phase != "train" else nan,
               output_usd_per_mtok=col("output_usd_per_mtok") if g.phase not in ("train", "prefill") else nan,
               usd_per_run=col("usd_per_run"), energy_j_per_token=col(pick[1]))
    for k in ("tp", "pp", "dp", "micro_batch", "recompute", "zero_stage"):
        if k in arr:
            cfg[k] = arr[k]
    return _columns(g, cfg, res)


# =============================================================================================
# Columns, frames, engines
# =============================================================================================
FLOAT_COLUMNS = ("batch", "context", "output_tokens", "tensor_parallel", "pipeline_parallel", "data_parallel",
                 "micro_batch", "zero_stage")
COLUMNS = ("model", "target", "hardware", "device_kind", "precision", "phase", "batch", "context", "output_tokens",
           "tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch", "recompute", "zero_stage",
           "num_devices", "num_systems", "per_device_bytes", "capacity_bytes", "fits", "step_s", "ttft_s", "tpot_s",
           "tokens_per_s", "tokens_per_s_per_user", "bottleneck", "usd_per_hour", "usd_per_busy_hour", "usd_per_mtok",
           "input_usd_per_mtok", "output_usd_per_mtok", "usd_per_run", "energy_j_per_token")
INT_COLUMNS = ("batch", "context", "num_devices", "num_systems")
NULLABLE_INT = ("output_tokens", "tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch", "zero_stage")


def _columns(g: Group, cfg: dict, res: dict) -> dict:
    n = len(cfg["batch"])
    nan = np.full(n, np.nan)
    lay = g.layouts
    out = {
        "batch": cfg["batch"], "context": cfg["context"],
        "output_tokens": np.where(cfg["output_tokens"] > 0, cfg["output_tokens"], np.nan),
        "tensor_parallel": cfg.get("tp", nan), "pipeline_parallel": cfg.get("pp", nan), "data_parallel": cfg.get("dp", nan),
        "micro_batch": cfg.get("micro_batch", nan), "recompute": cfg.get("recompute", np.full(n, -1.0)),
        "zero_stage": cfg.get("zero_stage", nan),
    }
    if not lay or g.phase != "train":
        out["recompute"] = np.full(n, -1.0)
    for k in ("num_devices", "num_systems", "per_device_bytes", "capacity_bytes", "fits", "step_s", "ttft_s", "tpot_s",
              "tokens_per_s", "tokens_per_s_per_user", "bottleneck", "usd_per_hour", "usd_per_busy_hour", "usd_per_mtok",
              "input_usd_per_mtok", "output_usd_per_mtok", "usd_per_run", "energy_j_per_token"):
        v = res.get(k)
        out[k] = nan if v is None else np.broadcast_to(np.asarray(v), (n,))
    out["_group"] = g.index
    return out


def to_frame(plan: Plan, parts: list[dict]):
    """Concatenate task columns (in task order) into one DataFrame with fixed dtypes and categories."""
    import pandas as pd

    groups = {g.index: g for g in plan.groups}
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    gidx = np.concatenate([np.full(len(p["batch"]), p["_group"]) for p in parts])
    data = {}
    for k in COLUMNS:
        if k in ("model", "target", "hardware", "device_kind", "precision", "phase"):
            continue
        data[k] = np.concatenate([np.asarray(p[k]) for p in parts])
    cats = {
        "model": [g.model_name for g in plan.groups], "target": [g.target.label for g in plan.groups],
        "hardware": [g.target.key for g in plan.groups], "device_kind": [g.target.kind for g in plan.groups],
        "precision": [g.precision for g in plan.groups], "phase": [g.phase for g in plan.groups],
    }
    cols = {}
    order = sorted(groups)
    pos = np.searchsorted(order, gidx)
    for k, vals in cats.items():
        uniq = list(dict.fromkeys(vals))
        codes = np.asarray([uniq.index(v) for v in vals])[pos]
        cols[k] = pd.Categorical.from_codes(codes, categories=uniq)
    for k in COLUMNS:
        if k in cols:
            continue
        v = data[k]
        if k == "bottleneck":
            cols[k] = pd.Categorical.from_codes(v.astype(int), categories=list(BOTTLENECKS))
        elif k == "recompute":
            cols[k] = pd.Categorical.from_codes(v.astype(int), categories=list(RECOMPUTE))
        elif k == "fits":
            cols[k] = v.astype(bool)
        elif k in INT_COLUMNS:
            cols[k] = v.astype(np.int64)
        elif k in NULLABLE_INT:
            nan_ = np.isnan(v)
            cols[k] = pd.arrays.IntegerArray(np.where(nan_, 0, v).astype(np.int64), nan_)
        else:
            cols[k] = v.astype(float)
    df = pd.DataFrame({k: cols[k] for k in COLUMNS})
    df.attrs.update(schema_version=SCHEMA_VERSION, sweep=plan.sweep.name, skipped=list(plan.skipped))
    return df


def evaluate_columns(plan: Plan, *, chunk: int = DEFAULT_CHUNK, progress=None) -> list[dict]:
    """Evaluate every task locally, in order (the array path; no DataFrame)."""
    groups = {g.index: g for g in plan.groups}
    parts = []
    for gi, s, e in plan.tasks(chunk):
        parts.append(evaluate_task(groups[gi], s, e))
        if progress is not None:
            progress(e - s)
    return parts


def _dask_task(g: Group, s: int, e: int) -> dict:
    return evaluate_task(g, s, e)


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


# =============================================================================================
# Output
# =============================================================================================
def frame_bytes(df, name: str) -> bytes:
    """The output file's bytes: CSV (``\\n`` line ends, shortest round-trip floats) or Parquet."""
    import io

    if name.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError("output: a .parquet output needs pyarrow; pip install 'wseplan[parquet]' or name a .csv") from None
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        return buf.getvalue()
    buf = io.StringIO()
    df.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue().encode("utf-8")


def write_output(df, out_dir: str | Path, name: str) -> Path:
    """Write ``df`` to ``out_dir/name`` atomically (a temporary file in the same folder, then a rename).

    ``name`` must already be a safe file name (:meth:`Sweep.output_name`); a name that would leave ``out_dir``
    is refused.
    """
    import os
    import tempfile

    from .report.atomic import safe_filename

    if name != safe_filename(name) or name in ("", ".", ".."):
        raise InputError(f"output: {name!r} is not a plain file name; use letters, digits, '.', '_' or '-'")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out: {out} exists and is not a folder; choose another path")
    data = frame_bytes(df, name)
    out.mkdir(parents=True, exist_ok=True)
    target = out / name
    if target.resolve().parent != out.resolve():
        raise InputError(f"output: {name!r} escapes the output folder {out}")
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=out)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def summary_rows(df) -> list[dict]:
    """One summary row per model x target x precision: configurations, how many fit, and the fitting
    configuration with the lowest ``usd_per_mtok`` (the first such row in sweep order on a tie)."""
    import pandas as pd

    rows = []
    if len(df) == 0:
        return rows
    keys = ["model", "target", "precision"]
    for (mname, tname, prec), sub in df.groupby(keys, sort=False, observed=True):
        row = {"model": mname, "target": tname, "precision": prec, "configurations": int(len(sub)),
               "fitting": int(sub["fits"].sum())}
        ok = sub[sub["fits"] & sub["usd_per_mtok"].notna()]
        if len(ok):
            best = ok.iloc[int(np.argmin(ok["usd_per_mtok"].to_numpy()))]
            lay = ""
            if not pd.isna(best["tensor_parallel"]):
                lay = f"TP{int(best['tensor_parallel'])} PP{int(best['pipeline_parallel'])} DP{int(best['data_parallel'])}"
            row.update(best_usd_per_mtok=float(best["usd_per_mtok"]), best_batch=int(best["batch"]),
                       best_context=int(best["context"]), best_layout=lay,
                       best_tokens_per_s=float(best["tokens_per_s"]), best_bottleneck=str(best["bottleneck"]))
        else:
            row.update(best_usd_per_mtok=None, best_batch=None, best_context=None, best_layout="",
                       best_tokens_per_s=None, best_bottleneck="")
        rows.append(row)
    return rows
