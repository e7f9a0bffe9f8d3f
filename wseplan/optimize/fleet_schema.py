"""The data of the fleet ILP (:mod:`wseplan.optimize.fleet`): the demand file (:class:`DemandSpec`,
:func:`read_demand`), the problem (system types, configurations, demands: :class:`FleetProblem`) and the answer
(:class:`FleetPlan` with its system, allocation and constraint rows)."""
from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, ValidationError, field_validator, model_validator

from ..catalog.inputs import NoBoolNumbers, Percentile
from ..catalog.load import read_yaml
from ..catalog.schema import PRECISIONS, Frozen, check_name, check_text
from ..errors import InputError, validation_detail
from ..targets import MAX_GPUS
from ..units import parse_quantity
from ..workload import KV_FORMATS, beside
from .fleet_model import CAPS
from .milp import SolverRun

SCHEMA_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Demand file schema
# ---------------------------------------------------------------------------------------------
#: the dimension each quantity of a demand file must have when it is written with a unit (a bare number is taken in
#: these units); audit28b M7: "1.6 MB" was read as a 1.6 MW power cap and "60 MW" as a $60M budget
_DIMENSIONS = {"power_cap_w": "W", "rack_units_cap": "U", "budget_usd": "USD"}


def _num(v, field: str) -> float:
    x, dim = parse_quantity(v, field=field)
    want = _DIMENSIONS.get(field.rsplit(".", 1)[-1])
    if dim is not None and dim != want:
        raise InputError(f"{field}: {v!r} is in {dim}, not {want or 'a count'}; write "
                         f"{'a number of ' + want if want else 'a plain number'} (e.g. "
                         f"{ {'W': repr('1.6 MW'), 'U': '1008', 'USD': '60000000'}.get(want, '20000') })")
    return x


class Sla(NoBoolNumbers, Frozen):
    """Serving limits: TTFT at ``percentile`` (queueing included) and TPOT (the running batch's per-token time)."""

    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)
    percentile: Percentile = Field(default=95, description="the TTFT percentile the ttft_s limit applies to, in percent")


    def limits(self) -> dict[str, float]:
        """The limits that are set, ``{"ttft_s": 2.0, ...}``."""
        return {k: v for k, v in (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s)) if v is not None}


SECONDS_PER_DAY = 86400.0


