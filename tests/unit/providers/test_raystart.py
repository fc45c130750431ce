"""providers.raystart's own flag --join-on-loopback: 127.0.0.1 stays this node's address."""

from __future__ import annotations

import pytest

from providers import raystart

pytestmark = pytest.mark.unit


def test_join_on_loopback_keeps_loopback_and_resolves_the_rest_as_ray_would(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray._private import ray_constants, services

    monkeypatch.setattr(services, "resolve_ip_for_localhost", lambda host: "10.0.0.7")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    raystart._join_on_loopback()
    assert ray_constants.ENABLE_RAY_CLUSTER is True
    assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert services.resolve_ip_for_localhost("localhost") == "10.0.0.7"
