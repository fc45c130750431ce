"""action=stop's side: which runs it asks, what it writes, and how long it waits."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from orchestrator.commands import stop
from orchestrator.control.stopreq import request_path, take_request
from orchestrator.runstate import rundir
from orchestrator.runstate.events import RunStarted
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.rundir import lock_controller

RESULT = {"status": "INTERRUPTED", "final_step": 5, "final_checkpoint": None, "metrics": {}, "incidents": [],
          "attempts": 1, "duration_s": 1.0}  # fmt: skip


def _run(tmp_path: Path) -> tuple[str, str]:
    home = tmp_path / "home"
    run_dir = rundir.run_path(str(home), "r1")
    Journal(rundir.journal_path(run_dir)).emit(RunStarted(run_id="r1", config={"job": {"name": "digits"}}))
    return str(home), run_dir


def test_a_run_that_does_not_exist_is_one_line_naming_run_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stop.main(str(tmp_path), "nope", wait_s=0.1) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run_id: no run named 'nope'") and err.count("\n") == 1


def test_an_ended_run_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home, run_dir = _run(tmp_path)
    Path(rundir.result_path(run_dir)).write_text(json.dumps({**RESULT, "status": "SUCCEEDED"}))
    assert stop.main(home, "r1", wait_s=0.1) == 0
    assert "already ended (SUCCEEDED)" in capsys.readouterr().err
    assert not Path(request_path(run_dir)).exists()


def test_a_run_whose_controller_died_is_told_with_the_resume_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, run_dir = _run(tmp_path)
    assert stop.main(home, "r1", wait_s=0.1) == 2
    err = capsys.readouterr().err
    assert "its controller is not running (it died)" in err and "action=resume run_id=r1" in err
    assert not Path(request_path(run_dir)).exists(), "nobody would read a request"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, str, IO[str]]]:
    """A run whose controller holds its lock (this process, as far as the lock tells)."""
    home, run_dir = _run(tmp_path)
    held = lock_controller(run_dir)
    assert held is not None
    yield home, run_dir, held
    held.close()


def test_a_live_controller_that_never_answers_is_waited_for_a_bounded_time(
    live: tuple[str, str, IO[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    home, run_dir, _held = live
    assert stop.main(home, "r1", wait_s=0.3) == 2
    assert "not stopped after 0s (the request is still waiting)" in capsys.readouterr().err
    req = take_request(run_dir)
    assert req is not None and req.pid > 0


def _answered(live: tuple[str, str, IO[str]], result: dict, action: str) -> list[Any]:
    """``stop.main`` with ``action`` against a controller that does as the real one: takes
    the request, writes ``result``, its last lines, then lets go of its lock. The requests it took."""
    home, run_dir, held = live
    taken: list[Any] = []

    def controller() -> None:
        for _ in range(200):
            req = take_request(run_dir)
            if req is not None:
                taken.append(req)
                Path(rundir.result_path(run_dir)).write_text(json.dumps(result))
                threading.Event().wait(0.3)  # its last lines, then its lock goes
                held.close()
                return
            threading.Event().wait(0.01)

    t = threading.Thread(target=controller)
    t.start()
    try:
        assert stop.main(home, "r1", wait_s=5.0, action=action) == 0
    finally:
        t.join()
    return taken


def test_a_live_controller_that_stops_is_reported_with_how_to_go_on(
    live: tuple[str, str, IO[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(_answered(live, RESULT, "stop")) == 1
    out = capsys.readouterr().out
    assert out.startswith("run r1: INTERRUPTED; go on with: python -m orchestrator action=resume run_id=r1 home=")


def test_a_cancel_reaches_a_live_controller_as_a_cancel_and_says_it_ended(
    live: tuple[str, str, IO[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    cancelled = {**RESULT, "status": "CANCELLED", "reason": "cancelled by action=cancel"}
    assert [r.action for r in _answered(live, cancelled, "cancel")] == ["cancel"]
    captured = capsys.readouterr()
    assert "cancel asked (" in captured.err and captured.out.strip() == "run r1: CANCELLED"


def test_a_cancel_of_an_ended_or_interrupted_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, run_dir = _run(tmp_path)
    Path(rundir.result_path(run_dir)).write_text(json.dumps(RESULT))  # INTERRUPTED: nothing runs it
    assert stop.main(home, "r1", action="cancel") == 2
    assert "is interrupted and nothing runs it; leave it, or go on with: " in capsys.readouterr().err
    Path(rundir.result_path(run_dir)).write_text(json.dumps({**RESULT, "status": "SUCCEEDED"}))
    assert stop.main(home, "r1", action="cancel") == 0
    assert "already ended (SUCCEEDED); nothing to cancel" in capsys.readouterr().err
    assert not Path(request_path(run_dir)).exists()
