"""``action=stop``'s, ``action=cancel``'s and ``action=drill``'s requests: a small
private file in the run's folder that the run's controller polls and acts on. A stop
or a cancel as on Ctrl-C (clusters torn down, checkpoints kept): INTERRUPTED for a stop
(action=resume goes on), CANCELLED for a cancel (the run ends; nothing resumes it). A
drill (``drill.request``) carries a fault for the running attempt, as chaos.faults
names one; the controller injects it.

A file and not a signal: only the run's owner can write its folder (0711, its own), so
no other user can stop the run, and no pid is ever signalled that might have been reused.
The request says who asked (user, host, pid), which the run's INTERRUPTED reason then
names. Everything read is bounded and checked: a file that is not a regular one of this
user's, not private, too long, or not the JSON object below is no request and is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.runstate import rundir
from orchestrator.runstate.runfiles import REMOVE, DamagedFile, check_names, open_fd
from recovery.fsio import open_regular

STOP_NAME = rundir.STOP_NAME
DRILL_NAME = rundir.DRILL_NAME
MAX_BYTES = 4096
_MAX_FIELD = 255
POLL_S = 0.2  # as the watch's wakeups


ACTIONS = ("stop", "cancel", "drill")
# Where a request was made: the command line (action=stop, cancel, drill), the console's
# page (action=console) or Python (orchestrator.api); the journal names it with the stop or the drill.
SOURCES = ("cli", "console", "python")


@dataclass(frozen=True)
class StopRequest:
    user: str
    host: str
    pid: int
    at: float  # seconds since the epoch
    action: str = "stop"  # or "cancel", or "drill" (with its fault)
    # A drill's fault, as plain JSON (chaos.faults[i]'s keys); checked by its reader.
    fault: dict[str, Any] | None = None
    source: str = "cli"  # one of SOURCES; a request from before the field is the command line's

    def who(self) -> str:
        return f"{self.user}@{self.host} pid {self.pid}"

    def as_json(self) -> dict[str, Any]:
        out = {
            "action": self.action,
            "user": self.user,
            "host": self.host,
            "pid": self.pid,
            "at": self.at,
            "source": self.source,
        }
        return out if self.fault is None else {**out, "fault": self.fault}


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not 0 < len(value) <= _MAX_FIELD:
        return None
    # Printable only: it ends up in the journal and on people's terminals.
    return value if value.isprintable() else None


def parse_request(raw: bytes) -> StopRequest | None:
    """The request ``raw`` holds, or None when it is none (too long, not UTF-8 JSON, not
    an object with action "stop" or "cancel", a printable user and host, a positive pid and a time,
    and, when it names one, a source of SOURCES)."""
    if len(raw) > MAX_BYTES:
        return None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or obj.get("action") not in ACTIONS:
        return None
    user, host, pid, at = _text(obj.get("user")), _text(obj.get("host")), obj.get("pid"), obj.get("at")
    if user is None or host is None:
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
        return None
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not 0 <= at < 1e11:
        return None
    fault = obj.get("fault")
    if (obj["action"] == "drill") != isinstance(fault, dict):
        return None  # a drill carries its fault, and only a drill does
    source = obj.get("source", "cli")
    if source not in SOURCES:
        return None
    return StopRequest(
        user=user, host=host, pid=pid, at=float(at), action=str(obj["action"]), fault=fault, source=str(source)
    )


def file_acceptable(st: os.stat_result, uid: int) -> bool:
    """Whether a request file's status is one this controller may act on: a regular file
    of its own user's, writable by no one else, of a bounded size."""
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_uid == uid
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        and st.st_size <= MAX_BYTES
    )


def request_path(run_dir: str, name: str = STOP_NAME) -> str:
    return os.path.join(run_dir, name)


def this_request(action: str = "stop", fault: dict[str, Any] | None = None, source: str = "cli") -> StopRequest:
    """A request from this process, as it names itself (``source``: where it was asked)."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return StopRequest(
        user=user[:_MAX_FIELD] or "?",
        host=socket.gethostname()[:_MAX_FIELD] or "?",
        pid=os.getpid(),
        at=time.time(),
        action=action,
        fault=fault,
        source=source,
    )


def write_request(run_dir: str, req: StopRequest, name: str = STOP_NAME) -> None:
    """Put ``req`` in ``run_dir`` whole (written aside, then renamed in: never through a
    link), 0600. DamagedFile when something other than a regular file has the request's
    name (the controller takes no such request: writing one would ask it nothing)."""
    check_names(run_dir, [name])
    tmp = os.path.join(run_dir, f".{name}.{os.getpid()}")
    fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(json.dumps(req.as_json()).encode())
        os.replace(tmp, request_path(run_dir, name))
    except IsADirectoryError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise DamagedFile(request_path(run_dir, name), "a folder, not a regular file", REMOVE) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def take_request(run_dir: str, name: str = STOP_NAME) -> StopRequest | None:
    """The request waiting in ``run_dir``, removed as it is read; None when there is none
    or what is there is no request (removed too, so it is judged once)."""
    path = request_path(run_dir, name)
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError:
        # A link, a FIFO or anything else that is no regular file: no request.
        clear_request(run_dir, name)
        return None
    raw = _acceptable_bytes(fd)
    clear_request(run_dir, name)
    return _request_of(raw, name)


def _acceptable_bytes(fd: int) -> bytes:
    """What an open request file holds, when it is one its controller may act on (closed after)."""
    try:
        st = os.fstat(fd)
        return os.read(fd, MAX_BYTES + 1) if file_acceptable(st, os.getuid()) else b""
    finally:
        os.close(fd)


def _request_of(raw: bytes, name: str) -> StopRequest | None:
    req = parse_request(raw) if raw else None
    # A stop's file holds a stop or a cancel, a drill's a drill: anything else is no request.
    return req if req is not None and (req.action == "drill") == (name == DRILL_NAME) else None


def peek_request(run_dir: str, name: str = STOP_NAME) -> StopRequest | None:
    """The request waiting in ``run_dir``, read as ``take_request`` reads it but left in
    place (the console says a stop is asked until the controller takes it); None when
    there is none, or what is there is no request its controller would take."""
    try:
        fd = open_regular(request_path(run_dir, name), os.O_RDONLY)
    except OSError:
        return None
    return _request_of(_acceptable_bytes(fd), name)


def clear_request(run_dir: str, name: str = STOP_NAME) -> None:
    """No request waits in ``run_dir`` (a new controller clears an old one's). A folder
    under the name is left (it cannot be unlinked) and is no request either."""
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(request_path(run_dir, name))


class StopWatch:
    """A thread that polls the run folder for a stop request and, when one comes,
    interrupts the controller's main thread as Ctrl-C does. ``disarm`` stops it; an
    interrupt is never delivered after it returns (one delivered just before is the
    caller's to catch)."""

    def __init__(self, run_dir: str, poll_s: float = POLL_S) -> None:
        self.run_dir = run_dir
        self.poll_s = poll_s
        self.request: StopRequest | None = None
        self._armed = True
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stop-request", daemon=True)

    def start(self) -> StopWatch:
        self._thread.start()
        return self

    def _loop(self) -> None:
        import _thread

        while not self._done.wait(self.poll_s):
            try:
                req = take_request(self.run_dir)
            except OSError:
                continue
            if req is None:
                continue
            with self._lock:
                if not self._armed:
                    return
                self.request = req
                _thread.interrupt_main()
            return

    def disarm(self) -> None:
        with self._lock:
            self._armed = False
        self._done.set()
        self._thread.join(timeout=2 * self.poll_s + 1)
