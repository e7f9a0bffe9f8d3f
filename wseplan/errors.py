"""Error types. Every message names the bad value and what is allowed.

The CLI turns any :class:`WseplanError` into one red line and exit status 2.
"""
from __future__ import annotations

import difflib
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