class WorkloadSpec(NoBoolNumbers, Frozen):
    """One workload of a demand file.

    Serving demand is given one of three ways, all peak rates the fleet must carry:
    ``output_tokens_per_s``; ``requests_per_s`` (x ``output_tokens`` per request); or ``users_per_day`` x
    ``requests_per_user_per_day`` spread over a day (/ 86,400 s) and multiplied by ``peak_factor`` (the busiest
    hour's rate over the day's average). :meth:`output_tokens_per_s_demand` is the rate in output tokens/s.
    ``precisions`` sets a precision per system (system name or hardware key, e.g. ``{h200-sxm: fp8}``);
    the others use ``precision``. ``replica_sizes``: ``search`` (the default: every size of
    :func:`wseplan.serving.serve`'s replica search, e.g. 2 to 8 H200 or 4 to 8 CS-3) or ``fewest`` (replicas of the
    fewest devices that hold the model only). Serving engines: ``software`` names a software profile per system (system
    name, hardware key or family ``gpu``/``wafer``; the others run their family's production profile, as ``serve``);
    ``speculative`` a draft model for every system, or ``none`` (the wafer-production profile drafts by default);
    ``kv_precision`` the GPU engines' KV-cache format (``--kv-precision``; wafers keep their own).
    """

    name: str
    model: str
    kind: str  # serve | train
    precision: str = "bf16"
    precisions: dict[str, str] = {}
    # serving
    output_tokens_per_s: float | None = Field(default=None, gt=0)
    requests_per_s: float | None = Field(default=None, gt=0)
    users_per_day: float | None = Field(default=None, gt=0)
    requests_per_user_per_day: float | None = Field(default=None, gt=0)
    peak_factor: float | None = Field(default=None, ge=1)
    prompt_tokens: int = Field(default=2048, gt=0)
    output_tokens: int = Field(default=256, gt=0)
    batches: list[int] | None = Field(default=None, description="concurrencies per replica to try (default: serve's "
                                       "grid, powers of two up to the engine's largest batch and those it "
                                       "refines for its default per-user speed floor)")
    software: dict[str, str] = {}
    speculative: str | None = None
    kv_precision: str | None = None
    replica_sizes: str = Field(default="search", pattern="^(fewest|search)$",
                               description="fewest: replicas of the fewest devices that hold the model; search: every "
                                           "replica size of the serve replica search")
    sla: Sla = Sla()
    # training
    train_tokens: float | None = Field(default=None, gt=0)
    runs: int = Field(default=1, gt=0)
    deadline_days: float | None = Field(default=None, gt=0, le=100_000)  # 274 years: beyond is no deadline
    batch: int = Field(default=1024, gt=0)
    context: int = Field(default=2048, gt=0)
    device_counts: dict[str, list[int]] = {}

    @field_validator("name")
    @classmethod
    def _name(cls, v):  # shown in tables and error lines: no markup, escapes or 10,000 characters
        return check_name(v)

    @field_validator("device_counts")
    @classmethod
    def _counts(cls, v):
        for hw, counts in v.items():
            if any(not 1 <= c <= MAX_GPUS for c in counts):
                raise ValueError(f"device_counts.{hw}: every count must be in 1..{MAX_GPUS:,}")
        return v

    @field_validator("batches")
    @classmethod
    def _batches(cls, v):
        if v is not None and (not v or any(b < 1 for b in v)):
            raise ValueError("batches: every batch must be a positive integer")
        return v

    @field_validator("precision")
    @classmethod
    def _precision(cls, v):
        if v not in PRECISIONS:
            raise ValueError(f"unknown precision {v!r}; use one of {', '.join(PRECISIONS)}")
        return v

    @field_validator("precisions")
    @classmethod
    def _precisions(cls, v):
        bad = {k: p for k, p in v.items() if p not in PRECISIONS}
        if bad:
            raise ValueError(f"unknown precision {next(iter(bad.values()))!r} for {next(iter(bad))}; use one of "
                             f"{', '.join(PRECISIONS)}")
        return v

    @field_validator("speculative", mode="before")
    @classmethod
    def _spec(cls, v):  # YAML reads off / no / false as False (review29 #8): the CLI's "none"
        return "none" if v is False else v

    @field_validator("kv_precision")
    @classmethod
    def _kv(cls, v):
        if v is not None and v not in KV_FORMATS:
            raise ValueError(f"unknown KV-cache format {v!r}; use one of {', '.join(KV_FORMATS)}")
        return v

    @field_validator("kind")
    @classmethod
    def _kind(cls, v):
        if v not in ("serve", "train"):
            raise ValueError(f"kind must be serve or train, got {v!r}")
        return v

    @model_validator(mode="after")
    def _demand(self):
        given = [k for k in ("output_tokens_per_s", "requests_per_s", "users_per_day") if getattr(self, k) is not None]
        if self.kind == "serve":
            if len(given) != 1:
                raise ValueError("serve needs one demand: output_tokens_per_s, requests_per_s, or users_per_day "
                                 f"(with requests_per_user_per_day and peak_factor); got {given or 'none'}")
            if self.users_per_day is not None and self.requests_per_user_per_day is None:
                raise ValueError("users_per_day needs requests_per_user_per_day (and optionally peak_factor)")
        engine = [k for k in ("software", "speculative", "kv_precision") if getattr(self, k)]
        if self.kind == "train" and engine:
            raise ValueError(f"{engine[0]}: serving engine settings apply to serve workloads; training runs its "
                             "family's training profile (remove it)")
        if self.peak_factor is not None and self.users_per_day is None:
            raise ValueError("peak_factor applies to users_per_day (a day's average); output_tokens_per_s and "
                             "requests_per_s are already peak rates")
        if self.kind == "serve" and self.output_tokens_per_s_demand() > MAX_OUTPUT_TOKENS_PER_S:
            what = "users_per_day x requests_per_user_per_day" if given[0] == "users_per_day" else given[0]
            raise ValueError(f"{what}: a demand of {self.output_tokens_per_s_demand():.3g} output tokens/s is beyond "
                             f"{MAX_OUTPUT_TOKENS_PER_S:.0e} (a million GPUs serve about 1e9); check its unit")
        return self

    def output_tokens_per_s_demand(self) -> float:
        """The serving demand as a peak rate of output tokens/s (see the class docstring)."""
        if self.output_tokens_per_s is not None:
            return float(self.output_tokens_per_s)
        if self.requests_per_s is not None:
            return float(self.requests_per_s) * self.output_tokens
        avg_rps = self.users_per_day * self.requests_per_user_per_day / SECONDS_PER_DAY
        return avg_rps * (self.peak_factor or 1.0) * self.output_tokens

    def software_for(self, system: str, hardware: str, family: str) -> str | None:
        """The software profile of this workload on a system (by its name, its hardware key, then its family), or None
        (the family's production profile)."""
        return self.software.get(system) or self.software.get(hardware) or self.software.get(family)

    def engine_options(self, family: str) -> dict | None:
        """The serving options of this workload on a ``family`` system: ``speculative`` and, on GPUs,
        ``kv_precision``; None when neither is set."""
        opts = {"speculative": self.speculative} if self.speculative else {}
        if self.kv_precision and family == "gpu":
            opts["kv_precision"] = self.kv_precision
        return opts or None

    def precision_for(self, system: str, hardware: str) -> str:
        """The precision of this workload on a system (by its name, then its hardware key)."""
        return self.precisions.get(system) or self.precisions.get(hardware) or self.precision


