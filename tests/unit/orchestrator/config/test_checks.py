"""The small checks every validator uses: each refusal names its key and the bound."""

from __future__ import annotations

import pytest

from orchestrator.config.checks import bounded_int, non_negative_int, positive_int, safe_name
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


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
