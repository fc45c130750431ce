"""SkyPilot's exceptions as the failure policy sees them."""

from __future__ import annotations

import pytest

from providers.base import ProvisionErrorKind
from providers.skypilot.errors import classify, first_line, one_line, retryable

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


def test_one_line_keeps_the_mismatch_not_just_its_header() -> None:
    exc = ValueError(
        "Infeasible resource demands found:\n  Instance type requested: m6i.xlarge\n"
        "  Accelerators for m6i.xlarge: None\n  Accelerators requested: {'A10G': 1}\n"
        "To fix: either only specify instance_type, or change the accelerators field to be consistent."
    )
    assert one_line(exc) == (
        "Infeasible resource demands found: Instance type requested: m6i.xlarge; Accelerators for m6i.xlarge: None; "
        "Accelerators requested: {'A10G': 1}; To fix: either only specify instance_type, or change the "
        "accelerators field to be consistent."
    )


def test_one_line_names_an_unreachable_host_and_stays_short() -> None:
    exc = ConnectionError(
        "HTTPSConnectionPool(host='raw.githubusercontent.com', port=443): Max retries exceeded with url: /x.csv "
        '(Caused by NameResolutionError("..."))'
    )
    assert one_line(exc) == "cannot reach raw.githubusercontent.com (offline?)"
    long = one_line(ValueError("x" * 1000))
    assert len(long) == 400 and long.endswith("...") and "\n" not in long
    assert one_line(ValueError("Invalid region 'eu-west-2'\nDid you mean one of these: 'eu-west-1'?")) == (
        "Invalid region 'eu-west-2'; Did you mean one of these: 'eu-west-1'?"
    )
