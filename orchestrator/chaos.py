"""The fault injector: real faults, fired once per run at the step the config names.

The runtime's training loop reaches a fault's step and posts a request on the
control channel (rank, pid, step), then waits; the injector, in the controller,
carries the fault out and marks it fired. The rendezvous makes the step exact;
the faults themselves are real (SIGKILL, bytes flipped on disk).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.faultproxy import FaultProxy, Mode, Shape
from orchestrator.runtime.control import ControlChannel
from providers.base import ClusterHandle, Provider
from recovery.store import CheckpointStore


@dataclass(frozen=True)
class Injected:
    index: int
    kind: str
    step: int
    at: float
    detail: dict[str, object]


def _signal(pids: list[int], sig: int) -> list[int]:
    done = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            done.append(pid)
        except ProcessLookupError:
            pass
    return done


def _sigkill(pids: list[int]) -> list[int]:
    return _signal(pids, signal.SIGKILL)


def flip_byte(store: CheckpointStore, run_id: str, step: int, name: str = "model.pt") -> None:
    path = f"{store.step_path(run_id, step)}/{name}"
    data = bytearray(store.fs.cat_file(path))
    data[len(data) // 2] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))


def corrupt_newest(stores: list[CheckpointStore], run_id: str) -> dict[str, int]:
    """Flip a byte of the run's newest committed checkpoint in every store holding it.

    A store that has not received it yet never will: replication verifies its source.
    """
    held = {s.region: s.committed_steps(run_id) for s in stores}
    newest = max((steps[-1] for steps in held.values() if steps), default=None)
    if newest is None:
        return {}
    done = {}
    for store in stores:
        if newest in held[store.region]:
            flip_byte(store, run_id, newest)
            done[store.region] = newest
    return done


_STORAGE_SHAPES = {"storage_outage": Mode.REFUSE, "storage_hang": Mode.BLACKHOLE, "storage_slow": Mode.SLOW}
TORN_WAIT_S = 60.0
# After a partition heals, the zombie runs this long before the control plane reaches it again.
ZOMBIE_WINDOW_S = 8.0


def _shape(kind: str, fault: dict[str, Any]) -> Shape:
    mode = Mode.SLOW if kind == "torn_checkpoint" else _STORAGE_SHAPES[kind]
    kbps = float(fault.get("bandwidth_kbps") or 0)
    if kind == "torn_checkpoint" and kbps <= 0:
        kbps = 100.0  # slow enough that an upload is caught half way
    return Shape(
        mode=mode,
        latency_s=float(fault.get("latency_ms") or 0) / 1000,
        bandwidth_bps=kbps * 1000 if kbps > 0 else None,
    )


class FaultInjector:
    def __init__(
        self,
        faults: list[dict[str, Any]],
        control: ControlChannel,
        provider: Provider,
        stores: Callable[[], list[CheckpointStore]],
        run_id: str,
        proxies: dict[str, FaultProxy] | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.faults = faults
        self.control = control
        self.provider = provider
        self.stores = stores
        self.run_id = run_id
        self.proxies = proxies or {}
        self.on_event = on_event or (lambda type_, fields: None)
        self._timers: list[threading.Timer] = []
        self._killed: dict[str, float] = {}  # cluster name -> when a background fault killed it
        self._unreachable: dict[str, float] = {}  # cluster name -> end of its partition

    def unreachable_until(self, cluster: ClusterHandle) -> float:
        """Until when a partitioned cluster cannot be reached, so not torn down either."""
        return self._unreachable.get(cluster.name, 0.0)

    def _resume(self, index: int, pids: list[int], cluster: ClusterHandle) -> None:
        resumed = _signal(pids, signal.SIGCONT)
        self.on_event(
            "fault_ended",
            {"index": index, "kind": "partition_region", "region": cluster.region, "resumed": len(resumed)},
        )

    def region_killed_at(self, cluster: ClusterHandle) -> float | None:
        return self._killed.get(cluster.name)

    def close(self) -> None:
        for t in self._timers:
            t.cancel()
        for proxy in self.proxies.values():
            proxy.set(Shape())

    def poll(self, cluster: ClusterHandle) -> list[Injected]:
        if not self.faults:
            return []
        fired = []
        for index, req in sorted(self.control.chaos_requests().items()):
            if index >= len(self.faults) or self.control.is_fired(index):
                continue
            fired.append(self._fire(index, str(self.faults[index]["kind"]), req, cluster))
        return fired

    def _fire(self, index: int, kind: str, req: dict[str, object], cluster: ClusterHandle) -> Injected:
        step = int(req.get("step", 0))  # type: ignore[call-overload]
        now = time.time()
        detail: dict[str, object] = {}
        # Marked fired before it happens: a fault must never fire twice, even if we die here.
        self.control.chaos_fired(index, kind=kind, step=step)
        if kind == "kill_region":
            # One pass: with the head and raylet gone nothing spawns again, and the
            # controller's teardown sweeps whatever is left.
            killed = _sigkill(self.provider.processes(cluster))
            now = time.time()
            detail = {"region": cluster.region, "killed": len(set(killed))}
        elif kind == "hang_region":
            # Every process stopped, sockets still open: only the heartbeat lease can tell.
            stopped = _signal(self.provider.processes(cluster), signal.SIGSTOP)
            now = time.time()
            detail = {"region": cluster.region, "stopped": len(stopped)}
        elif kind == "partition_region":
            # Stopped like hang_region, then resumed: a zombie that the control plane
            # cannot reach (nor tear down) for a while, and that will try to write.
            pids = self.provider.processes(cluster)
            stopped = _signal(pids, signal.SIGSTOP)
            now = time.time()
            duration = float(self.faults[index].get("duration_s") or 5.0)
            self._unreachable[cluster.name] = now + duration + ZOMBIE_WINDOW_S
            timer = threading.Timer(duration, self._resume, args=(index, pids, cluster))
            timer.daemon = True
            timer.start()
            self._timers.append(timer)
            detail = {"region": cluster.region, "stopped": len(stopped), "duration_s": duration}
        elif kind == "kill_worker":
            pid = int(req["pid"])  # type: ignore[call-overload]
            detail = {"region": cluster.region, "rank": req.get("rank"), "killed": len(_sigkill([pid]))}
        elif kind == "corrupt_checkpoint":
            detail = {"corrupted": corrupt_newest(self.stores(), self.run_id)}
        elif kind == "user_error":
            # The workload itself raises at this step (see the runtime's chaos hook).
            detail = {"region": cluster.region, "rank": req.get("rank")}
        elif kind in _STORAGE_SHAPES or kind == "torn_checkpoint":
            fault = self.faults[index]
            region = str(fault.get("region") or cluster.region)
            proxy = self.proxies[region]
            shape = _shape(kind, fault)
            proxy.set(shape)
            duration = float(fault.get("duration_s") or 0)
            if duration > 0 and kind != "torn_checkpoint":
                timer = threading.Timer(duration, self._heal, args=(index, kind, region))
                timer.daemon = True
                timer.start()
                self._timers.append(timer)
            if kind == "torn_checkpoint":
                store = next(s for s in self.stores() if s.region == region)
                threading.Thread(
                    target=self._tear,
                    args=(index, store, proxy, cluster),
                    daemon=True,
                    name="torn-checkpoint",
                ).start()
            detail = {"region": region, "mode": str(shape.mode), "duration_s": duration or None}
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        return Injected(index=index, kind=kind, step=step, at=now, detail=detail)

    def _heal(self, index: int, kind: str, region: str) -> None:
        self.proxies[region].set(Shape())
        self.on_event("fault_ended", {"index": index, "kind": kind, "region": region})

    def _tear(self, index: int, store: CheckpointStore, proxy: FaultProxy, cluster: ClusterHandle) -> None:
        """Wait for an upload caught half way (files, no manifest), then kill the region."""
        deadline = time.time() + TORN_WAIT_S
        committed = set(store.committed_steps(self.run_id))
        torn = None
        while time.time() < deadline and torn is None:
            try:
                steps = store.all_steps(self.run_id)
            except Exception:  # the store is slowed, not down; try again
                steps = {}
            newest = max(committed, default=0)
            for step, has_manifest in steps.items():
                if not has_manifest and step > newest and _has_files(store, self.run_id, step):
                    torn = step
            time.sleep(0.05)
        if torn is None:
            self.on_event("fault_failed", {"index": index, "kind": "torn_checkpoint", "reason": "no upload seen"})
            proxy.set(Shape())
            return
        killed = _sigkill(self.provider.processes(cluster))
        self._killed[cluster.name] = time.time()
        proxy.set(Shape())
        self.on_event(
            "fault_injected",
            {
                "index": index,
                "kind": "torn_checkpoint",
                "torn_step": torn,
                "killed": len(killed),
                "region": cluster.region,
                "stage": "kill",
            },
        )


def _has_files(store: CheckpointStore, run_id: str, step: int) -> bool:
    try:
        return bool(store.fs.ls(store.step_path(run_id, step), detail=False))
    except Exception:
        return False
