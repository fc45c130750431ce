"""A run's state rebuilt from its journal, for ``action=resume``. Pure: events in, state out.

The journal is the controller's state (DESIGN invariant 5): every decision,
generation, fence, attempt and cluster is in it. A controller killed at any point
leaves a journal whose last event is some prefix of a run; ``replay`` says what a
new controller must adopt, tear down and do next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.incidents import Incident
from orchestrator.journal import runtime_kind
from orchestrator.states import RunState
from recovery.detection import Failure, FailureKind
from recovery.fencing import Lineage
from recovery.policy import Action, Decision, History


@dataclass
class OpenAttempt:
    generation: int
    region: str
    cluster: dict[str, Any] | None = None  # the provisioned event: name, address, info
    runtime_pid: int | None = None
    started_at: float = 0.0
    restored_step: int | None = None


@dataclass
class Replayed:
    run_id: str = ""
    started_at: float = 0.0
    state: RunState = RunState.PENDING
    generation: int = 0
    lineage: Lineage = field(default_factory=Lineage)
    history: History = field(default_factory=History)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    pending: Incident | None = None
    open_attempt: OpenAttempt | None = None
    # Clusters provisioned and never torn down (name -> provisioned event).
    leftover: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Attempts that crashed mid-launch: a cluster of this name may exist, unjournaled.
    launching: list[tuple[str, int]] = field(default_factory=list)  # (region, generation)
    next_region: str | None = None
    last_step: int = 0
    finished: bool = False
    last_ts: float = 0.0


_INCIDENT_FIELDS = (
    "kind",
    "from_region",
    "to_region",
    "failed_at",
    "detected_at",
    "last_step",
    "restored_step",
    "first_step_at",
    "generation",
)


def incident_from(ev: dict[str, Any]) -> Incident:
    return Incident(**{k: ev.get(k) for k in _INCIDENT_FIELDS})  # type: ignore[arg-type]


def _same(a: Incident, b: Incident) -> bool:
    return (a.kind, a.generation, a.failed_at) == (b.kind, b.generation, b.failed_at)


def replay(events: list[dict[str, Any]]) -> Replayed:
    r = Replayed()
    attempts: dict[int, OpenAttempt] = {}
    ended: set[int] = set()
    provisioned_gens: set[int] = set()
    for ev in events:
        if runtime_kind(ev) is not None:
            continue  # the runtime's word: a forged transition, fence or teardown changes nothing
        t = ev.get("type")
        r.last_ts = max(r.last_ts, float(ev.get("ts", 0.0)))
        gen = ev.get("generation")
        if isinstance(gen, int):
            r.generation = max(r.generation, gen)
        step = ev.get("step", ev.get("last_step"))
        if isinstance(step, int) and t in ("fault_injected", "attempt_ended", "incident", "failure_detected"):
            r.last_step = max(r.last_step, step)
        if t == "run_started":
            r.run_id = str(ev.get("run_id", ""))
            r.started_at = float(ev.get("ts", 0.0))
        elif t == "transition":
            r.state = RunState(str(ev["to"]))
        elif t == "attempt_started":
            attempts[int(ev["generation"])] = OpenAttempt(
                int(ev["generation"]), str(ev["region"]), started_at=float(ev["ts"])
            )
        elif t == "provisioned":
            r.leftover[str(ev["cluster"])] = ev
            g = ev.get("generation")
            if ev.get("purpose", "attempt") == "attempt" and isinstance(g, int):
                provisioned_gens.add(g)
                if g in attempts:
                    attempts[g].cluster = ev
        elif t == "provision_failed" and isinstance(ev.get("generation"), int):
            provisioned_gens.add(int(ev["generation"]))
        elif t == "teardown":
            r.leftover.pop(str(ev.get("cluster")), None)
        elif t == "runtime_started" and isinstance(gen, int) and gen in attempts:
            attempts[gen].runtime_pid = int(ev["pid"])
        elif t == "fences_read":
            # The stores held a fence this high: the next attempt goes above it.
            r.generation = max(r.generation, int(ev["generation_floor"]))
        elif t == "fence" and isinstance(gen, int):
            r.lineage = r.lineage.then(gen, int(ev.get("restored_step", 0)))
            if gen in attempts:
                attempts[gen].restored_step = int(ev.get("restored_step", 0))
        elif t == "attempt_ended":
            ended.add(int(ev["generation"]))
            r.attempts.append({k: v for k, v in ev.items() if k not in ("ts", "type")})
        elif t == "decision":
            failure = Failure(FailureKind(str(ev["failure"])), str(ev.get("failed_region", "")), "")
            decision = Decision(Action(str(ev["action"])), ev.get("region"), str(ev.get("reason", "")))
            r.history = r.history.after(failure, decision, float(ev["ts"]))
            r.next_region = decision.region
        elif t == "incident_opened":
            r.pending = incident_from(ev)
        elif t == "incident":
            inc = incident_from(ev)
            r.incidents.append(inc)
            if r.pending is not None and _same(r.pending, inc):
                r.pending = None
        elif t == "run_finished":
            r.finished = True
    open_gens = [g for g in attempts if g not in ended]
    if open_gens:
        r.open_attempt = attempts[max(open_gens)]
    for g in sorted(open_gens):
        if g not in provisioned_gens:
            r.launching.append((attempts[g].region, g))
    return r
