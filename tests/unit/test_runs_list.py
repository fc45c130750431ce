"""``action=list``: every run under home as one row, a view of its folded journal.

Run folders are made the way the controller makes them: journals written through
``Journal.emit`` with typed events, result.json through ``write_result``, the lock
taken with ``lock_controller``."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.journal import Journal, read_typed
from orchestrator.rundir import LOCK_NAME, controller_alive, lock_controller
from orchestrator.runstate import events as E
from orchestrator.runstate.state import RunView, fold
from orchestrator.status import live_progress, summarize
from orchestrator.wire.control import ControlChannel, run_control_url

pytestmark = pytest.mark.unit


def journal(run_dir: Path, *events: E.Event) -> Journal:
    """A journal as the controller writes one: each typed event through ``Journal.emit``."""
    j = Journal(str(run_dir / "journal.jsonl"))
    for event in events:
        j.emit(event)
    return j


def view_of(run_dir: Path) -> RunView:
    return fold(read_typed(str(run_dir / "journal.jsonl")))


# --- is its controller alive ------------------------------------------------------------------


def test_a_held_controller_lock_is_a_live_controller(tmp_path: Path) -> None:
    run_dir = str(tmp_path / "runs" / "r1")
    lock = lock_controller(run_dir)
    assert lock is not None
    try:
        assert controller_alive(run_dir) is True
        assert lock_controller(run_dir) is None, "the probe must leave the controller's lock as it was"
    finally:
        lock.close()
    assert controller_alive(run_dir) is False


def test_no_lock_file_is_no_controller_and_the_probe_creates_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    assert controller_alive(str(run_dir)) is False
    assert controller_alive(str(tmp_path / "missing")) is False
    assert list(run_dir.iterdir()) == []


def test_a_lock_that_cannot_be_opened_is_unknown(tmp_path: Path) -> None:
    (tmp_path / LOCK_NAME).mkdir()  # a folder where the lock file should be
    assert controller_alive(str(tmp_path)) is None


# --- the live step (status and list read it alike) ---------------------------------------------


def test_the_live_step_comes_from_the_newest_attempts_control_channel(tmp_path: Path) -> None:
    run_dir = tmp_path / "r1"
    journal(run_dir, E.RunStarted(run_id="r1", config={"job": {"steps": 100}}))
    assert live_progress(str(run_dir), view_of(run_dir)) is None  # no attempt yet
    journal(run_dir, E.AttemptStarted(1, "local-a"), E.AttemptStarted(2, "local-b"))
    channel = ControlChannel(run_control_url(None, "r1", str(run_dir)))
    channel.progress(1, step=80, total=100)
    channel.progress(2, step=40, total=100)
    prog = live_progress(str(run_dir), view_of(run_dir))
    assert prog is not None and (prog["step"], prog["total"]) == (40, 100)


def test_a_control_store_the_journal_names_wrongly_is_no_live_step_not_a_crash(tmp_path: Path) -> None:
    # The journal's copy of the config is for display; an edited one once crashed action=status.
    run_dir = tmp_path / "r1"
    journal(run_dir, E.RunStarted(run_id="r1", config={"cloud": {"control_store": 5}}), E.AttemptStarted(1, "a"))
    assert live_progress(str(run_dir), view_of(run_dir)) is None
    s = summarize(str(run_dir))
    assert s is not None and s["step"] is None
