"""JSON in and out, for every file and object the project reads from outside one process.

Decoding (``decode``, ``decode_object``) is bounded and total: any bytes or text give a
value or a ``CodecError``, never another exception. The text is refused before it is
parsed when it is too large or nests too deep (the depth is counted by a loop, not
by recursion, so a hundred thousand ``[`` cost one pass); numbers are refused that no
writer of ours produces (an integer beyond int64, ``1e999``, ``NaN``/``Infinity``), unless
the reader refuses them itself, by field (a diverged loss is written as ``NaN``).

The ``read_*`` helpers take one decoded value and the name of its field, and give it
back typed or raise a ``CodecError`` that names the field and what was expected; the
message never quotes a string (it could be huge, or hold a secret), only numbers and
the names of closed sets. ``to_plain`` is the way out: a dataclass tree as JSON.

Pure; imports nothing of the project.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any, TypeVar

# The bounds of an integer anywhere: torch, numpy and JSON readers elsewhere assume int64.
INT64 = (-(2**63), 2**63 - 1)
# Defaults of decode: far above any file of ours (a journal line, a result.json).
MAX_BYTES = 16 << 20
MAX_DEPTH = 64
# An int64 has at most 19 digits and a sign: longer text is refused before int() reads it.
# A reader that bounds its integers by field still gets none longer than a float's range.
_INT64_CHARS = 20
_WIDE_INT_CHARS = 310


class CodecError(ValueError):
    """Bytes, text or a value that is not the JSON a reader takes; the message is one line.

    ``name`` is the field (empty: the whole value) and ``expected`` what it should have
    been, for a reader that words its own message."""

    def __init__(self, message: str, name: str = "", expected: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.expected = expected


class NotJSON(CodecError):
    """Text that is no JSON at all: empty, cut short, or never JSON (a torn write reads so)."""


# --- decoding ------------------------------------------------------------------------------------
# A JSON string (escapes included), and a run of anything that is no bracket.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def decode(data: bytes | str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, strict: bool = True) -> Any:
    """``data`` as one JSON value; CodecError for anything else (NotJSON when it does not parse).

    ``strict``: numbers are refused that no JSON writer gives (NaN, Infinity, an overflow
    such as 1e999) and integers beyond int64. Not strict: the file's reader refuses them
    by field with ``read_*`` (a diverged loss is NaN, as Python's json writes it), and
    only integers longer than any number in use are refused here."""
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise CodecError(f"is larger than {max_bytes} bytes")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError("is not text (not UTF-8)") from None
    else:
        text = data
    if not text.strip():
        raise NotJSON("is empty")
    if nests_deeper(text, max_depth):
        raise CodecError(f"nests too deep (more than {max_depth} levels)")
    try:
        if strict:
            return json.loads(text, parse_int=_int64, parse_float=_finite, parse_constant=_no_constant)
        return json.loads(text, parse_int=_wide_int)
    except json.JSONDecodeError as exc:
        raise NotJSON(f"is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:  # not reached below the depth counted above; kept total all the same
        raise CodecError("nests too deep") from None


def decode_object(
    data: bytes | str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, strict: bool = True
) -> dict[str, Any]:
    """``data`` as one JSON object (a mapping); CodecError for anything else."""
    return read_dict(decode(data, max_bytes=max_bytes, max_depth=max_depth, strict=strict))


def nests_deeper(text: str, max_depth: int) -> bool:
    """Whether the arrays and objects of JSON text nest deeper than ``max_depth`` (brackets in
    strings left out), counted by one loop that stops at the first level too many."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub('""', text))
    if brackets.count("[") + brackets.count("{") <= max_depth:
        return False
    depth = 0
    for c in brackets:
        depth += 1 if c in "[{" else -1
        if depth > max_depth:
            return True
    return False


def _int64(text: str) -> int:
    # The length first: int() of thousands of digits is slow, or refused by Python itself.
    if len(text) > _INT64_CHARS or not INT64[0] <= (value := int(text)) <= INT64[1]:
        raise CodecError("holds an integer beyond int64")
    return value


def _wide_int(text: str) -> int:
    if len(text) > _WIDE_INT_CHARS:
        raise CodecError(f"holds an integer of more than {_WIDE_INT_CHARS} digits")
    return int(text)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise CodecError("holds a number too large for a float")
    return value


def _no_constant(text: str) -> float:
    raise CodecError(f"holds {text}, which is no JSON number")


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
