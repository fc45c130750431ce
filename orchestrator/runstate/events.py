"""Every event the controller journals, as a frozen record with a round trip to JSON.

A journal line is ``{"ts": ..., "type": ..., <fields>}``; the field names are the
journal's public interface and stay as they were (``from``/``to`` included: their
attributes are ``from_``/``to``). ``from_json`` is the only way a line becomes an
event and ``to_json`` the only way back, so a field a writer adds must be declared
here, where the fold reads it, or the write fails.

Required fields are what a reader cannot do without; every other field is optional
(a journal written before the field existed lacks it) and typed when present. A
line that lacked an optional field is written back without it (``omitted``).

What the runtime said (``runtime.<kind>``, or a bare kind by ``runtime``/``zombie``
in journals from before the namespace) is one ``RuntimeReport``: the cluster's word,
carried as it came. A type this code base does not know reads as ``Unknown`` (for
display), and is refused at write time.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from functools import cache
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

from orchestrator.runstate.lifecycle import RunState
from recovery.detection import FailureKind
from recovery.policy import Action

RUNTIME_PREFIX = "runtime."
RUNTIME_SOURCES = ("runtime", "zombie")
_NUMBER = (int, float)
_NONE = type(None)


class EventError(ValueError):
    """A JSON object that is no event of ours; the message names the field."""


def runtime_type(kind: str) -> str:
    return RUNTIME_PREFIX + kind


def runtime_kind(ev: dict[str, Any]) -> str | None:
    """The kind a journaled runtime event had on the control channel; None for the controller's."""
    t = str(ev.get("type", ""))
    if t.startswith(RUNTIME_PREFIX):
        return t[len(RUNTIME_PREFIX) :]
    return t if ev.get("by") in RUNTIME_SOURCES else None


def json_is(value: Any, kinds: tuple[type, ...]) -> bool:
    """``value`` is one of ``kinds`` as JSON means it: true is no number, NaN no time."""
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, kinds)


# Typed on any event, declared or not (runtime reports, unknown types, free-form extras):
# status, report and result.json format these as numbers or names.
COMMON_FIELDS: dict[str, tuple[type, ...]] = {
    "config": (dict,),
    "generation": (int, _NONE),
    "step": (int, _NONE),
    "last_step": (int, _NONE),
    "restored_step": (int, _NONE),
    "lost_steps": (int, _NONE),
    "to_region": (str, _NONE),
    "rto_s": (*_NUMBER, _NONE),
    "detected_after_s": (*_NUMBER, _NONE),
    "lag_s": (*_NUMBER, _NONE),
}


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
    run_id: str | None = None
    pid: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    candidates: tuple[str, ...] | None = None


@_event("run_resumed")
@dataclass(frozen=True)
class RunResumed(Event):
    pid: int | None = None
    state: RunState | None = None
    open_attempt: int | None = None
    leftover: tuple[str, ...] | None = None


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
    SPARSE = frozenset({"region", "generation", "standby", "cluster", "failure", "to_region", "reason"})
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
    region: str
    cluster: str
    address: str | None = None
    provision_s: float | None = None
    purpose: str = "attempt"
    generation: int | None = None
    info: dict[str, Any] | None = None


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
    generation: int
    restored_step: int
    stores: tuple[str, ...] | None = None
    failed: dict[str, str] | None = None


@_event("teardown")
@dataclass(frozen=True)
class Teardown(Event):
    SPARSE = frozenset({"reason", "purpose"})
    cluster: str
    seconds: float | None = None
    reason: str | None = None
    purpose: str | None = None


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
    action: Action
    failure: FailureKind
    region: str | None = None
    reason: str = ""
    failed_region: str = ""


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


# --- the round trip -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    attr: str
    key: str
    required: bool
    parse: Callable[[Any], Any]  # JSON value -> attribute value; raises _Wrong
    dump: Callable[[Any], Any]


class _Wrong(Exception):
    """A value of the wrong kind; the message says what it is, the caller names the field."""


def _kind_of(value: Any) -> str:
    return f"of type {type(value).__name__}"


def _scalar(kinds: tuple[type, ...]) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if not json_is(value, kinds):
            raise _Wrong(_kind_of(value))
        return value

    return parse


def _choice(enum: type[StrEnum]) -> Callable[[Any], Any]:
    allowed = {str(m) for m in enum}

    def parse(value: Any) -> Any:
        if not isinstance(value, str):
            raise _Wrong(_kind_of(value))
        if value not in allowed:
            raise _Wrong(f"{value[:40]!r}, none of {', '.join(sorted(allowed))}")
        return enum(value)

    return parse


