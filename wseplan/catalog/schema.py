"""Frozen pydantic schemas for catalog entries (``extra="forbid"``: a misspelt key fails loudly).

Every number is a :class:`Quantity`: a value (a plain SI number or a datasheet string such as
``"80 GB"``), its ``source`` (one id or a list of ids resolved in ``catalogs/sources.yaml``) and its
``basis``. A field's name ends in its unit (``_bytes``, ``_bytes_per_s``, ``_flop_per_s``, ``_hz``,
``_w``, ``_s``, ``_usd`` ...); a unit string of another dimension is rejected on load.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..units import parse_quantity

Basis = Literal["official", "official-secondary", "measured", "third-party", "estimate", "unverified", "user", "quote"]
# A user's own number (basis ``user``) or a quote they hold (``quote``): its ``source`` is free text (e.g.
# "vendor quote, 2026-11"), not an id of catalogs/sources.yaml.
USER_BASES = ("user", "quote")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4")
Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]

# name suffix -> dimension expected from a unit string
_SUFFIX_DIM = [
    ("_bytes_per_s", "bytes/s"),
    ("_flop_per_s", "flop/s"),
    ("_bytes", "bytes"),
    ("_hz", "1/s"),
    ("_w", "W"),
    ("_usd", "USD"),
    ("_s", "s"),
]


def expected_dimension(name: str) -> str | None:
    for suf, dim in _SUFFIX_DIM:
        if name.endswith(suf):
            return dim
    return None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Quantity(_Frozen):
    """A number with its provenance. ``si`` is the value in SI base units."""

    value: float | int | str
    source: str | list[str]
    basis: Basis
    note: str | None = None
    low: float | int | str | None = None
    high: float | int | str | None = None
    si: float = Field(default=0.0, exclude=True)
    dimension: str | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, data):
        if isinstance(data, dict) and "value" in data:
            data = dict(data)
            v, dim = parse_quantity(data["value"], field="value")
            data["si"] = v
            data["dimension"] = dim
            for k in ("low", "high"):
                if data.get(k) is not None:
                    lv, ldim = parse_quantity(data[k], field=k)
                    if dim is not None and ldim is not None and ldim != dim:
                        raise ValueError(f"{k} has dimension {ldim}, value has {dim}")
        return data

    @field_validator("source")
    @classmethod
    def _nonempty(cls, v):
        ids = [v] if isinstance(v, str) else v
        if not ids or any(not s.strip() for s in ids):
            raise ValueError("source must name at least one id from catalogs/sources.yaml (or, with basis user or "
                             "quote, say where the number comes from)")
        return v

    @model_validator(mode="after")
    def _estimate_note(self):
        if self.basis in ("estimate", "unverified") and not self.note:
            raise ValueError(f"basis '{self.basis}' needs a 'note' saying how the number was derived")
        return self

    @property
    def source_ids(self) -> list[str]:
        return [self.source] if isinstance(self.source, str) else list(self.source)

    @property
    def cites_ids(self) -> bool:
        """True when ``source`` names ids of catalogs/sources.yaml; False for a user's free-text source."""
        return self.basis not in USER_BASES

    def bound(self, which: str) -> float:
        """The low/high value in SI units (the nominal value when no range is given)."""
        raw = getattr(self, which)
        return self.si if raw is None else parse_quantity(raw)[0]


class _Checked(_Frozen):
    """Checks that each Quantity field's unit string matches the dimension in the field's name."""

    @model_validator(mode="after")
    def _dims(self):
        for name in type(self).model_fields:
            val = getattr(self, name)
            items = []
            if isinstance(val, Quantity):
                items = [(name, val)]
            elif isinstance(val, dict):
                items = [(f"{name}.{k}", q) for k, q in val.items() if isinstance(q, Quantity)]
            for fname, q in items:
                want = expected_dimension(name)
                if q.dimension is not None and want is not None and q.dimension != want:
                    raise ValueError(f"{fname}: unit of {q.value!r} is {q.dimension}, field needs {want}")
                if q.si < 0:
                    raise ValueError(f"{fname}: must not be negative, got {q.value!r}")
        return self


class Source(_Frozen):
    title: str
    url: str | None = None
    kind: Literal["datasheet", "paper", "docs", "blog", "press", "code", "dataset", "forum", "derived", "measurement"]
    date: str | None = None
    note: str | None = None


class Wafer(_Checked):
    """A Cerebras wafer-scale engine (chip level)."""

    name: str
    aliases: list[str] = []
    system: str
    pe_rows: Quantity
    pe_cols: Quantity
    sram_per_pe_bytes: Quantity
    sram_total_marketing_bytes: Quantity
    sram_bandwidth_bytes_per_s: Quantity
    sram_bytes_per_cycle_per_pe: Quantity
    fabric_bandwidth_bytes_per_s: Quantity
    clock_hz: Quantity
    flop_per_cycle_per_pe: dict[str, Quantity]
    dense_peak_flop_per_s: dict[str, Quantity]
    sparse_marketing_peak_flop_per_s: Quantity
    hop_latency_cycles: Quantity
    link_width_bytes_per_cycle: Quantity
    routing_colors: Quantity
    free_routing_colors: Quantity
    input_queue_depth_wavelets: Quantity
    ramp_latency_cycles: Quantity

    @property
    def num_pes(self) -> int:
        return int(self.pe_rows.si) * int(self.pe_cols.si)

    @property
    def usable_sram_bytes(self) -> float:
        """SRAM of the usable PE rectangle [bytes] (before the runtime reserve)."""
        return self.num_pes * self.sram_per_pe_bytes.si

    def peak_flop_per_s(self, precision: str) -> float:
        """Dense peak over the usable PE grid [FLOP/s] for ``precision`` (16-bit rate for 8/4-bit)."""
        key = precision if precision in self.flop_per_cycle_per_pe else "fp16"
        return self.num_pes * self.flop_per_cycle_per_pe[key].si * self.clock_hz.si


