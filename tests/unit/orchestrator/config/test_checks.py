"""The small shared checks: durations, amounts and local paths (orchestrator.config.checks)."""

from __future__ import annotations

import pytest

from orchestrator.config import checks
from orchestrator.config.checks import bounded_int, non_negative_int, positive_int, safe_name
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value", [1e-300, 5e-324, 0.001, -1.0, 0.0, 1e300, float("nan"), float("inf")])
def test_a_duration_outside_its_bounds_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match=r"^k: .*seconds > 0"):
        checks.seconds("k", value)


@pytest.mark.parametrize("value", [checks.MIN_SECONDS, 1.0, checks.MAX_SECONDS])
def test_a_duration_in_bounds_passes(value: float) -> None:
    checks.seconds("k", value)


def test_off_takes_zero_and_nothing_between() -> None:
    checks.seconds("k", 0.0, off=True)
    with pytest.raises(ConfigError, match="0 \\(off\\) or"):
        checks.seconds("k", 1e-300, off=True)


@pytest.mark.parametrize("value", [1e-300, -1.0, float("nan"), float("inf")])
def test_an_amount_below_its_least_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match=r"at least 0\.01 CPUs"):
        checks.at_least("k", value, checks.MIN_CPUS, "CPUs")


@pytest.mark.parametrize(
    ("value", "said"),
    [("/a::b", "'::' chains"), ("file:///x", "not a URL"), ("s3://b/x", "not a URL"), ("a\x00", "NUL")],
)
def test_a_local_path_refuses_chains_urls_and_nul(value: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        checks.local_path("home", value, "home")


def test_integer_checks_pass_at_their_bounds_and_name_the_key_beyond() -> None:
    positive_int("k", 1)
    non_negative_int("k", 0)
    bounded_int("k", 5, 5, 7)
    bounded_int("k", 7, 5, 7)
    for check, args, words in (
        (positive_int, (0,), ">= 1"),
        (non_negative_int, (-1,), ">= 0"),
        (bounded_int, (8, 5, 7), "in 5..7"),
        (bounded_int, (4, 5, 7), "in 5..7"),
    ):
        with pytest.raises(ConfigError) as err:
            check("trainer.workers", *args)  # type: ignore[operator]
        assert err.value.key == "trainer.workers" and words in str(err.value)


@pytest.mark.parametrize("name", ["a", "run-1", "R_2.x", "9lives"])
def test_safe_names(name: str) -> None:
    assert safe_name(name)


@pytest.mark.parametrize("name", ["", "-x", ".hidden", "../x", "a/b", "a b", "é", "a;b", "_x"])
def test_names_that_would_be_a_path_an_option_or_mangled_are_refused(name: str) -> None:
    assert not safe_name(name)