#: the largest serving demand a fleet is sized for [output tokens/s]: a thousand times what a million GPUs serve, so
#: a value above it is a unit slip, refused with the field named before the solver sees it
MAX_OUTPUT_TOKENS_PER_S = 1e12


class SystemSpec(NoBoolNumbers, Frozen):
    hardware: str
    name: str | None = None
    max_systems: int | None = Field(default=None, ge=0)

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        return v if v is None else check_name(v)


class Caps(NoBoolNumbers, Frozen):
    power_cap_w: float | None = Field(default=None, gt=0)
    rack_units_cap: float | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)


class DemandSpec(NoBoolNumbers, Frozen):
    """A demand file (``wseplan fleet DEMAND.yaml``); see studies/demand-example.yaml."""

    name: str = "demand"
    description: str | None = None
    prices: list[str] = []
    set: dict[str, float] = {}
    constraints: Caps = Caps()
    systems: list[SystemSpec] = Field(min_length=1)
    workloads: list[WorkloadSpec] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        return check_name(v)

    @field_validator("description")
    @classmethod
    def _description(cls, v):
        return v if v is None else check_text(v)


def read_demand(path: str | Path) -> DemandSpec:
    """Read and validate a demand YAML file; errors are one line naming the field."""
    p = Path(path)
    if not os.path.lexists(p):
        raise InputError(f"demand: file {path} not found; check the path")
    raw = read_yaml(p)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: top level must be a mapping with systems and workloads")
    raw = dict(raw)
    caps = dict(raw.get("constraints") or {})
    for k in list(caps):
        if k in CAPS and caps[k] is not None:
            caps[k] = _num(caps[k], f"constraints.{k}")
    raw["constraints"] = caps
    wls = []
    for i, wl in enumerate(raw.get("workloads") or []):
        if isinstance(wl, dict):
            wl = dict(wl)
            for k in ("model", "speculative"):  # model files beside the demand file, as its prices (audit31b M5)
                wl[k] = beside(wl.get(k), p.parent) if wl.get(k) is not None else wl.get(k)
            for k in ("output_tokens_per_s", "train_tokens", "requests_per_s", "users_per_day"):
                if wl.get(k) is not None:
                    wl[k] = _num(wl[k], f"workloads[{i}].{k}")
        wls.append(wl)
    raw["workloads"] = wls
    if isinstance(raw.get("prices"), str):
        raw["prices"] = [raw["prices"]]
    raw["prices"] = [str((p.parent / q).resolve()) if not Path(q).is_absolute() else q for q in raw.get("prices") or []]
    try:
        spec = DemandSpec.model_validate(raw)
    except ValidationError as exc:
        loc, msg = validation_detail(exc)
        raise InputError(f"{path}: {loc}: {msg}" if loc else f"{path}: {msg}") from None
    names = [w.name for w in spec.workloads]
    if len(set(names)) != len(names):
        raise InputError(f"{path}: workloads: names must be unique, got {names}")
    for w in spec.workloads:
        if w.kind == "train" and (w.deadline_days is None):
            raise InputError(f"{path}: workloads.{w.name}: train needs deadline_days")
    return spec


