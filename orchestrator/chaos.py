"""The fault injector: real faults, fired once per run at the step the config names.

The runtime's training loop reaches a fault's step and posts a request on the
control channel (rank, pid, step), then waits; the injector, in the controller,
carries the fault out and marks it fired. The rendezvous makes the step exact;
the faults themselves are real (SIGKILL, bytes flipped on disk).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

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


class FaultInjector:
    def __init__(
        self,
        faults: list[dict[str, object]],
        control: ControlChannel,
        provider: Provider,
        stores: Callable[[], list[CheckpointStore]],
        run_id: str,
    ) -> None:
        self.faults = faults
        self.control = control
        self.provider = provider
        self.stores = stores
        self.run_id = run_id

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
        elif kind == "kill_worker":
            pid = int(req["pid"])  # type: ignore[call-overload]
            detail = {"region": cluster.region, "rank": req.get("rank"), "killed": len(_sigkill([pid]))}
        elif kind == "corrupt_checkpoint":
            detail = {"corrupted": corrupt_newest(self.stores(), self.run_id)}
        elif kind == "user_error":
            # The workload itself raises at this step (see the runtime's chaos hook).
            detail = {"region": cluster.region, "rank": req.get("rank")}
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        return Injected(index=index, kind=kind, step=step, at=now, detail=detail)
