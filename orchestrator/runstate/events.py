"""Every event the controller journals, as a frozen record (its JSON form: ``event_json``).

A journal line is ``{"ts": ..., "type": ..., <fields>}``; the field names are the
journal's public interface and stay as they were (``from``/``to`` included: their
attributes are ``from_``/``to``). A field a writer adds must be declared here, where
the fold reads it, or the write fails (``event_json`` reads and writes declared fields only).

Required fields are what a reader cannot do without; every other field is optional
(a journal written before the field existed lacks it) and typed when present. A
line that lacked an optional field is written back without it (``omitted``).

What the runtime said (``runtime.<kind>``, or a bare kind by ``runtime``/``zombie``
in journals from before the namespace) is one ``RuntimeReport``: the cluster's word,
carried as it came. A type this code base does not know reads as ``Unknown`` (for
display), and is refused at write time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from orchestrator.runstate.lifecycle import RunState
from recovery.detection import FailureKind
from recovery.policy import Action

RUNTIME_PREFIX = "runtime."
RUNTIME_SOURCES = ("runtime", "zombie")


def runtime_type(kind: str) -> str:
    return RUNTIME_PREFIX + kind


def runtime_kind(ev: dict[str, Any]) -> str | None:
    """The kind a journaled runtime event had on the control channel; None for the controller's."""
    t = str(ev.get("type", ""))
    if t.startswith(RUNTIME_PREFIX):
        return t[len(RUNTIME_PREFIX) :]
    return t if ev.get("by") in RUNTIME_SOURCES else None


# --- the records --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Event:
    """One journal line. ``ts`` is stamped by the journal when written. A field whose
    JSON key is no Python name (``from``) names it in its metadata's ``key``."""

    TYPE: ClassVar[str] = ""
    # Optional fields left None that are written only when set (writers that pass them
    # only sometimes): today's lines have no null for them.
    SPARSE: ClassVar[frozenset[str]] = frozenset()

    ts: float = 0.0
    # Declared fields the line lacked: written back without them. Not part of equality:
    # a missing optional field and a null one mean the same.
    omitted: frozenset[str] = field(default=frozenset(), repr=False, compare=False)


EVENT_TYPES: dict[str, type[Event]] = {}


def _event(type_: str) -> Callable[[type[Event]], type[Event]]:
    def register(cls: type[Event]) -> type[Event]:
        cls.TYPE = type_
        EVENT_TYPES[type_] = cls
        return cls

    return register


@_event("run_started")
@dataclass(frozen=True)
class RunStarted(Event):
    SPARSE = frozenset({"host"})
    run_id: str | None = None
    pid: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    candidates: tuple[str, ...] | None = None
    host: str | None = None  # the controller's machine (its pid is that machine's)


@_event("run_resumed")
@dataclass(frozen=True)
class RunResumed(Event):
    SPARSE = frozenset({"host"})
    pid: int | None = None
    state: RunState | None = None
    open_attempt: int | None = None
    leftover: tuple[str, ...] | None = None
    host: str | None = None


@_event("run_key_created")
@dataclass(frozen=True)
class RunKeyCreated(Event):
    reason: str | None = None


@_event("run_finished")
@dataclass(frozen=True)
class RunFinished(Event):
    status: str | None = None
    final_step: int | None = None


@_event("transition")
@dataclass(frozen=True)
class Transition(Event):
    SPARSE = frozenset({"region", "generation", "standby", "cluster", "failure", "to_region", "reason", "source"})
    to: RunState
    from_: RunState | None = field(default=None, metadata={"key": "from"})
    # What the state machine was told with it (StateMachine.to's info).
    region: str | None = None
    generation: int | None = None
    standby: bool | None = None
    cluster: str | None = None
    failure: str | None = None
    to_region: str | None = None
    reason: str | None = None
    # A stop or a cancel that a request asked for: where it was asked (cli: action=stop or
    # action=cancel; console: action=console's page).
    source: str | None = None


@_event("fences_read")
@dataclass(frozen=True)
class FencesRead(Event):
    generation_floor: int
    highest_fence: int | None = None
    journaled: int | None = None
    failed: dict[str, str] | None = None


