"""A mixin for the schemas of a user's input files (studies, sweeps, fleet demands, claims).

pydantic's lax mode reads a YAML ``true``/``false`` given for a number as 1/0, so ``prompt_tokens: true`` became a
one-token prompt without a word (audit30a M4). :class:`NoBoolNumbers` refuses a boolean where a field (or the items of
a list field) is a number, naming the field; numbers written as strings (``"2048"``) are still read.
"""
from __future__ import annotations

import types
import typing

from pydantic import AfterValidator, BaseModel, ValidationInfo, field_validator

from ..errors import percentile_problem

_NUMBERS = (int, float)


def _parts(ann) -> tuple:
    """The alternatives of a union annotation (``int | None``: int, None), else the annotation alone."""
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return typing.get_args(ann)
    return (ann,)


def _is_number(ann) -> bool:
    return any(a in _NUMBERS for a in _parts(ann))


def _is_number_list(ann) -> bool:
    return any(typing.get_origin(a) in (list, tuple) and any(_is_number(x) for x in typing.get_args(a))
               for a in _parts(ann))


def _number_dict_values(ann) -> list:
    """The value annotations of the ``dict[..., V]`` alternatives of ``ann`` (a mapping of names to numbers)."""
    return [typing.get_args(a)[1] for a in _parts(ann) if typing.get_origin(a) is dict and len(typing.get_args(a)) == 2]


def _has_bool(v, ann) -> bool:
    """Whether ``v`` (a field's value) holds true/false where ``ann`` wants a number or a list of numbers."""
    if isinstance(v, bool):
        return _is_number(ann) and bool not in _parts(ann)
    if isinstance(v, (list, tuple)):
        return any(isinstance(x, bool) for x in v) and _is_number_list(ann)
    if isinstance(v, dict):
        return any(_has_bool(x, va) for va in _number_dict_values(ann) for x in v.values())
    return False


class NoBoolNumbers(BaseModel):
    """Refuses ``true``/``false`` for a number field, in a list of numbers or as a value of a mapping of names to numbers
    (one-line error naming the field)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, v, info: ValidationInfo):
        f = cls.model_fields.get(info.field_name or "")
        if f is None:
            return v
        if _has_bool(v, f.annotation):
            raise ValueError(f"expected {'a number' if isinstance(v, bool) else 'numbers'}, got true or false; give "
                             "the number")
        return v


def _in_percent(v: float) -> float:
    why = percentile_problem(v)
    if why:
        raise ValueError(why)
    return v


#: a serving percentile in percent (95 for p95): a fraction such as 0.95 is refused with the fix (audit37b F4)
Percentile = typing.Annotated[float, AfterValidator(_in_percent)]
