"""A worker's assignment from the driver: which rank watches its node's notices (the
rendezvous itself, over real stores and gloo groups: tests/integration, same path)."""

from __future__ import annotations

import pytest

from orchestrator.runtime.group import rendezvous

pytestmark = pytest.mark.unit


def test_one_worker_per_node_watches_its_notices_and_a_replacement_takes_over_a_lost_watch() -> None:
    first = rendezvous.node_watchers({0: "a", 1: "a", 2: "b", 3: "b"}, {})
    assert first == {0: "a", 2: "b"}
    # Rank 2 lost with node b; its replacement lands on a new node c: it watches there.
    assert rendezvous.node_watchers({0: "a", 1: "a", 2: "c", 3: "b"}, first) == {0: "a", 2: "c", 3: "b"}
    # Rank 1 (not a watcher) replaced on node a: the watch stays with rank 0.
    assert rendezvous.node_watchers({0: "a", 1: "a", 2: "b", 3: "b"}, first) == first
