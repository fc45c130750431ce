"""The local provider's ports for a cluster's daemons: distinct, and out of the kernel's way."""

from __future__ import annotations

import pytest

import providers.local.provider as local

pytestmark = pytest.mark.integration


def test_cluster_ports_are_never_handed_out_twice_nor_from_the_ephemeral_range() -> None:
    ports = [local.free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    if local.ephemeral_low() - local.PORT_LOW >= 1000:
        # What bind(0) hands any other process (a Ray worker) comes from above; Ray's own
        # worker ports (10002-19999) from below.
        assert all(local.PORT_LOW <= p < local.ephemeral_low() for p in ports)
