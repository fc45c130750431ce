"""The run's durable state, mirrored to the control store as it is written, so that a
controller on another machine can take the run over (``action=resume`` with an empty
home; orchestrator/control/takeover.py).

Under ``<control_store>/<run_id>/state/c<N>/``, for controller generation N (its lease,
orchestrator/control/lease.py): the files of MIRRORED as blobs named by their sha256
(``blobs/<sha256>``), and ``index.json`` naming each file's segments in order (sha256,
size), its sequence number and time, authenticated with the run's state key. Blobs are
written before the index that names them, so a crash between the two leaves the last
index whole; a controller writes under its own generation only, so an old one that
wakes up cannot overwrite its successor's.

The journal and the loss series only grow: each flush uploads what was appended since
the last one as a segment of its own, and past MAX_SEGMENTS the appended segments are
merged (into one, or with the first when they outgrow it), so a long run's journal is
not uploaded whole every second and its index stays small.

The journal goes within a heartbeat interval of its writing, and at once for the
events a restore or a takeover depends on (an attempt's start and cluster, the lineage,
fences, incidents, the run's end: SYNC_EVENTS). What is not mirrored: run.secret (the
taker derives it from the user's control key), notify.secret (its tokens stay on the
machine that was given them: a takeover's notifications go to targets given again),
TensorBoard files, reports (action=report makes them again) and the attempts' logs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.control.lease import generation_of
from orchestrator.runstate import rundir
from orchestrator.runstate.runfiles import DamagedFile, open_fd
from recovery.fsio import TooLarge, UnsafeFile, is_local, read_capped, write_bytes
from recovery.sealed import seal, unseal

STATE_DIR = "state"
INDEX_NAME = "index.json"
BLOBS = "blobs"
MIRRORED = (rundir.JOURNAL_NAME, rundir.CONFIG_NAME, rundir.RESULT_NAME, rundir.LOSS_NAME)
# Files written by appending lines: mirrored by segments, up to their last whole line.
APPENDED = (rundir.JOURNAL_NAME, rundir.LOSS_NAME)
MAX_SEGMENTS = 32
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


def index_bytes(key: bytes, run_id: str, controller: int, seq: int, files: dict[str, dict[str, Any]]) -> bytes:
    return seal(
        {"run_id": run_id, "controller": controller, "seq": seq, "written_at": time.time(), "files": files}, key
    )


def parse_index(data: bytes, key: bytes, run_id: str, controller: int) -> dict[str, Any] | str:
    """An index of this run's controller ``controller``, or why not (one line)."""
    obj = unseal(data, key, {"run_id", "controller", "seq", "written_at", "files"}, "an index")
    if isinstance(obj, str):
        return obj
    if obj["run_id"] != run_id or obj["controller"] != controller:
        return "names another run or controller"
    files = obj["files"]
    if not isinstance(files, dict) or not isinstance(obj["seq"], int) or not isinstance(obj["written_at"], int | float):
        return "malformed"
    for name, entry in files.items():
        if name not in MIRRORED:
            return f"names {name[:60]!r}, which is not a mirrored file"
        segs = entry.get("segments") if isinstance(entry, dict) else None
        if not isinstance(segs, list) or len(segs) > MAX_SEGMENTS + 1:
            return f"{name}: no list of at most {MAX_SEGMENTS + 1} segments"
        total = 0
        for seg in segs:
            if not (isinstance(seg, dict) and isinstance(seg.get("sha256"), str) and _SHA.fullmatch(seg["sha256"])):
                return f"{name}: a segment without a sha256"
            size = seg.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                return f"{name}: a segment's size is not a count of bytes"
            total += size
        if total > MAX_FILE:
            return f"{name}: larger than {MAX_FILE} bytes"
    return obj


def mirrored_bytes(name: str, data: bytes) -> bytes:
    """What of a file is mirrored now: an appended one up to its last whole line (an
    append may be half written)."""
    if name in APPENDED:
        return data[: data.rfind(b"\n") + 1]
    return data


