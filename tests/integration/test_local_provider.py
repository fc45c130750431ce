"""The local provider against real Ray: launch, health, runtime, teardown that leaves nothing."""

from __future__ import annotations

import sys

import pytest

from providers.base import ProvisionError, ProvisionErrorKind, RegionSpec
from providers.local import LocalProvider
from support import ray_pids, wait_no_new_ray


def test_launch_health_runtime_and_idempotent_teardown(tmp_path):
    before = ray_pids()
    provider = LocalProvider()
    cluster = provider.launch(RegionSpec("local-x", f"file://{tmp_path}/store", 2), "t-launch", timeout_s=60)
    try:
        assert provider.healthy(cluster)
        host, _port = cluster.address.split(":")
        assert host == "127.0.0.1"
        runtime = provider.start_runtime(
            cluster, [sys.executable, "-c", "import time; time.sleep(120)"], {}, str(tmp_path / "rt.log")
        )
        pids = set(provider.processes(cluster))
        assert runtime.pid in pids
        assert len(pids) >= 3  # ray start, gcs_server, raylet at least
    finally:
        provider.teardown(cluster)
    assert provider.processes(cluster) == []
    assert not provider.healthy(cluster)
    assert runtime.poll() is not None
    provider.teardown(cluster)  # already gone: not an error
    assert not wait_no_new_ray(before)


def test_a_cluster_that_is_not_ready_in_time_is_a_transient_error_and_leaves_nothing(tmp_path):
    before = ray_pids()
    provider = LocalProvider()
    with pytest.raises(ProvisionError) as err:
        provider.launch(RegionSpec("local-y", f"file://{tmp_path}/store", 2), "t-timeout", timeout_s=0.05)
    assert err.value.kind is ProvisionErrorKind.TRANSIENT
    assert "local-y" in str(err.value)
    assert not wait_no_new_ray(before)


def _loopback(ip: str) -> bool:
    import ipaddress

    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def test_only_loopback_listeners(tmp_path):
    import psutil

    provider = LocalProvider()
    cluster = provider.launch(RegionSpec("local-z", f"file://{tmp_path}/store", 2), "t-loopback", timeout_s=60)
    try:
        pids = set(provider.processes(cluster))
        bad = [
            (c.laddr, c.pid)
            for c in psutil.net_connections(kind="inet")
            if c.pid in pids and c.status == psutil.CONN_LISTEN and not _loopback(c.laddr.ip)
        ]
        assert bad == []
    finally:
        provider.teardown(cluster)
