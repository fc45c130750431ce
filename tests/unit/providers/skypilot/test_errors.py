"""SkyPilot's exceptions as the failure policy sees them."""

from __future__ import annotations

import pytest

from providers.base import ProvisionErrorKind
from providers.skypilot.errors import classify, first_line, retryable

pytestmark = pytest.mark.unit


def test_first_line_drops_colour_codes_and_keeps_one_line() -> None:
    assert first_line(ValueError("\x1b[31mbad\x1b[0m thing\nmore")) == "bad thing"
    assert first_line(ValueError("")) == "ValueError"


def test_classify_and_retryable() -> None:
    e = pytest.importorskip("sky.exceptions", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    assert classify(e.ResourcesUnavailableError("no capacity")).kind is ProvisionErrorKind.NO_CAPACITY
    assert classify(e.ResourcesUnavailableError("Quota exceeded")).kind is ProvisionErrorKind.PRECHECK
    assert classify(e.InvalidCloudCredentials("no")).kind is ProvisionErrorKind.PRECHECK
    assert classify(RuntimeError("VcpuLimitExceeded")).kind is ProvisionErrorKind.PRECHECK
    assert classify(RuntimeError("flaky")).kind is ProvisionErrorKind.TRANSIENT
    assert retryable(ConnectionError()) and retryable(e.ApiServerConnectionError("http://x"))
    assert not retryable(e.InvalidCloudCredentials("no"))
