"""The run as its journal tells it: one frozen ``RunView``, changed only by ``apply``.

Resume (``orchestrator.runstate.replay``), ``action=status``, the incident report and the
result all read this one fold, so a field the controller journals is read the same
way everywhere. ``apply`` is pure: it returns a new view and never changes the one
it was given (containers are tuples, frozensets and read-only mappings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

from orchestrator.hpo import max_search_steps, trial_count
from orchestrator.runstate.events import (
    AttemptAdopted,
    AttemptEnded,
    AttemptStarted,
    CheckpointSkipped,
    DecisionMade,
    Event,
    FailureDetected,
    FaultInjected,
    Fence,
    FencesRead,
    IncidentOpened,
    IncidentRecorded,
    Placed,
    Provisioned,
    ProvisionFailed,
    Replicated,
    RunFinished,
    RunResumed,
    RunStarted,
    RuntimeReport,
    RuntimeStarted,
    RuntimeSwept,
    Teardown,
    Transition,
    Unknown,
)
from orchestrator.runstate.lifecycle import RunState
from orchestrator.workloads import declared_reports
from recovery.detection import Failure
from recovery.fencing import Lineage
from recovery.policy import Decision, History

K = TypeVar("K")
V = TypeVar("V")


def _frozen(d: dict[K, V]) -> Mapping[K, V]:
    return MappingProxyType(d)


def _with(m: Mapping[K, V], key: K, value: V) -> Mapping[K, V]:
    return _frozen({**m, key: value})


def _without(m: Mapping[K, V], key: K) -> Mapping[K, V]:
    return _frozen({k: v for k, v in m.items() if k != key})


@dataclass(frozen=True)
class AttemptView:
    """An attempt as far as the journal got: started, maybe provisioned and fenced."""

    generation: int
    region: str
    started_at: float
    cluster: Provisioned | None = None
    runtime_pid: int | None = None
    restored_step: int | None = None


@dataclass(frozen=True)
class AttemptLine:
    """An attempt as ``action=status`` lists it: where, and what ended it (if anything did)."""

    generation: int
    region: str
    outcome: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"generation": self.generation, "region": self.region}
        if self.outcome is not None:
            d["outcome"] = self.outcome
        return d


@dataclass(frozen=True)
class UserErrorSeen:
    """The workload's exception as the runtime reported it (validated on the wire)."""

    error: str
    step: int | None = None  # 0: raised before the first step
    site: str | None = None  # the user's file:line

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.error, "step": self.step, "site": self.site}


