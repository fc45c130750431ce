"""Every file of a run's folder, opened one way.

A run's folder (``<home>/runs/<run_id>/``) is the controller's, but someone careless or
hostile on this machine may leave something else under one of its names: a FIFO (an
open waits forever for a writer), a folder, a symlink (followed, a lock or a log would
be made or written where it points, outside home), a file too large to read. Each open
here adds O_NOFOLLOW and O_NONBLOCK and takes a regular file only
(``recovery.fsio.open_regular``), each read is bounded, and what is refused is a
DamagedFile naming the file and what it is: every action answers it in one line
(``python -m orchestrator``'s entry point), never a traceback or a hang.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from recovery.fsio import UnsafeFile, not_regular, open_regular, read_regular

# What a damaged file of ours asks of its user, and what a file of another kind does.
RESTORE = "restore it from a copy or move it aside"
REMOVE = "remove it or move it aside (a run's folder holds regular files only)"


class DamagedFile(Exception):
    """A run's file (journal, result.json, config.json, a lock, ...) that is not what we
    wrote, or not a regular file at all: a reader says so in one line naming the file and
    the fix, and no action goes on from it."""

    def __init__(self, path: str, problem: str, fix: str = RESTORE) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.fix = fix


def _unsafe(exc: UnsafeFile) -> DamagedFile:
    return DamagedFile(str(exc.filename), str(exc.strerror), REMOVE)


def open_fd(path: str, flags: int, mode: int = 0o600) -> int:
    """A descriptor on the run file ``path`` (``flags`` as os.open's; O_CREAT makes it
    ``mode``). FileNotFoundError when it is not there (nor its folder); DamagedFile when
    something other than a regular file is; other OSErrors (permission) as they come."""
    try:
        return open_regular(path, flags, mode)
    except NotADirectoryError:
        raise FileNotFoundError(path) from None
    except UnsafeFile as exc:
        raise _unsafe(exc) from None


def _cannot(path: str, exc: OSError) -> DamagedFile:
    return DamagedFile(path, f"cannot be read ({(exc.strerror or type(exc).__name__).lower()})")


def read_whole(path: str, limit: int) -> bytes:
    """The whole run file ``path``, at most ``limit`` bytes. FileNotFoundError when it is
    not there; DamagedFile when it is no regular file, cannot be read, or holds more."""
    try:
        data = read_regular(path, None, 0, limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(path) from None
    except UnsafeFile as exc:
        raise _unsafe(exc) from None
    except OSError as exc:
        raise _cannot(path, exc) from None
    if len(data) > limit:
        raise DamagedFile(path, f"holds more than {limit} bytes, more than a run writes there; the file is damaged")
    return data


def read_span(path: str, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes of the run file ``path`` from ``offset`` (a reader following it
    as it grows). FileNotFoundError and DamagedFile as ``read_whole``."""
    try:
        fd = open_fd(path, os.O_RDONLY)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _cannot(path, exc) from None
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def lines(path: str, max_line: int) -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line of the run file ``path``, its newline kept; none when
    it is not there. DamagedFile when it is no regular file, cannot be read, or has a line
    longer than ``max_line`` bytes (none we write is; reading it would hold it whole)."""
    try:
        fd = open_fd(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _cannot(path, exc) from None
    with os.fdopen(fd, "rb") as fh:
        n = 0
        while line := fh.readline(max_line + 1):
            n += 1
            if len(line) > max_line and not line.endswith(b"\n"):
                raise DamagedFile(path, f"line {n} is longer than {max_line} bytes; the file is damaged")
            yield n, line


def check_names(folder: str, names: Iterable[str]) -> None:
    """DamagedFile for the first of ``names`` in ``folder`` that is there and is not a
    regular file: looked at, not opened (nothing blocks, no link is followed)."""
    for name in names:
        path = os.path.join(folder, name)
        try:
            what = not_regular(path)
        except OSError as exc:
            raise _cannot(path, exc) from None
        if what is not None:
            raise DamagedFile(path, what, REMOVE)
