"""Small file helpers: fsspec ones shared by the checkpoint store and the control
channel, and the durable, private writes of the controller's own state files."""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Any


def is_local(fs: Any) -> bool:
    proto = fs.protocol
    return "file" in ((proto,) if isinstance(proto, str) else tuple(proto))


def write_bytes(fs: Any, path: str, data: bytes, durable: bool = True) -> None:
    """Write a whole object so a reader sees the old bytes or the new, never a part.
    ``durable=False`` skips the fsync, for what a crash may lose (heartbeats, progress)."""
    if is_local(fs):
        # Object stores publish a PUT atomically; a local file needs rename, and fsync
        # so that "written" survives a crash of the machine.
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if durable:
            fsync_dir(os.path.dirname(path))
    else:
        fs.pipe_file(path, data)


def fsync_dir(path: str) -> None:
    """Make a rename or a new entry in ``path`` survive a crash of the machine: the
    file's own fsync does not cover the directory entry that names it."""
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: str, data: bytes) -> None:
    """Replace the local file ``path`` with ``data``, whole or not at all, durably
    (file and directory fsynced), readable and writable by this user only (0600 by
    the create mode, which also holds under a default ACL, where the umask does not)."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(path))


def make_dirs(path: str, mode: int) -> None:
    """``os.makedirs`` with ``mode`` for every folder it creates, not only the last
    (intermediate ones otherwise get the process's default, or a default ACL's)."""
    path = os.path.abspath(path)
    missing: list[str] = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            continue
        fsync_dir(os.path.dirname(folder))