@_event("attempt_started")
@dataclass(frozen=True)
class AttemptStarted(Event):
    generation: int
    region: str
    standby: bool | None = None


@_event("attempt_adopted")
@dataclass(frozen=True)
class AttemptAdopted(Event):
    generation: int
    region: str
    cluster: str


@_event("attempt_ended")
@dataclass(frozen=True)
class AttemptEnded(Event):
    generation: int
    region: str
    started_at: float | None = None
    ended_at: float | None = None
    restored_step: int | None = None
    last_step: int | None = None
    outcome: str | None = None


@_event("provisioned")
@dataclass(frozen=True)
class Provisioned(Event):
    SPARSE = frozenset({"kept_from", "pool"})
    region: str
    cluster: str
    address: str | None = None
    provision_s: float | None = None
    purpose: str = "attempt"
    generation: int | None = None
    info: dict[str, Any] | None = None
    # The attempt took the cluster the attempt of this generation kept (cluster_kept):
    # nothing launched; provision_s is the restore's preparation alone.
    kept_from: int | None = None
    # The attempt took its standby pool's cluster (pool_taken): nothing launched, and the
    # run pays for the cluster from here on.
    pool: str | None = None


@_event("cluster_kept")
@dataclass(frozen=True)
class ClusterKept(Event):
    """The attempt ended with its cluster up and its runtime gone, by a failure the
    policy restarts in place: the cluster stays for the next attempt (``provisioned``
    with ``kept_from``), or is torn down if that attempt goes elsewhere."""

    cluster: str
    generation: int
    failure: str


@_event("provision_retry")
@dataclass(frozen=True)
class ProvisionRetry(Event):
    region: str
    error: str | None = None
    retry: int | None = None
    purpose: str | None = None


@_event("provision_failed")
@dataclass(frozen=True)
class ProvisionFailed(Event):
    region: str
    kind: str | None = None
    error: str | None = None
    purpose: str | None = None
    generation: int | None = None


@_event("runtime_started")
@dataclass(frozen=True)
class RuntimeStarted(Event):
    pid: int
    generation: int | None = None
    standby: bool | None = None


@_event("fence")
@dataclass(frozen=True)
class Fence(Event):
    SPARSE = frozenset({"moved_from"})
    generation: int
    restored_step: int
    stores: tuple[str, ...] | None = None
    failed: dict[str, str] | None = None
    # The generation's fence moved forward: the step it named before (a commit of the
    # attempt taken over from landed after the first scan, before the fence stopped it).
    moved_from: int | None = None


@_event("teardown")
@dataclass(frozen=True)
class Teardown(Event):
    SPARSE = frozenset({"reason", "purpose", "runtime_kept"})
    cluster: str
    seconds: float | None = None
    reason: str | None = None
    purpose: str | None = None
    # The cluster was lost and its node runtime was left for a launch under its name
    # (a provider that keeps runtimes); the run's end sweeps it (runtime_swept).
    runtime_kept: bool | None = None


@_event("runtime_swept")
@dataclass(frozen=True)
class RuntimeSwept(Event):
    """What a cluster kept of its node runtime (``teardown``'s ``runtime_kept``), removed
    at the run's end; ``error`` when the provider could not."""

    SPARSE = frozenset({"error"})
    cluster: str
    error: str | None = None


@_event("logs_kept")
@dataclass(frozen=True)
class LogsKept(Event):
    """What was kept of an attempt's rank logs before its cluster went: the ranks, the
    bytes written, the bytes cut by the cap, and why none were kept (``error``)."""

    SPARSE = frozenset({"error"})
    cluster: str
    generation: int | None = None
    ranks: tuple[int, ...] | None = None
    bytes: int | None = None
    cut: int | None = None
    error: str | None = None


@_event("teardown_deferred")
@dataclass(frozen=True)
class TeardownDeferred(Event):
    cluster: str
    seconds: float | None = None


@_event("fault_release_failed")
@dataclass(frozen=True)
class FaultReleaseFailed(Event):
    cluster: str
    error: str