# ---------------------------------------------------------------------------------------------
# The ILP's data: system types and configurations (one replica of a workload on one system type)
# ---------------------------------------------------------------------------------------------
class SystemType(Frozen):
    """One menu entry with its per-system cost, power and space (traceable to the prices catalog)."""

    name: str
    hardware: str
    price_key: str
    devices_per_system: int
    capex_usd: float  # per system incl. network share and installation
    annual_usd: float  # yearly TCO of one system
    peak_facility_power_w: float  # peak IT power x PUE
    rack_units: float
    max_systems: int | None = None
    cost_inputs: dict[str, float] = {}


class Config(Frozen):
    """One way to run a replica of a workload: system type, devices, batch, and what the time model says."""

    workload: str
    system: str
    num_devices: int
    batch: int
    supply: float  # tokens/s (serve) or runs by the deadline (train)
    ttft_s: float | None = None  # serve: TTFT at the workload's SLA percentile
    tpot_s: float | None = None  # serve: TPOT at that percentile (what the limit applies to)
    mean_ttft_s: float | None = None  # serve: the mean TTFT and TPOT at the load (what ttft_s and tpot_s mean elsewhere)
    mean_tpot_s: float | None = None
    run_s: float | None = None
    load_frac: float | None = None  # serve: share of the replica's slots held on average (supply, TTFT, TPOT at it)
    extra_capex_usd: float = 0.0  # per replica (MemoryX for wafer training)
    extra_annual_usd: float = 0.0
    extra_facility_power_w: float = 0.0  # per replica (a weight-streaming cluster's CPU servers) x PUE
    extra_rack_units: float = 0.0  # per replica (the same servers' rack space)


class Demand(Frozen):
    name: str
    kind: str
    model: str
    amount: float  # output tokens/s or runs
    unit: str
    sla: Sla = Sla()
    deadline_s: float | None = None


class FleetProblem(Frozen):
    demands: list[Demand]
    systems: list[SystemType]
    configs: list[Config]
    power_cap_w: float | None = None
    rack_units_cap: float | None = None
    budget_usd: float | None = None
    notes: list[str] = []


def meets_sla(c: Config, d: Demand, factor: float = 1.0) -> bool:
    """Does configuration ``c`` meet demand ``d``'s SLA (limits scaled by ``factor``)?"""
    if d.kind == "train":
        return c.run_s is not None and c.supply >= 1
    if d.sla.ttft_s is not None and (c.ttft_s is None or c.ttft_s > d.sla.ttft_s * factor):
        return False
    if d.sla.tpot_s is not None and (c.tpot_s is None or c.tpot_s > d.sla.tpot_s * factor):
        return False
    return c.supply > 0


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
class SystemRow(Frozen):
    system: str
    hardware: str
    count: int
    devices: int
    capex_usd: float
    annual_usd: float
    peak_facility_power_w: float
    rack_units: float


