"""A composed config's plain mapping as its dataclasses, fast, when it is already well typed.

Merging a plain mapping into the OmegaConf schema (``typed_config``) converts and checks
every value, and costs about 30 ms a config: most of a composition. A mapping that Hydra
composed over the schema is almost always already of the right types, so ``build`` makes
the dataclasses directly when every value is exactly what its field takes, and gives up
(``None``) at the first value that is not: a conversion (``"3"`` for an int), a wrong
type, an unknown or missing key. The caller then takes OmegaConf's way, which converts or
refuses with its message, so what a user sees never depends on which way was taken.

What it accepts is what OmegaConf would return unchanged: an int for an int, an int or a
float for a float (as a float), an enum member or its name for an enum, None for an optional,
a mapping for a nested dataclass or a ``dict[str, X]``, a list for a ``list[X]``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from enum import Enum
from typing import Any


class _Slow(Exception):
    """This value needs OmegaConf's conversion or refusal."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def build(cls: type, plain: Any) -> Any | None:
    """``plain`` as a ``cls`` dataclass, or None where OmegaConf must decide."""
    try:
        return _value(cls, plain)
    except _Slow:
        return None


def _value(tp: Any, v: Any) -> Any:
    if tp is Any:
        return v
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if v is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise _Slow
        return _value(rest[0], v)
    if origin is dict:
        key_type, value_type = typing.get_args(tp)
        if type(v) is not dict or key_type is not str or not all(type(k) is str for k in v):
            raise _Slow
        return {k: _value(value_type, x) for k, x in v.items()}
    if origin is list:
        (item_type,) = typing.get_args(tp)
        if type(v) is not list:
            raise _Slow
        return [_value(item_type, x) for x in v]
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, v)
    if isinstance(tp, type) and issubclass(tp, Enum):
        if type(v) is tp:
            return v
        if type(v) is str and v in tp.__members__:
            return tp[v]
        raise _Slow
    if tp is float and type(v) in (int, float):
        return float(v)
    if tp in (int, str, bool) and type(v) is tp:
        return v
    raise _Slow


def _dataclass(cls: type, v: Any) -> Any:
    if type(v) is not dict:
        raise _Slow
    hints = _hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    if set(v) != {f.name for f in fields}:
        raise _Slow  # an unknown key, or one left to its default: OmegaConf's to say
    return cls(**{f.name: _value(hints[f.name], v[f.name]) for f in fields})
