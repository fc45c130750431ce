"""A run's folder (orchestrator/runstate/rundir.py): its modes, and the controller's lock as a
probe of a live controller."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.runstate import rundir
from orchestrator.runstate.rundir import (
    CONTROL_DIR,
    LOCK_NAME,
    RUN_FILES,
    SUPERVISOR_LOCK,
    check_run_folder,
    controller_alive,
    lock_controller,
    make_control_dir,
    make_run_dir,
)
from orchestrator.runstate.runfiles import REMOVE, DamagedFile
from tests.support.sandbox import plant
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


def test_a_lock_that_cannot_be_opened_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: str, flags: int, mode: int = 0o600) -> int:
        raise PermissionError(13, "Permission denied", path)

    (tmp_path / LOCK_NAME).write_bytes(b"")
    monkeypatch.setattr(rundir, "open_fd", denied)  # as a lock file of another user's would be
    assert controller_alive(str(tmp_path)) is None


SHAPES = ["fifo", "folder", "link-out", "dangling", "loop"]
WHAT = {
    "fifo": "a FIFO",
    "folder": "a folder",
    "link-out": "a symlink",
    "dangling": "a symlink",
    "loop": "a symlink",
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", [LOCK_NAME, SUPERVISOR_LOCK])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_lock_that_is_no_regular_file_is_refused_never_followed_nor_waited_on(
    tmp_path: Path, name: str, shape: str
) -> None:
    outside = tmp_path / "outside" / "target"
    outside.parent.mkdir()
    outside.write_bytes(b"theirs")
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    plant(run_dir / name, shape, outside)
    for probe in (controller_alive, lock_controller):
        with pytest.raises(DamagedFile) as err:
            probe(str(run_dir), name)
        assert err.value.problem == f"{WHAT[shape]}, not a regular file", err.value
        assert err.value.path == str(run_dir / name) and err.value.fix == REMOVE
    assert sorted(p.name for p in outside.parent.iterdir()) == ["target"], "nothing is made outside"
    assert outside.read_bytes() == b"theirs"


def test_a_lock_is_made_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        lock = lock_controller(str(tmp_path / "r1"))
    finally:
        os.umask(old)
    assert lock is not None
    lock.close()
    assert mode(tmp_path / "r1" / LOCK_NAME) == 0o600


@pytest.mark.parametrize("name", RUN_FILES)
@pytest.mark.parametrize("shape", SHAPES)
def test_the_run_folder_check_names_the_file_that_is_no_regular_one(tmp_path: Path, name: str, shape: str) -> None:
    outside = tmp_path / "target"
    outside.write_bytes(b"x")
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    for other in RUN_FILES:
        if other != name:
            (run_dir / other).write_bytes(b"")
    check_run_folder(str(run_dir))  # regular files, all of them: nothing to say
    plant(run_dir / name, shape, outside)
    with pytest.raises(DamagedFile, match=f"{name}: {WHAT[shape]}, not a regular file"):
        check_run_folder(str(run_dir))


def test_a_missing_run_folder_passes_the_check(tmp_path: Path) -> None:
    check_run_folder(str(tmp_path / "missing"))
    (tmp_path / "a-file").write_bytes(b"")
    check_run_folder(str(tmp_path / "a-file"))  # its files cannot be there: what reads it says so


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
