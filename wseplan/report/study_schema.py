"""The study file (``wseplan report STUDY.yaml``): its frozen pydantic schema (``extra="forbid"``: a misspelt key
fails loudly). See :mod:`wseplan.report.study` for what each kind answers."""
from __future__ import annotations

import datetime as _dt
from typing import Literal

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..catalog.inputs import NoBoolNumbers, Percentile
from ..workload import beside
from .atomic import safe_filename


class _Frozen(NoBoolNumbers):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _positive_sorted(v):
    if v is not None and any(b <= 0 for b in v):
        raise ValueError("every batch must be a positive integer")
    return None if v is None else sorted(set(v))


class TargetSpec(_Frozen):
    """One target with its own precision: ``{target: h200, precision: fp8}``."""

    target: str = Field(min_length=1)
    precision: str | None = Field(default=None, description="the target's precision (default: the study's)")


class ServingSpec(_Frozen):
    """Serving load: prompt and output tokens per request, the demand (one of output tokens/s, requests/s, or
    users/day x requests per user per day x peak factor), the per-user speed every user must see, an optional TTFT
    limit at a percentile, the concurrencies to sweep and the replica sizes the fleet may use."""

    prompt_tokens: int = Field(gt=0, le=100_000_000)
    output_tokens: int = Field(gt=0, le=100_000_000)
    demand_tokens_per_s: float | None = Field(default=None, gt=0, le=1e15,
                                              description="output tokens/s the whole service must produce (peak)")
    requests_per_s: float | None = Field(default=None, gt=0, le=1e12, description="requests/s at the peak")
    users_per_day: float | None = Field(default=None, gt=0, le=1e12)
    requests_per_user_per_day: float | None = Field(default=None, gt=0, le=1e9)
    peak_factor: float | None = Field(default=None, ge=1, le=1000,
                                      description="peak rate over the day's average (with users_per_day)")
    min_tokens_per_s_per_user: float = Field(gt=0, le=1e9, description="slowest acceptable output speed per request")
    ttft_limit_s: float | None = Field(default=None, gt=0, le=1e6, description="TTFT limit at `percentile`")
    percentile: Percentile = Field(default=95, description="in percent (95 for p95)")
    batches: list[int] = Field(min_length=1, description="concurrent requests per replica to sweep")
    replica_sizes: Literal["fewest", "search"] = Field(
        default="search", description="fleet replicas: every size of the replica search (the default, as `wseplan "
                                      "fleet`), or the fewest devices that hold the model")

    @field_validator("batches")
    @classmethod
    def _positive(cls, v):
        return _positive_sorted(v)

    @model_validator(mode="after")
    def _one_demand(self):
        given = [k for k in ("demand_tokens_per_s", "requests_per_s", "users_per_day") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give one demand: demand_tokens_per_s, requests_per_s, or users_per_day (with "
                             f"requests_per_user_per_day and peak_factor); got {given or 'none'}")
        if self.users_per_day is not None and self.requests_per_user_per_day is None:
            raise ValueError("users_per_day needs requests_per_user_per_day")
        if self.peak_factor is not None and self.users_per_day is None:
            raise ValueError("peak_factor applies to users_per_day (a day's average)")
        return self


class ServerSpec(_Frozen):
    """An MLPerf-style server scenario: Poisson arrivals; the answer is the highest request rate whose TTFT (at
    ``percentile``) and TPOT meet the limits. ``reference`` names a validation row (catalogs/validation/*.csv)
    holding the published figure to compare with."""

    prompt_tokens: int = Field(gt=0, le=100_000_000)
    output_tokens: int = Field(gt=0, le=100_000_000)
    ttft_limit_s: float = Field(gt=0, le=1e6)
    tpot_limit_s: float = Field(gt=0, le=1e6)
    percentile: Percentile = Field(default=99, description="in percent (99 for p99)")
    batches: list[int] | None = Field(default=None, description="concurrencies to try (default: the engine's grid)")
    layout: dict[str, int] | None = Field(default=None, description="the layout the published run used, e.g. "
                                                                   "{tp: 1, pp: 1, dp: 8} (also searched)")
    reference: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,40}$")
    reference_sources: list[str] = Field(default=[], description="catalog source ids of the published figure")

    @field_validator("batches")
    @classmethod
    def _positive(cls, v):
        return _positive_sorted(v)


