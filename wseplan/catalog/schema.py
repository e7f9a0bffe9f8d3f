"""Frozen pydantic schemas for catalog entries (``extra="forbid"``: a misspelt key fails loudly).

Every number is a :class:`Quantity`: a value (a plain SI number or a datasheet string such as
``"80 GB"``), its ``source`` (one id or a list of ids resolved in ``catalogs/sources.yaml``) and its
``basis``. A field's name ends in its unit (``_bytes``, ``_bytes_per_s``, ``_flop_per_s``, ``_hz``,
``_w``, ``_s``, ``_usd`` ...); a unit string of another dimension is rejected on load.
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ..units import parse_quantity
# the checks of names, text and keys live in .names; re-exported here
from .names import (KEY_PATTERN, MAX_NAME_CHARS, MAX_TEXT_CHARS, MODEL_ALIAS_PATTERN, check_hardware_key,  # noqa: F401
                    check_key, check_model_alias, check_name, check_text)
from .precision import datapath_format

Basis = Literal["official", "official-secondary", "measured", "third-party", "estimate", "unverified", "user", "quote"]
# A user's own number (basis ``user``) or a quote they hold (``quote``): its ``source`` is free text (e.g.
# "vendor quote, 2026-11"), not an id of catalogs/sources.yaml.
USER_BASES = ("user", "quote")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4")

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


# --------------------------------------------------------------------------------------------- names and text
Name = Annotated[str, AfterValidator(check_name)]
Text = Annotated[str, AfterValidator(check_text)]
Key = Annotated[str, AfterValidator(check_key)]
ModelAlias = Annotated[str, AfterValidator(check_model_alias)]
HardwareKey = Annotated[str, AfterValidator(check_hardware_key)]


def expected_dimension(name: str) -> str | None:
    for suf, dim in _SUFFIX_DIM:
        if name.endswith(suf):
            return dim
    return None


class Frozen(BaseModel):
    # the base of every catalog schema and result record: immutable, unknown fields refused
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def to_record(self) -> dict:
        return self.model_dump(mode="json")


class Quantity(Frozen):
    """A number with its provenance. ``si`` is the value in SI base units."""

    value: float | int | str
    source: str | list[str]
    basis: Basis
    note: Text | None = None
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
        lo = parse_quantity(self.low)[0] if self.low is not None else None
        hi = parse_quantity(self.high)[0] if self.high is not None else None
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"low {self.low} is above high {self.high}; give the range low <= value <= high")
        v = self.si
        if (lo is not None and v < lo - 1e-9 * abs(lo)) or (hi is not None and v > hi + 1e-9 * abs(hi)):
            if v <= 0 < (lo or 0):  # (a capacity or a clock of 0: say positive, as its field's own rule does)
                raise ValueError(f"value {self.value} must be positive (its range is [{self.low}, {self.high}])")
            raise ValueError(f"value {self.value} lies outside its range [{self.low}, {self.high}]; give low <= value <= high")
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


# dimensions whose quantities must be positive (a capacity, a bandwidth, a rate, a clock, a power)
POSITIVE_DIMENSIONS = ("bytes", "bytes/s", "flop/s", "1/s", "W")
# dimensionless fields that must be positive: counts, widths, per-cycle rates, planning defaults
POSITIVE_FIELDS = frozenset({
    "pe_rows", "pe_cols", "sram_bytes_per_cycle_per_pe", "flop_per_cycle_per_pe", "link_width_bytes_per_cycle",
    "routing_colors", "input_queue_depth_wavelets", "max_cluster_systems", "max_systems", "fanout",
    "scale_up_domain_gpus", "gpus_per_node", "default_context_tokens", "default_batch", "gpu_max_tensor_parallel",
    "prefill_chunk_tokens", "wafer_activation_working_set_factor",
})
# fields that count things: whole numbers
INTEGER_FIELDS = frozenset({
    "pe_rows", "pe_cols", "routing_colors", "free_routing_colors", "input_queue_depth_wavelets",
    "max_cluster_systems", "max_systems", "fanout", "scale_up_domain_gpus", "gpus_per_node", "default_batch",
    "default_context_tokens", "gpu_max_tensor_parallel", "prefill_chunk_tokens",
})
MAX_COUNT = 2**31 - 1
"""Largest value of a count field (PE rows, systems per cluster, GPUs per node, default batch ...)."""


class _Checked(Frozen):
    """Checks every Quantity field: its unit string matches the dimension in the field's name, it is not
    negative, capacities/bandwidths/rates/clocks/powers and counts are positive, counts are whole numbers of at
    most :data:`MAX_COUNT`, and ``_frac`` fields lie in [0, 1)."""

    @model_validator(mode="after")
    def _dims(self):
        for name in type(self).model_fields:
            val = getattr(self, name)
            items = []
            if isinstance(val, Quantity):
                items = [(name, val)]
            elif isinstance(val, dict):
                items = [(f"{name}.{k}", q) for k, q in val.items() if isinstance(q, Quantity)]
            want = expected_dimension(name)
            for fname, q in items:
                if q.dimension is not None and want is not None and q.dimension != want:
                    raise ValueError(f"{fname}: unit of {q.value!r} is {q.dimension}, field needs {want}")
                if q.si < 0:
                    raise ValueError(f"{fname}: must not be negative, got {q.value!r}")
                if q.si == 0 and (want in POSITIVE_DIMENSIONS or name in POSITIVE_FIELDS):
                    raise ValueError(f"{fname}: must be positive, got {q.value!r}")
                if name in INTEGER_FIELDS and (q.si != math.floor(q.si) or q.si > MAX_COUNT):
                    raise ValueError(f"{fname}: must be a whole number of at most {MAX_COUNT:,}, got {q.value!r}")
                if name.endswith("_frac") and not q.si < 1:
                    raise ValueError(f"{fname}: a fraction must be below 1, got {q.value!r}")
                for b in ("low", "high"):  # a range keeps the value's sign rules
                    raw = getattr(q, b)
                    if raw is not None and (q.bound(b) < 0 or (q.bound(b) == 0 and (want in POSITIVE_DIMENSIONS
                                                                                       or name in POSITIVE_FIELDS))):
                        raise ValueError(f"{fname}.{b}: must {'be positive' if q.bound(b) == 0 else 'not be negative'}"
                                         f", got {raw!r}")
        return self


class Source(Frozen):
    title: Text
    url: Text | None = None
    kind: Literal["datasheet", "paper", "docs", "blog", "press", "code", "dataset", "forum", "derived", "measurement"]
    date: Text | None = None
    note: Text | None = None


class Wafer(_Checked):
    """A Cerebras wafer-scale engine (chip level)."""

    name: Name
    aliases: list[HardwareKey] = []
    system: Key
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

    def flop_per_cycle(self, precision: str) -> float:
        """FLOP per cycle of one PE for ``precision`` [FLOP]: a format without its own SIMD runs at a wider one that
        holds its values (:func:`~wseplan.catalog.precision.datapath_format`; 8- and 4-bit formats at the 16-bit
        rate)."""
        p = datapath_format(self.flop_per_cycle_per_pe, precision)
        if p is None:
            raise ValueError(f"{self.name} has no FLOP/cycle for {precision}")
        return self.flop_per_cycle_per_pe[p].si

    def peak_flop_per_s(self, precision: str) -> float:
        """Dense peak over the usable PE grid [FLOP/s] for ``precision`` (16-bit rate for 8/4-bit)."""
        return self.num_pes * self.flop_per_cycle(precision) * self.clock_hz.si


class System(_Checked):
    """A Cerebras system (CS-2, CS-3): one wafer plus power, cooling and I/O."""

    name: Name
    aliases: list[HardwareKey] = []
    wafer: Key
    power_w: Quantity
    wafer_power_w: Quantity
    rack_units: Quantity
    io_bandwidth_bytes_per_s: Quantity
    max_cluster_systems: Quantity
    memoryx: Key
    swarmx: Key
    #: CPU servers of a weight-streaming cluster per system besides MemoryX (SwarmX, input workers, activation
    #: servers) and the draw of one such server; None: not counted
    cluster_nodes_per_system: Quantity | None = None
    cluster_node_power_w: Quantity | None = None
    #: rack space of one such server [U]; None: not counted
    cluster_node_rack_units: Quantity | None = None
    #: whether the system trains by weight streaming from MemoryX (the CS-2 and later; None or a quantity of 1: yes,
    #: 0: no, with its source)
    weight_streaming: Quantity | None = None


class MemoryX(_Checked):
    """MemoryX weight store: capacity options and the stream bandwidth to each system."""

    name: Name
    capacity_options_bytes: dict[str, Quantity]
    default_capacity: str
    dram_stream_bandwidth_bytes_per_s: Quantity
    flash_stream_bandwidth_bytes_per_s: Quantity
    dram_capacity_bytes: Quantity
    link_latency_s: Quantity
    optimizer_bytes_per_param: Quantity
    update_nodes: Quantity
    node_update_bandwidth_bytes_per_s: Quantity
    #: DRAM and flash one MemoryX server holds (node counts of an option, for its power); None: not counted
    node_dram_bytes: Quantity | None = None
    node_flash_bytes: Quantity | None = None
    #: what published deployments provision per parameter (the state itself is ``optimizer_bytes_per_param``); a
    #: plan on an option holding less says so; None: not stated
    provisioned_bytes_per_param: Quantity | None = None

    def update_bytes_per_s(self, *, dram: bool = True) -> float:
        """Optimizer-update memory traffic of the whole MemoryX: nodes x sustained bandwidth per node, slowed by
        the flash/DRAM stream ratio when the state sits in the flash tier [bytes/s]."""
        rate = self.update_nodes.si * self.node_update_bandwidth_bytes_per_s.si
        if dram:
            return rate
        return rate * self.flash_stream_bandwidth_bytes_per_s.si / self.dram_stream_bandwidth_bytes_per_s.si


class SwarmX(_Checked):
    """SwarmX broadcast/reduce fabric joining systems in data parallel."""

    name: Name
    max_systems: Quantity
    per_system_bandwidth_bytes_per_s: Quantity
    fanout: Quantity
    per_level_latency_s: Quantity


class Gpu(_Checked):
    """One GPU (or TPU chip) and the node it usually ships in."""

    name: Name
    aliases: list[HardwareKey] = []
    vendor: Name
    hbm_bytes: Quantity
    hbm_bandwidth_bytes_per_s: Quantity
    dense_peak_flop_per_s: dict[str, Quantity]
    sparse_peak_flop_per_s: dict[str, Quantity] = {}
    matmul_attainable_rel: dict[Literal["16bit", "8bit", "4bit"], Quantity] = {}
    #: vector-unit instruction issue as FLOP/s (SMs x clock x 4 warp schedulers x 32 lanes x 2), where it exceeds the
    #: FP32 peak (Volta, Ampere: 64 FP32 lanes per SM, the other issue slots feed other pipes); None: the FP32 peak
    vector_issue_flop_per_s: Quantity | None = None
    scale_up_bandwidth_bytes_per_s: Quantity
    #: ``switch`` (NVSwitch: any group of the domain gets each GPU's whole scale-up bandwidth) or ``full-mesh`` (point
    #: to point links, one per peer: a group of g GPUs gets g - 1 links, ``scale_up_link_bandwidth_bytes_per_s`` each)
    scale_up_topology: Literal["switch", "full-mesh"] = "switch"
    scale_up_link_bandwidth_bytes_per_s: Quantity | None = None
    scale_up_domain_gpus: Quantity
    scale_out_bandwidth_bytes_per_s: Quantity
    tdp_w: Quantity
    gpus_per_node: Quantity
    node_power_w: Quantity
    node_price_usd: Quantity
    node_rack_units: Quantity

    @model_validator(mode="after")
    def _mesh_links(self):
        link = self.scale_up_link_bandwidth_bytes_per_s
        if self.scale_up_topology == "full-mesh" and link is None:
            raise ValueError("scale_up_topology full-mesh needs scale_up_link_bandwidth_bytes_per_s (one link, one "
                             "direction)")
        if link is not None and link.si > self.scale_up_bandwidth_bytes_per_s.si:
            raise ValueError(f"scale_up_link_bandwidth_bytes_per_s: one link ({link.value!r}) exceeds the GPU's whole "
                             f"scale-up bandwidth ({self.scale_up_bandwidth_bytes_per_s.value!r})")
        return self

    def peak_flop_per_s(self, precision: str, *, bound: bool = False) -> float:
        """Dense peak [FLOP/s] for ``precision``; a format the GPU lacks runs at a wider one that holds its values
        (:func:`~wseplan.catalog.precision.datapath_format`: a float format at a float rate only; 4-bit weights at the
        16-bit rate, or with ``bound`` at the fastest rate any recipe could run them, 8-bit). ValueError when the
        catalog lists none (no fp32 figure entered, say)."""
        p = datapath_format(self.dense_peak_flop_per_s, precision, bound=bound)
        if p is None:
            raise ValueError(f"{self.name} has no dense peak for {precision}")
        return self.dense_peak_flop_per_s[p].si

    def matmul_rel(self, precision: str) -> float:
        """Largest fraction of the dense peak this GPU's matmuls reach, relative to the H100 SXM's (measured maximum
        achievable matmul FLOPS, ``matmul_attainable_rel``; 1 where not given). The calibration's GEMM efficiencies
        are fitted across GPUs; this ratio scales them per GPU (an MI300X reaches 51% of its peak where an H100
        reaches 80%). The time models apply it to other vendors' GPUs only (:meth:`gemm_library_rel`); applied to every
        GPU it raised the held-out training error (docs/validation.md, "Mechanisms tried")."""
        widths = ("4bit", "8bit", "16bit")
        start = 0 if precision in ("fp4", "int4") else 1 if precision in ("fp8", "int8") else 2
        for c in widths[start:]:  # a narrower format without its own figure takes the next wider one's
            if c in self.matmul_attainable_rel:
                return self.matmul_attainable_rel[c].si
        return 1.0

    def gemm_library_rel(self, precision: str) -> float:
        """Scale on the calibration's GEMM efficiencies for this GPU's vendor GEMM library: the fitted
        ``gemm_max_frac_*`` are those of NVIDIA's libraries (the fitted rows run NVIDIA GPUs), so an NVIDIA GPU takes
        1 (the spread between its generations is inside the fit); another vendor's GPU takes its measured MAMF ratio
        to the H100 SXM (:meth:`matmul_rel`: MI300X 0.64, MI325X 0.75)."""
        return 1.0 if self.vendor == "nvidia" else self.matmul_rel(precision)


class DeviceEntry(_Checked):
    """Base of the catalog entries of plug-in device families (the ``devices:`` section of a catalog file).

    ``kind`` names the family's hardware kind; the family registers a subclass with its own fields through
    :func:`wseplan.devices.register` (``entry_schema=``). Cost needs ``system_power_w``, ``rack_units`` and
    ``devices_per_system`` on every kind.
    """

    kind: str
    name: str
    aliases: list[str] = []


#: hardware kind -> schema of its entries in the ``devices:`` section (filled by device families)
DEVICE_ENTRY_SCHEMAS: dict[str, type[DeviceEntry]] = {}


def register_device_schema(kind: str, schema: type[DeviceEntry]) -> None:
    """Declare the catalog entry schema of a plug-in hardware kind."""
    if not (isinstance(schema, type) and issubclass(schema, DeviceEntry)):
        raise TypeError("entry_schema must subclass wseplan.catalog.schema.DeviceEntry")
    DEVICE_ENTRY_SCHEMAS[kind] = schema

LayerType = Literal["full_attention", "sliding_attention", "chunked_attention"]


def _dim():  # an optional positive width [elements]
    return Field(default=None, gt=0, le=16_777_216)


class Model(Frozen):
    """A transformer architecture. ``source``/``basis`` cover every field of the entry.

    The first block of fields describes a uniform decoder (every layer alike; ``num_experts > 1`` makes every
    MLP a routed MoE of ``num_experts`` MLPs of width ``d_ff``). The optional fields after it describe the
    architectures of current config.json files; their defaults give exactly the uniform decoder, so an entry
    that omits them is counted as before.

    Layers with a dense MLP in an MoE model (``num_experts > 1``): layer ``i`` (0-based) is MoE when
    ``i >= first_dense_layers``, ``i % moe_layer_step == moe_layer_offset`` and ``i`` is not in
    ``dense_layers``; every other layer has one dense MLP of width ``dense_d_ff`` (``d_ff`` when unset).
    Llama 4 Maverick: step 2, offset 1 (``interleave_moe_layer_step``); DeepSeek-V3: ``first_dense_layers`` 3
    (``first_k_dense_replace``); Qwen-MoE ``decoder_sparse_step`` s: step s, offset s - 1, ``dense_layers`` =
    ``mlp_only_layers``.

    Attention: ``attention="mla"`` is DeepSeek multi-head latent attention (low-rank Q with ``q_lora_rank``,
    a shared KV latent of ``kv_lora_rank`` plus a ``qk_rope_head_dim`` RoPE key, per-head
    ``qk_nope_head_dim``/``v_head_dim``); ``head_dim`` is then the query/key head width
    (``qk_nope_head_dim + qk_rope_head_dim``). ``layer_types`` names each layer's attention span: full,
    a sliding window of ``sliding_window`` tokens, or chunked attention within blocks of ``attention_chunk``
    tokens (Llama 4); unset means every layer attends to the full context.
    """

    name: Name
    aliases: list[ModelAlias] = []
    source: str | list[str]
    basis: Basis
    note: Text | None = None
    # upper bounds keep arithmetic and per-layer arrays finite (the largest published models are far below)
    num_layers: int = Field(gt=0, le=4096)
    d_model: int = Field(gt=0, le=1_048_576)
    num_heads: int = Field(gt=0, le=65_536)
    num_kv_heads: int = Field(gt=0, le=65_536)
    head_dim: int | None = Field(default=None, gt=0, le=65_536)
    d_ff: int = Field(gt=0, le=16_777_216)
    gated_mlp: bool
    vocab_size: int = Field(gt=0, le=100_000_000)
    #: the tokenizer of its token ids (``llama2``, ``llama3``, ...): a speculative draft's and target's must be one;
    #: None (a config.json, a catalog entry without it): judged by ``vocab_size`` alone
    tokenizer: Name | None = None
    tied_embeddings: bool
    num_experts: int = Field(default=1, gt=0, le=65_536)
    experts_per_token: int = Field(default=1, gt=0, le=65_536)
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    qkv_bias: bool = False
    linear_bias: bool = False
    learned_pos_embeddings: int = Field(default=0, ge=0, le=100_000_000)
    #: longest sequence the model attends (config.json ``max_position_embeddings``); None: not stated
    max_context: int | None = Field(default=None, gt=0, le=1_000_000_000)
    #: the published checkpoint's format where not 16-bit (DeepSeek-V3 fp8, gpt-oss fp4; plans at another precision say
    #: so), its bits per quantized weight with block scales (MXFP4: 4.25, OCP Microscaling v1.0) and which weights it
    #: quantizes: all, or the routed experts alone (gpt-oss keeps the rest bf16; config.json quantization_config)
    native_precision: Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"] | None = None
    native_bits_per_weight: float | None = Field(default=None, gt=0, le=32)
    native_quantized: Literal["all", "experts"] = "all"
    # -- optional: which layers are MoE, and their MLPs -------------------------------------------------
    #: MLP width of the dense (non-MoE) layers of an MoE model; unset: ``d_ff``
    dense_d_ff: int | None = _dim()
    #: leading layers with a dense MLP (DeepSeek ``first_k_dense_replace``)
    first_dense_layers: int = Field(default=0, ge=0, le=4096)
    #: MoE on layers with ``index % moe_layer_step == moe_layer_offset``
    moe_layer_step: int = Field(default=1, gt=0, le=4096)
    moe_layer_offset: int = Field(default=0, ge=0, le=4095)
    #: further layers (0-based indices) with a dense MLP (Qwen-MoE ``mlp_only_layers``)
    dense_layers: list[int] = []
    #: always-active experts in each MoE layer, each an MLP of width ``shared_expert_d_ff`` (unset: ``d_ff``)
    num_shared_experts: int = Field(default=0, ge=0, le=65_536)
    shared_expert_d_ff: int | None = _dim()
    #: a d x 1 sigmoid gate on the shared expert output (Qwen2-MoE ``shared_expert_gate``)
    shared_expert_gate: bool = False
    #: a bias of ``num_experts`` entries on the router (gpt-oss router bias, DeepSeek-V3 score-correction bias)
    router_bias: bool = False
    # -- optional: attention ---------------------------------------------------------------------------
    attention: Literal["standard", "mla"] = "standard"
    q_lora_rank: int | None = _dim()
    kv_lora_rank: int | None = _dim()
    qk_nope_head_dim: int | None = _dim()
    qk_rope_head_dim: int | None = _dim()
    v_head_dim: int | None = _dim()
    #: learned RMSNorm weights (head_dim each) on queries and keys (Qwen3, Gemma 3); Llama 4's parameter-free L2 norms not
    qk_norm: bool = False
    #: one learned softmax sink logit per head per layer (gpt-oss)
    attention_sinks: bool = False
    layer_types: list[LayerType] | None = None
    sliding_window: int | None = Field(default=None, gt=0, le=1_000_000_000)
    attention_chunk: int | None = Field(default=None, gt=0, le=1_000_000_000)
    # -- optional: the rest ----------------------------------------------------------------------------
    #: norms per block (Gemma 2/3 add a norm after attention and after the MLP: 4)
    norms_per_block: int = Field(default=2, ge=0, le=16)
    dropout: bool | None = None  # dropout masks kept for backward; unset: as ``linear_bias`` (GPT-style models)
    #: multi-token-prediction blocks beside the model (config.json ``num_nextn_predict_layers``), not in its totals: the
    #: draft of ``--speculative mtp`` (:func:`wseplan.devices.speculation.mtp_draft`)
    mtp_layers: int = Field(default=0, ge=0, le=16)
    #: parameters of a non-text encoder and its projector held with the model (Llama 4's vision tower):
    #: stored with the embedding, counted in totals and weight bytes, not run per text token
    encoder_params: int = Field(default=0, ge=0, le=10**13)

    @model_validator(mode="after")
    def _shape(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim is None and self.d_model % self.num_heads and self.attention == "standard":
            raise ValueError("d_model must be a multiple of num_heads, or give head_dim")
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token cannot exceed num_experts")
        if self.moe_layer_offset >= self.moe_layer_step:
            raise ValueError(f"moe_layer_offset ({self.moe_layer_offset}) must be below moe_layer_step ({self.moe_layer_step})")
        if self.first_dense_layers > self.num_layers:
            raise ValueError(f"first_dense_layers ({self.first_dense_layers}) exceeds num_layers ({self.num_layers})")
        if self.num_experts == 1:
            for k in ("dense_d_ff", "shared_expert_d_ff"):
                if getattr(self, k) is not None:
                    raise ValueError(f"{k} belongs to an MoE model (num_experts > 1); a dense model's MLP width is d_ff")
            if self.num_shared_experts:
                raise ValueError("num_shared_experts needs routed experts (num_experts > 1)")
        bad = [i for i in self.dense_layers if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"dense_layers: index {bad[0]} is outside 0..{self.num_layers - 1}")
        if self.attention == "mla":
            missing = [k for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
                       if getattr(self, k) is None]
            if missing:
                raise ValueError(f"attention 'mla' needs {', '.join(missing)}")
        elif any(getattr(self, k) is not None for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                         "qk_rope_head_dim", "v_head_dim")):
            raise ValueError("q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim "
                             "belong to attention 'mla'; set attention: mla or remove them")
        if self.layer_types is not None:
            if len(self.layer_types) != self.num_layers:
                raise ValueError(f"layer_types has {len(self.layer_types)} entries; num_layers is {self.num_layers}")
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ValueError("layer_types has sliding_attention layers; give sliding_window")
            if "chunked_attention" in self.layer_types and self.attention_chunk is None:
                raise ValueError("layer_types has chunked_attention layers; give attention_chunk")
        return self

    @property
    def head_dim_(self) -> int:
        if self.head_dim:
            return self.head_dim
        if self.attention == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.d_model // self.num_heads


class LayerSpec(Frozen):
    """One layer of a generic (non-transformer) model."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name
    params: float = Field(ge=0, le=1e16)
    flop_per_sample: float = Field(ge=0, le=1e22)
    activation_bytes_per_sample: float = Field(ge=0, le=1e16)


