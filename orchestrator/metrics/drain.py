"""A listener's queue and the thread of its own that drains it: what the TensorBoard writer
(``board``) and the run's tracker (orchestrator.tracking) share.

Offering never waits and never raises: the controller offers as it journals, under its
state lock. The queue is bounded; beyond it (a disk or a server that stopped answering)
new items are dropped. The thread takes what comes within ``gather_s`` of a first item
together (``close`` cuts the wait short) and hands the batch to the owner's ``work``.
Work that raises stops the drain; work that falls behind drops items; ``close`` that
cannot see what is queued done within ``close_s`` says so. Each is said once, one line
(``failed``), and the run goes on.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

# A failure's line is cut to this many characters.
ERROR_MAX = 300

T = TypeVar("T")


class _Stop:
    """What ``close`` queues: the thread ends once the work before it is done."""


_STOP = _Stop()


class Drain(Generic[T]):
    """Items of type ``T`` queued by ``offer`` and handed, a batch at a time, to
    ``work(items, last)`` in a thread named ``name``; ``last``: ``close`` asked for the end
    and this is the final batch. ``failed(line)`` is called at most once, with the first of:
    ``stopped`` + the error ``work`` raised (the drain then stops, and ``after_failure``
    runs), ``dropped(count)`` when offers found the queue full, ``late(close_s)`` when
    ``close`` waited in vain. ``most``: the most items one batch takes (None: all queued)."""

    def __init__(
        self,
        name: str,
        work: Callable[[list[T], bool], object],
        failed: Callable[[str], object],
        *,
        size: int,
        gather_s: float,
        close_s: float,
        dropped: Callable[[int], str],
        late: Callable[[float], str],
        stopped: str = "",
        most: int | None = None,
        after_failure: Callable[[], object] | None = None,
    ) -> None:
        self._work, self._failed = work, failed
        self._gather_s, self._close_s, self._most = gather_s, close_s, most
        self._dropped_line, self._late_line, self._stopped = dropped, late, stopped
        self._after_failure = after_failure
        self._queue: queue.Queue[T | _Stop] = queue.Queue(size)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._off = self._closed = self._told = False
        self._dropped = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def off(self) -> bool:
        """The drain takes nothing more: its work failed, or it was closed."""
        return self._off

    def offer(self, item: T) -> None:
        """Queue ``item`` for the thread; never waits, never raises. A full queue drops it."""
        if self._off:
            return
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch: list[T | _Stop] = [first]
            if first is not _STOP:
                self._closing.wait(self._gather_s)
            while self._most is None or len(batch) < self._most:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            last = any(isinstance(item, _Stop) for item in batch)
            try:
                self._work([item for item in batch if not isinstance(item, _Stop)], last)
            except Exception as exc:  # the owner's error, or a bug there, costs its output, not the run
                self._off = True
                self._tell(f"{self._stopped}{type(exc).__name__}: {exc}")
                if self._after_failure is not None:
                    self._after_failure()
                return
            with self._lock:
                dropped = self._dropped
            if dropped:
                self._tell(self._dropped_line(dropped))
            if last:
                return

    def _tell(self, error: str) -> None:
        with self._lock:
            if self._told:
                return
            self._told = True
        line = " ".join(error.split())
        self._failed(line if len(line) <= ERROR_MAX else line[: ERROR_MAX - 3] + "...")

    def close(self) -> None:
        """Have what is queued done (waiting at most ``close_s``) and end the thread; a
        drain that stopped is waited for until it has said why. Once; later calls return."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        if not self._off:
            try:
                self._queue.put(_STOP, timeout=self._close_s)
            except queue.Full:
                pass
        self._thread.join(self._close_s)
        self._off = True
        if self._thread.is_alive():
            self._tell(self._late_line(self._close_s))
