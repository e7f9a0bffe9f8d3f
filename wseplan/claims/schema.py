"""The claims file: what a claim may say (:class:`Claim`), the verdict record (:class:`Verdict`), reading a claims
YAML file and turning a claimed value into SI units."""
from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..catalog.inputs import NoBoolNumbers
from ..catalog.load import read_yaml
from ..catalog.schema import check_name, check_text
from ..errors import CatalogError, InputError
from ..units import parse_quantity

KINDS = ("fits", "memory_bytes", "latency_per_token_s", "tokens_per_s_per_user", "tokens_per_s", "ttft_s",
         "generation_time_s", "step_time_s", "time_to_train_s", "peak_flop_per_s", "bandwidth_bytes_per_s",
         "hop_latency_s", "power_w", "usd_per_mtok")
BOUNDS = ("sram_capacity", "hbm_capacity", "memoryx_capacity", "compute_peak", "memory_bandwidth", "fabric_bandwidth",
          "io_bandwidth", "hop_latency_floor")
VERDICTS = ("impossible", "optimistic", "consistent")
#: kinds whose value is a time [s]
TIME_KINDS = ("latency_per_token_s", "ttft_s", "generation_time_s", "step_time_s", "time_to_train_s", "hop_latency_s")

# kind -> (SI unit shown, lower is better?)
KIND_UNIT = {
    "fits": ("", False), "memory_bytes": ("bytes", True), "latency_per_token_s": ("s", True),
    "tokens_per_s_per_user": ("tokens/s", False), "tokens_per_s": ("tokens/s", False), "ttft_s": ("s", True),
    "generation_time_s": ("s", True), "step_time_s": ("s", True), "time_to_train_s": ("s", True),
    "peak_flop_per_s": ("FLOP/s", False), "bandwidth_bytes_per_s": ("bytes/s", False), "hop_latency_s": ("s", True),
    "power_w": ("W", True), "usd_per_mtok": ("USD/M tokens", True),
}
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "seconds": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0,
               "minutes": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0, "day": 86400.0, "days": 86400.0,
               "week": 604800.0, "weeks": 604800.0, "month": 30 * 86400.0, "months": 30 * 86400.0,
               "year": 365.25 * 86400.0, "years": 365.25 * 86400.0}
_RATE_UNITS = {"tokens/s": 1.0, "tok/s": 1.0, "token/s": 1.0, "tokens/s/user": 1.0, "tok/s/user": 1.0,
               "ktokens/s": 1e3, "ktok/s": 1e3, "Mtokens/s": 1e6}
_USD_UNITS = {"USD/Mtok": 1.0, "USD/M tokens": 1.0, "$/Mtok": 1.0, "$/M tokens": 1.0, "USD/1M tokens": 1.0}
_WANT = {"memory_bytes": "bytes", "peak_flop_per_s": "flop/s", "bandwidth_bytes_per_s": "bytes/s", "power_w": "W",
         **{k: "s" for k in TIME_KINDS}}


