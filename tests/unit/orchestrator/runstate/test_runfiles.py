"""The one way a run's files are opened (orchestrator/runstate/runfiles.py): regular files
only, never through a link, never waiting on a FIFO, every read bounded; what is refused
is a DamagedFile naming the file, what it is and the fix."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from orchestrator.runstate.runfiles import (
    REMOVE,
    RESTORE,
    DamagedFile,
    check_names,
    lines,
    open_fd,
    read_span,
    read_whole,
)
from tests.support.sandbox import plant

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

SHAPES = {
    "fifo": "a FIFO",
    "folder": "a folder",
    "link-out": "a symlink",
    "dangling": "a symlink",
    "loop": "a symlink",
}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside" / "theirs"
    target.parent.mkdir()
    target.write_bytes(b'{"theirs": true}\n')
    return target


def untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.parent.iterdir()) == ["theirs"], "something was made outside"
    assert outside.read_bytes() == b'{"theirs": true}\n'


READERS = {
    "open_fd read": lambda p: os.close(open_fd(p, os.O_RDONLY)),
    "open_fd create": lambda p: os.close(open_fd(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND)),
    "read_whole": lambda p: read_whole(p, 1024),
    "read_span": lambda p: read_span(p, 0, 10),
    "lines": lambda p: list(lines(p, 1024)),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_what_is_no_regular_file_is_refused_at_once_naming_it(
    tmp_path: Path, outside: Path, shape: str, reader: str
) -> None:
    path = tmp_path / "journal.jsonl"
    plant(path, shape, outside)
    started = time.monotonic()
    with pytest.raises(DamagedFile) as err:
        READERS[reader](str(path))
    assert time.monotonic() - started < 10.0  # a bound against a hang (a fifo, a read of the whole), not a timing
    assert (err.value.path, err.value.problem, err.value.fix) == (
        str(path),
        f"{SHAPES[shape]}, not a regular file",
        REMOVE,
    )
    assert str(err.value) == f"{path}: {SHAPES[shape]}, not a regular file"
    untouched(outside)


def test_a_missing_file_is_file_not_found_or_no_lines(tmp_path: Path) -> None:
    for missing in (tmp_path / "nope", tmp_path / "nope" / "below"):
        with pytest.raises(FileNotFoundError):
            open_fd(str(missing), os.O_RDONLY)
        with pytest.raises(FileNotFoundError):
            read_whole(str(missing), 10)
        with pytest.raises(FileNotFoundError):
            read_span(str(missing), 0, 10)
        assert list(lines(str(missing), 10)) == []
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(FileNotFoundError):
        read_whole(str(tmp_path / "a-file" / "result.json"), 10)  # its folder is a file


def test_a_whole_read_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_bytes(b"x" * 10)
    assert read_whole(str(path), 10) == b"x" * 10
    with pytest.raises(DamagedFile, match="holds more than 9 bytes") as err:
        read_whole(str(path), 9)
    assert err.value.fix == RESTORE
    # A huge (sparse) file costs no more than the bound to refuse.
    os.truncate(path, 1 << 40)
    started = time.monotonic()
    with pytest.raises(DamagedFile, match="more than 1024 bytes"):
        read_whole(str(path), 1024)
    assert time.monotonic() - started < 10.0  # a bound against a hang (a fifo, a read of the whole), not a timing


def test_a_span_reads_from_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"0123456789")
    assert read_span(str(path), 2, 3) == b"234"
    assert read_span(str(path), 8, 100) == b"89"
    assert read_span(str(path), 100, 10) == b""


def test_lines_are_numbered_and_one_too_long_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "loss.jsonl"
    path.write_bytes(b"a\nbb\ncc")
    assert list(lines(str(path), 2)) == [(1, b"a\n"), (2, b"bb\n"), (3, b"cc")]
    path.write_bytes(b"a\n" + b"b" * 100 + b"\n")
    with pytest.raises(DamagedFile, match="line 2 is longer than 10 bytes"):
        list(lines(str(path), 10))
    # A line with no end at all (a huge sparse file) is refused once the bound is read.
    os.truncate(path, 1 << 40)
    with pytest.raises(DamagedFile, match="longer than 1024 bytes"):
        list(lines(str(path), 1024))


def test_an_opened_file_is_made_with_its_mode_and_never_through_a_link(tmp_path: Path, outside: Path) -> None:
    old = os.umask(0)
    try:
        os.close(open_fd(str(tmp_path / "controller.lock"), os.O_WRONLY | os.O_CREAT, 0o600))
    finally:
        os.umask(old)
    assert (tmp_path / "controller.lock").stat().st_mode & 0o777 == 0o600
    (tmp_path / "loss.jsonl").symlink_to(outside.parent / "made-through-the-link")
    with pytest.raises(DamagedFile, match="a symlink"):
        open_fd(str(tmp_path / "loss.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    untouched(outside)


def test_an_unreadable_file_is_damage_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.runstate.runfiles as runfiles

    def denied(path: str, *args: object, **kwargs: object) -> bytes:
        raise PermissionError(13, "Permission denied", path)

    (tmp_path / "config.json").write_bytes(b"{}")
    monkeypatch.setattr(runfiles, "read_regular", denied)
    with pytest.raises(DamagedFile, match=r"config.json: cannot be read \(permission denied\)"):
        read_whole(str(tmp_path / "config.json"), 10)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_check_names_looks_without_opening(tmp_path: Path, outside: Path, shape: str) -> None:
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(b"")
    check_names(str(tmp_path), ["a", "b", "missing"])
    plant(tmp_path / "c", shape, outside)
    check_names(str(tmp_path), ["a", "b"])  # only the names asked for
    with pytest.raises(DamagedFile) as err:
        check_names(str(tmp_path), ["a", "c", "b"])
    assert err.value.path == str(tmp_path / "c") and err.value.fix == REMOVE
    assert err.value.problem == f"{SHAPES[shape]}, not a regular file"
    untouched(outside)
