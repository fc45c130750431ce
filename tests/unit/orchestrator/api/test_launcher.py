"""``orchestrator.api.launcher``: what a launch refuses before anything starts, and the
one line a controller that would not start left in its log. Nothing is started here: the
background start (``commands.detach.start``) is replaced where a test gets that far."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.api import launcher
from orchestrator.api.config import compose
from orchestrator.commands import detach
from orchestrator.errors import ConfigError, RunError
from orchestrator.runstate import rundir
from orchestrator.runstate.events import RunStarted
from orchestrator.runstate.journal import Journal

pytestmark = pytest.mark.unit


def test_only_a_run_is_launched(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^action: got list; launch starts a run"):
        launcher.launch(compose("action=list", home=tmp_path))


def test_a_run_id_of_a_finished_run_is_refused_before_anything_starts(tmp_path: Path) -> None:
    run_dir = rundir.run_path(str(tmp_path), "done")
    Journal(rundir.journal_path(run_dir)).emit(RunStarted(run_id="done", config={}))
    Path(rundir.result_path(run_dir)).write_text(
        json.dumps(
            {
                "status": "SUCCEEDED",
                "final_step": 1,
                "final_checkpoint": None,
                "metrics": {},
                "incidents": [],
                "attempts": 1,
                "duration_s": 1.0,
            }
        )
    )
    with pytest.raises(ConfigError, match=r"^run_id: run 'done' already finished \(SUCCEEDED\)"):
        launcher.launch(compose("job=digits", "run_id=done", home=tmp_path))


def test_a_controller_that_would_not_start_is_a_run_error_with_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []

    def refused(cfg: object, words: list[str], run_id: str, wait_s: float) -> detach.Detached:
        seen.append(list(words))
        return detach.Detached(run_id, "/log", pid=9, code=2, said="starting\nerror: cloud.provider: no such thing\n")

    monkeypatch.setattr(detach, "start", refused)
    cfg = compose("job=digits", home=tmp_path)
    cfg.job.steps = 9
    with pytest.raises(RunError, match=r"^cloud.provider: no such thing$") as exc:
        launcher.launch(cfg)
    assert exc.value.run_id is not None and exc.value.run_id.startswith("digits-")
    assert seen[0][-1] == "job.steps=9", "the child composes the config as changed"


def test_a_launch_that_starts_gives_the_runs_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detach, "start", lambda cfg, words, run_id, wait_s: detach.Detached(run_id, "/log", 9, True))
    handle = launcher.launch(compose("job=digits", "run_id=mine", home=tmp_path))
    assert (handle.run_id, handle.home) == ("mine", str(tmp_path))