class Claim(NoBoolNumbers):
    """One claim. ``value`` is a number in ``unit`` (or SI when no unit), or true/false for ``fits``.

    ``software`` names a software profile (``catalogs/software/profiles.yaml``; the target family's default
    otherwise); ``speculative`` (a draft model, or ``none``), ``draft_tokens`` and ``acceptance`` set speculative
    decoding as the planning chain's options do.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    kind: Literal["fits", "memory_bytes", "latency_per_token_s", "tokens_per_s_per_user", "tokens_per_s", "ttft_s",
                  "generation_time_s", "step_time_s", "time_to_train_s", "peak_flop_per_s", "bandwidth_bytes_per_s",
                  "hop_latency_s", "power_w", "usd_per_mtok"]
    value: bool | float | str
    unit: str | None = None
    model: str | None = None
    target: str | None = None
    precision: Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"] = "bf16"
    phase: Literal["train", "prefill", "decode"] | None = None
    batch: int | None = Field(default=None, gt=0)
    context: int | None = Field(default=None, gt=0)
    tokens: float | None = Field(default=None, gt=0, le=1e30)  # as --train-tokens (audit37b F6: 1e300 was judged)
    output_tokens: int | None = Field(default=None, gt=0)
    scope: Literal["fabric", "sram", "io", "hbm", "dense", "sparse"] | None = None
    software: str | None = None
    speculative: str | None = None
    draft_tokens: int | None = Field(default=None, ge=1, le=16)
    acceptance: float | None = Field(default=None, ge=0.0, lt=1.0)
    source: str | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _finite(cls, v):
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("must be finite")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
            raise ValueError("a claimed rate, time, size, power or price must be positive")
        return v

    @field_validator("tokens")
    @classmethod
    def _finite_tokens(cls, v):
        if v is not None and not math.isfinite(v):
            raise ValueError("must be finite")
        return v

    def spec_options(self) -> dict:
        """The speculative-decoding options the claim states (planning-chain option names)."""
        return {k: v for k, v in (("speculative", self.speculative), ("draft_tokens", self.draft_tokens),
                                  ("acceptance", self.acceptance)) if v is not None}


class ClaimsFile(NoBoolNumbers):
    model_config = ConfigDict(frozen=True, extra="forbid")

    claims: list[Claim] = Field(min_length=1)


class Verdict(BaseModel):
    """The verdict on one claim (``wseplan check --format json`` record; see docs/cli-output.md).

    ``quantity`` names the physical quantity the claim was judged as (``train_tokens_per_s``, ``tpot_s``,
    ``ttft_s`` or the kind itself): time-to-train, step time and throughput of one training run are one quantity.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: str
    verdict: Literal["impossible", "optimistic", "consistent"]
    bound: str | None = None
    bound_value: float | None = None
    claimed_value: float | bool
    estimate: float | bool | None = None
    margin: float | None = None
    error_frac: float | None = None
    unit: str
    bound_unit: str | None = None
    quantity: str | None = None
    reason: str

    def to_record(self) -> dict:
        return {k: self.__dict__[k] for k in ("id", "verdict", "bound", "bound_value", "claimed_value", "estimate",
                                              "margin", "reason", "kind", "unit", "bound_unit",
                                              "error_frac", "quantity")}

    def to_row(self) -> dict:
        return self.to_record()


# --------------------------------------------------------------------------------------------- loading
def load_claims(path: str | Path) -> list[Claim]:
    """Read a claims YAML file (top-level ``claims:`` list). Malformed input raises a one-line InputError."""
    p = Path(path)
    if not os.path.lexists(p):
        raise InputError(f"claims file {path}: not found; check the path")
    try:
        data = read_yaml(p)  # a FIFO, device or symlink loop is refused without blocking
    except CatalogError as exc:
        raise InputError(f"claims file {exc}") from None
    if not isinstance(data, dict) or "claims" not in data:
        raise InputError(f"{path}: needs a top-level 'claims:' list")
    if data.get("kind") == "claims" and isinstance(data["claims"], str):  # a claims study naming its claims file
        # (audit37b F8: `check` on it said "claims: Input should be a valid list")
        raise InputError(f"{path}: a claims study (kind: claims, claims: {data['claims']}): run `wseplan report {path}`, "
                         f"or `wseplan check` on the claims file it names")
    try:
        parsed = ClaimsFile.model_validate(data)
    except ValidationError as exc:
        raise InputError(_fmt_error(path, data, exc)) from None
    for i, c in enumerate(parsed.claims):  # names reach terminals and reports: no escapes, markup or huge text
        for field, value, check in (("id", c.id, check_name), ("text", c.text, check_text),
                                    ("model", c.model, check_name), ("target", c.target, check_name),
                                    ("unit", c.unit, check_name), ("software", c.software, check_name),
                                    ("speculative", c.speculative, check_name), ("source", c.source, check_text)):
            if value is None:
                continue
            try:
                check(value)
            except ValueError as exc:
                raise InputError(f"{path}: claims[{i}].{field}: {exc}") from None
    dup = sorted(i for i, n in Counter(c.id for c in parsed.claims).items() if n > 1)
    if dup:
        raise InputError(f"{path}: claims: duplicate id {dup[0]!r}; ids must be unique")
    return list(parsed.claims)


