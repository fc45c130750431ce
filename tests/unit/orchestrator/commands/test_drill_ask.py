"""``drill.ask``: the drill action=drill asks, without the wait, for the console."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.commands import drill
from orchestrator.config.compose import compose
from orchestrator.config.saved import saved_json
from orchestrator.config.schema import NotifyConfig
from orchestrator.control.stopreq import DRILL_NAME, parse_request, request_path
from orchestrator.runstate import rundir
from orchestrator.runstate.events import RunStarted
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.rundir import lock_controller

pytestmark = pytest.mark.unit


def test_a_drill_is_checked_then_asked_with_its_source(tmp_path: Path) -> None:
    home = str(tmp_path)
    run_dir = rundir.run_path(home, "r1")
    Journal(rundir.journal_path(run_dir)).emit(RunStarted(run_id="r1", config={}))
    Path(rundir.config_path(run_dir)).write_bytes(saved_json(compose(["job=digits"]), NotifyConfig()))
    assert "its controller is not running" in drill.ask(home, "r1", "kill_region").said
    held = lock_controller(run_dir)
    assert held is not None
    try:
        assert drill.ask(home, "r1", "explode").said.startswith("fault: got 'explode'; a drill injects one of:")
        assert drill.ask(home, "r1", "kill_region", "mars").said.startswith("region: got 'mars'")
        assert not Path(request_path(run_dir, DRILL_NAME)).exists()
        asked = drill.ask(home, "r1", "kill_region", "local-b", source="console")
    finally:
        held.close()
    req = parse_request(Path(request_path(run_dir, DRILL_NAME)).read_bytes())
    assert asked.request == req and req is not None
    assert (req.fault, req.source) == ({"kind": "kill_region", "region": "local-b"}, "console")
