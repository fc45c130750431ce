"""Files put into one store concurrently, the largest first, no write outliving the call."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from concurrent.futures import wait as wait_all

from recovery.manifest import FileEntry
from recovery.store import CheckpointStore

# Files put at once, per store (s3fs also splits a file of 100 MB or more into parts
# sent concurrently).
UPLOAD_THREADS = 4


def put_order(files: Mapping[str, bytes], names: Iterable[str]) -> list[str]:
    """The largest first (it takes longest), ties by name."""
    return sorted(names, key=lambda n: (-len(files[n]), n))


def put_all(
    pool: ThreadPoolExecutor,
    store: CheckpointStore,
    run_id: str,
    step: int,
    files: Mapping[str, bytes],
    names: Iterable[str],
    on_first: Callable[[], None] | None = None,
    generation: int | None = None,
    digests: Mapping[str, str] | None = None,
) -> list[FileEntry]:
    """Put ``names`` concurrently, the largest first; ``on_first`` once the first is in
    and none has failed; ``digests``: the sha256 of a file's bytes where taken already.
    Returns only when every put has ended (no write of this call outlives it); raises
    the first failure."""
    known = digests or {}
    futures = [
        pool.submit(store.put, run_id, step, name, files[name], generation, known.get(name))
        for name in put_order(files, names)
    ]
    entries: list[FileEntry] = []
    error: BaseException | None = None
    try:
        for fut in as_completed(futures):
            try:
                entries.append(fut.result())
            except BaseException as exc:
                error = error or exc
                continue
            if on_first is not None and error is None:
                hook, on_first = on_first, None
                hook()
    finally:
        for fut in futures:
            fut.cancel()
        wait_all(futures)
    if error is not None:
        raise error
    return entries
