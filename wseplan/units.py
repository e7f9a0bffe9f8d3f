"""Unit parsing: datasheet strings in catalogs -> SI base units.

Inside wseplan every quantity is in SI base units (bytes, s, FLOP, FLOP/s, bytes/s, W, J, USD).
Catalog YAML may hold datasheet strings such as ``"80 GB"`` or ``"3.35 TB/s"``; :func:`parse_quantity`
converts them on load. Decimal prefixes are powers of 1000 (GB = 1e9 bytes), binary prefixes
powers of 1024 (GiB = 2**30 bytes); ``b``/``bit`` is a bit (1/8 byte), ``B`` a byte.
"""
from __future__ import annotations

import math
import re

from .errors import InputError

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

# unit word -> (dimension, factor to SI base)
_BASE = {
    "B": ("bytes", 1.0),
    "byte": ("bytes", 1.0),
    "bytes": ("bytes", 1.0),
    "b": ("bytes", 1 / 8),
    "bit": ("bytes", 1 / 8),
    "bits": ("bytes", 1 / 8),
    "B/s": ("bytes/s", 1.0),
    "b/s": ("bytes/s", 1 / 8),
    "bps": ("bytes/s", 1 / 8),
    "FLOP/s": ("flop/s", 1.0),
    "FLOPS": ("flop/s", 1.0),
    "OP/s": ("flop/s", 1.0),
    "FLOP": ("flop", 1.0),
    "Hz": ("1/s", 1.0),
    "W": ("W", 1.0),
    "J": ("J", 1.0),
    "s": ("s", 1.0),
    "ms": ("s", 1e-3),
    "us": ("s", 1e-6),
    "µs": ("s", 1e-6),
    "ns": ("s", 1e-9),
    "h": ("s", 3600.0),
    "USD": ("USD", 1.0),
    "$": ("USD", 1.0),
    "U": ("U", 1.0),
    "cycles": ("cycles", 1.0),
    "cycle": ("cycles", 1.0),
}

MAX_ABS_SI = 1e30
"""Largest magnitude a quantity may have in SI base units. The largest real quantities wseplan reads are
training FLOP counts (~1e26) and sparse marketing peaks (~1e17 FLOP/s); 1e30 leaves room and keeps every product
of two quantities finite in float64."""

_RE = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/$]*)\s*$")


def parse_quantity(text: str | int | float, *, field: str = "value") -> tuple[float, str | None]:
    """Parse ``"3.35 TB/s"`` -> ``(3.35e12, "bytes/s")``.

    Parameters
    ----------
    text : str or number
        A number (already SI, returned with dimension ``None``) or "<number> <unit>".
    field : str
        Name used in the error message.

    Returns
    -------
    (value, dimension) : (float, str or None)
        The value in SI base units and its dimension.

    Raises
    ------
    InputError
        When the text cannot be read, the unit is unknown, the number is not finite, or its magnitude in SI
        units exceeds :data:`MAX_ABS_SI`.
    """
    if isinstance(text, bool):
        raise InputError(f"{field}: expected a number or a '<number> <unit>' string, got {text!r}")
    if isinstance(text, (int, float)):
        try:
            v = float(text)
        except OverflowError:  # an int beyond float range
            return _bounded(math.inf, text, field), None
        if not math.isfinite(v):
            raise InputError(f"{field}: value must be finite, got {_short(text)}")
        return _bounded(v, text, field), None
    if not isinstance(text, str):
        raise InputError(f"{field}: expected a number or a '<number> <unit>' string, got {type(text).__name__}")
    if len(text) > 200:
        raise InputError(f"{field}: {len(text):,} characters is not a quantity; write e.g. '80 GB', '3.35 TB/s'")
    m = _RE.match(text)
    if not m:
        raise InputError(f"{field}: cannot read {text!r}; write e.g. '80 GB', '3.35 TB/s', '700 W'")
    num = float(m.group(1))
    unit = m.group(2)
    if not math.isfinite(num):
        raise InputError(f"{field}: value must be finite, got {text!r}")
    if unit == "":
        return _bounded(num, text, field), None
    if unit in _BASE:
        dim, f = _BASE[unit]
        return _bounded(num * f, text, field), dim
    for pre, f in list(_BIN.items()) + [(k, v) for k, v in _DEC.items() if k]:
        if unit.startswith(pre) and unit[len(pre):] in _BASE:
            dim, g = _BASE[unit[len(pre):]]
            if dim in ("s", "USD", "U", "cycles") and pre not in ("k", "K", "M"):
                break
            return _bounded(num * f * g, text, field), dim
    raise InputError(
        f"{field}: unknown unit {unit!r} in {text!r}; use B, GB, GiB, b, Gb, B/s, TB/s, Gb/s, "
        "FLOP/s, TFLOP/s, Hz, GHz, W, kW, J, s, ms, us, USD"
    )


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text):,} characters)"


def _bounded(v: float, text, field: str) -> float:
    if abs(v) > MAX_ABS_SI:
        raise InputError(f"{field}: {_short(text)} is larger than {MAX_ABS_SI:g} in SI units; check the value and "
                         "its unit")
    return v
