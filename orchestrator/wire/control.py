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
pass for the current one, and sealed (an HMAC, recovery/sealed.py) with that
generation's channel key (``AttemptKeys.channel_key``): the attempt holds its own
generation's, the controller every generation's, and whoever can only write the
store (the control store is a shared bucket) holds none. An object that does not open
is dropped and reported once per kind and generation, so a forged ``user_error`` event,
``preempt.json`` or ``exit.json`` changes nothing. The chaos rendezvous is sealed too:
a request with its attempt's generation key, a fired count with generation 1's (every
attempt checks it). Whatever is read goes through ``orchestrator.wire.schema``:
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
from recovery.keys import AttemptKeys
from recovery.sealed import MAC, opened, seal

T = TypeVar("T")
# Reports of invalid objects per channel: past this, one last report says the rest go unsaid.
MAX_INVALID_REPORTS = 100
_EVENT_NAME = re.compile(r"\d{10}\.\d{6}-[0-9a-f]{8}\.json")
# The generation whose channel key seals the chaos rendezvous's fired counts: every attempt reaches it.
FIRED_GENERATION = 1


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
        keys: AttemptKeys | None = None,
    ) -> None:
        from recovery.storage import open_fs

        # What seals what this side writes and opens what it reads. None only in tests of
        # the channel's shapes: objects go unsealed, and a MAC read is not checked.
        self.keys = keys
        self._channel_keys: dict[int, bytes | None] = {}
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

    def _key(self, generation: int) -> bytes | None:
        if generation not in self._channel_keys:
            self._channel_keys[generation] = None if self.keys is None else self.keys.channel_key(generation)
        return self._channel_keys[generation]

    def _put(self, path: str, obj: dict[str, Any], generation: int, durable: bool = True) -> None:
        self.before_write()
        if self.keys is None:
            data = json.dumps(obj, default=str).encode()
        else:
            key = self._key(generation)
            if key is None:
                raise ValueError(f"generation {generation} is beyond this side's keys: nothing it could seal")
            # Sealed as it will be read back: JSON's own values (a tuple is a list, the rest str).
            data = seal(json.loads(json.dumps(obj, default=str)), key)
        write_bytes(self.fs, path, data, durable=durable)

    def _open(self, path: str, obj: dict[str, Any], generation: Any, what: str) -> dict[str, Any] | Invalid:
        """``obj`` without its MAC once the MAC verifies under ``generation``'s channel key;
        else Invalid, reported once per ``what`` (a kind of object) and reason."""
        if self.keys is None:
            return {k: v for k, v in obj.items() if k != MAC}
        key = self._key(generation) if isinstance(generation, int) and not isinstance(generation, bool) else None
        got = "is sealed for a generation this side has no key of" if key is None else opened(obj, key)
        if isinstance(got, dict):
            return got
        folder = path.rsplit("/", 1)[0]
        self._invalid(f"{folder}/{what}", f"{got}: dropped (whoever wrote it holds no key of the run)")
        return Invalid(path, got)

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

    def _read(
        self, path: str, parse: Callable[[Any], T], generation: int | None = None, sealed_by: int | None = None
    ) -> T | None:
        got = self._checked(path, parse, generation, sealed_by=sealed_by)
        return None if isinstance(got, Invalid) else got

    def _checked(
        self,
        path: str,
        parse: Callable[[Any], T],
        generation: int | None,
        what: str | None = None,
        sealed_by: int | None = None,
    ) -> T | Invalid | None:
        """The record at ``path``, None when there is none, or Invalid (reported). It opens
        under the channel key of ``sealed_by``, else of ``generation`` (its folder's), else
        of the generation it names itself; ``what`` names its kind where the object's
        name is its own (an event): a forgery is reported once per kind."""
        try:
            data = self._raw(path)
            if data is None:
                return None
            obj = wire.decode(data)
            signer = sealed_by if sealed_by is not None else generation
            if signer is None:
                signer = obj.get("generation")
            body = self._open(path, obj, signer, what or path.rsplit("/", 1)[-1])
            if isinstance(body, Invalid):
                return body
            record = parse(body)
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

    def _get(self, path: str, generation: int) -> dict[str, Any] | None:
        """A JSON object the controller wrote (or None): one that does not open is none."""
        try:
            obj = wire.decode(self._raw(path) or b"")
        except (wire.WireError, UnsafeFile, IsADirectoryError, NotADirectoryError):
            return None
        body = self._open(path, obj, generation, path.rsplit("/", 1)[-1])
        return None if isinstance(body, Invalid) else body

    # --- written by the runtime ---------------------------------------------
    def heartbeat(self, gen: int, **fields: Any) -> None:
        # Superseded a second later: not worth an fsync (progress is written from the training loop).
        self._put(
            self._path(f"g{gen}", "heartbeat.json"),
            {"time": time.time(), "generation": gen, **fields},
            gen,
            durable=False,
        )

    def progress(self, gen: int, **fields: Any) -> None:
        self._put(
            self._path(f"g{gen}", "progress.json"),
            {"time": time.time(), "generation": gen, **fields},
            gen,
            durable=False,
        )

    def event(self, gen: int, type_: str, **fields: Any) -> None:
        now, tag = time.time(), uuid.uuid4().hex[:8]
        # The name is in the sealed object too: a sealed event copied under another name
        # (to be taken twice) no longer matches it.
        self._put(
            self._path(f"g{gen}", "events", _event_name(now, tag)),
            {"time": now, "generation": gen, "type": type_, "tag": tag, **fields},
            gen,
        )

    def final(self, gen: int, **fields: Any) -> None:
        self._put(self._path(f"g{gen}", "final.json"), {"time": time.time(), "generation": gen, **fields}, gen)

    # --- read by the controller ---------------------------------------------
    def read_heartbeat(self, gen: int) -> wire.Heartbeat | None:
        return self._read(self._path(f"g{gen}", "heartbeat.json"), wire.parse_heartbeat, gen)

    def read_progress(self, gen: int) -> wire.Progress | None:
        return self._read(self._path(f"g{gen}", "progress.json"), wire.parse_progress, gen)

    def progress_or_invalid(self, gen: int) -> wire.Progress | Invalid | None:
        """The progress, None when there is none, or why what is there does not count
        (for a reader that says so rather than showing nothing)."""
        return self._checked(self._path(f"g{gen}", "progress.json"), wire.parse_progress, gen)

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
            ev = self._checked(f"{folder}/{name}", _named(name, wire.parse_event, self.keys is not None), gen, "*.json")
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
        self._put(self._path(f"g{gen}", "activate.json"), obj, gen)

    def read_activation(self, gen: int) -> dict[str, Any] | None:
        return self._get(self._path(f"g{gen}", "activate.json"), gen)

    def is_active(self, gen: int) -> bool:
        path = self._path(f"g{gen}", "activate.json")
        if self.keys is None:
            return self._exists(path)
        self.fs.invalidate_cache(path)  # written since the last look: it must be seen now
        return self._get(path, gen) is not None

    # --- chaos rendezvous -----------------------------------------------------
    def chaos_request(self, index: int, *, generation: int, **fields: Any) -> None:
        self._put(
            self._path("chaos", f"{index}.request"),
            {"time": time.time(), "generation": generation, **fields},
            generation,
        )

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
            self._path("chaos", f"{index}.fired"),
            {"time": time.time(), "count": count, "steps": steps, **fields},
            FIRED_GENERATION,
        )

    def read_fired(self, index: int) -> wire.ChaosFired | None:
        return self._read(self._path("chaos", f"{index}.fired"), wire.parse_chaos_fired, sealed_by=FIRED_GENERATION)

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
        self._put(self._path(f"g{gen}", "preempt.json"), {"time": time.time(), "generation": gen, **fields}, gen)

    def preempt_requested(self, gen: int) -> bool:
        """A notice sealed by this attempt (a forged one is no notice: it would cost the run
        a checkpoint and a failover each time)."""
        path = self._path(f"g{gen}", "preempt.json")
        if self.keys is None:
            return self._exists(path)
        self.fs.invalidate_cache(path)
        return self.read_preempt(gen) is not None

    def preempt_or_invalid(self, gen: int) -> wire.PreemptNotice | Invalid | None:
        """The notice, None when there is none, or why what is there is no notice."""
        path = self._path(f"g{gen}", "preempt.json")
        self.fs.invalidate_cache(path)
        return self._checked(path, wire.parse_preempt, gen)

    def read_preempt(self, gen: int) -> wire.PreemptNotice | None:
        return self._read(self._path(f"g{gen}", "preempt.json"), wire.parse_preempt, gen)

    # --- the region's nodes, as the controller knows them -------------------------
    def nodes_word(self, gen: int, fits: int, wait_until: float, lost: list[int]) -> None:
        self._put(
            self._path(f"g{gen}", "nodes.json"),
            {"time": time.time(), "generation": gen, "fits": fits, "wait_until": wait_until, "lost": lost},
            gen,
        )

    def read_nodes_word(self, gen: int) -> wire.NodesWord | None:
        return self._read(self._path(f"g{gen}", "nodes.json"), wire.parse_nodes_word, gen)

    # --- the driver's exit, readable by a controller that did not start it -------
    def exited(self, gen: int, code: int) -> None:
        self._put(self._path(f"g{gen}", "exit.json"), {"time": time.time(), "generation": gen, "code": code}, gen)

    def read_exit(self, gen: int) -> int | None:
        got = self._read(self._path(f"g{gen}", "exit.json"), wire.parse_exit, gen)
        return None if got is None else got.code


def _event_name(at: float, tag: str) -> str:
    return f"{at:017.6f}-{tag}.json"


def _named(name: str, parse: Callable[[Any], T], sealed: bool) -> Callable[[Any], T]:
    """``parse`` for the event file ``name``: a sealed event names its own file."""

    def check(obj: Any) -> T:
        if sealed and isinstance(obj, dict):
            tag, at = obj.pop("tag", None), obj.get("time")
            if not isinstance(tag, str) or not isinstance(at, float | int) or _event_name(at, tag) != name:
                raise wire.WireError("is sealed under another name (an event copied to be taken twice)")
        elif isinstance(obj, dict):
            obj.pop("tag", None)
        return parse(obj)

    return check