@dataclass(frozen=True)
class RunView:
    # --- what a resumed controller adopts (the attributes replay.Replayed has) ---
    run_id: str = ""
    started_at: float = 0.0
    state: RunState = RunState.PENDING
    generation: int = 0  # the highest any controller event or fence floor named
    lineage: Lineage = field(default_factory=Lineage)
    history: History = field(default_factory=History)
    attempts: tuple[AttemptEnded, ...] = ()
    incidents: tuple[IncidentRecorded, ...] = ()
    pending: IncidentOpened | None = None
    # Clusters provisioned and never torn down (name -> provisioned event).
    leftover: Mapping[str, Provisioned] = field(default_factory=lambda: _frozen({}))
    # Lost clusters whose node runtime was kept for a launch under their name (teardown's
    # runtime_kept), not swept yet and not launched again (name -> provisioned event).
    kept_runtimes: Mapping[str, Provisioned] = field(default_factory=lambda: _frozen({}))
    next_region: str | None = None
    last_step: int = 0
    finished: bool = False
    last_ts: float = 0.0
    # Every attempt started (by generation), those that ended, and those whose launch
    # was journaled (provisioned or failed): open_attempt and launching come from these.
    started: Mapping[int, AttemptView] = field(default_factory=lambda: _frozen({}))
    ended: frozenset[int] = frozenset()
    launched: frozenset[int] = frozenset()
    # The attempt the controller holds (region, generation): the one its last PROVISIONING
    # transition launched, or the one it adopted; None before it holds one (a resumed
    # controller holds none of its predecessor's).
    holding: tuple[str, int] | None = None
    # --- what status shows ---
    run_starts: tuple[RunStarted, ...] = ()
    current_region: str | None = None
    current_generation: int = 0
    attempt_lines: tuple[AttemptLine, ...] = ()
    replications: int = 0  # the controller's and the runtime's
    last_lag_s: float | None = None
    skipped: tuple[CheckpointSkipped | RuntimeReport, ...] = ()
    # --- what the report needs ---
    first_ts: float | None = None  # the first controller event's
    faults: tuple[FaultInjected, ...] = ()
    decisions: tuple[DecisionMade, ...] = ()
    # --- what the result needs ---
    verdict: Transition | None = None  # the transition into a terminal state, or INTERRUPTED
    error_traceback: str | None = None  # the workload's, from its first user_error in an attempt
    user_errors: frozenset[int] = frozenset()  # generations whose first user_error was read
    # That user_error's exception line, step and the user's file:line (what result.json names).
    user_error: UserErrorSeen | None = None
    # --- what the fault injector needs ---
    # The nodes the training group's ranks run on, as the runtime's last train_started said
    # (a drawn kill_node strikes one of them, or, node_role: idle, none of them).
    worker_nodes: tuple[int, ...] = ()
    # recovery.placement=cost: where the run's first attempt was placed (a resumed
    # controller starts a run that never launched there too).
    placed_region: str | None = None

    @property
    def open_attempt(self) -> AttemptView | None:
        """The newest attempt that never ended: the one to adopt or end."""
        open_gens = [g for g in self.started if g not in self.ended]
        return self.started[max(open_gens)] if open_gens else None

    @property
    def launching(self) -> tuple[tuple[str, int], ...]:
        """(region, generation) of open attempts that crashed mid-launch: a cluster of
        their name may exist, unjournaled."""
        return tuple(
            (self.started[g].region, g) for g in sorted(self.started) if g not in self.ended and g not in self.launched
        )

    @property
    def config(self) -> dict[str, Any]:
        return self.run_starts[-1].config if self.run_starts else {}

    @property
    def status(self) -> str:
        return str(self.state)

    @property
    def reason(self) -> str | None:
        return None if self.verdict is None else self.verdict.reason


def _generation_of(event: Event) -> Any:
    if isinstance(event, Unknown):
        return event.fields.get("generation")
    if isinstance(event, FaultInjected):
        return event.extra.get("generation")
    return getattr(event, "generation", None)


def _step_of(event: Event) -> int | None:
    if isinstance(event, FaultInjected):
        return event.step
    if isinstance(event, AttemptEnded | IncidentRecorded | FailureDetected):
        return event.last_step
    return None


def _every(view: RunView, event: Event) -> RunView:
    """What every controller event moves: the clock, the generation, the step."""
    gen = _generation_of(event)
    step = _step_of(event)
    return replace(
        view,
        last_ts=max(view.last_ts, float(event.ts)),
        first_ts=float(event.ts) if view.first_ts is None else view.first_ts,
        generation=max(view.generation, gen) if isinstance(gen, int) else view.generation,
        last_step=max(view.last_step, step) if isinstance(step, int) else view.last_step,
    )


def _attempt(view: RunView, gen: int | None, **changes: Any) -> Mapping[int, AttemptView]:
    if gen is None or gen not in view.started:
        return view.started
    return _with(view.started, gen, replace(view.started[gen], **changes))


def _run_started(v: RunView, e: RunStarted) -> RunView:
    return replace(v, run_id=e.run_id or "", started_at=float(e.ts), run_starts=(*v.run_starts, e))


def _transition(v: RunView, e: Transition) -> RunView:
    # An interruption is the verdict until a resume carries the run on.
    resumed = v.state is RunState.INTERRUPTED
    verdict = e if e.to.stopped else None if resumed else v.verdict
    holding = v.holding
    if e.to is RunState.PROVISIONING and e.region is not None and e.generation is not None:
        holding = (e.region, e.generation)
    return replace(v, state=e.to, verdict=verdict, finished=v.finished and not resumed, holding=holding)


