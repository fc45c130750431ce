"""JSON in and out, for every file and object the project reads from outside one process.

Decoding is the bounded, total ``decode`` of recovery/boundedjson.py (the bottom layer's,
so that the checkpoint store and its fences read through the same one); ``decode_object``
asks it for a mapping.

The ``read_*`` helpers take one decoded value and the name of its field, and give it
back typed or raise a ``CodecError`` that names the field and what was expected; the
message never quotes a string (it could be huge, or hold a secret), only numbers and
the names of closed sets. ``to_plain`` is the way out: a dataclass tree as JSON.

Pure; imports nothing of the project but the decoder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any, TypeVar

from recovery.boundedjson import INT64, MAX_BYTES, MAX_DEPTH, CodecError, decode


def decode_object(
    data: bytes | str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, strict: bool = True
) -> dict[str, Any]:
    """``data`` as one JSON object (a mapping); CodecError for anything else."""
    return read_dict(decode(data, max_bytes=max_bytes, max_depth=max_depth, strict=strict))


# --- reading one value -----------------------------------------------------------------------------
def json_type(value: Any) -> str:
    """A value's type as a message names it: null for None, else Python's name (str, int, list, ...)."""
    return "null" if value is None else type(value).__name__


def json_is(value: Any, kinds: tuple[type, ...]) -> bool:
    """``value`` is one of ``kinds`` as JSON means it: true is no number, NaN no time."""
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, kinds)


def _wrong(value: Any, name: str, expected: str) -> CodecError:
    where = f"has {name!r} of type" if name else "is"
    return CodecError(f"{where} {json_type(value)}; expected {expected}", name, expected)


def _outside(value: Any, name: str, expected: str) -> CodecError:
    where = f"has {name!r}" if name else "is"
    return CodecError(f"{where} {show(value)}; expected {expected}", name, expected)


def require(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]``; CodecError naming it when it is absent."""
    if name not in obj:
        raise CodecError(f"lacks {name!r}", name, "a value")
    return obj[name]


def read_int(value: Any, name: str = "", low: int = INT64[0], high: int = INT64[1]) -> int:
    """An integer (true is none) in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(value, name, "an integer")
    if not low <= value <= high:
        within = "within int64" if (low, high) == INT64 else f"in {low}..{high}"
        raise _outside(value, name, f"an integer {within}")
    return value


def read_float(
    value: Any, name: str = "", low: float = -math.inf, high: float = math.inf, finite: bool = True
) -> float:
    """A number (an integer within int64 too), as a float: finite and in ``low..high``
    unless ``finite`` is False (then any float, NaN included: a loss as training reported it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(value, name, "a number")
    if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
        raise _outside(value, name, "a number within int64")
    if not finite:
        return float(value)
    if not (math.isfinite(value) and low <= value <= high):
        bounds = [f">= {low:g}" if low > -math.inf else "", f"<= {high:g}" if high < math.inf else ""]
        raise _outside(value, name, " ".join(["a finite number", *filter(None, bounds)]))
    return float(value)


def read_bool(value: Any, name: str = "") -> bool:
    if not isinstance(value, bool):
        raise _wrong(value, name, "true or false")
    return value


def read_str(value: Any, name: str = "", limit: int | None = None) -> str:
    """A string of at most ``limit`` characters (None: any)."""
    if not isinstance(value, str):
        raise _wrong(value, name, "a string")
    if limit is not None and len(value) > limit:
        where = f"has {name!r}" if name else "is"
        expected = f"a string of at most {limit} characters"
        raise CodecError(f"{where} longer than {limit} characters; expected {expected}", name, expected)
    return value


E = TypeVar("E", bound=Enum)
T = TypeVar("T")


def read_choice(value: Any, name: str, allowed: type[E]) -> E:
    """A member of the closed set ``allowed`` (a str Enum), by its value."""
    values = [str(m.value) for m in allowed]
    expected = f"one of: {', '.join(values)}"
    if not isinstance(value, str):
        raise _wrong(value, name, expected)
    if value not in values:
        where = f"has {name!r}" if name else "is"
        # Cut: a closed set's value is short, and a long one is not worth quoting whole.
        raise CodecError(f"{where} {value[:40]!r}; expected {expected}", name, expected)
    return allowed(value)


def read_list(value: Any, name: str = "", limit: int | None = None) -> list[Any]:
    """A list of at most ``limit`` items (None: any)."""
    if not isinstance(value, list):
        raise _wrong(value, name, "a list")
    if limit is not None and len(value) > limit:
        where = f"has {name!r} of" if name else "is"
        expected = f"a list of at most {limit} items"
        raise CodecError(f"{where} {len(value)} items; expected {expected}", name, expected)
    return value


def read_items(value: Any, name: str, read: Callable[[Any, str], T], limit: int | None = None) -> list[T]:
    """A list (of at most ``limit`` items) of what ``read`` (a ``read_*``) takes, each read by it."""
    out = []
    for i, item in enumerate(read_list(value, name, limit)):
        try:
            out.append(read(item, ""))
        except CodecError as exc:
            raise CodecError(f"{_whose(name)} item {i} {exc}", name, exc.expected) from None
    return out


def read_values(value: Any, name: str, read: Callable[[Any, str], T]) -> dict[str, T]:
    """A JSON object of what ``read`` (a ``read_*``) takes, each value read by it."""
    out = {}
    for key, item in read_dict(value, name).items():
        try:
            out[key] = read(item, "")
        except CodecError as exc:
            raise CodecError(f"{_whose(name)} value at {show(key, 40)} {exc}", name, exc.expected) from None
    return out


def _whose(name: str) -> str:
    return f"has {name!r} whose" if name else "has"


def read_dict(value: Any, name: str = "") -> dict[str, Any]:
    """A JSON object: a dict with string keys."""
    expected = "a JSON object"
    if not isinstance(value, dict):
        raise _wrong(value, name, expected)
    if not all(isinstance(k, str) for k in value):
        where = f"has {name!r}" if name else "is"
        raise CodecError(f"{where} a mapping with a key that is no string; expected {expected}", name, expected)
    return value


# --- messages and the way out ----------------------------------------------------------------------
def show(value: Any, limit: int = 60) -> str:
    """A value for a one-line message: repr (control characters escaped), cut to ``limit``."""
    try:
        text = repr(value)
    except ValueError:  # an integer beyond Python's digit limit for str()
        return "a number of thousands of digits"
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]} ({len(str(value))} characters)"


def to_plain(obj: Any) -> Any:
    """A dataclass tree as JSON: dataclasses as dicts, a closed set's member as its value,
    tuples as lists (readers of the JSON know no enums)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_plain(v) for v in obj]
    return obj
