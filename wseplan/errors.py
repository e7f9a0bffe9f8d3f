"""Error types. Every message names the bad value and what is allowed.

The CLI turns any :class:`WseplanError` into one red line and exit status 2.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class WseplanError(Exception):
    """Base class for all errors wseplan raises on purpose."""


class InputError(WseplanError, ValueError):
    """A user-supplied value (argument, file content) is invalid."""


class CatalogError(WseplanError):
    """A catalog file is malformed, or names an unknown key or source."""


class InfeasibleError(WseplanError):
    """An optimisation has no feasible solution; the message names the binding constraint."""


def suggest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """Return a ' (did you mean: a, b?)' hint for ``name`` among ``choices``, or ''."""
    close = difflib.get_close_matches(name.lower(), sorted(set(choices)), n=n, cutoff=0.5)
    return f" (did you mean: {', '.join(close)}?)" if close else ""


def validation_detail(exc) -> tuple[str, str]:
    """(field path, one-line message) of a pydantic ``ValidationError`` for a user-facing error.

    A misspelt key (``extra_forbidden``) is reported before anything else, since it usually causes the other
    errors; pydantic's wording is replaced by the fix for unknown and missing keys.
    """
    errs = exc.errors()
    err = next((e for e in errs if e.get("type") == "extra_forbidden"), errs[0])
    loc = ".".join(str(x) for x in err.get("loc", ()) if not str(x).startswith("function-"))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    # pydantic writes a bound of 1e30 as thirty-one digits: the bound as a person writes it
    msg = re.sub(r"(than(?: or equal to)? )(\d{7,})(\.0)?\b",
                 lambda m: m.group(1) + (f"{float(m.group(2)):g}" if float(f"{float(m.group(2)):g}") == float(m.group(2))
                                         else f"{int(m.group(2)):,}"), msg)  # 1e+30, but 16,777,216 kept whole
    if err.get("type") == "extra_forbidden":
        msg = "unknown key; remove it or fix its spelling"
    elif err.get("type") == "missing":
        msg = "required key is missing; add it"
    elif err.get("type") == "float_parsing":  # a unit string where the key takes a plain number (audit32b L3)
        unit = ("tokens/s per user" if loc.endswith("_per_user") else "per second" if loc.endswith("_per_s") else
                "seconds" if loc.endswith("_s") else None)
        msg = (f"{msg}; give a plain number" + (f" ({unit}: the unit is in the key's name)" if unit else "")
               + (", e.g. 2.0" if loc.rsplit(".", 1)[-1].isdigit() else f", e.g. {loc.rsplit('.', 1)[-1]}: 2.0"))
    return loc, msg


def percentile_problem(v) -> str | None:
    """What is wrong with a serving percentile (in percent, 1 to below 100), or None. A fraction such as 0.95 is the
    common slip for p95 (numpy's quantiles take fractions): it would judge the limits at the fastest 1% of requests and
    size the fleet for a looser SLA than meant (audit37b F4), so values below 1 are refused with the fix."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v == v or not 0 < v < 100:
        return f"must be in percent, at least 1 and below 100 (95 for p95), got {v!r}"
    if v < 1 and v * 100 >= 1:
        return f"is in percent: {v!r} would be the {v!r}th percentile; give {v * 100:g} for p{v * 100:g}"
    if v < 1:
        return f"is in percent, at least 1 and below 100 (95 for p95), got {v!r}"
    return None
