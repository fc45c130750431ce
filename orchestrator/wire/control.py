"""The control channel between the controller and an attempt's runtime.

Small JSON objects under a control URL (fsspec), so it works the same on a
local folder and on an object store the cluster can reach:

- ``g<gen>/heartbeat.json``  the driver's lease renewal (time, step, pid)
- ``g<gen>/progress.json``   rank 0's latest step, loss and checkpoint
- ``g<gen>/events/*.json``   one object per event (restores, skips, errors)
- ``g<gen>/final.json``      the outcome, written once at the end
- ``chaos/<i>.request|fired`` a fault's rendezvous: the n-th request of fault i
  (``seq``) is answered once the fired count reaches n; counts span the run
- ``g<gen>/preempt.json``   a preemption notice the driver relays to the workers

Everything is scoped by generation so that a zombie of an old attempt cannot
pass for the current one. Whatever is read goes through ``orchestrator.wire.schema``:
readers return its typed records, or None for an object that is not one (reported
once through ``on_invalid``, never raised: what the runtime writes cannot crash the
controller).
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from orchestrator.wire import schema as wire
from recovery.fsio import UnsafeFile, is_local, read_regular, write_bytes

T = TypeVar("T")
# Reports of invalid objects per channel: past this, one last report says the rest go unsaid.
MAX_INVALID_REPORTS = 100
_EVENT_NAME = re.compile(r"\d{10}\.\d{6}-[0-9a-f]{8}\.json")


@dataclass(frozen=True)
class Invalid:
    """An object on the channel that is not what the runtime writes: where, and why (one line)."""

    path: str  # relative to the channel's root, e.g. g3/heartbeat.json
    reason: str


def run_control_url(control_store: str | None, run_id: str, run_dir: str) -> str:
    """A run's control channel: under ``control_store`` (cloud.control_store) if set,
    else in the run's folder on this machine."""
    if control_store:
        return f"{control_store.rstrip('/')}/{run_id}/control"
    return "file://" + os.path.join(run_dir, "control")


