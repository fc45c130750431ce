"""The run's events (orchestrator/control/listeners.py): journaled, folded, then told to each
listener in the journal's order; a listener that raises is journaled once and the run goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.control.listeners import RunEvents, error_line, listener_name
from orchestrator.runstate.events import Event, FaultInjected, RunStarted, Transition
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.lifecycle import IllegalTransition, RunState
from orchestrator.runstate.state import RunView

pytestmark = pytest.mark.unit


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, RunState]] = []
        self.closed = 0

    def on_event(self, event: Event, view: RunView) -> None:
        self.seen.append((event.TYPE, view.state))

    def close(self) -> None:
        self.closed += 1


class Broken:
    name = "broken"

    def on_event(self, event: Event, view: RunView) -> None:
        raise OSError("disk full\nand a second line")


def _events(tmp_path: Path) -> RunEvents:
    return RunEvents(Journal(str(tmp_path / "journal.jsonl")))


def _types(events: RunEvents) -> list[str]:
    return [e["type"] for e in events.journal.events()]


def test_each_listener_is_told_every_event_in_order_with_the_state_after_it(tmp_path: Path) -> None:
    events = _events(tmp_path)
    first, second = Recorder(), Recorder()
    events.add(first)
    events.add(second, name="second")
    events.emit(RunStarted(run_id="r"))
    events.to(RunState.PROVISIONING, region="a", generation=1)
    assert first.seen == second.seen == [("run_started", RunState.PENDING), ("transition", RunState.PROVISIONING)]
    assert events.view.state is RunState.PROVISIONING
    assert events.listeners == ("tests.unit.orchestrator.control.test_listeners:Recorder", "second")
    events.close()
    assert first.closed == second.closed == 1


def test_a_listener_that_raises_is_journaled_once_and_the_run_and_the_others_go_on(tmp_path: Path) -> None:
    events = _events(tmp_path)
    after = Recorder()
    events.add(Broken())
    events.add(after)
    events.emit(RunStarted(run_id="r"))
    events.to(RunState.PROVISIONING)
    assert _types(events) == ["run_started", "listener_failed", "transition"]
    (failed,) = [e for e in events.journal.events() if e["type"] == "listener_failed"]
    assert (failed["listener"], failed["error"], failed["event"]) == ("broken", "OSError: disk full", "run_started")
    # The listener after it heard everything, the failure's own line included, in the journal's order.
    assert [t for t, _ in after.seen] == ["run_started", "listener_failed", "transition"]


def test_an_event_a_listener_emits_is_journaled_at_once_and_told_after_the_one_it_heard(tmp_path: Path) -> None:
    events = _events(tmp_path)
    before, after = Recorder(), Recorder()

    def on_recovering(event: Event, view: RunView) -> None:
        if isinstance(event, Transition) and event.to is RunState.PROVISIONING:
            events.emit(FaultInjected("controller_crash", index=0, step=3))

    events.add(before)
    events.listen("chaos", on_recovering)
    events.add(after)
    events.to(RunState.PROVISIONING)
    assert _types(events) == ["transition", "fault_injected"]
    assert [t for t, _ in before.seen] == [t for t, _ in after.seen] == ["transition", "fault_injected"]


def test_a_transition_the_lifecycle_has_no_edge_for_is_refused_and_journals_nothing(tmp_path: Path) -> None:
    events = _events(tmp_path)
    with pytest.raises(IllegalTransition, match="PENDING -> RUNNING"):
        events.to(RunState.RUNNING)
    assert _types(events) == []


def test_generations_handed_out_stay_above_every_one_the_journal_names(tmp_path: Path) -> None:
    events = _events(tmp_path)
    assert events.next_generation() == 1 and events.next_generation() == 2
    events.restore(RunView(generation=7))
    assert events.generation == 7 and events.next_generation() == 8 and events.generation == 8


def test_a_listeners_name_and_its_errors_line() -> None:
    assert listener_name(Broken()) == "broken"
    assert listener_name(Recorder()).endswith("test_listeners:Recorder")
    err: Any = ValueError("")
    assert error_line(err) == "ValueError" and error_line(OSError("a\nb")) == "OSError: a"
