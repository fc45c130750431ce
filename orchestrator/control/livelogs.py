"""An attempt's output as it is written: new whole lines of growing log files.

``show_logs=true`` prints them above the progress line while the run goes on;
``action=logs follow=true`` reads the same files from another terminal.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from orchestrator.wire.logfiles import CAP_BYTES, rank_files
from recovery.fsio import open_regular

DRIVER = "driver"
# The most of a growing file one poll reads: a burst is shown over a few polls.
READ_CHUNK = 1024 * 1024


class Tail:
    """New whole lines of files that grow, each read on from where it was left (a key
    names a log, whichever file holds it: its live file, then its kept copy)."""

    def __init__(self) -> None:
        self._at: dict[Any, int] = {}
        self._partial: dict[Any, bytes] = {}

    def read(self, key: Any, path: str) -> list[str]:
        try:
            # Never a FIFO's wait nor a link's target: a regular file only (else nothing).
            with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                at = self._at.get(key)
                lines: list[str] = []
                if at is None:
                    at = max(0, size - CAP_BYTES)
                    if at:
                        lines.append(f"[orchestrator: following from the last {CAP_BYTES // 1024} KiB of {size} bytes]")
                # A kept copy cut shorter than the live file was: nothing new in it.
                at = min(at, size)
                fh.seek(at)
                chunk = fh.read(READ_CHUNK)
        except OSError:
            return []
        self._at[key] = at + len(chunk)
        data = self._partial.pop(key, b"") + chunk
        *whole, rest = data.split(b"\n")
        if len(rest) > READ_CHUNK:
            whole, rest = [*whole, rest], b""  # a line that never ends is shown in pieces
        if rest:
            self._partial[key] = rest
        return lines + [w.decode(errors="replace") for w in whole]

    def rest(self, key: Any) -> str | None:
        """What is left of a last line with no newline (at the end)."""
        rest = self._partial.pop(key, b"")
        return rest.decode(errors="replace") if rest else None


class LiveLogs:
    """``show_logs=true``: one attempt's driver and rank output, line by line as it is
    written, each prefixed with its source (``say`` prints it, above the progress line).
    The ranks' files are read where they are written when they are on this machine
    (``live_dir``); elsewhere the driver's log alone is live."""

    def __init__(
        self, generation: int, driver_log: str, live_dir: str | None, say: Callable[[str], None], every_s: float = 0.5
    ) -> None:
        self.generation = generation
        self.driver_log = driver_log
        self.live_dir = live_dir
        self.say = say
        self.every_s = every_s
        self.tail = Tail()
        self._next = 0.0

    def _files(self) -> list[tuple[str, str]]:
        ranks = rank_files(self.live_dir) if self.live_dir else {}
        return [(DRIVER, self.driver_log), *((f"rank {r}", p) for r, p in ranks.items())]

    def poll(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now < self._next:
            return
        self._next = now + self.every_s
        for label, path in self._files():
            for line in self.tail.read(label, path):
                self.say(f"[{label}] {line}")
            rest = self.tail.rest(label) if final else None
            if rest:
                self.say(f"[{label}] {rest}")
