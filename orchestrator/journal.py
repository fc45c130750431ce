"""The run journal: append-only JSON lines, one per event, fsynced.

``<home>/runs/<run_id>/journal.jsonl``. The controller's state is what this file
says; ``action=status`` reads nothing else (and result.json once it exists).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

from orchestrator.states import RunState
from recovery.detection import FailureKind
from recovery.fsio import fsync_dir
from recovery.policy import Action

_SECRET_KEY = re.compile(r"(secret|token|password|passwd|credential|private_key|access_key)", re.I)


def redact(value: Any) -> Any:
    """Drop values under keys that look like secrets, at any depth."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if _SECRET_KEY.search(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


# What the runtime said is journaled under its own namespace ("runtime.<kind>", by
# "runtime", or "zombie" for an older attempt's): never read back as the controller's
# own word, whatever kind it claims. Journals written before the namespace have the
# bare kind with by=runtime|zombie; they count as runtime events too.
RUNTIME_PREFIX = "runtime."
RUNTIME_SOURCES = ("runtime", "zombie")


def runtime_type(kind: str) -> str:
    return RUNTIME_PREFIX + kind


def runtime_kind(ev: dict[str, Any]) -> str | None:
    """The kind a journaled runtime event had on the control channel; None for the controller's."""
    t = str(ev.get("type", ""))
    if t.startswith(RUNTIME_PREFIX):
        return t[len(RUNTIME_PREFIX) :]
    return t if ev.get("by") in RUNTIME_SOURCES else None


def controller_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if runtime_kind(e) is None]


class Journal:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._lock = threading.Lock()

    def append(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"ts": time.time(), "type": type_, **redact(fields)}
        line = json.dumps(event, sort_keys=False, default=str)
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
            os.fsync(fh.fileno())
        return event

    def _open(self) -> BinaryIO:
        # 0600 by the create mode (a default ACL overrides the umask); the first line's
        # directory entry is made durable with it.
        created = not os.path.exists(self.path)
        fh = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+b")
        if created:
            fsync_dir(os.path.dirname(self.path))
        return fh

    def events(self) -> list[dict[str, Any]]:
        return list(read_events(self.path))


class DamagedFile(Exception):
    """A run's file (journal, result.json, config.json) that is not what we wrote: a
    reader says so in one line naming the file, and no action goes on from it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


_NUMBER = (int, float)
_NONE = type(None)
_INCIDENT = {"kind": (str,), "from_region": (str,), "failed_at": _NUMBER, "detected_at": _NUMBER}
# What status, report and replay index in each kind of event (they .get() the rest), and its type.
EVENT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "transition": {"to": (str,)},
    "attempt_started": {"generation": (int,), "region": (str,)},
    "attempt_ended": {"generation": (int,), "region": (str,)},
    "provisioned": {"cluster": (str,), "region": (str,)},
    "runtime_started": {"pid": (int,)},
    "fence": {"generation": (int,), "restored_step": (int,)},
    "fences_read": {"generation_floor": (int,)},
    "incident": _INCIDENT,
    "incident_opened": _INCIDENT,
    "decision": {"failure": (str,), "action": (str,)},
    "fault_injected": {"kind": (str,)},
}
# Fields any event may carry, typed when present.
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "config": (dict,),
    "generation": (int, _NONE),
    "step": (int, _NONE),
    "last_step": (int, _NONE),
    "restored_step": (int, _NONE),
    "lost_steps": (int, _NONE),
    "to_region": (str, _NONE),
    "rto_s": (*_NUMBER, _NONE),
    "detected_after_s": (*_NUMBER, _NONE),
    "lag_s": (*_NUMBER, _NONE),
}
# Closed sets an event names: replay turns them back into these enums.
_CHOICES = {
    ("transition", "to"): {str(s) for s in RunState},
    ("decision", "failure"): {str(k) for k in FailureKind},
    ("decision", "action"): {str(a) for a in Action},
}


def shape_problem(obj: Any, required: dict[str, tuple[type, ...]], optional: dict[str, tuple[type, ...]]) -> str | None:
    """What is wrong with a JSON object a reader is about to take fields from, or None."""
    if not isinstance(obj, dict):
        return f"is {type(obj).__name__}, not a JSON object"
    for name, types in required.items():
        if name not in obj:
            return f"lacks {name!r}"
        if not _is(obj[name], types):
            return f"has {name!r} of type {type(obj[name]).__name__}"
    for name, types in optional.items():
        if name in obj and not _is(obj[name], types):
            return f"has {name!r} of type {type(obj[name]).__name__}"
    return None


def _is(value: Any, types: tuple[type, ...]) -> bool:
    # JSON's true is not a number here, and NaN/Infinity (which json accepts) are no times.
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, types)


def event_problem(ev: Any) -> str | None:
    """What makes a journal line no event this project wrote, or None."""
    problem = shape_problem(ev, {"type": (str,), "ts": _NUMBER}, {})
    if problem is not None:
        return problem
    problem = shape_problem(ev, EVENT_FIELDS.get(ev["type"], {}), OPTIONAL_FIELDS)
    if problem is not None:
        return f"({ev['type']}) {problem}"
    for (kind, name), allowed in _CHOICES.items():
        if ev["type"] == kind and ev[name] not in allowed:
            return f"({kind}) has {name!r} {str(ev[name])[:40]!r}, none of {', '.join(sorted(allowed))}"
    return None


def json_lines(path: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each whole JSON line; a missing file has none.

    A line that does not parse is a torn write (a crash mid-append; the next append
    starts a new line) and is skipped: everything else stands. A line that is not text
    cannot come from a torn write of ours (we write ASCII), so it is damage."""
    try:
        fh = open(path, "rb")
    except (FileNotFoundError, NotADirectoryError):
        return
    except IsADirectoryError:
        raise DamagedFile(path, "is a folder, not a file") from None
    except PermissionError:
        raise DamagedFile(path, "cannot be read (permission denied)") from None
    with fh:
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise DamagedFile(path, f"line {n} is not text; the file is damaged") from None
            if not line:
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError:
                continue
            except RecursionError:
                raise DamagedFile(path, f"line {n} nests too deep to be ours; the file is damaged") from None


def read_events(path: str) -> Iterator[dict[str, Any]]:
    """The journal's events; DamagedFile at the first line that parses but is no event."""
    for n, ev in json_lines(path):
        problem = event_problem(ev)
        if problem is not None:
            raise DamagedFile(path, f"line {n} {problem}; the journal is damaged or was edited")
        yield ev


def load_json(path: str) -> Any:
    """A whole JSON file (result.json, config.json); FileNotFoundError when there is none,
    DamagedFile when it is not JSON."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except NotADirectoryError:
        raise FileNotFoundError(path) from None
    except IsADirectoryError:
        raise DamagedFile(path, "is a folder, not a file") from None
    except PermissionError:
        raise DamagedFile(path, "cannot be read (permission denied)") from None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise DamagedFile(path, "is not text; the file is damaged") from None
    except json.JSONDecodeError as exc:
        what = "is empty" if not data.strip() else f"is not valid JSON ({exc.msg} at line {exc.lineno})"
        raise DamagedFile(path, f"{what}; the file is damaged or was cut short") from None
    except RecursionError:
        raise DamagedFile(path, "nests too deep to be ours; the file is damaged") from None
