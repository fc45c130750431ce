"""The ports local clusters take (providers/local/provider.py, ORCHESTRATOR_LOCAL_PORTS)."""

from __future__ import annotations

import pytest

from providers.local.provider import PORT_LOW, PORTS_ENV, port_range


def test_by_default_from_port_low_up_to_the_kernels_own_range() -> None:
    assert port_range(None, 32768) == (PORT_LOW, 32767)
    assert port_range("", 32768) == (PORT_LOW, 32767)


def test_a_range_of_its_own_for_a_second_controller_on_the_machine() -> None:
    assert port_range("26000-32000", 32768) == (26000, 32000)


@pytest.mark.parametrize("value", ["26000", "a-b", "32000-26000", "100-5000", "26000-26050", "60000-70000", "1-2-3"])
def test_a_malformed_or_too_narrow_range_names_the_variable_and_the_form(value: str) -> None:
    with pytest.raises(ValueError) as err:
        port_range(value, 32768)
    assert PORTS_ENV in str(err.value) and "LOW-HIGH" in str(err.value)
