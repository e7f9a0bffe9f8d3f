"""Device families behind one contract (:mod:`.base`), chosen from the catalog entry's kind through a registry.

Built-in families: :mod:`.gpu` (GPU nodes and clusters), :mod:`.wafer` (a wafer with the weights resident in
SRAM: inference) and :mod:`.wafer_stream` (wafers fed by MemoryX through SwarmX: training). A new family (a TPU
pod, an LPU, a future wafer) is one module that subclasses :class:`Family`, declares a catalog entry schema with
:func:`register` and ships its catalog YAML; it is loaded from an installed package's ``wseplan.devices`` entry
point or from a file named in ``$WSEPLAN_PLUGINS`` (see :mod:`wseplan.plugins`). Nothing else in wseplan needs
to change. The registry is :mod:`.registry`; importing this package registers the built-in families.
"""
from __future__ import annotations

from . import gpu, wafer, wafer_stream  # noqa: F401  (the built-in families; each registers itself)
from .base import BINDINGS, BOTTLENECKS, Family, Hardware, Query  # noqa: F401
from .registry import families, family_for, register  # noqa: F401