@dataclass(frozen=True)
class Segment:
    """Bytes ``start`` .. ``end`` of a mirrored file, stored as the blob ``sha256``."""

    sha256: str
    start: int
    end: int


def segment(data: bytes, start: int, end: int) -> Segment:
    return Segment(hashlib.sha256(data[start:end]).hexdigest(), start, end)


def segments_for(old: tuple[Segment, ...], data: bytes, grew: bool) -> tuple[Segment, ...]:
    """A file's segments once it holds ``data``: ``old`` and what was appended (``grew``:
    ``data`` begins with what ``old`` covers), else the whole file as one. Past
    MAX_SEGMENTS, the appended ones are merged into one, or, once they hold more than the
    first, all of them: every byte is uploaded a bounded number of times."""
    if not grew or not old:
        return (segment(data, 0, len(data)),) if data else ()
    end = old[-1].end
    if len(data) == end:
        return old
    segs = (*old, segment(data, end, len(data)))
    if len(segs) <= MAX_SEGMENTS:
        return segs
    base = segs[0]
    if len(data) - base.end <= base.end - base.start:
        return (base, segment(data, base.end, len(data)))
    return (segment(data, 0, len(data)),)


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
        # Per file: its segments as mirrored, and the sha256 of all they cover.
        self.segments: dict[str, tuple[Segment, ...]] = {}
        self.covered: dict[str, str] = {}
        # Per file: (size, mtime) when last mirrored; unchanged, it is not read again.
        self.stamps: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def flush(self) -> bool:
        """Mirror what changed; True when a new index was written."""
        with self._lock:
            segments = dict(self.segments)
            covered = dict(self.covered)
            stamps = dict(self.stamps)
            uploads: dict[str, bytes] = {}
            for name in MIRRORED:
                try:
                    # Opened as every file of the run's folder is: a FIFO planted under the
                    # name never holds the mirror, a link is never followed out of the folder.
                    with os.fdopen(open_fd(os.path.join(self.run_dir, name), os.O_RDONLY), "rb") as fh:
                        st = os.fstat(fh.fileno())
                        stamp = (st.st_size, st.st_mtime_ns)
                        if stamps.get(name) == stamp:
                            continue  # a heartbeat with nothing new: not read, not hashed
                        stamps[name] = stamp
                        data = mirrored_bytes(name, fh.read(MAX_FILE + 1))
                except (FileNotFoundError, DamagedFile):
                    continue  # not there, or no regular file: left out, as it was last mirrored
                if len(data) > MAX_FILE:
                    continue  # past any run's size: left out, never truncated
                whole = hashlib.sha256(data).hexdigest()
                if covered.get(name) == whole:
                    continue
                old = segments.get(name, ())
                end = old[-1].end if old else 0
                grew = name in APPENDED and bool(old) and len(data) > end
                grew = grew and hashlib.sha256(data[:end]).hexdigest() == covered.get(name)
                segments[name] = segments_for(old, data, grew)
                covered[name] = whole
                for seg in segments[name]:
                    if seg not in old:
                        uploads[seg.sha256] = data[seg.start : seg.end]
            if covered == self.covered:
                self.stamps = stamps
                return False
            self.may_act()
            if self.seq == 0:
                self._clear()
            for sha, blob in uploads.items():
                write_bytes(self.fs, f"{self.base}/{BLOBS}/{sha}", blob, durable=True)
            self.seq += 1
            entries = {
                name: {
                    "size": segs[-1].end if segs else 0,
                    "segments": [{"sha256": g.sha256, "size": g.end - g.start} for g in segs],
                }
                for name, segs in segments.items()
            }
            write_bytes(
                self.fs,
                f"{self.base}/{INDEX_NAME}",
                index_bytes(self.key, self.run_id, self.controller, self.seq, entries),
                durable=True,
            )
            kept = {g.sha256 for segs in segments.values() for g in segs}
            stale = {g.sha256 for segs in self.segments.values() for g in segs} - kept
            self.segments, self.covered, self.stamps = segments, covered, stamps
        for sha in stale:
            try:
                self.fs.rm(f"{self.base}/{BLOBS}/{sha}")
            except Exception:  # left behind: the next controller's takeover ignores it
                pass
        return True

    def _clear(self) -> None:
        """Before this generation's first index: whatever stands at its folder is not ours
        (the generation was claimed, and only its claimer writes there). On a local store
        a file or a link there would fail every write; a planted folder's blobs and index
        are removed with it. An object store's stray keys are overwritten or ignored."""
        if not is_local(self.fs):
            return
        for path in (self.base.rsplit("/", 1)[0], self.base):
            local = self.fs._strip_protocol(path)
            if os.path.islink(local) or (os.path.lexists(local) and not os.path.isdir(local)):
                os.unlink(local)
        local = self.fs._strip_protocol(self.base)
        if os.path.isdir(local):
            shutil.rmtree(local)

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
    except (FileNotFoundError, NotADirectoryError, UnsafeFile):
        return []
    gens = [g for n in names if (g := generation_of(n)) is not None]
    return sorted(gens, reverse=True)