def _fmt_error(path, data, exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = list(err.get("loc", ()))
    where = ""
    if len(loc) >= 2 and loc[0] == "claims" and isinstance(loc[1], int):
        items = data.get("claims") or []
        cid = items[loc[1]].get("id") if loc[1] < len(items) and isinstance(items[loc[1]], dict) else None
        where = f"claims[{loc[1]}]" + (f" ({cid})" if cid else "")
        loc = loc[2:]
    field = ".".join(str(x) for x in loc if not str(x).startswith(("function-", "literal[", "bool", "float", "str")))
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown key; remove it or fix its spelling"
    elif err.get("type") == "missing":
        msg = "required key is missing; add it"
    elif err.get("type") == "literal_error" and field == "kind":
        msg = f"unknown kind; use one of {', '.join(KINDS)}"
    return f"{path}: {where}{'.' if where and field else ''}{field}: {msg}"


# --------------------------------------------------------------------------------------------- units
def claimed_si(c: Claim) -> float | bool:
    """The claimed value in SI units (bool for ``fits``)."""
    if c.kind == "fits":
        if not isinstance(c.value, bool):
            raise InputError(f"claim {c.id}: value must be true or false for kind 'fits'")
        return c.value
    if isinstance(c.value, bool):
        raise InputError(f"claim {c.id}: value must be a number for kind {c.kind!r}")
    raw = c.value
    unit = (c.unit or "").strip()
    if isinstance(raw, str):
        try:
            num = float(raw.replace(",", "").replace("_", ""))
        except ValueError:
            if unit:
                raise InputError(f"claim {c.id}: value {raw!r} must be a plain number when 'unit' is given") from None
            return _parse_with_unit(c, raw)[0]
        if not math.isfinite(num) or num <= 0:
            raise InputError(f"claim {c.id}: value {raw!r} must be a positive finite number")
    else:
        num = float(raw)
    if not unit:
        return num
    return _parse_with_unit(c, f"{num!r} {unit}")[0]


def _parse_with_unit(c: Claim, text: str) -> tuple[float, str | None]:
    num_txt, _, unit = text.strip().partition(" ")
    unit = unit.strip()
    try:
        num = float(num_txt.replace(",", ""))
    except ValueError:
        raise InputError(f"claim {c.id}: cannot read value {text!r}; write a number and a unit") from None
    if c.kind in TIME_KINDS:
        if unit in _TIME_UNITS:
            return num * _TIME_UNITS[unit], "s"
        try:  # a prefixed second (ks, Ms) as every quantity reads it
            v, dim = parse_quantity(f"{num!r} {unit}", field=f"claim {c.id} unit")
        except InputError:
            dim = None
        if dim == "s":
            return v, dim
        raise InputError(f"claim {c.id}: unit {unit!r} unknown for {c.kind}; use one of {', '.join(_TIME_UNITS)}")
    elif c.kind in ("tokens_per_s_per_user", "tokens_per_s"):
        if unit in _RATE_UNITS:
            return num * _RATE_UNITS[unit], "tokens/s"
        raise InputError(f"claim {c.id}: unit {unit!r} unknown for {c.kind}; use tokens/s or tok/s")
    elif c.kind == "usd_per_mtok":
        if unit in _USD_UNITS:
            return num, "USD/Mtok"
        raise InputError(f"claim {c.id}: unit {unit!r} unknown for usd_per_mtok; use USD/Mtok")
    want = _WANT[c.kind]
    v, dim = parse_quantity(f"{num!r} {unit}", field=f"claim {c.id} unit")
    if dim is not None and dim != want:
        raise InputError(f"claim {c.id}: unit {unit!r} is {dim}; kind {c.kind} needs {want}")
    return v, dim


def need(c: Claim, *fields: str) -> None:
    """One-line InputError naming the first of ``fields`` the claim does not state."""
    for f in fields:
        if getattr(c, f) is None:
            raise InputError(f"claim {c.id}: kind {c.kind!r} needs '{f}'; add it")
