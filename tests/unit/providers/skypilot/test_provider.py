"""The provider class: its records of the clusters it launched, and what it cannot do."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from providers.base import ClusterHandle, ProvisionError, ProvisionErrorKind
from providers.skypilot.provider import SkyPilotProvider

pytestmark = pytest.mark.unit


def test_a_recorded_cluster_is_found_again_until_forgotten(tmp_path: Path) -> None:
    provider = SkyPilotProvider({}, state_dir=str(tmp_path), out=io.StringIO())
    handle = ClusterHandle("run-r-g1", "r", "skypilot", "127.0.0.1:1", {"sky_cluster": "run-r-g1"})
    provider._record(handle)
    assert SkyPilotProvider({}, state_dir=str(tmp_path)).find("run-r-g1") == handle
    provider._forget("run-r-g1")
    assert provider.find("run-r-g1") is None


def test_a_lost_node_is_never_replaced_in_place() -> None:
    provider = SkyPilotProvider({}, out=io.StringIO())
    handle = ClusterHandle("c", "r", "skypilot", "", {"sky_cluster": "c-1"})
    assert provider.nodes(handle) == [] and provider.node_processes(handle, 1) == []
    with pytest.raises(ProvisionError) as info:
        provider.replace_node(handle, 1, 60.0)
    assert info.value.kind is ProvisionErrorKind.NO_CAPACITY and "node 1 of c-1" in str(info.value)
