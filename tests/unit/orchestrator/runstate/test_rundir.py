"""A run's folder (orchestrator/runstate/rundir.py): its modes, and the controller's lock as a
probe of a live controller."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.runstate.rundir import (
    CONTROL_DIR,
    LOCK_NAME,
    SUPERVISOR_LOCK,
    controller_alive,
    lock_controller,
    make_control_dir,
    make_run_dir,
)
from tests.unit.recovery.test_fsio import mode

pytestmark = pytest.mark.unit


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


def test_a_run_folder_is_traversable_only_and_its_control_folder_private(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        run_dir = tmp_path / "home" / "runs" / "r1"
        make_run_dir(str(run_dir))
        assert not (run_dir / CONTROL_DIR).exists()  # only where the control channel is local
        make_control_dir(str(run_dir))
    finally:
        os.umask(old)
    assert mode(run_dir) == 0o700  # 0711 less the umask: nobody else may even traverse
    assert mode(run_dir / CONTROL_DIR) == 0o700
    make_run_dir(str(run_dir))  # an existing run folder is left as it is
    assert mode(run_dir) == 0o700


def test_a_supervisors_lock_is_its_own(tmp_path: Path) -> None:
    run_dir = str(tmp_path / "r")
    supervisor = lock_controller(run_dir, SUPERVISOR_LOCK)
    assert supervisor is not None
    try:
        assert controller_alive(run_dir, SUPERVISOR_LOCK) is True and controller_alive(run_dir) is False
        controller = lock_controller(run_dir)  # the controller it runs takes the run's own
        assert controller is not None and lock_controller(run_dir, SUPERVISOR_LOCK) is None
        controller.close()
    finally:
        supervisor.close()
    assert controller_alive(run_dir, SUPERVISOR_LOCK) is False
