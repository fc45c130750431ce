"""Reads of a local store or control folder open regular files inside it, and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from recovery.fsio import RegularFiles, TooLarge, UnsafeFile, read_capped, read_regular
from recovery.storage import open_fs

pytestmark = pytest.mark.unit


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
