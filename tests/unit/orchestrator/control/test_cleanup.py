"""Clean-up runs every step even when one fails; a standby whose runtime cannot start
is torn down, not leaked."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.control.cleanup import run_all
from orchestrator.control.standby import StandbyManager
from orchestrator.runstate.events import Event, to_json

pytestmark = pytest.mark.unit


def test_every_step_runs_and_the_first_error_is_raised() -> None:
    ran: list[str] = []

    def step(name: str, fail: bool = False) -> Any:
        def run() -> None:
            ran.append(name)
            if fail:
                raise RuntimeError(name)

        return run

    with pytest.raises(RuntimeError, match=r"^replicator$"):
        run_all([step("standby"), step("replicator", True), step("teardown", True), step("proxies")])
    assert ran == ["standby", "replicator", "teardown", "proxies"]
    run_all([step("again")])
    assert ran[-1] == "again"


def test_an_interrupt_during_clean_up_still_runs_the_rest() -> None:
    ran: list[str] = []

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_all([interrupted, lambda: ran.append("teardown")])
    assert ran == ["teardown"]


class Journal:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def append(self, type_: str, **fields: Any) -> None:
        self.events.append({"type": type_, **fields})

    def emit(self, event: Event) -> Event:
        self.events.append(to_json(event))
        return event


def test_a_standby_whose_runtime_cannot_start_is_torn_down() -> None:
    torn: list[str] = []
    cluster = SimpleNamespace(name="standby-c1")
    journal = Journal()
    ctx = SimpleNamespace(
        cfg=SimpleNamespace(recovery=SimpleNamespace(standby=True)),
        emit=journal.emit,
        provider=SimpleNamespace(teardown=lambda c: torn.append(c.name)),
    )

    def cannot_start(*_: Any, **__: Any) -> None:
        raise OSError("ssh: connection refused")

    manager = StandbyManager(ctx, lambda: 7)  # type: ignore[arg-type]
    manager.launch, manager.start_runtime = (lambda *a, **k: cluster), cannot_start
    manager._target = "local-b"
    manager._prepare("local-b")
    assert torn == ["standby-c1"]
    assert manager._warm is None and manager._target is None
    failed = [e for e in journal.events if e["type"] == "standby_failed"]
    assert failed and "connection refused" in failed[0]["error"] and failed[0]["generation"] == 7
