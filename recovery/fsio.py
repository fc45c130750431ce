"""Small file helpers: fsspec ones shared by the checkpoint store and the control
channel, and the durable, private writes of the controller's own state files."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from typing import Any

# Added to every open of a file:// store's, a control folder's or a run folder's file: never
# a symlink (O_NOFOLLOW), never blocks on a FIFO or a device (O_NONBLOCK; and it must be a
# regular file anyway).
_SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeFile(OSError):
    """A path in a local store or a run's folder that is not a regular file inside it (a
    FIFO, a device, a symlink, a folder reached through a link outside): never read or
    written, refused or skipped with this reason (``strerror``; ``filename`` is the path)."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "a special file"


def not_regular(path: str) -> str | None:
    """What ``path`` is when it is there and is not a regular file ("a FIFO, not a regular
    file"), or None (a regular file, or nothing). Looks at the name alone (lstat): opens
    nothing, follows no link."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        raise
    return None if stat.S_ISREG(st.st_mode) else f"{_kind(st.st_mode)}, not a regular file"


def open_regular(path: str, flags: int, mode: int = 0o600) -> int:
    """A descriptor on the regular file ``path``, opened with ``flags`` and never through
    a link or blocking (O_NOFOLLOW, O_NONBLOCK; O_CREAT makes it ``mode``, never a link's
    target). UnsafeFile naming what is there otherwise; FileNotFoundError when nothing is
    (and nothing was made), NotADirectoryError when its folder is a file."""
    try:
        fd = os.open(path, flags | _SAFE_FLAGS, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EMLINK, errno.EISDIR, errno.ENODEV):
            # A link (O_NOFOLLOW), a FIFO with no reader, a socket, a folder: say which.
            what = not_regular(path) or "not a regular file (replaced while opened)"
            raise UnsafeFile(exc.errno, what, path) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeFile(errno.EINVAL, f"{_kind(st.st_mode)}, not a regular file", path)
    return fd


def read_regular(path: str, root: str | None = None, start: int | None = None, end: int | None = None) -> bytes:
    """Bytes ``start:end`` of the regular file ``path``, which must lie inside ``root``
    (its folder resolved through any links). UnsafeFile naming what it is otherwise;
    FileNotFoundError when it is not there. Never blocks, never follows a link."""
    what = not_regular(path)
    if what is not None:
        raise UnsafeFile(errno.ELOOP if what == "a symlink loop" else errno.EINVAL, what, path)
    if root is not None and not _inside(os.path.dirname(path), root):
        raise UnsafeFile(errno.EXDEV, f"its folder resolves outside {root}", path)
    fd = open_regular(path, os.O_RDONLY)
    try:
        begin = max(0, start or 0)
        if begin:
            os.lseek(fd, begin, os.SEEK_SET)
        want = None if end is None else max(0, end - begin)
        chunks: list[bytes] = []
        while want is None or want > 0:
            chunk = os.read(fd, 1 << 20 if want is None else min(1 << 20, want))
            if not chunk:
                break
            chunks.append(chunk)
            if want is not None:
                want -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _inside(folder: str, root: str) -> bool:
    real, top = os.path.realpath(folder), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


class TooLarge(ValueError):
    """An object larger than what its reader allows (a manifest, a fence, a control object)."""


def read_capped(fs: Any, path: str, limit: int) -> bytes:
    """The whole object at ``path``, or TooLarge when it holds more than ``limit`` bytes:
    one ranged read asks for one byte more than allowed (an empty object, which some
    stores refuse a range of, is sized first instead)."""
    try:
        data = fs.cat_file(path, start=0, end=limit + 1)
    except (FileNotFoundError, UnsafeFile):
        raise
    except Exception as first:
        try:
            size = int(fs.info(path).get("size", -1))
        except Exception:
            raise first from None  # the store's own error, not the fallback's
        if size > limit:
            raise TooLarge(f"{path}: {size} bytes, more than the {limit} allowed") from None
        data = fs.cat_file(path)
    if len(data) > limit:
        raise TooLarge(f"{path}: more than the {limit} bytes allowed")
    return bytes(data)


class RegularFiles:
    """A local fsspec filesystem whose reads open only regular files inside ``root``
    (``read_regular``): a FIFO, a device, a symlink or a link out of the folder planted in
    a file:// store or control folder is an UnsafeFile, never a hang or a read elsewhere."""

    def __init__(self, fs: Any, root: str) -> None:
        self._fs = fs
        self._root = root

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **_: Any) -> bytes:
        return read_regular(self._fs._strip_protocol(path), self._root, start, end)

    def cat(self, path: str, **kwargs: Any) -> bytes:
        return self.cat_file(path, **kwargs)


def is_local(fs: Any) -> bool:
    proto = fs.protocol
    return "file" in ((proto,) if isinstance(proto, str) else tuple(proto))


# s3fs puts an object below twice its 50 MiB part size in one request (gcsfs below one part).
WHOLE_PUT_BELOW = 100 * 2**20


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
        if not isinstance(data, bytes | bytearray | memoryview) and len(data) < WHOLE_PUT_BELOW:
            # A mapped file (a rank's shards, spilled to its disk): s3fs and gcsfs send one
            # this small in a single request whose body must be bytes; a larger one they
            # send in slices, a part at a time, never whole in memory.
            data = bytes(data)
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
