"""A stop or a cancel asked from the console: the controller journals where it was asked
(the transition's ``source``) and its reason names the console; one from the command line
reads as it always did."""

from __future__ import annotations

from pathlib import Path

import pytest

import orchestrator.control.controller as controller
from orchestrator.control.stopreq import StopRequest, StopWatch
from tests.support.fakecloud import FakeCloud, Script
from tests.unit.orchestrator.control.test_controller import _controller, _events, _fast  # noqa: F401

pytestmark = pytest.mark.unit


def asked(source: str, action: str = "stop") -> type[StopWatch]:
    class Asked(StopWatch):
        """A stop watch that found this request (the script's Ctrl-C is its interrupt)."""

        def start(self) -> StopWatch:
            self.request = StopRequest("ana", "box", 7, 1.0, action=action, source=source)
            return super().start()

    return Asked


@pytest.mark.parametrize(
    ("source", "action", "status"),
    [
        ("console", "stop", "INTERRUPTED"),
        ("console", "cancel", "CANCELLED"),
        ("cli", "stop", "INTERRUPTED"),
        ("python", "stop", "INTERRUPTED"),
    ],
)
def test_the_stop_is_journaled_with_where_it_was_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, action: str, status: str
) -> None:
    monkeypatch.setattr(controller, "StopWatch", asked(source, action))
    ctl = _controller(tmp_path, FakeCloud({"local-a": [Script(40, "interrupt")]}))
    result = ctl.run()
    (stopped,) = [e for e in _events(ctl, "transition") if e["to"] == status]
    assert stopped["source"] == source and result["status"] == status
    verb = "stopped by action=stop" if action == "stop" else "cancelled by action=cancel"
    console = {"console": ", from the console", "python": ", from Python"}.get(source, "")
    assert result["reason"].startswith(f"{verb} (ana@box pid 7{console}): clusters torn down")


def test_a_ctrl_c_names_no_source(tmp_path: Path) -> None:
    ctl = _controller(tmp_path, FakeCloud({"local-a": [Script(40, "interrupt")]}))
    assert ctl.run()["status"] == "INTERRUPTED"
    (stopped,) = [e for e in _events(ctl, "transition") if e["to"] == "INTERRUPTED"]
    assert "source" not in stopped