@_event("checkpoint_skipped")
@dataclass(frozen=True)
class CheckpointSkipped(Event):
    """The controller's (by="controller"); the runtime's is a RuntimeReport."""

    region: str | None = None
    step: int | None = None
    reason: str | None = None
    by: str | None = None


@_event("restore_store_skipped")
@dataclass(frozen=True)
class RestoreStoreSkipped(Event):
    region: str | None = None
    error: str | None = None
    by: str | None = None


@_event("fence_ignored")
@dataclass(frozen=True)
class FenceIgnored(Event):
    """A store's fence that this run's controller did not sign (forged, malformed, another
    run's, not a regular file): it neither raises nor lowers anything."""

    region: str | None = None
    reason: str | None = None
    by: str | None = None


@_event("restore_copy_failed")
@dataclass(frozen=True)
class RestoreCopyFailed(Event):
    error: str
    step: int | None = None


@_event("restore_copied")
@dataclass(frozen=True)
class RestoreCopied(Event):
    step: int | None = None
    from_: str | None = field(default=None, metadata={"key": "from"})
    to: str | None = None
    copy_s: float | None = None


@_event("replicated")
@dataclass(frozen=True)
class Replicated(Event):
    step: int | None = None
    from_: str | None = field(default=None, metadata={"key": "from"})
    to: str | None = None
    lag_s: float | None = None
    copy_s: float | None = None
    bytes: int | None = None


@_event("replication_error")
@dataclass(frozen=True)
class ReplicationError(Event):
    error: str


@_event("control_invalid")
@dataclass(frozen=True)
class ControlInvalid(Event):
    path: str
    reason: str


@_event("decision")
@dataclass(frozen=True)
class DecisionMade(Event):
    SPARSE = frozenset({"signature", "placement"})

    action: Action
    failure: FailureKind
    region: str | None = None
    reason: str = ""
    failed_region: str = ""
    # A user error's Failure.signature: a resumed controller knows the error it restarted after.
    signature: str | None = None
    # recovery.placement=cost, a failover: {"policy": "cost", "table": [per candidate, best
    # first: region, usd_per_hour, rate_per_h, setup_s, expected_hours, expected_usd,
    # egress_usd, checkpoint_from, correlated]}.
    placement: dict[str, Any] | None = None


@_event("capacity")
@dataclass(frozen=True)
class CapacityChosen(Event):
    """recovery.deadline_s, a spot region: what an attempt's launch runs on (``spot`` False:
    on-demand), the slack it saw, what one more loss would cost, and why."""

    region: str
    generation: int
    spot: bool
    policy: str
    reason: str
    slack_s: float | None = None  # None: no step measured yet
    needed_s: float | None = None


@_event("placed")
@dataclass(frozen=True)
class Placed(Event):
    """recovery.placement=cost: where the run's first attempt goes, and the ranking of every
    candidate that chose it (the table as a failover's decision carries it)."""

    region: str
    placement: dict[str, Any]


@dataclass(frozen=True)
class IncidentFields(Event):
    """orchestrator.runstate.incidents.Incident.record(): the incident and its RTO/RPO."""

    SPARSE = frozenset({"node", "world_size_before", "world_size_after", "replace_s"})

    kind: str
    from_region: str
    failed_at: float
    detected_at: float
    to_region: str | None = None
    last_step: int | None = None
    restored_step: int | None = None
    first_step_at: float | None = None
    generation: int | None = None
    detected_after_s: float | None = None
    lost_steps: int | None = None
    rto_s: float | None = None
    # node_lost: which node, the world before and after, the replacement's time (None:
    # not replaced, the run went on with fewer workers).
    node: int | None = None
    world_size_before: int | None = None
    world_size_after: int | None = None
    replace_s: float | None = None

    def same_incident(self, other: IncidentFields) -> bool:
        return (self.kind, self.generation, self.failed_at) == (other.kind, other.generation, other.failed_at)


@_event("incident_opened")
@dataclass(frozen=True)
class IncidentOpened(IncidentFields):
    """A failure decided on, its recovery under way."""


@_event("incident")
@dataclass(frozen=True)
class IncidentRecorded(IncidentFields):
    """An incident closed: recovered (its first step after the restore), or the run's end."""


