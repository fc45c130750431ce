"""The warm standby (orchestrator/control/standby.py): one whose runtime cannot start is torn down."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.control.standby import StandbyManager
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.events import Event

pytestmark = pytest.mark.unit


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
        provider=SimpleNamespace(teardown=lambda c: torn.append(c.name), capabilities=frozenset()),
    )

    def cannot_start(*_: Any, **__: Any) -> None:
        raise OSError("ssh: connection refused")

    manager = StandbyManager(ctx, lambda: 7)  # type: ignore[arg-type]
    manager.launch, manager.start_runtime = (lambda *a, **k: cluster), cannot_start
    manager._target = "local-b"
    manager._thread = threading.Thread(target=manager._prepare, args=("local-b",))
    manager._thread.start()
    manager._thread.join(5)
    assert torn == ["standby-c1"]
    assert manager._warm is None and manager._target is None
    failed = [e for e in journal.events if e["type"] == "standby_failed"]
    assert failed and "connection refused" in failed[0]["error"] and failed[0]["generation"] == 7
