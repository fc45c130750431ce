"""The small shared checks: durations, amounts and local paths (orchestrator.config.checks)."""

from __future__ import annotations

import pytest

from orchestrator.config import checks
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
