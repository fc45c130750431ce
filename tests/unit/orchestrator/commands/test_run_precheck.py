"""A run asks its provider's precheck before anything is written or launched
(orchestrator/commands/run.py:provider_precheck): what it refuses is one line naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.commands.run import ProviderPrecheckFailed, provider_precheck
from orchestrator.config.compose import compose
from providers.base import ProviderUnavailable, ProvisionError, ProvisionErrorKind

pytestmark = pytest.mark.unit


class _Provider:
    name = "fake"
    capabilities: frozenset[Any] = frozenset()

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.asked: list[list[str]] = []

    def precheck(self, regions: list[str]) -> None:
        self.asked.append(regions)
        if self.error is not None:
            raise self.error


def test_the_provider_is_asked_about_the_candidate_regions_in_order() -> None:
    provider = _Provider()
    provider_precheck(compose(["cloud.candidates=[local-c,local-a]"]), provider)  # type: ignore[arg-type]
    assert provider.asked == [["local-c", "local-a"]]


def test_a_region_it_cannot_launch_in_is_one_line_naming_the_region() -> None:
    provider = _Provider(ProvisionError(ProvisionErrorKind.PRECHECK, "local-b", "no credentials for it"))
    with pytest.raises(ProviderPrecheckFailed) as refused:
        provider_precheck(compose([]), provider)  # type: ignore[arg-type]
    assert str(refused.value) == "cloud.regions.local-b: no credentials for it; nothing was launched"


def test_a_provider_that_cannot_work_here_is_one_line_naming_what_to_install() -> None:
    provider = _Provider(ProviderUnavailable("the fake provider needs fakesdk: pip install fakesdk"))
    with pytest.raises(ProviderPrecheckFailed) as refused:
        provider_precheck(compose([]), provider)  # type: ignore[arg-type]
    assert str(refused.value) == "cloud.provider: the fake provider needs fakesdk: pip install fakesdk"
