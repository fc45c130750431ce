"""``stop.ask``: the request action=stop writes, without the wait, for the console; what
it says when there is no controller to ask."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.commands import stop
from orchestrator.control.stopreq import parse_request, request_path
from orchestrator.runstate import rundir
from orchestrator.runstate.events import RunStarted
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.rundir import lock_controller

pytestmark = pytest.mark.unit


def _run(tmp_path: Path) -> tuple[str, str]:
    home = str(tmp_path / "home")
    run_dir = rundir.run_path(home, "r1")
    Journal(rundir.journal_path(run_dir)).emit(RunStarted(run_id="r1", config={}))
    return home, run_dir


def test_a_live_run_is_asked_with_the_source_given(tmp_path: Path) -> None:
    home, run_dir = _run(tmp_path)
    held = lock_controller(run_dir)
    try:
        asked = stop.ask(home, "r1", "cancel", source="console")
    finally:
        assert held is not None
        held.close()
    assert asked.request is not None and asked.said == "" and asked.code == 0
    written = parse_request(Path(request_path(run_dir)).read_bytes())
    assert written == asked.request and (written.action, written.source) == ("cancel", "console")


@pytest.mark.parametrize(
    ("result", "action", "said", "code"),
    [
        (None, "stop", "its controller is not running (it died)", 2),
        ({"status": "SUCCEEDED"}, "stop", "already ended (SUCCEEDED); nothing to stop", 0),
        ({"status": "INTERRUPTED"}, "cancel", "is interrupted and nothing runs it", 2),
    ],
)
def test_a_run_with_no_controller_to_ask_is_told_why(
    tmp_path: Path, result: dict | None, action: str, said: str, code: int
) -> None:
    home, run_dir = _run(tmp_path)
    if result is not None:
        full = {"final_step": 1, "final_checkpoint": None, "metrics": {}, "incidents": [], "attempts": 1,
                "duration_s": 1.0, **result}  # fmt: skip
        Path(rundir.result_path(run_dir)).write_text(json.dumps(full))
    asked = stop.ask(home, "r1", action, source="console")
    assert asked.request is None and said in asked.said and asked.code == code
    assert not Path(request_path(run_dir)).exists()
    assert stop.ask(home, "nope").said.startswith("run_id: no run named 'nope'")
