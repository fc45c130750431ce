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
from recovery.fsio import RegularFiles, TooLarge, UnsafeFile, make_dirs, read_capped, read_regular, write_private
from recovery.storage import open_fs

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


def test_a_regular_file_reads_whole_or_by_range(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    assert read_regular(str(tmp_path / "f"), str(tmp_path)) == b"0123456789"
    assert read_regular(str(tmp_path / "f"), str(tmp_path), 2, 5) == b"234"
    assert read_regular(str(tmp_path / "f"), str(tmp_path), 0, 100) == b"0123456789"


@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", "symlink loop", "folder", "link out"])
def test_special_files_are_refused_at_once_naming_what_they_are(tmp_path: Path, kind: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(b"secret")
    path = store / "f"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "symlink loop":
        (store / "loop").symlink_to(store / "loop")
        path = store / "loop" / "f"
    elif kind == "folder":
        path.mkdir()
    else:
        (store / "d").symlink_to(outside)
        path = store / "d" / "f"
    with pytest.raises(UnsafeFile):
        read_regular(str(path), str(store))


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(str(tmp_path / "nope"), str(tmp_path))


def test_a_local_store_reads_through_the_guard(tmp_path: Path) -> None:
    fs, root = open_fs(f"file://{tmp_path}")
    assert isinstance(fs, RegularFiles)
    os.mkfifo(tmp_path / "MANIFEST.json")
    with pytest.raises(UnsafeFile, match="FIFO"):
        fs.cat_file(f"{root}/MANIFEST.json")


def test_a_capped_read_refuses_what_is_longer(tmp_path: Path) -> None:
    fs, root = open_fs(f"file://{tmp_path}")
    (tmp_path / "big").write_bytes(b"x" * 101)
    (tmp_path / "ok").write_bytes(b"x" * 100)
    with pytest.raises(TooLarge):
        read_capped(fs, f"{root}/big", 100)
    assert read_capped(fs, f"{root}/ok", 100) == b"x" * 100
