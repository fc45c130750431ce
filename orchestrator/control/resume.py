"""``action=resume``: a new controller picks up a run whose controller died.

It rebuilds the state from the journal (``orchestrator.runstate.replay``), tears down
every cluster the journal (or the provider's records) shows alive except the
attempt it can adopt, and never starts an attempt while another may still train.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil

from orchestrator.control.cleanup import tear_down
from orchestrator.control.context import RunContext
from orchestrator.control.naming import candidate_names
from orchestrator.runstate.events import Event, RuntimeReport
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.replay import Replayed
from orchestrator.runstate.rundir import attempt_dir
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle
from recovery.detection import Health


class AdoptedProcess:
    """A runtime driver this controller did not start: its exit code comes from the
    control channel (the driver writes it last), its liveness from the process table."""

    def __init__(self, pid: int, control: ControlChannel, generation: int) -> None:
        self.pid = pid
        self.control = control
        self.generation = generation

    def poll(self) -> int | None:
        code = self.control.read_exit(self.generation)
        if code is not None:
            return code
        if _alive(self.pid):
            return None
        code = self.control.read_exit(self.generation)  # written just before it exited?
        return -9 if code is None else code


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


@dataclass
class Adoption:
    generation: int
    region: str
    cluster: ClusterHandle
    pid: int
    restored_step: int | None
    # (kind, time) of the runtime events the crashed controller journaled already.
    journaled: frozenset[tuple[str, float]] = field(default_factory=frozenset)


def journaled_runtime_events(events: Iterable[Event], generation: int) -> frozenset[tuple[str, float]]:
    """What a crashed controller journaled of an attempt's runtime events: the watch
    that adopts the attempt reads its control channel from the start and skips these."""
    return frozenset(
        (e.kind, float(e.fields["time"]))
        for e in events
        if isinstance(e, RuntimeReport)
        and e.fields.get("by") == "runtime"
        and e.fields.get("generation") == generation
        and isinstance(e.fields.get("time"), int | float)
    )


def handle_of(ctx: RunContext, provisioned: dict[str, Any]) -> ClusterHandle:
    name = str(provisioned["cluster"])
    found = ctx.provider.find(name)
    if found is not None:
        return found  # the provider's record is the newest (runtime pids included)
    return ClusterHandle(
        name, str(provisioned["region"]), ctx.provider.name, str(provisioned["address"]), provisioned.get("info", {})
    )


def cluster_gone(ctx: RunContext, op: Any) -> str | None:
    """Why the open attempt's cluster is gone for sure (its provider's word), or None: it
    is up, or cannot be told, or there was none. A resumed controller that finds it gone
    lost the region too, not only its predecessor."""
    if op is None or op.cluster is None:
        return None
    try:
        check = ctx.provider.health(handle_of(ctx, op.cluster))
    except Exception:
        return None
    return (check.detail or "its cluster is gone") if check.health is Health.GONE else None


def sweep_and_adopt(ctx: RunContext, rp: Replayed, may_adopt: bool = True) -> Adoption | None:
    """Tear down everything left running but the open attempt, which is adopted if
    its cluster is healthy and its driver alive, or if its driver has ended and said
    how; otherwise it is torn down too. An interrupted run adopts nothing (``may_adopt``):
    it was stopped on purpose, and goes on in a new attempt."""
    adopt: Adoption | None = None
    op = rp.open_attempt
    if may_adopt and op is not None and op.cluster is not None and op.runtime_pid is not None:
        handle = handle_of(ctx, op.cluster)
        # Still training, or already ended with a word (success, preemption, user error):
        # either way the attempt's own outcome stands and the watch takes it from there.
        ended = ctx.control.read_exit(op.generation) is not None
        # A check that is not UP once is no reason to end an attempt still training: the
        # watch that adopts it judges the cluster as any watch does (hysteresis).
        if ended or (_alive(op.runtime_pid) and ctx.provider.health(handle).health is not Health.GONE):
            adopt = Adoption(op.generation, op.region, handle, op.runtime_pid, op.restored_step)
    for name, provisioned in rp.leftover.items():
        if adopt is not None and name == adopt.cluster.name:
            continue
        gen = provisioned.get("generation")
        why = "left running by the crashed controller"
        _teardown(ctx, handle_of(ctx, provisioned), why, gen if isinstance(gen, int) else None)
    journaled = set(rp.leftover) | ({adopt.cluster.name} if adopt is not None else set())
    for region, gen in rp.launching:
        # Its name depended on what the run held then: look under each it may have had.
        for name in candidate_names(ctx.run_id, region, gen):
            handle = None if name in journaled else ctx.provider.find(name)
            if handle is not None:
                _teardown(ctx, handle, "launched by the crashed controller, never journaled")
    return adopt


def _teardown(ctx: RunContext, handle: ClusterHandle, why: str, generation: int | None = None) -> None:
    # A cluster of a known attempt keeps its ranks' logs in the attempt's folder first.
    logs_to = None if generation is None else attempt_dir(ctx.run_dir, generation)
    tear_down(ctx.provider, ctx.emit, handle, reason=why, logs_to=logs_to, generation=generation)


def crash_incident(rp: Replayed, region: str, generation: int, now: float, last_step: int) -> Incident:
    """The controller's death as an incident: from its last journaled sign of life."""
    return Incident(
        kind="controller_lost",
        from_region=region,
        to_region=region,
        failed_at=rp.last_ts,
        detected_at=now,
        last_step=last_step,
        generation=generation,
    )
