"""Standard output whose reader leaves early (``python -m orchestrator ... | head``).

Python ignores SIGPIPE, so a write to a pipe nobody reads raises BrokenPipeError, and
a buffered line still fails in the interpreter's last flush. Every action ends quietly
instead: one that only prints stops with exit 0; a run goes on to its end with its
output discarded and its own exit status, since a reader leaving is no reason to
abandon the training, its clusters or its report.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO


def discard(stream: TextIO) -> None:
    """Point the stream's descriptor at /dev/null: what it still buffers, and all that is
    written to it later, goes nowhere, so no later write or flush can fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def main_quietly(main: Callable[[], int]) -> int:
    """``main()``'s exit status, flushed here rather than at the interpreter's exit; 0 when
    the reader left while ``main`` was printing."""
    try:
        code = main()
    except BrokenPipeError:
        discard(sys.stdout)
        return 0
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        discard(sys.stdout)
    return code


class Forgiving:
    """A stream whose first BrokenPipeError discards the rest of its output instead of
    raising; everything else (``isatty``, ``fileno``, ``encoding``) is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._reader_left()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._reader_left()

    def _reader_left(self) -> None:
        discard(self.stream)
        # What failed is still in the buffer: it goes to /dev/null now.
        with contextlib.suppress(BrokenPipeError):
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def forgiving_stdout() -> Iterator[None]:
    """``sys.stdout`` a Forgiving stream for a run's duration."""
    before = sys.stdout
    sys.stdout = Forgiving(before)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = before
