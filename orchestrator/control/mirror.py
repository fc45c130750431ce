"""The run's durable state, mirrored to the control store as it is written, so that a
controller on another machine can take the run over (``action=resume`` with an empty
home; orchestrator/control/takeover.py).

Under ``<control_store>/<run_id>/state/c<N>/``, for controller generation N (its lease,
orchestrator/control/lease.py): the files of MIRRORED, each as ``blobs/<sha256>``, and
``index.json`` naming them (name, size, sha256), its sequence number and time,
authenticated with the run's state key. Blobs are written before the index that names
them, so a crash between the two leaves the last index whole; a controller writes under
its own generation only, so an old one that wakes up cannot overwrite its successor's.

The journal goes within a heartbeat interval of its writing, and at once for the
events a restore or a takeover depends on (an attempt's start and cluster, the lineage,
fences, incidents, the run's end: SYNC_EVENTS). What is not mirrored: run.secret (the
taker derives it from the user's control key), notify.secret (its tokens stay on the
machine that was given them: a takeover's notifications go to targets given again),
TensorBoard files, reports (action=report makes them again) and the attempts' logs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.runstate import rundir
from recovery.fsio import TooLarge, read_capped, write_bytes

STATE_DIR = "state"
INDEX_NAME = "index.json"
BLOBS = "blobs"
MIRRORED = (rundir.JOURNAL_NAME, rundir.CONFIG_NAME, rundir.RESULT_NAME, rundir.LOSS_NAME)
MAX_FILE = 256 * 1024 * 1024
MAX_INDEX = 64 * 1024
SYNC_EVENTS = frozenset(
    {
        "run_started",
        "run_resumed",
        "fences_read",
        "transition",
        "provisioned",
        "train_started",
        "incident_recorded",
        "fault_injected",
        "lease_taken",
        "mirror_restored",
        "run_finished",
    }
)
_GEN_DIR = re.compile(r"c(\d{1,9})")
_SHA = re.compile(r"[0-9a-f]{64}")


class MirrorError(RuntimeError):
    """The control store holds no usable mirror of the run; one line."""


@dataclass
class Restored:
    """A mirror read back: the newest index that verifies, and what was passed over."""

    controller: int
    seq: int
    written_at: float
    files: dict[str, bytes]
    skipped: list[str] = field(default_factory=list)


def _mac(key: bytes, body: dict[str, Any]) -> str:
    return hmac.new(key, json.dumps(body, sort_keys=True, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def index_bytes(key: bytes, run_id: str, controller: int, seq: int, files: dict[str, dict[str, Any]]) -> bytes:
    body = {"run_id": run_id, "controller": controller, "seq": seq, "written_at": time.time(), "files": files}
    return json.dumps({**body, "mac": _mac(key, body)}, sort_keys=True).encode()


def parse_index(data: bytes, key: bytes, run_id: str, controller: int) -> dict[str, Any] | str:
    """An index of this run's controller ``controller``, or why not (one line)."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "not JSON"
    if not isinstance(obj, dict) or not isinstance(obj.get("mac"), str):
        return "not an index"
    mac = obj.pop("mac")
    if set(obj) != {"run_id", "controller", "seq", "written_at", "files"}:
        return "fields other than an index's"
    if not hmac.compare_digest(mac, _mac(key, obj)):
        return "does not verify under this run's key (altered, or another key's)"
    if obj["run_id"] != run_id or obj["controller"] != controller:
        return "names another run or controller"
    files = obj["files"]
    if not isinstance(files, dict) or not isinstance(obj["seq"], int) or not isinstance(obj["written_at"], int | float):
        return "malformed"
    for name, entry in files.items():
        if name not in MIRRORED:
            return f"names {name[:60]!r}, which is not a mirrored file"
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and _SHA.fullmatch(entry["sha256"])):
            return f"{name}: no sha256"
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FILE:
            return f"{name}: a size outside 0..{MAX_FILE}"
    return obj


def mirrored_bytes(name: str, data: bytes) -> bytes:
    """What of a file is mirrored now: the journal up to its last whole line (an append
    may be half written)."""
    if name == rundir.JOURNAL_NAME:
        return data[: data.rfind(b"\n") + 1]
    return data