def _converters(tp: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(parse, dump) for an annotation: scalars, closed sets, X | None, tuple[X, ...], dict[str, X]."""
    same: Callable[[Any], Any] = lambda v: v  # noqa: E731
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not _NONE]
        parse_inner, dump_inner = _converters(inner[0])
        return (
            lambda v: None if v is None else parse_inner(v),
            lambda v: None if v is None else dump_inner(v),
        )
    if tp is Any:
        return same, same
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return _choice(tp), str
    if tp is float:
        return _scalar(_NUMBER), same
    if tp in (int, str, bool):
        return _scalar((tp,)), same
    if origin is tuple:
        item, _ = _converters(args[0])

        def parse_tuple(value: Any) -> tuple[Any, ...]:
            if not isinstance(value, list):
                raise _Wrong(_kind_of(value))
            try:
                return tuple(item(v) for v in value)
            except _Wrong as exc:
                raise _Wrong(f"with an item {exc}") from None

        return parse_tuple, list
    if origin is dict:
        value_parse, _ = _converters(args[1])

        def parse_dict(value: Any) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise _Wrong(_kind_of(value))
            try:
                return {k: value_parse(v) for k, v in value.items()}
            except _Wrong as exc:
                raise _Wrong(f"with a value {exc}") from None

        return parse_dict, dict
    raise TypeError(f"no JSON form for {tp!r}")


_NOT_FIELDS = frozenset({"ts", "omitted", "extra"})


@cache
def _specs(cls: type[Event]) -> tuple[_Spec, ...]:
    hints = get_type_hints(cls)
    out = []
    for f in fields(cls):
        if f.name in _NOT_FIELDS:
            continue
        parse, dump = _converters(hints[f.name])
        required = f.default is MISSING and f.default_factory is MISSING
        out.append(_Spec(f.name, f.metadata.get("key", f.name), required, parse, dump))
    return tuple(out)


def type_of(event: Event) -> str:
    """The line's ``type``."""
    if isinstance(event, RuntimeReport):
        return event.kind if event.legacy else runtime_type(event.kind)
    if isinstance(event, Unknown):
        return event.type_
    return event.TYPE


def _common_problem(fields_: dict[str, Any]) -> str | None:
    for name, kinds in COMMON_FIELDS.items():
        if name in fields_ and not json_is(fields_[name], kinds):
            return f"has {name!r} {_kind_of(fields_[name])}"
    return None


def from_json(obj: Any) -> Event:
    """The event a journal line holds; EventError naming the field if it is none of ours."""
    if not isinstance(obj, dict):
        raise EventError(f"is {type(obj).__name__}, not a JSON object")
    for name, kinds in (("type", (str,)), ("ts", _NUMBER)):
        if name not in obj:
            raise EventError(f"lacks {name!r}")
        if not json_is(obj[name], kinds):
            raise EventError(f"has {name!r} {_kind_of(obj[name])}")
    type_, ts = obj["type"], obj["ts"]
    rest = {k: v for k, v in obj.items() if k not in ("ts", "type")}
    cls = EVENT_TYPES.get(type_)
    runtime = type_.startswith(RUNTIME_PREFIX) or rest.get("by") in RUNTIME_SOURCES
    if runtime or cls is None:
        problem = _common_problem(rest)
        if problem is not None:
            raise EventError(f"({type_}) {problem}")
        if runtime:
            legacy = not type_.startswith(RUNTIME_PREFIX)
            kind = type_ if legacy else type_[len(RUNTIME_PREFIX) :]
            return RuntimeReport(kind=kind, fields=rest, legacy=legacy, ts=ts)
        return Unknown(type_=type_, fields=rest, ts=ts)
    return _parse(cls, rest, ts)


def _parse(cls: type[Event], rest: dict[str, Any], ts: float) -> Event:
    kwargs: dict[str, Any] = {}
    omitted = []
    for spec in _specs(cls):
        if spec.key not in rest:
            if spec.required:
                raise EventError(f"({cls.TYPE}) lacks {spec.key!r}")
            omitted.append(spec.attr)
            continue
        try:
            kwargs[spec.attr] = spec.parse(rest[spec.key])
        except _Wrong as exc:
            raise EventError(f"({cls.TYPE}) has {spec.key!r} {exc}") from None
    declared = {s.key for s in _specs(cls)}
    free = {k: v for k, v in rest.items() if k not in declared}
    if "extra" in {f.name for f in fields(cls)}:
        problem = _common_problem(free)
        if problem is not None:
            raise EventError(f"({cls.TYPE}) {problem}")
        kwargs["extra"] = free
    elif free:
        raise EventError(f"({cls.TYPE}) has {sorted(free)[0]!r}, a field no {cls.TYPE} event has")
    return cls(**kwargs, ts=ts, omitted=frozenset(omitted))


def to_json(event: Event) -> dict[str, Any]:
    """The journal line for ``event``: ``ts``, ``type``, then its fields under their JSON keys."""
    out: dict[str, Any] = {"ts": event.ts, "type": type_of(event)}
    if isinstance(event, RuntimeReport | Unknown):
        out.update(event.fields)
        return out
    for spec in _specs(type(event)):
        value = getattr(event, spec.attr)
        if spec.attr in event.omitted or (value is None and spec.attr in event.SPARSE):
            continue
        out[spec.key] = spec.dump(value)
    extra: dict[str, Any] = getattr(event, "extra", {})
    clash = sorted(set(extra) & set(out))
    if clash:
        raise EventError(f"({type_of(event)}) has {clash[0]!r} both as a field and in its extra")
    out.update(extra)
    return out


def payload(event: Event) -> dict[str, Any]:
    """The line's fields without ``ts`` and ``type``: what a ``(type, fields)`` hook takes."""
    return {k: v for k, v in to_json(event).items() if k not in ("ts", "type")}
