"""Error type of the simulator.

Uses ``wseplan.errors.InputError`` when the package provides it, so callers can catch one type across
wseplan; otherwise a ``ValueError`` subclass with the same name.
"""

try:  # pragma: no cover - depends on the rest of the package
    from wseplan.errors import InputError
except ImportError:  # pragma: no cover
    class InputError(ValueError):
        """Bad input to a simulator function; the message names the value and what is allowed."""

__all__ = ["InputError"]
