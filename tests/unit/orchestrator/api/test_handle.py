"""``orchestrator.api.handle``: a run's handle over run folders written here (no
controller runs: a live one is this process holding the run's lock)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from orchestrator.api.handle import Progress, Run, Status, attach, default_home, runs
from orchestrator.commands.status import describe, render
from orchestrator.control.stopreq import take_request
from orchestrator.errors import RunError, RunTimeout
from orchestrator.runstate import rundir
from orchestrator.runstate.events import RunStarted
from orchestrator.runstate.journal import Journal
from orchestrator.runstate.rundir import lock_controller

pytestmark = pytest.mark.unit

RESULT = {"status": "SUCCEEDED", "final_step": 5, "final_checkpoint": None, "metrics": {"loss": 0.25},
          "incidents": [], "attempts": 1, "duration_s": 1.0, "weights_sha256": "ab"}  # fmt: skip


def _run(home: Path, run_id: str = "r1", result: dict[str, object] | None = None) -> Run:
    run_dir = rundir.run_path(str(home), run_id)
    Journal(rundir.journal_path(run_dir)).emit(RunStarted(run_id=run_id, config={"job": {"name": "digits"}}))
    if result is not None:
        Path(rundir.result_path(run_dir)).write_text(json.dumps(result))
    return attach(run_id, home)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Run, IO[str]]]:
    """A run whose controller holds its lock (this process, as far as the lock tells)."""
    run = _run(tmp_path)
    held = lock_controller(run.run_dir)
    assert held is not None
    yield run, held
    held.close()


def test_an_ended_run_reads_as_status_shows_it(tmp_path: Path) -> None:
    run = _run(tmp_path, result=RESULT)
    status = run.status()
    assert isinstance(status, Status) and status.state == "SUCCEEDED" and status.ended and status.step == 5
    assert str(status) == render("r1", describe(str(tmp_path), "r1") or {})
    result = run.wait(timeout=0)
    assert result == run.result() and result.succeeded and result.metrics == {"loss": 0.25}
    assert [type(e).__name__ for e in run.events()] == ["RunStarted"]
    assert [type(e).__name__ for e in run.events(follow=True)] == ["RunStarted"], "an ended run's events end"
    assert run.progress() is None, "no attempt ever reported"


def test_stop_or_cancel_of_an_ended_run_gives_its_result_and_asks_nothing(tmp_path: Path) -> None:
    run = _run(tmp_path, result=RESULT)
    assert run.stop() == run.result() and run.cancel() == run.result()
    assert take_request(run.run_dir) is None


def test_a_run_whose_controller_died_is_a_run_error_saying_to_resume(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert run.status().state == "CONTROLLER_DIED" and "action=resume run_id=r1" in (run.status().note or "")
    assert run.result() is None
    with pytest.raises(RunError, match=r"^run r1: its controller died; go on with run.resume\(\)$"):
        run.wait()
    with pytest.raises(RunError, match="its controller is not running"):
        run.stop()
    assert [type(e).__name__ for e in run.events(follow=True)] == ["RunStarted"]


def test_a_live_run_is_waited_for_a_bounded_time_and_stopped_from_python(live: tuple[Run, IO[str]]) -> None:
    run, _held = live
    with pytest.raises(RunTimeout, match=r"not ended after 0s; it goes on") as late:
        run.wait(timeout=0.05, poll_s=0.01)
    assert isinstance(late.value, TimeoutError) and late.value.run_id == "r1"
    assert run.stop(wait=False) is None
    req = take_request(run.run_dir)
    assert req is not None and (req.action, req.source) == ("stop", "python")
    assert run.status().state == "RUNNING" or run.status().note is None


def test_a_stop_not_answered_in_time_is_one_line(live: tuple[Run, IO[str]]) -> None:
    run, _held = live
    with pytest.raises(RunError, match=r"^run r1: not cancelled after 0s \(the request is still waiting\)"):
        run.cancel(timeout=0.2)


def test_no_such_run_and_a_damaged_file_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunError, match=r"^run_id: no run named 'nope' under "):
        attach("nope", tmp_path)
    with pytest.raises(RunError, match="no run named 'gone'"):
        Run("gone", str(tmp_path)).status()
    run = _run(tmp_path, result={"status": "DONE?"})
    with pytest.raises(RunError, match=r"result.json.*the file is damaged or was edited") as exc:
        run.result()
    assert "\n" not in str(exc.value) and exc.value.__cause__ is None and exc.value.__suppress_context__


def test_runs_lists_the_home_newest_first_and_an_empty_home_has_none(tmp_path: Path) -> None:
    assert runs(tmp_path / "empty") == []
    _run(tmp_path, "a", RESULT)
    _run(tmp_path, "b")
    rows = runs(tmp_path)
    assert {r.run_id: r.status for r in rows} == {"a": "SUCCEEDED", "b": "CONTROLLER_DIED"}


def test_the_default_home_is_the_configs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path))
    assert default_home() == str(tmp_path)
    monkeypatch.delenv("ORCHESTRATOR_HOME")
    assert default_home().endswith("/.orchestrator") and default_home("rel").startswith("/")


def test_progress_reads_what_the_attempt_reported() -> None:
    p = Progress.from_json({"step": 40, "total": 100, "generation": 2, "time": 5.0, "loss": 0.5, "extra": 1})
    assert (p.step, p.total, p.attempt, p.loss, p.last_checkpoint, p.fields["extra"]) == (40, 100, 2, 0.5, None, 1)
    assert Progress.from_json({"step": 1, "total": True, "loss": "x"}).total is None
