"""Reading a checkpoint's files fast, for a restore: every file at once, a large one as
parallel ranged reads, each hashed in order while its later ranges still stream in.

A restore verifies what it reads and keeps the bytes, so each file crosses the
network once (checking a checkpoint and then loading it used to read it twice).
The sizes asked for come from a signed manifest, yet a stored object may be longer:
the last range asks for one byte past the expected end, so a longer object reads
back longer and fails its size check instead of passing on its first bytes.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any

from recovery.fsio import TooLarge, UnsafeFile, read_capped

# Large ranges: a few requests in flight on a 200 MB file, and few enough that a
# server which reads the whole object to answer each range (moto's S3 does) still
# serves a file about as fast in ranges as whole (16 MB ranges took 1.7x as long there).
RANGE_BYTES = 64 * 2**20
CONCURRENCY = 8


# Seconds each thread spent hashing what it fetched: a restore's verification, apart from
# its transfer (the two overlap, each file hashed while its later ranges stream in).
_hashing = threading.local()


def hashed_s() -> float:
    """The seconds this thread has spent hashing fetched bytes, since it began."""
    return float(getattr(_hashing, "s", 0.0))


def _hash(digest: Any, data: bytes) -> None:
    began = time.perf_counter()
    digest.update(data)
    _hashing.s = hashed_s() + time.perf_counter() - began


@dataclass(frozen=True)
class Fetched:
    """One file as read: ``data`` None when it is not in the store, or when it is not a
    regular file inside it (``reason`` then says what it is)."""

    data: bytes | None
    sha256: str | None
    reason: str = ""


def plan_ranges(size: int, chunk: int | None = None) -> list[tuple[int, int]]:
    """The (start, end) byte ranges that read a file of ``size`` bytes (plus one byte
    past it, see the module's docstring), ``chunk`` (RANGE_BYTES) each; []: one whole read."""
    chunk = chunk or RANGE_BYTES
    if size <= chunk:
        return []
    out = [(start, min(start + chunk, size)) for start in range(0, size, chunk)]
    start, _ = out[-1]
    out[-1] = (start, size + 1)
    return out


def fetch(fs: Any, expected: Mapping[str, int], ranged: bool = True) -> dict[str, Fetched]:
    """Read every path of ``expected`` (path -> size the manifest gives), concurrently;
    ``ranged=False`` reads each whole (a local disk gains nothing from ranges). A client
    error other than a missing file propagates: the store's error, for the caller to name."""
    if not expected:
        return {}
    plans = {path: plan_ranges(size) if ranged else [] for path, size in expected.items()}
    tasks = sum(max(1, len(r)) for r in plans.values())
    with ThreadPoolExecutor(max_workers=min(CONCURRENCY, tasks), thread_name_prefix="fetch") as pool:
        pending: dict[str, list[Future[bytes]]] = {
            path: (
                [pool.submit(_range, fs, path, start, end) for start, end in ranges]
                if ranges
                else [pool.submit(_whole, fs, path, expected[path])]
            )
            for path, ranges in plans.items()
        }
        try:
            return {path: _join(fs, path, futures, ranged=bool(plans[path])) for path, futures in pending.items()}
        finally:
            for futures in pending.values():
                for fut in futures:
                    fut.cancel()


def _range(fs: Any, path: str, start: int, end: int) -> bytes:
    return fs.cat_file(path, start=start, end=end)


def _whole(fs: Any, path: str, size: int) -> bytes:
    """The file, read no further than one byte past ``size`` (``read_capped``): a longer
    one fails its check without being read whole, so a planted endless file cannot fill
    memory."""
    return read_capped(fs, path, size)


def _join(fs: Any, path: str, futures: list[Future[bytes]], ranged: bool) -> Fetched:
    digest = hashlib.sha256()
    parts = []
    try:
        for fut in futures:
            part = fut.result()
            _hash(digest, part)
            parts.append(part)
    except FileNotFoundError:
        return Fetched(None, None)
    except UnsafeFile as exc:
        return Fetched(None, None, f"{path.rsplit('/', 1)[-1]}: {exc.strerror}")
    except TooLarge as exc:
        return Fetched(None, None, str(exc))
    except Exception:
        if not ranged:
            raise
        # A range past the end of a shorter object is refused (416): read it whole,
        # so a truncated file fails its size check like any other, not the store.
        try:
            data = fs.cat_file(path)
        except FileNotFoundError:
            return Fetched(None, None)
        whole = hashlib.sha256()
        _hash(whole, data)
        return Fetched(data, whole.hexdigest())
    return Fetched(b"".join(parts), digest.hexdigest())


# A file streamed to disk (``fetch_to_file``) holds this much in memory at once: ranges
# of STREAM_RANGE_BYTES, STREAM_IN_FLIGHT of them in flight (a restore's buffer budget).
STREAM_RANGE_BYTES = 16 * 2**20
STREAM_IN_FLIGHT = 4


@dataclass(frozen=True)
class Streamed:
    """A file as streamed to disk: the bytes it read (one past its expected size when the
    object is longer), their sha256 (None when it is not in the store, or not a regular
    file inside it: ``reason`` then says what it is)."""

    size: int
    sha256: str | None
    reason: str = ""


def fetch_to_file(
    fs: Any, path: str, size: int, dest: str, chunk: int = STREAM_RANGE_BYTES, in_flight: int = STREAM_IN_FLIGHT
) -> Streamed:
    """``path`` (``size`` bytes by its manifest) streamed into the new local file ``dest``:
    ranged reads, ``in_flight`` at a time, each hashed and written in order as it arrives,
    so memory holds the ranges in flight and never the file. The last range asks one byte
    past ``size``, as ``fetch``'s; a store that refuses a range of a shorter object ends
    the stream there, and its size check fails."""
    ranges = plan_ranges(size, chunk)
    digest, written = hashlib.sha256(), 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        if not ranges:
            data = _whole(fs, path, size)
            _hash(digest, data)
            os.write(fd, data)
            return Streamed(len(data), digest.hexdigest())
        with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="stream") as pool:
            queue = iter(ranges)
            pending: deque[tuple[int, Future[bytes]]] = deque(
                (start, pool.submit(_range, fs, path, start, end)) for start, end in islice(queue, in_flight)
            )
            try:
                while pending:
                    start, fut = pending.popleft()
                    try:
                        part = fut.result()
                    except (FileNotFoundError, UnsafeFile, TooLarge):
                        raise
                    except Exception:
                        if not _ends_before(fs, path, start):
                            raise
                        break  # a range past the end of a shorter object: it reads back short
                    for nxt, end in islice(queue, 1):
                        pending.append((nxt, pool.submit(_range, fs, path, nxt, end)))
                    _hash(digest, part)
                    os.write(fd, part)
                    written += len(part)
            finally:
                for _, fut in pending:
                    fut.cancel()
        return Streamed(written, digest.hexdigest())
    except FileNotFoundError:
        return Streamed(0, None)
    except UnsafeFile as exc:
        return Streamed(0, None, f"{path.rsplit('/', 1)[-1]}: {exc.strerror}")
    except TooLarge as exc:
        return Streamed(0, None, str(exc))
    finally:
        os.close(fd)


def _ends_before(fs: Any, path: str, offset: int) -> bool:
    """Whether the object at ``path`` is shorter than ``offset`` bytes (a range there is refused)."""
    try:
        return int(fs.info(path).get("size", -1)) < offset
    except Exception:
        return False