class ControlChannel:
    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        on_invalid: Callable[[Invalid], None] | None = None,
    ) -> None:
        from recovery.storage import open_fs

        self.url = url.rstrip("/")
        self.options = dict(storage_options or {})
        self.fs, self.root = open_fs(self.url, self.options)
        # A folder on this machine is read with plain system calls: fsspec's layers cost
        # several times the read itself, at every look of the controller's watch.
        self.local = is_local(self.fs)
        self.on_invalid = on_invalid or (lambda invalid: None)
        # Called before each write: a controller's lease guard (orchestrator/control/controlstate.py).
        self.before_write: Callable[[], None] = lambda: None
        self._reported: set[tuple[str, str]] = set()

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _put(self, path: str, obj: dict[str, Any], durable: bool = True) -> None:
        self.before_write()
        write_bytes(self.fs, path, json.dumps(obj, default=str).encode(), durable=durable)

    def _exists(self, path: str) -> bool:
        # Object-store clients cache listings: a flag written since must be seen now.
        self.fs.invalidate_cache(path)
        return bool(self.fs.exists(path))

    def _invalid(self, path: str, reason: str) -> None:
        """Report once per (object, reason): a heartbeat rewritten every second with the
        same fault is one report, and a flood of bad files is bounded."""
        rel = path[len(self.root) :].lstrip("/") if path.startswith(self.root) else path
        key = (rel[:300], reason[:300])
        if key in self._reported or len(self._reported) > MAX_INVALID_REPORTS:
            return
        self._reported.add(key)
        if len(self._reported) > MAX_INVALID_REPORTS:
            key = (key[0], f"more than {MAX_INVALID_REPORTS} invalid objects: the rest are ignored unreported")
        self.on_invalid(Invalid(*key))

    def _raw(self, path: str) -> bytes | None:
        """At most MAX_BYTES + 1 bytes: a huge file is never read whole."""
        try:
            if self.local:
                # A regular file inside the folder only: a FIFO, a device or a link planted
                # there must not block the controller's watch or be read elsewhere.
                return read_regular(path, self.root, 0, wire.MAX_BYTES + 1)
            return bytes(self.fs.cat_file(path, start=0, end=wire.MAX_BYTES + 1))
        except FileNotFoundError:
            return None

    def _names(self, folder: str) -> list[str]:
        """The names in ``folder`` (FileNotFoundError when there is none)."""
        if self.local:
            try:
                return os.listdir(folder)
            except NotADirectoryError:
                return []  # a file where the folder should be holds no events
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                return []  # a symlink loop where the folder should be holds no events
        # Object-store clients cache listings: what was written since must be seen now.
        self.fs.invalidate_cache()
        return [p.rsplit("/", 1)[-1] for p in self.fs.ls(folder, detail=False)]

    def _read(self, path: str, parse: Callable[[Any], T], generation: int | None = None) -> T | None:
        got = self._checked(path, parse, generation)
        return None if isinstance(got, Invalid) else got

    def _checked(self, path: str, parse: Callable[[Any], T], generation: int | None) -> T | Invalid | None:
        """The record at ``path``, None when there is none, or Invalid (reported)."""
        try:
            data = self._raw(path)
            if data is None:
                return None
            record = parse(wire.decode(data))
            got = getattr(record, "generation", generation)
            if generation is not None and got != generation:
                # A zombie's (or a forger's) object in another generation's folder.
                raise wire.WireError(f"claims generation {got} in generation {generation}'s folder")
            return record
        except wire.WireError as exc:
            reason = str(exc)
        except UnsafeFile as exc:
            reason = exc.strerror
        except (IsADirectoryError, NotADirectoryError):
            reason = "is a folder, not a file"
        self._invalid(path, reason)
        return Invalid(path, reason)

    def _get(self, path: str) -> dict[str, Any] | None:
        """A JSON object this side wrote itself (or None), for read-modify-write."""
        try:
            return wire.decode(self._raw(path) or b"")
        except (wire.WireError, UnsafeFile, IsADirectoryError, NotADirectoryError):
            return None

    # --- written by the runtime ---------------------------------------------
    def heartbeat(self, gen: int, **fields: Any) -> None:
        # Superseded a second later: not worth an fsync (progress is written from the training loop).
        self._put(
            self._path(f"g{gen}", "heartbeat.json"), {"time": time.time(), "generation": gen, **fields}, durable=False
        )

    def progress(self, gen: int, **fields: Any) -> None:
        self._put(
            self._path(f"g{gen}", "progress.json"), {"time": time.time(), "generation": gen, **fields}, durable=False
        )

    def event(self, gen: int, type_: str, **fields: Any) -> None:
        now = time.time()
        name = f"{now:017.6f}-{uuid.uuid4().hex[:8]}.json"
        self._put(
            self._path(f"g{gen}", "events", name),
            {"time": now, "generation": gen, "type": type_, **fields},
        )

    def final(self, gen: int, **fields: Any) -> None:
        self._put(self._path(f"g{gen}", "final.json"), {"time": time.time(), "generation": gen, **fields})

    # --- read by the controller ---------------------------------------------
    def read_heartbeat(self, gen: int) -> wire.Heartbeat | None:
        return self._read(self._path(f"g{gen}", "heartbeat.json"), wire.parse_heartbeat, gen)

    def read_progress(self, gen: int) -> wire.Progress | None:
        return self._read(self._path(f"g{gen}", "progress.json"), wire.parse_progress, gen)

    def read_final(self, gen: int) -> wire.Final | None:
        return self._read(self._path(f"g{gen}", "final.json"), wire.parse_final, gen)

    def read_events(self, gen: int, seen: set[str]) -> list[wire.Event]:
        """Events not in ``seen`` (names are added to it), oldest first. An invalid one
        is reported, added to ``seen`` (events are written once) and left out."""
        folder = self._path(f"g{gen}", "events")
        try:
            # Only the new ones sorted: the folder holds every event of the attempt.
            names = sorted(n for n in self._names(folder) if n not in seen)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if not name.endswith(".json"):
                continue
            if not _EVENT_NAME.fullmatch(name):
                seen.add(name)
                self._invalid(f"{folder}/{name[:100]}", "is not named as the runtime names events")
                continue
            ev = self._checked(f"{folder}/{name}", wire.parse_event, gen)
            if ev is not None:
                seen.add(name)  # an invalid one stays so (written once): never read again
            if isinstance(ev, wire.Event):
                out.append(ev)
        return out

    # --- standby activation ---------------------------------------------------
    def activate(self, gen: int, lineage: list[list[int]] | None = None) -> None:
        """The standby's go, with the controller's lineage as of now (its spec's is older)."""
        obj: dict[str, Any] = {"time": time.time(), "generation": gen}
        if lineage is not None:
            obj["lineage"] = lineage
        self._put(self._path(f"g{gen}", "activate.json"), obj)

    def read_activation(self, gen: int) -> dict[str, Any] | None:
        return self._get(self._path(f"g{gen}", "activate.json"))

    def is_active(self, gen: int) -> bool:
        return self._exists(self._path(f"g{gen}", "activate.json"))

    # --- chaos rendezvous -----------------------------------------------------
    def chaos_request(self, index: int, **fields: Any) -> None:
        self._put(self._path("chaos", f"{index}.request"), {"time": time.time(), **fields})

    def chaos_requests(self) -> dict[int, wire.ChaosRequest]:
        folder = self._path("chaos")
        try:
            names = self._names(folder)
        except FileNotFoundError:
            return {}
        out: dict[int, wire.ChaosRequest] = {}
        for name in names:
            index = name.split(".")[0]
            if name.endswith(".request") and index.isdigit() and len(index) <= 6:
                req = self._read(f"{folder}/{name}", wire.parse_chaos_request)
                if req is not None:
                    out[int(index)] = req
        return out

    def chaos_fired(self, index: int, count: int, **fields: Any) -> None:
        # Only the controller writes this: read-modify-write is safe.
        before = self.read_fired(index)
        steps = [*(before.steps if before is not None else ()), fields.get("step")]
        self._put(
            self._path("chaos", f"{index}.fired"), {"time": time.time(), "count": count, "steps": steps, **fields}
        )

    def read_fired(self, index: int) -> wire.ChaosFired | None:
        return self._read(self._path("chaos", f"{index}.fired"), wire.parse_chaos_fired)

    def fired_steps(self, index: int) -> set[int]:
        fired = self.read_fired(index)
        return set() if fired is None else {s for s in fired.steps if s is not None}

    def fired_count(self, index: int) -> int:
        fired = self.read_fired(index)
        return 0 if fired is None else fired.count

    def is_fired(self, index: int) -> bool:
        return self.fired_count(index) > 0

    # --- preemption notice ------------------------------------------------------
    def preempt_notice(self, gen: int, **fields: Any) -> None:
        self._put(self._path(f"g{gen}", "preempt.json"), {"time": time.time(), "generation": gen, **fields})

    def preempt_requested(self, gen: int) -> bool:
        # The notice's existence is the signal (the workers poll it often: no read).
        return self._exists(self._path(f"g{gen}", "preempt.json"))

    def read_preempt(self, gen: int) -> wire.PreemptNotice | None:
        return self._read(self._path(f"g{gen}", "preempt.json"), wire.parse_preempt, gen)

    # --- the region's nodes, as the controller knows them -------------------------
    def nodes_word(self, gen: int, fits: int, wait_until: float, lost: list[int]) -> None:
        self._put(
            self._path(f"g{gen}", "nodes.json"),
            {"time": time.time(), "generation": gen, "fits": fits, "wait_until": wait_until, "lost": lost},
        )

    def read_nodes_word(self, gen: int) -> wire.NodesWord | None:
        return self._read(self._path(f"g{gen}", "nodes.json"), wire.parse_nodes_word, gen)

    # --- the driver's exit, readable by a controller that did not start it -------
    def exited(self, gen: int, code: int) -> None:
        self._put(self._path(f"g{gen}", "exit.json"), {"time": time.time(), "generation": gen, "code": code})

    def read_exit(self, gen: int) -> int | None:
        got = self._read(self._path(f"g{gen}", "exit.json"), wire.parse_exit, gen)
        return None if got is None else got.code