class TrainingSpec(_Frozen):
    """Training run: token budget, deadline, sequence length, global batch and the cluster sizes to sweep."""

    tokens: float = Field(gt=0, le=1e30, description="tokens of the run (at most 1e30, as --train-tokens)")
    deadline_days: float = Field(gt=0, le=1e6, description="days (at most 1e6)")
    seq_len: int = Field(gt=0)
    global_batch: int = Field(gt=0, description="sequences per optimizer step")
    sizes: list[int] = Field(min_length=1, description="systems (wafer targets) or nodes (GPU targets)")
    stream_batches: list[int] = Field(default=[1, 2, 4, 8, 16, 32, 64, 128, 256],
                                      description="per-system batches for the weight-streaming plot")

    @field_validator("sizes", "stream_batches")
    @classmethod
    def _positive(cls, v):
        if any(b <= 0 for b in v):
            raise ValueError("every size must be a positive integer")
        return sorted(set(v))


class CostSpec(_Frozen):
    """Cost settings: Monte Carlo samples and seed, utilisations to sweep, pinned inputs (as ``--set``)."""

    uncertainty: int = Field(default=400, ge=0, le=100000)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)  # numpy seeds are non-negative
    utilizations: list[float] = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    set: dict[str, float] = {}

    @field_validator("utilizations")
    @classmethod
    def _fracs(cls, v):
        if not v or any(not (0 < u <= 1) for u in v):
            raise ValueError("utilizations must be fractions in (0, 1]")
        return sorted(set(v))


class Study(_Frozen):
    """A study file (frozen, ``extra="forbid"``: a misspelt key fails loudly)."""

    _base: str | None = PrivateAttr(default=None)  # the study file's folder (set by the loader)

    @property
    def model_ref(self) -> str | None:
        """``model`` as the chain reads it: a model file named relative to the study is the study's neighbour
        (:func:`wseplan.workload.beside`); ``model`` itself stays as written, for the report."""
        return self.model if self._base is None or self.model is None else beside(self.model, self._base)

    name: str = Field(min_length=1, max_length=100)
    title: str = Field(min_length=1)
    kind: Literal["serving", "server", "training", "claims"]
    question: str = Field(min_length=1)
    model: str | None = None
    precision: str = "bf16"
    targets: list[str | TargetSpec] = []
    precisions: dict[str, str] = Field(default={}, description="target -> precision (else the study's precision)")
    serving: ServingSpec | None = None
    server: ServerSpec | None = None
    training: TrainingSpec | None = None
    cost: CostSpec = CostSpec()
    claims: str | None = None
    notes: list[str] = []
    date: str | None = Field(default=None, pattern=r"^\d{4}(-\d{2}(-\d{2})?)?$",
                             description="the report's date (YYYY, YYYY-MM or YYYY-MM-DD); see wseplan.report.provenance")

    @field_validator("date", mode="before")
    @classmethod
    def _date_text(cls, v):  # YAML reads an unquoted 2026-12-03 as a date
        return v.isoformat() if isinstance(v, _dt.date) else v

    @property
    def target_names(self) -> list[str]:
        """The targets as written (``cs3``, ``h200x8``), without their precisions."""
        return [t if isinstance(t, str) else t.target for t in self.targets]

    def precision_for(self, target: str) -> str:
        """A target's precision: its own (``{target, precision}``), then ``precisions``, then the study's."""
        for t in self.targets:
            if isinstance(t, TargetSpec) and t.target == target and t.precision:
                return t.precision
        return self.precisions.get(target, self.precision)

    @model_validator(mode="after")
    def _kind_fields(self):
        names = self.target_names
        if len(set(names)) != len(names):
            raise ValueError(f"targets: each target once, got {names}")
        unknown = sorted(set(self.precisions) - set(names))
        if unknown:
            raise ValueError(f"precisions: {', '.join(unknown)} not among the targets {names}")
        if self.kind in ("serving", "server", "training"):
            if not self.model:
                raise ValueError(f"a {self.kind} study needs 'model'")
            if not self.targets:
                raise ValueError(f"a {self.kind} study needs 'targets'")
            if getattr(self, self.kind) is None:
                raise ValueError(f"a {self.kind} study needs a '{self.kind}:' section")
        if self.kind == "claims" and not self.claims:
            raise ValueError("a claims study needs 'claims' (a claims YAML path, relative to the study file)")
        return self

    @property
    def slug(self) -> str:
        return safe_filename(self.name, default="study")
