"""Device families behind one contract (:mod:`.base`), chosen from the catalog entry's kind through a registry.

Built-in families: :mod:`.gpu` (GPU nodes and clusters), :mod:`.wafer` (a wafer with the weights resident in
SRAM: inference) and :mod:`.wafer_stream` (wafers fed by MemoryX through SwarmX: training). A new family (a TPU
pod, an LPU, a future wafer) is one module that subclasses :class:`Family`, declares a catalog entry schema with
:func:`register` and ships its catalog YAML; it is loaded from an installed package's ``wseplan.devices`` entry
point or from a file named in ``$WSEPLAN_PLUGINS`` (see :mod:`wseplan.plugins`). Nothing else in wseplan needs
to change.
"""
from __future__ import annotations

from ..catalog.schema import register_device_schema
from ..errors import InputError
from ..plugins import load_plugins
from .base import BINDINGS, BOTTLENECKS, Family, Hardware, Query  # noqa: F401

_FAMILIES: dict[str, Family] = {}
_LOADED: set[str] = set()


def register(family: Family, *, entry_schema: type | None = None) -> Family:
    """Register a family instance (replacing one of the same name). ``entry_schema`` validates catalog entries of
    the family's kinds in the ``devices:`` section of catalog YAML files."""
    _FAMILIES[family.name] = family
    if entry_schema is not None:
        for k in family.kinds:
            register_device_schema(k, entry_schema)
    return family


def families() -> dict[str, Family]:
    _builtins()
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


def _builtins() -> None:
    if "builtins" in _LOADED:
        return
    _LOADED.add("builtins")
    import importlib

    for name in ("gpu", "wafer", "wafer_stream"):  # each registers itself
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:  # pragma: no cover - during the move only
            if exc.name != f"{__name__}.{name}":
                raise
