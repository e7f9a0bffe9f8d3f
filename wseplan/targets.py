"""Target grammar: ``<hardware key>[x<N>]`` — e.g. ``wse3``, ``cs3x4``, ``h100x8``, ``h200-sxmx16``.

Without a count the planner finds how many devices are needed; with one it uses exactly that many.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .catalog.load import Catalog
from .catalog.schema import DeviceEntry, Gpu, Wafer
from .errors import InputError, suggest


@dataclass(frozen=True)
class Target:
    """A resolved target: hardware kind and key, the device entry, and the requested count (or None)."""

    text: str
    kind: str  # "wafer" | "gpu" | a plug-in family's kind
    key: str
    device: Wafer | Gpu | DeviceEntry
    count: int | None

    @property
    def label(self) -> str:
        return f"{self.key}x{self.count}" if self.count else self.key


_COUNT = re.compile(r"^(?P<key>.+?)x(?P<n>\d+)$")


def parse_target(text: str, catalog: Catalog) -> Target:
    """Resolve a target string against the catalog; raise :class:`InputError` with suggestions."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("target: empty; give a hardware key such as wse3, cs3x4 or h100x8")
    raw = text.strip().lower()
    idx = catalog.hardware_keys()
    key, count = raw, None
    if raw not in idx:
        m = _COUNT.match(raw)
        if m and m.group("key") in idx:
            key, count = m.group("key"), int(m.group("n"))
            if count <= 0:
                raise InputError(f"target: device count in {text!r} must be at least 1")
        else:
            base = m.group("key") if m else raw
            raise InputError(
                f"target: unknown hardware {text!r}{suggest(base, idx)}; use <hardware key>[x<N>], "
                "e.g. wse3, cs3x4, h100x8 (see `wseplan catalog list hardware`)"
            )
    sec, hw = idx[key]
    device = getattr(catalog, sec)[hw]
    kind = {"wafers": "wafer", "gpus": "gpu"}.get(sec) or device.kind
    return Target(text=text, kind=kind, key=hw, device=device, count=count)
