"""action=drill: what it checks before it asks a run's controller, and how it reads the answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.commands import drill
from orchestrator.config.compose import compose
from orchestrator.config.saved import to_plain
from orchestrator.control.stopreq import DRILL_NAME, take_request
from orchestrator.errors import ConfigError
from orchestrator.runstate import rundir
from orchestrator.runstate.events import DrillRequested, FaultInjected, RunStarted
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.rundir import lock_controller

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["action=drill", "run_id=r1"], "fault", "injects one of: kill_region"),
        (["action=drill", "run_id=r1", "fault=corrupt_peer_state"], "fault", "injects one of"),
        (["action=status", "run_id=r1", "fault=kill_region"], "fault", "only action=drill takes it"),
        (["action=stop", "run_id=r1", "region=local-a"], "region", "only action=drill takes it"),
    ],
)
def test_the_command_line_names_a_fault_a_drill_injects(overrides: list[str], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose(overrides)
    assert err.value.key == key and words in str(err.value)
    assert compose(["action=drill", "run_id=r1", "fault=preempt", "region=local-b"]).fault == "preempt"


def test_the_fault_is_checked_against_the_runs_own_config() -> None:
    saved = json.loads(json.dumps(to_plain(compose(["job=digits"]))))
    assert drill.config_problem(saved, {"kind": "kill_region"}) is None
    assert drill.config_problem(saved, {"kind": "kill_region", "region": "eu-west"}).startswith(  # type: ignore[union-attr]
        "region: got 'eu-west'; allowed: local-a"
    )
    assert "nodes to 2 or more" in str(drill.config_problem(saved, {"kind": "kill_node"}))
    search = json.loads(json.dumps(to_plain(compose(["job=digits_hpo"]))))
    assert "by at_step" in str(drill.config_problem(search, {"kind": "kill_region"}))


def test_a_fault_the_runs_provider_cannot_carry_out_is_refused_naming_its_capability() -> None:
    saved = json.loads(json.dumps(to_plain(compose(["job=digits", "cloud=onprem"]))))
    assert drill.config_problem(saved, {"kind": "partition"}) == (
        "fault: partition needs the provider capability local_processes, which provider skypilot lacks: "
        "drop the fault, or use a cloud whose provider has it (local)"
    )
    assert drill.config_problem(saved, {"kind": "kill_region"}) is None, "an allocation cancelled (scancel)"
    assert drill.config_problem(saved, {"kind": "hang_region"}) is None, "an allocation frozen (scancel --signal=STOP)"
    assert drill.config_problem(saved, {"kind": "ssh_drop"}) is None


def _run(tmp_path: Path) -> tuple[str, str]:
    home = str(tmp_path / "home")
    run_dir = rundir.run_path(home, "r1")
    Journal(rundir.journal_path(run_dir)).emit(RunStarted(run_id="r1", config={}))
    Path(rundir.config_path(run_dir)).write_text(json.dumps(to_plain(compose(["job=digits"]))))
    return home, run_dir


def test_a_run_with_no_live_controller_is_not_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home, run_dir = _run(tmp_path)
    cli = compose(["action=drill", "run_id=r1", "fault=kill_region", f"home={home}"])
    assert drill.main(cli) == 2
    assert "its controller is not running (it died); go on with: " in capsys.readouterr().err
    assert take_request(run_dir, DRILL_NAME) is None


def test_the_controllers_answer_is_read_from_the_journal(tmp_path: Path) -> None:
    _home, run_dir = _run(tmp_path)
    held = lock_controller(run_dir)
    assert held is not None
    try:
        j = Journal(rundir.journal_path(run_dir))
        j.emit(DrillRequested("kill_region", "ana@box pid 1", region="local-a"))
        j.emit(DrillRequested("kill_region", "bob@box pid 2", region="local-a"))
        j.emit(FaultInjected("kill_region", index=0, step=40))
        j.emit(DrillRequested("kill_node", "cy@box pid 3", region="local-a", refused="no node"))
        asked, injected = drill.wait_answer(run_dir, "bob@box pid 2", 1.0)  # type: ignore[misc]
        assert asked.who == "bob@box pid 2" and injected is not None and injected.step == 40
        refused, none = drill.wait_answer(run_dir, "cy@box pid 3", 1.0)  # type: ignore[misc]
        assert refused.refused == "no node" and none is None
        assert drill.wait_answer(run_dir, "dee@box pid 4", 0.3) is None
    finally:
        held.close()