@_event("failure_detected")
@dataclass(frozen=True)
class FailureDetected(Event):
    kind: str
    region: str | None = None
    detail: str | None = None
    runtime_exit: int | None = None
    cluster_healthy: bool | None = None
    heartbeat_age_s: float | None = None
    detected_after_s: float | None = None
    last_step: int | None = None
    # The provider's last health check (recovery.detection.Health) and how many in a row were not UP.
    health: str | None = None
    failed_checks: int | None = None


@_event("health_glitch")
@dataclass(frozen=True)
class HealthGlitch(Event):
    """A health check that was not UP (or failed) while the attempt's heartbeats were
    fresh: journaled, nothing more (recovery.detection.health_glitch)."""

    region: str
    generation: int
    health: str
    detail: str | None = None
    failed_checks: int | None = None
    heartbeat_age_s: float | None = None


@_event("runtime_reattached")
@dataclass(frozen=True)
class RuntimeReattached(Event):
    """The controller's connection to the runtime ended without the runtime's word while
    its heartbeats were fresh: a new connection follows it (recovery.detection.may_reattach)."""

    region: str
    generation: int
    connection_exit: int | None = None
    pid: int | None = None
    heartbeat_age_s: float | None = None


@_event("region_skipped")
@dataclass(frozen=True)
class RegionSkipped(Event):
    """A candidate region the run cannot train in (fewer workers fit than trainer.min_workers),
    passed over at the start; a failover that passes one over says so in its decision."""

    region: str
    reason: str


@_event("node_lost")
@dataclass(frozen=True)
class NodeLost(Event):
    """A worker node of the attempt's cluster gone (its processes ended) or not UP for
    recovery.health_failures_to_lose looks in a row; the region itself goes on."""

    region: str
    generation: int
    node: int
    health: str
    detail: str | None = None
    # Workers the region's nodes fit without it, and the world the attempt trained with.
    fits: int | None = None
    world_size: int | None = None
    replacing: bool | None = None
    # Whether a worker of the group ran there (the ranks' node labels; None: not known). A
    # node that ran none restarts nothing, and so has no incident.
    held_workers: bool | None = None


@_event("node_replaced")
@dataclass(frozen=True)
class NodeReplaced(Event):
    region: str
    generation: int
    node: int
    replace_s: float


@_event("node_replace_failed")
@dataclass(frozen=True)
class NodeReplaceFailed(Event):
    """No replacement within recovery.node_replace_timeout_s (or the provider cannot
    replace one node): the run goes on with what fits, or fails the region over."""

    region: str
    generation: int
    node: int
    error: str
    fits: int | None = None


@_event("fault_injected")
@dataclass(frozen=True)
class FaultInjected(Event):
    """``extra``: the fault's own detail (seq, during, trigger, region, killed, ...), flat in the line."""

    SPARSE = frozenset({"index", "step"})
    kind: str
    index: int | None = None
    step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@_event("controller_restarted")
@dataclass(frozen=True)
class ControllerRestarted(Event):
    """The run's supervisor resumed its controller, which had died (``cause``: the signal,
    or the exit status of an uncaught exception); ``restart``: how many so far."""

    cause: str
    restart: int


@_event("lease_taken")
@dataclass(frozen=True)
class LeaseTaken(Event):
    """This controller took the run's lease in the control store (orchestrator/control/lease.py):
    its ``controller`` generation, where it runs, and whose lease it followed (``previous``:
    the holder's line, or why the lease found was nobody's; absent for a run's first)."""

    SPARSE = frozenset({"previous", "previous_controller"})
    controller: int
    holder: str
    expires_in_s: float
    previous: str | None = None
    previous_controller: int | None = None


@_event("mirror_restored")
@dataclass(frozen=True)
class MirrorRestored(Event):
    """action=resume on a machine without the run's folder rebuilt it from the control
    store's mirror: controller ``controller``'s index number ``seq``, written at
    ``written_at``; ``skipped``: newer mirrors passed over, each with its reason."""

    SPARSE = frozenset({"skipped"})
    controller: int
    seq: int
    written_at: float
    files: tuple[str, ...]
    skipped: tuple[str, ...] = ()


