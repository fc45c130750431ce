"""The one bounded JSON decoder: every hostile text is one CodecError, fast, never a
RecursionError, an OverflowError or a silent infinity."""

from __future__ import annotations

import json
import math
import random
import time

import pytest

from recovery.boundedjson import INT64, MAX_DEPTH, CodecError, NotJSON, decode, nests_deeper

pytestmark = pytest.mark.unit


def test_json_reads_back_as_written() -> None:
    value = {"a": [1, -2, 3.5, True, None, "x\u00e9"], "b": {"c": {}}, "n": INT64[1], "m": INT64[0]}
    assert decode(json.dumps(value)) == value
    assert decode(json.dumps(value).encode()) == value


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' * 50_000 + b"1" + b"}" * 50_000,
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)).encode(),
    ],
    ids=["open", "closed", "objects", "one-too-deep"],
)
def test_deep_nesting_is_a_codec_error_not_a_recursion_error(data: bytes) -> None:
    started = time.perf_counter()
    with pytest.raises(CodecError, match=r"nests too deep"):
        decode(data)
    assert time.perf_counter() - started < 2.0


def test_nesting_up_to_the_limit_reads_and_brackets_in_strings_do_not_count() -> None:
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert decode(deep) is not None
    assert decode(json.dumps({"s": "[" * 10_000})) == {"s": "[" * 10_000}
    assert decode(json.dumps(['\\"[[[', "]]]"])) == ['\\"[[[', "]]]"]
    assert not nests_deeper('["[[[["]', 1)
    assert nests_deeper("[[1]]", 1) and not nests_deeper("[[1]]", 2)


@pytest.mark.parametrize("text", ["1e999", "-1e999", "[1e400]", '{"x": 1E+999}'])
def test_a_number_that_overflows_a_float_is_refused(text: str) -> None:
    with pytest.raises(CodecError, match=r"too large"):
        decode(text)


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"x": -Infinity}'])
def test_nan_and_infinity_are_refused_unless_the_reader_bounds_numbers_itself(text: str) -> None:
    with pytest.raises(CodecError, match=r"no JSON number"):
        decode(text)
    value = decode(text, strict=False)
    assert value is not None


def test_not_strict_keeps_a_diverged_loss() -> None:
    value = decode('{"loss": NaN, "best": Infinity}', strict=False)
    assert math.isnan(value["loss"]) and value["best"] == math.inf


@pytest.mark.parametrize("n", [INT64[1] + 1, INT64[0] - 1, 10**30])
def test_an_integer_beyond_int64_is_refused(n: int) -> None:
    with pytest.raises(CodecError, match=r"int64"):
        decode(json.dumps({"n": n}))
    assert decode(json.dumps({"n": n}), strict=False) == {"n": n}  # not strict: the field's reader bounds it


def test_an_integer_of_thousands_of_digits_is_refused_in_either_mode() -> None:
    text = '{"n": ' + "9" * 5000 + "}"
    for strict in (True, False):
        with pytest.raises(CodecError):
            decode(text, strict=strict)


def test_oversized_text_is_refused_before_it_is_parsed() -> None:
    text = json.dumps({"a": "y" * 1000})
    assert decode(text, max_bytes=len(text)) == {"a": "y" * 1000}
    with pytest.raises(CodecError, match=r"larger than"):
        decode(text, max_bytes=len(text) - 1)
    with pytest.raises(CodecError, match=r"larger than"):
        decode(text.encode(), max_bytes=len(text) - 1)
    # A str is measured in UTF-8 bytes, not characters.
    wide = json.dumps("\u00e9" * 100, ensure_ascii=False)
    with pytest.raises(CodecError, match=r"larger than"):
        decode(wide, max_bytes=150)


@pytest.mark.parametrize("data", [b"\xff\xfe{}", b'{"a": "\xc3"}', b"\x80"])
def test_invalid_utf8_is_a_codec_error_and_not_a_torn_line(data: bytes) -> None:
    with pytest.raises(CodecError, match=r"not text") as err:
        decode(data)
    assert not isinstance(err.value, NotJSON)


@pytest.mark.parametrize("data", [b"", b"   \n", b'{"a": 1', b"{not json", b'{"a": 1}x', b"\xef\xbb\xbf{}"])
def test_text_that_does_not_parse_is_not_json(data: bytes) -> None:
    with pytest.raises(NotJSON):
        decode(data)


def test_decoding_is_total_over_random_bytes() -> None:
    rng = random.Random(7)
    alphabet = b'{}[]",:0123456789.eE+-truefalsnNaIiy \\\xff\xc3'
    for _ in range(3000):
        data = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        try:
            decode(data)
        except CodecError as exc:
            assert "\n" not in str(exc)


# --- the read_* helpers -------------------------------------------------------------------------