def read_index(fs: Any, base: str, key: bytes, run_id: str, gen: int) -> dict[str, Any] | str:
    """Generation ``gen``'s index under ``base`` when it verifies, else why not (one line)."""
    try:
        return parse_index(read_capped(fs, f"{base}/{INDEX_NAME}", MAX_INDEX), key, run_id, gen)
    except FileNotFoundError:
        return "no index.json"
    except TooLarge:
        return f"index.json larger than {MAX_INDEX} bytes"
    except _NOT_A_FILE as exc:
        return f"index.json is not a file ({exc.strerror or type(exc).__name__})"


def read_mirror(fs: Any, root: str, key: bytes, run_id: str) -> Restored:
    """The newest mirror that verifies, whole; MirrorError when there is none. Mirrors of
    later controllers that do not verify are passed over, each with its reason."""
    skipped: list[str] = []
    gens = controllers(fs, root)
    for gen in gens:
        base = f"{root.rstrip('/')}/{STATE_DIR}/c{gen}"
        index = read_index(fs, base, key, run_id, gen)
        if isinstance(index, str):
            skipped.append(f"c{gen}: {index}")
            continue
        files: dict[str, bytes] = {}
        for name, entry in index["files"].items():
            parts = [read_blob(fs, f"{base}/{BLOBS}/{seg['sha256']}", seg) for seg in entry["segments"]]
            why = next((p for p in parts if isinstance(p, str)), None)
            if why is not None:
                skipped.append(f"c{gen}/{name}: a segment {why}")
                break
            files[name] = b"".join(p for p in parts if isinstance(p, bytes))
        else:
            if rundir.JOURNAL_NAME not in files or rundir.CONFIG_NAME not in files:
                skipped.append(f"c{gen}: no journal or config")
                continue
            return Restored(gen, int(index["seq"]), float(index["written_at"]), files, skipped)
    if not gens:
        raise MirrorError("holds no mirror of the run (was cloud.control_store set when it ran?)")
    raise MirrorError("holds no mirror that verifies: " + "; ".join(skipped)[:600])


# What a store says of a path that is no file it can read: a mirror holding one is skipped.
_NOT_A_FILE = (UnsafeFile, IsADirectoryError, NotADirectoryError)


def read_blob(fs: Any, path: str, entry: Mapping[str, Any]) -> bytes | str:
    """A mirror's segment whose size and sha256 match its index ``entry``, else why not."""
    try:
        data = read_capped(fs, path, int(entry["size"]))
    except FileNotFoundError:
        return "is missing"
    except TooLarge:
        return "is larger than its index says"
    except _NOT_A_FILE as exc:
        return f"is not a file ({exc.strerror or type(exc).__name__})"
    if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        return "does not match its index's sha256"
    return data
