"""Network faults on a cluster: a partition's window, a flapping check, a cut connection."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.chaos.firing import FaultState, Firing
from orchestrator.chaos.handlers import handler_for
from orchestrator.chaos.network import PARTITION_S, ZOMBIE_WINDOW_S
from orchestrator.runstate.events import FaultFailed
from orchestrator.wire.sections import FaultSpec
from providers.base import Capability, ClusterHandle

pytestmark = pytest.mark.unit
CLUSTER = ClusterHandle("c", "r", "local", "", {})


class Provider:
    name = "fake"
    capabilities: frozenset[Capability] = frozenset()

    def processes(self, cluster: ClusterHandle) -> list[int]:
        return []


def fire(kind: str, state: FaultState, **fault: Any) -> Firing:
    spec = FaultSpec.from_plain({"kind": kind, "at_step": 1, **fault}, "chaos.faults[0]")
    firing = Firing(0, kind, spec, {}, CLUSTER, None, 1, at=0.0)
    handler_for(kind).strike(state, firing)
    return firing


def test_a_partition_keeps_the_cluster_unreachable_past_its_heal() -> None:
    state = FaultState(Provider(), lambda: [], "run", {}, lambda e: None)  # type: ignore[arg-type]
    try:
        firing = fire("partition", state)
        assert firing.detail == {"stopped": 0, "duration_s": PARTITION_S} and firing.at > 0
        assert state.unreachable["c"] == firing.at + PARTITION_S + ZOMBIE_WINDOW_S and len(state.timers) == 1
    finally:
        for timer in state.timers:
            timer.cancel()


def test_a_flap_counts_its_checks_and_a_provider_without_ssh_cannot_drop_it() -> None:
    events: list[object] = []
    state = FaultState(Provider(), lambda: [], "run", {}, events.append)  # type: ignore[arg-type]
    assert fire("status_flap", state, count=3).detail == {"count": 3} and state.flaps == {"c": (0, 3)}
    dropped = fire("ssh_drop", state)
    why = "ssh_drop needs the provider capability cut_connection, which provider fake lacks"
    assert dropped.detail["failed"] == why
    assert [type(e) for e in events] == [FaultFailed]
