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
pass for the current one.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

from recovery.fsio import write_bytes


def run_control_url(control_store: str | None, run_id: str, run_dir: str) -> str:
    """A run's control channel: under ``control_store`` (cloud.control_store) if set,
    else in the run's folder on this machine."""
    if control_store:
        return f"{control_store.rstrip('/')}/{run_id}/control"
    return "file://" + os.path.join(run_dir, "control")


class ControlChannel:
    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        from recovery.storage import open_fs

        self.url = url.rstrip("/")
        self.options = dict(storage_options or {})
        self.fs, self.root = open_fs(self.url, self.options)

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _put(self, path: str, obj: dict[str, Any], durable: bool = True) -> None:
        write_bytes(self.fs, path, json.dumps(obj, default=str).encode(), durable=durable)

    def _exists(self, path: str) -> bool:
        # Object-store clients cache listings: a flag written since must be seen now.
        self.fs.invalidate_cache(path)
        return bool(self.fs.exists(path))

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.fs.cat_file(path))
        except (FileNotFoundError, json.JSONDecodeError):
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
    def read_heartbeat(self, gen: int) -> dict[str, Any] | None:
        return self._get(self._path(f"g{gen}", "heartbeat.json"))

    def read_progress(self, gen: int) -> dict[str, Any] | None:
        return self._get(self._path(f"g{gen}", "progress.json"))

    def read_final(self, gen: int) -> dict[str, Any] | None:
        return self._get(self._path(f"g{gen}", "final.json"))

    def read_events(self, gen: int, seen: set[str]) -> list[dict[str, Any]]:
        """Events not in ``seen`` (names are added to it), oldest first."""
        folder = self._path(f"g{gen}", "events")
        try:
            self.fs.invalidate_cache()
            names = sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(folder, detail=False))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if name in seen or not name.endswith(".json"):
                continue
            ev = self._get(f"{folder}/{name}")
            if ev is not None:
                seen.add(name)
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

    def chaos_requests(self) -> dict[int, dict[str, Any]]:
        folder = self._path("chaos")
        try:
            self.fs.invalidate_cache()
            names = self.fs.ls(folder, detail=False)
        except FileNotFoundError:
            return {}
        out: dict[int, dict[str, Any]] = {}
        for p in names:
            name = p.rsplit("/", 1)[-1]
            if name.endswith(".request") and name.split(".")[0].isdigit():
                req = self._get(p)
                if req is not None:
                    out[int(name.split(".")[0])] = req
        return out

    def chaos_fired(self, index: int, count: int, **fields: Any) -> None:
        # Only the controller writes this: read-modify-write is safe.
        before = self._get(self._path("chaos", f"{index}.fired")) or {}
        steps = [*before.get("steps", []), fields.get("step")]
        self._put(
            self._path("chaos", f"{index}.fired"), {"time": time.time(), "count": count, "steps": steps, **fields}
        )

    def fired_steps(self, index: int) -> set[int]:
        fired = self._get(self._path("chaos", f"{index}.fired")) or {}
        return {int(s) for s in fired.get("steps", []) if s is not None}

    def fired_count(self, index: int) -> int:
        fired = self._get(self._path("chaos", f"{index}.fired"))
        return 0 if fired is None else int(fired.get("count", 1))

    def is_fired(self, index: int) -> bool:
        return self.fired_count(index) > 0

    # --- preemption notice ------------------------------------------------------
    def preempt_notice(self, gen: int, **fields: Any) -> None:
        self._put(self._path(f"g{gen}", "preempt.json"), {"time": time.time(), "generation": gen, **fields})

    def preempt_requested(self, gen: int) -> bool:
        return self._exists(self._path(f"g{gen}", "preempt.json"))

    # --- the driver's exit, readable by a controller that did not start it -------
    def exited(self, gen: int, code: int) -> None:
        self._put(self._path(f"g{gen}", "exit.json"), {"time": time.time(), "generation": gen, "code": code})

    def read_exit(self, gen: int) -> int | None:
        got = self._get(self._path(f"g{gen}", "exit.json"))
        return None if got is None else int(got["code"])
