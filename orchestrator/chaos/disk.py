"""The disk_full fault: a tiny tmpfs mounted over the cluster's scratch folder and filled,
released after the fault's duration (or before the cluster's teardown)."""

from __future__ import annotations

import os
import subprocess

from orchestrator.chaos.firing import FaultState, Firing, Handler
from orchestrator.runstate.events import FaultEnded, FaultFailed
from orchestrator.wire.faults import FaultKind
from providers.base import ClusterHandle

DISK_FULL_S = 15.0
# A scratch filesystem this small fills with one write; big enough for Linux to mount.
DISK_FULL_BYTES = 64 * 1024


def fill_scratch(path: str) -> str:
    """Mount a tiny tmpfs over ``path`` and fill it: the node's scratch disk is full.
    Raises OSError (with why) where the platform does not allow the mount."""
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_FULL_BYTES}", "orch-disk-full", path],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise OSError(f"cannot mount a tmpfs over {path}: {done.stderr.strip() or done.returncode}")
    try:
        with open(os.path.join(path, "filler"), "wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
    except OSError:
        pass  # ENOSPC: full, as intended
    return path


def release_scratch(path: str) -> None:
    subprocess.run(["umount", "-l", path], capture_output=True)


def _disk_full(state: FaultState, f: Firing) -> None:
    f.detail.update(_fill(state, f))


def _fill(state: FaultState, f: Firing) -> dict[str, object]:
    cluster = f.on
    path = str(cluster.info.get("scratch_dir") or "")
    if not path:
        return {"failed": "the cluster has no scratch_dir"}
    try:
        fill_scratch(path)
    except OSError as exc:
        state.say(FaultFailed(f.index, "disk_full", str(exc)))
        return {"failed": str(exc)}
    state.mounts[cluster.name] = path
    duration = f.fault.duration_s or DISK_FULL_S
    state.later(duration, _free_disk, state, f.index, cluster)
    return {"path": path, "bytes": DISK_FULL_BYTES, "duration_s": duration}


def _free_disk(state: FaultState, index: int, cluster: ClusterHandle) -> None:
    path = state.mounts.pop(cluster.name, None)
    if path is not None:
        release_scratch(path)
        state.say(FaultEnded(index, "disk_full", region=cluster.region))


HANDLERS: dict[FaultKind, Handler] = {FaultKind.disk_full: Handler(_disk_full)}
