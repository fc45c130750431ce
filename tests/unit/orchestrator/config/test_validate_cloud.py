"""The checks of cloud.* (orchestrator.config.validate_cloud): one store URL, one protocol."""

from __future__ import annotations

import pytest

from orchestrator.config.validate_cloud import _validate_options, _validate_url
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("simplecache::s3://bucket/x", "'::' chains"),
        ("s3://bucket/x::file:///tmp", "'::' chains"),
        ("file:///tmp/x::memory://y", "'::' chains"),
        ("s3://bucket/file:///tmp/x", "one protocol"),
        ("file:///tmp/s3://bucket", "one protocol"),
    ],
)
def test_a_chained_or_doubled_store_url_is_refused(url: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        _validate_url("cloud.control_store", url, "s3://bucket/x")


@pytest.mark.parametrize("url", ["file:///tmp/x", "s3://bucket/x", "gs://bucket/x/y"])
def test_one_store_url_passes(url: str) -> None:
    _validate_url("cloud.control_store", url, "s3://bucket/x")


@pytest.mark.parametrize("timeout", [1e-300, 0, -1, 1e300, "3", True])
def test_op_timeout_s_is_a_duration(timeout: object) -> None:
    with pytest.raises(ConfigError, match="op_timeout_s"):
        _validate_options("cloud.control_options", {"op_timeout_s": timeout})


def test_a_customer_key_in_the_options_is_refused_naming_its_path() -> None:
    with pytest.raises(ConfigError) as err:
        _validate_options("cloud.control_options", {"s3_additional_kwargs": {"SSECustomerKey": "k"}})
    assert err.value.key == "cloud.control_options.s3_additional_kwargs.SSECustomerKey"