def _run_resumed(v: RunView, e: RunResumed) -> RunView:
    return replace(v, holding=None)


def _attempt_adopted(v: RunView, e: AttemptAdopted) -> RunView:
    return replace(v, holding=(e.region, e.generation))


def _attempt_started(v: RunView, e: AttemptStarted) -> RunView:
    return replace(
        v,
        started=_with(v.started, e.generation, AttemptView(e.generation, e.region, started_at=float(e.ts))),
        current_region=e.region,
        current_generation=e.generation,
        attempt_lines=(*v.attempt_lines, AttemptLine(e.generation, e.region)),
    )


def _provisioned(v: RunView, e: Provisioned) -> RunView:
    if e.purpose == "pool":
        return v  # a standby pool's: every run it covers waits on it, and its last one ends it
    v = replace(v, leftover=_with(v.leftover, e.cluster, e), kept_runtimes=_without(v.kept_runtimes, e.cluster))
    if e.purpose != "attempt" or e.generation is None:
        return v
    return replace(v, launched=v.launched | {e.generation}, started=_attempt(v, e.generation, cluster=e))


def _provision_failed(v: RunView, e: ProvisionFailed) -> RunView:
    return v if e.generation is None else replace(v, launched=v.launched | {e.generation})


def _teardown(v: RunView, e: Teardown) -> RunView:
    provisioned = v.leftover.get(e.cluster)
    kept = v.kept_runtimes
    if e.runtime_kept and provisioned is not None:
        kept = _with(kept, e.cluster, provisioned)
    return replace(v, leftover=_without(v.leftover, e.cluster), kept_runtimes=kept)


def _runtime_swept(v: RunView, e: RuntimeSwept) -> RunView:
    return replace(v, kept_runtimes=_without(v.kept_runtimes, e.cluster))


def _runtime_started(v: RunView, e: RuntimeStarted) -> RunView:
    return replace(v, started=_attempt(v, e.generation, runtime_pid=e.pid))


def _fences_read(v: RunView, e: FencesRead) -> RunView:
    # The stores held a fence this high: the next attempt goes above it.
    return replace(v, generation=max(v.generation, e.generation_floor))


def _fence(v: RunView, e: Fence) -> RunView:
    return replace(
        v,
        lineage=v.lineage.then(e.generation, e.restored_step),
        started=_attempt(v, e.generation, restored_step=e.restored_step),
    )


def _attempt_ended(v: RunView, e: AttemptEnded) -> RunView:
    return replace(v, ended=v.ended | {e.generation}, attempts=(*v.attempts, e))


def _decision(v: RunView, e: DecisionMade) -> RunView:
    failure = Failure(e.failure, e.failed_region, "", e.signature or "")
    decision = Decision(e.action, e.region, e.reason)
    return replace(
        v,
        history=v.history.after(failure, decision, float(e.ts)),
        next_region=decision.region,
        decisions=(*v.decisions, e),
    )


def _incident_opened(v: RunView, e: IncidentOpened) -> RunView:
    return replace(v, pending=e)


def _incident(v: RunView, e: IncidentRecorded) -> RunView:
    closes = v.pending is not None and v.pending.same_incident(e)
    return replace(v, incidents=(*v.incidents, e), pending=None if closes else v.pending)


def _run_finished(v: RunView, e: RunFinished) -> RunView:
    return replace(v, finished=True)


def _replicated(v: RunView, e: Replicated) -> RunView:
    return replace(v, replications=v.replications + 1, last_lag_s=e.lag_s)


def _checkpoint_skipped(v: RunView, e: CheckpointSkipped) -> RunView:
    return replace(v, skipped=(*v.skipped, e))


def _failure_detected(v: RunView, e: FailureDetected) -> RunView:
    if not v.attempt_lines:
        return v
    last = replace(v.attempt_lines[-1], outcome=e.kind)
    return replace(v, attempt_lines=(*v.attempt_lines[:-1], last))


def _fault_injected(v: RunView, e: FaultInjected) -> RunView:
    return replace(v, faults=(*v.faults, e))


