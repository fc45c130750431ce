"""A run's state rebuilt from its journal, for ``action=resume``. Pure: events in, state out.

The journal is the controller's state: every decision,
generation, fence, attempt and cluster is in it. A controller killed at any point
leaves a journal whose last event is some prefix of a run; ``replay`` says what a
new controller must adopt, tear down and do next.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.runstate.event_json import from_json, payload, to_json
from orchestrator.runstate.events import IncidentFields
from orchestrator.runstate.incidents import Incident
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.state import RunView, fold
from recovery.fencing import Lineage
from recovery.policy import History


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


def incident_from(ev: IncidentFields | dict[str, Any]) -> Incident:
    """The controller's Incident from a journaled one (typed, or its JSON line)."""
    record = ev if isinstance(ev, IncidentFields) else from_json({"ts": 0.0, "type": "incident", **ev})
    assert isinstance(record, IncidentFields)
    return Incident(
        kind=record.kind,
        from_region=record.from_region,
        to_region=record.to_region,
        failed_at=record.failed_at,
        detected_at=record.detected_at,
        last_step=record.last_step,  # type: ignore[arg-type]
        restored_step=record.restored_step,
        first_step_at=record.first_step_at,
        generation=record.generation,  # type: ignore[arg-type]
        node=record.node,
        world_size_before=record.world_size_before,
        world_size_after=record.world_size_after,
        replace_s=record.replace_s,
    )


def replayed(view: RunView) -> Replayed:
    """The fold as the controller takes it: fresh mutable copies it may change."""
    op = view.open_attempt
    return Replayed(
        run_id=view.run_id,
        started_at=view.started_at,
        state=view.state,
        generation=view.generation,
        lineage=view.lineage,
        history=view.history,
        attempts=[payload(a) for a in view.attempts],
        incidents=[incident_from(i) for i in view.incidents],
        pending=None if view.pending is None else incident_from(view.pending),
        open_attempt=None
        if op is None
        else OpenAttempt(
            op.generation,
            op.region,
            cluster=None if op.cluster is None else to_json(op.cluster),
            runtime_pid=op.runtime_pid,
            started_at=op.started_at,
            restored_step=op.restored_step,
        ),
        leftover={name: to_json(p) for name, p in view.leftover.items()},
        launching=list(view.launching),
        next_region=view.next_region,
        last_step=view.last_step,
        finished=view.finished,
        last_ts=view.last_ts,
    )


def replay(events: Iterable[dict[str, Any]]) -> Replayed:
    """What a resumed controller adopts from the journal's lines (orchestrator.runstate's fold)."""
    return replayed(fold(from_json(ev) for ev in events))
