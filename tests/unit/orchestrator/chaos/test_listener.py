"""The fault injector's part the run's events set off (orchestrator/chaos/listener.py): a fault
``during: failover`` fires when the run moves to RECOVERING after a failed attempt, at that
attempt's last step, never when a resumed controller recovers from its predecessor's death;
a drawn node fault knows the training group's nodes from the run's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.chaos.injector import FaultInjector, Injected
from orchestrator.chaos.listener import FaultPoints
from orchestrator.control.listeners import RunEvents
from orchestrator.runstate.events import AttemptEnded, RuntimeReport
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.lifecycle import RunState
from orchestrator.wire.control import ControlChannel

pytestmark = pytest.mark.unit


def _wired(tmp_path: Path) -> tuple[RunEvents, FaultInjector, list[Injected]]:
    events = RunEvents(Journal(str(tmp_path / "run" / "journal.jsonl")))
    control = ControlChannel(f"file://{tmp_path}/control")
    faults = [{"kind": "corrupt_checkpoint", "during": "failover"}]
    injector = FaultInjector(faults, control, None, lambda: [], "r", on_event=events.emit)  # type: ignore[arg-type]
    notes: list[Injected] = []
    events.add(FaultPoints(injector, notes.append))
    return events, injector, notes


def _fired(events: RunEvents) -> list[dict]:
    return [e for e in events.journal.events() if e["type"] == "fault_injected"]


def test_a_failover_fault_fires_right_after_the_run_moves_to_recovering_at_the_last_attempts_step(
    tmp_path: Path,
) -> None:
    events, _, notes = _wired(tmp_path)
    events.to(RunState.PROVISIONING, region="local-a", generation=1)
    events.emit(AttemptEnded(1, "local-a", last_step=70, outcome="cluster_lost"))
    assert not _fired(events)
    events.to(RunState.RECOVERING, failure="cluster_lost", to_region="local-b")
    types = [e["type"] for e in events.journal.events()]
    assert types[-2:] == ["transition", "fault_injected"]
    (fired,) = _fired(events)
    assert (fired["kind"], fired["step"], fired["during"]) == ("corrupt_checkpoint", 70, "failover")
    assert [n.text() for n in notes] == ["corrupt_checkpoint (failover)"]


def test_a_resumed_controller_recovering_from_its_predecessors_death_is_no_failover(tmp_path: Path) -> None:
    events, _, _ = _wired(tmp_path)
    events.to(RunState.PROVISIONING, region="local-a", generation=1)
    events.to(RunState.RECOVERING, failure="controller_lost", to_region="local-a")
    assert not _fired(events)


def test_a_drawn_node_fault_knows_the_nodes_the_group_runs_on_from_the_runs_state(tmp_path: Path) -> None:
    events, injector, _ = _wired(tmp_path)
    fields = {"restored_step": 0, "generation": 1, "time": 1.0, "by": "runtime", "worker_nodes": [2, 0, 2]}
    events.emit(RuntimeReport("train_started", fields))
    assert injector.state.worker_nodes == [0, 2]
    # A restart that says nothing of its nodes: none is known any more.
    events.emit(RuntimeReport("train_started", {**fields, "worker_nodes": None, "time": 2.0}))
    assert injector.state.worker_nodes == []
