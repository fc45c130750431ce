"""What the watch knows of one attempt, as a fold. Pure.

As the run's state is the journal folded (``orchestrator.runstate.state.apply``), the
watch's is what happened to the attempt folded: the runtime's reports (a restart, a user
error, a preemption, progress), the faults fired, the health checks looked at, and the
end. ``WatchState`` is frozen and ``apply`` returns a new one; ``judge`` is the verdict, a
pure function of that state and one look at the attempt (``Observation``). The watch's
loop (``orchestrator/control/watch.py``) reads, applies, and does what the verdict says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from orchestrator.runstate.events import FailureDetected, HealthGlitch
from orchestrator.runstate.incidents import Incident, first_step_time
from orchestrator.wire.schema import Event as RuntimeEvent
from recovery.detection import EXIT_OK, Failure, Health, Lease, Observation, classify, health_glitch


def step_after_report(known: int, reported: int, raised_since_restart: bool) -> int:
    """The last step known done once a progress report of ``reported`` is read. A fault or a
    preemption read since the worker group last (re)started moved ``known`` to the step it
    struck at; a report read after it was written before it (reports come every half
    second, faults and looks in between), so it cannot lower it. After a restart the
    reports count from the restored checkpoint again, and do."""
    return max(known, reported) if raised_since_restart else reported


# --- when the faults that date an incident struck -------------------------------------------------


@dataclass(frozen=True)
class FaultMark:
    at: float  # when it struck
    step: int | None = None  # the newest step known done then (None: not known, a notice's)


@dataclass(frozen=True)
class FaultMarks:
    """The faults an incident is dated by, each kept until the incident it dates takes it:
    a region's (the failure's time, in this order of preference), a worker's and a node's
    (their restart's failed_at and last step). Other kinds date nothing."""

    kill_region: FaultMark | None = None
    kill_head: FaultMark | None = None
    hang_region: FaultMark | None = None
    partition: FaultMark | None = None
    partition_region: FaultMark | None = None
    preempt: FaultMark | None = None
    kill_worker: FaultMark | None = None
    kill_node: FaultMark | None = None
    hang_node: FaultMark | None = None

    def struck(self, kind: str, mark: FaultMark) -> FaultMarks:
        """A fault of ``kind`` fired: its mark replaces that kind's earlier one."""
        return replace(self, **{kind: mark}) if kind in MARKED else self

    def noticed(self, at: float) -> FaultMarks:
        """A preemption notice: when the preemption began, unless a drill's injection,
        marked before the runtime relayed it, already says so (it is the earlier)."""
        return self if self.preempt is not None else replace(self, preempt=FaultMark(at))

    def region_fault_at(self) -> float | None:
        """When the region fault that may have ended the attempt struck: the first marked of
        ``REGION_FAULTS``' order."""
        marks = (
            self.kill_region,
            self.kill_head,
            self.hang_region,
            self.partition,
            self.partition_region,
            self.preempt,
        )
        return next((m.at for m in marks if m is not None), None)

    def take_node(self) -> tuple[FaultMark | None, FaultMarks]:
        """The node fault a lost node's restart is owed to (kill_node's before hang_node's), taken."""
        if self.kill_node is not None:
            return self.kill_node, replace(self, kill_node=None)
        if self.hang_node is not None:
            return self.hang_node, replace(self, hang_node=None)
        return None, self

    def take_worker(self) -> tuple[FaultMark | None, FaultMarks]:
        """The kill_worker a restart of the group in place is owed to, taken."""
        return self.kill_worker, replace(self, kill_worker=None)


MARKED = frozenset(f.name for f in fields(FaultMarks))


# --- what happened to the attempt (the fold's inputs) ---------------------------------------------


@dataclass(frozen=True)
class UserErrorReported:
    """The workload raised (the first rank's report is the attempt's)."""

    error: str
    step: int | None = None  # 0: before the first step
    site: str | None = None  # the user's file:line
    repeats: bool = False  # raised again when its step was run once more in its process


@dataclass(frozen=True)
class Preempted:
    step: int  # committed at this step: nothing after it was lost


@dataclass(frozen=True)
class PreemptionNoticed:
    at: float  # the cloud's (or Ray's) notice: when the preemption began


@dataclass(frozen=True)
class NodeLossSeen:
    """A lost node whose worker-group restart has no incident yet (the node watch's)."""

    node: int
    at: float  # detected
    last_step: int | None  # the newest step known done when it was detected
    world_before: int | None
    replace_s: float | None


@dataclass(frozen=True)
class TrainStarted:
    """The worker group (re)started from ``restored_step``; ``loss``: the node loss a
    restart is owed to, if one is still unrecorded."""

    at: float
    restored_step: int
    world: int | None = None
    loss: NodeLossSeen | None = None


@dataclass(frozen=True)
class Progressed:
    step: int
    at: float
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultFired:
    kind: str
    at: float
    step: int


@dataclass(frozen=True)
class IdleNodeLost:
    """A node that ran no worker was lost: no restart comes for it, so a node fault's
    mark is no later incident's (another fault's restart)."""


@dataclass(frozen=True)
class HealthLooked:
    at: float  # the provider's look (a check read again is not a new look)
    health: Health


@dataclass(frozen=True)
class FinalRead:
    """The runtime exited 0 with this final report (its word, unproven yet)."""

    final: Mapping[str, Any] | None
    final_step: int | None
    total_steps: int


@dataclass(frozen=True)
class FailureFound:
    failure: Failure
    detected_at: float
    failed_at: float


Happened = (
    UserErrorReported
    | Preempted
    | PreemptionNoticed
    | TrainStarted
    | Progressed
    | FaultFired
    | IdleNodeLost
    | HealthLooked
    | FinalRead
    | FailureFound
)


# --- the state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchState:
    generation: int
    region: str
    started: float  # when the watch began (the controller's clock)
    last_step: int  # the last step known done: moved by reports, faults and preemptions
    restored_step: int | None = None
    # The incident the attempt recovers from, as far as it got (its restore, once known),
    # and whether it was recorded (the attempt trained past its restore).
    pending: Incident | None = None
    pending_recorded: bool = False
    opened: tuple[Incident, ...] = ()  # the attempt's own restarts' incidents, not trained past yet
    recorded: tuple[Incident, ...] = ()  # incidents the attempt trained past, in that order
    train_starts: int = 0
    train_started_at: float | None = None
    world: int | None = None  # the world the group trains with (its last train_started)
    user_error: UserErrorReported | None = None
    faults: FaultMarks = FaultMarks()
    step_raised: bool = False  # a fault or preemption moved last_step since the group last started
    last_progress_at: float = 0.0
    failed_checks: int = 0  # health checks not UP in a row, one per look of the provider's
    last_look: float | None = None
    health: Health = Health.UP  # the newest look's
    # The end: success (the final report, unproven) or the failure, and when.
    succeeded: bool = False
    final: Mapping[str, Any] | None = None
    failure: Failure | None = None
    detected_at: float = 0.0
    failed_at: float | None = None


def start(
    generation: int,
    region: str,
    started: float,
    last_step: int = 0,
    restored_step: int | None = None,
    pending: Incident | None = None,
) -> WatchState:
    """The watch's state as an attempt begins: the step its predecessor knew done, the
    restore its stores were readied for, the incident it recovers from."""
    return WatchState(generation, region, started, last_step, restored_step, pending, last_progress_at=started)


def _user_error(s: WatchState, e: UserErrorReported) -> WatchState:
    return s if s.user_error is not None else replace(s, user_error=e)


def _preempted(s: WatchState, e: Preempted) -> WatchState:
    return replace(s, last_step=max(s.last_step, e.step), step_raised=True)


def _noticed(s: WatchState, e: PreemptionNoticed) -> WatchState:
    return replace(s, faults=s.faults.noticed(e.at))


def _train_started(s: WatchState, e: TrainStarted) -> WatchState:
    before = s.world
    s = replace(s, train_starts=s.train_starts + 1, step_raised=False, world=e.world)
    if s.train_starts == 1:
        pending = None if s.pending is None else replace(s.pending, restored_step=e.restored_step)
        return replace(s, train_started_at=e.at, restored_step=e.restored_step, pending=pending)
    loss = e.loss
    if loss is not None:
        # The worker group restarted after a node's loss: on its replacement, or on fewer workers.
        mark, faults = s.faults.take_node()
        last = mark.step if mark is not None and mark.step is not None else loss.last_step
        incident = Incident(
            kind="node_lost",
            from_region=s.region,
            to_region=s.region,
            failed_at=(mark.at if mark is not None else None) or loss.at,
            detected_at=loss.at,
            last_step=s.last_step if last is None else last,
            restored_step=e.restored_step,
            generation=s.generation,
            node=loss.node,
            world_size_before=loss.world_before if loss.world_before is not None else before,
            world_size_after=e.world,
            replace_s=loss.replace_s,
        )
        return replace(s, faults=faults, opened=(*s.opened, incident))
    # Ray Train restarted the worker group in place.
    mark, faults = s.faults.take_worker()
    incident = Incident(
        kind="worker_lost",
        from_region=s.region,
        to_region=s.region,
        failed_at=s.last_progress_at if mark is None else mark.at,
        detected_at=e.at,
        last_step=s.last_step if mark is None or mark.step is None else mark.step,
        restored_step=e.restored_step,
        generation=s.generation,
    )
    return replace(s, faults=faults, opened=(*s.opened, incident))


def _progressed(s: WatchState, e: Progressed) -> WatchState:
    if e.at == s.last_progress_at:
        return s  # only a new report moves the step: a fault's step can be newer

    def trained_past(inc: Incident) -> bool:
        return inc.restored_step is not None and e.step > inc.restored_step

    def closed(inc: Incident) -> Incident:
        assert inc.restored_step is not None
        return replace(inc, first_step_at=first_step_time(dict(e.fields), inc.restored_step, inc.failed_at, e.at))

    recorded = list(s.recorded)
    pending, pending_recorded = s.pending, s.pending_recorded
    if pending is not None and not pending_recorded and trained_past(pending):
        pending, pending_recorded = closed(pending), True
        recorded.append(pending)
    still: list[Incident] = []
    for inc in s.opened:
        if trained_past(inc):
            recorded.append(closed(inc))
        else:
            still.append(inc)
    return replace(
        s,
        last_step=step_after_report(s.last_step, e.step, s.step_raised),
        last_progress_at=e.at,
        pending=pending,
        pending_recorded=pending_recorded,
        opened=tuple(still),
        recorded=tuple(recorded),
    )


def _fault_fired(s: WatchState, e: FaultFired) -> WatchState:
    last = max(s.last_step, e.step)
    return replace(s, last_step=last, step_raised=True, faults=s.faults.struck(e.kind, FaultMark(e.at, last)))


def _idle_node_lost(s: WatchState, e: IdleNodeLost) -> WatchState:
    return replace(s, faults=replace(s.faults, kill_node=None, hang_node=None))


def _looked(s: WatchState, e: HealthLooked) -> WatchState:
    if e.at == s.last_look:
        return replace(s, health=e.health)
    return replace(
        s, health=e.health, last_look=e.at, failed_checks=0 if e.health is Health.UP else s.failed_checks + 1
    )


def _final_read(s: WatchState, e: FinalRead) -> WatchState:
    ok = e.final_step is not None and 0 <= e.final_step <= e.total_steps
    # The cluster's word, unproven yet: never past the job's last step into an incident.
    last = e.final_step if ok and e.final_step is not None else s.last_step
    return replace(s, succeeded=True, final=e.final, last_step=last)


def _failure_found(s: WatchState, e: FailureFound) -> WatchState:
    return replace(s, failure=e.failure, detected_at=e.detected_at, failed_at=e.failed_at)


_APPLY: dict[type, Callable[[WatchState, Any], WatchState]] = {
    UserErrorReported: _user_error,
    Preempted: _preempted,
    PreemptionNoticed: _noticed,
    TrainStarted: _train_started,
    Progressed: _progressed,
    FaultFired: _fault_fired,
    IdleNodeLost: _idle_node_lost,
    HealthLooked: _looked,
    FinalRead: _final_read,
    FailureFound: _failure_found,
}


def apply(state: WatchState, happened: Happened) -> WatchState:
    """The watch's state after ``happened``; ``state`` itself is left as it was."""
    return _APPLY[type(happened)](state, happened)


def from_runtime(ev: RuntimeEvent, loss: NodeLossSeen | None = None) -> Happened | None:
    """What a runtime event tells the watch (None: nothing beyond its journal line). Its
    fields were checked against the wire's schema when it was read."""
    kind = ev.kind
    if kind == "user_error":
        step, site = ev.get("step"), ev.get("site")
        return UserErrorReported(
            error=str(ev.fields["error"]),
            step=step if isinstance(step, int) else None,
            site=site if isinstance(site, str) else None,
            repeats=ev.get("deterministic") is True,
        )
    if kind == "preempted":
        return Preempted(int(ev.fields["step"]))
    if kind == "preemption_notice":
        return PreemptionNoticed(ev.time)
    if kind == "train_started":
        world = ev.fields.get("world_size")
        return TrainStarted(ev.time, int(ev.fields["restored_step"]), world if isinstance(world, int) else None, loss)
    return None


# --- the verdict -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Going:
    """Nothing ended the attempt; ``glitch``: this look's health check is one to journal."""

    glitch: bool = False


@dataclass(frozen=True)
class Done:
    """The runtime exited 0 and nothing failed: its final report is read next."""

    glitch: bool = False


@dataclass(frozen=True)
class Lost:
    """The attempt failed so, found now (``detected_at``), broken since ``failed_at``."""

    failure: Failure
    detected_at: float
    failed_at: float


Verdict = Going | Done | Lost


def observation(
    s: WatchState,
    runtime_exit: int | None,
    health: Health,
    heartbeat_age_s: float | None,
    now: float,
    nodes_short: str | None,
) -> Observation:
    """One look at the attempt, as ``recovery.detection.classify`` judges it."""
    ue = s.user_error
    return Observation(
        runtime_exit=runtime_exit,
        health=health,
        heartbeat_age_s=heartbeat_age_s,
        running_for_s=now - s.started,
        user_error=None if ue is None else ue.error,
        user_error_step=None if ue is None else ue.step,
        user_error_site=None if ue is None else ue.site,
        user_error_repeats=False if ue is None else ue.repeats,
        failed_checks=s.failed_checks,
        nodes_short=nodes_short,
    )


def judge(
    s: WatchState,
    obs: Observation,
    lease: Lease,
    now: float,
    *,
    new_look: bool,
    heartbeat_at: float | None,
    killed_at: float | None,
) -> Verdict:
    """The attempt's verdict at this look. A failure is dated by the region fault that
    struck it (the watch's marks, else the injector's record of a region it killed), else
    by the last heartbeat, else now. ``new_look``: the health check is a new look of the
    provider's, so a glitch in it is one to journal."""
    failure = classify(obs, s.region, lease)
    if failure is None:
        glitch = new_look and health_glitch(obs, lease)
        return Done(glitch) if obs.runtime_exit == EXIT_OK else Going(glitch)
    fault_at = s.faults.region_fault_at() or killed_at
    return Lost(failure, now, fault_at or (now if heartbeat_at is None else heartbeat_at))


def failure_event(s: WatchState, lost: Lost, obs: Observation) -> FailureDetected:
    return FailureDetected(
        kind=str(lost.failure.kind),
        region=s.region,
        detail=lost.failure.detail,
        runtime_exit=obs.runtime_exit,
        cluster_healthy=obs.health is Health.UP,
        heartbeat_age_s=None if obs.heartbeat_age_s is None else round(obs.heartbeat_age_s, 3),
        detected_after_s=round(lost.detected_at - lost.failed_at, 3),
        last_step=s.last_step,
        health=str(obs.health),
        failed_checks=obs.failed_checks,
    )


def glitch_event(s: WatchState, health: Health, detail: str, obs: Observation, lease: Lease) -> HealthGlitch | None:
    """The journal's line for a glitch, or None: a streak longer than the count that could
    lose the cluster says no more than that count did, so a long one does not flood it."""
    if obs.failed_checks > lease.failures_to_lose:
        return None
    return HealthGlitch(
        region=s.region,
        generation=s.generation,
        health=str(health),
        detail=detail or None,
        failed_checks=obs.failed_checks,
        heartbeat_age_s=None if obs.heartbeat_age_s is None else round(obs.heartbeat_age_s, 3),
    )
