"""detach=true's pure parts: the controller's command line, when it has started, its log's end."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from orchestrator.commands.detach import child_argv, started, tail_text
from orchestrator.runstate.events import AttemptAdopted, AttemptStarted, RunStarted


def test_the_controller_runs_the_users_command_without_detach_and_with_the_run_id_chosen() -> None:
    args = ["job=digits", "detach=true", "run_id=old", "trainer.workers=2", "+detach=x", "--config-dir", "c"]
    assert child_argv(args, "r1") == [
        sys.executable, "-m", "orchestrator", "job=digits", "trainer.workers=2", "--config-dir", "c", "run_id=r1",
    ]  # fmt: skip
    assert child_argv(["action=resume", "run_id=r1", "detach=true"], "r1")[3:] == ["action=resume", "run_id=r1"]


def test_the_child_has_started_once_an_attempt_of_its_own_began() -> None:
    assert not started([RunStarted(run_id="r1", config={})])
    assert started([RunStarted(run_id="r1", config={}), AttemptStarted(generation=1, region="a")])
    assert started([AttemptAdopted(generation=2, region="a", cluster="c")])


def test_the_logs_end_is_shown_escaped(tmp_path: Path) -> None:
    log = tmp_path / "controller.log"
    log.write_bytes(b"x" * 5000 + b"\nerror: run_id: bad \x1b[2J\n")
    text = tail_text(str(log), limit=100)
    assert text.endswith("\nerror: run_id: bad \\x1b[2J") and "x" * 100 not in text
    assert tail_text(str(tmp_path / "none")) == ""


@pytest.mark.timeout(30)
def test_a_log_that_is_a_fifo_or_a_link_shows_nothing_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "controller.log")
    assert tail_text(str(tmp_path / "controller.log")) == ""
    (tmp_path / "theirs").write_text("not this run's\n")
    (tmp_path / "link.log").symlink_to(tmp_path / "theirs")
    assert tail_text(str(tmp_path / "link.log")) == ""
