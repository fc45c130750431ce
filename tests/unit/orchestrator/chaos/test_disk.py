"""disk_full: a full scratch folder for the fault's duration, then released; a cluster with no
scratch folder, or a platform that refuses the mount, is a failed fault said once."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.chaos import disk
from orchestrator.chaos.firing import FaultState, Firing
from orchestrator.runstate.events import Event, FaultEnded, FaultFailed
from orchestrator.wire.faults import FaultKind
from orchestrator.wire.sections import FaultSpec
from providers.base import ClusterHandle

pytestmark = pytest.mark.unit


def _firing(info: dict[str, Any], duration_s: float = 0.0) -> Firing:
    fault = FaultSpec(kind=FaultKind.disk_full, at_step=5, duration_s=duration_s)
    cluster = ClusterHandle("c", "local-a", "local", "127.0.0.1:1", info)
    return Firing(0, "disk_full", fault, {}, cluster, None, 5, 0.0)


def _state(events: list[Event]) -> FaultState:
    return FaultState(object(), lambda: [], "run", {}, events.append)  # type: ignore[arg-type]


def test_a_full_scratch_is_released_after_the_fault_s_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    mounted, released, timers = [], [], []
    monkeypatch.setattr(disk, "fill_scratch", lambda path: mounted.append(path) or path)
    monkeypatch.setattr(disk, "release_scratch", released.append)
    events: list[Event] = []
    state = _state(events)
    monkeypatch.setattr(state, "later", lambda s, fn, *a: timers.append((s, fn, a)))
    f = _firing({"scratch_dir": "/scratch/c"}, duration_s=3.0)
    disk._disk_full(state, f)
    assert mounted == ["/scratch/c"] and state.mounts == {"c": "/scratch/c"}
    assert f.detail == {"path": "/scratch/c", "bytes": disk.DISK_FULL_BYTES, "duration_s": 3.0}
    ((seconds, fn, args),) = timers
    assert seconds == 3.0
    fn(*args)
    assert released == ["/scratch/c"] and state.mounts == {}
    assert [type(e) for e in events] == [FaultEnded]
    fn(*args)  # released once: a teardown that frees it again does nothing
    assert released == ["/scratch/c"]


def test_without_a_scratch_folder_or_a_mount_the_fault_fails_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[Event] = []
    f = _firing({})
    disk._disk_full(_state(events), f)
    assert f.detail == {"failed": "the cluster has no scratch_dir"} and events == []

    def refuse(path: str) -> str:
        raise OSError("cannot mount a tmpfs over /s: permission denied")

    monkeypatch.setattr(disk, "fill_scratch", refuse)
    f = _firing({"scratch_dir": "/s"})
    state = _state(events)
    disk._disk_full(state, f)
    assert "permission denied" in str(f.detail["failed"]) and state.mounts == {}
    assert [type(e) for e in events] == [FaultFailed]
