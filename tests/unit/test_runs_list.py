"""``action=list``: every run under home as one row, a view of its folded journal.

Run folders are made the way the controller makes them: journals written through
``Journal.emit`` with typed events, result.json through ``write_result``, the lock
taken with ``lock_controller``."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.rundir import LOCK_NAME, controller_alive, lock_controller

pytestmark = pytest.mark.unit


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
