"""The one JSON codec: bounded, total decoding of untrusted text, and the typed read_* helpers."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import pytest

from orchestrator.wire.codec import (
    decode_object,
    json_is,
    read_bool,
    read_choice,
    read_dict,
    read_float,
    read_int,
    read_items,
    read_list,
    read_str,
    read_values,
    require,
    show,
    to_plain,
)
from recovery.boundedjson import CodecError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text", ["[]", '"x"', "1", "null", "true", "[{}]"])
def test_a_top_level_value_that_is_no_object_is_refused(text: str) -> None:
    with pytest.raises(CodecError, match=r"expected a JSON object"):
        decode_object(text)


def test_read_int_refuses_a_bool_and_names_the_field() -> None:
    assert read_int(3, "n") == 3
    with pytest.raises(CodecError, match=r"'n' of type bool; expected an integer") as err:
        read_int(True, "n")
    assert err.value.name == "n" and err.value.expected == "an integer"
    with pytest.raises(CodecError, match=r"'n' 0; expected an integer in 1\.\.5"):
        read_int(0, "n", 1, 5)
    with pytest.raises(CodecError, match=r"within int64"):
        read_int(2**63, "n")


def test_read_float_takes_integers_and_refuses_what_is_not_finite() -> None:
    assert read_float(2, "x") == 2.0 and isinstance(read_float(2, "x"), float)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(CodecError, match=r"'x' .*expected a finite number"):
            read_float(bad, "x")
    assert math.isnan(read_float(math.nan, "loss", finite=False))
    with pytest.raises(CodecError, match=r">= 0"):
        read_float(-1.0, "time", low=0.0)
    with pytest.raises(CodecError, match=r"of type str"):
        read_float("1", "x")
    with pytest.raises(CodecError, match=r"of type bool"):
        read_float(False, "x")


def test_read_str_bool_list_dict() -> None:
    assert read_str("a", "s") == "a" and read_bool(False, "b") is False
    with pytest.raises(CodecError, match=r"'s' longer than 3"):
        read_str("abcd", "s", 3)
    with pytest.raises(CodecError, match=r"'b' of type int; expected true or false"):
        read_bool(1, "b")
    assert read_list([1], "l") == [1]
    with pytest.raises(CodecError, match=r"'l' of 3 items; expected a list of at most 2 items"):
        read_list([1, 2, 3], "l", 2)
    assert read_dict({"a": 1}, "d") == {"a": 1}
    with pytest.raises(CodecError, match=r"key that is no string"):
        read_dict({1: 1}, "d")
    with pytest.raises(CodecError, match=r"^is list; expected a JSON object$"):
        read_dict([])


def test_read_items_and_values_name_the_field_and_the_place() -> None:
    assert read_items(["a", "b"], "stores", read_str) == ["a", "b"]
    with pytest.raises(CodecError, match=r"has 'stores' whose item 1 is int; expected a string"):
        read_items(["a", 1], "stores", read_str)
    assert read_values({"a": 1}, "failed", read_int) == {"a": 1}
    with pytest.raises(CodecError, match=r"has 'failed' whose value at 'a' is str; expected an integer"):
        read_values({"a": "x"}, "failed", read_int)


class Color(StrEnum):
    red = "red"
    blue = "blue"


def test_read_choice_and_require() -> None:
    assert read_choice("red", "c", Color) is Color.red
    with pytest.raises(CodecError, match=r"'c' 'green'; expected one of: red, blue"):
        read_choice("green", "c", Color)
    assert require({"a": 1}, "a") == 1
    with pytest.raises(CodecError, match=r"^lacks 'b'$"):
        require({"a": 1}, "b")


def test_a_message_never_quotes_a_string_value() -> None:
    secret = "token-" + "s" * 40
    for call in (lambda: read_int(secret, "k"), lambda: read_float(secret, "k"), lambda: read_str(secret, "k", 5)):
        with pytest.raises(CodecError) as err:
            call()
        assert "token-" not in str(err.value) and "'k'" in str(err.value)


def test_json_is_means_json_types() -> None:
    assert json_is(1, (int,)) and not json_is(True, (int,)) and json_is(True, (bool,))
    assert json_is(1.5, (float,)) and not json_is(math.nan, (float,))


# --- the way out --------------------------------------------------------------------------------
@dataclass
class Inner:
    color: Color = Color.blue
    pair: tuple[int, ...] = (1, 2)


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    items: list[Inner] = field(default_factory=lambda: [Inner(Color.red)])
    free: dict[str, Any] = field(default_factory=lambda: {"k": Color.red})


def test_to_plain_is_json() -> None:
    plain = to_plain(Outer())
    assert plain == {
        "inner": {"color": "blue", "pair": [1, 2]},
        "items": [{"color": "red", "pair": [1, 2]}],
        "free": {"k": "red"},
    }
    assert json.loads(json.dumps(plain)) == plain


def test_show_cuts_a_long_value_and_survives_a_huge_integer() -> None:
    assert show("abc") == "'abc'"
    long = show("x" * 500)
    assert len(long) < 90 and "(500 characters)" in long
    assert show(10**5000) == "a number of thousands of digits"
