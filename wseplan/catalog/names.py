"""Checks of catalog names, free text and keys (display names without control characters or terminal markup)."""
from __future__ import annotations

import re

MAX_NAME_CHARS = 200
"""Longest display name (a model, a device, a study) [characters]."""
MAX_TEXT_CHARS = 10_000
"""Longest free text (a note, a source title, a claim) [characters]."""
KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
"""Catalog keys and aliases: what a command line can name (letters, digits, ``._+-``, at most 64)."""
MODEL_ALIAS_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}(/[A-Za-z0-9][A-Za-z0-9._+-]{0,95})?$")
"""Model aliases may also be a Hugging Face repository id, ``org/name`` (e.g. ``openai/gpt-oss-120b``)."""
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
_CONTROL_LINE = re.compile("[\t\n\r]")
_MARKUP = re.compile(r"\[/?[A-Za-z#@][^\[\]]*\]")
_TARGET_SUFFIX = re.compile(r"x\d+$", re.IGNORECASE)


def check_name(value: str, *, max_chars: int = MAX_NAME_CHARS) -> str:
    """A display name: at most ``max_chars``, no control or escape characters (ANSI escapes, bidi overrides,
    line breaks), no terminal markup such as ``[/bold]``. Raises ValueError saying what to remove."""
    if len(value) > max_chars:
        raise ValueError(f"{len(value):,} characters; a name has at most {max_chars}")
    m = _CONTROL.search(value) or _CONTROL_LINE.search(value)
    if m:
        raise ValueError(f"contains the control character {m.group()!r}; remove it")
    m = _MARKUP.search(value)
    if m:
        raise ValueError(f"contains {m.group()!r}, which terminals read as markup; remove the brackets")
    if not value.strip():
        raise ValueError("is empty; give a name")
    return value


def check_text(value: str, *, max_chars: int = MAX_TEXT_CHARS) -> str:
    """Free text: at most ``max_chars``; tabs and line breaks allowed, other control characters refused."""
    if len(value) > max_chars:
        raise ValueError(f"{len(value):,} characters; at most {max_chars:,}")
    m = _CONTROL.search(value)
    if m:
        raise ValueError(f"contains the control character {m.group()!r}; remove it")
    return value


def check_key(value: str) -> str:
    """A catalog key or alias (see :data:`KEY_PATTERN`)."""
    if not KEY_PATTERN.match(value):
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise ValueError(f"{shown!r} is not a key: use 1-64 letters, digits, '.', '_', '+' or '-', starting with "
                         "a letter or digit")
    return value


def check_model_alias(value: str) -> str:
    """A model alias: a key, or a Hugging Face repository id ``org/name`` (see :data:`MODEL_ALIAS_PATTERN`)."""
    if not MODEL_ALIAS_PATTERN.match(value):
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise ValueError(f"{shown!r} is not a model alias: use a key (1-64 letters, digits, '.', '_', '+' or '-') "
                         "or a repository id org/name")
    return value


def check_hardware_key(value: str) -> str:
    """A hardware key or alias: :func:`check_key`, and no ``x<N>`` ending that would read as a target count."""
    check_key(value)
    if _TARGET_SUFFIX.search(value):
        raise ValueError(f"{value!r} ends in x<N>, which the target grammar reads as "
                         f"{value[:_TARGET_SUFFIX.search(value).start()]!r} times N; rename it")
    return value
