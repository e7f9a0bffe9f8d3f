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

MAX_GPUS = 2**20
"""Largest GPU (or TPU chip) count a target may name: 1,048,576, several times the largest GPU clusters
announced to date (a few hundred thousand GPUs). Wafer counts are bounded by the catalog instead: a system's
``max_cluster_systems``."""
MAX_TARGET_CHARS = 100


def parse_target(text: str, catalog: Catalog) -> Target:
    """Resolve a target string against the catalog; raise :class:`InputError` with suggestions."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("target: empty; give a hardware key such as wse3, cs3x4 or h100x8")
    if len(text) > MAX_TARGET_CHARS:
        raise InputError(f"target: {len(text):,} characters is not a target; use <hardware key>[x<N>], e.g. cs3x4")
    raw = text.strip().lower()
    idx = catalog.hardware_keys()
    key, count = raw, None
    if raw not in idx:
        m = _COUNT.match(raw)
        if m and m.group("key") in idx:
            key, digits = m.group("key"), m.group("n").lstrip("0")
            if not digits:
                raise InputError(f"target: device count in {text!r} must be at least 1")
            count = int(digits) if len(digits) <= 12 else 10**12
        else:
            base = m.group("key") if m else raw
            raise InputError(
                f"target: unknown hardware {text!r}{suggest(base, idx)}; use <hardware key>[x<N>], "
                "e.g. wse3, cs3x4, h100x8 (see `wseplan catalog list hardware`)"
            )
    sec, hw = idx[key]
    device = getattr(catalog, sec)[hw]
    kind = {"wafers": "wafer", "gpus": "gpu"}.get(sec) or device.kind
    if count is not None:
        if sec == "wafers":
            sys_key = device.system
            limit = int(catalog.systems[sys_key].max_cluster_systems.si) if sys_key in catalog.systems else 1
            what = f"systems of {catalog.systems[sys_key].name if sys_key in catalog.systems else hw} in one " \
                   f"cluster (systems.{sys_key}.max_cluster_systems)"
        else:
            limit, what = MAX_GPUS, f"{'GPUs' if sec == 'gpus' else 'devices'} in one target (wseplan's bound for " \
                                    "device counts)"
        if count > limit:
            shown = f"{count:,}" if count < 10**12 else "more than 10^12"
            raise InputError(f"target: {text.strip()!r} asks for {shown} devices; at most {limit:,} {what}")
    return Target(text=text, kind=kind, key=hw, device=device, count=count)


def split_targets(text: str, example: str = "h100x8,wse3") -> list[str]:
    """The comma-separated entries of a ``--targets`` value; an empty entry (``h100x8,,wse3``) or none at all is a
    one-line InputError (``compare`` and ``scale`` alike)."""
    parts = [t.strip() for t in text.split(",")]
    if any(not t for t in parts) and any(parts):
        raise InputError(f"--targets: an empty entry in {text!r}; separate targets by single commas, e.g. {example}")
    out = [t for t in parts if t]
    if not out:
        raise InputError(f"--targets: give at least one target, e.g. {example}")
    return out


def parse_distinct(names, catalog: Catalog, field: str = "--targets") -> dict[str, Target]:
    """Each of ``names`` parsed (:func:`parse_target`), in order; one target under two spellings (``h100x8`` and
    ``h100-sxmx8``; ``cs3`` and ``wse3``) is refused, naming ``field``: it would be compared with itself."""
    parsed: dict[str, Target] = {}
    seen: dict = {}
    for t in names:
        pt = parsed[t] = parse_target(t, catalog)
        if (pt.key, pt.count) in seen:
            raise InputError(f"{field}: {t} is {seen[(pt.key, pt.count)]} again; name each target once")
        seen[(pt.key, pt.count)] = t
    return parsed
