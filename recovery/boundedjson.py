"""Total JSON decoding of bytes that crossed a boundary (a store, a cluster, a file).

``json.loads`` on hostile text can raise RecursionError (``[[[[...`` a few thousand
deep), OverflowError-like surprises (``1e999`` reads as infinity), spend seconds on a
5,000-digit integer, or take any amount of memory. ``loads`` bounds all of those
before and while it parses, and turns every failure into one ``BoundedJSONError``
(a ValueError) naming what was wrong, so a caller has one exception to turn into a
skip with a reason.

The depth is measured by a flat scan before the parser runs (no recursion), and the
size is checked before anything is decoded. It sits at the bottom of the layers so
that the checkpoint store, the fences and everything above share it.
"""

from __future__ import annotations

import json
import math
import re

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
DEFAULT_MAX_DEPTH = 64
# A float literal longer than this is absurd precision, not a value anyone wrote.
MAX_NUMBER_CHARS = 64

# A string literal (escapes included) or one bracket: brackets inside strings never count.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class BoundedJSONError(ValueError):
    """Text that is not JSON within the bounds asked for; the message says which bound."""


def depth_of(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` (a flat scan: never recurses).
    An unterminated string only makes the count larger, never smaller."""
    depth = deepest = 0
    for m in _TOKENS.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise BoundedJSONError(f"a number of {len(text)} characters")
    value = float(text)
    if not math.isfinite(value):
        raise BoundedJSONError(f"a number out of range: {text[:24]}")
    return value


def _int(text: str) -> int:
    if len(text) > 20:
        raise BoundedJSONError(f"an integer of {len(text)} digits (at most 64 bits)")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise BoundedJSONError(f"an integer outside 64 bits: {text}")
    return value


def _constant(name: str) -> object:
    raise BoundedJSONError(f"{name} is not a JSON number")


def loads(data: bytes | str, *, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> object:
    """``data`` decoded as JSON, or BoundedJSONError: over ``max_bytes``, not UTF-8,
    nested deeper than ``max_depth``, a number that is not finite, not 64-bit, or
    absurdly long, or not JSON at all."""
    if len(data) > max_bytes:
        raise BoundedJSONError(f"{len(data)} bytes, more than the {max_bytes} allowed")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BoundedJSONError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    else:
        text = data
    depth = depth_of(text)
    if depth > max_depth:
        raise BoundedJSONError(f"nested {depth} deep, more than the {max_depth} allowed")
    try:
        return json.loads(text, parse_float=_float, parse_int=_int, parse_constant=_constant)
    except BoundedJSONError:
        raise
    except (ValueError, RecursionError) as exc:
        raise BoundedJSONError(f"not JSON: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
