"""Software profiles: named, sourced engine behaviour per device family (``catalogs/software/*.yaml``).

A profile holds what the serving or training *software* decides, apart from the hardware: how the engine
schedules requests (in-flight batching or static batches), how prompts are cut into passes, the token budget of
a step, the largest batch, speculative-decoding defaults, and the family's software constants (kernel
efficiencies, launch and host overheads, collective latencies ...) as cited :class:`Quantity` values. Every
command that computes a time takes ``--software NAME``; each family has a default profile (``default: true``),
the production behaviour a buyer means. Research-code behaviour is a named profile of its own.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from ..errors import CatalogError, InputError, suggest, validation_detail
from .load import default_catalog_dir, read_yaml
from .schema import Frozen, Quantity


class Speculative(Frozen):
    """Speculative decoding: a draft model proposes ``draft_tokens`` tokens, the target verifies them in one pass."""

    draft_model: str = Field(min_length=1)
    draft_tokens: Quantity
    acceptance_frac: Quantity
    draft_placement: Literal["same_devices", "own_devices"] = "same_devices"


class KvMemory(Frozen):
    """How much device memory the engine gives its KV cache (GPU inference).

    ``total``: everything but ``frac`` of the device's memory is usable by weights, activations and KV cache (vLLM's
    ``gpu_memory_utilization``, default 0.9; the catalog's ``gpu_hbm_reserve_frac`` when no profile says otherwise).
    ``free``: the KV cache takes ``frac`` of the memory left after the weights, the activation buffers and the
    runtime's own ``runtime_bytes`` (TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction``, default 0.9)."""

    rule: Literal["total", "free"]
    frac: Quantity
    runtime_bytes: Quantity | None = None


class Engine(Frozen):
    """How the engine runs requests."""

    scheduling: Literal["inflight", "static"]
    prefill_pass: Literal["batch", "prompt", "chunk"]
    token_budget: Quantity
    #: the smallest chunk a prompt is cut into where smaller chunks fill a pipeline of stages sooner (None: the
    #: token budget, no finer cut)
    min_chunk_tokens: Quantity | None = None
    max_batch: Quantity
    speculative: Speculative | None = None
    #: prompt tokens on the GEMM kernels always (research code) or on whichever kernel is cheaper per pass (auto)
    prefill_kernel: Literal["auto", "gemm"] = "auto"
    #: wafers: a replica's layers in the fewest layer groups whose regions hold them (``fewest``: research code on one
    #: core grid, the rest of the wafer idle) or in one group per region the wafer tiles into (``fill``: every PE
    #: carries weights, so fewer weight bytes per PE where the weights need fewer regions, e.g. at 4 or 8 bits)
    layer_groups: Literal["fewest", "fill"] = "fewest"
    #: the KV-cache memory rule (GPU inference); None: ``total`` with the catalog's ``gpu_hbm_reserve_frac``
    kv_memory: KvMemory | None = None
    #: the decode attention kernel: a KV head's query heads together on the tensor cores (``grouped``: TensorRT-LLM's
    #: XQA kernels from v0.7, FlashInfer, FlashAttention decode) or one thread block per query head and sequence on
    #: the vector units (``per_query_head``: TensorRT-LLM's masked multi-head attention kernel up to v0.6)
    decode_attention: Literal["grouped", "per_query_head"] = "grouped"


class SoftwareProfile(Frozen):
    name: str
    family: str
    default: bool = False
    description: str
    source: str | list[str]
    basis: Literal["official", "official-secondary", "measured", "third-party", "estimate", "unverified"]
    note: str | None = None
    engine: Engine
    constants: dict[str, Quantity] = {}
    #: the profile whose calibrated mechanism constants this one runs (a variant of the same engine, e.g. with
    #: speculative decoding); None: its own name's
    calibrated_as: str | None = None

    def constant(self, key: str, default: float | None = None) -> float:
        q = self.constants.get(key)
        if q is None:
            if default is None:
                raise CatalogError(f"software {self.name}: constant {key!r} is missing; add it to the profile")
            return default
        return q.si


class SoftwareFile(Frozen):
    software: dict[str, SoftwareProfile]


def software_dir(base: Path) -> Path:
    return base / "software"


@lru_cache(maxsize=8)
def _load_dir(folder: str) -> dict[str, SoftwareProfile]:
    out: dict[str, SoftwareProfile] = {}
    for p in sorted(Path(folder).glob("*.y*ml")):
        data = read_yaml(p)
        if isinstance(data, dict) and isinstance(data.get("software"), dict):
            data = {"software": {k: {"name": k, **v} if isinstance(v, dict) else v for k, v in data["software"].items()}}
        try:
            f = SoftwareFile.model_validate(data)
        except ValidationError as exc:
            loc, msg = validation_detail(exc)
            raise CatalogError(f"{p}: {loc}: {msg}") from None
        out.update(f.software)
    return out


def load_software(catalog) -> dict[str, SoftwareProfile]:
    """Every software profile of the bundled catalog folder (and of ``--catalog`` folders' ``software/``)."""
    profiles = dict(_load_dir(str(software_dir(default_catalog_dir()))))
    for extra in getattr(catalog, "extra_dirs", ()) or ():
        d = software_dir(Path(extra))
        if d.is_dir():
            profiles.update(_load_dir(str(d)))
    for name, prof in profiles.items():
        base = profiles.get(prof.calibrated_as) if prof.calibrated_as else prof
        if base is None or base.family != prof.family:
            raise CatalogError(f"software {name}: calibrated_as: {prof.calibrated_as!r} is not a {prof.family} profile; "
                               f"name one of {', '.join(sorted(k for k, p in profiles.items() if p.family == prof.family))}")
    return profiles


def calibrated_name(profile) -> str:
    """The profile whose fitted mechanism constants ``profile`` runs: its ``calibrated_as``, else its own name without
    a variant suffix (``gpu-production/static`` and ``gpu-production+speculative`` run ``gpu-production``'s)."""
    return profile.calibrated_as or re.split(r"[/+]", profile.name)[0]


def resolve_software(name: str | None, family: str, catalog) -> SoftwareProfile:
    """The named profile (it must belong to ``family``), or the family's default profile."""
    profiles = load_software(catalog)
    if name is None:
        for p in profiles.values():
            if p.family == family and p.default:
                return p
        raise CatalogError(f"no default software profile for the {family} family; mark one `default: true`")
    key = name.lower()
    if key not in profiles:
        raise InputError(f"software: unknown profile {name!r}{suggest(key, profiles)}; choose one of "
                         f"{', '.join(sorted(k for k, p in profiles.items() if p.family == family))}")
    prof = profiles[key]
    if prof.family != family:
        raise InputError(f"software: profile {name!r} is for {prof.family} hardware, not {family}; choose one of "
                         f"{', '.join(sorted(k for k, p in profiles.items() if p.family == family))}")
    return prof