class GenericModel(Frozen):
    """A model given as a plain list of layers (e.g. a 3D U-Net or a GNN)."""

    name: Name
    aliases: list[ModelAlias] = []
    source: str | list[str]
    basis: Basis
    note: Text | None = None
    layers: list[LayerSpec] = Field(min_length=1, max_length=4096)


class Defaults(_Checked):
    """Documented planning defaults (reserves, Adam state, framework overheads)."""

    wafer_sram_reserve_frac: Quantity
    gpu_hbm_reserve_frac: Quantity
    default_context_tokens: Quantity
    default_batch: Quantity
    adam_state_bytes_per_param: Quantity
    gradient_bytes_per_param: Quantity
    #: GPU training: bytes per element of the LM head's logits held for the loss (last pipeline stage, one micro-batch)
    training_logits_bytes_per_element: Quantity
    fp16_gradient_bytes_per_param: Quantity
    gpu_job_interruptions_per_gpu_hour: Quantity
    job_interruption_loss_s: Quantity
    wafer_activation_working_set_factor: Quantity
    gpu_max_tensor_parallel: Quantity
    #: GPU training: context parallelism is searched where each rank keeps at least this many tokens (wseplan.devices.gpu)
    gpu_cp_min_tokens_per_rank: Quantity
    gpu_train_min_replica_frac: Quantity
    gpu_infer_idle_max_pipeline: Quantity
    prefill_chunk_tokens: Quantity
    default_output_tokens: Quantity
    #: serving: the prompt tokens of a request when none are given (every command: serve, time, cost, compare)
    default_prompt_tokens: Quantity
    default_train_batch: Quantity
    default_train_context_tokens: Quantity
    default_min_tokens_per_s_per_user: Quantity
    #: speculative decoding with a draft named on a profile that states none: its draft length and per-token
    #: acceptance (the production profiles' values)
    default_draft_tokens: Quantity
    default_draft_acceptance_frac: Quantity
    #: decode/serving layouts within this fraction of the fastest time per token count as equally fast (wseplan.plan)
    layout_near_tie_frac: Quantity
    #: 4-bit training recipes: the share of the blocks whose linear layers stay in 16 bits
    fp4_training_high_precision_frac: Quantity
