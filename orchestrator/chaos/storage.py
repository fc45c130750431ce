"""Faults that strike the stores: the proxy in front of a region's store refuses,
black-holes or slows its traffic, an upload is cut mid-way (then the region killed),
and the newest checkpoint gets a byte flipped in every store holding it."""

from __future__ import annotations

import re
import threading
import time

from orchestrator.chaos.firing import FaultState, Firing, Handler, sigkill
from orchestrator.chaos.proxy import FaultProxy, Mode, Shape
from orchestrator.runstate.events import FaultEnded, FaultFailed, FaultInjected
from orchestrator.wire.faults import FaultKind
from orchestrator.wire.sections import FaultSpec
from providers.base import ClusterHandle
from recovery.store import CheckpointStore, part_of, sha256_hex

SHAPES = {"storage_outage": Mode.REFUSE, "storage_hang": Mode.BLACKHOLE, "storage_slow": Mode.SLOW}
TORN_WAIT_S = 60.0


def flip_byte(store: CheckpointStore, run_id: str, step: int, name: str = "model.pt") -> None:
    """Flip a byte of a checkpoint's file, unless it is already corrupt: idempotent, so
    a fault fired again (by a controller that died before marking it fired) never
    flips it back."""
    path = f"{store.step_path(run_id, step)}/{name}"
    data = bytearray(store.fs.cat_file(path))
    manifest = store.manifest(run_id, step)
    if manifest is not None and sha256_hex(bytes(data)) != manifest.entry(name).sha256:
        return
    data[len(data) // 2] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))


def _trusted_steps(store: CheckpointStore, run_id: str) -> list[int]:
    return [s for s in store.committed_steps(run_id) if store.trusted_manifest(run_id, s)[1].ok]


def corrupt_newest(stores: list[CheckpointStore], run_id: str) -> dict[str, int]:
    """Flip a byte of the run's newest committed checkpoint (its own: signed with the
    run's key) in every store holding it. A search's newest snapshot names its trials'
    checkpoints: the one of a trial that will resume from it is flipped (``search_part``),
    the snapshot itself left whole.

    A store that has not received it yet never will: replication verifies its source.
    """
    held = {s.region: _trusted_steps(s, run_id) for s in stores}
    newest = max((steps[-1] for steps in held.values() if steps), default=None)
    if newest is None:
        return {}
    done = {}
    for store in stores:
        if newest in held[store.region]:
            manifest = store.manifest(run_id, newest)
            part = search_part(manifest.extra) if manifest else None
            if part is not None:
                run, step = part_of(run_id, part[0]), part[1]
                held_part = store.manifest(run, step) if step in store.committed_steps(run) else None
                if held_part is not None and held_part.files:
                    names = sorted(f.name for f in held_part.files)
                    flip_byte(store, run, step, "model.pt" if "model.pt" in names else names[0])
                    done[store.region] = newest
                continue
            flip_byte(store, run_id, newest, corrupt_target([f.name for f in manifest.files] if manifest else []))
            done[store.region] = newest
    return done


def search_part(extra: dict[str, object]) -> tuple[str, int] | None:
    """Of the trial checkpoints a search snapshot names (``checkpoints``), the one a resume
    reads and that stands furthest on: (trial id, iteration) of a trial its records do
    not say ended; None for a checkpoint that names none (a run's, or a snapshot of ended
    trials alone)."""
    named, records = extra.get("checkpoints"), extra.get("trials")
    if not isinstance(named, dict) or not isinstance(records, list):
        return None
    ended = {r.get("trial_id") for r in records if isinstance(r, dict) and r.get("status") == "TERMINATED"}
    live = [
        (ref["iteration"], trial_id)
        for trial_id, ref in named.items()
        if trial_id not in ended and isinstance(ref, dict) and isinstance(ref.get("iteration"), int)
    ]
    if not live:
        return None
    iteration, trial_id = max(live)
    return trial_id, iteration


# A sharded checkpoint's rank files, as runtime/checkpoint/shard_index.py names them (the controller's
# side imports no runtime code).
_SHARD_FILE = re.compile(r"shard-r(\d+)\.pt")


def corrupt_target(names: list[str]) -> str:
    """The file a corrupt_checkpoint flips a byte of: the model's (a DDP checkpoint), else
    one rank's file of shards, the last rank's (a sharded checkpoint), else its first file
    (a search snapshot naming no trial that will resume: its archive)."""
    shards = sorted((int(m[1]), n) for n in names if (m := _SHARD_FILE.fullmatch(n)))
    if "model.pt" in names or not (shards or names):
        return "model.pt"
    return shards[-1][1] if shards else sorted(names)[0]


def shape(kind: str, fault: FaultSpec) -> Shape:
    """The proxy's shape for a storage fault."""
    mode = Mode.SLOW if kind == "torn_checkpoint" else SHAPES[kind]
    kbps = fault.bandwidth_kbps
    if kind == "torn_checkpoint" and kbps <= 0:
        kbps = 100.0  # slow enough that an upload is caught half way
    return Shape(
        mode=mode,
        latency_s=fault.latency_ms / 1000,
        bandwidth_bps=kbps * 1000 if kbps > 0 else None,
    )


def _corrupt(state: FaultState, f: Firing) -> None:
    # Done before it is marked fired: the runtime reads the checkpoint the moment
    # it sees the mark (a restore), so the bytes must be bad by then. Idempotent,
    # so firing it again after a crash right here changes nothing.
    f.detail["corrupted"] = corrupt_newest(state.stores(), state.run_id)


def _shaped(state: FaultState, f: Firing) -> None:
    kind, fault, cluster = f.kind, f.fault, f.cluster
    region = fault.region or (cluster.region if cluster else "")
    proxy = state.proxies[region]
    chosen = shape(kind, fault)
    proxy.set(chosen)
    duration = fault.duration_s
    if duration > 0 and kind != "torn_checkpoint":
        state.later(duration, _heal, state, f.index, kind, region)
    if kind == "torn_checkpoint":
        assert cluster is not None
        store = next(s for s in state.stores() if s.region == region)
        threading.Thread(
            target=_tear,
            args=(state, f.index, store, proxy, cluster),
            daemon=True,
            name="torn-checkpoint",
        ).start()
    f.detail.update({"region": region, "mode": str(chosen.mode), "duration_s": duration or None})


def _heal(state: FaultState, index: int, kind: str, region: str) -> None:
    state.proxies[region].set(Shape())
    state.say(FaultEnded(index, kind, region=region))


def _tear(state: FaultState, index: int, store: CheckpointStore, proxy: FaultProxy, cluster: ClusterHandle) -> None:
    """Wait for an upload caught half way (files, no manifest), then kill the region."""
    deadline = time.time() + TORN_WAIT_S
    committed = set(store.committed_steps(state.run_id))
    torn = None
    while time.time() < deadline and torn is None:
        try:
            steps = store.all_steps(state.run_id)
        except Exception:  # the store is slowed, not down; try again
            steps = {}
        newest = max(committed, default=0)
        for step, has_manifest in steps.items():
            if not has_manifest and step > newest and _has_files(store, state.run_id, step):
                torn = step
        time.sleep(0.05)
    if torn is None:
        state.say(FaultFailed(index, "torn_checkpoint", "no upload seen"))
        proxy.set(Shape())
        return
    killed = sigkill(state.provider.processes(cluster))
    state.killed[cluster.name] = time.time()
    proxy.set(Shape())
    detail = {"torn_step": torn, "killed": len(killed), "region": cluster.region, "stage": "kill"}
    state.say(FaultInjected("torn_checkpoint", index=index, extra=detail))


def _has_files(store: CheckpointStore, run_id: str, step: int) -> bool:
    try:
        return bool(store.fs.ls(store.step_path(run_id, step), detail=False))
    except Exception:
        return False


HANDLERS: dict[FaultKind, Handler] = {
    FaultKind.corrupt_checkpoint: Handler(_corrupt, needs_cluster=False, before_mark=True),
    FaultKind.storage_outage: Handler(_shaped, needs_cluster=False),
    FaultKind.storage_hang: Handler(_shaped, needs_cluster=False),
    FaultKind.storage_slow: Handler(_shaped, needs_cluster=False),
    FaultKind.torn_checkpoint: Handler(_shaped, needs_cluster=False),
}
