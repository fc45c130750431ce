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
from recovery.fsio import (
    RegularFiles,
    TooLarge,
    UnsafeFile,
    make_dirs,
    not_regular,
    open_regular,
    read_capped,
    read_regular,
    write_private,
)
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


SHAPES = {
    "fifo": "a FIFO, not a regular file",
    "folder": "a folder, not a regular file",
    "link to a file": "a symlink, not a regular file",
    "dangling link": "a symlink, not a regular file",
    "link loop": "a symlink, not a regular file",
    "link to /dev/zero": "a symlink, not a regular file",
}


def planted(path: Path, shape: str, outside: Path) -> None:
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "folder":
        path.mkdir()
    elif shape == "link to a file":
        path.symlink_to(outside)
    elif shape == "dangling link":
        path.symlink_to(outside.parent / "not-there")
    elif shape == "link loop":
        path.symlink_to(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_WRONLY | os.O_CREAT | os.O_APPEND, os.O_RDWR | os.O_CREAT])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_open_regular_refuses_at_once_and_creates_nothing_where_a_link_points(
    tmp_path: Path, shape: str, flags: int
) -> None:
    outside = tmp_path / "outside" / "theirs"
    outside.parent.mkdir()
    outside.write_bytes(b"theirs")
    path = tmp_path / "f"
    planted(path, shape, outside)
    assert not_regular(str(path)) == SHAPES[shape]
    with pytest.raises(UnsafeFile) as err:
        open_regular(str(path), flags)
    assert (err.value.strerror, err.value.filename) == (SHAPES[shape], str(path))
    assert sorted(p.name for p in outside.parent.iterdir()) == ["theirs"]
    assert outside.read_bytes() == b"theirs"


def test_open_regular_makes_a_missing_file_with_its_mode_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        os.close(open_regular(str(tmp_path / "f"), os.O_WRONLY | os.O_CREAT, 0o600))
    finally:
        os.umask(old)
    assert mode(tmp_path / "f") == 0o600
    with pytest.raises(FileNotFoundError):
        open_regular(str(tmp_path / "nope"), os.O_RDONLY)
    with pytest.raises(NotADirectoryError):
        open_regular(str(tmp_path / "f" / "below"), os.O_RDONLY)


def test_not_regular_says_nothing_of_a_regular_file_or_of_nothing(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    assert not_regular(str(tmp_path / "f")) is None
    assert not_regular(str(tmp_path / "nope")) is None
    assert not_regular(str(tmp_path / "f" / "below")) is None
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert not_regular(str(tmp_path / "loop" / "f")) == "a symlink loop"


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
