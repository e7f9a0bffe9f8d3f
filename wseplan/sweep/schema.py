"""Sweep files (:class:`Sweep`, :class:`Layouts`, :func:`load_sweep`, :func:`parse_sweep`) and the output schema
(column names, categories and limits shared by the planner, the evaluation and the writers)."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from ..catalog.inputs import NoBoolNumbers
from ..catalog.load import read_yaml
from ..devices.base import BOTTLENECKS  # noqa: F401  (every bottleneck name a row can carry: a fixed list keeps frames identical)
from ..errors import CatalogError, InputError, validation_detail
from ..report.atomic import safe_filename
from ..workload import MAX_BATCH, MAX_CONTEXT

SCHEMA_VERSION = 1
PHASES = ("train", "prefill", "decode", "serve")
RECOMPUTE = ("none", "selective", "full")
#: configurations per task of a GPU group (array evaluation runs at its full rate from ~16k; larger tasks mean
#: fewer, larger Parquet row groups) and of a wafer group (whose evaluation holds ~10-20 KB per configuration)
DEFAULT_CHUNK = 1 << 17
WAFER_CHUNK = 1 << 14
MAX_CONFIGURATIONS = 10**8
#: the CLI shows a progress bar (on a terminal) from this many configurations
PROGRESS_MIN_CONFIGURATIONS = 200_000

# =============================================================================================
# Output columns
# =============================================================================================
FLOAT_COLUMNS = ("batch", "context", "output_tokens", "tensor_parallel", "pipeline_parallel", "data_parallel",
                 "micro_batch", "zero_stage", "virtual_pipeline", "expert_parallel", "attention_data_parallel")
COLUMNS = ("model", "target", "hardware", "device_kind", "precision", "phase", "batch", "context", "output_tokens",
           "tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch", "recompute", "zero_stage",
           "num_devices", "num_systems", "per_device_bytes", "capacity_bytes", "fits", "step_s", "ttft_s", "tpot_s",
           "tokens_per_s", "tokens_per_s_per_user", "bottleneck", "usd_per_hour", "usd_per_busy_hour", "usd_per_mtok",
           "input_usd_per_mtok", "output_usd_per_mtok", "usd_per_run", "energy_j_per_token", "interval_low",
           "interval_high", "virtual_pipeline", "expert_parallel",
           "attention_data_parallel")  # (added columns go last: positional readers keep working)
INT_COLUMNS = ("batch", "context", "num_devices", "num_systems")
NULLABLE_INT = ("output_tokens", "tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch", "zero_stage",
                "virtual_pipeline", "expert_parallel", "attention_data_parallel")


# =============================================================================================
# Schema
# =============================================================================================
def _positive_unique(v: list[int], what: str) -> list[int]:
    if any(isinstance(x, bool) or x <= 0 for x in v):
        raise ValueError(f"every {what} must be a positive integer")
    return list(dict.fromkeys(v))


class Layouts(NoBoolNumbers):
    """GPU parallel layouts to sweep; an omitted axis takes every sensible value for the target's count."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_parallel: list[int] | None = Field(default=None, min_length=1)
    pipeline_parallel: list[int] | None = Field(default=None, min_length=1)
    data_parallel: list[int] | None = Field(default=None, min_length=1)
    micro_batch: list[int] | None = Field(default=None, min_length=1)
    recompute: list[Literal["none", "selective", "full"]] | None = Field(default=None, min_length=1)
    zero_stage: list[Literal[0, 1, 2, 3]] | None = Field(default=None, min_length=1)
    #: interleaved (virtual) pipeline stages per pipeline stage; default [1] (no interleaving). A degree above 1 is a
    #: row only with a pipeline (pp > 1) and a layer in each of the pp x vpp virtual stages
    virtual_pipeline: list[int] | None = Field(default=None, min_length=1)
    #: expert-parallel degrees of an MoE model's training rows (dividing its experts and the tp x dp GPUs of a stage);
    #: default: each row searches its own, as `wseplan time` does with the rest of a layout given
    expert_parallel: list[int] | None = Field(default=None, min_length=1)
    #: data-parallel attention degrees of an MoE model's inference rows: 1 (attention split over the row's
    #: tensor_parallel) or the row's tensor_parallel (each GPU its own requests); default: each row searches its own
    attention_data_parallel: list[int] | None = Field(default=None, min_length=1)

    @field_validator("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch", "virtual_pipeline",
                     "expert_parallel", "attention_data_parallel")
    @classmethod
    def _pos(cls, v):
        return None if v is None else _positive_unique(v, "layout value")

    @field_validator("recompute", "zero_stage")
    @classmethod
    def _uniq(cls, v):
        return None if v is None else list(dict.fromkeys(v))