@_event("controller_stood_down")
@dataclass(frozen=True)
class ControllerStoodDown(Event):
    """The controller found its lease on the run lost (``reason``: taken by another, or a
    control store it could not reach for a whole lease) and stopped without acting."""

    controller: int
    reason: str


@_event("lease_ignored")
@dataclass(frozen=True)
class LeaseIgnored(Event):
    """What the controller found in place of its lease in the control store did not make
    it stand down (``reason``: gone, not a lease, not verifying under the run's key, or a
    verified lease of an earlier controller put back): nobody's, so its own was written
    again. Journaled once per reason."""

    controller: int
    reason: str


@_event("claim_ignored")
@dataclass(frozen=True)
class ClaimIgnored(Event):
    """A controller generation's claim in the control store that is not a claim of this
    run's (``reason``): it neither raised the next controller's number nor kept this one
    from claiming past it."""

    name: str
    reason: str


@_event("drill_requested")
@dataclass(frozen=True)
class DrillRequested(Event):
    """action=drill: a fault for the running attempt, who asked, and (``refused``) why it
    was not injected; an injected one's fault_injected follows."""

    SPARSE = frozenset({"region", "refused", "source"})
    kind: str
    who: str
    region: str | None = None
    refused: str | None = None
    source: str | None = None  # where it was asked: cli (action=drill) or console (action=console's page)


@_event("fault_refused")
@dataclass(frozen=True)
class FaultRefused(Event):
    SPARSE = frozenset({"seq", "request_generation", "kind", "pid"})
    index: int
    reason: str
    seq: int | None = None
    request_generation: int | None = None
    kind: str | None = None
    pid: int | None = None


@_event("fault_failed")
@dataclass(frozen=True)
class FaultFailed(Event):
    index: int
    kind: str
    reason: str


@_event("fault_ended")
@dataclass(frozen=True)
class FaultEnded(Event):
    SPARSE = frozenset({"resumed", "reclaimed"})
    index: int
    kind: str
    region: str | None = None
    resumed: int | None = None
    reclaimed: int | None = None


@_event("standby_ready")
@dataclass(frozen=True)
class StandbyReady(Event):
    region: str
    generation: int
    cluster: str | None = None


@_event("standby_failed")
@dataclass(frozen=True)
class StandbyFailed(Event):
    region: str
    generation: int
    error: str | None = None


@_event("standby_lost")
@dataclass(frozen=True)
class StandbyLost(Event):
    region: str
    generation: int


@_event("standby_activated")
@dataclass(frozen=True)
class StandbyActivated(Event):
    region: str
    generation: int
    cluster: str | None = None


@_event("hedge_started")
@dataclass(frozen=True)
class HedgeStarted(Event):
    """A sign of trouble in ``from_region`` (``reason``): the cluster a failover would take
    is launched in ``region`` before any loss is declared (recovery.hedge_max_launches);
    ``launches``: the run's hedges so far, this one included."""

    region: str
    from_region: str
    reason: str
    launches: int


@_event("hedge_cancelled")
@dataclass(frozen=True)
class HedgeCancelled(Event):
    """``from_region`` answered again: the hedge in ``region`` is torn down (its launch,
    if still under way, is torn down as it ends)."""

    region: str
    from_region: str
    reason: str


@_event("pool_joined")
@dataclass(frozen=True)
class PoolJoined(Event):
    """The run waits on its standby pool's cluster in ``region`` (recovery.standby_pool):
    it shares its cost from here until ``pool_share`` says what its share came to."""

    pool: str
    region: str


@_event("pool_launched")
@dataclass(frozen=True)
class PoolLaunched(Event):
    """This run launched the pool's standby in ``region`` (``ready`` once up, or why not);
    its cost is every covered run's, by ``pool_share``."""

    pool: str
    region: str
    cluster: str | None = None
    provision_s: float | None = None
    error: str | None = None


