"""``action=resume``: a new controller picks up a run whose controller died or was stopped,
on the run's own machine or, once a takeover rebuilt its folder from the control store's
mirror (``takeover``), on another: from there the two are one path.

Three parts. ``look``: what the journal cannot tell and the world can, read with nothing
changed (the open attempt's cluster as the provider has it, its health, its driver, its
exit word, its newest progress). ``plan``: pure, the journal as the dead controller left it
(folded) and that look in, one small outcome out: ``Finish``, ``Adopt``, ``Restart`` or
``Recover``, each carrying what it needs. The controller carries the outcome out in one
place (``Controller.resume``): ``sweep`` tears down everything left running but the
attempt it adopts, the outcome's events are journaled, and the control loop goes on. No
attempt starts while another may still train.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import psutil

from orchestrator.control.cleanup import tear_down
from orchestrator.control.context import RunContext
from orchestrator.control.naming import candidate_names
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.events import AttemptEnded, Event, RuntimeReport
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.replay import incident_from
from orchestrator.runstate.rundir import attempt_dir
from orchestrator.runstate.state import AttemptView, RunView
from orchestrator.wire.control import ControlChannel
from providers.base import ClusterHandle
from recovery.detection import Failure, FailureKind, Health, HealthCheck
from recovery.policy import Action, Decision

# A dead controller, as an incident's kind and a transition's failure.
CONTROLLER_LOST = str(FailureKind.CONTROLLER_LOST)


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


@dataclass(frozen=True)
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


# --- look: what the world says of the open attempt ---------------------------------------------


@dataclass(frozen=True)
class Found:
    """What the world says of the attempt the journal shows open (all empty when none is)."""

    now: float
    cluster: ClusterHandle | None = None  # its cluster, as the provider has it (else as journaled)
    health: HealthCheck | None = None  # its cluster's health check; None: none made, or it raised
    exit_word: bool = False  # its driver wrote how it ended
    alive: bool = False  # its driver's process lives
    progress_step: int | None = None  # the step its newest progress report names
    # Its runtime events the dead controller journaled already (journaled_runtime_events).
    journaled: frozenset[tuple[str, float]] = frozenset()

    @property
    def gone(self) -> str | None:
        """Why its cluster is gone for sure (the provider's word), or None: it is up, or
        cannot be told. A resumed controller that finds it gone lost the region too."""
        if self.health is None or self.health.health is not Health.GONE:
            return None
        return self.health.detail or "its cluster is gone"


def look(ctx: RunContext, view: RunView, journal: Iterable[Event], now: Callable[[], float]) -> Found:
    """What the world says of ``view``'s open attempt: reads only, nothing torn down."""
    op = view.open_attempt
    if op is None:
        return Found(now=now())
    cluster = None if op.cluster is None else handle_of(ctx, to_json(op.cluster))
    health = None
    if cluster is not None:
        try:
            health = ctx.provider.health(cluster)
        except Exception:
            health = None  # cannot tell: as a watch takes a check that raised
    progress = ctx.control.read_progress(op.generation)
    return Found(
        now=now(),
        cluster=cluster,
        health=health,
        exit_word=ctx.control.read_exit(op.generation) is not None,
        alive=op.runtime_pid is not None and _alive(op.runtime_pid),
        progress_step=None if progress is None else progress.step,
        journaled=journaled_runtime_events(journal, op.generation),
    )


# --- plan: pure, one outcome ---------------------------------------------------------------------


@dataclass(frozen=True)
class Finish:
    """The run had its verdict when its controller died: only its result is left to
    write, with the final report of ``generation``'s attempt when it succeeded."""

    generation: int
    succeeded: bool


@dataclass(frozen=True)
class Adopt:
    """The open attempt still trains, or ended saying how: watched on to its end. The
    controller's death is an incident recorded at once (``crash``: the attempt trained on,
    nothing restored, nothing lost); ``pending``: the incident the attempt recovers from."""

    adoption: Adoption
    pending: Incident | None
    crash: Incident

    @property
    def region(self) -> str:
        return self.adoption.region


@dataclass(frozen=True)
class Restart:
    """A new attempt in ``region``: the run was stopped, or its controller died between
    two attempts. ``ended``: an attempt a stop caught mid-launch, ended as interrupted;
    ``stopped``: the stop's result.json is withdrawn first."""

    region: str
    pending: Incident | None
    ended: AttemptEnded | None = None
    stopped: bool = False


@dataclass(frozen=True)
class Recover:
    """The open attempt went with its controller: it ends (``controller_lost``), the
    controller's death opens an incident unless one was open (``opened``), and the run
    recovers in ``incident.to_region``: the attempt's own region, or where the policy
    fails over (``decided``) when its cluster was found gone. ``recovering``: the run was
    RUNNING or PROVISIONING, and moves to RECOVERING."""

    ended: AttemptEnded
    incident: Incident
    opened: bool
    decided: tuple[Failure, Decision] | None
    recovering: bool

    @property
    def region(self) -> str:
        return str(self.incident.to_region)


Outcome = Finish | Adopt | Restart | Recover
Decide = Callable[[Failure, float], Decision]


def plan(view: RunView, found: Found, candidates: list[str], first_region: str, decide: Decide) -> Outcome:
    """What a resumed controller does with the run ``view`` folds its journal to (as the
    dead controller left it) and what ``found`` says of its open attempt. ``decide``: the
    failure policy, with the run's history bound (pure)."""
    if view.state.terminal:
        last = view.attempts[-1] if view.attempts else None
        return Finish(last.generation if last is not None else view.generation, view.state is RunState.SUCCEEDED)
    op = view.open_attempt
    pending = None if view.pending is None else incident_from(view.pending)
    last_step = max(view.last_step, found.progress_step or 0)
    if view.state is RunState.INTERRUPTED:
        # Stopped on purpose: nothing is adopted, and a launch it caught is ended.
        ended = None if op is None else ended_event(op, found.now, last_step, "interrupted")
        return Restart(resumed_region(view, candidates, first_region), pending, ended, stopped=True)
    adoption = adoption_of(view, found)
    if adoption is not None:
        crash = crash_incident(view, adoption.region, adoption.generation, found.now, last_step)
        return Adopt(adoption, pending, replace(crash, restored_step=last_step, first_step_at=found.now))
    if op is not None:
        # The open attempt is gone (or was never up): ended, and recovered from in its region.
        incident = pending or crash_incident(view, op.region, op.generation, found.now, last_step)
        decided = None
        if pending is None and found.gone is not None:
            # Its region went too while no controller ran: decided as the watch would have.
            failure = Failure(FailureKind.CLUSTER_LOST, op.region, f"found gone on resume: {found.gone}")
            decision = decide(failure, found.now)
            decided = (failure, decision)
            # The policy giving up on failing over leaves the run where it was, as a resume always did.
            to = op.region if decision.action is Action.GIVE_UP or not decision.region else decision.region
            incident = replace(incident, to_region=to)
        return Recover(
            ended=ended_event(op, found.now, last_step, CONTROLLER_LOST),
            incident=incident,
            opened=pending is None,
            decided=decided,
            recovering=view.state in (RunState.RUNNING, RunState.PROVISIONING),
        )
    region = view.next_region if view.state is RunState.RECOVERING and view.next_region else first_region
    return Restart(region, pending)


def adoption_of(view: RunView, found: Found) -> Adoption | None:
    """The open attempt, if it may be adopted: its cluster and driver journaled, and the
    driver still alive on a cluster not gone for sure, or already ended with a word (a
    success, a preemption, a user error): either way the attempt's own outcome stands and
    the watch takes it from there. A check that is not UP once is no reason to end an
    attempt still training: the watch that adopts it judges the cluster as any watch does."""
    op = view.open_attempt
    if op is None or op.cluster is None or op.runtime_pid is None or found.cluster is None:
        return None
    if not found.exit_word and not (found.alive and found.gone is None):
        return None
    return Adoption(op.generation, op.region, found.cluster, op.runtime_pid, op.restored_step, found.journaled)


def resumed_region(view: RunView, candidates: list[str], first_region: str) -> str:
    """Where a stopped run goes on: the failover it was in the middle of, else the region
    it was stopped in (while still a candidate), else the first candidate."""
    if view.pending is not None and view.next_region in candidates:
        return str(view.next_region)
    at = view.current_region
    return at if at is not None and at in candidates else first_region


def ended_event(op: AttemptView, now: float, last_step: int, outcome: str) -> AttemptEnded:
    return AttemptEnded(
        generation=op.generation,
        region=op.region,
        started_at=op.started_at,
        ended_at=now,
        restored_step=op.restored_step,
        last_step=last_step,
        outcome=outcome,
    )


def crash_incident(view: RunView, region: str, generation: int, now: float, last_step: int) -> Incident:
    """The controller's death as an incident: from its last journaled sign of life."""
    return Incident(
        kind=CONTROLLER_LOST,
        from_region=region,
        to_region=region,
        failed_at=view.last_ts,
        detected_at=now,
        last_step=last_step,
        generation=generation,
    )


# --- carried out: what is left running goes ------------------------------------------------------


def sweep(ctx: RunContext, view: RunView, keep: ClusterHandle | None = None) -> None:
    """Tear down every cluster the journal shows left running but ``keep`` (the attempt
    adopted), and any a launch the journal never saw finish may have left under a name
    its attempt could have had."""
    for name, provisioned in view.leftover.items():
        if keep is not None and name == keep.name:
            continue
        gen = provisioned.generation
        _teardown(ctx, handle_of(ctx, to_json(provisioned)), "left running by the crashed controller", gen)
    journaled = set(view.leftover) | ({keep.name} if keep is not None else set())
    for region, gen in view.launching:
        # Its name depended on what the run held then: look under each it may have had.
        for name in candidate_names(ctx.run_id, region, gen):
            handle = None if name in journaled else ctx.provider.find(name)
            if handle is not None:
                _teardown(ctx, handle, "launched by the crashed controller, never journaled")


def _teardown(ctx: RunContext, handle: ClusterHandle, why: str, generation: int | None = None) -> None:
    # A cluster of a known attempt keeps its ranks' logs in the attempt's folder first.
    logs_to = None if generation is None else attempt_dir(ctx.run_dir, generation)
    tear_down(ctx.provider, ctx.emit, handle, reason=why, logs_to=logs_to, generation=generation)
