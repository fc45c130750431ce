"""The run journal: append-only JSON lines, one per event, fsynced (a batch of them once).

``<home>/runs/<run_id>/journal.jsonl``. The controller's state is what this file
says; ``action=status`` reads nothing else (and result.json once it exists).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, BinaryIO

from orchestrator.runstate.event_json import COMMON_FIELDS, EventError, from_json, to_json
from orchestrator.runstate.events import Event, Unknown
from orchestrator.runstate.events import runtime_kind as runtime_kind
from orchestrator.runstate.events import runtime_type as runtime_type
from orchestrator.runstate.runfiles import DamagedFile as DamagedFile
from orchestrator.runstate.runfiles import lines, open_fd, read_whole
from orchestrator.wire.codec import json_is
from recovery.boundedjson import MAX_BYTES, CodecError, NotJSON, decode
from recovery.fsio import fsync_dir

_SECRET_KEY = re.compile(r"(secret|token|password|passwd|credential|private_key|access_key)", re.I)


def redact(value: Any) -> Any:
    """Drop values under keys that look like secrets, at any depth."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if _SECRET_KEY.search(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


class Journal:
    """Every line a typed event (orchestrator.runstate.events). What the runtime said
    goes under its own namespace ("runtime.<kind>", by "runtime", or "zombie" for an
    older attempt's) and reads back as a RuntimeReport: never the controller's word."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._lock = threading.Lock()
        # Per thread: inside batch(), and lines written since its last fsync.
        self._local = threading.local()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Lines this thread emits inside are fsynced together, once, on the way out
        (another thread's emit meanwhile fsyncs them with its own). For a run of lines
        nothing acts on before the batch ends: the runtime's reports one look of the
        controller's watch folds in (an fsync costs more CPU than the rest of a line)."""
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0 and getattr(self._local, "unsynced", False):
                self._local.unsynced = False
                with self._lock, self._open() as fh:
                    os.fsync(fh.fileno())

    def append(self, type_: str, **fields: Any) -> dict[str, Any]:
        """Journal a ``type_`` event with ``fields``; EventError if it is none this code base
        writes (an unknown type, a field it does not declare, a value of the wrong type)."""
        # Through JSON first, as it is written: a tuple is a list, anything else odd a string.
        line = json.loads(json.dumps({"ts": time.time(), "type": type_, **redact(fields)}, default=str))
        return to_json(self.emit(from_json(line)))

    def emit(self, event: Event) -> Event:
        """Journal ``event``, stamped now and with secrets redacted: the event as written."""
        if isinstance(event, Unknown):
            raise EventError(f"no event of type {event.type_!r} is declared in orchestrator.runstate.events")
        # Through JSON and back: what is written is what every reader will parse.
        line = json.dumps(redact(to_json(replace(event, ts=time.time()))), sort_keys=False, default=str)
        written = from_json(json.loads(line))
        with self._lock, self._open() as fh:
            # A crash mid-append leaves a last line without its newline; this event
            # must not be glued onto it (read_events drops the torn line, not ours).
            end = fh.seek(0, os.SEEK_END)
            if end > 0:
                fh.seek(end - 1)
                torn = fh.read(1) != b"\n"
                fh.seek(0, os.SEEK_END)
                if torn:
                    fh.write(b"\n")
            fh.write(line.encode("utf-8") + b"\n")
            fh.flush()
            if getattr(self._local, "depth", 0):
                self._local.unsynced = True
            else:
                os.fsync(fh.fileno())
        return written

    def _open(self) -> BinaryIO:
        # 0600 by the create mode (a default ACL overrides the umask); the first line's
        # directory entry is made durable with it. Never through a link (DamagedFile).
        created = not os.path.lexists(self.path)
        fh = os.fdopen(open_fd(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+b")
        if created:
            fsync_dir(os.path.dirname(self.path))
        return fh

    def events(self) -> list[dict[str, Any]]:
        return list(read_events(self.path))


# The types an incident's optional fields have wherever it is read back (result.json's).
OPTIONAL_FIELDS = COMMON_FIELDS


def shape_problem(obj: Any, required: dict[str, tuple[type, ...]], optional: dict[str, tuple[type, ...]]) -> str | None:
    """What is wrong with a JSON object a reader is about to take fields from, or None."""
    if not isinstance(obj, dict):
        return f"is {type(obj).__name__}, not a JSON object"
    for name, types in required.items():
        if name not in obj:
            return f"lacks {name!r}"
        if not json_is(obj[name], types):
            return f"has {name!r} of type {type(obj[name]).__name__}"
    for name, types in optional.items():
        if name in obj and not json_is(obj[name], types):
            return f"has {name!r} of type {type(obj[name]).__name__}"
    return None


def event_problem(ev: Any) -> str | None:
    """What makes a journal line no event this project wrote, or None."""
    try:
        from_json(ev)
    except EventError as exc:
        return str(exc)
    return None


def json_lines(path: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each whole JSON line; a missing file has none.

    A line that does not parse is a torn write (a crash mid-append; the next append
    starts a new line) and is skipped: everything else stands. A line that is not text,
    or JSON beyond the codec's bounds, cannot come from a torn write of ours (we write
    ASCII, and nothing that deep or large), so it is damage; so is a file that is not a
    regular one (runfiles.lines)."""
    yield from _values(path, lines(path, MAX_BYTES))


def _values(path: str, lines: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, Any]]:
    for n, raw in lines:
        try:
            # Not strict: a runtime's report may carry a diverged loss (NaN), as it was written.
            value = decode(raw, strict=False)
        except NotJSON:
            continue
        except CodecError as exc:
            raise DamagedFile(path, f"line {n} {exc}; the file is damaged") from None
        yield n, value


def _events(path: str, values: Iterable[tuple[int, Any]]) -> Iterator[tuple[dict[str, Any], Event]]:
    for n, line in values:
        try:
            event = from_json(line)
        except EventError as exc:
            raise DamagedFile(path, f"line {n} {exc}; the journal is damaged or was edited") from None
        yield line, event


def _read(path: str) -> Iterator[tuple[dict[str, Any], Event]]:
    return _events(path, json_lines(path))


def typed_lines(path: str, lines: Iterable[tuple[int, bytes]]) -> Iterator[Event]:
    """The events of whole journal lines (number, bytes) read some other way than from
    the start (a reader following the file as it grows), judged as read_typed judges them."""
    return (event for _, event in _events(path, _values(path, lines)))


def read_typed(path: str) -> Iterator[Event]:
    """The journal's events, typed; DamagedFile at the first line that parses but is no event."""
    return (event for _, event in _read(path))


def read_events(path: str) -> Iterator[dict[str, Any]]:
    """The journal's lines as they are, each checked to be an event (as read_typed)."""
    return (line for line, _ in _read(path))


def load_json(path: str) -> Any:
    """A whole JSON file (result.json, config.json); FileNotFoundError when there is none,
    DamagedFile when it is not JSON (or not a regular file, or larger than any we write)."""
    data = read_whole(path, MAX_BYTES)
    try:
        # Not strict: result.json's metrics may hold a diverged loss (NaN), as it was written.
        return decode(data, strict=False)
    except NotJSON as exc:
        raise DamagedFile(path, f"{exc}; the file is damaged or was cut short") from None
    except CodecError as exc:
        raise DamagedFile(path, f"{exc}; the file is damaged") from None


def load_object(path: str) -> dict[str, Any]:
    """A whole JSON file that holds an object (config.json), as ``load_json`` reads it;
    DamagedFile when it holds anything else (a list, a number)."""
    value = load_json(path)
    if not isinstance(value, dict):
        raise DamagedFile(path, f"is {type(value).__name__}, not a JSON object; the file is damaged or was edited")
    return value