@_event("pool_taken")
@dataclass(frozen=True)
class PoolTaken(Event):
    """This run lost its region and took the pool's standby in ``region``; the pool
    launches the next one. What it did: taken, or why not (lost, another run took it)."""

    pool: str
    region: str
    cluster: str | None = None
    generation: int | None = None
    taken: bool = True
    reason: str | None = None


@_event("pool_share")
@dataclass(frozen=True)
class PoolShare(Event):
    """The run's share of one pool standby's idle time in ``region``: ``share_s`` of its
    seconds from ``from_ts`` to ``to_ts``, each second split between the ``runs`` it
    covered then (goodput's standby idle, costed at the region's price)."""

    pool: str
    region: str
    share_s: float
    cluster: str | None = None
    from_ts: float | None = None
    to_ts: float | None = None
    runs: int | None = None


@_event("multipart_aborted")
@dataclass(frozen=True)
class MultipartAborted(Event):
    region: str
    keys: tuple[str, ...] | None = None


@_event("multipart_abort_failed")
@dataclass(frozen=True)
class MultipartAbortFailed(Event):
    region: str
    error: str


@_event("notify_failed")
@dataclass(frozen=True)
class NotifyFailed(Event):
    """A notification that did not reach its target (orchestrator/notify/notifier.py); the run went on.
    Changes nothing of the run's state."""

    target: str  # command | webhook
    # incident | failover | succeeded | failed (the journaled type, should building it have failed)
    notification: str
    error: str  # one line
    # The webhook's scheme and host, or the command's program: never a URL's path or query,
    # never the command's arguments (a token may be in either).
    endpoint: str | None = None


@_event("notify_off")
@dataclass(frozen=True)
class NotifyOff(Event):
    """A resumed controller could not take a notify target from the run's notify.secret
    (missing, damaged, another run's): no notifications go to it (orchestrator/notify/secret.py);
    the run goes on. Changes nothing of the run's state."""

    target: str  # command | webhook
    reason: str  # one line, never a value from the file
    # What config.json shows of the target: the webhook's scheme and host, or the command's program.
    endpoint: str | None = None


@_event("tensorboard_failed")
@dataclass(frozen=True)
class TensorBoardFailed(Event):
    """The run's TensorBoard files stopped (a write failed, or fell behind) at this point
    (orchestrator/metrics/board.py); the run went on. Journaled once per controller. Changes
    nothing of the run's state."""

    error: str  # one line


@_event("listener_failed")
@dataclass(frozen=True)
class ListenerFailed(Event):
    """A listener of the run's events (a built-in one, or one ``metrics.listeners`` names)
    raised on an event; the run went on, and so does the listener, with the events after it.
    Journaled once per listener and controller. Changes nothing of the run's state."""

    listener: str  # its name: the built-in's (notifier, tensorboard, progress, chaos), or module:Name
    error: str  # the exception's type and its message's first line
    event: str | None = None  # the type of the event it raised on


@_event("tracking_started")
@dataclass(frozen=True)
class TrackingStarted(Event):
    """The run's experiment tracker run (tracking.kind), made or taken up again by this
    controller: a resumed controller, here or after a takeover, reads its id back from the
    journal and logs to the same one. ``trial``: a search trial's child run. Changes
    nothing of the run's state."""

    SPARSE = frozenset({"trial"})

    kind: str  # mlflow | wandb
    tracker_run: str  # the tracker's own id of the run
    resumed: bool = False  # an existing tracker run taken up again
    trial: str | None = None  # the search trial the child run is of


@dataclass(frozen=True)
class RuntimeReport(Event):
    """What the runtime (or a fenced older attempt, ``by="zombie"``) reported, as it came."""

    kind: str
    fields: dict[str, Any]
    legacy: bool = False  # journaled under the bare kind (before the runtime namespace)


@dataclass(frozen=True)
class Unknown(Event):
    """A type this code base does not write: kept for display, never state-changing."""

    type_: str
    fields: dict[str, Any]


def type_of(event: Event) -> str:
    """The line's ``type``."""
    if isinstance(event, RuntimeReport):
        return event.kind if event.legacy else runtime_type(event.kind)
    if isinstance(event, Unknown):
        return event.type_
    return event.TYPE
