"""JSON Schemas of the files a user writes, generated from the pydantic models that read them.

``wseplan catalog schema KIND`` prints one; docs/catalogs.md shows a worked example of each. The schema
describes the shape (keys, types, allowed words); the loaders check more (units against field names, source
ids, ranges), so a file that passes the schema can still be refused with a one-line reason.
"""
from __future__ import annotations

from typing import Optional

from pydantic import ConfigDict, create_model

from ..catalog.load import SECTIONS
from ..errors import InputError, suggest

KINDS = {
    "hardware": "a hardware catalog file (wafers, systems, memoryx, swarmx, gpus) for --catalog DIR",
    "model": "a model catalog file (models: transformer architectures; generic_models: layer lists)",
    "sources": "the sources file (source id -> title, url, kind, date)",
    "defaults": "the planning defaults file (defaults:)",
    "catalog": "any catalog file (every top-level section allowed)",
    "price": "a prices file for --prices FILE (date, site, hardware, memoryx, service_prices)",
    "study": "a study file for `wseplan report STUDY.yaml`",
    "demand": "a demand file for `wseplan fleet DEMAND.yaml`",
    "sweep": "a sweep file for `wseplan sweep SWEEP.yaml`",
    "claims": "a claims file for `wseplan check CLAIMS.yaml`",
}
_SECTIONS = {"hardware": ("sources", "wafers", "systems", "memoryx", "swarmx", "gpus"),
             "model": ("sources", "models", "generic_models"), "sources": ("sources",), "defaults": ("defaults",)}
# fields a model computes itself (never written in a file)
_INTERNAL = {"si", "dimension", "files"}


def json_schema(kind: str) -> dict:
    """The JSON Schema (draft 2020-12) of a ``kind`` file; ``kind`` is one of :data:`KINDS`."""
    if kind not in KINDS:
        raise InputError(f"kind: unknown {kind!r}{suggest(kind, KINDS)}; use one of {', '.join(KINDS)}")
    if kind in _SECTIONS or kind == "catalog":
        names = SECTIONS if kind == "catalog" else _SECTIONS[kind]
        fields = {sec: (Optional[SECTIONS[sec]] if sec == "defaults" else Optional[dict[str, SECTIONS[sec]]], None)
                  for sec in names}
        model = create_model(f"{kind.title()}File", __config__=ConfigDict(extra="forbid"), **fields)
    elif kind == "price":
        from ..analytic.cost import Prices

        model = Prices
    elif kind == "study":
        from .study import Study

        model = Study
    elif kind == "demand":
        from ..optimize.fleet import DemandSpec

        model = DemandSpec
    elif kind == "sweep":
        from ..sweep import Sweep

        model = Sweep
    else:
        from ..claims import ClaimsFile

        model = ClaimsFile
    schema = model.model_json_schema(mode="validation")
    _strip_internal(schema)
    schema = _number_or_text(schema)
    if kind == "price":  # a --prices file may hold any subset: its entries replace the bundled ones field by field
        _strip_required(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"wseplan {kind} file"
    schema["description"] = KINDS[kind]
    return schema


# YAML reads 300e9 (no dot, no sign) as text; wseplan parses it, and unit strings ("1.6 MW") where a field takes a
# unit, so a number field also accepts a number written as text, optionally followed by a unit.
NUMBER_TEXT = r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?(\s*[A-Za-z%$/][^\n]*)?\s*$"


def _number_or_text(node):
    if isinstance(node, dict):
        out = {k: _number_or_text(v) for k, v in node.items()}
        if out.get("type") == "number":
            num = {k: v for k, v in out.items() if k not in ("title", "description", "default")}
            meta = {k: v for k, v in out.items() if k in ("title", "description", "default")}
            return {**meta, "anyOf": [num, {"type": "string", "pattern": NUMBER_TEXT}]}
        return out
    if isinstance(node, list):
        return [_number_or_text(v) for v in node]
    return node


def _strip_required(node) -> None:
    if isinstance(node, dict):
        node.pop("required", None)
        for v in node.values():
            _strip_required(v)
    elif isinstance(node, list):
        for v in node:
            _strip_required(v)


def _strip_internal(node) -> None:
    """Drop the computed fields (``si``, ``dimension``, ``files``) from every object schema."""
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for k in _INTERNAL & set(props):
                del props[k]
            if "required" in node:
                node["required"] = [r for r in node["required"] if r not in _INTERNAL]
        for v in node.values():
            _strip_internal(v)
    elif isinstance(node, list):
        for v in node:
            _strip_internal(v)