class AllocationRow(Frozen):
    workload: str
    system: str
    replicas: int
    devices_per_replica: int
    batch: int
    supply_per_replica: float
    supply: float
    demand: float
    unit: str
    ttft_s: float | None = None  # serve: the mean at the load, as in every record
    tpot_s: float | None = None
    ttft_at_percentile_s: float | None = None  # serve: at the workload's SLA percentile (what its limits apply to)
    tpot_at_percentile_s: float | None = None
    run_s: float | None = None
    load_frac: float | None = None  # serve: share of each replica's slots held on average


class ConstraintRow(Frozen):
    """A constraint of the solved plan: its use, its LP shadow price, and what relaxing it 10% saves.

    ``saving_usd_per_year`` is exact (integer re-solve, or a proof that nothing changes; ``analysis`` says
    which); where the LP relaxation answered instead (large plans whose caps bind), ``lp_saving_usd_per_year``
    holds its saving and the integer fields are empty. ``shadow_price`` is the LP relaxation's marginal value,
    in ``shadow_price_unit``.
    """

    name: str
    kind: str  # cap | demand | sla
    lhs: float | None = None
    rhs: float | None = None
    slack: float | None = None
    binding: bool  # relaxing it 10% lowers the optimum (integer re-solve or LP relaxation), for every kind of row
    tight: bool = False  # it holds with equality (zero slack), whether or not relaxing it would save anything
    relaxed_usd_per_year: float | None = None
    saving_usd_per_year: float | None = None
    lp_saving_usd_per_year: float | None = None  # the LP relaxation's saving, where the LP answered the row
    shadow_price: float | None = None  # USD/year saved per unit the constraint is loosened (LP relaxation)
    shadow_price_unit: str | None = None
    reduced_cost_usd_per_year: float | None = None  # sla: best LP reduced cost among the configurations it admits
    analysis: str | None = None  # how the saving was obtained
    note: str | None = None


class FleetPlan(Frozen):
    """The fleet record (``wseplan fleet --format json``); documented in docs/cli-output.md."""

    schema_version: int = SCHEMA_VERSION
    name: str
    status: str  # optimal | time_limit
    status_detail: str
    optimal: bool
    gap_frac: float | None = None
    total_usd_per_year: float
    best_bound_usd_per_year: float | None = None
    capex_usd: float
    peak_facility_power_w: float
    rack_units: float
    solver: str
    solve_s: float
    solver_run: SolverRun
    method: str  # decomposed into independent components, or the full model with the caps
    num_variables: int
    num_constraints: int
    analysis_s: float | None = None
    analysis_mode: str | None = None  # auto | exact | lp (None: no analysis)
    lp_usd_per_year: float | None = None  # the LP relaxation's optimum (a lower bound)
    systems: list[SystemRow]
    allocations: list[AllocationRow]
    constraints: list[ConstraintRow]
    notes: list[str] = []

    def to_row(self) -> dict:
        rec = self.to_record()
        row = {k: v for k, v in rec.items() if not isinstance(v, (list, dict)) and v is not None}
        row.update({f"solver_{k}": v for k, v in rec["solver_run"].items() if v is not None and k != "status_detail"})
        for s in self.systems:
            row[f"count_{s.system}"] = s.count
        return row

    def to_frames(self) -> dict:
        """``{"systems", "allocations", "constraints"}`` DataFrames for notebooks."""
        import pandas as pd

        return {k: pd.DataFrame([r.model_dump() for r in getattr(self, k)]) for k in ("systems", "allocations", "constraints")}
