"""Providers by name (providers/registry.py): an unknown one named with the known ones, and each
provider's own checks of the regions."""

from __future__ import annotations

import pytest

from orchestrator.config.compose import compose
from providers.registry import PROVIDERS, REGION_CHECKS, UnknownProvider, check_regions, get_provider

pytestmark = pytest.mark.unit


def test_an_unknown_provider_is_named_with_the_known_ones() -> None:
    with pytest.raises(UnknownProvider) as info:
        get_provider("nimbus")
    message = info.value.args[0]
    assert message.startswith("cloud.provider: got 'nimbus'") and all(name in message for name in PROVIDERS)


def test_each_region_check_is_a_module_function_of_a_known_provider() -> None:
    assert set(REGION_CHECKS) <= set(PROVIDERS)
    assert all(target.count(":") == 1 for target in REGION_CHECKS.values())


def test_the_local_providers_regions_pass_its_checks() -> None:
    check_regions(compose(["cloud=local"]))
