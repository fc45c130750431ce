"""A run's own files: written whole and durably, private to the user who ran it, and on
a shared folder with a default ACL, writable by the nodes' user only where the runtime
writes (the control channel)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runstate.journal import Journal
from recovery.fsio import make_dirs, write_private

pytestmark = pytest.mark.unit


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask: what is private must be so by its create mode."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_private_replaces_whole_0600_and_leaves_no_temporary(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "result.json"
    write_private(str(path), b"one")
    write_private(str(path), b"two")
    assert path.read_bytes() == b"two"
    assert mode(path) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["result.json"]


def test_a_failed_write_private_leaves_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "config.json").mkdir()  # a folder where the file should go: replace fails
    with pytest.raises(OSError):
        write_private(str(tmp_path / "config.json"), b"new")
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_make_dirs_gives_every_new_folder_its_mode(tmp_path: Path, open_umask: None) -> None:
    make_dirs(str(tmp_path / "a" / "b" / "c"), 0o711)
    for folder in ("a", "a/b", "a/b/c"):
        assert mode(tmp_path / folder) == 0o711, folder
    make_dirs(str(tmp_path / "a" / "b" / "c"), 0o700)  # existing: left alone
    assert mode(tmp_path / "a" / "b" / "c") == 0o711


def test_the_journal_is_created_0600(tmp_path: Path, open_umask: None) -> None:
    journal = Journal(str(tmp_path / "journal.jsonl"))
    journal.append("run_started")
    journal.append("run_started")
    assert mode(journal.path) == 0o600
    assert [e["type"] for e in journal.events()] == ["run_started", "run_started"]