#: output suffixes of other file types: refused rather than written as ``<name>.xlsx.csv`` (a name with any other suffix
#: gets ``.csv`` added, as a name without one)
_OTHER_FORMATS = frozenset({".xlsx", ".xls", ".ods", ".json", ".jsonl", ".tsv", ".txt", ".md", ".feather", ".arrow",
                            ".pq", ".parq", ".gz", ".zip", ".h5", ".hdf5", ".pkl", ".pickle"})


class Sweep(NoBoolNumbers):
    """A sweep file (frozen, ``extra="forbid"``: a misspelt key fails loudly)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    _base: str | None = PrivateAttr(default=None)  # the sweep file's folder: its model files are read beside it

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
    def _pos(cls, v, info):
        if v is None:
            return v
        v = _positive_unique(v, "value")
        top = MAX_BATCH if info.field_name == "batches" else MAX_CONTEXT  # the bounds every command keeps
        if max(v) > top:
            raise ValueError(f"values must be at most {top:,}")
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
        if self.phase != "train" and (lo.micro_batch or lo.recompute or lo.zero_stage or lo.virtual_pipeline
                                      or lo.expert_parallel):
            raise ValueError("layouts: micro_batch, recompute, zero_stage, virtual_pipeline and expert_parallel apply to "
                             "phase train only (inference chooses split or whole experts for each row itself)")
        if self.phase == "train" and lo.attention_data_parallel:
            raise ValueError("layouts: attention_data_parallel applies to inference (prefill, decode, serve); remove it "
                             "for phase train")
        return self

    @field_validator("output")
    @classmethod
    def _output_kind(cls, v):
        suffix = Path(str(v).replace("\\", "/")).suffix.lower() if v is not None else ""
        if suffix in _OTHER_FORMATS:  # a file type the user expects that the sweep does not write
            raise ValueError(f"writes .csv or .parquet, not {suffix}; "
                             "name a .csv or .parquet file")
        return v

    def output_name(self) -> str:
        """The output file name: ``output`` (or ``<name>.csv``) reduced to a safe name inside the output folder."""
        raw = self.output if self.output is not None else f"{self.name}.csv"
        base = safe_filename(Path(str(raw).replace("\\", "/")).name, default=safe_filename(self.name, default="sweep"))
        if not base.lower().endswith((".csv", ".parquet")):
            base = f"{base}.csv"
        return base


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file; a malformed one raises a one-line :class:`InputError` naming the field."""
    p = Path(path)
    if not os.path.lexists(p):
        raise InputError(f"sweep: file {p} not found; check the path")
    try:
        data = read_yaml(p)
    except CatalogError as exc:
        raise InputError(f"sweep: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"sweep: {p}: top level must be a mapping with keys name, phase, models, targets, batches, contexts")
    sw = parse_sweep(data, where=str(p))
    sw._base = str(p.parent)  # model files beside the sweep file, wherever it is run from (audit31b M5)
    return sw


def parse_sweep(data: dict, *, where: str = "sweep") -> Sweep:
    """Validate a sweep mapping (as read from YAML)."""
    try:
        return Sweep.model_validate(data)
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        loc = loc or "(top level)"
        raise InputError(f"sweep: {where}: {loc}: {msg}") from None

