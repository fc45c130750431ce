"""The fault injector: real faults, fired when their trigger comes (``orchestrator.wire.triggers``).

Runtime-side triggers: the training loop reaches a fault's step (or an upload, or
a restore) and posts a request on the control channel (rank, pid, step, seq),
then waits; the injector, in the controller, carries the fault out and marks it
fired. The rendezvous makes the step exact. Controller-side triggers (seconds
into an attempt, provisioning, a failover) fire from the controller's own loop.
The faults themselves are real: signals to real processes, bytes flipped in real
stores, a full filesystem, a controller killed with SIGKILL. How each kind strikes is
its handler's (``handlers``, by family: ``processes``, ``storage``, ``disk``, ``network``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.chaos.disk import release_scratch
from orchestrator.chaos.firing import FaultState, Firing
from orchestrator.chaos.handlers import handler_for
from orchestrator.chaos.proxy import FaultProxy, Shape
from orchestrator.runstate.events import Event, FaultEnded, FaultInjected, FaultRefused
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.schema import ChaosRequest
from orchestrator.wire.sections import FaultSpec
from orchestrator.wire.triggers import due_after, due_during, exhausted, in_region
from providers.base import ClusterHandle, Provider
from recovery.detection import Health, HealthCheck
from recovery.store import CheckpointStore


class FlappedCheck(RuntimeError):
    """A health check failed by chaos status_flap (as a provider's call can fail)."""


@dataclass(frozen=True)
class Injected:
    index: int
    kind: str
    step: int
    at: float
    detail: dict[str, object]
    said: bool = False

    def event(self) -> FaultInjected:
        """The journal's ``fault_injected`` for a fault the controller carried out."""
        return FaultInjected(self.kind, index=self.index, step=self.step, extra=dict(self.detail))

    def text(self) -> str:
        return fault_text(self.kind, self.step, self.detail)


def fault_text(kind: str, step: int | None, detail: Mapping[str, object]) -> str:
    """The terminal's line for a fault that fired (the foreground run's, and action=watch's
    from its fault_injected): the step it struck at, and what set it off when that was not
    the step (a time into training, a phase, a drill)."""
    if detail.get("during"):
        return f"{kind} ({detail['during']})"
    if step is None:
        return kind
    if detail.get("trigger") == "after_s":
        return f"{kind} at step {step} (timed: after_s)"
    if detail.get("trigger") == "drill":
        return f"{kind} at step {step} (drill)"
    return f"{kind} at step {step}"


def request_problem(req: ChaosRequest, generation: int | None) -> str | None:
    """Why a runtime's request must not fire on the attempt of ``generation``, or None.
    A newer generation's request (a standby's, not yet active) just waits."""
    if generation is not None and req.generation < generation:
        return f"posted by generation {req.generation}, an older attempt than generation {generation}"
    return None


class FaultInjector:
    def __init__(
        self,
        faults: list[dict[str, Any]] | list[FaultSpec],
        control: ControlChannel,
        provider: Provider,
        stores: Callable[[], list[CheckpointStore]],
        run_id: str,
        proxies: dict[str, FaultProxy] | None = None,
        on_event: Callable[[Event], object] | None = None,
        run_dir: str | None = None,
    ) -> None:
        # The config's faults (validated there), typed as the runtime gets them.
        self.faults = [FaultSpec.from_plain(f, f"chaos.faults[{i}]") for i, f in enumerate(faults)]
        self.control = control
        self.state = FaultState(provider, stores, run_id, proxies or {}, on_event or (lambda event: None), run_dir)
        self._timed: set[tuple[int, int]] = set()  # (fault, generation) fired by after_s
        self._refused: set[tuple[int, int, int]] = set()  # (fault, seq, generation) journaled once

    def unreachable_until(self, cluster: ClusterHandle) -> float:
        """Until when a partitioned cluster cannot be reached, so not torn down either."""
        return self.state.unreachable.get(cluster.name, 0.0)

    def health(self, cluster: ClusterHandle, check: Callable[[], HealthCheck]) -> HealthCheck:
        """The provider's health check of ``cluster`` (``check``), unless a status_flap is
        failing it: then, in turn, an answer that is not UP and a check that raises (the
        two ways a real one fails), until the fault's ``count`` is spent."""
        flaps = self.state.flaps
        flap = flaps.get(cluster.name)
        if flap is None:
            return check()
        index, left = flap
        count = self.faults[index].count
        if left > 1:
            flaps[cluster.name] = (index, left - 1)
        else:
            del flaps[cluster.name]
            self.state.say(FaultEnded(index, "status_flap", region=cluster.region))
        nth = count - left + 1
        if nth % 2 == 0:
            raise FlappedCheck(f"chaos status_flap: health check {nth} of {count} failed")
        return HealthCheck(Health.NOT_UP, time.time(), f"chaos status_flap: health check {nth} of {count} not UP")

    def region_killed_at(self, cluster: ClusterHandle) -> float | None:
        return self.state.killed.get(cluster.name)

    def release(self, cluster: ClusterHandle) -> None:
        """Before a cluster's teardown: undo what would outlive it (a mounted filesystem)."""
        path = self.state.mounts.pop(cluster.name, None)
        if path is not None:
            release_scratch(path)

    def close(self) -> None:
        for t in self.state.timers:
            t.cancel()
        for proxy in self.state.proxies.values():
            proxy.set(Shape())
        for path in self.state.mounts.values():
            release_scratch(path)
        self.state.mounts.clear()

    # --- the triggers ----------------------------------------------------------------
    def poll(
        self,
        cluster: ClusterHandle,
        runtime_pid: int | None = None,
        generation: int | None = None,
        before_fire: Callable[[], None] | None = None,
    ) -> list[Injected]:
        """Answer the runtime's requests (a step, an upload, a restore reached) posted by
        the attempt of ``generation``: an older attempt's are refused, and journaled once.
        ``before_fire``: called once before the first fault fires."""
        if not self.faults:
            return []
        fired: list[Injected] = []
        for index, req in sorted(self.control.chaos_requests().items()):
            if index >= len(self.faults):
                continue
            if self.control.fired_count(index) >= req.seq:
                continue
            if generation is not None and req.generation > generation:
                continue  # a standby's, before its activation: its own watch answers it
            problem = request_problem(req, generation)
            if problem is not None:
                self._refuse(index, req, problem)
                continue
            if before_fire is not None and not fired:
                before_fire()
            fired.append(self._fire(index, asdict(req), cluster, runtime_pid, req.seq))
        return fired

    def _refuse(self, index: int, req: ChaosRequest, reason: str) -> None:
        key = (index, req.seq, req.generation)
        if key in self._refused:
            return
        self._refused.add(key)
        self.state.say(FaultRefused(index, reason, seq=req.seq, request_generation=req.generation))

    def timed(
        self,
        cluster: ClusterHandle,
        runtime_pid: int | None,
        generation: int,
        training_for_s: float | None,
        step: int = 0,
    ) -> list[Injected]:
        """``after_s`` faults: once per attempt, that many seconds into its training.
        ``step``: the newest step the controller knows done, which is where it strikes
        as far as anyone can tell (the workers are not stopped at a step for it)."""
        fired = []
        for index, fault in enumerate(self.faults):
            if (index, generation) in self._timed or not due_after(fault, training_for_s):
                continue
            if not in_region(fault, cluster.region):
                continue
            count = self.control.fired_count(index)
            if exhausted(fault, count):
                continue
            self._timed.add((index, generation))
            req = {"step": step, "generation": generation, "trigger": "after_s"}
            fired.append(self._fire(index, req, cluster, runtime_pid, count + 1))
        return fired

    def drill(
        self,
        fault: FaultSpec,
        cluster: ClusterHandle,
        runtime_pid: int | None,
        generation: int,
        step: int,
        victim: tuple[int, int] | None = None,
    ) -> Injected:
        """action=drill: ``fault`` (checked by its reader) on the running attempt now, as a
        fault of its own after the config's (its own index: it fires once). ``victim``: a
        kill_worker's (rank, pid), from the group's last train_started."""
        self.faults.append(fault)
        index = len(self.faults) - 1
        req: dict[str, object] = {"step": step, "generation": generation, "trigger": "drill"}
        if victim is not None:
            req["rank"], req["pid"] = victim
        return self._fire(index, req, cluster, runtime_pid, self.control.fired_count(index) + 1)

    def at_point(self, point: str, cluster: ClusterHandle | None, region: str, step: int) -> list[Injected]:
        """Controller-side points: ``provisioning`` (a cluster just up, nothing on it
        yet, not journaled) and ``failover`` (the decision made, nothing launched)."""
        fired = []
        for index, fault in enumerate(self.faults):
            if not due_during(fault, point) or not in_region(fault, region):
                continue
            count = self.control.fired_count(index)
            if exhausted(fault, count):
                continue
            req = {"step": step, "during": point}
            fired.append(self._fire(index, req, cluster, None, count + 1))
        return fired

    # --- the faults ---------------------------------------------------------------------
    def _fire(
        self,
        index: int,
        req: dict[str, object],
        cluster: ClusterHandle | None,
        runtime_pid: int | None,
        seq: int,
    ) -> Injected:
        fault = self.faults[index]
        kind = str(fault.kind)
        handler = handler_for(kind)
        step = int(req.get("step", 0))  # type: ignore[call-overload]
        firing = Firing(index, kind, fault, req, cluster, runtime_pid, step, at=time.time(), detail={"seq": seq})
        if req.get("during"):
            firing.detail["during"] = req["during"]
        if req.get("trigger"):
            firing.detail["trigger"] = req["trigger"]
        if handler.needs_cluster:
            firing.detail["region"] = firing.on.region
        first = handler.strikes_first(self.state.provider)
        if first:
            handler.strike(self.state, firing)
        # Marked fired before it happens: a fault must never fire twice, even if we die here.
        self.control.chaos_fired(index, count=seq, kind=kind, step=step)
        if not first:
            handler.strike(self.state, firing)
        return Injected(index=index, kind=kind, step=step, at=firing.at, detail=firing.detail, said=firing.said)
