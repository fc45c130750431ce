"""What a local cluster's processes carry to be found (providers/local/provider.py)."""

from __future__ import annotations

from providers.base import ClusterHandle
from providers.local.provider import marker_of


def test_a_cluster_is_found_by_its_launchs_marker_and_an_older_record_by_its_name() -> None:
    launched = ClusterHandle("r-local-a-g1", "local-a", "local", "127.0.0.1:1", {"marker": "r-local-a-g1@0a1b2c3d"})
    assert marker_of(launched) == "r-local-a-g1@0a1b2c3d"
    older = ClusterHandle("r-local-a-g1", "local-a", "local", "127.0.0.1:1", {"temp_dir": "/tmp/x"})
    assert marker_of(older) == "r-local-a-g1"
