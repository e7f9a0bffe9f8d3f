"""The one human number formatter, and the machine serialisers (JSON, CSV).

Everything a person reads (CLI tables, Markdown reports, plot ticks) is formatted here: thousands separators,
4 significant digits, units with readable prefixes, durations in ns … s, min, h, days or years as fits, money as
``$`` with k/M/B, fractions as percentages, booleans as yes/no, and never e-notation (very large or very small
bare numbers are written ``1.23×10¹⁵``). Machine formats (JSON, CSV) keep SI numbers at full precision.
Everything is deterministic: same values, same text.

A record field's unit is read from its name (STYLE: a name ends in its unit): ``step_s`` is a duration,
``capex_usd`` money, ``hbm_bandwidth_bytes_per_s`` a byte rate, ``utilization_frac`` a fraction,
``output_usd_per_mtok`` dollars per million tokens. :func:`field_unit` does the parsing.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass

from ..errors import InputError

MISSING = "–"
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


# --------------------------------------------------------------------------------------------- numbers
def fmt_num(v, sig: int = 4) -> str:
    """A number for a reader: ``1,235,000``, ``12.35``, ``0.001235``, ``1.235×10¹⁵``; text passes through.

    Integers are exact with thousands separators (up to 10¹⁸); floats keep ``sig`` significant digits; whole
    floats below 10¹⁵ are shown exactly. None and NaN are ``–``, booleans ``yes``/``no``.
    """
    if v is None:
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) < 10**18 else _pow10(float(v), sig)
    if isinstance(v, float):
        if math.isnan(v):
            return MISSING
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        if v == 0:
            return "0"
        a = abs(v)
        if a >= 1e15 or a < 1e-6:
            return _pow10(v, sig)
        if v.is_integer():  # a whole number (a count held as float) is shown exactly
            return f"{int(v):,}"
        digits = sig - 1 - int(math.floor(math.log10(a)))
        r = round(v, digits)
        if digits <= 0:
            return f"{int(r):,}"
        text = f"{r:,.{digits}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    if hasattr(v, "item") and not isinstance(v, str):  # numpy scalars
        return fmt_num(v.item(), sig)
    return safe_text(str(v))


def _pow10(v: float, sig: int) -> str:
    mant, _, exp = f"{v:.{sig - 1}e}".partition("e")  # exact for any finite float, subnormals included
    mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
    return f"{mant}×10{str(int(exp)).translate(_SUPERSCRIPT)}"


def fmt_tick(v: float) -> str:
    """A plot tick: 3 significant digits, k/M/G/T for thousands and up, ``×10ⁿ`` below 0.001 (never e-notation)."""
    if v is None or not math.isfinite(v):
        return ""
    if v == 0:
        return "0"
    a = abs(v)
    for f, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= f:
            return fmt_num(v / f, 3) + suffix
    if a < 1e-3:
        return _pow10(v, 3)
    return fmt_num(float(v), 3)


def fmt_bool(v) -> str:
    """``yes`` / ``no`` (the one spelling used everywhere a person reads)."""
    return "yes" if v else "no"


_SCALES = {
    "bytes": [(1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B")],
    "bytes/s": [(1e15, "PB/s"), (1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1, "B/s")],
    "FLOP/s": [(1e18, "EFLOP/s"), (1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1, "FLOP/s")],
    "FLOP": [(1e24, "YFLOP"), (1e21, "ZFLOP"), (1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"),
             (1, "FLOP")],
    "W": [(1e9, "GW"), (1e6, "MW"), (1e3, "kW"), (1, "W"), (1e-3, "mW")],
    "J": [(3.6e12, "GWh"), (3.6e9, "MWh"), (1e6, "MJ"), (1e3, "kJ"), (1, "J"), (1e-3, "mJ"), (1e-6, "µJ")],
    "Hz": [(1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz"), (1, "Hz")],
    "s": [(365.25 * 86400, "years"), (2 * 86400, "days"), (2 * 3600, "h"), (120, "min"), (1, "s"), (1e-3, "ms"),
          (1e-6, "µs"), (1e-9, "ns")],
    "$": [(1e9, "$B"), (1e6, "$M"), (1e3, "$k"), (1, "$")],
}
_SCALE_VALUE = {"days": 86400.0, "h": 3600.0, "min": 60.0}


def _scale_for(unit: str, magnitude: float) -> tuple[float, str]:
    """The display factor and unit name for ``magnitude`` in SI ``unit`` (``(1e9, 'GB')`` for 4.1e10 bytes)."""
    scales = _SCALES.get(unit)
    if not scales:
        return 1.0, unit
    a = abs(magnitude)
    for f, name in scales:
        if a >= f:
            return _SCALE_VALUE.get(name, f), name
    f, name = scales[-1]
    return _SCALE_VALUE.get(name, f), name


def fmt_quantity(v, unit: str, sig: int = 4) -> str:
    """A value in SI ``unit`` with a readable prefix: ``fmt_quantity(1.27e8, 's') == '4.024 years'``,
    ``fmt_quantity(3.91e5, '$') == '$391k'``, ``fmt_quantity(0.466, '%') == '46.6%'``."""
    if v is None or isinstance(v, str):
        return MISSING if v is None else safe_text(v)
    if isinstance(v, bool):
        return fmt_bool(v)
    v = float(v)
    if unit.startswith("%"):
        return f"{fmt_num(v * 100, sig)}{unit}" if math.isfinite(v) else fmt_num(v)
    if unit.startswith("$"):
        rest = unit[1:]
        if not math.isfinite(v) or v == 0:
            return f"${fmt_num(v, sig)}{rest}"
        f, name = _scale_for("$", v)
        sign = "−" if v < 0 else ""
        return f"{sign}${fmt_num(abs(v) / f, sig)}{name[1:]}{rest}"
    base, _, per = unit.partition(" per ")
    if base not in _SCALES or not math.isfinite(v) or v == 0:
        return f"{fmt_num(v, sig)} {unit}".strip()
    f, name = _scale_for(base, v)
    return f"{fmt_num(v / f, sig)} {name}" + (f" per {per}" if per else "")


def fmt_bytes(v, sig: int = 3) -> str:
    """Bytes with a decimal prefix (GB = 1e9 B): ``41.2 GB``."""
    return fmt_quantity(v, "bytes", sig).replace(" bytes", " B")


# --------------------------------------------------------------------------------------------- field units
@dataclass(frozen=True)
class FieldUnit:
    """How a record field reads: a label without the unit suffix, the SI unit (a key of the scales, ``$``,
    ``%`` or free text such as ``tokens/s``) and whether it is scaled for display."""

    label: str
    unit: str

    @property
    def scaled(self) -> bool:
        return self.unit.split(" per ")[0] in _SCALES or self.unit.startswith(("$", "%"))


_NUMERATORS = {"years": "years", "us": "µs", "usd": "$", "bytes": "bytes", "s": "s", "flop": "FLOP", "j": "J", "w": "W", "frac": "%", "hz": "Hz",
               "tokens": "tokens", "kwh": "kWh"}
_DENOMINATORS = {"s": "/s", "hour": "/h", "year": "/yr", "mtok": "/M tokens", "token": " per token", "kwh": "/kWh",
                 "kw_month": "/kW-month", "run": " per run", "user": " per user", "param": " per parameter",
                 "device_hour": "/device-h", "system_hour": "/system-h", "busy_hour": "/busy h",
                 "input_token": " per input token", "output_token": " per output token", "byte": "/byte",
                 "gpu_hour": "/GPU-h", "cycle": "/cycle", "tb": "/TB", "pe": " per PE", "cycle_per_pe": "/cycle per PE"}
_DEFAULT_LABEL = {"usd": "cost", "tokens": "throughput", "bytes": "memory", "s": "time", "w": "power",
                  "j": "energy", "flop": "compute", "frac": "fraction"}
_LABELS = {"tokens_per_s": "throughput", "tokens_per_s_per_user": "per-user speed", "tpot_s": "time per output token",
           "ttft_s": "time to first token", "model_flop_per_s": "achieved model FLOP/s",
           "model_flop_utilization_frac": "model FLOP utilization (MFU)", "e2e_s": "request end to end",
           "peak_flop_per_s": "peak compute", "solve_s": "solver time", "max_stage_bytes": "largest stage"}
#: fields whose name does not say all of their unit: the all-in price is per million *output* tokens (the prompts'
#: cost is in it), not per million tokens processed (audit28b L2)
_FIELD_OVERRIDES = {"all_in_usd_per_mtok": FieldUnit("all in", "$/M output tokens"),
                    "rental_all_in_usd_per_mtok": FieldUnit("rental all in", "$/M output tokens"),
                    # `stream`'s step parts overlap: compute holds the recompute, the exposed load the spill (audit28a L1)
                    "compute_s": FieldUnit("compute incl. recompute", "s"),
                    "exposed_load_s": FieldUnit("exposed load incl. spill", "s")}
_CONDITIONAL = re.compile(r"^(.*)_(s|usd|bytes|w|j|frac)_(if|at|with)_(.*)$")
_UNIT_CACHE: dict[str, FieldUnit] = {}


def field_unit(key: str) -> FieldUnit:
    """The label and unit of a record field from its name: ``step_s`` → (``step``, ``s``); ``usd_per_hour`` →
    (``cost``, ``$/h``); ``tokens_per_s_per_user`` → (``per user``, ``tokens/s``); ``num_devices`` →
    (``devices``, ``count``); a name without a unit suffix → (the name with spaces, ``''``)."""
    hit = _UNIT_CACHE.get(key)
    if hit is not None:
        return hit
    k = key.lower()
    if k in _FIELD_OVERRIDES:
        _UNIT_CACHE[key] = _FIELD_OVERRIDES[k]
        return _FIELD_OVERRIDES[k]
    m = _CONDITIONAL.match(k)
    if m:  # step_s_if_spill: the unit sits before a condition
        base = field_unit(f"{m.group(1)}_{m.group(2)}")
        out = FieldUnit(f"{base.label} {m.group(3)} {m.group(4).replace('_', ' ')}", base.unit)
        _UNIT_CACHE[key] = out
        return out
    parts = k.split("_per_")
    head = parts[0].split("_")
    out = None
    if head[-1] in _NUMERATORS:
        num = head[-1]
        unit = _NUMERATORS[num]
        label = " ".join(head[:-1])
        rate, per = "", ""
        for d in parts[1:]:
            den = _DENOMINATORS.get(d, f" per {d.replace('_', ' ')}")
            if den.startswith("/") and not per:
                rate += den
            else:
                per += den
        if unit == "$":
            unit = "$" + rate + per.replace(" per ", "/")
        elif unit == "tokens" and not rate:  # tokens per step, tokens per parameter: a count of tokens
            unit, label = "tokens" + per, label or "tokens" + per
        elif unit == "s" and (rate or per):  # seconds per something
            unit = "s" + (rate + per).replace("/", " per ").replace("  ", " ")
        else:
            unit = unit + rate + per
        out = FieldUnit(_LABELS.get(k) or label or _DEFAULT_LABEL.get(num, unit), unit)
    elif k.startswith("num_"):
        out = FieldUnit(k[4:].replace("_", " "), "count")
    elif k.endswith("rel_error"):  # a signed relative error: a fraction
        out = FieldUnit(k.replace("_", " "), "%")
    if out is None:
        out = FieldUnit(k.replace("_", " "), "")
    _UNIT_CACHE[key] = out
    return out


def fmt_field(key: str, v) -> str:
    """``v`` formatted with the unit its field name carries: ``fmt_field('step_s', 0.0015) == '1.5 ms'``."""
    if v is None or isinstance(v, (bool, str)):
        return fmt_num(v)
    if not isinstance(v, (int, float)) and not hasattr(v, "item"):
        return safe_text(str(v))
    u = field_unit(key)
    if u.unit in ("", "count"):
        return fmt_num(v)
    if u.unit == "tokens":
        return fmt_num(v) + " tokens"
    return fmt_quantity(v, u.unit)


@dataclass(frozen=True)
class ColumnFormat:
    """One table column as a person reads it: the header (with its unit in brackets) and the cell formatter."""

    key: str
    header: str
    factor: float = 1.0

    def cell(self, v) -> str:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and self.factor != 1.0:
            return fmt_num(float(v) / self.factor)
        return fmt_num(v)


def column_format(key: str, values) -> ColumnFormat:
    """The column of ``key`` over ``values``: one display unit for the whole column, chosen from the median
    magnitude of its numbers, and shown in the header (``step [ms]``, ``capex [$M]``, ``utilization [%]``)."""
    u = field_unit(key)
    nums = [abs(float(v)) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(float(v)) and v != 0]
    if not u.unit or u.unit == "count":
        return ColumnFormat(key, u.label if u.unit else key.replace("_", " "))
    if u.unit.startswith("%"):
        return ColumnFormat(key, f"{u.label} [{u.unit}]", 0.01)
    if u.unit.startswith("$"):
        mag = sorted(nums)[len(nums) // 2] if nums else 1.0
        f, name = _scale_for("$", mag)
        return ColumnFormat(key, f"{u.label} [{name}{u.unit[1:]}]", f)
    base, _, per = u.unit.partition(" per ")
    if base in _SCALES:
        mag = sorted(nums)[len(nums) // 2] if nums else 1.0
        f, name = _scale_for(base, mag)
        return ColumnFormat(key, f"{u.label} [{name}{' per ' + per if per else ''}]", f)
    return ColumnFormat(key, f"{u.label} [{u.unit}]")


# --------------------------------------------------------------------------------------------- text
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_ENOTATION = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?[eE][-+]?\d+)(?![\w.])")


def safe_text(text: str) -> str:
    """``text`` with control characters (ANSI escapes, BEL, U+2028 …) shown as ``\\x1b``-style escapes and
    newlines/tabs as spaces, so a user-provided name cannot drive the terminal."""
    text = text.replace("\n", " ").replace("\t", " ").replace("\r", " ")
    return _CTRL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def humanize_text(text: str) -> str:
    """Free text (notes, titles) with any e-notation number rewritten as :func:`fmt_num` writes it."""
    return _ENOTATION.sub(lambda m: fmt_num(float(m.group(1))), safe_text(text))


def has_e_notation(text: str) -> bool:
    """True when ``text`` holds a number in e-notation (``1.2e+05``, ``3E-7``)."""
    return bool(_ENOTATION.search(text))


# --------------------------------------------------------------------------------------------- machine formats
def to_json(obj) -> str:
    """``obj`` as indented JSON; a non-finite number (which JSON cannot hold) is a one-line error, not a crash."""
    try:
        return json.dumps(obj, indent=2, sort_keys=False, allow_nan=False, default=str) + "\n"
    except ValueError as exc:
        raise InputError(f"the result holds a number JSON cannot hold ({exc}); an input is out of range: check the "
                         "values given") from None


def to_csv(rows: list[dict], columns: list[str] | None = None) -> str:
    cols = columns or list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(cols)
    for r in rows:
        wr.writerow([_csv_cell(r.get(c)) for c in cols])
    return buf.getvalue()


def _csv_cell(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    return "" if v is None else v


def csv_num(v, sig: int = 6):
    """A report CSV cell: floats rounded to ``sig`` significant digits, booleans as true/false, None as empty."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.{sig}g}"
    return v


def layer_range(s) -> str:
    """A stage's blocks (a :class:`~wseplan.records.Stage`) as a table shows them: ``first-last``, or what it holds
    instead of blocks (audit32b L5: a stage with the embedding or the LM head alone read ``-1--1``)."""
    if s.first_layer >= 0:
        return f"{s.first_layer}-{s.last_layer}"
    held = [n for n, on in (("embedding", s.embedding), ("LM head", s.lm_head)) if on]
    return " and ".join(held) + " only" if held else "none"
