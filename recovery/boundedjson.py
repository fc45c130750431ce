"""Bounded, total JSON decoding: the one decoder of every file and object the project
reads from outside one process (a store's manifest and fence, the control channel, the
journal, a saved config). orchestrator/wire/codec.py builds its typed readers on it.

``decode`` is total: any bytes or text give a value or a ``CodecError``, never another
exception. The text is refused before it is parsed when it is too large or nests too
deep (the depth is counted by a loop, not by recursion, so a hundred thousand ``[`` cost
one pass); numbers are refused that no writer of ours produces (an integer beyond int64,
``1e999``, ``NaN``/``Infinity``), unless the reader refuses them itself, by field (a
diverged loss is written as ``NaN``).

At the bottom of the layers; imports nothing of the project.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

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
