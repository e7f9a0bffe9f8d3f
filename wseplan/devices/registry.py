"""The registry of device families: :func:`register` (a family, with the schema of its catalog entries),
:func:`families` and :func:`family_for` (the family that answers a phase for a catalog kind). Plug-ins named in
``$WSEPLAN_PLUGINS`` or installed as ``wseplan.devices`` entry points are loaded on first use
(:mod:`wseplan.plugins`)."""
from __future__ import annotations

from ..catalog.schema import register_device_schema
from ..errors import InputError
from ..plugins import load_plugins
from .base import Family

_FAMILIES: dict[str, Family] = {}


def register(family: Family, *, entry_schema: type | None = None) -> Family:
    """Register a family instance (replacing one of the same name). ``entry_schema`` validates catalog entries of
    the family's kinds in the ``devices:`` section of catalog YAML files."""
    _FAMILIES[family.name] = family
    if entry_schema is not None:
        for k in family.kinds:
            register_device_schema(k, entry_schema)
    return family


def families() -> dict[str, Family]:
    """Every registered family by name (the built-in ones and the plug-ins)."""
    load_plugins()
    return dict(_FAMILIES)


def family_for(kind: str, phase: str) -> Family:
    """The family that answers ``phase`` for targets of catalog kind ``kind``."""
    for fam in families().values():
        if kind in fam.kinds and phase in fam.phases:
            return fam
    kinds = sorted({k for f in _FAMILIES.values() for k in f.kinds})
    if kind not in kinds:
        raise InputError(f"target: no device family handles hardware kind {kind!r}; known kinds: {', '.join(kinds)}")
    can = sorted({p for f in _FAMILIES.values() if kind in f.kinds for p in f.phases})
    raise InputError(f"phase: {phase!r} is not modelled for {kind} hardware; use one of {', '.join(can)}")