def _placed(v: RunView, e: Placed) -> RunView:
    return replace(v, placed_region=e.region)


_APPLY: dict[type[Event], Callable[[RunView, Any], RunView]] = {
    Placed: _placed,
    RunStarted: _run_started,
    RunResumed: _run_resumed,
    Transition: _transition,
    AttemptAdopted: _attempt_adopted,
    AttemptStarted: _attempt_started,
    Provisioned: _provisioned,
    ProvisionFailed: _provision_failed,
    Teardown: _teardown,
    RuntimeSwept: _runtime_swept,
    RuntimeStarted: _runtime_started,
    FencesRead: _fences_read,
    Fence: _fence,
    AttemptEnded: _attempt_ended,
    DecisionMade: _decision,
    IncidentOpened: _incident_opened,
    IncidentRecorded: _incident,
    RunFinished: _run_finished,
    Replicated: _replicated,
    CheckpointSkipped: _checkpoint_skipped,
    FailureDetected: _failure_detected,
    FaultInjected: _fault_injected,
}


def _runtime(v: RunView, e: RuntimeReport) -> RunView:
    """The runtime's word moves only what it alone can tell: never a transition, fence
    or teardown, whatever kind it claims."""
    if e.kind == "replicated":
        return replace(v, replications=v.replications + 1, last_lag_s=e.fields.get("lag_s"))
    if e.kind == "checkpoint_skipped":
        return replace(v, skipped=(*v.skipped, e))
    if e.kind == "train_started" and e.fields.get("by") == "runtime":
        return replace(v, worker_nodes=_node_indexes(e.fields.get("worker_nodes")))
    gen = e.fields.get("generation")
    if e.kind == "user_error" and e.fields.get("by") == "runtime" and gen == v.current_generation:
        if gen in v.user_errors:
            return v
        traceback = e.fields.get("traceback")
        error, step, site = e.fields.get("error"), e.fields.get("step"), e.fields.get("site")
        seen = UserErrorSeen(
            error=error if isinstance(error, str) else "",
            step=step if isinstance(step, int) and not isinstance(step, bool) else None,
            site=site if isinstance(site, str) else None,
        )
        return replace(
            v,
            user_errors=v.user_errors | {gen},
            error_traceback=traceback if isinstance(traceback, str) and traceback else v.error_traceback,
            user_error=seen,
        )
    return v


def _node_indexes(nodes: Any) -> tuple[int, ...]:
    # Validated on the wire (a list of node indexes); a train_started without them says none is known.
    if not isinstance(nodes, list):
        return ()
    return tuple(sorted({n for n in nodes if isinstance(n, int) and not isinstance(n, bool)}))


def apply(view: RunView, event: Event) -> RunView:
    """The view after ``event``; ``view`` itself is left as it was."""
    if isinstance(event, RuntimeReport):
        return _runtime(view, event)
    view = _every(view, event)
    step = _APPLY.get(type(event))
    return view if step is None else step(view, event)


def fold(events: Iterable[Event], view: RunView | None = None) -> RunView:
    """The view after every event in order, from an empty run (or ``view``)."""
    out = RunView() if view is None else view
    for event in events:
        out = apply(out, event)
    return out


def planned_total(config: Mapping[str, Any]) -> int | None:
    """The run's step total as the journal's copy of its config tells it, the total its
    progress reports (orchestrator.config.derived.total_steps): a search's most search
    steps, a train function's declared reports (None if it declares none), else
    job.steps. None where the copy cannot tell (it is for display, and may be damaged)."""
    job, hpo = config.get("job"), config.get("hpo")
    job = job if isinstance(job, Mapping) else {}
    try:
        if isinstance(hpo, Mapping) and hpo.get("enabled"):
            return max_search_steps(trial_count(dict(hpo["search_space"]), int(hpo["num_samples"])), int(hpo["max_t"]))
        if job.get("train_func"):
            params = job.get("params")
            return declared_reports(params if isinstance(params, Mapping) else {})
    except Exception:  # a damaged search section (ConfigError, KeyError, ...): cannot tell
        return None
    steps = job.get("steps")
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None