class StateMirror:
    def __init__(
        self,
        fs: Any,
        root: str,
        key: bytes,
        run_id: str,
        controller: int,
        run_dir: str,
        may_act: Callable[[], None] = lambda: None,
    ) -> None:
        self.fs, self.key, self.run_id, self.controller, self.run_dir = fs, key, run_id, controller, run_dir
        self.base = f"{root.rstrip('/')}/{STATE_DIR}/c{controller}"
        # Called before each write: the controller's lease check (it may not return).
        self.may_act = may_act
        self.seq = 0
        self.entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def flush(self) -> bool:
        """Mirror what changed; True when a new index was written."""
        with self._lock:
            entries = dict(self.entries)
            fresh: list[tuple[str, str, bytes]] = []
            for name in MIRRORED:
                try:
                    with open(os.path.join(self.run_dir, name), "rb") as fh:
                        data = mirrored_bytes(name, fh.read(MAX_FILE + 1))
                except FileNotFoundError:
                    continue
                if len(data) > MAX_FILE:
                    continue  # past any run's size: left out, never truncated
                sha = hashlib.sha256(data).hexdigest()
                if entries.get(name, {}).get("sha256") != sha:
                    fresh.append((name, sha, data))
                    entries[name] = {"sha256": sha, "size": len(data)}
            if not fresh:
                return False
            self.may_act()
            for _name, sha, data in fresh:
                write_bytes(self.fs, f"{self.base}/{BLOBS}/{sha}", data, durable=True)
            self.seq += 1
            write_bytes(
                self.fs,
                f"{self.base}/{INDEX_NAME}",
                index_bytes(self.key, self.run_id, self.controller, self.seq, entries),
                durable=True,
            )
            stale = {e["sha256"] for e in self.entries.values()} - {e["sha256"] for e in entries.values()}
            self.entries = entries
        for sha in stale:
            try:
                self.fs.rm(f"{self.base}/{BLOBS}/{sha}")
            except Exception:  # left behind: the next controller's takeover ignores it
                pass
        return True

    def try_flush(self) -> None:
        """A flush whose failure is kept (``error``) and retried at the next one: an
        unreachable control store must not stop the run it mirrors."""
        try:
            self.flush()
            self.error = None
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {str(exc)[:200]}"

    def start(self, interval_s: float) -> None:
        def loop() -> None:
            while not self._stop.wait(interval_s):
                self.try_flush()

        self._thread = threading.Thread(target=loop, name="state-mirror", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.try_flush()


def controllers(fs: Any, root: str) -> list[int]:
    """The controller generations that left a mirror under ``root``, newest first."""
    base = f"{root.rstrip('/')}/{STATE_DIR}"
    fs.invalidate_cache(base)
    try:
        names = [os.path.basename(p.rstrip("/")) for p in fs.ls(base, detail=False)]
    except FileNotFoundError:
        return []
    gens = [int(m.group(1)) for n in names if (m := _GEN_DIR.fullmatch(n))]
    return sorted(gens, reverse=True)


def read_mirror(fs: Any, root: str, key: bytes, run_id: str) -> Restored:
    """The newest mirror that verifies, whole; MirrorError when there is none. Mirrors of
    later controllers that do not verify are passed over, each with its reason."""
    skipped: list[str] = []
    gens = controllers(fs, root)
    for gen in gens:
        base = f"{root.rstrip('/')}/{STATE_DIR}/c{gen}"
        try:
            index = parse_index(read_capped(fs, f"{base}/{INDEX_NAME}", MAX_INDEX), key, run_id, gen)
        except FileNotFoundError:
            index = "no index.json"
        except TooLarge:
            index = f"index.json larger than {MAX_INDEX} bytes"
        if isinstance(index, str):
            skipped.append(f"c{gen}: {index}")
            continue
        files: dict[str, bytes] = {}
        for name, entry in index["files"].items():
            why = _blob(fs, f"{base}/{BLOBS}/{entry['sha256']}", entry)
            if isinstance(why, str):
                skipped.append(f"c{gen}/{name}: {why}")
                break
            files[name] = why
        else:
            if rundir.JOURNAL_NAME not in files or rundir.CONFIG_NAME not in files:
                skipped.append(f"c{gen}: no journal or config")
                continue
            return Restored(gen, int(index["seq"]), float(index["written_at"]), files, skipped)
    if not gens:
        raise MirrorError("holds no mirror of the run (was cloud.control_store set when it ran?)")
    raise MirrorError("holds no mirror that verifies: " + "; ".join(skipped)[:600])


def _blob(fs: Any, path: str, entry: dict[str, Any]) -> bytes | str:
    try:
        data = read_capped(fs, path, int(entry["size"]))
    except FileNotFoundError:
        return "missing"
    except TooLarge:
        return "larger than its index says"
    if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        return "does not match its index's sha256"
    return data
