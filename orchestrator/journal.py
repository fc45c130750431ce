"""The run journal: append-only JSON lines, one per event, fsynced.

``<home>/runs/<run_id>/journal.jsonl``. The controller's state is what this file
says; ``action=status`` reads nothing else (and result.json once it exists).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

_SECRET_KEY = re.compile(r"(secret|token|password|passwd|credential|private_key|access_key)", re.I)


def redact(value: Any) -> Any:
    """Drop values under keys that look like secrets, at any depth."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if _SECRET_KEY.search(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


class Journal:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._lock = threading.Lock()

    def append(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"ts": time.time(), "type": type_, **redact(fields)}
        line = json.dumps(event, sort_keys=False, default=str)
        with self._lock, open(self.path, "a+b") as fh:
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
            os.fsync(fh.fileno())
        return event

    def events(self) -> list[dict[str, Any]]:
        return list(read_events(self.path))


def read_events(path: str) -> Iterator[dict[str, Any]]:
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                # A crash mid-append leaves a torn last line; everything before it stands.
                continue
