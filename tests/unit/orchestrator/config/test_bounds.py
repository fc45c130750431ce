"""The command line's words bounded before Hydra parses them (orchestrator.config.bounds)."""

from __future__ import annotations

import pytest

from orchestrator.config import bounds
from orchestrator.config.checks import MAX_FAULTS, MAX_NESTING, MAX_NUMBER_DIGITS, MAX_RANGE_VALUES
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("9" * 5000, "int64"),
        ("9223372036854775808", "int64"),
        ("-9223372036854775809", "int64"),
        ("1_000_000_000_000_000_000_000", "int64"),
        ("0." + "1" * (MAX_NUMBER_DIGITS + 1), "significant digits"),
        ("1" * 5000 + ".5", "significant digits"),
        ("1e400", "range"),
        ("1e-400", "too small"),
        ("1e99999999999", "exponent"),
    ],
)
def test_a_number_beyond_bounds_says_why(token: str, why: str) -> None:
    problem = bounds.number_problem(token)
    assert problem is not None and why in problem


@pytest.mark.parametrize(
    "token",
    [
        "0",
        "9223372036854775807",
        "-9223372036854775808",
        "0.30000000000000004",
        "1e-300",
        "1e308",
        "1_000",
        "inf",
        "nan",
        "abc",
        "s3",
        "1.2.3",
        "-",
        ".",
        "1e5",
        "0.000000000000000000000000001",
    ],
)
def test_a_number_in_bounds_or_no_number_passes(token: str) -> None:
    assert bounds.number_problem(token) is None


def test_nesting_counts_brackets_braces_and_parentheses() -> None:
    assert bounds.nesting("[{a:(1)}]") == 3
    assert bounds.nesting("]]][") == 1
    assert bounds.nesting("'[[['") == 3  # an interpolation in a quoted string is parsed too


@pytest.mark.parametrize(
    ("inner", "count"),
    [("10", 10), ("0,10", 10), ("0,10,3", 4), ("10,0,-1", 10), ("0,1,0.25", 4), ("5,0", 0), ("start=0,stop=7", 7)],
)
def test_a_range_is_counted_as_hydra_lists_it(inner: str, count: int) -> None:
    assert bounds.range_length(inner) == count


@pytest.mark.parametrize("inner", ["0,int(1e8", "a,b", "0,10,0", "", "1,2,3,4", "0,inf"])
def test_a_range_of_anything_but_plain_numbers_is_none(inner: str) -> None:
    assert bounds.range_length(inner) is None


def test_top_items_counts_a_top_level_list() -> None:
    assert bounds.top_items("[]") == 0
    assert bounds.top_items("[{a:1,b:2},{c:[1,2]}]") == 2
    assert bounds.top_items("{a:1}") == 0


@pytest.mark.parametrize(
    ("word", "said"),
    [
        ("x=" + "[" * (MAX_NESTING + 1), f"at most {MAX_NESTING}"),
        ("chaos.faults=[" + ",".join(["{kind:preempt,at_step:5}"] * (MAX_FAULTS + 1)) + "]", f"at most {MAX_FAULTS}"),
        (f"x=range(0,{MAX_RANGE_VALUES + 1})", f"at most {MAX_RANGE_VALUES}"),
        ("x=range(0,int(1e8))", "plain numbers"),
        ("job.steps=" + "9" * 30, "job.steps='...'"),
    ],
)
def test_a_word_beyond_a_bound_is_refused_naming_the_limit(word: str, said: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        bounds.refuse_unbounded([word])
    assert said in str(err.value)


@pytest.mark.parametrize(
    "word",
    [
        "job.steps=5",
        "x='" + "[" * 5 + "'",
        "x='99999999999999999999999999'",
        "x=[1,[2,[3]]]",
        "x=range(0,1000)",
        "s3://bucket/12345678901234567890123",
        "job.name=a1e400b",
    ],
)
def test_a_word_within_bounds_passes(word: str) -> None:
    bounds.refuse_unbounded([word])
