"""Bounded, total JSON decoding: every hostile input is one BoundedJSONError, fast."""

from __future__ import annotations

import time

import pytest

from recovery.boundedjson import BoundedJSONError, depth_of, loads

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested"),
        (b'{"x": 1e999}', "out of range"),
        (b'{"x": -1e999}', "out of range"),
        (b'{"x": NaN}', "not a JSON number"),
        (b'{"x": Infinity}', "not a JSON number"),
        (b'{"x": ' + b"9" * 5000 + b"}", "digits"),
        (b'{"x": 9223372036854775808}', "64 bits"),
        (b'{"x": 0.' + b"1" * 200 + b"}", "characters"),
        (b"\xff\xfe{}", "UTF-8"),
        (b'{"x": 1', "not JSON"),
        (b"", "not JSON"),
        (b"x" * 2000, "more than"),
    ],
)
def test_hostile_text_is_one_error_naming_the_bound(data: bytes, why: str) -> None:
    started = time.monotonic()
    with pytest.raises(BoundedJSONError, match=why):
        loads(data, max_bytes=1_000_000 if why != "more than" else 1000, max_depth=64)
    assert time.monotonic() - started < 2


def test_good_text_reads_as_json() -> None:
    assert loads(b'{"a": [1, 2.5, "x", null, true], "b": {"c": -9223372036854775808}}', max_bytes=1000) == {
        "a": [1, 2.5, "x", None, True],
        "b": {"c": -(2**63)},
    }


def test_brackets_inside_strings_do_not_count() -> None:
    assert depth_of('{"a": "[[[[[[[[[[{{{{{{"}') == 1
    assert depth_of('["\\"[[["]') == 1
    assert loads('{"a": "' + "[" * 500 + '"}', max_bytes=10_000, max_depth=2) == {"a": "[" * 500}


def test_the_depth_bound_is_exact() -> None:
    assert loads("[[[1]]]", max_bytes=100, max_depth=3) == [[[1]]]
    with pytest.raises(BoundedJSONError, match="nested 4 deep"):
        loads("[[[[1]]]]", max_bytes=100, max_depth=3)
