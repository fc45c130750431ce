"""The nodes' rank logs brought back: parts of one rank joined, unreachable nodes named."""

from __future__ import annotations

from pathlib import Path

import pytest

from providers.base import ClusterHandle
from providers.skypilot import logs

pytestmark = pytest.mark.unit


def test_each_nodes_part_of_a_rank_is_kept_in_node_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = {0: {0: (b"zero\n", 0), 1: (b"one before\n", 0)}, 1: {1: (b"one after\n", 0)}}

    def fetch(cluster: ClusterHandle, log_dir: str, node: int) -> dict[int, tuple[bytes, int]]:
        if node == 2:
            raise OSError("ssh exited 255: Connection timed out")
        return parts[node]

    monkeypatch.setattr(logs, "_fetch", fetch)
    cluster = ClusterHandle("c", "r", "skypilot", "", {"num_nodes": 3})
    kept = logs.fetch_kept(cluster, "/tmp/n/logs", str(tmp_path))
    assert kept.ranks == (0, 1) and kept.error == "node 2: ssh exited 255: Connection timed out"
    assert (tmp_path / "rank-1.log").read_bytes() == b"one before\none after\n"