class System(_Checked):
    """A Cerebras system (CS-2, CS-3): one wafer plus power, cooling and I/O."""

    name: str
    aliases: list[str] = []
    wafer: str
    power_w: Quantity
    wafer_power_w: Quantity
    rack_units: Quantity
    io_bandwidth_bytes_per_s: Quantity
    max_cluster_systems: Quantity
    memoryx: str
    swarmx: str


class MemoryX(_Checked):
    """MemoryX weight store: capacity options and the stream bandwidth to each system."""

    name: str
    capacity_options_bytes: dict[str, Quantity]
    default_capacity: str
    dram_stream_bandwidth_bytes_per_s: Quantity
    flash_stream_bandwidth_bytes_per_s: Quantity
    dram_capacity_bytes: Quantity
    link_latency_s: Quantity
    optimizer_bytes_per_param: Quantity


class SwarmX(_Checked):
    """SwarmX broadcast/reduce fabric joining systems in data parallel."""

    name: str
    max_systems: Quantity
    per_system_bandwidth_bytes_per_s: Quantity
    fanout: Quantity
    per_level_latency_s: Quantity


class Gpu(_Checked):
    """One GPU (or TPU chip) and the node it usually ships in."""

    name: str
    aliases: list[str] = []
    vendor: str
    hbm_bytes: Quantity
    hbm_bandwidth_bytes_per_s: Quantity
    dense_peak_flop_per_s: dict[str, Quantity]
    sparse_peak_flop_per_s: dict[str, Quantity] = {}
    scale_up_bandwidth_bytes_per_s: Quantity
    scale_up_domain_gpus: Quantity
    scale_out_bandwidth_bytes_per_s: Quantity
    tdp_w: Quantity
    gpus_per_node: Quantity
    node_power_w: Quantity
    node_price_usd: Quantity
    node_rack_units: Quantity

    def peak_flop_per_s(self, precision: str) -> float:
        """Dense peak [FLOP/s] for ``precision``; a format the GPU lacks runs at the next wider one."""
        order = ["fp4", "int4", "fp8", "int8", "fp16", "bf16", "tf32", "fp32"]
        if precision in self.dense_peak_flop_per_s:
            return self.dense_peak_flop_per_s[precision].si
        i = order.index(precision)
        for p in order[i + 1:]:
            if p in self.dense_peak_flop_per_s:
                return self.dense_peak_flop_per_s[p].si
        raise ValueError(f"{self.name} has no dense peak for {precision}")


class Model(_Frozen):
    """A transformer architecture. ``source``/``basis`` cover every field of the entry."""

    name: str
    aliases: list[str] = []
    source: str | list[str]
    basis: Basis
    note: str | None = None
    # upper bounds keep arithmetic and per-layer arrays finite (the largest published models are far below)
    num_layers: int = Field(gt=0, le=4096)
    d_model: int = Field(gt=0, le=1_048_576)
    num_heads: int = Field(gt=0, le=65_536)
    num_kv_heads: int = Field(gt=0, le=65_536)
    head_dim: int | None = Field(default=None, gt=0, le=65_536)
    d_ff: int = Field(gt=0, le=16_777_216)
    gated_mlp: bool
    vocab_size: int = Field(gt=0, le=100_000_000)
    tied_embeddings: bool
    num_experts: int = Field(default=1, gt=0, le=65_536)
    experts_per_token: int = Field(default=1, gt=0, le=65_536)
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    qkv_bias: bool = False
    linear_bias: bool = False
    learned_pos_embeddings: int = Field(default=0, ge=0, le=100_000_000)
    max_context: int = Field(default=8192, gt=0, le=1_000_000_000)

    @model_validator(mode="after")
    def _shape(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim is None and self.d_model % self.num_heads:
            raise ValueError("d_model must be a multiple of num_heads, or give head_dim")
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token cannot exceed num_experts")
        return self

    @property
    def head_dim_(self) -> int:
        return self.head_dim or self.d_model // self.num_heads


class LayerSpec(_Frozen):
    """One layer of a generic (non-transformer) model."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str
    params: float = Field(ge=0, le=1e16)
    flop_per_sample: float = Field(ge=0, le=1e22)
    activation_bytes_per_sample: float = Field(ge=0, le=1e16)


class GenericModel(_Frozen):
    """A model given as a plain list of layers (e.g. a 3D U-Net or a GNN)."""

    name: str
    aliases: list[str] = []
    source: str | list[str]
    basis: Basis
    note: str | None = None
    layers: list[LayerSpec] = Field(min_length=1, max_length=4096)


class Defaults(_Checked):
    """Documented planning defaults (reserves, Adam state, framework overheads)."""

    wafer_sram_reserve_frac: Quantity
    gpu_hbm_reserve_frac: Quantity
    default_context_tokens: Quantity
    default_batch: Quantity
    adam_state_bytes_per_param: Quantity
    gradient_bytes_per_param: Quantity
    wafer_activation_working_set_factor: Quantity
    gpu_max_tensor_parallel: Quantity
    prefill_chunk_tokens: Quantity
