"""What one attempt came to: the record the attempt runner fills in (with what its watch
folded) and the controller decides on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.control.watchstate import WatchState
from orchestrator.runstate.incidents import Incident
from recovery.detection import Failure


@dataclass
class AttemptOutcome:
    generation: int
    region: str
    started_at: float
    succeeded: bool = False
    failure: Failure | None = None
    final: dict[str, Any] | None = None
    detected_at: float = 0.0
    failed_at: float | None = None
    last_step: int = 0
    restored_step: int | None = None
    incidents: list[Incident] = field(default_factory=list)
    ended_at: float = 0.0
    # The incident the attempt recovers from (None: nothing failed), as far as it got,
    # and whether it was recorded (among ``incidents``: the attempt trained past its restore).
    pending: Incident | None = None
    pending_recorded: bool = False

    def watched(self, s: WatchState) -> None:
        """What the attempt's watch folded, taken as the attempt's, whatever ended the watch."""
        self.last_step, self.restored_step = s.last_step, s.restored_step
        self.incidents = list(s.recorded)
        self.pending, self.pending_recorded = s.pending, s.pending_recorded
        self.succeeded, self.final = s.succeeded, None if s.final is None else dict(s.final)
        self.failure, self.detected_at, self.failed_at = s.failure, s.detected_at, s.failed_at

    def summary(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "region": self.region,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "restored_step": self.restored_step,
            "last_step": self.last_step,
            "outcome": "succeeded" if self.succeeded else str(self.failure.kind if self.failure else "interrupted"),
        }
